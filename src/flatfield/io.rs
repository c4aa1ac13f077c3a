//! Stack and field files: `.npy` (u8, u16, f32, f64 → f32) and multi-page TIFF (8-bit, 16-bit
//! unsigned and 32-bit float grayscale) stacks, read one image at a time so that a stack never has
//! to fit in memory; fields as a directory of `.npy`, `.tif` and PNG previews.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use ndarray::{Array1, Array2};
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

use super::{Fields, FitReport, FlatfieldError, Pixels, Stack};

fn file_error(path: &Path, reason: impl ToString) -> FlatfieldError {
    FlatfieldError::File {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// The element type of a stack file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    U8,
    U16,
    F32,
    F64,
}

impl Dtype {
    fn bytes(self) -> usize {
        match self {
            Self::U8 => 1,
            Self::U16 => 2,
            Self::F32 => 4,
            Self::F64 => 8,
        }
    }
}

enum Source {
    Npy(BufReader<File>),
    Tiff(Box<tiff::decoder::Decoder<BufReader<File>>>),
}

/// Reads a stack image by image.
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

/// The parsed header of an `.npy` file: dtype, shape, and where the data start.
fn npy_header(
    path: &Path,
    f: &mut impl Read,
) -> Result<(String, bool, Vec<usize>), FlatfieldError> {
    let bad = |r: &str| file_error(path, format!("not a valid .npy file: {r}"));
    let mut magic = [0u8; 8];
    f.read_exact(&mut magic).map_err(|_| bad("too short"))?;
    if &magic[..6] != b"\x93NUMPY" {
        return Err(bad("missing the \\x93NUMPY magic string"));
    }
    let len = if magic[6] == 1 {
        let mut b = [0u8; 2];
        f.read_exact(&mut b).map_err(|_| bad("truncated header"))?;
        u16::from_le_bytes(b) as usize
    } else {
        let mut b = [0u8; 4];
        f.read_exact(&mut b).map_err(|_| bad("truncated header"))?;
        u32::from_le_bytes(b) as usize
    };
    if len > 1 << 20 {
        return Err(bad("header longer than 1 MiB"));
    }
    let mut header = vec![0u8; len];
    f.read_exact(&mut header)
        .map_err(|_| bad("truncated header"))?;
    let header = String::from_utf8_lossy(&header).to_string();
    let field = |key: &str| -> Option<String> {
        let rest = header.split_once(&format!("'{key}'"))?.1;
        Some(
            rest.trim_start()
                .trim_start_matches(':')
                .trim_start()
                .to_string(),
        )
    };
    let descr = field("descr")
        .and_then(|r| r.split('\'').nth(1).map(str::to_string))
        .ok_or_else(|| bad("no 'descr' field"))?;
    let fortran = field("fortran_order")
        .map(|r| r.starts_with("True"))
        .ok_or_else(|| bad("no 'fortran_order' field"))?;
    let shape_text = field("shape")
        .and_then(|r| Some(r.split_once('(')?.1.split_once(')')?.0.to_string()))
        .ok_or_else(|| bad("no 'shape' field"))?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| bad("shape is not a tuple of integers"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((descr, fortran, shape))
}

impl StackReader {
    /// Opens `.npy`, `.tif` or `.tiff` (by extension) and checks every image's size and type.
    pub fn open(path: &Path) -> Result<Self, FlatfieldError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let file = File::open(path).map_err(|e| file_error(path, e))?;
        let mut r = BufReader::new(file);
        match ext.as_str() {
            "npy" => {
                let (descr, fortran, shape) = npy_header(path, &mut r)?;
                let dtype = match descr.as_str() {
                    "|u1" | "<u1" => Dtype::U8,
                    "<u2" => Dtype::U16,
                    "<f4" => Dtype::F32,
                    "<f8" => Dtype::F64,
                    other => {
                        return Err(file_error(
                            path,
                            format!("dtype '{other}' is not supported: use uint8, uint16, float32 or float64 (little-endian)"),
                        ))
                    }
                };
                if fortran {
                    return Err(file_error(
                        path,
                        "Fortran-ordered arrays are not supported: save with np.ascontiguousarray",
                    ));
                }
                let (count, height, width) = match shape[..] {
                    [h, w] => (1, h, w),
                    [n, h, w] => (n, h, w),
                    _ => {
                        return Err(file_error(
                            path,
                            format!(
                            "shape {shape:?}: expected (images, height, width) or (height, width)"
                        ),
                        ))
                    }
                };
                Ok(Self {
                    path: path.to_path_buf(),
                    count,
                    height,
                    width,
                    dtype,
                    next: 0,
                    source: Source::Npy(r),
                })
            }
            "tif" | "tiff" => {
                let tiff_err = |e: tiff::TiffError| file_error(path, format!("TIFF: {e}"));
                let mut dec = tiff::decoder::Decoder::new(r)
                    .map_err(tiff_err)?
                    .with_limits(tiff::decoder::Limits::unlimited());
                let mut first = None;
                let mut count = 0;
                loop {
                    let (w, h) = dec.dimensions().map_err(tiff_err)?;
                    let dtype = match dec.colortype().map_err(tiff_err)? {
                        tiff::ColorType::Gray(8) => Dtype::U8,
                        tiff::ColorType::Gray(16) => Dtype::U16,
                        tiff::ColorType::Gray(32) => Dtype::F32,
                        other => {
                            return Err(file_error(
                                path,
                                format!("page {count} has color type {other:?}: only 8-bit, 16-bit unsigned and 32-bit float grayscale are supported"),
                            ))
                        }
                    };
                    let this = (h as usize, w as usize, dtype);
                    match first {
                        None => first = Some(this),
                        Some(f) if f != this => {
                            return Err(file_error(
                                path,
                                format!("page {count} is {}x{} {:?}, page 0 is {}x{} {:?}: all pages must match", this.0, this.1, this.2, f.0, f.1, f.2),
                            ))
                        }
                        Some(_) => {}
                    }
                    count += 1;
                    if !dec.more_images() {
                        break;
                    }
                    dec.next_image().map_err(tiff_err)?;
                }
                dec.seek_to_image(0).map_err(tiff_err)?;
                let (height, width, dtype) = first.expect("a TIFF has at least one page");
                Ok(Self {
                    path: path.to_path_buf(),
                    count,
                    height,
                    width,
                    dtype,
                    next: 0,
                    source: Source::Tiff(Box::new(dec)),
                })
            }
            other => Err(file_error(
                path,
                format!("unsupported extension '{other}': expected .npy, .tif or .tiff"),
            )),
        }
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
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    pub fn is_tiff(&self) -> bool {
        matches!(self.source, Source::Tiff(_))
    }

    /// The next image (`None` after the last).
    pub fn next_image(&mut self) -> Option<Result<Pixels, FlatfieldError>> {
        if self.next >= self.count {
            return None;
        }
        let index = self.next;
        self.next += 1;
        Some(self.read_image(index))
    }

    fn read_image(&mut self, index: usize) -> Result<Pixels, FlatfieldError> {
        let px = self.height * self.width;
        let path = self.path.clone();
        match &mut self.source {
            Source::Npy(r) => {
                let mut raw = vec![0u8; px * self.dtype.bytes()];
                r.read_exact(&mut raw).map_err(|_| {
                    file_error(&path, format!("truncated: image {index} is missing"))
                })?;
                Ok(match self.dtype {
                    Dtype::U8 => Pixels::U8(raw),
                    Dtype::U16 => Pixels::U16(
                        raw.chunks_exact(2)
                            .map(|b| u16::from_le_bytes([b[0], b[1]]))
                            .collect(),
                    ),
                    Dtype::F32 => Pixels::F32(
                        raw.chunks_exact(4)
                            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                            .collect(),
                    ),
                    Dtype::F64 => Pixels::F32(
                        raw.chunks_exact(8)
                            .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32)
                            .collect(),
                    ),
                })
            }
            Source::Tiff(dec) => {
                let tiff_err =
                    |e: tiff::TiffError| file_error(&path, format!("TIFF page {index}: {e}"));
                if index > 0 {
                    dec.next_image().map_err(tiff_err)?;
                }
                let pixels = match dec.read_image().map_err(tiff_err)? {
                    tiff::decoder::DecodingResult::U8(v) => Pixels::U8(v),
                    tiff::decoder::DecodingResult::U16(v) => Pixels::U16(v),
                    tiff::decoder::DecodingResult::F32(v) => Pixels::F32(v),
                    _ => {
                        return Err(file_error(
                            &path,
                            format!("TIFF page {index}: unsupported sample format (only unsigned 8/16-bit and 32-bit float)"),
                        ))
                    }
                };
                if pixels.len() != px {
                    return Err(file_error(
                        &path,
                        format!(
                            "TIFF page {index} decoded to {} values, expected {px}",
                            pixels.len()
                        ),
                    ));
                }
                Ok(pixels)
            }
        }
    }
}

/// Reads a whole stack into memory.
pub fn read_stack(path: &Path) -> Result<Stack, FlatfieldError> {
    let mut r = StackReader::open(path)?;
    let (count, height, width) = (r.count(), r.height(), r.width());
    let mut all: Option<Pixels> = None;
    while let Some(img) = r.next_image() {
        let img = img?;
        all = Some(match (all, img) {
            (None, p) => p,
            (Some(Pixels::U8(mut a)), Pixels::U8(b)) => {
                a.extend(b);
                Pixels::U8(a)
            }
            (Some(Pixels::U16(mut a)), Pixels::U16(b)) => {
                a.extend(b);
                Pixels::U16(a)
            }
            (Some(Pixels::F32(mut a)), Pixels::F32(b)) => {
                a.extend(b);
                Pixels::F32(a)
            }
            _ => return Err(file_error(path, "pages of different sample types")),
        });
    }
    let pixels = all.ok_or_else(|| file_error(path, "the stack holds no image"))?;
    Stack::new(count, height, width, pixels)
}

/// Writes a float32 stack image by image: `.npy` (count known up front) or multi-page TIFF.
pub struct StackWriter {
    path: PathBuf,
    inner: WriterInner,
    height: usize,
    width: usize,
}

enum WriterInner {
    Npy(BufWriter<File>),
    Tiff(Box<tiff::encoder::TiffEncoder<BufWriter<File>>>),
}

impl std::fmt::Debug for StackWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackWriter")
            .field("path", &self.path)
            .finish()
    }
}

fn npy_f32_header(shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = if shape.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_text}, }}");
    // Pad with spaces so that magic + length + dict + '\n' is a multiple of 64 bytes.
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((dict.len() as u16).to_le_bytes());
    out.extend(dict.as_bytes());
    out
}

impl StackWriter {
    /// Creates `path` (`.npy` or `.tif`) for `count` images of `height × width`.
    pub fn create(
        path: &Path,
        count: usize,
        height: usize,
        width: usize,
    ) -> Result<Self, FlatfieldError> {
        let file = File::create(path).map_err(|e| file_error(path, e))?;
        let mut w = BufWriter::new(file);
        let tiff = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("tif" | "tiff")
        );
        let inner = if tiff {
            WriterInner::Tiff(Box::new(
                tiff::encoder::TiffEncoder::new(w).map_err(|e| file_error(path, e))?,
            ))
        } else {
            w.write_all(&npy_f32_header(&[count, height, width]))
                .map_err(|e| file_error(path, e))?;
            WriterInner::Npy(w)
        };
        Ok(Self {
            path: path.to_path_buf(),
            inner,
            height,
            width,
        })
    }

    pub fn write_image(&mut self, image: &[f32]) -> Result<(), FlatfieldError> {
        let path = &self.path;
        match &mut self.inner {
            WriterInner::Npy(w) => {
                for v in image {
                    w.write_all(&v.to_le_bytes())
                        .map_err(|e| file_error(path, e))?;
                }
                Ok(())
            }
            WriterInner::Tiff(enc) => enc
                .write_image::<tiff::encoder::colortype::Gray32Float>(
                    self.width as u32,
                    self.height as u32,
                    image,
                )
                .map_err(|e| file_error(path, e)),
        }
    }

    pub fn finish(self) -> Result<(), FlatfieldError> {
        match self.inner {
            WriterInner::Npy(mut w) => w.flush().map_err(|e| file_error(&self.path, e)),
            WriterInner::Tiff(_) => Ok(()),
        }
    }
}

/// Writes `flatfield`, `darkfield`, `baseline` as float32 `.npy` and `.tif`, PNG previews of the
/// two fields (min–max scaled to 8 bits), and `report.json` when a report is given.
pub fn write_fields(
    dir: &Path,
    fields: &Fields,
    report: Option<&FitReport>,
) -> Result<(), FlatfieldError> {
    std::fs::create_dir_all(dir).map_err(|e| file_error(dir, e))?;
    let (h, w) = (fields.height, fields.width);
    let images: [(&str, &[f32], usize, usize); 3] = [
        ("flatfield", &fields.flatfield, h, w),
        ("darkfield", &fields.darkfield, h, w),
        ("baseline", &fields.baseline, 1, fields.baseline.len()),
    ];
    for (name, data, rows, cols) in images {
        let npy = dir.join(format!("{name}.npy"));
        let file = File::create(&npy).map_err(|e| file_error(&npy, e))?;
        let mut out = BufWriter::new(file);
        if rows == 1 {
            Array1::from_vec(data.to_vec()).write_npy(&mut out)
        } else {
            Array2::from_shape_vec((rows, cols), data.to_vec())
                .expect("field sizes match their shape")
                .write_npy(&mut out)
        }
        .map_err(|e| file_error(&npy, e))?;
        if cols > 0 {
            let mut tif = StackWriter::create(&dir.join(format!("{name}.tif")), 1, rows, cols)?;
            tif.write_image(data)?;
            tif.finish()?;
        }
        if rows > 1 {
            let png = dir.join(format!("{name}.png"));
            crate::io::write_png_preview(&png, data, rows, cols)
                .map_err(|e| file_error(&png, e))?;
        }
    }
    if let Some(report) = report {
        let path = dir.join("report.json");
        let text = serde_json::to_string_pretty(report).map_err(|e| file_error(&path, e))?;
        std::fs::write(&path, text).map_err(|e| file_error(&path, e))?;
    }
    Ok(())
}

/// Reads `flatfield.npy`, `darkfield.npy` and `baseline.npy` from a fields directory.
pub fn read_fields(dir: &Path) -> Result<Fields, FlatfieldError> {
    let read2 = |name: &str| -> Result<Array2<f32>, FlatfieldError> {
        let p = dir.join(name);
        let f = File::open(&p).map_err(|e| file_error(&p, e))?;
        Array2::<f32>::read_npy(f).map_err(|e| file_error(&p, e))
    };
    let flat = read2("flatfield.npy")?;
    let dark = read2("darkfield.npy")?;
    if flat.dim() != dark.dim() {
        return Err(file_error(
            dir,
            format!(
                "flatfield is {:?} but darkfield is {:?}",
                flat.dim(),
                dark.dim()
            ),
        ));
    }
    let p = dir.join("baseline.npy");
    let baseline = match File::open(&p) {
        Ok(f) => Array1::<f32>::read_npy(f)
            .map_err(|e| file_error(&p, e))?
            .to_vec(),
        Err(_) => Vec::new(),
    };
    let (height, width) = flat.dim();
    Ok(Fields {
        height,
        width,
        flatfield: flat.iter().cloned().collect(),
        darkfield: dark.iter().cloned().collect(),
        baseline,
    })
}

/// Whether a path names a TIFF file (by extension).
pub fn is_tiff_path(path: &Path) -> bool {
    matches!(
        path.extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref(),
        Some("tif" | "tiff")
    )
}
