//! The arithmetic of a certified reuse: the least-squares combination of a chunk's candidates
//! from the normal equations, the scale of its f32 rounding, the stage's error budget taken
//! smallest residuals first, and the f64 normal equations and residuals that decisions made on
//! the host use in place of the device's passes.

use num_complex::{Complex32, Complex64};

use super::gpu;

/// The normal equations of `candidates` against `x` in f64 (what the device's `dots` pass forms
/// in f32), for decisions on the host.
pub(super) fn host_dots(x: &[Complex32], candidates: &[&[Complex32]]) -> gpu::Dots {
    let inner = |a: &[Complex32], b: &[Complex32]| -> Complex64 {
        a.iter()
            .zip(b)
            .map(|(u, v)| {
                let (u, v) = (Complex64::new(u.re as f64, u.im as f64), v);
                u.conj() * Complex64::new(v.re as f64, v.im as f64)
            })
            .sum()
    };
    gpu::Dots {
        xx: inner(x, x).re,
        b: candidates.iter().map(|c| inner(c, x)).collect(),
        gram: candidates
            .iter()
            .map(|a| candidates.iter().map(|b| inner(a, b)).collect())
            .collect(),
    }
}

/// `|x - sum_i alpha_i c_i|^2` in f64, elementwise (what the device's `residuals` pass measures).
pub(super) fn host_residual2(x: &[Complex32], combination: &[(&[Complex32], [f32; 2])]) -> f64 {
    let c64 = |c: Complex32| Complex64::new(c.re as f64, c.im as f64);
    (0..x.len())
        .map(|k| {
            let fit: Complex64 = combination
                .iter()
                .map(|(c, a)| Complex64::new(a[0] as f64, a[1] as f64) * c64(c[k]))
                .sum();
            (c64(x[k]) - fit).norm_sqr()
        })
        .sum()
}

/// The least-squares combination of the candidates from the normal equations: candidates
/// nearly dependent on earlier ones (pivot below `DEPENDENT` of their norm) get coefficient 0.
/// Returns the coefficients and the estimated relative residual squared; `None` when `x` or
/// every candidate is zero.
pub(super) fn least_squares(dots: &gpu::Dots) -> Option<(Vec<Complex64>, f64)> {
    const DEPENDENT: f64 = 1e-6;
    let k = dots.b.len();
    if dots.xx <= 0.0 || k == 0 {
        return None;
    }
    // Gaussian elimination on [G | b] in candidate order, skipping dependent pivots.
    let mut m: Vec<Vec<Complex64>> = (0..k)
        .map(|i| {
            let mut row = dots.gram[i].clone();
            row.push(dots.b[i]);
            row
        })
        .collect();
    let mut kept = Vec::new();
    for i in 0..k {
        let pivot = m[i][i];
        // NaN pivots fail this comparison too.
        let independent = pivot.re > DEPENDENT * dots.gram[i][i].re;
        if !independent || !pivot.re.is_finite() {
            continue;
        }
        kept.push(i);
        let pivot_row = m[i].clone();
        for row in m.iter_mut().skip(i + 1) {
            let f = row[i] / pivot;
            for (v, p) in row.iter_mut().zip(&pivot_row).skip(i) {
                *v -= f * p;
            }
        }
    }
    if kept.is_empty() {
        return None;
    }
    let mut alpha = vec![Complex64::default(); k];
    for &i in kept.iter().rev() {
        let mut v = m[i][k];
        for &j in kept.iter().filter(|&&j| j > i) {
            v -= m[i][j] * alpha[j];
        }
        alpha[i] = v / m[i][i];
    }
    // |x - sum alpha c|^2 = |x|^2 - Re(b^H alpha) at the optimum.
    let explained: f64 = dots
        .b
        .iter()
        .zip(&alpha)
        .map(|(b, a)| (b.conj() * a).re)
        .sum();
    Some((alpha, ((dots.xx - explained) / dots.xx).max(0.0)))
}

/// The items reused under a stage's budget: the smallest squared residuals first (ties in
/// order), while their sum stays within `budget`. A NaN ends the selection.
pub(super) fn within_budget(residuals2: &[f64], budget: f64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..residuals2.len()).collect();
    order.sort_by(|&a, &b| residuals2[a].total_cmp(&residuals2[b]).then(a.cmp(&b)));
    let mut accepted = vec![false; residuals2.len()];
    let mut spent = 0.0;
    for i in order {
        // A NaN stays NaN here (f64::max would drop it) and fails the comparison.
        let r2 = residuals2[i];
        spent += if r2 < 0.0 { 0.0 } else { r2 };
        if spent <= budget {
            accepted[i] = true;
        } else {
            break;
        }
    }
    accepted
}

/// `|x| + sum |alpha_i| |c_i|` from the normal equations: the scale of a combination's f32
/// rounding (each stored output carries about F32_ROUNDING |F| |c_i|, scaled by |alpha_i|).
pub(super) fn rounding_scale(d: &gpu::Dots, alphas: &[Complex64]) -> f64 {
    alphas
        .iter()
        .enumerate()
        .map(|(i, a)| a.norm() * d.gram[i][i].re.max(0.0).sqrt())
        .sum::<f64>()
        + d.xx.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    /// The normal equations of candidates `cs` against `x`, in f64.
    fn dots_of(x: &[Complex64], cs: &[Vec<Complex64>]) -> gpu::Dots {
        let inner = |a: &[Complex64], b: &[Complex64]| -> Complex64 {
            a.iter().zip(b).map(|(u, v)| u.conj() * v).sum()
        };
        gpu::Dots {
            xx: inner(x, x).re,
            b: cs.iter().map(|c| inner(c, x)).collect(),
            gram: cs
                .iter()
                .map(|a| cs.iter().map(|b| inner(a, b)).collect())
                .collect(),
        }
    }

    #[test]
    fn the_budget_takes_the_smallest_residuals_first_and_refuses_nan() {
        // 1 + 1 + 2 = 4 fits a budget of 4; adding 3 would not.
        assert_eq!(
            within_budget(&[3.0, 1.0, 2.0, 1.0], 4.0),
            [false, true, true, true]
        );
        assert_eq!(within_budget(&[5.0, 0.0], 4.0), [false, true]);
        // Rounding may leave a tiny negative estimate: it costs nothing.
        assert_eq!(within_budget(&[-1e-9, 4.0], 4.0), [true, true]);
        assert_eq!(
            within_budget(&[1.0, f64::NAN, 0.5], 10.0),
            [true, false, true]
        );
        assert_eq!(within_budget(&[1.0], f64::NAN), [false]);
        assert_eq!(within_budget(&[], 1.0), Vec::<bool>::new());
    }

    #[test]
    fn least_squares_recovers_combinations_and_drops_dependent_candidates() {
        let mut rng = SplitMix64::new(4);
        let mut random = || -> Vec<Complex64> {
            (0..50)
                .map(|_| Complex64::new(rng.next_f64() - 0.5, rng.next_f64() - 0.5))
                .collect()
        };
        let (c0, c1) = (random(), random());
        let (a0, a1) = (Complex64::new(0.7, -0.2), Complex64::new(-1.3, 0.4));
        let x: Vec<Complex64> = c0.iter().zip(&c1).map(|(u, v)| a0 * u + a1 * v).collect();
        // c2 = 2 c0 is dependent: it gets coefficient 0 and the fit is still exact.
        let c2: Vec<Complex64> = c0.iter().map(|u| u * 2.0).collect();
        let (alpha, r2) = least_squares(&dots_of(&x, &[c0.clone(), c2, c1.clone()])).unwrap();
        assert!(
            (alpha[0] - a0).norm() < 1e-9 && (alpha[2] - a1).norm() < 1e-9,
            "{alpha:?}"
        );
        assert_eq!(alpha[1], Complex64::default());
        assert!(r2 < 1e-12, "{r2}");
        // A random x keeps most of its norm: the estimate is the true relative residual.
        let y = random();
        let (alpha, r2) = least_squares(&dots_of(&y, &[c0.clone(), c1.clone()])).unwrap();
        let fit: f64 = y
            .iter()
            .enumerate()
            .map(|(i, v)| (v - alpha[0] * c0[i] - alpha[1] * c1[i]).norm_sqr())
            .sum::<f64>()
            / y.iter().map(|v| v.norm_sqr()).sum::<f64>();
        assert!((r2 - fit).abs() < 1e-12 && r2 > 0.5, "{r2} vs {fit}");
        assert!(least_squares(&dots_of(&y, &[])).is_none());
        assert!(least_squares(&dots_of(&vec![Complex64::default(); 50], &[c0])).is_none());
    }
}
