//! The GPU runtime: the only module that calls wgpu.
//!
//! Everything else in lamino talks to the GPU through [`GpuContext`] (device choice, buffers,
//! readback, error capture), [`Kernel`] (a compiled compute pipeline with its explicit bind group
//! layout, cached per context) and [`Recorder`] (dispatches recorded into one compute pass).

mod context;
mod kernel;
mod recorder;

pub use context::{
    list_adapters, software_opt_in_from_env, AdapterSummary, DeviceBusy, DeviceOptions,
    DeviceSelection, DeviceSet, GpuBuffer, GpuContext, Traffic, SOFTWARE_OPT_IN_ENV,
};
pub use kernel::{BindingKind, Bound, BufferSlice, Kernel, KernelSpec};
pub use recorder::{Completion, Recorder};

/// A context on the best adapter, software allowed: the crate's unit tests opt in, as CI does.
#[cfg(test)]
pub(crate) fn test_context() -> GpuContext {
    GpuContext::new(&DeviceOptions {
        selection: DeviceSelection::Best,
        allow_software: true,
    })
    .expect("GPU tests need an adapter (install mesa-vulkan-drivers)")
}
