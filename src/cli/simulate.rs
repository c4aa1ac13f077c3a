//! `lamino simulate`: a scan of a preset phantom written as DXchange.

use std::path::PathBuf;

use clap::Args;

use crate::io::{write_dxchange, write_shifts};
use crate::simulate::{simulated_moving_scan, Motion, PhantomKind, ScanSpec};

use super::CliResult;

#[derive(Args)]
pub struct SimulateArgs {
    /// shepp (3D modified Shepp-Logan), chip (layered circuit slab) or blobs (Gaussians).
    #[arg(long)]
    phantom: PhantomKind,
    /// Volume side n (n^3 voxels, n x n detector); even.
    #[arg(long)]
    size: usize,
    /// Projection angles, equispaced over [0, 360) degrees.
    #[arg(long)]
    angles: usize,
    /// Laminographic tilt T in degrees: phi = 90 + T, so 0 is plain tomography.
    #[arg(long, allow_hyphen_values = true)]
    tilt_deg: f64,
    /// Incident photons per pixel: Poisson-noisy counts with flats = I0. Without it the
    /// intensities are noiseless, exp(-P), with flats = 1.
    #[arg(long)]
    photons: Option<f64>,
    /// Seed of the Poisson noise and of the jitter.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A sample that moved: each projection shifted on the detector by a random amount of this
    /// RMS in each direction (columns and rows), pixels. The true shifts are written beside the
    /// scan as SCAN.shifts.csv, which `reconstruct --shifts` reads.
    #[arg(long, default_value_t = 0.0)]
    jitter: f64,
    /// A slow drift: a shift in each direction growing linearly to this many pixels at the last
    /// projection (with --jitter or alone; in SCAN.shifts.csv too).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    drift: f64,
    /// The detector column the rotation axis projects onto (pixels, sub-pixel; default size/2).
    /// DXchange records no axis: reconstruct with the same --rotation-axis (or `auto`).
    #[arg(long)]
    rotation_axis: Option<f64>,
    /// DXchange HDF5 output.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: &SimulateArgs) -> CliResult {
    let spec = ScanSpec {
        phantom: args.phantom,
        size: args.size,
        angles: args.angles,
        tilt_deg: args.tilt_deg,
        photons: args.photons,
        seed: args.seed,
        rotation_axis: args.rotation_axis,
    };
    if !(args.jitter.is_finite() && args.jitter >= 0.0 && args.drift.is_finite()) {
        return Err(format!(
            "--jitter {} --drift {}: the jitter must be a finite RMS of at least 0 pixels and the \
             drift finite",
            args.jitter, args.drift
        )
        .into());
    }
    let motion = Motion {
        jitter_px: args.jitter,
        drift_px: args.drift,
        seed: args.seed,
    };
    let simulated = simulated_moving_scan(&spec, motion)?;
    write_dxchange(&args.out, &simulated.scan)?;
    let shifts_file = shifts_path(&args.out);
    if !simulated.shifts.is_empty() {
        write_shifts(&shifts_file, &simulated.geometry.theta, &simulated.shifts)?;
    }
    let max_p = simulated
        .line_integrals
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    println!(
        "wrote {}: {} phantom, {}^3 voxels, {} angles, tilt {} deg, rotation axis at column {}, max line integral {max_p:.3}{}",
        args.out.display(),
        args.phantom,
        args.size,
        args.angles,
        args.tilt_deg,
        simulated.geometry.rotation_axis(),
        match args.photons {
            Some(i0) => format!(", Poisson noise with {i0} photons (seed {})", args.seed),
            None => ", noiseless".into(),
        }
    );
    if !simulated.shifts.is_empty() {
        println!(
            "the sample moved (jitter {} px RMS, drift {} px): the true shifts are in {}",
            args.jitter,
            args.drift,
            shifts_file.display()
        );
    }
    Ok(())
}

/// Where the true shifts of the scan `out` are written: `SCAN.shifts.csv` beside it, `SCAN`
/// its name without the extension.
fn shifts_path(out: &std::path::Path) -> PathBuf {
    out.with_extension("shifts.csv")
}
