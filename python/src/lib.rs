//! The extension module `lamino._lamino`: numpy in, numpy out, over the same library the command
//! line uses (no second implementation). Each file registers its own functions and classes; the
//! package `lamino` (python/lamino/__init__.py) re-exports them.

mod arrays;
mod basic;
mod device;
mod errors;
mod operator;
mod preprocess;
mod progress;
mod reconstruct;
mod simulate;

use lamino_core::geometry::DEFAULT_EPS;
use lamino_core::gpu::DeviceSet;
use pyo3::prelude::*;

#[pymodule(name = "_lamino")]
fn lamino(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    device::register(m)?;
    reconstruct::register(m)?;
    simulate::register(m)?;
    operator::register(m)?;
    preprocess::register(m)?;
    basic::register(m)?;
    // The defaults the signatures compute in Rust, which PyO3's text signatures show as `...`:
    // the package (lamino/__init__.py) writes them into the signatures `help()` shows. Not in
    // `__all__` (`setattr`, not `add`): the package's own helper.
    let defaults = reconstruct::defaults(m.py())?;
    defaults.set_item("device", DeviceSet::default().to_string())?;
    defaults.set_item("eps", DEFAULT_EPS)?;
    m.setattr("_ARGUMENT_DEFAULTS", defaults)?;
    Ok(())
}
