//! The Python module `lamino`: numpy in, numpy out, over the same library the command line uses
//! (no second implementation). Each file registers its own functions and classes.

mod arrays;
mod basic;
mod device;
mod errors;
mod operator;
mod preprocess;
mod progress;
mod reconstruct;
mod simulate;

use pyo3::prelude::*;

#[pymodule]
fn lamino(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    device::register(m)?;
    reconstruct::register(m)?;
    simulate::register(m)?;
    operator::register(m)?;
    preprocess::register(m)?;
    basic::register(m)?;
    Ok(())
}
