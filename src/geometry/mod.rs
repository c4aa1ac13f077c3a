//! The scan's geometry in its units, below every module that reads, writes or uses it (files,
//! the operator, the front ends): [`Geometry`] (sizes, angles, tilt, rotation axis, the volume's
//! offset, the gridding accuracy), [`DetectorColumn`] (a column in the recorded detector's frame,
//! converted to and from binned ones), [`VolumeBox`] and the detector rows and columns a volume
//! reaches, and [`Tilt`], the rotation axis's tilt, which users give in degrees from plain
//! tomography and the operator takes as an angle in radians.

mod accuracy;
mod acquisition;
mod column;
mod region;
mod tilt;

pub(crate) use accuracy::gridding_minimum;
pub use accuracy::{kernel_half_width, DEFAULT_EPS, MIN_EPS};
pub(crate) use acquisition::is_zero_offset;
pub use acquisition::Geometry;
pub use column::DetectorColumn;
pub use region::VolumeBox;
pub use tilt::Tilt;

use std::ops::Range;

use thiserror::Error;

/// Errors of geometry validation and geometry files.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GeometryError {
    /// A size is odd or zero; the centred transforms need even sizes.
    #[error("{name} = {value}: every volume and detector size must be even and at least 2")]
    BadSize { name: &'static str, value: usize },
    /// No projection angles.
    #[error("the geometry has no projection angles")]
    NoAngles,
    /// An angle is NaN or infinite.
    #[error("projection angle {index} is {value}: angles must be finite (radians)")]
    NonFiniteAngle { index: usize, value: f64 },
    /// The tilt is outside (0, pi).
    #[error("phi = {phi} rad: must lie strictly between 0 and pi (pi/2 is plain tomography)")]
    PhiOutOfRange { phi: f64 },
    /// The gridding accuracy is outside the supported range.
    #[error("eps = {eps}: the gridding accuracy must lie in [{MIN_EPS}, 0.1]")]
    BadEps { eps: f64 },
    /// A size product overflows.
    #[error("the geometry's array sizes overflow 64 bits")]
    Overflow,
    /// The rotation axis does not project onto the detector.
    #[error(
        "rotation axis at column {center}: must be finite and within the detector [0, {detw}]"
    )]
    BadCenter { center: f64, detw: usize },
    /// The volume's offset is not finite.
    #[error("volume offset (z, y, x) = {offset:?} voxels: every component must be finite")]
    BadOffset { offset: [f64; 3] },
    /// A sub-volume box does not fit the default volume or the kernels.
    #[error("sub-volume {axis} {start}:{end}: {reason}{}", nearest.as_ref().map_or(String::new(),
        |r| format!("; the nearest valid range is {}:{}", r.start, r.end)))]
    BadBox {
        axis: &'static str,
        start: usize,
        end: usize,
        reason: String,
        /// The valid range nearest to the box's, where there is one (for callers that give
        /// ranges in other units, as the command line's unbinned voxels).
        nearest: Option<Range<usize>>,
    },
    /// The projections' shifts are not one per angle.
    #[error("{shifts} projection shifts for {angles} angles: give one (du, dv) per projection")]
    ShiftCount { shifts: usize, angles: usize },
    /// A projection's shift is NaN or infinite.
    #[error("projection {index}'s shift (du, dv) = ({du}, {dv}) pixels: shifts must be finite")]
    NonFiniteShift { index: usize, du: f64, dv: f64 },
    /// The JSON file could not be read or written.
    #[error("geometry file {path}: {reason}")]
    File { path: String, reason: String },
}

#[cfg(test)]
mod tests;
