//! Binding buffers to a kernel: the byte ranges to bind ([`BufferSlice`]), the checks of a bind
//! call against the kernel's declared layout and the device's binding limits, and the resulting
//! bind group ([`Bound`]) that a recorder dispatches. Kept apart from `kernel.rs` because a bind
//! call checks the limits of a [`GpuContext`], which holds the kernel cache: kernels sit below the
//! context, binding above it.

use std::sync::Arc;

use super::context::GpuContext;
use super::error::{convert_error, GpuError};
use super::kernel::Kernel;
use super::memory::{Allocation, GpuBuffer};
use crate::shaders::BindingKind;

impl Kernel {
    /// Creates a bind group over `slices`, one per binding in order. Create these once per plan.
    pub fn bind(
        self: &Arc<Self>,
        ctx: &GpuContext,
        slices: &[BufferSlice<'_>],
    ) -> Result<Bound, GpuError> {
        let validation = |message: String| GpuError::Validation {
            context: format!("binding kernel {}", self.label),
            message,
        };
        if slices.len() != self.bindings.len() {
            return Err(validation(format!(
                "{} buffers given for {} bindings",
                slices.len(),
                self.bindings.len()
            )));
        }
        for (i, (s, kind)) in slices.iter().zip(self.bindings).enumerate() {
            if s.offset + s.size > s.buffer.bytes.max(4).div_ceil(4) * 4 {
                return Err(validation(format!(
                    "binding {i} ({}) covers bytes {}..{} of a {}-byte buffer",
                    s.buffer.label,
                    s.offset,
                    s.offset + s.size,
                    s.buffer.bytes
                )));
            }
            if *kind != BindingKind::Uniform {
                if s.size > ctx.device_max_binding_bytes() {
                    return Err(validation(format!(
                        "binding {i} ({}) is {} bytes, above the {}-byte storage binding limit",
                        s.buffer.label,
                        s.size,
                        ctx.device_max_binding_bytes()
                    )));
                }
                if s.offset % ctx.binding_alignment() != 0 {
                    return Err(validation(format!(
                        "binding {i} ({}) starts at byte {}, not a multiple of {}",
                        s.buffer.label,
                        s.offset,
                        ctx.binding_alignment()
                    )));
                }
            }
        }
        let entries: Vec<wgpu::BindGroupEntry> = slices
            .iter()
            .enumerate()
            .map(|(i, s)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &s.buffer.buffer,
                    offset: s.offset,
                    size: std::num::NonZeroU64::new(s.size.max(4).div_ceil(4) * 4),
                }),
            })
            .collect();
        let scope = ctx
            .core
            .device
            .push_error_scope(wgpu::ErrorFilter::Validation);
        let group = ctx
            .core
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(&self.label),
                layout: &self.layout,
                entries: &entries,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(convert_error(e, &format!("binding kernel {}", self.label)));
        }
        Ok(Bound {
            group,
            kernel: self.clone(),
            // The bind group keeps its buffers alive: so do their ledger entries.
            _allocations: slices
                .iter()
                .filter_map(|s| s.buffer.allocation.clone())
                .collect(),
        })
    }
}

/// A byte range of a buffer to bind.
#[derive(Debug, Clone, Copy)]
pub struct BufferSlice<'a> {
    pub buffer: &'a GpuBuffer,
    pub offset: u64,
    pub size: u64,
}

impl<'a> BufferSlice<'a> {
    /// The whole buffer.
    pub fn whole(buffer: &'a GpuBuffer) -> Self {
        Self {
            buffer,
            offset: 0,
            size: buffer.bytes,
        }
    }
}

impl<'a> From<&'a GpuBuffer> for BufferSlice<'a> {
    fn from(buffer: &'a GpuBuffer) -> Self {
        Self::whole(buffer)
    }
}

/// A kernel with its buffers bound, ready to dispatch any number of times. Cloning is cheap (the
/// handles are reference-counted).
#[derive(Debug, Clone)]
pub struct Bound {
    pub(crate) group: wgpu::BindGroup,
    pub(crate) kernel: Arc<Kernel>,
    _allocations: Vec<Arc<Allocation>>,
}
