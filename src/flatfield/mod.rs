//! BaSiC flat-field and dark-field estimation (Peng et al., Nat. Commun. 8:14836, 2017,
//! doi:10.1038/ncomms14836), on the GPU in f32 with an f64 CPU oracle.
//!
//! Model: `I_i(x) = S(x) · T_i(x) + D(x)` with flat-field `S` (mean 1), dark-field `D` (intensity
//! units) and per-image baseline. The fit resamples every image to a square working grid
//! (default 128²) and runs the inexact augmented-Lagrangian iteration with reweighting of
//! docs/flatfield-method.md, "ALM iteration" and "Reweighting" (the MATLAB/pybasic/KINTSUGI
//! structure, with the f32 fixes of "f32 numerics" there). Defaults live in [`BasicParams`];
//! see its field docs.
//!
//! Entry points: [`fit`] (GPU), [`fit_oracle`] (f64 CPU, for tests and comparisons),
//! [`transform`] / [`transform_cpu`], [`fit_transform`], and [`estimate_open_beam`] for a
//! reconstruction pipeline without white fields, which estimates the open beam from its own
//! projections (not with BaSiC: see `open_beam.rs` for why).
//!
//! Layout conventions: images are row-major `H × W`, stacks image-major `N × H × W`.

mod correct;
mod dct;
mod figure;
mod gpu;
pub mod io;
mod open_beam;
mod oracle;
mod params;
mod resample;
mod smoothness;
mod solver;
pub mod synthetic;

use thiserror::Error;

pub use crate::io::Pixels;
pub use correct::{clamped_fraction, transform, transform_cpu, transform_stream, TransformPlan};
pub use dct::{dct_matrix, Dct2};
pub use gpu::GpuSolver;
pub use open_beam::{estimate_open_beam, OpenBeam};
pub use params::{BasicParams, Smoothness, TransformParams};
pub use resample::Resampler;
pub use smoothness::SmoothnessChoice;
pub use solver::{Prepared, Preprocessor, SmoothnessWeights};

use crate::gpu::GpuContext;
use crate::metrics::nan_max;
use oracle::OracleBackend;
use solver::{normalised_shading, refit_baseline, reweighting_loop, SolveBackend, WorkingFit};

/// Errors of the flat-field estimation and correction; each names the offending size, index or
/// parameter.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FlatfieldError {
    /// The stack holds no image.
    #[error(
        "the stack holds no image: BaSiC needs at least one (two or more for a meaningful fit)"
    )]
    NoImages,
    /// Images of zero height or width.
    #[error("images of {height}x{width} pixels: both sides must be at least 1")]
    EmptyImage { height: usize, width: usize },
    /// The pixel buffer does not match the declared stack shape.
    #[error("the pixel buffer holds {found} values, but {count} images of {height}x{width} need {expected}")]
    BufferSize {
        count: usize,
        height: usize,
        width: usize,
        expected: usize,
        found: usize,
    },
    /// One image differs in size from the first.
    #[error("image {index} has {found_pixels} pixels, but the stack's images are {}x{} = {} pixels", expected.0, expected.1, expected.0 * expected.1)]
    ShapeMismatch {
        index: usize,
        expected: (usize, usize),
        found_pixels: usize,
    },
    /// NaN or infinity in the input.
    #[error("image {index} has a non-finite value (NaN or infinity) at pixel (y={y}, x={x})")]
    NonFiniteInput { index: usize, y: usize, x: usize },
    /// Every pixel of every image is zero: there is nothing to estimate.
    #[error("all {count} images are entirely zero: there is no shading to estimate")]
    AllZero { count: usize },
    /// The mean intensity is zero (positive and negative values cancel).
    #[error("the mean intensity of the {count} images is zero: BaSiC's λ and brightness are relative to it")]
    ZeroMean { count: usize },
    /// A parameter is out of range.
    #[error("parameter {name} = {value}: needs {need}")]
    BadParameter {
        name: &'static str,
        value: String,
        need: &'static str,
    },
    /// A solve produced non-finite values (a bug or an input the guards do not cover).
    #[error("solve {solve} of the fit produced non-finite values; please report this input")]
    NonFiniteFit { solve: usize },
    /// One working-grid image, or the small per-image vectors of the whole stack, exceed one GPU
    /// storage binding (the image arrays themselves are split across bindings).
    #[error("{what} needs {bytes} bytes, above this device's {limit}-byte storage binding limit")]
    BindingTooSmall {
        what: String,
        bytes: u64,
        limit: u64,
    },
    /// Fields and images of different sizes.
    #[error("the fields are {fields_h}x{fields_w} but the images are {height}x{width}")]
    FieldsMismatch {
        fields_h: usize,
        fields_w: usize,
        height: usize,
        width: usize,
    },
    /// A stack file could not be read or written.
    #[error(transparent)]
    Io(#[from] crate::io::IoError),
    /// A fields directory could not be read or written.
    #[error("{path}: {reason}")]
    File {
        path: std::path::PathBuf,
        reason: String,
    },
    /// The GPU runtime failed.
    #[error(transparent)]
    Gpu(#[from] crate::GpuError),
}

/// `count` images of `height × width` in the input's pixel type (the one stack type, [`crate::io::Stack`]).
pub type Stack = crate::io::Stack<Pixels>;

impl Stack {
    /// Checks that `pixels` holds `count` images of `height × width`.
    pub fn new(
        count: usize,
        height: usize,
        width: usize,
        pixels: Pixels,
    ) -> Result<Self, FlatfieldError> {
        if height == 0 || width == 0 {
            return Err(FlatfieldError::EmptyImage { height, width });
        }
        let expected = count.checked_mul(height).and_then(|n| n.checked_mul(width));
        if expected != Some(pixels.len()) {
            return Err(FlatfieldError::BufferSize {
                count,
                height,
                width,
                expected: expected.unwrap_or(usize::MAX),
                found: pixels.len(),
            });
        }
        Ok(Self {
            shape: [count, height, width],
            values: pixels,
        })
    }

    /// Resamples every image to the working grid and computes the fit constants.
    pub fn prepare(&self, params: &BasicParams) -> Result<Prepared, FlatfieldError> {
        params.validate()?;
        let mut pre = Preprocessor::new(self.height(), self.width(), params.working_size)?;
        let px = self.frame_len();
        for i in 0..self.count() {
            let r = i * px..(i + 1) * px;
            match &self.values {
                Pixels::U8(v) => pre.push(&v[r])?,
                Pixels::U16(v) => pre.push(&v[r])?,
                Pixels::F32(v) => pre.push(&v[r])?,
            }
        }
        pre.finish(params)
    }
}

/// The estimated fields at full image size.
#[derive(Debug, Clone, PartialEq)]
pub struct Fields {
    pub height: usize,
    pub width: usize,
    /// `S`, mean 1 (all ones when [`FitReport::fallback`] is set).
    pub flatfield: Vec<f32>,
    /// `D` in intensity units; zeros when dark-field estimation is off.
    pub darkfield: Vec<f32>,
    /// Per-image baseline `b_i` in intensity units, in the stack's image order: `I_i ≈ b_i·S + D`
    /// plus sparse objects, re-fitted on the images in their original order once `S` and `D` are
    /// fixed (with sorting on or off), so that `(I_i − D)/S − b_i` removes each image's
    /// background (BaSiC's time-lapse baseline).
    pub baseline: Vec<f32>,
}

/// Diagnostics of one ALM solve.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SolveSummary {
    pub iterations: usize,
    /// Final `‖Z‖_F / ‖D‖_F`.
    pub residual: f64,
    /// The residual reached `optimization_tolerance`.
    pub converged: bool,
    /// `max(mad_f, mad_d)` after this solve (docs/flatfield-method.md, "Reweighting"; `mad_d`
    /// relative to the mean image).
    pub change: f64,
    /// The change still expected after this solve at the observed contraction rate.
    pub remaining: f64,
}

/// Everything a user needs to judge a fit (the report of docs/flatfield-method.md,
/// "Final fields and fallback").
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FitReport {
    /// The λ_F and λ_D the fit used.
    pub lambda_flatfield: f64,
    pub lambda_darkfield: f64,
    /// With `Smoothness::AutoData`: the candidates, their held-out scores and the choice.
    pub smoothness: Option<SmoothnessChoice>,
    pub sigma1: f64,
    pub solves: Vec<SolveSummary>,
    /// Reweighting rounds (solves) the fit used, `solves.len()`.
    pub reweighting_rounds: usize,
    /// The reweighting loop stopped on `reweighting_tolerance` (not on the solve cap).
    pub converged: bool,
    /// The solves of the baseline re-fit (fields fixed); `change` is the relative L1 change of
    /// the baseline.
    pub baseline_solves: Vec<SolveSummary>,
    pub final_change: f64,
    /// The flat-field was unusable (non-positive mean, negative or non-finite values) and was
    /// replaced by all ones.
    pub fallback: bool,
    /// Relative spread `(max a − min a)/mean a` of the image brightness: below ~0.5 the
    /// dark-field is poorly identifiable (docs/flatfield-method.md, "Dark-field identifiability").
    pub brightness_spread: f64,
    /// Conditions a user should know about (fallback, unconverged solves, poorly identifiable
    /// dark-field, a tolerance below the f32 floor), one sentence each.
    pub warnings: Vec<String>,
    /// Parameters that differ from the defaults, `name = value (default …)`.
    pub changed_parameters: Vec<String>,
    pub working_size: usize,
    /// The flat-field at working size (normalised to mean 1), for diagnostics and tests.
    pub working_flatfield: Vec<f32>,
    /// The dark-field at working size.
    pub working_darkfield: Vec<f32>,
}

/// Fields plus report.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub fields: Fields,
    pub report: FitReport,
}

/// Fits on the GPU (f32). `progress` is called after every solve.
pub fn fit(
    ctx: &GpuContext,
    stack: &Stack,
    params: &BasicParams,
    progress: impl FnMut(&SolveSummary),
) -> Result<Fit, FlatfieldError> {
    let prepared = stack.prepare(params)?;
    fit_prepared(
        ctx,
        &prepared,
        stack.height(),
        stack.width(),
        params,
        progress,
    )
}

/// Fits a prepared (resampled) stack on the GPU and upsamples the fields to `height × width`.
pub fn fit_prepared(
    ctx: &GpuContext,
    prepared: &Prepared,
    height: usize,
    width: usize,
    params: &BasicParams,
    progress: impl FnMut(&SolveSummary),
) -> Result<Fit, FlatfieldError> {
    params.validate()?;
    let choice = if auto_data(prepared, params) {
        Some(choose_smoothness(ctx, prepared, params)?)
    } else {
        None
    };
    let mut backend = GpuSolver::new(ctx, prepared)?;
    fit_with(
        &mut backend,
        prepared,
        choice,
        height,
        width,
        params,
        progress,
    )
}

/// Whether λ_F is chosen from the data: asked for, not given explicitly, and enough images.
fn auto_data(prepared: &Prepared, params: &BasicParams) -> bool {
    params.smoothness == Smoothness::AutoData
        && params.lambda_flatfield.is_none()
        && prepared.count >= smoothness::MIN_IMAGES
}

/// The data-driven λ_F (`Smoothness::AutoData`) by cross-validation on the GPU. Every
/// evaluation of a fold fits a plan of its training images and re-fits the baselines in a plan
/// of its held-out images; one fold's plans (and stacks) are alive at a time, the memory of one
/// fit.
pub fn choose_smoothness(
    ctx: &GpuContext,
    prepared: &Prepared,
    params: &BasicParams,
) -> Result<SmoothnessChoice, FlatfieldError> {
    params.validate()?;
    let standard = prepared.constants.weights();
    smoothness::search(standard.flatfield, |c| {
        let mut cost = 0.0;
        let mut pixels = 0;
        for k in 0..smoothness::FOLDS {
            let (train, held) = fold_stacks(prepared, k, params)?;
            let (fold_cost, fold_pixels) = smoothness::fold_cost(
                &mut GpuSolver::new(ctx, &train)?,
                &mut GpuSolver::new(ctx, &held)?,
                &held,
                params,
                smoothness::scaled(standard, c, params),
            )?;
            cost += fold_cost;
            pixels += fold_pixels;
        }
        Ok(cost / pixels as f64)
    })
}

/// [`choose_smoothness`] with the f64 oracle.
pub fn choose_smoothness_oracle(
    prepared: &Prepared,
    params: &BasicParams,
) -> Result<SmoothnessChoice, FlatfieldError> {
    params.validate()?;
    let standard = prepared.constants.weights();
    smoothness::search(standard.flatfield, |c| {
        let mut cost = 0.0;
        let mut pixels = 0;
        for k in 0..smoothness::FOLDS {
            let (train, held) = fold_stacks(prepared, k, params)?;
            let (fold_cost, fold_pixels) = smoothness::fold_cost(
                &mut OracleBackend::new(&train),
                &mut OracleBackend::new(&held),
                &held,
                params,
                smoothness::scaled(standard, c, params),
            )?;
            cost += fold_cost;
            pixels += fold_pixels;
        }
        Ok(cost / pixels as f64)
    })
}

/// The training and held-out stacks of fold `k`, built when needed so that the host holds one
/// fold's copy of the working stack at a time.
fn fold_stacks(
    prepared: &Prepared,
    k: usize,
    params: &BasicParams,
) -> Result<(Prepared, Prepared), FlatfieldError> {
    let (train, held) = smoothness::fold(prepared.count, k);
    Ok((
        prepared.subset(&train, params)?,
        prepared.subset(&held, params)?,
    ))
}

/// The fit on any backend: the reweighting loop (with the weights `choice` picked, or the
/// prepared ones), the baseline re-fit, the full-size fields.
fn fit_with(
    backend: &mut dyn SolveBackend,
    prepared: &Prepared,
    choice: Option<SmoothnessChoice>,
    height: usize,
    width: usize,
    params: &BasicParams,
    progress: impl FnMut(&SolveSummary),
) -> Result<Fit, FlatfieldError> {
    let standard = prepared.constants.weights();
    let weights = choice
        .as_ref()
        .map_or(standard, |c| c.weights(standard, params));
    let working = reweighting_loop(backend, params, weights, progress)?;
    let baseline = refit_baseline(backend, prepared, &working, params)?;
    Ok(finish(
        working, baseline, weights, choice, prepared, height, width, params,
    ))
}

/// Fits with the f64 CPU oracle (the reference of the tests; not a silent fallback).
pub fn fit_oracle(stack: &Stack, params: &BasicParams) -> Result<Fit, FlatfieldError> {
    let prepared = stack.prepare(params)?;
    fit_prepared_oracle(&prepared, stack.height(), stack.width(), params)
}

/// [`fit_oracle`] on a prepared stack.
pub fn fit_prepared_oracle(
    prepared: &Prepared,
    height: usize,
    width: usize,
    params: &BasicParams,
) -> Result<Fit, FlatfieldError> {
    params.validate()?;
    let choice = if auto_data(prepared, params) {
        Some(choose_smoothness_oracle(prepared, params)?)
    } else {
        None
    };
    let mut backend = OracleBackend::new(prepared);
    fit_with(
        &mut backend,
        prepared,
        choice,
        height,
        width,
        params,
        |_| {},
    )
}

/// Fits, then corrects the same stack: `(I − D) / max(S, flat_min)`.
pub fn fit_transform(
    ctx: &GpuContext,
    stack: &Stack,
    params: &BasicParams,
    transform_params: &TransformParams,
) -> Result<(Fit, Vec<f32>), FlatfieldError> {
    let fitted = fit(ctx, stack, params, |_| {})?;
    let corrected = transform(ctx, stack, &fitted.fields, transform_params)?;
    Ok((fitted, corrected))
}

/// Resamples a stack file image by image (it is never resident at full size); `progress` gets
/// the number of images read.
pub fn prepare_stream(
    reader: &mut io::StackReader,
    params: &BasicParams,
    mut progress: impl FnMut(usize),
) -> Result<Prepared, FlatfieldError> {
    params.validate()?;
    let mut pre = Preprocessor::new(reader.height(), reader.width(), params.working_size)?;
    let mut done = 0;
    while let Some(image) = reader.next_image() {
        match image? {
            Pixels::U8(v) => pre.push(&v)?,
            Pixels::U16(v) => pre.push(&v)?,
            Pixels::F32(v) => pre.push(&v)?,
        }
        done += 1;
        progress(done);
    }
    pre.finish(params)
}

/// Below this brightness spread the dark-field is poorly identifiable: S5
/// (docs/flatfield-method.md, "Synthetic stacks")
/// (brightness U(600, 800)) gives 0.25 and a dark-field 36 % too low; S1 (U(200, 1200)) gives 1.3.
const LOW_BRIGHTNESS_SPREAD: f64 = 0.5;

fn warnings(
    working: &WorkingFit,
    baseline_solves: &[SolveSummary],
    usable: bool,
    count: usize,
    params: &BasicParams,
) -> Vec<String> {
    let mut out = Vec::new();
    if !usable {
        out.push("the fitted flat-field had a non-positive mean, negative or non-finite values and was replaced by all ones".to_string());
    }
    if count < 2 {
        out.push("one image: its brightness cannot be separated from the shading, so the flat-field is a smoothed copy of the image and no dark-field is estimated".to_string());
    }
    let unconverged = working.solves.iter().filter(|s| !s.converged).count();
    if unconverged > 0 {
        out.push(format!("{unconverged} of {} solves stopped at max_iterations = {} before reaching optimization_tolerance", working.solves.len(), params.max_iterations));
    }
    if !working.converged {
        out.push(format!("the reweighting stopped at max_reweight_iterations = {} with a field change of {:.1e} (tolerance {:.1e})", params.max_reweight_iterations, working.final_change, params.reweighting_tolerance));
    }
    let unconverged = baseline_solves.iter().filter(|s| !s.converged).count();
    if unconverged > 0 {
        out.push(format!("{unconverged} of {} baseline solves stopped at max_iterations = {} before reaching optimization_tolerance", baseline_solves.len(), params.max_iterations));
    }
    if let Some(last) = baseline_solves.last() {
        if nan_max(last.change, last.remaining) > params.reweighting_tolerance {
            out.push(format!("the baseline re-fit stopped at max_reweight_iterations = {} with a baseline change of {:.1e} (tolerance {:.1e})", params.max_reweight_iterations, last.change, params.reweighting_tolerance));
        }
    }
    if params.get_darkfield && count >= 2 && working.brightness_spread < LOW_BRIGHTNESS_SPREAD {
        out.push(format!("image brightness varies little (spread {:.2}): the dark-field is poorly identifiable and likely underestimated", working.brightness_spread));
    }
    if params.smoothness == Smoothness::AutoData {
        if params.lambda_flatfield.is_some() {
            out.push("smoothness auto-data was asked for with an explicit lambda_flatfield, which was used".to_string());
        } else if count < smoothness::MIN_IMAGES {
            out.push(format!("smoothness auto-data needs at least {} images (cross-validation over {} folds); the standard rule was used", smoothness::MIN_IMAGES, smoothness::FOLDS));
        }
    }
    if params.optimization_tolerance < 1e-7 {
        out.push(format!("optimization_tolerance {:.1e} is below the f32 floor (~1e-7) of the GPU fit: solves run to max_iterations", params.optimization_tolerance));
    }
    out
}

/// docs/flatfield-method.md, "Final fields and fallback": upsample, normalise, fallback, and the
/// report.
#[allow(clippy::too_many_arguments)]
fn finish(
    working: WorkingFit,
    (baseline, baseline_solves): (Vec<f64>, Vec<SolveSummary>),
    weights: SmoothnessWeights,
    smoothness: Option<SmoothnessChoice>,
    prepared: &Prepared,
    height: usize,
    width: usize,
    params: &BasicParams,
) -> Fit {
    let size = prepared.size;
    let up = Resampler::new(size, size, height, width);
    let mut flat = vec![0.0; height * width];
    up.apply(&working.shading, &mut flat);
    let mean = flat.iter().sum::<f64>() / flat.len() as f64;
    // Bilinear upsampling keeps values finite and non-negative and the mean positive, so the
    // working-size test (which the baseline re-fit used) decides for the full size as well.
    let working_flat = normalised_shading(&working.shading);
    let usable = working_flat.is_some();
    let flatfield: Vec<f32> = if usable {
        flat.iter().map(|v| (v / mean) as f32).collect()
    } else {
        vec![1.0; height * width]
    };
    let mut dark = vec![0.0; height * width];
    if params.get_darkfield {
        up.apply(&working.darkfield, &mut dark);
    }
    let c = &prepared.constants;
    let warnings = warnings(&working, &baseline_solves, usable, prepared.count, params);
    Fit {
        fields: Fields {
            height,
            width,
            flatfield,
            darkfield: dark.iter().map(|&v| v as f32).collect(),
            baseline: baseline.iter().map(|&v| v as f32).collect(),
        },
        report: FitReport {
            lambda_flatfield: weights.flatfield,
            lambda_darkfield: weights.darkfield,
            smoothness,
            sigma1: c.sigma1,
            reweighting_rounds: working.solves.len(),
            solves: working.solves,
            converged: working.converged,
            baseline_solves,
            final_change: working.final_change,
            fallback: !usable,
            brightness_spread: working.brightness_spread,
            warnings,
            changed_parameters: params.changes_from_default(),
            working_size: size,
            working_flatfield: working_flat.map_or_else(
                || vec![1.0; size * size],
                |f| f.iter().map(|&v| v as f32).collect(),
            ),
            working_darkfield: working.darkfield.iter().map(|&v| v as f32).collect(),
        },
    }
}
