//! The cache of one stage: entries (input chunk, output chunk, key) in a device tier (slots of the
//! stage's slab) and a host tier, each within its budget, evicted least recently used first: the
//! device tier demotes to the host tier, the host tier drops.
//!
//! A wave of chunks claims its slots at once: the staged inputs go straight into them, and a chunk
//! that is computed keeps its slot as its entry (nothing is copied to store it but the output).

use std::collections::HashMap;

use num_complex::Complex32;

use super::index::UnitKey;

/// Where an entry's chunks live.
#[derive(Debug)]
pub enum Tier {
    /// Slot `slot` of the slab.
    Device { slot: usize },
    /// Host copies (row-major blocks). Empty between the eviction that demoted the entry and
    /// [`Store::fill_host`], which follows in the same wave.
    Host {
        input: Vec<Complex32>,
        output: Vec<Complex32>,
    },
}

/// A stored chunk computation.
#[derive(Debug)]
pub struct Entry {
    /// The chunk it was computed for.
    pub chunk: usize,
    /// The class of chunks whose map it belongs to (see [`super::Memo`]).
    pub class: usize,
    pub key: UnitKey,
    /// Complex values in the input and output blocks.
    pub lens: (u64, u64),
    pub tier: Tier,
    last_used: u64,
}

impl Entry {
    fn bytes(&self) -> u64 {
        (self.lens.0 + self.lens.1) * 8
    }
}

/// What a claim of slots displaced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The slots, in the order claimed.
    pub slots: Vec<usize>,
    /// Entries moved to the host tier, with the slot their chunks are still in: the caller copies
    /// them out before the slot is overwritten and hands them to [`Store::fill_host`].
    pub demoted: Vec<(u64, usize)>,
    /// Entries dropped from the cache (their keys must leave the index).
    pub dropped: Vec<u64>,
}

/// Entries of one stage with their slot allocation and host budget.
pub struct Store {
    entries: HashMap<u64, Entry>,
    free_slots: Vec<usize>,
    host_budget: u64,
    host_used: u64,
    next_id: u64,
    clock: u64,
}

impl Store {
    /// `slots` device slots; `host_budget` bytes on the host.
    pub fn new(slots: usize, host_budget: u64) -> Self {
        Self {
            entries: HashMap::new(),
            free_slots: (0..slots).rev().collect(),
            host_budget,
            host_used: 0,
            next_id: 0,
            clock: 0,
        }
    }

    pub fn get(&self, id: u64) -> Option<&Entry> {
        self.entries.get(&id)
    }

    /// The slot of a device entry.
    pub fn slot(&self, id: u64) -> Option<usize> {
        match self.entries.get(&id)?.tier {
            Tier::Device { slot } => Some(slot),
            Tier::Host { .. } => None,
        }
    }

    /// Marks `id` as just used.
    pub fn touch(&mut self, id: u64) {
        self.clock += 1;
        if let Some(e) = self.entries.get_mut(&id) {
            e.last_used = self.clock;
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes in (device slots in use by entries, host tier).
    pub fn bytes(&self) -> (u64, u64) {
        let device = self
            .entries
            .values()
            .filter(|e| matches!(e.tier, Tier::Device { .. }))
            .map(Entry::bytes)
            .sum();
        (device, self.host_used)
    }

    fn least_recent(&self, device: bool) -> Option<u64> {
        self.entries
            .iter()
            .filter(|(_, e)| matches!(e.tier, Tier::Device { .. }) == device)
            .min_by_key(|(id, e)| (e.last_used, **id))
            .map(|(id, _)| *id)
    }

    /// Takes `n` slots: free ones first, then those of the least recently used device entries,
    /// which move to the host tier when it has room for them (host entries beyond the budget are
    /// dropped, least recently used first) and are dropped otherwise. `None` (and nothing
    /// changed) if the slab has fewer than `n` slots.
    pub fn claim(&mut self, n: usize) -> Option<Claim> {
        let device_entries = self
            .entries
            .values()
            .filter(|e| matches!(e.tier, Tier::Device { .. }))
            .count();
        if self.free_slots.len() + device_entries < n {
            return None;
        }
        let mut claim = Claim::default();
        while claim.slots.len() < n {
            if let Some(slot) = self.free_slots.pop() {
                claim.slots.push(slot);
                continue;
            }
            let victim = self.least_recent(true).expect("counted above");
            let entry = self.entries.get_mut(&victim).expect("present");
            let Tier::Device { slot } = entry.tier else {
                unreachable!("least_recent(true) returns device entries")
            };
            claim.slots.push(slot);
            let bytes = entry.bytes();
            if bytes <= self.host_budget {
                entry.tier = Tier::Host {
                    input: Vec::new(),
                    output: Vec::new(),
                };
                self.host_used += bytes;
                claim.demoted.push((victim, slot));
            } else {
                self.entries.remove(&victim);
                claim.dropped.push(victim);
            }
        }
        while self.host_used > self.host_budget {
            let victim = self
                .least_recent(false)
                .expect("host bytes are held by entries");
            let entry = self.entries.remove(&victim).expect("present");
            self.host_used -= entry.bytes();
            claim.dropped.push(victim);
        }
        claim
            .demoted
            .retain(|(id, _)| self.entries.contains_key(id));
        Some(claim)
    }

    /// Hands over the chunks of an entry demoted by [`claim`](Self::claim) (its slot's input
    /// and output regions); ignored if it was dropped meanwhile.
    pub fn fill_host(&mut self, id: u64, input: Vec<Complex32>, output: Vec<Complex32>) {
        if let Some(e) = self.entries.get_mut(&id) {
            if let Tier::Host {
                input: i,
                output: o,
            } = &mut e.tier
            {
                *i = input;
                *o = output;
            }
        }
    }

    /// Returns a claimed slot that no entry took.
    pub fn release(&mut self, slot: usize) {
        self.free_slots.push(slot);
    }

    /// Adds an entry whose chunks are in device slot `slot`; returns its id.
    pub fn insert(
        &mut self,
        chunk: usize,
        class: usize,
        key: UnitKey,
        lens: (u64, u64),
        slot: usize,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.clock += 1;
        self.entries.insert(
            id,
            Entry {
                chunk,
                class,
                key,
                lens,
                tier: Tier::Device { slot },
                last_used: self.clock,
            },
        );
        id
    }

    /// Removes an entry (its slot becomes free).
    pub fn remove(&mut self, id: u64) {
        if let Some(e) = self.entries.remove(&id) {
            match e.tier {
                Tier::Device { slot } => self.free_slots.push(slot),
                Tier::Host { .. } => self.host_used -= e.bytes(),
            }
        }
    }

    /// Moves a host entry into device slot `slot` (the caller uploads its chunks there) and hands
    /// back its host copies; `None` for an entry that is not on the host.
    pub fn promote(&mut self, id: u64, slot: usize) -> Option<(Vec<Complex32>, Vec<Complex32>)> {
        let e = self.entries.get_mut(&id)?;
        let bytes = e.bytes();
        match &e.tier {
            Tier::Host { input, .. } if !input.is_empty() => {}
            _ => return None,
        }
        match std::mem::replace(&mut e.tier, Tier::Device { slot }) {
            Tier::Host { input, output } => {
                self.host_used -= bytes;
                Some((input, output))
            }
            Tier::Device { .. } => unreachable!("matched above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> UnitKey {
        UnitKey::new(&[1.0, 0.0]).unwrap()
    }

    fn fill(store: &mut Store, claim: &Claim) {
        for &(id, _) in &claim.demoted {
            let (i, o) = store.get(id).unwrap().lens;
            let input = vec![Complex32::new(1.0, 0.0); i as usize];
            store.fill_host(id, input, vec![Complex32::default(); o as usize]);
        }
    }

    #[test]
    fn lru_eviction_keeps_both_tiers_within_budget() {
        // Two device slots; the host holds two entries of (10 + 6) * 8 = 128 bytes.
        let mut store = Store::new(2, 256);
        let mut ids = Vec::new();
        let (mut demoted, mut dropped) = (0, 0);
        for chunk in 0..6 {
            let claim = store.claim(1).unwrap();
            fill(&mut store, &claim);
            for d in &claim.dropped {
                assert!(ids.contains(d));
            }
            demoted += claim.demoted.len();
            dropped += claim.dropped.len();
            ids.push(store.insert(chunk, 0, key(), (10, 6), claim.slots[0]));
            let (device, host) = store.bytes();
            assert!(device <= 2 * 16 * 8 && host <= 256, "{device} {host}");
        }
        assert_eq!(store.len(), 4);
        assert_eq!((demoted, dropped), (4, 2));
        // The oldest two were dropped, the next two demoted, the newest two are on the device.
        assert!(store.get(ids[0]).is_none() && store.get(ids[1]).is_none());
        assert!(matches!(store.get(ids[2]).unwrap().tier, Tier::Host { .. }));
        assert!(matches!(
            store.get(ids[5]).unwrap().tier,
            Tier::Device { .. }
        ));
        // A claim larger than the slab changes nothing.
        assert!(store.claim(3).is_none());
        assert_eq!(store.len(), 4);
    }

    #[test]
    fn touched_entries_survive_released_slots_are_reused_and_promotions_move_tiers() {
        let mut store = Store::new(2, 0);
        let claim = store.claim(2).unwrap();
        let a = store.insert(0, 0, key(), (10, 6), claim.slots[0]);
        let b = store.insert(1, 0, key(), (10, 6), claim.slots[1]);
        store.touch(a);
        // No host tier: the least recently used entry is dropped, not demoted.
        let claim = store.claim(1).unwrap();
        assert_eq!((claim.dropped.clone(), claim.demoted.len()), (vec![b], 0));
        store.release(claim.slots[0]);
        let again = store.claim(1).unwrap();
        assert_eq!(again.slots, claim.slots);
        assert!(again.dropped.is_empty());
        // With a host tier, a demoted entry comes back with its chunks.
        let mut store = Store::new(1, 1 << 10);
        let claim = store.claim(1).unwrap();
        let a = store.insert(0, 0, key(), (10, 6), claim.slots[0]);
        let claim = store.claim(1).unwrap();
        assert_eq!(claim.demoted, vec![(a, 0)]);
        // Not yet filled: not promotable.
        assert!(store.promote(a, claim.slots[0]).is_none());
        fill(&mut store, &claim);
        let (input, output) = store.promote(a, claim.slots[0]).unwrap();
        assert_eq!((input.len(), output.len()), (10, 6));
        assert_eq!(store.slot(a), Some(0));
        assert_eq!(store.bytes(), (128, 0));
    }
}
