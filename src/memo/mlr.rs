//! The `mlr:TAU` decision (the reference's intended policy): each chunk against the entry last
//! computed at its position, reused as it stands iff the keys' cosine similarity is at least
//! TAU.

use std::time::Instant;

use super::chunk::{Outcome, Reuse, WaveChunk};
use super::stage::StageState;

impl StageState {
    /// The reference's intended policy: each chunk against its own stored key only.
    pub(super) fn mlr_decide(&mut self, wave: &mut [WaveChunk], tau: f64) {
        for c in wave.iter_mut() {
            let Some(key) = &c.key else { continue };
            let last = self.history[c.chunk].front().copied();
            let Some(id) = last.filter(|&id| self.store.get(id).is_some()) else {
                c.outcome = Outcome::Compute { recorded: false };
                continue;
            };
            let t = Instant::now();
            let cosine = key.cosine(&self.store.get(id).expect("live").key);
            self.stats.lookup_ms.push(t.elapsed().as_secs_f64() * 1e3);
            c.outcome = if cosine >= tau {
                Outcome::Reuse(Reuse {
                    combination: vec![(id, [1.0, 0.0])],
                    certificate: None,
                })
            } else {
                Outcome::Compute { recorded: false }
            };
        }
    }
}
