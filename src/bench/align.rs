//! `lamino bench align`: projection matching (`reconstruct --align`) on simulated scans of a
//! sample that moved, against the reconstruction without shifts and with the true ones: how far
//! the matched shifts are from the truth, how good the volume is, and what it costs.
//!
//! The shifts are compared beyond rigid motion (a common shift and a translation's sinusoids,
//! which no data tells from the volume's position, and which the matching removes from its
//! updates; `recon::align`), and after the mean alone. The matched volume sits where the moved
//! scan put it, so it is scored both as it is and with its shifts' rigid part replaced by the
//! truth's (the alignment's own error, without the volume's position).

use std::time::Instant;

use serde::Serialize;

use super::convergence::ConvergenceBenchError;
use super::{print_json, BenchError};
use crate::gpu::GpuContext;
use crate::metrics::{rel_l2, score};
use crate::params::AdmmParams;
use crate::preprocess::AlignOptions;
use crate::recon::align::{align, remove_rigid_motion, AlignError};
use crate::recon::input::projections_from_scan;
use crate::recon::Reconstructor;
use crate::scan::Projections;
use crate::simulate::{simulated_moving_scan, Motion, PhantomKind, ScanSpec};

/// The scan a record is measured on.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MovedScan {
    #[serde(serialize_with = "phantom_name")]
    pub phantom: PhantomKind,
    pub size: usize,
    pub angles: usize,
    pub tilt_deg: f64,
    pub photons: f64,
    pub jitter_px: f64,
    pub drift_px: f64,
}

fn phantom_name<S: serde::Serializer>(p: &PhantomKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.name())
}

/// One scan of the alignment benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct AlignBenchRecord {
    pub scan: MovedScan,
    /// Seconds of the reconstruction without shifts, and its rel. L2 and SSIM to the phantom.
    pub plain_s: f64,
    pub plain_rel_l2: f64,
    pub plain_ssim: f64,
    /// The rel. L2 of the reconstruction with the true shifts.
    pub true_shifts_rel_l2: f64,
    /// Seconds of the matching and its rounds.
    pub align_s: f64,
    pub rounds: usize,
    /// Seconds of the reconstruction with the matched shifts.
    pub aligned_reconstruction_s: f64,
    /// `(align_s + aligned_reconstruction_s) / plain_s`.
    pub align_over_plain: f64,
    /// RMS of the matched shifts from the truth beyond rigid motion, pixels: du, dv, both.
    pub error_beyond_rigid_px: [f64; 3],
    /// The same after removing the mean alone, pixels: du, dv, both.
    pub error_beyond_mean_px: [f64; 3],
    /// The matched volume as it is: rel. L2 and SSIM to the phantom.
    pub matched_rel_l2: f64,
    pub matched_ssim: f64,
    /// The volume with the matched shifts whose rigid part is the truth's: rel. L2.
    pub matched_rigid_from_truth_rel_l2: f64,
}

/// Why the alignment benchmark stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AlignBenchError {
    #[error(transparent)]
    Scan(#[from] ConvergenceBenchError),
    #[error(transparent)]
    Align(#[from] AlignError),
}

/// RMS over the projections of `d` (du, dv, both).
fn rms(d: &[[f64; 2]]) -> [f64; 3] {
    let n = d.len().max(1) as f64;
    let du = (d.iter().map(|v| v[0] * v[0]).sum::<f64>() / n).sqrt();
    let dv = (d.iter().map(|v| v[1] * v[1]).sum::<f64>() / n).sqrt();
    [du, dv, du.hypot(dv)]
}

/// Measures [`AlignBenchRecord`] on `scan` (Poisson noise and the motion seeded 0).
pub fn bench_align(ctx: &GpuContext, scan: MovedScan) -> Result<AlignBenchRecord, BenchError> {
    let spec = ScanSpec {
        phantom: scan.phantom,
        size: scan.size,
        angles: scan.angles,
        tilt_deg: scan.tilt_deg,
        photons: Some(scan.photons),
        seed: 0,
        rotation_axis: None,
    };
    let motion = Motion {
        jitter_px: scan.jitter_px,
        drift_px: scan.drift_px,
        seed: 0,
    };
    let sim = simulated_moving_scan(&spec, motion)
        .map_err(|e| AlignBenchError::from(ConvergenceBenchError::from(e)))?;
    let truth = sim.scan.truth.clone().map(|t| t.values).unwrap_or_default();
    let true_shifts = match sim.shifts.is_empty() {
        true => vec![[0.0; 2]; scan.angles],
        false => sim.shifts.clone(),
    };
    let p = projections_from_scan(std::path::Path::new("simulated"), sim.scan, None)
        .map_err(|e| AlignBenchError::from(ConvergenceBenchError::from(e)))?
        .projections;
    let shape = [scan.size; 3];
    let run = |shifts: Option<Vec<[f64; 2]>>| -> Result<(f64, Vec<f32>), BenchError> {
        let projections: Projections = match shifts {
            Some(s) => p
                .clone()
                .with_shifts(s)
                .map_err(crate::recon::ReconError::from)?,
            None => p.clone(),
        };
        let start = Instant::now();
        let r = Reconstructor::new(ctx).run(&projections)?;
        Ok((start.elapsed().as_secs_f64(), r.volume))
    };
    let (plain_s, plain) = run(None)?;
    let (_, with_truth) = run(Some(true_shifts.clone()))?;
    let start = Instant::now();
    let alignment = align(
        ctx,
        &p,
        AdmmParams::default(),
        &AlignOptions::DEFAULT,
        None,
        &mut |_| {},
    )
    .map_err(AlignBenchError::from)?;
    let align_s = start.elapsed().as_secs_f64();
    let (aligned_reconstruction_s, matched) = run(Some(alignment.shifts.clone()))?;
    let difference: Vec<[f64; 2]> = alignment
        .shifts
        .iter()
        .zip(&true_shifts)
        .map(|(f, t)| [f[0] - t[0], f[1] - t[1]])
        .collect();
    let mut beyond_rigid = difference.clone();
    remove_rigid_motion(p.geometry(), &mut beyond_rigid);
    let mean = |axis: usize| difference.iter().map(|d| d[axis]).sum::<f64>() / scan.angles as f64;
    let (mean_u, mean_v) = (mean(0), mean(1));
    let beyond_mean: Vec<[f64; 2]> = difference
        .iter()
        .map(|d| [d[0] - mean_u, d[1] - mean_v])
        .collect();
    // The truth plus what is left of the difference beyond rigid motion: the matched shifts
    // with the truth's rigid part.
    let rigid_from_truth = true_shifts
        .iter()
        .zip(&beyond_rigid)
        .map(|(t, r)| [t[0] + r[0], t[1] + r[1]])
        .collect();
    let (_, matched_rigid) = run(Some(rigid_from_truth))?;
    let (plain_score, matched_score) =
        (score(&plain, &truth, shape), score(&matched, &truth, shape));
    Ok(AlignBenchRecord {
        scan,
        plain_s,
        plain_rel_l2: plain_score.rel_l2,
        plain_ssim: plain_score.ssim,
        true_shifts_rel_l2: rel_l2(&with_truth, &truth),
        align_s,
        rounds: alignment.rounds.len(),
        aligned_reconstruction_s,
        align_over_plain: (align_s + aligned_reconstruction_s) / plain_s,
        error_beyond_rigid_px: rms(&beyond_rigid),
        error_beyond_mean_px: rms(&beyond_mean),
        matched_rel_l2: matched_score.rel_l2,
        matched_ssim: matched_score.ssim,
        matched_rigid_from_truth_rel_l2: rel_l2(&matched_rigid, &truth),
    })
}

/// Prints [`bench_align`] for each of `scans`.
pub fn print(ctx: &GpuContext, json: bool, scans: &[MovedScan]) -> Result<(), BenchError> {
    for &scan in scans {
        let r = bench_align(ctx, scan)?;
        if json {
            print_json(&r)?;
            continue;
        }
        let s = &r.scan;
        println!(
            "{} {}^3, {} angles, tilt {} deg, jitter {} px, drift {} px: shifts {:.3} px RMS \
             from the truth beyond rigid motion (du {:.3}, dv {:.3}; {:.3} beyond the mean) in {} \
             rounds; rel. L2 without shifts {:.3}, true shifts {:.3}, matched {:.3} (rigid part \
             the truth's {:.3}); {:.1} s + {:.1} s against {:.1} s without: {:.2}x",
            s.phantom,
            s.size,
            s.angles,
            s.tilt_deg,
            s.jitter_px,
            s.drift_px,
            r.error_beyond_rigid_px[2],
            r.error_beyond_rigid_px[0],
            r.error_beyond_rigid_px[1],
            r.error_beyond_mean_px[2],
            r.rounds,
            r.plain_rel_l2,
            r.true_shifts_rel_l2,
            r.matched_rel_l2,
            r.matched_rigid_from_truth_rel_l2,
            r.align_s,
            r.aligned_reconstruction_s,
            r.plain_s,
            r.align_over_plain
        );
    }
    Ok(())
}
