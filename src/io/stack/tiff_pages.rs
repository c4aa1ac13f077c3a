//! Multi-page TIFF stacks: a page's header checked against the file's length before anything is
//! allocated from it, the decoder's limits, decoding a page into the stack's type.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use tiff::decoder::{Decoder, Limits};
use tiff::tags::{CompressionMethod, SampleFormat, Tag};

use super::super::npy::Dtype;
use super::super::IoError;
use super::{Pixels, Source, StackReader};

/// Compressed TIFF pages may hold more pixel bytes than the file has, but not without bound:
/// Deflate expands at most 1032:1, TIFF's 12-bit LZW about 1400:1, PackBits 64:1 and a grayscale
/// JPEG (one DC code and an end of block per 8x8 block) a few hundred to one. (HDF5 datasets use
/// only Deflate: [`super::super::MAX_COMPRESSION_RATIO`]; TIFF's LZW needs the larger bound.)
const MAX_TIFF_EXPANSION: u64 = 4096;

pub(super) fn tiff_error(path: &Path, page: Option<usize>, e: tiff::TiffError) -> IoError {
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
pub(super) struct TiffPage {
    pub(super) height: usize,
    pub(super) width: usize,
    pub(super) dtype: Dtype,
    /// Pixel bytes the page stores uncompressed (0 for a compressed page).
    stored_bytes: u64,
    /// Pixel bytes the page decodes to.
    decoded_bytes: u64,
}

pub(super) fn check_tiff_page(
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

/// Opens a TIFF file with decoder limits from its length; returns the decoder and the length.
pub(super) fn open_tiff_decoder(path: &Path) -> Result<(Decoder<BufReader<File>>, u64), IoError> {
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

impl StackReader {
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
}

/// Decodes the current page (`px` samples of `dtype`, which [`check_tiff_page`] accepted).
pub(super) fn decode_pixels(
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
