//! The flat-field smoothness weight λ_F chosen from the data (`Smoothness::AutoData`) by
//! cross-validation over images.
//!
//! The standard rule (`Σ|DCT2(mean image)|/800`, BaSiC/BaSiCPy/MATLAB) fixes λ_F from the mean
//! image alone, whatever the number of images and their noise: on the synthetic stacks of issue
//! 15 the best weight fell from 0.7x to 0.18x the standard one as the stack grew from 30 to 240
//! images, and rose to 2x on a stack without a dark-field. Here the images are split into
//! interleaved folds; for a candidate multiplier `c` (λ_F and, unless given explicitly, λ_D `c`
//! times their standard values; λ_D's share is what lets the flat-field follow the data: with λ_D
//! fixed, the best multiple of λ_F lowered the flat-field RMSE by at most 3 % on S1 and S2) the
//! fields are fitted on all folds but one, the held-out images' baselines are re-fitted with
//! those fields fixed (the same ALM solves as the fit's baseline,
//! [`super::solver::refit_baseline`]), and [`flat_error_score`] measures, from how the held-out
//! residuals grow with the image brightness, how far the flat-field is off. The candidate with
//! the lowest score summed over folds wins.
//!
//! Scores that predict the held-out images as a whole (the capped L1 residual, or the mean
//! residual map) were tried first: they rate the combination `b_i S + D` at the stack's own
//! brightness, which a flat-field error and an opposite dark-field error can share, and chose
//! multipliers that made the flat-field worse (S1, 60 images: 1.8x and 2.4x, flat-field RMSE
//! 0.0142 and 0.0151 against 0.0122 for the standard rule).
//!
//! The search walks a ladder of factors of 2 from `c = 1` towards the better neighbour while the
//! score falls, then places the minimum by a parabola through the best rung and its neighbours
//! (in log c).

use serde::Serialize;

use super::params::BasicParams;
use super::solver::{
    normalised_shading, refit_baseline, reweighting_loop, Prepared, SmoothnessWeights, SolveBackend,
};
use super::FlatfieldError;

/// Number of interleaved folds (image `i` is held out in fold `i mod FOLDS`): every training set
/// holds 3/4 of the images.
pub const FOLDS: usize = 4;

/// Fewest images for which the choice runs (two held-out images per fold).
pub const MIN_IMAGES: usize = 2 * FOLDS;

/// The ladder's range of multipliers of the standard weights.
const LOWEST: f64 = 1.0 / 64.0;
const HIGHEST: f64 = 8.0;

/// Held-out residuals beyond this many robust standard deviations of their image count as
/// objects (not background) in the score.
pub const OBJECT_THRESHOLD: f64 = 3.0;

/// What the data-driven choice measured and chose (in the fit report).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SmoothnessChoice {
    /// λ_F of the standard rule (the multiplier 1).
    pub standard_lambda: f64,
    pub folds: usize,
    /// The multipliers evaluated, in order.
    pub multipliers: Vec<f64>,
    /// Mean held-out cost per pixel of each evaluated multiplier (summed over folds).
    pub scores: Vec<f64>,
    /// The multiplier chosen.
    pub chosen: f64,
}

impl SmoothnessChoice {
    /// The weights of the chosen multiplier (see [`scaled`]).
    pub fn weights(&self, standard: SmoothnessWeights, params: &BasicParams) -> SmoothnessWeights {
        scaled(standard, self.chosen, params)
    }
}

/// λ_F times `c`, and λ_D times `c` unless the user gave λ_D explicitly.
pub fn scaled(w: SmoothnessWeights, c: f64, params: &BasicParams) -> SmoothnessWeights {
    SmoothnessWeights {
        flatfield: w.flatfield * c,
        darkfield: if params.lambda_darkfield.is_some() {
            w.darkfield
        } else {
            w.darkfield * c
        },
    }
}

/// The training and held-out image indices of fold `k` of `count` images.
pub fn fold(count: usize, k: usize) -> (Vec<usize>, Vec<usize>) {
    (0..count).partition(|i| i % FOLDS != k)
}

/// The held-out score of one fold for the weights `lambda`: the fields fitted on `train`, the
/// baselines of the held-out images (`held`, a backend of `held_prepared`) re-fitted with them,
/// then [`flat_error_score`] of the held-out residuals. Returns the score and its pixel count.
pub fn fold_cost(
    train: &mut dyn SolveBackend,
    held: &mut dyn SolveBackend,
    held_prepared: &Prepared,
    params: &BasicParams,
    lambda: SmoothnessWeights,
) -> Result<(f64, usize), FlatfieldError> {
    let m = held_prepared.size * held_prepared.size;
    let working = reweighting_loop(train, params, lambda, |_| {})?;
    let (baseline, _) = refit_baseline(held, held_prepared, &working, params)?;
    let s = normalised_shading(&working.shading).unwrap_or_else(|| vec![1.0; m]);
    Ok((
        flat_error_score(held_prepared.images(), &baseline, &s, &working.darkfield),
        m,
    ))
}

/// How far the flat-field `s` is off, seen from held-out images (`images`, N × M) with their
/// baselines `baseline` and the dark-field `d`. A background pixel's residual is
/// `r_ij = D_ij − b_i s_j − d_j ≈ δd_j + b_i δs_j` plus noise, so the slope `γ_j` of `r_ij`
/// against `b_i` (least squares over the held-out images) estimates the flat-field error at `j`;
/// the score is the spatial variance `Σ_j (γ_j − γ̄)²` (the mean is the normalisation). The
/// held-out noise adds to every candidate's score alike. Objects are left out: per image, pixels
/// whose `|r|` exceeds [`OBJECT_THRESHOLD`] times the image's robust noise scale (1.4826 × the
/// median `|r|`). A stack whose held-out images all have the same baseline scores 0 everywhere,
/// which keeps the standard weight.
pub fn flat_error_score(images: &[f32], baseline: &[f64], s: &[f64], d: &[f64]) -> f64 {
    let m = s.len();
    // Per pixel: Σ w, Σ b, Σ r, Σ b², Σ b r over the background of the held-out images.
    let mut sums = vec![[0.0f64; 5]; m];
    let mut residual = vec![0.0; m];
    let mut sorted = vec![0.0; m];
    for (row, &b) in images.chunks_exact(m).zip(baseline) {
        for (j, r) in residual.iter_mut().enumerate() {
            *r = row[j] as f64 - b * s[j] - d[j];
        }
        sorted
            .iter_mut()
            .zip(&residual)
            .for_each(|(a, r)| *a = r.abs());
        sorted.sort_by(f64::total_cmp);
        let limit = OBJECT_THRESHOLD * 1.4826 * sorted[m / 2];
        for (acc, &r) in sums.iter_mut().zip(&residual) {
            if r.abs() <= limit {
                acc[0] += 1.0;
                acc[1] += b;
                acc[2] += r;
                acc[3] += b * b;
                acc[4] += b * r;
            }
        }
    }
    let slope: Vec<f64> = sums
        .iter()
        .map(|[w, x, y, xx, xy]| {
            let den = w * xx - x * x;
            if den > 1e-12 * w * xx {
                (w * xy - x * y) / den
            } else {
                0.0
            }
        })
        .collect();
    let mean = slope.iter().sum::<f64>() / m as f64;
    slope.iter().map(|g| (g - mean).powi(2)).sum()
}

/// The ladder search: `cost(c)` is the held-out cost of multiplier `c` (lower is better).
pub fn search(
    standard_lambda: f64,
    mut cost: impl FnMut(f64) -> Result<f64, FlatfieldError>,
) -> Result<SmoothnessChoice, FlatfieldError> {
    let mut tried: Vec<(f64, f64)> = Vec::new();
    let mut eval = |c: f64, tried: &mut Vec<(f64, f64)>| -> Result<f64, FlatfieldError> {
        let s = cost(c)?;
        tried.push((c, s));
        Ok(s)
    };
    let at_one = eval(1.0, &mut tried)?;
    let half = eval(0.5, &mut tried)?;
    // Walk towards the better side while the score falls (a NaN never counts as better).
    let (mut c, mut best, step) = if half < at_one {
        (0.5, half, 0.5)
    } else {
        (1.0, at_one, 2.0)
    };
    loop {
        let next = c * step;
        if !(LOWEST..=HIGHEST).contains(&next) {
            break;
        }
        let s = eval(next, &mut tried)?;
        if s < best {
            c = next;
            best = s;
        } else {
            break;
        }
    }
    let score_of = |x: f64| tried.iter().find(|t| t.0 == x).map(|t| t.1);
    let chosen = match (score_of(c / 2.0), score_of(c * 2.0)) {
        (Some(lo), Some(hi)) => c * 2f64.powf(parabola_vertex(lo, best, hi)),
        _ => c,
    };
    Ok(SmoothnessChoice {
        standard_lambda,
        folds: FOLDS,
        multipliers: tried.iter().map(|t| t.0).collect(),
        scores: tried.iter().map(|t| t.1).collect(),
        chosen,
    })
}

/// The offset in `[−1/2, 1/2]` of the minimum of the parabola through `(−1, lo)`, `(0, mid)`,
/// `(1, hi)` (`mid` the smallest): within half a rung of the best one.
fn parabola_vertex(lo: f64, mid: f64, hi: f64) -> f64 {
    let curvature = lo - 2.0 * mid + hi;
    // No bowl (flat, concave or NaN scores): keep the best rung.
    if curvature.is_nan() || curvature <= 0.0 {
        return 0.0;
    }
    (0.5 * (lo - hi) / curvature).clamp(-0.5, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_interleave_and_cover_every_image_once() {
        let mut held: Vec<usize> = Vec::new();
        for k in 0..FOLDS {
            let (train, out) = fold(9, k);
            assert_eq!(train.len() + out.len(), 9);
            assert!(out.iter().all(|i| i % FOLDS == k));
            assert!(train.iter().all(|i| i % FOLDS != k));
            held.extend(out);
        }
        held.sort();
        assert_eq!(held, (0..9).collect::<Vec<_>>());
    }

    /// A smooth cost with its minimum at `log2 c = x0`.
    fn bowl(x0: f64) -> impl FnMut(f64) -> Result<f64, FlatfieldError> {
        move |c: f64| Ok((c.log2() - x0).powi(2) + 1.0)
    }

    #[test]
    fn the_ladder_finds_the_minimum_on_either_side() {
        for x0 in [-3.3, -1.0, 0.0, 0.4, 2.2] {
            let choice = search(0.4, bowl(x0)).unwrap();
            // A parabola through three rungs of a parabola is exact.
            assert!((choice.chosen.log2() - x0).abs() < 1e-9, "{x0}: {choice:?}");
            assert_eq!(choice.multipliers.len(), choice.scores.len());
        }
    }

    #[test]
    fn the_ladder_stops_at_its_ends() {
        let low = search(0.4, bowl(-20.0)).unwrap();
        assert_eq!(low.chosen, LOWEST);
        let high = search(0.4, bowl(20.0)).unwrap();
        assert_eq!(high.chosen, HIGHEST);
    }

    #[test]
    fn nan_scores_never_win_and_the_parabola_needs_a_bowl() {
        let choice = search(0.4, |c| Ok(if c == 0.5 { f64::NAN } else { c })).unwrap();
        // 0.5 is NaN: the ladder goes up from 1, where the cost grows: 1 is kept.
        assert_eq!(choice.chosen, 1.0);
        assert_eq!(parabola_vertex(1.0, 1.0, 1.0), 0.0);
        assert_eq!(parabola_vertex(2.0, 1.0, f64::NAN), 0.0);
        assert!((parabola_vertex(3.0, 1.0, 2.0) - 0.5 * 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_score_is_the_spread_of_the_flat_field_error_and_ignores_objects() {
        // Held-out images that the fields explain up to a flat-field error δs (and a dark-field
        // error, which is the intercept and does not count): the score is Σ (δs − mean δs)².
        let m = 6;
        let s = vec![1.0; m];
        let d = vec![10.0; m];
        let ds = [0.02, -0.01, 0.0, 0.03, -0.02, -0.02];
        let dd = [1.0, -2.0, 0.5, 0.0, 3.0, 0.0];
        let baseline = [100.0, 200.0, 300.0, 400.0, 500.0];
        let mut images: Vec<f32> = Vec::new();
        for (i, b) in baseline.iter().enumerate() {
            for j in 0..m {
                // A small alternating noise keeps the robust scale above zero.
                let noise = if (i + j) % 2 == 0 { 0.01 } else { -0.01 };
                images.push((b * (s[j] + ds[j]) + d[j] + dd[j] + noise) as f32);
            }
        }
        let mean = ds.iter().sum::<f64>() / m as f64;
        let want: f64 = ds.iter().map(|v| (v - mean).powi(2)).sum();
        let got = flat_error_score(&images, &baseline, &s, &d);
        assert!((got - want).abs() < 1e-3 * want, "{got} vs {want}");
        // One object pixel per image, far above the noise: left out, the score barely moves.
        let mut with_objects = images.clone();
        for i in 0..baseline.len() {
            with_objects[i * m + (i % m)] += 5000.0;
        }
        let got = flat_error_score(&with_objects, &baseline, &s, &d);
        assert!((got - want).abs() < 0.2 * want, "{got} vs {want}");
        // Held-out images of one brightness carry no slope: 0, whatever the fields.
        let flat = flat_error_score(&images[..2 * m], &[100.0, 100.0], &s, &d);
        assert_eq!(flat, 0.0);
    }
}
