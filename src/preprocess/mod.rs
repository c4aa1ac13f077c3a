//! Preprocessing for scans from real instruments: detector binning ([`bin_projections`],
//! [`bin_frames`]), stripe (ring) removal ([`remove_stripes`]) and the search for the rotation
//! axis and the tilt ([`score_candidates`], [`find_rotation_axis`], a grid of candidates:
//! [`AxisGrid`]).
//!
//! The rotation axis itself is part of the geometry ([`crate::geometry::Geometry::center`]); the
//! operator applies it exactly, so these tools only find it.

mod alignment;
mod axis_grid;
mod binning;
mod center_vo;
mod decision;
mod registration;
mod search;
mod slab;
mod stripe;

pub use alignment::{AlignOptions, Alignment, AlignmentRound};
pub use axis_grid::{AxisGrid, GridSearch};
pub use binning::{
    bin_frames, bin_geometry, bin_projections, binning_factor, parse_binning, MAX_BINNING,
};
pub use center_vo::{find_center_vo, half_turn, VO_FINE_STEP};
pub use decision::{AxisDecision, Scored, SearchResult, AXIS_NEAR_FOURIER, SHARP_PEAK_CONTRAST};
pub(crate) use registration::solve;
pub use registration::{Registration, FEWEST_PIXELS};
pub use search::{
    candidate_range, check_grid, find_rotation_axis, grid, score_candidates, AxisSearch,
    AUTO_AXIS_FINE_STEP, AUTO_AXIS_RANGE_FRACTION, MAX_CANDIDATES,
};
pub use search::{find_rotation_axis_on_ranks, AxisSearchShare};
pub use slab::{choose_slab, slab_reference, Candidate, Slab, DEFAULT_SLAB_SLICES};
pub use stripe::{remove_stripes, remove_stripes_in_place, StripeRemoval, FW_SIGMA};
pub use stripe::{remove_stripes_on_ranks, StripeShare};

use serde::Serialize;
use thiserror::Error;

use crate::fft::FftError;
use crate::geometry::GeometryError;
use crate::gpu::GpuError;
use crate::scan::ScanError;

/// Errors of preprocessing; each names the parameter or the input at fault.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PreprocessError {
    /// A binning factor that the data cannot take.
    #[error("binning by {factor}: {reason}")]
    BadBinning { factor: usize, reason: String },
    /// A stripe-removal parameter out of range.
    #[error("stripe removal: {0}")]
    BadStripeParameter(String),
    /// Values that do not fill the stated shape.
    #[error("{got} projection values do not fill the shape {shape:?}")]
    Shape { got: usize, shape: Vec<usize> },
    /// A search that cannot run (empty or unusable ranges, a slab off the detector).
    #[error("axis/tilt search: {0}")]
    BadSearch(String),
    /// The caller's cancel flag stopped the axis search between two of its passes.
    #[error("the rotation-axis search was cancelled")]
    Cancelled,
    #[error(transparent)]
    HostMemory(#[from] crate::memory::HostMemoryError),
    #[error(transparent)]
    Projections(#[from] ScanError),
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Fft(#[from] FftError),
}

/// What was done to the projections before the reconstruction, for the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Preprocessing {
    /// Detector binning factor (1: none).
    pub binning: usize,
    /// Stripe removal with its resolved parameters, if any.
    pub stripe_removal: Option<StripeRemoval>,
    /// How the rotation axis was chosen.
    pub rotation_axis_source: AxisSource,
    /// The rotation axis (serialised in the recorded detector's columns).
    pub rotation_axis: crate::geometry::DetectorColumn,
    /// How `--rotation-axis auto` found it: both estimates, their disagreement and the slab
    /// search's peak half width (`None` unless searched).
    pub axis_search: Option<AxisSearch>,
    /// How many pixels flat/dark normalisation clamped (`None`: the input was line integrals).
    pub clamps: Option<crate::io::ClampCount>,
    /// What loading the input warned of (printed too, unless `--quiet`).
    pub input_warnings: Vec<String>,
    /// The detector's effective pixel size (unbinned): `--pixel-size`, else the input's
    /// metadata; `None`: unknown, and the outputs are in voxel units.
    pub pixel_size: Option<crate::io::PixelSize>,
    /// Where the tilt came from (`--tilt-deg`, a dataset of the file, the geometry file).
    pub tilt_source: Option<String>,
    /// Where the projection angles came from (a dataset of the file, an angle list, the
    /// geometry file).
    pub angles_source: Option<String>,
    /// What projection matching found (`--align`): each projection's shift in the recorded
    /// detector's pixels, and its rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alignment: Option<Alignment>,
}

/// Where the rotation axis of a reconstruction came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AxisSource {
    /// Not given: the detector's centre column (`detw / 2`) or the geometry file's `center`.
    #[default]
    Geometry,
    /// `--rotation-axis X`.
    Given,
    /// `--rotation-axis auto` ([`find_rotation_axis`]).
    Searched,
    /// `--rotation-axis auto --resume`: the axis of the checkpoint resumed from (the one the
    /// interrupted run found), not searched again.
    Checkpoint,
}

/// `--rotation-axis` of the command lines (`lamino reconstruct`'s and the viewer's): a column of
/// the detector as recorded, or `auto` ([`find_rotation_axis`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AxisChoice {
    Column(crate::geometry::DetectorColumn),
    Auto,
}

impl std::str::FromStr for AxisChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "auto" {
            return Ok(Self::Auto);
        }
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() => {
                Ok(Self::Column(crate::geometry::DetectorColumn::recorded(v)))
            }
            _ => Err(format!(
                "{s:?}: expected a detector column (pixels, e.g. 1023.5) or `auto`"
            )),
        }
    }
}

/// How sure an axis search is, in words (what `lamino reconstruct --rotation-axis auto` prints
/// and the viewer shows): the slab score's peak half width and, for CT, the Fourier estimate,
/// how far the two disagree (columns) and which one the axis is, and why ([`AxisDecision`]).
pub fn describe_axis_search(search: &AxisSearch) -> String {
    let peak = match search.peak_half_width {
        Some(w) => format!("the slab score halves {w:.2} columns from its peak"),
        None => "the slab score has no interior peak".into(),
    };
    let fourier = match (search.fourier_axis, search.disagreement) {
        (Some(f), Some(d)) => {
            format!("; Fourier estimate (Vo et al.) {f:.2}, {d:.2} columns apart")
        }
        _ => String::new(),
    };
    format!(
        "confidence: {peak} (slab search {:.2}, {} slices){fourier}; the axis is {}",
        search.slab_axis, search.slab.slices, search.reason
    )
}

#[cfg(test)]
mod tests {
    use super::AxisChoice;
    use crate::geometry::DetectorColumn;

    #[test]
    fn an_axis_choice_is_a_finite_column_or_auto() {
        assert_eq!("auto".parse(), Ok(AxisChoice::Auto));
        assert_eq!(
            "1023.5".parse(),
            Ok(AxisChoice::Column(DetectorColumn::recorded(1023.5)))
        );
        for bad in ["Auto", "nan", "inf", "", "12px"] {
            let e = bad.parse::<AxisChoice>().unwrap_err();
            assert!(e.contains("or `auto`"), "{bad}: {e}");
        }
    }
}
