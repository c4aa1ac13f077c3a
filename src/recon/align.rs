//! Projection matching (Odstrčil et al., Optics Express 27, 36637, 2019): each projection's
//! detector shift estimated by reconstructing the scan with the shifts so far, reprojecting the
//! volume, and registering every measured projection against its reprojection; repeated coarse
//! to fine until the shifts stop changing.
//!
//! - **Levels**: the detector binned by 2^L first (L the most that leaves 16 pixels on its
//!   shorter registered side), then by half as much, down to the scan's own pixels: a coarse
//!   level is cheap (1/8 of the voxels per halving) and takes the large shifts.
//! - **A round**: a reconstruction of [`AlignOptions::iterations_per_round`] outer iterations
//!   from the start (the job's parameters otherwise), on a volume padded laterally by a quarter
//!   of the detector (a flat sample reaches beyond the field of view), its reprojection through
//!   the operator with the shifts so far (so it lands where the geometry now says), and each
//!   projection registered against it ([`Registration`]).
//! - **Registration**: cross-correlation ([`Registration::shift`]) while a round moves the
//!   shifts by half a pixel of its level or more (it finds shifts of several pixels at once);
//!   then the linearised least-squares fit ([`Registration::refine`]), half of it and at most
//!   half a pixel a round: a periodic sample's correlation has several peaks, which projections
//!   jumped between, and the full step overshot on its pattern (docs/reconstruct.md, "Estimating
//!   them: projection matching"). A gradient of the data term with respect to the
//!   shifts was not measured against these.
//! - **Rigid motion removed**: a common shift of every projection (the volume's position, for
//!   plain CT the rotation axis) and the shifts a translation of the volume makes give the same
//!   data as the volume moved; each update has its fit by them removed, so the volume stays where
//!   the scan put it ([`remove_rigid_motion`]).
//! - **Stop**: when a round's update is below [`AlignOptions::tolerance_px`] RMS (in the scan's
//!   pixels, times the binning on coarse levels); a full-resolution level that has not got
//!   there after [`AlignOptions::max_rounds`] is an error ([`AlignError::NotConverged`]).
//! - A detector of fewer than [`FEWEST_PIXELS`] rows (a 2-row CT scan) keeps its rows' shifts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use num_complex::Complex32;
use thiserror::Error;

use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::operator::{Apply, LaminoOperator, OperatorError, OperatorOptions};
use crate::params::AdmmParams;
use crate::preprocess::{
    bin_projections, solve, AlignOptions, Alignment, AlignmentRound, PreprocessError, Registration,
    FEWEST_PIXELS,
};
use crate::scan::{Projections, ScanError};

use super::{LateralPadding, Padding, ReconError, Reconstructor};

/// Why projection matching stopped without shifts.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AlignError {
    #[error(
        "projection matching did not converge after {rounds} rounds at full resolution: the \
         shifts still moved {rms_px:.3} pixels RMS per round (tolerance {tolerance_px}); the \
         scan may have moved more than a quarter of the detector, or hold too little contrast \
         to register"
    )]
    NotConverged {
        rounds: usize,
        rms_px: f64,
        tolerance_px: f64,
    },
    #[error(
        "projection matching runs on one process: align the scan alone (lamino align) and pass \
         its shifts.csv with --shifts"
    )]
    Ranks,
    #[error("the alignment was cancelled")]
    Cancelled,
    #[error(transparent)]
    Recon(Box<ReconError>),
    #[error(transparent)]
    Preprocess(#[from] PreprocessError),
    #[error(transparent)]
    Operator(#[from] OperatorError),
    #[error(transparent)]
    Scan(#[from] ScanError),
}

impl From<ReconError> for AlignError {
    fn from(e: ReconError) -> Self {
        Self::Recon(Box::new(e))
    }
}

/// The binnings of the levels, coarse to fine: halvings while the shorter registered side keeps
/// 16 pixels.
fn levels(g: &Geometry) -> Vec<usize> {
    let side = match g.deth >= FEWEST_PIXELS {
        true => g.deth.min(g.detw),
        false => return vec![1],
    };
    let mut binnings = vec![1];
    while side / (binnings[0] * 2) >= 16 {
        binnings.insert(0, binnings[0] * 2);
    }
    binnings
}

/// Aligns `projections` (whose shifts, if any, are where it starts) on `ctx`, reconstructing
/// with `params` (their iterations replaced by the rounds'); `note` hears of each round. The
/// cancel flag stops it between rounds.
pub fn align(
    ctx: &GpuContext,
    projections: &Projections,
    params: AdmmParams,
    options: &AlignOptions,
    cancel: Option<&AtomicBool>,
    note: &mut dyn FnMut(&AlignmentRound),
) -> Result<Alignment, AlignError> {
    let start = Instant::now();
    let g = projections.geometry();
    let ntheta = g.ntheta();
    let mut shifts = match g.shifts.is_empty() {
        true => vec![[0.0; 2]; ntheta],
        false => g.shifts.clone(),
    };
    let round_params = AdmmParams {
        outer_iterations: options.iterations_per_round,
        convergence: None,
        ..params
    };
    let rows_estimated = g.deth >= FEWEST_PIXELS;
    let mut rounds = Vec::new();
    let mut coarse = true;
    for b in levels(g) {
        let tolerance = options.tolerance_px * b as f64;
        let mut converged = false;
        for _ in 0..options.max_rounds {
            if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                return Err(AlignError::Cancelled);
            }
            let begun = Instant::now();
            let moved = projections.clone().with_shifts(shifts.clone())?;
            let binned = bin_projections(&moved, b)?;
            let gb = binned.geometry();
            // The volume padded laterally by a quarter of the detector on each side, as
            // `--pad` pads it: a flat sample reaches beyond the detector's field of view, and a
            // reprojection of the field of view alone lacks what lies beyond it, which pulls
            // the registration of the projections' edges.
            // Within the budget the run's device is capped at, where it is.
            let mut builder = Reconstructor::new(ctx)
                .params(round_params)
                .lateral_padding(LateralPadding::QuarterWidth);
            if let Some(bytes) = ctx.device_budget() {
                builder = builder.device_memory_budget(bytes);
            }
            let padding = builder.padding(gb);
            let solved = builder.solve(&binned)?;
            let volume = solved.iterate_view().read_volume()?;
            // The solver's memory is freed before the reprojection's operator takes its own.
            drop(solved);
            let model = reproject(ctx, &padding.apply(gb), &padding, gb, &volume)?;
            let registration = Registration::new(gb.deth, gb.detw, options.upsample);
            let frame = gb.deth * gb.detw;
            // Rounds correlate (shifts of several pixels) until one moves the shifts by less
            // than half a pixel of its level RMS; from then on they refine, by half
            // the fit and at most half a pixel of their level at a time (a periodic sample's
            // correlation has several peaks, and a full step overshoots on its pattern).
            let correlate = coarse;
            let mut updates: Vec<[f64; 2]> = (0..ntheta)
                .map(|t| {
                    let at = t * frame..(t + 1) * frame;
                    let (measured, model) = (&binned.values()[at.clone()], &model[at]);
                    let [du, dv] = match correlate {
                        true => registration.shift(measured, model),
                        false => registration
                            .refine(measured, model)
                            .map_or([0.0; 2], |d| d.map(|v| (0.5 * v).clamp(-0.5, 0.5))),
                    };
                    [du * b as f64, dv * b as f64]
                })
                .collect();
            remove_rigid_motion(g, &mut updates);
            let sizes: Vec<f64> = updates.iter().map(|[du, dv]| du.hypot(*dv)).collect();
            let rms = (sizes.iter().map(|s| s * s).sum::<f64>() / ntheta as f64).sqrt();
            let max = sizes.iter().cloned().fold(0.0, f64::max);
            shifts
                .iter_mut()
                .zip(&updates)
                .for_each(|(s, u)| *s = [s[0] + u[0], s[1] + u[1]]);
            let done = AlignmentRound {
                binning: b,
                rms_update_px: rms,
                max_update_px: max,
                seconds: begun.elapsed().as_secs_f64(),
            };
            note(&done);
            rounds.push(done);
            coarse = coarse && rms >= 0.5 * b as f64;
            // A NaN never passes: the level runs out of rounds.
            if rms < tolerance {
                converged = true;
                break;
            }
        }
        if !converged && b == 1 {
            let rms_px = rounds.last().map_or(f64::NAN, |r| r.rms_update_px);
            return Err(AlignError::NotConverged {
                rounds: options.max_rounds,
                rms_px,
                tolerance_px: options.tolerance_px,
            });
        }
    }
    Ok(Alignment {
        options: *options,
        shifts,
        rows_estimated,
        rounds,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// `updates` without what the data cannot tell from the volume's own position: their
/// least-squares fit by a common shift of every projection (the volume's position, for plain CT
/// the rotation axis) and by the shifts a translation of the volume makes,
/// `du = x cos(theta) + y sin(theta)` and `dv = cos(phi) (x sin(theta) - y cos(theta))`
/// ([`Geometry::projection_shift`]). Left in, they drift from round to round, as nothing in the
/// data holds them (the reconstruction moves with them).
pub fn remove_rigid_motion(g: &Geometry, updates: &mut [[f64; 2]]) {
    let cos_phi = g.tilt.phi().cos();
    let basis = |t: usize| -> [[f64; 2]; 4] {
        let (sin_t, cos_t) = g.theta[t].sin_cos();
        [
            [1.0, 0.0],
            [0.0, 1.0],
            [cos_t, cos_phi * sin_t],
            [sin_t, -cos_phi * cos_t],
        ]
    };
    let mut normal = [[0.0; 4]; 4];
    let mut rhs = [0.0; 4];
    for (t, u) in updates.iter().enumerate() {
        let b = basis(t);
        for i in 0..4 {
            rhs[i] += b[i][0] * u[0] + b[i][1] * u[1];
            for j in 0..4 {
                normal[i][j] += b[i][0] * b[j][0] + b[i][1] * b[j][1];
            }
        }
    }
    // Plain CT: the translation moves no row, and its y and the rows' common shift are apart;
    // with one or two angles the fit is singular, and the mean alone is removed.
    let fit = solve(normal, rhs, 4).unwrap_or_else(|| {
        let n = updates.len().max(1) as f64;
        let mean = |axis: usize| updates.iter().map(|u| u[axis]).sum::<f64>() / n;
        [mean(0), mean(1), 0.0, 0.0]
    });
    for (t, u) in updates.iter_mut().enumerate() {
        let b = basis(t);
        for (axis, value) in u.iter_mut().enumerate() {
            *value -= (0..4).map(|i| fit[i] * b[i][axis]).sum::<f64>();
        }
    }
}

/// The projections of `volume`, the whole array of the `padded` geometry, through its operator
/// (shifts included), cropped to the detector of `g` that `padding` padded.
fn reproject(
    ctx: &GpuContext,
    padded: &Geometry,
    padding: &Padding,
    g: &Geometry,
    volume: &[f32],
) -> Result<Vec<f32>, AlignError> {
    let input: Vec<Complex32> = volume.iter().map(|&v| Complex32::new(v, 0.0)).collect();
    let op = LaminoOperator::new(ctx, padded, &OperatorOptions::default())?;
    let shape = [padded.n0, padded.n1, padded.n2];
    let data = op.apply_host(ctx, Apply::Forward, &shape, &input)?;
    let (r0, c0) = (padding.detector.rows[0], padding.detector.columns[0]);
    let mut model = Vec::with_capacity(g.data_len());
    for t in 0..g.ntheta() {
        for r in 0..g.deth {
            let from = (t * padded.deth + r + r0) * padded.detw + c0;
            model.extend(data[from..from + g.detw].iter().map(|c| c.re));
        }
    }
    Ok(model)
}
