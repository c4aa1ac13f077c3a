//! Benchmark drivers behind `lamino bench ...`, one module per subcommand, each with the
//! records it measures and the function that prints them (a line per record, JSON with
//! `--json`). Figures are measured in one run, on one device, so that VM noise and clock changes
//! cancel out as far as possible. This module holds what the drivers share: timing helpers,
//! process figures (CPU time, peak resident memory), a plain copy's bandwidth, the JSON line and
//! the error of the printing drivers.
//!
//! The drivers sit above the solver and the reconstruction pipeline they time, so that the
//! modules they measure (the memo layer among them) need not import them.

pub mod admm;
pub mod align;
pub mod convergence;
pub mod fft;
pub mod flatfield;
pub mod memo;
pub mod normal;
pub mod operator;
pub mod scale;
pub mod scale_distributed;
pub mod scale_model;
pub mod search;
pub mod stripes;
pub mod suite;

pub use admm::{bench_admm, AdmmBenchRecord};
pub use convergence::{
    bench_convergence, converge_then_continue, noisy_projections, ConvergedPrefix,
    ConvergenceBenchError, ConvergenceBenchRecord, Reached, StoppedRun, REACHED,
};
pub use fft::{bench_fft_shape, fft_bench_shapes, FftBenchRecord};
pub use operator::{bench_operator, OperatorArrays, OperatorBenchRecord};
pub use scale::{
    bench_scale_large, bench_scale_plan, bench_scale_ratio, ScaleBenchError, ScaleBenchRecord,
};
pub use scale_model::{bench_scale_model, ScaleModelMeasurement};

use std::time::Instant;

use bytemuck::{Pod, Zeroable};
use serde::Serialize;

use crate::fft::FftError;
use crate::gpu::{GpuContext, KernelSpec, Recorder};
use crate::shaders;

/// Why a printing driver stopped: the error of the benchmark it ran, or of printing a record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error(transparent)]
    Fft(#[from] FftError),
    #[error(transparent)]
    Operator(#[from] crate::operator::OperatorError),
    #[error(transparent)]
    Solver(#[from] crate::solver::SolverError),
    #[error(transparent)]
    Recon(#[from] crate::recon::ReconError),
    #[error(transparent)]
    Io(#[from] crate::io::IoError),
    #[error(transparent)]
    Flatfield(#[from] crate::flatfield::FlatfieldError),
    #[error(transparent)]
    Preprocess(#[from] crate::preprocess::PreprocessError),
    #[error(transparent)]
    Scale(#[from] ScaleBenchError),
    #[error(transparent)]
    Convergence(#[from] ConvergenceBenchError),
    #[error(transparent)]
    Align(#[from] align::AlignBenchError),
    #[error(transparent)]
    Distributed(#[from] scale_distributed::DistributedBenchError),
    /// `lamino bench scale`'s large run could not make its scratch directory.
    #[error("cannot create a scratch directory in {}: {source}", dir.display())]
    Scratch {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A record that does not serialise to JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Prints `record` as one line of JSON (`--json`).
fn print_json(record: &impl Serialize) -> Result<(), serde_json::Error> {
    println!("{}", serde_json::to_string(record)?);
    Ok(())
}

/// CPU seconds this process has used, all threads (`None` where the platform does not say).
/// On a software adapter the device's work runs on the process's threads, so this is the work a
/// run did, less sensitive than wall time to other processes sharing the cores.
pub fn process_cpu_seconds() -> Option<f64> {
    #[cfg(unix)]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // Safety: clock_gettime writes the timespec it is given and nothing else.
        let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0;
        ok.then_some(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The process's peak resident set (Linux `/proc/self/status` VmHWM).
pub fn host_peak_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `record` once and returns its time in ms: GPU timestamps where the device has them, else
/// wall time from submit to completion.
fn time_once(
    ctx: &GpuContext,
    record: impl FnOnce(&mut Recorder) -> Result<(), crate::gpu::GpuError>,
) -> Result<(f64, &'static str), FftError> {
    let mut rec = ctx.timed_recorder("bench");
    record(&mut rec)?;
    let start = Instant::now();
    let gpu_ms = rec.finish_timed(ctx)?;
    let wall = start.elapsed().as_secs_f64() * 1e3;
    Ok(match gpu_ms {
        Some(ms) if ms > 0.0 => (ms, "gpu-timestamps"),
        _ => (wall, "wall"),
    })
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CopyParams {
    count: u32,
    pad: [u32; 3],
}

/// Invocations per workgroup of the copy kernel.
const COPY_WORKGROUP: u32 = 256;

/// Bandwidth of a plain copy of `bytes` bytes (read + write) in GB/s, median of `repeats`.
pub fn copy_gbps(ctx: &GpuContext, bytes: u64, repeats: usize) -> Result<f64, FftError> {
    let bytes = bytes.min(ctx.max_binding_bytes()) / 16 * 16;
    let src = ctx.storage_buffer("copy src", bytes)?;
    let dst = ctx.storage_buffer("copy dst", bytes)?;
    let count = (bytes / 16) as u32;
    let params = ctx.uniform("copy params", &CopyParams { count, pad: [0; 3] })?;
    let kernel = ctx.kernel(&KernelSpec {
        shader: &shaders::COPY,
        entry: "copy_vec4",
        overrides: vec![("WORKGROUP", COPY_WORKGROUP as f64)],
    })?;
    let bound = kernel.bind(ctx, &[(&src).into(), (&dst).into(), (&params).into()])?;
    let groups = count.div_ceil(COPY_WORKGROUP);
    time_once(ctx, |rec| {
        rec.dispatch(&bound, groups);
        Ok(())
    })?; // warm-up: pays shader compilation
    let mut times = Vec::new();
    for _ in 0..repeats {
        times.push(
            time_once(ctx, |rec| {
                rec.dispatch(&bound, groups);
                Ok(())
            })?
            .0,
        );
    }
    Ok(2.0 * bytes as f64 / (median(times) * 1e6))
}
