//! The parts of the BaSiC fit that both backends share, all on the host in f64: preprocessing,
//! the per-iteration scalar step, the reweighting loop and the final fields
//! (docs/flatfield-method.md: "Preprocessing", "ALM iteration" steps 8–9.5 and 13, "Reweighting",
//! "Final fields and fallback"). A backend ([`SolveBackend`]) owns the N×M arrays and
//! runs the element and column passes; the f64 oracle and the GPU plan implement it.

use super::dct::Dct2;
use super::params::BasicParams;
use super::resample::Resampler;
use super::{FlatfieldError, SolveSummary};
use crate::metrics::{nan_max, nan_min};

/// The resampled stack `D` (N × M, image-major, f32 as the GPU holds it) and its constants.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub count: usize,
    pub size: usize,
    /// The stack the fields are fitted to (per-pixel sorted when `sort_intensity` is on).
    pub data: Vec<f32>,
    /// With sorting on, the stack in its original image order, which the baseline re-fit needs
    /// (rows of `data` are then order statistics, not images); `None` when `data` is unsorted.
    pub original: Option<Vec<f32>>,
    pub constants: Constants,
}

/// The per-fit constants (docs/flatfield-method.md, "Preprocessing", items 3 and 5), computed
/// once in f64.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Constants {
    pub lambda_flatfield: f64,
    pub lambda_darkfield: f64,
    pub sigma1: f64,
    /// σ₁ of the stack in its original order (equal to `sigma1` without sorting): sets μ₀ of
    /// the baseline re-fit.
    pub sigma1_original: f64,
    pub mu0: f64,
    pub mu_bar: f64,
    pub d_norm: f64,
    pub beta_max: f64,
    pub max_abs: f64,
}

/// μ growth per iteration and μ cap (docs/flatfield-method.md, "Parameters": the same in every
/// implementation).
pub const MU_GROWTH: f64 = 1.5;
pub const MU_CAP: f64 = 1e7;
/// μ₀ = 12.5 / σ₁ (MATLAB's `mu_coef`).
pub const MU_COEF: f64 = 12.5;
/// The pixel-domain/DCT-domain dark-field threshold divisor `ent2`.
pub const ENT2: f64 = 10.0;
/// Relative half-width of the In/Out masks (docs/flatfield-method.md, "f32 numerics", item 1:
/// relative, not MATLAB's absolute 1e-6).
pub const MASK_TOLERANCE: f64 = 1e-6;

/// Collects images one at a time (so that a stack never has to be resident at full size),
/// resampling each to the working grid.
#[derive(Debug)]
pub struct Preprocessor {
    height: usize,
    width: usize,
    size: usize,
    resampler: Resampler,
    data: Vec<f32>,
    scratch: Vec<f64>,
    count: usize,
}

impl Preprocessor {
    pub fn new(height: usize, width: usize, size: usize) -> Result<Self, FlatfieldError> {
        if height == 0 || width == 0 {
            return Err(FlatfieldError::EmptyImage { height, width });
        }
        Ok(Self {
            height,
            width,
            size,
            resampler: Resampler::new(height, width, size, size),
            data: Vec::new(),
            scratch: vec![0.0; size * size],
            count: 0,
        })
    }

    /// Adds image `self.count`; rejects non-finite pixels, naming the image.
    pub fn push<T: Copy + Into<f64>>(&mut self, image: &[T]) -> Result<(), FlatfieldError> {
        let index = self.count;
        if image.len() != self.height * self.width {
            return Err(FlatfieldError::ShapeMismatch {
                index,
                expected: (self.height, self.width),
                found_pixels: image.len(),
            });
        }
        if let Some(p) = image.iter().position(|v| !(*v).into().is_finite()) {
            return Err(FlatfieldError::NonFiniteInput {
                index,
                y: p / self.width,
                x: p % self.width,
            });
        }
        self.resampler.apply(image, &mut self.scratch);
        self.data.extend(self.scratch.iter().map(|&v| v as f32));
        self.count += 1;
        Ok(())
    }

    /// Computes λ, sorts if asked, and the solver constants.
    pub fn finish(self, params: &BasicParams) -> Result<Prepared, FlatfieldError> {
        params.validate()?;
        Prepared::assemble(self.data, self.count, self.size, params)
    }
}

impl Prepared {
    /// The stack in its original image order.
    pub fn images(&self) -> &[f32] {
        self.original.as_deref().unwrap_or(&self.data)
    }

    /// The prepared stack of working-grid images `data` (N × size², original order): λ, sorting
    /// if asked, and the solver constants.
    fn assemble(
        mut data: Vec<f32>,
        n: usize,
        size: usize,
        params: &BasicParams,
    ) -> Result<Self, FlatfieldError> {
        let m = size * size;
        if n == 0 {
            return Err(FlatfieldError::NoImages);
        }
        let max_abs = data
            .iter()
            .fold(0.0, |acc, &v| nan_max(acc, (v as f64).abs()));
        if max_abs == 0.0 {
            return Err(FlatfieldError::AllZero { count: n });
        }
        // λ_F from the mean image of the unsorted stack, normalised to mean 1
        // (docs/flatfield-method.md, "Preprocessing", item 3).
        let mut mean = vec![0.0f64; m];
        for row in data.chunks_exact(m) {
            for (acc, &v) in mean.iter_mut().zip(row) {
                *acc += v as f64;
            }
        }
        let global = mean.iter().sum::<f64>() / (n * m) as f64;
        if global.abs() <= f64::MIN_POSITIVE || !global.is_finite() {
            return Err(FlatfieldError::ZeroMean { count: n });
        }
        let normalised: Vec<f64> = mean.iter().map(|v| v / n as f64 / global).collect();
        let mut coef = vec![0.0; m];
        Dct2::new(size).forward(&normalised, &mut coef);
        let lambda_flatfield = params
            .lambda_flatfield
            .unwrap_or_else(|| coef.iter().map(|c| c.abs()).sum::<f64>() / 800.0);
        let lambda_darkfield = params
            .lambda_darkfield
            .unwrap_or(params.darkfield_ratio * lambda_flatfield);
        let original = params.sort_intensity.then(|| data.clone());
        if params.sort_intensity {
            sort_columns(&mut data, n, m);
        }
        let sigma1 = spectral_norm(&data, n, m);
        let sigma1_original = match &original {
            Some(o) => spectral_norm(o, n, m),
            None => sigma1,
        };
        let mu0 = MU_COEF / sigma1;
        let d_norm = data
            .iter()
            .map(|&v| (v as f64) * (v as f64))
            .sum::<f64>()
            .sqrt();
        let beta_max = data
            .iter()
            .fold(f64::INFINITY, |acc, &v| nan_min(acc, v as f64));
        Ok(Prepared {
            count: n,
            size,
            data,
            original,
            constants: Constants {
                lambda_flatfield,
                lambda_darkfield,
                sigma1,
                sigma1_original,
                mu0,
                mu_bar: MU_CAP * mu0,
                d_norm,
                beta_max,
                max_abs,
            },
        })
    }

    /// The images `indices` (original order) as a stack of their own, with its own constants.
    pub fn subset(&self, indices: &[usize], params: &BasicParams) -> Result<Self, FlatfieldError> {
        let m = self.size * self.size;
        let images = self.images();
        let data = indices
            .iter()
            .flat_map(|&i| images[i * m..(i + 1) * m].iter().copied())
            .collect();
        Self::assemble(data, indices.len(), self.size, params)
    }
}

/// Sorts every pixel's values along the image axis (MATLAB's `sort(D, 3)`).
fn sort_columns(data: &mut [f32], n: usize, m: usize) {
    let mut column = vec![0.0f32; n];
    for j in 0..m {
        for (i, c) in column.iter_mut().enumerate() {
            *c = data[i * m + j];
        }
        column.sort_by(f32::total_cmp);
        for (i, c) in column.iter().enumerate() {
            data[i * m + j] = *c;
        }
    }
}

/// σ₁(D) by power iteration on DᵀD (docs/flatfield-method.md, "Reductions", R11), deterministic
/// start (uniform vector, near the
/// Perron vector of a positive stack), relative change < 1e-6 or 100 iterations. It only sets μ₀.
pub fn spectral_norm(data: &[f32], n: usize, m: usize) -> f64 {
    let mut v = vec![1.0 / (m as f64).sqrt(); m];
    let mut u = vec![0.0; n];
    let mut sigma = 0.0;
    for _ in 0..100 {
        for (ui, row) in u.iter_mut().zip(data.chunks_exact(m)) {
            *ui = row.iter().zip(&v).map(|(&d, &x)| d as f64 * x).sum();
        }
        v.fill(0.0);
        for (&ui, row) in u.iter().zip(data.chunks_exact(m)) {
            for (x, &d) in v.iter_mut().zip(row) {
                *x += d as f64 * ui;
            }
        }
        let norm_v = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let norm_u = u.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm_v == 0.0 || norm_u == 0.0 {
            return 0.0;
        }
        let next = norm_v / norm_u;
        v.iter_mut().for_each(|x| *x /= norm_v);
        let done = (next - sigma).abs() <= 1e-6 * next;
        sigma = next;
        if done {
            break;
        }
    }
    sigma
}

/// Per-image reductions of one iteration (docs/flatfield-method.md, "Reductions", R2, R6):
/// `Σ_j R`, `Σ_{In} R`, `Σ_{Out} R`, `Σ_j Z²`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ImageSums {
    pub r: f64,
    pub r_in: f64,
    pub r_out: f64,
    pub z2: f64,
}

/// Reductions over the flat-field shape `w` (docs/flatfield-method.md, "Reductions", R5) and
/// `Σ o` of the iteration's offset.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FieldStats {
    pub w_mean: f64,
    pub w_min: f64,
    pub w_max: f64,
    pub n_in: usize,
    pub n_out: usize,
    pub o_mean: f64,
}

/// What steps 8–9.5 (docs/flatfield-method.md, "ALM iteration") decide for the rest of the
/// iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct Brightness {
    /// The new per-image brightness `a`.
    pub a: Vec<f64>,
    /// Images with `a < 1` (the set V), used by the dark-field column pass.
    pub valid: Vec<bool>,
    /// `Some` when the dark-field update runs in this iteration.
    pub dark: Option<DarkStep>,
}

/// The scalars of the dark-field update (docs/flatfield-method.md, "ALM iteration", steps
/// 9.4–9.8).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DarkStep {
    pub beta: f64,
    /// `mean_{i∈V} a_i`.
    pub a_mean_valid: f64,
    pub count_valid: usize,
}

/// Steps 8 and 9.1–9.5 (docs/flatfield-method.md, "ALM iteration") from the per-image sums
/// (all guards of docs/flatfield-method.md, "Guards", included).
pub fn brightness_step(
    sums: &[ImageSums],
    stats: &FieldStats,
    a_prev: &[f64],
    m: usize,
    get_darkfield: bool,
    c: &Constants,
) -> Brightness {
    let n = sums.len();
    let r_mean = sums.iter().map(|s| s.r).sum::<f64>() / (n * m) as f64;
    // Blank channel: keep the previous brightness and skip the dark-field update.
    if r_mean.is_nan() || r_mean.abs() <= 1e-10 * c.max_abs {
        return Brightness {
            a: a_prev.to_vec(),
            valid: vec![false; n],
            dark: None,
        };
    }
    let a: Vec<f64> = sums
        .iter()
        .map(|s| (s.r / m as f64 / r_mean).max(0.0))
        .collect();
    let valid: Vec<bool> = a.iter().map(|&v| v < 1.0).collect();
    let count_valid = valid.iter().filter(|&&v| v).count();
    if !get_darkfield || count_valid == 0 {
        return Brightness {
            a,
            valid,
            dark: None,
        };
    }
    let w_constant = stats.w_max - stats.w_min <= 1e-5 * stats.w_mean.abs();
    let contrast: Vec<f64> = sums
        .iter()
        .map(|s| {
            if stats.n_in == 0 || stats.n_out == 0 || w_constant {
                0.0
            } else {
                (s.r_in / stats.n_in as f64 - s.r_out / stats.n_out as f64) / r_mean
            }
        })
        .collect();
    let picked = |x: &[f64]| -> Vec<f64> {
        x.iter()
            .zip(&valid)
            .filter(|(_, &v)| v)
            .map(|(&x, _)| x)
            .collect()
    };
    let beta = regression_intercept(&picked(&a), &picked(&contrast));
    let upper = if stats.w_mean > 0.0 {
        (c.beta_max / stats.w_mean).max(0.0)
    } else {
        0.0
    };
    let a_mean_valid = picked(&a).iter().sum::<f64>() / count_valid as f64;
    Brightness {
        a,
        valid,
        dark: Some(DarkStep {
            beta: beta.max(0.0).min(upper),
            a_mean_valid,
            count_valid,
        }),
    }
}

/// The x-intercept β of the least-squares line `c ≈ α + γ a` in the centred form
/// `β = ā − c̄ S_aa / S_ac` (docs/flatfield-method.md, "ALM iteration", step 9.4), 0 when the
/// slope is not determined.
pub fn regression_intercept(a: &[f64], c: &[f64]) -> f64 {
    let k = a.len() as f64;
    if a.is_empty() {
        return 0.0;
    }
    let a_mean = a.iter().sum::<f64>() / k;
    let c_mean = c.iter().sum::<f64>() / k;
    let (mut s_aa, mut s_cc, mut s_ac) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(c) {
        s_aa += (x - a_mean) * (x - a_mean);
        s_cc += (y - c_mean) * (y - c_mean);
        s_ac += (x - a_mean) * (y - c_mean);
    }
    if s_ac == 0.0 || s_ac.abs() <= 1e-12 * (s_aa * s_cc).sqrt() {
        return 0.0;
    }
    let beta = a_mean - c_mean * s_aa / s_ac;
    if beta.is_finite() {
        beta
    } else {
        0.0
    }
}

/// The outputs of one ALM solve (docs/flatfield-method.md, "Outputs of a solve"), in f64 on
/// the host.
#[derive(Debug, Clone)]
pub struct SolveOutput {
    /// `a` at the start of the last iteration (the low-rank output uses it).
    pub a_old: Vec<f64>,
    /// The flat-field shape `w` of the last iteration.
    pub w: Vec<f64>,
    /// `o` at the start of the last iteration.
    pub o_old: Vec<f64>,
    /// `o` after the last iteration's dark-field update.
    pub o_new: Vec<f64>,
    pub beta: f64,
    pub iterations: usize,
    pub residual: f64,
}

/// The outputs of one baseline solve (fields fixed).
#[derive(Debug, Clone)]
pub struct BaselineSolve {
    /// `b` after the last iteration's update.
    pub baseline: Vec<f64>,
    pub iterations: usize,
    pub residual: f64,
}

/// The smoothness weights λ_F and λ_D of a fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SmoothnessWeights {
    pub flatfield: f64,
    pub darkfield: f64,
}

impl Constants {
    /// The weights computed by the preprocessing (the standard rule or the user's values).
    pub fn weights(&self) -> SmoothnessWeights {
        SmoothnessWeights {
            flatfield: self.lambda_flatfield,
            darkfield: self.lambda_darkfield,
        }
    }
}

/// A backend holds `D`, `E`, `Y` and `Ω` and runs the N×M passes.
pub trait SolveBackend {
    /// One ALM solve from the initial state (docs/flatfield-method.md, "Initial state") with the
    /// current weights `Ω` and the smoothness weights `lambda`.
    fn solve(
        &mut self,
        params: &BasicParams,
        lambda: SmoothnessWeights,
    ) -> Result<SolveOutput, FlatfieldError>;
    /// `Ω = 1`, the weights of a fit's first solve.
    fn reset_weights(&mut self, epsilon: f64) -> Result<(), FlatfieldError>;
    /// `Ω ← 1 / (|E_ij / (ℓ_i + 1e-6)| + ε)`, normalised to mean 1
    /// (docs/flatfield-method.md, "Reweighting", item 2).
    fn reweight(&mut self, ell: &[f64], epsilon: f64) -> Result<(), FlatfieldError>;
    /// Switches to the baseline re-fit: `D` in the original image order, `Ω = 1`.
    fn start_baseline(&mut self, epsilon: f64) -> Result<(), FlatfieldError>;
    /// One ALM solve of `D = b sᵀ + 1 dᵀ + E` for `b` with the flat-field `s` (mean 1) and the
    /// dark-field `d` fixed, from `b = start`, `E = Y = 0`, with the current weights: per iteration
    /// `E ← S_{Ω/μ}(D − L + Y/μ)`, `Y ← Y + μ(D − L − E)` and [`baseline_step`].
    fn solve_baseline(
        &mut self,
        s: &[f64],
        d: &[f64],
        start: &[f64],
        params: &BasicParams,
    ) -> Result<BaselineSolve, FlatfieldError>;
}

/// The baseline update with the fields fixed: `b_i = max(0, mean_j (D − E)_ij − mean(d))`, the
/// image's mean without its sparse part, less the dark level (`mean(s) = 1`). This is BaSiC's
/// `basefluor` update (MATLAB) and BaSiCPy's `fit_baseline` in approximate mode.
pub fn baseline_step(sums: &[ImageSums], m: usize, d_mean: f64) -> Vec<f64> {
    sums.iter()
        .map(|s| (s.r / m as f64 - d_mean).max(0.0))
        .collect()
}

/// The working-size result of the reweighting loop.
#[derive(Debug, Clone)]
pub struct WorkingFit {
    /// `mean_i L_i − d` (not normalised).
    pub shading: Vec<f64>,
    /// `d = o + β w`.
    pub darkfield: Vec<f64>,
    pub solves: Vec<SolveSummary>,
    pub final_change: f64,
    pub converged: bool,
    /// `(max a − min a) / mean a` of the last solve: small values mean the dark-field is poorly
    /// identifiable (docs/flatfield-method.md, "Dark-field identifiability").
    pub brightness_spread: f64,
}

/// The reweighting loop (docs/flatfield-method.md, "Reweighting") around a backend's solves,
/// with the stop changed (issue 15):
/// the dark-field change is measured relative to the shading, and the loop stops when both the
/// change and the change still expected at the observed contraction rate
/// ([`remaining_change`]) are within `reweighting_tolerance`.
pub fn reweighting_loop(
    backend: &mut dyn SolveBackend,
    params: &BasicParams,
    lambda: SmoothnessWeights,
    mut progress: impl FnMut(&SolveSummary),
) -> Result<WorkingFit, FlatfieldError> {
    let mut f_prev: Option<Vec<f64>> = None;
    // The previous dark-field and Σ|shading| of the previous solve.
    let mut g_prev: Option<(Vec<f64>, f64)> = None;
    let mut solves = Vec::new();
    loop {
        let out = backend.solve(params, lambda)?;
        let m = out.w.len();
        let w_mean = out.w.iter().sum::<f64>() / m as f64;
        let a_mean = out.a_old.iter().sum::<f64>() / out.a_old.len() as f64;
        let d: Vec<f64> = if params.get_darkfield {
            out.o_new
                .iter()
                .zip(&out.w)
                .map(|(o, w)| o + out.beta * w)
                .collect()
        } else {
            vec![0.0; m]
        };
        let shading: Vec<f64> = (0..m)
            .map(|j| out.w[j] * a_mean + out.o_old[j] - d[j])
            .collect();
        let all_finite = shading
            .iter()
            .chain(&d)
            .chain(&out.a_old)
            .all(|v| v.is_finite());
        if !all_finite {
            return Err(FlatfieldError::NonFiniteFit {
                solve: solves.len() + 1,
            });
        }
        let f_mean = shading.iter().sum::<f64>() / m as f64;
        let f: Vec<f64> = shading.iter().map(|v| v / f_mean).collect();
        let mad_f = match &f_prev {
            None => f.iter().map(|v| (v - 1.0).abs()).sum::<f64>() / m as f64,
            Some(p) => {
                f.iter().zip(p).map(|(a, b)| (a - b).abs()).sum::<f64>()
                    / p.iter().map(|v| v.abs()).sum::<f64>()
            }
        };
        // The dark-field's change relative to the signal it offsets (Σ|shading|, intensity
        // units), not to its own size as in MATLAB/KINTSUGI (Σ|d_prev|): both terms then measure
        // how much the corrected images `(I − D)/S` move. Relative to itself, a dark-field near
        // zero (a stack without one: |d| ≈ 0.1 % of the signal) kept the loop going for 5-20
        // more solves after the flat-field had settled, on relative changes of a field that
        // does not matter, and in f32 its rounding alone reached the tolerance (issue 15).
        let mad_d = match &g_prev {
            Some((p, signal)) => {
                let delta: f64 = d.iter().zip(p).map(|(a, b)| (a - b).abs()).sum();
                if delta == 0.0 {
                    0.0
                } else {
                    delta / signal
                }
            }
            None => f64::INFINITY,
        };
        // Without dark-field estimation d stays 0 and only the flat-field change counts.
        let change = if params.get_darkfield {
            mad_f.max(mad_d)
        } else {
            mad_f
        };
        // Slowly contracting reweighting (dense texture: 0.8 per solve) moves the fields by
        // several times the last change after it: the stop also needs the estimated rest.
        let remaining = remaining_change(change, solves.last().map(|s: &SolveSummary| s.change));
        let summary = SolveSummary {
            iterations: out.iterations,
            residual: out.residual,
            converged: out.residual < params.optimization_tolerance,
            change,
            remaining,
        };
        progress(&summary);
        solves.push(summary);
        let converged = nan_max(change, remaining) <= params.reweighting_tolerance;
        if converged || solves.len() >= params.max_reweight_iterations {
            let a_max = out.a_old.iter().cloned().fold(f64::MIN, nan_max);
            let a_min = out.a_old.iter().cloned().fold(f64::MAX, nan_min);
            return Ok(WorkingFit {
                shading,
                darkfield: d,
                solves,
                final_change: change,
                converged,
                brightness_spread: if a_mean > 0.0 {
                    (a_max - a_min) / a_mean
                } else {
                    0.0
                },
            });
        }
        let o_mean = out.o_old.iter().sum::<f64>() / m as f64;
        let ell: Vec<f64> = out.a_old.iter().map(|a| a * w_mean + o_mean).collect();
        backend.reweight(&ell, params.epsilon)?;
        g_prev = Some((d, shading.iter().map(|v| v.abs()).sum()));
        f_prev = Some(f);
    }
}

/// The flat-field `s` (mean 1) the baseline re-fit divides by: the working shading, or ones when
/// it is unusable (the fallback, which the fitted fields then carry too: docs/flatfield-method.md,
/// "Final fields and fallback", item 3).
pub fn normalised_shading(shading: &[f64]) -> Option<Vec<f64>> {
    let mean = shading.iter().sum::<f64>() / shading.len() as f64;
    let usable = mean > 0.0 && shading.iter().all(|v| v.is_finite() && *v >= 0.0);
    usable.then(|| shading.iter().map(|v| v / mean).collect())
}

/// The per-image baseline `b` of `I_i ≈ b_i S + D` (intensity units, image order), re-fitted
/// once the fields are fixed: reweighted ALM solves of [`SolveBackend::solve_baseline`] on the
/// images in their original order, with the fit's reweighting rule and stop criterion on the
/// relative L1 change of `b`. With sorting on this is the only meaningful baseline; without, it
/// replaces the fit's `a_i`, which mixes the dark level into the brightness.
pub fn refit_baseline(
    backend: &mut dyn SolveBackend,
    prepared: &Prepared,
    working: &WorkingFit,
    params: &BasicParams,
) -> Result<(Vec<f64>, Vec<SolveSummary>), FlatfieldError> {
    let m = working.shading.len();
    let s = normalised_shading(&working.shading).unwrap_or_else(|| vec![1.0; m]);
    let d_mean = working.darkfield.iter().sum::<f64>() / m as f64;
    let start: Vec<f64> = prepared
        .images()
        .chunks_exact(m)
        .map(|row| (row.iter().map(|&v| v as f64).sum::<f64>() / m as f64 - d_mean).max(0.0))
        .collect();
    backend.start_baseline(params.epsilon)?;
    let mut solves: Vec<SolveSummary> = Vec::new();
    let mut previous: Option<Vec<f64>> = None;
    loop {
        let out = backend.solve_baseline(&s, &working.darkfield, &start, params)?;
        if !out.baseline.iter().all(|v| v.is_finite()) {
            return Err(FlatfieldError::NonFiniteFit {
                solve: working.solves.len() + solves.len() + 1,
            });
        }
        let change = match &previous {
            None => f64::INFINITY,
            Some(p) => {
                let delta: f64 = out.baseline.iter().zip(p).map(|(a, b)| (a - b).abs()).sum();
                let scale: f64 = p.iter().map(|v| v.abs()).sum();
                if delta == 0.0 {
                    0.0
                } else if scale > 0.0 {
                    delta / scale
                } else {
                    f64::INFINITY
                }
            }
        };
        let remaining = remaining_change(change, solves.last().map(|s| s.change));
        solves.push(SolveSummary {
            iterations: out.iterations,
            residual: out.residual,
            converged: out.residual < params.optimization_tolerance,
            change,
            remaining,
        });
        if nan_max(change, remaining) <= params.reweighting_tolerance
            || solves.len() >= params.max_reweight_iterations
        {
            return Ok((out.baseline, solves));
        }
        // ℓ_i = mean_j (b_i s_j + d_j) = b_i + mean(d).
        let ell: Vec<f64> = out.baseline.iter().map(|b| b + d_mean).collect();
        backend.reweight(&ell, params.epsilon)?;
        previous = Some(out.baseline);
    }
}

/// The largest contraction rate the stop assumes: the change of a solve over the previous one's,
/// clamped so that a first estimate (no previous change), a stall or a rise still lets the loop
/// stop once the change is below `tolerance · (1 − MAX_RATE) / MAX_RATE`.
pub const MAX_RATE: f64 = 0.9;

/// The estimated change still to come after a solve whose change is `change`, if the reweighting
/// keeps contracting at the rate of the last two solves: `change · q / (1 − q)`,
/// `q = min(change / previous, MAX_RATE)` (`q = MAX_RATE` without a finite previous change).
pub fn remaining_change(change: f64, previous: Option<f64>) -> f64 {
    let rate = match previous {
        Some(p) if p.is_finite() && p > 0.0 => (change / p).min(MAX_RATE),
        _ => MAX_RATE,
    };
    change * rate / (1.0 - rate)
}

/// `S_t(v) = sign(v) max(|v| − t, 0)`.
pub fn shrink(v: f64, t: f64) -> f64 {
    if v > t {
        v - t
    } else if v < -t {
        v + t
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    #[test]
    fn centred_regression_equals_the_matlab_form_and_recovers_beta() {
        let mut rng = SplitMix64::new(3);
        let a: Vec<f64> = (0..20).map(|_| 0.2 + 0.7 * rng.next_f64()).collect();
        let c: Vec<f64> = a.iter().map(|&x| 0.3 * x + 0.05 * rng.next_f64()).collect();
        let k = a.len() as f64;
        let (sa, sc) = (a.iter().sum::<f64>(), c.iter().sum::<f64>());
        let saa: f64 = a.iter().map(|x| x * x).sum();
        let sac: f64 = a.iter().zip(&c).map(|(x, y)| x * y).sum();
        let matlab = (saa * sc - sa * sac) / (sa * sc - k * sac);
        let centred = regression_intercept(&a, &c);
        assert!((matlab - centred).abs() < 1e-10, "{matlab} {centred}");
        // c = γ (a − β) exactly: the intercept is β.
        let c: Vec<f64> = a.iter().map(|&x| 2.5 * (x - 0.17)).collect();
        assert!((regression_intercept(&a, &c) - 0.17).abs() < 1e-12);
    }

    #[test]
    fn regression_guards_give_zero() {
        assert_eq!(regression_intercept(&[], &[]), 0.0);
        assert_eq!(regression_intercept(&[0.5, 0.5], &[0.1, 0.3]), 0.0);
        assert_eq!(regression_intercept(&[0.2, 0.6], &[0.0, 0.0]), 0.0);
    }

    #[test]
    fn the_remaining_change_follows_the_contraction_rate() {
        // Rate 0.25: the rest of a geometric series is change · 0.25 / 0.75.
        assert!((remaining_change(1e-3, Some(4e-3)) - 1e-3 / 3.0).abs() < 1e-15);
        // No previous change (first solve, or after an infinite one), a stall or a rise: the
        // rate is taken as MAX_RATE.
        let slowest = 1e-3 * MAX_RATE / (1.0 - MAX_RATE);
        for previous in [None, Some(f64::INFINITY), Some(1e-3), Some(5e-4), Some(0.0)] {
            let rest = remaining_change(1e-3, previous);
            assert!((rest - slowest).abs() < 1e-15, "{previous:?}: {rest}");
        }
        assert_eq!(remaining_change(0.0, Some(1e-3)), 0.0);
        assert!(remaining_change(f64::NAN, Some(1e-3)).is_nan());
    }

    #[test]
    fn shrink_handles_signs_and_zero_threshold() {
        assert_eq!(shrink(3.0, 1.0), 2.0);
        assert_eq!(shrink(-3.0, 1.0), -2.0);
        assert_eq!(shrink(0.5, 1.0), 0.0);
        assert_eq!(shrink(-0.5, 0.0), -0.5);
    }

    #[test]
    fn brightness_step_guards_blank_data_and_empty_masks() {
        let c = Constants {
            lambda_flatfield: 0.2,
            lambda_darkfield: 0.04,
            sigma1: 1.0,
            sigma1_original: 1.0,
            mu0: 12.5,
            mu_bar: 1.25e8,
            d_norm: 1.0,
            beta_max: 10.0,
            max_abs: 100.0,
        };
        let blank = [ImageSums::default(); 3];
        let b = brightness_step(&blank, &FieldStats::default(), &[1.0; 3], 4, true, &c);
        assert_eq!(b.a, vec![1.0; 3]);
        assert!(b.dark.is_none());
        let sums: Vec<ImageSums> = [1.0, 2.0, 3.0]
            .iter()
            .map(|&r| ImageSums {
                r,
                r_in: r,
                r_out: 0.5 * r,
                z2: 0.0,
            })
            .collect();
        let stats = FieldStats {
            w_mean: 1.0,
            w_min: 0.5,
            w_max: 1.5,
            n_in: 0,
            n_out: 2,
            o_mean: 0.0,
        };
        let b = brightness_step(&sums, &stats, &[1.0; 3], 4, true, &c);
        assert_eq!(b.dark.unwrap().beta, 0.0);
        assert!(b.a.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn mismatched_images_are_named() {
        let mut pre = Preprocessor::new(4, 5, 8).unwrap();
        pre.push(&[1.0f32; 20]).unwrap();
        let msg = pre.push(&[1u8; 16]).unwrap_err().to_string();
        assert!(msg.contains("image 1") && msg.contains("4x5"), "{msg}");
        assert!(Preprocessor::new(0, 5, 8).is_err());
    }

    #[test]
    fn spectral_norm_matches_a_rank_one_matrix() {
        // D = u vᵀ has σ₁ = |u| |v|.
        let u = [1.0f32, 2.0, 3.0];
        let v = [0.5f32, 1.0, 1.5, 2.0];
        let d: Vec<f32> = u
            .iter()
            .flat_map(|a| v.iter().map(move |b| a * b))
            .collect();
        let want = (14.0f64).sqrt() * (7.5f64).sqrt();
        assert!((spectral_norm(&d, 3, 4) - want).abs() < 1e-4 * want);
    }
}
