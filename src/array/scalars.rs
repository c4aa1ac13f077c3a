//! The scalars kernels share: coefficients (`f32`) that kernels multiply their constants with,
//! and the double-word results of reductions. Coefficients come from the host once per outer
//! iteration (the penalty) or from small GPU kernels (the CG step), so a solver records a whole
//! iteration without reading anything back.

use crate::gpu::GpuError;
use crate::gpu::{GpuBuffer, GpuContext};

/// A coefficient slot. Slot 0 always holds 1.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot(pub u32);

/// A reduction-result slot (a double word `hi + lo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SumSlot(pub u32);

impl Slot {
    /// The constant 1.
    pub const ONE: Slot = Slot(0);
}

/// A coefficient as kernels evaluate it: `constant * coefficients[slot]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coef {
    pub constant: f32,
    pub slot: Slot,
}

impl Coef {
    /// A fixed value.
    pub const fn fixed(constant: f32) -> Self {
        Self {
            constant,
            slot: Slot::ONE,
        }
    }

    /// `constant` times the value in `slot`.
    pub const fn times(constant: f32, slot: Slot) -> Self {
        Self { constant, slot }
    }

    /// Zero.
    pub const ZERO: Coef = Coef::fixed(0.0);
    /// One.
    pub const ONE: Coef = Coef::fixed(1.0);

    /// Whether the coefficient is zero whatever its slot holds: the vector kernels then do not
    /// read its term at all.
    pub fn is_zero(&self) -> bool {
        self.constant == 0.0
    }
}

/// The coefficient and reduction-result buffers of one solver.
#[derive(Debug)]
pub struct Scalars {
    coefficients: GpuBuffer,
    sums: GpuBuffer,
    coefficient_slots: usize,
    sum_slots: usize,
}

impl Scalars {
    /// `coefficient_slots` coefficients (slot 0 set to 1.0, the others 0) and `sum_slots` sums.
    pub fn new(
        ctx: &GpuContext,
        coefficient_slots: usize,
        sum_slots: usize,
    ) -> Result<Self, GpuError> {
        // At least one vec4: the vector kernels bind this buffer where an array is not read,
        // and the vec4 module's arrays need one whole element.
        let mut initial = vec![0.0f32; coefficient_slots.max(4)];
        initial[0] = 1.0;
        Ok(Self {
            coefficients: ctx.upload("coefficients", &initial)?,
            sums: ctx.storage_buffer("sums", 8 * sum_slots.max(1) as u64)?,
            coefficient_slots: coefficient_slots.max(1),
            sum_slots: sum_slots.max(1),
        })
    }

    /// The coefficient buffer kernels read.
    pub fn coefficients(&self) -> &GpuBuffer {
        &self.coefficients
    }

    /// The reduction results.
    pub fn sums(&self) -> &GpuBuffer {
        &self.sums
    }

    /// Number of coefficient slots.
    pub fn coefficient_slots(&self) -> usize {
        self.coefficient_slots
    }

    /// Sets coefficient `slot` from the host; lands before the next submission.
    pub fn set(&self, ctx: &GpuContext, slot: Slot, value: f32) {
        debug_assert!((slot.0 as usize) < self.coefficient_slots && slot != Slot::ONE);
        ctx.write(&self.coefficients, slot.0 as u64, &[value]);
    }

    /// Every reduction result (`hi + lo` in f64), in one small readback: waits for the device.
    pub fn read_sums(&self, ctx: &GpuContext) -> Result<Vec<f64>, GpuError> {
        let words: Vec<f32> = ctx.read(&self.sums, 0, 2 * self.sum_slots)?;
        Ok(words
            .chunks_exact(2)
            .map(|d| d[0] as f64 + d[1] as f64)
            .collect())
    }

    /// Every coefficient, in one small readback: waits for the device.
    pub fn read_coefficients(&self, ctx: &GpuContext) -> Result<Vec<f32>, GpuError> {
        ctx.read(&self.coefficients, 0, self.coefficient_slots)
    }
}
