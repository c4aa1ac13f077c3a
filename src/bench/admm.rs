//! `lamino bench admm`: outer ADMM-TV iterations, the time per iteration and the operator's
//! share of it, host-device traffic, device idle time and memory.

use std::time::Instant;

use serde::Serialize;

use super::{median, print_json, time_once, BenchError, OperatorArrays};
use crate::fft::FftError;
use crate::geometry::Tilt;
use crate::gpu::GpuContext;
use crate::random::SplitMix64;

/// One line of `lamino bench admm --json`.
#[derive(Debug, Clone, Serialize)]
pub struct AdmmBenchRecord {
    /// The inner loop's normal operator: `gridding` (A then A* per CG step) or `toeplitz`.
    pub normal_operator: &'static str,
    pub size: usize,
    pub angles: usize,
    pub inner_iterations: usize,
    /// Median wall time of one outer iteration (submit to completion, readbacks included), ms.
    pub ms_per_iteration: f64,
    /// GPU time of the operator applications one outer iteration makes (inner A and A*, plus
    /// one A* for the data residual unless the solver carries it; with Toeplitz, one
    /// convolution per CG step), each timed on its own, ms.
    pub ms_operator: f64,
    /// The rest: vector kernels, reductions, readbacks and submission overhead, ms.
    pub ms_vector_and_sync: f64,
    /// Device memory of the operator plus the solver's vectors.
    pub device_bytes: u64,
    /// How U2* weighed its points (`AdjointGridding`), as resolved on this device.
    pub adjoint_gridding: &'static str,
    /// Per outer iteration (the most over the timed iterations): command submissions, host
    /// waits for the device, bytes read back and bytes uploaded.
    pub submissions_per_iteration: u64,
    pub waits_per_iteration: u64,
    pub bytes_read_back_per_iteration: u64,
    pub bytes_uploaded_per_iteration: u64,
    /// Share of the device time span of consecutive outer iterations (from the first pass's
    /// start to the last pass's end) in which no compute pass ran: gaps between submissions,
    /// host waits, transfers. From GPU timestamps around every pass, in further iterations run
    /// with the timeline on; `None` without timestamp queries.
    pub device_idle_share: Option<f64>,
    /// Compute passes per outer iteration in those iterations.
    pub passes_per_iteration: Option<usize>,
    pub device: String,
}

/// Times outer ADMM iterations for an `n`^3 volume and `angles` projections, U2* weighing its
/// points as `adjoint` says.
pub fn bench_admm(
    ctx: &GpuContext,
    (n, angles): (usize, usize),
    iterations: usize,
    adjoint: crate::operator::AdjointGridding,
    normal: crate::params::NormalOperator,
) -> Result<AdmmBenchRecord, crate::solver::SolverError> {
    use crate::geometry::Geometry;
    use crate::operator::{Apply, OperatorOptions};
    use crate::params::AdmmParams;
    use crate::solver::AdmmSolver;
    let g = Geometry::cube(n, angles, Tilt::from_degrees(30.0));
    let mut rng = SplitMix64::new(3);
    let data: Vec<f32> = (0..g.data_len()).map(|_| rng.next_f64() as f32).collect();
    // Timed iterations of the default solver (the convergence test does not stop a benchmark),
    // then as many with every pass timestamped (which costs host time: not in the wall times).
    let iterations = iterations.max(1);
    let params = AdmmParams::exactly(2 * iterations + 1);
    let options = OperatorOptions {
        adjoint_gridding: adjoint,
        ..OperatorOptions::default()
    };
    let mut solver = AdmmSolver::new(ctx, &g, &data, params, &options)?;
    let choice = solver.set_normal_operator(ctx, normal, false)?;
    solver.step(ctx)?; // warm-up: pays shader compilation
    ctx.complete_downloads()?;
    let mut times = Vec::new();
    let mut traffic = crate::gpu::Traffic::default();
    for _ in 0..iterations {
        let before = ctx.traffic();
        let start = Instant::now();
        solver.step(ctx)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        let t = ctx.traffic() - before;
        traffic.submissions = traffic.submissions.max(t.submissions);
        traffic.waits = traffic.waits.max(t.waits);
        traffic.bytes_downloaded = traffic.bytes_downloaded.max(t.bytes_downloaded);
        traffic.bytes_uploaded = traffic.bytes_uploaded.max(t.bytes_uploaded);
    }
    // One timeline over consecutive iterations, so that the gaps between them (the host reading
    // the iteration's scalars and recording the next) count as idle.
    let busy = match ctx.start_timeline() {
        true => {
            for _ in 0..iterations {
                solver.step(ctx)?;
            }
            ctx.stop_timeline()?
        }
        false => None,
    };
    let op = solver.operator();
    let arrays = OperatorArrays::new(ctx, &g)?;
    let time_op = |what| -> Result<f64, crate::solver::SolverError> {
        let application = arrays.application(ctx, op, what)?;
        let mut t = Vec::new();
        for _ in 0..3 {
            t.push(
                time_once(ctx, |rec| op.record(ctx, rec, &application))
                    .map_err(solver_error)?
                    .0,
            );
        }
        Ok(median(t))
    };
    // After the first outer iteration a carried data residual needs no A* of its own.
    let k = params.inner_steps(g.n2) as f64;
    let ms_operator = match choice.used {
        "toeplitz" => k * time_toeplitz(ctx, &g)?,
        _ => {
            let (a, a_adj) = (
                time_op(Apply::FourierForward)?,
                time_op(Apply::FourierAdjoint)?,
            );
            let adjoints = if params.carries_residual() {
                k
            } else {
                1.0 + k
            };
            adjoints * a_adj + k * a
        }
    };
    let ms_per_iteration = median(times);
    Ok(AdmmBenchRecord {
        normal_operator: choice.used,
        size: n,
        angles,
        inner_iterations: params.inner_steps(g.n2),
        ms_per_iteration,
        ms_operator,
        ms_vector_and_sync: ms_per_iteration - ms_operator,
        device_bytes: op.device_bytes() + solver.vector_device_bytes() + choice.device_bytes,
        adjoint_gridding: op.adjoint_gridding().name(),
        submissions_per_iteration: traffic.submissions,
        waits_per_iteration: traffic.waits,
        bytes_read_back_per_iteration: traffic.bytes_downloaded,
        bytes_uploaded_per_iteration: traffic.bytes_uploaded,
        device_idle_share: busy.map(|b| b.idle_share()),
        passes_per_iteration: busy.map(|b| b.passes / iterations),
        device: ctx.info().name.clone(),
    })
}

/// A timing's error as the solver's.
fn solver_error(e: FftError) -> crate::solver::SolverError {
    match e {
        FftError::Gpu(g) => crate::solver::SolverError::Gpu(g),
        other => crate::solver::SolverError::Operator(other.into()),
    }
}

/// GPU time of one Toeplitz convolution of the geometry `g` on the solver's layout (the median
/// of three), ms.
fn time_toeplitz(
    ctx: &GpuContext,
    g: &crate::geometry::Geometry,
) -> Result<f64, crate::solver::SolverError> {
    use crate::operator::{OperatorOptions, ToeplitzNormal};
    let normal = ToeplitzNormal::new(ctx, g, &OperatorOptions::default(), true)?;
    let bytes = g.volume_len() as u64 * 4;
    let (input, output) = (
        ctx.storage_buffer("T input", bytes)?,
        ctx.storage_buffer("T output", bytes)?,
    );
    let application = normal.application(ctx, &input, &output)?;
    let mut t = Vec::new();
    for _ in 0..3 {
        let once = time_once(ctx, |rec| {
            normal.record(rec, &application);
            Ok(())
        });
        t.push(once.map_err(solver_error)?.0);
    }
    Ok(median(t))
}

/// Prints the figures of [`bench_admm`] for an `size`^3 volume seen at `angles`, with each
/// normal operator (gridding, then Toeplitz), side by side.
pub fn print(
    ctx: &GpuContext,
    json: bool,
    (size, angles): (usize, usize),
    iterations: usize,
    adjoint: crate::operator::AdjointGridding,
) -> Result<(), BenchError> {
    use crate::params::NormalOperator;
    for normal in [NormalOperator::Gridding, NormalOperator::Toeplitz] {
        let r = bench_admm(ctx, (size, angles), iterations, adjoint, normal)?;
        if json {
            print_json(&r)?;
        } else {
            println!(
            "{}, n={} angles={}, U2* {}: {:.1} ms per outer iteration ({} inner): operator {:.1} ms, vectors and sync {:.1} ms; device memory {:.1} MiB",
            r.normal_operator,
            r.size,
            r.angles,
            r.adjoint_gridding,
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
    }
    Ok(())
}
