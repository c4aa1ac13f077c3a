//! Finding the rotation axis and the tilt of a real scan: a thin slab of the volume is
//! reconstructed for every candidate (axis column, tilt) and scored by its sharpness; the
//! sharpest candidate wins (tomocupy's `try` and `try_lamino`).
//!
//! **Scoring reconstruction** ([`super::slab`]). A filtered backprojection of a thin slab (at
//! most [`DEFAULT_SLAB_SLICES`](super::DEFAULT_SLAB_SLICES) slices around the volume's centre, as
//! many as the detector's rows hold, [`choose_slab`]): every detector row is filtered with the
//! ramp (the band-limited ramp kernel of Kak & Slaney, edge-padded to at least twice its
//! width, with the Shepp–Logan window), and each slab voxel sums, over all angles, the bilinearly
//! interpolated filtered value where its ray meets the detector, times `pi sin(phi) / ntheta`.
//! For laminography this is the exact filtered backprojection of the sampled Fourier planes: the
//! backprojection's transfer function is `sum over the two angles whose plane holds the frequency
//! of 1 / (sin(phi) |k_u|)`, so the ramp along detector rows and the factor `sin(phi)` invert it
//! (outside the missing cone). Without `sin(phi)` the slab's scale grows with the tilt and the
//! tilt search drifts to the edge of its range. It costs slab voxels x angles interpolations per
//! candidate, independent of the volume's height, and needs only the detector rows the slab
//! projects onto; its values are for comparing candidates, the reconstruction is ADMM-TV.
//!
//! **Score: gradient energy**, the mean of `|grad_xy f|^2` (forward differences in x and y) over
//! the slab's inscribed disc. With 360 degrees of data, an axis error `d` multiplies the slab's
//! spectrum by `cos(2 pi k d)` (the two views of each frequency disagree by the shift), so the
//! gradient energy of the whole slab is largest at the true axis; noise adds the same energy to
//! every candidate. A tilt error smears along z (by up to `|r| sin(phi)` times the error at radius
//! `r`), which blurs whatever varies along z. The disc is the whole slab, not only the voxels seen
//! at every angle for every candidate: measured on a 64^3 Shepp–Logan scan (axis 34.3), that
//! smaller disc left the skull outside, a wrong axis smeared it inwards, and the best candidate was
//! the range's edge; over the inscribed disc the winner was 34.5 (refined 34.33). The histogram
//! entropy of the slab (tomopy's `find_center`) found the axis too, but put the tilt of the same
//! scan at 27.5-28.5 degrees (true 25.3) where gradient energy gave 25.5.
//!
//! **Where the tilt shows.** A tilt error only moves rows (along z); at a mirror plane of the
//! sample (Shepp–Logan's equator) nothing varies along z and the tilt is invisible there to first
//! order: put the slab where the sample has layers ([`Slab::z_offset`]).
//!
//! Candidates' axes are columns of the unbinned detector (what `--rotation-axis` takes), tilts
//! are degrees (`phi = 90 + tilt`).

use serde::Serialize;

use super::slab::{
    backproject_slabs, choose_slab, fitted_radius, footprint, pose, Candidate, Pose, Slab,
};
use super::{bin_projections, find_center_vo, half_turn, PreprocessError};
use crate::gpu::GpuContext;
use crate::operator::Geometry;
use crate::scan::Projections;

/// The default `--rotation-axis auto` range: the geometry's axis (the detector's centre column
/// unless set) plus or minus this fraction of the detector width.
pub const AUTO_AXIS_RANGE_FRACTION: f64 = 1.0 / 8.0;

/// The last step of `--rotation-axis auto` (pixels), before the parabolic refinement.
pub const AUTO_AXIS_FINE_STEP: f64 = 0.1;

/// The coarsest pass of `--rotation-axis auto` bins the detector until it is at most this wide
/// (at most 8 x), so that a step of one binned pixel covers the range in few candidates.
const AUTO_COARSE_WIDTH: usize = 256;

/// The most candidates one search scores, in one range and in the grid of both ranges: every
/// candidate holds a slab on the device and its read-back copy on the host, so the grid's count,
/// not each range's, sets the memory (see [`score_candidates`]).
pub const MAX_CANDIDATES: usize = 10_000;

/// A candidate and its score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Scored {
    pub candidate: Candidate,
    /// Gradient energy of the slab (mean `|grad_xy f|^2` over its inscribed disc; larger is
    /// sharper).
    pub score: f64,
}

/// The scores of all candidates, the winner, and the central slice of every candidate's slab.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResult {
    pub scored: Vec<Scored>,
    /// The highest score.
    pub best: Candidate,
    /// The winner refined along each searched axis by the vertex of the parabola through it and
    /// its two neighbours (when it is not at the edge of its range); the best candidate otherwise.
    pub refined: Candidate,
    /// The confidence of the axis: how far (unbinned columns) from the peak the parabola the
    /// refinement fits through the winner and its neighbours falls to half the best score, i.e.
    /// `sqrt(score / -score'')` (`None` when the winner is at the edge of its range or not a
    /// strict maximum). A peak a column or less wide pins the axis down; a wide one (the
    /// score of neighbours differing by a fraction of a per cent) does not.
    pub peak_half_width: Option<f64>,
    /// The slab that was scored.
    pub slab: Slab,
    /// The detector binning the slabs were reconstructed at.
    pub binning: usize,
    /// Radius (voxels of the searched volume) of the disc the score is taken over.
    pub score_radius: f64,
    /// `(n1, n2)` of the preview slices.
    pub preview_shape: [usize; 2],
    /// The central slice of every candidate's slab, in the order of `scored`.
    #[serde(skip)]
    pub previews: Vec<Vec<f32>>,
}

/// `start, start + step, ...` up to `end` (inclusive, to within a millionth of a step).
pub fn candidate_range(start: f64, end: f64, step: f64) -> Result<Vec<f64>, PreprocessError> {
    if !(start.is_finite() && end.is_finite() && step.is_finite() && step > 0.0 && end >= start) {
        return Err(PreprocessError::BadSearch(format!(
            "range {start:?}:{end:?}:{step:?}: needs finite start <= end and a positive step"
        )));
    }
    // Counted in f64: a tiny step gives a count beyond usize (1e300, or infinity), which must
    // read as too many, not wrap to none. The checks above leave no NaN.
    let steps = ((end - start) / step + 1e-6).floor();
    if steps >= MAX_CANDIDATES as f64 {
        let count = if steps < 1e15 {
            format!("{}", steps as u64 + 1)
        } else {
            format!("about {:.1e}", steps)
        };
        return Err(PreprocessError::BadSearch(format!(
            "range {start:?}:{end:?}:{step:?} has {count} candidates, more than {MAX_CANDIDATES}: use \
             a larger step or a narrower range"
        )));
    }
    Ok((0..steps as usize + 1)
        .map(|i| start + i as f64 * step)
        .collect())
}

/// Refuses a grid of `axes x tilts` candidates beyond [`MAX_CANDIDATES`] (what [`grid`] checks,
/// for a caller that knows the counts before the values).
pub fn check_grid(axes: usize, tilts: usize) -> Result<(), PreprocessError> {
    match axes.checked_mul(tilts) {
        Some(count) if count <= MAX_CANDIDATES => Ok(()),
        _ => Err(PreprocessError::BadSearch(format!(
            "{axes} axes x {tilts} tilts is more than {MAX_CANDIDATES} candidates: use larger \
             steps or narrower ranges"
        ))),
    }
}

/// The candidates of the grid `axes x tilts`, axis fastest; at most [`MAX_CANDIDATES`].
pub fn grid(axes: &[f64], tilts: &[f64]) -> Result<Vec<Candidate>, PreprocessError> {
    check_grid(axes.len(), tilts.len())?;
    Ok(tilts
        .iter()
        .flat_map(|&tilt_deg| {
            axes.iter().map(move |&rotation_axis| Candidate {
                rotation_axis,
                tilt_deg,
            })
        })
        .collect())
}

/// Mean `|grad_xy f|^2` (forward differences) over the voxels of the disc of `radius` around
/// the axis whose forward neighbours lie in it too, over all slices; in f64.
fn gradient_energy(slab: &[f32], slices: usize, n1: usize, n2: usize, radius: f64) -> f64 {
    let inside = |y: usize, x: usize| {
        let (ry, rx) = (y as f64 - (n1 / 2) as f64, x as f64 - (n2 / 2) as f64);
        ry * ry + rx * rx <= radius * radius
    };
    let (mut sum, mut count) = (0.0f64, 0usize);
    for s in 0..slices {
        let f = |y: usize, x: usize| slab[(s * n1 + y) * n2 + x] as f64;
        for y in 0..n1 - 1 {
            for x in 0..n2 - 1 {
                if inside(y, x) && inside(y + 1, x) && inside(y, x + 1) {
                    let (dx, dy) = (f(y, x + 1) - f(y, x), f(y + 1, x) - f(y, x));
                    sum += dx * dx + dy * dy;
                    count += 1;
                }
            }
        }
    }
    sum / count.max(1) as f64
}

/// The vertex offset (in steps, within +-1/2) of the parabola through `(-1, a), (0, b), (1, c)`
/// when b is a strict maximum; 0 otherwise.
fn parabola_vertex(a: f64, b: f64, c: f64) -> f64 {
    let curvature = a - 2.0 * b + c;
    if curvature < 0.0 && b >= a && b >= c {
        (0.5 * (a - c) / curvature).clamp(-0.5, 0.5)
    } else {
        0.0
    }
}

/// Refuses up front a search whose slabs do not fit: every candidate's slab is held on the
/// device (against its budget, else the device-local memory it reports) and read back whole to
/// the host (against the memory available), with its central slice kept as a preview.
fn check_search_memory(
    ctx: &GpuContext,
    g: &Geometry,
    candidates: usize,
    slab: &Slab,
) -> Result<(), PreprocessError> {
    let slice = (g.n1 as u64)
        .checked_mul(g.n2 as u64)
        .and_then(|v| v.checked_mul(4));
    let slabs = slice.and_then(|s| {
        s.checked_mul(slab.slices as u64)?
            .checked_mul(candidates as u64)
    });
    let host = slabs
        .zip(slice)
        .and_then(|(slabs, s)| slabs.checked_add(s.checked_mul(candidates as u64)?));
    let what = format!(
        "scoring {candidates} candidates on slabs of {} x {} x {} voxels",
        slab.slices, g.n1, g.n2
    );
    let advice = "score fewer candidates, use fewer --slab-slices or bin the detector";
    crate::memory::check_available(&what, host.unwrap_or(u64::MAX), advice)?;
    let device = slabs.unwrap_or(u64::MAX);
    if let Some(limit) = ctx.device_budget().or(ctx.device_local_bytes()) {
        if device > limit {
            return Err(PreprocessError::BadSearch(format!(
                "{what} needs {device} bytes of device memory for the slabs, more than the \
                 device's {limit}; {advice}"
            )));
        }
    }
    Ok(())
}

/// Reconstructs and scores a thin slab of `projections` for every candidate. `binning` is the
/// factor the projections were binned by (1: none): candidates' axes are unbinned columns.
pub fn score_candidates(
    ctx: &GpuContext,
    projections: &Projections,
    binning: usize,
    candidates: &[Candidate],
    slab: &Slab,
) -> Result<SearchResult, PreprocessError> {
    let g = projections.geometry();
    if candidates.is_empty() {
        return Err(PreprocessError::BadSearch("no candidates to score".into()));
    }
    if binning == 0 {
        return Err(PreprocessError::BadBinning {
            factor: 0,
            reason: "the binning factor must be at least 1".into(),
        });
    }
    if slab.slices == 0 || slab.slices > g.n0 || !slab.z_offset.is_finite() {
        return Err(PreprocessError::BadSearch(format!(
            "a slab of {} slices at z offset {} does not fit a volume of {} slices",
            slab.slices, slab.z_offset, g.n0
        )));
    }
    for c in candidates {
        let phi = 90.0 + c.tilt_deg;
        if !(c.rotation_axis.is_finite() && phi > 0.0 && phi < 180.0) {
            return Err(PreprocessError::BadSearch(format!(
                "candidate axis {} / tilt {} deg: needs a finite axis and a tilt in (-90, 90)",
                c.rotation_axis, c.tilt_deg
            )));
        }
    }
    check_search_memory(ctx, g, candidates.len(), slab)?;
    let poses: Vec<Pose> = candidates.iter().map(|c| pose(c, binning)).collect();
    let radius = fitted_radius(g, slab, &poses)?;
    let (rows, _) = footprint(g, slab, &poses);
    let slabs = backproject_slabs(ctx, projections, &poses, slab, rows)?;
    let (n1, n2) = (g.n1, g.n2);
    let scored: Vec<Scored> = candidates
        .iter()
        .zip(&slabs)
        .map(|(&candidate, s)| Scored {
            candidate,
            score: gradient_energy(s, slab.slices, n1, n2, radius),
        })
        .collect();
    if let Some(bad) = scored.iter().find(|s| !s.score.is_finite()) {
        return Err(PreprocessError::BadSearch(format!(
            "the score of axis {} / tilt {} deg is {}",
            bad.candidate.rotation_axis, bad.candidate.tilt_deg, bad.score
        )));
    }
    let best_index = (0..scored.len())
        .max_by(|&a, &b| scored[a].score.total_cmp(&scored[b].score))
        .expect("at least one candidate");
    let best = scored[best_index].candidate;
    let (refined, peak_half_width) = refine(&scored, best_index);
    let middle = slab.slices / 2;
    let previews = slabs
        .iter()
        .map(|s| s[middle * n1 * n2..(middle + 1) * n1 * n2].to_vec())
        .collect();
    Ok(SearchResult {
        scored,
        best,
        refined,
        peak_half_width,
        slab: *slab,
        binning,
        score_radius: radius,
        preview_shape: [n1, n2],
        previews,
    })
}

/// The winner moved along each searched axis to the parabola's vertex through its neighbours
/// on that axis (equally spaced, same value on the other axis), and the half width of the peak
/// along the rotation axis (see [`SearchResult::peak_half_width`]).
fn refine(scored: &[Scored], best: usize) -> (Candidate, Option<f64>) {
    let b = scored[best].candidate;
    let mut out = b;
    let mut half_width = None;
    for along_axis in [true, false] {
        let coordinate = |c: &Candidate| {
            if along_axis {
                c.rotation_axis
            } else {
                c.tilt_deg
            }
        };
        let same_line = |c: &Candidate| {
            if along_axis {
                c.tilt_deg == b.tilt_deg
            } else {
                c.rotation_axis == b.rotation_axis
            }
        };
        let mut line: Vec<&Scored> = scored.iter().filter(|s| same_line(&s.candidate)).collect();
        line.sort_by(|x, y| coordinate(&x.candidate).total_cmp(&coordinate(&y.candidate)));
        let Some(i) = line.iter().position(|s| s.candidate == b) else {
            continue;
        };
        if i == 0 || i + 1 == line.len() {
            continue;
        }
        let (lo, hi) = (
            coordinate(&line[i - 1].candidate),
            coordinate(&line[i + 1].candidate),
        );
        let step = (hi - lo) / 2.0;
        if ((coordinate(&b) - lo) - step).abs() > 1e-9 * step.abs().max(1.0) {
            continue; // unequal spacing: no parabola
        }
        let (a, peak, c) = (line[i - 1].score, line[i].score, line[i + 1].score);
        let shift = step * parabola_vertex(a, peak, c);
        if along_axis {
            let curvature = (a - 2.0 * peak + c) / (step * step);
            if curvature < 0.0 && peak > 0.0 && peak >= a && peak >= c {
                half_width = Some((peak / -curvature).sqrt());
            }
            out.rotation_axis += shift;
        } else {
            out.tilt_deg += shift;
        }
    }
    (out, half_width)
}

/// The outcome of [`find_rotation_axis`]: the axis, how it was found and how sure it is, and
/// every pass's scores (not serialised: they go to their own file).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AxisSearch {
    /// The rotation axis (unbinned detector column): the Fourier estimate where there is one,
    /// else the slab search's.
    pub rotation_axis: f64,
    /// What gave `rotation_axis`: `"fourier"` (Vo et al., plain CT over 180 or 360 degrees) or
    /// `"slab"` (the sharpest slab).
    pub method: &'static str,
    /// The slab search's axis (unbinned columns).
    pub slab_axis: f64,
    /// Vo et al.'s Fourier estimate ([`find_center_vo`]; unbinned columns) for plain CT scans
    /// over 180 or 360 degrees ([`half_turn`]), `None` otherwise.
    pub fourier_axis: Option<f64>,
    /// `|slab_axis - fourier_axis|` (unbinned columns): two independent methods agreeing to a
    /// fraction of a column is the strongest sign the axis is right.
    pub disagreement: Option<f64>,
    /// The slab search's confidence: the last pass's [`SearchResult::peak_half_width`]
    /// (columns).
    pub peak_half_width: Option<f64>,
    /// The slab of the last pass.
    pub slab: Slab,
    /// The range searched first (unbinned columns).
    pub range: [f64; 2],
    /// Each pass of the slab search, coarse to fine.
    #[serde(skip)]
    pub passes: Vec<SearchResult>,
}

/// `--rotation-axis auto`: searches the rotation axis at `tilt_deg` over the geometry's axis plus
/// or minus [`AUTO_AXIS_RANGE_FRACTION`] of the detector width, coarse to fine. The sharpness
/// peak is about one searched pixel wide (a centre error of half a pixel already doubles edges
/// one pixel apart), so every pass steps half a searched pixel. The first pass bins the detector
/// (by 2, 4 or 8) until it is at most 256 pixels wide and covers the whole range; each further
/// pass halves the binning and searches two of the previous steps either side of its winner; a
/// last pass at the projections' own resolution searches half a pixel either side with
/// [`AUTO_AXIS_FINE_STEP`], and the parabola through the winner and its neighbours gives the axis.
/// For a plain CT scan over 180 or 360 degrees Vo et al.'s Fourier estimate over the same range
/// is computed too, and is the axis (the field's standard for CT; see [`find_center_vo`]); both
/// are returned, with their disagreement.
/// `binning` is the factor `projections` were already binned by; the result is in unbinned
/// columns. Every pass scores a slab of `slices` (`None`: chosen for that pass's binning by
/// [`choose_slab`]) centred `z_offset` voxels from the volume's centre.
pub fn find_rotation_axis(
    ctx: &GpuContext,
    projections: &Projections,
    binning: usize,
    tilt_deg: f64,
    slices: Option<usize>,
    z_offset: f64,
) -> Result<AxisSearch, PreprocessError> {
    let g = projections.geometry();
    let b0 = binning.max(1) as f64;
    // The geometry's axis and the range, in unbinned columns.
    let centre = g.rotation_axis() * b0 + (b0 - 1.0) / 2.0;
    let half = AUTO_AXIS_RANGE_FRACTION * g.detw as f64 * b0;
    let range = [centre - half, centre + half];
    let mut extra = 1usize;
    while extra < 8 && g.detw / (2 * extra) >= AUTO_COARSE_WIDTH {
        extra *= 2;
    }
    while extra > 1 && bin_projections(projections, extra).is_err() {
        extra /= 2;
    }
    let mut passes = Vec::new();
    let (mut lo, mut hi) = (range[0], range[1]);
    let mut step;
    loop {
        step = 0.5 * b0 * extra as f64;
        let binned;
        let source = if extra > 1 {
            binned = bin_projections(projections, extra)?;
            &binned
        } else {
            projections
        };
        let axes = candidate_range(lo, hi + 1e-9 * step, step)?;
        let candidates = grid(&axes, &[tilt_deg])?;
        let pass_binning = binning.max(1) * extra;
        let slab = choose_slab(
            source.geometry(),
            pass_binning,
            &candidates,
            slices,
            z_offset,
        )?;
        let result = score_candidates(ctx, source, pass_binning, &candidates, &slab)?;
        let best = result.best.rotation_axis;
        passes.push(result);
        if extra == 1 {
            break;
        }
        lo = best - 2.0 * step;
        hi = best + 2.0 * step;
        extra /= 2;
    }
    // The fine pass: one step of the last pass either side of its winner.
    let best = passes.last().expect("one pass").best.rotation_axis;
    let fine = AUTO_AXIS_FINE_STEP * b0;
    let axes = candidate_range(best - step, best + step + 1e-9 * fine, fine)?;
    let candidates = grid(&axes, &[tilt_deg])?;
    let slab = choose_slab(g, binning.max(1), &candidates, slices, z_offset)?;
    let result = score_candidates(ctx, projections, binning.max(1), &candidates, &slab)?;
    let slab_axis = result.refined.rotation_axis;
    let (peak_half_width, slab) = (result.peak_half_width, result.slab);
    passes.push(result);
    let fourier_axis = match half_turn(g) {
        Some(_) => {
            let binned = range.map(|c| (c - (b0 - 1.0) / 2.0) / b0);
            Some(find_center_vo(projections, binned)? * b0 + (b0 - 1.0) / 2.0)
        }
        None => None,
    };
    Ok(AxisSearch {
        rotation_axis: fourier_axis.unwrap_or(slab_axis),
        method: if fourier_axis.is_some() {
            "fourier"
        } else {
            "slab"
        },
        slab_axis,
        fourier_axis,
        disagreement: fourier_axis.map(|f| (f - slab_axis).abs()),
        peak_half_width,
        slab,
        range,
        passes,
    })
}

/// [`find_rotation_axis`] on MPI ranks, each holding its share of the angles (`projections`,
/// contiguous, in rank order): the first rank gathers the others' projections, searches, and
/// tells every rank the axis. One rank searches rather than each on its own copy: the search's
/// slabs sum over every angle, and only a sum over them in one order gives the bits of one
/// process; a search on detector rows split among the ranks would need those sums combined
/// across ranks, in another order. The first rank holds every angle while it searches (the
/// others only their share) and lets go of the others' afterwards. Returns the axis (unbinned
/// columns) on every rank and the search on the first. Collective.
#[cfg(feature = "mpi")]
pub fn find_rotation_axis_on_ranks(
    ctx: &GpuContext,
    ranks: &crate::distributed::ranks::Ranks,
    projections: &Projections,
    binning: usize,
    tilt_deg: f64,
) -> Result<(f64, Option<AxisSearch>), PreprocessError> {
    let g = projections.geometry();
    let search = match ranks.gather_to_first(projections.values()) {
        None => None,
        Some(others) => {
            let mut values = projections.values().to_vec();
            values.extend_from_slice(&others);
            drop(others);
            let whole = Projections::new(g.clone(), values)?;
            Some(find_rotation_axis(
                ctx, &whole, binning, tilt_deg, None, 0.0,
            ))
        }
    };
    // The first rank's axis, or NaN when its search failed: the others stop with its cause
    // given by the first rank, not with an axis of their own.
    let axis = match &search {
        Some(Ok(s)) => s.rotation_axis,
        _ => f64::NAN,
    };
    let told = f64::from_bits(ranks.all_gather_words(&[axis.to_bits()])[0][0]);
    let search = search.transpose()?;
    if !told.is_finite() {
        return Err(PreprocessError::BadSearch(
            "the first rank's axis search failed (its error is printed by it)".into(),
        ));
    }
    Ok((told, search))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_include_their_end_and_reject_nonsense() {
        assert_eq!(
            candidate_range(1.0, 2.0, 0.25).unwrap(),
            vec![1.0, 1.25, 1.5, 1.75, 2.0]
        );
        assert_eq!(candidate_range(3.0, 3.0, 1.0).unwrap(), vec![3.0]);
        assert!(candidate_range(0.0, 9_999.0, 1.0).unwrap().len() == MAX_CANDIDATES);
        for (a, b, s) in [
            (2.0, 1.0, 0.5),
            (0.0, 1.0, 0.0),
            (0.0, f64::NAN, 1.0),
            (0.0, 1e9, 1.0),
            (0.0, 1.0, 1e-300),
            (0.0, 10_000.0, 1.0),
        ] {
            assert!(matches!(
                candidate_range(a, b, s),
                Err(PreprocessError::BadSearch(_))
            ));
        }
    }

    #[test]
    fn the_grid_of_both_ranges_is_capped() {
        let axes = candidate_range(0.0, 999.0, 1.0).unwrap();
        assert!(grid(&axes, &[0.0; 10]).unwrap().len() == MAX_CANDIDATES);
        assert!(matches!(
            grid(&axes, &[0.0; 11]),
            Err(PreprocessError::BadSearch(m)) if m.contains("1000 axes x 11 tilts")
        ));
        assert!(check_grid(usize::MAX, 2).is_err());
    }

    #[test]
    fn the_parabola_finds_its_vertex() {
        // y = -(x - 0.3)^2 at -1, 0, 1.
        let y = |x: f64| -(x - 0.3) * (x - 0.3);
        assert!((parabola_vertex(y(-1.0), y(0.0), y(1.0)) - 0.3).abs() < 1e-12);
        assert_eq!(parabola_vertex(1.0, 0.0, 1.0), 0.0);
    }
}
