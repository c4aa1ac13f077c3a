//! lamino: X-ray laminography reconstruction on any GPU through wgpu.
//!
//! Layers, bottom up: [`gpu`] (the only module that calls wgpu: device policy, buffers, kernels),
//! [`fft`] (Stockham / Bluestein FFT plans), [`reference`] (f64 CPU references the GPU results are
//! checked against), [`io`] (array files), [`simulate`] (phantoms and their exact projections) and
//! the CLI in `src/main.rs`.

pub mod array;
pub mod bench;
pub mod error;
pub mod fft;
pub mod flatfield;
pub mod gpu;
pub mod hash;
pub mod input;
pub mod io;
pub mod memo;
pub mod memory;
pub mod metrics;
pub mod operator;
pub mod plan;
pub mod plot;
pub mod preprocess;
pub mod recon;
pub mod reference;
pub mod shaders;
pub mod simulate;
pub mod solver;

pub use error::GpuError;
