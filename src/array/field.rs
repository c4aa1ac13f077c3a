//! Arrays made of planes, held on the device.

use crate::error::GpuError;
use crate::gpu::{GpuBuffer, GpuContext};

/// The shape of an array as the kernels see it: `planes` planes of `plane_words` f32 words (a
/// complex element is two words, a 3-vector three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneLayout {
    pub planes: usize,
    pub plane_words: usize,
}

impl PlaneLayout {
    /// Words of the whole array.
    pub fn words(&self) -> usize {
        self.planes * self.plane_words
    }

    /// Bytes of the whole array.
    pub fn bytes(&self) -> u64 {
        self.words() as u64 * 4
    }
}

/// One array of a reconstruction, resident on the device.
#[derive(Debug, Clone)]
pub struct Field {
    layout: PlaneLayout,
    buffer: GpuBuffer,
}

impl Field {
    /// A zero-filled array of `layout` on the device.
    pub fn zeros(ctx: &GpuContext, label: &str, layout: PlaneLayout) -> Result<Self, GpuError> {
        Ok(Self {
            layout,
            buffer: ctx.storage_buffer(label, layout.bytes())?,
        })
    }

    /// The array's layout.
    pub fn layout(&self) -> PlaneLayout {
        self.layout
    }

    /// The device buffer holding the array.
    pub fn buffer(&self) -> &GpuBuffer {
        &self.buffer
    }

    /// The label given at creation.
    pub fn label(&self) -> &str {
        self.buffer.label()
    }

    /// Writes `words` (the whole array) from the host.
    pub fn write(&self, ctx: &GpuContext, words: &[f32]) {
        debug_assert_eq!(words.len(), self.layout.words());
        ctx.write(&self.buffer, 0, words);
    }

    /// Reads the whole array back.
    pub fn read(&self, ctx: &GpuContext) -> Result<Vec<f32>, GpuError> {
        ctx.read(&self.buffer, 0, self.layout.words())
    }
}
