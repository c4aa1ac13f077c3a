//! Seeded synthetic stacks with known fields (spec §9.2), shared by the tests and the benchmark.

use super::{Pixels, Stack};
use crate::reference::SplitMix64;

/// A synthetic stack recipe: `I_i = Poisson(S · (b_i + F_i) + D)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthetic {
    pub count: usize,
    pub height: usize,
    pub width: usize,
    /// Gaussian vignette on (S1) or a flat field of ones.
    pub vignette: bool,
    /// Dark-field `100 + 30 x/(W−1) + 15 y/(H−1)` on, or zero.
    pub darkfield: bool,
    /// Per-image background level `b_i ~ U(lo, hi)`.
    pub background: (f64, f64),
    /// Gaussian blobs per image (σ ~ U(2, 10) px, amplitude U(0.5, 3)·b_i).
    pub blobs: usize,
    pub seed: u64,
}

impl Synthetic {
    /// S1 of the specification: 60 images of 256², vignette, dark-field, sparse bright objects.
    pub fn s1(seed: u64) -> Self {
        Self {
            count: 60,
            height: 256,
            width: 256,
            vignette: true,
            darkfield: true,
            background: (200.0, 1200.0),
            blobs: 40,
            seed,
        }
    }
}

/// The stack and the true fields (flat-field normalised to mean 1).
#[derive(Debug, Clone)]
pub struct SyntheticData {
    pub stack: Stack,
    pub flatfield: Vec<f64>,
    pub darkfield: Vec<f64>,
}

/// A standard normal variate (Box–Muller).
fn normal(rng: &mut SplitMix64) -> f64 {
    let u1 = rng.next_f64().max(1e-300);
    let u2 = rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Renders the stack. Poisson noise of mean λ is drawn as a rounded normal of variance λ (all
/// means here exceed 100, where the two agree to well below the fit's error).
pub fn generate(spec: &Synthetic) -> SyntheticData {
    let (h, w) = (spec.height, spec.width);
    let mut rng = SplitMix64::new(spec.seed);
    let (cy, cx) = (
        (h as f64 - 1.0) / 2.0 + 0.1 * h as f64,
        (w as f64 - 1.0) / 2.0 - 0.05 * w as f64,
    );
    let sigma = 0.6 * h.max(w) as f64;
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
            100.0 + 30.0 * x / (w as f64 - 1.0).max(1.0) + 15.0 * y / (h as f64 - 1.0).max(1.0)
        })
        .collect();
    let mut pixels = Vec::with_capacity(spec.count * h * w);
    let mut fg = vec![0.0; h * w];
    for _ in 0..spec.count {
        let b = spec.background.0 + (spec.background.1 - spec.background.0) * rng.next_f64();
        fg.fill(0.0);
        for _ in 0..spec.blobs {
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
        for p in 0..h * w {
            let lambda = flat[p] * (b + fg[p]) + dark[p];
            let v = (lambda + lambda.sqrt() * normal(&mut rng)).round().max(0.0);
            pixels.push(v as f32);
        }
    }
    SyntheticData {
        stack: Stack::new(spec.count, h, w, Pixels::F32(pixels))
            .expect("the generator's buffer matches its shape"),
        flatfield: flat,
        darkfield: dark,
    }
}
