//! Memoization of the gridding stages across solver iterations (spec section 7, done as the
//! paper intends and with a certified alternative).
//!
//! Each stage (U1, U1*, U2, U2*) runs chunk by chunk. The memo layer handles a stage's chunks
//! together, in waves (all chunks when the device budget allows), with at most three round trips
//! to the host per wave:
//! 1. one submission stages every chunk's input into a slot of the stage's slab and computes its
//!    3x3-pooled key; one readback brings all keys (and the entries demoted to the host tier to
//!    make room). Chunks whose inputs live on the host (a streaming plan) are keyed on the host
//!    instead, with the device's arithmetic, and decided there (below); only the computed ones
//!    are uploaded (in the last submission): a reused chunk skips its upload;
//! 2. the host decides for every chunk at once (index searches in parallel); under `certified`,
//!    one submission forms the normal equations of every chunk's candidates (sums finished on the
//!    GPU) and computes the chunks without candidates; one readback;
//! 3. when some combination's residual cannot be settled from the normal equations (their f32
//!    sums bound how far the estimate may be off), one submission measures those residuals
//!    elementwise and computes the chunks the estimates rejected; one readback;
//!
//! and one last submission, which nothing waits for, forms the reused outputs and computes the
//! chunks whose residual failed. Where the stage writes its output unchanged into a host array,
//! a computed chunk's output is kept as its download lands, and a reuse is formed on the host
//! from those copies, straight into the host array: a reused chunk moves nothing between host
//! and device. Chunks keyed on the host are decided there in f64 against the host copies of the
//! candidates' inputs (steps 2 and 3 without round trips). The policies:
//! - `mlr:TAU` (the reference's intended policy): keyed by chunk position, reuse the stored output
//!   iff the cosine similarity of the keys is at least TAU, else compute and replace the entry.
//! - `certified:TOL`: the candidates are the chunk's last few computed entries (its recent
//!   history, for extrapolation along the solver's path) and the nearest keys of the same map
//!   (instant-distance index). The GPU computes the normal equations of the least-squares
//!   combination `x ~ sum_i alpha_i c_i` (near-dependent candidates are dropped). Each stage
//!   application has an error budget: the reused chunks' squared residuals
//!   `|x - sum alpha_i c_i|^2` together stay within `TOL^2` of the compared chunks' `|x|^2`,
//!   the smallest residuals taken first (a chunk of little signal may be reused with a large
//!   relative residual, since what matters is the stage output's error). A residual is the
//!   normal equations' estimate plus its rounding margin where that fits, else measured
//!   elementwise. The stages are linear, so the stage output's error is at most
//!   `|F| TOL |x|` plus rounding, each reuse's share `|F| (residual + rounding)`, with `|F|`
//!   estimated once per geometry by power iteration and remembered ([`norm_cache`]); that bound
//!   is recorded for every reuse.
//! - `certified:auto`: `certified` with a tolerance that follows the solver's primal residual
//!   ([`MemoPolicy::CertifiedAuto`]).
//!
//! Entries hold the input and the output chunk, in a device tier (slots of a slab) and a host
//! tier, each within a byte budget, evicted least recently used first; a device entry may also
//! keep host copies ([`store`]). A chunk's input is staged
//! straight into the slot its entry will keep if it is computed, so storing it copies only the
//! output. Only computed outputs are stored, never reused ones, so errors do not compound through
//! the cache.

mod gpu;
pub mod index;
pub mod norm_cache;
mod policy;
mod stats;
pub mod store;

pub use norm_cache::{NormCache, NormSource, OperatorNorms, CACHE_DIR_ENV};
pub use policy::{
    MemoOptions, MemoPolicy, MemoStages, PolicyParseError, StagesParseError, AUTO_CAP, AUTO_FLOOR,
    AUTO_SCALE,
};
pub use stats::{MemoStats, StageStats};

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use num_complex::Complex32;
use rayon::prelude::*;
use thiserror::Error;

use crate::array::{Field, Residency, Scalars, Staging, StorageError};
use crate::error::GpuError;
use crate::gpu::GpuContext;
use crate::operator::{
    Application, Apply, Block, LaminoOperator, OperatorError, Sink, Source, Space, Stage,
};
use crate::random::SplitMix64;
use gpu::{Combination, Plan, Shape, StageDevice, MAX_CANDIDATES};
use index::{KeyIndex, UnitKey};
use norm_cache::Lookup;
use store::{HostCopies, Landing, Store, Tier};

/// Errors of the memo layer.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MemoError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Operator(#[from] OperatorError),
    #[error(transparent)]
    Storage(#[from] StorageError),
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

/// Computed entries remembered per chunk position as reuse candidates.
const HISTORY: usize = 3;

/// A reuse the policy accepted.
#[derive(Debug, Clone)]
struct Reuse {
    /// Entries and their coefficients.
    combination: Combination,
    /// `|x - sum alpha_i c_i| / |x|` and the bound on the output error (certified policies).
    certificate: Option<(f64, f64)>,
}

/// What happens to a chunk of a wave.
#[derive(Debug, Clone)]
enum Outcome {
    /// Not decided yet.
    Open,
    /// Computed (and stored when it has a key): `recorded` once its computation is recorded.
    Compute { recorded: bool },
    /// Formed from stored outputs.
    Reuse(Reuse),
}

/// A chunk of the wave being handled.
struct WaveChunk {
    /// Position in the wave (the chunk kernels' table entry).
    j: usize,
    stage: Stage,
    chunk: usize,
    /// The slot its input is staged in (its entry's slot if it is computed).
    slot: usize,
    /// Whether its input is in its slot already (it is not when it was keyed on the host).
    staged: bool,
    /// Its input values, when its stage-in reads host arrays (keyed and decided on the host).
    host_input: Option<Arc<Vec<Complex32>>>,
    /// Whether its stage-out downloads the output block unchanged into a host array: a reuse
    /// is then formed on the host, and a computed output kept there as it lands.
    output_on_host: bool,
    /// The computed output's host copy, set when its download lands.
    landing: Option<Landing>,
    input: Block,
    output: Block,
    class: usize,
    key: Option<UnitKey>,
    outcome: Outcome,
}

/// One stage's cache, index and statistics (everything but its device side).
struct StageState {
    stage: Stage,
    plan: Option<Plan>,
    store: Store,
    /// One index per map: all full-size chunks of U1 share one, every U2 chunk has its own.
    indexes: HashMap<usize, KeyIndex>,
    /// The entries last computed for each chunk position, newest first.
    history: Vec<VecDeque<u64>>,
    norm: f64,
    stats: StageStats,
}

struct StageMemo {
    device: Option<StageDevice>,
    state: StageState,
}

/// The memo layer of one operator.
pub struct Memo {
    options: MemoOptions,
    stages: Vec<StageMemo>,
    /// The last relative primal residual the solver reported (for `certified:auto`).
    primal: Option<f64>,
    norms: Option<NormSource>,
    warnings: Vec<String>,
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// `|F|` of a stage pair by power iteration on `F* F` over whole arrays (each chunk's map is a
/// restriction of it, so its norm bounds every chunk's). With `staging` (an operator whose
/// arrays live on the host), the iterates stay in host memory and pass through the staging
/// buffers a chunk at a time, as the solver's do; otherwise they are on the device.
fn operator_norm(
    ctx: &GpuContext,
    op: &LaminoOperator,
    (forward, adjoint): (Apply, Apply),
    staging: Option<&Arc<Staging>>,
) -> Result<f64, MemoError> {
    let g = op.geometry();
    let (from, to) = forward.spaces();
    let residency = match staging {
        Some(_) => Residency::Host,
        None => Residency::Device,
    };
    let field = |label, space: Space| Field::new(ctx, label, space.layout(g, 2), &residency);
    let (x, image) = (field("norm iterate", from)?, field("norm image", to)?);
    let scalars = Scalars::new(ctx, 1, 1)?;
    let forward = op.application(
        ctx,
        &scalars,
        staging,
        forward,
        Source::Complex(&x),
        Sink::Complex(&image),
    )?;
    let adjoint = op.application(
        ctx,
        &scalars,
        staging,
        adjoint,
        Source::Complex(&image),
        Sink::Complex(&x),
    )?;
    let len = from.shape(g).iter().product::<usize>();
    let mut rng = SplitMix64::new(0x6e6f_726d);
    let mut v: Vec<Complex32> = (0..len)
        .map(|_| Complex32::new(rng.next_f64() as f32 - 0.5, rng.next_f64() as f32 - 0.5))
        .collect();
    let norm = |v: &[Complex32]| v.iter().map(|c| c.norm_sqr() as f64).sum::<f64>().sqrt();
    let mut lambda = 0.0;
    for _ in 0..NORM_STEPS {
        let n = norm(&v);
        v.iter_mut().for_each(|c| *c /= n as f32);
        x.write(ctx, bytemuck::cast_slice(&v))?;
        op.run(ctx, &forward)?;
        op.run(ctx, &adjoint)?;
        v = bytemuck::cast_slice(&x.read(ctx)?).to_vec();
        let next = norm(&v);
        let done = (next - lambda).abs() <= NORM_TOLERANCE * next;
        lambda = next;
        if done || next == 0.0 {
            break;
        }
    }
    Ok(lambda.sqrt() * NORM_SAFETY)
}

/// `|U1|` and `|U2|` of `op`'s geometry: from `cache` when it has them, else estimated and
/// stored. Also returns where they came from and the warnings of an unusable cache.
fn operator_norms(
    ctx: &GpuContext,
    op: &LaminoOperator,
    cache: &NormCache,
    staging: Option<&Arc<Staging>>,
) -> Result<(OperatorNorms, NormSource, Vec<String>), MemoError> {
    let g = op.geometry();
    let mut warnings = Vec::new();
    match cache.get(g) {
        Lookup::Hit(norms) => {
            let path = cache.path(g).expect("a hit has a file");
            return Ok((norms, NormSource::Cache(path), warnings));
        }
        Lookup::Unusable(why) => warnings.push(format!(
            "ignored the operator-norm cache file {why}; estimating the norms again"
        )),
        Lookup::Miss => {}
    }
    let norms = OperatorNorms {
        u1: operator_norm(ctx, op, (Apply::Usfft1d, Apply::Usfft1dAdjoint), staging)?,
        u2: operator_norm(ctx, op, (Apply::Usfft2d, Apply::Usfft2dAdjoint), staging)?,
    };
    if let Err(why) = cache.put(g, norms) {
        warnings.push(format!(
            "could not store the operator norms ({why}): the next run estimates them again; set {CACHE_DIR_ENV} to a writable directory to keep them"
        ));
    }
    Ok((norms, NormSource::Estimated, warnings))
}

/// The complex values a chunk's stage-in forms from `blocks` (the host blocks it uploads, in
/// binding order): one real array (imaginary parts 0), one complex array, or the difference of
/// two complex arrays, with the device's f32 arithmetic.
fn chunk_values(len: usize, blocks: &[Vec<f32>]) -> Vec<Complex32> {
    match blocks {
        [x] if x.len() == len => x.iter().map(|&re| Complex32::new(re, 0.0)).collect(),
        [x] => bytemuck::cast_slice(x).to_vec(),
        [x, y] => x
            .chunks_exact(2)
            .zip(y.chunks_exact(2))
            .map(|(a, b)| Complex32::new(a[0] - b[0], a[1] - b[1]))
            .collect(),
        _ => unreachable!("a stage-in reads one or two arrays"),
    }
}

/// The key the device's `pool_key` computes for a chunk whose input block is `x` (`input`'s
/// extents, row-major). The same f32 operations in the same order (sums over the bins, then one
/// division), so the same bits where the device rounds division exactly (as lavapipe does; WGSL
/// allows 2.5 ulp).
fn host_pooled_key(input: &Block, x: &[Complex32]) -> Vec<f32> {
    let value = |i: usize, part: usize| [x[i].re, x[i].im][part];
    let e = input.extents.map(|e| e as usize);
    let channel_axis = input.channel_axis;
    let (axis_a, axis_b) = match channel_axis {
        0 => (1, 2),
        2 => (0, 1),
        _ => (0, 2),
    };
    let strides = [e[1] * e[2], e[2], 1];
    let (na, nb) = (e[axis_a], e[axis_b]);
    let bin = |i: usize, n: usize| i * n / 3..((i + 1) * n).div_ceil(3);
    let mut key = Vec::with_capacity(18 * e[channel_axis]);
    for channel in 0..e[channel_axis] {
        for part in 0..2 {
            for bi in 0..3 {
                for bj in 0..3 {
                    let mut sum = 0f32;
                    for a in bin(bi, na) {
                        for b in bin(bj, nb) {
                            let i = channel * strides[channel_axis]
                                + a * strides[axis_a]
                                + b * strides[axis_b];
                            sum += value(i, part);
                        }
                    }
                    let cells = bin(bi, na).len() * bin(bj, nb).len();
                    key.push(sum / cells as f32);
                }
            }
        }
    }
    key
}

/// The normal equations of `candidates` against `x` in f64 (what the device's `dots` pass forms
/// in f32), for decisions on the host.
fn host_dots(x: &[Complex32], candidates: &[&[Complex32]]) -> gpu::Dots {
    use num_complex::Complex64;
    let inner = |a: &[Complex32], b: &[Complex32]| -> Complex64 {
        a.iter()
            .zip(b)
            .map(|(u, v)| {
                let (u, v) = (Complex64::new(u.re as f64, u.im as f64), v);
                u.conj() * Complex64::new(v.re as f64, v.im as f64)
            })
            .sum()
    };
    gpu::Dots {
        xx: inner(x, x).re,
        b: candidates.iter().map(|c| inner(c, x)).collect(),
        gram: candidates
            .iter()
            .map(|a| candidates.iter().map(|b| inner(a, b)).collect())
            .collect(),
    }
}

/// `|x - sum_i alpha_i c_i|^2` in f64, elementwise (what the device's `residuals` pass measures).
fn host_residual2(x: &[Complex32], combination: &[(&[Complex32], [f32; 2])]) -> f64 {
    use num_complex::Complex64;
    let c64 = |c: Complex32| Complex64::new(c.re as f64, c.im as f64);
    (0..x.len())
        .map(|k| {
            let fit: Complex64 = combination
                .iter()
                .map(|(c, a)| Complex64::new(a[0] as f64, a[1] as f64) * c64(c[k]))
                .sum();
            (c64(x[k]) - fit).norm_sqr()
        })
        .sum()
}

/// `sum_i alpha_i o_i` in f32, term by term in order (what the device's `reuse` pass forms).
fn host_combine(outputs: &[(&[Complex32], [f32; 2])]) -> Vec<Complex32> {
    let ((first, a), rest) = outputs.split_first().expect("a combination has a term");
    let a = Complex32::new(a[0], a[1]);
    let mut out: Vec<Complex32> = first.iter().map(|&o| a * o).collect();
    for (o, a) in rest {
        let a = Complex32::new(a[0], a[1]);
        out.iter_mut().zip(o.iter()).for_each(|(v, &o)| *v += a * o);
    }
    out
}

/// The output block of an entry once its download has landed: waits for the downloads in flight
/// (oldest first) until it has.
fn landed<'a>(ctx: &GpuContext, landing: &'a Landing) -> Result<&'a [Complex32], GpuError> {
    ctx.poll_downloads(false)?;
    while landing.get().is_none() {
        if !ctx.has_downloads_in_flight() {
            return Err(GpuError::Readback(
                "a stored chunk output's download was recorded but never submitted".into(),
            ));
        }
        ctx.wait_for_oldest_download()?;
    }
    Ok(landing.get().expect("landed"))
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

/// The items reused under a stage's budget: the smallest squared residuals first (ties in
/// order), while their sum stays within `budget`. A NaN ends the selection.
fn within_budget(residuals2: &[f64], budget: f64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..residuals2.len()).collect();
    order.sort_by(|&a, &b| residuals2[a].total_cmp(&residuals2[b]).then(a.cmp(&b)));
    let mut accepted = vec![false; residuals2.len()];
    let mut spent = 0.0;
    for i in order {
        // A NaN stays NaN here (f64::max would drop it) and fails the comparison.
        let r2 = residuals2[i];
        spent += if r2 < 0.0 { 0.0 } else { r2 };
        if spent <= budget {
            accepted[i] = true;
        } else {
            break;
        }
    }
    accepted
}

/// `|x| + sum |alpha_i| |c_i|` from the normal equations: the scale of a combination's f32
/// rounding (each stored output carries about F32_ROUNDING |F| |c_i|, scaled by |alpha_i|).
fn rounding_scale(d: &gpu::Dots, alphas: &[num_complex::Complex64]) -> f64 {
    alphas
        .iter()
        .enumerate()
        .map(|(i, a)| a.norm() * d.gram[i][i].re.max(0.0).sqrt())
        .sum::<f64>()
        + d.xx.sqrt()
}

/// The certified reuse of `combination`, whose input residual is (at most) `residual`: its
/// relative residual and the bound `|F| (residual + F32_ROUNDING rounding)` on its output error.
fn certified_reuse(
    combination: Combination,
    residual: f64,
    xx: f64,
    rounding: f64,
    norm: f64,
) -> Reuse {
    Reuse {
        combination,
        certificate: Some((
            residual / xx.sqrt(),
            norm * (residual + F32_ROUNDING * rounding),
        )),
    }
}

/// A chunk's least-squares combination on the device path, before its residual is settled.
struct Fitted {
    /// Wave position.
    j: usize,
    used: Combination,
    /// `|x|^2`
    xx: f64,
    /// `|x| + sum |alpha_i| |c_i|`: the scale of the combination's f32 rounding.
    rounding: f64,
    /// `|x - sum alpha_i c_i|^2` from the normal equations, and how far that may be off.
    estimate: f64,
    margin: f64,
}

impl Fitted {
    /// The reuse of this combination, whose residual is (at most) `residual`.
    fn reuse(self, residual: f64, norm: f64) -> Outcome {
        Outcome::Reuse(certified_reuse(
            self.used,
            residual,
            self.xx,
            self.rounding,
            norm,
        ))
    }
}

impl Memo {
    /// Sets up the cache of every stage of `op` (whose chunking fixes the reuse granularity) and,
    /// for the certified policies, gets `|U1|` and `|U2|` from the norm cache named by the
    /// environment ([`NormCache::from_env`]) or estimates them. Uses the operator's buffers as
    /// scratch.
    pub fn new(
        ctx: &GpuContext,
        op: &LaminoOperator,
        options: MemoOptions,
    ) -> Result<Self, MemoError> {
        Self::build(ctx, op, options, &NormCache::from_env(), None)
    }

    /// [`Memo::new`] for an operator applied to host arrays through `staging` (a streaming
    /// plan; `None`: device arrays): the norm estimate passes through it too, so the memo
    /// layer holds no whole array on the device.
    pub fn with_staging(
        ctx: &GpuContext,
        op: &LaminoOperator,
        options: MemoOptions,
        staging: Option<&Arc<Staging>>,
    ) -> Result<Self, MemoError> {
        Self::build(ctx, op, options, &NormCache::from_env(), staging)
    }

    /// [`Memo::new`] with the norms remembered in `cache`.
    pub fn with_norm_cache(
        ctx: &GpuContext,
        op: &LaminoOperator,
        options: MemoOptions,
        cache: &NormCache,
    ) -> Result<Self, MemoError> {
        Self::build(ctx, op, options, cache, None)
    }

    fn build(
        ctx: &GpuContext,
        op: &LaminoOperator,
        options: MemoOptions,
        cache: &NormCache,
        staging: Option<&Arc<Staging>>,
    ) -> Result<Self, MemoError> {
        let (norms, source, warnings) = if options.policy.is_certified() {
            let (n, source, warnings) = operator_norms(ctx, op, cache, staging)?;
            (n, Some(source), warnings)
        } else {
            let nan = OperatorNorms {
                u1: f64::NAN,
                u2: f64::NAN,
            };
            (nan, None, Vec::new())
        };
        let host_budget = options.host_bytes / 4;
        let max_binding = ctx.max_binding_bytes().min(ctx.max_buffer_bytes());
        let mut stages = Vec::new();
        for stage in Stage::ALL {
            let chunks = op.chunk_count(stage);
            let ios: Vec<(&Block, &Block)> = (0..chunks).map(|j| op.chunk_io(stage, j)).collect();
            let shape = Shape {
                chunks,
                in_max: ios.iter().map(|(i, _)| i.len()).max().unwrap_or(0),
                out_max: ios.iter().map(|(_, o)| o.len()).max().unwrap_or(0),
                key_max: ios
                    .iter()
                    .map(|(i, _)| 18 * i.extents[i.channel_axis])
                    .max()
                    .unwrap_or(0),
                // Streaming plans demote only entries with host copies, without a readback.
                host_tier: host_budget > 0 && staging.is_none(),
                audit: options.audit,
            };
            let mut stats = StageStats::new(stage);
            let (device, plan) = match options.policy.is_active() {
                true if !options.stages.contains(stage) => {
                    stats.disabled = Some(format!("not in --memo-stages {}", options.stages));
                    (None, None)
                }
                false => (None, None),
                true => match gpu::plan(&shape, options.device_bytes / 4, max_binding) {
                    Ok(plan) => {
                        let (input, output) = ios[0];
                        let buffers = (&input.buffer, &output.buffer);
                        let device = StageDevice::new(ctx, buffers, &shape, &plan)?;
                        (Some(device), Some(plan))
                    }
                    Err(why) => {
                        stats.disabled = Some(why);
                        (None, None)
                    }
                },
            };
            stats.slots = plan.map_or(0, |p| p.slots);
            stats.wave = plan.map_or(0, |p| p.wave);
            let norm = if stage.chunks_share_map() {
                norms.u1
            } else {
                norms.u2
            };
            stages.push(StageMemo {
                device,
                state: StageState {
                    stage,
                    plan,
                    store: Store::new(plan.map_or(0, |p| p.slots), host_budget, staging.is_none()),
                    indexes: HashMap::new(),
                    history: vec![VecDeque::new(); chunks],
                    norm,
                    stats,
                },
            });
        }
        Ok(Self {
            options,
            stages,
            primal: None,
            norms: source,
            warnings,
        })
    }

    /// The options in use.
    pub fn options(&self) -> &MemoOptions {
        &self.options
    }

    /// Device memory held by the caches and their kernels' buffers.
    pub fn device_bytes(&self) -> u64 {
        self.stages
            .iter()
            .filter_map(|s| s.device.as_ref())
            .map(StageDevice::device_bytes)
            .sum()
    }

    /// The certified tolerance the next stage application uses (`None` for the other policies).
    pub fn tolerance(&self) -> Option<f64> {
        self.options.policy.tolerance(self.primal)
    }

    /// Called by the solver after every outer iteration with its relative primal residual
    /// `|grad u - psi| / max(|grad u|, |psi|)`: `certified:auto` takes its tolerance from it.
    pub fn observe_primal_residual(&mut self, primal_relative: f64) {
        self.primal = Some(primal_relative);
    }

    /// Statistics so far.
    pub fn stats(&self) -> MemoStats {
        let mut stats = MemoStats::summarise(
            self.options.policy,
            self.stages.iter().map(|s| s.state.stats.clone()).collect(),
        );
        stats.tolerance = self.tolerance();
        stats.norms = self.norms.clone();
        stats.warnings = self.warnings.clone();
        stats
    }

    /// Records and submits `application` as [`LaminoOperator::record`] would, memoizing its
    /// gridding stages. Waits only for the readbacks the decisions need (at most three per wave
    /// of chunks); the last submission of each stage is left running.
    pub fn apply(
        &mut self,
        ctx: &GpuContext,
        op: &LaminoOperator,
        application: &Application,
    ) -> Result<(), MemoError> {
        let tol = self.tolerance();
        for (position, stage) in application.gridding_stages() {
            let active = stage.and_then(|stage| {
                self.stages
                    .iter_mut()
                    .find(|s| s.state.stage == stage && s.device.is_some())
            });
            match active {
                Some(s) => {
                    let device = s.device.as_ref().expect("active stages have a device side");
                    s.state
                        .apply(ctx, op, device, (application, position), &self.options, tol)?;
                }
                None => {
                    let mut rec = ctx.recorder("memo: plain stage");
                    op.record_stage(ctx, &mut rec, application, position)?;
                    ctx.submit(rec)?;
                }
            }
        }
        Ok(())
    }
}

/// What a wave needs besides the state: the operator, the application, the device side.
struct WaveContext<'a> {
    ctx: &'a GpuContext,
    op: &'a LaminoOperator,
    device: &'a StageDevice,
    application: &'a Application,
    position: usize,
    options: &'a MemoOptions,
}

impl WaveContext<'_> {
    /// Records the stage-in of chunk `c`'s input and its copy into its slot, unless it is there.
    fn record_stage_in(
        &self,
        rec: &mut crate::gpu::Recorder,
        c: &WaveChunk,
    ) -> Result<(), GpuError> {
        if !c.staged {
            self.op
                .record_chunk_in(self.ctx, rec, self.application, self.position, c.chunk)?;
            self.device
                .record_copy_in(self.ctx, rec, c.j, &c.input, c.slot);
        }
        Ok(())
    }

    /// The input values of the chunks of `wave`, from the host arrays their stage-ins read, so
    /// that they are keyed and decided on the host and only the chunks computed are uploaded;
    /// `None` if a chunk reads a device array.
    fn host_inputs(&self, wave: &[WaveChunk]) -> Result<Option<Vec<Vec<Complex32>>>, GpuError> {
        let mut inputs = Vec::with_capacity(wave.len());
        for c in wave {
            let uploads = self
                .op
                .chunk_uploads(self.application, self.position, c.chunk);
            if uploads.is_empty() {
                return Ok(None);
            }
            let blocks = uploads
                .into_iter()
                .map(|(field, view)| field.gather(self.ctx, view))
                .collect::<Result<Vec<_>, _>>()?;
            inputs.push(chunk_values(c.input.len() as usize, &blocks));
        }
        Ok(Some(inputs))
    }

    /// Records chunk `c`'s computation from its staged input, the copy of its output into its
    /// slot (when it will be stored) and its stage out.
    /// A chunk that will be stored with its output on the host also keeps the output's
    /// download as its host copy ([`WaveChunk::landing`]).
    fn record_compute(
        &self,
        rec: &mut crate::gpu::Recorder,
        c: &mut WaveChunk,
    ) -> Result<(), GpuError> {
        let d = self.device;
        self.record_stage_in(rec, c)?;
        d.record_restore(self.ctx, rec, c.j, &c.input, c.slot);
        self.op
            .record_chunk_compute(self.ctx, rec, c.stage, c.chunk)?;
        let mut tap: Option<crate::gpu::Completion> = None;
        if c.key.is_some() {
            d.record_store(self.ctx, rec, c.j, &c.output, c.slot);
            if c.output_on_host && self.options.host_bytes > 0 {
                let landing = Landing::default();
                let copy = landing.clone();
                tap = Some(Box::new(move |bytes: &[u8]| {
                    // Set once: the completion runs once.
                    let _ = copy.set(bytemuck::pod_collect_to_vec(bytes));
                }));
                c.landing = Some(landing);
            }
        }
        self.op
            .record_chunk_out(self.ctx, rec, self.application, self.position, c.chunk, tap)
    }

    /// Records every chunk decided `Compute` and not yet recorded.
    fn record_decided_computes(
        &self,
        rec: &mut crate::gpu::Recorder,
        wave: &mut [WaveChunk],
    ) -> Result<(), GpuError> {
        for c in wave.iter_mut() {
            if let Outcome::Compute { recorded: false } = c.outcome {
                self.record_compute(rec, c)?;
                c.outcome = Outcome::Compute { recorded: true };
            }
        }
        Ok(())
    }
}

impl StageState {
    /// The map class of a chunk: chunks of U1 with the same extents share one map.
    fn class(&self, input: &Block, chunk: usize) -> usize {
        if self.stage.chunks_share_map() {
            input.extents[input.channel_axis] as usize
        } else {
            chunk
        }
    }

    fn apply(
        &mut self,
        ctx: &GpuContext,
        op: &LaminoOperator,
        device: &StageDevice,
        (application, position): (&Application, usize),
        options: &MemoOptions,
        tol: Option<f64>,
    ) -> Result<(), MemoError> {
        let start = Instant::now();
        let wave = self.plan.expect("active stages have a plan").wave;
        let chunks: Vec<usize> = (0..op.chunk_count(self.stage)).collect();
        let w = WaveContext {
            ctx,
            op,
            device,
            application,
            position,
            options,
        };
        let mut trips = 0;
        for part in chunks.chunks(wave) {
            trips += self.run_wave(&w, part, tol)?;
        }
        self.stats.record_application(trips);
        self.stats.wall_ms += start.elapsed().as_secs_f64() * 1e3;
        let (device_bytes, host_bytes) = self.store.bytes();
        self.stats.record_bytes(device_bytes, host_bytes);
        Ok(())
    }

    /// Waits for `read` and counts it.
    fn wait<T>(
        &mut self,
        trips: &mut u64,
        read: impl FnOnce() -> Result<T, GpuError>,
    ) -> Result<T, GpuError> {
        let t = Instant::now();
        let r = read();
        self.stats.wait_ms += t.elapsed().as_secs_f64() * 1e3;
        *trips += 1;
        r
    }

    /// Forgets dropped entries in the indexes and histories.
    fn forget(&mut self, dropped: &[u64]) {
        for &id in dropped {
            for index in self.indexes.values_mut() {
                index.remove(id);
            }
            for history in &mut self.history {
                history.retain(|&e| e != id);
            }
        }
    }

    /// Handles the chunks `chunks` together; returns the round trips taken.
    fn run_wave(
        &mut self,
        w: &WaveContext<'_>,
        chunks: &[usize],
        tol: Option<f64>,
    ) -> Result<u64, MemoError> {
        let (ctx, dev) = (w.ctx, w.device);
        let plan = self.plan.expect("active stages have a plan");
        let mut trips = 0;
        // Slots for the staged inputs and the promotion reserve, demoting or dropping the least
        // recently used entries; demoted chunks are copied out before staging overwrites them.
        let claim = self
            .store
            .claim(chunks.len() + plan.reserve)
            .expect("the plan leaves room for a wave and the reserve");
        self.forget(&claim.dropped);
        self.stats.dropped += claim.dropped.len() as u64;
        self.stats.demoted += claim.demoted.len() as u64;
        let (staging, reserve) = claim.slots.split_at(chunks.len());
        let mut reserve = reserve.to_vec();
        let mut wave: Vec<WaveChunk> = chunks
            .iter()
            .zip(staging)
            .enumerate()
            .map(|(j, (&chunk, &slot))| {
                let (input, output) = w.op.chunk_io(self.stage, chunk);
                WaveChunk {
                    j,
                    chunk,
                    slot,
                    staged: false,
                    host_input: None,
                    output_on_host: w
                        .op
                        .chunk_download(w.application, w.position, chunk)
                        .is_some(),
                    landing: None,
                    class: self.class(input, chunk),
                    input: input.clone(),
                    output: output.clone(),
                    key: None,
                    outcome: Outcome::Open,
                    stage: self.stage,
                }
            })
            .collect();

        // Round trip 1: demotions out, inputs in, keys. Chunks whose inputs live on the host (a
        // streaming plan) are keyed and decided there: a reused one is never uploaded, and the
        // round trip is left out when nothing is demoted.
        let demoted_slots: Vec<usize> = claim.demoted.iter().map(|&(_, slot)| slot).collect();
        let host_inputs = match w.options.policy {
            MemoPolicy::Mlr { .. } => w.host_inputs(&wave)?,
            // Certified decisions on the host compare with host copies of the candidates'
            // inputs, which need host memory; without any they are made on the device.
            _ if self.store.keeps_host_copies() => w.host_inputs(&wave)?,
            _ => None,
        };
        let key_lens: Vec<u64> = match host_inputs {
            Some(_) => Vec::new(),
            None => wave
                .iter()
                .map(|c| 18 * c.input.extents[c.input.channel_axis])
                .collect(),
        };
        let (device_keys, demoted) = if host_inputs.is_none() || !demoted_slots.is_empty() {
            let mut rec = ctx.recorder("memo: stage in, keys");
            dev.record_demotions(ctx, &mut rec, &demoted_slots);
            if host_inputs.is_none() {
                for c in &mut wave {
                    w.record_stage_in(&mut rec, c)?;
                    c.staged = true;
                }
                let inputs: Vec<(&Block, usize)> =
                    wave.iter().map(|c| (&c.input, c.slot)).collect();
                dev.record_keys(ctx, &mut rec, &inputs);
            }
            ctx.submit(rec)?;
            self.wait(&mut trips, || {
                dev.read_keys(ctx, &key_lens, demoted_slots.len())
            })?
        } else {
            (Vec::new(), Vec::new())
        };
        let keys = match &host_inputs {
            Some(inputs) => wave
                .iter()
                .zip(inputs)
                .map(|(c, x)| host_pooled_key(&c.input, x))
                .collect(),
            None => device_keys,
        };
        let decide_on_host = host_inputs.is_some();
        for (c, x) in wave.iter_mut().zip(host_inputs.into_iter().flatten()) {
            c.host_input = Some(Arc::new(x));
        }
        let in_slot = dev.slot_offsets(0).1 as usize;
        for (&(id, _), data) in claim.demoted.iter().zip(demoted) {
            if let Some((li, lo)) = self.store.get(id).map(|e| e.lens) {
                let input = data[..li as usize].to_vec();
                let output = data[in_slot..in_slot + lo as usize].to_vec();
                self.store.fill_host(id, input, output);
            }
        }
        for (c, key) in wave.iter_mut().zip(&keys) {
            c.key = UnitKey::new(key);
            if c.key.is_none() {
                // A zero input has no direction to compare: computed, not stored.
                c.outcome = Outcome::Compute { recorded: false };
            }
        }

        match (w.options.policy, tol) {
            (MemoPolicy::Mlr { tau }, _) => self.mlr_decide(&mut wave, tau),
            (_, Some(tol)) if decide_on_host => self.certified_decide_on_host(w, &mut wave, tol),
            (_, Some(tol)) => {
                trips += self.certified_decide(w, &mut wave, tol, &mut reserve)?;
            }
            _ => unreachable!("active policies are mlr or certified"),
        }

        // The last submission: reused outputs formed on the device, the remaining chunks
        // computed. A reuse whose output goes unchanged into a host array and whose entries all
        // have host copies is formed on the host instead, after the submission: no transfer.
        let mut rec = ctx.recorder("memo: reuse, compute");
        let mut audited = Vec::new();
        let mut formed_on_host = Vec::new();
        for c in &mut wave {
            let Outcome::Reuse(reuse) = &c.outcome else {
                if let Outcome::Open = c.outcome {
                    c.outcome = Outcome::Compute { recorded: false };
                }
                continue;
            };
            let on_host = c.output_on_host
                && !w.options.audit
                && reuse
                    .combination
                    .iter()
                    .all(|&(id, _)| self.store.get(id).is_some_and(|e| e.host.output.is_some()));
            if on_host {
                formed_on_host.push(c.j);
                continue;
            }
            let mut combination: Combination = Vec::new();
            for &(id, alpha) in &reuse.combination {
                if !self.ensure_on_device(dev, ctx, id, &mut reserve)? {
                    break;
                }
                let slot = self.store.slot(id).expect("on the device");
                combination.push((dev.slot_offsets(slot).1, alpha));
            }
            if combination.len() < reuse.combination.len() {
                // An entry could not be brought back (no reserve slot left): computed.
                c.outcome = Outcome::Compute { recorded: false };
                continue;
            }
            if w.options.audit {
                w.record_stage_in(&mut rec, c)?;
                dev.record_restore(ctx, &mut rec, c.j, &c.input, c.slot);
                w.op.record_chunk_compute(ctx, &mut rec, self.stage, c.chunk)?;
                dev.record_audit_save(ctx, &mut rec, c.j, &c.output);
            }
            dev.record_reuse(ctx, &mut rec, c.j, &c.output, &combination);
            if w.options.audit {
                dev.record_audit_diff(ctx, &mut rec, c.j, &c.output);
                audited.push((c.j, reuse.certificate.map(|(_, bound)| bound)));
            }
            w.op.record_chunk_out(ctx, &mut rec, w.application, w.position, c.chunk, None)?;
        }
        w.record_decided_computes(&mut rec, &mut wave)?;
        if audited.is_empty() {
            ctx.submit(rec)?;
        } else {
            let positions: Vec<usize> = audited.iter().map(|a| a.0).collect();
            dev.record_audit_finish(ctx, &mut rec, &positions);
            ctx.submit(rec)?;
            let errors = self.wait(&mut trips, || dev.read_residuals(ctx, audited.len()))?;
            for (error2, (_, bound)) in errors.iter().zip(&audited) {
                self.stats.record_audit(error2.max(0.0).sqrt(), *bound);
            }
        }
        for j in formed_on_host {
            self.form_on_host(w, &wave[j])?;
        }

        // Bookkeeping: computed chunks become entries in their slots, reused ones free theirs.
        for c in wave {
            self.stats.chunks += 1;
            match c.outcome {
                Outcome::Reuse(reuse) => {
                    self.store.release(c.slot);
                    for &(id, _) in &reuse.combination {
                        self.store.touch(id);
                    }
                    self.stats.hits += 1;
                    if let Some((r, bound)) = reuse.certificate {
                        self.stats.record_bound(r, bound);
                    }
                }
                _ => {
                    self.stats.misses += 1;
                    let Some(key) = c.key else {
                        self.store.release(c.slot);
                        continue;
                    };
                    // Keyed by position: the chunk's old entry makes way for the new one.
                    if let MemoPolicy::Mlr { .. } = w.options.policy {
                        for old in std::mem::take(&mut self.history[c.chunk]) {
                            self.store.remove(old);
                        }
                    }
                    let lens = (c.input.len(), c.output.len());
                    let copies = HostCopies {
                        input: c.host_input,
                        output: c.landing,
                    };
                    // With both chunks on the host (a stage whose arrays are all there), the
                    // slot was only the chunk's workspace: the entry lives in host memory, so
                    // the cache is bounded by the host budget, not by the device's slots.
                    let host_only =
                        self.store
                            .insert_host(c.chunk, c.class, key.clone(), lens, copies.clone());
                    let (id, dropped) = match host_only {
                        Some(inserted) => {
                            self.store.release(c.slot);
                            inserted
                        }
                        None => {
                            self.store
                                .insert(c.chunk, c.class, key.clone(), lens, c.slot, copies)
                        }
                    };
                    self.forget(&dropped);
                    self.stats.dropped += dropped.len() as u64;
                    if w.options.policy.is_certified() {
                        self.indexes.entry(c.class).or_default().insert(id, key);
                    }
                    let history = &mut self.history[c.chunk];
                    history.push_front(id);
                    history.truncate(HISTORY);
                }
            }
        }
        for slot in reserve {
            self.store.release(slot);
        }
        Ok(trips)
    }

    /// Forms reused chunk `c`'s output on the host from its entries' host copies and writes it
    /// into the host array its stage-out downloads into.
    fn form_on_host(&mut self, w: &WaveContext<'_>, c: &WaveChunk) -> Result<(), MemoError> {
        let Outcome::Reuse(reuse) = &c.outcome else {
            unreachable!("only reuses are formed")
        };
        let mut terms = Vec::with_capacity(reuse.combination.len());
        for &(id, alpha) in &reuse.combination {
            let e = self.store.get(id).expect("a reused entry is live");
            let landing = e.host.output.as_ref().expect("checked before");
            terms.push((landed(w.ctx, landing)?, alpha));
        }
        let output = host_combine(&terms);
        let (field, view) =
            w.op.chunk_download(w.application, w.position, c.chunk)
                .expect("checked before");
        field.put(w.ctx, view, bytemuck::cast_slice(&output))?;
        self.stats.formed_on_host += 1;
        Ok(())
    }

    /// Makes sure entry `id` is in a device slot, promoting it from the host tier into a reserve
    /// slot if needed (the upload lands before the next submission). False if it cannot be had.
    fn ensure_on_device(
        &mut self,
        dev: &StageDevice,
        ctx: &GpuContext,
        id: u64,
        reserve: &mut Vec<usize>,
    ) -> Result<bool, GpuError> {
        let Some(e) = self.store.get(id) else {
            return Ok(false);
        };
        if let Tier::Device { .. } = e.tier {
            return Ok(true);
        }
        let (Some(input), Some(output), Some(&slot)) =
            (e.host.input.clone(), e.host.output.clone(), reserve.last())
        else {
            return Ok(false);
        };
        let output = landed(ctx, &output)?;
        if !self.store.promote(id, slot) {
            return Ok(false);
        }
        reserve.pop();
        let (input_at, output_at) = dev.slot_offsets(slot);
        ctx.write(dev.slab(), input_at, &input[..]);
        ctx.write(dev.slab(), output_at, output);
        self.stats.promotions += 1;
        Ok(true)
    }

    /// The reference's intended policy: each chunk against its own stored key only.
    fn mlr_decide(&mut self, wave: &mut [WaveChunk], tau: f64) {
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

    /// The candidates of every chunk of `wave`: its recent history, then the nearest keys of its
    /// map, with their key cosines, at most [`MAX_CANDIDATES`]. The searches only read the
    /// indexes, so they run in parallel, each answer deterministic.
    fn candidates(&mut self, wave: &[WaveChunk], neighbours: usize) -> Vec<Vec<(u64, f64)>> {
        let searched: Vec<(Vec<(u64, f64)>, f64)> = wave
            .par_iter()
            .map(|c| {
                let Some(key) = &c.key else {
                    return (Vec::new(), 0.0);
                };
                let mut candidates: Vec<(u64, f64)> = self.history[c.chunk]
                    .iter()
                    .filter_map(|&id| {
                        let e = self.store.get(id).filter(|e| e.class == c.class)?;
                        Some((id, key.cosine(&e.key)))
                    })
                    .collect();
                let t = Instant::now();
                if let Some(index) = self.indexes.get(&c.class) {
                    let known: Vec<u64> = candidates.iter().map(|c| c.0).collect();
                    candidates.extend(index.nearest(key, neighbours, |id| !known.contains(&id)));
                }
                candidates.truncate(MAX_CANDIDATES);
                (candidates, t.elapsed().as_secs_f64() * 1e3)
            })
            .collect();
        searched
            .into_iter()
            .map(|(candidates, ms)| {
                if ms > 0.0 {
                    self.stats.lookup_ms.push(ms);
                }
                candidates
            })
            .collect()
    }

    /// The certified policies for chunks whose inputs are on the host: the normal equations and
    /// the residual of every candidate combination in f64 against the entries' host input
    /// copies (candidates without one are left out), no transfer and no round trip.
    fn certified_decide_on_host(&mut self, w: &WaveContext<'_>, wave: &mut [WaveChunk], tol: f64) {
        let candidates = self.candidates(wave, w.options.neighbours);
        let store = &self.store;
        let norm = self.norm;
        // Per chunk compared: |x|^2, and the reuse with its squared residual if it has a
        // combination.
        type Compared = (f64, Option<(Reuse, f64)>);
        let compared: Vec<Option<Compared>> = wave
            .par_iter()
            .zip(&candidates)
            .map(|(c, candidates)| {
                let x = c.host_input.as_ref()?;
                c.key.as_ref()?;
                let kept: Vec<(u64, &[Complex32])> = candidates
                    .iter()
                    .filter_map(|&(id, _)| {
                        let input = store.get(id)?.host.input.as_ref()?;
                        Some((id, &input[..]))
                    })
                    .collect();
                let inputs: Vec<&[Complex32]> = kept.iter().map(|k| k.1).collect();
                let d = host_dots(x, &inputs);
                let fit = || {
                    let (alphas, _) = least_squares(&d).filter(|_| tol > 0.0)?;
                    let used: Vec<(u64, &[Complex32], [f32; 2])> = kept
                        .iter()
                        .zip(&alphas)
                        .filter(|(_, a)| a.norm() > 0.0)
                        .map(|(&(id, input), a)| (id, input, [a.re as f32, a.im as f32]))
                        .collect();
                    if used.is_empty() {
                        return None;
                    }
                    let fit: Vec<(&[Complex32], [f32; 2])> =
                        used.iter().map(|&(_, input, a)| (input, a)).collect();
                    let residual2 = host_residual2(x, &fit);
                    let reuse = certified_reuse(
                        used.iter().map(|&(id, _, a)| (id, a)).collect(),
                        residual2.sqrt(),
                        d.xx,
                        rounding_scale(&d, &alphas),
                        norm,
                    );
                    Some((reuse, residual2))
                };
                Some((d.xx, fit()))
            })
            .collect();
        // The stage's budget (see `certified_decide`), over the chunks compared here.
        let budget = tol * tol * compared.iter().flatten().map(|c| c.0).sum::<f64>();
        let residuals2: Vec<f64> = compared
            .iter()
            .flatten()
            .filter_map(|c| c.1.as_ref().map(|fit| fit.1))
            .collect();
        let mut accepted = within_budget(&residuals2, budget).into_iter();
        let decided: Vec<Option<Reuse>> = compared
            .into_iter()
            .map(|c| {
                let (reuse, _) = c?.1?;
                accepted.next().expect("one per fit").then_some(reuse)
            })
            .collect();
        for (c, reuse) in wave.iter_mut().zip(decided) {
            if c.key.is_some() {
                c.outcome = match reuse {
                    Some(reuse) => Outcome::Reuse(reuse),
                    None => Outcome::Compute { recorded: false },
                };
            }
        }
    }

    /// The certified policies: candidates, normal equations, residuals; returns the round trips
    /// taken (at most two).
    fn certified_decide(
        &mut self,
        w: &WaveContext<'_>,
        wave: &mut [WaveChunk],
        tol: f64,
        reserve: &mut Vec<usize>,
    ) -> Result<u64, MemoError> {
        let (ctx, dev) = (w.ctx, w.device);
        let mut trips = 0;
        let candidates = self.candidates(wave, w.options.neighbours);
        let mut on_device: Vec<Vec<u64>> = Vec::with_capacity(wave.len());
        for candidates in candidates {
            // In priority order (the chunk's history first). Bringing a host entry back costs an
            // upload: only for keys that point the same way (a small residual needs nearly
            // proportional keys).
            let mut kept = Vec::new();
            for (id, cosine) in candidates {
                let on_host = self.store.get(id).map(|e| e.tier) == Some(Tier::Host);
                if on_host && cosine < PROMOTE_COSINE {
                    continue;
                }
                if self.ensure_on_device(dev, ctx, id, reserve)? {
                    kept.push(id);
                }
            }
            on_device.push(kept);
        }
        for (c, kept) in wave.iter_mut().zip(&on_device) {
            if c.key.is_some() && kept.is_empty() {
                c.outcome = Outcome::Compute { recorded: false };
            }
        }

        // Round trip 2: the normal equations of every chunk with candidates; the chunks without
        // are computed meanwhile.
        let compared: Vec<usize> = (0..wave.len())
            .filter(|&j| matches!(wave[j].outcome, Outcome::Open))
            .collect();
        let mut rec = ctx.recorder("memo: normal equations");
        let slot_in = |store: &Store, id: u64| -> u64 {
            dev.slot_offsets(store.slot(id).expect("candidates are on the device"))
                .0
        };
        let jobs: Vec<(&Block, usize, Vec<u64>)> = compared
            .iter()
            .map(|&j| {
                let offsets = on_device[j]
                    .iter()
                    .map(|&id| slot_in(&self.store, id))
                    .collect();
                (&wave[j].input, wave[j].slot, offsets)
            })
            .collect();
        dev.record_dots(ctx, &mut rec, &jobs);
        drop(jobs);
        w.record_decided_computes(&mut rec, wave)?;
        ctx.submit(rec)?;
        if compared.is_empty() {
            return Ok(trips);
        }
        let counts: Vec<usize> = compared.iter().map(|&j| on_device[j].len()).collect();
        let dots = self.wait(&mut trips, || dev.read_dots(ctx, &counts))?;

        // The least-squares combinations. The stage's budget is tol^2 of the compared chunks'
        // |x|^2: the reused chunks' squared residuals together stay within it. The estimate from
        // the normal equations is off by at most `margin` (f32 sums): a combination whose
        // estimate plus margin fits is accepted as it stands; those that might fit in what is
        // left are measured elementwise.
        let budget = tol * tol * dots.iter().map(|d| d.xx).sum::<f64>();
        let mut fitted: Vec<Fitted> = Vec::new();
        for (&j, d) in compared.iter().zip(&dots) {
            let Some((alphas, estimate)) = least_squares(d).filter(|_| tol > 0.0) else {
                wave[j].outcome = Outcome::Compute { recorded: false };
                continue;
            };
            let used: Combination = on_device[j]
                .iter()
                .zip(&alphas)
                .filter(|(_, a)| a.norm() > 0.0)
                .map(|(&id, a)| (id, [a.re as f32, a.im as f32]))
                .collect();
            let rounding = rounding_scale(d, &alphas);
            fitted.push(Fitted {
                j,
                used,
                xx: d.xx,
                rounding,
                estimate: estimate * d.xx,
                margin: dev.sum_rounding(wave[j].input.len()) * rounding * rounding,
            });
        }
        let upper: Vec<f64> = fitted.iter().map(|f| f.estimate + f.margin).collect();
        let sure = within_budget(&upper, budget);
        let spent: f64 = upper.iter().zip(&sure).filter(|s| *s.1).map(|s| s.0).sum();
        let left = budget - spent;
        let (sure, unsure): (Vec<_>, Vec<_>) = fitted.into_iter().zip(sure).partition(|f| f.1);
        for (f, _) in sure {
            let (j, residual) = (f.j, (f.estimate + f.margin).sqrt());
            wave[j].outcome = f.reuse(residual, self.norm);
        }
        let lower: Vec<f64> = unsure
            .iter()
            .map(|(f, _)| (f.estimate - f.margin).max(0.0))
            .collect();
        let mut measured = Vec::new();
        for ((f, _), promising) in unsure.into_iter().zip(within_budget(&lower, left)) {
            if promising {
                measured.push(f);
            } else {
                wave[f.j].outcome = Outcome::Compute { recorded: false };
            }
        }

        // Round trip 3, when some combination needs measuring: the residuals, measured
        // elementwise; the chunks the estimates rejected are computed meanwhile.
        let mut rec = ctx.recorder("memo: residuals");
        let jobs: Vec<(&Block, usize, Combination)> = measured
            .iter()
            .map(|f| {
                let sources = f
                    .used
                    .iter()
                    .map(|&(id, a)| (slot_in(&self.store, id), a))
                    .collect();
                (&wave[f.j].input, wave[f.j].slot, sources)
            })
            .collect();
        dev.record_residuals(ctx, &mut rec, &jobs);
        drop(jobs);
        w.record_decided_computes(&mut rec, wave)?;
        ctx.submit(rec)?;
        if measured.is_empty() {
            return Ok(trips);
        }
        let residuals = self.wait(&mut trips, || dev.read_residuals(ctx, measured.len()))?;
        let accepted = within_budget(&residuals, left);
        for ((f, residual2), accepted) in measured.into_iter().zip(residuals).zip(accepted) {
            let j = f.j;
            wave[j].outcome = if accepted {
                f.reuse(residual2.max(0.0).sqrt(), self.norm)
            } else {
                Outcome::Compute { recorded: false }
            };
        }
        Ok(trips)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::{Geometry, OperatorOptions};
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
    fn the_budget_takes_the_smallest_residuals_first_and_refuses_nan() {
        // 1 + 1 + 2 = 4 fits a budget of 4; adding 3 would not.
        assert_eq!(
            within_budget(&[3.0, 1.0, 2.0, 1.0], 4.0),
            [false, true, true, true]
        );
        assert_eq!(within_budget(&[5.0, 0.0], 4.0), [false, true]);
        // Rounding may leave a tiny negative estimate: it costs nothing.
        assert_eq!(within_budget(&[-1e-9, 4.0], 4.0), [true, true]);
        assert_eq!(
            within_budget(&[1.0, f64::NAN, 0.5], 10.0),
            [true, false, true]
        );
        assert_eq!(within_budget(&[1.0], f64::NAN), [false]);
        assert_eq!(within_budget(&[], 1.0), Vec::<bool>::new());
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

    /// The norm estimate of a streaming operator (iterates in host memory, through staging
    /// buffers) is the device estimate's, bit for bit.
    #[test]
    fn the_norm_estimate_through_host_arrays_is_the_device_estimate() {
        let ctx = ctx();
        let g = Geometry::cube(16, 8, 2.0);
        let options = OperatorOptions {
            max_chunk_y: Some(4),
            max_chunk_rows: Some(4),
            ..OperatorOptions::default()
        };
        let op = LaminoOperator::new(&ctx, &g, &options).unwrap();
        let staging = Arc::new(Staging::new(&ctx, Space::Data.layout(&g, 2).words()).unwrap());
        for pair in [
            (Apply::Usfft1d, Apply::Usfft1dAdjoint),
            (Apply::Usfft2d, Apply::Usfft2dAdjoint),
        ] {
            let device = operator_norm(&ctx, &op, pair, None).unwrap();
            let host = operator_norm(&ctx, &op, pair, Some(&staging)).unwrap();
            assert!(device > 0.0, "{pair:?}: {device}");
            assert_eq!(
                device.to_bits(),
                host.to_bits(),
                "{pair:?}: {device} {host}"
            );
        }
    }

    #[test]
    fn a_wave_stages_every_chunk_and_its_keys_are_the_reference_pooling() {
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
            let chunks = op.chunk_count(stage);
            let ios: Vec<(&Block, &Block)> = (0..chunks).map(|j| op.chunk_io(stage, j)).collect();
            let shape = Shape {
                chunks,
                in_max: ios[0].0.len(),
                out_max: ios[0].1.len(),
                key_max: 18 * ios[0].0.extents[ios[0].0.channel_axis],
                host_tier: true,
                audit: false,
            };
            let plan = gpu::plan(&shape, 1 << 30, ctx.max_binding_bytes()).unwrap();
            assert_eq!(plan.wave, chunks, "{stage:?}");
            let buffers = (&ios[0].0.buffer, &ios[0].1.buffer);
            let dev = StageDevice::new(&ctx, buffers, &shape, &plan).unwrap();
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
            // Slots in reverse, so that slot and chunk differ.
            let slot = |j: usize| chunks - 1 - j;
            let mut rec = ctx.recorder("test");
            for (j, (input, _)) in ios.iter().enumerate() {
                op.record_chunk_in(&ctx, &mut rec, &application, 0, j)
                    .unwrap();
                dev.record_copy_in(&ctx, &mut rec, j, input, slot(j));
            }
            let inputs: Vec<(&Block, usize)> = ios
                .iter()
                .enumerate()
                .map(|(j, io)| (io.0, slot(j)))
                .collect();
            dev.record_keys(&ctx, &mut rec, &inputs);
            ctx.submit(rec).unwrap();
            let lens: Vec<u64> = ios
                .iter()
                .map(|(i, _)| 18 * i.extents[i.channel_axis])
                .collect();
            let (keys, demoted) = dev.read_keys(&ctx, &lens, 0).unwrap();
            assert!(demoted.is_empty());
            for (j, (input, _)) in ios.iter().enumerate() {
                let e = input.extents.map(|e| e as usize);
                let staged: Vec<Complex32> = ctx
                    .read(dev.slab(), dev.slot_offsets(slot(j)).0, e.iter().product())
                    .unwrap();
                let want = crate::reference::pooled_key(
                    &staged,
                    0,
                    [e[1] * e[2], e[2], 1],
                    e,
                    input.channel_axis,
                );
                assert_eq!(keys[j].len(), want.len(), "{stage:?}");
                // The key pooled on the host from the same block (as a complex, a real and a
                // difference source) has the device key's bits.
                let words: Vec<f32> = bytemuck::cast_slice(&staged).to_vec();
                let n = staged.len();
                let key_of = |blocks: &[Vec<f32>]| host_pooled_key(input, &chunk_values(n, blocks));
                let host = key_of(std::slice::from_ref(&words));
                assert_eq!(host, keys[j], "{stage:?} chunk {j}: host key");
                let re: Vec<f32> = staged.iter().map(|c| c.re).collect();
                let real = key_of(std::slice::from_ref(&re));
                let zero = vec![0.0; words.len()];
                let difference = key_of(&[words.clone(), zero]);
                assert_eq!(difference, keys[j], "{stage:?} chunk {j}: difference");
                for (k, (r, h)) in real.iter().zip(&host).enumerate() {
                    // Key value k pools the real part when (k / 9) is even, else the imaginary
                    // part, which a real source has as zero.
                    let want = if (k / 9) % 2 == 0 { *h } else { 0.0 };
                    assert_eq!(
                        r.to_bits(),
                        want.to_bits(),
                        "{stage:?} chunk {j} real key[{k}]"
                    );
                }
                for (i, (&got, &w)) in keys[j].iter().zip(&want).enumerate() {
                    assert!(
                        (got as f64 - w).abs() <= 1e-6 * (1.0 + w.abs()),
                        "{stage:?} chunk {j} key[{i}]: {got} vs {w}"
                    );
                }
                // The operator's input block still holds the last chunk: its staged copy is the
                // same bits (the last chunk is the short one).
                if j + 1 == chunks {
                    let local: Vec<Complex32> = ctx
                        .read(&input.buffer, 0, (input.buffer.bytes() / 8) as usize)
                        .unwrap();
                    let v = input.view;
                    for (k, value) in staged.iter().enumerate() {
                        let (a, b, c) = (k / (e[1] * e[2]), (k / e[2]) % e[1], k % e[2]);
                        let at = v.offset as usize
                            + a * v.strides[0] as usize
                            + b * v.strides[1] as usize
                            + c * v.strides[2] as usize;
                        assert_eq!(value.re.to_bits(), local[at].re.to_bits());
                        assert_eq!(value.im.to_bits(), local[at].im.to_bits());
                    }
                }
            }
        }
    }

    #[test]
    fn the_plan_fits_the_budget_and_shrinks_the_wave_before_giving_up() {
        let shape = Shape {
            chunks: 8,
            in_max: 1000,
            out_max: 1000,
            key_max: 144,
            host_tier: true,
            audit: false,
        };
        let slot = 16_000;
        let plan = gpu::plan(&shape, 1 << 30, 1 << 30).unwrap();
        assert_eq!(plan.wave, 8);
        assert_eq!(plan.demote_slots, 8 + gpu::RESERVE);
        // 30 slots' worth cannot hold a wave of 8 (its staging, the reserve, one more wave and
        // the outbox for the demotions): the wave shrinks.
        let small = gpu::plan(&shape, 30 * slot, 1 << 30).unwrap();
        assert!(small.wave < 8 && small.wave >= 1, "{small:?}");
        assert!(small.slots >= 2 * small.wave + small.reserve, "{small:?}");
        let none = gpu::plan(&shape, 5 * slot, 1 << 30).unwrap_err();
        assert!(none.contains("device budget"), "{none}");
        // Without a host tier the outbox needs no room for demotions.
        let plan = gpu::plan(
            &Shape {
                host_tier: false,
                ..shape
            },
            1 << 30,
            1 << 30,
        )
        .unwrap();
        assert_eq!(plan.demote_slots, 0);
    }
}
