//! The rotation axis of a plain CT scan (tilt 0) from its sinogram alone: the Fourier method of
//! Vo, Atwood & Drakopoulos (Opt. Express 22, 2014), as tomopy's and algotom's `find_center_vo`.
//!
//! A 180-degree sinogram followed by its left-right flipped copy is the sinogram over 360
//! degrees when the flip is about the rotation axis: `p(theta + pi, c + s) = p(theta, c - s)`.
//! The 2D Fourier transform of a consistent sinogram of an object within radius `R` of the axis
//! is empty outside the double wedge `|k_theta| <= 2 pi R |k_s|` (angular frequency `k_theta` in
//! cycles per turn, `k_s` in cycles per pixel); flipping about a wrong column breaks the
//! sinogram's continuity at 180 degrees and spreads energy into that empty region. The metric
//! is the mean magnitude there (tomopy's mask, with `R` half the detector's half-width, its
//! `ratio = 0.5`), minimal at the axis. The detector's rows are averaged first: at tilt 0 their
//! mean is the sinogram of the mean slice, about the same axis, with less noise.
//!
//! Coarse then fine, as tomopy: flips about whole and half columns (integer shifts, no
//! interpolation) over the range, on columns binned to at most 256 when the detector is wider;
//! then the same at full resolution within one binned column of the winner; then flips in
//! steps of [`VO_FINE_STEP`] within half a column, shifted in Fourier space, and the parabola
//! through the best step and its neighbours. Everything is f64 on the CPU.

use std::f64::consts::PI;

use rustfft::num_complex::Complex;
use rustfft::FftPlanner;

use super::PreprocessError;
use crate::geometry::Geometry;
use crate::scan::Projections;

/// The finest step (columns) of the Fourier method's search, before the parabolic refinement.
pub const VO_FINE_STEP: f64 = 0.05;

/// The coarse pass bins columns until the sinogram is at most this wide.
const VO_COARSE_WIDTH: usize = 256;

/// The angles of the first half turn of `g` when its scan is plain CT (tilt 0) over 180 or 360
/// degrees: equispaced angles of which the first `n` cover `[theta_0, theta_0 + 180)` in steps of
/// `180 / n` degrees (a scan of 181 angles over 0..=180 has n = 180). `None` otherwise.
pub fn half_turn(g: &Geometry) -> Option<usize> {
    let theta = &g.theta;
    let tilt = g.tilt.degrees();
    if tilt.abs() > 1e-6 || theta.len() < 4 {
        return None;
    }
    let step = theta[1] - theta[0];
    if !(step.is_finite() && step.abs() > 0.0) {
        return None;
    }
    let equispaced = theta
        .windows(2)
        .all(|w| ((w[1] - w[0]) - step).abs() <= 1e-3 * step.abs());
    let n = (PI / step.abs()).round();
    // Angles' steps of 180 / n degrees, n at least 2 and no more than the scan holds.
    let divides = ((n * step.abs()) - PI).abs() <= 1e-3 * step.abs();
    (equispaced && divides && n >= 2.0 && n as usize <= theta.len()).then_some(n as usize)
}

/// The rotation axis (column of `projections`' detector, pixel `w` centred at `w`) of a plain CT
/// scan over 180 or 360 degrees ([`half_turn`]), searched over the columns `range` by Vo et al.'s
/// Fourier method. Refuses other scans and ranges outside the detector.
pub fn find_center_vo(projections: &Projections, range: [f64; 2]) -> Result<f64, PreprocessError> {
    center_vo(projections, range, VO_COARSE_WIDTH)
}

/// [`find_center_vo`] with the coarse pass on columns binned to at most `coarse_width`.
fn center_vo(
    projections: &Projections,
    range: [f64; 2],
    coarse_width: usize,
) -> Result<f64, PreprocessError> {
    let g = projections.geometry();
    let sino = mean_sinogram(projections, vo_rows(g)?);
    center_of_sinogram(g, &sino, range, coarse_width)
}

/// The angles of the sinogram Vo et al.'s method reads: the first half turn ([`half_turn`]),
/// or why the scan has none.
fn vo_rows(g: &Geometry) -> Result<usize, PreprocessError> {
    half_turn(g).ok_or_else(|| {
        PreprocessError::BadSearch(format!(
            "the Fourier centre estimate (Vo et al.) needs a plain CT scan (tilt 0) with \
             equispaced angles over 180 or 360 degrees; this scan has tilt {} deg and {} angles",
            g.tilt.degrees(),
            g.ntheta()
        ))
    })
}

/// [`find_center_vo`] of the scan of geometry `g` from its [`mean_sinogram`] (every angle of
/// [`vo_rows`], joined in angle order): what MPI ranks holding a share of the angles each
/// contribute their rows to.
pub(super) fn find_center_vo_of_sinogram(
    g: &Geometry,
    sino: &[f64],
    range: [f64; 2],
) -> Result<f64, PreprocessError> {
    center_of_sinogram(g, sino, range, VO_COARSE_WIDTH)
}

/// The centre of the mean sinogram `sino` (`(vo_rows(g), detw)`) over the columns `range`.
fn center_of_sinogram(
    g: &Geometry,
    sino: &[f64],
    range: [f64; 2],
    coarse_width: usize,
) -> Result<f64, PreprocessError> {
    let rows = vo_rows(g)?;
    let w = g.detw;
    if sino.len() != rows * w {
        return Err(PreprocessError::Shape {
            got: sino.len(),
            shape: vec![rows, w],
        });
    }
    let last = (w - 1) as f64;
    if !(range[0].is_finite() && range[1].is_finite() && range[0] <= range[1])
        || w < 4
        || range[1] < 0.0
        || range[0] > last
    {
        return Err(PreprocessError::BadSearch(format!(
            "the Fourier centre estimate: range {:?} misses the detector's {w} columns",
            range
        )));
    }
    let (lo, hi) = (range[0].max(1.0), range[1].min(last - 1.0));
    // Coarse: columns binned by a power of two to at most `coarse_width` (and at least 4).
    let mut bin = 1;
    while w / bin > coarse_width.max(4) {
        bin *= 2;
    }
    let mut best = if bin > 1 {
        let binned = bin_columns(sino, rows, w, bin);
        let to_binned = |c: f64| (c - (bin as f64 - 1.0) / 2.0) / bin as f64;
        let wb = w / bin;
        let c = best_whole_flip(
            &binned,
            rows,
            wb,
            to_binned(lo).max(1.0),
            to_binned(hi).min((wb - 2) as f64),
        );
        c * bin as f64 + (bin as f64 - 1.0) / 2.0
    } else {
        best_whole_flip(sino, rows, w, lo, hi)
    };
    if bin > 1 {
        let reach = bin as f64;
        best = best_whole_flip(
            sino,
            rows,
            w,
            (best - reach).max(lo),
            (best + reach).min(hi),
        );
    }
    // Fine: fractional flips within half a column, then the parabola.
    let metric = Metric::new(sino, rows, w);
    let steps = (0.5 / VO_FINE_STEP).round() as i64;
    let candidates: Vec<f64> = (-steps..=steps)
        .map(|i| best + i as f64 * VO_FINE_STEP)
        .collect();
    let values: Vec<f64> = candidates.iter().map(|&c| metric.at(c)).collect();
    let i = (0..values.len())
        .min_by(|&a, &b| values[a].total_cmp(&values[b]))
        .unwrap_or(0);
    let mut centre = candidates[i];
    if i > 0 && i + 1 < values.len() {
        let (a, b, c) = (values[i - 1], values[i], values[i + 1]);
        let curvature = a - 2.0 * b + c;
        if curvature > 0.0 {
            centre += VO_FINE_STEP * (0.5 * (a - c) / curvature).clamp(-0.5, 0.5);
        }
    }
    if !centre.is_finite() {
        return Err(PreprocessError::BadSearch(format!(
            "the Fourier centre estimate is {centre} (non-finite projection values?)"
        )));
    }
    Ok(centre)
}

/// The mean over the detector's rows of the projections of the first `rows` angles, of those
/// `projections` holds: `(angles, detw)`, one row per angle held among them, in order (an MPI
/// rank's rows of the whole sinogram; every row when every angle is held).
pub(super) fn mean_sinogram(projections: &Projections, rows: usize) -> Vec<f64> {
    let g = projections.geometry();
    let values = projections.values();
    let held = projections.angles();
    let angles = held.start.min(rows)..held.end.min(rows);
    let mut sino = vec![0.0; angles.len() * g.detw];
    for (i, t) in angles.map(|t| t - held.start).enumerate() {
        for v in 0..g.deth {
            let row = &values[(t * g.deth + v) * g.detw..(t * g.deth + v + 1) * g.detw];
            for (s, &x) in sino[i * g.detw..(i + 1) * g.detw].iter_mut().zip(row) {
                *s += x as f64 / g.deth as f64;
            }
        }
    }
    sino
}

/// `sino` `(rows, w)` with its columns averaged in groups of `bin` (the remainder dropped).
fn bin_columns(sino: &[f64], rows: usize, w: usize, bin: usize) -> Vec<f64> {
    let wb = w / bin;
    let mut out = vec![0.0; rows * wb];
    for t in 0..rows {
        for j in 0..wb {
            out[t * wb + j] = sino[t * w + j * bin..t * w + (j + 1) * bin]
                .iter()
                .sum::<f64>()
                / bin as f64;
        }
    }
    out
}

/// The centre among whole and half columns in `[lo, hi]` (flips by whole pixels) with the
/// smallest metric.
fn best_whole_flip(sino: &[f64], rows: usize, w: usize, lo: f64, hi: f64) -> f64 {
    let metric = Metric::new(sino, rows, w);
    let (first, last) = ((2.0 * lo).ceil() as i64, (2.0 * hi).floor() as i64);
    let mut best = (f64::INFINITY, (lo + hi) / 2.0);
    for k in first..=last.max(first) {
        let c = k as f64 / 2.0;
        let m = metric.at(c);
        if m < best.0 {
            best = (m, c);
        }
    }
    best.1
}

/// The metric of one sinogram for any centre.
struct Metric<'a> {
    sino: &'a [f64],
    rows: usize,
    w: usize,
    /// `(2 rows, w)`: 1 outside the double wedge (where a consistent sinogram has no energy).
    mask: Vec<bool>,
}

impl<'a> Metric<'a> {
    fn new(sino: &'a [f64], rows: usize, w: usize) -> Self {
        let h = 2 * rows;
        let radius = 0.25 * w as f64; // tomopy's 0.5 * ratio * ncol, ratio 0.5
        let signed = |k: usize, n: usize| {
            if k <= n / 2 {
                k as f64
            } else {
                k as f64 - n as f64
            }
        };
        let mut mask = vec![false; h * w];
        for i in 0..h {
            let m = signed(i, h).abs();
            for j in 0..w {
                let n = signed(j, w).abs();
                // Outside the double wedge, away from the axes' lowest frequencies.
                mask[i * w + j] = m > 1.0 && n > 1.0 && n <= m * w as f64 / (2.0 * PI * radius);
            }
        }
        Self {
            sino,
            rows,
            w,
            mask,
        }
    }

    /// The mean spectral magnitude outside the double wedge of the sinogram followed by its
    /// flip about column `centre` (columns the flip leaves empty taken from the sinogram read
    /// backwards in angle, as tomopy does).
    fn at(&self, centre: f64) -> f64 {
        let (rows, w) = (self.rows, self.w);
        let shift = 2.0 * centre - (w as f64 - 1.0);
        let mut mat = vec![Complex::new(0.0, 0.0); 2 * rows * w];
        for (o, &x) in mat.iter_mut().zip(self.sino) {
            o.re = x;
        }
        let whole = shift.round();
        let fractional = (shift - whole).abs() > 1e-9;
        let mut planner = FftPlanner::<f64>::new();
        let pitch = (2 * w).next_power_of_two();
        let (fwd, inv) = (
            planner.plan_fft_forward(pitch),
            planner.plan_fft_inverse(pitch),
        );
        let mut row = vec![Complex::new(0.0, 0.0); pitch];
        for t in 0..rows {
            let src = &self.sino[t * w..(t + 1) * w];
            let comp = &self.sino[(rows - 1 - t) * w..(rows - t) * w];
            let out = &mut mat[(rows + t) * w..(rows + t + 1) * w];
            // The flipped row F[j] = src[w - 1 - j], shifted: out[j] = F[j - shift].
            if fractional {
                for (i, r) in row.iter_mut().enumerate() {
                    let x = if i < w {
                        src[w - 1 - i]
                    } else if i < w + (pitch - w) / 2 {
                        src[0]
                    } else {
                        src[w - 1]
                    };
                    *r = Complex::new(x, 0.0);
                }
                fwd.process(&mut row);
                for (k, r) in row.iter_mut().enumerate() {
                    let f = if k <= pitch / 2 {
                        k as f64
                    } else {
                        k as f64 - pitch as f64
                    };
                    *r *= Complex::from_polar(
                        1.0 / pitch as f64,
                        -2.0 * PI * f * shift / pitch as f64,
                    );
                }
                inv.process(&mut row);
            }
            for (j, o) in out.iter_mut().enumerate() {
                let from = j as f64 - shift;
                let inside = from >= -1e-9 && from <= w as f64 - 1.0 + 1e-9;
                o.re = if !inside {
                    comp[j]
                } else if fractional {
                    row[j].re
                } else {
                    src[w - 1 - (from.round() as usize)]
                };
            }
        }
        fft2(&mut mat, 2 * rows, w, &mut planner);
        let sum: f64 = mat
            .iter()
            .zip(&self.mask)
            .filter(|(_, &m)| m)
            .map(|(v, _)| v.norm())
            .sum();
        sum / mat.len() as f64
    }
}

/// The 2D DFT of `mat` `(h, w)` in place.
fn fft2(mat: &mut [Complex<f64>], h: usize, w: usize, planner: &mut FftPlanner<f64>) {
    let rows = planner.plan_fft_forward(w);
    for r in mat.chunks_mut(w) {
        rows.process(r);
    }
    let cols = planner.plan_fft_forward(h);
    let mut col = vec![Complex::new(0.0, 0.0); h];
    for j in 0..w {
        for (i, c) in col.iter_mut().enumerate() {
            *c = mat[i * w + j];
        }
        cols.process(&mut col);
        for (i, c) in col.iter().enumerate() {
            mat[i * w + j] = *c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Tilt;
    use crate::recon::input::projections_from_scan;
    use crate::simulate::{simulated_scan, PhantomKind, ScanSpec};
    use std::path::Path;

    /// A noisy simulated CT scan (tilt 0, `angles` over 360 degrees) of a 32^3 Shepp–Logan with
    /// the axis at column `axis`, keeping the first `keep` angles.
    fn ct_scan(angles: usize, keep: usize, axis: f64) -> Projections {
        let s = simulated_scan(&ScanSpec {
            phantom: PhantomKind::Shepp,
            size: 32,
            angles,
            tilt_deg: 0.0,
            photons: Some(1e4),
            seed: 5,
            rotation_axis: Some(axis),
        })
        .unwrap();
        let p = projections_from_scan(Path::new("simulated"), s.scan, None)
            .unwrap()
            .projections;
        let mut g = p.geometry().clone();
        let frame = g.deth * g.detw;
        g.theta.truncate(keep);
        Projections::new(g, p.values()[..keep * frame].to_vec()).unwrap()
    }

    #[test]
    fn vo_finds_the_axis_of_180_and_360_degree_scans() {
        for (angles, keep, axis) in [(120, 60, 17.3), (90, 90, 14.6), (120, 120, 16.0)] {
            let p = ct_scan(angles, keep, axis);
            assert!(half_turn(p.geometry()) == Some(angles / 2));
            let found = find_center_vo(&p, [12.0, 20.0]).unwrap();
            // The coarse pass on columns binned by 4, as on a detector 4 x 256 wide.
            let binned = center_vo(&p, [12.0, 20.0], 8).unwrap();
            eprintln!("{keep} of {angles} angles: Vo {found:.3}, {binned:.3} (true {axis})");
            for c in [found, binned] {
                assert!((c - axis).abs() <= 0.5, "{c} vs {axis}");
            }
        }
    }

    #[test]
    fn vo_refuses_what_it_cannot_measure() {
        let p = ct_scan(90, 90, 16.0);
        let mut g = p.geometry().clone();
        g.tilt = Tilt::from_degrees(20.0);
        assert!(half_turn(&g).is_none());
        let tilted = Projections::new(g, p.values().to_vec()).unwrap();
        assert!(matches!(
            find_center_vo(&tilted, [12.0, 20.0]),
            Err(PreprocessError::BadSearch(m)) if m.contains("plain CT")
        ));
        // Fewer than 180 degrees: the first 30 of 90 angles over 360.
        let short = ct_scan(90, 30, 16.0);
        assert!(half_turn(short.geometry()).is_none());
        for range in [[40.0, 50.0], [f64::NAN, 3.0], [20.0, 10.0]] {
            assert!(find_center_vo(&p, range).is_err(), "{range:?}");
        }
    }
}
