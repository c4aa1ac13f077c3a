//! `lamino bench stripes`: stripe removal on the CPU cores, seconds per sinogram for each
//! method.

use std::time::Instant;

use serde::Serialize;

use super::{print_json, BenchError};
use crate::preprocess::{remove_stripes_in_place, PreprocessError, StripeRemoval};

/// One method of the stripe-removal benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct StripeBenchRecord {
    pub method: StripeRemoval,
    pub angles: usize,
    pub width: usize,
    pub rows: usize,
    pub threads: usize,
    pub seconds: f64,
    /// Seconds per sinogram and thread (seconds x threads / rows).
    pub sinogram_thread_s: f64,
}

/// Times stripe removal on `rows` sinograms of `angles x width` (random content) with each of
/// `methods`, on all cores. Wall-clock time: on a shared machine, compare with the process's CPU
/// time.
pub fn bench_stripes(
    angles: usize,
    width: usize,
    rows: usize,
    methods: &[StripeRemoval],
) -> Result<Vec<StripeBenchRecord>, PreprocessError> {
    let mut rng = crate::random::SplitMix64::new(1);
    let values: Vec<f32> = (0..angles * rows * width)
        .map(|_| rng.next_f64() as f32)
        .collect();
    let threads = rayon::current_num_threads();
    let mut out = Vec::new();
    for &method in methods {
        let mut v = values.clone();
        let start = Instant::now();
        remove_stripes_in_place(&mut v, [angles, rows, width], method)?;
        let seconds = start.elapsed().as_secs_f64();
        out.push(StripeBenchRecord {
            method: method.resolved(width),
            angles,
            width,
            rows,
            threads,
            seconds,
            sinogram_thread_s: seconds * threads as f64 / rows as f64,
        });
    }
    Ok(out)
}

/// Prints [`bench_stripes`] for each of `methods`.
pub fn print(
    json: bool,
    angles: usize,
    width: usize,
    rows: usize,
    methods: &[StripeRemoval],
) -> Result<(), BenchError> {
    for r in bench_stripes(angles, width, rows, methods)? {
        if json {
            print_json(&r)?;
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
