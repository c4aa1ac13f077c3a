//! The reconstruction pipeline as a library: projections in, volume out, with progress reports,
//! cancellation and checkpoints. No global state: everything comes through the builder.
//!
//! ```no_run
//! use lamino::gpu::{DeviceOptions, GpuContext};
//! use lamino::geometry::Tilt;
//! use lamino::geometry::Geometry;
//! use lamino::recon::Reconstructor;
//! use lamino::scan::Projections;
//!
//! let ctx = GpuContext::new(&DeviceOptions::default())?;
//! let geometry = Geometry::cube(64, 64, Tilt::from_degrees(20.0));
//! let projections = Projections::new(geometry, vec![0.0; 64 * 64 * 64])?;
//! let result = Reconstructor::new(&ctx)
//!     .on_progress(|p| eprintln!("iteration {} of {}", p.iteration + 1, p.total))
//!     .run(&projections)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod align;
pub mod input;
mod iterate;
pub mod job;
pub mod padding;
pub mod prepare;
pub mod schedule;
mod solved;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use thiserror::Error;

use crate::array::Residency;
use crate::distributed::{Collective, OneProcess};
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::memo::{MemoOptions, MemoStats};
use crate::operator::OperatorOptions;
use crate::params::{AdmmParams, DataScale};
use crate::plan::{
    member_plans, plan_for_loop, plan_shared, Array, Budgets, MemoryPlan, NormalLoop, PlanError,
};
use crate::scan::{validate_scan_geometry, Projections, ScanError};
use crate::solver::{
    outer_loop, AdmmTeam, IterationReport, ProjectionBlocks, RankReport, SolverError, StopReason,
};
pub use align::AlignError;
pub use iterate::IterateView;
pub use job::{Heard, Job, JobError, JobEvent, JobInput, Opened};
pub use padding::{kernel_size, LateralPadding, Padding};
pub use prepare::{AxisStep, Preparation, PrepareError, Prepared};
pub use schedule::CheckpointInterval;
use schedule::CheckpointSchedule;
pub use solved::{
    stage_outputs, stage_outputs_as, volume_file_name, write_outputs, Solved, DEFAULT_FORMATS,
    OUTPUT_KIND, OUTPUT_NAMES, SLAB_BYTES,
};

/// Errors of the reconstruction pipeline.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReconError {
    #[error(transparent)]
    Solver(#[from] SolverError),
    #[error(transparent)]
    Geometry(#[from] crate::geometry::GeometryError),
    /// Projections that cannot be reconstructed (shape, non-finite values).
    #[error(transparent)]
    Scan(#[from] ScanError),
    /// No memory plan fits the budgets.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The memo cache's reservation leaves too little of a budget for the reconstruction.
    #[error(
        "the memo cache takes {memo_mib:.0} MiB of the {budget_mib:.0} MiB {memory} budget, \
         which leaves too little for the reconstruction ({source}); lower --memo-{memory}-mib or \
         raise --max-{memory}-memory"
    )]
    MemoBudget {
        memory: &'static str,
        memo_mib: f64,
        budget_mib: f64,
        source: PlanError,
    },
    /// A resumed run asked for fewer outer iterations than its checkpoint holds: running none
    /// would return the checkpoint's volume under the smaller count.
    #[error(
        "the checkpoint holds {checkpoint} outer iterations, more than the {asked} this run may \
         take: ask for at least {checkpoint} (--iterations or --max-iterations), or start \
         afresh without --resume"
    )]
    ResumeBeyond { checkpoint: usize, asked: usize },
    /// The volume could not be read back from where the solver keeps it.
    #[error("cannot read the volume: {0}")]
    Read(String),
    /// An output that could not be written.
    #[error(transparent)]
    Write(#[from] crate::io::IoError),
}

/// What the progress callback receives after every outer iteration.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub iteration: usize,
    /// The most iterations that will run (the safety net when the run stops on convergence).
    pub total: usize,
    pub report: IterationReport,
    pub elapsed_s: f64,
    /// Seconds left if all `total` iterations run, from the mean time per iteration so far.
    pub eta_s: f64,
}

/// The TV weight of a reconstruction in the data's units (report.json's `regularisation`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Regularisation {
    /// The relative weight asked for (`--alpha`).
    pub alpha: f64,
    /// The data's scale it is relative to.
    pub data_scale: DataScale,
    /// How the scale was estimated ([`DataScale::ESTIMATE`]).
    pub estimated_from: &'static str,
    /// The weight of the TV term the solver used: `alpha x` [`DataScale::tv_unit`].
    pub tv_weight: f64,
}

/// The result of a reconstruction.
#[derive(Debug, Clone, Serialize)]
pub struct Reconstruction {
    /// The volume `(n0, n1, n2)` of the input geometry (padding removed).
    #[serde(skip)]
    pub volume: Vec<f32>,
    pub geometry: Geometry,
    /// How the scan was padded for the operator (the kernels' sizes and the lateral padding),
    /// when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub padding: Option<Padding>,
    /// The detector column of the rotation axis the reconstruction used: of the original
    /// detector (unbinned, uncut) once the caller states its preprocessing
    /// ([`state_preprocessing`](Self::state_preprocessing)), else of the projections given.
    pub rotation_axis: f64,
    /// The same axis in [`geometry`](Self::geometry)'s own detector columns (binned, cut to the
    /// columns a box projects onto: what its `center` means), where they differ from the
    /// original detector's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotation_axis_in_geometry: Option<f64>,
    /// What was done to the projections before (binning, stripe removal, the axis search), when
    /// the caller says so; `None` from [`Reconstructor::run`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preprocessing: Option<crate::preprocess::Preprocessing>,
    pub params: AdmmParams,
    /// What `params.alpha` was relative to: the data's scale, estimated from the projections
    /// before the solve, how, and the TV weight it gave (`alpha x` its unit).
    pub regularisation: Regularisation,
    pub reports: Vec<IterationReport>,
    /// False when cancelled before the last iteration (a checkpoint was written if configured).
    pub completed: bool,
    /// Why the iteration stopped.
    pub stop: StopReason,
    /// The iteration a checkpoint resumed from, if any.
    pub resumed_from: Option<usize>,
    pub setup_s: f64,
    pub iterations_s: f64,
    /// Device memory held by the operator (arrays, chunk buffers, tables, FFT plans).
    pub operator_device_bytes: u64,
    /// Device memory of the solver's own vectors.
    pub solver_device_bytes: u64,
    /// The memory plan: mode, chunks, where each array lived, budgets, bytes moved.
    pub plan: MemoryPlan,
    /// The most device memory held at once (every allocation and free is counted).
    pub peak_device_bytes: u64,
    pub device: String,
    /// The memo settings and what the memo layer did (`policy: off` and no statistics when off).
    pub memo: MemoOptions,
    pub memo_stats: Option<MemoStats>,
    /// Device memory of the memo layer's caches.
    pub memo_device_bytes: u64,
    /// The inner loop's normal operator: what was asked, what ran and why.
    pub normal_operator: crate::plan::NormalOperatorChoice,
    /// Host <-> device bytes each of this process's devices moved per outer iteration (the mean
    /// over the iterations run, checkpoints' transfers included): what a streaming device moves
    /// of its arrays, and what an in-core member of a team exchanges with the others.
    pub bus_bytes_per_iteration: Vec<u64>,
    /// With MPI ranks: what each rank did (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankReport>,
    /// Which run made it, when the caller says so: at the top of `report.json`.
    #[serde(skip)]
    pub provenance: Option<Provenance>,
}

impl Reconstruction {
    /// States what was done to the projections before the run: the report then gives the
    /// rotation axis in the original detector's columns, and in the geometry's own columns
    /// beside it, named as such, where the two differ.
    pub fn state_preprocessing(&mut self, pre: crate::preprocess::Preprocessing) {
        let in_geometry = self.rotation_axis_in_geometry.unwrap_or(self.rotation_axis);
        let recorded = pre.rotation_axis.in_recorded();
        self.rotation_axis_in_geometry = (in_geometry != recorded).then_some(in_geometry);
        self.rotation_axis = recorded;
        self.preprocessing = Some(pre);
    }

    /// The edge of a voxel: the detector's pixel size ([`Preprocessing::pixel_size`]) times the
    /// binning; `None` when the pixel size is unknown.
    ///
    /// [`Preprocessing::pixel_size`]: crate::preprocess::Preprocessing::pixel_size
    pub fn voxel_size(&self) -> Option<crate::io::PixelSize> {
        let pre = self.preprocessing.as_ref()?;
        Some(pre.pixel_size?.binned(pre.binning.max(1)))
    }
}

/// The run that made a reconstruction, for its report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Provenance {
    /// The projections' file (`None`: made in memory, such as a demo's scan).
    pub input: Option<PathBuf>,
    /// The program and its arguments as given.
    pub command_line: Vec<String>,
    /// When the run started, RFC 3339 in UTC to the second.
    pub started: String,
}

impl Provenance {
    /// This process's command line and the time now.
    pub fn now(input: Option<PathBuf>) -> Self {
        Self {
            input,
            command_line: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            started: rfc3339_utc(std::time::SystemTime::now()),
        }
    }
}

/// `time` as RFC 3339 in UTC to the second (`1970-01-01T00:00:00Z` for times before 1970).
pub fn rfc3339_utc(time: std::time::SystemTime) -> String {
    let secs = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, day_secs) = (secs / 86_400, secs % 86_400);
    // The proleptic Gregorian date of a day count (Howard Hinnant's days-to-civil algorithm, in
    // eras of 400 years from 0000-03-01).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        day_secs / 3600,
        day_secs / 60 % 60,
        day_secs % 60
    )
}

type ProgressFn<'a> = Box<dyn FnMut(&Progress) + 'a>;
type IterateFn<'a> = Box<dyn FnMut(&IterateView<'_>) + 'a>;

/// Builder of a reconstruction run.
pub struct Reconstructor<'a> {
    ctx: &'a GpuContext,
    /// Every device of the run, `ctx` first.
    devices: &'a [GpuContext],
    /// The processes of the run: this one alone, or the MPI ranks it is one of.
    processes: Arc<dyn Collective>,
    params: AdmmParams,
    options: OperatorOptions,
    pad: LateralPadding,
    checkpoint: Option<(PathBuf, CheckpointInterval)>,
    resume: Option<PathBuf>,
    cancel: Option<Arc<AtomicBool>>,
    progress: Option<ProgressFn<'a>>,
    iterate: Option<IterateFn<'a>>,
    device_budget: Option<u64>,
    host_budget: Option<u64>,
    scratch: Option<PathBuf>,
    memo: MemoOptions,
    normal_operator: crate::params::NormalOperator,
}

impl<'a> Reconstructor<'a> {
    pub fn new(ctx: &'a GpuContext) -> Self {
        Self::on_devices(std::slice::from_ref(ctx))
    }

    /// A run on every device of `devices` (at least one): each computes its share of every
    /// stage's chunks, with the arrays in host memory shared by all (see
    /// [`crate::solver::AdmmTeam`]); identical devices give the bits of one device. Budgets are
    /// per device.
    pub fn on_devices(devices: &'a [GpuContext]) -> Self {
        Self {
            ctx: devices.first().expect("a run needs a device"),
            devices,
            processes: OneProcess::shared(),
            params: AdmmParams::default(),
            options: OperatorOptions::default(),
            pad: LateralPadding::None,
            checkpoint: None,
            resume: None,
            cancel: None,
            progress: None,
            iterate: None,
            device_budget: None,
            host_budget: None,
            scratch: None,
            memo: MemoOptions::default(),
            normal_operator: crate::params::NormalOperator::default(),
        }
    }

    /// The processes that share the run (default: this one alone, [`OneProcess`]): under MPI
    /// ranks ([`crate::distributed::launch`]) this process is one of them, on its devices
    /// ([`on_devices`](Self::on_devices)); budgets are per device. Every rank runs the same
    /// builder on the same input; the first writes checkpoints, and [`Solved`] holds the
    /// volume there.
    pub fn processes(mut self, processes: Arc<dyn Collective>) -> Self {
        self.processes = processes;
        self
    }

    /// How many processes (or, alone, devices) share the run.
    fn sharers(&self) -> usize {
        match self.processes.size() {
            1 => self.devices.len(),
            ranks => ranks,
        }
    }

    /// Memoization of the operator's chunk computations (default: [`MemoOptions::default`],
    /// policy `off`). When active, chunks not limited by
    /// [`operator_options`](Self::operator_options) have `chunk_rows` rows.
    pub fn memo(mut self, options: MemoOptions) -> Self {
        self.memo = options;
        self
    }

    /// How the inner solver applies its normal operator (default
    /// [`NormalOperator::Auto`](crate::params::NormalOperator::Auto): Toeplitz where it applies
    /// and fits, else gridding; the report says which ran and why).
    pub fn normal_operator(mut self, choice: crate::params::NormalOperator) -> Self {
        self.normal_operator = choice;
        self
    }

    /// The device memory the reconstruction may hold (default: the device-local memory the
    /// backend reports, else [`crate::plan::DEFAULT_DEVICE_BUDGET`]). A reconstruction that
    /// does not fit streams its arrays through the device; one whose smallest chunks do not fit
    /// is refused before anything is allocated.
    pub fn device_memory_budget(mut self, bytes: u64) -> Self {
        self.device_budget = Some(bytes);
        self
    }

    /// The host memory the arrays the device does not hold may take (default:
    /// [`crate::plan::DEFAULT_HOST_FRACTION`] of the installed memory); the rest goes to
    /// [`scratch_dir`](Self::scratch_dir).
    pub fn host_memory_budget(mut self, bytes: u64) -> Self {
        self.host_budget = Some(bytes);
        self
    }

    /// Where arrays beyond the host budget live, in memory-mapped files that are removed
    /// however the run ends (without one, such a plan is refused).
    pub fn scratch_dir(mut self, dir: PathBuf) -> Self {
        self.scratch = Some(dir);
        self
    }

    /// Solver parameters (default: [`AdmmParams::default`]).
    pub fn params(mut self, params: AdmmParams) -> Self {
        self.params = params;
        self
    }

    /// Chunking limits of the operator.
    pub fn operator_options(mut self, options: OperatorOptions) -> Self {
        self.options = options;
        self
    }

    /// Pads the detector laterally (a number of columns on each side, or a
    /// [`LateralPadding`] rule) and crops the padding off the volume afterwards.
    pub fn lateral_padding(mut self, pad: impl Into<LateralPadding>) -> Self {
        self.pad = pad.into();
        self
    }

    /// How projections of `geometry` are padded for the operator: to the sizes its kernels take
    /// (any size of at least 1 runs, see [`padding`]) and by the lateral padding.
    pub fn padding(&self, geometry: &Geometry) -> Padding {
        Padding::new(geometry, self.pad.columns(geometry))
    }

    /// Writes the full solver state to `path` at `every` (a number of iterations, a
    /// [`Duration`], or any [`CheckpointInterval`]) and when cancelled.
    pub fn checkpoint_every(mut self, path: PathBuf, every: impl Into<CheckpointInterval>) -> Self {
        self.checkpoint = Some((path, every.into()));
        self
    }

    /// Continues from a checkpoint written by an earlier run with the same input and parameters.
    pub fn resume_from(mut self, path: PathBuf) -> Self {
        self.resume = Some(path);
        self
    }

    /// Stops after the current iteration once `flag` is set.
    pub fn cancel_flag(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    /// Called after every outer iteration.
    pub fn on_progress(mut self, f: impl FnMut(&Progress) + 'a) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Called after every outer iteration (after [`on_progress`](Self::on_progress)'s callback)
    /// with a view of the current iterate where the solver keeps it: an application draws its
    /// slices from the device without a host round trip ([`IterateView::on_device`]).
    pub fn on_iterate(mut self, f: impl FnMut(&IterateView<'_>) + 'a) -> Self {
        self.iterate = Some(Box::new(f));
        self
    }

    /// Prepares `projections` as read (binned by `pre.binning`; under MPI ranks this rank's share
    /// of the angles) for this reconstruction: the steps of `preparation` (stripes, the rotation
    /// axis, the volume's box: [`Preparation::run`]) on its first device, among its processes,
    /// stopped by its cancel flag, and within its device budget: every one of its devices is
    /// capped at the budget from here on, so the steps before the solve (the axis search) keep to
    /// it as the solve does. Records the steps in `pre`; `note` hears of each as it is done.
    /// Step 3 of a [`Job`] (front ends run it through the job).
    pub(crate) fn prepare(
        &self,
        preparation: &Preparation,
        projections: Projections,
        pre: &mut crate::preprocess::Preprocessing,
        note: &mut dyn FnMut(Prepared<'_>),
    ) -> Result<Projections, PrepareError> {
        if let Some(bytes) = self.device_budget {
            self.devices.iter().for_each(|d| d.set_device_budget(bytes));
        }
        let cancel = self.cancel.as_deref();
        preparation.run(
            self.ctx,
            self.params,
            &*self.processes,
            projections,
            pre,
            cancel,
            note,
        )
    }

    /// The memory plan [`run`](Self::run) would follow for projections of `geometry` (before
    /// padding: the plan is the padded geometry's, see [`padding`](Self::padding)), made without
    /// allocating anything on the device.
    pub fn plan(&self, geometry: &Geometry) -> Result<MemoryPlan, ReconError> {
        self.params.validate().map_err(SolverError::from)?;
        // What projections of it would be refused for is refused here too, before the padding
        // makes a valid geometry of it (a detector of 0 columns is not padded to 6).
        validate_scan_geometry(geometry)?;
        self.plan_for(&self.padding(geometry).apply(geometry))
    }

    /// The plan for the (padded) geometry the solver runs on. An active memo layer's caches
    /// (`device_bytes` on the device, `host_bytes` in host memory) are reserved out of the
    /// budgets before the arrays are placed, and the plan's device bytes include them.
    fn plan_for(&self, g: &Geometry) -> Result<MemoryPlan, ReconError> {
        let mut options = self.options;
        let mut budgets = Budgets::new(
            self.ctx,
            self.device_budget,
            self.host_budget,
            self.scratch.clone(),
        );
        let (device, host) = (budgets.device_bytes, budgets.host_bytes);
        let memo = self.memo.policy.is_active();
        if memo {
            let rows = Some(self.memo.chunk_rows.max(1));
            options.max_chunk_y = options.max_chunk_y.or(rows);
            options.max_chunk_rows = options.max_chunk_rows.or(rows);
            budgets.device_bytes = device.saturating_sub(self.memo.device_bytes);
            budgets.host_bytes = host.saturating_sub(self.memo.host_bytes);
        }
        if memo && self.sharers() > 1 {
            return Err(SolverError::TeamMemo.into());
        }
        // The Toeplitz loop asked for on one device: the plan sets its memory aside (with a
        // device copy of u or p, in case they stream) before it places the arrays, and counts
        // the loop's accesses. Where it cannot run, the plan is gridding's and states why.
        let before_the_plan = crate::plan::ToeplitzConditions {
            shared: self.sharers() > 1,
            volumes_on_device: false,
            carried_cg: self.params.carries_residual(),
            memo,
            free_device_bytes: None,
        };
        let toeplitz = self.normal_operator == crate::params::NormalOperator::Toeplitz
            && crate::plan::toeplitz_obstacle(self.ctx, g, before_the_plan).is_none();
        // A rank holds 1/K of the host arrays (its planes), plus what one stage reads beyond
        // them: the plan of all of them may take K ranks' budgets.
        let ranks = self.processes.size();
        budgets.host_bytes = budgets.host_bytes.saturating_mul(ranks as u64);
        let make = |normal| match self.sharers() > 1 {
            true => plan_shared(self.ctx, g, &self.params, &options, &budgets),
            false => plan_for_loop(self.ctx, g, &self.params, &options, &budgets, normal),
        };
        let planned = match toeplitz {
            true => match make(NormalLoop::Toeplitz) {
                // Too little left beside the Toeplitz loop's memory: gridding's plan, which
                // states what the loop needs and what is free.
                Err(PlanError::DeviceBudget { .. }) => make(NormalLoop::Gridding),
                planned => planned,
            },
            false => make(NormalLoop::Gridding),
        };
        let mut plan = planned.map_err(|source| {
            let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
            match &source {
                PlanError::DeviceBudget { .. } if memo => ReconError::MemoBudget {
                    memory: "device",
                    memo_mib: mib(self.memo.device_bytes),
                    budget_mib: mib(device),
                    source,
                },
                PlanError::HostBudget { .. } if memo => ReconError::MemoBudget {
                    memory: "host",
                    memo_mib: mib(self.memo.host_bytes),
                    budget_mib: mib(host),
                    source,
                },
                _ => ReconError::Plan(source),
            }
        })?;
        if memo {
            plan.device_bytes += self.memo.device_bytes;
            plan.budgets.host_bytes = host;
        }
        plan.budgets.device_bytes = device;
        if self.sharers() > 1 {
            // Each member's plan under the team's: in-core where its homes fit its device
            // (the run keeps them there), else streaming its share.
            let devices = self.devices.len().max(1);
            plan.members = member_plans(self.ctx, g, &self.params, &plan, (ranks, devices))
                .map_err(ReconError::Plan)?;
        }
        let conditions = plan.toeplitz_conditions(self.sharers(), &self.params, memo);
        plan.normal_operator = Some(crate::plan::planned_normal_operator(
            self.ctx,
            g,
            self.normal_operator,
            conditions,
        ));
        Ok(plan)
    }

    /// Reconstructs `projections` and returns the volume in memory with the report: for volumes
    /// that fit in host memory ([`solve`](Self::solve) writes larger ones a slab at a time).
    pub fn run(self, projections: &Projections) -> Result<Reconstruction, ReconError> {
        self.solve(projections)?.into_reconstruction()
    }

    /// Reconstructs `projections` and leaves the volume where the solver keeps it (on the
    /// device, in host memory or in scratch files): [`Solved`] writes it, or hands it to the
    /// caller, a slab of z slices at a time, so it never has to fit in host memory.
    pub fn solve(mut self, projections: &Projections) -> Result<Solved<'a>, ReconError> {
        self.params.validate().map_err(SolverError::from)?;
        let start = Instant::now();
        let padding = self.padding(projections.geometry());
        let g = padding.apply(projections.geometry());
        // The plan counts every buffer the run holds, so nothing an earlier run left pooled on
        // the context may stay: it is released before the plan is made (the plan's estimates of
        // the readback pool and the FFT workspace are its own).
        for ctx in self.devices {
            ctx.release_idle_pools();
        }
        let plan = self.plan_for(&g)?;
        for ctx in self.devices {
            ctx.set_device_budget(plan.budgets.device_bytes);
            ctx.reset_peak_device_bytes();
        }
        let data = projections.operator_blocks(padding.detector, &g);
        let mut team = self.team(&g, &data, &plan)?;
        // The TV weight's scale from the scan's own line integrals (a box's from its whole
        // scan's), not from the padded data: the same attenuation for the volume and any box of
        // it. Its width is the operator's (padding included), whose normalisation `1/sqrt(n2)`
        // weighs the data term: so a box narrower than the detector solves the full volume's
        // problem restricted to it. An MPI rank's share keeps the scale the ranks gathered.
        if let Some(scale) = projections
            .scan_scale()
            .or_else(|| projections.data_scale())
        {
            team.adopt_data_scale(DataScale {
                width: g.n2,
                ..scale
            });
        }
        team.set_memo(self.devices, self.memo)?;
        let normal_operator = team.set_normal_operator(self.devices, self.normal_operator)?;
        let mut resumed_from = None;
        if let Some(path) = &self.resume {
            let checkpoint = team.resume(self.devices, path)?.iteration;
            if checkpoint > self.params.outer_iterations {
                return Err(ReconError::ResumeBeyond {
                    checkpoint,
                    asked: self.params.outer_iterations,
                });
            }
            resumed_from = Some(checkpoint);
        }
        let setup_s = start.elapsed().as_secs_f64();
        let bus = |d: &GpuContext| {
            let t = d.traffic();
            t.bytes_uploaded + t.bytes_downloaded
        };
        let bus_before: Vec<u64> = self.devices.iter().map(bus).collect();
        let loop_start = Instant::now();
        let first = team.solver().iterations_done();
        let single = self.single();
        let total = self.params.outer_iterations;
        let mut schedule = self
            .checkpoint
            .as_ref()
            .map(|(path, every)| (path, CheckpointSchedule::new(*every)));
        let (devices, ctx, cancel) = (self.devices, self.ctx, self.cancel.as_ref());
        let (progress, iterate) = (&mut self.progress, &mut self.iterate);
        let after = |team: &mut AdmmTeam, report: &IterationReport| -> Result<bool, ReconError> {
            let solver = team.solver();
            let done = solver.iterations_done();
            let finished = solver.stop_reason().is_some();
            // Every rank stops at the same iteration when any was told to.
            let cancelled = team.any(cancel.is_some_and(|c| c.load(Ordering::SeqCst)));
            let elapsed = loop_start.elapsed();
            let per = elapsed.as_secs_f64() / (done - first) as f64;
            let eta_s = per * total.saturating_sub(done) as f64;
            if let Some((path, schedule)) = schedule.as_mut() {
                // Every rank decides the same: a time-based checkpoint is due when it is due on
                // any rank's clock (the write is collective).
                let rest = Duration::try_from_secs_f64(eta_s).unwrap_or(Duration::MAX);
                let expected = elapsed.saturating_add(rest);
                let due = team.any(schedule.due(done, elapsed, expected));
                if due || (cancelled && !finished) {
                    team.write_checkpoint(devices, path)?;
                    schedule.written(loop_start.elapsed());
                }
            }
            if let Some(f) = progress.as_mut() {
                f(&Progress {
                    iteration: report.iteration,
                    total,
                    report: *report,
                    elapsed_s: elapsed.as_secs_f64(),
                    eta_s,
                });
            }
            if let Some(f) = iterate.as_mut() {
                team.bring_to_host(devices)?;
                f(&IterateView {
                    iteration: report.iteration,
                    ctx,
                    single,
                    team,
                    padded: &g,
                    padding: &padding,
                });
            }
            // A stop asked for ends the run here, unless the rule ends it anyway.
            Ok(!cancelled || finished)
        };
        let stop_reason = |team: &AdmmTeam| team.solver().stop_reason();
        let step = |team: &mut AdmmTeam| team.step(devices).map_err(ReconError::from);
        let (reports, stop) = outer_loop(&mut team, stop_reason, step, after)?;
        // The rule's reason, or a stop asked for.
        let stop = stop.unwrap_or(StopReason::Cancelled);
        let completed = stop != StopReason::Cancelled;
        let iterations_s = loop_start.elapsed().as_secs_f64();
        let iterations = (reports.len() as u64).max(1);
        let bus_bytes_per_iteration: Vec<u64> = self
            .devices
            .iter()
            .zip(bus_before)
            .map(|(d, before)| (bus(d) - before) / iterations)
            .collect();
        // The volume is read from the host arrays.
        team.bring_to_host(self.devices)?;
        let ranks = team.rank_reports(setup_s, iterations_s, &bus_bytes_per_iteration);
        let solver = team.solver();
        let report = Reconstruction {
            volume: Vec::new(),
            geometry: projections.geometry().clone(),
            padding: (padding != Padding::default()).then_some(padding),
            rotation_axis: projections.geometry().rotation_axis(),
            rotation_axis_in_geometry: None,
            preprocessing: None,
            params: self.params.for_width(g.n2),
            regularisation: Regularisation {
                alpha: self.params.alpha,
                data_scale: solver.data_scale(),
                estimated_from: DataScale::ESTIMATE,
                tv_weight: solver.tv_weight(),
            },
            reports,
            completed,
            stop,
            resumed_from,
            setup_s,
            iterations_s,
            operator_device_bytes: solver.operator().device_bytes(),
            solver_device_bytes: solver.vector_device_bytes(),
            peak_device_bytes: self
                .devices
                .iter()
                .map(|d| d.peak_device_bytes())
                .max()
                .unwrap_or(0),
            device: self
                .devices
                .iter()
                .map(|d| d.info().to_string())
                .collect::<Vec<_>>()
                .join(" + "),
            memo: self.memo,
            memo_stats: solver.memo_stats(),
            memo_device_bytes: solver.memo_device_bytes(),
            normal_operator,
            plan,
            bus_bytes_per_iteration,
            ranks,
            provenance: None,
        };
        // A slab holds at most SLAB_BYTES, and no more than the host budget leaves beside the
        // arrays the plan put in host memory; at least one slice. A volume on the device is read
        // back through the context's readback buffer, which grows to the next power of two of a
        // slab within the device budget: at most half of what the budget leaves.
        let plane_bytes = (g.n1 * g.n2 * 4) as u64;
        let plan = &report.plan;
        let mut slab_bytes =
            SLAB_BYTES.min(plan.budgets.host_bytes.saturating_sub(plan.host_bytes));
        if *plan.residency(Array::U) == Residency::Device {
            let left = plan
                .budgets
                .device_bytes
                .saturating_sub(self.ctx.device_bytes_held());
            slab_bytes = slab_bytes.min(left / 2);
        }
        let slab_planes = (slab_bytes / plane_bytes).clamp(1, g.n0 as u64) as usize;
        Ok(Solved {
            ctx: self.ctx,
            team,
            single,
            padded: g,
            padding,
            slab_planes,
            report,
        })
    }
}

impl Reconstructor<'_> {
    /// Whether the run's volume array is its one device's own (one device, no MPI ranks).
    fn single(&self) -> bool {
        self.processes.size() == 1 && self.devices.len() == 1
    }

    /// The solver of this run: on this process's devices, or this rank's part.
    fn team(
        &self,
        g: &Geometry,
        data: &(impl ProjectionBlocks + ?Sized),
        plan: &MemoryPlan,
    ) -> Result<AdmmTeam, SolverError> {
        AdmmTeam::new(&self.processes, self.devices, g, data, self.params, plan)
    }
}
