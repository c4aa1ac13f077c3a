//! Typed errors of the GPU runtime. Every variant carries the facts a user needs (sizes, limits,
//! adapter names) so that a message can say what went wrong without a debugger; wgpu's own errors
//! become one of them here.

use thiserror::Error;

/// How to list devices and how to opt in to a software adapter; repeated in every message that
/// refuses to run, so a user never has to look it up.
pub const DEVICE_HELP: &str = "run `lamino devices` to list the adapters; to run on a software \
adapter anyway (tests, CI, batch jobs) pass --allow-software-gpu or set LAMINO_ALLOW_SOFTWARE_GPU=1";

/// Errors raised while choosing, creating or using a GPU device.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GpuError {
    /// No adapter at all was found (no driver installed, or every backend failed).
    #[error("no GPU adapter was found on this machine; {DEVICE_HELP}")]
    NoAdapter,
    /// Only software adapters exist and the caller did not opt in to them.
    #[error("no hardware GPU was found (found: {found}); {DEVICE_HELP}")]
    NoHardwareGpu {
        /// The adapters that were found, one "index: name (backend, type)" each.
        found: String,
    },
    /// The requested adapter index does not exist.
    #[error("there is no adapter with index {index} ({count} found); {DEVICE_HELP}")]
    NoSuchAdapter { index: usize, count: usize },
    /// The requested adapter is a software rasteriser and the caller did not opt in.
    #[error("adapter {index} ({name}) is a software adapter; {DEVICE_HELP}")]
    SoftwareAdapterRefused { index: usize, name: String },
    /// A device selector string could not be parsed.
    #[error("invalid device selector {0:?}: expected an adapter index (0, 1, ...), \"best\", a list of indices (\"0,2\") or \"all\"")]
    BadSelector(String),
    /// A backend name other than vulkan, gl, metal or dx12.
    #[error("backend {0:?}: expected vulkan, gl, metal or dx12")]
    BadBackend(String),
    /// A limits setting other than `adapter` or `portable`.
    #[error("{setting}={value:?}: expected \"adapter\" (the adapter's own limits, the default) or \"portable\" (WebGPU's default limits)")]
    BadLimits {
        setting: &'static str,
        value: String,
    },
    /// The driver refused to create a device on the chosen adapter.
    #[error("could not create a device on adapter {adapter}: {reason}")]
    DeviceCreation { adapter: String, reason: String },
    /// A buffer larger than the device allows was requested.
    #[error("buffer {label:?} needs {bytes} bytes but the device allows at most {limit} bytes per buffer")]
    BufferTooLarge {
        label: String,
        bytes: u64,
        limit: u64,
    },
    /// An allocation would take lamino's device memory past the budget it was given.
    #[error("buffer {label:?} needs {bytes} bytes, but {held} of the {budget}-byte device budget are already held")]
    OverBudget {
        label: String,
        bytes: u64,
        held: u64,
        budget: u64,
    },
    /// The device ran out of memory.
    #[error("the GPU ran out of memory while {context}")]
    OutOfMemory { context: String },
    /// wgpu reported a validation error (a bug in lamino: please report it).
    #[error("GPU validation error while {context}: {message}")]
    Validation { context: String, message: String },
    /// The device was lost (driver reset, GPU removed, timeout).
    #[error("the GPU device was lost: {0}")]
    DeviceLost(String),
    /// A readback could not be mapped.
    #[error("reading results back from the GPU failed: {0}")]
    Readback(String),
    /// A kernel needs more of a device resource than the device offers.
    #[error("kernel {kernel} needs {what} = {requested}, but this device allows at most {limit}")]
    KernelLimit {
        kernel: String,
        what: &'static str,
        requested: u64,
        limit: u64,
    },
    /// Slices of a volume that cannot be drawn as asked ([`crate::gpu::SlicePass`]): a slice
    /// outside the volume, an empty grey window, a texture of another size or format.
    #[error("cannot draw the slices of the volume: {0}")]
    Slices(String),
    /// Another device of a multi-device run failed, so this one stopped too.
    #[error("device {member} of the run stopped ({cause}), so every device stopped")]
    TeamStopped { member: usize, cause: String },
}

/// The typed form of an error wgpu reported while `context` was being done.
pub(crate) fn convert_error(e: wgpu::Error, context: &str) -> GpuError {
    match e {
        wgpu::Error::OutOfMemory { .. } => GpuError::OutOfMemory {
            context: context.to_string(),
        },
        other => GpuError::Validation {
            context: context.to_string(),
            message: other.to_string(),
        },
    }
}
