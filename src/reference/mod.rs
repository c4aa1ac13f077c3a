//! CPU references the GPU results are checked against: rustfft in f64 for exactness tests, the same
//! code in f32 on all cores for benchmark comparisons, direct nonuniform DFT sums in f64 for the
//! laminography operator's stages and the memo layer's pooled keys; filtered backprojection in f64,
//! the reference of plain-CT reconstructions.

mod admm_cpu;
mod fbp;
mod fft;
mod operator_cpu;
mod pool;
mod usfft;

pub use admm_cpu::CpuAdmm;
pub use fbp::{fbp, FbpError};
pub use fft::{fft_last_axes, max_relative_error};
pub use operator_cpu::CpuOperator;
pub use pool::pooled_key;
pub use usfft::{fft2d_adjoint_direct, usfft1d_direct, usfft2d_direct};
