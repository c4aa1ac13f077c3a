//! `lamino apply`: one FFT or one operator stage applied to an array file.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use crate::fft::{Direction, FftPlan, Normalization};
use crate::geometry::Geometry;
use crate::io::{read_complex_npy, write_complex_npy, ComplexArray, OutputSet};
use crate::operator::{Apply, LaminoOperator, OperatorOptions};

use super::{Cli, CliResult};

#[derive(Subcommand)]
pub enum ApplyOp {
    /// FFT of the last K axes of a complex64 (or float32) .npy array; writes complex64 .npy.
    Fft {
        /// complex64 or float32 .npy array.
        #[arg(long)]
        input: PathBuf,
        /// complex64 .npy output (written complete or not at all).
        #[arg(long, visible_alias = "output")]
        out: PathBuf,
        /// Inverse transform (e^{+}) instead of forward (e^{-}).
        #[arg(long)]
        inverse: bool,
        /// Transform the last K axes (default: all).
        #[arg(long)]
        axes: Option<usize>,
        /// Multiply by 1/N (N = product of the transformed lengths); default: unnormalised.
        #[arg(long)]
        normalize: bool,
    },
    /// The laminography projector L: volume (n0, n1, n2) -> data (ntheta, deth, detw).
    Forward(OperatorArgs),
    /// Its adjoint L*: data (ntheta, deth, detw) -> volume (n0, n1, n2).
    Adjoint(OperatorArgs),
    /// Stage U1 alone: volume (n0, n1, n2) -> spectrum (deth, n1, n2).
    Usfft1d(OperatorArgs),
    /// Stage U2 alone: spectrum (deth, n1, n2) -> Fourier-domain data (ntheta, deth, detw).
    Usfft2d(OperatorArgs),
}

#[derive(Args)]
pub struct OperatorArgs {
    /// Geometry JSON: n0, n1, n2, deth, detw, theta (radians), phi (radians), optional eps.
    #[arg(long)]
    geometry: PathBuf,
    /// complex64 or float32 .npy array of the shape the operator reads.
    #[arg(long)]
    input: PathBuf,
    /// complex64 .npy output (written complete or not at all).
    #[arg(long, visible_alias = "output")]
    out: PathBuf,
}

pub fn run(cli: &Cli, op: &ApplyOp) -> CliResult {
    match op {
        ApplyOp::Fft {
            input,
            out,
            inverse,
            axes,
            normalize,
        } => fft(cli, input, out, *inverse, *axes, *normalize),
        ApplyOp::Forward(a) => operator(cli, Apply::Forward, a),
        ApplyOp::Adjoint(a) => operator(cli, Apply::Adjoint, a),
        ApplyOp::Usfft1d(a) => operator(cli, Apply::Usfft1d, a),
        ApplyOp::Usfft2d(a) => operator(cli, Apply::Usfft2d, a),
    }
}

fn fft(
    cli: &Cli,
    input: &Path,
    output: &Path,
    inverse: bool,
    axes: Option<usize>,
    normalize: bool,
) -> CliResult {
    let array = read_complex_npy(input)?;
    let ndim = array.shape.len();
    if ndim == 0 {
        return Err(format!(
            "{} holds a 0-dimensional array: nothing to transform",
            input.display()
        )
        .into());
    }
    let axes = axes.unwrap_or(ndim);
    if axes == 0 || axes > ndim {
        return Err(format!(
            "--axes {axes}: the array has {ndim} axes (shape {:?})",
            array.shape
        )
        .into());
    }
    let ctx = cli.context()?;
    let data = ctx.upload("apply fft data", &array.data)?;
    let direction = if inverse {
        Direction::Inverse
    } else {
        Direction::Forward
    };
    let norm = if normalize {
        Normalization::ByLength
    } else {
        Normalization::None
    };
    FftPlan::new(&ctx, &array.shape, axes, direction, norm, &data)?.execute(&ctx)?;
    let out = ctx.read(&data, 0, array.data.len())?;
    let array = ComplexArray {
        shape: array.shape,
        data: out,
    };
    write_output(output, &array, &[input])
}

/// Writes `array` to `output` (complete or not at all), refusing an output that is one of
/// `inputs`.
fn write_output(output: &Path, array: &ComplexArray, inputs: &[&Path]) -> CliResult {
    let (set, staged) = OutputSet::file(output)?;
    let name = output.file_name().and_then(|n| n.to_str()).unwrap_or("");
    set.refuse_inputs(&[name], inputs)?;
    let written = write_complex_npy(&staged, array);
    set.complete(written)?;
    Ok(())
}

fn operator(cli: &Cli, what: Apply, args: &OperatorArgs) -> CliResult {
    let geometry = Geometry::read_json(&args.geometry)?;
    let input = read_complex_npy(&args.input)?;
    let expected = what.spaces().0.shape(&geometry);
    if input.shape != expected {
        return Err(format!(
            "{} has shape {:?}, but {what:?} with this geometry reads shape {expected:?}",
            args.input.display(),
            input.shape
        )
        .into());
    }
    let ctx = cli.context()?;
    let op = LaminoOperator::new(&ctx, &geometry, &OperatorOptions::default())?;
    let data = op.apply_host(&ctx, what, &input.shape, &input.data)?;
    let shape = what.spaces().1.shape(&geometry);
    write_output(
        &args.out,
        &ComplexArray { shape, data },
        &[&args.input, &args.geometry],
    )
}
