//! Image quality against a ground truth: relative L2 error, PSNR and SSIM (3D, Gaussian window).

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

/// Separable Gaussian smoothing of a (n0, n1, n2) volume with clamped edges.
fn blur(v: &[f64], shape: [usize; 3]) -> Vec<f64> {
    let sigma = 1.5f64;
    let radius = 3i64;
    let weights: Vec<f64> = (-radius..=radius)
        .map(|i| (-(i * i) as f64 / (2.0 * sigma * sigma)).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let weights: Vec<f64> = weights.iter().map(|w| w / total).collect();
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
                    let q =
                        (pos as i64 + k as i64 - radius).clamp(0, shape[axis] as i64 - 1) as usize;
                    w * cur[i - pos * strides[axis] + q * strides[axis]]
                })
                .sum();
        }
        cur = next;
    }
    cur
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

/// Scores `rec` against `truth`, both (n0, n1, n2) volumes.
pub fn score(rec: &[f32], truth: &[f32], shape: [usize; 3]) -> Score {
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
    let (c1, c2) = ((0.01 * range).powi(2), (0.03 * range).powi(2));
    let (mx, my) = (blur(&x, shape), blur(&y, shape));
    let sq = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).collect::<Vec<f64>>();
    let (sxx, syy, sxy) = (
        blur(&sq(&x, &x), shape),
        blur(&sq(&y, &y), shape),
        blur(&sq(&x, &y), shape),
    );
    let ssim = (0..x.len())
        .map(|i| {
            let (vx, vy, cov) = (
                sxx[i] - mx[i] * mx[i],
                syy[i] - my[i] * my[i],
                sxy[i] - mx[i] * my[i],
            );
            ((2.0 * mx[i] * my[i] + c1) * (2.0 * cov + c2))
                / ((mx[i] * mx[i] + my[i] * my[i] + c1) * (vx + vy + c2))
        })
        .sum::<f64>()
        / x.len() as f64;
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
    fn identical_volumes_score_perfectly_and_noise_lowers_every_measure() {
        let shape = [6, 7, 8];
        let truth: Vec<f32> = (0..336).map(|i| ((i % 7) as f32).sin()).collect();
        let s = score(&truth, &truth, shape);
        assert_eq!(s.rel_l2, 0.0);
        assert!((s.ssim - 1.0).abs() < 1e-12 && s.psnr.is_none(), "{s:?}");
        let mut rng = crate::reference::SplitMix64::new(5);
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
