//! The layout of a float32 stack as an ImageJ hyperstack TIFF: the 8-byte header, every page's
//! pixels contiguous and in order, then every page's directory (IFD) with its tag values.
//!
//! ImageJ (Fiji) and tifffile (so napari and scikit-image) read a file whose description says
//! `images=N` as one block of N pages starting at the first page's first strip, ignoring the
//! other pages' directories; lamino's reader and libtiff follow every page's strip offsets. Only
//! a file whose pixels are one unbroken block reads the same in both ways: no directory, tag
//! value or padding may come between two strips. The directories come after the pixels, where
//! all their offsets are known before the first pixel is written.

use super::super::PixelSize;

/// Classic TIFF field types.
const ASCII: u16 = 2;
const SHORT: u16 = 3;
const LONG: u16 = 4;
const RATIONAL: u16 = 5;

/// Bytes in a strip, at most (several strips per page, as libtiff advises for large pages; the
/// tiff crate's own choice).
const STRIP_BYTES: u64 = 1_000_000;

/// A stack's TIFF, all but its pixels: the header, written first, and the directories, written
/// after the last page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ImagejTiff {
    pub(super) header: [u8; 8],
    pub(super) directories: Vec<u8>,
}

/// `x` as a TIFF rational, the denominator as large as `u32` allows: within 2e-6 of `x` for the
/// resolutions of every [`PixelSize`] (1e-4 to 1e4 pixels per micrometre).
fn rational(x: f64) -> [u32; 2] {
    let max = f64::from(u32::MAX);
    let d = if x <= 1.0 {
        max
    } else {
        (max / x).floor().max(1.0)
    };
    [(x * d).round().clamp(1.0, max) as u32, d as u32]
}

/// The ImageJ description of a float32 stack of `count` slices with voxels of `voxel_size`
/// (Fiji's and tifffile's calibration: `unit` and the z `spacing`; `pixel` when unknown).
fn imagej_description(count: usize, voxel_size: Option<PixelSize>) -> String {
    let (unit, spacing) = voxel_size.map_or(("pixel", 1.0), |v| (v.unit.imagej_name(), v.value));
    format!("ImageJ=1.11a\nimages={count}\nslices={count}\nunit={unit}\nspacing={spacing}\nloop=false\n")
}

/// One directory entry: its tag, field type, count and value bytes (inline when at most 4).
struct Entry {
    tag: u16,
    kind: u16,
    count: u32,
    bytes: Vec<u8>,
}

impl Entry {
    fn shorts(tag: u16, v: u16) -> Self {
        Self {
            tag,
            kind: SHORT,
            count: 1,
            bytes: v.to_le_bytes().to_vec(),
        }
    }
    fn longs(tag: u16, values: &[u32]) -> Self {
        Self {
            tag,
            kind: LONG,
            count: values.len() as u32,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

impl ImagejTiff {
    /// The layout of `count` float32 pages of `height × width` with voxels of `voxel_size`, or
    /// why it cannot be a classic TIFF (offsets past 4 GiB, which ImageJ's own reader and most of
    /// the field's tools do not take as BigTIFF).
    pub(super) fn new(
        [count, height, width]: [usize; 3],
        voxel_size: Option<PixelSize>,
    ) -> Result<Self, String> {
        let too_large = || {
            format!(
                "a {count} x {height} x {width} float32 stack does not fit a TIFF (at most 4 GiB); \
                 write .h5, .npy or .zarr"
            )
        };
        if count == 0 || height == 0 || width == 0 {
            return Err(format!(
                "a {count} x {height} x {width} stack: a TIFF holds at least one page of at least 1 x 1 pixels"
            ));
        }
        let row = (width as u64).checked_mul(4).ok_or_else(too_large)?;
        let page = row.checked_mul(height as u64).ok_or_else(too_large)?;
        let pixels = page.checked_mul(count as u64).ok_or_else(too_large)?;
        let rows_per_strip = STRIP_BYTES.div_ceil(row).min(height as u64);
        let strips = (height as u64).div_ceil(rows_per_strip);
        let description = imagej_description(count, voxel_size);
        // Pixels per unit, the unit being ImageJ's (ResolutionUnit none).
        let [n, d] = rational(1.0 / voxel_size.map_or(1.0, |v| v.value));
        let resolution: Vec<u8> = [n, d].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut directories = Vec::new();
        let first_directory = 8 + pixels;
        let offset = |at: u64| u32::try_from(at).map_err(|_| too_large());
        for p in 0..count as u64 {
            let data = 8 + p * page;
            let strip_offsets = (0..strips)
                .map(|s| offset(data + s * rows_per_strip * row))
                .collect::<Result<Vec<_>, _>>()?;
            let strip_counts = (0..strips)
                .map(|s| {
                    let rows = rows_per_strip.min(height as u64 - s * rows_per_strip);
                    offset(rows * row)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut entries = vec![
                Entry::longs(256, &[offset(width as u64)?]),
                Entry::longs(257, &[offset(height as u64)?]),
                Entry::shorts(258, 32),
                Entry::shorts(259, 1),
                // BlackIsZero.
                Entry::shorts(262, 1),
            ];
            if p == 0 {
                let mut text = description.clone().into_bytes();
                text.push(0);
                entries.push(Entry {
                    tag: 270,
                    kind: ASCII,
                    count: text.len() as u32,
                    bytes: text,
                });
            }
            entries.extend([
                Entry::longs(273, &strip_offsets),
                Entry::shorts(277, 1),
                Entry::longs(278, &[offset(rows_per_strip)?]),
                Entry::longs(279, &strip_counts),
            ]);
            for tag in [282, 283] {
                entries.push(Entry {
                    tag,
                    kind: RATIONAL,
                    count: 1,
                    bytes: resolution.clone(),
                });
            }
            entries.extend([Entry::shorts(296, 1), Entry::shorts(339, 3)]);
            let here = first_directory + directories.len() as u64;
            // The values too long to be inline follow the directory, each at an even offset.
            let mut values_at = here + 2 + 12 * entries.len() as u64 + 4;
            let mut values = Vec::new();
            directories.extend_from_slice(&(entries.len() as u16).to_le_bytes());
            for e in &entries {
                directories.extend_from_slice(&e.tag.to_le_bytes());
                directories.extend_from_slice(&e.kind.to_le_bytes());
                directories.extend_from_slice(&e.count.to_le_bytes());
                if e.bytes.len() <= 4 {
                    let mut inline = [0; 4];
                    inline[..e.bytes.len()].copy_from_slice(&e.bytes);
                    directories.extend_from_slice(&inline);
                } else {
                    directories.extend_from_slice(&offset(values_at)?.to_le_bytes());
                    values.extend_from_slice(&e.bytes);
                    if values.len() % 2 == 1 {
                        values.push(0);
                    }
                    values_at = here + 2 + 12 * entries.len() as u64 + 4 + values.len() as u64;
                }
            }
            let next = if p + 1 == count as u64 { 0 } else { values_at };
            directories.extend_from_slice(&offset(next)?.to_le_bytes());
            directories.extend_from_slice(&values);
        }
        offset(first_directory + directories.len() as u64)?;
        let mut header = [0; 8];
        header[..4].copy_from_slice(&[b'I', b'I', 42, 0]);
        header[4..].copy_from_slice(&offset(first_directory)?.to_le_bytes());
        Ok(Self {
            header,
            directories,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::BufReader;

    use tiff::decoder::Decoder;
    use tiff::tags::Tag;

    use super::super::super::PixelSize;
    use super::super::{Pixels, StackReader, StackWriter};

    /// Every page's strips, in file order, are one unbroken block from the first strip on (what
    /// ImageJ and tifffile read as the stack), for one, two and three pages and for pages of
    /// one strip and of several; lamino's own page-by-page reader gets the values written.
    #[test]
    fn the_pages_pixels_are_one_contiguous_block() {
        let dir = tempfile::tempdir().unwrap();
        for [n, h, w] in [
            [1, 2, 3],
            [2, 1, 5],
            [2, 2, 2],
            [3, 7, 4],
            [2, 640, 640],
            [3, 300, 1000],
        ] {
            let path = dir.path().join(format!("{n}x{h}x{w}.tif"));
            let image = |i: usize| -> Vec<f32> {
                (0..h * w).map(|v| (i * h * w + v) as f32 + 0.5).collect()
            };
            let mut writer = StackWriter::create(&path, n, h, w).unwrap();
            for i in 0..n {
                writer.write_image(&image(i)).unwrap();
            }
            writer.finish().unwrap();

            let mut dec = Decoder::new(BufReader::new(File::open(&path).unwrap())).unwrap();
            let mut next = None;
            let mut strips = 0;
            for page in 0..n {
                if page > 0 {
                    dec.next_image().unwrap();
                }
                let offsets = dec.get_tag_u64_vec(Tag::StripOffsets).unwrap();
                let counts = dec.get_tag_u64_vec(Tag::StripByteCounts).unwrap();
                strips = offsets.len();
                for (offset, count) in offsets.iter().zip(&counts) {
                    assert_eq!(*offset, next.unwrap_or(8), "{path:?} page {page}");
                    next = Some(offset + count);
                }
            }
            assert!(!dec.more_images(), "{path:?}");
            assert_eq!(next, Some(8 + (n * h * w * 4) as u64), "{path:?}");
            if h * w * 4 > 1_000_000 {
                assert!(strips > 1, "{path:?}: pages of several strips");
            }
            let bytes = std::fs::read(&path).unwrap();
            let block: Vec<f32> = bytes[8..8 + n * h * w * 4]
                .chunks(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            assert!(
                block == (0..n).flat_map(image).collect::<Vec<_>>(),
                "{path:?}"
            );

            let mut reader = StackReader::open(&path).unwrap();
            for i in 0..n {
                let Pixels::F32(got) = reader.next_image().unwrap().unwrap() else {
                    panic!("f32 pages")
                };
                assert!(got == image(i), "{path:?} page {i}");
            }
        }
    }

    /// The resolution tags give every pixel size lamino takes within 2e-6 (`1/size` pixels per
    /// micrometre), where six decimals of a `u32` numerator gave 5 significant digits at 10 um.
    #[test]
    fn the_resolution_holds_every_pixel_size_within_2e_6() {
        let mut size = PixelSize::MIN_MICROMETERS;
        while size <= PixelSize::MAX_MICROMETERS {
            for s in [size, size * 1.2345678, 0.65] {
                let [n, d] = super::rational(1.0 / s);
                let error = (f64::from(n) / f64::from(d) * s - 1.0).abs();
                assert!(error <= 2e-6, "{s}: {n}/{d}, error {error}");
            }
            size *= 10.0;
        }
    }

    /// A stack a classic TIFF cannot address, or one without a pixel, is refused before a byte
    /// is written.
    #[test]
    fn a_stack_past_4_gib_or_empty_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.tif");
        let e = StackWriter::create(&path, 1025, 1024, 1024)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not fit a TIFF (at most 4 GiB)"), "{e}");
        assert!(!path.exists());
        let e = StackWriter::create(&path, 0, 4, 4).unwrap_err().to_string();
        assert!(e.contains("at least one page"), "{e}");
    }
}
