//! The `lamino` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use lamino::fft::{Direction, FftPlan, Normalization};
use lamino::gpu::{list_adapters, DeviceOptions, DeviceSelection, GpuContext};
use lamino::io::{
    normalize, read_complex_npy, read_dxchange, read_tiff_volume, write_complex_npy,
    write_dxchange, ComplexArray, Scan, Stack, RATIO_FLOOR,
};
use lamino::memo::{MemoOptions, MemoPolicy};
use lamino::operator::{Apply, Geometry, LaminoOperator, OperatorOptions};
use lamino::recon::{write_outputs, Projections, Reconstructor};
use lamino::reference::{fft_last_axes, max_relative_error, SplitMix64};
use lamino::simulate::{measure, project, rasterize, Noise, PhantomKind};
use lamino::solver::{AdmmParams, InnerSolver};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

type CliResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(
    name = "lamino",
    version,
    about = "Laminography reconstruction on any GPU"
)]
struct Cli {
    /// Adapter to run on: an index from `lamino devices`, or "best" (hardware GPUs first).
    #[arg(long, global = true, default_value = "best")]
    device: DeviceSelection,
    /// Accept a software adapter (lavapipe, WARP) when no hardware GPU exists. Also set by
    /// LAMINO_ALLOW_SOFTWARE_GPU=1. Meant for tests, CI and batch runs: it is slow.
    #[arg(long, global = true)]
    allow_software_gpu: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every GPU adapter with its index, type and key limits.
    Devices {
        /// One JSON object per adapter.
        #[arg(long)]
        json: bool,
    },
    /// Apply one operator to an array file.
    Apply {
        #[command(subcommand)]
        op: ApplyOp,
    },
    /// Print benchmark figures.
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// Reconstruct a volume with ADMM-TV. INPUT: a DXchange `.h5` scan (normalised with its
    /// flats and darks, -log), or `.npy` line integrals (ntheta, deth, detw) with `--geometry`.
    /// Writes DIR/recon.tif, DIR/report.json and DIR/preview_*.png.
    Reconstruct(ReconstructArgs),
    /// Compare a volume with the truth: prints {"rel_l2", "psnr", "ssim"} as JSON.
    Score {
        /// The reconstruction (`.tif` or `.npy`).
        rec: PathBuf,
        /// The ground truth (`.tif`, `.npy`, or a simulated `.h5` scan with /truth/volume).
        truth: PathBuf,
    },
    /// The built-in example: simulate a chip (a layered circuit slab) with Poisson noise,
    /// reconstruct it with the default parameters, write previews, the report and the score.
    Demo {
        /// Volume side (default 128 on a hardware GPU, 64 on a software adapter).
        #[arg(long)]
        size: Option<usize>,
        /// Output directory.
        #[arg(long, default_value = "lamino-demo")]
        out: PathBuf,
    },
    /// Check this device: GPU FFTs against an f64 CPU reference on fixed signals (1D smooth and
    /// prime lengths, 2D, 3D), with the errors against the accuracy bound.
    Selftest,
    /// Simulate a scan of a preset phantom (exact analytic projections, optional Poisson noise)
    /// and write it as DXchange HDF5 with the ground truth in /truth/volume.
    Simulate(SimulateArgs),
    /// BaSiC flat-field / dark-field estimation and correction.
    Flatfield {
        #[command(subcommand)]
        op: FlatfieldOp,
    },
}

#[derive(Args)]
struct SimulateArgs {
    /// shepp (3D modified Shepp-Logan), chip (layered circuit slab) or blobs (Gaussians).
    #[arg(long)]
    phantom: PhantomKind,
    /// Volume side n (n^3 voxels, n x n detector); even.
    #[arg(long)]
    size: usize,
    /// Projection angles, equispaced over [0, 360) degrees.
    #[arg(long)]
    angles: usize,
    /// Laminographic tilt T in degrees: phi = 90 + T, so 0 is plain tomography.
    #[arg(long, allow_hyphen_values = true)]
    tilt_deg: f64,
    /// Incident photons per pixel: Poisson-noisy counts with flats = I0. Without it the
    /// intensities are noiseless, exp(-P), with flats = 1.
    #[arg(long)]
    photons: Option<f64>,
    /// Seed of the Poisson noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// DXchange HDF5 output.
    #[arg(long)]
    out: PathBuf,
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

#[derive(Subcommand)]
enum ApplyOp {
    /// FFT of the last K axes of a complex64 (or float32) .npy array; writes complex64 .npy.
    Fft {
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        output: PathBuf,
        /// Inverse transform (e^{+}) instead of forward (e^{-}).
        #[arg(long)]
        inverse: bool,
        /// Transform the last K axes (default: all).
        #[arg(long)]
        axes: Option<usize>,
        /// Multiply by 1/N (N = product of the transformed lengths); default: unnormalised.
        #[arg(long)]
        normalize: bool,
    },
    /// The laminography projector L: volume (n0, n1, n2) -> data (ntheta, deth, detw).
    Forward(OperatorArgs),
    /// Its adjoint L*: data (ntheta, deth, detw) -> volume (n0, n1, n2).
    Adjoint(OperatorArgs),
    /// Stage U1 alone: volume (n0, n1, n2) -> spectrum (deth, n1, n2).
    Usfft1d(OperatorArgs),
    /// Stage U2 alone: spectrum (deth, n1, n2) -> Fourier-domain data (ntheta, deth, detw).
    Usfft2d(OperatorArgs),
}

#[derive(Args)]
struct ReconstructArgs {
    /// Projections: a DXchange `.h5` scan, or `.npy` line integrals -ln(I/I0) in voxel units,
    /// shape (ntheta, deth, detw).
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
    /// Outer ADMM iterations (default 33).
    #[arg(long)]
    iterations: Option<usize>,
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
    /// Refuse up front a reconstruction that needs more device memory than this (MiB).
    #[arg(long)]
    max_device_memory: Option<u64>,
    #[command(flatten)]
    memo: MemoArgs,
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

#[derive(Args)]
struct OperatorArgs {
    /// Geometry JSON: n0, n1, n2, deth, detw, theta (radians), phi (radians), optional eps.
    #[arg(long)]
    geometry: PathBuf,
    /// complex64 or float32 .npy array of the shape the operator reads.
    #[arg(long)]
    input: PathBuf,
    /// complex64 .npy output.
    #[arg(long)]
    output: PathBuf,
}

#[derive(Subcommand)]
enum FlatfieldOp {
    /// Estimate flat-field, dark-field and baseline from a stack (multi-page TIFF or .npy, u8,
    /// u16 or f32) and write them to a directory (.npy, .tif, PNG previews, report.json).
    Fit {
        stack: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        params: FitArgs,
    },
    /// Correct a stack with fitted fields: (I - D) / max(S, flat_min), written as float32 to
    /// DIR/corrected.npy (or .tif for TIFF input), streamed in batches.
    Apply {
        stack: PathBuf,
        #[arg(long)]
        fields: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// Lower clamp of the flat-field divisor (default 0.1: at most 10x amplification).
        #[arg(long)]
        flat_min: Option<f32>,
        /// Keep negative corrected values instead of clipping them at 0.
        #[arg(long)]
        keep_negative: bool,
    },
}

/// Fit parameters; every one defaults to the quality-first value of `BasicParams::default()`
/// and any change is echoed.
#[derive(clap::Args)]
struct FitArgs {
    /// Start from KINTSUGI's configuration (pixel sorting on) to reproduce its results.
    #[arg(long)]
    kintsugi_compat: bool,
    /// Do not estimate the dark-field.
    #[arg(long)]
    no_darkfield: bool,
    #[arg(long)]
    max_iterations: Option<usize>,
    #[arg(long)]
    optimization_tolerance: Option<f64>,
    #[arg(long)]
    max_reweight_iterations: Option<usize>,
    #[arg(long)]
    reweighting_tolerance: Option<f64>,
    #[arg(long)]
    working_size: Option<usize>,
    #[arg(long)]
    epsilon: Option<f64>,
    /// λ_F (default: automatic from the mean image's DCT).
    #[arg(long)]
    lambda_flatfield: Option<f64>,
    /// λ_D (default: darkfield_ratio · λ_F).
    #[arg(long)]
    lambda_darkfield: Option<f64>,
    #[arg(long)]
    darkfield_ratio: Option<f64>,
    /// Sort each pixel's values along the image axis before fitting.
    #[arg(long)]
    sort_intensity: bool,
}

impl FitArgs {
    fn params(&self) -> lamino::flatfield::BasicParams {
        let mut p = if self.kintsugi_compat {
            lamino::flatfield::BasicParams::kintsugi_compat()
        } else {
            lamino::flatfield::BasicParams::default()
        };
        p.get_darkfield &= !self.no_darkfield;
        p.sort_intensity |= self.sort_intensity;
        p.max_iterations = self.max_iterations.unwrap_or(p.max_iterations);
        p.optimization_tolerance = self
            .optimization_tolerance
            .unwrap_or(p.optimization_tolerance);
        p.max_reweight_iterations = self
            .max_reweight_iterations
            .unwrap_or(p.max_reweight_iterations);
        p.reweighting_tolerance = self
            .reweighting_tolerance
            .unwrap_or(p.reweighting_tolerance);
        p.working_size = self.working_size.unwrap_or(p.working_size);
        p.epsilon = self.epsilon.unwrap_or(p.epsilon);
        p.lambda_flatfield = self.lambda_flatfield.or(p.lambda_flatfield);
        p.lambda_darkfield = self.lambda_darkfield.or(p.lambda_darkfield);
        p.darkfield_ratio = self.darkfield_ratio.unwrap_or(p.darkfield_ratio);
        p
    }
}

#[derive(Subcommand)]
enum BenchWhat {
    /// Batched FFTs against a copy kernel (bandwidth bound) and rustfft on all CPU cores, with
    /// each strategy that applies (`*` marks the one chosen automatically on this device).
    Fft {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Timed repeats per shape (the median is reported).
        #[arg(long, default_value_t = 5)]
        repeats: usize,
        /// Bytes each shape is batched up to.
        #[arg(long, default_value_t = 64 << 20)]
        bytes: u64,
    },
    /// Outer ADMM-TV iterations: time per iteration, operator share, device memory.
    Admm {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Volume side n (n^3 voxels, n x n detector, n angles by default).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Projection angles (default: the size).
        #[arg(long)]
        angles: Option<usize>,
        /// Timed outer iterations (the median is reported).
        #[arg(long, default_value_t = 3)]
        iterations: usize,
    },
    /// The memo policies' accuracy-time frontier: an exact reconstruction of a simulated chip,
    /// then memo off at the memo chunking, mlr:TAU for the paper's six TAU and certified:TOL
    /// for six TOL; one line per run, and a CSV and a PNG plot (with the paper's points) in OUT.
    Memo {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Volume side n (n^3 voxels, n x n detector, n angles).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Outer ADMM iterations of every run.
        #[arg(long, default_value_t = 12)]
        iterations: usize,
        /// Rows per memoized chunk.
        #[arg(long, default_value_t = MemoOptions::DEFAULT.chunk_rows)]
        chunk: usize,
        /// Use the reference's inner solver (Dai-Yuan, fixed step, gradient recomputed from u)
        /// with this step, instead of exact-step CG.
        #[arg(long)]
        dai_yuan_step: Option<f64>,
        /// Where the CSV and PNG go.
        #[arg(long, default_value = "lamino-bench-memo")]
        out: PathBuf,
    },
    /// L and L* per stage, against the f32 CPU implementation on all cores.
    Operator {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Volume side n (n^3 voxels, n x n detector).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Projection angles (default: the size).
        #[arg(long)]
        angles: Option<usize>,
        /// Timed repeats (the median is reported).
        #[arg(long, default_value_t = 5)]
        repeats: usize,
    },
    /// BaSiC fit time (100 and 1000 images of 128x128, 100 of 2048x2048 resampled to the
    /// working grid) and transform throughput at 2048x2048, each against the f64 CPU oracle.
    Flatfield {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Skip the f64 oracle for the 1000-image fit (it takes minutes on a laptop).
        #[arg(long)]
        no_slow_oracle: bool,
    },
}

fn context(cli: &Cli) -> Result<GpuContext, lamino::GpuError> {
    let ctx = GpuContext::new(&DeviceOptions::new(cli.device, cli.allow_software_gpu))?;
    let info = ctx.info();
    if info.software {
        eprintln!("note: running on the software adapter {info} (opted in); expect it to be slow");
    }
    Ok(ctx)
}

fn devices(json: bool) -> CliResult {
    let adapters = list_adapters();
    if adapters.is_empty() {
        println!("no GPU adapters found (is a Vulkan, Metal or DX12 driver installed?)");
    }
    for a in adapters {
        if json {
            println!("{}", serde_json::to_string(&a)?);
        } else {
            println!(
                "[{}] {}\n    backend {}, type {}{}, driver {} {}\n    max buffer {} MiB, max storage binding {} MiB, workgroup memory {} KiB, {} invocations/workgroup, timestamps {}",
                a.index,
                a.name,
                a.backend,
                a.device_type,
                if a.software { " (software: needs --allow-software-gpu)" } else { "" },
                a.driver,
                a.driver_info,
                a.max_buffer_bytes >> 20,
                a.max_storage_binding_bytes >> 20,
                a.max_workgroup_storage_bytes >> 10,
                a.max_invocations_per_workgroup,
                a.timestamps
            );
        }
    }
    Ok(())
}

fn apply_fft(
    cli: &Cli,
    input: &Path,
    output: &Path,
    inverse: bool,
    axes: Option<usize>,
    normalize: bool,
) -> CliResult {
    let array = read_complex_npy(input)?;
    let ndim = array.shape.len();
    if ndim == 0 {
        return Err(format!(
            "{} holds a 0-dimensional array: nothing to transform",
            input.display()
        )
        .into());
    }
    let axes = axes.unwrap_or(ndim);
    if axes == 0 || axes > ndim {
        return Err(format!(
            "--axes {axes}: the array has {ndim} axes (shape {:?})",
            array.shape
        )
        .into());
    }
    let ctx = context(cli)?;
    let data = ctx.upload("apply fft data", &array.data)?;
    let direction = if inverse {
        Direction::Inverse
    } else {
        Direction::Forward
    };
    let norm = if normalize {
        Normalization::ByLength
    } else {
        Normalization::None
    };
    FftPlan::new(&ctx, &array.shape, axes, direction, norm, &data)?.execute(&ctx)?;
    let out = ctx.read(&data, 0, array.data.len())?;
    write_complex_npy(
        output,
        &ComplexArray {
            shape: array.shape,
            data: out,
        },
    )?;
    Ok(())
}

fn apply_operator(cli: &Cli, what: Apply, args: &OperatorArgs) -> CliResult {
    let geometry = Geometry::read_json(&args.geometry)?;
    let input = read_complex_npy(&args.input)?;
    let expected = what.spaces().0.shape(&geometry);
    if input.shape != expected {
        return Err(format!(
            "{} has shape {:?}, but {what:?} with this geometry reads shape {expected:?}",
            args.input.display(),
            input.shape
        )
        .into());
    }
    let ctx = context(cli)?;
    let op = LaminoOperator::new(&ctx, &geometry, &OperatorOptions::default())?;
    let data = op.apply_host(&ctx, what, &input.shape, &input.data)?;
    let shape = what.spaces().1.shape(&geometry);
    write_complex_npy(&args.output, &ComplexArray { shape, data })?;
    Ok(())
}

fn bench_operator(
    cli: &Cli,
    json: bool,
    size: usize,
    angles: Option<usize>,
    repeats: usize,
) -> CliResult {
    let ctx = context(cli)?;
    for r in lamino::bench::bench_operator(&ctx, size, angles.unwrap_or(size), repeats.max(1))? {
        if json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "{:<2} n={} angles={}: {:.2} ms (U1 {:.2}, U2 {:.2}, F {:.2}), U2 {:.3e} points/s, CPU {:.2} ms ({:.2}x) [{}]",
                r.operator, r.size, r.angles, r.ms, r.ms_u1, r.ms_u2, r.ms_f, r.u2_points_per_s, r.cpu_ms, r.speedup_vs_cpu, r.timing
            );
        }
    }
    Ok(())
}

fn solver_params(args: &ReconstructArgs) -> AdmmParams {
    let mut p = AdmmParams::default();
    if let Some(v) = args.iterations {
        p.outer_iterations = v;
    }
    if let Some(v) = args.inner {
        p.inner_iterations = v;
    }
    if let Some(v) = args.alpha {
        p.alpha = v;
    }
    if let Some(v) = args.rho0 {
        p.rho0 = v;
    }
    if let Some(step) = args.dai_yuan_step {
        p.inner = InnerSolver::DaiYuan { step };
    }
    p
}

fn load_projections(args: &ReconstructArgs) -> Result<Projections, Box<dyn std::error::Error>> {
    let ext = args
        .input
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    if args.flatfield.is_some() && !matches!(ext.as_str(), "tif" | "tiff") {
        return Err(format!(
            "--flatfield applies to TIFF intensity stacks; {} holds line integrals or its own \
             white fields",
            args.input.display()
        )
        .into());
    }
    match ext.as_str() {
        "npy" => {
            let path = args
                .geometry
                .as_ref()
                .ok_or("`.npy` projections need --geometry G.json")?;
            let geometry = Geometry::read_json(path)?;
            let array = read_complex_npy(&args.input)?;
            let expected = vec![geometry.ntheta(), geometry.deth, geometry.detw];
            if array.shape != expected {
                return Err(format!(
                    "{} has shape {:?}, but the geometry needs (ntheta, deth, detw) = {expected:?}",
                    args.input.display(),
                    array.shape
                )
                .into());
            }
            Ok(Projections::new(
                geometry,
                array.data.iter().map(|c| c.re).collect(),
            )?)
        }
        "h5" | "hdf5" => {
            let scan = read_dxchange(&args.input)?;
            projections_from_scan(&args.input, scan, args.tilt_deg, args.quiet)
        }
        "tif" | "tiff" => projections_from_tiff(args),
        other => Err(format!(
            "{}: unsupported projection format {other:?} (expected .h5 or .npy)",
            args.input.display()
        )
        .into()),
    }
}

fn read_intensity_stack(path: &Path) -> Result<Stack, Box<dyn std::error::Error>> {
    let stack = lamino::flatfield::io::read_stack(path)?;
    let values = (0..stack.count())
        .flat_map(|i| stack.image_f32(i))
        .collect();
    Ok(Stack {
        shape: [stack.count(), stack.height(), stack.width()],
        values,
    })
}

/// Line integrals from a multi-page TIFF of intensities, with angles from a text file and the
/// shading from white and dark fields.
fn projections_from_tiff(
    args: &ReconstructArgs,
) -> Result<Projections, Box<dyn std::error::Error>> {
    let angles_path = args
        .angles
        .as_ref()
        .ok_or("a TIFF stack needs --angles FILE (degrees, one per line)")?;
    let text = std::fs::read_to_string(angles_path)
        .map_err(|e| format!("{}: {e}", angles_path.display()))?;
    let theta = text
        .split_whitespace()
        .map(|t| {
            t.parse::<f64>()
                .map(f64::to_radians)
                .map_err(|_| format!("{}: {t:?} is not an angle", angles_path.display()))
        })
        .collect::<Result<Vec<f64>, String>>()?;
    let tilt = args.tilt_deg.ok_or("a TIFF stack needs --tilt-deg T")?;
    let data = read_intensity_stack(&args.input)?;
    let [count, deth, detw] = data.shape;
    if theta.len() != count {
        return Err(format!(
            "{} lists {} angles for {count} projections in {}",
            angles_path.display(),
            theta.len(),
            args.input.display()
        )
        .into());
    }
    let (projections, clamped) = match (&args.flats, args.flatfield) {
        (Some(flats), _) => {
            let flats = read_intensity_stack(flats)?;
            let darks = match &args.darks {
                Some(d) => read_intensity_stack(d)?,
                None => Stack {
                    shape: [1, deth, detw],
                    values: vec![0.0; deth * detw],
                },
            };
            let normalized = normalize(&data, &flats, &darks)?;
            (normalized.projections.values, normalized.clamped)
        }
        (None, Some(method)) => {
            if matches!(method, OpenBeamMethod::Basic) {
                eprintln!(
                    "note: --flatfield basic estimates the open beam with the envelope method: \
                     BaSiC would absorb a sample that is always in view into the flat-field"
                );
            }
            if args.darks.is_some() {
                return Err("--darks needs --flats: with --flatfield envelope, subtract the dark field from the projections first"
                    .into());
            }
            let beam = lamino::flatfield::estimate_open_beam(&data.values, count, deth, detw)?;
            if !args.quiet {
                eprintln!(
                    "open beam estimated from the projections: a smooth surface on {:.0} % of the \
                     detector (residual {:.2e} in ln I)",
                    100.0 * beam.support_fraction,
                    beam.residual_std
                );
                for w in &beam.warnings {
                    eprintln!("warning: {w}");
                }
            }
            beam.line_integrals(&data.values)
        }
        (None, None) => {
            return Err("a TIFF intensity stack needs --flats (and --darks), or --flatfield envelope to estimate the open beam from the projections"
                .into())
        }
    };
    if clamped > 0 && !args.quiet {
        eprintln!(
            "warning: {clamped} pixels were clamped to ratio {RATIO_FLOOR:e} (dead pixels or wrong flats?)"
        );
    }
    let geometry = Geometry {
        n0: deth,
        n1: detw,
        n2: detw,
        deth,
        detw,
        theta,
        phi: (90.0 + tilt).to_radians(),
        eps: lamino::operator::DEFAULT_EPS,
    };
    Ok(Projections::new(geometry, projections)?)
}

/// Line integrals from a DXchange scan: flat/dark normalisation and -log; the volume is
/// (deth, detw, detw) as in the reference.
fn projections_from_scan(
    path: &Path,
    scan: Scan,
    tilt_deg: Option<f64>,
    quiet: bool,
) -> Result<Projections, Box<dyn std::error::Error>> {
    let phi = match (tilt_deg, scan.phi) {
        (Some(t), _) => (90.0 + t).to_radians(),
        (None, Some(phi)) => phi,
        (None, None) => {
            return Err(format!(
                "{} records no tilt (/lamino/phi_deg): pass --tilt-deg",
                path.display()
            )
            .into())
        }
    };
    let normalized = normalize(&scan.data, &scan.flats, &scan.darks)?;
    if normalized.clamped > 0 && !quiet {
        eprintln!(
            "warning: {} pixels had intensity <= dark or >= flat and were clamped to ratio {RATIO_FLOOR:e} \
             (dead pixels or wrong flats?)",
            normalized.clamped
        );
    }
    let [_, deth, detw] = scan.data.shape;
    let geometry = Geometry {
        n0: deth,
        n1: detw,
        n2: detw,
        deth,
        detw,
        theta: scan.theta,
        phi,
        eps: lamino::operator::DEFAULT_EPS,
    };
    Ok(Projections::new(geometry, normalized.projections.values)?)
}

struct RunOptions {
    memo: MemoOptions,
    budget_mib: Option<u64>,
    pad: bool,
    checkpoint_every: Option<usize>,
    resume: bool,
    quiet: bool,
}

/// Reconstructs with a progress bar and Ctrl-C handling, and writes the outputs to `out`.
fn run_reconstruction(
    ctx: &GpuContext,
    projections: &Projections,
    params: AdmmParams,
    out: &Path,
    o: &RunOptions,
) -> Result<lamino::recon::Reconstruction, Box<dyn std::error::Error>> {
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
    let bar = if o.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(params.outer_iterations as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} outer iterations, ETA {eta} {msg}",
        )
        .expect("a valid template"),
    );
    let mut builder = Reconstructor::new(ctx)
        .params(params)
        .memo(o.memo)
        .lateral_padding(if o.pad { g.detw / 4 } else { 0 })
        .checkpoint_every(checkpoint.clone(), o.checkpoint_every.unwrap_or(usize::MAX))
        .cancel_flag(cancel)
        .on_progress(|p| {
            bar.set_position(p.iteration as u64 + 1);
            bar.set_message(format!(
                "|Lu-d|^2 {:.4e}, rho {}",
                p.report.data_term, p.report.rho
            ));
        });
    if o.resume {
        builder = builder.resume_from(checkpoint.clone());
    }
    if let Some(mib) = o.budget_mib {
        builder = builder.device_memory_budget(mib << 20);
    }
    let result = builder.run(projections)?;
    bar.finish_and_clear();
    if !result.completed {
        eprintln!(
            "stopped after iteration {}: the state is in {}; rerun with --resume to continue",
            result.reports.last().map_or(0, |r| r.iteration + 1),
            checkpoint.display()
        );
        return Err("interrupted".into());
    }
    for path in write_outputs(out, &result)? {
        if !o.quiet {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(result)
}

fn demo(cli: &Cli, size: Option<usize>, out: &Path) -> CliResult {
    let ctx = context(cli)?;
    // 128^3 on a GPU; a software adapter is one to two orders of magnitude slower, so the same
    // example at 64^3 keeps its run to minutes there. The parameters are the defaults either way.
    let n = size.unwrap_or(if ctx.info().software { 64 } else { 128 });
    let start = std::time::Instant::now();
    let (_, scan, _) = simulated_scan(PhantomKind::Chip, n, n, 30.0, Some(1e5), 0)?;
    std::fs::create_dir_all(out)?;
    let scan_path = out.join("scan.h5");
    write_dxchange(&scan_path, &scan)?;
    eprintln!(
        "simulated a {n}^3 chip, {n} angles, 30 deg tilt, 1e5 photons: {}",
        scan_path.display()
    );
    let truth = scan
        .truth
        .clone()
        .ok_or("the simulated scan has no truth")?;
    let projections = projections_from_scan(&scan_path, scan, None, false)?;
    let options = RunOptions {
        memo: MemoOptions::default(),
        budget_mib: None,
        pad: false,
        checkpoint_every: None,
        resume: false,
        quiet: false,
    };
    let result = run_reconstruction(&ctx, &projections, AdmmParams::default(), out, &options)?;
    let score = lamino::metrics::score(&result.volume, &truth.values, truth.shape);
    println!(
        "{}",
        serde_json::json!({
            "size": n,
            "score": score,
            "reconstruction_s": result.setup_s + result.iterations_s,
            "total_s": start.elapsed().as_secs_f64(),
            "device": result.device,
            "out": out.display().to_string(),
        })
    );
    Ok(())
}

fn reconstruct(cli: &Cli, args: &ReconstructArgs) -> CliResult {
    let projections = load_projections(args)?;
    let params = solver_params(args);
    let ctx = context(cli)?;
    let options = RunOptions {
        memo: args.memo.options(),
        budget_mib: args.max_device_memory,
        pad: args.pad,
        checkpoint_every: args.checkpoint_every,
        resume: args.resume,
        quiet: args.quiet,
    };
    run_reconstruction(&ctx, &projections, params, &args.out, &options)?;
    Ok(())
}

fn read_volume(path: &Path) -> Result<Stack, Box<dyn std::error::Error>> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "tif" | "tiff" => Ok(read_tiff_volume(path)?),
        "h5" | "hdf5" => read_dxchange(path)?
            .truth
            .ok_or_else(|| format!("{} has no /truth/volume", path.display()).into()),
        "npy" => {
            let a = read_complex_npy(path)?;
            let shape: [usize; 3] = a.shape.clone().try_into().map_err(|_| {
                format!(
                    "{} is not a 3D volume (shape {:?})",
                    path.display(),
                    a.shape
                )
            })?;
            Ok(Stack {
                shape,
                values: a.data.iter().map(|c| c.re).collect(),
            })
        }
        other => Err(format!(
            "{}: unsupported volume format {other:?} (expected .tif or .npy)",
            path.display()
        )
        .into()),
    }
}

fn score(rec: &Path, truth: &Path) -> CliResult {
    let (r, t) = (read_volume(rec)?, read_volume(truth)?);
    if r.shape != t.shape {
        return Err(format!(
            "{} has shape {:?} but {} has {:?}",
            rec.display(),
            r.shape,
            truth.display(),
            t.shape
        )
        .into());
    }
    println!(
        "{}",
        serde_json::to_string(&lamino::metrics::score(&r.values, &t.values, r.shape))?
    );
    Ok(())
}

fn bench_admm(
    cli: &Cli,
    json: bool,
    size: usize,
    angles: Option<usize>,
    iterations: usize,
) -> CliResult {
    let ctx = context(cli)?;
    let r = lamino::bench::bench_admm(&ctx, size, angles.unwrap_or(size), iterations)?;
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "n={} angles={}: {:.1} ms per outer iteration ({} inner): operator {:.1} ms, vectors and sync {:.1} ms; device memory {:.1} MiB",
            r.size,
            r.angles,
            r.ms_per_iteration,
            r.inner_iterations,
            r.ms_operator,
            r.ms_vector_and_sync,
            r.device_bytes as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

fn bench_memo(
    cli: &Cli,
    json: bool,
    (size, iterations, chunk): (usize, usize, usize),
    dai_yuan_step: Option<f64>,
    out: &Path,
) -> CliResult {
    use lamino::memo::frontier::{run_frontier, write_frontier, FrontierConfig};
    if iterations < 10 {
        return Err("the frontier needs at least 10 outer iterations per run".into());
    }
    let ctx = context(cli)?;
    let mut params = AdmmParams {
        outer_iterations: iterations,
        ..AdmmParams::default()
    };
    if let Some(step) = dai_yuan_step {
        params.inner = InnerSolver::DaiYuan { step };
    }
    let config = FrontierConfig {
        size,
        params,
        memo: MemoOptions {
            chunk_rows: chunk,
            ..MemoOptions::default()
        },
    };
    eprintln!(
        "memo frontier: {size}^3 chip, {iterations} outer iterations of {:?} per run, chunks of {chunk} rows, on {}",
        params.inner,
        ctx.info()
    );
    let points = run_frontier(&ctx, &config, |p| {
        if json {
            println!("{}", serde_json::to_string(p).expect("serialisable"));
        } else {
            println!(
                "{:<9} {:>7} accuracy {:.4}  time {:.3} of exact ({:.1} s)  hits {:.1}%  lookup median {:.4} ms p99 {:.4} ms  cache {:.1} MiB",
                p.policy,
                p.param.map_or(String::from("-"), |v| v.to_string()),
                p.accuracy,
                p.normalized_time,
                p.time_s,
                100.0 * p.hit_rate,
                p.lookup_ms_median,
                p.lookup_ms_p99,
                p.cache_bytes as f64 / (1 << 20) as f64
            );
        }
    })?;
    for path in write_frontier(out, &points)? {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn bench_fft(cli: &Cli, json: bool, repeats: usize, bytes: u64) -> CliResult {
    let ctx = context(cli)?;
    let copy = lamino::bench::copy_gbps(&ctx, bytes, repeats.max(1))?;
    for shape in lamino::bench::fft_bench_shapes() {
        for r in lamino::bench::bench_fft_shape(&ctx, &shape, bytes, repeats.max(1), copy)? {
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{:>16} x {:<6} {:<9}{} {:>9.3} ms {:>7.2} GB/s ({:.3} of copy {:.2} GB/s)  rustfft {:>9.3} ms  [{}]",
                    format!("{:?}", r.shape),
                    r.batch,
                    r.strategy,
                    if r.auto { "*" } else { " " },
                    r.ms,
                    r.gbps,
                    r.gbps / r.copy_gbps,
                    r.copy_gbps,
                    r.rustfft_ms,
                    r.timing
                );
            }
        }
    }
    Ok(())
}

/// A simulated scan: exact projections of a preset phantom, measured with optional Poisson noise.
fn simulated_scan(
    phantom: PhantomKind,
    size: usize,
    angles: usize,
    tilt_deg: f64,
    photons: Option<f64>,
    seed: u64,
) -> Result<(Geometry, Scan, Vec<f32>), Box<dyn std::error::Error>> {
    let phi = (90.0 + tilt_deg).to_radians();
    let g = Geometry::cube(size, angles, phi);
    g.validate()?;
    let phantom = phantom.build(size);
    let projections = project(&phantom, &g);
    let noise = match photons {
        Some(_) => Noise::Poisson { seed },
        None => Noise::None,
    };
    let frame = [1, g.deth, g.detw];
    let m = measure(&projections, g.deth * g.detw, photons.unwrap_or(1.0), noise)?;
    let scan = Scan {
        data: Stack {
            shape: [g.ntheta(), g.deth, g.detw],
            values: m.data,
        },
        flats: Stack {
            shape: frame,
            values: m.flat,
        },
        darks: Stack {
            shape: frame,
            values: m.dark,
        },
        theta: g.theta.clone(),
        phi: Some(phi),
        truth: Some(Stack {
            shape: [g.n0, g.n1, g.n2],
            values: rasterize(&phantom, &g),
        }),
    };
    Ok((g, scan, projections))
}

fn simulate(args: &SimulateArgs) -> CliResult {
    let (_, scan, projections) = simulated_scan(
        args.phantom,
        args.size,
        args.angles,
        args.tilt_deg,
        args.photons,
        args.seed,
    )?;
    write_dxchange(&args.out, &scan)?;
    let max_p = projections.iter().cloned().fold(0.0f32, f32::max);
    println!(
        "wrote {}: {} phantom, {}^3 voxels, {} angles, tilt {} deg (phi {} deg), max line integral {max_p:.3}{}",
        args.out.display(),
        args.phantom,
        args.size,
        args.angles,
        args.tilt_deg,
        90.0 + args.tilt_deg,
        match args.photons {
            Some(i0) => format!(", Poisson noise with {i0} photons (seed {})", args.seed),
            None => ", noiseless".into(),
        }
    );
    Ok(())
}

/// The accuracy bound of the FFT issue: 2e-6 + 5e-7 log10(N), doubled for prime factors above 13.
fn selftest(cli: &Cli) -> CliResult {
    let ctx = context(cli)?;
    println!("device: {}", ctx.info());
    let mut failures = 0;
    let cases: [&[usize]; 6] = [
        &[1000],
        &[1021],
        &[4096],
        &[100, 60],
        &[256, 256],
        &[64, 64, 64],
    ];
    for (i, shape) in cases.iter().enumerate() {
        let n: usize = shape.iter().product();
        let input = SplitMix64::new(i as u64).complex_uniform(n);
        for direction in [Direction::Forward, Direction::Inverse] {
            let data = ctx.upload("demo data", &input)?;
            let plan = FftPlan::new(
                &ctx,
                shape,
                shape.len(),
                direction,
                Normalization::None,
                &data,
            )?;
            plan.execute(&ctx)?;
            let gpu = ctx.read(&data, 0, n)?;
            let mut reference: Vec<num_complex::Complex<f64>> = input
                .iter()
                .map(|c| num_complex::Complex::new(c.re as f64, c.im as f64))
                .collect();
            fft_last_axes(&mut reference, shape, shape.len(), direction, 2);
            let err = max_relative_error(&gpu, &reference);
            let bound = lamino::fft::recipe::accuracy_bound(shape);
            let ok = err <= bound;
            failures += usize::from(!ok);
            println!(
                "{:>14} {:<8} rel. max error {:.2e}  bound {:.2e}  {}",
                format!("{shape:?}"),
                format!("{direction:?}"),
                err,
                bound,
                if ok { "ok" } else { "FAILED" }
            );
        }
    }
    if failures > 0 {
        return Err(format!("{failures} transforms exceeded the accuracy bound").into());
    }
    println!("all transforms within the accuracy bound");
    Ok(())
}

fn bar(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} {elapsed}")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

fn flatfield_fit(cli: &Cli, stack: &Path, out: &Path, args: &FitArgs) -> CliResult {
    use lamino::flatfield::{fit_prepared, io, prepare_stream};
    let params = args.params();
    params.validate()?;
    for change in params.changes_from_default() {
        eprintln!("parameter changed: {change}");
    }
    let mut reader = io::StackReader::open(stack)?;
    let (n, h, w) = (reader.count(), reader.height(), reader.width());
    eprintln!(
        "{}: {n} images of {h}x{w} ({:?})",
        stack.display(),
        reader.dtype()
    );
    let ctx = context(cli)?;
    let reading = bar(n as u64, "resampling");
    let prepared = prepare_stream(&mut reader, &params, |done| {
        reading.set_position(done as u64)
    })?;
    reading.finish();
    let solving = bar(params.max_reweight_iterations as u64, "solves");
    let fitted = fit_prepared(&ctx, &prepared, h, w, &params, |s| {
        solving.inc(1);
        // Printed through the bar so that it also reaches logs when stderr is not a terminal.
        solving.suspend(|| {
            eprintln!(
                "solve: {} iterations, residual {:.1e}, field change {:.1e}",
                s.iterations, s.residual, s.change
            )
        });
    })?;
    solving.finish_and_clear();
    io::write_fields(out, &fitted.fields, Some(&fitted.report))?;
    let r = &fitted.report;
    println!(
        "{} solves, reweighting {}converged (change {:.1e}); λ_F {:.4}, λ_D {:.4}; brightness spread {:.2}{}",
        r.solves.len(),
        if r.converged { "" } else { "NOT " },
        r.final_change,
        r.lambda_flatfield,
        r.lambda_darkfield,
        r.brightness_spread,
        if r.fallback { "; the flat-field was unusable and was replaced by ones (fallback)" } else { "" }
    );
    if !r.changed_parameters.is_empty() {
        println!("changed parameters: {}", r.changed_parameters.join(", "));
    }
    for w in &r.warnings {
        println!("warning: {w}");
    }
    println!("fields written to {}", out.display());
    Ok(())
}

fn flatfield_apply(
    cli: &Cli,
    stack: &Path,
    fields: &Path,
    out: &Path,
    flat_min: Option<f32>,
    keep_negative: bool,
) -> CliResult {
    use lamino::flatfield::{clamped_fraction, io, transform_stream, TransformParams};
    let defaults = TransformParams::default();
    let params = TransformParams {
        flat_min: flat_min.unwrap_or(defaults.flat_min),
        clip_negative: !keep_negative,
    };
    if params != defaults {
        eprintln!(
            "transform parameters changed: flat_min = {} (default {}), clip_negative = {} (default {})",
            params.flat_min, defaults.flat_min, params.clip_negative, defaults.clip_negative
        );
    }
    let fields = io::read_fields(fields)?;
    let mut reader = io::StackReader::open(stack)?;
    std::fs::create_dir_all(out)?;
    let output = out.join(if reader.is_tiff() {
        "corrected.tif"
    } else {
        "corrected.npy"
    });
    let ctx = context(cli)?;
    let progress = bar(reader.count() as u64, "correcting");
    transform_stream(&ctx, &mut reader, &fields, &params, &output, |done| {
        progress.set_position(done as u64)
    })?;
    progress.finish();
    println!(
        "{} images corrected to {} ({:.3} % of pixels at the flat_min clamp)",
        reader.count(),
        output.display(),
        100.0 * clamped_fraction(&fields, &params)
    );
    Ok(())
}

fn bench_flatfield(cli: &Cli, json: bool, no_slow_oracle: bool) -> CliResult {
    use lamino::flatfield::bench::{bench_fit, bench_transform};
    let ctx = context(cli)?;
    let runs: Vec<Box<dyn Fn() -> Result<_, lamino::flatfield::FlatfieldError>>> = vec![
        Box::new(|| bench_fit(&ctx, 100, 128, true)),
        Box::new(|| bench_fit(&ctx, 1000, 128, !no_slow_oracle)),
        Box::new(|| bench_fit(&ctx, 100, 2048, true)),
        Box::new(|| bench_transform(&ctx, 100, 2048)),
    ];
    for run in runs {
        let r = run()?;
        if json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "{:>9} {:>5} x {}x{}: GPU {:.2} s, CPU oracle {}{}  device {:.1} MiB, host peak {}",
                r.what,
                r.images,
                r.height,
                r.width,
                r.gpu_s,
                r.cpu_s
                    .map_or("-".into(), |c| format!("{c:.2} s (x{:.2})", c / r.gpu_s)),
                r.gpu_images_per_s.map_or(String::new(), |g| format!(
                    ", {g:.1} vs {:.1} images/s",
                    r.cpu_images_per_s.unwrap_or(0.0)
                )),
                r.device_bytes as f64 / (1 << 20) as f64,
                r.host_peak_bytes.map_or("-".into(), |b| format!(
                    "{:.0} MiB",
                    b as f64 / (1 << 20) as f64
                )),
            );
        }
    }
    Ok(())
}

fn run(cli: &Cli) -> CliResult {
    match &cli.command {
        Command::Devices { json } => devices(*json),
        Command::Apply { op } => match op {
            ApplyOp::Fft {
                input,
                output,
                inverse,
                axes,
                normalize,
            } => apply_fft(cli, input, output, *inverse, *axes, *normalize),
            ApplyOp::Forward(a) => apply_operator(cli, Apply::Forward, a),
            ApplyOp::Adjoint(a) => apply_operator(cli, Apply::Adjoint, a),
            ApplyOp::Usfft1d(a) => apply_operator(cli, Apply::Usfft1d, a),
            ApplyOp::Usfft2d(a) => apply_operator(cli, Apply::Usfft2d, a),
        },
        Command::Bench { what } => match what {
            BenchWhat::Fft {
                json,
                repeats,
                bytes,
            } => bench_fft(cli, *json, *repeats, *bytes),
            BenchWhat::Operator {
                json,
                size,
                angles,
                repeats,
            } => bench_operator(cli, *json, *size, *angles, *repeats),
            BenchWhat::Admm {
                json,
                size,
                angles,
                iterations,
            } => bench_admm(cli, *json, *size, *angles, *iterations),
            BenchWhat::Flatfield {
                json,
                no_slow_oracle,
            } => bench_flatfield(cli, *json, *no_slow_oracle),
            BenchWhat::Memo {
                json,
                size,
                iterations,
                chunk,
                dai_yuan_step,
                out,
            } => bench_memo(
                cli,
                *json,
                (*size, *iterations, *chunk),
                *dai_yuan_step,
                out,
            ),
        },
        Command::Flatfield { op } => match op {
            FlatfieldOp::Fit { stack, out, params } => flatfield_fit(cli, stack, out, params),
            FlatfieldOp::Apply {
                stack,
                fields,
                out,
                flat_min,
                keep_negative,
            } => flatfield_apply(cli, stack, fields, out, *flat_min, *keep_negative),
        },
        Command::Reconstruct(args) => reconstruct(cli, args),
        Command::Score { rec, truth } => score(rec, truth),
        Command::Demo { size, out } => demo(cli, *size, out),
        Command::Selftest => selftest(cli),
        Command::Simulate(args) => simulate(args),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
