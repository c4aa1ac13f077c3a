//! The cache of one stage: entries (input chunk, output chunk, key) in a device tier (slots of the
//! stage's slab) and a host tier, each within its byte budget, evicted least recently used first:
//! the device tier demotes to the host tier, the host tier drops.

use std::collections::HashMap;

use num_complex::Complex32;

use super::index::UnitKey;

/// Where an entry's chunks live.
#[derive(Debug)]
pub enum Tier {
    /// Slot `slot` of the slab.
    Device { slot: usize },
    /// Host copies (row-major blocks).
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
    /// `|x|^2` of the stored input.
    pub input_norm2: f64,
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

/// What an insertion or promotion displaced.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Evictions {
    /// Entries moved from the device tier to the host tier.
    pub demoted: usize,
    /// Entries dropped from the host tier (or from the device when the host tier has no room).
    pub dropped: usize,
}

/// Entries of one stage with their slot allocation and budgets.
pub struct Store {
    entries: HashMap<u64, Entry>,
    free_slots: Vec<usize>,
    slot_elems: u64,
    input_slot_elems: u64,
    host_budget: u64,
    host_used: u64,
    next_id: u64,
    clock: u64,
}

impl Store {
    /// `slots` device slots of `slot_elems` complex values each, inputs in the first
    /// `input_slot_elems`; `host_budget` bytes on the host.
    pub fn new(slots: usize, slot_elems: u64, input_slot_elems: u64, host_budget: u64) -> Self {
        Self {
            entries: HashMap::new(),
            free_slots: (0..slots).rev().collect(),
            slot_elems,
            input_slot_elems,
            host_budget,
            host_used: 0,
            next_id: 0,
            clock: 0,
        }
    }

    /// Slab offsets (complex elements) of a slot's input and output.
    pub fn slot_offsets(&self, slot: usize) -> (u64, u64) {
        let at = slot as u64 * self.slot_elems;
        (at, at + self.input_slot_elems)
    }

    pub fn get(&self, id: u64) -> Option<&Entry> {
        self.entries.get(&id)
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

    /// Bytes in (device slots in use, host tier).
    pub fn bytes(&self) -> (u64, u64) {
        let device = self
            .entries
            .values()
            .filter(|e| matches!(e.tier, Tier::Device { .. }))
            .map(Entry::bytes)
            .sum();
        (device, self.host_used)
    }

    fn least_recent(&self, device: bool, keep: &[u64]) -> Option<u64> {
        self.entries
            .iter()
            .filter(|(id, e)| matches!(e.tier, Tier::Device { .. }) == device && !keep.contains(id))
            .min_by_key(|(id, e)| (e.last_used, **id))
            .map(|(id, _)| *id)
    }

    /// Frees a device slot for a new or promoted entry: takes a free one, or evicts the least
    /// recently used device entry not in `keep`. `demote(entry, (input_at, output_at))` reads an
    /// evicted entry's chunks back from its slot (before the slot is reused). Returns the slot and the ids dropped from the
    /// cache entirely (their keys must leave the index).
    pub fn claim_slot<E>(
        &mut self,
        keep: &[u64],
        demote: impl FnOnce(&Entry, (u64, u64)) -> Result<(Vec<Complex32>, Vec<Complex32>), E>,
        evictions: &mut Evictions,
    ) -> Result<Option<(usize, Vec<u64>)>, E> {
        if let Some(slot) = self.free_slots.pop() {
            return Ok(Some((slot, Vec::new())));
        }
        let Some(victim) = self.least_recent(true, keep) else {
            return Ok(None);
        };
        let entry = &self.entries[&victim];
        let Tier::Device { slot } = entry.tier else {
            unreachable!("least_recent(true) returns device entries")
        };
        let mut dropped = Vec::new();
        if entry.bytes() <= self.host_budget {
            let (input, output) = demote(entry, self.slot_offsets(slot))?;
            let bytes = entry.bytes();
            self.entries.get_mut(&victim).expect("present").tier = Tier::Host { input, output };
            self.host_used += bytes;
            evictions.demoted += 1;
            dropped.extend(self.trim_host(keep, evictions));
        } else {
            self.entries.remove(&victim);
            evictions.dropped += 1;
            dropped.push(victim);
        }
        Ok(Some((slot, dropped)))
    }

    /// Drops least recently used host entries until the host tier is within budget.
    fn trim_host(&mut self, keep: &[u64], evictions: &mut Evictions) -> Vec<u64> {
        let mut dropped = Vec::new();
        while self.host_used > self.host_budget {
            let Some(victim) = self.least_recent(false, keep) else {
                break;
            };
            let entry = self.entries.remove(&victim).expect("present");
            self.host_used -= entry.bytes();
            evictions.dropped += 1;
            dropped.push(victim);
        }
        dropped
    }

    /// Adds an entry whose chunks are already in device slot `slot`; returns its id.
    pub fn insert(
        &mut self,
        chunk: usize,
        class: usize,
        key: UnitKey,
        input_norm2: f64,
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
                input_norm2,
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

    /// Moves a host entry into device slot `slot` (its chunks were uploaded there) and hands back
    /// its host copies.
    pub fn promote(&mut self, id: u64, slot: usize) -> Option<(Vec<Complex32>, Vec<Complex32>)> {
        let e = self.entries.get_mut(&id)?;
        let bytes = e.bytes();
        match std::mem::replace(&mut e.tier, Tier::Device { slot }) {
            Tier::Host { input, output } => {
                self.host_used -= bytes;
                Some((input, output))
            }
            device => {
                e.tier = device;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> UnitKey {
        UnitKey::new(&[1.0, 0.0]).unwrap()
    }

    #[test]
    fn lru_eviction_keeps_both_tiers_within_budget() {
        // Two device slots; the host holds two entries of (10 + 6) * 8 = 128 bytes.
        let mut store = Store::new(2, 16, 10, 256);
        let mut ev = Evictions::default();
        let mut ids = Vec::new();
        for chunk in 0..6 {
            let demote = |e: &Entry, _| -> Result<_, ()> {
                Ok((
                    vec![Complex32::default(); e.lens.0 as usize],
                    vec![Complex32::default(); e.lens.1 as usize],
                ))
            };
            let (slot, dropped) = store.claim_slot(&[], demote, &mut ev).unwrap().unwrap();
            for d in dropped {
                assert!(ids.contains(&d));
            }
            ids.push(store.insert(chunk, 0, key(), 1.0, (10, 6), slot));
            let (device, host) = store.bytes();
            assert!(device <= 2 * 16 * 8 && host <= 256, "{device} {host}");
        }
        assert_eq!(store.len(), 4);
        assert_eq!(
            ev,
            Evictions {
                demoted: 4,
                dropped: 2
            }
        );
        // The oldest two were dropped, the next two demoted, the newest two are on the device.
        assert!(store.get(ids[0]).is_none() && store.get(ids[1]).is_none());
        assert!(matches!(store.get(ids[2]).unwrap().tier, Tier::Host { .. }));
        assert!(matches!(
            store.get(ids[5]).unwrap().tier,
            Tier::Device { .. }
        ));
    }

    #[test]
    fn touched_entries_survive_and_kept_entries_are_never_evicted() {
        let mut store = Store::new(2, 16, 10, 0);
        let mut ev = Evictions::default();
        let no_demote = |_: &Entry, _| -> Result<(Vec<Complex32>, Vec<Complex32>), ()> {
            panic!("no host tier")
        };
        let (s0, _) = store.claim_slot(&[], no_demote, &mut ev).unwrap().unwrap();
        let a = store.insert(0, 0, key(), 1.0, (10, 6), s0);
        let (s1, _) = store.claim_slot(&[], no_demote, &mut ev).unwrap().unwrap();
        let b = store.insert(1, 0, key(), 1.0, (10, 6), s1);
        store.touch(a);
        let (_, dropped) = store.claim_slot(&[], no_demote, &mut ev).unwrap().unwrap();
        assert_eq!(dropped, vec![b]);
        assert!(store
            .claim_slot(&[a], no_demote, &mut ev)
            .unwrap()
            .is_none());
    }
}
