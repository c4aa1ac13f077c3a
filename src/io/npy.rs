//! `.npy` reading and writing through ndarray-npy, with clear errors and atomic writes.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use ndarray::{ArrayD, IxDyn};
use ndarray_npy::{ReadNpyExt, WriteNpyExt};
use num_complex::Complex32;

use super::IoError;

/// A row-major complex64 array.
#[derive(Debug, Clone, PartialEq)]
pub struct ComplexArray {
    pub shape: Vec<usize>,
    pub data: Vec<Complex32>,
}

/// The `descr` (dtype) field of an .npy header, e.g. `<c8`.
pub fn npy_descr(path: &Path) -> Result<String, IoError> {
    let corrupt = |reason: &str| IoError::Corrupt {
        path: path.into(),
        reason: reason.into(),
    };
    let mut f = File::open(path).map_err(|e| IoError::Read {
        path: path.into(),
        reason: e.to_string(),
    })?;
    let mut head = [0u8; 12];
    f.read_exact(&mut head[..10])
        .map_err(|_| corrupt("shorter than an .npy header"))?;
    if &head[..6] != b"\x93NUMPY" {
        return Err(corrupt("missing the \\x93NUMPY magic string"));
    }
    let len = match head[6] {
        1 => u16::from_le_bytes([head[8], head[9]]) as usize,
        2 | 3 => {
            f.read_exact(&mut head[10..12])
                .map_err(|_| corrupt("truncated header"))?;
            u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize
        }
        v => return Err(corrupt(&format!("unknown format version {v}"))),
    };
    if len > 1 << 20 {
        return Err(corrupt("header longer than 1 MiB"));
    }
    let mut header = vec![0u8; len];
    f.read_exact(&mut header)
        .map_err(|_| corrupt("truncated header"))?;
    let header = String::from_utf8_lossy(&header);
    let after = header
        .split_once("'descr'")
        .map(|(_, rest)| rest)
        .ok_or_else(|| corrupt("header has no 'descr' field"))?;
    let value = after
        .split('\'')
        .nth(1)
        .ok_or_else(|| corrupt("header's 'descr' field is not a string"))?;
    Ok(value.to_string())
}

/// Reads a complex64 array, or a float32 array promoted to complex64 (imaginary part zero).
pub fn read_complex_npy(path: &Path) -> Result<ComplexArray, IoError> {
    let descr = npy_descr(path)?;
    let open = || {
        File::open(path).map_err(|e| IoError::Read {
            path: path.into(),
            reason: e.to_string(),
        })
    };
    let corrupt = |e: ndarray_npy::ReadNpyError| IoError::Corrupt {
        path: path.into(),
        reason: e.to_string(),
    };
    let array: ArrayD<Complex32> = match descr.as_str() {
        "<c8" | "=c8" => ArrayD::<Complex32>::read_npy(open()?).map_err(corrupt)?,
        "<f4" | "=f4" => ArrayD::<f32>::read_npy(open()?)
            .map_err(corrupt)?
            .mapv(|v| Complex32::new(v, 0.0)),
        _ => {
            return Err(IoError::UnsupportedDtype {
                path: path.into(),
                descr,
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
    // Fortran-ordered files come back column-major: make the data row-major.
    let data = array.as_standard_layout().iter().copied().collect();
    Ok(ComplexArray { shape, data })
}

/// Writes a complex64 array. The file appears only when complete (temporary file + rename), so an
/// interrupted write never leaves a truncated file behind.
pub fn write_complex_npy(path: &Path, array: &ComplexArray) -> Result<(), IoError> {
    let write_err = |reason: String| IoError::Write {
        path: path.into(),
        reason,
    };
    let nd = ArrayD::from_shape_vec(IxDyn(&array.shape), array.data.clone())
        .map_err(|e| write_err(e.to_string()))?;
    let tmp = path.with_extension("npy.partial");
    let file = File::create(&tmp).map_err(|e| write_err(e.to_string()))?;
    nd.write_npy(std::io::BufWriter::new(file))
        .map_err(|e| write_err(e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| write_err(e.to_string()))
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
        assert_eq!(npy_descr(&path).unwrap(), "<c8");
        assert_eq!(read_complex_npy(&path).unwrap(), a);

        let fpath = dir.path().join("f.npy");
        ndarray::Array2::<f32>::from_shape_fn((2, 2), |(i, j)| (i * 2 + j) as f32)
            .write_npy(File::create(&fpath).unwrap())
            .unwrap();
        let f = read_complex_npy(&fpath).unwrap();
        assert_eq!(f.shape, vec![2, 2]);
        assert_eq!(f.data[3], Complex32::new(3.0, 0.0));
    }

    #[test]
    fn bad_files_give_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.npy");
        std::fs::write(&junk, b"not an array").unwrap();
        assert!(matches!(
            read_complex_npy(&junk),
            Err(IoError::Corrupt { .. })
        ));
        let missing = dir.path().join("missing.npy");
        assert!(matches!(
            read_complex_npy(&missing),
            Err(IoError::Read { .. })
        ));
        let f64s = dir.path().join("f64.npy");
        ndarray::Array1::<f64>::zeros(3)
            .write_npy(File::create(&f64s).unwrap())
            .unwrap();
        let err = read_complex_npy(&f64s).unwrap_err();
        assert!(err.to_string().contains("<f8"), "{err}");
        let empty = dir.path().join("empty.npy");
        ndarray::Array2::<f32>::zeros((0, 3))
            .write_npy(File::create(&empty).unwrap())
            .unwrap();
        assert!(matches!(
            read_complex_npy(&empty),
            Err(IoError::ZeroSize { .. })
        ));
    }
}
