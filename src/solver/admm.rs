//! The ADMM-TV iteration on GPU arrays. One outer iteration is recorded without waiting: the CG
//! step length and direction coefficients are computed on the GPU (`shaders/solver/scalars.wgsl`)
//! and the vector kernels read them, so the host waits once per outer iteration, for the one
//! small readback of every reduction result (the Lagrangian terms, the convergence measures and
//! the penalty decision need them).

use std::cell::RefCell;
use std::sync::Arc;

use super::error::SolverError;
use super::fields::Fields;
use super::normal::ToeplitzLoop;
use super::ops::{Apps, Ops, ScalarSteps};
use super::outer::outer_loop;
use super::report::{relative, IterationReport, StopReason};
use super::slots::{slot, sum};
use super::vector::VectorOp;
use crate::array::{BlockView, Field, Scalars, Staging, SumSlot};
use crate::gpu::{GpuContext, Recorder};
use crate::memo::{Memo, MemoOptions, MemoStats};
use crate::operator::OperatorError;
use crate::operator::{Application, LaminoOperator};
use crate::params::{AdmmParams, DataScale, InnerSolver, NormalOperator};
use crate::plan::{
    toeplitz_obstacle, NormalOperatorChoice, ToeplitzConditions, AUTO_RUNS_GRIDDING,
};

/// Every array, bound kernel and operator application of one reconstruction, built once.
pub struct AdmmSolver {
    pub(super) op: LaminoOperator,
    pub(super) params: AdmmParams,
    pub(super) n_fourier: f64,
    pub(super) rho: f64,
    pub(super) iteration: usize,
    pub(super) scalars: Scalars,
    pub(super) fields: Fields,
    pub(super) ops: Ops,
    pub(super) apps: Apps,
    pub(super) steps: ScalarSteps,
    pub(super) data_hash: u64,
    /// The scale the TV weight is relative to, from every projection (the team's, the ranks').
    pub(super) data_scale: DataScale,
    /// The staging buffers host arrays pass through (streaming plans only).
    pub(super) staging: Option<Arc<Staging>>,
    pub(super) memo: Option<RefCell<Memo>>,
    /// The inner loop's normal operator by Toeplitz embedding, when in use
    /// ([`set_normal_operator`](Self::set_normal_operator)).
    pub(super) toeplitz: Option<ToeplitzLoop>,
    /// The report of the last iteration done (also restored from a checkpoint).
    pub(super) last: Option<IterationReport>,
    /// The carried data residual in `r_saved` is that of the current u (formed by an outer
    /// iteration or read from a checkpoint).
    pub(super) data_residual_formed: bool,
    /// The digest of each projection this member read (an MPI rank's are combined with the
    /// others' into the hash and the scale of the data).
    pub(super) projection_digests: super::projections::ProjectionDigests,
}

impl AdmmSolver {
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

    /// Applies the inner loop's normal operator as `asked` says (see [`NormalOperator`]); call
    /// after [`set_memo`](Self::set_memo). `shared`: the solver is a member of a team of
    /// devices or MPI ranks. Toeplitz asked for where it cannot run is an error naming why
    /// ([`toeplitz_obstacle`], by which the plan decides too); `Auto` runs gridding and says why
    /// (that obstacle, or [`AUTO_RUNS_GRIDDING`]).
    pub fn set_normal_operator(
        &mut self,
        ctx: &GpuContext,
        asked: NormalOperator,
        shared: bool,
    ) -> Result<NormalOperatorChoice, SolverError> {
        self.toeplitz = None;
        if asked == NormalOperator::Gridding {
            return Ok(NormalOperatorChoice::gridding(asked, None));
        }
        let conditions = ToeplitzConditions {
            shared,
            volumes_on_device: [&self.fields.u, &self.fields.p]
                .iter()
                .all(|f| f.device_buffer().is_some()),
            carried_cg: self.params.carries_residual(),
            memo: self.memo.is_some(),
            free_device_bytes: ctx
                .device_budget()
                .map(|b| b.saturating_sub(ctx.device_bytes_held())),
        };
        if let Some(reason) = toeplitz_obstacle(ctx, self.op.geometry(), conditions) {
            return match asked {
                NormalOperator::Toeplitz => Err(SolverError::ToeplitzUnavailable { reason }),
                _ => Ok(NormalOperatorChoice::gridding(asked, Some(reason))),
            };
        }
        if asked == NormalOperator::Auto {
            return Ok(NormalOperatorChoice::gridding(
                asked,
                Some(AUTO_RUNS_GRIDDING.into()),
            ));
        }
        let start = std::time::Instant::now();
        match ToeplitzLoop::new(
            ctx,
            &self.op,
            (&self.fields, &self.scalars),
            self.n_fourier,
            self.staging.as_ref(),
        ) {
            Ok(l) => {
                let device_bytes = l.device_bytes();
                self.toeplitz = Some(l);
                Ok(NormalOperatorChoice {
                    asked: asked.name(),
                    used: "toeplitz",
                    reason: None,
                    device_bytes,
                    kernel_s: start.elapsed().as_secs_f64(),
                })
            }
            // Beyond one binding: refused naming the grid.
            Err(SolverError::Operator(OperatorError::TooLarge { what, bytes, limit })) => {
                Err(SolverError::ToeplitzUnavailable {
                    reason: format!("{what} needs {bytes} bytes, above this device's {limit}"),
                })
            }
            Err(e) => Err(e),
        }
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
            &f.u, &f.u_prev, &f.psi, &f.lambda, &f.grad_u, &f.h0, &f.r, &f.p, &f.grad_p,
            &f.r_saved, &f.dhat, &f.au, &f.ap,
        ]
        .iter()
        .filter_map(|field| field.device_buffer())
        .map(|b| b.bytes())
        .sum()
    }

    /// The scale of the data the TV weight is relative to.
    pub fn data_scale(&self) -> DataScale {
        self.data_scale
    }

    /// The TV term's weight: `alpha` times the data's [`DataScale::tv_unit`].
    pub fn tv_weight(&self) -> f64 {
        self.params.alpha * self.data_scale.tv_unit()
    }

    /// CG (or Dai-Yuan) steps per outer iteration: the count given, else the default for the
    /// operator's width.
    fn inner_steps(&self) -> usize {
        self.params.inner_steps(self.op.geometry().n2)
    }

    /// Outer iterations done so far.
    pub fn iterations_done(&self) -> usize {
        self.iteration
    }

    /// Writes the coefficients that depend on the penalty (and the fixed ones) for the next
    /// outer iteration; they land before its first submission.
    fn write_coefficients(&self, ctx: &GpuContext) {
        let (rho, alpha) = (self.rho, self.tv_weight());
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
        // h = a grad u + (1 - a) psi (h = grad u for plain ADMM);
        // psi = shrink(h + lambda/rho, alpha/rho); lambda += rho (h - psi); terms.
        if let Some(relax) = &o.relax {
            relax.record(ctx, &mut rec)?;
        }
        o.psi_shrink.record(ctx, &mut rec)?;
        o.lambda_update.record(ctx, &mut rec)?;
        let data_term = self.toeplitz.as_ref().map_or(&o.data_term, |t| &t.data_dot);
        let sums: Vec<&VectorOp> = o.sums.iter().chain([data_term]).collect();
        VectorOp::record_all(ctx, &mut rec, &sums)?;
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
        let (rho, alpha) = (self.rho, self.tv_weight());
        finite("the CG residual", at(sum::RR))?;
        let primal = finite("the primal residual", at(sum::PRIMAL))?;
        let dual = rho * rho * finite("the dual residual", at(sum::DUAL))?;
        let data_sum = match &self.toeplitz {
            Some(t) => t.data_term(at(sum::DATA), self.n_fourier),
            None => at(sum::DATA),
        };
        let data_term = finite("the data term", data_sum / self.n_fourier)?;
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
        if let Some(rule) = self.params.penalty_from_gradient {
            let voxels = self.op.geometry().volume_len();
            self.rho = rule.rho_after(it + 1, self.rho, alpha, norm_gu, voxels);
        }
        self.iteration += 1;
        self.data_residual_formed = self.ops.r_from_saved.is_some();
        self.last = Some(report);
        Ok(report)
    }

    /// Records `r = (1/N) Re A*(D - A u) + rho grad*(psi - lambda/rho - grad u)` (minus the
    /// gradient of the subproblem) and `|r|^2`. A carried data part is formed by `A*` once, in
    /// the first outer iteration (a resumed run reads it from the checkpoint, or forms it if the
    /// checkpoint lacks it).
    fn record_residual(&self, ctx: &GpuContext, rec: &mut Recorder) -> Result<(), SolverError> {
        let carried = self.ops.r_from_saved.as_ref();
        if carried.is_none() || !self.data_residual_formed {
            match &self.toeplitz {
                Some(t) => t.record_residual(ctx, rec)?,
                None => self.record_operator(ctx, rec, &self.apps.residual)?,
            }
        }
        if let Some(copy) = carried {
            copy.record(ctx, rec)?;
        }
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
        for k in 0..self.inner_steps() {
            if k > 0 {
                rec.dispatch(&self.steps.cg_beta, 1);
            }
            o.p_update.record(ctx, rec)?;
            match &self.toeplitz {
                Some(t) => t.record_tp(ctx, rec)?,
                None => self.record_operator(ctx, rec, &self.apps.forward_p)?,
            }
            o.grad_p.record(ctx, rec)?;
            let dot_ap = self.toeplitz.as_ref().map_or(&o.dot_apap, |t| &t.dot_ptp);
            VectorOp::record_all(ctx, rec, &[dot_ap, &o.dot_gpgp])?;
            rec.dispatch(&self.steps.cg_step, 1);
            o.u_move.record(ctx, rec)?;
            o.grad_u_move.record(ctx, rec)?;
            match &self.toeplitz {
                Some(t) => t.residual_step.record(ctx, rec)?,
                None => {
                    o.au_move.record(ctx, rec)?;
                    self.record_operator(ctx, rec, &self.apps.r_sub_data_curvature)?;
                }
            }
            match &o.r_from_saved {
                // The carried data part took the step: r is formed from it afresh.
                Some(copy) => {
                    copy.record(ctx, rec)?;
                    o.r_add_tv_gradient.record(ctx, rec)?;
                }
                None => o.r_sub_tv_curvature.record(ctx, rec)?,
            }
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
        for i in 0..self.inner_steps() {
            if i > 0 {
                self.record_operator(ctx, rec, &self.apps.forward_u)?;
                self.record_residual(ctx, rec)?;
                VectorOp::record_all(ctx, rec, &[&o.dot_p_rsaved, &o.dot_p_r])?;
                rec.dispatch(&self.steps.dy_beta, 1);
            }
            o.p_update.record(ctx, rec)?;
            o.grad_p.record(ctx, rec)?;
            o.r_saved_from_r.record(ctx, rec)?;
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
        let after = |_: &mut Self, r: &IterationReport| {
            progress(r);
            Ok(true)
        };
        outer_loop(self, Self::stop_reason, |s| s.step(ctx), after).map(|(reports, _)| reports)
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

    /// The array of the volume.
    pub(crate) fn volume_field(&self) -> &Field {
        &self.fields.u
    }

    /// The current volume `(n0, n1, n2)`.
    pub fn volume(&self, ctx: &GpuContext) -> Result<Vec<f32>, SolverError> {
        self.volume_planes(ctx, 0..self.op.geometry().n0)
    }

    /// Z slices `planes` of the current volume, row-major.
    pub fn volume_planes(
        &self,
        ctx: &GpuContext,
        planes: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, SolverError> {
        self.volume_box(ctx, planes, 0..self.op.geometry().n1)
    }

    /// Y rows `rows` of z slices `planes` of the current volume, `(planes, rows, n2)` row-major:
    /// the solver keeps the volume by y row (planes of every z slice of one row), so z slices are
    /// read strided.
    pub fn volume_box(
        &self,
        ctx: &GpuContext,
        planes: std::ops::Range<usize>,
        rows: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, SolverError> {
        let g = self.op.geometry();
        let u = self.volume_field();
        debug_assert!(u.layout().axes_swapped && planes.end <= g.n0 && rows.end <= g.n1);
        let block = BlockView {
            offset: (rows.start * g.n0 + planes.start) as u64 * g.n2 as u64,
            strides: [g.n2 as u64, (g.n0 * g.n2) as u64, 1],
            extents: [planes.len() as u64, rows.len() as u64, g.n2 as u64],
            words: 1,
        };
        Ok(u.read_block(ctx, &block)?)
    }
}
