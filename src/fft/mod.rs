//! Complex-to-complex FFTs on the GPU: mixed radix (2, 3, 4, 5, 7, 8, 11, 13, 16) in workgroup
//! memory, four-step passes for lengths beyond it, Bluestein for lengths with larger prime
//! factors; launches tuned on the device and cached ([`tune`]).
//!
//! Conventions (those of cuFFT and FFTW): [`Direction::Forward`] computes
//! `X[k] = sum_n x[n] e^{-2 pi i nk/N}`, [`Direction::Inverse`] uses `e^{+2 pi i nk/N}`; neither is
//! normalised unless [`Normalization::ByLength`] asks for the factor `1/N`. Data are interleaved
//! complex64 (`[re, im]` as two f32). Arrays are row-major (C order): the last axis is contiguous.
//!
//! Planning happens in two steps: [`recipe`] decides the algorithm, the passes and the register
//! radices from the length alone (pure, unit-tested), and [`FftPlan1d`] / [`FftPlan`] choose each
//! pass's launch (tuned or default) and build the kernels, tables and bind groups once for a given
//! buffer, so that executing a plan only records dispatches. Workspace between passes comes from
//! the context's shared pool ([`GpuContext::shared_scratch`](crate::gpu::GpuContext::shared_scratch)).

mod kernel;
mod layout;
mod plan;
pub mod recipe;
pub mod tune;
mod twiddles;
pub mod two_level;

pub use kernel::{Exchange, Launch};
pub use layout::{BatchDim, Layout};
pub use plan::{
    max_slots, reserve_workspace, workspace_slot_bytes, FftDescriptor, FftPlan, FftPlan1d,
    PassInfo, Specialize, Strategy,
};
pub use recipe::Algorithm;
pub use tune::{tuning_cache_path, LaunchSource, FFT_CACHE_ENV, FFT_TUNE_ENV};

use thiserror::Error;

use crate::gpu::GpuError;

/// Sign of the exponent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `e^{-2 pi i nk/N}` (cuFFT's CUFFT_FORWARD).
    Forward,
    /// `e^{+2 pi i nk/N}` (cuFFT's CUFFT_INVERSE).
    Inverse,
}

impl Direction {
    /// +1 for forward, -1 for inverse: the factor applied to the imaginary part of forward roots.
    pub(crate) fn sign(self) -> f32 {
        match self {
            Self::Forward => 1.0,
            Self::Inverse => -1.0,
        }
    }
}

/// Scaling of the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Normalization {
    /// No scaling (cuFFT, FFTW, rustfft).
    #[default]
    None,
    /// Multiply by `1/N` (N the transform length, or the product of the lengths in N dimensions).
    ByLength,
}

/// Errors of FFT planning and execution.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FftError {
    /// A transform length (or an array axis) of zero.
    #[error("FFT length must be at least 1 (got a zero-length axis)")]
    ZeroLength,
    /// The number of transformed axes is zero or more than the array has.
    #[error("cannot transform the last {axes} axes of a {ndim}-dimensional array")]
    BadAxes { axes: usize, ndim: usize },
    /// A batch with no transforms.
    #[error("FFT batch is empty (a batch dimension has count 0)")]
    EmptyBatch,
    /// The element stride is zero, so transform elements would alias.
    #[error("FFT element stride must be at least 1")]
    ZeroStride,
    /// More batch dimensions than the kernels address.
    #[error("an FFT layout has {got} batch dimensions; at most 3 are supported")]
    TooManyBatchDims { got: usize },
    /// Index arithmetic overflows 64 bits, or a count does not fit the kernels' 32-bit indices.
    #[error("FFT layout arithmetic overflows: {0}")]
    IndexOverflow(String),
    /// The buffer does not hold every element the layout addresses.
    #[error("buffer {label:?} holds {actual} bytes but the FFT layout addresses {needed} bytes")]
    BufferTooSmall {
        label: String,
        needed: u64,
        actual: u64,
    },
    /// One transform spans more than one storage binding can hold.
    #[error(
        "one transform spans {bytes} bytes, more than one storage binding holds ({limit} bytes); \
         transform a smaller length or use a contiguous layout"
    )]
    TransformTooLarge { bytes: u64, limit: u64 },
    /// The GPU failed.
    #[error(transparent)]
    Gpu(#[from] GpuError),
}
