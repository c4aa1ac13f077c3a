//! `lamino.reconstruct`: line integrals and angles in, the ADMM-TV volume out, as the library's
//! [`Job`] that `lamino reconstruct` runs (the arrays its input, binned, then its
//! [`Preparation`]: stripe removal and the rotation axis; then the solve), so both give the same
//! bits. The GPU work runs without the GIL.

use lamino_core::memo::{MemoOptions, MemoPolicy};
use lamino_core::params::NormalOperator;
use lamino_core::preprocess::{StripeRemoval, FW_SIGMA};
use lamino_core::recon::input::LoadedProjections;
use lamino_core::recon::{AxisStep, Job, JobError, JobInput, Preparation};
use lamino_core::{AdmmParams, DetectorColumn, Geometry, Projections, Reconstructor, Tilt};
use numpy::PyUntypedArrayMethods;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrays::{read_array, shape3, to_numpy};
use crate::device::{DeviceArg, DeviceArgs, Devices, Lease};
use crate::errors::{input_error, job_error, recon_error, scan_error};
use crate::preprocess::read_theta;
use crate::progress::{Reporter, Watch};

/// The stripe removal `remove_stripe=` names, with lamino's default parameters.
fn stripe_removal(method: Option<&str>) -> PyResult<Option<StripeRemoval>> {
    match method {
        None | Some("none") => Ok(None),
        Some("fw") => Ok(Some(StripeRemoval::FourierWavelet {
            level: None,
            sigma: FW_SIGMA,
        })),
        Some("sort") => Ok(Some(StripeRemoval::Sorting { size: None })),
        Some(other) => Err(input_error(
            "remove_stripe",
            format!("{other:?}: expected None, \"fw\" (Fourier-wavelet) or \"sort\" (Vo et al.)"),
        )),
    }
}

/// The largest `binning` exponent, tomocupy's and the command line's (`--binning 3`: 8 x 8).
const MAX_BINNING: usize = 3;

/// The binning factor of `binning=`, tomocupy's exponent `e` (the detector binned by `2^e`), as
/// the command line's `--binning` takes it: one meaning for the word in both.
fn binning_factor(binning: usize) -> PyResult<usize> {
    if binning > MAX_BINNING {
        return Err(input_error(
            "binning",
            format!(
                "{binning}: expected tomocupy's exponent 0 to {MAX_BINNING} (the detector binned \
                 by 2^binning: 0 none, 1 2 x 2, 2 4 x 4, 3 8 x 8 pixels), as the command line's"
            ),
        ));
    }
    Ok(1 << binning)
}

/// The solver parameters of the arguments, checked.
fn solver_params(
    alpha: f64,
    max_iterations: usize,
    iterations: Option<usize>,
) -> PyResult<AdmmParams> {
    let params = match iterations {
        Some(n) => AdmmParams {
            alpha,
            ..AdmmParams::exactly(n)
        },
        None => AdmmParams {
            alpha,
            outer_iterations: max_iterations,
            ..AdmmParams::default()
        },
    };
    params.validate().map_err(|e| {
        // The parameter at fault, by its Python name (the library's count is `outer_iterations`).
        let name = match (e.name, iterations) {
            ("outer_iterations", Some(_)) => "iterations",
            ("outer_iterations", None) => "max_iterations",
            (name, _) => name,
        };
        input_error(name, format!("{}: it must be {}", e.value, e.bound))
    })?;
    Ok(params)
}

/// Reconstruct a volume from laminography projections with ADMM-TV on the GPU.
///
/// Parameters
/// ----------
/// proj : ndarray, shape (ntheta, deth, detw)
///     Line integrals -ln(I/I0) in units of the voxel size (tomopy's ``minus_log`` of its
///     ``normalize``). C-contiguous float32 is read in place; any other real dtype or layout is
///     converted once.
/// theta : ndarray, shape (ntheta,)
///     Projection angles in **radians**, as in tomopy (any order, any spacing); angles spanning
///     more than a turn and a step (degrees) raise ``GeometryError``.
/// tilt : float
///     Laminographic tilt in **degrees** from the tomography plane (0 is plain CT; tomocupy's
///     ``lamino_angle``).
/// center : float, optional
///     Detector column (unbinned pixels, sub-pixel; pixel w is centred at w) that the rotation
///     axis projects onto: tomopy's ``center``. Default ``detw / 2``.
/// volume_shape : tuple of 3 ints, optional
///     ``(nz, ny, nx)`` in unbinned voxels, centred on the rotation axis. Default
///     ``(deth, detw, detw)``.
/// shifts : array_like, shape (ntheta, 2), optional
///     Each projection's detector shift ``(du, dv)``, columns and rows in unbinned pixels:
///     where it landed relative to where the geometry puts it (a stage that wobbled or
///     drifted), ``proj[t, v, w] = still[t, v - dv, w - du]``. Applied exactly, as Fourier
///     phases, as the command line's ``--shifts``. Default: none.
/// alpha : float
///     TV weight relative to the data's own scale (default ``lamino.DEFAULTS["alpha"]``): the
///     weight is ``alpha`` times the projections' mean attenuation per voxel over the volume's
///     width, so the same value suits data in any units and volumes of any size, and
///     reconstructing ``c * proj`` gives ``c`` times the volume (as the CLI's ``--alpha``).
/// max_iterations : int
///     The most outer iterations a run that stops on convergence may take (default
///     ``lamino.DEFAULTS["max_iterations"]``).
/// iterations : int, optional
///     Run exactly this many outer iterations instead of stopping on convergence.
/// memo : str
///     Memoization policy: ``"off"``, ``"mlr:TAU"``, ``"certified:TOL"`` or
///     ``"certified:auto"`` (see docs/memoization.md).
/// normal_operator : {"auto", "toeplitz", "gridding"}
///     How the inner CG applies ``(1/N) Re A*A``, as the command line's ``--normal-operator``:
///     ``"toeplitz"`` (one padded FFT convolution per step, no gridding in the loop; one
///     device, in-core or streaming, no memo), ``"gridding"`` (A then A*), ``"auto"`` (the
///     default: gridding for now, the same bits whatever the plan and device count).
/// binning : int
///     tomocupy's **exponent** ``e``, 0 to 3, as the command line's ``--binning``: the detector
///     is binned by ``b = 2**e`` (0 none, 1 2 x 2, 2 4 x 4, 3 8 x 8 pixels); line integrals are
///     averaged over b x b pixels and the voxels are b times larger (values b times an unbinned
///     reconstruction's).
/// remove_stripe : {None, "fw", "sort"}
///     Remove stripes from the sinograms before reconstructing (Fourier-wavelet, Münch et al.;
///     sorting, Vo et al.), with lamino's default parameters.
/// device : int, str or list of int
///     ``"best"`` (the best hardware GPU), an index from ``lamino.devices()``, several indices
///     (a list, or ``"0,2"``: each device computes its share of every iteration, with the bits
///     of one device when they are alike) or ``"all"`` (every hardware GPU), as the command
///     line's ``--device``.
/// allow_software_gpu : bool, optional
///     Accept a software adapter (lavapipe). Default: as ``LAMINO_ALLOW_SOFTWARE_GPU`` says.
/// backend, limits : str, optional
///     The graphics API (``"vulkan"``, ``"gl"``, ``"metal"``, ``"dx12"``) and the device limits
///     (``"adapter"``, ``"portable"``), as for ``lamino.Operator``.
/// progress : callable or bool, optional
///     ``True``: a progress bar on stderr; a callable: called after every outer iteration with
///     a dict of the report terms (iteration, counted from 1 as the command line's, total, elapsed_s, eta_s, data_term, tv_term,
///     lagrangian, change, ...). An exception it raises stops the run and is re-raised.
///
/// Returns
/// -------
/// ndarray, float32, shape (nz, ny, nx)
///     The volume (z, y, x), z along the rotation axis; attenuation per (binned) voxel.
///
/// The GIL is released while the GPU works; Ctrl-C stops the run at the end of the current
/// outer iteration and raises ``KeyboardInterrupt``. Errors raise ``lamino.LaminoError``
/// subclasses (``GeometryError``, ``InputError``, ``DeviceError``, ``OutOfMemoryError``).
#[pyfunction]
#[pyo3(signature = (
    proj, theta, *, tilt, center=None, volume_shape=None, shifts=None,
    alpha=AdmmParams::default().alpha, max_iterations=AdmmParams::default().outer_iterations,
    iterations=None, memo="off", normal_operator="auto", binning=0, remove_stripe=None, device=DeviceArg::default(),
    allow_software_gpu=None, backend=None, limits=None, progress=None,
))]
#[allow(clippy::too_many_arguments)]
fn reconstruct<'py>(
    py: Python<'py>,
    proj: &Bound<'py, PyAny>,
    theta: &Bound<'py, PyAny>,
    tilt: f64,
    center: Option<f64>,
    volume_shape: Option<(usize, usize, usize)>,
    shifts: Option<&Bound<'py, PyAny>>,
    alpha: f64,
    max_iterations: usize,
    iterations: Option<usize>,
    memo: &str,
    normal_operator: &str,
    binning: usize,
    remove_stripe: Option<&str>,
    device: DeviceArg,
    allow_software_gpu: Option<bool>,
    backend: Option<&str>,
    limits: Option<&str>,
    progress: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    // Every argument is checked before the device is opened.
    let params = solver_params(alpha, max_iterations, iterations)?;
    let memo = MemoOptions {
        policy: memo
            .parse::<MemoPolicy>()
            .map_err(|e| input_error("memo", e))?,
        ..MemoOptions::default()
    };
    let normal_operator = NormalOperator::ALL
        .iter()
        .find(|(name, _)| *name == normal_operator)
        .map(|&(_, choice)| choice)
        .ok_or_else(|| {
            input_error(
                "normal_operator",
                format!("{normal_operator:?}: one of \"auto\", \"toeplitz\", \"gridding\""),
            )
        })?;
    let stripes = stripe_removal(remove_stripe)?;
    let binning = binning_factor(binning)?;
    let devices = Devices::several(DeviceArgs {
        device,
        allow_software_gpu,
        backend,
        limits,
    })?;
    let watch = Watch::new(Reporter::from_arg(progress)?);
    let proj = read_array::<f32>(proj, "proj", 3)?;
    let theta = read_theta(theta)?;
    let [ntheta, deth, detw] = shape3(&proj);
    if theta.len() != ntheta {
        return Err(input_error(
            "theta",
            format!(
                "{} angles for {ntheta} projections (proj has shape ({ntheta}, {deth}, {detw}))",
                theta.len()
            ),
        ));
    }
    let shifts = shifts.map(|s| read_shifts(s, ntheta)).transpose()?;
    let mut geometry = Geometry::for_detector(deth, detw, theta, Tilt::from_degrees(tilt));
    if let Some((n0, n1, n2)) = volume_shape {
        (geometry.n0, geometry.n1, geometry.n2) = (n0, n1, n2);
    }
    // The one copy of the input: the solver owns its projections.
    let values = proj.as_slice()?.to_vec();
    drop(proj);
    let result = py.detach(|| -> PyResult<_> {
        let projections = Projections::new(geometry, values).map_err(scan_error)?;
        let job = Job {
            input: JobInput::Loaded {
                loaded: LoadedProjections::given(projections, "the tilt argument", "theta"),
                binning,
            },
            preparation: Preparation {
                stripes,
                axis: center.map_or(AxisStep::Geometry, |c| {
                    AxisStep::Column(DetectorColumn::recorded(c))
                }),
                volume: None,
                shifts,
                align: None,
            },
        };
        let lease = Lease::take(&devices)?;
        let reconstructor = Reconstructor::on_devices(lease.contexts())
            .params(params)
            .memo(memo)
            .normal_operator(normal_operator)
            .cancel_flag(watch.cancel.clone())
            .on_progress(|p| watch.iteration(p));
        let solved = match reconstructor.run_job(job, &mut |_| Ok(())) {
            Ok(solved) => solved,
            // A job that stopped before its solve has not used the devices and gives them
            // back; an error of the solve drops them, which it may have broken.
            Err(e) => {
                if !matches!(e, JobError::Recon(_)) {
                    lease.give_back();
                }
                return Err(job_error(e));
            }
        };
        // The volume leaves the solver as one host array (the command line writes it a slab at
        // a time instead): the buffers the run left pooled are freed first (the job has freed
        // its projections), so that the array takes their place rather than adding to the
        // run's peak.
        for ctx in lease.contexts() {
            ctx.release_idle_pools();
        }
        let volume = solved.into_reconstruction().map_err(recon_error)?;
        lease.give_back();
        Ok(volume)
    });
    watch.finish(py)?;
    let r = result?;
    let g = &r.geometry;
    Ok(to_numpy(py, &[g.n0, g.n1, g.n2], r.volume)?.into_any())
}

/// The defaults of the solver parameters, from the library's definitions.
pub(crate) fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let p = AdmmParams::default();
    let d = PyDict::new(py);
    d.set_item("alpha", p.alpha)?;
    d.set_item("max_iterations", p.outer_iterations)?;
    // The CG steps per outer iteration follow the operator's width: `inner_iterations` below
    // `inner_wide_from` voxels, `inner_iterations_wide` from there.
    d.set_item("inner_iterations", AdmmParams::INNER_ITERATIONS)?;
    d.set_item("inner_iterations_wide", AdmmParams::WIDE_INNER_ITERATIONS)?;
    d.set_item("inner_wide_from", AdmmParams::WIDE_FROM)?;
    d.set_item("rho0", p.rho0)?;
    d.set_item("memo", MemoPolicy::DEFAULT.to_string())?;
    d.set_item("normal_operator", NormalOperator::default().name())?;
    Ok(d)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(reconstruct, m)?)?;
    m.add("DEFAULTS", defaults(m.py())?)?;
    Ok(())
}

/// Argument `shifts`: one finite `(du, dv)` pair per projection of `ntheta`.
fn read_shifts(shifts: &Bound<'_, PyAny>, ntheta: usize) -> PyResult<Vec<[f64; 2]>> {
    let array = read_array::<f64>(shifts, "shifts", 2)?;
    let shape = array.shape().to_vec();
    if shape != [ntheta, 2] {
        return Err(input_error(
            "shifts",
            format!("has shape {shape:?}; expected ({ntheta}, 2): one (du, dv) per projection"),
        ));
    }
    Ok(array
        .as_slice()?
        .chunks(2)
        .map(|pair| [pair[0], pair[1]])
        .collect())
}
