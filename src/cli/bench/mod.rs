//! `lamino bench`: the arguments of the benchmark subcommands (FFT, operator, ADMM, convergence,
//! memo frontier, search, stripes, BaSiC, scale), converted into calls of the drivers in
//! [`crate::bench`], which measure and print; `options` bounds their numbers before any work.

mod options;

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::memo::{MemoOptions, MemoPolicy, MemoStages, AUTO_FLOOR, AUTO_SCALE};
use crate::params::{AdmmParams, InnerSolver};
use crate::preprocess::StripeRemoval;
use crate::simulate::PhantomKind;

use super::{Cli, CliResult};

#[derive(Subcommand)]
pub enum BenchWhat {
    /// Batched FFTs against a copy kernel (bandwidth bound) and rustfft on all CPU cores, with
    /// each strategy that applies (`*` marks the one chosen automatically on this device) and the
    /// planning time (tuning, or the tuning cache).
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
        /// How U2* weighs its points (auto, tabulated, evaluated).
        #[arg(long, value_parser = parse_adjoint_gridding, default_value = "auto")]
        adjoint_gridding: crate::operator::AdjointGridding,
    },
    /// The default solver and plain ADMM (the default before over-relaxation) against a long
    /// run: for each phantom, a noisy simulated scan (seed 0) reconstructed by plain ADMM for
    /// REFERENCE_ITERATIONS outer iterations; for each solver, where its convergence test first
    /// passes (iterations, operator applications, time), how far that volume is from the long
    /// run's and from the phantom, and what it took to first come within 0.5 % of the long run.
    Convergence {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Volume side n (n^3 voxels, n x n detector).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Projection angles (default: the size).
        #[arg(long)]
        angles: Option<usize>,
        /// Laminography tilt, degrees from the beam's normal.
        #[arg(long, default_value_t = 30.0)]
        tilt_deg: f64,
        /// Incident photons per detector pixel (Poisson noise).
        #[arg(long, default_value_t = 1e5)]
        photons: f64,
        #[arg(long, value_delimiter = ',', default_values_t = PhantomKind::ALL)]
        phantoms: Vec<PhantomKind>,
        /// Outer iterations of the long run the default is compared with.
        #[arg(long, default_value_t = 300)]
        reference_iterations: usize,
        /// Writes the convergence history of each run into this (existing) directory.
        #[arg(long)]
        plots: Option<std::path::PathBuf>,
    },
    /// Projection matching (`reconstruct --align`) on simulated scans of a sample that moved
    /// (Poisson noise and motion seeded 0, 3n/2 angles): the matched shifts against the truth
    /// beyond rigid motion and beyond the mean, the volume's rel. L2 without shifts, with the
    /// true ones, matched (as it is, and with the truth's rigid part), and the time of matching
    /// and reconstructing against a reconstruction without shifts.
    Align {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Volume sides (n^3 voxels, n x n detector, 3n/2 angles).
        #[arg(long, value_delimiter = ',', default_values_t = [32usize, 64])]
        sizes: Vec<usize>,
        /// Laminography tilt, degrees from the beam's normal (0: plain CT).
        #[arg(long, default_value_t = 30.0)]
        tilt_deg: f64,
        /// Incident photons per detector pixel (Poisson noise).
        #[arg(long, default_value_t = 1e5)]
        photons: f64,
        /// RMS of each projection's random shift in each direction, pixels (at most a quarter
        /// of the detector, with the drift).
        #[arg(long, default_value_t = 2.0)]
        jitter: f64,
        /// A drift in each direction growing linearly to this at the last projection, pixels.
        #[arg(long, default_value_t = 3.0)]
        drift: f64,
        #[arg(long, default_value_t = PhantomKind::Chip)]
        phantom: PhantomKind,
    },
    /// The memo policies' accuracy-time frontier: an exact reconstruction of a simulated chip,
    /// then memo off at the memo chunking, mlr:TAU for the paper's six TAU, certified:TOL for eight
    /// TOL and certified:auto for three scales; one line per run, and a CSV and a PNG plot (with
    /// the paper's points) in OUT. Then the comparison that decides the default: wall time to
    /// within TARGET (relative L2) of the converged result for exact-step CG, Dai-Yuan, and
    /// Dai-Yuan with each certified setting, on each phantom.
    Memo(MemoArgs),
    /// L and L* per stage (with the FFT share of each), against the f32 CPU implementation on
    /// all cores.
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
        /// Also time a volume of only z planes START:END of the cube (a thin slab, as
        /// `reconstruct --slab`), printed after the cube's.
        #[arg(long, value_parser = super::reconstruct::parse_span)]
        slab: Option<std::ops::Range<usize>>,
        /// Time only this gridding stage (u1, u1-adjoint, u2, u2-adjoint): no whole
        /// application, no CPU reference; a short run to profile or count instructions on.
        #[arg(long, value_parser = parse_gridding_stage, conflicts_with = "slab")]
        stage: Option<crate::bench::operator::GriddingStage>,
        /// With --stage u2-adjoint: how U2* weighs its points (auto, tabulated, evaluated).
        /// Without --stage, L* is timed both ways side by side.
        #[arg(long, value_parser = parse_adjoint_gridding, default_value = "auto", requires = "stage")]
        adjoint_gridding: crate::operator::AdjointGridding,
    },
    /// The solver's normal operator Re A*A by Toeplitz embedding (one padded FFT convolution)
    /// against A then A* (gridding): time of each, the median of alternated pairs' ratios, and
    /// the relative difference of the two results, per size.
    Normal {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Volume sides (n^3 voxels, n x n detector, n angles).
        #[arg(long = "size", value_delimiter = ',', default_values_t = [32usize, 64, 128])]
        sizes: Vec<usize>,
        /// Alternated pairs timed (the medians are reported).
        #[arg(long, default_value_t = 5)]
        repeats: usize,
    },
    /// The axis/tilt search (`lamino try`): one and several candidates on simulated chips of
    /// each size, the time per candidate and the interpolation rate, and what that gives for a
    /// 2048^2 x 1500-angle scan at binning 1, 2 and 4.
    Search {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Volume sides (n^3 voxels, n x n detector, 3n/2 angles).
        #[arg(long, value_delimiter = ',', default_values_t = [32usize, 64, 128])]
        sizes: Vec<usize>,
        /// Candidates per search.
        #[arg(long, default_value_t = 9)]
        candidates: usize,
        /// Timed repeats (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
    },
    /// Stripe removal on the CPU cores: seconds per sinogram for each method.
    Stripes {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Angles per sinogram.
        #[arg(long, default_value_t = 1500)]
        angles: usize,
        /// Detector width.
        #[arg(long, default_value_t = 2048)]
        width: usize,
        /// Sinograms (detector rows).
        #[arg(long, default_value_t = 4)]
        rows: usize,
        /// Only this method (`fw` or `sort`; default both).
        #[arg(long)]
        method: Option<String>,
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
    /// Volumes larger than the device: streaming at 1/8 of the in-core device need against
    /// in-core (same process), one iteration of a large volume within a device budget with
    /// scratch files, and the memory plans of 512^3-2048^3 at several device budgets.
    Scale(ScaleArgs),
    /// Every figure the project states, in one command for a GPU lent for a few minutes (about
    /// eight on an A100/H100-class GPU): the FFT against the copy bound, the operator at 128^3
    /// and 256^3, the ADMM iteration and the time to solution at 128^3, streaming of 512^3 and
    /// 1024^3 within a capped device budget, the memo frontier, and the device's limits and
    /// driver. Each step is `lamino bench WHAT --json` on the same device flags, its records in
    /// OUT/STEP.jsonl, its messages in OUT/STEP.log, all of them in OUT/suite.json; a step that
    /// fails or runs over its time is recorded and the suite goes on.
    Suite {
        /// Print suite.json's content instead of the table.
        #[arg(long)]
        json: bool,
        /// Where the records go (made if missing; the streaming step's scratch files too).
        #[arg(long, default_value = "lamino-bench-suite")]
        out: PathBuf,
        /// List the steps with their commands and run nothing.
        #[arg(long)]
        dry_run: bool,
        /// The steps at 16^3-32^3: each runs once on a software adapter in a minute or two (to
        /// know the suite works before a GPU is lent).
        #[arg(long)]
        small: bool,
        /// Seconds a step may run before it is stopped and recorded as timed out.
        #[arg(long, default_value_t = 240)]
        step_timeout_s: u64,
    },
    /// `lamino demo` with its defaults on this device (the size by the adapter, converged
    /// ADMM-TV), timed: prints the time and the score as JSON and, on a software adapter, the
    /// bound `demo` states; exits with an error when the run takes longer.
    Demo {
        /// Output directory of the demo run.
        #[arg(long, default_value = "lamino-bench-demo")]
        out: PathBuf,
    },
}

// The options of `bench memo` (no doc comment: the variant's is the subcommand's help).
#[derive(Args)]
pub struct MemoArgs {
    /// One JSON object per line (`section`: `frontier` or `comparison`).
    #[arg(long)]
    pub json: bool,
    /// Volume side n (n^3 voxels, n x n detector, n angles).
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Outer ADMM iterations of every frontier run.
    #[arg(long, default_value_t = 12)]
    pub iterations: usize,
    /// Rows per memoized chunk.
    #[arg(long, default_value_t = MemoOptions::DEFAULT.chunk_rows)]
    pub chunk: usize,
    /// The stages memoized in every run: `all` or a list (as `reconstruct --memo-stages`).
    #[arg(long, default_value_t = MemoStages::DEFAULT)]
    pub memo_stages: MemoStages,
    /// Timed runs per frontier setting (the fastest counts).
    #[arg(long, default_value_t = 2)]
    pub repeats: usize,
    /// Use the reference's inner solver (Dai-Yuan, fixed step, gradient recomputed from u)
    /// with this step in the frontier, instead of exact-step CG.
    #[arg(long)]
    pub dai_yuan_step: Option<f64>,
    /// Stream every frontier run (the exact one included) through a device budget of 1/F of
    /// its in-core need, the memo's device cache scaled alike, the other arrays on the host.
    #[arg(long, value_name = "F", value_parser = clap::value_parser!(u64).range(1..))]
    pub device_fraction: Option<u64>,
    /// Memo settings of the frontier (default: the paper's six TAU for mlr, eight TOL for
    /// certified, three scales for certified:auto).
    #[arg(long, value_delimiter = ',')]
    pub policies: Vec<MemoPolicy>,
    /// Where the CSV and PNG go.
    #[arg(long, default_value = "lamino-bench-memo")]
    pub out: PathBuf,
    /// Run only the frontier, or only the comparison.
    #[arg(long, value_enum, default_value_t = MemoParts::Both)]
    pub only: MemoParts,
    /// Phantoms of the comparison.
    #[arg(long, value_delimiter = ',', default_values_t = [PhantomKind::Chip, PhantomKind::Shepp])]
    pub phantoms: Vec<PhantomKind>,
    /// Relative L2 distance to the converged result that counts as reached.
    #[arg(long, default_value_t = 1e-3)]
    pub target: f64,
    /// Most outer iterations of the converged (reference) run.
    #[arg(long, default_value_t = 300)]
    pub reference_iterations: usize,
    /// Most outer iterations of every other comparison run.
    #[arg(long, default_value_t = 150)]
    pub max_iterations: usize,
    /// Dai-Yuan's step in the comparison.
    #[arg(long, default_value_t = 1.0)]
    pub compare_step: f64,
    /// Memo settings tried with Dai-Yuan in the comparison.
    #[arg(long, value_delimiter = ',', default_values_t = default_compared())]
    pub compare_memo: Vec<MemoPolicy>,
}

// The options of `bench scale`, its `--model` and `--distributed` groups apart.
#[derive(Args)]
pub struct ScaleArgs {
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Volume side of the streaming-vs-in-core run (n^3 voxels, n angles).
    #[arg(long, default_value_t = 128)]
    pub size: usize,
    /// Timed outer iterations of that run (the median is reported).
    #[arg(long, default_value_t = 2)]
    pub iterations: usize,
    /// Volume side of the large run (0: skip it).
    #[arg(long, default_value_t = 256)]
    pub large: usize,
    /// Device budget of the large run, MiB.
    #[arg(long = "large-device-mib", default_value = "256", value_parser = super::mib_as_bytes)]
    pub large_device_bytes: u64,
    /// Scratch directory of the large run (its host budget is a third of its arrays, so
    /// the rest goes there).
    #[arg(long, default_value = ".")]
    pub scratch: PathBuf,
    /// Volume sides to plan (no run).
    #[arg(long, value_delimiter = ',', default_values_t = [512usize, 1024, 2048])]
    pub plan_sizes: Vec<usize>,
    /// Device budgets to plan them for, GiB.
    #[arg(long = "plan-device-gib", value_delimiter = ',', default_value = "8,24,80", value_parser = super::gib_as_bytes)]
    pub plan_device_bytes: Vec<u64>,
    /// The host budget of those plans, GiB (a GPU node's memory); the rest is planned into
    /// scratch files (node-local NVMe), without checking space here.
    #[arg(long = "plan-host-gib", default_value = "1024", value_parser = super::gib_as_bytes)]
    pub plan_host_bytes: u64,
    /// Largest buffer of the GPU planned for and modelled, GiB: an array (a rank's share of
    /// it) beyond it streams. Default: the GPU's memory, each plan's device budget (wgpu on
    /// NVIDIA's Vulkan driver sets no lower buffer limit).
    #[arg(long = "target-max-buffer-gib", value_parser = super::gib_as_bytes)]
    pub target_max_buffer_bytes: Option<u64>,
    /// Largest storage binding of the GPU planned for and modelled, MiB (wgpu on NVIDIA's
    /// Vulkan driver: i32::MAX bytes, just under 2048 MiB), which the plans' chunk and staging
    /// buffers are sized by, whatever this device's limit is.
    #[arg(long = "target-max-binding", default_value = "2047", value_parser = super::mib_as_bytes)]
    pub target_max_binding_bytes: u64,
    #[command(flatten)]
    pub model: ScaleModelArgs,
    #[command(flatten)]
    pub distributed: ScaleDistributedArgs,
}

// `bench scale --model` and the cluster it models.
#[derive(Args)]
pub struct ScaleModelArgs {
    /// Instead of the runs and plans: the cost model of one outer iteration on K GPUs (one
    /// rank each) from an iteration measured on this device, for every size and K given.
    #[arg(long)]
    pub model: bool,
    /// Volume side of the iteration the model is measured on (n^3 voxels, n angles).
    #[arg(long, default_value_t = 64)]
    pub model_measure_size: usize,
    /// Volume sides to model (n angles each).
    #[arg(long, value_delimiter = ',', default_values_t = [1024usize, 2048])]
    pub model_sizes: Vec<usize>,
    /// Numbers of GPUs (ranks) to model.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4, 8, 16, 32, 64])]
    pub model_ranks: Vec<usize>,
    /// Memory of one GPU, GiB (mLR's nodes: A100 40 GB).
    #[arg(long = "model-device-gib", default_value = "40", value_parser = super::gib_as_bytes)]
    pub model_device_bytes: u64,
    /// Host memory of one rank, GiB (beyond it, node-local scratch).
    #[arg(long = "model-host-gib", default_value = "128", value_parser = super::gib_as_bytes)]
    pub model_host_bytes: u64,
    /// Copy bandwidth of one GPU, GB/s (read + write); 0: this device's, measured.
    #[arg(long, default_value_t = 0.0)]
    pub model_device_gbps: f64,
    /// Device time of an iteration in copies of the bytes it touches; 0: measured here (give
    /// a figure measured on the GPU modelled, `model-measurement` in the JSON output).
    #[arg(long, default_value_t = 0.0)]
    pub model_copy_equivalents: f64,
    /// Host <-> device bandwidth of one GPU, GB/s (PCIe 4.0 x16).
    #[arg(long, default_value_t = 25.0)]
    pub model_bus_gbps: f64,
    /// Network bandwidth of one node, GB/s (mLR's Slingshot-11, 200 Gb/s).
    #[arg(long, default_value_t = 25.0)]
    pub model_network_gbps: f64,
    /// GPUs (ranks) per node, sharing its network.
    #[arg(long, default_value_t = 4)]
    pub model_gpus_per_node: usize,
    /// Latency of one message, microseconds.
    #[arg(long, default_value_t = 5.0)]
    pub model_latency_us: f64,
}

// `bench scale --distributed` (a lamino built with the `mpi` feature).
#[derive(Args)]
pub struct ScaleDistributedArgs {
    /// Instead of the runs and plans: reconstruct one simulated scan as one process and as
    /// K MPI ranks (`mpirun -n K` on this machine) for each K given, and print the time of
    /// an outer iteration and the bytes each rank sent during it (a lamino built with the
    /// `mpi` feature).
    #[arg(long)]
    pub distributed: bool,
    /// Volume side of those runs (n^3 voxels, n angles).
    #[arg(long, default_value_t = 64)]
    pub distributed_size: usize,
    /// Numbers of ranks (1: one process, no MPI).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    pub distributed_ranks: Vec<usize>,
    /// Outer iterations of each run.
    #[arg(long, default_value_t = 4)]
    pub distributed_iterations: usize,
}

/// Which parts of `bench memo` run.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MemoParts {
    Both,
    Frontier,
    Comparison,
}

/// The value named `s` among `names` (a `value_parser` of the names' table), or the names.
pub(in crate::cli) fn parse_named<T: Copy>(
    s: &str,
    names: impl Iterator<Item = (&'static str, T)> + Clone,
    what: &str,
) -> Result<T, String> {
    names
        .clone()
        .find(|e| e.0 == s)
        .map(|e| e.1)
        .ok_or_else(|| {
            let names: Vec<_> = names.map(|e| e.0).collect();
            format!("unknown {what} {s:?}: one of {}", names.join(", "))
        })
}

fn parse_gridding_stage(s: &str) -> Result<crate::bench::operator::GriddingStage, String> {
    use crate::bench::operator::GriddingStage;
    parse_named(s, GriddingStage::ALL.iter().map(|e| (e.0, e.1)), "stage")
}

fn parse_adjoint_gridding(s: &str) -> Result<crate::operator::AdjointGridding, String> {
    parse_named(s, crate::operator::AdjointGridding::ALL.into_iter(), "way")
}

fn default_compared() -> Vec<MemoPolicy> {
    vec![
        MemoPolicy::CertifiedAuto {
            scale: AUTO_SCALE,
            floor: AUTO_FLOOR,
        },
        MemoPolicy::Certified { tol: 0.01 },
        MemoPolicy::Certified { tol: 0.003 },
    ]
}

pub fn run(cli: &Cli, what: &BenchWhat) -> CliResult {
    use crate::bench;
    options::check(what)?;
    match what {
        BenchWhat::Demo { out } => demo(cli, out)?,
        BenchWhat::Fft {
            json,
            repeats,
            bytes,
        } => bench::fft::print(&cli.context()?, *json, *repeats, *bytes)?,
        BenchWhat::Operator {
            json,
            size,
            angles,
            repeats,
            slab,
            stage: None,
            ..
        } => bench::operator::print(
            &cli.context()?,
            *json,
            *size,
            angles.unwrap_or(*size),
            *repeats,
            slab.clone(),
        )?,
        BenchWhat::Operator {
            json,
            size,
            angles,
            repeats,
            stage: Some(stage),
            adjoint_gridding,
            ..
        } => bench::operator::print_stage(
            &cli.context()?,
            *json,
            (*size, angles.unwrap_or(*size)),
            *repeats,
            *stage,
            *adjoint_gridding,
        )?,
        BenchWhat::Normal {
            json,
            sizes,
            repeats,
        } => bench::normal::print(&cli.context()?, *json, sizes, *repeats)?,
        BenchWhat::Admm {
            json,
            size,
            angles,
            iterations,
            adjoint_gridding,
        } => bench::admm::print(
            &cli.context()?,
            *json,
            (*size, angles.unwrap_or(*size)),
            *iterations,
            *adjoint_gridding,
        )?,
        BenchWhat::Flatfield {
            json,
            no_slow_oracle,
        } => bench::flatfield::print(&cli.context()?, *json, *no_slow_oracle)?,
        BenchWhat::Search {
            json,
            sizes,
            candidates,
            repeats,
        } => bench::search::print(&cli.context()?, *json, sizes, *candidates, *repeats)?,
        BenchWhat::Stripes {
            json,
            angles,
            width,
            rows,
            method,
        } => bench::stripes::print(*json, *angles, *width, *rows, &stripe_methods(method)?)?,
        BenchWhat::Scale(args) => scale(cli, args)?,
        BenchWhat::Convergence {
            json,
            size,
            angles,
            tilt_deg,
            photons,
            phantoms,
            reference_iterations,
            plots,
        } => bench::convergence::print(
            &cli.context()?,
            *json,
            (*size, angles.unwrap_or(*size), *tilt_deg, *photons),
            phantoms,
            *reference_iterations,
            plots.as_deref(),
        )?,
        BenchWhat::Memo(args) => memo(cli, args)?,
        BenchWhat::Align {
            json,
            sizes,
            tilt_deg,
            photons,
            jitter,
            drift,
            phantom,
        } => {
            let scans: Vec<_> = sizes
                .iter()
                .map(|&size| bench::align::MovedScan {
                    phantom: *phantom,
                    size,
                    angles: 3 * size / 2,
                    tilt_deg: *tilt_deg,
                    photons: *photons,
                    jitter_px: *jitter,
                    drift_px: *drift,
                })
                .collect();
            bench::align::print(&cli.context()?, *json, &scans)?
        }
        BenchWhat::Suite {
            json,
            out,
            dry_run,
            small,
            step_timeout_s,
        } => suite(cli, out, *dry_run, *small, *json, *step_timeout_s)?,
    }
    Ok(())
}

/// `bench suite`: its steps listed (`--dry-run`) or run.
fn suite(
    cli: &Cli,
    out: &std::path::Path,
    dry_run: bool,
    small: bool,
    json: bool,
    step_timeout_s: u64,
) -> CliResult {
    use crate::bench::suite::{run_suite, suite_steps, SuiteSizes};
    let sizes = match small {
        true => SuiteSizes::Small,
        false => SuiteSizes::Gpu,
    };
    let steps = suite_steps(sizes, out);
    if dry_run {
        let global = cli.global_args().join(" ");
        for step in &steps {
            match json {
                true => println!("{}", serde_json::to_string(step)?),
                false => println!(
                    "{}: {}\n    lamino {global} bench {} --json",
                    step.name,
                    step.measures,
                    step.args.join(" ")
                ),
            }
        }
        return Ok(());
    }
    let ctx = cli.context()?;
    run_suite(
        ctx,
        &cli.global_args(),
        steps,
        out,
        std::time::Duration::from_secs(step_timeout_s),
        json,
    )?;
    Ok(())
}

/// The methods `--method` names: `fw`, `sort`, or both when not given.
fn stripe_methods(method: &Option<String>) -> Result<Vec<StripeRemoval>, String> {
    Ok(match method.as_deref() {
        None => vec![StripeRemoval::FOURIER_WAVELET, StripeRemoval::SORTING],
        Some("fw") => vec![StripeRemoval::FOURIER_WAVELET],
        Some("sort") => vec![StripeRemoval::SORTING],
        Some(other) => return Err(format!("--method {other:?}: expected fw or sort")),
    })
}

/// `bench demo`: the demo's defaults, timed against the bound it states on a software adapter.
fn demo(cli: &Cli, out: &std::path::Path) -> CliResult {
    use super::demo::{run_demo, DemoArgs, SOFTWARE_BOUND_S};
    let summary = run_demo(cli, &DemoArgs::defaults(out.to_path_buf()))?;
    let total_s = summary["total_s"]
        .as_f64()
        .ok_or("the demo reported no time")?;
    let software = summary["software"] == true;
    let bound_s = software.then_some(SOFTWARE_BOUND_S);
    println!(
        "{}",
        serde_json::json!({
            "size": summary["size"],
            "device": summary["device"],
            "software": software,
            "iterations": summary["iterations"],
            "reconstruction_s": summary["reconstruction_s"],
            "total_s": total_s,
            "bound_s": bound_s,
            "rel_l2": summary["score"]["rel_l2"],
        })
    );
    match bound_s {
        Some(bound) if total_s > bound => Err(format!(
            "the demo took {total_s:.0} s on the software adapter, over the {bound:.0} s it states"
        )
        .into()),
        _ => Ok(()),
    }
}

/// `bench scale`: the distributed runs, the cost model, or the runs and the plans.
fn scale(cli: &Cli, args: &ScaleArgs) -> CliResult {
    use crate::bench::{scale, scale_model};
    if args.distributed.distributed {
        let d = &args.distributed;
        return Ok(crate::bench::scale_distributed::print(
            &cli.global_args(),
            args.json,
            d.distributed_size,
            &d.distributed_ranks,
            d.distributed_iterations,
        )?);
    }
    let m = &args.model;
    if m.model {
        let inputs = crate::plan::cluster_model::ClusterInputs {
            device_bytes: m.model_device_bytes,
            host_bytes: m.model_host_bytes,
            max_buffer_bytes: args.target_max_buffer_bytes.unwrap_or(m.model_device_bytes),
            device_gbps: m.model_device_gbps,
            bus_gbps: m.model_bus_gbps,
            network_gbps: m.model_network_gbps,
            gpus_per_node: m.model_gpus_per_node,
            latency_us: m.model_latency_us,
            copy_equivalents: m.model_copy_equivalents,
        };
        return Ok(scale_model::print(
            &cli.device_options()?,
            args.json,
            (m.model_measure_size, args.target_max_binding_bytes),
            inputs,
            (&m.model_sizes, &m.model_ranks),
        )?);
    }
    scale::print_runs(
        &cli.device_options()?,
        args.json,
        (args.size, args.iterations),
        (args.large, args.large_device_bytes, &args.scratch),
    )?;
    scale::print_plans(
        &cli.device_options()?,
        args.json,
        (
            &args.plan_sizes,
            &args.plan_device_bytes,
            args.plan_host_bytes,
        ),
        (args.target_max_binding_bytes, args.target_max_buffer_bytes),
    )?;
    Ok(())
}

/// `bench memo`: checks the arguments, then runs the frontier and the comparison (or one).
fn memo(cli: &Cli, args: &MemoArgs) -> CliResult {
    use crate::bench::memo::compare::CompareConfig;
    use crate::bench::memo::frontier::{swept_policies, FrontierConfig};
    if args.iterations < 10 {
        return Err("the frontier needs at least 10 outer iterations per run".into());
    }
    if !(args.target > 0.0 && args.target < 1.0)
        || args.reference_iterations == 0
        || args.max_iterations == 0
    {
        return Err(
            "--target must be in (0, 1), --reference-iterations and --max-iterations at least 1"
                .into(),
        );
    }
    let ctx = cli.context()?;
    let memo = MemoOptions {
        chunk_rows: args.chunk,
        stages: args.memo_stages,
        ..MemoOptions::default()
    };
    if args.only != MemoParts::Comparison {
        let mut params = AdmmParams::exactly(args.iterations);
        if let Some(step) = args.dai_yuan_step {
            params.inner = InnerSolver::DaiYuan { step };
        }
        let config = FrontierConfig {
            size: args.size,
            params,
            memo,
            policies: match args.policies.is_empty() {
                true => swept_policies(),
                false => args.policies.clone(),
            },
            repeats: args.repeats,
            device_fraction: args.device_fraction,
        };
        crate::bench::memo::print_frontier(&ctx, &config, args.json, &args.out)?;
    }
    if args.only != MemoParts::Frontier {
        let config = CompareConfig {
            size: args.size,
            phantoms: args.phantoms.clone(),
            target: args.target,
            reference_iterations: args.reference_iterations,
            max_iterations: args.max_iterations,
            dai_yuan_step: args.compare_step,
            certified: args.compare_memo.clone(),
            memo,
        };
        crate::bench::memo::print_comparison(&ctx, &config, args.json)?;
    }
    Ok(())
}
