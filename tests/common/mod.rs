//! Shared test harness: the GPU context (tests opt in to software adapters, and say which adapter
//! they run on), seeded inputs and the FFT accuracy check.
#![allow(dead_code)] // each test binary uses a different subset

use std::sync::OnceLock;

use lamino::fft::{recipe, Direction, FftPlan, Normalization, Strategy};
use lamino::gpu::{DeviceOptions, DeviceSelection, GpuContext};
use lamino::reference::{fft_last_axes, max_relative_error, SplitMix64};
use num_complex::Complex;

/// A new context on the best adapter, software allowed (tests and CI opt in).
pub fn new_context() -> GpuContext {
    let ctx = GpuContext::new(&DeviceOptions {
        selection: DeviceSelection::Best,
        allow_software: true,
    })
    .unwrap_or_else(|e| panic!("GPU tests need an adapter (install mesa-vulkan-drivers): {e}"));
    eprintln!("GPU tests run on {}", ctx.info());
    ctx
}

/// One context shared by the tests of a binary.
pub fn ctx() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(new_context)
}

pub fn to_f64(x: &[Complex<f32>]) -> Vec<Complex<f64>> {
    x.iter()
        .map(|c| Complex::new(c.re as f64, c.im as f64))
        .collect()
}

/// Transforms the last `axes` axes of a random array of `shape` on the GPU and returns the
/// relative L-infinity error against rustfft in f64 divided by the accuracy bound (pass: <= 1).
pub fn fft_error_ratio(
    ctx: &GpuContext,
    shape: &[usize],
    axes: usize,
    direction: Direction,
    seed: u64,
) -> f64 {
    fft_error_ratio_with(ctx, shape, axes, direction, seed, Strategy::Auto)
}

/// [`fft_error_ratio`] with an explicit strategy.
pub fn fft_error_ratio_with(
    ctx: &GpuContext,
    shape: &[usize],
    axes: usize,
    direction: Direction,
    seed: u64,
    strategy: Strategy,
) -> f64 {
    let n: usize = shape.iter().product();
    let input = SplitMix64::new(seed).complex_uniform(n);
    let data = ctx.upload("test data", &input).unwrap();
    let plan = FftPlan::with_strategy(
        ctx,
        shape,
        axes,
        direction,
        Normalization::None,
        &data,
        strategy,
    )
    .unwrap();
    plan.execute(ctx).unwrap();
    let gpu = ctx.read(&data, 0, n).unwrap();
    let mut reference = to_f64(&input);
    fft_last_axes(&mut reference, shape, axes, direction, 2);
    let err = max_relative_error(&gpu, &reference);
    err / recipe::accuracy_bound(&shape[shape.len() - axes..])
}
