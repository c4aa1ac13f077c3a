//! `lamino flatfield fit / apply`: BaSiC flat-field and dark-field estimation and correction.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use crate::flatfield::{BasicParams, Smoothness};

use crate::io::OutputSet;

use super::progress::bar;
use super::{Cli, CliResult};

#[derive(Subcommand)]
pub enum FlatfieldOp {
    /// Estimate flat-field, dark-field and baseline from a stack (multi-page TIFF or .npy, u8,
    /// u16 or f32) and write them to a directory (.npy, .tif, PNG previews, report.json).
    Fit {
        /// The images: a multi-page TIFF or a `.npy` array (images, height, width).
        stack: PathBuf,
        /// Directory for the fields, previews and report (created if missing).
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        params: FitArgs,
    },
    /// Correct a stack with fitted fields: (I - D) / max(S, flat_min), written as float32 to
    /// DIR/corrected.npy (or .tif for TIFF input), streamed in batches.
    Apply {
        /// The images to correct: a multi-page TIFF or a `.npy` array.
        stack: PathBuf,
        /// The directory `flatfield fit` wrote.
        #[arg(long)]
        fields: PathBuf,
        /// Directory for the corrected stack (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Lower clamp of the flat-field divisor (default 0.1: at most 10x amplification).
        #[arg(long)]
        flat_min: Option<f32>,
        /// Keep negative corrected values instead of clipping them at 0.
        #[arg(long)]
        keep_negative: bool,
    },
}

/// Fit parameters; every one defaults to the quality-first value of `BasicParams::default()`
/// and any change is echoed.
#[derive(Args)]
pub struct FitArgs {
    /// Start from KINTSUGI's configuration (pixel sorting on) to reproduce its results.
    #[arg(long)]
    kintsugi_compat: bool,
    /// Do not estimate the dark-field.
    #[arg(long)]
    no_darkfield: bool,
    /// Upper bound on the inner iterations of one solve, a safety net (default 500).
    #[arg(long)]
    max_iterations: Option<usize>,
    /// Inner stop: ‖Z‖_F / ‖D‖_F below this value (default 1e-6).
    #[arg(long)]
    optimization_tolerance: Option<f64>,
    /// Upper bound on the reweighting solves, a safety net (default 25).
    #[arg(long)]
    max_reweight_iterations: Option<usize>,
    /// Reweighting stop: relative change of the fields between solves (default 1e-3).
    #[arg(long)]
    reweighting_tolerance: Option<f64>,
    /// Side of the square grid the images are resampled to for the fit (default 128, as every
    /// BaSiC implementation); the fields are upsampled back to the image size.
    #[arg(long)]
    working_size: Option<usize>,
    /// ε of the reweighting Ω = 1 / (|E / ℓ| + ε) (default 0.1).
    #[arg(long)]
    epsilon: Option<f64>,
    /// λ_F (default: chosen by --smoothness).
    #[arg(long)]
    lambda_flatfield: Option<f64>,
    /// How λ_F (and λ_D with it) is chosen when not given: `standard` (Σ|DCT2(mean image)|/800,
    /// the rule of BaSiC, BaSiCPy and MATLAB; the default) or `auto-data` (cross-validation over
    /// images: fits on 3/4 of the images scored on the rest, about 10-20 fits more).
    #[arg(long)]
    smoothness: Option<Smoothness>,
    /// λ_D (default: darkfield_ratio · λ_F).
    #[arg(long)]
    lambda_darkfield: Option<f64>,
    /// λ_D / λ_F when λ_D is not given (default 0.2).
    #[arg(long)]
    darkfield_ratio: Option<f64>,
    /// Sort each pixel's values along the image axis before fitting.
    #[arg(long)]
    sort_intensity: bool,
}

impl FitArgs {
    fn params(&self) -> BasicParams {
        let mut p = if self.kintsugi_compat {
            BasicParams::kintsugi_compat()
        } else {
            BasicParams::default()
        };
        p.get_darkfield &= !self.no_darkfield;
        p.sort_intensity |= self.sort_intensity;
        p.max_iterations = self.max_iterations.unwrap_or(p.max_iterations);
        p.optimization_tolerance = self
            .optimization_tolerance
            .unwrap_or(p.optimization_tolerance);
        p.max_reweight_iterations = self
            .max_reweight_iterations
            .unwrap_or(p.max_reweight_iterations);
        p.reweighting_tolerance = self
            .reweighting_tolerance
            .unwrap_or(p.reweighting_tolerance);
        p.working_size = self.working_size.unwrap_or(p.working_size);
        p.epsilon = self.epsilon.unwrap_or(p.epsilon);
        p.lambda_flatfield = self.lambda_flatfield.or(p.lambda_flatfield);
        p.smoothness = self.smoothness.unwrap_or(p.smoothness);
        p.lambda_darkfield = self.lambda_darkfield.or(p.lambda_darkfield);
        p.darkfield_ratio = self.darkfield_ratio.unwrap_or(p.darkfield_ratio);
        p
    }
}

pub fn run(cli: &Cli, op: &FlatfieldOp) -> CliResult {
    match op {
        FlatfieldOp::Fit { stack, out, params } => fit(cli, stack, out, params),
        FlatfieldOp::Apply {
            stack,
            fields,
            out,
            flat_min,
            keep_negative,
        } => apply(cli, stack, fields, out, *flat_min, *keep_negative),
    }
}

fn fit(cli: &Cli, stack: &Path, out: &Path, args: &FitArgs) -> CliResult {
    use crate::flatfield::io;
    let params = args.params();
    params.validate()?;
    for change in params.changes_from_default() {
        eprintln!("parameter changed: {change}");
    }
    let mut set = OutputSet::begin(out, io::FIELDS_KIND)?;
    set.refuse_inputs(&io::FIELDS_FILES, &[stack])?;
    let result = fit_into(cli, stack, &params, &mut set);
    set.complete(result)?;
    println!("fields written to {}", out.display());
    Ok(())
}

/// The fit of [`fit`] with the fields staged in `set`.
fn fit_into(cli: &Cli, stack: &Path, params: &BasicParams, set: &mut OutputSet) -> CliResult {
    use crate::flatfield::{fit_prepared, io, prepare_stream};
    let mut reader = io::StackReader::open(stack)?;
    let (n, h, w) = (reader.count(), reader.height(), reader.width());
    eprintln!(
        "{}: {n} images of {h}x{w} ({:?})",
        stack.display(),
        reader.dtype()
    );
    let ctx = cli.context()?;
    let reading = bar(n as u64, "resampling", false);
    let prepared = prepare_stream(&mut reader, params, |done| {
        reading.set_position(done as u64)
    })?;
    reading.finish();
    if params.smoothness == Smoothness::AutoData && params.lambda_flatfield.is_none() {
        eprintln!("smoothness auto-data: choosing λ_F by cross-validation over the images first");
    }
    let solving = bar(params.max_reweight_iterations as u64, "solves", false);
    let fitted = fit_prepared(&ctx, &prepared, h, w, params, |s| {
        solving.inc(1);
        // Printed through the bar so that it also reaches logs when stderr is not a terminal.
        solving.suspend(|| {
            eprintln!(
                "solve: {} iterations, residual {:.1e}, field change {:.1e}",
                s.iterations, s.residual, s.change
            )
        });
    })?;
    solving.finish_and_clear();
    io::stage_fields(set, &fitted.fields, Some(&fitted.report))?;
    let r = &fitted.report;
    println!(
        "{} reweighting rounds, {}converged (change {:.1e}); baseline re-fit in {} rounds; λ_F {:.4}, λ_D {:.4}; brightness spread {:.2}{}",
        r.reweighting_rounds,
        if r.converged { "" } else { "NOT " },
        r.final_change,
        r.baseline_solves.len(),
        r.lambda_flatfield,
        r.lambda_darkfield,
        r.brightness_spread,
        if r.fallback { "; the flat-field was unusable and was replaced by ones (fallback)" } else { "" }
    );
    if let Some(c) = &r.smoothness {
        println!(
            "smoothness auto-data: λ_F {:.3} x the standard {:.4} (multipliers tried {:?}, held-out scores {:?})",
            c.chosen, c.standard_lambda, c.multipliers, c.scores
        );
    }
    if !r.changed_parameters.is_empty() {
        println!("changed parameters: {}", r.changed_parameters.join(", "));
    }
    for w in &r.warnings {
        println!("warning: {w}");
    }
    Ok(())
}

fn apply(
    cli: &Cli,
    stack: &Path,
    fields: &Path,
    out: &Path,
    flat_min: Option<f32>,
    keep_negative: bool,
) -> CliResult {
    use crate::flatfield::{clamped_fraction, io, transform_stream, TransformParams};
    let defaults = TransformParams::default();
    let params = TransformParams {
        flat_min: flat_min.unwrap_or(defaults.flat_min),
        clip_negative: !keep_negative,
    };
    params.validate()?;
    if params != defaults {
        eprintln!(
            "transform parameters changed: flat_min = {} (default {}), clip_negative = {} (default {})",
            params.flat_min, defaults.flat_min, params.clip_negative, defaults.clip_negative
        );
    }
    let field_files = ["flatfield.npy", "darkfield.npy", "baseline.npy"].map(|f| fields.join(f));
    let fields = io::read_fields(fields)?;
    let mut reader = io::StackReader::open(stack)?;
    let name = if reader.is_tiff() {
        "corrected.tif"
    } else {
        "corrected.npy"
    };
    let mut set = OutputSet::begin(out, "flatfield-apply")?;
    let inputs: Vec<&Path> = std::iter::once(stack)
        .chain(field_files.iter().map(PathBuf::as_path))
        .collect();
    set.refuse_inputs(&["corrected.tif", "corrected.npy"], &inputs)?;
    let output = set.final_path(name);
    let staged = set.stage(name)?;
    let ctx = cli.context()?;
    let progress = bar(reader.count() as u64, "correcting", false);
    let result = transform_stream(&ctx, &mut reader, &fields, &params, &staged, |done| {
        progress.set_position(done as u64)
    });
    set.complete(result)?;
    progress.finish();
    println!(
        "{} images corrected to {} ({:.3} % of pixels at the flat_min clamp)",
        reader.count(),
        output.display(),
        100.0 * clamped_fraction(&fields, &params)
    );
    Ok(())
}
