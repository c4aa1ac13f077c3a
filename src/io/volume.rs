//! Volumes on disk: float32 multi-page TIFF volumes (one page per z slice, what Fiji, napari and
//! tifffile read), the three central orthogonal slices (what previews show, drawn by
//! [`crate::plot`]), and atomic writes.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tiff::encoder::{colortype, TiffEncoder};

use super::stack::{read_stack_from, Pixels, Stack, StackReader};
use super::IoError;

/// A temporary name next to `path`, unique per process and call, so concurrent writers never share
/// a temporary file.
fn temp_path(path: &Path) -> PathBuf {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        ".{name}.tmp{}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Runs `write` on a temporary file next to `path` and renames it into place only on success, so
/// an existing file is never left damaged.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), IoError> {
    if path.file_name().is_none() {
        return Err(IoError::Write {
            path: path.into(),
            reason: "the path names no file".into(),
        });
    }
    let tmp = temp_path(path);
    let result = write(&tmp).and_then(|()| std::fs::rename(&tmp, path).map_err(|e| e.to_string()));
    result.map_err(|reason| {
        // Best effort: the temporary file may not exist if creating it was what failed.
        let _ = std::fs::remove_file(&tmp);
        IoError::Write {
            path: path.into(),
            reason,
        }
    })
}

/// Writes a multi-page float32 TIFF, one page per slice of axis 0.
pub fn write_tiff_volume(path: &Path, volume: &Stack) -> Result<(), IoError> {
    let [n0, n1, n2] = volume.shape;
    let (Ok(width), Ok(height)) = (u32::try_from(n2), u32::try_from(n1)) else {
        return Err(IoError::Write {
            path: path.into(),
            reason: format!("slices of {n1} x {n2} exceed TIFF's 2^32 - 1 pixels per side"),
        });
    };
    write_atomically(path, |tmp| {
        let file = File::create(tmp).map_err(|e| e.to_string())?;
        let mut enc = TiffEncoder::new(BufWriter::new(file)).map_err(|e| e.to_string())?;
        for z in 0..n0 {
            let page = &volume.values[z * n1 * n2..(z + 1) * n1 * n2];
            enc.write_image::<colortype::Gray32Float>(width, height, page)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

/// Reads a multi-page float32 TIFF written by [`write_tiff_volume`] (or any tool writing
/// same-sized single-channel float32 pages).
pub fn read_tiff_volume(path: &Path) -> Result<Stack, IoError> {
    let stack = read_stack_from(path, StackReader::open_tiff(path)?)?;
    match stack.values {
        Pixels::F32(values) => Ok(Stack {
            shape: stack.shape,
            values,
        }),
        other => Err(IoError::UnsupportedDtype {
            path: path.into(),
            descr: format!("{:?}", other.dtype()),
            expected: "a float32 volume",
        }),
    }
}

/// The three central orthogonal slices: `(name, pixels, height, width)` for the xy (z = n0/2),
/// xz (y = n1/2) and yz (x = n2/2) planes.
pub fn central_slices(volume: &Stack) -> [(&'static str, Vec<f32>, usize, usize); 3] {
    let [n0, n1, n2] = volume.shape;
    let at = |z: usize, y: usize, x: usize| volume.values[(z * n1 + y) * n2 + x];
    let xy = (0..n1 * n2).map(|i| at(n0 / 2, i / n2, i % n2)).collect();
    let xz = (0..n0 * n2).map(|i| at(i / n2, n1 / 2, i % n2)).collect();
    let yz = (0..n0 * n1).map(|i| at(i / n1, i % n1, n2 / 2)).collect();
    [("xy", xy, n1, n2), ("xz", xz, n0, n2), ("yz", yz, n0, n1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiff_volumes_round_trip_and_central_slices_are_the_middle_planes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.tif");
        let v = Stack {
            shape: [3, 4, 5],
            values: (0..60).map(|i| i as f32 * 0.5 - 3.0).collect(),
        };
        write_tiff_volume(&path, &v).unwrap();
        assert_eq!(read_tiff_volume(&path).unwrap(), v);
        let at = |z: usize, y: usize, x: usize| v.values[(z * 4 + y) * 5 + x];
        let [xy, xz, yz] = central_slices(&v);
        assert_eq!((xy.0, xy.2, xy.3), ("xy", 4, 5));
        assert_eq!(xy.1[2 * 5 + 3], at(1, 2, 3));
        assert_eq!((xz.0, xz.2, xz.3), ("xz", 3, 5));
        assert_eq!(xz.1[2 * 5 + 4], at(2, 2, 4));
        assert_eq!((yz.0, yz.2, yz.3), ("yz", 3, 4));
        assert_eq!(yz.1[4 + 3], at(1, 3, 2));
        std::fs::write(&path, b"not a tiff").unwrap();
        assert!(matches!(
            read_tiff_volume(&path),
            Err(IoError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_failed_write_leaves_the_existing_file_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keep.txt");
        std::fs::write(&path, b"precious").unwrap();
        let err = write_atomically(&path, |tmp| {
            std::fs::write(tmp, b"half").unwrap();
            Err("disk full".into())
        })
        .unwrap_err();
        assert!(err.to_string().contains("disk full"));
        assert_eq!(std::fs::read(&path).unwrap(), b"precious");
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1, "the temporary file must be removed");
    }
}
