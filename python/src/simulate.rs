//! `lamino.simulate` and `lamino.score`: the command line's `simulate` and `score` on arrays.

use lamino_core::memory::check_available;
use lamino_core::metrics::{score as score_volumes, score_working_bytes};
use lamino_core::simulate::{simulated_scan, PhantomKind, ScanSpec};
use lamino_core::Projections;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrays::{read_array, shape3, to_numpy};
use crate::errors::{host_memory_error, input_error, scan_error, simulate_error};

/// Simulate a laminography scan of a preset phantom (CPU; no device needed).
///
/// Parameters
/// ----------
/// phantom : {"chip", "shepp", "blobs"}
///     A layered circuit slab, the 3D modified Shepp-Logan, or Gaussian blobs.
/// size : int
///     Volume side n (n^3 voxels, n x n detector); even.
/// angles : int
///     Number of projection angles, equispaced over [0, 2 pi).
/// tilt_deg : float
///     Laminographic tilt in degrees from the tomography plane (0 is plain CT).
/// photons : float, optional
///     Incident photons per pixel: Poisson-noisy counts. Default: noiseless.
/// seed : int
///     Seed of the Poisson noise.
///
/// Returns
/// -------
/// dict
///     ``truth``: float32 (n, n, n) volume (z, y, x); ``projections``: float32 (angles, n, n)
///     line integrals -ln(I/I0) of the measured intensities (what ``reconstruct`` takes);
///     ``theta``: float64 (angles,) in radians; ``tilt``: the tilt in degrees.
#[pyfunction]
#[pyo3(signature = (phantom="chip", size=64, angles=64, tilt_deg=30.0, photons=None, seed=0))]
fn simulate<'py>(
    py: Python<'py>,
    phantom: &str,
    size: usize,
    angles: usize,
    tilt_deg: f64,
    photons: Option<f64>,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let spec = ScanSpec {
        phantom: phantom
            .parse::<PhantomKind>()
            .map_err(|e| input_error("phantom", e))?,
        size,
        angles,
        tilt_deg,
        photons,
        seed,
        rotation_axis: None,
    };
    let (truth, projections) = py.detach(|| -> PyResult<_> {
        let s = simulated_scan(&spec).map_err(simulate_error)?;
        let truth = s.scan.truth.ok_or_else(|| {
            crate::errors::LaminoError::new_err("the simulated scan has no ground truth")
        })?;
        // The normalisation every scan of intensities goes through (tomopy's normalize and
        // minus_log); its clamp count is zero for simulated counts.
        let (projections, _clamped) =
            Projections::from_intensities(s.geometry, &s.scan.data, &s.scan.flats, &s.scan.darks)
                .map_err(scan_error)?;
        Ok((truth, projections))
    })?;
    let g = projections.geometry().clone();
    let d = PyDict::new(py);
    d.set_item("truth", to_numpy(py, &truth.shape, truth.values)?)?;
    d.set_item(
        "projections",
        to_numpy(
            py,
            &[g.ntheta(), g.deth, g.detw],
            projections.values().to_vec(),
        )?,
    )?;
    d.set_item("theta", to_numpy(py, &[g.ntheta()], g.theta)?)?;
    d.set_item("tilt", tilt_deg)?;
    Ok(d)
}

/// Score a reconstruction against the ground truth.
///
/// Parameters
/// ----------
/// volume, truth : ndarray, shape (nz, ny, nx)
///     The same shape; converted to float32 once unless they are C-contiguous float32.
///
/// Returns
/// -------
/// dict
///     ``rel_l2``: ``|volume - truth| / |truth|``; ``psnr``: dB over the truth's range (None for
///     identical volumes); ``ssim``: mean 3D SSIM (Gaussian window, sigma 1.5 voxels).
#[pyfunction]
fn score<'py>(
    py: Python<'py>,
    volume: &Bound<'py, PyAny>,
    truth: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let volume = read_array::<f32>(volume, "volume", 3)?;
    let truth = read_array::<f32>(truth, "truth", 3)?;
    let shape = shape3(&volume);
    if shape != shape3(&truth) {
        return Err(input_error(
            "truth",
            format!(
                "shape {:?} differs from the volume's {shape:?}",
                shape3(&truth)
            ),
        ));
    }
    check_available(
        &format!("scoring a volume of {shape:?}"),
        score_working_bytes(shape),
        "score on a machine with more memory",
    )
    .map_err(host_memory_error)?;
    let (v, t) = (volume.as_slice()?, truth.as_slice()?);
    let s = py.detach(|| score_volumes(v, t, shape));
    let d = PyDict::new(py);
    d.set_item("rel_l2", s.rel_l2)?;
    d.set_item("psnr", s.psnr)?;
    d.set_item("ssim", s.ssim)?;
    Ok(d)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(score, m)?)?;
    Ok(())
}
