//! The cache of one stage: entries (input chunk, output chunk, key) in a device tier (slots of the
//! stage's slab) and a host tier, each within its budget, evicted least recently used first: the
//! device tier demotes to the host tier, the host tier drops.
//!
//! A wave of chunks claims its slots at once: the staged inputs go straight into them, and a chunk
//! that is computed keeps its slot as its entry (nothing is copied to store it but the output).
//!
//! A device entry may also keep host copies of its chunks (the streaming mode's arrays live on the
//! host: a chunk's input is gathered there and its output lands there): they count against the
//! host budget, let a reuse be decided and formed on the host without a transfer, and make the
//! entry's demotion free.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use num_complex::Complex32;

use super::index::UnitKey;

/// An output block that arrives with a download (a computed chunk's stage-out into a host array):
/// set when the download lands.
pub type Landing = Arc<OnceLock<Vec<Complex32>>>;

/// Host copies of an entry's chunks (row-major blocks, the layout of its slot regions).
#[derive(Debug, Default, Clone)]
pub struct HostCopies {
    pub input: Option<Arc<Vec<Complex32>>>,
    pub output: Option<Landing>,
}

impl HostCopies {
    /// Both chunks, from a readback of the slot.
    pub fn filled(input: Vec<Complex32>, output: Vec<Complex32>) -> Self {
        Self {
            input: Some(Arc::new(input)),
            output: Some(Arc::new(OnceLock::from(output))),
        }
    }

    /// Whether both chunks have a copy.
    fn complete(&self) -> bool {
        self.input.is_some() && self.output.is_some()
    }

    fn bytes(&self, lens: (u64, u64)) -> u64 {
        8 * (self.input.as_ref().map_or(0, |_| lens.0) + self.output.as_ref().map_or(0, |_| lens.1))
    }
}

/// Where an entry's chunks live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Slot `slot` of the slab (and the host copies the entry has).
    Device { slot: usize },
    /// Only the host copies. Both are missing between the eviction that demoted the entry and
    /// [`Store::fill_host`], which follows in the same wave.
    Host,
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
    pub host: HostCopies,
    last_used: u64,
}

impl Entry {
    fn bytes(&self) -> u64 {
        (self.lens.0 + self.lens.1) * 8
    }

    fn host_bytes(&self) -> u64 {
        self.host.bytes(self.lens)
    }
}

/// What a claim of slots displaced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The slots, in the order claimed.
    pub slots: Vec<usize>,
    /// Entries moved to the host tier without both host copies, with the slot their chunks are
    /// still in: the caller copies them out before the slot is overwritten and hands them to
    /// [`Store::fill_host`].
    pub demoted: Vec<(u64, usize)>,
    /// Entries dropped from the cache (their keys must leave the index).
    pub dropped: Vec<u64>,
}

/// Entries of one stage with their slot allocation and host budget.
pub struct Store {
    entries: HashMap<u64, Entry>,
    free_slots: Vec<usize>,
    host_budget: u64,
    /// Whether a device entry without both host copies may be demoted (its slot read back);
    /// otherwise it is dropped.
    demote_by_readback: bool,
    /// Bytes of every entry's host copies.
    host_used: u64,
    next_id: u64,
    clock: u64,
}

impl Store {
    /// `slots` device slots; `host_budget` bytes on the host; whether entries without host
    /// copies are demoted by reading their slots back (in the streaming mode transfers are what
    /// limits, so there only entries with both copies are demoted, which costs nothing).
    pub fn new(slots: usize, host_budget: u64, demote_by_readback: bool) -> Self {
        Self {
            entries: HashMap::new(),
            free_slots: (0..slots).rev().collect(),
            host_budget,
            demote_by_readback,
            host_used: 0,
            next_id: 0,
            clock: 0,
        }
    }

    /// Whether entries may keep host copies (a host budget).
    pub fn keeps_host_copies(&self) -> bool {
        self.host_budget > 0
    }

    pub fn get(&self, id: u64) -> Option<&Entry> {
        self.entries.get(&id)
    }

    /// The slot of a device entry.
    pub fn slot(&self, id: u64) -> Option<usize> {
        match self.entries.get(&id)?.tier {
            Tier::Device { slot } => Some(slot),
            Tier::Host => None,
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

    /// Bytes in (device slots in use by entries, host copies).
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

    /// Drops host entries, least recently used first, until `extra` more bytes fit the budget or
    /// none is left; returns whether they fit.
    fn make_room(&mut self, extra: u64, dropped: &mut Vec<u64>) -> bool {
        while self.host_used + extra > self.host_budget {
            let Some(victim) = self.least_recent(false) else {
                return false;
            };
            self.remove(victim);
            dropped.push(victim);
        }
        true
    }

    /// Takes `n` slots: free ones first, then those of the least recently used device entries,
    /// which move to the host tier when it has room for them (host entries beyond the budget are
    /// dropped, least recently used first) and they have host copies or may be read back, and
    /// are dropped otherwise. `None` (and nothing
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
            let entry = &self.entries[&victim];
            let Tier::Device { slot } = entry.tier else {
                unreachable!("least_recent(true) returns device entries")
            };
            claim.slots.push(slot);
            let complete = entry.host.complete();
            let (bytes, extra) = (entry.bytes(), entry.bytes() - entry.host_bytes());
            // The victim is still a device entry: making room never drops it.
            let demote = complete || self.demote_by_readback;
            if demote && bytes <= self.host_budget && self.make_room(extra, &mut claim.dropped) {
                let entry = self.entries.get_mut(&victim).expect("present");
                entry.tier = Tier::Host;
                if !complete {
                    entry.host = HostCopies::default();
                    claim.demoted.push((victim, slot));
                }
                self.host_used += extra;
            } else {
                let entry = self.entries.remove(&victim).expect("present");
                self.host_used -= entry.host_bytes();
                claim.dropped.push(victim);
            }
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
            if e.tier == Tier::Host {
                e.host = HostCopies::filled(input, output);
            }
        }
    }

    /// Returns a claimed slot that no entry took.
    pub fn release(&mut self, slot: usize) {
        self.free_slots.push(slot);
    }

    /// Adds an entry whose chunks are in device slot `slot`, keeping `host` copies of them if
    /// the host budget has room (made by dropping host entries, least recently used first).
    /// Returns its id and the entries dropped.
    pub fn insert(
        &mut self,
        chunk: usize,
        class: usize,
        key: UnitKey,
        lens: (u64, u64),
        slot: usize,
        host: HostCopies,
    ) -> (u64, Vec<u64>) {
        let mut dropped = Vec::new();
        let bytes = host.bytes(lens);
        let host = match bytes <= self.host_budget && self.make_room(bytes, &mut dropped) {
            true => host,
            false => HostCopies::default(),
        };
        let id = self.add(chunk, class, key, lens, Tier::Device { slot }, host);
        (id, dropped)
    }

    /// Adds an entry held by its host copies alone (both chunks; a stage whose arrays are all on
    /// the host needs no slot to compare or reuse it), making room by dropping host entries,
    /// least recently used first. Returns its id and the entries dropped, or `None` (nothing
    /// changed) if the copies are incomplete or larger than the host budget.
    pub fn insert_host(
        &mut self,
        chunk: usize,
        class: usize,
        key: UnitKey,
        lens: (u64, u64),
        host: HostCopies,
    ) -> Option<(u64, Vec<u64>)> {
        let bytes = host.bytes(lens);
        if !host.complete() || bytes > self.host_budget {
            return None;
        }
        let mut dropped = Vec::new();
        self.make_room(bytes, &mut dropped);
        let id = self.add(chunk, class, key, lens, Tier::Host, host);
        Some((id, dropped))
    }

    /// Adds an entry (its host copies counted, the room for them made) and returns its id.
    fn add(
        &mut self,
        chunk: usize,
        class: usize,
        key: UnitKey,
        lens: (u64, u64),
        tier: Tier,
        host: HostCopies,
    ) -> u64 {
        self.host_used += host.bytes(lens);
        let id = self.next_id;
        self.next_id += 1;
        self.clock += 1;
        let last_used = self.clock;
        self.entries.insert(
            id,
            Entry {
                chunk,
                class,
                key,
                lens,
                tier,
                host,
                last_used,
            },
        );
        id
    }

    /// Removes an entry (its slot becomes free).
    pub fn remove(&mut self, id: u64) {
        if let Some(e) = self.entries.remove(&id) {
            self.host_used -= e.host_bytes();
            if let Tier::Device { slot } = e.tier {
                self.free_slots.push(slot);
            }
        }
    }

    /// Moves a host entry with both copies into device slot `slot` (the caller uploads its
    /// chunks there; the copies stay); `false` for an entry that is not on the host or not
    /// filled yet.
    pub fn promote(&mut self, id: u64, slot: usize) -> bool {
        match self.entries.get_mut(&id) {
            Some(e) if e.tier == Tier::Host && e.host.input.is_some() => {
                e.tier = Tier::Device { slot };
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> UnitKey {
        UnitKey::new(&[1.0, 0.0]).unwrap()
    }

    fn no_copies() -> HostCopies {
        HostCopies::default()
    }

    fn copies(input: usize, output: usize) -> HostCopies {
        HostCopies::filled(
            vec![Complex32::new(1.0, 0.0); input],
            vec![Complex32::default(); output],
        )
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
        let mut store = Store::new(2, 256, true);
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
            let (id, none) = store.insert(chunk, 0, key(), (10, 6), claim.slots[0], no_copies());
            assert!(none.is_empty());
            ids.push(id);
            let (device, host) = store.bytes();
            assert!(device <= 2 * 16 * 8 && host <= 256, "{device} {host}");
        }
        assert_eq!(store.len(), 4);
        assert_eq!((demoted, dropped), (4, 2));
        // The oldest two were dropped, the next two demoted, the newest two are on the device.
        assert!(store.get(ids[0]).is_none() && store.get(ids[1]).is_none());
        assert_eq!(store.get(ids[2]).unwrap().tier, Tier::Host);
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
        let mut store = Store::new(2, 0, true);
        let claim = store.claim(2).unwrap();
        let a = store
            .insert(0, 0, key(), (10, 6), claim.slots[0], no_copies())
            .0;
        let b = store
            .insert(1, 0, key(), (10, 6), claim.slots[1], no_copies())
            .0;
        store.touch(a);
        // No host tier: the least recently used entry is dropped, not demoted.
        let claim = store.claim(1).unwrap();
        assert_eq!((claim.dropped.clone(), claim.demoted.len()), (vec![b], 0));
        store.release(claim.slots[0]);
        let again = store.claim(1).unwrap();
        assert_eq!(again.slots, claim.slots);
        assert!(again.dropped.is_empty());
        // With a host tier, a demoted entry comes back with its chunks.
        let mut store = Store::new(1, 1 << 10, true);
        let claim = store.claim(1).unwrap();
        let a = store
            .insert(0, 0, key(), (10, 6), claim.slots[0], no_copies())
            .0;
        let claim = store.claim(1).unwrap();
        assert_eq!(claim.demoted, vec![(a, 0)]);
        // Not yet filled: not promotable.
        assert!(!store.promote(a, claim.slots[0]));
        fill(&mut store, &claim);
        assert!(store.promote(a, claim.slots[0]));
        let host = &store.get(a).unwrap().host;
        assert_eq!(host.input.as_ref().unwrap().len(), 10);
        assert_eq!(host.output.as_ref().unwrap().get().unwrap().len(), 6);
        assert_eq!(store.slot(a), Some(0));
        // The copies stay with the promoted entry.
        assert_eq!(store.bytes(), (128, 128));
    }

    /// Host copies count against the host budget once: an entry with both demotes without a
    /// readback, one without room keeps none, and making room drops host entries first.
    #[test]
    fn host_copies_make_demotion_free_and_stay_within_the_host_budget() {
        // One slot; the host holds two entries of 128 bytes.
        let mut store = Store::new(1, 256, false);
        let claim = store.claim(1).unwrap();
        let (a, _) = store.insert(0, 0, key(), (10, 6), claim.slots[0], copies(10, 6));
        assert_eq!(store.bytes(), (128, 128));
        let claim = store.claim(1).unwrap();
        assert!(claim.demoted.is_empty() && claim.dropped.is_empty());
        assert_eq!(store.get(a).unwrap().tier, Tier::Host);
        assert_eq!(store.bytes(), (0, 128));
        let (b, dropped) = store.insert(1, 0, key(), (10, 6), claim.slots[0], copies(10, 6));
        assert!(dropped.is_empty());
        assert_eq!(store.bytes(), (128, 256));
        // Demoting b needs no more room; a third entry's copies drop the oldest host entry (a).
        let claim = store.claim(1).unwrap();
        assert!(claim.demoted.is_empty() && claim.dropped.is_empty());
        let (c, dropped) = store.insert(2, 0, key(), (10, 6), claim.slots[0], copies(10, 6));
        assert_eq!(dropped, vec![a]);
        assert_eq!(store.bytes(), (128, 256));
        // Copies larger than the budget are not kept; the entry still is.
        let mut small = Store::new(1, 100, false);
        let claim = small.claim(1).unwrap();
        let (d, dropped) = small.insert(0, 0, key(), (10, 6), claim.slots[0], copies(10, 6));
        assert!(dropped.is_empty() && small.get(d).unwrap().host.input.is_none());
        assert_eq!(small.bytes(), (128, 0));
        // Without readback demotions, an entry without both copies is dropped when its slot is
        // taken, however much room the host has.
        let mut roomy = Store::new(1, 1 << 10, false);
        let claim = roomy.claim(1).unwrap();
        let (f, _) = roomy.insert(0, 0, key(), (10, 6), claim.slots[0], no_copies());
        let claim = roomy.claim(1).unwrap();
        assert_eq!((claim.dropped, claim.demoted), (vec![f], vec![]));
        store.remove(b);
        store.remove(c);
        assert_eq!(store.bytes(), (0, 0));
    }

    /// An entry with both host copies can live without a slot; one without them, or larger than
    /// the host budget, is refused and changes nothing.
    #[test]
    fn host_only_entries_take_no_slot_and_stay_within_the_host_budget() {
        let mut store = Store::new(1, 256, false);
        let (a, dropped) = store
            .insert_host(0, 0, key(), (10, 6), copies(10, 6))
            .unwrap();
        assert!(dropped.is_empty());
        assert_eq!(store.get(a).unwrap().tier, Tier::Host);
        assert_eq!(store.bytes(), (0, 128));
        // The slot is still free.
        assert_eq!(store.claim(1).unwrap().slots, vec![0]);
        let (b, _) = store
            .insert_host(1, 0, key(), (10, 6), copies(10, 6))
            .unwrap();
        let (_, dropped) = store
            .insert_host(2, 0, key(), (10, 6), copies(10, 6))
            .unwrap();
        assert_eq!(dropped, vec![a]);
        assert!(store.get(b).is_some());
        assert!(store
            .insert_host(3, 0, key(), (10, 6), no_copies())
            .is_none());
        assert!(store
            .insert_host(3, 0, key(), (40, 6), copies(40, 6))
            .is_none());
        assert_eq!((store.len(), store.bytes()), (2, (0, 256)));
    }
}
