//! lamino: X-ray laminography reconstruction on any GPU through wgpu.
//!
//! Layers, bottom up: [`gpu`] (the only module that calls wgpu: device policy, buffers, kernels),
//! [`fft`] (Stockham / Bluestein FFT plans), [`reference`] (f64 CPU references the GPU results are
//! checked against), [`io`] (array files) and the CLI in `src/main.rs`.

pub mod bench;
pub mod error;
pub mod fft;
pub mod flatfield;
pub mod gpu;
pub mod io;
pub mod reference;
pub mod shaders;

pub use error::GpuError;
