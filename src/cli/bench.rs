//! `lamino bench`: the user-facing figures (FFT, operator, ADMM, memo frontier, BaSiC).

use std::path::{Path, PathBuf};

use clap::{Subcommand, ValueEnum};

use lamino::memo::{MemoOptions, MemoPolicy, MemoStages, AUTO_FLOOR, AUTO_SCALE};
use lamino::params::AdmmParams;
use lamino::params::InnerSolver;
use lamino::simulate::PhantomKind;

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
    },
    /// The default stopping rule against a long run: for each phantom, a noisy simulated scan
    /// (seed 0) reconstructed for REFERENCE_ITERATIONS outer iterations, noting where the default
    /// convergence test first passes; prints how far that volume is from the long run's (the
    /// default is chosen so that this stays within 1 %) and both distances from the phantom.
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
    },
    /// The memo policies' accuracy-time frontier: an exact reconstruction of a simulated chip,
    /// then memo off at the memo chunking, mlr:TAU for the paper's six TAU, certified:TOL for eight
    /// TOL and certified:auto for three scales; one line per run, and a CSV and a PNG plot (with
    /// the paper's points) in OUT. Then the comparison that decides the default: wall time to
    /// within TARGET (relative L2) of the converged result for exact-step CG, Dai-Yuan, and
    /// Dai-Yuan with each certified setting, on each phantom.
    Memo {
        /// One JSON object per line (`section`: `frontier` or `comparison`).
        #[arg(long)]
        json: bool,
        /// Volume side n (n^3 voxels, n x n detector, n angles).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Outer ADMM iterations of every frontier run.
        #[arg(long, default_value_t = 12)]
        iterations: usize,
        /// Rows per memoized chunk.
        #[arg(long, default_value_t = MemoOptions::DEFAULT.chunk_rows)]
        chunk: usize,
        /// The stages memoized in every run: `all` or a list (as `reconstruct --memo-stages`).
        #[arg(long, default_value_t = MemoStages::DEFAULT)]
        memo_stages: MemoStages,
        /// Timed runs per frontier setting (the fastest counts).
        #[arg(long, default_value_t = 2)]
        repeats: usize,
        /// Use the reference's inner solver (Dai-Yuan, fixed step, gradient recomputed from u)
        /// with this step in the frontier, instead of exact-step CG.
        #[arg(long)]
        dai_yuan_step: Option<f64>,
        /// Stream every frontier run (the exact one included) through a device budget of 1/F of
        /// its in-core need, the memo's device cache scaled alike, the other arrays on the host.
        #[arg(long, value_name = "F", value_parser = clap::value_parser!(u64).range(1..))]
        device_fraction: Option<u64>,
        /// Memo settings of the frontier (default: the paper's six TAU for mlr, eight TOL for
        /// certified, three scales for certified:auto).
        #[arg(long, value_delimiter = ',')]
        policies: Vec<MemoPolicy>,
        /// Where the CSV and PNG go.
        #[arg(long, default_value = "lamino-bench-memo")]
        out: PathBuf,
        /// Run only the frontier, or only the comparison.
        #[arg(long, value_enum, default_value_t = MemoParts::Both)]
        only: MemoParts,
        /// Phantoms of the comparison.
        #[arg(long, value_delimiter = ',', default_values_t = [PhantomKind::Chip, PhantomKind::Shepp])]
        phantoms: Vec<PhantomKind>,
        /// Relative L2 distance to the converged result that counts as reached.
        #[arg(long, default_value_t = 1e-3)]
        target: f64,
        /// Most outer iterations of the converged (reference) run.
        #[arg(long, default_value_t = 300)]
        reference_iterations: usize,
        /// Most outer iterations of every other comparison run.
        #[arg(long, default_value_t = 150)]
        max_iterations: usize,
        /// Dai-Yuan's step in the comparison.
        #[arg(long, default_value_t = 1.0)]
        compare_step: f64,
        /// Memo settings tried with Dai-Yuan in the comparison.
        #[arg(long, value_delimiter = ',', default_values_t = default_compared())]
        compare_memo: Vec<MemoPolicy>,
    },
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
    Scale {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// Volume side of the streaming-vs-in-core run (n^3 voxels, n angles).
        #[arg(long, default_value_t = 128)]
        size: usize,
        /// Timed outer iterations of that run (the median is reported).
        #[arg(long, default_value_t = 2)]
        iterations: usize,
        /// Volume side of the large run (0: skip it).
        #[arg(long, default_value_t = 256)]
        large: usize,
        /// Device budget of the large run, MiB.
        #[arg(long = "large-device-mib", default_value = "256", value_parser = super::mib_as_bytes)]
        large_device_bytes: u64,
        /// Scratch directory of the large run (its host budget is a third of its arrays, so
        /// the rest goes there).
        #[arg(long, default_value = ".")]
        scratch: PathBuf,
        /// Volume sides to plan (no run).
        #[arg(long, value_delimiter = ',', default_values_t = [512usize, 1024, 2048])]
        plan_sizes: Vec<usize>,
        /// Device budgets to plan them for, GiB.
        #[arg(long = "plan-device-gib", value_delimiter = ',', default_value = "8,24,80", value_parser = super::gib_as_bytes)]
        plan_device_bytes: Vec<u64>,
        /// The host budget of those plans, GiB (a GPU node's memory); the rest is planned into
        /// scratch files (node-local NVMe), without checking space here.
        #[arg(long = "plan-host-gib", default_value = "1024", value_parser = super::gib_as_bytes)]
        plan_host_bytes: u64,
        /// Instead of the runs and plans: the cost model of one outer iteration on K GPUs (one
        /// rank each) from an iteration measured on this device, for every size and K given.
        #[arg(long)]
        model: bool,
        /// Volume side of the iteration the model is measured on (n^3 voxels, n angles).
        #[arg(long, default_value_t = 64)]
        model_measure_size: usize,
        /// Volume sides to model (n angles each).
        #[arg(long, value_delimiter = ',', default_values_t = [1024usize, 2048])]
        model_sizes: Vec<usize>,
        /// Numbers of GPUs (ranks) to model.
        #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4, 8, 16, 32, 64])]
        model_ranks: Vec<usize>,
        /// Memory of one GPU, GiB (mLR's nodes: A100 40 GB).
        #[arg(long = "model-device-gib", default_value = "40", value_parser = super::gib_as_bytes)]
        model_device_bytes: u64,
        /// Host memory of one rank, GiB (beyond it, node-local scratch).
        #[arg(long = "model-host-gib", default_value = "128", value_parser = super::gib_as_bytes)]
        model_host_bytes: u64,
        /// Copy bandwidth of one GPU, GB/s (read + write); 0: this device's, measured.
        #[arg(long, default_value_t = 0.0)]
        model_device_gbps: f64,
        /// Device time of an iteration in copies of the bytes it touches; 0: measured here (give
        /// a figure measured on the GPU modelled, `model-measurement` in the JSON output).
        #[arg(long, default_value_t = 0.0)]
        model_copy_equivalents: f64,
        /// Host <-> device bandwidth of one GPU, GB/s (PCIe 4.0 x16).
        #[arg(long, default_value_t = 25.0)]
        model_bus_gbps: f64,
        /// Network bandwidth of one node, GB/s (mLR's Slingshot-11, 200 Gb/s).
        #[arg(long, default_value_t = 25.0)]
        model_network_gbps: f64,
        /// GPUs (ranks) per node, sharing its network.
        #[arg(long, default_value_t = 4)]
        model_gpus_per_node: usize,
        /// Latency of one message, microseconds.
        #[arg(long, default_value_t = 5.0)]
        model_latency_us: f64,
        /// Instead of the runs and plans: reconstruct one simulated scan as one process and as
        /// K MPI ranks (`mpirun -n K` on this machine) for each K given, and print the time of
        /// an outer iteration and the bytes each rank sent during it.
        #[cfg(feature = "mpi")]
        #[arg(long)]
        distributed: bool,
        /// Volume side of those runs (n^3 voxels, n angles).
        #[cfg(feature = "mpi")]
        #[arg(long, default_value_t = 64)]
        distributed_size: usize,
        /// Numbers of ranks (1: one process, no MPI).
        #[cfg(feature = "mpi")]
        #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
        distributed_ranks: Vec<usize>,
        /// Outer iterations of each run.
        #[cfg(feature = "mpi")]
        #[arg(long, default_value_t = 4)]
        distributed_iterations: usize,
    },
}

pub fn run(cli: &Cli, what: &BenchWhat) -> CliResult {
    match what {
        BenchWhat::Fft {
            json,
            repeats,
            bytes,
        } => fft(cli, *json, *repeats, *bytes),
        BenchWhat::Operator {
            json,
            size,
            angles,
            repeats,
        } => operator(cli, *json, *size, *angles, *repeats),
        BenchWhat::Admm {
            json,
            size,
            angles,
            iterations,
        } => admm(cli, *json, *size, *angles, *iterations),
        BenchWhat::Flatfield {
            json,
            no_slow_oracle,
        } => flatfield(cli, *json, *no_slow_oracle),
        BenchWhat::Search {
            json,
            sizes,
            candidates,
            repeats,
        } => search(cli, *json, sizes, *candidates, *repeats),
        BenchWhat::Stripes {
            json,
            angles,
            width,
            rows,
            method,
        } => stripes(*json, *angles, *width, *rows, method.as_deref()),
        #[cfg(feature = "mpi")]
        BenchWhat::Scale {
            json,
            distributed: true,
            distributed_size,
            distributed_ranks,
            distributed_iterations,
            ..
        } => scale_distributed(
            cli,
            *json,
            *distributed_size,
            distributed_ranks,
            *distributed_iterations,
        ),
        BenchWhat::Scale {
            json,
            model: true,
            model_measure_size,
            model_sizes,
            model_ranks,
            model_device_bytes,
            model_host_bytes,
            model_device_gbps,
            model_copy_equivalents,
            model_bus_gbps,
            model_network_gbps,
            model_gpus_per_node,
            model_latency_us,
            ..
        } => scale_model(
            cli,
            *json,
            *model_measure_size,
            lamino::plan::cluster_model::ClusterInputs {
                device_bytes: *model_device_bytes,
                host_bytes: *model_host_bytes,
                device_gbps: *model_device_gbps,
                bus_gbps: *model_bus_gbps,
                network_gbps: *model_network_gbps,
                gpus_per_node: *model_gpus_per_node,
                latency_us: *model_latency_us,
                copy_equivalents: *model_copy_equivalents,
            },
            (model_sizes, model_ranks),
        ),
        BenchWhat::Scale {
            json,
            size,
            iterations,
            large,
            large_device_bytes,
            scratch,
            plan_sizes,
            plan_device_bytes,
            plan_host_bytes,
            ..
        } => scale(
            cli,
            *json,
            (*size, *iterations),
            (*large, *large_device_bytes, scratch),
            (plan_sizes, plan_device_bytes, *plan_host_bytes),
        ),
        BenchWhat::Convergence {
            json,
            size,
            angles,
            tilt_deg,
            photons,
            phantoms,
            reference_iterations,
        } => convergence(
            cli,
            *json,
            (*size, angles.unwrap_or(*size), *tilt_deg, *photons),
            phantoms,
            *reference_iterations,
        ),
        BenchWhat::Memo { .. } => memo(cli, what),
    }
}

fn fft(cli: &Cli, json: bool, repeats: usize, bytes: u64) -> CliResult {
    let ctx = cli.context()?;
    let copy = lamino::bench::copy_gbps(&ctx, bytes, repeats.max(1))?;
    for shape in lamino::bench::fft_bench_shapes() {
        for r in lamino::bench::bench_fft_shape(&ctx, &shape, bytes, repeats.max(1), copy)? {
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{:>16} x {:<6} {:<9}{} {:>9.3} ms {:>7.2} GB/s ({:.3} of copy {:.2} GB/s)  rustfft {:>9.3} ms  plan {:>8.1} ms ({})  [{}]",
                    format!("{:?}", r.shape),
                    r.batch,
                    r.strategy,
                    if r.auto { "*" } else { " " },
                    r.ms,
                    r.gbps,
                    r.gbps / r.copy_gbps,
                    r.copy_gbps,
                    r.rustfft_ms,
                    r.plan_ms,
                    r.launches_from,
                    r.timing
                );
            }
        }
    }
    Ok(())
}

fn operator(
    cli: &Cli,
    json: bool,
    size: usize,
    angles: Option<usize>,
    repeats: usize,
) -> CliResult {
    let ctx = cli.context()?;
    for r in lamino::bench::bench_operator(&ctx, size, angles.unwrap_or(size), repeats.max(1))? {
        if json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "{:<2} n={} angles={}: {:.2} ms (U1 {:.2}, U2 {:.2}, F {:.2}; FFT share {:.2}, {:.2}, {:.2}), U2 {:.3e} points/s, CPU {:.2} ms ({:.2}x), FFT workspace {:.1} MiB shared ({:.1} MiB saved) [{}]",
                r.operator,
                r.size,
                r.angles,
                r.ms,
                r.ms_u1,
                r.ms_u2,
                r.ms_f,
                r.fft_share_u1,
                r.fft_share_u2,
                r.fft_share_f,
                r.u2_points_per_s,
                r.cpu_ms,
                r.speedup_vs_cpu,
                r.fft_workspace_bytes as f64 / (1 << 20) as f64,
                r.fft_workspace_saved_bytes as f64 / (1 << 20) as f64,
                r.timing
            );
        }
    }
    Ok(())
}

fn convergence(
    cli: &Cli,
    json: bool,
    (size, angles, tilt_deg, photons): (usize, usize, f64, f64),
    phantoms: &[PhantomKind],
    reference_iterations: usize,
) -> CliResult {
    let ctx = cli.context()?;
    let percent = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{:.3} %", 100.0 * x));
    for &phantom in phantoms {
        let r = lamino::bench::bench_convergence(
            &ctx,
            phantom,
            size,
            (angles, tilt_deg, photons),
            reference_iterations,
        )?;
        if json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "{} n={} angles={} tilt={} deg photons={:e}: default stops after {} iterations, {} from the {}-iteration volume; from the phantom: default {}, {} iterations {} ({:.0} s)",
                r.phantom,
                r.size,
                r.angles,
                r.tilt_deg,
                r.photons,
                r.default_iterations
                    .map_or("(never within the run)".to_string(), |k| k.to_string()),
                percent(r.default_to_reference),
                r.reference_iterations,
                percent(r.default_to_truth),
                r.reference_iterations,
                percent(Some(r.reference_to_truth)),
                r.seconds
            );
        }
    }
    Ok(())
}

fn admm(cli: &Cli, json: bool, size: usize, angles: Option<usize>, iterations: usize) -> CliResult {
    let ctx = cli.context()?;
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
        let idle = r
            .device_idle_share
            .map_or("n/a (no timestamp queries)".into(), |s| {
                format!(
                    "{:.1}% over {} passes",
                    100.0 * s,
                    r.passes_per_iteration.unwrap_or(0)
                )
            });
        println!(
            "per outer iteration: {} submissions, {} waits, {} bytes read back, {} bytes uploaded; device idle {idle}",
            r.submissions_per_iteration,
            r.waits_per_iteration,
            r.bytes_read_back_per_iteration,
            r.bytes_uploaded_per_iteration
        );
    }
    Ok(())
}

/// Which parts of `bench memo` run.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MemoParts {
    Both,
    Frontier,
    Comparison,
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

fn json_line(section: &str, value: &impl serde::Serialize) -> String {
    let mut v = serde_json::to_value(value).expect("serialisable");
    v["section"] = section.into();
    v.to_string()
}

fn memo(cli: &Cli, what: &BenchWhat) -> CliResult {
    use lamino::memo::compare::{run_comparison, CompareConfig};
    use lamino::memo::frontier::{run_frontier, swept_policies, write_frontier, FrontierConfig};
    let BenchWhat::Memo {
        json,
        size,
        iterations,
        chunk,
        memo_stages,
        repeats,
        dai_yuan_step,
        device_fraction,
        policies,
        out,
        only,
        phantoms,
        target,
        reference_iterations,
        max_iterations,
        compare_step,
        compare_memo,
    } = what
    else {
        unreachable!("called for bench memo")
    };
    let (json, size, chunk) = (*json, *size, *chunk);
    if *iterations < 10 {
        return Err("the frontier needs at least 10 outer iterations per run".into());
    }
    if !(*target > 0.0 && *target < 1.0) || *reference_iterations == 0 || *max_iterations == 0 {
        return Err(
            "--target must be in (0, 1), --reference-iterations and --max-iterations at least 1"
                .into(),
        );
    }
    let ctx = cli.context()?;
    let memo = MemoOptions {
        chunk_rows: chunk,
        stages: *memo_stages,
        ..MemoOptions::default()
    };
    if *only != MemoParts::Comparison {
        let mut params = AdmmParams::exactly(*iterations);
        if let Some(step) = dai_yuan_step {
            params.inner = InnerSolver::DaiYuan { step: *step };
        }
        let config = FrontierConfig {
            size,
            params,
            memo,
            policies: match policies.is_empty() {
                true => swept_policies(),
                false => policies.clone(),
            },
            repeats: *repeats,
            device_fraction: *device_fraction,
        };
        eprintln!(
            "memo frontier: {size}^3 chip, {iterations} outer iterations of {:?} per run, chunks of at most {chunk} rows, memo stages {memo_stages}, {}, on {}",
            params.inner,
            device_fraction.map_or("in core".to_string(), |f| format!(
                "streamed through 1/{f} of the in-core device need"
            )),
            ctx.info()
        );
        let points = run_frontier(&ctx, &config, |p| {
            if json {
                println!("{}", json_line("frontier", p));
            } else {
                println!(
                    "{:<14} {:>7} accuracy {:.4}  time {:.3} of exact ({:.1} s, CPU time {})  hits {:.1}%  round trips {:.2}/application  lookup median {:.4} ms p99 {:.4} ms  cache {:.1} MiB  moved {:.1} MB ({})",
                    p.policy,
                    p.param.map_or(String::from("-"), |v| v.to_string()),
                    p.accuracy,
                    p.normalized_time,
                    p.time_s,
                    p.normalized_cpu_time
                        .map_or("n/a".into(), |c| format!("{c:.3} of exact")),
                    100.0 * p.hit_rate,
                    p.round_trips_per_application,
                    p.lookup_ms_median,
                    p.lookup_ms_p99,
                    p.cache_bytes as f64 / (1 << 20) as f64,
                    p.bytes_moved as f64 / 1e6,
                    p.mode
                );
            }
        })?;
        for path in write_frontier(out, &points)? {
            eprintln!("wrote {}", path.display());
        }
    }
    if *only != MemoParts::Frontier {
        let config = CompareConfig {
            size,
            phantoms: phantoms.clone(),
            target: *target,
            reference_iterations: *reference_iterations,
            max_iterations: *max_iterations,
            dai_yuan_step: *compare_step,
            certified: compare_memo.clone(),
            memo,
        };
        eprintln!(
            "time to within {target} of the converged result: {size}^3, exact-step CG, Dai-Yuan (step {compare_step}) without and with {}",
            compare_memo
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        run_comparison(&ctx, &config, |r| {
            if json {
                println!("{}", json_line("comparison", r));
            } else {
                println!(
                    "{:<6} {:<9} {:<9} {:<24} {} after {:>3} iterations, {:.1} s ({:.3} of CG), distance {:.2e}, hits {:.1}%{}",
                    r.phantom,
                    r.kind,
                    r.solver,
                    r.memo,
                    if r.reached { "reached" } else { "NOT reached" },
                    r.iterations,
                    r.time_s,
                    r.normalized_time,
                    r.distance,
                    100.0 * r.hit_rate,
                    if r.best_memo { "  [best memo setting]" } else { "" }
                );
            }
        })?;
    }
    Ok(())
}

fn flatfield(cli: &Cli, json: bool, no_slow_oracle: bool) -> CliResult {
    use lamino::flatfield::bench::{bench_fit, bench_fit_stack, bench_transform};
    let ctx = cli.context()?;
    let runs: Vec<Box<dyn Fn() -> Result<_, lamino::flatfield::FlatfieldError>>> = vec![
        Box::new(|| bench_fit(&ctx, 100, 128, true)),
        // S2 (no dark-field): where the reweighting stop of issue 15 saves the most rounds.
        Box::new(|| bench_fit_stack(&ctx, 100, 128, false, true)),
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
                "{:>9} {} {:>5} x {}x{}: GPU {:.2} s, CPU oracle {}{}{}  device {:.1} MiB, host peak {}",
                r.what,
                r.stack,
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
                r.solves.map_or(String::new(), |s| format!(
                    ", {s} reweighting rounds ({} iterations), baseline {} rounds ({} iterations)",
                    r.iterations.unwrap_or(0),
                    r.baseline_rounds.unwrap_or(0),
                    r.baseline_iterations.unwrap_or(0)
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

fn search(cli: &Cli, json: bool, sizes: &[usize], candidates: usize, repeats: usize) -> CliResult {
    use lamino::preprocess::bench::bench_search;
    let ctx = cli.context()?;
    let mut rate = 0.0;
    for &size in sizes {
        let r = bench_search(&ctx, size, 3 * size / 2, candidates, repeats)?;
        rate = r.interpolations_per_s;
        if json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "n={} angles={} slab {}: 1 candidate {:.3} s, {} candidates {:.3} s, {:.4} s per \
                 extra candidate ({:.3e} voxel-angle interpolations/s)",
                r.size,
                r.angles,
                r.slices,
                r.one_candidate_s,
                r.candidates,
                r.all_candidates_s,
                r.per_candidate_s,
                r.interpolations_per_s
            );
        }
    }
    if !json && rate > 0.0 {
        for b in [1usize, 2, 4] {
            let n = 2048 / b;
            let work = (lamino::preprocess::DEFAULT_SLAB_SLICES * n * n * 1500) as f64;
            println!(
                "2048^2 x 1500 angles at binning {b}: {:.3e} interpolations per candidate, {:.2} s \
                 per candidate at this device's rate",
                work,
                work / rate
            );
        }
    }
    Ok(())
}

fn stripes(
    json: bool,
    angles: usize,
    width: usize,
    rows: usize,
    method: Option<&str>,
) -> CliResult {
    use lamino::preprocess::StripeRemoval;
    let methods = match method {
        None => vec![StripeRemoval::FOURIER_WAVELET, StripeRemoval::SORTING],
        Some("fw") => vec![StripeRemoval::FOURIER_WAVELET],
        Some("sort") => vec![StripeRemoval::SORTING],
        Some(other) => return Err(format!("--method {other:?}: expected fw or sort").into()),
    };
    for r in lamino::preprocess::bench::bench_stripes(angles, width, rows, &methods)? {
        if json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "{:?}: {} sinograms of {}x{} in {:.2} s on {} threads ({:.3} s per sinogram and \
                 thread; 2048 rows on 16 threads: {:.1} s)",
                r.method,
                r.rows,
                r.angles,
                r.width,
                r.seconds,
                r.threads,
                r.sinogram_thread_s,
                r.sinogram_thread_s * 2048.0 / 16.0
            );
        }
    }
    Ok(())
}

/// One reconstruction of `lamino bench scale --distributed`.
#[cfg(feature = "mpi")]
#[derive(serde::Serialize)]
struct DistributedRun {
    size: usize,
    ranks: usize,
    iterations: usize,
    /// Wall time of the whole command (setup, iterations, outputs), s.
    wall_s: f64,
    /// Time of one outer iteration (the iterations' time over their number), ms.
    iteration_ms: f64,
    /// Bytes each rank sent to the others per outer iteration.
    bytes_sent_per_iteration: Vec<u64>,
}

#[cfg(feature = "mpi")]
fn scale_distributed(
    cli: &Cli,
    json: bool,
    size: usize,
    ranks: &[usize],
    iterations: usize,
) -> CliResult {
    use lamino::simulate::{simulated_scan, ScanSpec};
    let dir = tempfile::tempdir()
        .map_err(|e| format!("cannot create a temporary directory for the ranks' runs: {e}"))?;
    let scan = dir.path().join("scan.h5");
    let simulated = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size,
        angles: size,
        tilt_deg: 30.0,
        photons: Some(1e5),
        seed: 0,
        rotation_axis: None,
    })?;
    lamino::io::write_dxchange(&scan, &simulated.scan)?;
    let exe = std::env::current_exe()?;
    // Safety: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    for &k in ranks {
        let out = dir.path().join(format!("ranks-{k}"));
        let mut cmd = match k {
            1 => std::process::Command::new(&exe),
            _ => {
                let mut c = std::process::Command::new("mpirun");
                if root {
                    c.arg("--allow-run-as-root");
                }
                c.args(["--oversubscribe", "-n", &k.to_string()]).arg(&exe);
                c
            }
        };
        cmd.args(cli.global_args())
            .arg("reconstruct")
            .arg(&scan)
            .arg("--out")
            .arg(&out)
            .args(["--iterations", &iterations.to_string(), "--quiet"]);
        let start = std::time::Instant::now();
        let o = cmd.output()?;
        let wall_s = start.elapsed().as_secs_f64();
        if !o.status.success() {
            return Err(format!(
                "{k} ranks: {}",
                String::from_utf8_lossy(&o.stderr).trim_end()
            )
            .into());
        }
        let report_path = out.join("report.json");
        let report: serde_json::Value = std::fs::read(&report_path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
            .map_err(|e| format!("cannot read {}: {e}", report_path.display()))?;
        let r = &report["reconstruction"];
        let done = r["reports"].as_array().map_or(0, |a| a.len()).max(1);
        let run = DistributedRun {
            size,
            ranks: k,
            iterations: done,
            wall_s,
            iteration_ms: r["iterations_s"].as_f64().unwrap_or(f64::NAN) * 1e3 / done as f64,
            bytes_sent_per_iteration: r["ranks"]
                .as_array()
                .map(|ranks| {
                    ranks
                        .iter()
                        .map(|e| e["iteration_bytes_sent"].as_u64().unwrap_or(0) / done as u64)
                        .collect()
                })
                .unwrap_or_else(|| vec![0]),
        };
        if json {
            println!("{}", serde_json::to_string(&run)?);
        } else {
            println!(
                "{size}^3, {k} rank(s): {:.0} ms per outer iteration, {:.1} s in all; sent per \
                 iteration by each rank: {} MB",
                run.iteration_ms,
                run.wall_s,
                run.bytes_sent_per_iteration
                    .iter()
                    .map(|b| format!("{:.1}", *b as f64 / 1e6))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    Ok(())
}

fn scale_model(
    cli: &Cli,
    json: bool,
    measure_size: usize,
    inputs: lamino::plan::cluster_model::ClusterInputs,
    (sizes, ranks): (&[usize], &[usize]),
) -> CliResult {
    use lamino::plan::cluster_model::communication_dominates_from;
    let (measured, points) = lamino::bench::bench_scale_model(
        &cli.device_options()?,
        measure_size,
        inputs,
        sizes,
        ranks,
    )?;
    if json {
        println!("{}", serde_json::to_string(&measured)?);
        for p in &points {
            println!("{}", serde_json::to_string(p)?);
        }
        return Ok(());
    }
    println!(
        "measured on {}: one in-core outer iteration of {}^3 x {} angles in {:.0} ms, {:.2} GB touched, \
         copy {:.2} GB/s: {:.1} copy-equivalents per byte",
        measured.device,
        measured.size,
        measured.angles,
        measured.ms_per_iteration,
        measured.touched_bytes as f64 / 1e9,
        measured.copy_gbps,
        measured.copy_equivalents
    );
    let gbps = if inputs.device_gbps > 0.0 {
        inputs.device_gbps
    } else {
        measured.copy_gbps
    };
    let equivalents = if inputs.copy_equivalents > 0.0 {
        inputs.copy_equivalents
    } else {
        measured.copy_equivalents
    };
    println!(
        "modelled GPU: {} GiB, copy {gbps:.1} GB/s, {equivalents:.1} copy-equivalents per byte, bus {} \
         GB/s; node network {} GB/s shared by {} GPUs, {} us per message; host {} GiB per rank",
        inputs.device_bytes >> 30,
        inputs.bus_gbps,
        inputs.network_gbps,
        inputs.gpus_per_node,
        inputs.latency_us,
        inputs.host_bytes >> 30
    );
    println!(
        "{:>5} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>6} {:>6} {:>9} {:>9}",
        "size",
        "GPUs",
        "mode",
        "device s",
        "bus s",
        "net s",
        "lat s",
        "iter s",
        "speedup",
        "eff",
        "comm",
        "net GB",
        "host GiB"
    );
    for p in &points {
        println!(
            "{:>5} {:>5} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.4} {:>10.3} {:>8.2} {:>6.2} {:>6.2} {:>9.2} {:>9.1}",
            p.size,
            p.ranks,
            format!("{:?}", p.mode),
            p.device_s,
            p.bus_s,
            p.network_s,
            p.latency_s,
            p.iteration_s,
            p.speedup,
            p.efficiency,
            p.communication_share,
            p.network_bytes_per_rank as f64 / 1e9,
            (p.host_bytes_per_rank + p.scratch_bytes_per_rank) as f64 / (1u64 << 30) as f64
        );
    }
    for &n in sizes {
        let of_size: Vec<_> = points.iter().filter(|p| p.size == n).cloned().collect();
        match communication_dominates_from(&of_size) {
            Some(k) => println!("{n}^3: communication takes over half the iteration from {k} GPUs"),
            None => println!(
                "{n}^3: communication stays under half the iteration up to {} GPUs",
                of_size.iter().map(|p| p.ranks).max().unwrap_or(1)
            ),
        }
    }
    Ok(())
}

fn scale(
    cli: &Cli,
    json: bool,
    (size, iterations): (usize, usize),
    (large, large_device_bytes, scratch): (usize, u64, &Path),
    (plan_sizes, plan_device_bytes, plan_host_bytes): (&[usize], &[u64], u64),
) -> CliResult {
    use lamino::bench::{
        bench_scale_large, bench_scale_plan, bench_scale_ratio, ScaleBenchError, ScaleBenchRecord,
    };
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let print = |r: &ScaleBenchRecord| -> CliResult {
        if json {
            println!("{}", serde_json::to_string(r)?);
            return Ok(());
        }
        let p = &r.plan;
        let tables = match p.u2_tables {
            lamino::array::Residency::Device => "device",
            lamino::array::Residency::Host => "host",
            lamino::array::Residency::Scratch(_) => "scratch",
        };
        print!(
            "{:<5} {}^3 x {} angles: {:?}, chunks {:?}, {} of {} arrays on the device, the U2 tables ({:.2} GiB) on the {tables}; device {:.2} GiB, host {:.2} GiB, scratch {:.2} GiB, planned {:.2} GiB moved per iteration",
            r.kind,
            r.size,
            r.angles,
            p.mode,
            p.chunks,
            p.resident_arrays(),
            p.arrays.len(),
            gib(p.u2_table_bytes),
            gib(p.device_bytes),
            gib(p.host_bytes),
            gib(p.scratch_bytes),
            gib(p.bytes_moved_per_iteration)
        );
        if let Some(ms) = r.ms_per_iteration {
            print!("; {ms:.0} ms per iteration");
        }
        if let (Some(ratio), Some(base)) = (r.streaming_over_in_core, r.in_core_ms_per_iteration) {
            print!(" = {ratio:.2} x in-core ({base:.0} ms)");
        }
        if let Some(moved) = r.bytes_moved_per_iteration {
            print!(", {:.2} GiB moved", gib(moved));
        }
        if let (Some(a), Some(c)) = (r.achieved_gbps, r.copy_gbps) {
            print!(" at {a:.2} GB/s beyond in-core (plain copy {c:.2} GB/s)");
        }
        if let Some(peak) = r.peak_device_bytes {
            print!(", device peak {:.3} GiB", gib(peak));
        }
        if let Some(peak) = r.peak_host_bytes {
            print!(", host peak resident {:.2} GiB", gib(peak));
        }
        println!();
        Ok(())
    };
    let options = cli.device_options()?;
    if size > 0 {
        print(&bench_scale_ratio(&options, size, size, iterations)?)?;
    }
    if large > 0 {
        // A host budget of a third of the large run's arrays forces the rest to scratch.
        let third = (large * large * large) as u64 * 4 * 13 / 3;
        let dir = tempfile::tempdir_in(scratch).map_err(|e| {
            format!(
                "cannot create a scratch directory in {}: {e}",
                scratch.display()
            )
        })?;
        print(&bench_scale_large(
            &options,
            large,
            large,
            large_device_bytes,
            third,
            dir.path(),
        )?)?;
    }
    let ctx = cli.context()?;
    for &n in plan_sizes {
        for &budget in plan_device_bytes {
            match bench_scale_plan(&ctx, n, budget, plan_host_bytes) {
                Ok(r) => print(&r)?,
                // A refusal is a figure too: where the planner's limit lies.
                Err(ScaleBenchError::Plan(e)) if json => println!(
                    "{}",
                    serde_json::json!({ "kind": "plan", "size": n, "angles": n,
                        "device_budget_bytes": budget, "refused": e.to_string() })
                ),
                Err(ScaleBenchError::Plan(e)) => {
                    println!(
                        "plan  {n}^3 x {n} angles at {} GiB: refused: {e}",
                        budget >> 30
                    )
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
