//! Array files in the field's formats: NumPy `.npy` (through ndarray-npy), image stacks and
//! volumes ([`Stack`]: `.npy` and multi-page TIFF, read image by image), DXchange HDF5 scans with
//! flat/dark normalisation of the intensities they hold, the geometry's JSON file
//! ([`Geometry::read_json`](crate::Geometry::read_json)), and PNG previews.
//!
//! Writers never damage earlier results: the files of one command run form an [`OutputSet`],
//! staged and moved into place together once all are complete and on disk (a single file through
//! [`write_atomically`], a one-file set).
//!
//! Readers treat every size in a header as a claim: it is checked against the file's length,
//! with checked arithmetic, before anything is allocated from it.

mod angles;
mod dxchange;
mod geometry_file;
mod h5;
mod normalize;
mod npy;
mod nxtomo;
mod output_set;
mod pixel_size;
mod shifts;
mod stack;
mod text;
mod volume;
mod zarr;

pub use angles::{angles_in_radians, check_radians, AngleUnit, NotRadians, MIN_UNITLESS_SPAN_DEG};
pub use dxchange::{
    read_dxchange, read_dxchange_with, read_volume_h5, write_dxchange, write_volume_h5,
    DxchangeReader, Scan, ScanInfo, ScanOptions, StackInfo,
};
pub use dxchange::{read_pixel_size, CAMERA_PIXEL_SIZE_PATH, MAGNIFICATION_PATH, PIXEL_SIZE_PATHS};
pub use h5::{SampleType, MAX_COMPRESSION_RATIO};
pub(crate) use normalize::attenuation;
pub use normalize::{
    minus_log, normalize, ClampCount, FieldMeans, NormalizeError, Normalized, MAX_CLAMPED_FRACTION,
    RATIO_FLOOR,
};
pub use npy::{
    f32_npy_header, read_complex_npy, read_f32_npy, write_complex_npy, write_f32_npy, ComplexArray,
    Dtype, NpyReader,
};
pub use nxtomo::{NxtomoInfo, NxtomoReader, StatedLength, NO_ENTRY as NXTOMO_NO_ENTRY};
pub use output_set::{write_atomically, OutputSet, STAGING_PREFIX};
pub use pixel_size::{LengthUnit, PixelSize};
pub use shifts::{read_shifts, write_shifts, SHIFTS_HEADER};
pub use stack::{read_stack, Pixels, Stack, StackFormat, StackReader, StackWriter};
pub use text::{
    number_as_typed, parse_angle_list, read_text, AngleList, TextError, MAX_TEXT_BYTES,
};
pub use volume::{
    central_slices, central_slices_of, read_tiff_volume, write_calibrated_volume_files,
    write_tiff_volume, write_volume, write_volume_as, write_volume_files, CentralSlice,
    SlabVisitor, VolumeSlabs,
};
pub use zarr::{create_store, ome_metadata, pyramid_shapes, ZarrOptions, ZarrPart};

use std::path::{Path, PathBuf};
use thiserror::Error;

/// The format a file's extension names, for messages: readers open files by their extension.
fn format_name(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("npy") => ".npy",
        Some("tif" | "tiff") => "TIFF",
        Some("h5" | "hdf5") => "HDF5",
        Some("json") => "JSON",
        _ => "array",
    }
}

/// Errors reading or writing array files; each names the file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum IoError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    /// A projections' shifts file (`--shifts`) that does not fit the scan.
    #[error("shifts file {path}: {reason}")]
    Shifts { path: PathBuf, reason: String },
    /// A file read as a NumPy array does not start with `.npy`'s magic string.
    #[error(
        "{path} is not a NumPy .npy file{found} (it lacks the \\x93NUMPY magic string); this input \
         takes an .npy array"
    )]
    NotNpy { path: PathBuf, found: &'static str },
    /// The file is not a valid file of the format its extension names.
    #[error("{path} is not a valid {} file: {reason}", format_name(path))]
    Corrupt { path: PathBuf, reason: String },
    /// The element type is not one lamino reads here.
    #[error("{path} holds dtype '{descr}'; expected {expected}")]
    UnsupportedDtype {
        path: PathBuf,
        descr: String,
        expected: &'static str,
    },
    /// The header's shape needs a different number of data bytes than the file holds (truncated,
    /// padded or a forged header); checked before anything is allocated from the shape.
    #[error("{path}: the header's shape needs {claimed} bytes of data, but the file holds {actual} after the header")]
    DataSize {
        path: PathBuf,
        claimed: u64,
        actual: u64,
    },
    /// An axis has length zero.
    #[error("{path} has shape {shape:?}: every axis must have at least one element")]
    ZeroSize { path: PathBuf, shape: Vec<usize> },
    /// The output could not be written.
    #[error("cannot write {path}: {reason}")]
    Write { path: PathBuf, reason: String },
    /// A run failed before its [`OutputSet`] was committed: nothing in `dir` changed.
    #[error("{reason}; the previous outputs in {dir} are unchanged")]
    Unchanged { dir: PathBuf, reason: String },
    /// A run failed before its [`OutputSet`] was committed in a directory it made: nothing was
    /// written (the directory is removed again).
    #[error("{reason}; nothing was written to {dir}")]
    NothingWritten { dir: PathBuf, reason: String },
    /// A file the command reads is also one it would write (or replace): refused before
    /// anything is written.
    #[error("{input} is an input of this command and also one of its outputs ({output}): writing would destroy the input; choose another output")]
    InputIsOutput { input: PathBuf, output: PathBuf },
    /// The file exists but HDF5 cannot open it (not HDF5, truncated or corrupt).
    #[error("{path} is not a readable HDF5 file: {reason}")]
    NotHdf5 { path: PathBuf, reason: String },
    /// The file is shorter than its HDF5 superblock says: it was cut off (a copy or a write
    /// that did not finish).
    #[error("{path} is truncated: its HDF5 superblock records {recorded} bytes but the file has {actual}")]
    Truncated {
        path: PathBuf,
        recorded: u64,
        actual: u64,
    },
    /// A dataset or TIFF page claims more data than the file's bytes can hold (see
    /// [`MAX_COMPRESSION_RATIO`]; TIFF pages: [`StackReader`]): the file is corrupt, and nothing
    /// is allocated for the claim.
    #[error(
        "{path}: {dataset} claims shape {shape:?} of {sample}, more than a file of {file_bytes} \
         bytes can hold; the file is corrupt"
    )]
    ImplausibleSize {
        path: PathBuf,
        dataset: String,
        shape: Vec<u64>,
        sample: String,
        file_bytes: u64,
    },
    /// The file needs an HDF5 feature the built-in pure-Rust reader lacks (a filter plugin such
    /// as LZF); the `hdf5-sys` build reads it through the system libhdf5.
    #[error(
        "{path}: {dataset} uses {what}, which lamino's built-in HDF5 reader does not decode; \
         build lamino with `--features hdf5-sys` (links the system libhdf5 and its filter plugins) \
         to read it"
    )]
    NeedsHdf5Sys {
        path: PathBuf,
        dataset: String,
        what: String,
    },
    /// The angles' `units` attribute names a unit other than degrees or radians.
    #[error("{path}: {dataset} has units {units:?}; expected degrees or radians")]
    ThetaUnits {
        path: PathBuf,
        dataset: String,
        units: String,
    },
    /// Angles without a stated unit that do not look like degrees: all within 2 pi (radians?) or
    /// spanning less than [`MIN_UNITLESS_SPAN_DEG`] degrees.
    #[error(
        "{path}: {dataset} gives no unit and its angles run from {min} to {max}, which looks like \
         radians (all within 2 pi) or a span too small for a scan in degrees; say which with \
         --theta-units deg|rad"
    )]
    AmbiguousAngles {
        path: PathBuf,
        dataset: String,
        min: f64,
        max: f64,
    },
    /// An angle too large for the device's float32 once in radians.
    #[error(
        "{path}: {dataset} angle {index} is {value} {unit}, beyond the float32 range of the \
         device's angles; expected the angles of a scan"
    )]
    AngleOutOfRange {
        path: PathBuf,
        dataset: String,
        index: usize,
        value: f64,
        unit: AngleUnit,
    },
    /// Two or more projections, all at one angle: no rotation to reconstruct from.
    #[error(
        "{path}: {dataset} gives all {count} projections the angle {value} {unit}: they span no \
         rotation; expected the angles of a scan"
    )]
    NoRotation {
        path: PathBuf,
        dataset: String,
        count: usize,
        value: f64,
        unit: AngleUnit,
    },
    /// The file states one angle unit and `--theta-units` another.
    #[error("{path}: {dataset} says its angles are in {stated} but --theta-units says {option}; drop --theta-units or fix the file's units attribute")]
    AngleUnitConflict {
        path: PathBuf,
        dataset: String,
        stated: AngleUnit,
        option: AngleUnit,
    },
    /// Angles the file or `--theta-units` says are radians that cannot be.
    #[error("{path}: {dataset} in radians (by its units attribute or --theta-units): {source}")]
    NotRadians {
        path: PathBuf,
        dataset: String,
        source: angles::NotRadians,
    },
    /// A block of frames outside the dataset was asked for.
    #[error("{path}: rows {range:?} of {dataset} were asked for; it has {len}")]
    BadRange {
        path: PathBuf,
        dataset: String,
        range: std::ops::Range<usize>,
        len: usize,
    },
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
    #[error("{path} has {theta} angles in {angles} but {projections} projections")]
    ThetaLength {
        path: PathBuf,
        angles: String,
        theta: usize,
        projections: usize,
    },
    /// A finite float64 value is beyond float32's range (magnitude above about 3.4e38), so it has
    /// no f32 to be read as.
    #[error(
        "{path}: value {index} is {value:e}, beyond float32's range (magnitude at most {:e}); \
         rescale the data",
        f32::MAX
    )]
    OutOfRange {
        path: PathBuf,
        index: usize,
        value: f64,
    },
    /// A file of a folder of single-image TIFFs does not fit the folder's stack (several pages,
    /// or a size or sample type other than the first file's).
    #[error("{file} (in the TIFF folder {folder}): {reason}")]
    FolderFrame {
        folder: PathBuf,
        file: PathBuf,
        reason: String,
    },
    /// A value is NaN or infinite.
    #[error("{path}: {dataset} value {index} is {value}; expected finite values")]
    NonFinite {
        path: PathBuf,
        dataset: String,
        index: usize,
        value: f64,
    },
    /// Reading the file whole needs more host memory than there is.
    #[error(transparent)]
    HostMemory(#[from] crate::memory::HostMemoryError),
    /// HDF5 failed to read a dataset that exists (for example a type it cannot convert).
    #[error("{path}: cannot read {dataset}: {reason}")]
    Hdf5 {
        path: PathBuf,
        dataset: String,
        reason: String,
    },
}
