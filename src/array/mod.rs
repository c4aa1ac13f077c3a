//! The arrays of a reconstruction and the scalars its kernels share.
//!
//! A [`Field`] is an array made of planes (the z planes of a volume, the projections of the data,
//! the detector rows of the spectrum) that the kernels process a window of whole planes at a time,
//! resident on the device or streamed from the host through [`Staging`] buffers.
//! [`Scalars`] holds the coefficients the kernels read (`constant * scalar`) and the double-word
//! results of reductions, so that a solver records its iterations without waiting for the host.

mod block;
mod field;
mod scalars;

pub use block::BlockView;
pub use field::{Field, PlaneLayout, Residency, StorageError};
pub use scalars::{Coef, Scalars, Slot, SumSlot};

use crate::gpu::GpuError;
use crate::gpu::{GpuBuffer, GpuContext};

/// The device buffers that blocks of host arrays pass through: one per role a kernel binds (four
/// inputs and the output), each `words` f32 words. Every block a kernel reads from a host array
/// is uploaded into its role's buffer at the start of a recording segment of its own, so one set
/// serves every kernel and stage of a solver.
#[derive(Debug)]
pub struct Staging {
    buffers: [GpuBuffer; 5],
    words: usize,
}

/// A kernel's binding roles: inputs x, y, w, v and the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    X = 0,
    Y = 1,
    W = 2,
    V = 3,
    Out = 4,
}

impl Role {
    /// The input roles in binding order.
    pub const INPUTS: [Role; 4] = [Role::X, Role::Y, Role::W, Role::V];
}

impl Staging {
    /// Five buffers of `words` f32 words.
    pub fn new(ctx: &GpuContext, words: usize) -> Result<Self, GpuError> {
        let make = |label| ctx.storage_buffer(label, words.max(1) as u64 * 4);
        Ok(Self {
            buffers: [
                make("staging x")?,
                make("staging y")?,
                make("staging w")?,
                make("staging v")?,
                make("staging out")?,
            ],
            words,
        })
    }

    /// Words per buffer.
    pub fn words(&self) -> usize {
        self.words
    }

    /// The buffer of `role`.
    pub fn buffer(&self, role: Role) -> &GpuBuffer {
        &self.buffers[role as usize]
    }

    /// Device bytes of all five.
    pub fn device_bytes(&self) -> u64 {
        5 * self.words.max(1) as u64 * 4
    }
}
