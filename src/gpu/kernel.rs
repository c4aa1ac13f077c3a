//! Compiled compute kernels: what determines a pipeline ([`KernelSpec`], the key of a context's
//! kernel cache) and the pipeline built from it with the bind group layout its shader declares.
//! Binding buffers to a kernel is `bind.rs`'s.

use super::error::{convert_error, GpuError};
use crate::shaders::{BindingKind, Shader};

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
    pub(super) layout: wgpu::BindGroupLayout,
    pub(super) bindings: &'static [BindingKind],
    pub(super) label: String,
    /// What it was built from.
    pub(super) spec: KernelSpec,
}

impl Kernel {
    /// Compiles `spec` on `device`, through `cache` (compiled pipelines kept across runs) when
    /// the device has one.
    pub(crate) fn build(
        device: &wgpu::Device,
        spec: &KernelSpec,
        cache: Option<&wgpu::PipelineCache>,
    ) -> Result<Self, GpuError> {
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
            cache,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(convert_error(e, &format!("building kernel {label}")));
        }
        Ok(Self {
            pipeline,
            layout,
            bindings,
            label,
            spec: spec.clone(),
        })
    }
}
