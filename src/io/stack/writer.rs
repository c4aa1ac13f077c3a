//! Writing a float32 stack or volume: `.npy`, multi-page TIFF with ImageJ metadata, HDF5 or
//! OME-Zarr, one image at a time.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::super::h5::AttrValue;
use super::super::npy::f32_npy_header;
use super::super::IoError;
use super::super::{LengthUnit, PixelSize};
use super::imagej_tiff::ImagejTiff;

/// The file formats a float32 stack or volume is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackFormat {
    /// NumPy `.npy`, `(count, height, width)` float32.
    Npy,
    /// Multi-page float32 TIFF, one page per image (`.tif`, `.tiff`).
    Tiff,
    /// HDF5 with the stack as the contiguous float32 dataset `/volume` (`.h5`, `.hdf5`).
    Hdf5,
    /// An OME-Zarr directory with a multiscale pyramid (`.zarr`, see [`super::super::zarr`]); written,
    /// not read.
    Zarr,
}

impl StackFormat {
    /// The format a file name's extension names, if any.
    pub fn of_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "npy" => Some(Self::Npy),
            "tif" | "tiff" => Some(Self::Tiff),
            "h5" | "hdf5" => Some(Self::Hdf5),
            "zarr" => Some(Self::Zarr),
            _ => None,
        }
    }
}

/// Writes a float32 stack image by image, in any [`StackFormat`]: nothing but the current
/// image and a write buffer is held, so a stack never has to fit in memory. Writing more or
/// fewer images than announced is an error.
pub struct StackWriter {
    path: PathBuf,
    inner: WriterInner,
    /// The file, to flush to disk at the end; none for a directory (OME-Zarr).
    file: Option<File>,
    count: usize,
    written: usize,
    height: usize,
    width: usize,
}

enum WriterInner {
    /// `.npy` and HDF5: a header, the values, and for HDF5 the padding to its end of file.
    Raw {
        w: BufWriter<File>,
        suffix: u64,
    },
    /// The pixels after the header, page after page; the directories at the end
    /// ([`ImagejTiff`]), laid out again then from the stack's shape and voxel size rather than
    /// held while the pages are written (a streamed volume's write holds one slab).
    Tiff {
        w: BufWriter<File>,
        shape: [usize; 3],
        voxel_size: Option<PixelSize>,
    },
    Zarr(Box<super::super::zarr::ZarrPart>),
}

/// The attributes of `/volume` in HDF5: the axis order, the unit and the voxel size per axis.
fn volume_attributes(voxel_size: Option<PixelSize>) -> Vec<(&'static str, AttrValue)> {
    let (unit, size) = voxel_size.map_or(("pixel", 1.0), |v| (v.unit.name(), v.value));
    let mut attributes = vec![
        ("axes", AttrValue::Text("zyx".into())),
        ("units", AttrValue::Text(unit.into())),
        ("voxel_size", AttrValue::Floats(vec![size; 3])),
    ];
    if let Some(v) = voxel_size {
        if v.unit == LengthUnit::Micrometer {
            attributes.push(("element_size_um", AttrValue::Floats(vec![v.value; 3])));
        }
    }
    attributes
}

impl std::fmt::Debug for StackWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackWriter")
            .field("path", &self.path)
            .finish()
    }
}

fn write_error(path: &Path, e: impl ToString) -> IoError {
    IoError::Write {
        path: path.into(),
        reason: e.to_string(),
    }
}

impl StackWriter {
    /// Creates `path` (`.tif` / `.tiff` / `.h5` / `.hdf5` by its extension, otherwise `.npy`) for
    /// `count` images of `height × width`.
    pub fn create(path: &Path, count: usize, height: usize, width: usize) -> Result<Self, IoError> {
        let format = StackFormat::of_path(path).unwrap_or(StackFormat::Npy);
        Self::create_as(path, format, count, height, width)
    }

    /// Creates `path` in `format`, whatever its name, for `count` images of `height × width`.
    pub fn create_as(
        path: &Path,
        format: StackFormat,
        count: usize,
        height: usize,
        width: usize,
    ) -> Result<Self, IoError> {
        Self::create_calibrated(path, format, [count, height, width], None)
    }

    /// [`create_as`](Self::create_as) for a volume `(count, height, width)` whose voxels are
    /// cubes of `voxel_size` (`None`: unknown), which the file records: ImageJ metadata and
    /// resolution tags in a TIFF, attributes on `/volume` in HDF5 (`units`, `axes` = `zyx`,
    /// `voxel_size` per axis and, in micrometres, `element_size_um`, what Fiji's HDF5 plugin
    /// reads), the `multiscales` metadata of OME-Zarr. `.npy` has no place for it.
    pub fn create_calibrated(
        path: &Path,
        format: StackFormat,
        [count, height, width]: [usize; 3],
        voxel_size: Option<PixelSize>,
    ) -> Result<Self, IoError> {
        let shape = [count, height, width];
        // A TIFF's layout is settled before the file exists: a stack it cannot hold leaves nothing.
        let tiff = match format {
            StackFormat::Tiff => {
                Some(ImagejTiff::new(shape, voxel_size).map_err(|e| write_error(path, e))?)
            }
            _ => None,
        };
        let file = match format {
            // A directory of files, each flushed by the set that commits it.
            StackFormat::Zarr => None,
            _ => Some(File::create(path).map_err(|e| write_error(path, e))?),
        };
        let handle = || match &file {
            Some(file) => file.try_clone().map_err(|e| write_error(path, e)),
            None => Err(write_error(path, "no file")),
        };
        let inner = match format {
            StackFormat::Zarr => {
                let options = super::super::zarr::ZarrOptions::for_shape(shape);
                WriterInner::Zarr(Box::new(super::super::zarr::ZarrPart::create_whole(
                    path, shape, voxel_size, options,
                )?))
            }
            StackFormat::Tiff => {
                let layout = tiff.expect("settled above for a TIFF");
                let mut w = BufWriter::new(handle()?);
                w.write_all(&layout.header)
                    .map_err(|e| write_error(path, e))?;
                WriterInner::Tiff {
                    w,
                    shape,
                    voxel_size,
                }
            }
            StackFormat::Npy | StackFormat::Hdf5 => {
                let (header, suffix) = match format {
                    StackFormat::Npy => (f32_npy_header(&shape), 0),
                    _ => {
                        let layout = super::super::h5::ContiguousF32::with_attributes(
                            &super::super::h5::VOLUME[1..],
                            &shape,
                            &volume_attributes(voxel_size),
                        );
                        (layout.prefix, layout.suffix)
                    }
                };
                let mut w = BufWriter::new(handle()?);
                w.write_all(&header).map_err(|e| write_error(path, e))?;
                WriterInner::Raw { w, suffix }
            }
        };
        Ok(Self {
            path: path.into(),
            inner,
            file,
            count,
            written: 0,
            height,
            width,
        })
    }

    pub fn write_image(&mut self, image: &[f32]) -> Result<(), IoError> {
        let path = &self.path;
        if image.len() != self.height * self.width {
            return Err(write_error(
                path,
                format!(
                    "an image of {} values for a stack of {} x {} images",
                    image.len(),
                    self.height,
                    self.width
                ),
            ));
        }
        if self.written == self.count {
            return Err(write_error(
                path,
                format!("more than the {} images announced", self.count),
            ));
        }
        match &mut self.inner {
            WriterInner::Raw { w, .. } | WriterInner::Tiff { w, .. } => {
                let mut bytes = Vec::with_capacity(image.len() * 4);
                for v in image {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
                w.write_all(&bytes).map_err(|e| write_error(path, e))?;
            }
            WriterInner::Zarr(zarr) => zarr.push_image(image)?,
        }
        self.written += 1;
        Ok(())
    }

    /// Ends the file and flushes it to disk; an error if fewer images than announced came.
    pub fn finish(self) -> Result<(), IoError> {
        let path = &self.path;
        if self.written != self.count {
            return Err(write_error(
                path,
                format!("{} of the {} images announced", self.written, self.count),
            ));
        }
        match self.inner {
            WriterInner::Raw { mut w, suffix } => {
                w.write_all(&vec![0; suffix as usize])
                    .and_then(|()| w.flush())
                    .map_err(|e| write_error(path, e))?;
            }
            WriterInner::Tiff {
                mut w,
                shape,
                voxel_size,
            } => {
                // The layout settled when the writer was created: the same again.
                let layout =
                    ImagejTiff::new(shape, voxel_size).map_err(|e| write_error(path, e))?;
                w.write_all(&layout.directories)
                    .and_then(|()| w.flush())
                    .map_err(|e| write_error(path, e))?;
            }
            WriterInner::Zarr(zarr) => {
                zarr.finish_alone()?;
            }
        }
        match self.file {
            Some(file) => file
                .sync_all()
                .map_err(|e| write_error(path, format!("flushing the file: {e}"))),
            None => Ok(()),
        }
    }
}
