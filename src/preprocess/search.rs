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

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use super::binning::{bin_columns, bin_geometry_by};
use super::center_vo::{find_center_vo_of_sinogram, mean_sinogram};
use super::decision::{refine, AxisDecision, Scored, SearchResult, AXIS_NEAR_FOURIER};
use super::slab::{
    choose_slab, fitted_radius, footprint, pose, scale_slabs, sum_slabs, Candidate, Pose, Slab,
};
use super::{bin_projections, half_turn, PreprocessError};
use crate::distributed::Collective;
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::scan::Projections;

/// The default `--rotation-axis auto` range: the geometry's axis (the detector's centre column
/// unless set) plus or minus this fraction of the detector width.
pub const AUTO_AXIS_RANGE_FRACTION: f64 = 1.0 / 8.0;

/// The last step of `--rotation-axis auto` (pixels), before the parabolic refinement.
pub const AUTO_AXIS_FINE_STEP: f64 = 0.1;

/// The coarsest pass of `--rotation-axis auto` bins the detector until it is at most this wide
/// (at most 8 x), so that a step of one binned pixel covers the range in few candidates.
const AUTO_COARSE_WIDTH: usize = 256;

/// The finest pass of `--rotation-axis auto` bins the detector until it is at most this wide: a
/// slab's cost grows with the square of the width, and the parabola through a binned pass's
/// winner and its neighbours already places the axis to a fraction of a column (a 2 x 640
/// detector's search at full width took minutes on the software adapter).
const AUTO_FINE_WIDTH: usize = 320;

/// The most candidates one search scores, in one range and in the grid of both ranges: every
/// candidate holds a slab on the device and its read-back copy on the host, so the grid's count,
/// not each range's, sets the memory (see [`score_candidates`]).
pub const MAX_CANDIDATES: usize = 10_000;

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
    let limit = match ctx.device_budget() {
        Some(budget) => Some((budget, "the device budget (--max-device-memory)")),
        None => ctx.device_local_bytes().map(|b| (b, "the device's memory")),
    };
    if let Some((limit, whose)) = limit {
        if device > limit {
            return Err(PreprocessError::BadSearch(format!(
                "{what} needs {device} bytes of device memory for the slabs, more than \
                 {whose}, {limit} bytes; {advice}"
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
    score_held(ctx, &AllHere, projections, binning, candidates, slab)?
        .ok_or_else(|| PreprocessError::BadSearch("one process scores its own slabs".into()))
}

/// What every candidate's slab needs before its angles are summed: the poses, the scored
/// disc's radius and the detector rows the slab projects onto.
struct Prepared {
    poses: Vec<Pose>,
    radius: f64,
    rows: Range<usize>,
}

/// Checks a scoring pass (the candidates, the binning, the slab and the memory of its slabs)
/// and prepares it.
fn prepare(
    ctx: &GpuContext,
    g: &Geometry,
    binning: usize,
    candidates: &[Candidate],
    slab: &Slab,
) -> Result<Prepared, PreprocessError> {
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
        if !(c.rotation_axis.is_finite() && c.tilt_deg.abs() < 90.0) {
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
    Ok(Prepared {
        poses,
        radius,
        rows,
    })
}

/// [`score_candidates`] of the angles `holder` holds: every rank prepares and sums its angles,
/// and the scoring rank scores (`None` on the others).
fn score_held(
    ctx: &GpuContext,
    holder: &dyn Holder,
    projections: &Projections,
    binning: usize,
    candidates: &[Candidate],
    slab: &Slab,
) -> Result<Option<SearchResult>, PreprocessError> {
    let g = projections.geometry();
    let prepared = prepare(ctx, g, binning, candidates, slab);
    let voxels = slab.slices * g.n1 * g.n2;
    let here = prepared.as_ref().ok().map(|p| {
        move |start: Option<&[f32]>| {
            sum_slabs(ctx, projections, &p.poses, slab, p.rows.clone(), start)
        }
    });
    let sums = holder.sum_every_angle(
        candidates.len() * voxels,
        here.as_ref().map(|f| f as SumHere<'_>),
    );
    let prepared = prepared?;
    let Some(mut sums) = sums? else {
        return Ok(None);
    };
    scale_slabs(&mut sums, voxels, &prepared.poses);
    score_slabs(g, binning, candidates, slab, prepared.radius, &sums).map(Some)
}

/// The search's outcome from every candidate's slab (`slabs`: one after the other, scaled).
fn score_slabs(
    g: &Geometry,
    binning: usize,
    candidates: &[Candidate],
    slab: &Slab,
    radius: f64,
    slabs: &[f32],
) -> Result<SearchResult, PreprocessError> {
    let (n1, n2) = (g.n1, g.n2);
    let voxels = slab.slices * n1 * n2;
    let scored: Vec<Scored> = candidates
        .iter()
        .zip(slabs.chunks_exact(voxels))
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
        .chunks_exact(voxels)
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

/// The outcome of [`find_rotation_axis`]: the axis, how it was found and how sure it is, and
/// every pass's scores (not serialised: they go to their own file).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AxisSearch {
    /// The rotation axis (unbinned detector column), as [`AxisDecision`] decides it.
    pub rotation_axis: f64,
    /// What gave `rotation_axis` ([`AxisDecision::method`]).
    pub method: &'static str,
    /// Why, in words ([`AxisDecision::reason`]).
    pub reason: String,
    /// The slab search's axis (unbinned columns).
    pub slab_axis: f64,
    /// Vo et al.'s Fourier estimate ([`find_center_vo`](super::find_center_vo); unbinned
    /// columns) for plain CT scans over 180 or 360 degrees ([`half_turn`]), `None` otherwise.
    pub fourier_axis: Option<f64>,
    /// `|slab_axis - fourier_axis|` (unbinned columns): two independent methods agreeing to a
    /// fraction of a column is the strongest sign the axis is right.
    pub disagreement: Option<f64>,
    /// The slab search's confidence: the last pass's [`SearchResult::peak_half_width`]
    /// (columns).
    pub peak_half_width: Option<f64>,
    /// The slab of the last pass.
    pub slab: Slab,
    /// The range searched first (unbinned columns): the default range (the geometry's axis
    /// plus or minus [`AUTO_AXIS_RANGE_FRACTION`] of the width), or for plain CT the columns
    /// within [`AXIS_NEAR_FOURIER`] of the Fourier estimate in it.
    pub range: [f64; 2],
    /// Each pass of the slab search, coarse to fine.
    #[serde(skip)]
    pub passes: Vec<SearchResult>,
}

/// `--rotation-axis auto` (and Python's `find_rotation_axis`, the viewer's `auto`): the
/// rotation axis at `tilt_deg`, in unbinned columns. For a plain CT scan over 180 or 360
/// degrees Vo et al.'s Fourier estimate over the geometry's axis plus or minus
/// [`AUTO_AXIS_RANGE_FRACTION`] of the detector width comes first (the field's standard for CT;
/// see [`find_center_vo`](super::find_center_vo)), and the slab search runs within
/// [`AXIS_NEAR_FOURIER`] columns of it; otherwise the slab search covers that whole range.
/// The slab search goes coarse to fine on a binned detector: the sharpness peak is about one
/// searched pixel wide (a centre error of half a pixel already doubles edges one pixel apart),
/// so every pass steps half a searched pixel. The first pass bins the detector (by 2, 4 or 8)
/// until it is at most 256 pixels wide; each further pass halves the binning and searches two of
/// the previous steps either side of its winner, down to the binning that leaves the detector at
/// most [`AUTO_FINE_WIDTH`] wide, where a last pass searches one step either side with
/// [`AUTO_AXIS_FINE_STEP`] binned pixels and the parabola through the winner and its neighbours
/// gives the slab's axis. [`AxisDecision`] then chooses between the two estimates.
/// `binning` is the factor `projections` were already binned by; the result is in unbinned
/// columns. Every pass scores a slab of `slices` (`None`: chosen for that pass's binning by
/// [`choose_slab`]) centred `z_offset` voxels from the volume's centre. `cancel`, when set
/// (a stop signal, a window's Cancel), stops the search before its next pass with
/// [`PreprocessError::Cancelled`].
pub fn find_rotation_axis(
    ctx: &GpuContext,
    projections: &Projections,
    binning: usize,
    tilt_deg: f64,
    slices: Option<usize>,
    z_offset: f64,
    cancel: Option<&AtomicBool>,
) -> Result<AxisSearch, PreprocessError> {
    let (_, search, _) = search_held(
        ctx,
        &AllHere,
        projections,
        binning,
        tilt_deg,
        (slices, z_offset),
        cancel,
    )?;
    search.ok_or_else(|| PreprocessError::BadSearch("one process scores its own slabs".into()))
}

/// Sums one pass of the search over every angle: the angles' slab sums of
/// [`sum_slabs`](super::slab::sum_slabs) for the pass's candidates, one after the other.
/// `here(start)` sums the angles held here continuing `start` (`None`: this process could not
/// prepare the pass, and sums nothing).
type SumHere<'a> = &'a dyn Fn(Option<&[f32]>) -> Result<Vec<f32>, PreprocessError>;

/// Who holds the angles a search sums over: one process all of them ([`AllHere`]), or MPI ranks
/// each its share ([`OnRanks`]). Either way every slab voxel sums every angle in angle order, so
/// the axis has the bits of one process.
trait Holder {
    /// The sums over every angle (`words` values) where the slabs are scored, `None` elsewhere;
    /// an error where this process or one before it failed.
    fn sum_every_angle(
        &self,
        words: usize,
        here: Option<SumHere<'_>>,
    ) -> Result<Option<Vec<f32>>, PreprocessError>;

    /// The scoring process's `value` (NaN where it failed), on every process.
    fn tell(&self, value: f64) -> f64;

    /// Every process's `rows` (rows of a sinogram of its angles) in angle order, where the
    /// slabs are scored; `None` elsewhere.
    fn join_rows(&self, rows: Vec<f64>) -> Option<Vec<f64>>;
}

/// One process holding every angle.
struct AllHere;

impl Holder for AllHere {
    fn sum_every_angle(
        &self,
        _words: usize,
        here: Option<SumHere<'_>>,
    ) -> Result<Option<Vec<f32>>, PreprocessError> {
        here.map(|sum| sum(None)).transpose()
    }

    fn tell(&self, value: f64) -> f64 {
        value
    }

    fn join_rows(&self, rows: Vec<f64>) -> Option<Vec<f64>> {
        Some(rows)
    }
}

/// [`find_rotation_axis`] on the angles `holder` holds: every process sums its angles of each
/// pass, the scoring one scores and tells the others each pass's winner. Returns the axis on
/// every process, the search where it was scored, and the most projection values this process
/// held at once (its projections and, in a binned pass, their binned copy).
fn search_held(
    ctx: &GpuContext,
    holder: &dyn Holder,
    projections: &Projections,
    binning: usize,
    tilt_deg: f64,
    (slices, z_offset): (Option<usize>, f64),
    cancel: Option<&AtomicBool>,
) -> Result<(f64, Option<AxisSearch>, usize), PreprocessError> {
    // Every process stops where the scoring one saw the flag (an MPI rank stopping alone would
    // leave the others waiting for its sums).
    let cancelled = || {
        let mine = cancel.is_some_and(|c| c.load(Ordering::SeqCst));
        holder.tell(f64::from(u8::from(mine))) != 0.0
    };
    let g = projections.geometry();
    let b0 = binning.max(1) as f64;
    // The geometry's axis and the range, in unbinned columns.
    let centre = g.rotation_axis() * b0 + (b0 - 1.0) / 2.0;
    let half = AUTO_AXIS_RANGE_FRACTION * g.detw as f64 * b0;
    let range = [centre - half, centre + half];
    // Plain CT: the Fourier estimate first, and the slab search near it.
    let fourier_axis = match half_turn(g) {
        Some(rows) => {
            let binned = range.map(|c| (c - (b0 - 1.0) / 2.0) / b0);
            let axis = holder
                .join_rows(mean_sinogram(projections, rows))
                .map(|sino| find_center_vo_of_sinogram(g, &sino, binned));
            let mine = match &axis {
                Some(Ok(a)) => *a,
                _ => f64::NAN,
            };
            let told = holder.tell(mine);
            axis.transpose()?;
            Some(finite_or_failed(told)? * b0 + (b0 - 1.0) / 2.0)
        }
        None => None,
    };
    let (mut lo, mut hi) = match fourier_axis {
        Some(f) => (
            (f - AXIS_NEAR_FOURIER).max(range[0]),
            (f + AXIS_NEAR_FOURIER).min(range[1]),
        ),
        None => (range[0], range[1]),
    };
    let searched = [lo, hi];
    // Plain CT bins the columns alone: every detector row is a slice of its own, so a short
    // detector (2 rows) bins too, and the slab keeps its slices.
    let ct = fourier_axis.is_some();
    let factors = |extra: usize| if ct { [1, extra] } else { [extra, extra] };
    // The binnings of the first and the last pass (powers of two, at most 8).
    let binning_to = |width: usize| {
        let mut extra = 1usize;
        while extra < 8 && g.detw / (2 * extra) >= width {
            extra *= 2;
        }
        while extra > 1 && bin_geometry_by(g, factors(extra)).is_err() {
            extra /= 2;
        }
        extra
    };
    let finest = binning_to(AUTO_FINE_WIDTH);
    let mut extra = binning_to(AUTO_COARSE_WIDTH).max(finest);
    let mut held = projections.values().len();
    let mut passes = Vec::new();
    loop {
        let step = 0.5 * b0 * extra as f64;
        let binned;
        let source = if extra > 1 {
            binned = match ct {
                true => bin_columns(projections, extra)?,
                false => bin_projections(projections, extra)?,
            };
            held = held.max(projections.values().len() + binned.values().len());
            &binned
        } else {
            projections
        };
        let pass_binning = binning.max(1) * extra;
        let mut pass = |lo: f64, hi: f64, step: f64, value: fn(&SearchResult) -> f64| {
            if cancelled() {
                return Err(PreprocessError::Cancelled);
            }
            let axes = candidate_range(lo, hi + 1e-9 * step, step)?;
            let candidates = grid(&axes, &[tilt_deg])?;
            let slab = choose_slab(
                source.geometry(),
                pass_binning,
                &candidates,
                slices,
                z_offset,
            )?;
            told_pass(
                ctx,
                holder,
                source,
                pass_binning,
                (&candidates, &slab),
                &mut passes,
                value,
            )
        };
        let best = pass(lo, hi, step, |r| r.best.rotation_axis)?;
        if extra == finest {
            // The fine pass: one step either side of the winner, refined by the parabola.
            let fine = AUTO_AXIS_FINE_STEP * b0 * extra as f64;
            pass(best - step, best + step, fine, |r| r.refined.rotation_axis)?;
            break;
        }
        lo = best - 2.0 * step;
        hi = best + 2.0 * step;
        extra /= 2;
    }
    let last = passes.first().zip(passes.last()).map(|(window, l)| {
        let axis = l.refined.rotation_axis;
        let decision = AxisDecision::of(window, Some(axis), fourier_axis);
        (l.peak_half_width, l.slab, axis, decision)
    });
    // Every process takes the scoring process's decision.
    let axis =
        finite_or_failed(holder.tell(last.as_ref().map_or(f64::NAN, |l| l.3.rotation_axis)))?;
    let search = last.map(|(peak_half_width, slab, slab_axis, decision)| AxisSearch {
        rotation_axis: decision.rotation_axis,
        method: decision.method,
        reason: decision.reason,
        slab_axis,
        fourier_axis,
        disagreement: fourier_axis.map(|f| (f - slab_axis).abs()),
        peak_half_width,
        slab,
        range: searched,
        passes,
    });
    Ok((axis, search, held))
}

/// Scores one pass of `candidates` on `slab` (kept in `passes` where scored) and returns
/// `value` of its result as the scoring process tells it to every process.
fn told_pass(
    ctx: &GpuContext,
    holder: &dyn Holder,
    projections: &Projections,
    binning: usize,
    (candidates, slab): (&[Candidate], &Slab),
    passes: &mut Vec<SearchResult>,
    value: fn(&SearchResult) -> f64,
) -> Result<f64, PreprocessError> {
    let result = score_held(ctx, holder, projections, binning, candidates, slab);
    let mine = match &result {
        Ok(Some(r)) => value(r),
        _ => f64::NAN,
    };
    let told = holder.tell(mine);
    passes.extend(result?);
    finite_or_failed(told)
}

/// A value told by the scoring rank, or the error of its failure (NaN).
fn finite_or_failed(told: f64) -> Result<f64, PreprocessError> {
    if told.is_finite() {
        Ok(told)
    } else {
        Err(failed_elsewhere())
    }
}

/// The error of a rank whose search stopped because another rank's failed.
fn failed_elsewhere() -> PreprocessError {
    PreprocessError::BadSearch(
        "the axis search failed on another rank (its error is printed by it)".into(),
    )
}

/// What [`find_rotation_axis_on_ranks`] held on this rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AxisSearchShare {
    /// The angles whose sums this rank computed: its share.
    pub angles: Range<usize>,
    /// The most projection values it held at once: its share, and during a binned pass the
    /// share's binned copy.
    pub values_held: usize,
    /// The most slab values it held at once: the sums over the angles before its own as
    /// received, and its own continuation of them (each a pass's candidates x slab voxels).
    pub slab_values_held: usize,
}

/// [`find_rotation_axis`] on MPI ranks, each holding its share of the angles (`projections`,
/// contiguous, in rank order), none holding more. Every slab voxel's sum runs over the angles in
/// order, so the ranks take turns: the first sums its angles into every candidate's slab and
/// sends the sums to the second, which continues them with its angles, and so on; the last sends
/// the finished sums to the first, which scores them and tells every rank the pass's winner (one
/// double). The sums are those of one process, bit for bit, for any number of ranks. A rank
/// holds its share, its binned copy during a binned pass, and two passes' worth of slab sums
/// (the sums received and its continuation), what one process holds of them too. For a plain CT
/// scan each rank contributes the rows of Vo et al.'s mean sinogram of its angles (a row of
/// `detw` doubles per angle of the first half turn). Returns the axis (unbinned columns) on
/// every rank, the search on the first and what this rank held. Collective.
pub fn find_rotation_axis_on_ranks(
    ctx: &GpuContext,
    ranks: &dyn Collective,
    projections: &Projections,
    binning: usize,
    tilt_deg: f64,
    cancel: Option<&AtomicBool>,
) -> Result<(f64, Option<AxisSearch>, AxisSearchShare), PreprocessError> {
    let holder = OnRanks {
        ranks,
        slab_values_held: std::cell::Cell::new(0),
    };
    let (axis, search, held) = search_held(
        ctx,
        &holder,
        projections,
        binning,
        tilt_deg,
        (None, 0.0),
        cancel,
    )?;
    let share = AxisSearchShare {
        angles: projections.angles(),
        values_held: held,
        slab_values_held: holder.slab_values_held.get(),
    };
    Ok((axis, search, share))
}

/// MPI ranks each holding its share of the angles, in rank order; the first scores.
struct OnRanks<'a> {
    ranks: &'a dyn Collective,
    /// The most slab values held at once so far.
    slab_values_held: std::cell::Cell<usize>,
}

impl Holder for OnRanks<'_> {
    fn sum_every_angle(
        &self,
        words: usize,
        here: Option<SumHere<'_>>,
    ) -> Result<Option<Vec<f32>>, PreprocessError> {
        let (rank, size) = (self.ranks.rank(), self.ranks.size());
        // Sums of the wrong length (none) say that a rank before failed.
        let before = (rank > 0).then(|| self.ranks.receive_values(rank - 1));
        let mine = match (here, &before) {
            (None, _) => Ok(None),
            (Some(_), Some(b)) if b.len() != words => Err(failed_elsewhere()),
            (Some(sum), before) => sum(before.as_deref()).map(Some),
        };
        let held = before.as_ref().map_or(0, Vec::len) + words;
        self.slab_values_held
            .set(self.slab_values_held.get().max(held));
        drop(before);
        let sums = match &mine {
            Ok(Some(s)) => &s[..],
            _ => &[][..],
        };
        self.ranks.send_values((rank + 1) % size, sums);
        let summed = mine.map(|s| s.is_some());
        if rank != 0 {
            return summed.map(|_| None);
        }
        // The last rank's sums are received whatever happened here: it sends them anyway.
        let last = self.ranks.receive_values(size - 1);
        if !summed? {
            return Ok(None);
        }
        if last.len() != words {
            return Err(failed_elsewhere());
        }
        Ok(Some(last))
    }

    fn tell(&self, value: f64) -> f64 {
        f64::from_bits(self.ranks.all_gather_words(&[value.to_bits()])[0][0])
    }

    fn join_rows(&self, rows: Vec<f64>) -> Option<Vec<f64>> {
        let (rank, size) = (self.ranks.rank(), self.ranks.size());
        if rank != 0 {
            let words: Vec<u64> = rows.iter().map(|r| r.to_bits()).collect();
            self.ranks.send_words(0, &words);
            return None;
        }
        let mut all = rows;
        for r in 1..size {
            all.extend(self.ranks.receive_words(r).into_iter().map(f64::from_bits));
        }
        Some(all)
    }
}

#[cfg(test)]
mod tests;
