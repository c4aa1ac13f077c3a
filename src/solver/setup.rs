//! Building an [`AdmmSolver`]: the operator, the arrays where the memory plan puts them, the
//! bound call sites of the iteration, and the data moved to the Fourier domain once
//! (`D = N F_fwd d`), alone or as a member of a multi-device team.

use std::ops::Range;
use std::sync::Arc;

use super::admm::AdmmSolver;
use super::error::SolverError;
use super::fields::{Fields, TeamArrays};
use super::ops::{Apps, Ops, ScalarSteps, Wiring};
use super::projections::{
    fill_projections, projections_hash, projections_layout, ProjectionBlocks, ProjectionDigests,
};
use super::slots::{slot, sum};
use super::vector::{Kernel, Target};
use crate::array::{Coef, Field, Residency, Scalars, Staging};
use crate::distributed::team::Share;
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::gpu::GpuError;
use crate::operator::{Apply, LaminoOperator, OperatorOptions, Sink, Source};
use crate::params::{AdmmParams, DataScale};
use crate::plan::{Array, MemoryPlan};

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
        // The CG steps stated (checkpoints record the count the run took).
        let params = params.for_width(g.n2);
        let op = operator(ctx, g, plan, member)?;
        let share = member.map(|(_, share)| share);
        let scalars = Scalars::new(ctx, slot::COUNT, sum::COUNT)?;
        let staging = staging(ctx, plan)?;
        let fields = match member {
            Some((arrays, _)) => arrays.fields.clone(),
            None => Fields::new(g, plan, |label, layout, residency, _| {
                Field::new(ctx, label, layout, residency)
            })?,
        };
        let n_fourier = (g.deth * g.detw) as f64;
        let w = Wiring {
            ctx,
            scalars: &scalars,
            staging: staging.as_ref(),
            share,
            // The volume side is stored by y row (`Array::layout`): the gradient runs over
            // (y, z, x), its components (x, z, y); the TV is isotropic, so only the order of
            // the components changes.
            shape: [g.n1, g.n0, g.n2],
        };
        let ops = Ops::new(&w, &fields, &params)?;
        let apps = Apps::new(&w, &op, &fields, n_fourier, params.carries_residual())?;
        let steps = ScalarSteps::new(ctx, &scalars)?;
        let spatial = spatial_projections(ctx, g, plan, staging.is_some(), member)?;
        let digests = match fill {
            Some((data, planes)) => fill_projections(ctx, &spatial, data, planes)?,
            None => ProjectionDigests::default(),
        };
        let data_hash = projections_hash(&digests.hashes);
        let data_scale = DataScale::of_operator_data(&digests.abs_sums, g.n2, g.volume_len());
        to_fourier_domain(&w, &op, &fields, &spatial, n_fourier)?;
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
            data_scale,
            staging,
            memo: None,
            toeplitz: None,
            last: None,
            data_residual_formed: false,
            projection_digests: digests,
        })
    }
}

/// The operator with its chunks and spectrum where `plan` puts them; a team member's works on
/// its share with the team's spectrum.
fn operator(
    ctx: &GpuContext,
    g: &Geometry,
    plan: &MemoryPlan,
    member: Option<(&TeamArrays, &Arc<Share>)>,
) -> Result<LaminoOperator, SolverError> {
    let residencies = (plan.residency(Array::Spectrum), &plan.u2_tables);
    Ok(match member {
        Some((arrays, share)) => {
            LaminoOperator::for_member(ctx, g, &plan.operator, residencies, share)?
                .into_member(arrays.spectrum.clone(), share.clone())
        }
        None => {
            LaminoOperator::with_residency(ctx, g, &plan.operator, residencies.0, residencies.1)?
        }
    })
}

/// The staging buffers host arrays pass through, for plans that keep arrays on the host (with
/// the readback pool sized to match); none for in-core plans.
fn staging(ctx: &GpuContext, plan: &MemoryPlan) -> Result<Option<Arc<Staging>>, GpuError> {
    Ok(match plan.staging_words {
        0 => None,
        words => {
            ctx.set_readback_pool_bytes(2 * words as u64 * 4);
            Some(Arc::new(Staging::new(ctx, words)?))
        }
    })
}

/// The array the spatial projections are written to: a team's shared one, else one of the
/// solver's own. In streaming mode (`streaming`: the plan has staging buffers) the spatial
/// projections stay on the host and pass through the device a chunk of angles at a time.
fn spatial_projections(
    ctx: &GpuContext,
    g: &Geometry,
    plan: &MemoryPlan,
    streaming: bool,
    member: Option<(&TeamArrays, &Arc<Share>)>,
) -> Result<Field, SolverError> {
    let spatial_residency = if streaming {
        plan.projections_residency(g)
    } else {
        Residency::Device
    };
    Ok(match member {
        Some((arrays, _)) => arrays.spatial.clone(),
        None => Field::new(
            ctx,
            "projections",
            projections_layout(g),
            &spatial_residency,
        )?,
    })
}

/// D = N F_fwd(d): the data `spatial` in the Fourier domain, once, into `f.dhat`.
fn to_fourier_domain(
    w: &Wiring<'_>,
    op: &LaminoOperator,
    f: &Fields,
    spatial: &Field,
    n_fourier: f64,
) -> Result<(), SolverError> {
    let to_fourier = w.application(
        op,
        Apply::Fft2d,
        Source::Real(spatial),
        Sink::Complex(&f.dhat),
    )?;
    let scale_dhat = w.op(
        Kernel::Lincomb,
        [Some(&f.ap), None, None, None],
        Target::Field(&f.dhat),
        [
            Coef::ZERO,
            Coef::ZERO,
            Coef::ZERO,
            Coef::fixed(n_fourier as f32),
        ],
    )?;
    let ctx = w.ctx;
    let mut rec = ctx.recorder("fourier data");
    op.record(ctx, &mut rec, &to_fourier)?;
    scale_dhat.record(ctx, &mut rec)?;
    ctx.submit(rec)?;
    Ok(())
}
