//! Resampling between the image size and the working grid (docs/flatfield-method.md,
//! "Resampling"), in f64 on the host.
//!
//! Per axis with factor `s = n_in / n_out`: when `s > 1` a Gaussian anti-alias blur
//! (σ = (s − 1)/2, radius ⌊4σ + 0.5⌋, SciPy "reflect" boundary `d c b a | a b c d`), then linear
//! interpolation at source coordinate `(dst + 0.5)·s − 0.5` clamped to the edge pixels. This is
//! skimage's `resize(order=1, anti_aliasing=True)` as used by pybasic/KINTSUGI; with `s ≤ 1` it is
//! the bilinear upsampling used for the fields. Both steps are linear and separable, so each axis
//! is one sparse weight matrix and only the taps that reach an output pixel are ever computed: a
//! 2048² image costs ~17 M multiply-adds to reach 128², not a full-resolution blur.

/// The sparse weights of one axis: output `o` is `Σ taps[o]` of `(source index, weight)`.
#[derive(Debug, Clone, PartialEq)]
pub struct AxisWeights {
    taps: Vec<Vec<(usize, f64)>>,
    n_in: usize,
}

/// SciPy ndimage "reflect" (half-sample symmetric) index folding, for any distance.
fn reflect(i: isize, n: usize) -> usize {
    let n = n as isize;
    let period = 2 * n;
    let m = i.rem_euclid(period);
    (if m < n { m } else { period - 1 - m }) as usize
}

impl AxisWeights {
    pub fn new(n_in: usize, n_out: usize) -> Self {
        let s = n_in as f64 / n_out as f64;
        let blur: Vec<(isize, f64)> = if s > 1.0 {
            let sigma = (s - 1.0) / 2.0;
            let radius = (4.0 * sigma + 0.5).floor() as isize;
            let raw: Vec<(isize, f64)> = (-radius..=radius)
                .map(|t| (t, (-0.5 * (t * t) as f64 / (sigma * sigma)).exp()))
                .collect();
            let total: f64 = raw.iter().map(|(_, w)| w).sum();
            raw.into_iter().map(|(t, w)| (t, w / total)).collect()
        } else {
            vec![(0, 1.0)]
        };
        let taps = (0..n_out)
            .map(|o| {
                let c = ((o as f64 + 0.5) * s - 0.5).clamp(0.0, (n_in - 1) as f64);
                let lo = c.floor() as usize;
                let hi = (lo + 1).min(n_in - 1);
                let frac = c - lo as f64;
                let mut dense: Vec<(usize, f64)> = Vec::new();
                for (p, wp) in [(lo, 1.0 - frac), (hi, frac)] {
                    if wp == 0.0 {
                        continue;
                    }
                    for &(t, wb) in &blur {
                        let src = reflect(p as isize + t, n_in);
                        match dense.iter_mut().find(|(i, _)| *i == src) {
                            Some(e) => e.1 += wp * wb,
                            None => dense.push((src, wp * wb)),
                        }
                    }
                }
                dense.sort_by_key(|(i, _)| *i);
                dense
            })
            .collect();
        Self { taps, n_in }
    }

    pub fn n_out(&self) -> usize {
        self.taps.len()
    }
}

/// A 2D resampler from `in_h × in_w` to `out_h × out_w`, built once and applied to many images.
#[derive(Debug, Clone)]
pub struct Resampler {
    rows: AxisWeights,
    cols: AxisWeights,
}

impl Resampler {
    pub fn new(in_h: usize, in_w: usize, out_h: usize, out_w: usize) -> Self {
        Self {
            rows: AxisWeights::new(in_h, out_h),
            cols: AxisWeights::new(in_w, out_w),
        }
    }

    /// Resamples one row-major image (`in_h × in_w` values of any numeric type) into `out`.
    pub fn apply<T: Copy + Into<f64>>(&self, image: &[T], out: &mut [f64]) {
        let (in_h, in_w) = (self.rows.n_in, self.cols.n_in);
        let (out_h, out_w) = (self.rows.n_out(), self.cols.n_out());
        assert_eq!(image.len(), in_h * in_w);
        assert_eq!(out.len(), out_h * out_w);
        // Only the source rows some output row uses are filtered along x.
        let mut needed = vec![false; in_h];
        for taps in &self.rows.taps {
            for &(r, _) in taps {
                needed[r] = true;
            }
        }
        let mut tmp = vec![0.0; in_h * out_w];
        for r in (0..in_h).filter(|&r| needed[r]) {
            let row = &image[r * in_w..(r + 1) * in_w];
            for (x, taps) in self.cols.taps.iter().enumerate() {
                tmp[r * out_w + x] = taps.iter().map(|&(c, w)| w * row[c].into()).sum();
            }
        }
        out.fill(0.0);
        for (y, taps) in self.rows.taps.iter().enumerate() {
            let dst = &mut out[y * out_w..(y + 1) * out_w];
            for &(r, w) in taps {
                for (d, s) in dst.iter_mut().zip(&tmp[r * out_w..(r + 1) * out_w]) {
                    *d += w * s;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one() {
        for (n_in, n_out) in [
            (256, 128),
            (2048, 128),
            (171, 128),
            (16, 128),
            (128, 128),
            (1, 4),
        ] {
            let a = AxisWeights::new(n_in, n_out);
            for taps in &a.taps {
                let s: f64 = taps.iter().map(|t| t.1).sum();
                assert!((s - 1.0).abs() < 1e-12, "{n_in}->{n_out}: {s}");
            }
        }
    }

    #[test]
    fn constant_stays_constant_and_ramp_stays_linear() {
        let r = Resampler::new(64, 96, 32, 32);
        let mut out = vec![0.0; 32 * 32];
        r.apply(&vec![7.5f32; 64 * 96], &mut out);
        assert!(out.iter().all(|v| (v - 7.5).abs() < 1e-12));
        // x-ramp: the output at column o equals the ramp at the source coordinate (away from the
        // border, where the reflecting blur bends it).
        let ramp: Vec<f64> = (0..64 * 96).map(|i| (i % 96) as f64).collect();
        r.apply(&ramp, &mut out);
        let s = 96.0 / 32.0;
        for o in 4..28 {
            let want = (o as f64 + 0.5) * s - 0.5;
            assert!((out[5 * 32 + o] - want).abs() < 1e-9, "{o}");
        }
    }

    #[test]
    fn identity_when_sizes_match() {
        let r = Resampler::new(5, 7, 5, 7);
        let img: Vec<f64> = (0..35).map(|i| (i * i) as f64).collect();
        let mut out = vec![0.0; 35];
        r.apply(&img, &mut out);
        assert_eq!(out, img);
    }

    #[test]
    fn reflect_folds_like_scipy() {
        let n = 4;
        let got: Vec<usize> = (-5..9).map(|i| reflect(i, n)).collect();
        assert_eq!(got, vec![3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0, 0]);
    }
}
