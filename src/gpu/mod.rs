//! The GPU runtime: the only module that calls wgpu.
//!
//! Everything else in lamino talks to the GPU through [`GpuContext`] (device choice, buffers,
//! readback, error capture), [`Kernel`] (a compiled compute pipeline with its explicit bind group
//! layout, cached per context) and [`Recorder`] (dispatches recorded into one compute pass).
//!
//! The files are layers, each importing only from those below it (and the binding vocabulary
//! from [`crate::shaders`]):
//! - `error`: [`GpuError`] and the conversion of wgpu's errors;
//! - `adapter`: adapter discovery and the device policy (hardware first, software on request);
//! - `traffic`, `memory`: the traffic counters and timeline figures; buffers and the memory ledger;
//! - `device`: a device and queue with its limits, allocation, counters and error capture;
//! - `readback`: the readback pool of downloads and the blocking read;
//! - `kernel`: compiled pipelines;
//! - `context`: [`GpuContext`], which owns all of the above for one device;
//! - `bind`: kernels bound to buffer ranges;
//! - `recorder`: recording and submitting work on a context;
//! - `slices`: the three orthogonal slices of a volume into an application's textures.

mod adapter;
mod bind;
mod context;
mod device;
mod error;
mod kernel;
mod memory;
mod pipeline_cache;
mod readback;
mod recorder;
mod slices;
mod traffic;

/// The binding vocabulary belongs to the shader catalogue; re-exported here because a
/// [`Kernel`]'s layout is made of it.
pub use crate::shaders::BindingKind;
#[cfg(unix)]
pub use adapter::provide_runtime_dir;
pub use adapter::{
    list_adapters, software_opt_in_from_env, AdapterSummary, Backend, DeviceLimits, DeviceOptions,
    DeviceSelection, DeviceSet, LIMITS_ENV, SOFTWARE_OPT_IN_ENV,
};
pub use bind::{Bound, BufferSlice};
pub use context::GpuContext;
pub use error::{GpuError, DEVICE_HELP};
pub use kernel::{Kernel, KernelSpec};
pub use memory::GpuBuffer;
pub use pipeline_cache::{lamino_cache_dir, pipeline_cache_path, PIPELINE_CACHE_ENV};
pub(crate) use readback::read_staging_bytes;
pub use readback::Completion;
pub use recorder::Recorder;
pub use slices::{
    host_slice_words, DeviceVolume, PendingValues, SliceAxis, SliceLayout, SliceMode, SlicePass,
    VolumeLayout,
};
pub use traffic::{DeviceBusy, Traffic};

/// A context on the best adapter, software allowed: the crate's unit tests opt in, as CI does.
#[cfg(test)]
pub(crate) fn test_context() -> GpuContext {
    GpuContext::new(&DeviceOptions {
        selection: DeviceSelection::Best,
        allow_software: true,
        limits: None,
        backend: None,
    })
    .expect("GPU tests need an adapter (install mesa-vulkan-drivers)")
}
