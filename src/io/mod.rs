//! Array files in the field's formats: NumPy `.npy` (complex64, float32), float32 multi-page TIFF
//! volumes and PNG previews.

mod npy;
mod volume;

pub use npy::{npy_descr, read_complex_npy, write_complex_npy, ComplexArray};
pub use volume::{
    central_slices, read_tiff_volume, write_atomically, write_png_preview, write_tiff_volume,
    Volume,
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
}
