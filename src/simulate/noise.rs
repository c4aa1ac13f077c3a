//! Measured intensities from line integrals: Beer–Lambert with an incident photon count, optionally
//! Poisson-sampled with a seeded generator.

use thiserror::Error;

use crate::random::SplitMix64;

/// Errors of [`measure`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SimulateError {
    /// The incident photon count is not a positive number whose float32 (the type intensities
    /// are stored in) is normal.
    #[error(
        "photon count {photons:e}: must lie in [{:e}, {:e}] (intensities are stored as float32)",
        f32::MIN_POSITIVE,
        f32::MAX
    )]
    BadPhotons { photons: f64 },
    /// Every simulated intensity is 0: too few photons for these line integrals, the scan would
    /// hold no information.
    #[error(
        "photon count {photons:e}: every simulated intensity is 0 (too few photons for line \
         integrals up to {max_line_integral}); use more photons"
    )]
    AllZero {
        photons: f64,
        max_line_integral: f32,
    },
    /// The scan's sizes overflow 64 bits (`size^3` voxels or `angles x size^2` pixels).
    #[error("a {size}^3 scan at {angles} angles: its sizes overflow 64 bits")]
    TooLarge { size: usize, angles: usize },
    /// A line integral is NaN or infinite, or so negative that I0 exp(-P) overflows.
    #[error("line integral {index} is {value}: expected a finite value")]
    BadProjection { index: usize, value: f32 },
    /// The scan's geometry is not valid (odd or zero sizes, no angles, tilt out of range).
    #[error(transparent)]
    Geometry(#[from] crate::geometry::GeometryError),
    /// The scan would not fit in host memory.
    #[error(transparent)]
    HostMemory(#[from] crate::memory::HostMemoryError),
}

/// Noise model of [`measure`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Noise {
    /// Expected intensities `I0 exp(-P)` (real-valued, no noise).
    None,
    /// Photon counts drawn from Poisson(`I0 exp(-P)`) with this seed.
    Poisson { seed: u64 },
}

/// Intensities as a detector records them, with their flat and dark fields (one frame each:
/// the flat is exactly `I0` and the dark exactly 0, so all noise is in the projections).
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// Same layout as the line integrals, `(ntheta, deth, detw)`.
    pub data: Vec<f32>,
    /// One frame `(deth, detw)`.
    pub flat: Vec<f32>,
    /// One frame `(deth, detw)`.
    pub dark: Vec<f32>,
}

/// Refuses an incident photon count that is not a positive number whose float32 (the type
/// intensities are stored in) is normal: 1e-300 is a positive f64 but a zero f32.
pub fn check_photons(photons: f64) -> Result<(), SimulateError> {
    match photons > 0.0 && (photons as f32).is_normal() {
        true => Ok(()),
        false => Err(SimulateError::BadPhotons { photons }),
    }
}

/// Intensities `I = I0 exp(-P)` of line integrals `projections` (frames of `frame_len` pixels).
pub fn measure(
    projections: &[f32],
    frame_len: usize,
    photons: f64,
    noise: Noise,
) -> Result<Measurement, SimulateError> {
    check_photons(photons)?;
    let stored = photons as f32;
    let mut rng = match noise {
        Noise::None => None,
        Noise::Poisson { seed } => Some(SplitMix64::new(seed)),
    };
    let mut data = Vec::with_capacity(projections.len());
    for (index, &p) in projections.iter().enumerate() {
        let mean = photons * (-(p as f64)).exp();
        if !p.is_finite() || !mean.is_finite() {
            return Err(SimulateError::BadProjection { index, value: p });
        }
        data.push(match rng.as_mut() {
            Some(rng) => poisson(rng, mean) as f32,
            None => mean as f32,
        });
    }
    if !data.is_empty() && data.iter().all(|&v| v == 0.0) {
        return Err(SimulateError::AllZero {
            photons,
            max_line_integral: projections
                .iter()
                .copied()
                .fold(f32::NEG_INFINITY, f32::max),
        });
    }
    Ok(Measurement {
        data,
        flat: vec![stored; frame_len],
        dark: vec![0.0; frame_len],
    })
}

/// Below this mean the sampler inverts the CDF; at and above it, it uses PTRS, which needs
/// mean >= 10 (Hörmann 1993).
const INVERSION_LIMIT: f64 = 10.0;

/// One draw from Poisson(`mean`); `mean` must be finite and non-negative (anything else gives 0).
///
/// Exact in distribution for every mean (no normal approximation):
/// * mean < 10: inversion by sequential search, `k` the first index with `u < F(k)`. The
///   probabilities `e^{-mean} mean^k / k!` are built by recurrence; `e^{-10} ≈ 4.5e-5` keeps
///   them far from underflow.
/// * mean >= 10: PTRS, transformed rejection with squeeze (W. Hörmann, "The transformed
///   rejection method for generating Poisson random variables", Insurance: Mathematics and
///   Economics 12, 1993), the algorithm numpy uses; about 1.1 uniform pairs per draw.
pub fn poisson(rng: &mut SplitMix64, mean: f64) -> f64 {
    if !(mean > 0.0 && mean.is_finite()) {
        return 0.0;
    }
    if mean < INVERSION_LIMIT {
        let u = rng.next_f64();
        let mut k = 0.0;
        let mut p = (-mean).exp();
        let mut cdf = p;
        // The cap guards against an endless loop should rounding leave the summed CDF below u;
        // the probability of k > 200 at mean < 10 is below 1e-200.
        while u >= cdf && k < 200.0 {
            k += 1.0;
            p *= mean / k;
            cdf += p;
        }
        return k;
    }
    let slam = mean.sqrt();
    let loglam = mean.ln();
    let b = 0.931 + 2.53 * slam;
    let a = -0.059 + 0.02483 * b;
    let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
    let vr = 0.9277 - 3.6224 / (b - 2.0);
    loop {
        let u = rng.next_f64() - 0.5;
        let v = rng.next_f64();
        let us = 0.5 - u.abs();
        let k = ((2.0 * a / us + b) * u + mean + 0.43).floor();
        if us >= 0.07 && v <= vr {
            return k;
        }
        if k < 0.0 || (us < 0.013 && v > us) {
            continue;
        }
        // v can be 0 (ln = -inf), which always accepts, as in the published algorithm.
        if v.ln() + inv_alpha.ln() - (a / (us * us) + b).ln()
            <= -mean + k * loglam - ln_factorial(k)
        {
            return k;
        }
    }
}

/// `ln(k!)` for integer-valued `k >= 0`: exact sums below 16, Stirling's series above (the
/// truncation error of its three correction terms is below 1e-12 there).
fn ln_factorial(k: f64) -> f64 {
    if k < 16.0 {
        return (2..=k as u64).map(|i| (i as f64).ln()).sum();
    }
    let x = k + 1.0;
    let x2 = x * x;
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x * x2)
        + 1.0 / (1260.0 * x * x2 * x2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_factorial_matches_the_exact_sum_across_the_switch() {
        for k in [0u64, 1, 5, 15, 16, 17, 40, 200] {
            let exact: f64 = (2..=k).map(|i| (i as f64).ln()).sum();
            let got = ln_factorial(k as f64);
            assert!(
                (got - exact).abs() <= 1e-10 * exact.max(1.0),
                "k {k}: {got} vs {exact}"
            );
        }
    }

    #[test]
    fn noiseless_measurement_is_beer_lambert_and_bad_inputs_are_rejected() {
        let m = measure(&[0.0, 1.0, 2.5], 3, 1000.0, Noise::None).unwrap();
        for (i, p) in [0.0f64, 1.0, 2.5].iter().enumerate() {
            assert!((m.data[i] as f64 - 1000.0 * (-p).exp()).abs() < 1e-3);
        }
        assert_eq!(m.flat, vec![1000.0; 3]);
        assert_eq!(m.dark, vec![0.0; 3]);
        for photons in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300, 1e-40, 1e39] {
            assert!(
                matches!(
                    measure(&[0.0], 1, photons, Noise::None),
                    Err(SimulateError::BadPhotons { .. })
                ),
                "{photons}"
            );
        }
        // A normal f32 count that still records nothing: noiseless intensities that underflow,
        // and Poisson draws at a mean far below one photon.
        assert!(matches!(
            measure(&[60.0], 1, 1e-20, Noise::None),
            Err(SimulateError::AllZero { .. })
        ));
        assert!(matches!(
            measure(&[0.0; 64], 8, 1e-9, Noise::Poisson { seed: 1 }),
            Err(SimulateError::AllZero { .. })
        ));
        assert!(matches!(
            measure(&[0.0, f32::NAN], 1, 10.0, Noise::None),
            Err(SimulateError::BadProjection { index: 1, .. })
        ));
        assert!(matches!(
            measure(&[-1000.0], 1, 10.0, Noise::None),
            Err(SimulateError::BadProjection { index: 0, .. })
        ));
    }

    #[test]
    fn poisson_draws_repeat_with_the_seed_and_are_integers() {
        let draw = |seed| {
            let mut rng = SplitMix64::new(seed);
            (0..100)
                .map(|i| poisson(&mut rng, i as f64 * 0.7))
                .collect::<Vec<_>>()
        };
        let a = draw(3);
        assert_eq!(a, draw(3));
        assert_ne!(a, draw(4));
        assert!(a.iter().all(|k| *k >= 0.0 && k.fract() == 0.0));
        assert_eq!(poisson(&mut SplitMix64::new(1), 0.0), 0.0);
        assert_eq!(poisson(&mut SplitMix64::new(1), f64::NAN), 0.0);
    }
}
