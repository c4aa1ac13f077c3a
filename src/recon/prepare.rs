//! The steps between a scan as read (binned, flat-fielded) and the solver's projections, in one
//! order for every front end: stripes removed, then the rotation axis (the geometry's, a column
//! given, a checkpoint's, or searched), then the box of the volume the operator reconstructs.
//! Under MPI ranks each process holds its share of the angles and the steps run on every rank
//! together ([`Collective`]); alone they run here. A [`Preparation`] is part of a
//! [`Job`](super::Job), which runs it under the reconstruction's budget; each step is heard of
//! as it is done ([`Prepared`]).

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::distributed::Collective;
use crate::geometry::{DetectorColumn, VolumeBox};
use crate::gpu::GpuContext;
use crate::params::AdmmParams;
use crate::preprocess::{
    find_rotation_axis, find_rotation_axis_on_ranks, remove_stripes, remove_stripes_on_ranks,
    AlignOptions, Alignment, AlignmentRound, AxisSearch, AxisSearchShare, AxisSource,
    PreprocessError, Preprocessing, StripeRemoval, StripeShare,
};
use crate::scan::{Projections, ScanError};

use super::align::{align, AlignError};

/// How the rotation axis is chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum AxisStep {
    /// The scan geometry's (its `center`, else the detector's middle).
    #[default]
    Geometry,
    /// A column of the detector as recorded (`--rotation-axis X`, tomopy's `center`).
    Column(DetectorColumn),
    /// Searched on the binned projections ([`find_rotation_axis`]; on MPI ranks
    /// [`find_rotation_axis_on_ranks`]).
    Search,
    /// The one a checkpoint was written with, which a resumed run takes instead of searching
    /// again: the column of the binned detector that gives it, `None` where no column does (the
    /// resumed run's geometry check then says what differs).
    Checkpoint(Option<f64>),
}

/// The steps from the scan as read to the solver's projections (by default none: the
/// projections as read, the geometry's axis, the whole volume).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Preparation {
    /// Stripe removal, its parameters resolved for the detector when it runs.
    pub stripes: Option<StripeRemoval>,
    pub axis: AxisStep,
    /// A box of the volume, in the binned voxels of the scan as read.
    pub volume: Option<VolumeBox>,
    /// Each projection's shift `[du, dv]` in the scan's (unbinned) pixels, one per angle
    /// (`--shifts`), held by the projections' geometry from before the axis step on. The axis
    /// search scores the projections as they landed: its slab reconstruction does not apply
    /// them.
    pub shifts: Option<Vec<[f64; 2]>>,
    /// Projection matching ([`super::align`]) after the axis step, from the shifts given (or
    /// none) on the whole volume, before the box: its shifts replace them.
    pub align: Option<AlignOptions>,
}

/// What a step did, as it is done.
#[derive(Debug)]
pub enum Prepared<'a> {
    /// Stripes removed with `method` (resolved) in `seconds`; under MPI ranks, the rows this
    /// rank corrected and what it held, against the `held` projection values of its angles.
    StripesRemoved {
        method: StripeRemoval,
        seconds: f64,
        share: Option<(StripeShare, usize)>,
    },
    /// The axis search begins (it takes seconds to minutes).
    AxisSearchStarted,
    /// The axis searched (unbinned columns) in `seconds`: the search on the process that scored
    /// it, and under MPI ranks what this rank held.
    AxisSearched {
        axis: f64,
        search: Option<&'a AxisSearch>,
        share: Option<AxisSearchShare>,
        seconds: f64,
    },
    /// The checkpoint's axis taken (unbinned columns), not searched again.
    AxisFromCheckpoint { axis: f64 },
    /// A round of projection matching done.
    AlignmentRound(&'a AlignmentRound),
    /// Projection matching done: its shifts in the scan's unbinned pixels.
    Aligned(&'a Alignment),
    /// The volume's box: the operator uses `kept` (rows, columns) of the detector's `of`.
    Boxed { kept: [usize; 2], of: [usize; 2] },
}

/// Why a preparation stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    #[error(transparent)]
    Preprocess(#[from] PreprocessError),
    #[error(transparent)]
    Scan(#[from] ScanError),
    #[error(transparent)]
    Align(#[from] AlignError),
}

impl Preparation {
    /// Runs the steps on `projections` (binned by `pre.binning`; under MPI ranks this rank's
    /// share of the angles), on `ctx` for the axis search, and records in `pre` what they
    /// chose (the stripe removal, the axis and its source, the search); `note` hears of each
    /// step as it is done. `cancel` stops the axis search before its next pass
    /// ([`PreprocessError::Cancelled`]). Collective under MPI ranks. A job runs it through
    /// [`Reconstructor::prepare`](super::Reconstructor::prepare), under the run's budget.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &self,
        ctx: &GpuContext,
        params: AdmmParams,
        processes: &dyn Collective,
        mut projections: Projections,
        pre: &mut Preprocessing,
        cancel: Option<&AtomicBool>,
        note: &mut dyn FnMut(Prepared<'_>),
    ) -> Result<Projections, PrepareError> {
        let ranks = processes.size() > 1;
        let b = pre.binning;
        projections = self.remove_stripes(processes, projections, pre, note)?;
        if let Some(shifts) = &self.shifts {
            // Shifts are differences of pixels: binned, they shrink by the factor.
            let binned = shifts.iter().map(|s| s.map(|v| v / b as f64)).collect();
            projections = projections.with_shifts(binned)?;
        }
        projections = match self.axis {
            AxisStep::Geometry => projections,
            AxisStep::Column(c) => {
                pre.rotation_axis_source = AxisSource::Given;
                pre.rotation_axis = c;
                projections.with_rotation_axis(c.in_binned(b))?
            }
            AxisStep::Checkpoint(None) => projections,
            AxisStep::Checkpoint(Some(axis)) => {
                pre.rotation_axis_source = AxisSource::Checkpoint;
                pre.rotation_axis = DetectorColumn::of_binned(axis, b);
                note(Prepared::AxisFromCheckpoint {
                    axis: pre.rotation_axis.in_recorded(),
                });
                projections.with_rotation_axis(axis)?
            }
            AxisStep::Search => {
                let start = Instant::now();
                note(Prepared::AxisSearchStarted);
                let tilt = projections.geometry().tilt.degrees();
                // Under MPI every rank sums its angles in turn, the first scores and tells the
                // others.
                let (axis, search, share) = match ranks {
                    true => {
                        find_rotation_axis_on_ranks(ctx, processes, &projections, b, tilt, cancel)
                            .map(|(axis, search, share)| (axis, search, Some(share)))?
                    }
                    false => find_rotation_axis(ctx, &projections, b, tilt, None, 0.0, cancel)
                        .map(|s| (s.rotation_axis, Some(s), None))?,
                };
                pre.rotation_axis_source = AxisSource::Searched;
                pre.rotation_axis = DetectorColumn::recorded(axis);
                note(Prepared::AxisSearched {
                    axis,
                    search: search.as_ref(),
                    share,
                    seconds: start.elapsed().as_secs_f64(),
                });
                pre.axis_search = search;
                projections.with_rotation_axis(pre.rotation_axis.in_binned(b))?
            }
        };
        if let Some(options) = &self.align {
            if ranks {
                return Err(AlignError::Ranks.into());
            }
            let alignment = align(ctx, &projections, params, options, cancel, &mut |round| {
                note(Prepared::AlignmentRound(round))
            })?;
            projections = projections.with_shifts(alignment.shifts.clone())?;
            let recorded = alignment.in_pixels_of(b);
            note(Prepared::Aligned(&recorded));
            pre.alignment = Some(recorded);
        }
        if let Some(volume) = &self.volume {
            let of = [projections.geometry().deth, projections.geometry().detw];
            projections = projections.with_volume(volume)?;
            let kept = [projections.geometry().deth, projections.geometry().detw];
            note(Prepared::Boxed { kept, of });
        }
        Ok(projections)
    }

    /// The first step of [`run`](Self::run) alone: `projections` with stripes removed, if the
    /// preparation removes them (recorded in `pre`). Collective under MPI ranks.
    pub fn remove_stripes(
        &self,
        processes: &dyn Collective,
        projections: Projections,
        pre: &mut Preprocessing,
        note: &mut dyn FnMut(Prepared<'_>),
    ) -> Result<Projections, PrepareError> {
        let Some(method) = self.stripes else {
            return Ok(projections);
        };
        let start = Instant::now();
        let method = method.resolved(projections.geometry().detw);
        let (projections, share) = match processes.size() > 1 {
            true => {
                let held = projections.values().len();
                let (mine, share) = remove_stripes_on_ranks(processes, projections, method)?;
                (mine, Some((share, held)))
            }
            false => (remove_stripes(&projections, method)?, None),
        };
        pre.stripe_removal = Some(method);
        note(Prepared::StripesRemoved {
            method,
            seconds: start.elapsed().as_secs_f64(),
            share,
        });
        Ok(projections)
    }
}
