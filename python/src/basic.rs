//! `lamino.BaSiC`: BaSiC flat-field, dark-field and baseline estimation with BaSiCPy's names
//! (`fit`, `transform`, `fit_transform`; `flatfield`, `darkfield`, `baseline`), over the core
//! crate's fit (`flatfield::fit_prepared`, what `lamino flatfield fit` runs) and correction
//! (`flatfield::TransformPlan`, what `lamino flatfield apply` runs), so both give the same bits.

use std::sync::{Mutex, PoisonError};

use lamino_core::flatfield::{
    fit_prepared, BasicParams, Fields, FitReport, FlatfieldError, Preprocessor, Smoothness,
    TransformParams, TransformPlan,
};
use numpy::{PyArrayDyn, PyReadonlyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrays::{read_array, shape3, to_numpy};
use crate::device::{DeviceArg, DeviceArgs, Devices, Lease};
use crate::errors::{flatfield_error, input_error};

/// BaSiC flat-field and dark-field estimation (Peng et al., Nat. Commun. 8:14836, 2017), on
/// the GPU, with BaSiCPy's names: switching from BaSiCPy is one import line for the
/// parameters listed here.
///
/// Model: ``I_i = S * b_i + D`` (plus sparse objects) with flat-field ``S`` (mean 1), dark-field
/// ``D`` and a baseline ``b_i`` per image, all in the images' intensity units except ``S``.
/// Images are resampled to a ``working_size`` square grid for the fit; the fields are
/// upsampled back to the image size.
///
/// Parameters (keyword only; every default is the core crate's ``BasicParams`` /
/// ``TransformParams`` value, also readable as an attribute of the same name)
/// ----------
/// get_darkfield : bool, default True
///     Estimate ``D`` too (BaSiCPy's default is False: without it the offset stays in ``S``).
/// smoothness_flatfield : float, default None
///     The flat-field smoothness weight lambda_F itself (the CLI's ``--lambda-flatfield``).
///     None: chosen by ``smoothness``. BaSiCPy's default (ladmap) fit also takes the weight
///     itself, but on the scale of its own objective: values do not carry over.
/// smoothness_darkfield : float, default None
///     lambda_D itself; None: ``darkfield_ratio * lambda_F``.
/// max_iterations : int, default 500
///     Upper bound on the inner iterations of one solve.
/// optimization_tol : float, default 1e-6
///     Inner stop: relative residual ``|Z|_F / |D|_F`` (BaSiCPy's default 1e-3).
/// max_reweight_iterations : int, default 25
///     Upper bound on the reweighting solves (BaSiCPy's default 10).
/// reweighting_tol : float, default 1e-3
///     Reweighting stop: relative L1 change of the fields (BaSiCPy's default 1e-2 stops before
///     the fields settle).
/// working_size : int, default 128
///     Side of the square working grid, 2 to 1024.
/// epsilon : float, default 0.1
///     The reweighting constant of ``W = 1 / (|E / l| + epsilon)``.
/// sort_intensity : bool, default False
///     Sort each working pixel's values along the image axis (MATLAB/KINTSUGI).
/// smoothness : {"standard", "auto-data"}, default "standard"
///     lamino's: how lambda_F is chosen when not given: ``sum |DCT2(mean image)| / 800`` (the
///     rule of BaSiC, BaSiCPy's approximate mode and MATLAB) or by cross-validation over images.
/// darkfield_ratio : float, default 0.2
///     lamino's: lambda_D / lambda_F when ``smoothness_darkfield`` is None.
/// flat_min : float, default 0.1
///     lamino's: ``transform`` divides by ``max(S, flat_min)`` (at most 10x amplification).
/// clip_negative : bool, default True
///     lamino's: ``transform`` clips corrected values below 0 to 0.
/// device : "best" or int, default "best"; allow_software_gpu : bool, default None
///     As for ``lamino.Operator``.
/// backend, limits : str, optional
///     As for ``lamino.Operator``.
///
/// BaSiCPy's ``fitting_mode``, ``sparse_cost_darkfield``, ``autosegment``, ``resize_mode``,
/// ``fitting_weight`` and ``timelapse`` have no counterpart here.
///
/// Attributes after ``fit`` (None before): ``flatfield`` (rows, columns) float32,
/// ``darkfield`` (rows, columns) float32 (zeros without ``get_darkfield``), ``baseline``
/// (images,) float32, ``report`` (dict: the weights used, convergence, warnings).
#[pyclass(module = "lamino", name = "BaSiC", frozen)]
pub(crate) struct Basic {
    params: BasicParams,
    transform_params: TransformParams,
    device: Devices,
    fitted: Mutex<Option<Fitted>>,
}

/// The outcome of a fit.
struct Fitted {
    fields: Fields,
    report: FitReport,
}

#[pymethods]
impl Basic {
    #[new]
    #[pyo3(signature = (*, get_darkfield=None, smoothness_flatfield=None,
        smoothness_darkfield=None, max_iterations=None, optimization_tol=None,
        max_reweight_iterations=None, reweighting_tol=None, working_size=None, epsilon=None,
        sort_intensity=None, smoothness=None, darkfield_ratio=None, flat_min=None,
        clip_negative=None, device=DeviceArg::default(), allow_software_gpu=None, backend=None,
        limits=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        get_darkfield: Option<bool>,
        smoothness_flatfield: Option<f64>,
        smoothness_darkfield: Option<f64>,
        max_iterations: Option<usize>,
        optimization_tol: Option<f64>,
        max_reweight_iterations: Option<usize>,
        reweighting_tol: Option<f64>,
        working_size: Option<usize>,
        epsilon: Option<f64>,
        sort_intensity: Option<bool>,
        smoothness: Option<&str>,
        darkfield_ratio: Option<f64>,
        flat_min: Option<f32>,
        clip_negative: Option<bool>,
        device: DeviceArg,
        allow_software_gpu: Option<bool>,
        backend: Option<&str>,
        limits: Option<&str>,
    ) -> PyResult<Self> {
        let d = BasicParams::default();
        let params = BasicParams {
            get_darkfield: get_darkfield.unwrap_or(d.get_darkfield),
            max_iterations: max_iterations.unwrap_or(d.max_iterations),
            optimization_tolerance: optimization_tol.unwrap_or(d.optimization_tolerance),
            max_reweight_iterations: max_reweight_iterations.unwrap_or(d.max_reweight_iterations),
            reweighting_tolerance: reweighting_tol.unwrap_or(d.reweighting_tolerance),
            working_size: working_size.unwrap_or(d.working_size),
            epsilon: epsilon.unwrap_or(d.epsilon),
            lambda_flatfield: smoothness_flatfield.or(d.lambda_flatfield),
            smoothness: match smoothness {
                Some(s) => s.parse::<Smoothness>().map_err(parameter_error)?,
                None => d.smoothness,
            },
            darkfield_ratio: darkfield_ratio.unwrap_or(d.darkfield_ratio),
            lambda_darkfield: smoothness_darkfield.or(d.lambda_darkfield),
            sort_intensity: sort_intensity.unwrap_or(d.sort_intensity),
        };
        // The core's messages name its fields; these are the Python names.
        params.validate().map_err(parameter_error)?;
        let t = TransformParams::default();
        let transform_params = TransformParams {
            flat_min: flat_min.unwrap_or(t.flat_min),
            clip_negative: clip_negative.unwrap_or(t.clip_negative),
        };
        transform_params.validate().map_err(flatfield_error)?;
        Ok(Self {
            params,
            transform_params,
            device: Devices::one(DeviceArgs {
                device,
                allow_software_gpu,
                backend,
                limits,
            })?,
            fitted: Mutex::new(None),
        })
    }

    /// Estimates ``flatfield``, ``darkfield`` and ``baseline`` from ``images``.
    ///
    /// ``images``: (images, rows, columns), any real dtype (uint8 and uint16 are converted
    /// exactly to float32; float32 C-contiguous is read in place). The GIL is released during
    /// the fit. Returns None (as BaSiCPy). Raises ``InputError`` for a wrong shape, NaN or
    /// infinity, all-zero images; ``DeviceError`` without a usable GPU.
    fn fit(&self, py: Python<'_>, images: &Bound<'_, PyAny>) -> PyResult<()> {
        let images = read_array::<f32>(images, "images", 3)?;
        let fitted = self.fit_images(py, &images)?;
        *self.lock() = Some(fitted);
        Ok(())
    }

    /// Corrects ``images`` with the fitted fields: ``(I - D) / max(S, flat_min)``, clipped at
    /// 0 unless ``clip_negative=False``; float32 (images, rows, columns), a new array.
    ///
    /// ``images`` must have the fitted images' rows and columns. BaSiCPy's ``timelapse``
    /// (baseline subtraction) is not offered: subtract ``baseline[:, None, None]`` from the
    /// result for it. Raises ``InputError`` before ``fit`` and for a wrong shape.
    fn transform<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let images = read_array::<f32>(images, "images", 3)?;
        let fitted = self.lock();
        let Some(fitted) = fitted.as_ref() else {
            return Err(input_error(
                "images",
                "BaSiC.transform needs the fields of BaSiC.fit: call fit first",
            ));
        };
        self.correct(py, &fitted.fields, &images)
    }

    /// ``fit(images)`` then ``transform(images)``: the corrected images.
    fn fit_transform<'py>(
        &self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let images = read_array::<f32>(images, "images", 3)?;
        let fitted = self.fit_images(py, &images)?;
        let corrected = self.correct(py, &fitted.fields, &images);
        *self.lock() = Some(fitted);
        corrected
    }

    /// The flat-field ``S`` (rows, columns), mean 1; None before ``fit``.
    #[getter]
    fn flatfield<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArrayDyn<f32>>>> {
        self.field(py, |f| (vec![f.height, f.width], f.flatfield.clone()))
    }

    /// The dark-field ``D`` (rows, columns) in intensity units; None before ``fit``.
    #[getter]
    fn darkfield<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArrayDyn<f32>>>> {
        self.field(py, |f| (vec![f.height, f.width], f.darkfield.clone()))
    }

    /// The baseline ``b_i`` per image (images,) in intensity units; None before ``fit``.
    #[getter]
    fn baseline<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArrayDyn<f32>>>> {
        self.field(py, |f| (vec![f.baseline.len()], f.baseline.clone()))
    }

    /// What the fit did (None before ``fit``): a dict of ``lambda_flatfield`` and
    /// ``lambda_darkfield`` (the weights used), ``reweighting_rounds``, ``converged``,
    /// ``fallback`` (the flat-field was unusable and replaced by ones), ``brightness_spread``
    /// (below 0.5 the dark-field is poorly identifiable), ``warnings`` and
    /// ``changed_parameters``: the terms of the CLI's report.json.
    #[getter]
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let fitted = self.lock();
        let Some(r) = fitted.as_ref().map(|f| &f.report) else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("lambda_flatfield", r.lambda_flatfield)?;
        d.set_item("lambda_darkfield", r.lambda_darkfield)?;
        d.set_item("reweighting_rounds", r.reweighting_rounds)?;
        d.set_item("converged", r.converged)?;
        d.set_item("fallback", r.fallback)?;
        d.set_item("brightness_spread", r.brightness_spread)?;
        d.set_item("warnings", r.warnings.clone())?;
        d.set_item("changed_parameters", r.changed_parameters.clone())?;
        Ok(Some(d))
    }

    // Named explicitly: PyO3 would strip the `get_` of the method's name.
    #[getter(get_darkfield)]
    fn estimates_darkfield(&self) -> bool {
        self.params.get_darkfield
    }
    #[getter]
    fn smoothness_flatfield(&self) -> Option<f64> {
        self.params.lambda_flatfield
    }
    #[getter]
    fn smoothness_darkfield(&self) -> Option<f64> {
        self.params.lambda_darkfield
    }
    #[getter]
    fn max_iterations(&self) -> usize {
        self.params.max_iterations
    }
    #[getter]
    fn optimization_tol(&self) -> f64 {
        self.params.optimization_tolerance
    }
    #[getter]
    fn max_reweight_iterations(&self) -> usize {
        self.params.max_reweight_iterations
    }
    #[getter]
    fn reweighting_tol(&self) -> f64 {
        self.params.reweighting_tolerance
    }
    #[getter]
    fn working_size(&self) -> usize {
        self.params.working_size
    }
    #[getter]
    fn epsilon(&self) -> f64 {
        self.params.epsilon
    }
    #[getter]
    fn sort_intensity(&self) -> bool {
        self.params.sort_intensity
    }
    #[getter]
    fn smoothness(&self) -> String {
        self.params.smoothness.to_string()
    }
    #[getter]
    fn darkfield_ratio(&self) -> f64 {
        self.params.darkfield_ratio
    }
    #[getter]
    fn flat_min(&self) -> f32 {
        self.transform_params.flat_min
    }
    #[getter]
    fn clip_negative(&self) -> bool {
        self.transform_params.clip_negative
    }
}

impl Basic {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Fitted>> {
        self.fitted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One of the fitted arrays as numpy, or None before `fit`.
    fn field<'py>(
        &self,
        py: Python<'py>,
        pick: impl FnOnce(&Fields) -> (Vec<usize>, Vec<f32>),
    ) -> PyResult<Option<Bound<'py, PyArrayDyn<f32>>>> {
        let picked = self.lock().as_ref().map(|f| pick(&f.fields));
        picked
            .map(|(shape, values)| to_numpy(py, &shape, values))
            .transpose()
    }

    /// The fit of `lamino flatfield fit`: every image resampled to the working grid (read where
    /// it lies), then the GPU fit, without the GIL.
    fn fit_images(&self, py: Python<'_>, images: &PyReadonlyArrayDyn<'_, f32>) -> PyResult<Fitted> {
        let [_, height, width] = shape3(images);
        let values = images.as_slice()?;
        let fit = py.detach(|| -> PyResult<_> {
            let mut pre = Preprocessor::new(height, width, self.params.working_size)
                .map_err(flatfield_error)?;
            for image in values.chunks_exact(height * width) {
                pre.push(image).map_err(flatfield_error)?;
            }
            let prepared = pre.finish(&self.params).map_err(flatfield_error)?;
            let lease = Lease::take(&self.device)?;
            let fit = fit_prepared(lease.ctx(), &prepared, height, width, &self.params, |_| {})
                .map_err(flatfield_error)?;
            lease.give_back();
            Ok(fit)
        })?;
        Ok(Fitted {
            fields: fit.fields,
            report: fit.report,
        })
    }

    /// The correction of `lamino flatfield apply`, a device batch at a time, without the GIL.
    fn correct<'py>(
        &self,
        py: Python<'py>,
        fields: &Fields,
        images: &PyReadonlyArrayDyn<'_, f32>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let shape = shape3(images);
        if [shape[1], shape[2]] != [fields.height, fields.width] {
            return Err(flatfield_error(FlatfieldError::FieldsMismatch {
                fields_h: fields.height,
                fields_w: fields.width,
                height: shape[1],
                width: shape[2],
            }));
        }
        let values = images.as_slice()?;
        let corrected = py.detach(|| -> PyResult<Vec<f32>> {
            let lease = Lease::take(&self.device)?;
            let plan = TransformPlan::new(lease.ctx(), fields, &self.transform_params)
                .map_err(flatfield_error)?;
            let mut out = Vec::with_capacity(values.len());
            for batch in values.chunks(plan.batch() * fields.height * fields.width) {
                out.extend(plan.apply(batch).map_err(flatfield_error)?);
            }
            // The plan's buffers go before the device is handed on.
            drop(plan);
            lease.give_back();
            Ok(out)
        })?;
        to_numpy(py, &shape, corrected)
    }
}

/// The error of `BasicParams::validate`, with the Python names of the parameters where they
/// differ from the core's.
fn parameter_error(e: FlatfieldError) -> PyErr {
    match e {
        FlatfieldError::BadParameter { name, value, need } => {
            let name = match name {
                "optimization_tolerance" => "optimization_tol",
                "reweighting_tolerance" => "reweighting_tol",
                "lambda_flatfield" => "smoothness_flatfield",
                "lambda_darkfield" => "smoothness_darkfield",
                other => other,
            };
            input_error(name, format!("{value}: needs {need}"))
        }
        e => flatfield_error(e),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Basic>()
}
