//! `lamino reconstruct`: read a scan, preprocess it (binning, stripe removal, the rotation axis),
//! reconstruct with ADMM-TV (progress bar or log lines; Ctrl-C, SIGTERM and SIGUSR1 stop after the
//! current iteration and leave a checkpoint), write the outputs.
//!
//! This file is the command's flow; its rooms: `inputs` (the input routes), `preprocess`
//! (binning, clamping, stripes, pixel size), `volume_box` (slab and ROI), `solve` (devices, MPI
//! ranks, budgets and the reconstruction `demo` shares).

mod alignment;
mod inputs;
mod preprocess;
mod solve;
mod volume_box;

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::io::{read_shifts, OutputSet, StackFormat};
use crate::memo::{MemoOptions, MemoPolicy, MemoStages};
use crate::params::AdmmParams;
use crate::params::InnerSolver;
use crate::preprocess::{
    describe_axis_search, AxisChoice, AxisSearch, AUTO_AXIS_RANGE_FRACTION, AXIS_NEAR_FOURIER,
};
use crate::recon::{AxisStep, CheckpointInterval, Heard, Job, JobEvent, Prepared, Provenance};

use super::signals::Interrupted;
use super::{Cli, CliResult};

pub(super) use inputs::say_read;
pub use inputs::InputArgs;
pub use preprocess::PreprocessArgs;
use preprocess::{projections_shape, say_prepared};
use solve::{checkpoint_path, open_devices, ranks, reconstructor, say_job};
pub(super) use solve::{solving, MemoryBudgets, Processes, RunOptions};
pub(super) use volume_box::parse_span;
use volume_box::VolumeArgs;

/// A volume file format of `reconstruct --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VolumeFormat {
    Tiff,
    H5,
    Zarr,
}

impl VolumeFormat {
    fn stack_format(self) -> StackFormat {
        match self {
            Self::Tiff => StackFormat::Tiff,
            Self::H5 => StackFormat::Hdf5,
            Self::Zarr => StackFormat::Zarr,
        }
    }
}

#[derive(Args)]
pub struct ReconstructArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    preprocess: PreprocessArgs,
    /// The detector column the rotation axis projects onto, in unbinned pixels (sub-pixel; pixel
    /// w is centred at w; default: the detector's centre column, width/2, or the geometry file's
    /// `center`). `auto` searches it (see `lamino try`): over the default axis plus or minus an
    /// eighth of the detector width, coarse to fine, at the scan's tilt. tomopy's `center`.
    #[arg(long, visible_alias = "center")]
    rotation_axis: Option<AxisChoice>,
    /// Each projection's detector shift, a CSV file with the header `angle_deg,du,dv` and one
    /// line per projection in the scan's order: its angle in degrees and where it landed,
    /// columns and rows in unbinned pixels, relative to where the geometry puts it (the stage
    /// wobbled or drifted). As `lamino simulate --jitter --drift` writes them (SCAN.shifts.csv).
    /// Applied exactly, as Fourier phases; report.json's geometry holds them.
    #[arg(long, value_name = "FILE")]
    shifts: Option<PathBuf>,
    /// Estimate each projection's shift by projection matching before the reconstruction
    /// (the scan moved: stage wobble, drift): rounds of a short reconstruction, its
    /// reprojection and each projection registered against it, coarse to fine, until the shifts
    /// move less than 0.02 pixels RMS per round; starts from --shifts if given. Writes
    /// shifts.csv (for --shifts), shifts.png and alignment.png; report.json's
    /// `preprocessing.alignment` has the rounds. The mean shift is kept (it is the volume's
    /// position). One process only (not under MPI ranks).
    #[arg(long)]
    align: bool,
    /// Boxed: the ranges would make this the one large variant of the command enum.
    #[command(flatten)]
    volume: Box<VolumeArgs>,

    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// The volume's files, comma-separated: `tiff` (recon.tif, float32 pages with ImageJ
    /// metadata), `h5` (recon.h5, /volume), `zarr` (recon.zarr, OME-Zarr with a multiscale
    /// pyramid, chunked and gzip-compressed: what napari opens natively and what volumes too
    /// large for one TIFF need).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [VolumeFormat::Tiff, VolumeFormat::H5])]
    format: Vec<VolumeFormat>,
    /// recon.zarr's chunk shape Z,Y,X (voxels, each clamped to its level's side), with pyramid
    /// levels added while the smallest side is above the chunk's smallest side (default: chunks
    /// of up to 64 x 256 x 256, levels down to a smallest side of 64). Needs `--format zarr`.
    #[arg(long, value_parser = parse_zarr_chunks)]
    zarr_chunks: Option<crate::io::ZarrOptions>,
    /// Run exactly N outer ADMM iterations (benchmarks, comparisons) instead of stopping on the
    /// convergence test (the default).
    #[arg(long, conflicts_with = "max_iterations")]
    iterations: Option<usize>,
    /// The most outer iterations a run that stops on convergence may take.
    #[arg(long, default_value_t = AdmmParams::default().outer_iterations)]
    max_iterations: usize,
    /// Conjugate-gradient iterations per outer iteration [default: 2 on volumes narrower than
    /// 64 voxels (with padding), 3 from 64: the subproblem's conditioning grows with the width]
    #[arg(long)]
    inner: Option<usize>,
    /// TV weight relative to the data's scale (the mean attenuation per voxel estimated from
    /// the projections, over the volume's width): the same value suits data in any units and
    /// volumes of any size; report.json's `regularisation` gives the scale and the absolute
    /// weight.
    #[arg(long, default_value_t = AdmmParams::default().alpha)]
    alpha: f64,
    /// Initial ADMM penalty (residual balancing adapts it, and by default it is set once after
    /// 10 outer iterations from the volume's gradient).
    #[arg(long, default_value_t = AdmmParams::default().rho0)]
    rho0: f64,
    /// Keep the penalty to residual balancing alone: do not set it after 10 outer iterations to
    /// the power of two nearest 0.85 sqrt(w / rms |grad u|), w the TV weight (the default before 2026-12-04).
    #[arg(long)]
    no_penalty_from_gradient: bool,
    /// Over-relaxation factor of the ADMM splitting, 0 < a < 2; 1 is plain ADMM (Boyd et al.,
    /// §3.4.3).
    #[arg(long, default_value_t = AdmmParams::default().relaxation)]
    relaxation: f64,
    /// Use the reference's Dai-Yuan inner iteration with this fixed step instead of exact-step CG.
    #[arg(long)]
    dai_yuan_step: Option<f64>,
    /// Pad the detector laterally by a quarter of its width on each side (edge values), as the
    /// reference does for samples wider than the field of view; cropped afterwards.
    #[arg(long)]
    pad: bool,
    /// When to write the solver state to DIR/checkpoint.ckpt: every N outer iterations (`10`),
    /// at the end of the first iteration a time after the last checkpoint (`90s`, `10m`, `1h`),
    /// `never`, or `auto`: every 10 minutes once the run is expected (from the mean time per
    /// iteration so far, at the most iterations it may take) to last more than 30 minutes. It
    /// is always written when Ctrl-C, SIGTERM or SIGUSR1 stops a run (exit status 128 + the
    /// signal's number).
    #[arg(long, default_value_t = CheckpointInterval::Auto)]
    checkpoint_every: CheckpointInterval,
    /// Continue from DIR/checkpoint.ckpt.
    #[arg(long)]
    resume: bool,
    /// No progress bar or parameter echo.
    #[arg(long)]
    quiet: bool,
    /// Device memory the reconstruction may hold (MiB). Default: the device-local memory the
    /// Vulkan driver reports, else 2048. Beyond it the arrays stream through the device in
    /// chunks (same results, more transfers); too small for even one chunk is an error. It
    /// holds from the start: the axis search of `--rotation-axis auto` keeps to it too.
    #[arg(long, value_parser = super::mib_as_bytes)]
    max_device_memory: Option<u64>,
    /// Host memory the arrays the device does not hold may take (MiB). Default: 70 % of the
    /// machine's RAM. Beyond it they go to --scratch.
    #[arg(long, value_parser = super::mib_as_bytes)]
    max_host_memory: Option<u64>,
    /// Directory for memory-mapped scratch files holding the arrays beyond --max-host-memory
    /// (a fast local disk; the files have no name and vanish however the run ends).
    #[arg(long)]
    scratch: Option<PathBuf>,
    /// Print the memory plan (in-core or streaming, chunk sizes, device / host / scratch bytes,
    /// bytes moved per iteration) as JSON and stop: no projection is read, no GPU work is done
    /// (a software adapter is planned for without --allow-software-gpu).
    #[arg(long)]
    dry_run: bool,
    /// How the inner CG applies its normal operator (1/N) Re A*A: `toeplitz` (one padded FFT
    /// convolution per CG step, its kernel computed once: no gridding in the loop; one device,
    /// in-core or streaming, the default CG, no --memo; its volume differs from gridding's by the
    /// gridding accuracy), `gridding` (A then A* per CG step, the reference's way, which --memo
    /// memoizes) or `auto` (gridding for now: Toeplitz does not yet run on several devices, and
    /// auto gives the same bits whatever the plan). report.json's
    /// `normal_operator` and --dry-run's plan say which runs and why.
    #[arg(long, default_value = "auto", value_parser = parse_normal_operator)]
    normal_operator: crate::params::NormalOperator,
    #[command(flatten)]
    memo: MemoArgs,
}

fn parse_normal_operator(s: &str) -> Result<crate::params::NormalOperator, String> {
    super::bench::parse_named(
        s,
        crate::params::NormalOperator::ALL.into_iter(),
        "normal operator",
    )
}

/// Memoization of the operator's chunk computations across iterations.
#[derive(Args)]
struct MemoArgs {
    /// `off`, `mlr:TAU` (the mLR paper's policy: reuse when the pooled keys' cosine similarity is
    /// at least TAU; trades accuracy for time, no error bound), `certified:TOL` (reuse
    /// least-squares combinations of stored chunks while the reused chunks' input residuals
    /// together stay below TOL of each stage's input, with a bound on the error) or
    /// `certified:auto[:SCALE[:FLOOR]]` (TOL follows the ADMM primal residual); see
    /// docs/memoization.md, "When to use it".
    #[arg(long, default_value_t = MemoPolicy::DEFAULT)]
    memo: MemoPolicy,
    /// The stages memoized: `all`, or a comma-separated list of usfft1d, usfft1d_adjoint,
    /// usfft2d, usfft2d_adjoint (the default is the 2D gridding stages, where reuse pays).
    #[arg(long, default_value_t = MemoStages::DEFAULT)]
    memo_stages: MemoStages,
    /// Device memory for the memo cache (MiB).
    #[arg(long = "memo-device-mib", value_parser = super::mib_as_bytes,
          default_value_t = MemoOptions::DEFAULT.device_bytes >> 20)]
    memo_device_bytes: u64,
    /// Host memory for the memo cache (MiB).
    #[arg(long = "memo-host-mib", value_parser = super::mib_as_bytes,
          default_value_t = MemoOptions::DEFAULT.host_bytes >> 20)]
    memo_host_bytes: u64,
    /// Rows per memoized chunk.
    #[arg(long, default_value_t = MemoOptions::DEFAULT.chunk_rows)]
    memo_chunk: usize,
}

impl MemoArgs {
    fn options(&self) -> MemoOptions {
        let d = MemoOptions::default();
        MemoOptions {
            policy: self.memo,
            stages: self.memo_stages,
            device_bytes: self.memo_device_bytes,
            host_bytes: self.memo_host_bytes,
            chunk_rows: self.memo_chunk,
            ..d
        }
    }
}

/// Refuses a solver count above `bound`, naming the option and the bound.
pub fn check_count(option: &str, value: usize, bound: usize, why: &str) -> Result<(), String> {
    match value <= bound {
        true => Ok(()),
        false => Err(format!("{option} {value}: at most {bound} ({why})")),
    }
}

impl ReconstructArgs {
    /// The solver counts against their bounds (those of [`AdmmParams::validate`]), before any
    /// work, named as options.
    fn check_counts(&self) -> Result<(), String> {
        let outer = "a run that converges takes hundreds";
        check_count(
            "--max-iterations",
            self.max_iterations,
            AdmmParams::MAX_OUTER_ITERATIONS,
            outer,
        )?;
        if let Some(n) = self.iterations {
            check_count("--iterations", n, AdmmParams::MAX_OUTER_ITERATIONS, outer)?;
        }
        match self.inner {
            Some(k) => check_count(
                "--inner",
                k,
                AdmmParams::MAX_INNER_ITERATIONS,
                "a stop is honoured between outer iterations, which must stay short",
            ),
            None => Ok(()),
        }
    }

    fn solver_params(&self) -> AdmmParams {
        let mut p = AdmmParams {
            outer_iterations: self.max_iterations,
            inner_iterations: self.inner,
            alpha: self.alpha,
            rho0: self.rho0,
            relaxation: self.relaxation,
            ..AdmmParams::default()
        };
        if let Some(v) = self.iterations {
            p.outer_iterations = v;
            p.convergence = None;
        }
        if let Some(step) = self.dai_yuan_step {
            p.inner = InnerSolver::DaiYuan { step };
        }
        if self.no_penalty_from_gradient {
            p.penalty_from_gradient = None;
        }
        p
    }
}

pub fn run(cli: &Cli, args: &ReconstructArgs) -> CliResult {
    // Started by an MPI launcher: this process is one rank; an error on it stops them all.
    let processes = crate::distributed::launch()?;
    match processes.size() {
        1 => run_as(cli, args, processes),
        size => run_as(cli, args, processes.clone()).or_else(|e| {
            eprintln!("error on rank {} of {size}: {e}", processes.rank());
            processes.abort(1)
        }),
    }
}

fn run_as(cli: &Cli, args: &ReconstructArgs, processes: Processes) -> CliResult {
    // Parameters first: a bad one is reported before any file is read.
    args.check_counts()?;
    let params = args.solver_params();
    params.validate()?;
    args.preprocess.stripe_removal()?;
    let first = processes.rank() == 0;
    let options = RunOptions {
        memo: args.memo.options(),
        normal_operator: args.normal_operator,
        budgets: MemoryBudgets {
            device_bytes: args.max_device_memory,
            host_bytes: args.max_host_memory,
            scratch: args.scratch.clone(),
        },
        pad: args.pad,
        checkpoint_every: Some(args.checkpoint_every),
        resume: args.resume,
        quiet: args.quiet || !first,
        processes,
        formats: unique_formats(&args.format),
        zarr: args.zarr_chunks,
        provenance: Some(Provenance::now(Some(args.input.input.clone()))),
    };
    if args.zarr_chunks.is_some() && !options.formats.contains(&StackFormat::Zarr) {
        return Err(
            "--zarr-chunks: the volume is not written as OME-Zarr (add zarr to --format)".into(),
        );
    }
    let job = args.job()?;
    if args.dry_run {
        let devices = open_devices(cli, &options.processes, true)?;
        let plan = reconstructor(&devices, params, &options).plan_job(&job, &mut |event| {
            say_job(&event, &devices, &params, &options, true);
            Ok(())
        })?;
        if first {
            println!("{}", serde_json::to_string_pretty(&plan)?);
        }
        return Ok(());
    }
    // Only the first rank writes: staging directories are named by process id, which ranks on
    // other nodes may share.
    let mut set = match first {
        true => Some(OutputSet::begin(&args.out, crate::recon::OUTPUT_KIND)?),
        false => None,
    };
    if let Some(set) = &set {
        let outputs: Vec<&str> = crate::recon::OUTPUT_NAMES
            .into_iter()
            .chain([AXIS_SEARCH_CSV])
            .chain(alignment::ALIGNMENT_OUTPUTS)
            .collect();
        set.refuse_inputs(&outputs, &args.input.files())?;
    }
    let result = reconstruct_into(cli, args, job, params, &options, set.as_mut());
    let Some(set) = set else {
        return result;
    };
    // A run a signal stopped keeps its exit status through the output set's message.
    let stopped = result
        .as_ref()
        .err()
        .and_then(|e| e.downcast_ref::<Interrupted>())
        .cloned();
    let ((), written) = match set.complete(result) {
        Ok(done) => done,
        Err(e) => {
            return Err(match stopped {
                Some(stopped) => stopped.retold(e.to_string()).into(),
                None => e.into(),
            })
        }
    };
    if !options.quiet {
        written
            .iter()
            .for_each(|path| eprintln!("wrote {}", path.display()));
    }
    Ok(())
}

/// Stages the scores of `search` in `set` (the writing rank's) and says what it found (in
/// `seconds`).
fn report_axis_search(
    search: &AxisSearch,
    out: &std::path::Path,
    set: Option<&mut OutputSet>,
    seconds: f64,
) -> Heard {
    let csv = out.join(AXIS_SEARCH_CSV);
    if let Some(set) = set {
        let scored = search.passes.iter().flat_map(|p| &p.scored);
        super::r#try::write_scores(&set.stage(AXIS_SEARCH_CSV)?, scored)
            .map_err(|e| e.to_string())?;
    }
    eprintln!(
        "rotation axis searched over [{:.1}, {:.1}] ({}, {} passes, {:.1} s): {:.2}; scores in {}",
        search.range[0],
        search.range[1],
        match search.fourier_axis {
            Some(_) => format!("within {AXIS_NEAR_FOURIER} columns of the Fourier estimate"),
            None => format!("the default axis +- {AUTO_AXIS_RANGE_FRACTION} of the width"),
        },
        search.passes.len(),
        seconds,
        search.rotation_axis,
        csv.display()
    );
    eprintln!("{}", describe_axis_search(search));
    Ok(())
}

/// Where `reconstruct --rotation-axis auto` writes the scores of its search.
const AXIS_SEARCH_CSV: &str = "axis_search.csv";

impl ReconstructArgs {
    /// The job the arguments describe: the input read as the preprocessing options say, then
    /// the stripes, the axis and the volume's box (resolved against the input's geometry, read
    /// from its headers alone).
    fn job(&self) -> Result<Job, Box<dyn std::error::Error>> {
        let input = self.preprocess.job_input(&self.input)?;
        let volume = match self.volume.asks_for_box() {
            true => self
                .volume
                .volume_box(&input.geometry()?, self.preprocess.binning_factor())?,
            false => None,
        };
        let axis = match self.rotation_axis {
            None => AxisStep::Geometry,
            Some(AxisChoice::Column(c)) => AxisStep::Column(c),
            // A resumed run takes the checkpoint's instead.
            Some(AxisChoice::Auto) => AxisStep::Search,
        };
        let shifts = match &self.shifts {
            Some(path) => Some(read_shifts(path, &input.geometry()?.theta)?),
            None => None,
        };
        let align = self.align.then(crate::preprocess::AlignOptions::default);
        let preparation = self.preprocess.preparation(shifts, axis, volume, align)?;
        Ok(Job { input, preparation })
    }
}

/// The reconstruction of [`run_as`] after its checks: `job` solved, with its outputs staged in
/// `set` (the first rank's).
fn reconstruct_into(
    cli: &Cli,
    args: &ReconstructArgs,
    job: Job,
    params: AdmmParams,
    options: &RunOptions,
    mut set: Option<&mut OutputSet>,
) -> CliResult {
    // The devices first: under MPI, a rank's share of the projections depends on how many
    // devices every rank has. A rank reads only its share.
    let devices = open_devices(cli, &options.processes, false)?;
    let (builder, run) = solving(&devices, params, &args.out, options)?;
    let rank = ranks(&options.processes).map(|r| (r.rank(), r.size()));
    let mut say = say_prepared(options.quiet, args.quiet, rank);
    let checkpoint = checkpoint_path(&args.out);
    let mut shape = [0; 3];
    let mut theta = Vec::new();
    let solved = builder.run_job(job, &mut |event| {
        match &event {
            JobEvent::Loaded(loaded) => {
                shape = projections_shape(&loaded.projections);
                theta.clone_from(&loaded.projections.geometry().theta);
                args.preprocess
                    .say_loaded(loaded, &options.processes, options.quiet)
            }
            JobEvent::Prepared(Prepared::AxisFromCheckpoint { axis }) if !options.quiet => {
                eprintln!(
                    "rotation axis {axis:.2} (unbinned columns): the one {} was written with, not \
                 searched again",
                    checkpoint.display()
                )
            }
            JobEvent::Prepared(Prepared::AxisSearched {
                search: Some(search),
                seconds,
                ..
            }) => report_axis_search(search, &args.out, set.as_deref_mut(), *seconds)?,
            JobEvent::Prepared(Prepared::Aligned(aligned)) => {
                if let Some(set) = set.as_deref_mut() {
                    alignment::stage_alignment(set, &theta, aligned)?;
                }
            }
            _ => {}
        }
        if let JobEvent::Prepared(step) = &event {
            say(shape, step);
        }
        run.say(&event, &devices, options)
    });
    let solved = solved.map_err(|e| run.job_error(e))?;
    run.finish(solved, set, options)?;
    Ok(())
}

/// `lamino help reconstruct`'s examples.
pub const EXAMPLES: &str = "\
Examples:
  # A DXchange scan, stopping on convergence, the axis searched
  lamino reconstruct scan.h5 --rotation-axis auto --out rec
  # Binned 4 x 4 (tomocupy's --binning 2), rings removed, the axis and tilt given
  lamino reconstruct scan.h5 --binning 2 --remove-stripe fw --rotation-axis 1024.5 \\
      --tilt-deg 30 --out rec-bin4
  # A TIFF stack of intensities with white and dark fields
  lamino reconstruct proj.tif --angles angles.txt --tilt-deg 30 --flats flats.tif \\
      --darks darks.tif --out rec
  # Line integrals with a geometry file, exactly 50 iterations, on two GPUs
  lamino reconstruct data.npy --geometry geometry.json --iterations 50 --device 0,1 --out rec";

/// `Z,Y,X`: recon.zarr's chunk shape, each at least 1; the pyramid goes down to the chunk's
/// smallest side.
fn parse_zarr_chunks(s: &str) -> Result<crate::io::ZarrOptions, String> {
    let bad = || format!("{s:?}: expected Z,Y,X (voxels, each at least 1)");
    let sides: Vec<usize> = s
        .split(',')
        .map(|v| v.trim().parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let [z, y, x] = sides[..] else {
        return Err(bad());
    };
    if z.min(y).min(x) == 0 {
        return Err(bad());
    }
    Ok(crate::io::ZarrOptions {
        chunk: [z, y, x],
        min_side: z.min(y).min(x),
        gzip_level: crate::io::ZarrOptions::for_shape([1, 1, 1]).gzip_level,
    })
}

/// `formats` in the order given, each once.
fn unique_formats(formats: &[VolumeFormat]) -> Vec<StackFormat> {
    let mut unique: Vec<StackFormat> = Vec::with_capacity(formats.len());
    for format in formats.iter().map(|f| f.stack_format()) {
        if !unique.contains(&format) {
            unique.push(format);
        }
    }
    unique
}
