//! `lamino.devices()` and the `device=` / `allow_software_gpu=` / `backend=` / `limits=`
//! arguments of every GPU call, with the command line's policy: `"best"` takes the best hardware
//! GPU; a software adapter (lavapipe) runs only when the caller opts in, by the argument or
//! `LAMINO_ALLOW_SOFTWARE_GPU=1`; `backend=` and `limits=` are the command line's `--backend` and
//! `--limits` (unset: as `WGPU_BACKEND` and `LAMINO_LIMITS` say).

use lamino_core::gpu::{list_adapters, software_opt_in_from_env, Backend, DeviceLimits, DeviceSet};
use lamino_core::{DeviceSelection, GpuContext};
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{gpu_error, input_error};

/// Every adapter wgpu finds (of ``backend`` only, when given: ``"vulkan"``, ``"gl"``,
/// ``"metal"`` or ``"dx12"``), in the order ``device=`` indexes them with the same ``backend=``
/// (``lamino [--backend B] devices``' order).
#[pyfunction]
#[pyo3(signature = (*, backend=None))]
fn devices<'py>(py: Python<'py>, backend: Option<&str>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let backend = backend_arg(backend)?;
    let adapters = py.detach(|| list_adapters(backend));
    adapters
        .into_iter()
        .map(|a| {
            let d = PyDict::new(py);
            d.set_item("index", a.index)?;
            d.set_item("name", a.name)?;
            d.set_item("backend", a.backend)?;
            d.set_item("type", a.device_type)?;
            d.set_item("software", a.software)?;
            d.set_item("driver", a.driver)?;
            d.set_item("max_buffer_bytes", a.max_buffer_bytes)?;
            Ok(d)
        })
        .collect()
}

/// `device=`: `"best"`, an adapter index (an int, or its digits as a string), several adapters
/// (a list of indices, or the command line's `"0,2"`; an index twice opens its adapter twice),
/// or `"all"` (every hardware GPU), as the command line's `--device` takes them.
#[derive(FromPyObject)]
pub(crate) enum DeviceArg {
    Index(usize),
    Name(String),
    List(Vec<usize>),
}

/// `"best"`: the command line's default `--device`.
impl Default for DeviceArg {
    fn default() -> Self {
        Self::Name(DeviceSet::default().to_string())
    }
}

/// `backend=`: a graphics API by the command line's `--backend` names; `None` leaves the choice
/// to `WGPU_BACKEND` (every backend built in when it is unset).
fn backend_arg(backend: Option<&str>) -> PyResult<Option<Backend>> {
    backend
        .map(|name| {
            name.parse::<Backend>().map_err(|_| {
                input_error(
                    "backend",
                    format!("{name:?}: expected \"vulkan\", \"gl\", \"metal\" or \"dx12\""),
                )
            })
        })
        .transpose()
}

/// What a GPU call's device arguments say: `device=`, `allow_software_gpu=`, `backend=` and
/// `limits=` as given.
pub(crate) struct DeviceArgs<'a> {
    pub(crate) device: DeviceArg,
    pub(crate) allow_software_gpu: Option<bool>,
    pub(crate) backend: Option<&'a str>,
    pub(crate) limits: Option<&'a str>,
}

/// The devices a call runs on: the adapters `device=` names (among `backend=`'s), whether a
/// software adapter may be one of them (`allow_software_gpu=`, or `LAMINO_ALLOW_SOFTWARE_GPU`
/// when it is `None`) and the limits they are opened with (`limits=`, or `LAMINO_LIMITS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Devices {
    set: DeviceSet,
    allow_software: bool,
    backend: Option<Backend>,
    limits: Option<DeviceLimits>,
}

impl Devices {
    /// The devices of `args` (`allow_software_gpu` `None`: as `LAMINO_ALLOW_SOFTWARE_GPU` says;
    /// `True`/`False`: that, whatever the environment says), for a call that runs on every
    /// device named (`reconstruct`).
    pub(crate) fn several(args: DeviceArgs<'_>) -> PyResult<Self> {
        let DeviceArgs {
            device,
            allow_software_gpu,
            backend,
            limits,
        } = args;
        let backend = backend_arg(backend)?;
        let limits = limits
            .map(|name| {
                name.parse::<DeviceLimits>().map_err(|()| {
                    input_error(
                        "limits",
                        format!("{name:?}: expected \"adapter\" or \"portable\""),
                    )
                })
            })
            .transpose()?;
        let set = match device {
            DeviceArg::Index(index) => DeviceSet::One(DeviceSelection::Index(index)),
            DeviceArg::Name(text) => text.parse::<DeviceSet>().map_err(|_| {
                input_error(
                    "device",
                    format!(
                        "{text:?}: expected \"best\", \"all\", an adapter index from \
                         lamino.devices() or a list of them"
                    ),
                )
            })?,
            DeviceArg::List(indices) if indices.is_empty() => {
                return Err(input_error("device", "[]: name at least one adapter"))
            }
            DeviceArg::List(indices) => DeviceSet::List(indices),
        };
        Ok(Self {
            set,
            allow_software: allow_software_gpu.unwrap_or_else(software_opt_in_from_env),
            backend,
            limits,
        })
    }

    /// As [`several`](Self::several), for a call that runs on one device: several are refused,
    /// as the command line refuses them for its one-device commands.
    pub(crate) fn one(args: DeviceArgs<'_>) -> PyResult<Self> {
        let devices = Self::several(args)?;
        if devices.set.is_several() {
            return Err(input_error(
                "device",
                format!(
                    "{}: this call runs on one device; several devices apply to \
                     lamino.reconstruct",
                    devices.set
                ),
            ));
        }
        Ok(devices)
    }
}

/// Devices opened by earlier calls and idle now, with the `device=` they were opened for.
/// Opening a device and compiling its kernels takes seconds (tens on a software adapter); a
/// notebook calls again and again, so a call leases idle devices of its arguments, or opens them
/// when none are idle (two threads at once get devices of their own).
static IDLE: Mutex<Vec<(Devices, Vec<GpuContext>)>> = Mutex::new(Vec::new());

/// The devices one call holds: back to [`IDLE`] by [`Lease::give_back`] once the call has ended
/// well (or was interrupted between iterations); dropped with it after an error, which may have
/// left a device unusable.
pub(crate) struct Lease {
    devices: Devices,
    contexts: Vec<GpuContext>,
}

impl Lease {
    /// Idle devices of `devices`, or new ones (call without the GIL: opening takes a while).
    pub(crate) fn take(devices: &Devices) -> PyResult<Self> {
        let idle = {
            let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
            let found = idle.iter().position(|(d, _)| d == devices);
            found.map(|i| idle.swap_remove(i).1)
        };
        let contexts = match idle {
            Some(contexts) => contexts,
            None => devices
                .set
                .open_with_policy(devices.allow_software, devices.limits, devices.backend)
                .map_err(gpu_error)?,
        };
        Ok(Self {
            devices: devices.clone(),
            contexts,
        })
    }

    /// The device of a call that runs on one ([`Devices::one`]).
    pub(crate) fn ctx(&self) -> &GpuContext {
        &self.contexts[0]
    }

    /// Every device leased, in the order `device=` names them.
    pub(crate) fn contexts(&self) -> &[GpuContext] {
        &self.contexts
    }

    /// Returns the devices to the idle ones, without the buffers the run left pooled in them.
    pub(crate) fn give_back(self) {
        for ctx in &self.contexts {
            ctx.release_idle_pools();
            // Idle devices live as long as the interpreter and are never dropped: the
            // pipelines this call compiled are kept for the next process now.
            ctx.keep_compiled_pipelines();
        }
        let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        idle.push((self.devices, self.contexts));
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(devices, m)?)
}
