//! `lamino.Operator`: the laminography operator planned once for a geometry, then applied many
//! times (finufft's plan/execute style), for people who write their own solvers. It is the core
//! crate's `LaminoOperator::apply_host`, the path `lamino apply forward|adjoint` runs, so both
//! give the same bits.

use std::sync::{Mutex, PoisonError};

use lamino_core::geometry::{Geometry, DEFAULT_EPS};
use lamino_core::operator::{Apply, LaminoOperator, OperatorOptions};
use lamino_core::{Complex32, Tilt};
use numpy::{PyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::arrays::{read_array, to_numpy};
use crate::device::{DeviceArg, DeviceArgs, Devices, Lease};
use crate::errors::{geometry_error, input_error, operator_error, LaminoError};
use crate::preprocess::{checked_tilt, read_theta};

/// The laminography operator ``L`` of one scan geometry, planned once on a GPU.
///
/// ``Operator(volume_shape, theta, tilt, *, detector_shape=None, center=None, eps=1e-3,
/// device="best", allow_software_gpu=None)``
///
/// Planning builds the gridding tables, the FFT plans and the device buffers once (finufft's
/// ``Plan``); ``forward`` and ``adjoint`` then run many times on that plan. ``adjoint`` is the
/// exact adjoint of ``forward`` in complex arithmetic (``<L u, d> = <u, L* d>`` to f32 precision)
/// and both are deterministic: the same input gives the same bits, those of
/// ``lamino apply forward|adjoint`` on the command line.
///
/// Parameters
/// ----------
/// volume_shape : tuple of 3 int
///     ``(z, y, x)`` voxels, z the rotation axis; every size even and at least 2 (the operator
///     takes even sizes; ``lamino.reconstruct`` pads other sizes, this class does not).
/// theta : array_like of float, 1-D
///     Projection angles in **radians** (as tomopy), any order and spacing.
/// tilt : float
///     Laminographic tilt in **degrees** from the tomography plane: 0 is plain CT (tomocupy's
///     ``lamino_angle``, ``lamino.reconstruct``'s ``tilt``; the operator's ``phi`` is
///     ``90 + tilt`` degrees); must lie in (-90, 90).
/// detector_shape : tuple of 2 int, optional
///     ``(rows, columns)`` of the detector, each even; default ``(z, x)`` of the volume.
/// center : float, optional
///     Detector column (pixels, pixel ``w`` centred at ``w``) the rotation axis projects onto,
///     tomopy's ``center``; default ``columns / 2``.
/// eps : float, optional
///     Gridding accuracy of the USFFT, in ``[1e-6, 0.1]``; default ``1e-3`` (the reference's).
/// device : "best" or int, optional
///     Adapter from ``lamino.devices()``; default ``"best"``.
/// allow_software_gpu : bool, optional
///     Run on a software adapter (lavapipe); default: as ``LAMINO_ALLOW_SOFTWARE_GPU`` says.
/// backend : {"vulkan", "gl", "metal", "dx12"}, optional
///     The graphics API to run through, as the command line's ``--backend``: ``device=``
///     indexes that API's adapters (``lamino.devices(backend=...)``); default: every backend
///     built in, or those ``WGPU_BACKEND`` names.
/// limits : {"adapter", "portable"}, optional
///     The limits to open the device with, as ``--limits``: everything the adapter offers, or
///     WebGPU's defaults (what any WebGPU GPU offers); default: as ``LAMINO_LIMITS`` says
///     (``"adapter"`` when it is unset).
///
/// Raises
/// ------
/// GeometryError
///     Odd or zero sizes, no or non-finite angles, tilt out of range, bad ``center`` or ``eps``.
/// DeviceError, OutOfMemoryError
///     No usable GPU; the plan does not fit on it.
#[pyclass(module = "lamino", name = "Operator", frozen)]
pub(crate) struct Operator {
    geometry: Geometry,
    /// The tilt as given (degrees).
    tilt: f64,
    /// The device's description, for `repr`.
    device: String,
    /// One application at a time: the operator's spectrum and chunk buffers are shared by its
    /// applications, so two threads applying the same operator take turns (two operators run
    /// at once). `None` only once `Drop` has taken it.
    planned: Mutex<Option<Planned>>,
}

/// The operator and the device it was built on, held for the operator's life.
struct Planned {
    operator: LaminoOperator,
    lease: Lease,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let planned = self
            .planned
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(Planned { operator, lease }) = planned.take() {
            // The operator's buffers go first; its device then returns to the idle ones, so
            // that the next call finds its kernels compiled.
            drop(operator);
            lease.give_back();
        }
    }
}

#[pymethods]
impl Operator {
    #[new]
    #[pyo3(signature = (volume_shape, theta, tilt, *, detector_shape=None, center=None,
        eps=DEFAULT_EPS, device=DeviceArg::default(), allow_software_gpu=None, backend=None,
        limits=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        volume_shape: (usize, usize, usize),
        theta: &Bound<'_, PyAny>,
        tilt: f64,
        detector_shape: Option<(usize, usize)>,
        center: Option<f64>,
        eps: f64,
        device: DeviceArg,
        allow_software_gpu: Option<bool>,
        backend: Option<&str>,
        limits: Option<&str>,
    ) -> PyResult<Self> {
        let theta = read_theta(theta)?;
        let (n0, n1, n2) = volume_shape;
        let (deth, detw) = detector_shape.unwrap_or((n0, n2));
        let geometry = Geometry {
            n0,
            n1,
            n2,
            deth,
            detw,
            theta,
            tilt: Tilt::from_degrees(checked_tilt(tilt)?),
            eps,
            center,
            offset: [0.0; 3],
            shifts: Vec::new(),
        };
        let options = Devices::one(DeviceArgs {
            device,
            allow_software_gpu,
            backend,
            limits,
        })?;
        // Checked before the device is leased: an error after the lease drops the device.
        geometry.validate().map_err(geometry_error)?;
        let (lease, operator) = py.detach(|| -> PyResult<_> {
            let lease = Lease::take(&options)?;
            let operator = LaminoOperator::new(lease.ctx(), &geometry, &OperatorOptions::default())
                .map_err(operator_error)?;
            Ok((lease, operator))
        })?;
        Ok(Self {
            geometry,
            tilt,
            device: lease.ctx().info().to_string(),
            planned: Mutex::new(Some(Planned { operator, lease })),
        })
    }

    /// ``L u``: projects ``volume`` ``(z, y, x)`` to data ``(angles, rows, columns)``.
    ///
    /// ``volume`` is complex64 or float32 (read in place when C-contiguous complex64, else
    /// converted once to complex64); the result is a new complex64 array. The GIL is released
    /// while the GPU works. Raises ``InputError`` for a wrong shape, a non-numeric dtype or a
    /// NaN/infinity.
    fn forward<'py>(
        &self,
        py: Python<'py>,
        volume: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArrayDyn<Complex32>>> {
        self.apply(py, Apply::Forward, volume, "volume")
    }

    /// ``L* d``: the exact adjoint, from data ``(angles, rows, columns)`` to a volume
    /// ``(z, y, x)``.
    ///
    /// ``data`` is complex64 or float32 (read in place when C-contiguous complex64, else
    /// converted once to complex64) and is not modified; the result is a new complex64 array.
    /// The GIL is released while the GPU works. Raises ``InputError`` for a wrong shape, a
    /// non-numeric dtype or a NaN/infinity.
    fn adjoint<'py>(
        &self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArrayDyn<Complex32>>> {
        self.apply(py, Apply::Adjoint, data, "data")
    }

    /// ``(z, y, x)``: the shape ``forward`` reads and ``adjoint`` returns.
    #[getter]
    fn volume_shape(&self) -> (usize, usize, usize) {
        let g = &self.geometry;
        (g.n0, g.n1, g.n2)
    }

    /// ``(angles, rows, columns)``: the shape ``forward`` returns and ``adjoint`` reads.
    #[getter]
    fn data_shape(&self) -> (usize, usize, usize) {
        let g = &self.geometry;
        (g.ntheta(), g.deth, g.detw)
    }

    /// The detector column (pixels) the rotation axis projects onto.
    #[getter]
    fn center(&self) -> f64 {
        self.geometry.rotation_axis()
    }

    fn __repr__(&self) -> String {
        let g = &self.geometry;
        format!(
            "lamino.Operator(volume_shape=({}, {}, {}), angles={}, tilt={}, detector_shape=({}, {}), \
             center={}, eps={}, device={:?})",
            g.n0,
            g.n1,
            g.n2,
            g.ntheta(),
            self.tilt,
            g.deth,
            g.detw,
            g.rotation_axis(),
            g.eps,
            self.device,
        )
    }
}

impl Operator {
    /// Applies `what` to argument `name`, checked against the shape `what` reads.
    fn apply<'py>(
        &self,
        py: Python<'py>,
        what: Apply,
        value: &Bound<'py, PyAny>,
        name: &str,
    ) -> PyResult<Bound<'py, PyArrayDyn<Complex32>>> {
        let (from, to) = what.spaces();
        let expected = from.shape(&self.geometry);
        let input = read_array::<Complex32>(value, name, 3)?;
        if input.shape() != expected.as_slice() {
            return Err(input_error(
                name,
                format!(
                    "shape {:?}, but this operator reads {expected:?}",
                    input.shape()
                ),
            ));
        }
        let values = input.as_slice()?;
        let output = py.detach(|| -> PyResult<_> {
            let planned = self.planned.lock().unwrap_or_else(PoisonError::into_inner);
            // Taken only by `Drop`, which no call can overlap; an error rather than a panic.
            let Some(Planned { operator, lease }) = planned.as_ref() else {
                return Err(LaminoError::new_err("the operator has been released"));
            };
            operator
                .apply_host(lease.ctx(), what, &expected, values)
                .map_err(operator_error)
        })?;
        to_numpy(py, &to.shape(&self.geometry), output)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Operator>()
}
