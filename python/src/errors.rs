//! The exception classes of the module and the one place that decides which class each lamino
//! error becomes: a function per error type of the core crate, each keeping the Rust message.
//!
//! The class says what went wrong in the terms a caller acts on: `GeometryError` (angles, tilt,
//! sizes, rotation axis), `InputError` (arrays and files: dtype, shape, non-finite values,
//! options), `DeviceError` (no adapter, software adapter refused, device lost) and
//! `OutOfMemoryError` (device or host memory, budgets); all derive from `LaminoError`.

use lamino_core::flatfield::FlatfieldError;
use lamino_core::memory::HostMemoryError;
use lamino_core::operator::{GeometryError as CoreGeometryError, OperatorError};
use lamino_core::plan::PlanError;
use lamino_core::preprocess::PreprocessError;
use lamino_core::simulate::SimulateError;
use lamino_core::solver::SolverError;
use lamino_core::{GpuError, IoError, ReconError, ScanError};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    lamino,
    LaminoError,
    PyException,
    "Base class of every error lamino raises."
);
create_exception!(
    lamino,
    GeometryError,
    LaminoError,
    "The scan geometry is invalid (angles, tilt, sizes, rotation axis, volume box)."
);
create_exception!(
    lamino,
    InputError,
    LaminoError,
    "An argument or file cannot be used (dtype, shape, non-finite values, contradictory options)."
);
create_exception!(
    lamino,
    DeviceError,
    LaminoError,
    "No usable GPU (none found, software adapter not allowed, bad selector, device lost)."
);
create_exception!(
    lamino,
    OutOfMemoryError,
    LaminoError,
    "Device or host memory (or a memory budget) is too small for the work."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("LaminoError", py.get_type::<LaminoError>())?;
    m.add("GeometryError", py.get_type::<GeometryError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("DeviceError", py.get_type::<DeviceError>())?;
    m.add("OutOfMemoryError", py.get_type::<OutOfMemoryError>())?;
    Ok(())
}

/// An [`InputError`] about argument `name`.
pub(crate) fn input_error(name: &str, message: impl std::fmt::Display) -> PyErr {
    InputError::new_err(format!("{name}: {message}"))
}

pub(crate) fn gpu_error(e: GpuError) -> PyErr {
    match e {
        GpuError::OutOfMemory { .. }
        | GpuError::OverBudget { .. }
        | GpuError::BufferTooLarge { .. } => OutOfMemoryError::new_err(e.to_string()),
        _ => DeviceError::new_err(e.to_string()),
    }
}

pub(crate) fn geometry_error(e: CoreGeometryError) -> PyErr {
    GeometryError::new_err(e.to_string())
}

pub(crate) fn host_memory_error(e: HostMemoryError) -> PyErr {
    OutOfMemoryError::new_err(e.to_string())
}

pub(crate) fn scan_error(e: ScanError) -> PyErr {
    match e {
        ScanError::Geometry(e) => geometry_error(e),
        e => InputError::new_err(e.to_string()),
    }
}

pub(crate) fn operator_error(e: OperatorError) -> PyErr {
    match e {
        OperatorError::Geometry(e) => geometry_error(e),
        OperatorError::Gpu(e) => gpu_error(e),
        OperatorError::TooLarge { .. } => OutOfMemoryError::new_err(e.to_string()),
        e => LaminoError::new_err(e.to_string()),
    }
}

pub(crate) fn plan_error(e: PlanError) -> PyErr {
    match e {
        PlanError::Operator(e) => operator_error(e),
        e => OutOfMemoryError::new_err(e.to_string()),
    }
}

pub(crate) fn solver_error(e: SolverError) -> PyErr {
    match e {
        SolverError::Operator(e) => operator_error(e),
        SolverError::Gpu(e) => gpu_error(e),
        SolverError::Plan(e) => plan_error(e),
        SolverError::Parameter(e) => InputError::new_err(e.to_string()),
        SolverError::DataShape { .. } => InputError::new_err(e.to_string()),
        e => LaminoError::new_err(e.to_string()),
    }
}

pub(crate) fn recon_error(e: ReconError) -> PyErr {
    match e {
        ReconError::Solver(e) => solver_error(e),
        ReconError::Geometry(e) => geometry_error(e),
        ReconError::Scan(e) => scan_error(e),
        ReconError::Plan(e) => plan_error(e),
        e @ ReconError::MemoBudget { .. } => OutOfMemoryError::new_err(e.to_string()),
        e => LaminoError::new_err(e.to_string()),
    }
}

pub(crate) fn io_error(e: IoError) -> PyErr {
    match e {
        IoError::HostMemory(e) => host_memory_error(e),
        e => InputError::new_err(e.to_string()),
    }
}

pub(crate) fn simulate_error(e: SimulateError) -> PyErr {
    match e {
        SimulateError::Geometry(e) => geometry_error(e),
        SimulateError::HostMemory(e) => host_memory_error(e),
        SimulateError::TooLarge { .. } => OutOfMemoryError::new_err(e.to_string()),
        e => InputError::new_err(e.to_string()),
    }
}

pub(crate) fn preprocess_error(e: PreprocessError) -> PyErr {
    match e {
        PreprocessError::HostMemory(e) => host_memory_error(e),
        PreprocessError::Projections(e) => scan_error(e),
        PreprocessError::Geometry(e) => geometry_error(e),
        PreprocessError::Gpu(e) => gpu_error(e),
        PreprocessError::Fft(e) => LaminoError::new_err(e.to_string()),
        e => InputError::new_err(e.to_string()),
    }
}

pub(crate) fn flatfield_error(e: FlatfieldError) -> PyErr {
    match e {
        FlatfieldError::Io(e) => io_error(e),
        FlatfieldError::Gpu(e) => gpu_error(e),
        e @ FlatfieldError::NonFiniteFit { .. } => LaminoError::new_err(e.to_string()),
        e => InputError::new_err(e.to_string()),
    }
}
