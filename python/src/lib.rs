//! The Python module `lamino`: numpy in, numpy out, over the same library the command line uses
//! (no second implementation). Each file registers its own functions and classes.

// The skeleton: the helpers below are used by the calls of the next commits.
#![allow(dead_code)]

mod arrays;
mod basic;
mod device;
mod errors;
mod operator;
mod preprocess;

use pyo3::prelude::*;

#[pymodule]
fn lamino(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    device::register(m)?;
    operator::register(m)?;
    preprocess::register(m)?;
    basic::register(m)?;
    Ok(())
}
