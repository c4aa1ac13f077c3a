//! Compiled compute kernels, their bindings, and recording of dispatches.

use std::sync::Arc;

use super::context::{convert_error, GpuBuffer, GpuContext};
use crate::error::GpuError;
use crate::shaders::Shader;

/// What a binding of a kernel is. Layouts are explicit (never derived from the shader) so that
/// one layout serves every bind group of a kernel and mismatches are caught on the Rust side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindingKind {
    /// `var<storage, read>`
    StorageRead,
    /// `var<storage, read_write>`
    StorageReadWrite,
    /// `var<uniform>`
    Uniform,
}

/// Everything that determines a compiled pipeline: shader, entry point, bindings, overrides.
#[derive(Debug, Clone)]
pub struct KernelSpec {
    pub shader: &'static Shader,
    pub entry: &'static str,
    /// WGSL `override` constants (workgroup size, workgroup array lengths).
    pub overrides: Vec<(&'static str, f64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct KernelKey {
    shader: &'static str,
    entry: &'static str,
    overrides: Vec<(&'static str, u64)>,
}

impl KernelSpec {
    pub(crate) fn key(&self) -> KernelKey {
        KernelKey {
            shader: self.shader.name,
            entry: self.entry,
            overrides: self
                .overrides
                .iter()
                .map(|(n, v)| (*n, v.to_bits()))
                .collect(),
        }
    }
    fn label(&self) -> String {
        format!("{}::{}", self.shader.name, self.entry)
    }
}

/// A compute pipeline and the bind group layout it was built with.
#[derive(Debug)]
pub struct Kernel {
    pub(crate) pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
    bindings: &'static [BindingKind],
    label: String,
}

impl Kernel {
    pub(crate) fn build(ctx: &GpuContext, spec: &KernelSpec) -> Result<Self, GpuError> {
        let label = spec.label();
        // The layout is the shader's declaration, which tests/shaders_validate.rs checks against
        // the WGSL: there is no second list at the call site to disagree with it.
        let bindings = spec.shader.layout;
        let entries: Vec<wgpu::BindGroupLayoutEntry> = bindings
            .iter()
            .enumerate()
            .map(|(i, kind)| wgpu::BindGroupLayoutEntry {
                binding: i as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: match kind {
                        BindingKind::StorageRead => {
                            wgpu::BufferBindingType::Storage { read_only: true }
                        }
                        BindingKind::StorageReadWrite => {
                            wgpu::BufferBindingType::Storage { read_only: false }
                        }
                        BindingKind::Uniform => wgpu::BufferBindingType::Uniform,
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let device = &ctx.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let source = spec.shader.source();
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(spec.shader.name),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(&label),
            entries: &entries,
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(&label),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&label),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(spec.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &spec.overrides,
                ..Default::default()
            },
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(convert_error(e, &format!("building kernel {label}")));
        }
        Ok(Self {
            pipeline,
            layout,
            bindings,
            label,
        })
    }

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
                if s.size > ctx.max_binding_bytes() {
                    return Err(validation(format!(
                        "binding {i} ({}) is {} bytes, above the {}-byte storage binding limit",
                        s.buffer.label,
                        s.size,
                        ctx.max_binding_bytes()
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
        let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
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
    _allocations: Vec<Arc<super::context::Allocation>>,
}
