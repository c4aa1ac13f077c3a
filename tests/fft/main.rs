//! The GPU FFT, one test binary (one link of the crate instead of three): accuracy against
//! rustfft in f64, plans beyond contiguous batches, plan-time tuning.

#[path = "../common/mod.rs"]
mod common;

mod accuracy;
mod plans;
mod tuning;
