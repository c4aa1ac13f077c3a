//! `lamino bench flatfield`: fit time at production parameters for synthetic stacks (recipe of
//! docs/flatfield-method.md, "Synthetic stacks"), transform throughput, each against the f64 CPU
//! oracle, and peak memory.

use std::time::Instant;

use serde::Serialize;

use super::{host_peak_bytes, print_json, BenchError};
use crate::flatfield::synthetic::{Images, Synthetic};
use crate::flatfield::{
    fit_prepared, fit_prepared_oracle, transform_cpu, BasicParams, FlatfieldError, Pixels,
    Preprocessor, Stack, TransformParams, TransformPlan,
};
use crate::gpu::GpuContext;

/// One benchmark figure.
#[derive(Debug, Clone, Serialize)]
pub struct FlatfieldBenchRecord {
    /// `fit` or `transform`.
    pub what: &'static str,
    /// The synthetic stack (docs/flatfield-method.md, "Synthetic stacks"): `S1` (vignette,
    /// dark-field, sparse objects) or `S2` (S1 without a dark-field).
    pub stack: &'static str,
    pub images: usize,
    pub height: usize,
    pub width: usize,
    /// GPU seconds (fit: resampling on the host plus the GPU solve; transform: upload, kernel,
    /// readback).
    pub gpu_s: f64,
    /// The f64 CPU oracle's seconds for the same work, when measured.
    pub cpu_s: Option<f64>,
    /// `cpu_s / gpu_s`.
    pub speedup: Option<f64>,
    /// Transform only: images per second on the GPU and on the CPU.
    pub gpu_images_per_s: Option<f64>,
    pub cpu_images_per_s: Option<f64>,
    /// Fit only: ALM iterations over all solves, and solves (reweighting rounds).
    pub iterations: Option<usize>,
    pub solves: Option<usize>,
    /// Fit only: ALM iterations and rounds of the baseline re-fit (element passes only).
    pub baseline_iterations: Option<usize>,
    pub baseline_rounds: Option<usize>,
    /// Device memory the plan allocated, in bytes.
    pub device_bytes: u64,
    /// Peak resident host memory of the process so far (VmHWM), in bytes, when the OS reports it.
    pub host_peak_bytes: Option<u64>,
    pub device: String,
}

/// Device bytes of a fit plan for `n` images on a `size`² grid: D, E, Y, Ω plus the vectors and
/// the DCT matrix (mirrors `GpuSolver::new`).
pub fn fit_device_bytes(n: usize, size: usize) -> u64 {
    let m = size * size;
    (4 * n * m * 4 + (2 * n + 6 * m + 24 + 4 * n) * 4 + 2 * m * 4) as u64
}

/// Fit benchmark on S1: `count` synthetic images of `side`² resampled to the working grid,
/// fitted on the GPU and, when `with_cpu`, by the oracle.
pub fn bench_fit(
    ctx: &GpuContext,
    count: usize,
    side: usize,
    with_cpu: bool,
) -> Result<FlatfieldBenchRecord, FlatfieldError> {
    bench_fit_stack(ctx, count, side, true, with_cpu)
}

/// [`bench_fit`] on S1 (`darkfield`) or S2 (S1 without a dark-field, where the reweighting
/// stop of issue 15 saves the most rounds).
pub fn bench_fit_stack(
    ctx: &GpuContext,
    count: usize,
    side: usize,
    darkfield: bool,
    with_cpu: bool,
) -> Result<FlatfieldBenchRecord, FlatfieldError> {
    let params = BasicParams::default();
    let spec = Synthetic {
        count,
        height: side,
        width: side,
        blobs: (40 * side * side).div_ceil(256 * 256),
        darkfield,
        ..Synthetic::s1(17)
    };
    // Rendering the images is not timed; resampling them is part of the fit.
    let mut pre = Preprocessor::new(side, side, params.working_size)?;
    let mut resample_s = 0.0;
    for image in Images::new(&spec) {
        let t = Instant::now();
        pre.push(&image)?;
        resample_s += t.elapsed().as_secs_f64();
    }
    let t = Instant::now();
    let prepared = pre.finish(&params)?;
    resample_s += t.elapsed().as_secs_f64();
    let t = Instant::now();
    let gpu = fit_prepared(ctx, &prepared, side, side, &params, |_| {})?;
    let gpu_s = resample_s + t.elapsed().as_secs_f64();
    let cpu_s = if with_cpu {
        let t = Instant::now();
        fit_prepared_oracle(&prepared, side, side, &params)?;
        Some(resample_s + t.elapsed().as_secs_f64())
    } else {
        None
    };
    Ok(FlatfieldBenchRecord {
        what: "fit",
        stack: if darkfield { "S1" } else { "S2" },
        images: count,
        height: side,
        width: side,
        gpu_s,
        cpu_s,
        speedup: cpu_s.map(|c| c / gpu_s),
        gpu_images_per_s: None,
        cpu_images_per_s: None,
        iterations: Some(gpu.report.solves.iter().map(|s| s.iterations).sum()),
        solves: Some(gpu.report.reweighting_rounds),
        baseline_iterations: Some(
            gpu.report
                .baseline_solves
                .iter()
                .map(|s| s.iterations)
                .sum(),
        ),
        baseline_rounds: Some(gpu.report.baseline_solves.len()),
        device_bytes: fit_device_bytes(count, params.working_size),
        host_peak_bytes: host_peak_bytes(),
        device: ctx.info().to_string(),
    })
}

/// Transform throughput: `count` images of `side`² through one GPU plan (in its batches), and
/// through the CPU reference.
pub fn bench_transform(
    ctx: &GpuContext,
    count: usize,
    side: usize,
) -> Result<FlatfieldBenchRecord, FlatfieldError> {
    let spec = Synthetic {
        count: 1,
        height: side,
        width: side,
        ..Synthetic::s1(23)
    };
    let image = Images::new(&spec)
        .next()
        .expect("the recipe renders one image");
    let px = side * side;
    let fields = crate::flatfield::Fields {
        height: side,
        width: side,
        flatfield: crate::flatfield::synthetic::truth(&spec)
            .0
            .iter()
            .map(|&v| v as f32)
            .collect(),
        darkfield: vec![100.0; px],
        baseline: vec![],
    };
    let params = TransformParams::default();
    let plan = TransformPlan::new(ctx, &fields, &params)?;
    let batch: Vec<f32> = (0..plan.batch().min(count))
        .flat_map(|_| image.iter().copied())
        .collect();
    // One warm-up batch pays for pipeline creation.
    plan.apply(&batch)?;
    let t = Instant::now();
    let mut done = 0;
    while done < count {
        let n = plan.batch().min(count - done);
        plan.apply(&batch[..n * px])?;
        done += n;
    }
    let gpu_s = t.elapsed().as_secs_f64();
    let one = Stack::new(1, side, side, Pixels::F32(image))?;
    let t = Instant::now();
    for _ in 0..count {
        std::hint::black_box(transform_cpu(&one, &fields, &params));
    }
    let cpu_s = t.elapsed().as_secs_f64();
    Ok(FlatfieldBenchRecord {
        what: "transform",
        stack: "S1",
        images: count,
        height: side,
        width: side,
        gpu_s,
        cpu_s: Some(cpu_s),
        speedup: Some(cpu_s / gpu_s),
        gpu_images_per_s: Some(count as f64 / gpu_s),
        cpu_images_per_s: Some(count as f64 / cpu_s),
        iterations: None,
        solves: None,
        baseline_iterations: None,
        baseline_rounds: None,
        device_bytes: (plan.batch() * px * 4 + 2 * px * 4) as u64,
        host_peak_bytes: host_peak_bytes(),
        device: ctx.info().to_string(),
    })
}

/// Prints the fits (100 and 1000 images of 128x128, 100 of 2048x2048) and the transform
/// throughput at 2048x2048; `no_slow_oracle` skips the oracle of the 1000-image fit.
pub fn print(ctx: &GpuContext, json: bool, no_slow_oracle: bool) -> Result<(), BenchError> {
    let runs: Vec<Box<dyn Fn() -> Result<_, FlatfieldError>>> = vec![
        Box::new(|| bench_fit(ctx, 100, 128, true)),
        // S2 (no dark-field): where the reweighting stop of issue 15 saves the most rounds.
        Box::new(|| bench_fit_stack(ctx, 100, 128, false, true)),
        Box::new(|| bench_fit(ctx, 1000, 128, !no_slow_oracle)),
        Box::new(|| bench_fit(ctx, 100, 2048, true)),
        Box::new(|| bench_transform(ctx, 100, 2048)),
    ];
    for run in runs {
        let r = run()?;
        if json {
            print_json(&r)?;
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
