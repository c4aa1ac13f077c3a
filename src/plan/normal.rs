//! Whether a run can apply its inner loop's normal operator by Toeplitz embedding
//! ([`crate::operator::ToeplitzNormal`]), decided the same way by the plan (`--dry-run`) and by
//! the solver that runs it: the conditions, the device memory it needs, and the choice a report
//! states.

use serde::Serialize;

use super::Array;
use crate::array::Residency;
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::operator::{
    doubled_volume, toeplitz_binding, toeplitz_device_bytes, toeplitz_setup_bytes, LaminoOperator,
    OperatorOptions,
};
use crate::params::NormalOperator;

/// The normal operator a run applies, and why (report.json, the plan of `--dry-run`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NormalOperatorChoice {
    /// What was asked: `auto`, `toeplitz` or `gridding`.
    pub asked: &'static str,
    /// `toeplitz` or `gridding`.
    pub used: &'static str,
    /// Why `auto` chose gridding (absent when it chose Toeplitz or gridding was asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Device memory of the Toeplitz operator and its two volumes, bytes (0 for gridding).
    pub device_bytes: u64,
    /// Seconds spent computing the kernel and building the convolution (0 for gridding, and in
    /// a plan).
    pub kernel_s: f64,
}

impl NormalOperatorChoice {
    /// Gridding, as asked or (with `reason`) because Toeplitz cannot run.
    pub fn gridding(asked: NormalOperator, reason: Option<String>) -> Self {
        Self {
            asked: asked.name(),
            used: "gridding",
            reason,
            device_bytes: 0,
            kernel_s: 0.0,
        }
    }
}

/// What a run is, for the Toeplitz loop's conditions.
#[derive(Debug, Clone, Copy)]
pub struct ToeplitzConditions {
    /// Several devices or MPI ranks share the run.
    pub shared: bool,
    /// u and p live on the device (else the convolution reads a device copy of them, 4 bytes
    /// per voxel more).
    pub volumes_on_device: bool,
    /// The inner solver is CG with its carried residual.
    pub carried_cg: bool,
    pub memo: bool,
    /// Device memory the budget leaves beside what the run holds (`None` before a plan: the
    /// memory is then not checked).
    pub free_device_bytes: Option<u64>,
}

impl super::MemoryPlan {
    /// The Toeplitz loop's conditions under this plan, for a run on `sharers` devices or ranks
    /// with `params`, with or without the memo layer.
    pub fn toeplitz_conditions(
        &self,
        sharers: usize,
        params: &crate::params::AdmmParams,
        memo: bool,
    ) -> ToeplitzConditions {
        ToeplitzConditions {
            shared: sharers > 1,
            volumes_on_device: [Array::U, Array::P]
                .iter()
                .all(|&a| *self.residency(a) == Residency::Device),
            carried_cg: params.carries_residual(),
            memo,
            free_device_bytes: Some(self.budgets.device_bytes.saturating_sub(self.device_bytes)),
        }
    }
}

/// Device bytes the Toeplitz loop of `g` holds while it runs: its grid and spectrum, b and
/// `T p`, and the convolution's input when u and p are not `volumes_on_device`.
fn loop_bytes(g: &Geometry, volumes_on_device: bool) -> u64 {
    let volumes = if volumes_on_device { 2 } else { 3 };
    toeplitz_device_bytes([g.n1, g.n0, g.n2]) + volumes * 4 * g.volume_len() as u64
}

/// Device memory the Toeplitz loop of `g` needs: its grid, spectrum and two volumes (three when
/// u and p are not `volumes_on_device`: the convolution's input), the FFT workspace and
/// readback staging its setup leaves in the context, and while its kernel is computed an
/// operator of the doubled volume with its data and full grid.
pub fn toeplitz_need_bytes(ctx: &GpuContext, g: &Geometry, volumes_on_device: bool) -> Option<u64> {
    let doubled = doubled_volume(g);
    let kernel_op = LaminoOperator::estimate_device_bytes(
        ctx,
        &doubled,
        &OperatorOptions::default(),
        &Residency::Device,
    )
    .ok()?;
    let voxels = g.volume_len() as u64;
    let resident =
        loop_bytes(g, volumes_on_device).checked_add(toeplitz_setup_bytes(ctx, g, true))?;
    let transient = kernel_op
        .checked_add(voxels.checked_mul(64)?)?
        .checked_add((doubled.data_len() as u64).checked_mul(8)?)?;
    resident.checked_add(transient)
}

/// Why `auto` runs gridding where the Toeplitz loop could run: the Toeplitz loop gives its own
/// bits (its volumes differ from gridding's by the gridding accuracy, 1.6e-4 relative after 6
/// outer iterations in `tests/solver.rs`), and it does not yet run on several devices, nor does
/// a plan leave it room unless it is asked for (the plan then reserves its memory first), so
/// choosing it by the plan would make the bits depend on the device budget and the device count
/// (docs/operator-method.md, "Normal operator by Toeplitz embedding").
pub const AUTO_RUNS_GRIDDING: &str = "auto runs gridding until the Toeplitz loop also runs on \
    several devices and fits streaming plans by itself (the same bits whatever the plan and \
    device count): ask for --normal-operator toeplitz";

/// Why the Toeplitz loop cannot run under `c` for `g`, if it cannot.
pub fn toeplitz_obstacle(ctx: &GpuContext, g: &Geometry, c: ToeplitzConditions) -> Option<String> {
    if c.shared {
        return Some("it runs on one device only (this run shares its work among devices)".into());
    }
    if !c.carried_cg {
        return Some(
            "it runs the default CG with its carried residual (not Dai-Yuan or plain ADMM)".into(),
        );
    }
    if c.memo {
        return Some(
            "the memo layer memoizes gridding, which the Toeplitz loop does not run".into(),
        );
    }
    let (grid, binding) = toeplitz_binding(g, ctx.max_binding_bytes());
    if grid > binding {
        return Some(format!(
            "its kernel's transform binds the doubled grid whole ({grid} bytes, 64 per voxel), \
             more than the device's largest binding ({binding} bytes)"
        ));
    }
    let free = c.free_device_bytes?;
    match toeplitz_need_bytes(ctx, g, c.volumes_on_device) {
        Some(need) if need <= free => None,
        need => Some(format!(
            "it needs {} bytes of device memory (the kernel's computation included), {free} of \
             the device budget are free",
            need.map_or("more than 2^64".to_string(), |n| n.to_string())
        )),
    }
}

/// The choice a plan states for `asked` under `c` (`toeplitz` asked for where it cannot run is
/// stated as gridding with the reason the run will refuse it for).
pub fn planned_normal_operator(
    ctx: &GpuContext,
    g: &Geometry,
    asked: NormalOperator,
    c: ToeplitzConditions,
) -> NormalOperatorChoice {
    if asked == NormalOperator::Gridding {
        return NormalOperatorChoice::gridding(asked, None);
    }
    match toeplitz_obstacle(ctx, g, c) {
        Some(reason) => NormalOperatorChoice::gridding(asked, Some(reason)),
        None if asked == NormalOperator::Auto => {
            NormalOperatorChoice::gridding(asked, Some(AUTO_RUNS_GRIDDING.into()))
        }
        None => NormalOperatorChoice {
            asked: asked.name(),
            used: "toeplitz",
            reason: None,
            device_bytes: loop_bytes(g, c.volumes_on_device),
            kernel_s: 0.0,
        },
    }
}
