//! The exception classes of the module and the one place that decides which class each lamino
//! error becomes: a function per error type of the core crate, each keeping the Rust message.
//!
//! The class says what went wrong in the terms a caller acts on: `GeometryError` (angles, tilt,
//! sizes, rotation axis), `InputError` (arrays and files: dtype, shape, non-finite values,
//! options), `DeviceError` (no adapter, software adapter refused, device lost) and
//! `OutOfMemoryError` (device or host memory, budgets); all derive from `LaminoError`.

use lamino_core::flatfield::FlatfieldError;
use lamino_core::geometry::GeometryError as CoreGeometryError;
use lamino_core::memory::HostMemoryError;
use lamino_core::operator::OperatorError;
use lamino_core::plan::PlanError;
use lamino_core::preprocess::PreprocessError;
use lamino_core::recon::{JobError, PrepareError};
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

/// Advice of the library's messages (written for the command line) in Python's terms, whole
/// phrases first: what has no Python argument is said another way.
const PYTHON_PHRASES: [(&str, &str); 6] = [
    ("run `lamino devices`", "call lamino.devices()"),
    ("--theta-units deg|rad", "theta_units=\"deg\" or \"rad\""),
    ("drop --memo", "pass memo=\"off\""),
    (
        "give a scratch directory (--scratch DIR) or raise --max-host-memory",
        "free host memory, bin the scan (binning=) or reconstruct a smaller volume (volume_shape=)",
    ),
    (
        "lower --memo-host-mib or raise --max-host-memory",
        "pass memo=\"off\"",
    ),
    (
        "lower --memo-device-mib or raise --max-device-memory",
        "pass memo=\"off\"",
    ),
];

/// The command line's options that are Python arguments: `--option N` becomes `argument=N`,
/// `--option` alone `argument` (a switch, the value that turns it on).
const PYTHON_ARGUMENTS: [(&str, &str); 8] = [
    ("--allow-software-gpu", "allow_software_gpu=True"),
    ("--theta-units", "theta_units"),
    ("--slab-slices", "slab_slices"),
    ("--slab-z", "slab_z"),
    ("--tilt-deg", "tilt"),
    ("--max-iterations", "max_iterations"),
    ("--size", "size"),
    ("--angles", "angles"),
];

/// A library message in Python's terms: its advice names Python's arguments, not the command
/// line's options.
fn in_python_terms(message: impl std::fmt::Display) -> String {
    let mut text = message.to_string();
    for (cli, python) in PYTHON_PHRASES {
        text = text.replace(cli, python);
    }
    for (option, argument) in PYTHON_ARGUMENTS {
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find(option) {
            let after = &rest[at + option.len()..];
            // A longer option that starts the same (`--size` in `--sizes`) is not this one.
            if after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-') {
                out.push_str(&rest[..at + option.len()]);
                rest = after;
                continue;
            }
            out.push_str(&rest[..at]);
            out.push_str(argument);
            rest = match after.strip_prefix(' ') {
                Some(value) if value.starts_with(|c: char| c.is_ascii_digit()) => {
                    out.push('=');
                    value
                }
                _ => after,
            };
        }
        out.push_str(rest);
        text = out;
    }
    text
}

/// An [`InputError`] about argument `name`.
pub(crate) fn input_error(name: &str, message: impl std::fmt::Display) -> PyErr {
    InputError::new_err(in_python_terms(format!("{name}: {message}")))
}

pub(crate) fn gpu_error(e: GpuError) -> PyErr {
    match e {
        GpuError::OutOfMemory { .. }
        | GpuError::OverBudget { .. }
        | GpuError::BufferTooLarge { .. } => OutOfMemoryError::new_err(in_python_terms(e)),
        _ => DeviceError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn geometry_error(e: CoreGeometryError) -> PyErr {
    GeometryError::new_err(in_python_terms(e))
}

pub(crate) fn host_memory_error(e: HostMemoryError) -> PyErr {
    OutOfMemoryError::new_err(in_python_terms(e))
}

pub(crate) fn scan_error(e: ScanError) -> PyErr {
    match e {
        ScanError::Geometry(e) => geometry_error(e),
        e => InputError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn operator_error(e: OperatorError) -> PyErr {
    match e {
        OperatorError::Geometry(e) => geometry_error(e),
        OperatorError::Gpu(e) => gpu_error(e),
        OperatorError::TooLarge { .. } => OutOfMemoryError::new_err(in_python_terms(e)),
        e => LaminoError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn plan_error(e: PlanError) -> PyErr {
    match e {
        PlanError::Operator(e) => operator_error(e),
        e => OutOfMemoryError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn solver_error(e: SolverError) -> PyErr {
    match e {
        SolverError::Operator(e) => operator_error(e),
        SolverError::Gpu(e) => gpu_error(e),
        SolverError::Plan(e) => plan_error(e),
        SolverError::Parameter(e) => InputError::new_err(in_python_terms(e)),
        SolverError::DataShape { .. } => InputError::new_err(in_python_terms(e)),
        e => LaminoError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn recon_error(e: ReconError) -> PyErr {
    match e {
        ReconError::Solver(e) => solver_error(e),
        ReconError::Geometry(e) => geometry_error(e),
        ReconError::Scan(e) => scan_error(e),
        ReconError::Plan(e) => plan_error(e),
        e @ ReconError::MemoBudget { .. } => OutOfMemoryError::new_err(in_python_terms(e)),
        e => LaminoError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn io_error(e: IoError) -> PyErr {
    match e {
        IoError::HostMemory(e) => host_memory_error(e),
        e => InputError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn simulate_error(e: SimulateError) -> PyErr {
    match e {
        SimulateError::Geometry(e) => geometry_error(e),
        SimulateError::HostMemory(e) => host_memory_error(e),
        SimulateError::TooLarge { .. } => OutOfMemoryError::new_err(in_python_terms(e)),
        e => InputError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn preprocess_error(e: PreprocessError) -> PyErr {
    match e {
        PreprocessError::HostMemory(e) => host_memory_error(e),
        PreprocessError::Projections(e) => scan_error(e),
        PreprocessError::Geometry(e) => geometry_error(e),
        PreprocessError::Gpu(e) => gpu_error(e),
        PreprocessError::Fft(e) => LaminoError::new_err(in_python_terms(e)),
        e => InputError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn prepare_error(e: PrepareError) -> PyErr {
    match e {
        PrepareError::Preprocess(e) => preprocess_error(e),
        PrepareError::Scan(e) => scan_error(e),
        e => LaminoError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn job_error(e: JobError) -> PyErr {
    match e {
        JobError::Preprocess(e) => preprocess_error(e),
        JobError::Prepare(e) => prepare_error(e),
        JobError::Recon(e) => recon_error(e),
        e @ JobError::Input(_) => InputError::new_err(in_python_terms(e)),
        e => LaminoError::new_err(in_python_terms(e)),
    }
}

pub(crate) fn flatfield_error(e: FlatfieldError) -> PyErr {
    match e {
        FlatfieldError::Io(e) => io_error(e),
        FlatfieldError::Gpu(e) => gpu_error(e),
        e @ FlatfieldError::NonFiniteFit { .. } => LaminoError::new_err(in_python_terms(e)),
        e => InputError::new_err(in_python_terms(e)),
    }
}
