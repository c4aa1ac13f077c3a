//! The scan's geometry in its units, below every module that reads, writes or uses it (files,
//! the operator, the front ends): [`Tilt`], the rotation axis's tilt, which users give in
//! degrees from plain tomography and the operator takes as an angle in radians.

mod tilt;

pub use tilt::Tilt;
