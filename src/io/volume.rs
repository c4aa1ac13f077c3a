//! Volumes on disk: float32 multi-page TIFF volumes (one page per z slice, what Fiji, napari and
//! tifffile read), the three central orthogonal slices (what previews show, drawn by
//! [`crate::plot`]), and atomic writes.

use std::path::Path;

use super::output_set::stage_one;
use super::stack::{read_stack_from, Pixels, Stack, StackFormat, StackReader, StackWriter};
use super::IoError;
use super::PixelSize;

/// What [`VolumeSlabs::visit_slabs`] calls with each slab: `(first z slice, values)`.
pub type SlabVisitor<'v> = dyn FnMut(usize, &[f32]) -> Result<(), String> + 'v;

/// One of [`central_slices`]: `(name, pixels, height, width)`.
pub type CentralSlice = (&'static str, Vec<f32>, usize, usize);

/// A volume `(n0, n1, n2)` that is read a slab of whole z slices at a time, in order: one in
/// memory ([`Stack`]), or a reconstruction's result wherever the solver keeps it
/// ([`crate::recon::Solved`]). The writers and the previews hold one slab at a time, never the
/// volume.
pub trait VolumeSlabs {
    /// `(n0, n1, n2)`.
    fn shape(&self) -> [usize; 3];

    /// Calls `visit(z0, values)` for consecutive slabs from z = 0 to n0: `values` holds slices
    /// `z0..z0 + values.len() / (n1 n2)`, row-major. Stops at the first error, the visitor's or
    /// the source's.
    fn visit_slabs(&self, visit: &mut SlabVisitor<'_>) -> Result<(), String>;
}

impl VolumeSlabs for Stack {
    fn shape(&self) -> [usize; 3] {
        self.shape
    }

    fn visit_slabs(&self, visit: &mut SlabVisitor<'_>) -> Result<(), String> {
        visit(0, &self.values)
    }
}

/// Writes `volume` to `path` in `format` (float32, one image per z slice), a slab at a time,
/// atomically: under a temporary name, renamed into place once complete and on disk, so an
/// existing file is never left damaged and no half-written file ever has the final name.
pub fn write_volume_as(
    path: &Path,
    format: StackFormat,
    volume: &dyn VolumeSlabs,
) -> Result<(), IoError> {
    write_files(&[(path, format)], volume, None, |_, _| {})
}

/// Writes `volume` to every `(path, format)` of `files` in one pass over its slabs (each file as
/// [`write_volume_as`] writes it: complete and renamed into place, or not at all) and returns
/// its central slices ([`central_slices`]), gathered on the way.
pub fn write_volume_files(
    files: &[(&Path, StackFormat)],
    volume: &dyn VolumeSlabs,
) -> Result<[CentralSlice; 3], IoError> {
    write_calibrated_volume_files(files, volume, None)
}

/// [`write_volume_files`] of a volume whose voxels are cubes of `voxel_size` (`None`: unknown),
/// which each file records in its format's way ([`StackWriter::create_calibrated`]).
pub fn write_calibrated_volume_files(
    files: &[(&Path, StackFormat)],
    volume: &dyn VolumeSlabs,
    voxel_size: Option<PixelSize>,
) -> Result<[CentralSlice; 3], IoError> {
    let mut slices = CentralSlices::new(volume.shape());
    write_files(files, volume, voxel_size, |z0, slab| slices.add(z0, slab))?;
    Ok(slices.finish())
}

/// [`write_calibrated_volume_files`], handing every slab to `on_slab` too.
fn write_files(
    files: &[(&Path, StackFormat)],
    volume: &dyn VolumeSlabs,
    voxel_size: Option<PixelSize>,
    mut on_slab: impl FnMut(usize, &[f32]),
) -> Result<(), IoError> {
    let [n0, n1, n2] = volume.shape();
    let error = |path: &Path, reason: String| IoError::Write {
        path: path.into(),
        reason,
    };
    // Each file its own set: complete and on disk before it gets its name.
    let mut sets = Vec::with_capacity(files.len());
    for (path, _) in files {
        sets.push(stage_one(path)?);
    }
    let mut writers = Vec::with_capacity(files.len());
    for ((path, format), (_, staged)) in files.iter().zip(&sets) {
        let writer = StackWriter::create_calibrated(staged, *format, [n0, n1, n2], voxel_size)
            .map_err(|e| error(path, e.to_string()))?;
        writers.push(writer);
    }
    // The file a failure belongs to (the first when the volume could not be read).
    let mut failed = 0;
    let visited = volume.visit_slabs(&mut |z0, slab| {
        on_slab(z0, slab);
        for image in slab.chunks(n1 * n2) {
            for (k, writer) in writers.iter_mut().enumerate() {
                writer.write_image(image).map_err(|e| {
                    failed = k;
                    e.to_string()
                })?;
            }
        }
        Ok(())
    });
    let finished = visited.and_then(|()| {
        for (k, writer) in writers.into_iter().enumerate() {
            writer.finish().map_err(|e| {
                failed = k;
                e.to_string()
            })?;
        }
        Ok(())
    });
    if let Err(reason) = finished {
        return Err(error(files[failed].0, reason));
    }
    for (set, _) in sets {
        if let Some(set) = set {
            set.commit()?;
        }
    }
    Ok(())
}

/// [`write_volume_as`] in the format `path`'s extension names (`.tif`, `.tiff`, `.h5`, `.hdf5`,
/// `.npy`, `.zarr`).
pub fn write_volume(path: &Path, volume: &dyn VolumeSlabs) -> Result<(), IoError> {
    let format = StackFormat::of_path(path).ok_or_else(|| IoError::Write {
        path: path.into(),
        reason: "the extension names no volume format (.tif, .tiff, .h5, .hdf5, .npy or .zarr)"
            .into(),
    })?;
    write_volume_as(path, format, volume)
}

/// Writes a multi-page float32 TIFF, one page per slice of axis 0.
pub fn write_tiff_volume(path: &Path, volume: &Stack) -> Result<(), IoError> {
    write_volume_as(path, StackFormat::Tiff, volume)
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
pub fn central_slices(volume: &Stack) -> [CentralSlice; 3] {
    central_slices_of(volume).expect("a volume in memory reads without error")
}

/// [`central_slices`] of a volume read a slab at a time.
pub fn central_slices_of(volume: &dyn VolumeSlabs) -> Result<[CentralSlice; 3], String> {
    let mut slices = CentralSlices::new(volume.shape());
    volume.visit_slabs(&mut |z0, slab| {
        slices.add(z0, slab);
        Ok(())
    })?;
    Ok(slices.finish())
}

/// The three central slices of a volume, gathered from its slabs in order.
struct CentralSlices {
    shape: [usize; 3],
    xy: Vec<f32>,
    xz: Vec<f32>,
    yz: Vec<f32>,
}

impl CentralSlices {
    fn new(shape @ [n0, n1, n2]: [usize; 3]) -> Self {
        Self {
            shape,
            xy: Vec::with_capacity(n1 * n2),
            xz: Vec::with_capacity(n0 * n2),
            yz: Vec::with_capacity(n0 * n1),
        }
    }

    /// Slices `z0..` of the volume.
    fn add(&mut self, z0: usize, slab: &[f32]) {
        let [n0, n1, n2] = self.shape;
        for (z, slice) in (z0..).zip(slab.chunks(n1 * n2)) {
            if z == n0 / 2 {
                self.xy.extend_from_slice(slice);
            }
            self.xz
                .extend_from_slice(&slice[n1 / 2 * n2..(n1 / 2 + 1) * n2]);
            self.yz.extend(slice.iter().skip(n2 / 2).step_by(n2));
        }
    }

    fn finish(self) -> [CentralSlice; 3] {
        let [n0, n1, n2] = self.shape;
        [
            ("xy", self.xy, n1, n2),
            ("xz", self.xz, n0, n2),
            ("yz", self.yz, n0, n1),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::write_atomically;

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
