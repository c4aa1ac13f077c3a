//! The `lamino` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use lamino::fft::{Direction, FftPlan, Normalization};
use lamino::gpu::{list_adapters, DeviceOptions, DeviceSelection, GpuContext};
use lamino::io::{read_complex_npy, write_complex_npy, ComplexArray};
use lamino::reference::{fft_last_axes, max_relative_error, SplitMix64};

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
    /// BaSiC flat-field / dark-field estimation and correction.
    Flatfield {
        #[command(subcommand)]
        op: FlatfieldOp,
    },
    /// The built-in example: check the GPU FFT against an f64 CPU reference on fixed signals
    /// (1D smooth and prime lengths, 2D, 3D) and print the errors against the accuracy bound.
    Demo,
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
    /// Batched FFTs against a copy kernel (bandwidth bound) and rustfft on all CPU cores.
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

fn bench_fft(cli: &Cli, json: bool, repeats: usize, bytes: u64) -> CliResult {
    let ctx = context(cli)?;
    let copy = lamino::bench::copy_gbps(&ctx, bytes, repeats.max(1))?;
    for shape in lamino::bench::fft_bench_shapes() {
        let r = lamino::bench::bench_fft_shape(&ctx, &shape, bytes, repeats.max(1), copy)?;
        if json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "{:>16} x {:<6} {:>9.3} ms {:>7.2} GB/s ({:.2} of copy {:.2} GB/s)  rustfft {:>9.3} ms  [{}]",
                format!("{:?}", r.shape),
                r.batch,
                r.ms,
                r.gbps,
                r.gbps / r.copy_gbps,
                r.copy_gbps,
                r.rustfft_ms,
                r.timing
            );
        }
    }
    Ok(())
}

/// The accuracy bound of the FFT issue: 2e-6 + 5e-7 log10(N), doubled for prime factors above 13.
fn demo(cli: &Cli) -> CliResult {
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
        Command::Apply {
            op:
                ApplyOp::Fft {
                    input,
                    output,
                    inverse,
                    axes,
                    normalize,
                },
        } => apply_fft(cli, input, output, *inverse, *axes, *normalize),
        Command::Bench {
            what:
                BenchWhat::Fft {
                    json,
                    repeats,
                    bytes,
                },
        } => bench_fft(cli, *json, *repeats, *bytes),
        Command::Bench {
            what:
                BenchWhat::Flatfield {
                    json,
                    no_slow_oracle,
                },
        } => bench_flatfield(cli, *json, *no_slow_oracle),
        Command::Flatfield {
            op: FlatfieldOp::Fit { stack, out, params },
        } => flatfield_fit(cli, stack, out, params),
        Command::Flatfield {
            op:
                FlatfieldOp::Apply {
                    stack,
                    fields,
                    out,
                    flat_min,
                    keep_negative,
                },
        } => flatfield_apply(cli, stack, fields, out, *flat_min, *keep_negative),
        Command::Demo => demo(cli),
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
