//! `.npy` files through ndarray-npy (its header parser and element codecs), with every size the
//! header claims checked against the file's length before anything is allocated from it, and
//! atomic writes.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use ndarray::{ArrayD, IxDyn, ShapeBuilder};
use ndarray_npy::npy::header::{Header, Layout};
use ndarray_npy::{ReadDataError, ReadableElement, WritableElement, WriteNpyExt};
use num_complex::Complex32;

use super::{write_atomically, IoError};

/// The element types lamino reads from array files. Besides u8, u16 and f32 (which stacks keep
/// in their own type) and complex64 (line integrals), the real types users save arrays in are
/// converted to f32 as they are read ([`NpyReader::read_f32`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    U8,
    U16,
    I16,
    U32,
    I32,
    F16,
    F32,
    F64,
    C64,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            Self::U8 => 1,
            Self::U16 | Self::I16 | Self::F16 => 2,
            Self::U32 | Self::I32 | Self::F32 => 4,
            Self::F64 | Self::C64 => 8,
        }
    }

    /// The type of an `.npy` `descr` string, in either byte order (ndarray-npy swaps as it reads;
    /// [`NpyReader::read_f32`] swaps float16 itself).
    fn from_npy_descr(descr: &str) -> Option<Self> {
        Some(match descr {
            "|u1" | "u1" | "B" | "<u1" | ">u1" => Self::U8,
            "<u2" | ">u2" => Self::U16,
            "<i2" | ">i2" => Self::I16,
            "<u4" | ">u4" => Self::U32,
            "<i4" | ">i4" => Self::I32,
            "<f2" | ">f2" => Self::F16,
            "<f4" | ">f4" => Self::F32,
            "<f8" | ">f8" => Self::F64,
            "<c8" | ">c8" => Self::C64,
            _ => return None,
        })
    }
}

/// numpy writes headers of a few hundred bytes; anything beyond this is not an array header.
const MAX_HEADER_BYTES: u64 = 1 << 20;

fn corrupt(path: &Path, reason: impl ToString) -> IoError {
    IoError::Corrupt {
        path: path.into(),
        reason: reason.to_string(),
    }
}

fn read_error(path: &Path, e: impl ToString) -> IoError {
    IoError::Read {
        path: path.into(),
        reason: e.to_string(),
    }
}

/// The parsed header of an `.npy` file and a reader positioned at its data, which reads the data
/// in pieces of any length (a stack image by image, an array at once).
pub struct NpyReader {
    path: PathBuf,
    header: Header,
    dtype: Dtype,
    reader: BufReader<File>,
    /// Data bytes not read yet.
    remaining: u64,
    /// Data bytes in all (the element index of an error counts from the data's start).
    data_bytes: u64,
    /// Where the data start in the file.
    data_start: u64,
}

impl std::fmt::Debug for NpyReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NpyReader")
            .field("path", &self.path)
            .field("shape", &self.header.shape)
            .field("dtype", &self.dtype)
            .finish()
    }
}

impl NpyReader {
    /// Opens `path` and checks its header: a dtype of [`Dtype`], and exactly as many data bytes
    /// as the shape needs. Nothing the header claims is allocated before it is checked against
    /// the file's length.
    pub fn open(path: &Path) -> Result<Self, IoError> {
        let file = File::open(path).map_err(|e| read_error(path, e))?;
        let file_len = file.metadata().map_err(|e| read_error(path, e))?.len();
        let mut reader = BufReader::new(file);
        // ndarray-npy allocates the header length it reads (up to 4 GiB in format 2 and 3) before
        // reading the header: check that length against the file first.
        let mut prefix = [0u8; 12];
        let prefix_len = match prefix_len_and_version(&mut reader, &mut prefix) {
            Some(n) => n,
            None => return Err(corrupt(path, "shorter than an .npy header")),
        };
        if &prefix[..6] != b"\x93NUMPY" {
            // Whatever the name says: `apply --input stack.tif` is a TIFF given where an array
            // is read, not a damaged TIFF.
            let found = match &prefix[..4] {
                b"II*\0" | b"MM\0*" | b"II+\0" | b"MM\0+" => " but a TIFF file",
                b"\x89HDF" => " but an HDF5 file",
                _ => "",
            };
            return Err(IoError::NotNpy {
                path: path.into(),
                found,
            });
        }
        let header_len = match prefix_len {
            10 => u64::from(u16::from_le_bytes([prefix[8], prefix[9]])),
            _ => u64::from(u32::from_le_bytes([
                prefix[8], prefix[9], prefix[10], prefix[11],
            ])),
        };
        if header_len > MAX_HEADER_BYTES {
            return Err(corrupt(
                path,
                format!("the header claims {header_len} bytes; an array header has at most {MAX_HEADER_BYTES}"),
            ));
        }
        if prefix_len as u64 + header_len > file_len {
            return Err(corrupt(
                path,
                format!(
                    "the header claims {header_len} bytes but the file holds {file_len} in all"
                ),
            ));
        }
        reader
            .seek(SeekFrom::Start(0))
            .map_err(|e| read_error(path, e))?;
        let header = Header::from_reader(&mut reader).map_err(|e| corrupt(path, e))?;
        let data_start = reader.stream_position().map_err(|e| read_error(path, e))?;
        let descr = header
            .type_descriptor
            .as_string()
            .cloned()
            .unwrap_or_else(|| header.type_descriptor.to_string());
        let dtype = Dtype::from_npy_descr(&descr).ok_or_else(|| IoError::UnsupportedDtype {
            path: path.into(),
            descr: descr.clone(),
            expected: "uint8, uint16, int16, uint32, int32, float16, float32, float64 or complex64",
        })?;
        let claimed = header
            .shape
            .iter()
            .try_fold(dtype.bytes() as u64, |acc, &n| acc.checked_mul(n as u64))
            .ok_or_else(|| corrupt(path, format!("shape {:?} overflows 64 bits", header.shape)))?;
        let actual = file_len - data_start;
        if claimed != actual {
            return Err(IoError::DataSize {
                path: path.into(),
                claimed,
                actual,
            });
        }
        Ok(Self {
            path: path.into(),
            header,
            dtype,
            reader,
            remaining: actual,
            data_bytes: actual,
            data_start,
        })
    }

    pub fn shape(&self) -> &[usize] {
        &self.header.shape
    }

    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The `descr` string of the header, e.g. `<f4`.
    pub fn descr(&self) -> String {
        let d = &self.header.type_descriptor;
        d.as_string().cloned().unwrap_or_else(|| d.to_string())
    }

    /// Whether the data are in Fortran (column-major) order.
    pub fn is_fortran(&self) -> bool {
        self.header.layout == Layout::Fortran
    }

    /// The byte count of the next `len` elements, checked against what is left of the data.
    fn next_bytes(&self, len: usize) -> Result<u64, IoError> {
        (len as u64)
            .checked_mul(self.dtype.bytes() as u64)
            .filter(|&b| b <= self.remaining)
            .ok_or_else(|| {
                corrupt(
                    &self.path,
                    format!("{len} more elements requested, past the end of the data"),
                )
            })
    }

    /// The index (from the data's start, in the file's order) of the next element.
    fn next_index(&self) -> usize {
        ((self.data_bytes - self.remaining) / self.dtype.bytes() as u64) as usize
    }

    /// Moves to element `index` (in the file's order, from the data's start): the next read
    /// starts there. What lies before it is never read, so a part of a large array (an MPI
    /// rank's angles) costs only its own bytes.
    pub fn seek(&mut self, index: usize) -> Result<(), IoError> {
        let at = (index as u64)
            .checked_mul(self.dtype.bytes() as u64)
            .filter(|&b| b <= self.data_bytes)
            .ok_or_else(|| {
                corrupt(
                    &self.path,
                    format!("element {index} requested, past the end of the data"),
                )
            })?;
        self.reader
            .seek(SeekFrom::Start(self.data_start + at))
            .map_err(|e| read_error(&self.path, e))?;
        self.remaining = self.data_bytes - at;
        Ok(())
    }

    /// Reads the next `len` elements; `T` must be the file's element type.
    pub fn read<T: ReadableElement>(&mut self, len: usize) -> Result<Vec<T>, IoError> {
        let bytes = self.next_bytes(len)?;
        // One-byte types: ndarray-npy accepts only numpy's own spellings ('|u1'); byte order does
        // not apply to them, so any spelling `from_npy_descr` recognised reads as '|u1'.
        let descr = match self.dtype {
            Dtype::U8 => u8::type_descriptor(),
            _ => self.header.type_descriptor.clone(),
        };
        let piece = (&mut self.reader).take(bytes);
        let values = T::read_to_end_exact_vec(piece, &descr, len).map_err(|e| match e {
            ReadDataError::Io(e) => read_error(&self.path, e),
            other => corrupt(&self.path, other),
        })?;
        self.remaining -= bytes;
        Ok(values)
    }

    /// Reads the next `len` elements of any real type as f32: the only change is the conversion
    /// of each value to the nearest f32. Integers are exact up to 2^24 in magnitude (beyond, the
    /// nearest f32, within 6e-8 relative); float16 is exact. A finite float64 beyond f32's range
    /// (magnitude above about 3.4e38) is an [`IoError::OutOfRange`] naming its index; NaN and
    /// infinity stay NaN and infinity, for the finite-value checks that f32 files meet too.
    /// Complex64 is refused (its imaginary part would be dropped).
    pub fn read_f32(&mut self, len: usize) -> Result<Vec<f32>, IoError> {
        let start = self.next_index();
        Ok(match self.dtype {
            Dtype::U8 => self.read::<u8>(len)?.into_iter().map(f32::from).collect(),
            Dtype::U16 => self.read::<u16>(len)?.into_iter().map(f32::from).collect(),
            Dtype::I16 => self.read::<i16>(len)?.into_iter().map(f32::from).collect(),
            Dtype::U32 => self
                .read::<u32>(len)?
                .into_iter()
                .map(|v| v as f32)
                .collect(),
            Dtype::I32 => self
                .read::<i32>(len)?
                .into_iter()
                .map(|v| v as f32)
                .collect(),
            Dtype::F16 => self.read_f16(len)?,
            Dtype::F32 => self.read::<f32>(len)?,
            Dtype::F64 => {
                let values = self.read::<f64>(len)?;
                let mut out = Vec::with_capacity(len);
                for (i, v) in values.into_iter().enumerate() {
                    let narrowed = v as f32;
                    if v.is_finite() && !narrowed.is_finite() {
                        return Err(IoError::OutOfRange {
                            path: self.path.clone(),
                            index: start + i,
                            value: v,
                        });
                    }
                    out.push(narrowed);
                }
                out
            }
            Dtype::C64 => {
                return Err(IoError::UnsupportedDtype {
                    path: self.path.clone(),
                    descr: self.descr(),
                    expected: "a real type (an integer or a float): complex values have no f32",
                })
            }
        })
    }

    /// Reads the next `len` float16 elements as f32 (exactly): ndarray-npy has no float16, so the
    /// bytes are decoded here in the header's byte order.
    fn read_f16(&mut self, len: usize) -> Result<Vec<f32>, IoError> {
        let bytes = self.next_bytes(len)?;
        let mut raw = vec![0u8; bytes as usize];
        self.reader
            .read_exact(&mut raw)
            .map_err(|e| read_error(&self.path, e))?;
        self.remaining -= bytes;
        let big_endian = self.descr().starts_with('>');
        Ok(raw
            .chunks_exact(2)
            .map(|b| {
                let bits = if big_endian {
                    u16::from_be_bytes([b[0], b[1]])
                } else {
                    u16::from_le_bytes([b[0], b[1]])
                };
                half::f16::from_bits(bits).to_f32()
            })
            .collect())
    }

    /// Reads the whole array in row-major (C) order, whatever the file's order.
    pub fn read_all<T: ReadableElement + Clone>(mut self) -> Result<ArrayD<T>, IoError> {
        // The shape's product fits: `open` checked it against the file's length.
        let values = self.read::<T>(self.header.shape.iter().product())?;
        self.standard_layout(values)
    }

    /// [`read_all`](Self::read_all) of any real type as f32, converted as
    /// [`read_f32`](Self::read_f32) converts.
    pub fn read_all_f32(mut self) -> Result<ArrayD<f32>, IoError> {
        let values = self.read_f32(self.header.shape.iter().product())?;
        self.standard_layout(values)
    }

    /// `values` (all of the array, in the file's order) as an array in row-major order.
    fn standard_layout<T: Clone>(&self, values: Vec<T>) -> Result<ArrayD<T>, IoError> {
        let shape = IxDyn(&self.header.shape).set_f(self.is_fortran());
        let array = ArrayD::from_shape_vec(shape, values).map_err(|e| corrupt(&self.path, e))?;
        Ok(if self.is_fortran() {
            array.as_standard_layout().into_owned()
        } else {
            array
        })
    }
}

/// Reads the magic string, the version and the header-length field into `prefix`; returns the
/// prefix length (10 for format 1, 12 for formats 2 and 3), or `None` if the file ends first.
fn prefix_len_and_version(r: &mut impl Read, prefix: &mut [u8; 12]) -> Option<usize> {
    r.read_exact(&mut prefix[..10]).ok()?;
    if prefix[6] == 1 {
        return Some(10);
    }
    r.read_exact(&mut prefix[10..12]).ok()?;
    Some(12)
}

/// A row-major complex64 array.
#[derive(Debug, Clone, PartialEq)]
pub struct ComplexArray {
    pub shape: Vec<usize>,
    pub data: Vec<Complex32>,
}

/// Reads a complex64 array, or a float32, float64 or float16 array promoted to complex64
/// (imaginary part zero; float64 and float16 converted to f32 as [`NpyReader::read_f32`] does).
pub fn read_complex_npy(path: &Path) -> Result<ComplexArray, IoError> {
    let npy = NpyReader::open(path)?;
    let array: ArrayD<Complex32> = match npy.dtype() {
        Dtype::C64 => npy.read_all()?,
        Dtype::F16 | Dtype::F32 | Dtype::F64 => {
            npy.read_all_f32()?.mapv(|v| Complex32::new(v, 0.0))
        }
        _ => {
            return Err(IoError::UnsupportedDtype {
                path: path.into(),
                descr: npy.descr(),
                expected: "complex64 ('<c8'), float32 ('<f4'), float64 ('<f8') or float16 ('<f2')",
            })
        }
    };
    let shape = array.shape().to_vec();
    if shape.contains(&0) {
        return Err(IoError::ZeroSize {
            path: path.into(),
            shape,
        });
    }
    // Row-major: `read_all` returns the standard layout and `mapv` keeps it.
    Ok(ComplexArray {
        shape,
        data: array.into_raw_vec_and_offset().0,
    })
}

/// Reads a float32 array (row-major) with its shape.
pub fn read_f32_npy(path: &Path) -> Result<ArrayD<f32>, IoError> {
    let npy = NpyReader::open(path)?;
    if npy.dtype() != Dtype::F32 {
        return Err(IoError::UnsupportedDtype {
            path: path.into(),
            descr: npy.descr(),
            expected: "float32 ('<f4')",
        });
    }
    npy.read_all()
}

/// The header of a row-major float32 `.npy` file of `shape`, for writers that stream the data.
pub fn f32_npy_header(shape: &[usize]) -> Vec<u8> {
    Header {
        type_descriptor: f32::type_descriptor(),
        layout: Layout::Standard,
        shape: shape.to_vec(),
    }
    .to_bytes()
    .expect("a header of a few integers fits the .npy format")
}

/// Writes a complex64 array. The file appears only when complete, so an interrupted write never
/// leaves a truncated file behind.
pub fn write_complex_npy(path: &Path, array: &ComplexArray) -> Result<(), IoError> {
    write_array(path, &array.shape, array.data.clone())
}

/// Writes a row-major float32 array of `shape`, complete or not at all (as [`write_complex_npy`]).
pub fn write_f32_npy(path: &Path, shape: &[usize], data: &[f32]) -> Result<(), IoError> {
    write_array(path, shape, data.to_vec())
}

/// Writes `data` as a row-major array of `shape` with ndarray-npy, through [`write_atomically`].
fn write_array<T: WritableElement>(
    path: &Path,
    shape: &[usize],
    data: Vec<T>,
) -> Result<(), IoError> {
    let nd = ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| IoError::Write {
        path: path.into(),
        reason: e.to_string(),
    })?;
    write_atomically(path, |tmp| {
        let file = File::create(tmp).map_err(|e| e.to_string())?;
        nd.write_npy(std::io::BufWriter::new(file))
            .map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complex_and_float_arrays_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.npy");
        let a = ComplexArray {
            shape: vec![2, 3],
            data: (0..6)
                .map(|i| Complex32::new(i as f32, -(i as f32)))
                .collect(),
        };
        write_complex_npy(&path, &a).unwrap();
        assert_eq!(NpyReader::open(&path).unwrap().descr(), "<c8");
        assert_eq!(read_complex_npy(&path).unwrap(), a);

        let fpath = dir.path().join("f.npy");
        ndarray::Array2::<f32>::from_shape_fn((2, 2), |(i, j)| (i * 2 + j) as f32)
            .write_npy(File::create(&fpath).unwrap())
            .unwrap();
        let f = read_complex_npy(&fpath).unwrap();
        assert_eq!(f.shape, vec![2, 2]);
        assert_eq!(f.data[3], Complex32::new(3.0, 0.0));
    }

    /// A seek reads from any element on, in any order; past the end is an error naming it.
    #[test]
    fn a_seek_reads_any_part_of_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.npy");
        let values: Vec<f32> = (0..60).map(|v| v as f32).collect();
        write_f32_npy(&path, &[5, 3, 4], &values).unwrap();
        let mut npy = NpyReader::open(&path).unwrap();
        npy.seek(24).unwrap();
        assert!(npy.read_f32(12).unwrap() == values[24..36]);
        npy.seek(0).unwrap();
        assert!(npy.read_f32(60).unwrap() == values);
        npy.seek(59).unwrap();
        assert!(npy.read_f32(1).unwrap() == [59.0]);
        assert!(npy.read_f32(1).is_err());
        npy.seek(60).unwrap();
        assert!(npy.read_f32(1).is_err());
        let e = npy.seek(61).unwrap_err().to_string();
        assert!(e.contains("element 61") && e.contains("s.npy"), "{e}");
    }

    #[test]
    fn fortran_order_comes_back_row_major() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.npy");
        let c = ndarray::Array2::<f32>::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32);
        let mut f = ndarray::Array2::<f32>::zeros((2, 3).f());
        f.assign(&c);
        f.write_npy(File::create(&path).unwrap()).unwrap();
        assert!(NpyReader::open(&path).unwrap().is_fortran());
        let back = read_f32_npy(&path).unwrap();
        assert_eq!(back.shape(), &[2, 3]);
        assert_eq!(
            back.iter().copied().collect::<Vec<_>>(),
            (0..6).map(|v| v as f32).collect::<Vec<_>>()
        );
    }

    #[test]
    fn float_arrays_are_written_as_ndarray_npy_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, theirs) = (dir.path().join("ours.npy"), dir.path().join("theirs.npy"));
        let image =
            ndarray::Array2::<f32>::from_shape_fn((3, 5), |(i, j)| i as f32 - 0.25 * j as f32);
        let data = image.iter().copied().collect::<Vec<_>>();
        write_f32_npy(&ours, &[3, 5], &data).unwrap();
        image.write_npy(File::create(&theirs).unwrap()).unwrap();
        assert_eq!(
            std::fs::read(&ours).unwrap(),
            std::fs::read(&theirs).unwrap()
        );
        assert_eq!(read_f32_npy(&ours).unwrap(), image.into_dyn());
        // A 1-D array, empty too (a fit without a baseline writes one).
        for len in [4, 0] {
            let line = ndarray::Array1::<f32>::from_shape_fn(len, |i| i as f32);
            write_f32_npy(&ours, &[len], line.as_slice().unwrap()).unwrap();
            line.write_npy(File::create(&theirs).unwrap()).unwrap();
            assert_eq!(
                std::fs::read(&ours).unwrap(),
                std::fs::read(&theirs).unwrap()
            );
        }
        let err = write_f32_npy(&ours, &[2, 2], &data).unwrap_err();
        assert!(matches!(err, IoError::Write { .. }), "{err}");
    }

    #[test]
    fn the_streaming_header_matches_ndarray_npy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.npy");
        ndarray::Array3::<f32>::zeros((2, 3, 4))
            .write_npy(File::create(&path).unwrap())
            .unwrap();
        let written = std::fs::read(&path).unwrap();
        let header = f32_npy_header(&[2, 3, 4]);
        assert_eq!(header[..], written[..header.len()]);
    }

    #[test]
    fn bad_files_give_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.npy");
        std::fs::write(&junk, b"not an array").unwrap();
        assert!(matches!(
            read_complex_npy(&junk),
            Err(IoError::NotNpy { found: "", .. })
        ));
        let missing = dir.path().join("missing.npy");
        assert!(matches!(
            read_complex_npy(&missing),
            Err(IoError::Read { .. })
        ));
        let i64s = dir.path().join("i64.npy");
        ndarray::Array1::<i64>::zeros(3)
            .write_npy(File::create(&i64s).unwrap())
            .unwrap();
        let err = read_complex_npy(&i64s).unwrap_err();
        assert!(err.to_string().contains("<i8"), "{err}");
        let empty = dir.path().join("empty.npy");
        ndarray::Array2::<f32>::zeros((0, 3))
            .write_npy(File::create(&empty).unwrap())
            .unwrap();
        assert!(matches!(
            read_complex_npy(&empty),
            Err(IoError::ZeroSize { .. })
        ));
    }

    /// A 128-byte file whose header claims 2^40 x 2^20 float32 values (4 EiB), or a 4 GiB
    /// header, is refused from its length alone, before anything is allocated.
    #[test]
    fn huge_claims_are_refused_before_allocating() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.npy");
        let mut bytes = Header {
            type_descriptor: f32::type_descriptor(),
            layout: Layout::Standard,
            shape: vec![1 << 40, 1 << 20],
        }
        .to_bytes()
        .unwrap();
        bytes.extend([0u8; 16]);
        std::fs::write(&path, &bytes).unwrap();
        let err = read_complex_npy(&path).unwrap_err();
        assert!(matches!(err, IoError::DataSize { actual: 16, .. }), "{err}");
        let mut forged = b"\x93NUMPY\x02\x00\xff\xff\xff\xff".to_vec();
        forged.extend([b' '; 100]);
        std::fs::write(&path, &forged).unwrap();
        let err = read_complex_npy(&path).unwrap_err();
        assert!(err.to_string().contains("4294967295"), "{err}");
    }
}
