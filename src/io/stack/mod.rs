//! Stacks of images: the one in-memory type ([`Stack`]) and the one reader and writer of stack
//! files, `.npy` (u8, u16 and f32 kept; i16, u32, i32, f16, f64 → f32), multi-page TIFF (8-bit
//! and 16-bit unsigned, 32-bit float grayscale) and folders of single-image TIFFs, read one image
//! at a time so that a stack never has to fit in memory.
//!
//! Every size a file's header claims is checked against the file's length, with checked 64-bit
//! arithmetic, before anything is allocated from it.

mod folder;
mod imagej_tiff;
mod tiff_pages;
mod writer;

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use tiff::decoder::Decoder;

use super::npy::{Dtype, NpyReader};
use super::IoError;
use tiff_pages::{check_tiff_page, decode_pixels, open_tiff_decoder, tiff_error};

pub use writer::{StackFormat, StackWriter};

/// `count` images (or z slices) of `height x width`, image-major and row-major: a volume
/// `(n0, n1, n2)`, a scan's projections, flats or darks, or a stack read from a file.
///
/// `values` holds f32 (the default), or [`Pixels`] for a stack kept in its file's type (a u16
/// stack takes half the memory of its f32 copy). `values` holds `shape[0] * shape[1] * shape[2]`
/// elements.
#[derive(Debug, Clone, PartialEq)]
pub struct Stack<V = Vec<f32>> {
    pub shape: [usize; 3],
    pub values: V,
}

impl<V> Stack<V> {
    /// Images (z slices) in the stack.
    pub fn count(&self) -> usize {
        self.shape[0]
    }
    pub fn height(&self) -> usize {
        self.shape[1]
    }
    pub fn width(&self) -> usize {
        self.shape[2]
    }
    /// Pixels in one frame (the last two axes).
    pub fn frame_len(&self) -> usize {
        self.shape[1] * self.shape[2]
    }
}

/// Pixel values in a stack file's own type.
#[derive(Debug, Clone, PartialEq)]
pub enum Pixels {
    U8(Vec<u8>),
    U16(Vec<u16>),
    F32(Vec<f32>),
}

impl Pixels {
    pub fn len(&self) -> usize {
        match self {
            Self::U8(v) => v.len(),
            Self::U16(v) => v.len(),
            Self::F32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dtype(&self) -> Dtype {
        match self {
            Self::U8(_) => Dtype::U8,
            Self::U16(_) => Dtype::U16,
            Self::F32(_) => Dtype::F32,
        }
    }

    /// Appends `other` (of the same type) to `self`.
    fn extend(&mut self, other: Pixels) -> Result<(), (Dtype, Dtype)> {
        match (self, other) {
            (Self::U8(a), Self::U8(b)) => a.extend(b),
            (Self::U16(a), Self::U16(b)) => a.extend(b),
            (Self::F32(a), Self::F32(b)) => a.extend(b),
            (a, b) => return Err((a.dtype(), b.dtype())),
        }
        Ok(())
    }
}

impl Stack<Pixels> {
    pub fn pixels(&self) -> &Pixels {
        &self.values
    }

    /// Image `i` converted to f32.
    pub fn image_f32(&self, i: usize) -> Vec<f32> {
        let px = self.frame_len();
        let r = i * px..(i + 1) * px;
        match &self.values {
            Pixels::U8(v) => v[r].iter().map(|&x| x as f32).collect(),
            Pixels::U16(v) => v[r].iter().map(|&x| x as f32).collect(),
            Pixels::F32(v) => v[r].to_vec(),
        }
    }

    /// The stack converted to f32.
    pub fn into_f32(self) -> Stack {
        let values = match self.values {
            Pixels::U8(v) => v.into_iter().map(f32::from).collect(),
            Pixels::U16(v) => v.into_iter().map(f32::from).collect(),
            Pixels::F32(v) => v,
        };
        Stack {
            shape: self.shape,
            values,
        }
    }
}

enum Source {
    Npy(NpyReader),
    Tiff(Box<Decoder<BufReader<File>>>),
    /// A folder of single-image TIFFs: its files in order, each opened when its image is read.
    Folder(Vec<PathBuf>),
}

/// The type a stack's images are held in: u8 and u16 as they are, every other real type as f32.
fn held_as(dtype: Dtype) -> Dtype {
    match dtype {
        Dtype::U8 | Dtype::U16 => dtype,
        _ => Dtype::F32,
    }
}

/// Reads a stack file image by image.
pub struct StackReader {
    path: PathBuf,
    count: usize,
    height: usize,
    width: usize,
    dtype: Dtype,
    next: usize,
    source: Source,
}

impl std::fmt::Debug for StackReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackReader")
            .field("path", &self.path)
            .field("count", &self.count)
            .field("height", &self.height)
            .field("width", &self.width)
            .field("dtype", &self.dtype)
            .finish()
    }
}

impl StackReader {
    /// Opens a folder of single-image TIFFs ([`open_folder`](Self::open_folder)), or `.npy`,
    /// `.tif` or `.tiff` (by extension), and checks every image's size and type.
    pub fn open(path: &Path) -> Result<Self, IoError> {
        if path.is_dir() {
            return Self::open_folder(path);
        }
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        match ext.as_str() {
            "npy" => Self::open_npy(path),
            "tif" | "tiff" => Self::open_tiff(path),
            other => Err(IoError::Corrupt {
                path: path.into(),
                reason: format!(
                    "unsupported extension '{other}': expected .npy, .tif, .tiff or a folder of \
                     .tif files"
                ),
            }),
        }
    }

    /// Opens an `.npy` stack `(images, height, width)` or one image `(height, width)`.
    pub fn open_npy(path: &Path) -> Result<Self, IoError> {
        let npy = NpyReader::open(path)?;
        let unsupported = |expected| IoError::UnsupportedDtype {
            path: path.into(),
            descr: npy.descr(),
            expected,
        };
        if npy.dtype() == Dtype::C64 {
            return Err(unsupported(
                "a real type for an image stack (uint8, uint16, int16, uint32, int32, float16, \
                 float32, float64)",
            ));
        }
        if npy.is_fortran() {
            return Err(IoError::Corrupt {
                path: path.into(),
                reason: "Fortran-ordered arrays are not supported: save with np.ascontiguousarray"
                    .into(),
            });
        }
        let (count, height, width) = match *npy.shape() {
            [h, w] => (1, h, w),
            [n, h, w] => (n, h, w),
            ref shape => {
                return Err(IoError::BadShape {
                    path: path.into(),
                    dataset: "the array".into(),
                    shape: shape.to_vec(),
                    expected: "(images, height, width) or (height, width)".into(),
                })
            }
        };
        if height == 0 || width == 0 {
            return Err(IoError::ZeroSize {
                path: path.into(),
                shape: npy.shape().to_vec(),
            });
        }
        Ok(Self {
            path: path.into(),
            count,
            height,
            width,
            dtype: npy.dtype(),
            next: 0,
            source: Source::Npy(npy),
        })
    }

    pub fn count(&self) -> usize {
        self.count
    }
    pub fn height(&self) -> usize {
        self.height
    }
    pub fn width(&self) -> usize {
        self.width
    }
    /// The file's element type (the images of any type but u8 and u16 are read as f32).
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    /// Whether the stack is TIFF: a multi-page file or a folder of single-image files.
    pub fn is_tiff(&self) -> bool {
        matches!(self.source, Source::Tiff(_) | Source::Folder(_))
    }

    /// Moves to image `index`: the next [`next_image`](Self::next_image) reads it. The images
    /// before it are not decoded (a TIFF page is found by its directory, an `.npy` image by its
    /// offset, a folder's by its file), so a part of a stack (an MPI rank's angles) costs only
    /// its own pages.
    pub fn seek(&mut self, index: usize) -> Result<(), IoError> {
        if index > self.count {
            return Err(IoError::Corrupt {
                path: self.path.clone(),
                reason: format!("image {index} requested of a stack of {}", self.count),
            });
        }
        if let Source::Npy(npy) = &mut self.source {
            npy.seek(index * self.height * self.width)?;
        }
        self.next = index;
        Ok(())
    }

    /// The next image (`None` after the last).
    pub fn next_image(&mut self) -> Option<Result<Pixels, IoError>> {
        if self.next >= self.count {
            return None;
        }
        let index = self.next;
        self.next += 1;
        Some(self.read_image(index))
    }

    fn read_image(&mut self, index: usize) -> Result<Pixels, IoError> {
        // `open` checked height x width x element size against the file's length.
        let px = self.height * self.width;
        match &mut self.source {
            Source::Npy(npy) => Ok(match self.dtype {
                Dtype::U8 => Pixels::U8(npy.read(px)?),
                Dtype::U16 => Pixels::U16(npy.read(px)?),
                // Every other type (open_npy refused complex) converted once, here.
                _ => Pixels::F32(npy.read_f32(px)?),
            }),
            Source::Tiff(dec) => {
                // `open` walked every page's directory, so any page is found directly: pages
                // need not be read in order (see `seek`).
                dec.seek_to_image(index)
                    .map_err(|e| tiff_error(&self.path, Some(index), e))?;
                decode_pixels(&self.path, dec, index, self.dtype, px)
            }
            Source::Folder(files) => {
                let file = &files[index];
                let (mut dec, file_len) = open_tiff_decoder(file)?;
                // The file may have changed since the folder was opened: its page is checked
                // again before its pixels are decoded into a buffer of the stack's size.
                let page = check_tiff_page(file, &mut dec, 0, file_len)?;
                if (page.height, page.width, page.dtype) != (self.height, self.width, self.dtype) {
                    return Err(IoError::FolderFrame {
                        folder: self.path.clone(),
                        file: file.clone(),
                        reason: format!(
                            "is now {}x{} {:?}; it was {}x{} {:?} when the folder was opened",
                            page.height,
                            page.width,
                            page.dtype,
                            self.height,
                            self.width,
                            self.dtype
                        ),
                    });
                }
                decode_pixels(file, &mut dec, 0, self.dtype, px)
            }
        }
    }
}

/// Reads a whole stack into memory, in the file's type.
pub fn read_stack(path: &Path) -> Result<Stack<Pixels>, IoError> {
    read_stack_from(path, StackReader::open(path)?)
}

/// Reads the rest of `reader` (opened on `path`) into memory.
pub(super) fn read_stack_from(
    path: &Path,
    mut reader: StackReader,
) -> Result<Stack<Pixels>, IoError> {
    let shape = [reader.count(), reader.height(), reader.width()];
    // The sizes were checked against the file when it was opened; whether they fit in this
    // machine's memory is checked here, before the first image is decoded.
    let sample = held_as(reader.dtype()).bytes() as u64;
    let bytes = shape
        .iter()
        .try_fold(sample, |acc, &d| acc.checked_mul(d as u64))
        .unwrap_or(u64::MAX);
    crate::memory::check_available(
        &format!(
            "reading the whole stack {} ({shape:?} {:?})",
            path.display(),
            reader.dtype()
        ),
        bytes,
        "read a smaller stack, or use a machine with more memory",
    )?;
    let mut values: Option<Pixels> = None;
    while let Some(image) = reader.next_image() {
        let image = image?;
        match &mut values {
            None => values = Some(image),
            Some(all) => all.extend(image).map_err(|(a, b)| IoError::Corrupt {
                path: path.into(),
                reason: format!("pages of different sample types ({a:?} and {b:?})"),
            })?,
        }
    }
    let values = values.ok_or_else(|| IoError::ZeroSize {
        path: path.into(),
        shape: shape.to_vec(),
    })?;
    Ok(Stack { shape, values })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Images are read by index from a multi-page TIFF and an `.npy` stack, in any order, and
    /// an index past the stack is refused by name.
    #[test]
    fn a_seek_reads_the_image_of_any_index() {
        let dir = tempfile::tempdir().unwrap();
        let image = |i: usize| -> Vec<f32> { (0..6).map(|v| (10 * i + v) as f32).collect() };
        let tif = dir.path().join("s.tif");
        let mut w = StackWriter::create(&tif, 4, 2, 3).unwrap();
        for i in 0..4 {
            w.write_image(&image(i)).unwrap();
        }
        w.finish().unwrap();
        let npy = dir.path().join("s.npy");
        let all: Vec<f32> = (0..4).flat_map(image).collect();
        crate::io::write_f32_npy(&npy, &[4, 2, 3], &all).unwrap();
        for path in [tif, npy] {
            let mut r = StackReader::open(&path).unwrap();
            for i in [2, 3, 0, 1, 1] {
                r.seek(i).unwrap();
                let Pixels::F32(got) = r.next_image().unwrap().unwrap() else {
                    panic!("f32 images")
                };
                assert!(got == image(i), "{path:?} image {i}");
            }
            r.seek(4).unwrap();
            assert!(r.next_image().is_none());
            let e = r.seek(5).unwrap_err().to_string();
            assert!(e.contains("image 5 requested of a stack of 4"), "{e}");
        }
    }
}
