//! `lamino bench normal`: the normal operator `Re A*A` of the solver's inner loop by Toeplitz
//! embedding (one padded FFT convolution) against A then A* (gridding), on the solver's arrays,
//! in alternated pairs on the same device.

use std::time::Instant;

use serde::Serialize;

use super::{median, print_json, time_once, BenchError};
use crate::array::{Coef, Field, Scalars};
use crate::geometry::{Geometry, Tilt};
use crate::gpu::GpuContext;
use crate::operator::{
    Apply, LaminoOperator, OperatorOptions, Sink, Source, Space, ToeplitzNormal,
};
use crate::random::SplitMix64;

/// One line of `lamino bench normal --json`: one size.
#[derive(Debug, Clone, Serialize)]
pub struct NormalBenchRecord {
    /// Volume side n (n^3 voxels, n x n detector).
    pub size: usize,
    pub angles: usize,
    /// Median time of one Toeplitz application, milliseconds.
    pub toeplitz_ms: f64,
    /// Median time of A then A* (gridding), milliseconds.
    pub gridding_ms: f64,
    /// The median of the ratios of alternated pairs (Toeplitz, then A and A*): both see the same
    /// machine load.
    pub toeplitz_over_gridding: f64,
    /// Relative L2 difference of the two results on the same random volume.
    pub relative_difference: f64,
    /// Wall time to build the Toeplitz operator (its kernel by gridding on the doubled volume,
    /// its FFT and the plans), milliseconds: once per geometry.
    pub kernel_ms: f64,
    /// Device memory the Toeplitz operator holds (grid, spectrum, plans).
    pub toeplitz_device_bytes: u64,
    /// Device memory the gridding operator holds, besides the data-space array A's output
    /// needs (also counted: `data_bytes`).
    pub gridding_device_bytes: u64,
    pub data_bytes: u64,
    pub timing: &'static str,
    pub device: String,
}

/// Times the two normal operators of an `n`^3 volume with `angles` projections at a 20 degree
/// tilt, `repeats` alternated pairs.
pub fn bench_normal(
    ctx: &GpuContext,
    n: usize,
    angles: usize,
    repeats: usize,
) -> Result<NormalBenchRecord, BenchError> {
    let g = Geometry::cube(n, angles, Tilt::from_degrees(20.0));
    let options = OperatorOptions::default();
    let op = LaminoOperator::new(ctx, &g, &options)?;
    let start = Instant::now();
    let toeplitz = ToeplitzNormal::new(ctx, &g, &options, true)?;
    let kernel_ms = start.elapsed().as_secs_f64() * 1e3;
    let volume = |label| Field::zeros(ctx, label, Space::Volume.swapped_layout(&g, 1));
    let (input, by_toeplitz, by_gridding) = (volume("u")?, volume("T u")?, volume("A*A u")?);
    let data = Field::zeros(ctx, "A u", Space::Data.swapped_layout(&g, 2))?;
    let u: Vec<f32> = SplitMix64::new(1)
        .complex_uniform(g.volume_len())
        .iter()
        .map(|c| c.re)
        .collect();
    ctx.write(input.buffer(), 0, &u);
    let scalars = Scalars::new(ctx, 1, 1)?;
    let forward = op.application(
        ctx,
        &scalars,
        None,
        Apply::FourierForward,
        Source::Real(&input),
        Sink::Complex(&data),
    )?;
    let adjoint = op.application(
        ctx,
        &scalars,
        None,
        Apply::FourierAdjoint,
        Source::Complex(&data),
        Sink::Real {
            field: &by_gridding,
            scale: Coef::ONE,
            accumulate: false,
        },
    )?;
    let application = toeplitz.application(ctx, input.buffer(), by_toeplitz.buffer())?;
    let run_toeplitz = || {
        time_once(ctx, |rec| {
            toeplitz.record(rec, &application);
            Ok(())
        })
    };
    let run_gridding = || {
        time_once(ctx, |rec| {
            op.record(ctx, rec, &forward)?;
            op.record(ctx, rec, &adjoint)
        })
    };
    // Warm-up: compiles every pipeline.
    run_toeplitz()?;
    let (_, timing) = run_gridding()?;
    let (mut t, mut a, mut ratios) = (vec![], vec![], vec![]);
    for _ in 0..repeats.max(1) {
        let ms_t = run_toeplitz()?.0;
        let ms_a = run_gridding()?.0;
        t.push(ms_t);
        a.push(ms_a);
        ratios.push(ms_t / ms_a);
    }
    let read = |f: &Field| ctx.read::<f32>(f.buffer(), 0, g.volume_len());
    let (x, y) = (read(&by_toeplitz)?, read(&by_gridding)?);
    Ok(NormalBenchRecord {
        size: n,
        angles,
        toeplitz_ms: median(t),
        gridding_ms: median(a),
        toeplitz_over_gridding: median(ratios),
        relative_difference: crate::metrics::rel_l2(&x, &y),
        kernel_ms,
        toeplitz_device_bytes: toeplitz.device_bytes(),
        gridding_device_bytes: op.device_bytes(),
        data_bytes: data.layout().bytes(),
        timing,
        device: ctx.info().name.clone(),
    })
}

/// Prints one record per size (a line each, or JSON lines with `json`).
pub fn print(
    ctx: &GpuContext,
    json: bool,
    sizes: &[usize],
    repeats: usize,
) -> Result<(), BenchError> {
    for &n in sizes {
        let r = bench_normal(ctx, n, n, repeats)?;
        if json {
            print_json(&r)?;
        } else {
            println!(
                "{n}^3, {} angles: Toeplitz {:.1} ms, A then A* {:.1} ms, ratio {:.3} (median of \
                 {repeats} pairs), relative difference {:.2e}; kernel built in {:.0} ms; \
                 device memory {:.1} MiB against {:.1} MiB + {:.1} MiB of A u ({}, {})",
                r.angles,
                r.toeplitz_ms,
                r.gridding_ms,
                r.toeplitz_over_gridding,
                r.relative_difference,
                r.kernel_ms,
                r.toeplitz_device_bytes as f64 / (1 << 20) as f64,
                r.gridding_device_bytes as f64 / (1 << 20) as f64,
                r.data_bytes as f64 / (1 << 20) as f64,
                r.timing,
                r.device
            );
        }
    }
    Ok(())
}
