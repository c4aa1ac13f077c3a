//! `lamino reconstruct`: read a scan, reconstruct with ADMM-TV (progress bar, Ctrl-C stops after
//! the current iteration and leaves a checkpoint), write the outputs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Args, ValueEnum};

use lamino::gpu::GpuContext;
use lamino::input::{
    extension, input_geometry, load_projections, LoadedProjections, ProjectionInput, Shading,
};
use lamino::memo::{MemoOptions, MemoPolicy};
use lamino::recon::{write_outputs, Projections, Reconstruction, Reconstructor};
use lamino::solver::{AdmmParams, InnerSolver};

use super::progress::bar;
use super::{Cli, CliResult};

#[derive(Args)]
pub struct ReconstructArgs {
    /// Projections: a DXchange `.h5` scan, a multi-page TIFF of intensities (with --angles,
    /// --tilt-deg and --flats or --flatfield), or `.npy` line integrals -ln(I/I0) in voxel units,
    /// shape (ntheta, deth, detw), with --geometry.
    input: PathBuf,
    /// Laminographic tilt in degrees (phi = 90 + T), for scans that do not record it.
    #[arg(long, allow_hyphen_values = true)]
    tilt_deg: Option<f64>,
    /// For a TIFF intensity stack: a text file with one projection angle in degrees per line.
    #[arg(long)]
    angles: Option<PathBuf>,
    /// For a TIFF intensity stack: white fields (multi-page TIFF or .npy), averaged.
    #[arg(long)]
    flats: Option<PathBuf>,
    /// For a TIFF intensity stack: dark fields (multi-page TIFF or .npy), averaged; zero if absent.
    #[arg(long)]
    darks: Option<PathBuf>,
    /// For a TIFF intensity stack without white fields: estimate the open beam (I0 times the
    /// detector shading) from the projections themselves. `envelope`: a smooth surface fitted
    /// to the brightest projections at each pixel, i.e. where the sample leaves the ray. The
    /// intensities must already be dark-subtracted (no dark-field is estimable without dark
    /// frames); pixel-to-pixel gain is not estimated.
    #[arg(long, value_enum, conflicts_with = "flats")]
    flatfield: Option<OpenBeamMethod>,

    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Geometry JSON (sizes, angles in radians, phi), needed for `.npy` input.
    #[arg(long)]
    geometry: Option<PathBuf>,
    /// Run exactly N outer ADMM iterations (benchmarks, comparisons) instead of stopping on the
    /// convergence test (the default).
    #[arg(long, conflicts_with = "max_iterations")]
    iterations: Option<usize>,
    /// The most outer iterations a run that stops on convergence may take (default 300).
    #[arg(long)]
    max_iterations: Option<usize>,
    /// Inner iterations per outer iteration (default 4).
    #[arg(long)]
    inner: Option<usize>,
    /// TV weight (default 1e-3, for volumes of order 1 per voxel).
    #[arg(long)]
    alpha: Option<f64>,
    /// Initial ADMM penalty (default 0.5).
    #[arg(long)]
    rho0: Option<f64>,
    /// Use the reference's Dai-Yuan inner iteration with this fixed step instead of exact-step CG.
    #[arg(long)]
    dai_yuan_step: Option<f64>,
    /// Pad the detector laterally by a quarter of its width on each side (edge values), as the
    /// reference does for samples wider than the field of view; cropped afterwards.
    #[arg(long)]
    pad: bool,
    /// Write the solver state to DIR/checkpoint.ckpt every K outer iterations (it is always
    /// written when Ctrl-C stops a run).
    #[arg(long)]
    checkpoint_every: Option<usize>,
    /// Continue from DIR/checkpoint.ckpt.
    #[arg(long)]
    resume: bool,
    /// No progress bar or parameter echo.
    #[arg(long)]
    quiet: bool,
    /// Device memory the reconstruction may hold (MiB). Default: the device-local memory the
    /// Vulkan driver reports, else 2048. Beyond it the arrays stream through the device in
    /// chunks (same results, more transfers); too small for even one chunk is an error.
    #[arg(long)]
    max_device_memory: Option<u64>,
    /// Host memory the arrays the device does not hold may take (MiB). Default: 70 % of the
    /// machine's RAM. Beyond it they go to --scratch.
    #[arg(long)]
    max_host_memory: Option<u64>,
    /// Directory for memory-mapped scratch files holding the arrays beyond --max-host-memory
    /// (a fast local disk; the files have no name and vanish however the run ends).
    #[arg(long)]
    scratch: Option<PathBuf>,
    /// Print the memory plan (in-core or streaming, chunk sizes, device / host / scratch bytes,
    /// bytes moved per iteration) as JSON and stop: no projection is read, no GPU work is done.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    memo: MemoArgs,
}

/// How `reconstruct` estimates the open beam of projections without white fields.
#[derive(Clone, Copy, ValueEnum)]
enum OpenBeamMethod {
    /// `lamino::flatfield::estimate_open_beam`.
    Envelope,
    /// The name the flat-field issue asked for. BaSiC itself cannot be used on projections: a
    /// sample that is always in view is what every projection shares, so BaSiC puts it into
    /// the flat-field (measured: relative L2 3.4 on a simulated scan). This runs the envelope
    /// estimate and says so.
    Basic,
}

/// Memoization of the operator's chunk computations across iterations.
#[derive(Args)]
struct MemoArgs {
    /// `off`, `mlr:TAU` (the mLR paper's policy: reuse when the pooled keys' cosine similarity is
    /// at least TAU; trades accuracy for time, no error bound) or `certified:TOL` (reuse only
    /// when the least-squares residual of the input is below TOL, with a bound on the error).
    /// Default: off (see README, "Memoization").
    #[arg(long, default_value_t = MemoPolicy::DEFAULT)]
    memo: MemoPolicy,
    /// Device memory for the memo cache (MiB, default 256).
    #[arg(long)]
    memo_device_mib: Option<u64>,
    /// Host memory for the memo cache (MiB, default 1024).
    #[arg(long)]
    memo_host_mib: Option<u64>,
    /// Rows per memoized chunk (default 8).
    #[arg(long)]
    memo_chunk: Option<usize>,
}

impl MemoArgs {
    fn options(&self) -> MemoOptions {
        let d = MemoOptions::default();
        MemoOptions {
            policy: self.memo,
            device_bytes: self.memo_device_mib.map_or(d.device_bytes, |m| m << 20),
            host_bytes: self.memo_host_mib.map_or(d.host_bytes, |m| m << 20),
            chunk_rows: self.memo_chunk.unwrap_or(d.chunk_rows),
            ..d
        }
    }
}

impl ReconstructArgs {
    fn solver_params(&self) -> AdmmParams {
        let mut p = AdmmParams::default();
        if let Some(v) = self.iterations {
            p.outer_iterations = v;
            p.convergence = None;
        }
        if let Some(v) = self.max_iterations {
            p.outer_iterations = v;
        }
        if let Some(v) = self.inner {
            p.inner_iterations = v;
        }
        if let Some(v) = self.alpha {
            p.alpha = v;
        }
        if let Some(v) = self.rho0 {
            p.rho0 = v;
        }
        if let Some(step) = self.dai_yuan_step {
            p.inner = InnerSolver::DaiYuan { step };
        }
        p
    }

    /// The input route the arguments describe, or why they describe none.
    fn projection_input(&self) -> Result<ProjectionInput, Box<dyn std::error::Error>> {
        let path = self.input.clone();
        let ext = extension(&path);
        if self.flatfield.is_some() && !matches!(ext.as_str(), "tif" | "tiff") {
            return Err(format!(
                "--flatfield applies to TIFF intensity stacks; {} holds line integrals or its own \
                 white fields",
                path.display()
            )
            .into());
        }
        Ok(match ext.as_str() {
            "npy" => ProjectionInput::LineIntegrals {
                path,
                geometry: self
                    .geometry
                    .clone()
                    .ok_or("`.npy` projections need --geometry G.json")?,
            },
            "h5" | "hdf5" => ProjectionInput::DXchange {
                path,
                tilt_deg: self.tilt_deg,
            },
            "tif" | "tiff" => {
                let angles = self
                    .angles
                    .clone()
                    .ok_or("a TIFF stack needs --angles FILE (degrees, one per line)")?;
                let tilt_deg = self.tilt_deg.ok_or("a TIFF stack needs --tilt-deg T")?;
                let shading = match (&self.flats, self.flatfield) {
                    (Some(flats), _) => Shading::Fields {
                        flats: flats.clone(),
                        darks: self.darks.clone(),
                    },
                    (None, Some(method)) => {
                        if self.darks.is_some() {
                            return Err("--darks needs --flats: with --flatfield envelope, subtract the dark field from the projections first".into());
                        }
                        if matches!(method, OpenBeamMethod::Basic) {
                            eprintln!(
                                "note: --flatfield basic estimates the open beam with the envelope \
                                 method: BaSiC would absorb a sample that is always in view into \
                                 the flat-field"
                            );
                        }
                        Shading::OpenBeamEnvelope
                    }
                    (None, None) => return Err("a TIFF intensity stack needs --flats (and --darks), or --flatfield envelope to estimate the open beam from the projections".into()),
                };
                ProjectionInput::TiffStack {
                    path,
                    angles,
                    tilt_deg,
                    shading,
                }
            }
            other => {
                return Err(format!(
                    "{}: unsupported projection format {other:?} (expected .h5, .tif or .npy)",
                    path.display()
                )
                .into())
            }
        })
    }
}

/// Prints what loading the projections found out (unless `quiet`) and returns them.
pub(super) fn report_loaded(loaded: LoadedProjections, quiet: bool) -> Projections {
    if !quiet {
        for note in &loaded.notes {
            eprintln!("{note}");
        }
        for warning in &loaded.warnings {
            eprintln!("warning: {warning}");
        }
    }
    loaded.projections
}

pub fn run(cli: &Cli, args: &ReconstructArgs) -> CliResult {
    // Parameters first: a bad one is reported before any file is read.
    let params = args.solver_params();
    params.validate()?;
    let input = args.projection_input()?;
    let options = RunOptions {
        memo: args.memo.options(),
        budgets: MemoryBudgets {
            device_mib: args.max_device_memory,
            host_mib: args.max_host_memory,
            scratch: args.scratch.clone(),
        },
        pad: args.pad,
        checkpoint_every: args.checkpoint_every,
        resume: args.resume,
        quiet: args.quiet,
    };
    if args.dry_run {
        let g = input_geometry(&input)?;
        let ctx = cli.context()?;
        let plan = options
            .budgets
            .apply(Reconstructor::new(&ctx))
            .params(params)
            .memo(options.memo)
            .lateral_padding(if options.pad { g.detw / 4 } else { 0 })
            .plan(&g)?;
        if !args.quiet {
            eprintln!("{plan}");
        }
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(());
    }
    let projections = report_loaded(load_projections(&input)?, args.quiet);
    let ctx = cli.context()?;
    run_reconstruction(&ctx, &projections, params, &args.out, &options)?;
    Ok(())
}

/// The memory budgets of the command line (MiB).
#[derive(Default)]
pub(super) struct MemoryBudgets {
    pub device_mib: Option<u64>,
    pub host_mib: Option<u64>,
    pub scratch: Option<PathBuf>,
}

impl MemoryBudgets {
    fn apply<'a>(&self, mut builder: Reconstructor<'a>) -> Reconstructor<'a> {
        if let Some(mib) = self.device_mib {
            builder = builder.device_memory_budget(mib << 20);
        }
        if let Some(mib) = self.host_mib {
            builder = builder.host_memory_budget(mib << 20);
        }
        if let Some(dir) = &self.scratch {
            builder = builder.scratch_dir(dir.clone());
        }
        builder
    }
}

/// The run settings of the command line.
pub(super) struct RunOptions {
    pub memo: MemoOptions,
    pub budgets: MemoryBudgets,
    pub pad: bool,
    pub checkpoint_every: Option<usize>,
    pub resume: bool,
    pub quiet: bool,
}

/// Reconstructs with a progress bar and Ctrl-C handling, and writes the outputs to `out`.
pub(super) fn run_reconstruction(
    ctx: &GpuContext,
    projections: &Projections,
    params: AdmmParams,
    out: &Path,
    o: &RunOptions,
) -> Result<Reconstruction, Box<dyn std::error::Error>> {
    let g = projections.geometry();
    if !o.quiet {
        eprintln!(
            "reconstructing {}x{}x{} from {} projections of {}x{} (tilt {:.2} deg) on {}",
            g.n0,
            g.n1,
            g.n2,
            g.ntheta(),
            g.deth,
            g.detw,
            (g.phi - std::f64::consts::FRAC_PI_2).to_degrees().abs(),
            ctx.info()
        );
        let defaults = AdmmParams::default();
        if params != defaults {
            eprintln!("solver parameters (changed from the defaults {defaults:?}): {params:?}");
        }
        if o.memo.policy != MemoPolicy::DEFAULT {
            eprintln!(
                "memo policy {} (default {}), chunks of {} rows",
                o.memo.policy,
                MemoPolicy::DEFAULT,
                o.memo.chunk_rows
            );
        }
    }
    if o.memo.policy.trades_accuracy() {
        eprintln!(
            "warning: --memo {} reuses results without an error bound: it trades accuracy for time (`lamino bench memo` measures how much)",
            o.memo.policy
        );
    }
    std::fs::create_dir_all(out)?;
    let checkpoint = out.join("checkpoint.ckpt");
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))?;
    let progress = bar(params.outer_iterations as u64, "iterations", o.quiet);
    let mut builder = o
        .budgets
        .apply(Reconstructor::new(ctx))
        .params(params)
        .memo(o.memo)
        .lateral_padding(if o.pad { g.detw / 4 } else { 0 })
        .checkpoint_every(checkpoint.clone(), o.checkpoint_every.unwrap_or(usize::MAX))
        .cancel_flag(cancel)
        .on_progress(|p| {
            progress.set_position(p.iteration as u64 + 1);
            progress.set_message(format!(
                "|Lu-d|^2 {:.4e}, rho {}, change {:.1e}",
                p.report.data_term, p.report.rho, p.report.change
            ));
        });
    if o.resume {
        builder = builder.resume_from(checkpoint.clone());
    }
    let plan = builder.plan(g)?;
    if !o.quiet && plan.mode == lamino::plan::Mode::Streaming {
        progress.suspend(|| eprintln!("{plan}"));
    }
    let result = builder.run(projections)?;
    progress.finish_and_clear();
    if !result.completed {
        eprintln!(
            "stopped after iteration {}: the state is in {}; rerun with --resume to continue",
            result.reports.last().map_or(0, |r| r.iteration + 1),
            checkpoint.display()
        );
        return Err("interrupted".into());
    }
    if !o.quiet {
        let iterations = result.reports.last().map_or(0, |r| r.iteration + 1);
        eprintln!(
            "stopped after {iterations} outer iterations: {}",
            result.stop.describe()
        );
    }
    for path in write_outputs(out, &result)? {
        if !o.quiet {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(result)
}
