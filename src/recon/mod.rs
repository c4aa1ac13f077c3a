//! The reconstruction pipeline as a library: projections in, volume out, with progress reports,
//! cancellation and checkpoints. No global state: everything comes through the builder.
//!
//! ```no_run
//! use lamino::gpu::{DeviceOptions, GpuContext};
//! use lamino::operator::Geometry;
//! use lamino::recon::Reconstructor;
//! use lamino::scan::Projections;
//!
//! let ctx = GpuContext::new(&DeviceOptions::default())?;
//! let geometry = Geometry::cube(64, 64, 1.92);
//! let projections = Projections::new(geometry, vec![0.0; 64 * 64 * 64])?;
//! let result = Reconstructor::new(&ctx)
//!     .on_progress(|p| eprintln!("iteration {} of {}", p.iteration + 1, p.total))
//!     .run(&projections)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod input;
pub mod padding;
pub mod schedule;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use thiserror::Error;

use crate::array::Residency;
use crate::gpu::GpuContext;
use crate::io::{
    create_store, OutputSet, SlabVisitor, StackFormat, VolumeSlabs, ZarrOptions, ZarrPart,
};
use crate::memo::{MemoOptions, MemoStats};
use crate::operator::{Geometry, OperatorOptions};
use crate::params::AdmmParams;
use crate::plan::{member_plans, plan, plan_shared, Array, Budgets, MemoryPlan, PlanError};
use crate::scan::{validate_scan_geometry, Projections, ScanError};
use crate::solver::{
    AdmmTeam, IterationReport, ProjectionBlocks, RankReport, SolverError, StopReason,
};
pub use padding::{kernel_size, Padding};
pub use schedule::CheckpointInterval;
use schedule::CheckpointSchedule;

/// Errors of the reconstruction pipeline.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReconError {
    #[error(transparent)]
    Solver(#[from] SolverError),
    #[error(transparent)]
    Geometry(#[from] crate::operator::GeometryError),
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
    /// The detector column of the rotation axis the reconstruction used (pixels of the input).
    pub rotation_axis: f64,
    /// What was done to the projections before (binning, stripe removal, the axis search), when
    /// the caller says so; `None` from [`Reconstructor::run`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preprocessing: Option<crate::preprocess::Preprocessing>,
    pub params: AdmmParams,
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
    /// With MPI ranks: what each rank did (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankReport>,
    /// Which run made it, when the caller says so: at the top of `report.json`.
    #[serde(skip)]
    pub provenance: Option<Provenance>,
}

impl Reconstruction {
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

/// The current iterate after an outer iteration, where the solver keeps it: what
/// [`Reconstructor::on_iterate`] hands its callback. An application draws it without a host
/// round trip when it is on the device ([`on_device`](Self::on_device), with
/// [`crate::gpu::SlicePass`]), or reads a host copy ([`read_volume`](Self::read_volume)) when
/// the volume streams.
pub struct IterateView<'v> {
    /// The outer iteration just done (0 first).
    pub iteration: usize,
    ctx: &'v GpuContext,
    /// Whether the volume array is the one device's own (one device, no MPI ranks).
    single: bool,
    team: &'v AdmmTeam,
    padded: &'v Geometry,
    padding: &'v Padding,
}

impl IterateView<'_> {
    /// The device the run's first solver works on (the one [`on_device`](Self::on_device)'s
    /// buffer lives on).
    pub fn ctx(&self) -> &GpuContext {
        self.ctx
    }

    /// Where the shown volume `(n0, n1, n2)` of the input geometry lies in the solver's padded
    /// array.
    pub fn layout(&self) -> crate::gpu::VolumeLayout {
        let g = &self.padded;
        let v = &self.padding.volume;
        crate::gpu::VolumeLayout {
            padded: [g.n0, g.n1, g.n2],
            origin: [v[0][0], v[1][0], v[2][0]],
            shape: [
                g.n0 - v[0][0] - v[0][1],
                g.n1 - v[1][0] - v[1][1],
                g.n2 - v[2][0] - v[2][1],
            ],
        }
    }

    /// The volume's device buffer on [`ctx`](Self::ctx), when the whole volume lives there (it
    /// is valid until the callback returns; work recorded on it queues behind the iteration's);
    /// `None` when it streams from host memory or scratch files, or the run shares its arrays
    /// among several devices or MPI ranks.
    pub fn on_device(&self) -> Option<crate::gpu::DeviceVolume<'_>> {
        let buffer = self.team.solver().volume_field().device_buffer()?;
        self.single.then(|| crate::gpu::DeviceVolume {
            buffer,
            layout: self.layout(),
        })
    }

    /// A host copy of the solver's whole (padded) array, laid out as [`layout`](Self::layout)
    /// says: read from the device, host memory or scratch files. Collective under MPI ranks
    /// (every rank's callback must call it; only the first rank's copy holds the volume).
    pub fn read_volume(&self) -> Result<Vec<f32>, ReconError> {
        let slab = self
            .team
            .volume_slab(self.ctx, 0..self.padded.n0)
            .map_err(|e| ReconError::Read(format!("reading the current iterate: {e}")))?;
        Ok(slab.into_iter().flat_map(|(_, values)| values).collect())
    }
}

/// Builder of a reconstruction run.
pub struct Reconstructor<'a> {
    ctx: &'a GpuContext,
    /// Every device of the run, `ctx` first.
    devices: &'a [GpuContext],
    #[cfg(feature = "mpi")]
    ranks: Option<Arc<crate::distributed::ranks::Ranks>>,
    params: AdmmParams,
    options: OperatorOptions,
    pad: usize,
    checkpoint: Option<(PathBuf, CheckpointInterval)>,
    resume: Option<PathBuf>,
    cancel: Option<Arc<AtomicBool>>,
    progress: Option<ProgressFn<'a>>,
    iterate: Option<IterateFn<'a>>,
    device_budget: Option<u64>,
    host_budget: Option<u64>,
    scratch: Option<PathBuf>,
    memo: MemoOptions,
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
            #[cfg(feature = "mpi")]
            ranks: None,
            params: AdmmParams::default(),
            options: OperatorOptions::default(),
            pad: 0,
            checkpoint: None,
            resume: None,
            cancel: None,
            progress: None,
            iterate: None,
            device_budget: None,
            host_budget: None,
            scratch: None,
            memo: MemoOptions::default(),
        }
    }

    /// This process as one of the MPI ranks that share the run (see [`crate::distributed::ranks`]), on its
    /// devices ([`on_devices`](Self::on_devices)); budgets are per device. Every rank runs the same builder on the same input;
    /// the first writes checkpoints, and [`Solved`] holds the volume there.
    #[cfg(feature = "mpi")]
    pub fn on_ranks(mut self, ranks: Arc<crate::distributed::ranks::Ranks>) -> Self {
        self.ranks = Some(ranks);
        self
    }

    /// How many processes or devices share the run.
    fn sharers(&self) -> usize {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return ranks.size();
        }
        self.devices.len()
    }

    /// Memoization of the operator's chunk computations (default: [`MemoOptions::default`],
    /// policy `off`). When active, chunks not limited by
    /// [`operator_options`](Self::operator_options) have `chunk_rows` rows.
    pub fn memo(mut self, options: MemoOptions) -> Self {
        self.memo = options;
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

    /// Pads the detector by `pad` columns on each side and crops them off the volume afterwards.
    pub fn lateral_padding(mut self, pad: usize) -> Self {
        self.pad = pad;
        self
    }

    /// How projections of `geometry` are padded for the operator: to the sizes its kernels take
    /// (any size of at least 1 runs, see [`padding`]) and by the lateral padding.
    pub fn padding(&self, geometry: &Geometry) -> Padding {
        Padding::new(geometry, self.pad)
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
        let make = if self.sharers() > 1 {
            plan_shared
        } else {
            plan
        };
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            // A rank holds 1/K of the host arrays (its planes), plus what one stage reads
            // beyond them: the plan of all of them may take K ranks' budgets.
            budgets.host_bytes = budgets.host_bytes.saturating_mul(ranks.size() as u64);
        }
        let mut plan = make(self.ctx, g, &self.params, &options, &budgets).map_err(|source| {
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
            plan.budgets.device_bytes = device;
            plan.budgets.host_bytes = host;
        }
        if self.sharers() > 1 {
            // Each member's own plan: its shares against its device. The host budget was
            // checked by the plan above; a member's host bytes say what it would hold there.
            let devices = self.devices.len().max(1);
            #[cfg(feature = "mpi")]
            let ranks = self.ranks.as_ref().map_or(1, |r| r.size());
            #[cfg(not(feature = "mpi"))]
            let ranks = 1;
            let mut own = Budgets::given(device, u64::MAX, None);
            own.device_source = plan.budgets.device_source;
            plan.members =
                member_plans(self.ctx, g, &self.params, &options, &own, (ranks, devices))
                    .map_err(ReconError::Plan)?;
        }
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
        team.set_memo(self.devices, self.memo)?;
        let mut resumed_from = None;
        if let Some(path) = &self.resume {
            resumed_from = Some(team.resume(self.devices, path)?.iteration);
        }
        let setup_s = start.elapsed().as_secs_f64();
        let loop_start = Instant::now();
        let first = team.solver().iterations_done();
        let mut reports = Vec::new();
        let total = self.params.outer_iterations;
        let mut schedule = self
            .checkpoint
            .as_ref()
            .map(|(path, every)| (path, CheckpointSchedule::new(*every)));
        let stop = loop {
            if let Some(reason) = team.solver().stop_reason() {
                break reason;
            }
            let report = team.step(self.devices)?;
            let solver = team.solver();
            reports.push(report);
            let done = solver.iterations_done();
            // Every rank stops at the same iteration when any was told to.
            let cancelled = team.any(
                self.cancel
                    .as_ref()
                    .is_some_and(|c| c.load(Ordering::SeqCst)),
            );
            let finished = solver.stop_reason().is_some();
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
                    team.write_checkpoint(self.devices, path)?;
                    schedule.written(loop_start.elapsed());
                }
            }
            if let Some(f) = self.progress.as_mut() {
                f(&Progress {
                    iteration: report.iteration,
                    total,
                    report,
                    elapsed_s: elapsed.as_secs_f64(),
                    eta_s,
                });
            }
            if let Some(f) = self.iterate.as_mut() {
                #[cfg(feature = "mpi")]
                let ranks = self.ranks.is_some();
                #[cfg(not(feature = "mpi"))]
                let ranks = false;
                f(&IterateView {
                    iteration: report.iteration,
                    ctx: self.ctx,
                    single: self.devices.len() == 1 && !ranks,
                    team: &team,
                    padded: &g,
                    padding: &padding,
                });
            }
            if cancelled && !finished {
                break StopReason::Cancelled;
            }
        };
        let completed = stop != StopReason::Cancelled;
        let iterations_s = loop_start.elapsed().as_secs_f64();
        let ranks = team.rank_reports(setup_s, iterations_s);
        let solver = team.solver();
        let report = Reconstruction {
            volume: Vec::new(),
            geometry: projections.geometry().clone(),
            padding: (padding != Padding::default()).then_some(padding),
            rotation_axis: projections.geometry().rotation_axis(),
            preprocessing: None,
            params: self.params,
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
            plan,
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
            padded: g,
            padding,
            slab_planes,
            report,
        })
    }
}

impl Reconstructor<'_> {
    /// The solver of this run: on this process's devices, or this rank's part.
    fn team(
        &self,
        g: &Geometry,
        data: &(impl ProjectionBlocks + ?Sized),
        plan: &MemoryPlan,
    ) -> Result<AdmmTeam, SolverError> {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return AdmmTeam::on_ranks(ranks, self.devices, g, data, self.params, plan);
        }
        AdmmTeam::with_plan_from(self.devices, g, data, self.params, plan)
    }
}

/// The most volume one slab of [`Solved`] holds in host memory (unless the host budget leaves
/// less beside the plan's host arrays; always at least one z slice).
pub const SLAB_BYTES: u64 = 64 << 20;

/// A finished reconstruction whose volume is still where the solver keeps it (on the device, in
/// host memory or in a scratch file). It is read a slab of whole z slices at a time
/// ([`VolumeSlabs`]): [`write_outputs`](Self::write_outputs) and
/// [`crate::io::write_volume`] write it, in any format, holding one slab of host memory; a
/// caller can visit the slabs itself, or take the whole volume with
/// [`into_reconstruction`](Self::into_reconstruction).
pub struct Solved<'a> {
    ctx: &'a GpuContext,
    team: AdmmTeam,
    /// The geometry the solver ran on (padded).
    padded: Geometry,
    padding: Padding,
    slab_planes: usize,
    /// The run's report: a [`Reconstruction`] whose `volume` is empty (the volume is read
    /// through this `Solved`).
    pub report: Reconstruction,
}

impl Solved<'_> {
    /// Z slices per slab.
    pub fn slab_planes(&self) -> usize {
        self.slab_planes
    }

    /// Bytes per slab: [`slab_planes`](Self::slab_planes) z slices of the volume the solver
    /// holds (padded, when it is).
    pub fn slab_bytes(&self) -> u64 {
        (self.slab_planes * self.padded.n1 * self.padded.n2 * 4) as u64
    }

    /// Reads `planes` z slices per slab (at least one, at most all).
    pub fn with_slab_planes(mut self, planes: usize) -> Self {
        self.slab_planes = planes.clamp(1, self.padded.n0);
        self
    }

    /// The report with the whole volume in host memory.
    pub fn into_reconstruction(self) -> Result<Reconstruction, ReconError> {
        let [n0, n1, n2] = self.shape();
        let mut volume = Vec::with_capacity(n0 * n1 * n2);
        self.visit_slabs(&mut |_, slab| {
            volume.extend_from_slice(slab);
            Ok(())
        })
        .map_err(ReconError::Read)?;
        Ok(Reconstruction {
            volume,
            ..self.report
        })
    }

    /// Writes the outputs of [`write_outputs`] to `dir`, reading the volume a slab at a time.
    pub fn write_outputs(&self, dir: &std::path::Path) -> Result<Vec<PathBuf>, crate::io::IoError> {
        let mut set = OutputSet::begin(dir, OUTPUT_KIND)?;
        let staged = self.stage_outputs(&mut set);
        Ok(set.complete(staged)?.1)
    }

    /// The part of an MPI rank that writes nothing in the outputs' pass over the volume: it sends
    /// the first rank, which writes them, the slices it keeps, one slab at a time (see
    /// [`VolumeSlabs::visit_slabs`]). Collective; without MPI ranks it reads the volume once.
    pub fn serve_volume(&self) -> Result<(), ReconError> {
        self.visit_slabs(&mut |_, _| Ok(()))
            .map_err(ReconError::Read)
    }

    /// Writes the volume as OME-Zarr to `path` with `options` (the default of the volume's shape
    /// when `None`): the first MPI rank (the only process without ranks) writes the metadata into
    /// `path`, the directory it staged; the other ranks pass `None` and learn the path from it.
    /// Then every rank writes the chunks of its own z slices, read a slab at a time where the
    /// solver keeps them, exchanging only the slices at the boundaries of the ranks' parts
    /// ([`ZarrPart`]): the files are those one process writes, byte for byte. Collective.
    pub fn write_zarr(
        &self,
        path: Option<&std::path::Path>,
        options: Option<ZarrOptions>,
    ) -> Result<(), ReconError> {
        let shape = self.shape();
        let options = options.unwrap_or_else(|| ZarrOptions::for_shape(shape));
        let created = path.map(|p| create_store(p, shape, self.report.voxel_size(), options));
        let ready = match &created {
            Some(Ok(())) => path,
            _ => None,
        };
        // Every rank takes part in the exchange, the first also when it failed.
        let shared = self.team.first_rank_path(ready);
        if let Some(Err(e)) = created {
            return Err(e.into());
        }
        let path = shared.ok_or_else(|| {
            ReconError::Read("the first MPI rank could not create the OME-Zarr directory".into())
        })?;
        let z0 = self.padding.volume[0][0];
        let bounds = self.team.volume_part_bounds(z0..z0 + shape[0]);
        let rank = self.team.rank();
        let mut part = ZarrPart::open(&path, shape, options, &bounds, rank)?;
        let g = &self.padded;
        let mine = z0 + bounds[rank]..z0 + bounds[rank + 1];
        let mut cropped = Vec::new();
        for start in mine.clone().step_by(self.slab_planes.max(1)) {
            let end = (start + self.slab_planes).min(mine.end);
            let slab = self
                .team
                .own_volume_slab(self.ctx, start..end)
                .map_err(|e| {
                    ReconError::Read(format!("reading slices {start}..{end} of the volume: {e}"))
                })?;
            let images = match [g.n1, g.n2] == [shape[1], shape[2]] {
                true => &slab[..],
                false => {
                    cropped.clear();
                    self.padding
                        .crop_into(&slab, end - start, g, shape, &mut cropped);
                    &cropped[..]
                }
            };
            for image in images.chunks(shape[1] * shape[2]) {
                part.push_image(image)?;
            }
            // The slab and, at most, everything the part held while taking it.
            self.team
                .note_held(4 * (slab.len() + cropped.len()) as u64 + part.held_bytes());
        }
        let held = part.finish(&mut |message| Ok(self.team.send_to_one(message)))?;
        self.team.note_held(held);
        Ok(())
    }

    /// Writes the outputs of [`stage_outputs_as`] with the volume in `formats` on every MPI rank
    /// at once (collective; without ranks, this process alone): the first rank stages them in
    /// `set` (the others pass `None`). `recon.zarr` is written by every rank in parallel
    /// ([`write_zarr`](Self::write_zarr), with `zarr` its options) into the first rank's staged
    /// directory, which appears with the rest of the set at its commit; the other files by the
    /// first rank from every rank's slices, a slab at a time.
    pub fn stage_outputs_on_ranks(
        &self,
        mut set: Option<&mut OutputSet>,
        formats: &[StackFormat],
        zarr: Option<ZarrOptions>,
    ) -> Result<(), ReconError> {
        if formats.contains(&StackFormat::Zarr) {
            let staged = match set.as_deref_mut() {
                Some(set) => Some(set.stage(volume_file_name(StackFormat::Zarr))?),
                None => None,
            };
            self.write_zarr(staged.as_deref(), zarr)?;
        }
        let rest: Vec<StackFormat> = formats
            .iter()
            .copied()
            .filter(|f| *f != StackFormat::Zarr)
            .collect();
        match set {
            Some(set) => Ok(stage_outputs_as(set, &self.report, self, &rest)?),
            None => self.serve_volume(),
        }
    }

    /// The most bytes of the volume each MPI rank held while its slabs were read, in rank order
    /// (see [`AdmmTeam::slab_ledger`]), with the bytes of its share; one entry without ranks.
    /// Collective.
    pub fn slab_ledger(&self) -> Vec<(u64, u64)> {
        self.team
            .slab_ledger()
            .into_iter()
            .enumerate()
            .map(|(rank, held)| (held, self.team.volume_share_bytes(rank)))
            .collect()
    }

    /// Stages the outputs of [`write_outputs`] in `set` (which may hold other files of the run).
    pub fn stage_outputs(&self, set: &mut OutputSet) -> Result<(), crate::io::IoError> {
        stage_outputs(set, &self.report, self)
    }

    /// [`stage_outputs`](Self::stage_outputs) with the volume in `formats`
    /// ([`stage_outputs_as`]).
    pub fn stage_outputs_as(
        &self,
        set: &mut OutputSet,
        formats: &[StackFormat],
    ) -> Result<(), crate::io::IoError> {
        stage_outputs_as(set, &self.report, self, formats)
    }
}

impl VolumeSlabs for Solved<'_> {
    fn shape(&self) -> [usize; 3] {
        let g = &self.report.geometry;
        [g.n0, g.n1, g.n2]
    }

    /// Under MPI collective: every rank calls it (the ranks that write nothing through
    /// [`Solved::serve_volume`]), and only the first rank's `visit` sees the slabs.
    fn visit_slabs(&self, visit: &mut SlabVisitor<'_>) -> Result<(), String> {
        let g = &self.padded;
        let shape = self.shape();
        // The slices of the unpadded volume, [z0, z0 + n0) of the padded one.
        let z0 = self.padding.volume[0][0];
        // Every rank reads the same slabs.
        let slab_planes = self.team.least(self.slab_planes as u64) as usize;
        let mut cropped = Vec::new();
        for start in (z0..z0 + shape[0]).step_by(slab_planes) {
            let end = (start + slab_planes).min(z0 + shape[0]);
            let runs = self
                .team
                .volume_slab(self.ctx, start..end)
                .map_err(|e| format!("reading slices {start}..{end} of the volume: {e}"))?;
            for (first, slab) in runs {
                if [g.n1, g.n2] == [shape[1], shape[2]] {
                    visit(first - z0, &slab)?;
                } else {
                    cropped.clear();
                    let planes = slab.len() / (g.n1 * g.n2);
                    self.padding
                        .crop_into(&slab, planes, g, shape, &mut cropped);
                    visit(first - z0, &cropped)?;
                }
            }
        }
        Ok(())
    }
}

impl VolumeSlabs for Reconstruction {
    fn shape(&self) -> [usize; 3] {
        let g = &self.geometry;
        [g.n0, g.n1, g.n2]
    }

    fn visit_slabs(&self, visit: &mut SlabVisitor<'_>) -> Result<(), String> {
        visit(0, &self.volume)
    }
}

/// The kind of the [`OutputSet`] of a reconstruction ([`write_outputs`]).
pub const OUTPUT_KIND: &str = "reconstruct";

/// Every file [`stage_outputs_as`] may write (`convergence.png` only for a run with reports).
pub const OUTPUT_NAMES: [&str; 8] = [
    "recon.tif",
    "recon.h5",
    "recon.zarr",
    "report.json",
    "preview_xy.png",
    "preview_xz.png",
    "preview_yz.png",
    "convergence.png",
];

/// Writes `DIR/recon.tif` (float32, one page per z slice), `DIR/recon.h5` (`/volume`), `DIR/report.json` (geometry,
/// parameters, device, per-iteration Lagrangian terms, times, memory), `DIR/preview_{xy,xz,yz}.png`
/// and `DIR/convergence.png` (the per-iteration reports, see [`crate::plot::write_convergence_png`])
/// as one [`OutputSet`] of kind [`OUTPUT_KIND`]: they appear together once all are complete, or
/// the previous ones stay. Returns the paths written.
pub fn write_outputs(
    dir: &std::path::Path,
    rec: &Reconstruction,
) -> Result<Vec<PathBuf>, crate::io::IoError> {
    let mut set = OutputSet::begin(dir, OUTPUT_KIND)?;
    let staged = stage_outputs(&mut set, rec, rec);
    Ok(set.complete(staged)?.1)
}

/// Stages the files of [`write_outputs`] of the report `rec` and a volume read a slab at a time
/// in `set`.
pub fn stage_outputs(
    set: &mut OutputSet,
    rec: &Reconstruction,
    volume: &dyn VolumeSlabs,
) -> Result<(), crate::io::IoError> {
    stage_outputs_as(set, rec, volume, &DEFAULT_FORMATS)
}

/// The formats [`stage_outputs`] writes the volume in: `recon.tif` and `recon.h5`.
pub const DEFAULT_FORMATS: [StackFormat; 2] = [StackFormat::Tiff, StackFormat::Hdf5];

/// The name of the volume's file in `format`: `recon.tif`, `recon.h5`, `recon.zarr` or
/// `recon.npy`.
pub fn volume_file_name(format: StackFormat) -> &'static str {
    match format {
        StackFormat::Tiff => "recon.tif",
        StackFormat::Hdf5 => "recon.h5",
        StackFormat::Zarr => "recon.zarr",
        StackFormat::Npy => "recon.npy",
    }
}

/// [`stage_outputs`] with the volume in each of `formats` (named by [`volume_file_name`]),
/// calibrated with the report's [`Reconstruction::voxel_size`].
pub fn stage_outputs_as(
    set: &mut OutputSet,
    rec: &Reconstruction,
    volume: &dyn VolumeSlabs,
    formats: &[StackFormat],
) -> Result<(), crate::io::IoError> {
    use crate::io::{write_calibrated_volume_files, IoError};
    use crate::plot::{write_convergence_png, write_slice_previews};
    // One pass over the volume writes every file and gathers the previews' slices.
    let mut files = Vec::with_capacity(formats.len());
    for &format in formats {
        files.push((set.stage(volume_file_name(format))?, format));
    }
    let files: Vec<(&std::path::Path, StackFormat)> =
        files.iter().map(|(p, f)| (p.as_path(), *f)).collect();
    let voxel_size = rec.voxel_size();
    let slices = write_calibrated_volume_files(&files, volume, voxel_size)?;
    let report = set.stage("report.json")?;
    let provenance = rec.provenance.as_ref();
    let json = serde_json::json!({
        "lamino_version": env!("CARGO_PKG_VERSION"),
        "input": provenance.map(|p| &p.input),
        "command_line": provenance.map(|p| &p.command_line),
        "started": provenance.map(|p| &p.started),
        // null: unknown, the volume is in voxel units.
        "voxel_size": voxel_size,
        "reconstruction": rec,
    });
    let text = serde_json::to_vec_pretty(&json).map_err(|e| IoError::Write {
        path: set.final_path("report.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(&report, text).map_err(|e| IoError::Write {
        path: set.final_path("report.json"),
        reason: e.to_string(),
    })?;
    let previews = write_slice_previews(set.staging_dir(), "preview", volume.shape(), slices)
        .map_err(|e| e.into_io(set.dir()))?;
    for path in previews {
        if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            set.stage(name)?;
        }
    }
    if !rec.reports.is_empty() {
        let png = set.stage("convergence.png")?;
        write_convergence_png(&png, &rec.reports, rec.params.convergence.as_ref())
            .map_err(|e| e.into_io(&set.final_path("convergence.png")))?;
    }
    Ok(())
}
