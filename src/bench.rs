//! Benchmarks that print figures: ratios are measured in one run, on one device, so that VM noise
//! and clock changes cancel out as far as possible.

use std::time::Instant;

use bytemuck::{Pod, Zeroable};
use num_complex::Complex;
use serde::Serialize;

use crate::fft::{Direction, FftError, FftPlan, Normalization};
use crate::gpu::{BindingKind, GpuContext, KernelSpec, Recorder};
use crate::reference::{fft_last_axes, SplitMix64};
use crate::shaders;

/// One line of `lamino bench fft --json`.
#[derive(Debug, Clone, Serialize)]
pub struct FftBenchRecord {
    /// Transform shape (batch excluded).
    pub shape: Vec<usize>,
    /// Number of transforms.
    pub batch: usize,
    /// Median GPU time of one batched forward transform, milliseconds.
    pub ms: f64,
    /// (bytes read + bytes written, once each) / time, in GB/s.
    pub gbps: f64,
    /// A copy kernel on the same device in the same run, GB/s: the memory-bandwidth bound.
    pub copy_gbps: f64,
    /// Median time of the same transforms with rustfft (f32) on all CPU cores, milliseconds.
    pub rustfft_ms: f64,
    /// "gpu-timestamps" or "wall" (submit to completion) when the device has no timestamps.
    pub timing: &'static str,
    /// Device the figures come from.
    pub device: String,
}

/// The shapes of the benchmark, each batched up to about `target_bytes`.
pub fn fft_bench_shapes() -> Vec<Vec<usize>> {
    vec![
        vec![256],
        vec![1024],
        vec![4096],
        vec![1 << 20],
        vec![256, 256],
        vec![512, 512],
        vec![768, 768],
        vec![64, 64, 64],
        vec![128, 128, 128],
    ]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `record` once and returns its time in ms: GPU timestamps where the device has them, else
/// wall time from submit to completion.
fn time_once(
    ctx: &GpuContext,
    record: impl FnOnce(&mut Recorder),
) -> Result<(f64, &'static str), FftError> {
    let mut rec = ctx.timed_recorder("bench");
    record(&mut rec);
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
        bindings: &[
            BindingKind::StorageRead,
            BindingKind::StorageReadWrite,
            BindingKind::Uniform,
        ],
        overrides: vec![("WORKGROUP", 256.0)],
    })?;
    let bound = kernel.bind(ctx, &[(&src).into(), (&dst).into(), (&params).into()])?;
    let groups = count.div_ceil(256);
    time_once(ctx, |rec| rec.dispatch(&bound, groups))?; // warm-up: pays shader compilation
    let mut times = Vec::new();
    for _ in 0..repeats {
        times.push(time_once(ctx, |rec| rec.dispatch(&bound, groups))?.0);
    }
    Ok(2.0 * bytes as f64 / (median(times) * 1e6))
}

/// Benchmarks one shape, batched to about `target_bytes`.
pub fn bench_fft_shape(
    ctx: &GpuContext,
    shape: &[usize],
    target_bytes: u64,
    repeats: usize,
    copy_gbps: f64,
) -> Result<FftBenchRecord, FftError> {
    let elems: usize = shape.iter().product();
    let batch = ((target_bytes / 8) as usize / elems).max(1);
    let mut full = vec![batch];
    full.extend_from_slice(shape);
    let total = batch * elems;
    let input = SplitMix64::new(42).complex_uniform(total);
    let data = ctx.upload("bench data", &input)?;
    let plan = FftPlan::new(
        ctx,
        &full,
        shape.len(),
        Direction::Forward,
        Normalization::None,
        &data,
    )?;
    let mut times = Vec::new();
    let mut timing = "wall";
    for i in 0..=repeats {
        // Fresh input each time so repeated unnormalised transforms cannot overflow.
        ctx.write(&data, 0, &input);
        let (ms, how) = time_once(ctx, |rec| plan.record(rec))?;
        if i > 0 {
            times.push(ms);
            timing = how;
        }
    }
    let ms = median(times);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut cpu_times = Vec::new();
    let mut cpu: Vec<Complex<f32>> = input.clone();
    for _ in 0..repeats.clamp(1, 3) {
        cpu.copy_from_slice(&input);
        let start = Instant::now();
        fft_last_axes(&mut cpu, &full, shape.len(), Direction::Forward, threads);
        cpu_times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(FftBenchRecord {
        shape: shape.to_vec(),
        batch,
        ms,
        gbps: 2.0 * (total * 8) as f64 / (ms * 1e6),
        copy_gbps,
        rustfft_ms: median(cpu_times),
        timing,
        device: ctx.info().name.clone(),
    })
}
