//! A job that resumes ([`Reconstructor::resume_from`](crate::recon::Reconstructor::resume_from)),
//! before its solve: the checkpoint's geometry against this run's. A searched axis is the one
//! the checkpoint was written with (the interrupted run's search is not repeated); a geometry
//! that differs is refused naming every field that differs with both values, the rotation axis
//! in unbinned columns as the command line gives it.
//!
//! The checkpoint records the operator's geometry: the detector binned, cut to the columns a
//! volume box projects onto and padded for the kernels (and by `--pad`). Its rotation axis is
//! therefore the detector's shifted by whole columns, which depend on the axis only through the
//! box's cut.

use crate::geometry::{Geometry, VolumeBox};
use crate::preprocess::Preprocessing;
use crate::recon::{LateralPadding, Padding};
use crate::scan::boxed_geometry;
use crate::solver::{Checkpoint, GeometryDifference, SolverError};

/// The geometry the operator of a run on the detector of `g` (binned) runs on: the rotation
/// axis at binned column `axis`, the box `volume`, padded as the run pads (`pad`);
/// `None` where the axis is not on the detector or the box's shadow leaves it.
fn operator_geometry(
    g: &Geometry,
    axis: f64,
    volume: Option<&VolumeBox>,
    pad: LateralPadding,
) -> Option<Geometry> {
    let g = Geometry {
        center: Some(axis),
        ..g.clone()
    };
    g.validate().ok()?;
    Some(padded(
        &match volume {
            Some(b) => boxed_geometry(&g, b).ok()?.0,
            None => g,
        },
        pad,
    ))
}

/// `g` padded as the run pads it.
fn padded(g: &Geometry, pad: LateralPadding) -> Geometry {
    Padding::new(g, pad.columns(g)).apply(g)
}

/// The binned column on the detector of `g` that puts the operator's rotation axis where the
/// checkpoint `written`'s is, bit for bit when one does: the shift is corrected until it
/// settles (it changes only where the box's cut does), then the last units in the last place
/// that the subtraction may round are tried. `None` when no column on the detector gives it
/// (the checkpoint belongs to another scan or box; [`check_geometry`] then says how).
pub(super) fn checkpoint_axis(
    written: &Geometry,
    g: &Geometry,
    volume: Option<&VolumeBox>,
    pad: LateralPadding,
) -> Option<f64> {
    let target = written.rotation_axis();
    // Only a detector of the checkpoint's width can give its axis.
    let made = |axis: f64| {
        operator_geometry(g, axis, volume, pad)
            .filter(|o| o.detw == written.detw)
            .map(|o| o.rotation_axis())
    };
    let shift = made(g.rotation_axis())? - g.rotation_axis();
    let mut axis = target - shift;
    for _ in 0..4 {
        let got = made(axis)?;
        if got.to_bits() == target.to_bits() {
            return Some(axis);
        }
        let next = axis + (target - got);
        if next == axis {
            break;
        }
        axis = next;
    }
    let ulps = |a: f64, steps: i64| f64::from_bits(a.to_bits().wrapping_add_signed(steps));
    (-4..=4)
        .map(|steps| ulps(axis, steps))
        .find(|&a| made(a).is_some_and(|m| m.to_bits() == target.to_bits()))
}

/// Refuses to resume from `checkpoint` when the operator of this run (projections of the
/// binned, boxed geometry `g`, preprocessed as `pre` says, padded as `pad` says) would run on another
/// geometry: every field that differs, with both values, the rotation axis in unbinned columns.
pub(super) fn check_geometry(
    checkpoint: &Checkpoint,
    g: &Geometry,
    pre: &Preprocessing,
    pad: LateralPadding,
) -> Result<(), SolverError> {
    let run = padded(g, pad);
    let mut differences = GeometryDifference::list(&checkpoint.geometry, &run);
    if differences.is_empty() {
        return Ok(());
    }
    // The operator's axis is the detector's moved by whole columns (the same in both runs when
    // only the axis differs); the run's own is what --rotation-axis gave or the search found.
    let written = pre.rotation_axis.in_recorded()
        + (checkpoint.geometry.rotation_axis() - run.rotation_axis()) * pre.binning as f64;
    // On a detector of another width the columns are not comparable: the operator's are shown.
    let comparable = checkpoint.geometry.detw == run.detw;
    for d in differences.iter_mut().filter(|_| comparable) {
        if d.field.starts_with("rotation_axis") {
            // Two decimals, as the axis is printed, unless they hide the difference.
            let (mut c, mut r) = (format!("{written:.2}"), format!("{:.2}", pre.rotation_axis));
            if c == r {
                (c, r) = (written.to_string(), pre.rotation_axis.to_string());
            }
            *d = GeometryDifference {
                field: "rotation_axis (unbinned columns)".into(),
                checkpoint: c,
                this_run: r,
            };
        }
    }
    Err(SolverError::CheckpointGeometry { differences })
}
