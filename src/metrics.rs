//! Image quality against a ground truth: relative L2 error, PSNR and SSIM (3D, Gaussian window).

use num_complex::Complex;
use rustfft::FftPlanner;
use serde::Serialize;

/// What `lamino score` prints.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Score {
    /// `|rec - truth| / |truth|`
    pub rel_l2: f64,
    /// `10 log10(range^2 / MSE)` with range = max(truth) - min(truth); `None` (JSON `null`) for
    /// identical volumes, whose PSNR is unbounded.
    pub psnr: Option<f64>,
    /// Mean structural similarity (Wang et al. 2004) with a 3D Gaussian window (sigma 1.5 voxels,
    /// radius 3), constants K1 = 0.01, K2 = 0.03 of the truth's range.
    pub ssim: f64,
}

/// Radius of the SSIM window (voxels).
const WINDOW_RADIUS: usize = 3;

/// The SSIM window's normalised weights: a Gaussian of sigma 1.5 voxels over `-3..=3`.
fn window_weights() -> Vec<f64> {
    let sigma = 1.5f64;
    let radius = WINDOW_RADIUS as i64;
    let weights: Vec<f64> = (-radius..=radius)
        .map(|i| (-(i * i) as f64 / (2.0 * sigma * sigma)).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}

/// Slice `z` of the separable Gaussian smoothing (clamped edges) of the (n0, n1, n2) field whose
/// voxel `i` is `field(i)`: along z from the field's slices `z - 3..=z + 3`, then along y and x
/// within the slice. Each value is the sum of the same products, in the same order, as when the
/// whole volume is smoothed axis by axis, so smoothing a slice at a time changes no bit; it
/// holds three slices rather than two copies of the volume.
fn blur_slice(
    field: impl Fn(usize) -> f64,
    z: usize,
    shape: [usize; 3],
    weights: &[f64],
) -> Vec<f64> {
    let [n0, n1, n2] = shape;
    let plane = n1 * n2;
    let clamped =
        |pos: usize, k: usize, n: usize| (pos + k).saturating_sub(WINDOW_RADIUS).min(n - 1);
    let along_z: Vec<f64> = (0..plane)
        .map(|j| {
            weights
                .iter()
                .enumerate()
                .map(|(k, w)| w * field(clamped(z, k, n0) * plane + j))
                .sum()
        })
        .collect();
    let along_y: Vec<f64> = (0..plane)
        .map(|j| {
            let y = j / n2;
            weights
                .iter()
                .enumerate()
                .map(|(k, w)| w * along_z[j - y * n2 + clamped(y, k, n1) * n2])
                .sum()
        })
        .collect();
    (0..plane)
        .map(|j| {
            let x = j % n2;
            weights
                .iter()
                .enumerate()
                .map(|(k, w)| w * along_y[j - x + clamped(x, k, n2)])
                .sum()
        })
        .collect()
}

/// Host memory [`score`] needs beyond the two volumes, in bytes: the five smoothed slices and
/// the two partial smoothings of the one being made.
pub fn score_working_bytes(shape: [usize; 3]) -> u64 {
    (shape[1] as u64)
        .saturating_mul(shape[2] as u64)
        .saturating_mul(7 * 8)
}

/// `(|rec - truth|^2, |truth|^2)` in f64.
fn error_sums(rec: &[f32], truth: &[f32]) -> (f64, f64) {
    assert_eq!(rec.len(), truth.len());
    rec.iter().zip(truth).fold((0.0, 0.0), |(d, n), (&a, &b)| {
        let (a, b) = (a as f64, b as f64);
        (d + (a - b) * (a - b), n + b * b)
    })
}

fn relative(diff2: f64, norm2: f64) -> f64 {
    (diff2 / norm2.max(f64::MIN_POSITIVE)).sqrt()
}

/// The larger of `a` and `b`, NaN when either is: a maximum folded with it is NaN as soon as
/// one value is, so that `max <= bound` fails, where `fold(0.0, f64::max)` skips the NaN.
pub fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// The smaller of `a` and `b`, NaN when either is (see [`nan_max`]).
pub fn nan_min(a: f64, b: f64) -> f64 {
    -nan_max(-a, -b)
}

/// `|rec - truth| / |truth|`, accumulated in f64.
pub fn rel_l2(rec: &[f32], truth: &[f32]) -> f64 {
    let (diff2, norm2) = error_sums(rec, truth);
    relative(diff2, norm2)
}

/// A reconstruction's error split between the spatial frequencies a laminography scan measures
/// and those it cannot: at tilt `T` from the tomography plane every projection's Fourier plane
/// is tilted by `T` from the rotation axis, so no angle measures the double cone
/// `|k_r| < |k_z| tan T` around the axis (z). Both parts are relative to `|truth|`, and
/// `measured^2 + missing^2 = rel_l2^2` (Parseval).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct MissingConeSplit {
    /// The tilt the cone belongs to (degrees).
    pub tilt_deg: f64,
    /// `|truth in the cone| / |truth|`: how much of the object no scan at this tilt measures.
    pub truth_in_cone: f64,
    /// `|(rec - truth) outside the cone| / |truth|`: the error where the data decide.
    pub rel_l2_measured: f64,
    /// `|(rec - truth) in the cone| / |truth|`: the error left to the regularisation.
    pub rel_l2_missing: f64,
}

/// [`MissingConeSplit`] of `rec` against `truth`, (n0, n1, n2) volumes with z along n0, for a
/// scan at `tilt_deg`. Two f64 3D FFTs on the CPU: it holds two complex f64 copies of the
/// volume.
pub fn missing_cone_split(
    rec: &[f32],
    truth: &[f32],
    shape: [usize; 3],
    tilt_deg: f64,
) -> MissingConeSplit {
    let spectrum = |f: &dyn Fn(usize) -> f64| {
        let mut data: Vec<Complex<f64>> =
            (0..truth.len()).map(|i| Complex::new(f(i), 0.0)).collect();
        fft_3d(&mut data, shape);
        data
    };
    let truth_hat = spectrum(&|i| truth[i] as f64);
    let error_hat = spectrum(&|i| rec[i] as f64 - truth[i] as f64);
    // Frequencies in cycles per voxel: the same unit along every axis (cubic voxels).
    let freq = |k: usize, n: usize| {
        let k = if k > n / 2 {
            k as f64 - n as f64
        } else {
            k as f64
        };
        k / n as f64
    };
    let tan = tilt_deg.to_radians().tan().abs();
    let [n0, n1, n2] = shape;
    let (mut norm2, mut truth_cone2, mut measured2, mut missing2) = (0.0, 0.0, 0.0, 0.0);
    for (i, (t, e)) in truth_hat.iter().zip(&error_hat).enumerate() {
        let (kz, ky, kx) = (
            freq(i / (n1 * n2), n0),
            freq(i / n2 % n1, n1),
            freq(i % n2, n2),
        );
        let in_cone = kx.hypot(ky) < kz.abs() * tan;
        norm2 += t.norm_sqr();
        if in_cone {
            truth_cone2 += t.norm_sqr();
            missing2 += e.norm_sqr();
        } else {
            measured2 += e.norm_sqr();
        }
    }
    MissingConeSplit {
        tilt_deg,
        truth_in_cone: relative(truth_cone2, norm2),
        rel_l2_measured: relative(measured2, norm2),
        rel_l2_missing: relative(missing2, norm2),
    }
}

/// The forward 3D DFT of the (n0, n1, n2) row-major `data`, in place, one axis at a time with
/// rustfft (the metrics sit below the crate's own FFT modules; a volume's spectrum here is one
/// CPU call, not a hot path).
fn fft_3d(data: &mut [Complex<f64>], shape: [usize; 3]) {
    let mut planner = FftPlanner::<f64>::new();
    let strides = [shape[1] * shape[2], shape[2], 1];
    for axis in 0..3 {
        let (n, stride) = (shape[axis], strides[axis]);
        let fft = planner.plan_fft_forward(n);
        let mut line = vec![Complex::new(0.0, 0.0); n];
        // Every line along `axis` starts at an index whose `axis` coordinate is 0.
        let starts = (0..data.len()).filter(|i| (i / stride) % n == 0);
        for start in starts {
            for (k, v) in line.iter_mut().enumerate() {
                *v = data[start + k * stride];
            }
            fft.process(&mut line);
            for (k, v) in line.iter().enumerate() {
                data[start + k * stride] = *v;
            }
        }
    }
}

/// SSIM's stabilising constants `(c1, c2)` for the dynamic range `range` (Wang et al. 2004:
/// `K1 = 0.01`, `K2 = 0.03`).
fn ssim_constants(range: f64) -> (f64, f64) {
    ((0.01 * range).powi(2), (0.03 * range).powi(2))
}

/// SSIM at one voxel from the windowed means `[mx, my]` and second moments `[sxx, syy, sxy]`
/// of the two volumes around it.
fn ssim_of_moments([mx, my]: [f64; 2], [sxx, syy, sxy]: [f64; 3], (c1, c2): (f64, f64)) -> f64 {
    let (vx, vy, cov) = (sxx - mx * mx, syy - my * my, sxy - mx * my);
    ((2.0 * mx * my + c1) * (2.0 * cov + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
}

/// Scores `rec` against `truth`, both (n0, n1, n2) volumes, a z slice at a time: beyond the
/// volumes it holds [`score_working_bytes`].
pub fn score(rec: &[f32], truth: &[f32], shape: [usize; 3]) -> Score {
    let (diff2, norm2) = error_sums(rec, truth);
    let (lo, hi) = truth
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &b| {
            (l.min(b as f64), h.max(b as f64))
        });
    let range = (hi - lo).max(f64::MIN_POSITIVE);
    let len = rec.len();
    let mse = diff2 / len as f64;
    let constants = ssim_constants(range);
    let weights = window_weights();
    let (x, y) = (|i: usize| rec[i] as f64, |i: usize| truth[i] as f64);
    let ssim = (0..shape[0])
        .flat_map(|z| {
            let blur = |f: &dyn Fn(usize) -> f64| blur_slice(f, z, shape, &weights);
            let (mx, my) = (blur(&x), blur(&y));
            let (sxx, syy, sxy) = (
                blur(&|i| x(i) * x(i)),
                blur(&|i| y(i) * y(i)),
                blur(&|i| x(i) * y(i)),
            );
            (0..mx.len())
                .map(|i| ssim_of_moments([mx[i], my[i]], [sxx[i], syy[i], sxy[i]], constants))
                .collect::<Vec<f64>>()
        })
        .sum::<f64>()
        / len as f64;
    Score {
        rel_l2: relative(diff2, norm2),
        psnr: (mse > 0.0).then(|| 10.0 * (range * range / mse).log10()),
        ssim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_cone_holds_what_varies_along_z_only_and_parts_add_up() {
        let shape = [8, 8, 8];
        let at = |f: &dyn Fn(usize, usize, usize) -> f32| -> Vec<f32> {
            (0..512).map(|i| f(i / 64, i / 8 % 8, i % 8)).collect()
        };
        // Layers (a zero-mean profile along z): all in the cone at any tilt; stripes along x:
        // none of it.
        let layers = at(&|z, _, _| if z % 2 == 0 { 1.0 } else { -1.0 });
        let stripes = at(&|_, _, x| if x % 2 == 0 { 1.0 } else { -1.0 });
        let zero = vec![0.0; 512];
        let split = missing_cone_split(&zero, &layers, shape, 30.0);
        assert!((split.truth_in_cone - 1.0).abs() <= 1e-12, "{split:?}");
        assert!((split.rel_l2_missing - 1.0).abs() <= 1e-12, "{split:?}");
        assert!(split.rel_l2_measured <= 1e-12, "{split:?}");
        let split = missing_cone_split(&zero, &stripes, shape, 30.0);
        assert!(
            split.truth_in_cone <= 1e-12 && split.rel_l2_missing <= 1e-12,
            "{split:?}"
        );
        // A general error: the parts add up to the relative L2 error (Parseval).
        let truth: Vec<f32> = (0..512).map(|i| ((i * 37) % 11) as f32 / 7.0).collect();
        let rec: Vec<f32> = (0..512).map(|i| ((i * 13) % 5) as f32 / 3.0).collect();
        let split = missing_cone_split(&rec, &truth, shape, 30.0);
        let total = split.rel_l2_measured.hypot(split.rel_l2_missing);
        assert!((total - rel_l2(&rec, &truth)).abs() <= 1e-9, "{split:?}");
        assert!(
            split.rel_l2_measured > 0.0 && split.rel_l2_missing > 0.0,
            "{split:?}"
        );
    }

    /// The whole-volume computation `score` replaced (f64 copies of both volumes and of every
    /// product, each smoothed axis by axis over the whole volume): the slice-at-a-time score
    /// must give the same bits.
    fn score_whole_volume(rec: &[f32], truth: &[f32], shape: [usize; 3]) -> Score {
        let blur = |v: &[f64]| {
            let weights = window_weights();
            let radius = WINDOW_RADIUS as i64;
            let strides = [shape[1] * shape[2], shape[2], 1];
            let mut cur = v.to_vec();
            for axis in 0..3 {
                let mut next = vec![0.0; cur.len()];
                for (i, out) in next.iter_mut().enumerate() {
                    let pos = (i / strides[axis]) % shape[axis];
                    *out = weights
                        .iter()
                        .enumerate()
                        .map(|(k, w)| {
                            let q = (pos as i64 + k as i64 - radius)
                                .clamp(0, shape[axis] as i64 - 1)
                                as usize;
                            w * cur[i - pos * strides[axis] + q * strides[axis]]
                        })
                        .sum();
                }
                cur = next;
            }
            cur
        };
        let (diff2, norm2) = error_sums(rec, truth);
        let x: Vec<f64> = rec.iter().map(|&v| v as f64).collect();
        let y: Vec<f64> = truth.iter().map(|&v| v as f64).collect();
        let (lo, hi) = y
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &b| {
                (l.min(b), h.max(b))
            });
        let range = (hi - lo).max(f64::MIN_POSITIVE);
        let mse = diff2 / x.len() as f64;
        let constants = ssim_constants(range);
        let sq = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).collect::<Vec<f64>>();
        let (mx, my) = (blur(&x), blur(&y));
        let (sxx, syy, sxy) = (blur(&sq(&x, &x)), blur(&sq(&y, &y)), blur(&sq(&x, &y)));
        let ssim = (0..x.len())
            .map(|i| ssim_of_moments([mx[i], my[i]], [sxx[i], syy[i], sxy[i]], constants))
            .sum::<f64>()
            / x.len() as f64;
        Score {
            rel_l2: relative(diff2, norm2),
            psnr: (mse > 0.0).then(|| 10.0 * (range * range / mse).log10()),
            ssim,
        }
    }

    #[test]
    fn scoring_a_slice_at_a_time_gives_the_whole_volume_bits() {
        let mut rng = crate::random::SplitMix64::new(11);
        // Shapes smaller and larger than the window along every axis (clamped edges everywhere).
        for shape in [[9, 10, 11], [2, 3, 4], [1, 8, 5], [12, 1, 7]] {
            let len = shape.iter().product();
            let truth: Vec<f32> = (0..len)
                .map(|_| rng.next_f64() as f32 * 3.0 - 1.0)
                .collect();
            let rec: Vec<f32> = truth
                .iter()
                .map(|&v| v + 0.3 * (rng.next_f64() as f32 - 0.5))
                .collect();
            let (got, want) = (
                score(&rec, &truth, shape),
                score_whole_volume(&rec, &truth, shape),
            );
            assert!(
                got.ssim.to_bits() == want.ssim.to_bits()
                    && got.rel_l2.to_bits() == want.rel_l2.to_bits()
                    && got.psnr.map(f64::to_bits) == want.psnr.map(f64::to_bits)
                    && got.ssim < 1.0,
                "{shape:?}: {got:?} vs {want:?}"
            );
        }
    }

    #[test]
    fn identical_volumes_score_perfectly_and_noise_lowers_every_measure() {
        let shape = [6, 7, 8];
        let truth: Vec<f32> = (0..336).map(|i| ((i % 7) as f32).sin()).collect();
        let s = score(&truth, &truth, shape);
        assert_eq!(s.rel_l2, 0.0);
        assert!((s.ssim - 1.0).abs() < 1e-12 && s.psnr.is_none(), "{s:?}");
        let mut rng = crate::random::SplitMix64::new(5);
        let noisy: Vec<f32> = truth
            .iter()
            .map(|&v| v + 0.6 * (rng.next_f64() as f32 - 0.5))
            .collect();
        let n = score(&noisy, &truth, shape);
        assert!(
            n.rel_l2 > 0.0 && n.ssim < 0.99 && n.psnr.is_some_and(|p| p < 40.0),
            "{n:?}"
        );
        // PSNR of a constant error e: 10 log10(range^2 / e^2).
        let shifted: Vec<f32> = truth.iter().map(|&v| v + 0.1).collect();
        let range = truth.iter().cloned().fold(f32::MIN, f32::max)
            - truth.iter().cloned().fold(f32::MAX, f32::min);
        let expect = 10.0 * ((range as f64).powi(2) / 0.01).log10();
        let psnr = score(&shifted, &truth, shape).psnr;
        assert!(
            psnr.is_some_and(|p| (p - expect).abs() < 1e-3),
            "{psnr:?} vs {expect}"
        );
    }
}
