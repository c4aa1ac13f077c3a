//! Finding the rotation axis and the tilt of a real scan: a thin slab of the volume is
//! reconstructed for every candidate (axis column, tilt) and scored by its sharpness; the
//! sharpest candidate wins (tomocupy's `try` and `try_lamino`).
//!
//! **Scoring reconstruction.** A filtered backprojection of a thin slab (at most
//! [`DEFAULT_SLAB_SLICES`] slices around the volume's centre, as many as the detector's rows
//! hold, [`choose_slab`]): every detector row is filtered with
//! the ramp (the band-limited ramp kernel of Kak & Slaney, edge-padded to at least twice its
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

use std::f64::consts::PI;
use std::ops::Range;

use bytemuck::{Pod, Zeroable};
use rustfft::num_complex::Complex;
use serde::Serialize;

use super::{bin_projections, find_center_vo, half_turn, PreprocessError};
use crate::fft::{Direction, FftPlan, Normalization};
use crate::gpu::{Bound, GpuBuffer, GpuContext, KernelSpec, Recorder};
use crate::operator::Geometry;
use crate::scan::Projections;
use crate::shaders;

/// The most slices a chosen scoring slab has (voxels of the searched volume); see [`choose_slab`].
pub const DEFAULT_SLAB_SLICES: usize = 8;

/// The smallest radius (voxels) of the scored disc: a smaller disc holds too few voxels for the
/// gradient energy to say anything.
const MIN_SCORE_RADIUS: f64 = 2.0;

/// The default `--rotation-axis auto` range: the geometry's axis (the detector's centre column
/// unless set) plus or minus this fraction of the detector width.
pub const AUTO_AXIS_RANGE_FRACTION: f64 = 1.0 / 8.0;

/// The last step of `--rotation-axis auto` (pixels), before the parabolic refinement.
pub const AUTO_AXIS_FINE_STEP: f64 = 0.1;

/// The coarsest pass of `--rotation-axis auto` bins the detector until it is at most this wide
/// (at most 8 x), so that a step of one binned pixel covers the range in few candidates.
const AUTO_COARSE_WIDTH: usize = 256;

const WORKGROUP: u32 = 64;

/// The most candidates one search scores, in one range and in the grid of both ranges: every
/// candidate holds a slab on the device and its read-back copy on the host, so the grid's count,
/// not each range's, sets the memory (see [`score_candidates`]).
pub const MAX_CANDIDATES: usize = 10_000;

fn groups(threads: u64) -> u32 {
    threads.div_ceil(WORKGROUP as u64) as u32
}

/// The thin slab that is reconstructed and scored.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Slab {
    /// Number of slices (z voxels of the searched volume).
    pub slices: usize,
    /// The slab's centre relative to the volume's centre along z (voxels of the searched volume).
    pub z_offset: f64,
}

impl Slab {
    /// z (voxels from the volume centre) of the first slice.
    fn z_first(&self) -> f64 {
        (self.z_offset - (self.slices / 2) as f64).round()
    }
}

/// One candidate geometry: the rotation axis (unbinned detector column) and the tilt (degrees).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Candidate {
    pub rotation_axis: f64,
    pub tilt_deg: f64,
}

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

/// A candidate in the searched geometry's units: axis column (binned), cos and sin of phi.
#[derive(Debug, Clone, Copy)]
struct Pose {
    center: f64,
    cos_phi: f64,
    sin_phi: f64,
}

fn pose(c: &Candidate, binning: usize) -> Pose {
    let b = binning as f64;
    let phi = (90.0 + c.tilt_deg).to_radians();
    Pose {
        center: (c.rotation_axis - (b - 1.0) / 2.0) / b,
        cos_phi: phi.cos(),
        sin_phi: phi.sin(),
    }
}

/// The detector rows the slab projects onto for any of `poses` (with a one-row margin for the
/// interpolation), and the radius of the scored disc: the disc inscribed in the slab, reduced
/// where rays of its voxels would leave the detector's rows.
fn footprint(g: &Geometry, slab: &Slab, poses: &[Pose]) -> (Range<usize>, f64) {
    let z_lo = slab.z_first();
    let z_hi = z_lo + slab.slices as f64 - 1.0;
    let half = [(g.n1 / 2) as f64, (g.n2 / 2) as f64];
    let r_max = (half[0] * half[0] + half[1] * half[1]).sqrt();
    let origin = (g.deth / 2) as f64;
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut radius = half[0].min(half[1]) - 1.0;
    for p in poses {
        let spread = p.cos_phi.abs() * r_max;
        let zs = [z_lo * p.sin_phi, z_hi * p.sin_phi];
        lo = lo.min(zs[0].min(zs[1]) - spread + origin);
        hi = hi.max(zs[0].max(zs[1]) + spread + origin);
        // Rows: |r.e2 - z sin phi| <= r |cos phi| must stay within [0, deth - 1]. No margin
        // beyond: the bilinear weight of a neighbour off the detector vanishes on its last row,
        // so at tilt 0 one slice per row fits (a 2-row detector holds a 2-slice slab).
        let room = (origin + zs[0].min(zs[1])).min(g.deth as f64 - 1.0 - origin - zs[0].max(zs[1]));
        if room < 0.0 {
            radius = radius.min(room); // the slab itself is off the detector
        } else if p.cos_phi.abs() > 1e-12 {
            radius = radius.min(room / p.cos_phi.abs());
        }
    }
    let first = (lo.floor() - 1.0).max(0.0) as usize;
    let last = ((hi.ceil() + 2.0).max(0.0) as usize).min(g.deth);
    (first.min(last)..last, radius)
}

/// The radius of the disc scored on `slab` for `poses`, or why the slab does not fit: in the
/// user's terms, with the thickest slab that would fit.
fn fitted_radius(g: &Geometry, slab: &Slab, poses: &[Pose]) -> Result<f64, PreprocessError> {
    let (_, radius) = footprint(g, slab, poses);
    if radius >= MIN_SCORE_RADIUS {
        Ok(radius)
    } else {
        Err(misfit(g, slab, poses))
    }
}

/// Why `slab` does not fit (see [`fitted_radius`]).
fn misfit(g: &Geometry, slab: &Slab, poses: &[Pose]) -> PreprocessError {
    let fits = |slices: usize| footprint(g, &Slab { slices, ..*slab }, poses).1 >= MIN_SCORE_RADIUS;
    let rows = g.deth;
    PreprocessError::BadSearch(match (1..slab.slices).rev().find(|&k| fits(k)) {
        Some(k) => format!(
            "a slab of {} slices at z offset {} leaves the detector at some angle for some \
                 candidate: the detector has {rows} rows; use --slab-slices {k} or fewer",
            slab.slices, slab.z_offset
        ),
        None => format!(
            "even a slab of one slice at z offset {} leaves the detector at some angle for \
                 some candidate (the detector has {rows} rows): move --slab-z towards 0 or \
                 narrow the tilt range",
            slab.z_offset
        ),
    })
}

/// The slab of the search of `candidates` on projections of geometry `g` (binned by `binning`)
/// centred at `z_offset`: `slices` when given (refused when it leaves the detector), else chosen
/// from the geometry: of 1 to [`DEFAULT_SLAB_SLICES`] slices (and at most the volume's), the one
/// whose scored disc holds the most voxels (the thicker on a tie). At tilt 0 every slice is a
/// complete CT slice and the thickest that the rows hold wins; at small tilts a thick slab
/// leaves the rows of a short detector (or keeps only a small disc on it) and a thinner one wins.
pub fn choose_slab(
    g: &Geometry,
    binning: usize,
    candidates: &[Candidate],
    slices: Option<usize>,
    z_offset: f64,
) -> Result<Slab, PreprocessError> {
    let poses: Vec<Pose> = candidates.iter().map(|c| pose(c, binning.max(1))).collect();
    if let Some(slices) = slices {
        let slab = Slab { slices, z_offset };
        fitted_radius(g, &slab, &poses)?;
        return Ok(slab);
    }
    let mut best: Option<(f64, Slab)> = None;
    for slices in 1..=DEFAULT_SLAB_SLICES.min(g.n0.max(1)) {
        let slab = Slab { slices, z_offset };
        let (_, radius) = footprint(g, &slab, &poses);
        let voxels = slices as f64 * radius * radius;
        if radius >= MIN_SCORE_RADIUS && best.is_none_or(|(v, _)| voxels >= v) {
            best = Some((voxels, slab));
        }
    }
    match best {
        Some((_, slab)) => Ok(slab),
        None => Err(misfit(
            g,
            &Slab {
                slices: 1,
                z_offset,
            },
            &poses,
        )),
    }
}

/// The ramp filter's response for rows padded to `pitch` (FFT order), with the backprojection's
/// scale `pi / ntheta` and the inverse FFT's `1 / pitch` folded in: the DFT of the band-limited
/// ramp kernel `h(0) = 1/4, h(n odd) = -1/(pi n)^2, h(n even) = 0` (circularly), times the
/// Shepp–Logan window `sinc(f)`, f in cycles per pixel.
fn ramp_response(pitch: usize, ntheta: usize) -> Vec<f64> {
    let mut h: Vec<Complex<f64>> = (0..pitch)
        .map(|n| {
            let d = n.min(pitch - n);
            let v = if d == 0 {
                0.25
            } else if d % 2 == 1 {
                -1.0 / (PI * d as f64).powi(2)
            } else {
                0.0
            };
            Complex::new(v, 0.0)
        })
        .collect();
    rustfft::FftPlanner::new()
        .plan_fft_forward(pitch)
        .process(&mut h);
    let scale = PI / ntheta as f64 / pitch as f64;
    h.iter()
        .enumerate()
        .map(|(k, v)| {
            let f = if k <= pitch / 2 {
                k as f64
            } else {
                k as f64 - pitch as f64
            } / pitch as f64;
            let window = if f == 0.0 {
                1.0
            } else {
                (PI * f).sin() / (PI * f)
            };
            v.re * window * scale
        })
        .collect()
}

/// The smallest power of two at least twice `detw`: rows are padded to it so that the ramp's
/// circular convolution does not wrap one edge onto the other.
fn pitch_for(detw: usize) -> usize {
    (2 * detw).next_power_of_two()
}

/// Row `v` of projection `t`, edge-padded to `pitch` as the GPU's `pad_rows` does (the f64
/// reference's staging): the last value repeated over the first half of the padding, the first
/// value over the second half (which the circular filter sees to the left of the row).
fn padded_row(
    values: &[f32],
    g: &Geometry,
    t: usize,
    v: usize,
    pitch: usize,
    out: &mut [[f32; 2]],
) {
    let row = &values[(t * g.deth + v) * g.detw..(t * g.deth + v + 1) * g.detw];
    let extra = pitch - g.detw;
    for (i, o) in out.iter_mut().enumerate() {
        let x = if i < g.detw {
            row[i]
        } else if i < g.detw + extra / 2 {
            row[g.detw - 1]
        } else {
            row[0]
        };
        *o = [x, 0.0];
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RampParams {
    count: u32,
    width: u32,
    pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct PadParams {
    count: u32,
    width: u32,
    pitch: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BackprojectParams {
    n1: u32,
    n2: u32,
    slices: u32,
    angles: u32,
    rows: u32,
    pitch: u32,
    detw: u32,
    accumulate: u32,
    center: f32,
    cos_phi: f32,
    sin_phi: f32,
    row_origin: f32,
    z_first: f32,
    scale: f32,
    pad: [f32; 2],
}

/// Slabs `(slices, n1, n2)` of `projections` backprojected for every pose, on the GPU.
fn backproject_slabs(
    ctx: &GpuContext,
    projections: &Projections,
    poses: &[Pose],
    slab: &Slab,
    rows: Range<usize>,
) -> Result<Vec<Vec<f32>>, PreprocessError> {
    let g = projections.geometry();
    let values = projections.values();
    let nrows = rows.len();
    let pitch = pitch_for(g.detw);
    let chunk = slab_chunk_angles(ctx, g, slab, nrows, pitch)?;
    let voxels = slab.slices * g.n1 * g.n2;
    let filter = RowFilter::new(ctx, g, chunk, nrows, pitch)?;
    let backproject = ctx.kernel(&KernelSpec {
        shader: &shaders::PREPROCESS_BACKPROJECT,
        entry: "backproject",
        overrides: vec![("WORKGROUP", WORKGROUP as f64)],
    })?;
    let trig = ctx.storage_buffer("search angles", chunk as u64 * 8)?;
    let params_of = |p: &Pose, angles: usize, accumulate: bool| BackprojectParams {
        n1: g.n1 as u32,
        n2: g.n2 as u32,
        slices: slab.slices as u32,
        angles: angles as u32,
        rows: nrows as u32,
        pitch: pitch as u32,
        detw: g.detw as u32,
        accumulate: accumulate as u32,
        center: p.center as f32,
        cos_phi: p.cos_phi as f32,
        sin_phi: p.sin_phi as f32,
        row_origin: ((g.deth / 2) as f64 - rows.start as f64) as f32,
        z_first: slab.z_first() as f32,
        scale: p.sin_phi as f32,
        pad: [0.0; 2],
    };
    let mut slabs = Vec::with_capacity(poses.len());
    let mut params = Vec::with_capacity(poses.len());
    let mut bound = Vec::with_capacity(poses.len());
    for p in poses {
        let out = ctx.storage_buffer("search slab", voxels as u64 * 4)?;
        let u = ctx.uniform("backproject params", &params_of(p, 0, false))?;
        bound.push(backproject.bind(
            ctx,
            &[
                (&filter.data).into(),
                (&trig).into(),
                (&out).into(),
                (&u).into(),
            ],
        )?);
        slabs.push(out);
        params.push(u);
    }
    for t0 in (0..g.ntheta()).step_by(chunk) {
        let angles = chunk.min(g.ntheta() - t0);
        filter.upload_rows(ctx, values, g, &rows, t0..t0 + angles);
        let cs: Vec<[f32; 2]> = g.theta[t0..t0 + angles]
            .iter()
            .map(|t| [t.cos() as f32, t.sin() as f32])
            .collect();
        ctx.write(&trig, 0, &cs);
        for (p, u) in poses.iter().zip(&params) {
            ctx.write(u, 0, std::slice::from_ref(&params_of(p, angles, t0 > 0)));
        }
        let mut rec = ctx.recorder("search slab");
        filter.record(&mut rec);
        for b in &bound {
            rec.dispatch(b, groups(voxels as u64));
        }
        ctx.submit(rec)?;
    }
    slabs
        .iter()
        .map(|s| Ok(ctx.read::<f32>(s, 0, voxels)?))
        .collect()
}

/// Angles per chunk of a search pass: as many as one storage binding holds of the slab's
/// `nrows` detector rows (padded to `pitch`); refuses a slab whose rows or voxels do not fit one.
fn slab_chunk_angles(
    ctx: &GpuContext,
    g: &Geometry,
    slab: &Slab,
    nrows: usize,
    pitch: usize,
) -> Result<usize, PreprocessError> {
    let angle_bytes = (nrows * pitch * 8) as u64;
    let fit = (ctx.max_binding_bytes() / angle_bytes.max(1)) as usize;
    if fit == 0 || nrows == 0 {
        return Err(PreprocessError::BadSearch(format!(
            "the slab projects onto {nrows} detector rows of {pitch} padded pixels per angle, \
             which do not fit one storage binding of {} bytes; bin the detector",
            ctx.max_binding_bytes()
        )));
    }
    let chunk = fit.min(g.ntheta());
    let voxels = slab.slices * g.n1 * g.n2;
    if (voxels * 4) as u64 > ctx.max_binding_bytes() {
        return Err(PreprocessError::BadSearch(format!(
            "a slab of {} x {} x {} voxels exceeds one storage binding; use fewer slices or bin",
            slab.slices, g.n1, g.n2
        )));
    }
    Ok(chunk)
}

/// The ramp filtering of a chunk of angles' detector rows on the device: the measured rows are
/// padded to complex rows of `pitch`, transformed, multiplied by the ramp response and
/// transformed back, in place in `data` (what the backprojection reads).
struct RowFilter {
    /// The filtered rows, `(angles, rows, pitch)` complex.
    data: GpuBuffer,
    /// The real rows as measured (a quarter of the padded complex rows): uploaded per chunk and
    /// padded on the device.
    raw: GpuBuffer,
    forward: FftPlan,
    inverse: FftPlan,
    pad: Bound,
    ramp: Bound,
    /// Complex values of `data`.
    count: u64,
    /// The ramp response and the kernels' parameters, alive as long as the kernels bound to them.
    _bound_buffers: [GpuBuffer; 3],
}

impl RowFilter {
    /// The buffers, FFT plans and bound kernels for chunks of `chunk` angles of `nrows` rows.
    fn new(
        ctx: &GpuContext,
        g: &Geometry,
        chunk: usize,
        nrows: usize,
        pitch: usize,
    ) -> Result<Self, PreprocessError> {
        let angle_bytes = (nrows * pitch * 8) as u64;
        let raw_len = chunk * nrows * g.detw;
        let data = ctx.storage_buffer("search rows", chunk as u64 * angle_bytes)?;
        let raw = ctx.storage_buffer("search raw rows", raw_len as u64 * 4)?;
        let shape = [chunk * nrows, pitch];
        let forward = FftPlan::new(
            ctx,
            &shape,
            1,
            Direction::Forward,
            Normalization::None,
            &data,
        )?;
        let inverse = FftPlan::new(
            ctx,
            &shape,
            1,
            Direction::Inverse,
            Normalization::None,
            &data,
        )?;
        let response: Vec<f32> = ramp_response(pitch, g.ntheta())
            .iter()
            .map(|&v| v as f32)
            .collect();
        let response = ctx.upload("ramp response", &response)?;
        let count = (chunk * nrows * pitch) as u64;
        let pad_params = ctx.uniform(
            "pad rows params",
            &PadParams {
                count: count as u32,
                width: g.detw as u32,
                pitch: pitch as u32,
                pad: 0,
            },
        )?;
        let pad = ctx
            .kernel(&KernelSpec {
                shader: &shaders::PREPROCESS_PAD_ROWS,
                entry: "pad_rows",
                overrides: vec![("WORKGROUP", WORKGROUP as f64)],
            })?
            .bind(ctx, &[(&raw).into(), (&data).into(), (&pad_params).into()])?;
        let ramp_params = ctx.uniform(
            "ramp params",
            &RampParams {
                count: count as u32,
                width: pitch as u32,
                pad: [0; 2],
            },
        )?;
        let ramp = ctx
            .kernel(&KernelSpec {
                shader: &shaders::PREPROCESS_RAMP,
                entry: "ramp",
                overrides: vec![("WORKGROUP", WORKGROUP as f64)],
            })?
            .bind(
                ctx,
                &[(&data).into(), (&response).into(), (&ramp_params).into()],
            )?;
        Ok(Self {
            data,
            raw,
            forward,
            inverse,
            pad,
            ramp,
            count,
            _bound_buffers: [response, pad_params, ramp_params],
        })
    }

    /// Uploads detector rows `rows` of projections `angles` of `values` (row-major
    /// `(ntheta, deth, detw)`), one angle after the other.
    fn upload_rows(
        &self,
        ctx: &GpuContext,
        values: &[f32],
        g: &Geometry,
        rows: &Range<usize>,
        angles: Range<usize>,
    ) {
        // The slab's rows of each angle are contiguous in the projections. Rows of angles past
        // the last one keep the previous chunk's values: they are filtered but never read.
        let row_len = rows.len() * g.detw;
        for (a, t) in angles.enumerate() {
            let first = (t * g.deth + rows.start) * g.detw;
            ctx.write(
                &self.raw,
                (a * row_len) as u64,
                &values[first..first + row_len],
            );
        }
    }

    /// Records the filtering of the uploaded rows.
    fn record(&self, rec: &mut Recorder) {
        rec.dispatch(&self.pad, groups(self.count));
        self.forward.record(rec);
        rec.dispatch(&self.ramp, groups(self.count));
        self.inverse.record(rec);
    }
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

/// An f64 CPU reference of the GPU slab for one candidate (tests): the same padding, ramp
/// response and bilinear backprojection, with rustfft and f64 arithmetic throughout.
pub fn slab_reference(
    projections: &Projections,
    binning: usize,
    candidate: &Candidate,
    slab: &Slab,
) -> Vec<f64> {
    let g = projections.geometry();
    let p = pose(candidate, binning);
    let pitch = pitch_for(g.detw);
    let response = ramp_response(pitch, g.ntheta());
    let mut planner = rustfft::FftPlanner::<f64>::new();
    let (fwd, inv) = (
        planner.plan_fft_forward(pitch),
        planner.plan_fft_inverse(pitch),
    );
    let mut row32 = vec![[0.0f32; 2]; pitch];
    let mut filtered = vec![0.0f64; g.ntheta() * g.deth * g.detw];
    for t in 0..g.ntheta() {
        for v in 0..g.deth {
            padded_row(projections.values(), g, t, v, pitch, &mut row32);
            let mut row: Vec<Complex<f64>> = row32
                .iter()
                .map(|c| Complex::new(c[0] as f64, 0.0))
                .collect();
            fwd.process(&mut row);
            for (x, r) in row.iter_mut().zip(&response) {
                *x *= r;
            }
            inv.process(&mut row);
            for w in 0..g.detw {
                filtered[(t * g.deth + v) * g.detw + w] = row[w].re;
            }
        }
    }
    let sample = |t: usize, v: i64, w: i64| {
        if v < 0 || v >= g.deth as i64 || w < 0 || w >= g.detw as i64 {
            0.0
        } else {
            filtered[(t * g.deth + v as usize) * g.detw + w as usize]
        }
    };
    let mut out = vec![0.0; slab.slices * g.n1 * g.n2];
    for s in 0..slab.slices {
        let rz = slab.z_first() + s as f64;
        for y in 0..g.n1 {
            let ry = y as f64 - (g.n1 / 2) as f64;
            for x in 0..g.n2 {
                let rx = x as f64 - (g.n2 / 2) as f64;
                let mut sum = 0.0;
                for (t, theta) in g.theta.iter().enumerate() {
                    let (st, ct) = theta.sin_cos();
                    let w = rx * ct + ry * st + p.center;
                    let v = (rx * st - ry * ct) * p.cos_phi + rz * p.sin_phi + (g.deth / 2) as f64;
                    let (w0, v0) = (w.floor(), v.floor());
                    let (fw, fv) = (w - w0, v - v0);
                    let (wi, vi) = (w0 as i64, v0 as i64);
                    let top = (1.0 - fw) * sample(t, vi, wi) + fw * sample(t, vi, wi + 1);
                    let bottom =
                        (1.0 - fw) * sample(t, vi + 1, wi) + fw * sample(t, vi + 1, wi + 1);
                    sum += (1.0 - fv) * top + fv * bottom;
                }
                out[(s * g.n1 + y) * g.n2 + x] = p.sin_phi * sum;
            }
        }
    }
    out
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
    fn the_ramp_response_is_the_windowed_ramp() {
        let (pitch, ntheta) = (256, 10);
        let r = ramp_response(pitch, ntheta);
        let scale = PI / ntheta as f64 / pitch as f64;
        // The band-limited kernel's DFT is |f| up to O(1/pitch) (its DC value is 1/(2 pitch)
        // rather than 0, the discrete kernel's known offset).
        for k in [0usize, 1, 16, 64, 127, 128, 200] {
            let f = if k <= pitch / 2 { k } else { pitch - k } as f64 / pitch as f64;
            let window = if f == 0.0 {
                1.0
            } else {
                (PI * f).sin() / (PI * f)
            };
            let got = r[k] / scale / window;
            assert!((got - f).abs() < 2.0 / pitch as f64, "k {k}: {got} vs {f}");
        }
    }

    /// A 32-wide geometry of `rows` detector rows (and volume slices) at `tilt` degrees.
    fn short_detector(rows: usize, tilt: f64) -> Geometry {
        let mut g = Geometry::cube(32, 12, (90.0f64 + tilt).to_radians());
        g.deth = rows;
        g.n0 = rows;
        g
    }

    fn axes_at(tilt: f64) -> Vec<Candidate> {
        grid(&candidate_range(12.0, 20.0, 0.5).unwrap(), &[tilt]).unwrap()
    }

    #[test]
    fn the_slab_is_chosen_from_the_geometry() {
        // Tilt 0: every row is a CT slice, and the rows hold as many slices as they are (up to 8).
        for (rows, slices) in [(1, 1), (2, 2), (4, 4), (8, 8), (32, 8)] {
            let slab =
                choose_slab(&short_detector(rows, 0.0), 1, &axes_at(0.0), None, 0.0).unwrap();
            assert!(slab.slices == slices, "{rows} rows: {slab:?}");
        }
        // A small tilt on 8 rows: 8 slices leave the rows, a thinner slab keeps a wide disc.
        let g = short_detector(8, 5.0);
        let slab = choose_slab(&g, 1, &axes_at(5.0), None, 0.0).unwrap();
        let poses: Vec<Pose> = axes_at(5.0).iter().map(|c| pose(c, 1)).collect();
        let radius = fitted_radius(&g, &slab, &poses).unwrap();
        assert!(slab.slices >= 1 && slab.slices < 8, "{slab:?}");
        assert!(radius >= 10.0, "{slab:?}: radius {radius}");
        // An explicit thickness is honoured, or refused in the user's terms.
        let explicit = choose_slab(&g, 1, &axes_at(5.0), Some(2), 0.0).unwrap();
        assert!(explicit.slices == 2);
        match choose_slab(&g, 1, &axes_at(5.0), Some(8), 0.0) {
            Err(PreprocessError::BadSearch(m)) => {
                assert!(
                    m.contains("the detector has 8 rows; use --slab-slices"),
                    "{m}"
                );
                assert!(!m.contains("radius"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        // Nothing fits far off the detector: no negative radius, what to change instead.
        match choose_slab(&short_detector(8, 0.0), 1, &axes_at(0.0), None, 20.0) {
            Err(PreprocessError::BadSearch(m)) => {
                assert!(
                    m.contains("even a slab of one slice") && m.contains("--slab-z"),
                    "{m}"
                );
                assert!(!m.contains("radius"), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_parabola_finds_its_vertex() {
        // y = -(x - 0.3)^2 at -1, 0, 1.
        let y = |x: f64| -(x - 0.3) * (x - 0.3);
        assert!((parabola_vertex(y(-1.0), y(0.0), y(1.0)) - 0.3).abs() < 1e-12);
        assert_eq!(parabola_vertex(1.0, 0.0, 1.0), 0.0);
    }
}
