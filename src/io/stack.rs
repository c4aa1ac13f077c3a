//! Stacks of images: the one in-memory type ([`Stack`]) and the one reader and writer of stack
//! files, `.npy` (u8, u16 and f32 kept; i16, u32, i32, f16, f64 → f32), multi-page TIFF (8-bit
//! and 16-bit unsigned, 32-bit float grayscale) and folders of single-image TIFFs, read one image
//! at a time so that a stack never has to fit in memory.
//!
//! Every size a file's header claims is checked against the file's length, with checked 64-bit
//! arithmetic, before anything is allocated from it.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use tiff::decoder::{Decoder, Limits};
use tiff::tags::{CompressionMethod, SampleFormat, Tag};

use super::h5::AttrValue;
use super::npy::{f32_npy_header, Dtype, NpyReader};
use super::IoError;
use super::{LengthUnit, PixelSize};

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

/// Compressed TIFF pages may hold more pixel bytes than the file has, but not without bound:
/// Deflate expands at most 1032:1, TIFF's 12-bit LZW about 1400:1, PackBits 64:1 and a grayscale
/// JPEG (one DC code and an end of block per 8x8 block) a few hundred to one. (HDF5 datasets use
/// only Deflate: [`super::MAX_COMPRESSION_RATIO`]; TIFF's LZW needs the larger bound.)
const MAX_TIFF_EXPANSION: u64 = 4096;

fn tiff_error(path: &Path, page: Option<usize>, e: tiff::TiffError) -> IoError {
    IoError::Corrupt {
        path: path.into(),
        reason: match page {
            Some(p) => format!("TIFF page {p}: {e}"),
            None => format!("TIFF: {e}"),
        },
    }
}

/// Decoder limits from the file's length. Tag values and one compressed strip or tile are stored
/// in the file, so the file bounds them (tag values also by the decoder's default 256 MiB);
/// pixels are decoded into buffers sized by [`check_tiff_page`], not by the decoder.
fn tiff_limits(file_len: u64) -> Limits {
    let file = usize::try_from(file_len).unwrap_or(usize::MAX);
    let mut limits = Limits::default();
    // The decoder divides this by the size of its tag-value enum before comparing with a count.
    let tag_values = file.saturating_mul(std::mem::size_of::<tiff::decoder::ifd::Value>());
    limits.decoding_buffer_size = limits.decoding_buffer_size.min(tag_values);
    limits.intermediate_buffer_size = file;
    limits.ifd_value_size = limits.ifd_value_size.min(tag_values);
    limits
}

/// One page's size and type, checked against what the file can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TiffPage {
    height: usize,
    width: usize,
    dtype: Dtype,
    /// Pixel bytes the page stores uncompressed (0 for a compressed page).
    stored_bytes: u64,
    /// Pixel bytes the page decodes to.
    decoded_bytes: u64,
}

fn check_tiff_page(
    path: &Path,
    dec: &mut Decoder<BufReader<File>>,
    page: usize,
    file_len: u64,
) -> Result<TiffPage, IoError> {
    let err = |e| tiff_error(path, Some(page), e);
    let (w, h) = dec.dimensions().map_err(err)?;
    if w == 0 || h == 0 {
        return Err(IoError::Corrupt {
            path: path.into(),
            reason: format!("TIFF page {page} is {w} x {h} pixels: both sides must be at least 1"),
        });
    }
    let color = dec.colortype().map_err(err)?;
    let format = dec
        .find_tag_unsigned_vec::<u16>(Tag::SampleFormat)
        .map_err(err)?
        .and_then(|v| v.first().copied())
        .map_or(SampleFormat::Uint, SampleFormat::from_u16_exhaustive);
    let dtype = match (color, format) {
        (tiff::ColorType::Gray(8), SampleFormat::Uint) => Dtype::U8,
        (tiff::ColorType::Gray(16), SampleFormat::Uint) => Dtype::U16,
        (tiff::ColorType::Gray(32), SampleFormat::IEEEFP) => Dtype::F32,
        (other, format) => {
            return Err(IoError::UnsupportedDtype {
                path: path.into(),
                descr: format!("{other:?} {format:?} on page {page}"),
                expected: "8-bit or 16-bit unsigned, or 32-bit float grayscale (Gray(8) Uint, Gray(16) Uint, Gray(32) IEEEFP)",
            })
        }
    };
    let compression = dec
        .find_tag_unsigned::<u16>(Tag::Compression)
        .map_err(err)?
        .map_or(
            CompressionMethod::None,
            CompressionMethod::from_u16_exhaustive,
        );
    // u32 x u32 x bytes can exceed 64 bits (2^32 x 2^32 x 4): checked.
    let claimed = u64::from(w)
        .checked_mul(u64::from(h))
        .and_then(|px| px.checked_mul(dtype.bytes() as u64));
    let (limit, how) = match compression {
        CompressionMethod::None => (file_len, "uncompressed".to_string()),
        c => (
            file_len.saturating_mul(MAX_TIFF_EXPANSION),
            format!("{c:?}-compressed, at most {MAX_TIFF_EXPANSION}:1"),
        ),
    };
    match claimed {
        Some(bytes) if bytes <= limit && usize::try_from(bytes).is_ok() => Ok(TiffPage {
            height: h as usize,
            width: w as usize,
            dtype,
            stored_bytes: if compression == CompressionMethod::None {
                bytes
            } else {
                0
            },
            decoded_bytes: bytes,
        }),
        _ => Err(IoError::ImplausibleSize {
            path: path.into(),
            dataset: format!("TIFF page {page}"),
            shape: vec![u64::from(h), u64::from(w)],
            sample: format!("{dtype:?} ({how})"),
            file_bytes: file_len,
        }),
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

/// Opens a TIFF file with decoder limits from its length; returns the decoder and the length.
fn open_tiff_decoder(path: &Path) -> Result<(Decoder<BufReader<File>>, u64), IoError> {
    let read = |e: std::io::Error| IoError::Read {
        path: path.into(),
        reason: e.to_string(),
    };
    let file = File::open(path).map_err(read)?;
    let file_len = file.metadata().map_err(read)?.len();
    // `Decoder::new` reads the first directory under the decoder's default limits.
    let dec = Decoder::new(BufReader::new(file))
        .map_err(|e| tiff_error(path, None, e))?
        .with_limits(tiff_limits(file_len));
    Ok((dec, file_len))
}

/// The `.tif` / `.tiff` files of `dir` (any case; not those whose name starts with `.`, such as
/// the `._name.tif` files macOS leaves) in natural order ([`natural_cmp`]); other files and
/// sub-folders are ignored.
fn tiff_files_in(dir: &Path) -> Result<Vec<PathBuf>, IoError> {
    let read = |e: std::io::Error| IoError::Read {
        path: dir.into(),
        reason: format!("listing the folder: {e}"),
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let path = entry.map_err(read)?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !name.starts_with('.')
            && matches!(ext.to_ascii_lowercase().as_str(), "tif" | "tiff")
            && path.is_file()
        {
            files.push(path);
        }
    }
    files.sort_by(|a, b| natural_cmp(&a.to_string_lossy(), &b.to_string_lossy()));
    if files.is_empty() {
        return Err(IoError::Read {
            path: dir.into(),
            reason: "the folder holds no .tif or .tiff file".into(),
        });
    }
    Ok(files)
}

/// Natural order of names: runs of digits compare as numbers (`proj_2` before `proj_10`; with
/// equal values the shorter run, `proj_2` before `proj_002`), everything else character by
/// character, as file managers sort and as detector software numbers its frames.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (mut a, mut b) = (a, b);
    loop {
        let (Some(ca), Some(cb)) = (a.chars().next(), b.chars().next()) else {
            return a.len().cmp(&b.len());
        };
        if ca.is_ascii_digit() && cb.is_ascii_digit() {
            let run = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            let (ra, rb) = (run(a), run(b));
            let (da, db) = (&a[..ra], &b[..rb]);
            let (ta, tb) = (da.trim_start_matches('0'), db.trim_start_matches('0'));
            let order = ta
                .len()
                .cmp(&tb.len())
                .then_with(|| ta.cmp(tb))
                .then_with(|| ra.cmp(&rb));
            if order != Ordering::Equal {
                return order;
            }
            (a, b) = (&a[ra..], &b[rb..]);
        } else {
            if ca != cb {
                return ca.cmp(&cb);
            }
            (a, b) = (&a[ca.len_utf8()..], &b[cb.len_utf8()..]);
        }
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

    /// Opens a multi-page TIFF whose pages all have one size and type.
    pub fn open_tiff(path: &Path) -> Result<Self, IoError> {
        let (mut dec, file_len) = open_tiff_decoder(path)?;
        let mut first: Option<TiffPage> = None;
        let mut count = 0;
        let mut stored: u64 = 0;
        let mut decoded: u64 = 0;
        loop {
            let page = check_tiff_page(path, &mut dec, count, file_len)?;
            match first {
                None => first = Some(page),
                Some(f) if (f.height, f.width, f.dtype) != (page.height, page.width, page.dtype) => {
                    return Err(IoError::Corrupt {
                        path: path.into(),
                        reason: format!(
                            "page {count} is {}x{} {:?}, page 0 is {}x{} {:?}: all pages must match",
                            page.height, page.width, page.dtype, f.height, f.width, f.dtype
                        ),
                    })
                }
                Some(_) => {}
            }
            let too_large = |sample: String| IoError::ImplausibleSize {
                path: path.into(),
                dataset: format!("TIFF pages 0..={count} together"),
                shape: vec![count as u64 + 1, page.height as u64, page.width as u64],
                sample,
                file_bytes: file_len,
            };
            // Uncompressed pages each store their own pixels: together they fit in the file too.
            stored = stored.saturating_add(page.stored_bytes);
            if stored > file_len {
                return Err(too_large(format!("{:?} (uncompressed)", page.dtype)));
            }
            // Compressed pages may share one strip (a decompression bomb: many pages decoding the
            // same few bytes), so each page's bound alone does not bound the stack: the pages'
            // decoded bytes together must come from the file's bytes at the largest expansion.
            decoded = decoded.saturating_add(page.decoded_bytes);
            if decoded > file_len.saturating_mul(MAX_TIFF_EXPANSION) {
                return Err(too_large(format!(
                    "{:?} (decoded, at most {MAX_TIFF_EXPANSION}:1)",
                    page.dtype
                )));
            }
            count += 1;
            if !dec.more_images() {
                break;
            }
            dec.next_image()
                .map_err(|e| tiff_error(path, Some(count), e))?;
        }
        dec.seek_to_image(0)
            .map_err(|e| tiff_error(path, Some(0), e))?;
        let first = first.expect("the loop checks at least one page");
        Ok(Self {
            path: path.into(),
            count,
            height: first.height,
            width: first.width,
            dtype: first.dtype,
            next: 0,
            source: Source::Tiff(Box::new(dec)),
        })
    }

    /// Opens a folder of TIFF files of one image each, a stack of its files in natural order
    /// ([`natural_cmp`]): every file's header is checked here (one page, the first file's size
    /// and sample type, each size against the file's length); the pixels are read later, one
    /// file per image.
    pub fn open_folder(dir: &Path) -> Result<Self, IoError> {
        let files = tiff_files_in(dir)?;
        let frame_error = |file: &Path, reason: String| IoError::FolderFrame {
            folder: dir.into(),
            file: file.into(),
            reason,
        };
        let mut first: Option<TiffPage> = None;
        for file in &files {
            let (mut dec, file_len) = open_tiff_decoder(file)?;
            let page = check_tiff_page(file, &mut dec, 0, file_len)?;
            if dec.more_images() {
                return Err(frame_error(
                    file,
                    "holds more than one page; a folder holds one image per file (give a \
                     multi-page TIFF as a file, not in a folder)"
                        .into(),
                ));
            }
            match first {
                None => first = Some(page),
                Some(f)
                    if (f.height, f.width, f.dtype) != (page.height, page.width, page.dtype) =>
                {
                    return Err(frame_error(
                        file,
                        format!(
                            "is {}x{} {:?}, but the first file, {}, is {}x{} {:?}: every image \
                             of a stack has one size and sample type",
                            page.height,
                            page.width,
                            page.dtype,
                            files[0].display(),
                            f.height,
                            f.width,
                            f.dtype
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        let first = first.expect("tiff_files_in returns at least one file");
        Ok(Self {
            path: dir.into(),
            count: files.len(),
            height: first.height,
            width: first.width,
            dtype: first.dtype,
            next: 0,
            source: Source::Folder(files),
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
                if index > 0 {
                    dec.next_image()
                        .map_err(|e| tiff_error(&self.path, Some(index), e))?;
                }
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

/// Decodes the current page (`px` samples of `dtype`, which [`check_tiff_page`] accepted).
fn decode_pixels(
    path: &Path,
    dec: &mut Decoder<BufReader<File>>,
    page: usize,
    dtype: Dtype,
    px: usize,
) -> Result<Pixels, IoError> {
    Ok(match dtype {
        Dtype::U8 => Pixels::U8(decode_page(path, dec, page, px)?),
        Dtype::U16 => Pixels::U16(decode_page(path, dec, page, px)?),
        Dtype::F32 => Pixels::F32(decode_page(path, dec, page, px)?),
        other => unreachable!("check_tiff_page accepts u8, u16 and f32, not {other:?}"),
    })
}

/// Decodes the current page into a buffer of `px` samples that this function allocates (a
/// typed error, not an abort, if the memory is not there).
fn decode_page<T: bytemuck::Pod + Default>(
    path: &Path,
    dec: &mut Decoder<BufReader<File>>,
    page: usize,
    px: usize,
) -> Result<Vec<T>, IoError> {
    let mut buffer: Vec<T> = Vec::new();
    buffer.try_reserve_exact(px).map_err(|e| IoError::Read {
        path: path.into(),
        reason: format!(
            "TIFF page {page}: cannot allocate {} bytes: {e}",
            px.saturating_mul(std::mem::size_of::<T>())
        ),
    })?;
    buffer.resize(px, T::default());
    dec.read_image_bytes(bytemuck::cast_slice_mut(&mut buffer))
        .map_err(|e| tiff_error(path, Some(page), e))?;
    Ok(buffer)
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

/// The file formats a float32 stack or volume is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackFormat {
    /// NumPy `.npy`, `(count, height, width)` float32.
    Npy,
    /// Multi-page float32 TIFF, one page per image (`.tif`, `.tiff`).
    Tiff,
    /// HDF5 with the stack as the contiguous float32 dataset `/volume` (`.h5`, `.hdf5`).
    Hdf5,
    /// An OME-Zarr directory with a multiscale pyramid (`.zarr`, see [`super::zarr`]); written,
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
    /// The file, to flush to disk at the end (TIFF writes through a handle of its own); none for
    /// a directory (OME-Zarr).
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
    /// Unbuffered, so that every failed write is reported (a buffer's last flush on drop is not).
    /// With the ImageJ description (first page only) and the resolution tags of every page.
    Tiff {
        enc: Box<tiff::encoder::TiffEncoder<File>>,
        description: Option<String>,
        resolution: tiff::encoder::Rational,
    },
    Zarr(Box<super::zarr::ZarrWriter>),
}

/// `x` as a TIFF rational: six significant decimals within `u32`.
fn rational(x: f64) -> tiff::encoder::Rational {
    let d = (1e6 / x.max(1e-9)).min(1e6).round().max(1.0);
    tiff::encoder::Rational {
        n: (x * d).round().clamp(1.0, f64::from(u32::MAX)) as u32,
        d: d as u32,
    }
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

/// The ImageJ description of a float32 stack of `count` slices with voxels of `voxel_size`
/// (Fiji's and tifffile's calibration: `unit` and the z `spacing`; `pixel` when unknown).
fn imagej_description(count: usize, voxel_size: Option<PixelSize>) -> String {
    let (unit, spacing) = voxel_size.map_or(("pixel", 1.0), |v| (v.unit.imagej_name(), v.value));
    format!("ImageJ=1.11a\nimages={count}\nslices={count}\nunit={unit}\nspacing={spacing}\nloop=false\n")
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
                let options = super::zarr::ZarrOptions::for_shape(shape);
                WriterInner::Zarr(Box::new(super::zarr::ZarrWriter::create(
                    path, shape, voxel_size, options,
                )?))
            }
            StackFormat::Tiff => {
                if u32::try_from(width).is_err() || u32::try_from(height).is_err() {
                    return Err(write_error(
                        path,
                        "TIFF pages are at most 2^32 - 1 pixels wide and high",
                    ));
                }
                WriterInner::Tiff {
                    enc: Box::new(
                        tiff::encoder::TiffEncoder::new(handle()?)
                            .map_err(|e| write_error(path, e))?,
                    ),
                    description: Some(imagej_description(count, voxel_size)),
                    // Pixels per unit, the unit being ImageJ's (ResolutionUnit none).
                    resolution: rational(1.0 / voxel_size.map_or(1.0, |v| v.value)),
                }
            }
            StackFormat::Npy | StackFormat::Hdf5 => {
                let (header, suffix) = match format {
                    StackFormat::Npy => (f32_npy_header(&shape), 0),
                    _ => {
                        let layout = super::h5::ContiguousF32::with_attributes(
                            &super::h5::VOLUME[1..],
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
            WriterInner::Raw { w, .. } => {
                let mut bytes = Vec::with_capacity(image.len() * 4);
                for v in image {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
                w.write_all(&bytes).map_err(|e| write_error(path, e))?;
            }
            WriterInner::Tiff {
                enc,
                description,
                resolution,
            } => {
                let (w, h) = (self.width as u32, self.height as u32);
                let mut page = enc
                    .new_image::<tiff::encoder::colortype::Gray32Float>(w, h)
                    .map_err(|e| write_error(path, e))?;
                let tags = page.encoder();
                if let Some(text) = description.take() {
                    tags.write_tag(Tag::ImageDescription, text.as_str())
                        .map_err(|e| write_error(path, e))?;
                }
                for tag in [Tag::XResolution, Tag::YResolution] {
                    tags.write_tag(tag, resolution.clone())
                        .map_err(|e| write_error(path, e))?;
                }
                page.write_data(image).map_err(|e| write_error(path, e))?;
            }
            WriterInner::Zarr(zarr) => zarr.write_image(image)?,
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
            WriterInner::Tiff { enc, .. } => drop(enc),
            WriterInner::Zarr(zarr) => zarr.finish()?,
        }
        match self.file {
            Some(file) => file
                .sync_all()
                .map_err(|e| write_error(path, format!("flushing the file: {e}"))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::{Equal, Greater, Less};

    #[test]
    fn natural_order_compares_digit_runs_as_numbers() {
        let mut names = vec![
            "proj_10.tif",
            "proj_2.tif",
            "proj_002.tif",
            "proj_1.tif",
            "proj_0100.tif",
            "proj_99.tif",
            "flat_3.tif",
            "proj_2b.tif",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            [
                "flat_3.tif",
                "proj_1.tif",
                "proj_2.tif",
                "proj_2b.tif",
                "proj_002.tif",
                "proj_10.tif",
                "proj_99.tif",
                "proj_0100.tif",
            ]
        );
        assert_eq!(natural_cmp("a", "a"), Equal);
        assert_eq!(natural_cmp("a", "a1"), Less);
        assert_eq!(natural_cmp("a1x", "a1"), Greater);
        // Runs longer than any integer type still compare by value.
        assert_eq!(
            natural_cmp("s_100000000000000000000001", "s_99999999999999999999999"),
            Greater
        );
    }
}
