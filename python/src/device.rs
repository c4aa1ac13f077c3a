//! `lamino.devices()` and the `device=` / `allow_software_gpu=` arguments of every GPU call, with
//! the command line's policy: `"best"` takes the best hardware GPU; a software adapter (lavapipe)
//! runs only when the caller opts in, by the argument or `LAMINO_ALLOW_SOFTWARE_GPU=1`.

use lamino_core::gpu::list_adapters;
use lamino_core::{DeviceOptions, DeviceSelection, GpuContext};
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

/// The device options of `device` (`"best"`, an adapter index as int or string) and
/// `allow_software_gpu` (`None`: as `LAMINO_ALLOW_SOFTWARE_GPU` says; `True`/`False`: that,
/// whatever the environment says).
pub(crate) fn device_options(
    device: &Bound<'_, PyAny>,
    allow_software_gpu: Option<bool>,
) -> PyResult<DeviceOptions> {
    let selection = if let Ok(index) = device.extract::<usize>() {
        DeviceSelection::Index(index)
    } else if let Ok(text) = device.extract::<String>() {
        text.parse::<DeviceSelection>().map_err(|_| {
            input_error(
                "device",
                format!("{text:?}: expected \"best\" or an adapter index from lamino.devices()"),
            )
        })?
    } else {
        return Err(input_error(
            "device",
            format!(
                "{}: expected \"best\" or an adapter index from lamino.devices()",
                device.repr()?
            ),
        ));
    };
    Ok(match allow_software_gpu {
        None => DeviceOptions::new(selection, false),
        Some(allow_software) => DeviceOptions {
            selection,
            allow_software,
        },
    })
}

/// A device by `options` (call without the GIL: creating one takes a while).
pub(crate) fn open(options: &DeviceOptions) -> PyResult<GpuContext> {
    GpuContext::new(options).map_err(gpu_error)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(devices, m)?)
}
