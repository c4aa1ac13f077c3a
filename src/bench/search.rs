//! `lamino bench search`: the axis/tilt search (`lamino try`) on simulated chips, the time per
//! candidate and the interpolation rate, and their extrapolation to a full-size scan.

use std::time::Instant;

use serde::Serialize;

use super::{print_json, BenchError};
use crate::geometry::Tilt;
use crate::gpu::GpuContext;
use crate::preprocess::{
    candidate_range, grid, score_candidates, PreprocessError, Slab, DEFAULT_SLAB_SLICES,
};
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
    let g = crate::geometry::Geometry::cube(size, angles, Tilt::from_degrees(30.0));
    let values = project(&PhantomKind::Chip.build(size), &g);
    let p = Projections::new(g, values)?;
    let slab = Slab {
        slices: DEFAULT_SLAB_SLICES,
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

/// Prints [`bench_search`] for each of `sizes` (3n/2 angles), then what the last rate gives for
/// a 2048^2 x 1500-angle scan at binning 1, 2 and 4.
pub fn print(
    ctx: &GpuContext,
    json: bool,
    sizes: &[usize],
    candidates: usize,
    repeats: usize,
) -> Result<(), BenchError> {
    let mut rate = 0.0;
    for &size in sizes {
        let r = bench_search(ctx, size, 3 * size / 2, candidates, repeats)?;
        rate = r.interpolations_per_s;
        if json {
            print_json(&r)?;
        } else {
            println!(
                "n={} angles={} slab {}: 1 candidate {:.3} s, {} candidates {:.3} s, {:.4} s per \
                 extra candidate ({:.3e} voxel-angle interpolations/s)",
                r.size,
                r.angles,
                r.slices,
                r.one_candidate_s,
                r.candidates,
                r.all_candidates_s,
                r.per_candidate_s,
                r.interpolations_per_s
            );
        }
    }
    if !json && rate > 0.0 {
        for b in [1usize, 2, 4] {
            let n = 2048 / b;
            let work = (DEFAULT_SLAB_SLICES * n * n * 1500) as f64;
            println!(
                "2048^2 x 1500 angles at binning {b}: {:.3e} interpolations per candidate, {:.2} s \
                 per candidate at this device's rate",
                work,
                work / rate
            );
        }
    }
    Ok(())
}
