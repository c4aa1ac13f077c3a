//! Seeded synthetic stacks with known fields (docs/flatfield-method.md, "Synthetic stacks"), shared
//! by the tests and the benchmark.

use super::{Pixels, Stack};
use crate::random::SplitMix64;

/// A synthetic stack recipe: `I_i = Poisson(S · (b_i + F_i) + D)` with sparse blobs `F_i` (S1),
/// or `I_i = Poisson(S · b_i · T_i + D)` with a dense texture `T_i` (S3).
#[derive(Debug, Clone, PartialEq)]
pub struct Synthetic {
    pub count: usize,
    pub height: usize,
    pub width: usize,
    /// Gaussian vignette on (S1) or a flat field of ones.
    pub vignette: bool,
    /// The vignette's σ as a fraction of the larger side (S1: 0.6; smaller is stronger).
    pub vignette_width: f64,
    /// Dark-field `k · (100 + 30 x/(W−1) + 15 y/(H−1))` on, or zero.
    pub darkfield: bool,
    /// `k` of the dark-field (S1: 1).
    pub dark_scale: f64,
    /// Per-image background level `b_i ~ U(lo, hi)`.
    pub background: (f64, f64),
    /// Gaussian blobs per image (σ ~ U(2, 10) px, amplitude U(0.5, 3)·b_i).
    pub blobs: usize,
    /// Dense texture `T_i = exp(g)/mean(exp(g))`, `g` white noise Gaussian-filtered with this
    /// σ in pixels and scaled to standard deviation 0.4 (S3); `None` for none.
    pub texture_sigma: Option<f64>,
    pub seed: u64,
}

impl Synthetic {
    /// S1 (docs/flatfield-method.md, "Synthetic stacks"): 60 images of 256², vignette, dark-field,
    /// sparse bright objects.
    pub fn s1(seed: u64) -> Self {
        Self {
            count: 60,
            height: 256,
            width: 256,
            vignette: true,
            vignette_width: 0.6,
            darkfield: true,
            dark_scale: 1.0,
            background: (200.0, 1200.0),
            blobs: 40,
            texture_sigma: None,
            seed,
        }
    }

    /// S3 (docs/flatfield-method.md, "Synthetic stacks"), dense texture: S1's fields and brightness
    /// range, every image
    /// a log-normal texture (filter σ 6 px, log standard deviation 0.4) instead of blobs.
    pub fn s3(seed: u64) -> Self {
        Self {
            blobs: 0,
            texture_sigma: Some(6.0),
            ..Self::s1(seed)
        }
    }
}

/// The log standard deviation of S3's texture.
const TEXTURE_LOG_STD: f64 = 0.4;

/// The stack and the true fields (flat-field normalised to mean 1).
#[derive(Debug, Clone)]
pub struct SyntheticData {
    pub stack: Stack,
    pub flatfield: Vec<f64>,
    pub darkfield: Vec<f64>,
    /// The per-image background level `b_i` (the true baseline).
    pub background: Vec<f64>,
}

/// A standard normal variate (Box–Muller).
fn normal(rng: &mut SplitMix64) -> f64 {
    let u1 = rng.next_f64().max(1e-300);
    let u2 = rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// The true fields of a recipe: (flat-field normalised to mean 1, dark-field).
pub fn truth(spec: &Synthetic) -> (Vec<f64>, Vec<f64>) {
    let (h, w) = (spec.height, spec.width);
    let (cy, cx) = (
        (h as f64 - 1.0) / 2.0 + 0.1 * h as f64,
        (w as f64 - 1.0) / 2.0 - 0.05 * w as f64,
    );
    let sigma = spec.vignette_width * h.max(w) as f64;
    let mut flat: Vec<f64> = (0..h * w)
        .map(|p| {
            if !spec.vignette {
                return 1.0;
            }
            let (y, x) = ((p / w) as f64, (p % w) as f64);
            (-((y - cy).powi(2) + (x - cx).powi(2)) / (2.0 * sigma * sigma)).exp()
        })
        .collect();
    let mean = flat.iter().sum::<f64>() / flat.len() as f64;
    flat.iter_mut().for_each(|v| *v /= mean);
    let dark: Vec<f64> = (0..h * w)
        .map(|p| {
            if !spec.darkfield {
                return 0.0;
            }
            let (y, x) = ((p / w) as f64, (p % w) as f64);
            spec.dark_scale
                * (100.0
                    + 30.0 * x / (w as f64 - 1.0).max(1.0)
                    + 15.0 * y / (h as f64 - 1.0).max(1.0))
        })
        .collect();
    (flat, dark)
}

/// The images of a recipe, rendered one at a time (stacks larger than memory stream through).
/// Poisson noise of mean λ is drawn as a rounded normal of variance λ (all means here exceed
/// 100, where the two agree to well below the fit's error).
#[derive(Debug)]
pub struct Images {
    spec: Synthetic,
    flat: Vec<f64>,
    dark: Vec<f64>,
    rng: SplitMix64,
    foreground: Vec<f64>,
    done: usize,
    /// The background levels `b_i` of the images rendered so far.
    levels: Vec<f64>,
}

impl Images {
    pub fn new(spec: &Synthetic) -> Self {
        let (flat, dark) = truth(spec);
        Self {
            spec: spec.clone(),
            flat,
            dark,
            rng: SplitMix64::new(spec.seed),
            foreground: vec![0.0; spec.height * spec.width],
            done: 0,
            levels: Vec::with_capacity(spec.count),
        }
    }
}

impl Iterator for Images {
    type Item = Vec<f32>;

    fn next(&mut self) -> Option<Vec<f32>> {
        if self.done == self.spec.count {
            return None;
        }
        self.done += 1;
        let (h, w) = (self.spec.height, self.spec.width);
        let (lo, hi) = self.spec.background;
        let rng = &mut self.rng;
        let b = lo + (hi - lo) * rng.next_f64();
        self.levels.push(b);
        let fg = &mut self.foreground;
        fg.fill(0.0);
        if let Some(sigma) = self.spec.texture_sigma {
            // The texture multiplies the background: F = b (T − 1) makes b + F = b T.
            let t = texture(rng, h, w, sigma);
            fg.iter_mut().zip(&t).for_each(|(f, t)| *f = b * (t - 1.0));
        }
        for _ in 0..self.spec.blobs {
            let r = 2.0 + 8.0 * rng.next_f64();
            let amp = (0.5 + 2.5 * rng.next_f64()) * b;
            let (by, bx) = (rng.next_f64() * h as f64, rng.next_f64() * w as f64);
            let reach = (4.0 * r).ceil() as isize;
            let (y0, x0) = (by as isize, bx as isize);
            for y in (y0 - reach).max(0)..(y0 + reach + 1).min(h as isize) {
                for x in (x0 - reach).max(0)..(x0 + reach + 1).min(w as isize) {
                    let d2 = (y as f64 - by).powi(2) + (x as f64 - bx).powi(2);
                    fg[y as usize * w + x as usize] += amp * (-d2 / (2.0 * r * r)).exp();
                }
            }
        }
        Some(
            (0..h * w)
                .map(|p| {
                    let lambda = self.flat[p] * (b + fg[p]) + self.dark[p];
                    (lambda + lambda.sqrt() * normal(rng)).round().max(0.0) as f32
                })
                .collect(),
        )
    }
}

/// `exp(g) / mean(exp(g))` with `g` white noise filtered by a Gaussian of `sigma` pixels
/// (separable, truncated at 4σ, mirrored edges) and scaled to mean 0, standard deviation
/// [`TEXTURE_LOG_STD`].
fn texture(rng: &mut SplitMix64, h: usize, w: usize, sigma: f64) -> Vec<f64> {
    let reach = (4.0 * sigma).ceil() as isize;
    let taps: Vec<f64> = (-reach..=reach)
        .map(|k| (-(k * k) as f64 / (2.0 * sigma * sigma)).exp())
        .collect();
    let mirror = |i: isize, n: usize| -> usize {
        let n = n as isize;
        let period = 2 * n;
        let r = i.rem_euclid(period);
        (if r < n { r } else { period - 1 - r }) as usize
    };
    let noise: Vec<f64> = (0..h * w).map(|_| normal(rng)).collect();
    let mut rows = vec![0.0; h * w];
    for y in 0..h {
        for x in 0..w {
            rows[y * w + x] = taps
                .iter()
                .zip(-reach..=reach)
                .map(|(t, k)| t * noise[y * w + mirror(x as isize + k, w)])
                .sum();
        }
    }
    let mut g = vec![0.0; h * w];
    for y in 0..h {
        for x in 0..w {
            g[y * w + x] = taps
                .iter()
                .zip(-reach..=reach)
                .map(|(t, k)| t * rows[mirror(y as isize + k, h) * w + x])
                .sum();
        }
    }
    let n = g.len() as f64;
    let mean = g.iter().sum::<f64>() / n;
    let std = (g.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    // A one-pixel image has no spread to scale: its texture is 1.
    let scale = if std > 0.0 {
        TEXTURE_LOG_STD / std
    } else {
        0.0
    };
    let e: Vec<f64> = g.iter().map(|v| ((v - mean) * scale).exp()).collect();
    let e_mean = e.iter().sum::<f64>() / n;
    e.iter().map(|v| v / e_mean).collect()
}

/// Renders the whole stack in memory.
pub fn generate(spec: &Synthetic) -> SyntheticData {
    let mut images = Images::new(spec);
    let (flatfield, darkfield) = (images.flat.clone(), images.dark.clone());
    let pixels: Vec<f32> = images.by_ref().flatten().collect();
    SyntheticData {
        stack: Stack::new(spec.count, spec.height, spec.width, Pixels::F32(pixels))
            .expect("the generator's buffer matches its shape"),
        flatfield,
        darkfield,
        background: images.levels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_texture_has_mean_one_and_the_asked_log_spread() {
        let t = texture(&mut SplitMix64::new(1), 64, 80, 6.0);
        let n = t.len() as f64;
        let mean = t.iter().sum::<f64>() / n;
        let logs: Vec<f64> = t.iter().map(|v| v.ln()).collect();
        let log_mean = logs.iter().sum::<f64>() / n;
        let log_std = (logs.iter().map(|v| (v - log_mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!((mean - 1.0).abs() < 1e-12, "{mean}");
        assert!((log_std - TEXTURE_LOG_STD).abs() < 1e-9, "{log_std}");
        // Filtered, not white: neighbours are strongly correlated (σ 6 px).
        let lag1: f64 = logs
            .windows(2)
            .map(|p| (p[0] - log_mean) * (p[1] - log_mean))
            .sum::<f64>()
            / (n - 1.0);
        assert!(lag1 / log_std.powi(2) > 0.9, "{}", lag1 / log_std.powi(2));
        assert_eq!(texture(&mut SplitMix64::new(1), 1, 1, 6.0), vec![1.0]);
    }
}
