//! numpy in and out. An argument that is already a C-contiguous array of the dtype lamino
//! computes in is read where it lies (no copy); anything else numpy can turn into numbers (other
//! float or integer dtypes, Fortran order, strided views, nested lists) is converted once, by
//! `numpy.ascontiguousarray`. Results leave as numpy arrays that own the Rust buffer (no copy).

use ndarray::{ArrayD, IxDyn};
use numpy::{
    Complex32, Element, IntoPyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyAnyMethods;

use crate::errors::input_error;

/// The element types lamino reads: `f32` (arrays), `f64` (angles, scalars' lists) and
/// `Complex32` (the operator's arrays).
pub(crate) trait Real: Element + Copy + Send + Sync {
    /// numpy's name of the dtype, for the conversion and the messages.
    const DTYPE: &'static str;
    /// The numpy dtype kinds converted to it: real numbers, and complex ones for a complex type
    /// (numpy would drop the imaginary part converting complex to real).
    const KINDS: &'static [&'static str] = &["f", "i", "u"];
    fn is_finite(self) -> bool;
}

impl Real for f32 {
    const DTYPE: &'static str = "float32";
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
}

impl Real for f64 {
    const DTYPE: &'static str = "float64";
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
}

impl Real for Complex32 {
    const DTYPE: &'static str = "complex64";
    const KINDS: &'static [&'static str] = &["c", "f", "i", "u"];
    fn is_finite(self) -> bool {
        self.re.is_finite() && self.im.is_finite()
    }
}

/// Argument `name` as a C-contiguous array of `T` with `ndim` dimensions and only finite values:
/// read in place when it is one already, else converted once. Refused (`InputError` naming the
/// argument) when it is not numeric (complex, bool, object, strings), has another number of
/// dimensions, is empty or holds a NaN or an infinity.
pub(crate) fn read_array<'py, T: Real>(
    value: &Bound<'py, PyAny>,
    name: &str,
    ndim: usize,
) -> PyResult<PyReadonlyArrayDyn<'py, T>> {
    let py = value.py();
    let array = match value.cast::<PyArrayDyn<T>>() {
        Ok(a) if a.is_c_contiguous() => a.clone(),
        _ => {
            let numpy = py.import("numpy")?;
            // The dtype kind first: numpy would cast complex (dropping the imaginary part), bool
            // and strings of digits without complaint.
            let converted = numpy.call_method1("asarray", (value,)).map_err(|e| {
                input_error(name, format!("cannot be read as an array of numbers ({e})"))
            })?;
            let kind: String = converted.getattr("dtype")?.getattr("kind")?.extract()?;
            if !T::KINDS.contains(&kind.as_str()) {
                let dtype = converted.getattr("dtype")?.str()?.to_string();
                return Err(input_error(
                    name,
                    format!(
                        "dtype {dtype} is not a number type lamino reads (expected {}, or another \
                         float or integer dtype, converted once)",
                        T::DTYPE
                    ),
                ));
            }
            numpy
                .call_method1("ascontiguousarray", (converted, T::DTYPE))?
                .cast_into::<PyArrayDyn<T>>()
                .map_err(|e| input_error(name, e))?
        }
    };
    let readonly = array.try_readonly().map_err(|e| input_error(name, e))?;
    let shape = readonly.shape().to_vec();
    if shape.len() != ndim {
        return Err(input_error(
            name,
            format!(
                "expected {ndim} dimensions, got {} (shape {shape:?})",
                shape.len()
            ),
        ));
    }
    if shape.contains(&0) {
        return Err(input_error(name, format!("shape {shape:?} is empty")));
    }
    let values = readonly.as_slice().map_err(|e| input_error(name, e))?;
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        let index = unravel(i, &shape);
        return Err(input_error(
            name,
            format!(
                "value at index {index:?} is not finite: the input must hold no NaN or infinity"
            ),
        ));
    }
    Ok(readonly)
}

/// The index in an array of `shape` of flat (C-order) position `i`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (slot, &n) in index.iter_mut().zip(shape).rev() {
        *slot = i % n;
        i /= n;
    }
    index
}

/// The shape of a 3D array [`read_array`] returned.
pub(crate) fn shape3<T: Real>(array: &PyReadonlyArrayDyn<'_, T>) -> [usize; 3] {
    let s = array.shape();
    [s[0], s[1], s[2]]
}

/// `values` (C order) as a numpy array of `shape` that owns them.
pub(crate) fn to_numpy<'py, T: Real>(
    py: Python<'py>,
    shape: &[usize],
    values: Vec<T>,
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let array = ArrayD::from_shape_vec(IxDyn(shape), values).map_err(|e| {
        crate::errors::LaminoError::new_err(format!("result of shape {shape:?}: {e}"))
    })?;
    Ok(array.into_pyarray(py))
}
