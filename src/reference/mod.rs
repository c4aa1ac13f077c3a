//! CPU references the GPU results are checked against: rustfft in f64 for exactness tests, the same
//! code in f32 on all cores for benchmark comparisons, and a seeded random source.

mod fft;
mod rng;

pub use fft::{fft_last_axes, max_relative_error};
pub use rng::SplitMix64;
