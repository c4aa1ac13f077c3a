//! The memory planner, in one place: from the geometry, the adapter's limits and the budgets it
//! decides, before anything is allocated, where every array of a reconstruction lives (device,
//! host memory, or a memory-mapped scratch file), the chunk sizes of every operator stage and the
//! size of the staging buffers host arrays pass through.
//!
//! In-core is the plan where every array is on the device; streaming keeps the arrays that are
//! touched most per byte on the device as far as the budget allows and streams the others a
//! block at a time. Both run the same kernels, so with the same chunks streaming and in-core give
//! the same bits; other chunk sizes change only the FFT batches' rounding (tested).

mod arrays;
mod budgets;
pub mod cluster_model;
mod normal;
mod ranks;

use arrays::halo_bytes;
pub use arrays::{operator_applications, operator_applications_in, Array, NormalLoop, Portion};
pub use budgets::{BudgetSource, Budgets, DEFAULT_DEVICE_BUDGET, DEFAULT_HOST_FRACTION};
pub use normal::{
    planned_normal_operator, toeplitz_need_bytes, toeplitz_obstacle, NormalOperatorChoice,
    ToeplitzConditions, AUTO_RUNS_GRIDDING,
};
pub use ranks::{member_plans, plan_member, MemberPlan};

use std::path::PathBuf;

use serde::Serialize;
use thiserror::Error;

use crate::array::Residency;
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::operator::{
    AdjointGridding, LaminoOperator, OperatorError, OperatorOptions, MIN_STAGE_CHUNKS,
};
use crate::params::AdmmParams;

/// Errors of planning.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PlanError {
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// Not even the smallest chunks fit the device budget.
    #[error(
        "the device budget of {budget} bytes ({budget_mib:.1} MiB) is too small for even one chunk: \
         the smallest streaming plan needs {needed} bytes ({needed_mib:.1} MiB) on the device"
    )]
    DeviceBudget {
        budget: u64,
        budget_mib: f64,
        needed: u64,
        needed_mib: f64,
    },
    /// The arrays held on the host do not fit the host budget and no scratch space was given.
    #[error(
        "the arrays held on the host need {needed} bytes ({needed_gib:.2} GiB), more than the host \
         budget of {budget} bytes ({budget_gib:.2} GiB); give a scratch directory (--scratch DIR) or \
         raise --max-host-memory"
    )]
    HostBudget {
        needed: u64,
        needed_gib: f64,
        budget: u64,
        budget_gib: f64,
    },
    /// The scratch directory cannot hold the arrays planned there.
    #[error("scratch directory {dir}: {reason}")]
    Scratch { dir: PathBuf, reason: String },
}

/// The plan's share of the device budget left for chunk buffers and staging when searching for
/// the largest chunks: the rest goes to resident arrays, which save more traffic.
const CHUNK_SHARE: f64 = 0.5;

/// The share of the device budget a plan fills: the rest covers what it does not count one by
/// one (the uniforms of every bound kernel, FFT twiddle tables, wgpu's own small buffers).
const PACKED_SHARE: f64 = 0.9;

/// The cube the planner's tests plan: `n` voxels a side seen at `n` angles, tilted 30 degrees
/// from the beam's normal.
#[cfg(test)]
fn test_geometry(n: usize) -> Geometry {
    Geometry::cube(n, n, crate::geometry::Tilt::from_degrees(30.0))
}

/// The least device bytes (up to 1 TiB) for which `is_in_core`, found by bisection: plans are
/// in-core from some budget on.
#[cfg(test)]
fn least_in_core_bytes(is_in_core: impl Fn(u64) -> bool) -> u64 {
    let (mut low, mut high) = (1u64, 1u64 << 40);
    while low < high {
        let middle = low + (high - low) / 2;
        if is_in_core(middle) {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    low
}

/// In-core or streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    InCore,
    Streaming,
}

/// One array in the plan.
#[derive(Debug, Clone, Serialize)]
pub struct ArrayPlan {
    pub array: Array,
    pub bytes: u64,
    pub residency: Residency,
    pub accesses_per_iteration: u64,
}

/// The memory plan of one reconstruction.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryPlan {
    /// The volume `(n0, n1, n2)` the solver runs on (with any lateral padding).
    pub volume: [usize; 3],
    /// Where its centre lies relative to the default volume's centre, voxels `(z, y, x)`
    /// ([`Geometry::offset`]): non-zero for a slab or an x/y region of interest.
    pub volume_offset: [f64; 3],
    pub mode: Mode,
    /// The chunk sizes of the operator's stages.
    #[serde(skip)]
    pub operator: OperatorOptions,
    /// (y rows per U1 chunk, detector rows per U2 chunk, projections per F chunk).
    pub chunks: (usize, usize, usize),
    /// Words of each of the five staging buffers (0 in-core).
    pub staging_words: usize,
    pub arrays: Vec<ArrayPlan>,
    /// Where the operator's U2 tables live: on the device in-core, and in streaming mode when
    /// they fit in their place in the traffic order (bytes moved per byte held); otherwise on the
    /// host (or in scratch), each U2 chunk receiving its rows' slice before it computes.
    pub u2_tables: Residency,
    /// Bytes of the whole U2 tables.
    pub u2_table_bytes: u64,
    /// Device memory the plan holds: operator, staging, readback pool, resident arrays.
    pub device_bytes: u64,
    pub host_bytes: u64,
    pub scratch_bytes: u64,
    /// Bytes between host and device per outer iteration of the `inner_loop`: the host arrays'
    /// accesses (with the halo planes of the gradient and divergence passes) and, in streaming
    /// mode, the U2 table slices the gridding loop reads. What the context counts
    /// ([`GpuContext::traffic`]) over an iteration, less the reductions' readback (tested).
    pub bytes_moved_per_iteration: u64,
    /// The inner loop whose accesses the plan counts. For the Toeplitz loop, its own memory was
    /// set aside out of the device budget before the arrays were placed; `device_bytes` does not
    /// include it (`normal_operator` states it).
    pub inner_loop: NormalLoop,
    pub budgets: Budgets,
    /// The part of every array the plan is for: the whole, or one member's share
    /// ([`plan_member`]); the bytes above are that part's.
    pub portion: Portion,
    /// For a run of several devices or MPI ranks: each member's own plan (its shares against its
    /// device), which says whether its shares fit its device. Empty for one device.
    pub members: Vec<MemberPlan>,
    /// The inner loop's normal operator the run will apply (stated by the reconstructor's
    /// plan; absent from plans of the planner alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub normal_operator: Option<NormalOperatorChoice>,
}

impl MemoryPlan {
    /// How many arrays live on the device.
    pub fn resident_arrays(&self) -> usize {
        self.arrays
            .iter()
            .filter(|a| a.residency == Residency::Device)
            .count()
    }

    /// Where `array` lives.
    pub fn residency(&self, array: Array) -> &Residency {
        &self
            .arrays
            .iter()
            .find(|a| a.array == array)
            .expect("every array is planned")
            .residency
    }

    /// Where a streaming solver holds the spatial projections while it moves them to the Fourier
    /// domain (only at setup, beside the planned arrays): in host memory while the host budget
    /// has room for them, else in scratch when there is scratch space.
    pub fn projections_residency(&self, g: &Geometry) -> Residency {
        let bytes = 4 * g.data_len() as u64;
        match &self.budgets.scratch {
            Some(dir) if self.host_bytes.saturating_add(bytes) > self.budgets.host_bytes => {
                Residency::Scratch(dir.clone())
            }
            _ => Residency::Host,
        }
    }

    /// Every array on the device with the chunking of `options`: the plan of callers that manage
    /// memory themselves (and of the tests of the kernels).
    pub fn in_core(
        ctx: &GpuContext,
        g: &Geometry,
        params: &AdmmParams,
        options: &OperatorOptions,
    ) -> Result<Self, PlanError> {
        let budgets = Budgets::given(u64::MAX, u64::MAX, None);
        let fixed = fixed_bytes(ctx, g, options, 0, true, Portion::WHOLE)?;
        assemble(
            ctx,
            g,
            params,
            *options,
            (0, fixed),
            (Array::BY_TRAFFIC.len(), true, NormalLoop::Gridding),
            (budgets, Portion::WHOLE),
        )
    }
}

impl std::fmt::Display for MemoryPlan {
    /// A summary for people: mode, budgets and their source, chunks, bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let b = &self.budgets;
        let mode = match (self.mode, self.members.is_empty()) {
            (_, false) => {
                "shared by the devices below (every array in host memory, through which they \
                 exchange blocks; each device follows its own plan of its shares)"
            }
            (Mode::InCore, true) => "in-core (every array on the device)",
            (Mode::Streaming, true) => {
                "streaming (arrays beyond the device budget pass through it in chunks)"
            }
        };
        writeln!(f, "memory plan: {mode}")?;
        let [n0, n1, n2] = self.volume;
        let [z, y, x] = self.volume_offset;
        writeln!(
            f,
            "  volume: {n0} x {n1} x {n2} (z, y, x), centre offset ({z}, {y}, {x}) voxels from \
             the default volume's"
        )?;
        writeln!(
            f,
            "  budgets: device {:.2} GiB ({:?}), host {:.2} GiB ({:?}), scratch {}",
            gib(b.device_bytes),
            b.device_source,
            gib(b.host_bytes),
            b.host_source,
            b.scratch
                .as_ref()
                .map_or("none".into(), |d| d.display().to_string())
        )?;
        writeln!(
            f,
            "  chunks: {} y rows (U1), {} detector rows (U2), {} projections (F); staging {} words; \
             U2* weights {}",
            self.chunks.0,
            self.chunks.1,
            self.chunks.2,
            self.staging_words,
            self.operator.adjoint_gridding.name()
        )?;
        let tables = match &self.u2_tables {
            Residency::Device => "on the device",
            Residency::Host => "on the host, a chunk's slice uploaded per U2 chunk",
            Residency::Scratch(_) => "in scratch, a chunk's slice uploaded per U2 chunk",
        };
        writeln!(
            f,
            "  U2 tables: {:.2} GiB, {tables}",
            gib(self.u2_table_bytes)
        )?;
        writeln!(
            f,
            "  arrays on the device: {} of {}; held: device {:.2} GiB, host {:.2} GiB, scratch {:.2} GiB",
            self.resident_arrays(),
            self.arrays.len(),
            gib(self.device_bytes),
            gib(self.host_bytes),
            gib(self.scratch_bytes)
        )?;
        let inner_loop = match self.inner_loop {
            NormalLoop::Gridding => "gridding",
            NormalLoop::Toeplitz => "Toeplitz (its own memory set aside beside the above)",
        };
        write!(
            f,
            "  moved between host and device per outer iteration: {:.2} GiB, counted for the \
             {inner_loop} inner loop",
            gib(self.bytes_moved_per_iteration)
        )?;
        if !self.members.is_empty() {
            write!(
                f,
                "\n  each device's plan of its shares, which the run follows (chunks and staging \
                 as above):"
            )?;
        }
        for m in &self.members {
            let mode = match m.mode {
                Mode::InCore => {
                    "in-core (its shares stay on its device; only the blocks it exchanges with \
                     the others cross its bus)"
                }
                Mode::Streaming => "streaming its shares through its staging buffers",
            };
            write!(
                f,
                "\n    rank {} device {}: {mode}, shares {:.2} GiB, device {:.2} GiB, host {:.2} \
                 GiB, scratch {:.2} GiB, moved {:.2} GiB per outer iteration",
                m.rank,
                m.device,
                gib(m.share_bytes),
                gib(m.device_bytes),
                gib(m.host_bytes),
                gib(m.scratch_bytes),
                gib(m.bytes_moved_per_iteration)
            )?;
        }
        Ok(())
    }
}

/// Device bytes that do not depend on the arrays' residency: the operator with `options` (its U2
/// tables as one chunk's slice buffers), the solver's scalars and reduction buffers, and for
/// streaming the staging buffers and readback pool.
fn fixed_device_bytes(
    ctx: &GpuContext,
    g: &Geometry,
    options: &OperatorOptions,
    staging_words: usize,
) -> Result<u64, PlanError> {
    // The operator's estimate includes its spectrum, which the plan places like any array.
    let operator = LaminoOperator::estimate_device_bytes(ctx, g, options, &Residency::Host)?
        - Array::Spectrum.layout(g).bytes();
    // Sixteen reductions, each with one partial sum per workgroup of a window of planes (at most
    // one binding; a workgroup's slack per plane) and two per plane.
    let widest = (3 * g.volume_len()).max(2 * g.data_len()) as u64;
    let window = widest.min(ctx.max_binding_bytes() / 4);
    let per_workgroup = window / crate::shaders::SOLVER_VECTOR_WORKGROUP as u64;
    // Planes: the volume's z slices, the data's detector rows.
    let planes = g.n0.max(g.deth) as u64;
    let reductions = 16 * (per_workgroup + 1 + 3 * planes) * 4;
    let scalars = 1024;
    // The staging buffers and a readback pool of two output blocks.
    let streaming = 7 * staging_words as u64 * 4;
    Ok(operator + reductions + scalars + streaming)
}

/// [`fixed_device_bytes`] for `portion`, with its rows of the U2 tables when `tables_resident`:
/// resident tables hold the portion's rows beyond the one chunk's slice already counted (for
/// the whole arrays, every row: the operator's own estimate with resident tables).
fn fixed_bytes(
    ctx: &GpuContext,
    g: &Geometry,
    options: &OperatorOptions,
    staging_words: usize,
    tables_resident: bool,
    portion: Portion,
) -> Result<u64, PlanError> {
    let streamed = fixed_device_bytes(ctx, g, options, staging_words)?;
    if !tables_resident {
        return Ok(streamed);
    }
    let chunk_rows = LaminoOperator::chunk_sizes(ctx, g, options)?.1;
    let row = LaminoOperator::u2_table_bytes(g) / g.deth as u64;
    Ok(streamed + portion.planes(g.deth).saturating_sub(chunk_rows) as u64 * row)
}

/// Staging words per unit of each stage's chunk (a y row, a detector row, a projection) and the
/// least a vector kernel's window needs (one plane of 3-vectors with its halo).
fn staging_units(g: &Geometry) -> ([usize; 3], usize) {
    let u1 = 2 * g.n0.max(g.deth) * g.n2;
    let u2 = 2 * (g.n1 * g.n2).max(g.ntheta() * g.detw);
    let f = 2 * g.deth * g.detw;
    ([u1, u2, f], 3 * g.n1 * g.n2 * 2)
}

/// Chunk sizes whose blocks fit `staging_words`: (rows, detector rows, angles), or `None` when
/// not even one row fits.
fn chunks_for(g: &Geometry, staging_words: usize) -> Option<(usize, usize, usize)> {
    let w = staging_words;
    let ([u1, u2, f], vector) = staging_units(g);
    if w < u1.max(u2).max(f).max(vector) {
        return None;
    }
    Some((
        (w / u1).min(g.n1),
        (w / u2).min(g.deth),
        (w / f).min(g.ntheta()),
    ))
}

/// The staging words that hold the blocks of chunks of `chunks` (rows, detector rows, angles).
fn staging_words_for(g: &Geometry, (cy, ck, ca): (usize, usize, usize)) -> usize {
    let ([u1, u2, f], vector) = staging_units(g);
    (u1 * cy).max(u2 * ck).max(f * ca).max(vector)
}

/// The plan for `g` and `params` within `budgets`; `caps` bounds the chunk sizes (the memo
/// layer's chunking). Arrays planned into scratch files need the scratch directory to exist and
/// have room for them.
pub fn plan(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    caps: &OperatorOptions,
    budgets: &Budgets,
) -> Result<MemoryPlan, PlanError> {
    plan_for_loop(ctx, g, params, caps, budgets, NormalLoop::Gridding)
}

/// [`plan`] for a run on one device whose inner loop applies `normal`.
pub fn plan_for_loop(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    caps: &OperatorOptions,
    budgets: &Budgets,
    normal: NormalLoop,
) -> Result<MemoryPlan, PlanError> {
    let p = plan_on_paper(ctx, g, params, caps, budgets, normal)?;
    check_scratch(budgets, &p)?;
    Ok(p)
}

/// Checks that the scratch directory exists and has room for what `p` puts there.
fn check_scratch(budgets: &Budgets, p: &MemoryPlan) -> Result<(), PlanError> {
    if let (Some(dir), true) = (&budgets.scratch, p.scratch_bytes > 0) {
        let err = |reason: String| PlanError::Scratch {
            dir: dir.clone(),
            reason,
        };
        if !dir.is_dir() {
            return Err(err("not a directory".into()));
        }
        let available = fs4::available_space(dir).map_err(|e| err(e.to_string()))?;
        if available < p.scratch_bytes {
            return Err(err(format!(
                "the plan puts {} bytes there, but only {available} bytes are free",
                p.scratch_bytes
            )));
        }
    }
    Ok(())
}

/// The plan of a run on several devices of `budgets.device_bytes` each: every array in host
/// memory (or scratch), shared by the devices, each streaming its share of the chunks (see
/// [`crate::solver::AdmmTeam`]) or keeping its homes on its device where they fit beside the
/// plan ([`member_plans`]). The chunks are one device's in-core chunks where it could hold
/// everything; else those of [`ranks::chunks_for_homes`], which let the fewest members keep their
/// homes; else a streaming plan's for one device.
pub fn plan_shared(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    caps: &OperatorOptions,
    budgets: &Budgets,
) -> Result<MemoryPlan, PlanError> {
    g.validate().map_err(OperatorError::from)?;
    let budget = (budgets.device_bytes as f64 * PACKED_SHARE) as u64;
    let whole = Portion::WHOLE;
    let shared = (NormalLoop::Gridding, (true, whole));
    let p = with_adjoint_gridding(caps, |caps| {
        Ok(
            match plan_in_core(ctx, g, params, caps, budgets, budget, shared)? {
                Some(p) => p,
                None => match ranks::chunks_for_homes(ctx, g, params, caps, budgets)? {
                    Some(p) => p,
                    None => plan_streaming(ctx, g, params, caps, budgets, shared)?,
                },
            },
        )
    })?;
    check_scratch(budgets, &p)?;
    Ok(p)
}

/// The plan `make` gives for `caps`, where they leave the way U2* weighs its points to the
/// planner ([`AdjointGridding::Auto`]): with its weights tabulated (records that cost device
/// memory and shrink the chunks where they bound them), unless that plan does not fit, streams
/// where the evaluated one is in-core, or moves more bytes per iteration; else evaluated. The
/// time the records save never costs a run its plan.
fn with_adjoint_gridding(
    caps: &OperatorOptions,
    make: impl Fn(&OperatorOptions) -> Result<MemoryPlan, PlanError>,
) -> Result<MemoryPlan, PlanError> {
    if caps.adjoint_gridding != AdjointGridding::Auto {
        return make(caps);
    }
    let way = |adjoint_gridding| OperatorOptions {
        adjoint_gridding,
        ..*caps
    };
    let evaluated = make(&way(AdjointGridding::Evaluated))?;
    match make(&way(AdjointGridding::Tabulated)) {
        Ok(tabulated)
            if (tabulated.mode == Mode::InCore || evaluated.mode == Mode::Streaming)
                && tabulated.bytes_moved_per_iteration <= evaluated.bytes_moved_per_iteration =>
        {
            Ok(tabulated)
        }
        _ => Ok(evaluated),
    }
}

/// The plan as [`plan_for_loop`] makes it, without looking at the scratch directory: the sizes
/// for a machine other than this one (`lamino bench scale`'s plans of volumes up to 2048^3).
/// For the Toeplitz loop its memory ([`toeplitz_need_bytes`], with room for a device copy of u
/// or p in case they stream) is set aside first, and the arrays are placed in what is left; the
/// plan states the whole budget.
pub fn plan_on_paper(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    caps: &OperatorOptions,
    budgets: &Budgets,
    normal: NormalLoop,
) -> Result<MemoryPlan, PlanError> {
    let reserved = match normal {
        NormalLoop::Gridding => 0,
        NormalLoop::Toeplitz => toeplitz_need_bytes(ctx, g, false).unwrap_or(u64::MAX),
    };
    let arrays = Budgets {
        device_bytes: budgets.device_bytes.saturating_sub(reserved),
        ..budgets.clone()
    };
    let alone = (normal, (false, Portion::WHOLE));
    let mut p = with_adjoint_gridding(caps, |caps| {
        plan_streaming(ctx, g, params, caps, &arrays, alone)
    })?;
    p.budgets.device_bytes = budgets.device_bytes;
    Ok(p)
}

/// The in-core plan when everything fits (unless `shared`), else the streaming plan, with no
/// array on the device when `shared`; of `portion` of every array, for the inner loop `normal`.
fn plan_streaming(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    caps: &OperatorOptions,
    budgets: &Budgets,
    (normal, (shared, portion)): (NormalLoop, (bool, Portion)),
) -> Result<MemoryPlan, PlanError> {
    g.validate().map_err(OperatorError::from)?;
    let budget = (budgets.device_bytes as f64 * PACKED_SHARE) as u64;
    let arrangement = (normal, (shared, portion));
    if let Some(plan) = plan_in_core(ctx, g, params, caps, budgets, budget, arrangement)? {
        return Ok(plan);
    }
    let (words, fixed, options) = streaming_chunks(ctx, g, caps, budgets, budget)?;
    let (resident, tables_resident, fixed) = streaming_residency(
        ctx,
        g,
        params,
        &options,
        (words, fixed),
        (budget, budgets),
        arrangement,
    )?;
    // The spatial projections stay on the host in streaming mode: setup streams them.
    assemble(
        ctx,
        g,
        params,
        options,
        (words, fixed),
        (resident, tables_resident, normal),
        (budgets.clone(), portion),
    )
}

/// A device array is one buffer: one beyond the largest buffer of the device planned for
/// ([`Budgets::max_buffer_bytes`], else this device's) cannot be resident.
fn fits_a_buffer(ctx: &GpuContext, budgets: &Budgets, bytes: u64) -> bool {
    bytes <= budgets.max_buffer_bytes.unwrap_or(ctx.max_buffer_bytes())
}

/// The in-core plan of `portion`, if its share of every array and the operator fit the
/// `budget` (and each share one buffer); when `shared`, the plan whose devices take the in-core
/// chunks with nothing resident, if their blocks fit the staging buffers. For the inner loop
/// `normal`.
fn plan_in_core(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    caps: &OperatorOptions,
    budgets: &Budgets,
    budget: u64,
    (normal, (shared, portion)): (NormalLoop, (bool, Portion)),
) -> Result<Option<MemoryPlan>, PlanError> {
    let everything: u64 = Array::BY_TRAFFIC
        .iter()
        .map(|&a| portion.held_bytes(a, g))
        .sum::<u64>()
        // The spatial projections during setup.
        + portion.projection_bytes(g);
    let all_fit_buffers = Array::BY_TRAFFIC
        .iter()
        .all(|&a| fits_a_buffer(ctx, budgets, portion.share_bytes(a, g)))
        && fits_a_buffer(ctx, budgets, portion.u2_largest_table_bytes(g));
    if !all_fit_buffers || everything > budget {
        return Ok(None);
    }
    if !shared {
        let Some((options, fixed)) = in_core_chunks(ctx, g, caps, budget - everything, portion)?
        else {
            return Ok(None);
        };
        return assemble(
            ctx,
            g,
            params,
            options,
            (0, fixed),
            (Array::BY_TRAFFIC.len(), true, normal),
            (budgets.clone(), portion),
        )
        .map(Some);
    }
    // Where one device could hold everything with the in-core plan's chunks, the devices of a
    // shared plan take those chunks (so their bits are one device's in-core bits) if their
    // blocks fit the staging buffers.
    if fixed_bytes(ctx, g, caps, 0, true, portion)? > budget - everything {
        return Ok(None);
    }
    let chunks = LaminoOperator::chunk_sizes(ctx, g, caps)?;
    let words = staging_words_for(g, chunks);
    let options = chunk_options(caps, chunks);
    let fixed = fixed_bytes(ctx, g, &options, words, true, portion)?;
    if words as u64 * 4 <= ctx.max_binding_bytes() && fixed <= budget {
        return assemble(
            ctx,
            g,
            params,
            options,
            (words, fixed),
            (0, true, normal),
            (budgets.clone(), portion),
        )
        .map(Some);
    }
    Ok(None)
}

/// The operator options `caps` with the chunks capped at `(rows, detector rows, angles)`.
fn chunk_options(caps: &OperatorOptions, (cy, ck, ca): (usize, usize, usize)) -> OperatorOptions {
    OperatorOptions {
        max_chunk_y: Some(cy),
        max_chunk_rows: Some(ck),
        max_chunk_angles: Some(ca),
        ..*caps
    }
}

/// The next rung of the chunks' halving ladder, `None` below chunks of one.
fn halved(chunks: (usize, usize, usize)) -> Option<(usize, usize, usize)> {
    (chunks != (1, 1, 1)).then(|| {
        (
            chunks.0.div_ceil(2),
            chunks.1.div_ceil(2),
            chunks.2.div_ceil(2),
        )
    })
}

/// The operator's options for an in-core plan whose chunk buffers and tables (its fixed bytes,
/// returned with them) fit `room`: the largest chunks `caps` allows, else those chunks halved
/// until they fit (rather than streaming arrays that fit over the bus because the chunk buffers
/// of a large binding do not fit beside them); `None` if not even chunks of one fit.
fn in_core_chunks(
    ctx: &GpuContext,
    g: &Geometry,
    caps: &OperatorOptions,
    room: u64,
    portion: Portion,
) -> Result<Option<(OperatorOptions, u64)>, PlanError> {
    let mut options = *caps;
    let mut chunks = LaminoOperator::chunk_sizes(ctx, g, caps)?;
    loop {
        let fixed = fixed_bytes(ctx, g, &options, 0, true, portion)?;
        if fixed <= room {
            return Ok(Some((options, fixed)));
        }
        let Some(next) = halved(chunks) else {
            return Ok(None);
        };
        chunks = next;
        options = chunk_options(caps, chunks);
    }
}

/// Streaming chunks: the largest staging buffers (in words) whose fixed cost stays within the
/// chunk share of the `budget`, with that fixed cost and the operator options they imply.
/// Without caps, at least MIN_STAGE_CHUNKS chunks per stage, as in-core.
fn streaming_chunks(
    ctx: &GpuContext,
    g: &Geometry,
    caps: &OperatorOptions,
    budgets: &Budgets,
    budget: u64,
) -> Result<(usize, u64, OperatorOptions), PlanError> {
    let cap = |a: Option<usize>, axis: usize, b: usize| {
        a.unwrap_or(axis.div_ceil(MIN_STAGE_CHUNKS)).min(b).max(1)
    };
    let options_for = |w: usize| {
        chunks_for(g, w).map(|(cy, ck, ca)| OperatorOptions {
            max_chunk_y: Some(cap(caps.max_chunk_y, g.n1, cy)),
            max_chunk_rows: Some(cap(caps.max_chunk_rows, g.deth, ck)),
            max_chunk_angles: Some(cap(caps.max_chunk_angles, g.ntheta(), ca)),
            ..*caps
        })
    };
    let minimum = staging_words_for(g, (1, 1, 1));
    let smallest = options_for(minimum).expect("the minimum fits itself");
    let smallest_fixed = fixed_device_bytes(ctx, g, &smallest, minimum)?;
    if smallest_fixed > budget {
        return Err(PlanError::DeviceBudget {
            budget: budgets.device_bytes,
            budget_mib: budgets.device_bytes as f64 / (1u64 << 20) as f64,
            needed: (smallest_fixed as f64 / PACKED_SHARE) as u64,
            needed_mib: smallest_fixed as f64 / PACKED_SHARE / (1u64 << 20) as f64,
        });
    }
    let share = (budget as f64 * CHUNK_SHARE) as u64;
    let mut words = minimum;
    let mut fixed = smallest_fixed;
    let mut options = smallest;
    // Each staging buffer is bound whole: at most one storage binding (lavapipe: 128 MiB).
    let binding_words = (ctx.max_binding_bytes() / 4) as usize;
    loop {
        let next = words * 2;
        if next > binding_words {
            break;
        }
        let Some(o) = options_for(next) else { break };
        let f = fixed_device_bytes(ctx, g, &o, next)?;
        if f > share.max(smallest_fixed) || o == options {
            break;
        }
        (words, fixed, options) = (next, f, o);
    }
    Ok((words, fixed, options))
}

/// Streaming residency of `portion`: as many of its shares on the device as fit the `budget`
/// after the `fixed` bytes, most accessed per byte first (none when `shared`), and its rows of
/// the U2 tables in their place in that order (bytes moved per byte held) if they fit there or
/// after the last array. Returns how many arrays of [`Array::by_traffic`] of the inner loop
/// `normal` are resident, whether the tables are, and the fixed bytes with the tables.
fn streaming_residency(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    options: &OperatorOptions,
    (words, fixed): (usize, u64),
    (budget, budgets): (u64, &Budgets),
    (normal, (shared, portion)): (NormalLoop, (bool, Portion)),
) -> Result<(usize, bool, u64), PlanError> {
    let tables_extra = fixed_bytes(ctx, g, options, words, true, portion)? - fixed;
    let tables_rate = u2_table_traffic(g, params, portion, normal) as f64
        / portion.u2_table_bytes(g).max(1) as f64;
    let mut tables_resident = false;
    // Resident tables are whole buffers: beyond the device's largest buffer they stream however
    // large the budget.
    let mut tables_considered = !fits_a_buffer(ctx, budgets, portion.u2_largest_table_bytes(g));
    let mut resident = 0;
    let mut used = fixed;
    for (i, a) in Array::by_traffic(normal).iter().enumerate() {
        if *a == Array::DHat {
            continue;
        }
        // D and A u share residency: take D with A u.
        let group: &[Array] = if *a == Array::Au {
            &[Array::Au, Array::DHat]
        } else {
            std::slice::from_ref(a)
        };
        let bytes: u64 = group.iter().map(|&a| portion.held_bytes(a, g)).sum();
        let traffic: u64 = group
            .iter()
            .map(|&a| portion.share_bytes(a, g) * a.accesses(params, g.n2, normal))
            .sum();
        if !tables_considered && (traffic as f64) < tables_rate * bytes as f64 {
            tables_considered = true;
            if used + tables_extra <= budget {
                used += tables_extra;
                tables_resident = true;
            }
        }
        if shared
            || used + bytes > budget
            || !group
                .iter()
                .all(|&a| fits_a_buffer(ctx, budgets, portion.share_bytes(a, g)))
        {
            break;
        }
        used += bytes;
        resident = i + group.len();
    }
    if !tables_considered && used + tables_extra <= budget {
        used += tables_extra;
        tables_resident = true;
    }
    debug_assert!(used <= budget);
    let fixed = fixed + if tables_resident { tables_extra } else { 0 };
    Ok((resident, tables_resident, fixed))
}

/// Bytes of U2 table slices `portion` uploads per outer iteration when the tables are not
/// resident: a forward U2 chunk uploads its slice of the coordinates, an adjoint chunk all three
/// tables. The Toeplitz loop applies neither A nor A* in an outer iteration.
fn u2_table_traffic(
    g: &Geometry,
    params: &AdmmParams,
    portion: Portion,
    normal: NormalLoop,
) -> u64 {
    if normal == NormalLoop::Toeplitz && params.carries_residual() {
        return 0;
    }
    let (forward, adjoint) = operator_applications(params, g.n2);
    forward * portion.u2_coordinates_bytes(g) + adjoint * portion.u2_table_bytes(g)
}

/// The plan of `portion` with `staging_words` (0: in-core) and `fixed` device bytes, the first
/// `resident` arrays of [`Array::by_traffic`] of the inner loop `normal` on the device, and the
/// U2 tables there if `tables_resident`.
fn assemble(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    operator: OperatorOptions,
    (staging_words, fixed): (usize, u64),
    (resident, tables_resident, normal): (usize, bool, NormalLoop),
    (budgets, portion): (Budgets, Portion),
) -> Result<MemoryPlan, PlanError> {
    let mode = if staging_words == 0 {
        Mode::InCore
    } else {
        Mode::Streaming
    };
    let mut arrays: Vec<ArrayPlan> = Array::by_traffic(normal)
        .iter()
        .enumerate()
        .map(|(i, &array)| ArrayPlan {
            array,
            bytes: portion.held_bytes(array, g),
            residency: if i < resident {
                Residency::Device
            } else {
                Residency::Host
            },
            accesses_per_iteration: array.accesses(params, g.n2, normal),
        })
        .collect();
    // U2 tables that are not resident are held on the host; read at every application, more
    // than any host array per byte, they are the last to go to scratch.
    let u2_table_bytes = portion.u2_table_bytes(g);
    let mut u2_tables = if tables_resident {
        Residency::Device
    } else {
        Residency::Host
    };
    let tables_on_host = if tables_resident { 0 } else { u2_table_bytes };
    // Host arrays beyond the host budget go to scratch, least accessed first.
    let mut host: u64 = tables_on_host
        + arrays
            .iter()
            .filter(|a| a.residency == Residency::Host)
            .map(|a| a.bytes)
            .sum::<u64>();
    let mut scratch = 0;
    let over_budget = |needed: u64| PlanError::HostBudget {
        needed,
        needed_gib: needed as f64 / (1u64 << 30) as f64,
        budget: budgets.host_bytes,
        budget_gib: budgets.host_bytes as f64 / (1u64 << 30) as f64,
    };
    for a in arrays.iter_mut().rev() {
        if host <= budgets.host_bytes {
            break;
        }
        if a.residency == Residency::Host {
            let Some(dir) = &budgets.scratch else {
                return Err(over_budget(host));
            };
            a.residency = Residency::Scratch(dir.clone());
            host -= a.bytes;
            scratch += a.bytes;
        }
    }
    if host > budgets.host_bytes && tables_on_host > 0 {
        let Some(dir) = &budgets.scratch else {
            return Err(over_budget(host));
        };
        u2_tables = Residency::Scratch(dir.clone());
        host -= tables_on_host;
        scratch += tables_on_host;
    }
    let device_resident: u64 = arrays
        .iter()
        .filter(|a| a.residency == Residency::Device)
        .map(|a| a.bytes)
        .sum();
    let tables_moved = if tables_resident {
        0
    } else {
        u2_table_traffic(g, params, portion, normal)
    };
    let on_host = |array: Array| {
        arrays
            .iter()
            .any(|a| a.array == array && a.residency != Residency::Device)
    };
    let moved = tables_moved
        + halo_bytes(ctx, g, params, (staging_words, portion), on_host)
        + arrays
            .iter()
            .filter(|a| a.residency != Residency::Device)
            .map(|a| portion.share_bytes(a.array, g) * a.accesses_per_iteration)
            .sum::<u64>();
    let chunks = LaminoOperator::chunk_sizes(ctx, g, &operator)?;
    Ok(MemoryPlan {
        volume: [g.n0, g.n1, g.n2],
        volume_offset: g.offset,
        mode,
        operator,
        chunks,
        staging_words,
        arrays,
        u2_tables,
        u2_table_bytes,
        device_bytes: fixed + device_resident,
        host_bytes: host,
        scratch_bytes: scratch,
        bytes_moved_per_iteration: moved,
        budgets,
        portion,
        members: Vec::new(),
        inner_loop: normal,
        normal_operator: None,
    })
}
