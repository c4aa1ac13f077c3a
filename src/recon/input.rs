//! Reading a scan into line integrals with their geometry: the input routes of `lamino
//! reconstruct`, as a library a desktop app or a pipeline can call without the CLI.
//!
//! - [`ProjectionInput::LineIntegrals`]: `.npy` line integrals `-ln(I/I0)` in voxel units, shape
//!   `(ntheta, deth, detw)`, with a geometry JSON file.
//! - [`ProjectionInput::DXchange`]: a DXchange HDF5 scan, normalised with its own flats and darks.
//! - [`ProjectionInput::TiffStack`]: a multi-page TIFF of intensities with an angle list (degrees,
//!   one per line) and either white/dark fields or the open-beam estimate.
//!
//! DXchange and TIFF scans give the reference's volume: `(deth, detw, detw)`.
//!
//! [`load_projections_with`] bins the detector on the way in ([`LoadOptions::binning`]):
//! intensities, white and dark fields are summed over `b x b` blocks before the `-log`, and
//! line integrals are averaged (see [`crate::preprocess::bin_frames`] for the units).

use std::ops::Range;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::flatfield::{estimate_open_beam, FlatfieldError};
use crate::io::PixelSize;
use crate::io::{
    normalize, read_complex_npy, read_stack, read_tiff_volume, read_volume_h5, ClampCount,
    DxchangeReader, FieldMeans, IoError, NormalizeError, Scan, Stack, StackReader,
    MAX_CLAMPED_FRACTION, RATIO_FLOOR,
};
use crate::operator::{Geometry, GeometryError};
use crate::preprocess::{bin_frames, bin_geometry, bin_projections, PreprocessError};
use crate::scan::Projections;

/// Errors reading a scan; each names the file or the option at fault.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum InputError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    #[error(transparent)]
    Normalize(#[from] NormalizeError),
    #[error(transparent)]
    Flatfield(#[from] FlatfieldError),
    #[error(transparent)]
    Projections(#[from] crate::scan::ScanError),
    #[error(transparent)]
    HostMemory(#[from] crate::memory::HostMemoryError),
    #[error(transparent)]
    Preprocess(#[from] PreprocessError),
    /// The file's extension names no format lamino reads for this purpose.
    #[error("{path}: unsupported {what} format {ext:?} (expected {expected})")]
    Format {
        path: PathBuf,
        what: &'static str,
        ext: String,
        expected: &'static str,
    },
    /// An array does not have the shape the geometry or the other inputs imply.
    #[error("{path} has shape {got:?}, but {expected}")]
    Shape {
        path: PathBuf,
        got: Vec<usize>,
        expected: String,
    },
    /// The angle list cannot be read or does not match the projections.
    #[error("angle list {path}: {reason}")]
    Angles { path: PathBuf, reason: String },
    /// Something the input needs was not given.
    #[error("{0}")]
    Missing(String),
    /// Normalisation clamped so many pixels that the line integrals mean nothing.
    #[error(
        "{path}: {} of {} pixels ({:.2} %) had a transmission (I - D) / (F - D) below {RATIO_FLOOR:e} \
         and were clamped, more than the limit of {:.2} %: the white field is zero or at or below \
         the dark field, or the data are at or below the dark (wrong flats/darks, or counts that \
         are not intensities?); check the scan, or raise --max-clamped-fraction if this is really \
         what the sample does",
        counts.clamped,
        counts.pixels,
        100.0 * counts.fraction(),
        100.0 * limit
    )]
    Clamped {
        path: PathBuf,
        counts: ClampCount,
        limit: f64,
    },
    /// A volume holds NaN or infinity, where every value must be finite (a score over it means
    /// nothing).
    #[error("{path}: voxel (z, y, x) = {voxel:?} is {value}; expected finite values")]
    NonFinite {
        path: PathBuf,
        voxel: [usize; 3],
        value: f32,
    },
}

/// How the open beam (white field) of a TIFF intensity stack is known.
#[derive(Debug, Clone, PartialEq)]
pub enum Shading {
    /// Measured white fields and optional dark fields (multi-page TIFF or `.npy`), averaged.
    Fields {
        flats: PathBuf,
        darks: Option<PathBuf>,
    },
    /// Estimated from the projections themselves ([`crate::flatfield::estimate_open_beam`]); the
    /// intensities must already be dark-subtracted.
    OpenBeamEnvelope,
}

/// Where the projections come from.
#[derive(Debug, Clone, PartialEq)]
pub enum ProjectionInput {
    /// `.npy` line integrals and a geometry JSON file.
    LineIntegrals { path: PathBuf, geometry: PathBuf },
    /// A DXchange scan; `tilt_deg` overrides (or supplies) the tilt it records.
    DXchange {
        path: PathBuf,
        tilt_deg: Option<f64>,
    },
    /// A TIFF intensity stack with its angles, tilt and shading.
    TiffStack {
        path: PathBuf,
        angles: PathBuf,
        tilt_deg: f64,
        shading: Shading,
    },
}

/// Line integrals ready to reconstruct, with what a user should be told about how they were made.
#[derive(Debug)]
pub struct LoadedProjections {
    pub projections: Projections,
    /// Facts worth printing (the open-beam fit).
    pub notes: Vec<String>,
    /// Things that may be wrong with the input (clamped pixels, a poor open-beam fit).
    pub warnings: Vec<String>,
    /// How many pixels normalisation clamped (`None`: the input was line integrals already).
    pub clamps: Option<ClampCount>,
    /// The detector's effective pixel size (unbinned) where the input records it (DXchange
    /// metadata, [`crate::io::read_pixel_size`]); `None`: not recorded.
    pub pixel_size: Option<PixelSize>,
}

/// The lower-case extension of `path` ("" when it has none).
pub fn extension(path: &Path) -> String {
    path.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// How to read the projections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadOptions {
    /// Detector binning factor (1: none): `b x b` pixels become one, the volume's voxels `b`
    /// times larger.
    pub binning: usize,
    /// The largest fraction of pixels normalisation may clamp before the scan is refused
    /// ([`MAX_CLAMPED_FRACTION`] by default).
    pub max_clamped_fraction: f64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            binning: 1,
            max_clamped_fraction: MAX_CLAMPED_FRACTION,
        }
    }
}

/// Reads the projections of `input` as line integrals with their geometry.
pub fn load_projections(input: &ProjectionInput) -> Result<LoadedProjections, InputError> {
    load_projections_with(input, &LoadOptions::default())
}

/// [`load_projections`] with binning.
pub fn load_projections_with(
    input: &ProjectionInput,
    options: &LoadOptions,
) -> Result<LoadedProjections, InputError> {
    let b = options.binning;
    match input {
        ProjectionInput::LineIntegrals { path, geometry } => {
            let geometry = Geometry::read_json(geometry)?;
            let array = read_complex_npy(path)?;
            let expected = vec![geometry.ntheta(), geometry.deth, geometry.detw];
            if array.shape != expected {
                return Err(InputError::Shape {
                    path: path.clone(),
                    got: array.shape,
                    expected: format!("the geometry needs (ntheta, deth, detw) = {expected:?}"),
                });
            }
            let values = array.data.iter().map(|c| c.re).collect();
            Ok(LoadedProjections {
                projections: bin_projections(&Projections::new(geometry, values)?, b)?,
                notes: Vec::new(),
                warnings: Vec::new(),
                clamps: None,
                pixel_size: None,
            })
        }
        ProjectionInput::DXchange { path, tilt_deg } => {
            projections_from_dxchange(path, *tilt_deg, options, &|count| 0..count)
        }
        ProjectionInput::TiffStack {
            path,
            angles,
            tilt_deg,
            shading,
        } => projections_from_tiff(path, angles, *tilt_deg, shading, options),
    }
}

/// The projections of the angles `share(ntheta)` only, for an MPI rank: a DXchange scan is read as
/// that hyperslab of its projections (flats and darks whole); other inputs are read whole and the
/// other angles dropped.
pub fn load_projection_share(
    input: &ProjectionInput,
    options: &LoadOptions,
    share: &dyn Fn(usize) -> Range<usize>,
) -> Result<LoadedProjections, InputError> {
    if let ProjectionInput::DXchange { path, tilt_deg } = input {
        return projections_from_dxchange(path, *tilt_deg, options, share);
    }
    let mut loaded = load_projections_with(input, options)?;
    let angles = share(loaded.projections.geometry().ntheta());
    loaded.projections = loaded.projections.keep(angles)?;
    Ok(loaded)
}

/// The reference's geometry for a detector of `deth x detw` pixels, binned by `b`.
fn detector_geometry(
    deth: usize,
    detw: usize,
    theta: Vec<f64>,
    phi: f64,
    b: usize,
) -> Result<Geometry, InputError> {
    Ok(bin_geometry(
        &Geometry::for_detector(deth, detw, theta, phi),
        b,
    )?)
}

/// The geometry `input` gives with `options`, from its headers, metadata and side files only
/// (no projection is read): what a memory plan (`lamino reconstruct --dry-run`) needs.
pub fn input_geometry(
    input: &ProjectionInput,
    options: &LoadOptions,
) -> Result<Geometry, InputError> {
    let b = options.binning;
    match input {
        ProjectionInput::LineIntegrals { geometry, .. } => {
            Ok(bin_geometry(&Geometry::read_json(geometry)?, b)?)
        }
        ProjectionInput::DXchange { path, tilt_deg } => {
            let reader = DxchangeReader::open(path)?;
            let info = reader.info();
            let phi = tilt_phi(path, *tilt_deg, info.phi)?;
            let [_, deth, detw] = info.projections.shape;
            detector_geometry(deth, detw, info.theta.clone(), phi, b)
        }
        ProjectionInput::TiffStack {
            path,
            angles,
            tilt_deg,
            ..
        } => {
            let theta = read_angle_list(angles)?;
            let stack = StackReader::open(path)?;
            check_angle_count(path, angles, theta.len(), stack.count())?;
            let phi = (90.0 + tilt_deg).to_radians();
            detector_geometry(stack.height(), stack.width(), theta, phi, b)
        }
    }
}

/// The tilt `phi` (radians): `tilt_deg` given, else what the scan at `path` records.
fn tilt_phi(path: &Path, tilt_deg: Option<f64>, recorded: Option<f64>) -> Result<f64, InputError> {
    match (tilt_deg, recorded) {
        (Some(t), _) => Ok((90.0 + t).to_radians()),
        (None, Some(phi)) => Ok(phi),
        (None, None) => Err(InputError::Missing(format!(
            "{} records no tilt (/lamino/phi_deg): pass --tilt-deg",
            path.display()
        ))),
    }
}

fn check_angle_count(
    path: &Path,
    angles: &Path,
    listed: usize,
    count: usize,
) -> Result<(), InputError> {
    if listed == count {
        return Ok(());
    }
    Err(InputError::Angles {
        path: angles.into(),
        reason: format!(
            "lists {listed} angles for {count} projections in {}",
            path.display()
        ),
    })
}

/// Bytes of raw projections read at a time when normalising block by block.
const READ_BLOCK_BYTES: usize = 64 << 20;

/// Room for the line integrals of `count` frames of `h x w`, after checking that host memory
/// holds them.
fn line_integral_buffer(
    path: &Path,
    count: usize,
    h: usize,
    w: usize,
) -> Result<Vec<f32>, InputError> {
    let len = count * h * w;
    crate::memory::check_available(
        &format!("the line integrals of {}", path.display()),
        len as u64 * 4,
        "reconstruct on a machine with more memory, or bin the scan (--binning)",
    )?;
    Ok(Vec::with_capacity(len))
}

/// Line integrals of a DXchange scan, read, binned and normalised a block of angles at a time,
/// so the raw and the normalised projections are never both held whole.
/// Line integrals of the projections `share(count)` of a DXchange scan (read as that hyperslab).
fn projections_from_dxchange(
    path: &Path,
    tilt_deg: Option<f64>,
    options: &LoadOptions,
    share: &dyn Fn(usize) -> Range<usize>,
) -> Result<LoadedProjections, InputError> {
    let b = options.binning;
    let reader = DxchangeReader::open(path)?;
    let info = reader.info().clone();
    let phi = tilt_phi(path, tilt_deg, info.phi)?;
    let [count, deth, detw] = info.projections.shape;
    let geometry = detector_geometry(deth, detw, info.theta, phi, b)?;
    let frame = [geometry.deth, geometry.detw];
    let means = FieldMeans::new(
        &bin_frames(reader.read_flats()?, b)?,
        &bin_frames(reader.read_darks()?, b)?,
        frame,
    )?;
    let per_block = (READ_BLOCK_BYTES / (4 * deth * detw).max(1)).max(1);
    let angles = share(count);
    let mut values = line_integral_buffer(path, angles.len(), frame[0], frame[1])?;
    let mut clamped = 0;
    for start in angles.clone().step_by(per_block) {
        let block = reader.read_projections(start..(start + per_block).min(angles.end))?;
        clamped += means.append(&bin_frames(block, b)?, &mut values)?;
    }
    let mut warnings = Vec::new();
    let clamps = clamp_outcome(path, clamped, values.len(), options, &mut warnings)?;
    let mut notes = Vec::new();
    let pixel_size = match crate::io::read_pixel_size(path) {
        Ok(Some((size, from))) => {
            notes.push(format!("pixel size {} um (from {from})", size.value));
            Some(size)
        }
        Ok(None) => None,
        // Metadata only calibrates the outputs: a scan whose pixel size cannot be read is
        // still reconstructed, in voxel units.
        Err(e) => {
            warnings.push(format!("the pixel size was not read: {e}"));
            None
        }
    };
    Ok(LoadedProjections {
        projections: Projections::part(geometry, angles, values)?,
        notes,
        warnings,
        clamps: Some(clamps),
        pixel_size,
    })
}

/// Projection angles from a text file of degrees separated by white space, in radians.
pub fn read_angle_list(path: &Path) -> Result<Vec<f64>, InputError> {
    let bad = |reason: String| InputError::Angles {
        path: path.into(),
        reason,
    };
    let text = crate::io::read_text(path).map_err(|e| bad(e.to_string()))?;
    text.split_whitespace()
        .map(|t| match t.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v.to_radians()),
            _ => Err(bad(format!("{t:?} is not a finite angle in degrees"))),
        })
        .collect()
}

/// A multi-page TIFF or `.npy` intensity stack as f32 `(count, height, width)`.
pub fn read_intensity_stack(path: &Path) -> Result<Stack, InputError> {
    Ok(read_stack(path)?.into_f32())
}

/// Line integrals from a multi-page TIFF of intensities, with angles from a text file and the
/// shading from white and dark fields or the open-beam estimate.
fn projections_from_tiff(
    path: &Path,
    angles: &Path,
    tilt_deg: f64,
    shading: &Shading,
    options: &LoadOptions,
) -> Result<LoadedProjections, InputError> {
    let b = options.binning;
    let theta = read_angle_list(angles)?;
    let mut pages = StackReader::open(path)?;
    let (count, raw_h, raw_w) = (pages.count(), pages.height(), pages.width());
    check_angle_count(path, angles, theta.len(), count)?;
    let geometry = detector_geometry(raw_h, raw_w, theta, (90.0 + tilt_deg).to_radians(), b)?;
    let (deth, detw) = (geometry.deth, geometry.detw);
    let mut notes = Vec::new();
    let mut warnings = Vec::new();
    let (values, clamped) = match shading {
        Shading::Fields { flats, darks } => {
            let flats = bin_frames(read_intensity_stack(flats)?, b)?;
            let darks = match darks {
                Some(d) => bin_frames(read_intensity_stack(d)?, b)?,
                None => Stack {
                    shape: [1, deth, detw],
                    values: vec![0.0; deth * detw],
                },
            };
            // Page by page: the raw stack is never held whole beside the line integrals.
            let means = FieldMeans::new(&flats, &darks, [deth, detw])?;
            let mut values = line_integral_buffer(path, count, deth, detw)?;
            let mut clamped = 0;
            while let Some(page) = pages.next_image() {
                let page = Stack {
                    shape: [1, raw_h, raw_w],
                    values: page?,
                }
                .into_f32();
                clamped += means.append(&bin_frames(page, b)?, &mut values)?;
            }
            (values, clamped)
        }
        Shading::OpenBeamEnvelope => {
            // The estimate needs every projection at once.
            drop(pages);
            let data = bin_frames(read_intensity_stack(path)?, b)?;
            let beam = estimate_open_beam(&data.values, count, deth, detw)?;
            notes.push(format!(
                "open beam estimated from the projections: a smooth surface on {:.0} % of the \
                 detector (residual {:.2e} in ln I)",
                100.0 * beam.support_fraction,
                beam.residual_std
            ));
            warnings.extend(beam.warnings.iter().cloned());
            beam.line_integrals(&data.values)
        }
    };
    let clamps = clamp_outcome(path, clamped, values.len(), options, &mut warnings)?;
    Ok(LoadedProjections {
        projections: Projections::new(geometry, values)?,
        notes,
        warnings,
        clamps: Some(clamps),
        pixel_size: None,
    })
}

/// The clamp count of `pixels` normalised line integrals of `path`: a warning for any clamped
/// pixel, and a refusal when more than `options.max_clamped_fraction` of them were.
fn clamp_outcome(
    path: &Path,
    clamped: usize,
    pixels: usize,
    options: &LoadOptions,
    warnings: &mut Vec<String>,
) -> Result<ClampCount, InputError> {
    let counts = ClampCount {
        clamped: clamped as u64,
        pixels: pixels as u64,
    };
    let limit = options.max_clamped_fraction;
    // A NaN limit refuses rather than accepts.
    if limit.is_nan() || counts.fraction() > limit {
        return Err(InputError::Clamped {
            path: path.into(),
            counts,
            limit: options.max_clamped_fraction,
        });
    }
    if clamped > 0 {
        warnings.push(format!(
            "{clamped} of {pixels} pixels ({:.3} %) had a transmission (I - D) / (F - D) below \
             {RATIO_FLOOR:e} (intensity at or below the dark, or a flat at or below the dark) and \
             were raised to it (dead pixels or wrong flats?)",
            100.0 * counts.fraction()
        ));
    }
    Ok(counts)
}

/// Line integrals from a DXchange scan: flat/dark normalisation and -log. `tilt_deg` overrides
/// the tilt the scan records; one of the two must exist. Refused when more than
/// [`MAX_CLAMPED_FRACTION`] of the pixels are clamped.
pub fn projections_from_scan(
    path: &Path,
    scan: Scan,
    tilt_deg: Option<f64>,
) -> Result<LoadedProjections, InputError> {
    let phi = tilt_phi(path, tilt_deg, scan.phi)?;
    let [_, deth, detw] = scan.data.shape;
    let normalized = normalize(&scan.data, &scan.flats, &scan.darks)?;
    let mut warnings = Vec::new();
    let clamps = clamp_outcome(
        path,
        normalized.clamped,
        normalized.projections.values.len(),
        &LoadOptions::default(),
        &mut warnings,
    )?;
    let geometry = Geometry::for_detector(deth, detw, scan.theta, phi);
    Ok(LoadedProjections {
        projections: Projections::new(geometry, normalized.projections.values)?,
        notes: Vec::new(),
        warnings,
        clamps: Some(clamps),
        pixel_size: None,
    })
}

/// Checks that every value of `volume` (read from `path`) is finite; the error names the first
/// voxel that is not and its value.
pub fn check_finite(path: &Path, volume: &Stack) -> Result<(), InputError> {
    match volume.values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => {
            let [_, n1, n2] = volume.shape;
            Err(InputError::NonFinite {
                path: path.into(),
                voxel: [i / (n1 * n2), i / n2 % n1, i % n2],
                value: volume.values[i],
            })
        }
    }
}

/// A 3D volume: float32 TIFF, `.npy` (complex64 or float32; the real part) or the ground truth
/// `/truth/volume` of a simulated DXchange scan.
pub fn read_volume(path: &Path) -> Result<Stack, InputError> {
    match extension(path).as_str() {
        "tif" | "tiff" => Ok(read_tiff_volume(path)?),
        "h5" | "hdf5" => Ok(read_volume_h5(path)?),
        "npy" => {
            let a = read_complex_npy(path)?;
            let shape: [usize; 3] = a.shape.clone().try_into().map_err(|_| InputError::Shape {
                path: path.into(),
                got: a.shape.clone(),
                expected: "a volume has three axes".into(),
            })?;
            Ok(Stack {
                shape,
                values: a.data.iter().map(|c| c.re).collect(),
            })
        }
        other => Err(InputError::Format {
            path: path.into(),
            what: "volume",
            ext: other.into(),
            expected:
                ".tif, .npy or .h5 (a reconstruction's /volume or a simulated scan's /truth/volume)",
        }),
    }
}
