//! The arrays of a reconstruction and the scalars its kernels share.
//!
//! A [`Field`] is an array made of planes (the z planes of a volume, the projections of the data,
//! the detector rows of the spectrum) that the kernels process a window of whole planes at a time.
//! [`Scalars`] holds the coefficients the kernels read (`constant * scalar`) and the double-word
//! results of reductions, so that a solver records its iterations without waiting for the host.

mod field;
mod scalars;

pub use field::{Field, PlaneLayout};
pub use scalars::{Coef, Scalars, Slot, SumSlot};
