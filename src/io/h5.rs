//! The one module that calls the HDF5 libraries.
//!
//! Reading goes through `hdf5-reader` and writing through `hdf5-writer`: pure Rust, so building
//! lamino needs no system HDF5. The reader decodes deflate, shuffle, Fletcher-32, szip, n-bit and
//! scale-offset itself, and LZF (h5py's filter 32000) through [`lzf_decompress`] registered here.
//! With the cargo feature `hdf5-sys`, a dataset the pure-Rust reader cannot decode (a plugin
//! filter such as Blosc) is read through the system libhdf5 (`hdf5-metno`) instead; without the
//! feature such a dataset is an [`IoError::NeedsHdf5Sys`] naming the filter and the feature.
//! Metadata (shapes, types, angles, attributes) is always read in Rust.
//!
//! Sizes read from a file are claims: every dataset's decoded size is checked against what the
//! file's bytes can hold before anything is allocated for it (see [`MAX_COMPRESSION_RATIO`]).

use std::fmt;
use std::io::BufWriter;
use std::ops::Range;
use std::path::{Path, PathBuf};

use hdf5_reader::error::Error as ReadError;
use hdf5_reader::messages::datatype::Datatype;
use hdf5_reader::messages::filter_pipeline::FilterDescription;
use hdf5_reader::{Attribute, FilterRegistry, Hdf5File, OpenOptions, SliceInfo, SliceInfoElem};
use hdf5_writer::{AttributeBuilder, DatasetBuilder, Hdf5Builder, Hdf5Writer, WriteOptions};

use super::IoError;

/// The largest ratio of decoded to stored bytes accepted for a chunked dataset: deflate, the
/// filter of nearly every DXchange file, cannot exceed 1032:1. A chunked dataset claiming more
/// data than its file could hold at that ratio is refused as corrupt (its stored chunks cannot
/// produce it) rather than allocated; an unchunked one must fit in the file as it is.
pub const MAX_COMPRESSION_RATIO: u64 = 1032;

/// The element type a dataset stores. Every one is read as f32 (stacks) or f64 (angles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleType {
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F32,
    F64,
}

impl fmt::Display for SampleType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::U8 => "uint8",
            Self::U16 => "uint16",
            Self::U32 => "uint32",
            Self::U64 => "uint64",
            Self::I8 => "int8",
            Self::I16 => "int16",
            Self::I32 => "int32",
            Self::I64 => "int64",
            Self::F32 => "float32",
            Self::F64 => "float64",
        })
    }
}

impl SampleType {
    fn of(datatype: &Datatype) -> Option<Self> {
        Some(match *datatype {
            Datatype::FixedPoint { size, signed, .. } => match (size, signed) {
                (1, false) => Self::U8,
                (2, false) => Self::U16,
                (4, false) => Self::U32,
                (8, false) => Self::U64,
                (1, true) => Self::I8,
                (2, true) => Self::I16,
                (4, true) => Self::I32,
                (8, true) => Self::I64,
                _ => return None,
            },
            Datatype::FloatingPoint { size: 4, .. } => Self::F32,
            Datatype::FloatingPoint { size: 8, .. } => Self::F64,
            _ => return None,
        })
    }

    fn bytes(self) -> u64 {
        match self {
            Self::U8 | Self::I8 => 1,
            Self::U16 | Self::I16 => 2,
            Self::U32 | Self::I32 | Self::F32 => 4,
            Self::U64 | Self::I64 | Self::F64 => 8,
        }
    }
}

/// h5py's LZF filter, registered with the HDF Group as 32000.
const LZF_FILTER: u16 = 32000;

/// Filters registered with the HDF Group that lamino meets in the field and does not decode (LZF
/// and LZ4 it does), by id, so that an error names the filter rather than a number.
const KNOWN_FILTERS: [(u16, &str); 8] = [
    (307, "bzip2"),
    (32001, "Blosc"),
    (32008, "bitshuffle"),
    (32013, "ZFP"),
    (32015, "Zstandard"),
    (32017, "SZ"),
    (32024, "SZ3"),
    (32026, "Blosc2"),
];

/// `what` of the reader's unsupported-filter error ("filter id 32001") with the filter's name
/// when it is a known one ("Blosc (32001)").
fn filter_name(what: &str) -> String {
    let id = what
        .strip_prefix("filter id ")
        .and_then(|id| id.trim().parse::<u16>().ok());
    match id.and_then(|id| KNOWN_FILTERS.iter().find(|(known, _)| *known == id)) {
        Some((id, name)) => format!("{name} ({id})"),
        None => what.to_string(),
    }
}

/// The LZF filter as h5py registers it: client data `[version, lzf version, chunk bytes]`, the
/// last the decoded size (0 when h5py did not know it).
fn lzf_filter(
    filter: &FilterDescription,
    data: &[u8],
    _element_size: usize,
) -> hdf5_reader::error::Result<Vec<u8>> {
    let expected = filter.client_data.get(2).copied().unwrap_or(0) as usize;
    lzf_decompress(data, expected).map_err(|e| ReadError::DecompressionError(format!("LZF: {e}")))
}

/// Decodes an LZF stream (liblzf's format: a control byte below 32 starts a run of that many
/// plus one literal bytes; any other is a back reference of length `ctrl >> 5` (7: plus the next
/// byte) plus 2, at distance `(ctrl & 31) << 8` plus the next byte plus 1). `expected` is the
/// decoded size when known (0: bounded by LZF's largest ratio, 88:1, instead). Every length and
/// distance is checked: a corrupt stream is an error, never a read outside the buffers.
pub(super) fn lzf_decompress(input: &[u8], expected: usize) -> Result<Vec<u8>, String> {
    // A 3-byte back reference decodes to at most 264 bytes.
    let limit = if expected > 0 {
        expected
    } else {
        input.len().saturating_mul(88)
    };
    let mut out: Vec<u8> = Vec::with_capacity(expected);
    let mut i = 0;
    let byte = |i: usize| {
        input
            .get(i)
            .copied()
            .ok_or_else(|| format!("the stream ends inside a token at byte {i}"))
    };
    while i < input.len() {
        let ctrl = input[i] as usize;
        i += 1;
        if ctrl < 32 {
            let run = input
                .get(i..i + ctrl + 1)
                .ok_or_else(|| format!("a literal run of {} bytes passes the end", ctrl + 1))?;
            out.extend_from_slice(run);
            i += ctrl + 1;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += byte(i)? as usize;
                i += 1;
            }
            len += 2;
            let distance = ((ctrl & 0x1f) << 8) + byte(i)? as usize + 1;
            i += 1;
            let start = out
                .len()
                .checked_sub(distance)
                .ok_or_else(|| format!("a back reference of {distance} bytes before the start"))?;
            // Byte by byte: the reference may overlap what it writes.
            for k in start..start + len {
                out.push(out[k]);
            }
        }
        if out.len() > limit {
            return Err(format!("decodes to more than {limit} bytes"));
        }
    }
    if expected > 0 && out.len() != expected {
        return Err(format!("decoded {} bytes; expected {expected}", out.len()));
    }
    Ok(out)
}

/// An HDF5 file open for reading.
pub(super) struct H5File {
    path: PathBuf,
    file: Hdf5File,
    len: u64,
    /// The same file through libhdf5, opened when a dataset first needs it.
    #[cfg(feature = "hdf5-sys")]
    system: std::sync::OnceLock<Result<hdf5::File, String>>,
}

/// The dataset a volume is written to (`write_volume` of `.h5`): `/volume`.
pub(super) const VOLUME: &str = "/volume";

/// A numeric dataset whose shape and type have been checked.
pub(super) struct H5Dataset {
    pub name: String,
    pub shape: Vec<usize>,
    pub sample: SampleType,
    dataset: hdf5_reader::Dataset,
    /// Read through libhdf5: the pure-Rust reader lacks one of its filters.
    #[cfg(feature = "hdf5-sys")]
    through_system: bool,
}

/// The innermost error, without the dataset-path context the reader wraps around it.
fn root(e: &ReadError) -> &ReadError {
    match e {
        ReadError::Context { source, .. } => root(source),
        other => other,
    }
}

impl H5File {
    /// Opens `path`, telling a missing or unreadable file from one that is not HDF5 or is
    /// truncated (shorter than its superblock's end-of-file address, as libhdf5 checks).
    pub fn open(path: &Path) -> Result<Self, IoError> {
        let len = std::fs::metadata(path)
            .and_then(|m| {
                if m.is_file() {
                    Ok(m.len())
                } else {
                    Err(std::io::Error::other("not a regular file"))
                }
            })
            .map_err(|e| IoError::Read {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        let mut filters = FilterRegistry::new();
        filters.register(LZF_FILTER, Box::new(lzf_filter));
        let options = OpenOptions::default().with_filter_registry(filters);
        let file = Hdf5File::open_with_options(path, options).map_err(|e| match root(&e) {
            // Too short to hold a superblock is a file that is not (or no longer) HDF5.
            ReadError::Io(io) if io.kind() != std::io::ErrorKind::UnexpectedEof => IoError::Read {
                path: path.to_path_buf(),
                reason: io.to_string(),
            },
            _ => IoError::NotHdf5 {
                path: path.to_path_buf(),
                reason: e.to_string(),
            },
        })?;
        let sb = file.superblock();
        let end = sb.base_address.checked_add(sb.eof_address);
        if end.is_none_or(|end| end > len) {
            return Err(IoError::Truncated {
                path: path.to_path_buf(),
                recorded: end.unwrap_or(u64::MAX),
                actual: len,
            });
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            len,
            #[cfg(feature = "hdf5-sys")]
            system: std::sync::OnceLock::new(),
        })
    }

    fn error(&self, dataset: &str, e: ReadError) -> IoError {
        match root(&e) {
            ReadError::UnsupportedFilter(what) => IoError::NeedsHdf5Sys {
                path: self.path.clone(),
                dataset: dataset.to_string(),
                what: format!("the filter {}", filter_name(what)),
            },
            _ => IoError::Hdf5 {
                path: self.path.clone(),
                dataset: dataset.to_string(),
                reason: e.to_string(),
            },
        }
    }

    /// The numeric dataset at `name`, or `None` when the file has no object there. Its decoded
    /// size is checked against the file's length, and one row is read to find out whether the
    /// pure-Rust reader decodes it (else libhdf5 does, with the `hdf5-sys` feature).
    pub fn dataset(&self, name: &str) -> Result<Option<H5Dataset>, IoError> {
        let dataset = match self.file.dataset(name) {
            Ok(d) => d,
            Err(e) => {
                return match root(&e) {
                    ReadError::DatasetNotFound(_) | ReadError::GroupNotFound(_) => Ok(None),
                    _ => Err(self.error(name, e)),
                }
            }
        };
        let sample = SampleType::of(dataset.dtype()).ok_or_else(|| IoError::Hdf5 {
            path: self.path.clone(),
            dataset: name.to_string(),
            reason: format!(
                "its element type {:?} is not a number lamino reads (integers of 1-8 bytes, \
                 float32, float64)",
                dataset.dtype()
            ),
        })?;
        let dims = dataset.shape().to_vec();
        let limit = if dataset.chunks().is_some() {
            self.len.saturating_mul(MAX_COMPRESSION_RATIO)
        } else {
            self.len
        };
        let fits = dims
            .iter()
            .try_fold(sample.bytes(), |acc, &d| acc.checked_mul(d))
            .is_some_and(|bytes| bytes <= limit);
        let shape: Option<Vec<usize>> = dims.iter().map(|&d| usize::try_from(d).ok()).collect();
        let (true, Some(shape)) = (fits, shape) else {
            return Err(IoError::ImplausibleSize {
                path: self.path.clone(),
                dataset: name.to_string(),
                shape: dims,
                sample: sample.to_string(),
                file_bytes: self.len,
            });
        };
        let d = H5Dataset {
            name: name.to_string(),
            shape,
            sample,
            dataset,
            #[cfg(feature = "hdf5-sys")]
            through_system: false,
        };
        self.probe(d).map(Some)
    }

    /// Reads the first row of `d` to learn whether the pure-Rust reader decodes it.
    fn probe(&self, d: H5Dataset) -> Result<H5Dataset, IoError> {
        if d.shape.contains(&0) {
            return Ok(d);
        }
        let first = if d.shape.is_empty() { 0..0 } else { 0..1 };
        match self.read_pure(&d, first, |v| v) {
            Ok(_) => Ok(d),
            #[cfg(feature = "hdf5-sys")]
            Err(IoError::NeedsHdf5Sys { .. }) => {
                let d = H5Dataset {
                    through_system: true,
                    ..d
                };
                let first = (d.shape.len() == 3).then_some(0..1);
                self.read_system::<f64>(&d, first)?;
                Ok(d)
            }
            Err(e) => Err(e),
        }
    }

    /// Rows `rows` of `d` along its first axis (all of a scalar), converted to f32.
    pub fn read_rows_f32(&self, d: &H5Dataset, rows: Range<usize>) -> Result<Vec<f32>, IoError> {
        #[cfg(feature = "hdf5-sys")]
        if d.through_system {
            return self.read_system::<f32>(d, Some(rows));
        }
        self.read_pure(d, rows, |v| v as f32)
    }

    /// All of `d` converted to f64.
    pub fn read_all_f64(&self, d: &H5Dataset) -> Result<Vec<f64>, IoError> {
        #[cfg(feature = "hdf5-sys")]
        if d.through_system {
            return self.read_system::<f64>(d, None);
        }
        let rows = 0..d.shape.first().copied().unwrap_or(1);
        self.read_pure(d, rows, |v| v)
    }

    /// The groups at the root of the file, each with its NeXus class (the `NX_class` attribute)
    /// when it has one.
    pub fn root_groups(&self) -> Result<Vec<(String, Option<String>)>, IoError> {
        let failed = |e| self.error("/", e);
        let root = self.file.root_group().map_err(failed)?;
        let mut groups = Vec::new();
        for group in root.groups().map_err(failed)? {
            let class = group
                .attributes()
                .map_err(|e| self.error(group.name(), e))?
                .into_iter()
                .find(|a| a.name == "NX_class")
                .map(|a| a.read_string())
                .transpose()
                .map_err(|e| self.error(group.name(), e))?;
            groups.push((group.name().trim_start_matches('/').to_string(), class));
        }
        Ok(groups)
    }

    /// The attribute `name` of `d`, if it has one, with its name for errors (`dataset@name`).
    fn attribute(&self, d: &H5Dataset, name: &str) -> Result<Option<(Attribute, String)>, IoError> {
        if !d.dataset.attributes().iter().any(|a| a.name == name) {
            return Ok(None);
        }
        let what = format!("{}@{name}", d.name);
        let attr = d
            .dataset
            .attribute(name)
            .map_err(|e| self.error(&what, e))?;
        Ok(Some((attr, what)))
    }

    /// The string attribute `name` of `d`, if it has one.
    pub fn string_attr(&self, d: &H5Dataset, name: &str) -> Result<Option<String>, IoError> {
        let Some((attr, what)) = self.attribute(d, name)? else {
            return Ok(None);
        };
        attr.read_string()
            .map(Some)
            .map_err(|e| self.error(&what, e))
    }

    /// The numeric attribute `name` of `d` (a scalar or an array of floats or integers, as h5py
    /// writes Python numbers and tuples), as f64, if it has one: NeXus's `vector` of a
    /// transformation, for one.
    pub fn f64_attr(&self, d: &H5Dataset, name: &str) -> Result<Option<Vec<f64>>, IoError> {
        let Some((attr, what)) = self.attribute(d, name)? else {
            return Ok(None);
        };
        let widen = |v: Vec<i64>| v.into_iter().map(|x| x as f64).collect::<Vec<f64>>();
        let values = match &attr.datatype {
            Datatype::FloatingPoint { size: 8, .. } => attr.read_1d::<f64>(),
            Datatype::FloatingPoint { size: 4, .. } => attr
                .read_1d::<f32>()
                .map(|v| v.into_iter().map(f64::from).collect()),
            Datatype::FixedPoint { size: 8, .. } => attr.read_1d::<i64>().map(widen),
            Datatype::FixedPoint { size: 4, .. } => attr
                .read_1d::<i32>()
                .map(|v| widen(v.into_iter().map(i64::from).collect())),
            other => {
                return Err(IoError::Hdf5 {
                    path: self.path.clone(),
                    dataset: what,
                    reason: format!("a numeric attribute was expected, found {other:?}"),
                })
            }
        };
        values.map(Some).map_err(|e| self.error(&what, e))
    }

    /// Reads rows `rows` (the whole dataset when it is a scalar) as the stored type and converts
    /// each value with `convert` from f64, which holds every stored value the conversion keeps
    /// (f32 targets round once either way).
    fn read_pure<T>(
        &self,
        d: &H5Dataset,
        rows: Range<usize>,
        convert: impl Fn(f64) -> T,
    ) -> Result<Vec<T>, IoError> {
        let selection = (!d.shape.is_empty()).then(|| SliceInfo {
            selections: d
                .shape
                .iter()
                .enumerate()
                .map(|(axis, &n)| {
                    let (start, end) = if axis == 0 {
                        (rows.start, rows.end)
                    } else {
                        (0, n)
                    };
                    SliceInfoElem::Slice {
                        start: start as u64,
                        end: end as u64,
                        step: 1,
                    }
                })
                .collect(),
        });
        macro_rules! read {
            ($t:ty) => {{
                let array = match &selection {
                    Some(s) => d.dataset.read_slice::<$t>(s),
                    None => d.dataset.read_array::<$t>(),
                };
                array
                    .map(|a| a.iter().map(|&v| convert(v as f64)).collect())
                    .map_err(|e| self.error(&d.name, e))
            }};
        }
        match d.sample {
            SampleType::U8 => read!(u8),
            SampleType::U16 => read!(u16),
            SampleType::U32 => read!(u32),
            SampleType::U64 => read!(u64),
            SampleType::I8 => read!(i8),
            SampleType::I16 => read!(i16),
            SampleType::I32 => read!(i32),
            SampleType::I64 => read!(i64),
            SampleType::F32 => read!(f32),
            SampleType::F64 => read!(f64),
        }
    }

    /// Reads through libhdf5 (which converts types itself): rows `rows` of a 3-axis dataset,
    /// or all of it.
    #[cfg(feature = "hdf5-sys")]
    fn read_system<T: hdf5::H5Type>(
        &self,
        d: &H5Dataset,
        rows: Option<Range<usize>>,
    ) -> Result<Vec<T>, IoError> {
        let failed = |reason: String| IoError::Hdf5 {
            path: self.path.clone(),
            dataset: d.name.clone(),
            reason: format!("through libhdf5 (feature hdf5-sys): {reason}"),
        };
        let file = self
            .system
            .get_or_init(|| {
                hdf5::silence_errors(true);
                hdf5::File::open(&self.path).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| failed(e.clone()))?;
        let dataset = file.dataset(&d.name).map_err(|e| failed(e.to_string()))?;
        match rows {
            Some(rows) if d.shape.len() == 3 => dataset
                .read_slice::<T, _, ndarray::Ix3>(ndarray::s![rows, .., ..])
                .map(|a| a.into_raw_vec_and_offset().0),
            _ => dataset.read_raw::<T>(),
        }
        .map_err(|e| failed(e.to_string()))
    }
}

/// An HDF5 file being assembled in memory, then written in one go.
#[derive(Default)]
pub(super) struct H5Writer {
    datasets: Vec<DatasetBuilder>,
}

impl H5Writer {
    /// Adds a contiguous dataset at `name` (groups on its path are created); `attrs` are string
    /// attributes.
    pub fn add<T: hdf5_writer::H5WriteElement>(
        &mut self,
        name: &str,
        shape: &[usize],
        values: &[T],
        attrs: &[(&str, &str)],
    ) -> Result<(), String> {
        let shape: Vec<u64> = shape.iter().map(|&n| n as u64).collect();
        // hdf5-writer takes paths relative to the root group.
        let mut dataset = DatasetBuilder::typed_data(name.trim_start_matches('/'), shape, values)
            .map_err(|e| format!("{name}: {e}"))?;
        for (key, value) in attrs {
            dataset = dataset.attribute(AttributeBuilder::fixed_string(*key, value));
        }
        self.datasets.push(dataset);
        Ok(())
    }

    /// Writes the file to `path` (created or truncated).
    pub fn write(self, path: &Path) -> Result<(), String> {
        let plan = self
            .datasets
            .into_iter()
            .fold(Hdf5Builder::new(), Hdf5Builder::dataset)
            .into_plan()
            .map_err(|e| e.to_string())?;
        let file = std::fs::File::create(path).map_err(|e| format!("creating the file: {e}"))?;
        let sink = Hdf5Writer::new(BufWriter::new(file), WriteOptions::default())
            .finish(plan)
            .map_err(|e| e.to_string())?;
        sink.into_inner()
            .map_err(|e| e.error().to_string())?
            .sync_all()
            .map_err(|e| format!("flushing the file: {e}"))
    }
}

/// The layout of an HDF5 file holding one contiguous little-endian float32 dataset at the root,
/// the file [`H5Writer`] writes for it: every byte before the data (superblock, root group,
/// dataset header) depends only on the name and the shape, so the values can follow a slab at a
/// time and the file never has to be assembled in memory.
pub(super) struct ContiguousF32 {
    /// The file's bytes before the data.
    pub prefix: Vec<u8>,
    /// Zero bytes after the data, up to the end-of-file address (8-byte alignment).
    pub suffix: u64,
}

/// Bytes of the version-2 superblock (8-byte offsets and lengths).
const SUPERBLOCK_BYTES: u64 = 48;
const UNDEFINED_ADDRESS: u64 = u64::MAX;

fn align8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// A version-2 object header holding `messages` (type, payload), checksummed.
fn object_header(messages: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (kind, payload) in messages {
        body.push(*kind);
        body.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        body.push(0);
        body.extend_from_slice(payload);
    }
    let mut bytes = b"OHDR".to_vec();
    bytes.push(2);
    // The width of the message-bytes length field: 1, 2 or 4 bytes.
    match body.len() {
        n if n <= u8::MAX as usize => bytes.extend_from_slice(&[0, n as u8]),
        n if n <= u16::MAX as usize => {
            bytes.push(1);
            bytes.extend_from_slice(&(n as u16).to_le_bytes());
        }
        n => {
            bytes.push(2);
            bytes.extend_from_slice(&(n as u32).to_le_bytes());
        }
    }
    bytes.extend_from_slice(&body);
    let checksum = hdf5_writer::jenkins_lookup3(&bytes);
    bytes.extend_from_slice(&checksum.to_le_bytes());
    bytes
}

/// The root group: compact link storage with one hard link, `name` -> `target`.
fn root_group(name: &str, target: u64) -> Vec<u8> {
    let mut link_info = vec![0, 0];
    link_info.extend_from_slice(&UNDEFINED_ADDRESS.to_le_bytes());
    link_info.extend_from_slice(&UNDEFINED_ADDRESS.to_le_bytes());
    let mut link = vec![1, 0, name.len() as u8];
    link.extend_from_slice(name.as_bytes());
    link.extend_from_slice(&target.to_le_bytes());
    object_header(&[(0x02, link_info), (0x0a, vec![0, 0]), (0x06, link)])
}

/// An attribute of the streamed dataset ([`ContiguousF32::with_attributes`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum AttrValue {
    /// A fixed-length, null-terminated ASCII or UTF-8 string (a scalar).
    Text(String),
    /// A vector of little-endian float64.
    Floats(Vec<f64>),
}

/// An attribute message (version 3), byte for byte what `hdf5-writer` encodes for
/// `AttributeBuilder::fixed_string` and `AttributeBuilder::vector::<f64>`.
fn attribute(name: &str, value: &AttrValue) -> Vec<u8> {
    let (datatype, dataspace, data) = match value {
        AttrValue::Text(text) => {
            let mut data = text.as_bytes().to_vec();
            data.push(0);
            // Class 3 (string), version 1; null-terminated; ASCII (0) or UTF-8 (1).
            let encoding = u32::from(!text.is_ascii());
            let mut datatype = (3u32 | (1 << 4) | ((encoding << 4) << 8))
                .to_le_bytes()
                .to_vec();
            datatype.extend_from_slice(&(data.len() as u32).to_le_bytes());
            (datatype, vec![2, 0, 0, 0], data)
        }
        AttrValue::Floats(values) => {
            // Class 1, version 1; little-endian IEEE float64: sign at bit 63, exponent at 52 of
            // 11 bits, mantissa at 0 of 52 bits, bias 1023.
            let mut datatype = (1u32 | (1 << 4) | ((0x20 | (63 << 8)) << 8))
                .to_le_bytes()
                .to_vec();
            datatype.extend_from_slice(&8u32.to_le_bytes());
            datatype.extend_from_slice(&0u16.to_le_bytes());
            datatype.extend_from_slice(&64u16.to_le_bytes());
            datatype.extend_from_slice(&[52, 11, 0, 52]);
            datatype.extend_from_slice(&1023u32.to_le_bytes());
            let mut dataspace = vec![2, 1, 0, 1];
            dataspace.extend_from_slice(&(values.len() as u64).to_le_bytes());
            let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            (datatype, dataspace, data)
        }
    };
    let mut bytes = vec![3, 0];
    bytes.extend_from_slice(&((name.len() + 1) as u16).to_le_bytes());
    bytes.extend_from_slice(&(datatype.len() as u16).to_le_bytes());
    bytes.extend_from_slice(&(dataspace.len() as u16).to_le_bytes());
    bytes.push(u8::from(!name.is_ascii()));
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&datatype);
    bytes.extend_from_slice(&dataspace);
    bytes.extend_from_slice(&data);
    bytes
}

/// The dataset header: shape, IEEE float32 little-endian, the default fill value (allocated
/// late, written if set), contiguous storage of `bytes` at `address`, and `attributes`.
fn f32_dataset(
    shape: &[u64],
    address: u64,
    bytes: u64,
    attributes: &[(&str, AttrValue)],
) -> Vec<u8> {
    let mut dataspace = vec![2, shape.len() as u8, 0, 1];
    for &n in shape {
        dataspace.extend_from_slice(&n.to_le_bytes());
    }
    // Class 1 (floating point), version 1; little-endian, implied mantissa normalisation, sign at
    // bit 31; 4 bytes: offset 0, precision 32, exponent at 23 of 8 bits, mantissa at 0 of 23
    // bits, bias 127.
    let mut datatype = (1u32 | (1 << 4) | ((0x20 | (31 << 8)) << 8))
        .to_le_bytes()
        .to_vec();
    datatype.extend_from_slice(&4u32.to_le_bytes());
    datatype.extend_from_slice(&0u16.to_le_bytes());
    datatype.extend_from_slice(&32u16.to_le_bytes());
    datatype.extend_from_slice(&[23, 8, 0, 23]);
    datatype.extend_from_slice(&127u32.to_le_bytes());
    let fill_value = vec![3, 2 | (2 << 2)];
    let mut layout = vec![3, 1];
    layout.extend_from_slice(&address.to_le_bytes());
    layout.extend_from_slice(&bytes.to_le_bytes());
    let mut messages = vec![
        (0x01, dataspace),
        (0x03, datatype),
        (0x05, fill_value),
        (0x08, layout),
    ];
    messages.extend(
        attributes
            .iter()
            .map(|(name, value)| (0x0c, attribute(name, value))),
    );
    object_header(&messages)
}

impl ContiguousF32 {
    /// The layout for a dataset `name` (a root-level name, 1 to 255 bytes of ASCII) of `shape`
    /// (no axis of length zero) with `attributes` (each message under 64 KiB).
    pub fn with_attributes(name: &str, shape: &[usize], attributes: &[(&str, AttrValue)]) -> Self {
        debug_assert!(name.is_ascii() && !name.is_empty() && name.len() <= 255);
        let shape: Vec<u64> = shape.iter().map(|&n| n as u64).collect();
        let bytes = shape.iter().product::<u64>() * 4;
        let root = SUPERBLOCK_BYTES;
        // Header lengths do not depend on the addresses they hold: size them with placeholders.
        let header = align8(root + root_group(name, 0).len() as u64);
        let data = align8(header + f32_dataset(&shape, 0, bytes, attributes).len() as u64);
        let eof = align8(data + bytes);
        let mut prefix = b"\x89HDF\r\n\x1a\n".to_vec();
        prefix.extend_from_slice(&[2, 8, 8, 0]);
        prefix.extend_from_slice(&0u64.to_le_bytes());
        prefix.extend_from_slice(&UNDEFINED_ADDRESS.to_le_bytes());
        prefix.extend_from_slice(&eof.to_le_bytes());
        prefix.extend_from_slice(&root.to_le_bytes());
        let checksum = hdf5_writer::jenkins_lookup3(&prefix);
        prefix.extend_from_slice(&checksum.to_le_bytes());
        for (at, part) in [
            (root, root_group(name, header)),
            (header, f32_dataset(&shape, data, bytes, attributes)),
        ] {
            prefix.resize(at as usize, 0);
            prefix.extend_from_slice(&part);
        }
        prefix.resize(data as usize, 0);
        Self {
            prefix,
            suffix: eof - data - bytes,
        }
    }
}

#[cfg(test)]
mod lzf_tests {
    use super::*;

    #[test]
    fn lzf_literals_back_references_and_corrupt_streams() {
        // "abc", then 3 bytes from 3 back; "a", then 4 bytes from 1 back (overlapping).
        assert!(lzf_decompress(&[2, b'a', b'b', b'c', 0x20, 2], 6).unwrap() == b"abcabc");
        assert!(lzf_decompress(&[0, b'a', 0x40, 0], 0).unwrap() == b"aaaaa");
        // A long back reference: length 7 + 1 + 2 = 10.
        assert!(lzf_decompress(&[0, b'z', 0xe0, 1, 0], 11).unwrap() == [b'z'; 11]);
        for (stream, expected, why) in [
            (&[2, b'a'][..], 0, "passes the end"),
            (&[0x20, 0][..], 0, "before the start"),
            (&[0, b'a', 0xe0][..], 0, "ends inside a token"),
            (&[0, b'a', 0x40, 0][..], 3, "more than 3 bytes"),
            (&[1, b'a', b'b'][..], 3, "expected 3"),
        ] {
            let err = lzf_decompress(stream, expected).unwrap_err();
            assert!(err.contains(why), "{stream:?}: {err}");
        }
        // Every truncation of a valid stream is an error or a shorter output, never a panic.
        let stream = [2, b'a', b'b', b'c', 0x20, 2, 0xe0, 3, 2];
        for end in 0..stream.len() {
            let _ = lzf_decompress(&stream[..end], 0);
        }
    }

    #[test]
    fn unsupported_filters_are_named() {
        assert!(filter_name("filter id 32001") == "Blosc (32001)");
        assert!(filter_name("filter id 32015") == "Zstandard (32015)");
        assert!(filter_name("filter id 40000") == "filter id 40000");
        assert!(filter_name("scaleoffset float E-scale") == "scaleoffset float E-scale");
    }
}

#[cfg(test)]
mod streamed_layout_tests {
    use super::*;

    /// The streamed layout is the file the general writer makes (which is checked against
    /// libhdf5 upstream), byte for byte, and the reader reads it back.
    #[test]
    fn a_streamed_dataset_is_the_general_writers_file_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        for shape in [[3usize, 4, 5], [1, 1, 1], [2, 70, 90]] {
            let values: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|i| i as f32 * 0.25 - 7.0)
                .collect();
            let general = dir.path().join("general.h5");
            let mut file = H5Writer::default();
            file.add("/volume", &shape, &values, &[]).unwrap();
            file.write(&general).unwrap();
            let layout = ContiguousF32::with_attributes("volume", &shape, &[]);
            let mut streamed = layout.prefix.clone();
            for v in &values {
                streamed.extend_from_slice(&v.to_le_bytes());
            }
            streamed.resize(streamed.len() + layout.suffix as usize, 0);
            assert_eq!(std::fs::read(&general).unwrap(), streamed, "{shape:?}");
        }
    }

    #[test]
    fn streamed_attributes_are_the_general_writers_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let (shape, values) = ([2usize, 3, 4], vec![1.5f32; 24]);
        let general = dir.path().join("general.h5");
        let dataset = DatasetBuilder::typed_data("volume", vec![2, 3, 4], &values)
            .unwrap()
            .attribute(AttributeBuilder::fixed_string("units", "micrometer"))
            .attribute(AttributeBuilder::vector("voxel_size", &[0.5f64, 0.25, 1e-3]).unwrap());
        let plan = Hdf5Builder::new().dataset(dataset).into_plan().unwrap();
        let file = std::fs::File::create(&general).unwrap();
        Hdf5Writer::new(BufWriter::new(file), WriteOptions::default())
            .finish(plan)
            .unwrap();
        let bytes = std::fs::read(&general).unwrap();
        let layout = ContiguousF32::with_attributes(
            "volume",
            &shape,
            &[
                ("units", AttrValue::Text("micrometer".into())),
                ("voxel_size", AttrValue::Floats(vec![0.5, 0.25, 1e-3])),
            ],
        );
        let mut streamed = layout.prefix.clone();
        for v in &values {
            streamed.extend_from_slice(&v.to_le_bytes());
        }
        streamed.resize(streamed.len() + layout.suffix as usize, 0);
        assert!(bytes == streamed);
    }
}
