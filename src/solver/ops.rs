//! The wiring of one solver: every vector call site ([`Ops`]), operator application ([`Apps`])
//! and scalar kernel ([`ScalarSteps`]) of the iteration, bound once to the solver's arrays and
//! slots, so that an outer iteration only records dispatches.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::fields::Fields;
use super::slots::{slot, sum};
use super::vector::{Kernel, Target, VectorOp};
use crate::array::{Coef, Field, Scalars, Slot, Staging, SumSlot};
use crate::distributed::team::Share;
use crate::gpu::GpuError;
use crate::gpu::{Bound, GpuContext, KernelSpec};
use crate::operator::{Application, Apply, LaminoOperator, OperatorError, Sink, Source};
use crate::params::AdmmParams;
use crate::shaders;

/// Every vector call site, built once.
pub(super) struct Ops {
    pub(super) save_u_prev: VectorOp,
    pub(super) save_h0: VectorOp,
    pub(super) r_add_tv_gradient: VectorOp,
    pub(super) dot_rr: VectorOp,
    pub(super) p_update: VectorOp,
    pub(super) grad_p: VectorOp,
    pub(super) dot_apap: VectorOp,
    pub(super) dot_gpgp: VectorOp,
    pub(super) u_move: VectorOp,
    pub(super) au_move: VectorOp,
    pub(super) grad_u_move: VectorOp,
    pub(super) r_sub_tv_curvature: VectorOp,
    pub(super) dot_rr_new: VectorOp,
    pub(super) r_saved_from_r: VectorOp,
    pub(super) dot_p_rsaved: VectorOp,
    pub(super) dot_p_r: VectorOp,
    pub(super) u_move_fixed: VectorOp,
    pub(super) grad_u_move_fixed: VectorOp,
    /// `grad p = a grad u + (1 - a) psi`: the over-relaxed split (absent for plain ADMM, where
    /// the shrinkage reads grad u itself).
    pub(super) relax: Option<VectorOp>,
    pub(super) psi_shrink: VectorOp,
    pub(super) lambda_update: VectorOp,
    /// `r = r_saved`: the residual starts from the carried data part (present when the
    /// iteration carries it; `r_add_tv_gradient` then completes it).
    pub(super) r_from_saved: Option<VectorOp>,
    pub(super) sums: Vec<VectorOp>,
    /// `|A u - D|^2` into the data term's slot (the Toeplitz loop sums it another way).
    pub(super) data_term: VectorOp,
}

/// The operator applications of the iteration, bound once.
pub(super) struct Apps {
    /// `r = (1/N) Re A*(D - A u)`, into `r_saved` when the iteration carries it
    pub(super) residual: Application,
    /// `A p`
    pub(super) forward_p: Application,
    /// `r += (-s/N) Re A*(A p)`, into `r_saved` when the iteration carries it
    pub(super) r_sub_data_curvature: Application,
    /// `A u` (the reference's inner solver recomputes it)
    pub(super) forward_u: Application,
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
pub(super) struct ScalarSteps {
    pub(super) cg_step: Bound,
    pub(super) cg_beta: Bound,
    pub(super) dy_beta: Bound,
}

impl ScalarSteps {
    pub(super) fn new(ctx: &GpuContext, scalars: &Scalars) -> Result<Self, GpuError> {
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

/// What every call site of one solver is bound with: its device, scalars and staging buffers,
/// its share of a team's work and the volume's shape.
pub(super) struct Wiring<'a> {
    pub(super) ctx: &'a GpuContext,
    pub(super) scalars: &'a Scalars,
    pub(super) staging: Option<&'a Arc<Staging>>,
    pub(super) share: Option<&'a Arc<Share>>,
    pub(super) shape: [usize; 3],
}

impl Wiring<'_> {
    /// `kernel` bound to `inputs` and `target` with coefficients `coefs` (see [`VectorOp::new`]).
    pub(super) fn op(
        &self,
        kernel: Kernel,
        inputs: [Option<&Field>; 4],
        target: Target<'_>,
        coefs: [Coef; 4],
    ) -> Result<VectorOp, GpuError> {
        VectorOp::new(
            self.ctx,
            self.scalars,
            self.staging,
            self.share,
            kernel,
            inputs,
            target,
            coefs,
            self.shape,
        )
    }

    /// `(x - y).(x - y)`, or `x.x` without `y`, into `slot`.
    fn dot(&self, x: &Field, y: Option<&Field>, slot: SumSlot) -> Result<VectorOp, GpuError> {
        let (inputs, coefs) = match y {
            Some(y) => (
                [Some(x), Some(y), Some(x), Some(y)],
                [Coef::ZERO, Coef::fixed(-1.0), Coef::ZERO, Coef::fixed(-1.0)],
            ),
            None => ([Some(x), None, Some(x), None], [Coef::ZERO; 4]),
        };
        self.op(Kernel::Dot, inputs, Target::Sum(slot), coefs)
    }

    /// `z = x`.
    fn copy(&self, x: &Field, z: &Field) -> Result<VectorOp, GpuError> {
        let (one, zero) = (Coef::ONE, Coef::ZERO);
        let inputs = [Some(x), None, None, None];
        self.op(
            Kernel::Lincomb,
            inputs,
            Target::Field(z),
            [one, zero, zero, zero],
        )
    }

    /// `z += s x` with `s` the coefficient in slot `s`.
    fn add_scaled(&self, s: Slot, x: &Field, z: &Field) -> Result<VectorOp, GpuError> {
        let (one, zero) = (Coef::ONE, Coef::ZERO);
        let inputs = [Some(x), None, None, None];
        let coefs = [Coef::times(1.0, s), zero, zero, one];
        self.op(Kernel::Lincomb, inputs, Target::Field(z), coefs)
    }

    /// `what` of `op` from `source` into `sink` (see [`LaminoOperator::application`]).
    pub(super) fn application(
        &self,
        op: &LaminoOperator,
        what: Apply,
        source: Source<'_>,
        sink: Sink<'_>,
    ) -> Result<Application, OperatorError> {
        op.application(self.ctx, self.scalars, self.staging, what, source, sink)
    }
}

impl Ops {
    /// Every call site of the iteration of `params` on the arrays `f`.
    pub(super) fn new(w: &Wiring<'_>, f: &Fields, params: &AdmmParams) -> Result<Self, GpuError> {
        let relaxation = params.relaxation;
        use Kernel::*;
        let field = Target::Field;
        let fixed = Coef::fixed;
        let times = |s: Slot| Coef::times(1.0, s);
        let zero = Coef::ZERO;
        let one = Coef::ONE;
        let plain = [zero; 4];
        // grad p is free once the inner solver is done: it holds the relaxed split.
        let relax = (relaxation != 1.0)
            .then(|| {
                w.op(
                    Lincomb,
                    [Some(&f.grad_u), Some(&f.psi), None, None],
                    field(&f.grad_p),
                    [
                        fixed(relaxation as f32),
                        fixed((1.0 - relaxation) as f32),
                        zero,
                        zero,
                    ],
                )
            })
            .transpose()?;
        let split = if relax.is_some() {
            &f.grad_p
        } else {
            &f.grad_u
        };
        Ok(Self {
            save_u_prev: w.copy(&f.u, &f.u_prev)?,
            save_h0: w.copy(&f.grad_u, &f.h0)?,
            r_add_tv_gradient: w.op(
                GradientAdjoint,
                [Some(&f.psi), Some(&f.lambda), Some(&f.grad_u), None],
                field(&f.r),
                [times(slot::RHO), times(slot::NEG_INV_RHO), fixed(-1.0), one],
            )?,
            dot_rr: w.dot(&f.r, None, sum::RR)?,
            p_update: w.op(
                Lincomb,
                [Some(&f.r), None, None, None],
                field(&f.p),
                [one, zero, zero, times(slot::BETA)],
            )?,
            grad_p: w.op(
                Gradient,
                [Some(&f.p), None, None, None],
                field(&f.grad_p),
                [one, zero, zero, zero],
            )?,
            dot_apap: w.dot(&f.ap, None, sum::APAP)?,
            dot_gpgp: w.dot(&f.grad_p, None, sum::GPGP)?,
            u_move: w.add_scaled(slot::STEP, &f.p, &f.u)?,
            au_move: w.add_scaled(slot::STEP, &f.ap, &f.au)?,
            grad_u_move: w.add_scaled(slot::STEP, &f.grad_p, &f.grad_u)?,
            r_sub_tv_curvature: w.op(
                GradientAdjoint,
                [Some(&f.grad_p), None, None, None],
                field(&f.r),
                [times(slot::NEG_STEP_RHO), zero, zero, one],
            )?,
            dot_rr_new: w.dot(&f.r, None, sum::RR_NEW)?,
            r_saved_from_r: w.copy(&f.r, &f.r_saved)?,
            dot_p_rsaved: w.op(
                Dot,
                [Some(&f.p), None, Some(&f.r_saved), None],
                Target::Sum(sum::P_RPREV),
                plain,
            )?,
            dot_p_r: w.op(
                Dot,
                [Some(&f.p), None, Some(&f.r), None],
                Target::Sum(sum::P_R),
                plain,
            )?,
            u_move_fixed: w.add_scaled(slot::GAMMA, &f.p, &f.u)?,
            grad_u_move_fixed: w.add_scaled(slot::GAMMA, &f.grad_p, &f.grad_u)?,
            relax,
            psi_shrink: w.op(
                Shrink,
                [Some(split), Some(&f.lambda), None, None],
                field(&f.psi),
                [
                    times(slot::ALPHA_OVER_RHO),
                    times(slot::INV_RHO),
                    zero,
                    zero,
                ],
            )?,
            lambda_update: w.op(
                Lincomb,
                [Some(split), Some(&f.psi), None, None],
                field(&f.lambda),
                [times(slot::RHO), times(slot::NEG_RHO), zero, one],
            )?,
            r_from_saved: params
                .carries_residual()
                .then(|| w.copy(&f.r_saved, &f.r))
                .transpose()?,
            sums: Self::sums(w, f)?,
            data_term: w.dot(&f.au, Some(&f.dhat), sum::DATA)?,
        })
    }

    /// The reductions read once per outer iteration: the residuals, the Lagrangian terms (but
    /// the data term) and the norms of the convergence measures.
    fn sums(w: &Wiring<'_>, f: &Fields) -> Result<Vec<VectorOp>, GpuError> {
        let zero = Coef::ZERO;
        Ok(vec![
            w.dot(&f.grad_u, Some(&f.psi), sum::PRIMAL)?,
            w.dot(&f.grad_u, Some(&f.h0), sum::DUAL)?,
            w.op(
                Kernel::IsoNorm,
                [Some(&f.psi), None, None, None],
                Target::Sum(sum::ISO),
                [zero; 4],
            )?,
            // <lambda, grad u - psi>
            w.op(
                Kernel::Dot,
                [Some(&f.lambda), None, Some(&f.grad_u), Some(&f.psi)],
                Target::Sum(sum::LAMBDA_DOT),
                [zero, zero, zero, Coef::fixed(-1.0)],
            )?,
            w.dot(&f.u, Some(&f.u_prev), sum::CHANGE)?,
            w.dot(&f.u, None, sum::UU)?,
            w.dot(&f.grad_u, None, sum::GUGU)?,
            w.dot(&f.psi, None, sum::PSIPSI)?,
            w.dot(&f.lambda, None, sum::LAMBDA)?,
        ])
    }
}

impl Apps {
    /// The applications of `op` the iteration records, on the arrays `f`; `n_fourier` is the
    /// number of detector pixels `N`; `carried`: the iteration carries the data residual.
    pub(super) fn new(
        w: &Wiring<'_>,
        op: &LaminoOperator,
        f: &Fields,
        n_fourier: f64,
        carried: bool,
    ) -> Result<Self, OperatorError> {
        let data_residual = if carried { &f.r_saved } else { &f.r };
        Ok(Self {
            residual: w.application(
                op,
                Apply::FourierAdjoint,
                Source::Difference(&f.dhat, &f.au),
                Sink::Real {
                    field: data_residual,
                    scale: Coef::fixed((1.0 / n_fourier) as f32),
                    accumulate: false,
                },
            )?,
            forward_p: w.application(
                op,
                Apply::FourierForward,
                Source::Real(&f.p),
                Sink::Complex(&f.ap),
            )?,
            r_sub_data_curvature: w.application(
                op,
                Apply::FourierAdjoint,
                Source::Complex(&f.ap),
                Sink::Real {
                    field: data_residual,
                    scale: Coef::times(-(1.0 / n_fourier) as f32, slot::STEP),
                    accumulate: true,
                },
            )?,
            forward_u: w.application(
                op,
                Apply::FourierForward,
                Source::Real(&f.u),
                Sink::Complex(&f.au),
            )?,
        })
    }
}
