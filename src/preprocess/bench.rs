//! Benchmarks of preprocessing (`lamino bench search`, `lamino bench stripes`): measured figures
//! and their extrapolation to a full-size scan.

use std::time::Instant;

use serde::Serialize;

use super::{candidate_range, grid, remove_stripes_in_place, score_candidates, PreprocessError};
use super::{Slab, StripeRemoval};
use crate::gpu::GpuContext;
use crate::scan::Projections;
use crate::simulate::{project, PhantomKind};

/// One size of the search benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct SearchBenchRecord {
    pub size: usize,
    pub angles: usize,
    pub slices: usize,
    pub candidates: usize,
    /// Seconds for one candidate (the rows' upload and filtering, and one slab).
    pub one_candidate_s: f64,
    /// Seconds for all candidates.
    pub all_candidates_s: f64,
    /// Seconds per extra candidate: (all - one) / (candidates - 1).
    pub per_candidate_s: f64,
    /// Voxel-angle interpolations per second of the extra candidates.
    pub interpolations_per_s: f64,
}

/// Times [`score_candidates`] on a simulated chip of side `size` (`angles` angles) with one and
/// with `candidates` candidates; the median of `repeats` runs each.
pub fn bench_search(
    ctx: &GpuContext,
    size: usize,
    angles: usize,
    candidates: usize,
    repeats: usize,
) -> Result<SearchBenchRecord, PreprocessError> {
    let g = crate::operator::Geometry::cube(size, angles, (90.0f64 + 30.0).to_radians());
    let values = project(&PhantomKind::Chip.build(size), &g);
    let p = Projections::new(g, values)?;
    let slab = Slab {
        slices: super::DEFAULT_SLAB_SLICES,
        z_offset: 0.0,
    };
    let centre = (size / 2) as f64;
    let axes = candidate_range(
        centre - 2.0,
        centre + 2.0,
        4.0 / (candidates.max(2) - 1) as f64,
    )?;
    let time = |axes: &[f64]| -> Result<f64, PreprocessError> {
        let mut t = Vec::new();
        for _ in 0..repeats.max(1) {
            let start = Instant::now();
            score_candidates(ctx, &p, 1, &grid(axes, &[30.0])?, &slab)?;
            t.push(start.elapsed().as_secs_f64());
        }
        t.sort_by(f64::total_cmp);
        Ok(t[t.len() / 2])
    };
    // Warm up the kernels' compilation.
    time(&axes[..1])?;
    let one = time(&axes[..1])?;
    let all = time(&axes)?;
    let per = (all - one) / (axes.len() - 1).max(1) as f64;
    Ok(SearchBenchRecord {
        size,
        angles,
        slices: slab.slices,
        candidates: axes.len(),
        one_candidate_s: one,
        all_candidates_s: all,
        per_candidate_s: per,
        interpolations_per_s: (slab.slices * size * size * angles) as f64 / per,
    })
}

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
