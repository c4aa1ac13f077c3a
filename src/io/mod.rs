//! Array files in the field's formats: NumPy `.npy` (complex64, float32), DXchange HDF5 scans
//! with flat/dark normalisation of the intensities they hold, float32 multi-page TIFF volumes and
//! PNG previews.

mod dxchange;
mod normalize;
mod npy;
mod volume;

pub use dxchange::{read_dxchange, write_dxchange, write_volume_h5, Scan};
pub(crate) use normalize::attenuation;
pub use normalize::{normalize, NormalizeError, Normalized, RATIO_FLOOR};
pub use npy::{npy_descr, read_complex_npy, write_complex_npy, ComplexArray};
pub use volume::{
    central_slices, read_tiff_volume, write_atomically, write_png_preview, write_tiff_volume, Stack,
};

use std::path::PathBuf;
use thiserror::Error;

/// Errors reading or writing array files; each names the file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum IoError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    /// The file is not a valid .npy file.
    #[error("{path} is not a valid .npy file: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// The element type is not one lamino reads here.
    #[error("{path} holds dtype '{descr}'; expected complex64 ('<c8') or float32 ('<f4')")]
    UnsupportedDtype { path: PathBuf, descr: String },
    /// An axis has length zero.
    #[error("{path} has shape {shape:?}: every axis must have at least one element")]
    ZeroSize { path: PathBuf, shape: Vec<usize> },
    /// The output could not be written.
    #[error("cannot write {path}: {reason}")]
    Write { path: PathBuf, reason: String },
    /// The file exists but HDF5 cannot open it (not HDF5, truncated or corrupt).
    #[error("{path} is not a readable HDF5 file: {reason}")]
    NotHdf5 { path: PathBuf, reason: String },
    /// A required dataset is absent.
    #[error("{path} has no dataset {dataset}")]
    MissingDataset { path: PathBuf, dataset: String },
    /// A dataset has the wrong number of axes or disagrees with the others.
    #[error("{path}: {dataset} has shape {shape:?}; expected {expected}")]
    BadShape {
        path: PathBuf,
        dataset: String,
        shape: Vec<usize>,
        expected: String,
    },
    /// The angle list and the projections differ in length.
    #[error("{path} has {theta} angles in /exchange/theta but {projections} projections in /exchange/data")]
    ThetaLength {
        path: PathBuf,
        theta: usize,
        projections: usize,
    },
    /// A value is NaN or infinite.
    #[error("{path}: {dataset} value {index} is {value}; expected finite values")]
    NonFinite {
        path: PathBuf,
        dataset: String,
        index: usize,
        value: f64,
    },
    /// HDF5 failed to read a dataset that exists (for example a type it cannot convert).
    #[error("{path}: cannot read {dataset}: {reason}")]
    Hdf5 {
        path: PathBuf,
        dataset: String,
        reason: String,
    },
}
