//! The scoring reconstruction of the axis/tilt search ([`super::search`]): a thin slab of the
//! volume ([`Slab`], chosen by [`choose_slab`] from the geometry) reconstructed for a candidate
//! (axis column, tilt; [`Candidate`]) by filtered backprojection on the GPU: every detector row
//! the slab projects onto is filtered with the windowed ramp, then each slab voxel sums the
//! bilinearly interpolated filtered values over all angles (the method and why it is exact for
//! laminography: the module doc of [`super::search`]). [`slab_reference`] is its f64 CPU
//! reference.

use std::f64::consts::PI;
use std::ops::Range;

use bytemuck::{Pod, Zeroable};
use rustfft::num_complex::Complex;
use serde::Serialize;

use super::PreprocessError;
use crate::fft::{Direction, FftPlan, Normalization};
use crate::geometry::Geometry;
use crate::geometry::Tilt;
use crate::gpu::{Bound, GpuBuffer, GpuContext, KernelSpec, Recorder};
use crate::scan::Projections;
use crate::shaders;

/// The most slices a chosen scoring slab has (voxels of the searched volume); see [`choose_slab`].
pub const DEFAULT_SLAB_SLICES: usize = 8;

/// The smallest radius (voxels) of the scored disc: a smaller disc holds too few voxels for the
/// gradient energy to say anything.
const MIN_SCORE_RADIUS: f64 = 2.0;

const WORKGROUP: u32 = 64;

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

/// A candidate in the searched geometry's units: axis column (binned), cos and sin of phi.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pose {
    center: f64,
    cos_phi: f64,
    sin_phi: f64,
}

pub(super) fn pose(c: &Candidate, binning: usize) -> Pose {
    let b = binning as f64;
    let phi = Tilt::from_degrees(c.tilt_deg).phi();
    Pose {
        center: (c.rotation_axis - (b - 1.0) / 2.0) / b,
        cos_phi: phi.cos(),
        sin_phi: phi.sin(),
    }
}

/// The detector rows the slab projects onto for any of `poses` (with a one-row margin for the
/// interpolation), and the radius of the scored disc: the disc inscribed in the slab, reduced
/// where rays of its voxels would leave the detector's rows.
pub(super) fn footprint(g: &Geometry, slab: &Slab, poses: &[Pose]) -> (Range<usize>, f64) {
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
pub(super) fn fitted_radius(
    g: &Geometry,
    slab: &Slab,
    poses: &[Pose],
) -> Result<f64, PreprocessError> {
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
    if !z_offset.is_finite() {
        return Err(PreprocessError::BadSearch(format!(
            "slab z offset {z_offset}: must be finite"
        )));
    }
    // Bounded before any work: a slab thicker than the volume has nothing more to score, and
    // the search for the thickest slab that fits counts down from it.
    if let Some(slices) = slices.filter(|&s| s == 0 || s > g.n0) {
        return Err(PreprocessError::BadSearch(format!(
            "a slab of {slices} slices: from 1 to the volume's {} slices",
            g.n0
        )));
    }
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
    pad: [f32; 3],
}

/// The slabs' sums over every angle ([`sum_slabs`]; `voxels` each, one after the other) times
/// `sin(phi)` of their pose: the backprojection, in f32 as the device would scale it.
pub(super) fn scale_slabs(sums: &mut [f32], voxels: usize, poses: &[Pose]) {
    for (s, p) in sums.chunks_exact_mut(voxels).zip(poses) {
        let scale = p.sin_phi as f32;
        s.iter_mut().for_each(|v| *v *= scale);
    }
}

/// For every pose, the sums `(slices, n1, n2)` over the angles `projections` holds (its
/// [`Projections::angles`]) of the filtered values each slab voxel's ray meets, unscaled, on the
/// GPU, one pose's after the other: continuing `start` (the sums over the angles before these,
/// laid out alike) where given, angle after angle in order. The sum's order is every angle in turn however the angles are chunked or
/// split among MPI ranks, so one process and any number of ranks summing their angles one after
/// the other give the same bits.
pub(super) fn sum_slabs(
    ctx: &GpuContext,
    projections: &Projections,
    poses: &[Pose],
    slab: &Slab,
    rows: Range<usize>,
    start: Option<&[f32]>,
) -> Result<Vec<f32>, PreprocessError> {
    let g = projections.geometry();
    let values = projections.values();
    let held = projections.angles();
    let nrows = rows.len();
    let pitch = pitch_for(g.detw);
    let chunk = slab_chunk_angles(ctx, g, slab, nrows, pitch, held.len())?;
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
        pad: [0.0; 3],
    };
    let continued = start.is_some();
    let mut start = start.map(|s| s.chunks_exact(voxels));
    let mut slabs = Vec::with_capacity(poses.len());
    let mut params = Vec::with_capacity(poses.len());
    let mut bound = Vec::with_capacity(poses.len());
    for p in poses {
        let out = ctx.storage_buffer("search slab", voxels as u64 * 4)?;
        if let Some(sums) = start.as_mut().and_then(Iterator::next) {
            ctx.write(&out, 0, sums);
        }
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
    for t0 in held.clone().step_by(chunk) {
        let angles = chunk.min(held.end - t0);
        let first = t0 - held.start;
        filter.upload_rows(ctx, values, g, &rows, first..first + angles);
        let cs: Vec<[f32; 2]> = g.theta[t0..t0 + angles]
            .iter()
            .map(|t| [t.cos() as f32, t.sin() as f32])
            .collect();
        ctx.write(&trig, 0, &cs);
        for (p, u) in poses.iter().zip(&params) {
            let accumulate = continued || t0 > held.start;
            ctx.write(
                u,
                0,
                std::slice::from_ref(&params_of(p, angles, accumulate)),
            );
        }
        let mut rec = ctx.recorder("search slab");
        filter.record(&mut rec);
        for b in &bound {
            rec.dispatch(b, groups(voxels as u64));
        }
        ctx.submit(rec)?;
    }
    let mut sums = Vec::with_capacity(poses.len() * voxels);
    for s in &slabs {
        sums.extend(ctx.read::<f32>(s, 0, voxels)?);
    }
    Ok(sums)
}

/// Angles per chunk of a search pass over `held` angles: as many as one storage binding holds
/// of the slab's `nrows` detector rows (padded to `pitch`); refuses a slab whose rows or voxels
/// do not fit one.
fn slab_chunk_angles(
    ctx: &GpuContext,
    g: &Geometry,
    slab: &Slab,
    nrows: usize,
    pitch: usize,
    held: usize,
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
    let chunk = fit.min(held).max(1);
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
        // Specialised whatever the batch: a shared pipeline (small batches) rounds differently
        // from a specialised one, and an MPI rank's chunks hold fewer angles than one process's.
        let forward = FftPlan::specialized(
            ctx,
            &shape,
            1,
            Direction::Forward,
            Normalization::None,
            &data,
        )?;
        let inverse = FftPlan::specialized(
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

    /// Uploads detector rows `rows` of the projections `angles` of `values` (row-major
    /// `(angles held, deth, detw)`; `angles` counted from the first held), one angle after the
    /// other.
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
    use crate::preprocess::{candidate_range, grid};

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
        let mut g = Geometry::cube(32, 12, Tilt::from_degrees(tilt));
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
        // Thicknesses beyond the volume and offsets that are no number are refused at once
        // (a count of 2^32 slices once counted down to a fit, slice by slice).
        for (slices, z) in [(Some(0), 0.0), (Some(1 << 32), 0.0), (Some(9), 0.0)] {
            match choose_slab(&g, 1, &axes_at(5.0), slices, z) {
                Err(PreprocessError::BadSearch(m)) => {
                    assert!(m.contains("from 1 to the volume's 8 slices"), "{m}")
                }
                other => panic!("{slices:?}: {other:?}"),
            }
        }
        for z in [f64::NAN, f64::INFINITY] {
            match choose_slab(&g, 1, &axes_at(5.0), None, z) {
                Err(PreprocessError::BadSearch(m)) => assert!(m.contains("must be finite"), "{m}"),
                other => panic!("{z}: {other:?}"),
            }
        }
    }

    #[test]
    fn sums_over_angles_split_or_chunked_have_the_bits_of_one_sum() {
        // The search's sums run over the angles in order whatever holds them: summed in two
        // parts (MPI ranks' shares), the second continuing the first, or in chunks of three
        // angles (a small storage binding), they give the bits of one sum over every angle.
        let scan = crate::simulate::simulated_scan(&crate::simulate::ScanSpec {
            phantom: crate::simulate::PhantomKind::Blobs,
            size: 16,
            angles: 12,
            tilt_deg: 30.0,
            photons: None,
            seed: 1,
            rotation_axis: None,
        })
        .unwrap();
        let p = Projections::new(scan.geometry, scan.line_integrals).unwrap();
        let g = p.geometry();
        let candidates = grid(&[7.5, 8.0, 8.5], &[30.0]).unwrap();
        let poses: Vec<Pose> = candidates.iter().map(|c| pose(c, 1)).collect();
        let slab = Slab {
            slices: 4,
            z_offset: 0.0,
        };
        let (rows, _) = footprint(g, &slab, &poses);
        let ctx = crate::gpu::test_context();
        let sum = |ctx: &GpuContext, angles: Range<usize>, start: Option<&[f32]>| {
            let part = p.clone().keep(angles).unwrap();
            sum_slabs(ctx, &part, &poses, &slab, rows.clone(), start).unwrap()
        };
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
        let whole = sum(&ctx, 0..12, None);
        assert!(whole.len() == 3 * 4 * 16 * 16 && whole.iter().any(|&v| v != 0.0));
        let first = sum(&ctx, 0..5, None);
        assert!(bits(&first) != bits(&whole));
        let continued = sum(&ctx, 5..12, Some(&first));
        assert!(bits(&continued) == bits(&whole));
        let chunked = crate::gpu::test_context()
            .with_max_binding_bytes((3 * rows.len() * pitch_for(g.detw) * 8) as u64);
        assert!(
            slab_chunk_angles(&chunked, g, &slab, rows.len(), pitch_for(g.detw), 12).unwrap() == 3
        );
        assert!(bits(&sum(&chunked, 0..12, None)) == bits(&whole));
    }
}
