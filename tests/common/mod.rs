//! Shared test harness: the GPU context (tests opt in to software adapters, and say which adapter
//! they run on), seeded inputs, the FFT accuracy check, and the `lamino` binary as tests start it
//! (`process`).
#![allow(dead_code)] // each test binary uses a different subset

pub mod process;

use std::sync::OnceLock;

use lamino::fft::{recipe, Direction, FftPlan, Normalization, Strategy};
use lamino::gpu::{DeviceOptions, DeviceSelection, GpuContext};
use lamino::random::SplitMix64;
use lamino::reference::{fft_last_axes, max_relative_error};
use num_complex::Complex;

/// A new context on the best adapter, software allowed (tests and CI opt in).
pub fn new_context() -> GpuContext {
    let ctx = GpuContext::new(&DeviceOptions {
        selection: DeviceSelection::Best,
        allow_software: true,
        limits: None,
        backend: None,
    })
    .unwrap_or_else(|e| panic!("GPU tests need an adapter (install mesa-vulkan-drivers): {e}"));
    eprintln!("GPU tests run on {}", ctx.info());
    ctx
}

/// Writes a simulated scan to `path` with `lamino simulate`: a `phantom` of `size`^3 voxels,
/// `size` angles, 30 degree tilt, noiseless.
pub fn simulate_scan(path: &std::path::Path, phantom: &str, size: usize) {
    let size = size.to_string();
    let o = process::lamino_command()
        .args([
            "simulate",
            "--phantom",
            phantom,
            "--size",
            &size,
            "--angles",
            &size,
        ])
        .args(["--tilt-deg", "30", "--out"])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A chip scan of `size`^3 voxels and `size` angles at a 30 degree tilt with Poisson noise
/// (1e5 photons) and `seed`, as line integrals.
pub fn chip_projections(size: usize, seed: u64) -> lamino::scan::Projections {
    use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};
    let sim = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size,
        angles: size,
        tilt_deg: 30.0,
        photons: Some(1e5),
        seed,
        rotation_axis: None,
    })
    .unwrap();
    lamino::recon::input::projections_from_scan(std::path::Path::new("simulated"), sim.scan, None)
        .unwrap()
        .projections
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

/// 100 bytes: a little-endian TIFF header and one directory of seven entries claiming a single
/// uncompressed 2^30 x 2^30 float32 strip at offset 8.
pub fn huge_tiff() -> Vec<u8> {
    let mut b = b"II*\0".to_vec();
    b.extend(8u32.to_le_bytes());
    let entries: [(u16, u16, u32); 7] = [
        (256, 4, 1 << 30),  // ImageWidth, LONG
        (257, 4, 1 << 30),  // ImageLength
        (258, 3, 32),       // BitsPerSample, SHORT
        (262, 3, 1),        // PhotometricInterpretation: BlackIsZero
        (273, 4, 8),        // StripOffsets
        (279, 4, u32::MAX), // StripByteCounts
        (339, 3, 3),        // SampleFormat: IEEE float
    ];
    b.extend((entries.len() as u16).to_le_bytes());
    for (tag, kind, value) in entries {
        b.extend(tag.to_le_bytes());
        b.extend(kind.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        if kind == 3 {
            b.extend((value as u16).to_le_bytes());
            b.extend([0, 0]);
        } else {
            b.extend(value.to_le_bytes());
        }
    }
    b.extend(0u32.to_le_bytes()); // no next directory
    b.resize(100, 0);
    b
}

/// Pearson's correlation of two equally long arrays, accumulated in f64.
pub fn correlation(x: &[f32], y: &[f32]) -> f64 {
    let n = x.len() as f64;
    let mean = |v: &[f32]| v.iter().map(|&a| a as f64).sum::<f64>() / n;
    let (mx, my) = (mean(x), mean(y));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        let (a, b) = (*a as f64 - mx, *b as f64 - my);
        sxy += a * b;
        sxx += a * a;
        syy += b * b;
    }
    sxy / (sxx * syy).sqrt()
}
