//! Memoization of the gridding stages across solver iterations (spec section 7, done as the
//! paper intends and with a certified alternative).
//!
//! Each stage (U1, U1*, U2, U2*) runs chunk by chunk. For every chunk the input is staged, its
//! 3x3-pooled key is computed on the GPU and read back, and the policy decides:
//! - `mlr:TAU` (the reference's intended policy): keyed by chunk position, reuse the stored output
//!   iff the cosine similarity of the keys is at least TAU, else compute and replace the entry.
//! - `certified:TOL`: the candidates are the chunk's last few computed entries (its recent
//!   history, for extrapolation along the solver's path) and the nearest keys of the same map
//!   (instant-distance index). The GPU computes the normal equations of the least-squares
//!   combination `x ~ sum_i alpha_i c_i` (near-dependent candidates are dropped), then measures
//!   the residual `r = |x - sum alpha_i c_i| / |x|` elementwise; `sum alpha_i F(c_i)` is used iff
//!   `r < TOL`. The stages are linear, so the output error is at most
//!   `|F| (r |x| + rounding)`, with `|F|` estimated once per plan by power iteration; that bound
//!   is recorded for every reuse.
//!
//! Entries hold the input and the output chunk, in a device tier (slots of a slab) and a host
//! tier, each within a byte budget, evicted least recently used first. Only computed outputs are
//! stored, never reused ones, so errors do not compound through the cache.

pub mod frontier;
mod gpu;
pub mod index;
mod policy;
mod stats;
pub mod store;

pub use policy::{MemoOptions, MemoPolicy, PolicyParseError};
pub use stats::{MemoStats, StageStats};

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use num_complex::Complex32;
use thiserror::Error;

use crate::error::GpuError;
use crate::gpu::GpuContext;
use crate::operator::{Application, Apply, Block, LaminoOperator, OperatorError, Stage};
use crate::reference::SplitMix64;
use gpu::{Coefficient, StageKernels, MAX_CANDIDATES};
use index::{KeyIndex, UnitKey};
use store::{Evictions, Store, Tier};

/// Errors of the memo layer.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MemoError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Operator(#[from] OperatorError),
}

/// Power-iteration steps at most for `|F|`, and the relative change that ends it early.
const NORM_STEPS: usize = 30;
const NORM_TOLERANCE: f64 = 1e-3;
/// The power iteration approaches `|F|` from below; the bound uses the estimate times this.
const NORM_SAFETY: f64 = 1.05;

/// Relative f32 rounding of a chunk's computed output (well above the operator's measured
/// rounding error): added to the residual in the error bound, since the stored output and the
/// exact one each carry it.
const F32_ROUNDING: f64 = 2e-6;

/// Host-tier candidates are brought back to the device for comparison only above this cosine
/// similarity of their keys.
const PROMOTE_COSINE: f64 = 0.9;

/// A reuse the policy accepted.
struct Reuse {
    /// Entries and their coefficients.
    combination: Vec<(u64, Coefficient)>,
    /// `|x - sum alpha_i c_i| / |x|` and the bound on the output error (certified policy only).
    certificate: Option<(f64, f64)>,
}

/// Computed entries remembered per chunk position as reuse candidates.
const HISTORY: usize = 3;

/// One stage's cache, index and statistics.
struct StageMemo {
    stage: Stage,
    kernels: Option<StageKernels>,
    store: Store,
    /// One index per map: all full-size chunks of U1 share one, every U2 chunk has its own.
    indexes: HashMap<usize, KeyIndex>,
    /// The entries last computed for each chunk position, newest first.
    history: Vec<VecDeque<u64>>,
    norm: f64,
    stats: StageStats,
}

/// The memo layer of one operator.
pub struct Memo {
    options: MemoOptions,
    stages: Vec<StageMemo>,
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// `|F|` of a stage pair by power iteration on `F* F` over whole arrays (each chunk's map is a
/// restriction of it, so its norm bounds every chunk's).
fn operator_norm(
    ctx: &GpuContext,
    op: &LaminoOperator,
    forward: Apply,
    adjoint: Apply,
) -> Result<f64, MemoError> {
    let space = forward.spaces().0;
    let shape = space.shape(op.geometry());
    let len = shape.iter().product::<usize>();
    let mut rng = SplitMix64::new(0x6e6f_726d);
    let mut v: Vec<Complex32> = (0..len)
        .map(|_| Complex32::new(rng.next_f64() as f32 - 0.5, rng.next_f64() as f32 - 0.5))
        .collect();
    let norm = |v: &[Complex32]| v.iter().map(|c| c.norm_sqr() as f64).sum::<f64>().sqrt();
    let mut lambda = 0.0;
    for _ in 0..NORM_STEPS {
        let n = norm(&v);
        v.iter_mut().for_each(|c| *c /= n as f32);
        let image = op.apply_host(ctx, forward, &shape, &v)?;
        v = op.apply_host(
            ctx,
            adjoint,
            &forward.spaces().1.shape(op.geometry()),
            &image,
        )?;
        let next = norm(&v);
        let done = (next - lambda).abs() <= NORM_TOLERANCE * next;
        lambda = next;
        if done || next == 0.0 {
            break;
        }
    }
    Ok(lambda.sqrt() * NORM_SAFETY)
}

/// The least-squares combination of the candidates from the normal equations: candidates
/// nearly dependent on earlier ones (pivot below `DEPENDENT` of their norm) get coefficient 0.
/// Returns the coefficients and the estimated relative residual squared; `None` when `x` or
/// every candidate is zero.
fn least_squares(dots: &gpu::Dots) -> Option<(Vec<num_complex::Complex64>, f64)> {
    use num_complex::Complex64;
    const DEPENDENT: f64 = 1e-6;
    let k = dots.b.len();
    if dots.xx <= 0.0 || k == 0 {
        return None;
    }
    // Gaussian elimination on [G | b] in candidate order, skipping dependent pivots.
    let mut m: Vec<Vec<Complex64>> = (0..k)
        .map(|i| {
            let mut row = dots.gram[i].clone();
            row.push(dots.b[i]);
            row
        })
        .collect();
    let mut kept = Vec::new();
    for i in 0..k {
        let pivot = m[i][i];
        // NaN pivots fail this comparison too.
        let independent = pivot.re > DEPENDENT * dots.gram[i][i].re;
        if !independent || !pivot.re.is_finite() {
            continue;
        }
        kept.push(i);
        let pivot_row = m[i].clone();
        for row in m.iter_mut().skip(i + 1) {
            let f = row[i] / pivot;
            for (v, p) in row.iter_mut().zip(&pivot_row).skip(i) {
                *v -= f * p;
            }
        }
    }
    if kept.is_empty() {
        return None;
    }
    let mut alpha = vec![Complex64::default(); k];
    for &i in kept.iter().rev() {
        let mut v = m[i][k];
        for &j in kept.iter().filter(|&&j| j > i) {
            v -= m[i][j] * alpha[j];
        }
        alpha[i] = v / m[i][i];
    }
    // |x - sum alpha c|^2 = |x|^2 - Re(b^H alpha) at the optimum.
    let explained: f64 = dots
        .b
        .iter()
        .zip(&alpha)
        .map(|(b, a)| (b.conj() * a).re)
        .sum();
    Some((alpha, ((dots.xx - explained) / dots.xx).max(0.0)))
}

impl Memo {
    /// Sets up the cache of every stage of `op` (whose chunking fixes the reuse granularity) and,
    /// for the certified policy, estimates `|U1|` and `|U2|`. Uses the operator's buffers as
    /// scratch.
    pub fn new(
        ctx: &GpuContext,
        op: &LaminoOperator,
        options: MemoOptions,
    ) -> Result<Self, MemoError> {
        let (norm_u1, norm_u2) = match options.policy {
            MemoPolicy::Certified { .. } => (
                operator_norm(ctx, op, Apply::Usfft1d, Apply::Usfft1dAdjoint)?,
                operator_norm(ctx, op, Apply::Usfft2d, Apply::Usfft2dAdjoint)?,
            ),
            _ => (f64::NAN, f64::NAN),
        };
        let mut stages = Vec::new();
        for stage in Stage::ALL {
            let chunks = op.chunk_count(stage);
            let ios: Vec<(&Block, &Block)> = (0..chunks).map(|j| op.chunk_io(stage, j)).collect();
            let in_max = ios.iter().map(|(i, _)| i.len()).max().unwrap_or(0);
            let out_max = ios.iter().map(|(_, o)| o.len()).max().unwrap_or(0);
            let key_max = ios
                .iter()
                .map(|(i, _)| 18 * i.extents[i.channel_axis])
                .max()
                .unwrap_or(0);
            let slot_elems = in_max + out_max;
            let room = (options.device_bytes / 4)
                .min(ctx.max_binding_bytes())
                .min(ctx.max_buffer_bytes());
            let slots = (room / (slot_elems * 8).max(1)) as usize;
            let mut stats = StageStats::new(stage);
            let kernels = if slots == 0 || !options.policy.is_active() {
                if options.policy.is_active() {
                    stats.disabled = Some(format!(
                        "one cached chunk needs {} bytes, more than this stage's device budget of {room} bytes",
                        slot_elems * 8
                    ));
                }
                None
            } else {
                let (input, output) = ios[0];
                Some(StageKernels::new(
                    ctx,
                    &input.buffer,
                    &output.buffer,
                    slots as u64 * slot_elems,
                    key_max,
                    out_max,
                )?)
            };
            stats.slots = slots;
            let norm = if stage.chunks_share_map() {
                norm_u1
            } else {
                norm_u2
            };
            stages.push(StageMemo {
                stage,
                kernels,
                store: Store::new(slots, slot_elems, in_max, options.host_bytes / 4),
                indexes: HashMap::new(),
                history: vec![VecDeque::new(); chunks],
                norm,
                stats,
            });
        }
        Ok(Self { options, stages })
    }

    /// The options in use.
    pub fn options(&self) -> &MemoOptions {
        &self.options
    }

    /// Device memory held by the caches and their kernels' buffers.
    pub fn device_bytes(&self) -> u64 {
        self.stages
            .iter()
            .filter_map(|s| s.kernels.as_ref())
            .map(StageKernels::device_bytes)
            .sum()
    }

    /// Statistics so far.
    pub fn stats(&self) -> MemoStats {
        MemoStats::summarise(
            self.options.policy,
            self.stages.iter().map(|s| s.stats.clone()).collect(),
        )
    }

    /// Runs `application` as [`LaminoOperator::record`] would, memoizing its gridding stages;
    /// waits for it.
    pub fn apply(
        &mut self,
        ctx: &GpuContext,
        op: &LaminoOperator,
        application: &Application,
    ) -> Result<(), MemoError> {
        for (position, stage) in application.gridding_stages() {
            let active = stage.and_then(|stage| {
                self.stages
                    .iter_mut()
                    .find(|s| s.stage == stage && s.kernels.is_some())
            });
            match active {
                Some(s) => {
                    for chunk in 0..op.chunk_count(s.stage) {
                        s.run_chunk(ctx, op, &self.options, (application, position), chunk)?;
                    }
                }
                None => {
                    let mut rec = ctx.recorder("memo: plain stage");
                    op.record_stage(ctx, &mut rec, application, position)?;
                    ctx.submit_and_wait(rec)?;
                }
            }
        }
        Ok(())
    }
}

impl StageMemo {
    fn kernels(&self) -> &StageKernels {
        self.kernels.as_ref().expect("active stages have kernels")
    }

    /// The map class of a chunk: chunks of U1 with the same extents share one map.
    fn class(&self, io: &(Block, Block), chunk: usize) -> usize {
        if self.stage.chunks_share_map() {
            io.0.extents[io.0.channel_axis] as usize
        } else {
            chunk
        }
    }

    fn run_chunk(
        &mut self,
        ctx: &GpuContext,
        op: &LaminoOperator,
        options: &MemoOptions,
        (application, position): (&Application, usize),
        chunk: usize,
    ) -> Result<(), MemoError> {
        let start = Instant::now();
        let (input, output) = op.chunk_io(self.stage, chunk);
        let io = (input.clone(), output.clone());
        let (input, output) = (&io.0, &io.1);
        let mut rec = ctx.recorder("memo: stage in, key");
        op.record_chunk_in(ctx, &mut rec, application, position, chunk)?;
        self.kernels().record_key(ctx, &mut rec, input);
        ctx.submit_and_wait(rec)?;
        let key = UnitKey::new(&self.kernels().read_key(ctx, input)?);
        let class = self.class(&io, chunk);
        let (reuse, input_norm2) = match (options.policy, &key) {
            (MemoPolicy::Mlr { tau }, Some(key)) => (self.mlr_decide(ctx, key, chunk, tau)?, 0.0),
            (MemoPolicy::Certified { tol }, Some(key)) => {
                self.certified_decide(ctx, options, key, &io, chunk, class, tol)?
            }
            _ => (None, 0.0),
        };
        let decided = start.elapsed().as_secs_f64() * 1e3;
        self.stats.chunks += 1;
        match reuse {
            Some(reuse) => {
                let combination: Vec<(u64, Coefficient)> = reuse
                    .combination
                    .iter()
                    .map(|&(id, alpha)| (self.slot_offsets(id).1, alpha))
                    .collect();
                let mut rec = ctx.recorder("memo: reuse");
                if options.audit {
                    op.record_chunk_compute(ctx, &mut rec, self.stage, chunk)?;
                    self.kernels().record_audit_save(ctx, &mut rec, output);
                }
                self.kernels()
                    .record_reuse(ctx, &mut rec, output, &combination);
                if options.audit {
                    self.kernels().record_audit_diff(ctx, &mut rec, output);
                }
                op.record_chunk_out(ctx, &mut rec, application, position, chunk)?;
                // Submission waits for the work, so the chunk's time is complete here.
                ctx.submit_and_wait(rec)?;
                if options.audit {
                    let error = self.kernels().read_residual(ctx, output)?.sqrt();
                    self.stats
                        .record_audit(error, reuse.certificate.map(|c| c.1));
                }
                for &(id, _) in &reuse.combination {
                    self.store.touch(id);
                }
                self.stats.hits += 1;
                self.stats.reuse_ms += start.elapsed().as_secs_f64() * 1e3;
                if let Some((r, bound)) = reuse.certificate {
                    self.stats.record_bound(r, bound);
                }
            }
            None => {
                self.stats.overhead_ms += decided;
                let t = Instant::now();
                // Keyed by position: the chunk's old entry makes way for the new one.
                if let MemoPolicy::Mlr { .. } = options.policy {
                    for old in std::mem::take(&mut self.history[chunk]) {
                        self.store.remove(old);
                    }
                }
                let stored = match &key {
                    Some(key) => self.claim_slot(ctx, &[])?.map(|slot| (slot, key.clone())),
                    None => None,
                };
                let mut rec = ctx.recorder("memo: compute");
                op.record_chunk_compute(ctx, &mut rec, self.stage, chunk)?;
                if let Some((slot, _)) = &stored {
                    let offsets = self.store.slot_offsets(*slot);
                    self.kernels()
                        .record_store(ctx, &mut rec, (input, output), offsets);
                }
                op.record_chunk_out(ctx, &mut rec, application, position, chunk)?;
                ctx.submit_and_wait(rec)?;
                self.stats.misses += 1;
                self.stats.compute_ms += t.elapsed().as_secs_f64() * 1e3;
                if let Some((slot, key)) = stored {
                    let lens = (input.len(), output.len());
                    let id = self
                        .store
                        .insert(chunk, class, key.clone(), input_norm2, lens, slot);
                    if let MemoPolicy::Certified { .. } = options.policy {
                        self.indexes.entry(class).or_default().insert(id, key);
                    }
                    let history = &mut self.history[chunk];
                    history.push_front(id);
                    history.truncate(HISTORY);
                }
            }
        }
        let (device, host) = self.store.bytes();
        self.stats.record_bytes(device, host);
        Ok(())
    }

    fn slot_offsets(&self, id: u64) -> (u64, u64) {
        match self.store.get(id).map(|e| &e.tier) {
            Some(Tier::Device { slot }) => self.store.slot_offsets(*slot),
            _ => unreachable!("reused entries are on the device"),
        }
    }

    /// The reference's intended policy: the chunk's stored key only.
    fn mlr_decide(
        &mut self,
        ctx: &GpuContext,
        key: &UnitKey,
        chunk: usize,
        tau: f64,
    ) -> Result<Option<Reuse>, MemoError> {
        let last = self.history[chunk].front().copied();
        let Some(id) = last.filter(|id| self.store.get(*id).is_some()) else {
            return Ok(None);
        };
        let t = Instant::now();
        let cosine = key.cosine(&self.store.get(id).expect("live").key);
        self.stats.lookup_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if cosine < tau || !self.ensure_on_device(ctx, id, &[id])? {
            return Ok(None);
        }
        Ok(Some(Reuse {
            combination: vec![(id, [1.0, 0.0])],
            certificate: None,
        }))
    }

    /// The certified policy; also returns `|x|^2`.
    #[allow(clippy::too_many_arguments)]
    fn certified_decide(
        &mut self,
        ctx: &GpuContext,
        options: &MemoOptions,
        key: &UnitKey,
        io: &(Block, Block),
        chunk: usize,
        class: usize,
        tol: f64,
    ) -> Result<(Option<Reuse>, f64), MemoError> {
        let input = &io.0;
        let mut candidates: Vec<(u64, f64)> = self.history[chunk]
            .iter()
            .filter_map(|&id| {
                let e = self.store.get(id).filter(|e| e.class == class)?;
                Some((id, key.cosine(&e.key)))
            })
            .collect();
        let index = self.indexes.entry(class).or_default();
        let known: Vec<u64> = candidates.iter().map(|c| c.0).collect();
        let nearest = index.nearest(key, options.neighbours, |id| !known.contains(&id));
        if let Some(&ms) = index.lookup_ms().last() {
            self.stats.lookup_ms.push(ms);
        }
        candidates.extend(nearest);
        candidates.truncate(MAX_CANDIDATES);
        // Candidates come in priority order (the chunk's history first): a promotion may evict
        // any entry except those already lined up for comparison.
        let mut on_device = Vec::new();
        for &(id, cosine) in &candidates {
            // Bringing a host entry back costs an upload and usually a demotion: only for keys
            // that point the same way (a small residual needs nearly proportional keys).
            let on_host = matches!(self.store.get(id).map(|e| &e.tier), Some(Tier::Host { .. }));
            if on_host && cosine < PROMOTE_COSINE {
                continue;
            }
            if self.ensure_on_device(ctx, id, &on_device)? {
                on_device.push(id);
            }
        }
        let offsets: Vec<u64> = on_device
            .iter()
            .map(|&id| self.slot_offsets(id).0)
            .collect();
        let mut rec = ctx.recorder("memo: certify");
        self.kernels().record_dots(ctx, &mut rec, input, &offsets);
        ctx.submit_and_wait(rec)?;
        let dots = self.kernels().read_dots(ctx, input, offsets.len())?;
        let xx = dots.xx;
        let Some((alphas, estimate)) = least_squares(&dots) else {
            return Ok((None, xx));
        };
        // The normal equations lose about 1e-6 of |x|^2 to f32 sums and cancellation: measure
        // the residual whenever the estimate is within that margin of TOL.
        if tol <= 0.0 || estimate > 4.0 * tol * tol + 1e-5 {
            return Ok((None, xx));
        }
        let used: Vec<(u64, Coefficient)> = on_device
            .iter()
            .zip(&alphas)
            .filter(|(_, a)| a.norm() > 0.0)
            .map(|(&id, a)| (id, [a.re as f32, a.im as f32]))
            .collect();
        let inputs: Vec<(u64, Coefficient)> = used
            .iter()
            .map(|&(id, a)| (self.slot_offsets(id).0, a))
            .collect();
        let mut rec = ctx.recorder("memo: residual");
        self.kernels()
            .record_residual(ctx, &mut rec, input, &inputs);
        ctx.submit_and_wait(rec)?;
        let residual = self.kernels().read_residual(ctx, input)?.sqrt();
        let r = residual / xx.sqrt();
        // Each stored output carries f32 rounding of about F32_ROUNDING |F| |c_i|, scaled by
        // |alpha_i| in the combination.
        let rounding: f64 = used
            .iter()
            .map(|&(id, a)| {
                let c = self.store.get(id).map_or(0.0, |e| e.input_norm2.sqrt());
                (a[0] as f64).hypot(a[1] as f64) * c
            })
            .sum::<f64>()
            + xx.sqrt();
        let reuse = (r < tol).then_some(Reuse {
            combination: used,
            certificate: Some((r, self.norm * (residual + F32_ROUNDING * rounding))),
        });
        Ok((reuse, xx))
    }

    /// Makes sure entry `id` is in a device slot, promoting it from the host tier if needed
    /// (never evicting an entry in `keep`). False if no slot can be had.
    fn ensure_on_device(
        &mut self,
        ctx: &GpuContext,
        id: u64,
        keep: &[u64],
    ) -> Result<bool, MemoError> {
        match self.store.get(id).map(|e| &e.tier) {
            Some(Tier::Device { .. }) => return Ok(true),
            // Dropped while room was made for an earlier candidate.
            None => return Ok(false),
            Some(Tier::Host { .. }) => {}
        }
        // The entry itself is on the host and must survive the room being made for it.
        let keep: Vec<u64> = keep.iter().copied().chain([id]).collect();
        let Some(slot) = self.claim_slot(ctx, &keep)? else {
            return Ok(false);
        };
        let (input, output) = self.store.promote(id, slot).expect("a host entry");
        let (input_at, output_at) = self.store.slot_offsets(slot);
        let slab = self.kernels().slab();
        ctx.write(slab, input_at, &input);
        ctx.write(slab, output_at, &output);
        self.stats.promotions += 1;
        Ok(true)
    }

    /// A free device slot, evicting (and demoting) as needed; updates the indexes and statistics.
    fn claim_slot(&mut self, ctx: &GpuContext, keep: &[u64]) -> Result<Option<usize>, MemoError> {
        let mut evictions = Evictions::default();
        let kernels = self.kernels.as_ref().expect("active stages have kernels");
        let store = &mut self.store;
        let demote = |e: &store::Entry, (input_at, output_at): (u64, u64)| -> Result<_, GpuError> {
            Ok((
                ctx.read(kernels.slab(), input_at, e.lens.0 as usize)?,
                ctx.read(kernels.slab(), output_at, e.lens.1 as usize)?,
            ))
        };
        let claimed = store.claim_slot(keep, demote, &mut evictions)?;
        self.stats.demoted += evictions.demoted as u64;
        self.stats.dropped += evictions.dropped as u64;
        let Some((slot, dropped)) = claimed else {
            return Ok(None);
        };
        for id in dropped {
            for index in self.indexes.values_mut() {
                index.remove(id);
            }
            for history in &mut self.history {
                history.retain(|&e| e != id);
            }
        }
        Ok(Some(slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::{Geometry, OperatorOptions, Space};
    use num_complex::Complex64;

    use crate::gpu::test_context as ctx;

    /// The normal equations of candidates `cs` against `x`, in f64.
    fn dots_of(x: &[Complex64], cs: &[Vec<Complex64>]) -> gpu::Dots {
        let inner = |a: &[Complex64], b: &[Complex64]| -> Complex64 {
            a.iter().zip(b).map(|(u, v)| u.conj() * v).sum()
        };
        gpu::Dots {
            xx: inner(x, x).re,
            b: cs.iter().map(|c| inner(c, x)).collect(),
            gram: cs
                .iter()
                .map(|a| cs.iter().map(|b| inner(a, b)).collect())
                .collect(),
        }
    }

    #[test]
    fn least_squares_recovers_combinations_and_drops_dependent_candidates() {
        let mut rng = SplitMix64::new(4);
        let mut random = || -> Vec<Complex64> {
            (0..50)
                .map(|_| Complex64::new(rng.next_f64() - 0.5, rng.next_f64() - 0.5))
                .collect()
        };
        let (c0, c1) = (random(), random());
        let (a0, a1) = (Complex64::new(0.7, -0.2), Complex64::new(-1.3, 0.4));
        let x: Vec<Complex64> = c0.iter().zip(&c1).map(|(u, v)| a0 * u + a1 * v).collect();
        // c2 = 2 c0 is dependent: it gets coefficient 0 and the fit is still exact.
        let c2: Vec<Complex64> = c0.iter().map(|u| u * 2.0).collect();
        let (alpha, r2) = least_squares(&dots_of(&x, &[c0.clone(), c2, c1.clone()])).unwrap();
        assert!(
            (alpha[0] - a0).norm() < 1e-9 && (alpha[2] - a1).norm() < 1e-9,
            "{alpha:?}"
        );
        assert_eq!(alpha[1], Complex64::default());
        assert!(r2 < 1e-12, "{r2}");
        // A random x keeps most of its norm: the estimate is the true relative residual.
        let y = random();
        let (alpha, r2) = least_squares(&dots_of(&y, &[c0.clone(), c1.clone()])).unwrap();
        let fit: f64 = y
            .iter()
            .enumerate()
            .map(|(i, v)| (v - alpha[0] * c0[i] - alpha[1] * c1[i]).norm_sqr())
            .sum::<f64>()
            / y.iter().map(|v| v.norm_sqr()).sum::<f64>();
        assert!((r2 - fit).abs() < 1e-12 && r2 > 0.5, "{r2} vs {fit}");
        assert!(least_squares(&dots_of(&y, &[])).is_none());
        assert!(least_squares(&dots_of(&vec![Complex64::default(); 50], &[c0])).is_none());
    }

    #[test]
    fn gpu_keys_are_the_reference_pooling_for_every_stage() {
        let ctx = ctx();
        // 20 and 14 are not multiples of 3, so PyTorch's bins overlap.
        let mut g = Geometry::cube(20, 7, 2.0);
        g.deth = 14;
        let options = OperatorOptions {
            max_chunk_y: Some(6),
            max_chunk_rows: Some(5),
            ..OperatorOptions::default()
        };
        let op = LaminoOperator::new(&ctx, &g, &options).unwrap();
        let k = |stage: Stage| {
            let (input, output) = op.chunk_io(stage, 0);
            StageKernels::new(
                &ctx,
                &input.buffer,
                &output.buffer,
                16,
                18 * 8,
                output.len(),
            )
            .unwrap()
        };
        let mut rng = SplitMix64::new(1);
        let scalars = crate::array::Scalars::new(&ctx, 1, 1).unwrap();
        let arrays = [Space::Volume, Space::Spectrum, Space::Data].map(|space| {
            let len = space.shape(&g).iter().product::<usize>();
            let v: Vec<Complex32> = (0..len)
                .map(|_| Complex32::new(rng.next_f64() as f32, rng.next_f64() as f32 - 0.5))
                .collect();
            let field = crate::array::Field::zeros(&ctx, "input", space.layout(&g, 2)).unwrap();
            ctx.write(field.buffer(), 0, &v);
            (space, field)
        });
        let field = |space| &arrays.iter().find(|(s, _)| *s == space).unwrap().1;
        for stage in Stage::ALL {
            let kernels = k(stage);
            let (from, to) = stage.apply().spaces();
            let application = op
                .application(
                    &ctx,
                    &scalars,
                    None,
                    stage.apply(),
                    crate::operator::Source::Complex(field(from)),
                    crate::operator::Sink::Complex(field(to)),
                )
                .unwrap();
            // The last chunk is the short one.
            let chunk = op.chunk_count(stage) - 1;
            let (input, _) = op.chunk_io(stage, chunk);
            let mut rec = ctx.recorder("test");
            op.record_chunk_in(&ctx, &mut rec, &application, 0, chunk)
                .unwrap();
            kernels.record_key(&ctx, &mut rec, input);
            ctx.submit_and_wait(rec).unwrap();
            let key = kernels.read_key(&ctx, input).unwrap();
            let local: Vec<Complex32> = ctx
                .read(&input.buffer, 0, (input.buffer.bytes() / 8) as usize)
                .unwrap();
            let want = crate::reference::pooled_key(
                &local,
                input.view.offset as usize,
                input.view.strides.map(|s| s as usize),
                input.extents.map(|e| e as usize),
                input.channel_axis,
            );
            assert_eq!(key.len(), want.len(), "{stage:?}");
            for (i, (&got, &w)) in key.iter().zip(&want).enumerate() {
                assert!(
                    (got as f64 - w).abs() <= 1e-6 * (1.0 + w.abs()),
                    "{stage:?} key[{i}]: {got} vs {w}"
                );
            }
        }
    }
}
