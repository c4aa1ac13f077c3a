//! Memoization of the gridding stages across solver iterations (docs/operator-method.md,
//! "Memoization", done as the paper intends and with a certified alternative).
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
//!
//! The parts: `stage` sets up and applies one stage, `wave` takes a wave through its round
//! trips, `mlr` and `certify` decide (their arithmetic in `fit`), `reuse` forms reused outputs,
//! `keys` keys chunks on the host, `operator_norm` estimates `|F|`; `gpu` is the device side,
//! [`store`] and [`index`] hold the entries and their keys.

mod gpu;
pub mod index;
pub mod norm_cache;
mod policy;
mod stats;
pub mod store;

// The layer's own steps (the parts named above).
mod certify;
mod chunk;
mod fit;
mod keys;
mod mlr;
mod operator_norm;
mod reuse;
mod stage;
mod wave;

pub use norm_cache::{NormCache, NormSource, OperatorNorms, CACHE_DIR_ENV};
pub use policy::{
    MemoOptions, MemoPolicy, MemoStages, PolicyParseError, StagesParseError, AUTO_CAP, AUTO_FLOOR,
    AUTO_SCALE,
};
pub use stats::{MemoStats, StageStats};

use std::sync::Arc;

use thiserror::Error;

use crate::array::{Staging, StorageError};
use crate::gpu::GpuContext;
use crate::gpu::GpuError;
use crate::operator::{Application, LaminoOperator, OperatorError, Stage};
use gpu::StageDevice;
use operator_norm::operator_norms;
use stage::StageMemo;

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
        let stages = Stage::ALL
            .into_iter()
            .map(|stage| StageMemo::new(ctx, op, stage, &options, &norms, staging))
            .collect::<Result<Vec<_>, _>>()?;
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
                    op.record_stage(ctx, &mut rec, application, position, None)?;
                    ctx.submit(rec)?;
                }
            }
        }
        Ok(())
    }
}
