//! A grid of candidate axes and tilts scored on one slab: the search `lamino try` and Python's
//! `find_rotation_axis(centers=..., tilts=...)` run, in one place. Where the axis is searched,
//! plain CT over 180 or 360 degrees adds Vo et al.'s Fourier estimate over the candidates' range,
//! and the one rule of [`AxisDecision`] says which estimate is the axis (as
//! `--rotation-axis auto` decides it).

use super::decision::{AxisDecision, SearchResult};
use super::search::{grid, score_candidates};
use super::slab::{choose_slab, Candidate, Slab};
use super::{find_center_vo, half_turn, PreprocessError};
use crate::geometry::{DetectorColumn, Geometry};
use crate::gpu::GpuContext;
use crate::scan::Projections;

/// The candidates and the slab of a grid search, chosen before any GPU work (a caller states
/// them, then scores).
#[derive(Debug, Clone, PartialEq)]
pub struct AxisGrid {
    /// Every (axis, tilt) pair, axis fastest.
    pub candidates: Vec<Candidate>,
    /// The slab each candidate is scored on.
    pub slab: Slab,
    binning: usize,
    /// The range of the axes searched (unbinned columns); `None` where the axis is given.
    searched: Option<[f64; 2]>,
}

/// What a grid search found.
#[derive(Debug, Clone, PartialEq)]
pub struct GridSearch {
    /// Every candidate's score, the best and the refined one, the previews.
    pub result: SearchResult,
    /// Vo et al.'s estimate over the axes' range (unbinned columns): where the axis is searched
    /// on plain CT over 180 or 360 degrees.
    pub fourier_axis: Option<f64>,
    /// Which estimate is the axis, and why: where the axis is searched.
    pub decision: Option<AxisDecision>,
}

impl AxisGrid {
    /// The grid of `axes` (unbinned columns) by `tilts` (degrees) for the scan of geometry `g`
    /// binned by `binning`, on the slab of `slab_slices` slices (default: [`choose_slab`]'s) at
    /// `slab_z` voxels from the volume's centre. `axis_searched`: the axes are a search range
    /// (else the scan's axis, given, and only the tilts are scored).
    pub fn new(
        g: &Geometry,
        binning: usize,
        (axes, axis_searched): (&[f64], bool),
        tilts: &[f64],
        (slab_slices, slab_z): (Option<usize>, f64),
    ) -> Result<Self, PreprocessError> {
        let candidates = grid(axes, tilts)?;
        let slab = choose_slab(g, binning, &candidates, slab_slices, slab_z)?;
        let searched = axis_searched.then(|| {
            axes.iter()
                .fold([f64::INFINITY, f64::NEG_INFINITY], |[lo, hi], &a| {
                    [lo.min(a), hi.max(a)]
                })
        });
        Ok(Self {
            candidates,
            slab,
            binning,
            searched,
        })
    }

    /// Scores every candidate on `projections` (the scan [`new`](Self::new) was given, binned
    /// as it said) and decides the axis where it is searched.
    pub fn score(
        &self,
        ctx: &GpuContext,
        projections: &Projections,
    ) -> Result<GridSearch, PreprocessError> {
        let b = self.binning;
        let result = score_candidates(ctx, projections, b, &self.candidates, &self.slab)?;
        let fourier_axis = match (self.searched, half_turn(projections.geometry())) {
            (Some([lo, hi]), Some(_)) => {
                let range = [lo, hi].map(|c| DetectorColumn::recorded(c).in_binned(b));
                let axis = DetectorColumn::of_binned(find_center_vo(projections, range)?, b);
                Some(axis.in_recorded())
            }
            _ => None,
        };
        let decision = self
            .searched
            .map(|_| AxisDecision::of(&result, None, fourier_axis));
        Ok(GridSearch {
            result,
            fourier_axis,
            decision,
        })
    }
}
