//! Criterion benchmarks of the GPU building blocks at small sizes: an FFT plan, the U1 and U2
//! gridding stages, one ADMM outer iteration and one BaSiC fit. They opt in to a software
//! adapter like the tests, so `cargo bench` runs on lavapipe; on such an adapter the figures
//! say how the code behaves, not how fast a GPU is. The user-facing figures are
//! `lamino bench ...`.
//!
//! Every measured closure submits its work and waits for it (`submit_and_wait`), so a sample is
//! the wall time of the whole recording.

use lamino::Tilt;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

use lamino::bench::OperatorArrays;
use lamino::fft::{Direction, FftPlan, Normalization};
use lamino::flatfield::synthetic::{generate, Synthetic};
use lamino::flatfield::{fit, BasicParams};
use lamino::geometry::Geometry;
use lamino::gpu::{DeviceOptions, DeviceSelection, GpuContext};
use lamino::operator::{Apply, LaminoOperator, OperatorOptions};
use lamino::params::AdmmParams;
use lamino::random::SplitMix64;
use lamino::solver::AdmmSolver;

fn context() -> GpuContext {
    let ctx = GpuContext::new(&DeviceOptions {
        selection: DeviceSelection::Best,
        allow_software: true,
        limits: None,
        backend: None,
    })
    .unwrap_or_else(|e| panic!("the benchmarks need an adapter (mesa-vulkan-drivers): {e}"));
    eprintln!("benchmarks run on {}", ctx.info());
    ctx
}

/// A batch of 32 complex 64 x 64 transforms over the last two axes, forward then inverse (the
/// round trip keeps the buffer's values from growing or vanishing over the samples), and a
/// Bluestein length (2D 61 x 61, prime) the same way.
fn fft_plans(c: &mut Criterion, ctx: &GpuContext) {
    for (name, shape) in [
        ("fft 32 x 64^2 forward + inverse", [32, 64, 64]),
        ("fft 32 x 61^2 forward + inverse (Bluestein)", [32, 61, 61]),
    ] {
        let input = SplitMix64::new(1).complex_uniform(shape.iter().product());
        let data = ctx.upload("bench fft data", &input).unwrap();
        let plan = |direction, normalization| {
            FftPlan::new(ctx, &shape, 2, direction, normalization, &data).unwrap()
        };
        let forward = plan(Direction::Forward, Normalization::None);
        let inverse = plan(Direction::Inverse, Normalization::ByLength);
        c.bench_function(name, |b| {
            b.iter(|| {
                let mut rec = ctx.recorder("bench fft");
                forward.record(&mut rec);
                inverse.record(&mut rec);
                ctx.submit_and_wait(rec).unwrap();
            })
        });
    }
}

/// The two gridding stages of the operator at 32^3, 32 angles, 20 degree tilt, forward and
/// adjoint.
fn gridding_stages(c: &mut Criterion, ctx: &GpuContext) {
    let g = Geometry::cube(32, 32, Tilt::from_degrees(20.0));
    let op = LaminoOperator::new(ctx, &g, &OperatorOptions::default()).unwrap();
    let arrays = OperatorArrays::new(ctx, &g).unwrap();
    for (name, what) in [
        ("U1 32^3", Apply::Usfft1d),
        ("U1* 32^3", Apply::Usfft1dAdjoint),
        ("U2 32^3", Apply::Usfft2d),
        ("U2* 32^3", Apply::Usfft2dAdjoint),
    ] {
        let application = arrays.application(ctx, &op, what).unwrap();
        c.bench_function(name, |b| {
            b.iter(|| {
                let mut rec = ctx.recorder("bench gridding");
                op.record(ctx, &mut rec, &application).unwrap();
                ctx.submit_and_wait(rec).unwrap();
            })
        });
    }
}

/// One outer ADMM-TV iteration with the default parameters at 16^3, 16 angles.
fn admm_iteration(c: &mut Criterion, ctx: &GpuContext) {
    let g = Geometry::cube(16, 16, Tilt::from_degrees(30.0));
    let mut rng = SplitMix64::new(3);
    let data: Vec<f32> = (0..g.data_len()).map(|_| rng.next_f64() as f32).collect();
    // Enough iterations for every sample criterion takes; the convergence test must not stop a
    // benchmark, so the count is fixed.
    let params = AdmmParams::exactly(100_000);
    let mut solver = AdmmSolver::new(ctx, &g, &data, params, &OperatorOptions::default()).unwrap();
    solver.step(ctx).unwrap(); // pays shader compilation outside the measurement
    c.bench_function("ADMM outer iteration 16^3", |b| {
        b.iter(|| solver.step(ctx).unwrap())
    });
}

/// One BaSiC fit (flat-field and dark-field) of 20 synthetic 32 x 32 images on a 32 x 32 working
/// grid: the default parameters but the grid (128 x 128 takes about a minute a fit on a
/// software adapter, and criterion takes ten).
fn basic_fit(c: &mut Criterion, ctx: &GpuContext) {
    let data = generate(&Synthetic {
        count: 20,
        height: 32,
        width: 32,
        blobs: 8,
        ..Synthetic::s1(5)
    });
    let params = BasicParams {
        working_size: 32,
        ..BasicParams::default()
    };
    c.bench_function("BaSiC fit 20 x 32^2", |b| {
        b.iter(|| fit(ctx, &data.stack, &params, |_| {}).unwrap())
    });
}

fn benches(c: &mut Criterion) {
    let ctx = context();
    fft_plans(c, &ctx);
    gridding_stages(c, &ctx);
    admm_iteration(c, &ctx);
    basic_fit(c, &ctx);
}

criterion_group! {
    name = gpu;
    // Few, short samples: a software adapter is slow, and these are small sizes.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(gpu);
