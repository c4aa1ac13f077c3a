//! The preprocessing calls of tomopy and dxchange, over the core crate's implementations:
//! `normalize` and `minus_log` (tomopy's two halves of `io::normalize`), `read_dxchange`,
//! `remove_stripe` (`preprocess::remove_stripes_in_place`) and `find_rotation_axis` (the
//! library's axis search of `--rotation-axis auto`, or `lamino try`'s grid of candidates, with
//! the same rule for which estimate is the axis).

use std::path::PathBuf;

use lamino_core::geometry::Geometry;
use lamino_core::io::{check_radians, ScanOptions, Stack};
use lamino_core::io::{minus_log as core_minus_log, read_dxchange_with, AngleUnit, FieldMeans};
use lamino_core::preprocess::{
    find_rotation_axis as core_find_rotation_axis, remove_stripes_in_place, AxisGrid, Scored,
    StripeRemoval, FW_SIGMA,
};
use lamino_core::{Projections, Tilt};
use numpy::{PyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrays::{read_array, shape3, to_numpy};
use crate::device::{DeviceArg, DeviceArgs, Devices, Lease};
use crate::errors::{input_error, io_error, preprocess_error, scan_error, GeometryError};

/// A 3-D float32 argument as a [`Stack`] (one copy: the core functions own their input).
fn stack(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Stack> {
    let array = read_array::<f32>(value, name, 3)?;
    Ok(Stack {
        shape: shape3(&array),
        values: array.as_slice()?.to_vec(),
    })
}

/// tomopy's ``normalize``: transmission ``(proj - dark) / (flat - dark)``.
///
/// ``flat`` and ``dark`` are averaged over their first axis (tomopy's mean white and dark
/// frames), in float64; each ratio is computed in float64 and rounded once to float32.
/// Where ``flat <= dark`` (a dead pixel) the ratio is 0, which ``minus_log`` raises to its
/// floor (tomopy divides by 1e-6 there). tomopy's ``cutoff`` is not offered.
///
/// Parameters
/// ----------
/// proj : array_like, (angles, rows, columns)
///     Projection intensities (any real dtype; float32 C-contiguous is read in place).
/// flat, dark : array_like, (frames, rows, columns)
///     White and dark fields, any number of frames each. A scan without darks takes
///     ``numpy.zeros((1, rows, columns))``.
///
/// Returns
/// -------
/// numpy.ndarray, float32, the shape of ``proj``.
///
/// Raises ``InputError`` for shapes that do not match, empty arrays, non-numeric dtypes and NaN
/// or infinity.
#[pyfunction]
fn normalize<'py>(
    py: Python<'py>,
    proj: &Bound<'py, PyAny>,
    flat: &Bound<'py, PyAny>,
    dark: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let proj = read_array::<f32>(proj, "proj", 3)?;
    let shape = shape3(&proj);
    let (flat, dark) = (stack(flat, "flat")?, stack(dark, "dark")?);
    let values = proj.as_slice()?;
    let ratios = py.detach(|| {
        let means = FieldMeans::new(&flat, &dark, [shape[1], shape[2]])?;
        // The core reads a `Stack`; its values are a copy the result reuses.
        means.ratios(&Stack {
            shape,
            values: values.to_vec(),
        })
    });
    to_numpy(py, &shape, ratios.map_err(|e| input_error("normalize", e))?)
}

/// tomopy's ``minus_log``: ``-ln(proj)``, the line integrals of transmission ratios.
///
/// Values below 1e-6 (zero and negative ones included) are raised to 1e-6 first, capping the
/// result at ``-ln(1e-6) = 13.8`` where tomopy gives infinity or NaN; the reconstruction's own
/// normalisation does the same. ``minus_log(normalize(proj, flat, dark))`` equals that
/// normalisation to one float32 step (the ratio is rounded to float32 in between).
///
/// Parameters
/// ----------
/// proj : array_like, (angles, rows, columns)
///     Transmission ratios (any real dtype; converted once to float32).
///
/// Returns
/// -------
/// numpy.ndarray, float32, the shape of ``proj`` (a new array; ``proj`` is not modified).
///
/// Raises ``InputError`` for a NaN or infinity, a non-numeric dtype or another number of
/// dimensions.
#[pyfunction]
fn minus_log<'py>(
    py: Python<'py>,
    proj: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let Stack { shape, mut values } = stack(proj, "proj")?;
    py.detach(|| core_minus_log("proj", &mut values))
        .map_err(|e| input_error("minus_log", e))?;
    to_numpy(py, &shape, values)
}

/// Reads a DXchange HDF5 file (the APS Data Exchange layout of tomopy's ``dxchange``).
///
/// ``proj, flat, dark, theta, tilt = lamino.read_dxchange(path)``
///
/// Parameters
/// ----------
/// path : str or os.PathLike
///     The file: ``/exchange/data``, ``/exchange/data_white``, optional
///     ``/exchange/data_dark`` (one frame of zeros without it), ``/exchange/theta`` or the
///     ``/process/acquisition/rotation`` start and step, optional ``/lamino/phi_deg``.
/// theta_units : {"deg", "rad"}, optional
///     The unit of angles the file does not state (the CLI's ``--theta-units``). Without it,
///     unit-less angles are degrees, and angles that look like radians are refused; radians
///     (stated or given) spanning more than a turn and a step are refused too.
///
/// Returns
/// -------
/// proj, flat, dark : numpy.ndarray, float32, (frames, rows, columns)
///     Intensities as stored (any integer or float dtype, converted to float32).
/// theta : numpy.ndarray, float64, (angles,)
///     Projection angles in **radians** (as tomopy's API; files usually store degrees).
/// tilt : float or None
///     Laminographic tilt in **degrees** from the tomography plane (0: plain CT; the ``tilt``
///     of ``lamino.reconstruct``), from ``/lamino/phi_deg``; None when the file does not
///     record it.
///
/// Raises ``InputError`` for a missing or unreadable file, missing datasets, shapes that do
/// not agree, non-finite values and ambiguous angle units.
#[pyfunction]
#[pyo3(signature = (path, *, theta_units=None))]
#[allow(clippy::type_complexity)]
fn read_dxchange<'py>(
    py: Python<'py>,
    path: PathBuf,
    theta_units: Option<&str>,
) -> PyResult<(
    Bound<'py, PyArrayDyn<f32>>,
    Bound<'py, PyArrayDyn<f32>>,
    Bound<'py, PyArrayDyn<f32>>,
    Bound<'py, PyArrayDyn<f64>>,
    Option<f64>,
)> {
    let theta_units = theta_units
        .map(|u| {
            AngleUnit::parse(u).ok_or_else(|| {
                input_error("theta_units", format!("{u:?}: expected \"deg\" or \"rad\""))
            })
        })
        .transpose()?;
    let options = ScanOptions {
        theta_units,
        ..ScanOptions::default()
    };
    let scan = py
        .detach(|| read_dxchange_with(&path, &options))
        .map_err(io_error)?;
    let array = |s: Stack| to_numpy(py, &s.shape, s.values);
    let ntheta = scan.theta.len();
    Ok((
        array(scan.data)?,
        array(scan.flats)?,
        array(scan.darks)?,
        to_numpy(py, &[ntheta], scan.theta)?,
        scan.tilt.map(Tilt::degrees),
    ))
}

/// Removes stripes (ring artefacts) from line integrals, sinogram by sinogram.
///
/// ``method="fw"``: the Fourier-wavelet method of Münch et al. (tomopy's
/// ``remove_stripe_fw``, tomocupy's ``fw``), with ``level`` and ``sigma``.
/// ``method="sort"``: Vo et al.'s sorting method (tomopy's ``remove_stripe_based_sorting``),
/// with ``size``. Each sinogram runs in float64 on all CPU cores; the result does not depend on
/// their number.
///
/// Parameters
/// ----------
/// tomo : array_like, (angles, rows, columns) or (angles, columns)
///     Line integrals (after ``minus_log``), tomopy's projection order; a 2-D array is one
///     sinogram. Any real dtype, converted once to float32.
/// method : {"fw", "sort"}
///     Default ``"fw"``.
/// level : int, optional
///     ``fw``: wavelet levels, 1 to 20; default ``log2(columns) - 5`` (at least 1), fewer than
///     tomopy's ``ceil(log2(max(angles, columns)))``, which alters stripe-free scans.
/// sigma : float, optional
///     ``fw``: damping width in angular frequency samples; default 1 (tomocupy's; tomopy's is 2).
/// size : int, optional
///     ``sort``: median window across columns (made odd); default as tomopy: 21 for detectors
///     wider than 2000 columns, else 1 % of the width and at least 5.
///
/// Returns
/// -------
/// numpy.ndarray, float32, the shape of ``tomo`` (a new array).
///
/// Raises ``InputError`` for an unknown method, a parameter of the other method, values out of
/// range, NaN or infinity.
#[pyfunction]
#[pyo3(signature = (tomo, method="fw", *, level=None, sigma=None, size=None))]
fn remove_stripe<'py>(
    py: Python<'py>,
    tomo: &Bound<'py, PyAny>,
    method: &str,
    level: Option<usize>,
    sigma: Option<f64>,
    size: Option<usize>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let method = match method {
        "fw" if size.is_none() => StripeRemoval::FourierWavelet {
            level,
            sigma: sigma.unwrap_or(FW_SIGMA),
        },
        "sort" if level.is_none() && sigma.is_none() => StripeRemoval::Sorting { size },
        "fw" => return Err(input_error("size", "applies to method=\"sort\" only")),
        "sort" => {
            let name = if level.is_some() { "level" } else { "sigma" };
            return Err(input_error(name, "applies to method=\"fw\" only"));
        }
        other => {
            return Err(input_error(
                "method",
                format!("{other:?}: expected \"fw\" or \"sort\""),
            ))
        }
    };
    let ndim: usize = py
        .import("numpy")?
        .call_method1("ndim", (tomo,))?
        .extract()?;
    let array = read_array::<f32>(tomo, "tomo", if ndim == 2 { 2 } else { 3 })?;
    let shape = array.shape().to_vec();
    // A sinogram (angles, columns) is a scan of one row.
    let dims = match shape[..] {
        [angles, columns] => [angles, 1, columns],
        _ => shape3(&array),
    };
    let mut values = array.as_slice()?.to_vec();
    py.detach(|| remove_stripes_in_place(&mut values, dims, method))
        .map_err(|e| match (method, e) {
            // The library names the median window; Python's argument is `size`.
            (
                StripeRemoval::Sorting { size: Some(size) },
                lamino_core::preprocess::PreprocessError::BadStripeParameter(reason),
            ) => input_error(&format!("size = {size}"), reason),
            (_, e) => preprocess_error(e),
        })?;
    to_numpy(py, &shape, values)
}

/// Finds the rotation axis (and the tilt) by the slab search of ``lamino try``.
///
/// Without ``centers`` and ``tilts``: the search of ``lamino reconstruct --rotation-axis auto``
/// (the same library function): for plain CT over 180 or 360 degrees Vo et al.'s Fourier
/// estimate first and the slab search near it, otherwise the slab search over ``columns/2 +-
/// columns/8``, coarse to fine. With candidates: for every candidate (centre, tilt) a thin slab of
/// the volume is reconstructed by filtered backprojection and scored by its sharpness (the mean
/// squared gradient over its inscribed disc; larger is sharper), as tomocupy's ``try`` and
/// ``try-lamino`` and ``lamino try``; the winner is refined by the parabola through it and its
/// neighbours. Either way the axis follows ``lamino try``'s rule: for plain CT the Fourier
/// estimate, refined by the slab score only where its peak near it is sharp (``scores["method"]``
/// and ``scores["reason"]`` say which and why).
///
/// Parameters
/// ----------
/// proj : array_like, (angles, rows, columns)
///     Line integrals (after ``minus_log``); float32 C-contiguous is read in place.
/// theta : array_like, (angles,)
///     Projection angles in **radians** (degrees, spanning more than a turn, are refused).
/// tilt : float
///     Laminographic tilt in **degrees** from the tomography plane (0: plain CT; as
///     ``lamino.reconstruct``), used for every candidate unless ``tilts`` is given.
/// centers : array_like, optional
///     Candidate rotation axes (detector columns, pixel ``w`` centred at ``w``; tomopy's
///     ``center``); default: the library's search (above).
/// tilts : array_like, optional
///     Candidate tilts in degrees; default ``[tilt]`` (only the axis is searched). Given without
///     ``centers``, the tilts are scored at the detector's centre column.
/// slab_slices : int, optional
///     Slices of the slab, 1 to the volume's height (``proj``'s rows); default chosen from the
///     geometry (at most 8), as ``lamino try``.
/// slab_z : float, optional
///     The slab's centre in voxels from the volume's centre along z; default 0. Put it where the
///     sample has layers when searching the tilt.
/// device, allow_software_gpu, backend, limits
///     As for ``lamino.Operator``.
///
/// Returns
/// -------
/// center : float
///     The rotation axis (columns).
/// scores : dict
///     ``center``, ``tilt`` (degrees), ``score``: float64 arrays, one entry per candidate scored
///     (centres vary fastest; the search's passes one after the other); ``method``
///     (``"slab"``, ``"fourier"`` or ``"fourier+slab"``) and ``reason``: which estimate is the
///     axis and why; ``fourier_center`` (None unless plain CT over 180 or 360 degrees),
///     ``slab_center``: the two estimates; ``best_center``, ``best_tilt``: the highest-scoring
///     candidate; ``refined_tilt``: the refined tilt (degrees); ``peak_half_width``: columns
///     from the peak at which the score halves (None at the edge of the range); ``slab_slices``.
///
/// At most 10000 candidates (centres x tilts). Raises ``InputError`` for unusable candidates
/// or slabs, ``GeometryError`` for bad angles or tilt, ``DeviceError``/``OutOfMemoryError``.
#[pyfunction]
#[pyo3(signature = (proj, theta, tilt, *, centers=None, tilts=None, slab_slices=None,
    slab_z=0.0, device=DeviceArg::default(), allow_software_gpu=None, backend=None, limits=None))]
#[allow(clippy::too_many_arguments)]
fn find_rotation_axis<'py>(
    py: Python<'py>,
    proj: &Bound<'py, PyAny>,
    theta: &Bound<'py, PyAny>,
    tilt: f64,
    centers: Option<&Bound<'py, PyAny>>,
    tilts: Option<&Bound<'py, PyAny>>,
    slab_slices: Option<usize>,
    slab_z: f64,
    device: DeviceArg,
    allow_software_gpu: Option<bool>,
    backend: Option<&str>,
    limits: Option<&str>,
) -> PyResult<(f64, Bound<'py, PyDict>)> {
    let proj = read_array::<f32>(proj, "proj", 3)?;
    let [ntheta, deth, detw] = shape3(&proj);
    let theta = read_theta(theta)?;
    if theta.len() != ntheta {
        return Err(input_error(
            "theta",
            format!("{} angles for {ntheta} projections", theta.len()),
        ));
    }
    let tilt = checked_tilt(tilt)?;
    // The search's volume is the detector's height (`Geometry::for_detector`): a thicker slab
    // never fits, and the library's search for the thickest that does would count down from it.
    if let Some(slices) = slab_slices.filter(|&s| s == 0 || s > deth) {
        return Err(input_error(
            "slab_slices",
            format!("{slices}: must lie in 1..={deth} (the volume's height, proj's rows)"),
        ));
    }
    let list = |value: Option<&Bound<'py, PyAny>>, name: &str| -> PyResult<Option<Vec<f64>>> {
        value
            .map(|v| Ok(read_array::<f64>(v, name, 1)?.as_slice()?.to_vec()))
            .transpose()
    };
    let axes = list(centers, "centers")?;
    let tilts = list(tilts, "tilts")?
        .map(|t| {
            t.into_iter()
                .map(checked_tilt)
                .collect::<PyResult<Vec<f64>>>()
        })
        .transpose()?;
    let options = Devices::one(DeviceArgs {
        device,
        allow_software_gpu,
        backend,
        limits,
    })?;
    let geometry = Geometry::for_detector(deth, detw, theta, Tilt::from_degrees(tilt));
    let values = proj.as_slice()?;
    let scores = PyDict::new(py);
    let column = |scored: &[Scored], f: &dyn Fn(&Scored) -> f64| -> PyResult<_> {
        let values: Vec<f64> = scored.iter().map(f).collect();
        to_numpy(py, &[values.len()], values)
    };
    let record = |scored: &[Scored]| -> PyResult<()> {
        scores.set_item("center", column(scored, &|s| s.candidate.rotation_axis)?)?;
        scores.set_item("tilt", column(scored, &|s| s.candidate.tilt_deg)?)?;
        scores.set_item("score", column(scored, &|s| s.score)?)
    };
    if axes.is_none() && tilts.is_none() {
        // The library's search, as `lamino reconstruct --rotation-axis auto` runs it.
        let search = py.detach(|| -> PyResult<_> {
            let projections = Projections::new(geometry, values.to_vec()).map_err(scan_error)?;
            let lease = Lease::take(&options)?;
            let search = core_find_rotation_axis(
                lease.ctx(),
                &projections,
                1,
                tilt,
                slab_slices,
                slab_z,
                None,
            )
            .map_err(preprocess_error)?;
            lease.give_back();
            Ok(search)
        })?;
        let scored: Vec<Scored> = search
            .passes
            .iter()
            .flat_map(|p| p.scored.clone())
            .collect();
        record(&scored)?;
        scores.set_item("method", search.method)?;
        scores.set_item("reason", &search.reason)?;
        scores.set_item("fourier_center", search.fourier_axis)?;
        scores.set_item("slab_center", search.slab_axis)?;
        let last = search.passes.last().map(|p| p.best.rotation_axis);
        scores.set_item("best_center", last)?;
        scores.set_item("best_tilt", tilt)?;
        scores.set_item("refined_tilt", tilt)?;
        scores.set_item("peak_half_width", search.peak_half_width)?;
        scores.set_item("slab_slices", search.slab.slices)?;
        return Ok((search.rotation_axis, scores));
    }
    // The candidates given: `lamino try`'s grid search; a tilt search alone keeps the
    // detector's centre column, as `try --tilt-range` does.
    let searched_axes = axes.is_some();
    let axes = axes.unwrap_or_else(|| vec![(detw / 2) as f64]);
    let tilts = tilts.unwrap_or_else(|| vec![tilt]);
    let found = py.detach(|| -> PyResult<_> {
        let projections = Projections::new(geometry, values.to_vec()).map_err(scan_error)?;
        let search = AxisGrid::new(
            projections.geometry(),
            1,
            (&axes, searched_axes),
            &tilts,
            (slab_slices, slab_z),
        )
        .map_err(preprocess_error)?;
        let lease = Lease::take(&options)?;
        let found = search
            .score(lease.ctx(), &projections)
            .map_err(preprocess_error)?;
        lease.give_back();
        Ok(found)
    })?;
    let result = &found.result;
    record(&result.scored)?;
    let (method, reason) = match &found.decision {
        Some(d) => (d.method, d.reason.clone()),
        None => (
            "slab",
            "the axis given (centers not searched): the tilts' slab scores".to_string(),
        ),
    };
    scores.set_item("method", method)?;
    scores.set_item("reason", reason)?;
    scores.set_item("fourier_center", found.fourier_axis)?;
    scores.set_item("slab_center", result.refined.rotation_axis)?;
    scores.set_item("best_center", result.best.rotation_axis)?;
    scores.set_item("best_tilt", result.best.tilt_deg)?;
    scores.set_item("refined_tilt", result.refined.tilt_deg)?;
    scores.set_item("peak_half_width", result.peak_half_width)?;
    scores.set_item("slab_slices", result.slab.slices)?;
    let center = found
        .decision
        .map_or(result.refined.rotation_axis, |d| d.rotation_axis);
    Ok((center, scores))
}

/// Argument `theta`: 1-D, finite angles that can be radians ([`check_radians`]: degrees are
/// refused, not reconstructed as radians).
pub(crate) fn read_theta(theta: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    let theta = read_array::<f64>(theta, "theta", 1)?.as_slice()?.to_vec();
    check_radians(&theta).map_err(|e| {
        GeometryError::new_err(format!(
            "theta: {e} pass radians (numpy.deg2rad(theta)), as tomopy takes them"
        ))
    })?;
    Ok(theta)
}

/// `tilt` (degrees from the tomography plane) when the operator's `phi = 90 + tilt` degrees lies
/// in (0, 180): the geometry's own check, in the caller's terms.
pub(crate) fn checked_tilt(tilt: f64) -> PyResult<f64> {
    if tilt.abs() < 90.0 {
        Ok(tilt)
    } else {
        Err(GeometryError::new_err(format!(
            "tilt = {tilt} degrees: must be finite and lie in (-90, 90) (0 is plain CT)"
        )))
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(normalize, m)?)?;
    m.add_function(wrap_pyfunction!(minus_log, m)?)?;
    m.add_function(wrap_pyfunction!(read_dxchange, m)?)?;
    m.add_function(wrap_pyfunction!(remove_stripe, m)?)?;
    m.add_function(wrap_pyfunction!(find_rotation_axis, m)?)
}
