//! The GPU FFT, one test binary (one link of the crate instead of two): accuracy against
//! rustfft in f64 and plans beyond contiguous batches. Plan-time tuning is a binary of its own
//! (tests/fft_tuning.rs): it sets the process's environment, which would tune these plans too.

#[path = "../common/mod.rs"]
mod common;

mod accuracy;
mod plans;
