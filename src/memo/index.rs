//! Approximate nearest-neighbour search over pooled keys with `instant-distance` (HNSW).
//!
//! HNSW is built in one batch, so keys added since the last build wait in a small flat list that
//! is searched exhaustively. **Rebuild rule:** when the flat list holds more than
//! `max(REBUILD_MIN, REBUILD_FRACTION x indexed keys)` keys, the index is rebuilt from every live
//! key and the list is emptied; this keeps each search within `O(log n)` graph steps plus at most
//! about a quarter of the keys in exact comparisons, while a rebuild costs `O(n log n)` only
//! after `n / 4` insertions. Removed entries stay in the graph until the next rebuild and are
//! filtered out of results. The graph is built on one thread with a fixed seed, so the same keys
//! give the same graph and the same answers.

use std::collections::HashSet;

use instant_distance::{Builder, HnswMap, Point, Search};

/// Keys waiting in the flat list before a rebuild is considered.
pub const REBUILD_MIN: usize = 32;
/// The flat list may grow to this fraction of the indexed keys before a rebuild.
pub const REBUILD_FRACTION: f64 = 0.25;

/// An L2-normalised key; distance is `1 - cosine similarity`.
#[derive(Debug, Clone)]
pub struct UnitKey(Vec<f32>);

impl UnitKey {
    /// Normalises `key`; `None` for a zero or non-finite key (it has no direction).
    pub fn new(key: &[f32]) -> Option<Self> {
        let norm = key.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt();
        (norm > 0.0 && norm.is_finite())
            .then(|| Self(key.iter().map(|&v| (v as f64 / norm) as f32).collect()))
    }

    /// Cosine similarity, accumulated in f64.
    pub fn cosine(&self, other: &Self) -> f64 {
        self.0
            .iter()
            .zip(&other.0)
            .map(|(&a, &b)| a as f64 * b as f64)
            .sum()
    }
}

impl Point for UnitKey {
    fn distance(&self, other: &Self) -> f32 {
        if self.0.len() != other.0.len() {
            return f32::INFINITY;
        }
        (1.0 - self.cosine(other)) as f32
    }
}

/// Keys of stored entries, searchable by cosine similarity.
pub struct KeyIndex {
    graph: Option<HnswMap<UnitKey, u64>>,
    indexed: usize,
    recent: Vec<(UnitKey, u64)>,
    removed: HashSet<u64>,
    rebuilds: usize,
}

impl Default for KeyIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyIndex {
    pub fn new() -> Self {
        Self {
            graph: None,
            indexed: 0,
            recent: Vec::new(),
            removed: HashSet::new(),
            rebuilds: 0,
        }
    }

    /// Adds entry `id` with `key`; rebuilds the graph when the rule above says so.
    pub fn insert(&mut self, id: u64, key: UnitKey) {
        self.recent.push((key, id));
        let limit = REBUILD_MIN.max((REBUILD_FRACTION * self.indexed as f64) as usize);
        if self.recent.len() > limit {
            self.rebuild();
        }
    }

    /// Forgets entry `id` (it is filtered out now, dropped from the graph at the next rebuild).
    pub fn remove(&mut self, id: u64) {
        if let Some(i) = self.recent.iter().position(|(_, e)| *e == id) {
            self.recent.swap_remove(i);
        } else {
            self.removed.insert(id);
        }
    }

    fn rebuild(&mut self) {
        let mut points = Vec::new();
        let mut ids = Vec::new();
        if let Some(graph) = self.graph.take() {
            for (pid, point) in graph.iter() {
                let id = graph.values[pid.into_inner() as usize];
                if !self.removed.contains(&id) {
                    points.push(point.clone());
                    ids.push(id);
                }
            }
        }
        for (point, id) in self.recent.drain(..) {
            points.push(point);
            ids.push(id);
        }
        self.removed.clear();
        self.indexed = points.len();
        let build = || Builder::default().seed(0x6c61_6d69_6e6f).build(points, ids);
        // One thread: instant-distance inserts in parallel otherwise, and the graph (hence the
        // answers) would depend on scheduling.
        let graph = match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
            Ok(pool) => pool.install(build),
            Err(_) => build(),
        };
        self.graph = Some(graph);
        self.rebuilds += 1;
    }

    /// Up to `k` live entries nearest to `key` that `accept` admits, nearest first, as
    /// (id, cosine similarity). Ties are broken by id, so the answer is deterministic; searches
    /// only read the index, so several may run at once.
    pub fn nearest(
        &self,
        key: &UnitKey,
        k: usize,
        accept: impl Fn(u64) -> bool,
    ) -> Vec<(u64, f64)> {
        let mut found: Vec<(u64, f64)> = Vec::new();
        if let Some(graph) = &self.graph {
            let mut search = Search::default();
            for item in graph.search(key, &mut search) {
                let id = *item.value;
                if !self.removed.contains(&id) && accept(id) {
                    found.push((id, key.cosine(item.point)));
                }
            }
        }
        for (point, id) in &self.recent {
            if accept(*id) {
                found.push((*id, key.cosine(point)));
            }
        }
        found.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        found.truncate(k);
        found
    }

    /// Live keys (indexed and recent).
    pub fn len(&self) -> usize {
        self.indexed - self.removed.len() + self.recent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Graph builds so far.
    pub fn rebuilds(&self) -> usize {
        self.rebuilds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    fn random_key(rng: &mut SplitMix64, d: usize) -> Vec<f32> {
        (0..d).map(|_| rng.next_f64() as f32 - 0.5).collect()
    }

    #[test]
    fn zero_and_non_finite_keys_have_no_direction() {
        assert!(UnitKey::new(&[0.0; 4]).is_none());
        assert!(UnitKey::new(&[1.0, f32::NAN]).is_none());
        let k = UnitKey::new(&[3.0, 4.0]).unwrap();
        assert!((k.cosine(&k) - 1.0).abs() < 1e-7);
    }

    #[test]
    fn finds_the_exact_nearest_keys_across_rebuilds() {
        let mut rng = SplitMix64::new(7);
        let d = 36;
        let keys: Vec<Vec<f32>> = (0..300).map(|_| random_key(&mut rng, d)).collect();
        let mut index = KeyIndex::new();
        for (id, key) in keys.iter().enumerate() {
            index.insert(id as u64, UnitKey::new(key).unwrap());
        }
        assert!(index.rebuilds() >= 3, "{} rebuilds", index.rebuilds());
        assert!(!index.recent.is_empty() || index.indexed == 300);
        assert_eq!(index.len(), 300);
        for id in (0..300).step_by(10) {
            index.remove(id);
        }
        assert_eq!(index.len(), 270);
        let mut agree = 0;
        for _ in 0..50 {
            let q = UnitKey::new(&random_key(&mut rng, d)).unwrap();
            let got = index.nearest(&q, 1, |id| id % 2 == 1);
            let want = (0..300u64)
                .filter(|id| id % 10 != 0 && id % 2 == 1)
                .map(|id| (id, q.cosine(&UnitKey::new(&keys[id as usize]).unwrap())))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap();
            assert_eq!(got.len(), 1);
            assert!(
                got[0].0 % 2 == 1 && !got[0].0.is_multiple_of(10),
                "a filtered id came back"
            );
            agree += usize::from(got[0].0 == want.0);
        }
        // HNSW is approximate; on 300 keys in 36 dimensions it finds the true nearest nearly always.
        assert!(agree >= 45, "exact nearest found in {agree} of 50 searches");
    }

    #[test]
    fn same_keys_give_the_same_answers() {
        let mut rng = SplitMix64::new(11);
        let keys: Vec<Vec<f32>> = (0..200).map(|_| random_key(&mut rng, 18)).collect();
        let build = || {
            let mut index = KeyIndex::new();
            for (id, key) in keys.iter().enumerate() {
                index.insert(id as u64, UnitKey::new(key).unwrap());
            }
            index
        };
        let (a, b) = (build(), build());
        for key in keys.iter().take(20) {
            let q = UnitKey::new(key).unwrap();
            assert_eq!(a.nearest(&q, 5, |_| true), b.nearest(&q, 5, |_| true));
        }
    }
}
