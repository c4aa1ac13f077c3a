//! The ADMM-TV iteration on GPU arrays. One outer iteration is recorded without waiting: the CG
//! step length and direction coefficients are computed on the GPU (`shaders/solver/scalars.wgsl`)
//! and the vector kernels read them, so the host waits once per outer iteration, for the one
//! small readback of every reduction result (the Lagrangian terms, the convergence measures and
//! the penalty decision need them).

use std::cell::RefCell;
use std::ops::Range;
use std::path::Path;

use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::checkpoint::{Checkpoint, CheckpointError};
use super::vector::{Kernel, Target, VectorOp};
use crate::params::{AdmmParams, Convergence, InnerSolver};
use std::sync::Arc;

use crate::array::{
    Coef, Field, PlaneLayout, Residency, Scalars, Slot, Staging, StorageError, SumSlot,
};
use crate::distributed::team::Share;
use crate::gpu::GpuError;
use crate::gpu::{Bound, GpuContext, KernelSpec, Recorder};
use crate::hash::{fnv1a, fnv1a_continue, FNV_OFFSET};
use crate::memo::{Memo, MemoError, MemoOptions, MemoStats};
use crate::operator::{
    Application, Apply, Geometry, LaminoOperator, OperatorError, OperatorOptions, Sink, Source,
};
use crate::plan::{Array, MemoryPlan, PlanError};
use crate::shaders;

/// Errors of the solver.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SolverError {
    #[error(transparent)]
    Operator(#[from] OperatorError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Memo(#[from] MemoError),
    #[error(transparent)]
    Parameter(#[from] crate::params::InvalidParameter),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The data do not have the geometry's shape.
    #[error("the data hold {got} values, but the geometry needs {expected} (ntheta, deth, detw)")]
    DataShape { expected: usize, got: usize },
    /// A checkpoint does not belong to this reconstruction.
    #[error("the checkpoint was written for a different {what}; refusing to resume from it")]
    CheckpointMismatch { what: &'static str },
    /// A checkpoint file could not be written or read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A run on several devices was given none.
    #[error("no device was given")]
    NoDevices,
    /// A run on several devices was given a plan that keeps arrays on one device.
    #[error(
        "a run on several devices needs a plan that keeps every array in host memory (plan_shared)"
    )]
    TeamPlan,
    /// The devices of a multi-device run chunk the operator's stages differently.
    #[error("device {device} chunks the stages as {chunks:?} (y rows, detector rows, angles), the first device as {first:?}: run these devices separately")]
    TeamChunks {
        device: String,
        chunks: (usize, usize, usize),
        first: (usize, usize, usize),
    },
    /// Memoization was asked for on several devices.
    #[error("memoization runs on one device: drop --memo or run on one device")]
    TeamMemo,
    /// A non-finite value appeared (bad input or a diverging iteration).
    #[error("{what} became non-finite at outer iteration {iteration}")]
    NonFinite {
        what: &'static str,
        iteration: usize,
    },
}

/// The Lagrangian terms and residuals after one outer iteration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IterationReport {
    pub iteration: usize,
    /// `|L u - d|^2`
    pub data_term: f64,
    /// `alpha sum |psi|_2`
    pub tv_term: f64,
    /// `<lambda, grad u - psi>`
    pub dual_term: f64,
    /// `rho |grad u - psi|^2`
    pub penalty_term: f64,
    /// `data_term / 2 + tv_term + dual_term + penalty_term / 2`
    pub lagrangian: f64,
    /// `|psi - grad u|^2`
    pub primal_residual: f64,
    /// `|rho (grad u - grad u_previous)|^2`
    pub dual_residual: f64,
    /// The penalty used in this iteration.
    pub rho: f64,
    /// `|u_k - u_{k-1}| / |u_k|` (the convergence test's first measure).
    pub change: f64,
    /// `|grad u - psi| / max(|grad u|, |psi|)`.
    pub primal_relative: f64,
    /// `rho |grad u_k - grad u_{k-1}| / max(|lambda|, rho |grad u|)`.
    pub dual_relative: f64,
}

impl IterationReport {
    /// Whether this iteration meets `c`.
    pub fn converged(&self, c: &Convergence) -> bool {
        // Written so that NaN never counts as converged.
        self.change <= c.change && self.primal_relative <= c.primal && self.dual_relative <= c.dual
    }
}

/// `num / den` where a zero numerator is zero change whatever the scale (all-zero iterates, as
/// from all-zero data, have converged), so the measures never become 0/0.
fn relative(num: f64, den: f64) -> f64 {
    if num == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// Why the outer iteration stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The convergence test passed at this many iterations.
    Converged,
    /// The safety net: the most iterations allowed ran without the test passing.
    MaxIterations,
    /// Exactly the requested number of iterations ran (no convergence test).
    Exactly,
    /// Cancelled by the caller (a checkpoint holds the state).
    Cancelled,
}

impl StopReason {
    /// A sentence for people.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Converged => "converged (change, primal and dual residuals below tolerance)",
            Self::MaxIterations => {
                "NOT converged: the maximum number of iterations ran first (raise --max-iterations)"
            }
            Self::Exactly => "the requested number of iterations ran",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Coefficient slots: the host writes the penalty's once per outer iteration, the scalar kernels
/// the CG step's.
mod slot {
    use crate::array::Slot;
    pub const RHO: Slot = Slot(1);
    pub const NEG_RHO: Slot = Slot(2);
    pub const INV_RHO: Slot = Slot(3);
    pub const NEG_INV_RHO: Slot = Slot(4);
    pub const ALPHA_OVER_RHO: Slot = Slot(5);
    pub const INV_N: Slot = Slot(6);
    pub const STEP: Slot = Slot(7);
    pub const NEG_STEP: Slot = Slot(8);
    pub const NEG_STEP_RHO: Slot = Slot(9);
    pub const BETA: Slot = Slot(10);
    pub const GAMMA: Slot = Slot(11);
    pub const COUNT: usize = 12;
}

/// Reduction-result slots, read together once per outer iteration.
mod sum {
    use crate::array::SumSlot;
    pub const RR: SumSlot = SumSlot(0);
    pub const RR_NEW: SumSlot = SumSlot(1);
    pub const APAP: SumSlot = SumSlot(2);
    pub const GPGP: SumSlot = SumSlot(3);
    pub const P_RPREV: SumSlot = SumSlot(4);
    pub const P_R: SumSlot = SumSlot(5);
    pub const PRIMAL: SumSlot = SumSlot(6);
    pub const DUAL: SumSlot = SumSlot(7);
    pub const DATA: SumSlot = SumSlot(8);
    pub const ISO: SumSlot = SumSlot(9);
    pub const LAMBDA_DOT: SumSlot = SumSlot(10);
    pub const CHANGE: SumSlot = SumSlot(11);
    pub const UU: SumSlot = SumSlot(12);
    pub const GUGU: SumSlot = SumSlot(13);
    pub const PSIPSI: SumSlot = SumSlot(14);
    pub const LAMBDA: SumSlot = SumSlot(15);
    pub const COUNT: usize = 16;
}

/// The arrays of the solver. Persistent across outer iterations: u, psi, lambda, grad u, A u (a
/// checkpoint holds them) and the data D; the rest is rebuilt every outer iteration.
#[derive(Clone)]
pub(crate) struct Fields {
    u: Field,
    u_prev: Field,
    psi: Field,
    lambda: Field,
    grad_u: Field,
    h0: Field,
    r: Field,
    p: Field,
    grad_p: Field,
    r_prev: Field,
    dhat: Field,
    au: Field,
    ap: Field,
}

/// Every vector call site, built once.
struct Ops {
    save_u_prev: VectorOp,
    save_h0: VectorOp,
    r_add_tv_gradient: VectorOp,
    dot_rr: VectorOp,
    p_update: VectorOp,
    grad_p: VectorOp,
    dot_apap: VectorOp,
    dot_gpgp: VectorOp,
    u_move: VectorOp,
    au_move: VectorOp,
    grad_u_move: VectorOp,
    r_sub_tv_curvature: VectorOp,
    dot_rr_new: VectorOp,
    r_prev_from_r: VectorOp,
    dot_p_rprev: VectorOp,
    dot_p_r: VectorOp,
    u_move_fixed: VectorOp,
    grad_u_move_fixed: VectorOp,
    psi_shrink: VectorOp,
    lambda_update: VectorOp,
    sums: Vec<VectorOp>,
}

/// The operator applications of the iteration, bound once.
struct Apps {
    /// `r = (1/N) Re A*(D - A u)`
    residual: Application,
    /// `A p`
    forward_p: Application,
    /// `r += (-s/N) Re A*(A p)`
    r_sub_data_curvature: Application,
    /// `A u` (the reference's inner solver recomputes it)
    forward_u: Application,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ScalarParams {
    rr: u32,
    rr_new: u32,
    apap: u32,
    gpgp: u32,
    p_rprev: u32,
    p_r: u32,
    inv_n: u32,
    rho: u32,
    step: u32,
    neg_step: u32,
    neg_step_rho: u32,
    beta: u32,
}

/// The scalar kernels, bound once.
struct ScalarSteps {
    cg_step: Bound,
    cg_beta: Bound,
    dy_beta: Bound,
}

impl ScalarSteps {
    fn new(ctx: &GpuContext, scalars: &Scalars) -> Result<Self, GpuError> {
        let params = ctx.uniform(
            "scalar params",
            &ScalarParams {
                rr: sum::RR.0,
                rr_new: sum::RR_NEW.0,
                apap: sum::APAP.0,
                gpgp: sum::GPGP.0,
                p_rprev: sum::P_RPREV.0,
                p_r: sum::P_R.0,
                inv_n: slot::INV_N.0,
                rho: slot::RHO.0,
                step: slot::STEP.0,
                neg_step: slot::NEG_STEP.0,
                neg_step_rho: slot::NEG_STEP_RHO.0,
                beta: slot::BETA.0,
            },
        )?;
        let bind = |entry| -> Result<Bound, GpuError> {
            ctx.kernel(&KernelSpec {
                shader: &shaders::SOLVER_SCALARS,
                entry,
                overrides: Vec::new(),
            })?
            .bind(
                ctx,
                &[
                    scalars.sums().into(),
                    scalars.coefficients().into(),
                    (&params).into(),
                ],
            )
        };
        Ok(Self {
            cg_step: bind("cg_step")?,
            cg_beta: bind("cg_beta")?,
            dy_beta: bind("dy_beta")?,
        })
    }
}

/// Every array, bound kernel and operator application of one reconstruction, built once.
pub struct AdmmSolver {
    op: LaminoOperator,
    params: AdmmParams,
    n_fourier: f64,
    rho: f64,
    iteration: usize,
    scalars: Scalars,
    fields: Fields,
    ops: Ops,
    apps: Apps,
    steps: ScalarSteps,
    data_hash: u64,
    /// The staging buffers host arrays pass through (streaming plans only).
    staging: Option<Arc<Staging>>,
    memo: Option<RefCell<Memo>>,
    /// The report of the last iteration done (also restored from a checkpoint).
    last: Option<IterationReport>,
    /// The hash of each projection this member read (an MPI rank's are combined with the
    /// others' into the hash of the data).
    #[cfg(feature = "mpi")]
    projection_hashes: Vec<u64>,
}

impl AdmmSolver {
    /// Builds the operator and every array on the device (chunks no larger than `options`
    /// allow), and moves `data` (spatial projections, `(ntheta, deth, detw)` row-major) to the
    /// Fourier domain.
    pub fn new(
        ctx: &GpuContext,
        geometry: &Geometry,
        data: &[f32],
        params: AdmmParams,
        options: &OperatorOptions,
    ) -> Result<Self, SolverError> {
        let plan = MemoryPlan::in_core(ctx, geometry, &params, options)?;
        Self::with_plan(ctx, geometry, data, params, &plan)
    }

    /// As [`new`](Self::new), with every array where `plan` puts it and the chunks it chose.
    pub fn with_plan(
        ctx: &GpuContext,
        geometry: &Geometry,
        data: &[f32],
        params: AdmmParams,
        plan: &MemoryPlan,
    ) -> Result<Self, SolverError> {
        if data.len() != geometry.data_len() {
            return Err(SolverError::DataShape {
                expected: geometry.data_len(),
                got: data.len(),
            });
        }
        Self::with_plan_from(ctx, geometry, data, params, plan)
    }

    /// As [`with_plan`](Self::with_plan), with the projections handed over a block of angles
    /// at a time, so that they are never held twice: the solver keeps its own copy only where
    /// `plan` puts the spatial projections (see [`MemoryPlan::projections_residency`]), and only
    /// until they are in the Fourier domain.
    pub fn with_plan_from(
        ctx: &GpuContext,
        geometry: &Geometry,
        data: &(impl ProjectionBlocks + ?Sized),
        params: AdmmParams,
        plan: &MemoryPlan,
    ) -> Result<Self, SolverError> {
        let all = 0..geometry.ntheta();
        Self::build(ctx, geometry, Some((data, all)), params, plan, None)
    }

    /// As [`with_plan_from`](Self::with_plan_from), alone or as a member of a multi-device team
    /// (its arrays the team's, its work its share). `fill` gives the projections and the ones
    /// this member writes into the shared array (the hash covers them all): a team of threads
    /// has its first member write them all, an MPI rank writes its own.
    pub(crate) fn build<D: ProjectionBlocks + ?Sized>(
        ctx: &GpuContext,
        geometry: &Geometry,
        fill: Option<(&D, Range<usize>)>,
        params: AdmmParams,
        plan: &MemoryPlan,
        member: Option<(&TeamArrays, &Arc<Share>)>,
    ) -> Result<Self, SolverError> {
        params.validate()?;
        let g = geometry;
        let mut op = LaminoOperator::with_residency(
            ctx,
            geometry,
            &plan.operator,
            plan.residency(Array::Spectrum),
            &plan.u2_tables,
        )?;
        if let Some((arrays, share)) = member {
            op = op.into_member(arrays.spectrum.clone(), share.clone());
        }
        let share = member.map(|(_, share)| share);
        let scalars = Scalars::new(ctx, slot::COUNT, sum::COUNT)?;
        let staging = match plan.staging_words {
            0 => None,
            words => {
                ctx.set_readback_pool_bytes(2 * words as u64 * 4);
                Some(Arc::new(Staging::new(ctx, words)?))
            }
        };
        let fields = match member {
            Some((arrays, _)) => arrays.fields.clone(),
            None => Fields::new(g, plan, |label, layout, residency| {
                Field::new(ctx, label, layout, residency)
            })?,
        };
        let n_fourier = (g.deth * g.detw) as f64;
        let st = staging.as_ref();
        let ops = Ops::new(ctx, &scalars, st, share, &fields, [g.n0, g.n1, g.n2])?;
        let f = &fields;
        let app = |what, source, sink| op.application(ctx, &scalars, st, what, source, sink);
        let apps = Apps {
            residual: app(
                Apply::FourierAdjoint,
                Source::Difference(&f.dhat, &f.au),
                Sink::Real {
                    field: &f.r,
                    scale: Coef::fixed((1.0 / n_fourier) as f32),
                    accumulate: false,
                },
            )?,
            forward_p: app(
                Apply::FourierForward,
                Source::Real(&f.p),
                Sink::Complex(&f.ap),
            )?,
            r_sub_data_curvature: app(
                Apply::FourierAdjoint,
                Source::Complex(&f.ap),
                Sink::Real {
                    field: &f.r,
                    scale: Coef::times(-(1.0 / n_fourier) as f32, slot::STEP),
                    accumulate: true,
                },
            )?,
            forward_u: app(
                Apply::FourierForward,
                Source::Real(&f.u),
                Sink::Complex(&f.au),
            )?,
        };
        let steps = ScalarSteps::new(ctx, &scalars)?;
        // D = N F_fwd(d): the data in the Fourier domain, once. In streaming mode the spatial
        // projections stay on the host and pass through the device a chunk of angles at a time.
        let spatial_residency = match staging {
            Some(_) => plan.projections_residency(g),
            None => Residency::Device,
        };
        let spatial = match member {
            Some((arrays, _)) => arrays.spatial.clone(),
            None => Field::new(
                ctx,
                "projections",
                projections_layout(g),
                &spatial_residency,
            )?,
        };
        let hashes = match fill {
            Some((data, planes)) => fill_projections(ctx, &spatial, data, planes)?,
            None => Vec::new(),
        };
        let data_hash = projections_hash(&hashes);
        let to_fourier = app(Apply::Fft2d, Source::Real(&spatial), Sink::Complex(&f.dhat))?;
        let scale_dhat = VectorOp::new(
            ctx,
            &scalars,
            st,
            share,
            Kernel::Lincomb,
            [Some(&f.ap), None, None, None],
            Target::Field(&f.dhat),
            [
                Coef::ZERO,
                Coef::ZERO,
                Coef::ZERO,
                Coef::fixed(n_fourier as f32),
            ],
            [g.n0, g.n1, g.n2],
        )?;
        let mut rec = ctx.recorder("fourier data");
        op.record(ctx, &mut rec, &to_fourier)?;
        scale_dhat.record(ctx, &mut rec)?;
        ctx.submit(rec)?;
        Ok(Self {
            op,
            params,
            n_fourier,
            rho: params.rho0,
            iteration: 0,
            scalars,
            fields,
            ops,
            apps,
            steps,
            data_hash,
            staging,
            memo: None,
            last: None,
            #[cfg(feature = "mpi")]
            projection_hashes: hashes,
        })
    }

    /// Memoizes the operator's gridding stages from now on (see [`crate::memo`]); `off` removes
    /// the memo layer. Its granularity is the operator's chunking. The cache is not part of a
    /// checkpoint, so a resumed run that reuses chunks differs from an uninterrupted one.
    pub fn set_memo(&mut self, ctx: &GpuContext, options: MemoOptions) -> Result<(), SolverError> {
        self.memo = if options.policy.is_active() {
            Some(RefCell::new(Memo::with_staging(
                ctx,
                &self.op,
                options,
                self.staging.as_ref(),
            )?))
        } else {
            None
        };
        Ok(())
    }

    /// What the memo layer did so far (`None` when it is off).
    pub fn memo_stats(&self) -> Option<MemoStats> {
        self.memo.as_ref().map(|m| m.borrow().stats())
    }

    /// Device memory of the memo layer's caches.
    pub fn memo_device_bytes(&self) -> u64 {
        self.memo.as_ref().map_or(0, |m| m.borrow().device_bytes())
    }

    /// Records `application` into `rec`, or, with the memo layer, submits what `rec` holds, runs
    /// the application through the memo layer and continues in a fresh recorder.
    fn record_operator(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        application: &Application,
    ) -> Result<(), SolverError> {
        match &self.memo {
            None => self.op.record(ctx, rec, application)?,
            Some(memo) => {
                ctx.submit(std::mem::replace(rec, ctx.recorder("admm")))?;
                memo.borrow_mut().apply(ctx, &self.op, application)?;
            }
        }
        Ok(())
    }

    /// The operator (for its geometry and device memory).
    pub fn operator(&self) -> &LaminoOperator {
        &self.op
    }

    /// Device memory of the solver's device-resident arrays (besides the operator's).
    pub fn vector_device_bytes(&self) -> u64 {
        let f = &self.fields;
        [
            &f.u, &f.u_prev, &f.psi, &f.lambda, &f.grad_u, &f.h0, &f.r, &f.p, &f.grad_p, &f.r_prev,
            &f.dhat, &f.au, &f.ap,
        ]
        .iter()
        .filter_map(|field| field.device_buffer())
        .map(|b| b.bytes())
        .sum()
    }

    /// Outer iterations done so far.
    pub fn iterations_done(&self) -> usize {
        self.iteration
    }

    /// Writes the coefficients that depend on the penalty (and the fixed ones) for the next
    /// outer iteration; they land before its first submission.
    fn write_coefficients(&self, ctx: &GpuContext) {
        let (rho, alpha) = (self.rho, self.params.alpha);
        let s = &self.scalars;
        s.set(ctx, slot::RHO, rho as f32);
        s.set(ctx, slot::NEG_RHO, -rho as f32);
        s.set(ctx, slot::INV_RHO, (1.0 / rho) as f32);
        s.set(ctx, slot::NEG_INV_RHO, (-1.0 / rho) as f32);
        s.set(ctx, slot::ALPHA_OVER_RHO, (alpha / rho) as f32);
        s.set(ctx, slot::INV_N, (1.0 / self.n_fourier) as f32);
        s.set(ctx, slot::BETA, 0.0);
        if let InnerSolver::DaiYuan { step } = self.params.inner {
            s.set(ctx, slot::GAMMA, step as f32);
        }
    }

    /// Runs one outer ADMM iteration and reports its Lagrangian terms.
    pub fn step(&mut self, ctx: &GpuContext) -> Result<IterationReport, SolverError> {
        let o = &self.ops;
        self.write_coefficients(ctx);
        // u_prev = u, h0 = grad u; r = -(gradient of the subproblem at u).
        let mut rec = ctx.recorder("admm");
        o.save_u_prev.record(ctx, &mut rec)?;
        o.save_h0.record(ctx, &mut rec)?;
        match self.params.inner {
            InnerSolver::ConjugateGradient => {
                self.record_residual(ctx, &mut rec)?;
                self.record_conjugate_gradient(ctx, &mut rec)?;
            }
            InnerSolver::DaiYuan { .. } => self.record_dai_yuan(ctx, &mut rec)?,
        }
        // psi = shrink(grad u + lambda/rho, alpha/rho); lambda += rho (grad u - psi); terms.
        o.psi_shrink.record(ctx, &mut rec)?;
        o.lambda_update.record(ctx, &mut rec)?;
        VectorOp::record_all(ctx, &mut rec, &o.sums.iter().collect::<Vec<_>>())?;
        ctx.submit(rec)?;
        // The one wait of the iteration: every reduction result in one readback (downloads into
        // host arrays land on the way).
        ctx.complete_downloads()?;
        let sums = self.scalars.read_sums(ctx)?;
        let it = self.iteration;
        let finite = |what, v: f64| {
            if v.is_finite() {
                Ok(v)
            } else {
                Err(SolverError::NonFinite {
                    what,
                    iteration: it,
                })
            }
        };
        let at = |s: SumSlot| sums[s.0 as usize];
        let (rho, alpha) = (self.rho, self.params.alpha);
        finite("the CG residual", at(sum::RR))?;
        let primal = finite("the primal residual", at(sum::PRIMAL))?;
        let dual = rho * rho * finite("the dual residual", at(sum::DUAL))?;
        let data_term = finite("the data term", at(sum::DATA) / self.n_fourier)?;
        let tv_term = alpha * finite("the TV term", at(sum::ISO))?;
        let dual_term = finite("the dual term", at(sum::LAMBDA_DOT))?;
        let norm_u = at(sum::UU).sqrt();
        let norm_gu = at(sum::GUGU).sqrt();
        let norm_psi = at(sum::PSIPSI).sqrt();
        let norm_lambda = at(sum::LAMBDA).sqrt();
        let report = IterationReport {
            iteration: it,
            data_term,
            tv_term,
            dual_term,
            penalty_term: rho * primal,
            lagrangian: 0.5 * data_term + tv_term + dual_term + 0.5 * rho * primal,
            primal_residual: primal,
            dual_residual: dual,
            rho,
            change: relative(at(sum::CHANGE).sqrt(), norm_u),
            primal_relative: relative(primal.sqrt(), norm_gu.max(norm_psi)),
            dual_relative: relative(dual.sqrt(), norm_lambda.max(rho * norm_gu)),
        };
        // `certified:auto` takes the tolerance of the next iteration's reuses from the residual.
        if let Some(memo) = &self.memo {
            memo.borrow_mut()
                .observe_primal_residual(report.primal_relative);
        }
        // The adaptive penalty of the reference: lambda is not rescaled.
        if primal > 10.0 * dual {
            self.rho *= 2.0;
        } else if dual > 10.0 * primal {
            self.rho /= 2.0;
        }
        self.iteration += 1;
        self.last = Some(report);
        Ok(report)
    }

    /// Records `r = (1/N) Re A*(D - A u) + rho grad*(psi - lambda/rho - grad u)` (minus the
    /// gradient of the subproblem) and `|r|^2`.
    fn record_residual(&self, ctx: &GpuContext, rec: &mut Recorder) -> Result<(), SolverError> {
        self.record_operator(ctx, rec, &self.apps.residual)?;
        self.ops.r_add_tv_gradient.record(ctx, rec)?;
        self.ops.dot_rr.record(ctx, rec)?;
        Ok(())
    }

    /// Conjugate gradient on `(1/N) Re A*A + rho grad* grad` with the exact step, from the
    /// residual in r: each step `p = r + beta p`, `A p`, `grad p`, the step length on the GPU,
    /// `u, A u, grad u += s (p, A p, grad p)` and `r -= s H p` with `H p` never stored.
    fn record_conjugate_gradient(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
    ) -> Result<(), SolverError> {
        let o = &self.ops;
        for k in 0..self.params.inner_iterations {
            if k > 0 {
                rec.dispatch(&self.steps.cg_beta, 1);
            }
            o.p_update.record(ctx, rec)?;
            self.record_operator(ctx, rec, &self.apps.forward_p)?;
            o.grad_p.record(ctx, rec)?;
            VectorOp::record_all(ctx, rec, &[&o.dot_apap, &o.dot_gpgp])?;
            rec.dispatch(&self.steps.cg_step, 1);
            o.u_move.record(ctx, rec)?;
            o.au_move.record(ctx, rec)?;
            o.grad_u_move.record(ctx, rec)?;
            self.record_operator(ctx, rec, &self.apps.r_sub_data_curvature)?;
            o.r_sub_tv_curvature.record(ctx, rec)?;
            o.dot_rr_new.record(ctx, rec)?;
        }
        Ok(())
    }

    /// The reference's inner solver (`cg_lam_ext`): Dai-Yuan directions with a fixed step `gamma`
    /// (`beta = |r|^2 / (p.(r_prev - r) + 1e-32)`), kept to reproduce its results. As in the
    /// reference, `A u` is recomputed from `u` for every gradient rather than updated with `A p`
    /// (the same operator work, and inputs that change little between calls, which is what the
    /// memo layer reuses). `A u` is fresh at the end.
    fn record_dai_yuan(&self, ctx: &GpuContext, rec: &mut Recorder) -> Result<(), SolverError> {
        let o = &self.ops;
        self.record_residual(ctx, rec)?;
        for i in 0..self.params.inner_iterations {
            if i > 0 {
                self.record_operator(ctx, rec, &self.apps.forward_u)?;
                self.record_residual(ctx, rec)?;
                VectorOp::record_all(ctx, rec, &[&o.dot_p_rprev, &o.dot_p_r])?;
                rec.dispatch(&self.steps.dy_beta, 1);
            }
            o.p_update.record(ctx, rec)?;
            o.grad_p.record(ctx, rec)?;
            o.r_prev_from_r.record(ctx, rec)?;
            o.u_move_fixed.record(ctx, rec)?;
            o.grad_u_move_fixed.record(ctx, rec)?;
        }
        self.record_operator(ctx, rec, &self.apps.forward_u)
    }

    /// Runs outer iterations until the stopping rule says so, calling `progress` after each.
    pub fn run(
        &mut self,
        ctx: &GpuContext,
        mut progress: impl FnMut(&IterationReport),
    ) -> Result<Vec<IterationReport>, SolverError> {
        let mut reports = Vec::new();
        while self.stop_reason().is_none() {
            let r = self.step(ctx)?;
            progress(&r);
            reports.push(r);
        }
        Ok(reports)
    }

    /// Whether to stop now, and why: the convergence test on the last iteration (when the
    /// parameters have one), else the iteration count.
    pub fn stop_reason(&self) -> Option<StopReason> {
        let p = &self.params;
        if let (Some(c), Some(last)) = (p.convergence, &self.last) {
            if last.converged(&c) {
                return Some(StopReason::Converged);
            }
        }
        (self.iteration >= p.outer_iterations).then_some(match p.convergence {
            Some(_) => StopReason::MaxIterations,
            None => StopReason::Exactly,
        })
    }

    /// The arrays a checkpoint holds, in [`checkpoint::ARRAYS`](super::checkpoint::ARRAYS) order.
    pub(crate) fn checkpointed(&self) -> [&Field; 5] {
        let f = &self.fields;
        [&f.u, &f.psi, &f.lambda, &f.grad_u, &f.au]
    }

    /// Writes the complete solver state after the iterations done so far to `path`
    /// (atomically), streaming each array a block at a time wherever it lives.
    pub fn write_checkpoint(&self, ctx: &GpuContext, path: &Path) -> Result<(), SolverError> {
        let arrays = self.checkpointed();
        let checkpoint = Checkpoint {
            iteration: self.iteration,
            rho: self.rho,
            geometry: self.op.geometry().clone(),
            params: self.params,
            data_hash: self.data_hash,
            last_report: self.last,
            lengths: arrays.map(|a| a.layout().words()),
        };
        checkpoint.write(path, |a, start, len| {
            Ok::<_, SolverError>(arrays[a].read_words(ctx, start, len)?)
        })
    }

    /// Continues from the checkpoint at `path`: the same geometry, data and parameters (the
    /// number of outer iterations may differ), so the final result equals an uninterrupted run
    /// bit for bit, whether either run was in-core or streaming. On an error the solver's state
    /// is undefined: build a new one.
    pub fn resume(&mut self, ctx: &GpuContext, path: &Path) -> Result<Checkpoint, SolverError> {
        let mismatch = |what: &'static str| Err(SolverError::CheckpointMismatch { what });
        let geometry = self.op.geometry().fingerprint();
        let (data_hash, shape) = (self.data_hash, self.params.iterates_shape());
        let arrays = self.checkpointed();
        let lengths = arrays.map(|a| a.layout().words());
        let checkpoint = Checkpoint::read_arrays(
            path,
            |c| {
                // Bit-exact comparison: sizes, every angle, the tilt, the accuracy and the rotation axis.
                if c.geometry.fingerprint() != geometry {
                    return mismatch("geometry");
                }
                if c.data_hash != data_hash {
                    return mismatch("data");
                }
                if c.params.iterates_shape() != shape {
                    return mismatch("solver parameters");
                }
                if c.lengths != lengths {
                    return mismatch("array sizes");
                }
                Ok(())
            },
            |a, start, words| Ok(arrays[a].write_words(ctx, start, words)?),
        )?;
        ctx.wait()?;
        self.rho = checkpoint.rho;
        self.iteration = checkpoint.iteration;
        self.last = checkpoint.last_report;
        Ok(checkpoint)
    }

    /// The hash of the projections (checkpoints name the data by it).
    pub(crate) fn data_hash(&self) -> u64 {
        self.data_hash
    }

    /// The hash of each projection this member read.
    #[cfg(feature = "mpi")]
    pub(crate) fn projection_hashes(&self) -> &[u64] {
        &self.projection_hashes
    }

    /// Takes the hash of the projections from the team member that read them.
    pub(crate) fn adopt_data_hash(&mut self, hash: u64) {
        self.data_hash = hash;
    }

    /// Takes the iteration count, penalty and last report of `leader` (a team member that
    /// resumed the shared arrays from a checkpoint).
    pub(crate) fn adopt_state(&mut self, leader: &AdmmSolver) {
        self.rho = leader.rho;
        self.iteration = leader.iteration;
        self.last = leader.last;
    }

    /// The array of the volume.
    pub(crate) fn volume_field(&self) -> &Field {
        &self.fields.u
    }

    /// The current volume `(n0, n1, n2)`.
    pub fn volume(&self, ctx: &GpuContext) -> Result<Vec<f32>, SolverError> {
        Ok(self.volume_field().read(ctx)?)
    }

    /// Z slices `planes` of the current volume, row-major.
    pub fn volume_planes(
        &self,
        ctx: &GpuContext,
        planes: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, SolverError> {
        let u = self.volume_field();
        let words = u.layout().plane_words;
        Ok(u.read_words(ctx, planes.start * words, planes.len() * words)?)
    }
}

/// Spatial projections `(ntheta, deth, detw)` in the operator's normalisation, read a block of
/// whole projections at a time.
pub trait ProjectionBlocks {
    /// Fills `out` with the projection words from word `start` on (`start` and `out.len()` are
    /// whole projections).
    fn fill(&self, start: usize, out: &mut [f32]);
}

impl ProjectionBlocks for [f32] {
    fn fill(&self, start: usize, out: &mut [f32]) {
        out.copy_from_slice(&self[start..start + out.len()]);
    }
}

/// Bytes of projections moved to the solver's array at a time.
const PROJECTION_BLOCK_BYTES: usize = 8 << 20;

/// Copies `data` into `spatial` a block of projections at a time; returns the FNV-1a hash of
/// all the words (the checkpoints' data fingerprint: the same as hashing them in one piece).
/// The layout of the spatial projections `(ntheta, deth, detw)`.
fn projections_layout(g: &Geometry) -> PlaneLayout {
    PlaneLayout {
        planes: g.ntheta(),
        plane_words: g.deth * g.detw,
    }
}

impl Fields {
    /// Every array where `plan` puts it, made by `field` (label, layout, residency).
    fn new(
        g: &Geometry,
        plan: &MemoryPlan,
        field: impl Fn(&str, PlaneLayout, &Residency) -> Result<Field, StorageError>,
    ) -> Result<Self, StorageError> {
        let array =
            |array: Array, label: &str| field(label, array.layout(g), plan.residency(array));
        Ok(Self {
            u: array(Array::U, "u")?,
            u_prev: array(Array::UPrev, "u previous")?,
            psi: array(Array::Psi, "psi")?,
            lambda: array(Array::Lambda, "lambda")?,
            grad_u: array(Array::GradU, "grad u")?,
            h0: array(Array::GradUPrev, "grad u previous")?,
            r: array(Array::R, "r")?,
            p: array(Array::P, "p")?,
            grad_p: array(Array::GradP, "grad p")?,
            r_prev: array(Array::RPrev, "r previous")?,
            dhat: array(Array::DHat, "D hat")?,
            au: array(Array::Au, "A u")?,
            ap: array(Array::Ap, "A p")?,
        })
    }
}

/// The arrays the members of a multi-device team share, all in host memory (or scratch).
pub(crate) struct TeamArrays {
    fields: Fields,
    spectrum: Field,
    spatial: Field,
}

impl TeamArrays {
    /// The arrays of `plan`, which holds none on the device, made by `field` (label, layout,
    /// residency).
    fn with(
        g: &Geometry,
        plan: &MemoryPlan,
        field: impl Fn(&str, PlaneLayout, &Residency) -> Result<Field, StorageError>,
    ) -> Result<Self, SolverError> {
        Ok(Self {
            fields: Fields::new(g, plan, &field)?,
            spectrum: field(
                "spectrum (deth, n1, n2)",
                Array::Spectrum.layout(g),
                plan.residency(Array::Spectrum),
            )?,
            spatial: field(
                "projections",
                projections_layout(g),
                &plan.projections_residency(g),
            )?,
        })
    }

    /// The arrays of a team of threads, shared.
    pub fn new(ctx: &GpuContext, g: &Geometry, plan: &MemoryPlan) -> Result<Self, SolverError> {
        Self::with(g, plan, |label, layout, residency| {
            Field::new(ctx, label, layout, residency)
        })
    }

    /// This MPI rank's arrays: its home planes of each (registered with `ranks` for the
    /// exchanges, in the same order on every rank).
    #[cfg(feature = "mpi")]
    pub fn on_ranks(
        ctx: &GpuContext,
        g: &Geometry,
        plan: &MemoryPlan,
        ranks: &crate::distributed::ranks::Ranks,
    ) -> Result<Self, SolverError> {
        Self::with(g, plan, |label, layout, residency| {
            let home = ranks.home(ranks.rank(), layout.planes);
            let field = Field::with_home(ctx, label, layout, residency, Some(home))?;
            ranks.register(&field);
            Ok(field)
        })
    }
}

/// Writes projections `keep` of `data` (which needs to hold only those) into `spatial`, and
/// returns the hash of each.
fn fill_projections(
    ctx: &GpuContext,
    spatial: &Field,
    data: &(impl ProjectionBlocks + ?Sized),
    keep: Range<usize>,
) -> Result<Vec<u64>, GpuError> {
    let layout = spatial.layout();
    let planes = (PROJECTION_BLOCK_BYTES / (4 * layout.plane_words)).clamp(1, layout.planes);
    let mut block = vec![0f32; planes * layout.plane_words];
    let mut hashes = Vec::with_capacity(keep.len());
    for first in keep.clone().step_by(planes) {
        let count = planes.min(keep.end - first);
        let words = &mut block[..count * layout.plane_words];
        let start = first * layout.plane_words;
        data.fill(start, words);
        hashes.extend(
            words
                .chunks(layout.plane_words)
                .map(|plane| fnv1a(bytemuck::cast_slice(plane))),
        );
        spatial.write_words(ctx, start, words)?;
    }
    Ok(hashes)
}

/// The hash of the projections from the hash of each (in order): whoever read which.
pub(crate) fn projections_hash(hashes: &[u64]) -> u64 {
    hashes
        .iter()
        .fold(FNV_OFFSET, |h, p| fnv1a_continue(h, &p.to_le_bytes()))
}

impl Ops {
    fn new(
        ctx: &GpuContext,
        scalars: &Scalars,
        staging: Option<&Arc<Staging>>,
        share: Option<&Arc<Share>>,
        f: &Fields,
        shape: [usize; 3],
    ) -> Result<Self, GpuError> {
        use Kernel::*;
        let op = |kernel, inputs, target, coefs| {
            VectorOp::new(
                ctx, scalars, staging, share, kernel, inputs, target, coefs, shape,
            )
        };
        let field = Target::Field;
        let fixed = Coef::fixed;
        let times = |s: Slot| Coef::times(1.0, s);
        let zero = Coef::ZERO;
        let one = Coef::ONE;
        // `(x - y).(x - y)` and `x.x` as dot coefficients.
        let diff = [zero, fixed(-1.0), zero, fixed(-1.0)];
        let plain = [zero; 4];
        let dot = |x: &Field, y: Option<&Field>, slot: SumSlot| {
            let (inputs, coefs) = match y {
                Some(y) => ([Some(x), Some(y), Some(x), Some(y)], diff),
                None => ([Some(x), None, Some(x), None], plain),
            };
            VectorOp::new(
                ctx,
                scalars,
                staging,
                share,
                Dot,
                inputs,
                Target::Sum(slot),
                coefs,
                shape,
            )
        };
        Ok(Self {
            save_u_prev: op(
                Lincomb,
                [Some(&f.u), None, None, None],
                field(&f.u_prev),
                [one, zero, zero, zero],
            )?,
            save_h0: op(
                Lincomb,
                [Some(&f.grad_u), None, None, None],
                field(&f.h0),
                [one, zero, zero, zero],
            )?,
            r_add_tv_gradient: op(
                GradientAdjoint,
                [Some(&f.psi), Some(&f.lambda), Some(&f.grad_u), None],
                field(&f.r),
                [times(slot::RHO), times(slot::NEG_INV_RHO), fixed(-1.0), one],
            )?,
            dot_rr: dot(&f.r, None, sum::RR)?,
            p_update: op(
                Lincomb,
                [Some(&f.r), None, None, None],
                field(&f.p),
                [one, zero, zero, times(slot::BETA)],
            )?,
            grad_p: op(
                Gradient,
                [Some(&f.p), None, None, None],
                field(&f.grad_p),
                [one, zero, zero, zero],
            )?,
            dot_apap: dot(&f.ap, None, sum::APAP)?,
            dot_gpgp: dot(&f.grad_p, None, sum::GPGP)?,
            u_move: op(
                Lincomb,
                [Some(&f.p), None, None, None],
                field(&f.u),
                [times(slot::STEP), zero, zero, one],
            )?,
            au_move: op(
                Lincomb,
                [Some(&f.ap), None, None, None],
                field(&f.au),
                [times(slot::STEP), zero, zero, one],
            )?,
            grad_u_move: op(
                Lincomb,
                [Some(&f.grad_p), None, None, None],
                field(&f.grad_u),
                [times(slot::STEP), zero, zero, one],
            )?,
            r_sub_tv_curvature: op(
                GradientAdjoint,
                [Some(&f.grad_p), None, None, None],
                field(&f.r),
                [times(slot::NEG_STEP_RHO), zero, zero, one],
            )?,
            dot_rr_new: dot(&f.r, None, sum::RR_NEW)?,
            r_prev_from_r: op(
                Lincomb,
                [Some(&f.r), None, None, None],
                field(&f.r_prev),
                [one, zero, zero, zero],
            )?,
            dot_p_rprev: VectorOp::new(
                ctx,
                scalars,
                staging,
                share,
                Dot,
                [Some(&f.p), None, Some(&f.r_prev), None],
                Target::Sum(sum::P_RPREV),
                plain,
                shape,
            )?,
            dot_p_r: VectorOp::new(
                ctx,
                scalars,
                staging,
                share,
                Dot,
                [Some(&f.p), None, Some(&f.r), None],
                Target::Sum(sum::P_R),
                plain,
                shape,
            )?,
            u_move_fixed: op(
                Lincomb,
                [Some(&f.p), None, None, None],
                field(&f.u),
                [times(slot::GAMMA), zero, zero, one],
            )?,
            grad_u_move_fixed: op(
                Lincomb,
                [Some(&f.grad_p), None, None, None],
                field(&f.grad_u),
                [times(slot::GAMMA), zero, zero, one],
            )?,
            psi_shrink: op(
                Shrink,
                [Some(&f.grad_u), Some(&f.lambda), None, None],
                field(&f.psi),
                [
                    times(slot::ALPHA_OVER_RHO),
                    times(slot::INV_RHO),
                    zero,
                    zero,
                ],
            )?,
            lambda_update: op(
                Lincomb,
                [Some(&f.grad_u), Some(&f.psi), None, None],
                field(&f.lambda),
                [times(slot::RHO), times(slot::NEG_RHO), zero, one],
            )?,
            sums: vec![
                dot(&f.grad_u, Some(&f.psi), sum::PRIMAL)?,
                dot(&f.grad_u, Some(&f.h0), sum::DUAL)?,
                dot(&f.au, Some(&f.dhat), sum::DATA)?,
                VectorOp::new(
                    ctx,
                    scalars,
                    staging,
                    share,
                    IsoNorm,
                    [Some(&f.psi), None, None, None],
                    Target::Sum(sum::ISO),
                    plain,
                    shape,
                )?,
                // <lambda, grad u - psi>
                VectorOp::new(
                    ctx,
                    scalars,
                    staging,
                    share,
                    Dot,
                    [Some(&f.lambda), None, Some(&f.grad_u), Some(&f.psi)],
                    Target::Sum(sum::LAMBDA_DOT),
                    [zero, zero, zero, fixed(-1.0)],
                    shape,
                )?,
                dot(&f.u, Some(&f.u_prev), sum::CHANGE)?,
                dot(&f.u, None, sum::UU)?,
                dot(&f.grad_u, None, sum::GUGU)?,
                dot(&f.psi, None, sum::PSIPSI)?,
                dot(&f.lambda, None, sum::LAMBDA)?,
            ],
        })
    }
}
