//! Where one projection landed against another: sub-pixel registration by cross-correlation,
//! refined around its peak by an upsampled DFT (Guizar-Sicairos, Thurman & Fienup, "Efficient
//! subpixel image registration algorithms", Opt. Lett. 33, 156 (2008); scikit-image's
//! `phase_cross_correlation` without its normalisation). Projection matching
//! ([`crate::recon::align`]) registers each measured projection against the reprojection of
//! the current volume.
//!
//! Both images have their mean removed and are tapered to zero at the detector's edges (a Tukey
//! window over an eighth of each side): a sample that runs off the detector would otherwise
//! correlate its edges with the circular transform's wrap-around. The peak is looked for within
//! a quarter of the detector each way, then refined on a grid of `1 / upsample` pixels over
//! +-0.75 pixels around it.

use num_complex::Complex64;
use rustfft::{Fft, FftPlanner};
use std::f64::consts::PI;
use std::sync::Arc;

/// The fewest pixels along an axis for a shift along it to be estimated: a detector of fewer
/// rows (a 2-row CT scan) keeps its rows' shifts as they are.
pub const FEWEST_PIXELS: usize = 8;

/// A registration of images of one shape (rows, columns), planned once.
pub struct Registration {
    shape: [usize; 2],
    upsample: usize,
    /// The taper, one weight per row and per column.
    window: [Vec<f64>; 2],
    forward: [Arc<dyn Fft<f64>>; 2],
    inverse: [Arc<dyn Fft<f64>>; 2],
}

impl Registration {
    /// Registration of `rows x columns` images to `1 / upsample` of a pixel.
    pub fn new(rows: usize, columns: usize, upsample: usize) -> Self {
        let mut planner = FftPlanner::new();
        let shape = [rows, columns];
        Self {
            shape,
            upsample: upsample.max(1),
            window: shape.map(tukey),
            forward: shape.map(|n| planner.plan_fft_forward(n)),
            inverse: shape.map(|n| planner.plan_fft_inverse(n)),
        }
    }

    /// Whether shifts along the rows (`dv`) are estimated: the detector has at least
    /// [`FEWEST_PIXELS`] rows.
    pub fn estimates_rows(&self) -> bool {
        self.shape[0] >= FEWEST_PIXELS
    }

    /// `[du, dv]`, in pixels (columns, rows), such that `moved(v, u) ~ reference(v - dv, u - du)`:
    /// where `moved` landed against `reference`. Both are row-major images of this shape.
    pub fn shift(&self, moved: &[f32], reference: &[f32]) -> [f64; 2] {
        let [h, w] = self.shape;
        let a = self.spectrum(moved);
        let b = self.spectrum(reference);
        let cross: Vec<Complex64> = a.iter().zip(&b).map(|(a, b)| a * b.conj()).collect();
        // The correlation at whole pixels, for its peak.
        let mut correlation = cross.clone();
        self.transform(&mut correlation, &self.inverse);
        let signed = signed_frequency;
        let rows_estimated = self.estimates_rows();
        let mut peak = (f64::NEG_INFINITY, 0i64, 0i64);
        for r in 0..h {
            let dv = signed(r, h);
            if (rows_estimated && dv.unsigned_abs() as usize > h / 4)
                || (!rows_estimated && dv != 0)
            {
                continue;
            }
            for c in 0..w {
                let du = signed(c, w);
                if du.unsigned_abs() as usize > w / 4 {
                    continue;
                }
                let value = correlation[r * w + c].re;
                if value > peak.0 {
                    peak = (value, dv, du);
                }
            }
        }
        let (_, dv, du) = peak;
        // Refined: the correlation on a grid of 1/upsample pixels over +-0.75 pixels around the
        // peak, as the DFT of the cross spectrum at those points (two matrix products).
        let u = self.upsample as f64;
        let points = (1.5 * u).ceil() as usize;
        let offsets = |centre: i64, estimated: bool| -> Vec<f64> {
            match estimated {
                true => (0..points)
                    .map(|i| centre as f64 + (i as f64 - (points / 2) as f64) / u)
                    .collect(),
                false => vec![centre as f64],
            }
        };
        let ys = offsets(dv, rows_estimated);
        let xs = offsets(du, true);
        let freq = |k: usize, n: usize| signed(k, n) as f64 / n as f64;
        // Per row frequency: the sum over column frequencies at each x.
        let mut by_row = vec![Complex64::new(0.0, 0.0); h * xs.len()];
        for ky in 0..h {
            for (j, &x) in xs.iter().enumerate() {
                let mut sum = Complex64::new(0.0, 0.0);
                for kx in 0..w {
                    sum +=
                        cross[ky * w + kx] * Complex64::from_polar(1.0, 2.0 * PI * freq(kx, w) * x);
                }
                by_row[ky * xs.len() + j] = sum;
            }
        }
        let mut best = (f64::NEG_INFINITY, dv as f64, du as f64);
        for &y in &ys {
            for (j, &x) in xs.iter().enumerate() {
                let mut sum = Complex64::new(0.0, 0.0);
                for ky in 0..h {
                    sum += by_row[ky * xs.len() + j]
                        * Complex64::from_polar(1.0, 2.0 * PI * freq(ky, h) * y);
                }
                if sum.re > best.0 {
                    best = (sum.re, y, x);
                }
            }
        }
        [best.2, best.1]
    }

    /// `[du, dv]` as [`shift`](Self::shift) defines it, for a small shift (within a pixel or
    /// so): the linearised least-squares fit `moved ~ a reference + c - a (du d/du + dv d/dv)
    /// reference` over the tapered detector (central differences, the edge pixels left out),
    /// which also fits the scale `a` and offset `c` a reprojection may differ by. Not quantised,
    /// and it has one answer where a periodic sample's correlation has several peaks. `None`
    /// where the fit is singular (a featureless image).
    pub fn refine(&self, moved: &[f32], reference: &[f32]) -> Option<[f64; 2]> {
        let [h, w] = self.shape;
        assert_eq!(moved.len(), h * w, "an image of the registration's shape");
        assert_eq!(
            reference.len(),
            h * w,
            "an image of the registration's shape"
        );
        let rows = self.estimates_rows();
        // Both smoothed alike (a Gaussian of one pixel): detail finer than the reprojection
        // resolves, and a periodic sample's pixel-scale pattern, would otherwise lead the fit.
        let (moved, reference) = (self.smoothed(moved), self.smoothed(reference));
        let at = |r: usize, c: usize| reference[r * w + c];
        // Normal equations of the basis [reference, 1, d/du, d/dv].
        let k = if rows { 4 } else { 3 };
        let mut normal = [[0.0f64; 4]; 4];
        let mut rhs = [0.0f64; 4];
        let (r_span, c_span) = (if rows { 1..h - 1 } else { 0..h }, 1..w - 1);
        for r in r_span {
            for c in c_span.clone() {
                let weight = self.window[0][r] * self.window[1][c];
                let basis = [
                    at(r, c),
                    1.0,
                    (at(r, c + 1) - at(r, c - 1)) / 2.0,
                    match rows {
                        true => (at(r + 1, c) - at(r - 1, c)) / 2.0,
                        false => 0.0,
                    },
                ];
                let target = moved[r * w + c];
                for i in 0..k {
                    rhs[i] += weight * basis[i] * target;
                    for j in 0..k {
                        normal[i][j] += weight * basis[i] * basis[j];
                    }
                }
            }
        }
        let x = solve(normal, rhs, k)?;
        // The fit is moved = a ref + c + x2 d/du + x3 d/dv, with x2 = -a du.
        let a = x[0];
        match a.abs() > f64::EPSILON {
            true => Some([-x[2] / a, if rows { -x[3] / a } else { 0.0 }]),
            false => None,
        }
    }

    /// `image` convolved with a Gaussian of one pixel along the registered axes (edges clamped).
    fn smoothed(&self, image: &[f32]) -> Vec<f64> {
        let [h, w] = self.shape;
        let taps: Vec<f64> = (-3i64..=3).map(|d| (-(d * d) as f64 / 2.0).exp()).collect();
        let total: f64 = taps.iter().sum();
        let blur = |get: &dyn Fn(i64) -> f64| -> f64 {
            taps.iter()
                .zip(-3i64..=3)
                .map(|(k, d)| k * get(d))
                .sum::<f64>()
                / total
        };
        let clamp = |i: i64, n: usize| i.clamp(0, n as i64 - 1) as usize;
        let mut rows_done = vec![0.0; h * w];
        for r in 0..h {
            for c in 0..w {
                rows_done[r * w + c] = blur(&|d| f64::from(image[r * w + clamp(c as i64 + d, w)]));
            }
        }
        if !self.estimates_rows() {
            return rows_done;
        }
        let mut out = vec![0.0; h * w];
        for r in 0..h {
            for c in 0..w {
                out[r * w + c] = blur(&|d| rows_done[clamp(r as i64 + d, h) * w + c]);
            }
        }
        out
    }

    /// The 2D spectrum of `image` with its mean removed and the taper applied.
    fn spectrum(&self, image: &[f32]) -> Vec<Complex64> {
        let [h, w] = self.shape;
        assert_eq!(image.len(), h * w, "an image of the registration's shape");
        let mean = image.iter().map(|&v| f64::from(v)).sum::<f64>() / (h * w) as f64;
        let mut values: Vec<Complex64> = image
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let weight = self.window[0][i / w] * self.window[1][i % w];
                Complex64::new((f64::from(v) - mean) * weight, 0.0)
            })
            .collect();
        self.transform(&mut values, &self.forward);
        // High-pass: what does not move with the sample (the taper, the mean's plateau, slow
        // background) would pull the peak towards no shift. Wavelengths beyond a quarter of the
        // detector are damped: `1 - exp(-r^2 / 2)`, `r` the frequency in cycles per quarter.
        let signed = |i: usize, n: usize| signed_frequency(i, n) as f64;
        for (i, v) in values.iter_mut().enumerate() {
            let ry = match self.estimates_rows() {
                true => signed(i / w, h) / 4.0,
                false => 0.0,
            };
            let rx = signed(i % w, w) / 4.0;
            *v *= 1.0 - (-(ry * ry + rx * rx) / 2.0).exp();
        }
        values
    }

    /// The 2D transform of a row-major image in place: its rows, then its columns.
    fn transform(&self, values: &mut [Complex64], plans: &[Arc<dyn Fft<f64>>; 2]) {
        let [h, w] = self.shape;
        plans[1].process(values);
        let mut column = vec![Complex64::new(0.0, 0.0); h];
        for c in 0..w {
            column
                .iter_mut()
                .enumerate()
                .for_each(|(r, v)| *v = values[r * w + c]);
            plans[0].process(&mut column);
            column
                .iter()
                .enumerate()
                .for_each(|(r, v)| values[r * w + c] = *v);
        }
    }
}

/// The solution of the `k x k` system `a x = b` (Gaussian elimination with partial pivoting),
/// `None` where it is singular.
pub(crate) fn solve(mut a: [[f64; 4]; 4], mut b: [f64; 4], k: usize) -> Option<[f64; 4]> {
    let scale = (0..k).map(|i| a[i][i].abs()).fold(0.0, f64::max);
    for col in 0..k {
        let pivot = (col..k).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        // Singular, or NaN: no pivot above the scale's noise.
        if a[pivot][col].abs().partial_cmp(&(scale * 1e-12)) != Some(std::cmp::Ordering::Greater) {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..k {
            let f = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (x, p) in a[row][col..k].iter_mut().zip(&pivot_row[col..k]) {
                *x -= f * p;
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; 4];
    for row in (0..k).rev() {
        let sum: f64 = (row + 1..k).map(|j| a[row][j] * x[j]).sum();
        x[row] = (b[row] - sum) / a[row][row];
    }
    Some(x)
}

/// Index `i` of an `n`-point transform as a signed frequency (`-n/2 ..`).
fn signed_frequency(i: usize, n: usize) -> i64 {
    match i < n.div_ceil(2) {
        true => i as i64,
        false => i as i64 - n as i64,
    }
}

/// The Tukey window of `n` points tapering over an eighth of each side (all ones below
/// [`FEWEST_PIXELS`], which are not registered along this axis).
fn tukey(n: usize) -> Vec<f64> {
    let taper = n / 8;
    (0..n)
        .map(|i| {
            let from_edge = i.min(n - 1 - i);
            match n >= FEWEST_PIXELS && from_edge < taper {
                true => 0.5 - 0.5 * (PI * (from_edge as f64 + 0.5) / taper as f64).cos(),
                false => 1.0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few Gaussians in the middle of the image (away from the taper, which would pull a
    /// large shift towards none), sampled moved by `[du, dv]`.
    fn blobs(h: usize, w: usize, [du, dv]: [f64; 2]) -> Vec<f32> {
        let centres = [
            (0.4, 0.4, 2.0),
            (0.6, 0.55, 1.5),
            (0.45, 0.65, 2.5),
            (0.6, 0.35, 1.8),
        ];
        let mut image = vec![0.0f32; h * w];
        for r in 0..h {
            for c in 0..w {
                let (y, x) = (r as f64 - dv, c as f64 - du);
                image[r * w + c] = centres
                    .iter()
                    .map(|&(cy, cx, s)| {
                        let d2 = (y - cy * h as f64).powi(2) + (x - cx * w as f64).powi(2);
                        (-d2 / (2.0 * s * s)).exp()
                    })
                    .sum::<f64>() as f32;
            }
        }
        image
    }

    #[test]
    fn sub_pixel_shifts_are_found_to_the_upsampled_grid() {
        let (h, w) = (32, 48);
        let reference = blobs(h, w, [0.0, 0.0]);
        let registration = Registration::new(h, w, 20);
        for shift in [[0.0, 0.0], [1.3, -0.45], [-2.72, 1.9], [3.5, 0.25]] {
            let found = registration.shift(&blobs(h, w, shift), &reference);
            for axis in 0..2 {
                let error = (found[axis] - shift[axis]).abs();
                // The grid is 0.05 pixels; the taper and the edges cost a little more.
                assert!(error <= 0.06, "{shift:?}: found {found:?}");
            }
        }
    }

    #[test]
    fn small_shifts_are_refined_with_the_scale_and_offset_fitted() {
        let (h, w) = (32, 48);
        let reference = blobs(h, w, [0.0, 0.0]);
        let registration = Registration::new(h, w, 20);
        for shift in [[0.0, 0.0], [0.3, -0.2], [-0.45, 0.1]] {
            // A reprojection in other units, offset: the fit takes both.
            let moved: Vec<f32> = blobs(h, w, shift).iter().map(|v| 3.0 * v + 0.5).collect();
            let found = registration.refine(&moved, &reference).unwrap();
            for axis in 0..2 {
                // Central differences of Gaussians 1.5-2.5 pixels wide: a few hundredths.
                assert!(
                    (found[axis] - shift[axis]).abs() <= 0.05,
                    "{shift:?}: found {found:?}"
                );
            }
        }
        assert!(registration
            .refine(&vec![1.0; h * w], &vec![1.0; h * w])
            .is_none());
    }

    #[test]
    fn a_detector_of_few_rows_keeps_its_rows() {
        let (h, w) = (2, 40);
        let reference = blobs(h, w, [0.0, 0.0]);
        let registration = Registration::new(h, w, 20);
        assert!(!registration.estimates_rows());
        let found = registration.shift(&blobs(h, w, [2.4, 0.0]), &reference);
        assert_eq!(found[1], 0.0);
        assert!((found[0] - 2.4).abs() <= 0.06, "{found:?}");
    }
}
