//! `lamino.devices()` and the `device=` / `allow_software_gpu=` arguments of every GPU call, with
//! the command line's policy: `"best"` takes the best hardware GPU; a software adapter (lavapipe)
//! runs only when the caller opts in, by the argument or `LAMINO_ALLOW_SOFTWARE_GPU=1`.

use lamino_core::gpu::list_adapters;
use lamino_core::{DeviceOptions, DeviceSelection, GpuContext};
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{gpu_error, input_error};

/// Every adapter wgpu finds, in the order `device=` indexes them (`lamino devices`' order).
#[pyfunction]
fn devices(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let adapters = py.detach(list_adapters);
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

/// `device=`: `"best"` or an adapter index (an int, or its digits as a string).
#[derive(FromPyObject)]
pub(crate) enum DeviceArg {
    Index(usize),
    Name(String),
}

impl From<&str> for DeviceArg {
    fn from(name: &str) -> Self {
        Self::Name(name.to_string())
    }
}

/// The device options of `device` and `allow_software_gpu` (`None`: as
/// `LAMINO_ALLOW_SOFTWARE_GPU` says; `True`/`False`: that, whatever the environment says).
pub(crate) fn device_options(
    device: DeviceArg,
    allow_software_gpu: Option<bool>,
) -> PyResult<DeviceOptions> {
    let selection = match device {
        DeviceArg::Index(index) => DeviceSelection::Index(index),
        DeviceArg::Name(text) => text.parse::<DeviceSelection>().map_err(|_| {
            input_error(
                "device",
                format!("{text:?}: expected \"best\" or an adapter index from lamino.devices()"),
            )
        })?,
    };
    Ok(match allow_software_gpu {
        None => DeviceOptions::new(selection, false),
        Some(allow_software) => DeviceOptions {
            selection,
            allow_software,
        },
    })
}

/// Devices opened by earlier calls and idle now, with the options they were opened for. Opening
/// a device and compiling its kernels takes seconds (tens on a software adapter); a notebook
/// calls again and again, so a call leases an idle device of its options, or opens one when
/// none is idle (two threads at once get two devices).
static IDLE: Mutex<Vec<(DeviceOptions, GpuContext)>> = Mutex::new(Vec::new());

/// A device one call holds: back to [`IDLE`] by [`Lease::give_back`] once the call has ended
/// well (or was interrupted between iterations); dropped with it after an error, which may have
/// left the device unusable.
pub(crate) struct Lease {
    options: DeviceOptions,
    ctx: GpuContext,
}

impl Lease {
    /// An idle device of `options`, or a new one (call without the GIL: opening takes a while).
    pub(crate) fn take(options: &DeviceOptions) -> PyResult<Self> {
        let idle = {
            let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
            let found = idle.iter().position(|(o, _)| o == options);
            found.map(|i| idle.swap_remove(i).1)
        };
        let ctx = match idle {
            Some(ctx) => ctx,
            None => GpuContext::new(options).map_err(gpu_error)?,
        };
        Ok(Self {
            options: *options,
            ctx,
        })
    }

    pub(crate) fn ctx(&self) -> &GpuContext {
        &self.ctx
    }

    /// Returns the device to the idle ones, without the buffers the run left pooled in it.
    pub(crate) fn give_back(self) {
        self.ctx.release_idle_pools();
        let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        idle.push((self.options, self.ctx));
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(devices, m)?)
}
