//! `lamino bench fft`: batched FFTs against a copy kernel (the bandwidth bound) and rustfft on
//! all CPU cores, with each strategy that applies and the planning time.

use std::time::Instant;

use num_complex::Complex;
use serde::Serialize;

use super::{copy_gbps, median, print_json, time_once, BenchError};
use crate::fft::{Direction, FftError, FftPlan, LaunchSource, Normalization, Strategy};
use crate::gpu::GpuContext;
use crate::random::SplitMix64;
use crate::reference::fft_last_axes;

/// One line of `lamino bench fft --json`.
#[derive(Debug, Clone, Serialize)]
pub struct FftBenchRecord {
    /// Transform shape (batch excluded).
    pub shape: Vec<usize>,
    /// Number of transforms.
    pub batch: usize,
    /// "auto" (the launches tuned on this device), "fused" (one pass per axis in workgroup memory)
    /// or "multipass" (at least two passes through global memory per axis), the last two with the
    /// untuned default launches.
    pub strategy: &'static str,
    /// Whether `Strategy::Auto` runs the same passes as this strategy on this device.
    pub auto: bool,
    /// Wall time of planning, milliseconds: kernel compilation, tables, bind groups, and for
    /// "auto" the tuning measurements (or the cache lookup when measured before).
    pub plan_ms: f64,
    /// Where the launches came from: "measured" (tuned while planning), "cache" (tuned earlier),
    /// "default" (untuned), or "mixed".
    pub launches_from: &'static str,
    /// Each axis's passes as "sub-length: launch", last axis first.
    pub launches: Vec<String>,
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

/// Benchmarks one shape, batched to about `target_bytes`, with each strategy that applies to it.
pub fn bench_fft_shape(
    ctx: &GpuContext,
    shape: &[usize],
    target_bytes: u64,
    repeats: usize,
    copy_gbps: f64,
) -> Result<Vec<FftBenchRecord>, FftError> {
    let elems: usize = shape.iter().product();
    let batch = ((target_bytes / 8) as usize / elems).max(1);
    let mut full = vec![batch];
    full.extend_from_slice(shape);
    let total = batch * elems;
    let input = SplitMix64::new(42).complex_uniform(total);
    let data = ctx.upload("bench data", &input)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut cpu_times = Vec::new();
    let mut cpu: Vec<Complex<f32>> = input.clone();
    for _ in 0..repeats.clamp(1, 3) {
        cpu.copy_from_slice(&input);
        let start = Instant::now();
        fft_last_axes(&mut cpu, &full, shape.len(), Direction::Forward, threads);
        cpu_times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let rustfft_ms = median(cpu_times);
    let mut records = Vec::new();
    let mut auto_passes: Vec<Vec<usize>> = Vec::new();
    for (strategy, name) in [
        (Strategy::Auto, "auto"),
        (Strategy::Fused, "fused"),
        (Strategy::MultiPass, "multipass"),
    ] {
        let start = Instant::now();
        let plan = FftPlan::with_strategy(
            ctx,
            &full,
            shape.len(),
            Direction::Forward,
            Normalization::None,
            &data,
            strategy,
        )?;
        let plan_ms = start.elapsed().as_secs_f64() * 1e3;
        let axes = plan.axis_plans();
        let passes: Vec<Vec<usize>> = axes
            .iter()
            .map(|p| p.passes().iter().map(|x| x.sub).collect())
            .collect();
        if strategy == Strategy::Auto {
            auto_passes = passes.clone();
        } else if axes.iter().any(|p| p.strategy() != strategy) {
            continue; // this strategy does not apply to these lengths
        }
        let sources: Vec<LaunchSource> = axes
            .iter()
            .flat_map(|p| p.passes().iter().map(|x| x.source))
            .collect();
        let launches_from = match sources.first() {
            Some(first) if sources.iter().all(|s| s == first) => match first {
                LaunchSource::Measured => "measured",
                LaunchSource::Cache => "cache",
                LaunchSource::Default => "default",
            },
            _ => "mixed",
        };
        let launches = axes
            .iter()
            .flat_map(|p| {
                p.passes()
                    .iter()
                    .map(|x| format!("{}: {}", x.sub, x.launch))
            })
            .collect();
        let mut times = Vec::new();
        let mut timing = "wall";
        for i in 0..=repeats {
            // Fresh input each time so repeated unnormalised transforms cannot overflow.
            ctx.write(&data, 0, &input);
            let (ms, how) = time_once(ctx, |rec| {
                plan.record(rec);
                Ok(())
            })?;
            if i > 0 {
                times.push(ms);
                timing = how;
            }
        }
        let ms = median(times);
        records.push(FftBenchRecord {
            shape: shape.to_vec(),
            batch,
            strategy: name,
            auto: passes == auto_passes,
            plan_ms,
            launches_from,
            launches,
            ms,
            gbps: 2.0 * (total * 8) as f64 / (ms * 1e6),
            copy_gbps,
            rustfft_ms,
            timing,
            device: ctx.info().name.clone(),
        });
    }
    Ok(records)
}

/// Prints every shape of [`fft_bench_shapes`], batched to about `bytes`, with each strategy:
/// the median of `repeats` timed transforms.
pub fn print(ctx: &GpuContext, json: bool, repeats: usize, bytes: u64) -> Result<(), BenchError> {
    let copy = copy_gbps(ctx, bytes, repeats.max(1))?;
    for shape in fft_bench_shapes() {
        for r in bench_fft_shape(ctx, &shape, bytes, repeats.max(1), copy)? {
            if json {
                print_json(&r)?;
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
