//! The open-beam intensity `I0·S(x)` of a projection series that has no white or dark frames,
//! estimated from the projections themselves (`lamino reconstruct --flatfield envelope`).
//!
//! Why not BaSiC: BaSiC separates a shading that every image shares from a foreground that
//! varies. A sample that is always in view is part of what every projection shares, so BaSiC
//! puts its persistent attenuation into the flat-field (and, with dark-field estimation on,
//! into the dark-field): measured on a simulated blob scan, 42 % of the intensity went into the
//! dark-field and the reconstruction's relative L2 error was 3.4. No dark-field is estimable
//! without dark frames either, so none is estimated here.
//!
//! What is estimable: attenuation only lowers intensities, so at each pixel the brightest
//! projections are the ones where the sample leaves the ray (or attenuates least). The upper
//! envelope `U(x)`, a high quantile over angles of `ln I(θ, x)`, equals `ln(I0·S(x))` wherever
//! the sample leaves the view at some angles, and lies below it where the sample is always in
//! view. A smooth low-order surface is fitted to the pixels on the envelope's top (robust
//! asymmetric reweighting: pixels far below the surface are the always-covered ones and are
//! left out), and extrapolated over the covered ones. Line integrals are then
//! `P = surface(x) − ln I(θ, x)`, zero on open beam.
//!
//! Limits, said plainly: the shading is modelled as smooth (a total-degree-4 polynomial in
//! `ln S`); pixel-to-pixel gain differences are not estimated. Where the sample covers most of
//! the detector at every angle, the surface is an extrapolation and the report says how much of
//! the detector it rests on.

use super::FlatfieldError;
use crate::metrics::nan_max;

/// The upper envelope is this quantile over angles: high enough to pick projections where the
/// sample is out of the ray when it is out at 10 % of the angles or more, low enough that
/// Poisson noise does not bias it upwards as far as the maximum would (about 1.3 instead of
/// 2.5 standard deviations at 64 angles).
pub const ENVELOPE_QUANTILE: f64 = 0.9;
/// Total degree of the shading surface in `ln S`: 15 coefficients, enough for vignetting and
/// tilted illumination, few enough to extrapolate over an always-covered centre.
pub const SURFACE_DEGREE: usize = 4;
/// Pixels whose envelope lies more than this many robust standard deviations below the surface
/// are taken as always covered by the sample.
const COVERED_SIGMAS: f64 = 2.5;
const MAX_REWEIGHTS: usize = 50;

/// The estimate: `ln(I0·S)` per detector pixel, and how it was obtained.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OpenBeam {
    pub height: usize,
    pub width: usize,
    /// `ln(I0·S(x))`, row-major `height × width`.
    #[serde(skip)]
    pub log_open_beam: Vec<f64>,
    /// Fraction of detector pixels on the envelope's top (the surface's support).
    pub support_fraction: f64,
    /// Robust standard deviation of the envelope about the surface on the support, in `ln I`.
    pub residual_std: f64,
    pub reweights: usize,
    pub warnings: Vec<String>,
}

/// Below this support the surface is mostly an extrapolation.
const LOW_SUPPORT: f64 = 0.3;

/// Estimates the open beam of `count` projections of `height × width` intensities.
pub fn estimate_open_beam(
    intensities: &[f32],
    count: usize,
    height: usize,
    width: usize,
) -> Result<OpenBeam, FlatfieldError> {
    if count == 0 {
        return Err(FlatfieldError::NoImages);
    }
    if height == 0 || width == 0 {
        return Err(FlatfieldError::EmptyImage { height, width });
    }
    let px = height * width;
    if intensities.len() != count * px {
        return Err(FlatfieldError::BufferSize {
            count,
            height,
            width,
            expected: count * px,
            found: intensities.len(),
        });
    }
    if let Some(p) = intensities.iter().position(|v| !v.is_finite()) {
        let q = p % px;
        return Err(FlatfieldError::NonFiniteInput {
            index: p / px,
            y: q / width,
            x: q % width,
        });
    }
    let max = intensities.iter().fold(0.0, |m, &v| nan_max(m, v as f64));
    if max <= 0.0 {
        return Err(FlatfieldError::AllZero { count });
    }
    // Zero or negative counts (dead pixels, dark-subtracted noise) are raised to a floor so the
    // logarithm stays finite; they lie below the envelope anyway.
    let floor = max * crate::io::RATIO_FLOOR;
    let rank = ((ENVELOPE_QUANTILE * (count - 1) as f64).round() as usize).min(count - 1);
    let mut column = vec![0.0f64; count];
    let envelope: Vec<f64> = (0..px)
        .map(|j| {
            for (i, c) in column.iter_mut().enumerate() {
                *c = (intensities[i * px + j] as f64).max(floor).ln();
            }
            *column.select_nth_unstable_by(rank, f64::total_cmp).1
        })
        .collect();
    let basis = Basis::new(height, width, SURFACE_DEGREE);
    let mut support = vec![true; px];
    let mut surface = vec![0.0; px];
    let mut sigma = 0.0;
    let mut reweights = 0;
    for _ in 0..MAX_REWEIGHTS {
        reweights += 1;
        surface = basis.fit(&envelope, &support);
        let mut r: Vec<f64> = (0..px)
            .filter(|&j| support[j])
            .map(|j| envelope[j] - surface[j])
            .collect();
        sigma = 1.4826 * median_abs_deviation(&mut r);
        // A perfectly smooth (noise-free) envelope: keep every pixel within rounding of it.
        let band = (COVERED_SIGMAS * sigma).max(1e-9);
        let next: Vec<bool> = (0..px).map(|j| envelope[j] - surface[j] > -band).collect();
        if next == support {
            break;
        }
        support = next;
    }
    let support_fraction = support.iter().filter(|&&s| s).count() as f64 / px as f64;
    let mut warnings = Vec::new();
    if support_fraction < LOW_SUPPORT {
        warnings.push(format!(
            "the sample covers {:.0} % of the detector at every angle: the open beam there is an extrapolation of a smooth surface",
            100.0 * (1.0 - support_fraction)
        ));
    }
    Ok(OpenBeam {
        height,
        width,
        log_open_beam: surface,
        support_fraction,
        residual_std: sigma,
        reweights,
        warnings,
    })
}

impl OpenBeam {
    /// Line integrals `ln(I0·S) − ln I` of intensities with this detector size, with ratios
    /// `I/(I0·S)` below [`RATIO_FLOOR`](crate::io::RATIO_FLOOR) raised to it (as flat/dark
    /// normalisation does); returns them and the number raised.
    pub fn line_integrals(&self, intensities: &[f32]) -> (Vec<f32>, usize) {
        let mut clamped = 0;
        let values = intensities
            .chunks(self.height * self.width)
            .flat_map(|frame| frame.iter().zip(&self.log_open_beam))
            .map(|(&i, &level)| crate::io::attenuation(i as f64 / level.exp(), &mut clamped))
            .collect();
        (values, clamped)
    }
}

fn median_abs_deviation(r: &mut [f64]) -> f64 {
    if r.is_empty() {
        return 0.0;
    }
    let mid = r.len() / 2;
    let median = *r.select_nth_unstable_by(mid, f64::total_cmp).1;
    r.iter_mut().for_each(|v| *v = (*v - median).abs());
    *r.select_nth_unstable_by(mid, f64::total_cmp).1
}

/// Products of Legendre polynomials `P_a(x) P_b(y)`, `a + b ≤ degree`, on `[−1, 1]²` (nearly
/// orthogonal on a full grid, so the normal equations are well conditioned).
struct Basis {
    terms: Vec<Vec<f64>>,
}

impl Basis {
    fn new(height: usize, width: usize, degree: usize) -> Self {
        let coord = |i: usize, n: usize| {
            if n > 1 {
                2.0 * i as f64 / (n - 1) as f64 - 1.0
            } else {
                0.0
            }
        };
        let legendre = |t: f64| -> Vec<f64> {
            let mut p = vec![1.0, t];
            for k in 1..degree {
                let k = k as f64;
                let next =
                    ((2.0 * k + 1.0) * t * p[k as usize] - k * p[k as usize - 1]) / (k + 1.0);
                p.push(next);
            }
            p
        };
        let mut terms = Vec::new();
        for total in 0..=degree {
            for a in 0..=total {
                let b = total - a;
                terms.push(
                    (0..height * width)
                        .map(|p| {
                            let (y, x) = (coord(p / width, height), coord(p % width, width));
                            legendre(x)[a] * legendre(y)[b]
                        })
                        .collect(),
                );
            }
        }
        Self { terms }
    }

    /// Least-squares fit of `values` on the pixels where `mask` is set, evaluated everywhere.
    fn fit(&self, values: &[f64], mask: &[bool]) -> Vec<f64> {
        let k = self.terms.len();
        let mut a = vec![0.0; k * k];
        let mut b = vec![0.0; k];
        for (p, (&v, _)) in values.iter().zip(mask).enumerate().filter(|(_, (_, &m))| m) {
            for r in 0..k {
                let tr = self.terms[r][p];
                b[r] += tr * v;
                for c in 0..=r {
                    a[r * k + c] += tr * self.terms[c][p];
                }
            }
        }
        for r in 0..k {
            for c in r + 1..k {
                a[r * k + c] = a[c * k + r];
            }
        }
        let coef = solve_spd(a, b);
        (0..values.len())
            .map(|p| (0..k).map(|t| coef[t] * self.terms[t][p]).sum())
            .collect()
    }
}

/// Solves the symmetric positive semi-definite system `A x = b` (row-major `k × k`) by
/// Gaussian elimination with partial pivoting; directions with a zero pivot (too few support
/// pixels to determine them) get a zero coefficient instead of a division by zero.
fn solve_spd(mut a: Vec<f64>, mut b: Vec<f64>) -> Vec<f64> {
    let k = b.len();
    let scale = (0..k).map(|i| a[i * k + i].abs()).fold(0.0, nan_max);
    let tiny = 1e-12 * scale.max(f64::MIN_POSITIVE);
    let mut x = vec![0.0; k];
    let mut pivots = vec![usize::MAX; k];
    let mut row_used = vec![false; k];
    for col in 0..k {
        let best = (0..k)
            .filter(|&r| !row_used[r])
            .max_by(|&r, &s| a[r * k + col].abs().total_cmp(&a[s * k + col].abs()));
        let Some(p) = best.filter(|&p| a[p * k + col].abs() > tiny) else {
            continue;
        };
        row_used[p] = true;
        pivots[col] = p;
        for r in 0..k {
            if r != p {
                let f = a[r * k + col] / a[p * k + col];
                if f != 0.0 {
                    for c in 0..k {
                        a[r * k + c] -= f * a[p * k + c];
                    }
                    b[r] -= f * b[p];
                }
            }
        }
    }
    for col in 0..k {
        let p = pivots[col];
        if p != usize::MAX {
            x[col] = b[p] / a[p * k + col];
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_smooth_open_beam_is_recovered_under_an_always_present_absorber() {
        // ln(I0 S) a quadratic-plus-cubic surface; a disc in the centre always absorbs
        // (ln I lower by 0.3-0.5), an off-centre disc moves with the angle.
        let (n, h, w) = (40usize, 48usize, 56usize);
        let level = |y: f64, x: f64| 9.0 - 0.4 * (x * x + y * y) + 0.1 * x * x * x - 0.05 * y;
        let mut data = Vec::new();
        for i in 0..n {
            let t = 2.0 * std::f64::consts::PI * i as f64 / n as f64;
            for p in 0..h * w {
                let y = 2.0 * (p / w) as f64 / (h - 1) as f64 - 1.0;
                let x = 2.0 * (p % w) as f64 / (w - 1) as f64 - 1.0;
                let mut att = 0.0;
                if x * x + y * y < 0.16 {
                    att += 0.3 + 0.2 * (1.0 - (x * x + y * y) / 0.16);
                }
                let (cx, cy) = (0.6 * t.cos(), 0.6 * t.sin());
                if (x - cx).powi(2) + (y - cy).powi(2) < 0.09 {
                    att += 0.4;
                }
                data.push((level(y, x) - att).exp() as f32);
            }
        }
        let est = estimate_open_beam(&data, n, h, w).unwrap();
        let worst = (0..h * w)
            .map(|p| {
                let y = 2.0 * (p / w) as f64 / (h - 1) as f64 - 1.0;
                let x = 2.0 * (p % w) as f64 / (w - 1) as f64 - 1.0;
                (est.log_open_beam[p] - level(y, x)).abs()
            })
            .fold(0.0, nan_max);
        assert!(worst < 1e-3, "{worst}");
        assert!(est.support_fraction > 0.8 && est.support_fraction < 0.95);
        let (p, clamped) = est.line_integrals(&data[..h * w]);
        assert_eq!(clamped, 0);
        // A corner pixel sees open beam: zero attenuation.
        assert!(p[0].abs() < 1e-3, "{}", p[0]);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert!(matches!(
            estimate_open_beam(&[], 0, 2, 2),
            Err(FlatfieldError::NoImages)
        ));
        assert!(matches!(
            estimate_open_beam(&[0.0; 8], 2, 2, 2),
            Err(FlatfieldError::AllZero { count: 2 })
        ));
        let mut v = vec![1.0f32; 8];
        v[7] = f32::NAN;
        assert!(matches!(
            estimate_open_beam(&v, 2, 2, 2),
            Err(FlatfieldError::NonFiniteInput {
                index: 1,
                y: 1,
                x: 1
            })
        ));
    }
}
