//! Reading a scan into line integrals with their geometry: the input routes of `lamino
//! reconstruct`, as a library a desktop app or a pipeline can call without the CLI.
//!
//! - [`ProjectionInput::LineIntegrals`]: `.npy` line integrals `-ln(I/I0)` in voxel units, shape
//!   `(ntheta, deth, detw)`, with a geometry JSON file.
//! - [`ProjectionInput::DXchange`]: an HDF5 scan, DXchange or NeXus NXtomo (told apart by what
//!   the file holds), normalised with its own flats and darks (zero darks when it has none).
//! - [`ProjectionInput::TiffStack`]: a multi-page TIFF of intensities with an angle list (see
//!   [`read_angle_list_in`]) and either white/dark fields or the open-beam estimate.
//!
//! DXchange and TIFF scans give the reference's volume: `(deth, detw, detw)`.
//!
//! [`load_projections_with`] bins the detector on the way in ([`LoadOptions::binning`]):
//! intensities, white and dark fields are summed over `b x b` blocks before the `-log`, and
//! line integrals are averaged (see [`crate::preprocess::bin_frames`] for the units).

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::flatfield::FlatfieldError;
use crate::geometry::Tilt;
use crate::geometry::{Geometry, GeometryError};
use crate::io::PixelSize;
use crate::io::{
    angles_in_radians, parse_angle_list, read_complex_npy, read_stack, read_tiff_volume,
    read_volume_h5, AngleUnit, ClampCount, DxchangeReader, IoError, NormalizeError, NxtomoReader,
    Scan, ScanInfo, ScanOptions, Stack, StackReader, MAX_CLAMPED_FRACTION, NXTOMO_NO_ENTRY,
    RATIO_FLOOR,
};
use crate::preprocess::{bin_geometry, PreprocessError};
use crate::scan::{Projections, ScanError};

mod share;
pub use share::load_projection_share;

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
    Projections(#[from] ScanError),
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
    /// An option was given that means nothing for this kind of input: refused rather than
    /// silently ignored.
    #[error("{option} does not apply to {path} ({kind}): {why}")]
    NotApplicable {
        option: &'static str,
        path: PathBuf,
        kind: &'static str,
        why: &'static str,
    },
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
    /// An HDF5 scan (DXchange or NXtomo); `tilt_deg` overrides (or supplies) the tilt it
    /// records, `angles` (an angle list, see [`read_angle_list_in`]) replaces its angles, and
    /// `theta_units` gives the unit of the angles where the file or list states none.
    ///
    /// `tilt_path` and `theta_path` name datasets of the file holding the tilt `T` and the
    /// angles where the layout's own places do not (`--tilt-path`, `--theta-path`).
    DXchange {
        path: PathBuf,
        tilt_deg: Option<f64>,
        angles: Option<PathBuf>,
        theta_units: Option<AngleUnit>,
        tilt_path: Option<String>,
        theta_path: Option<String>,
    },
    /// A TIFF intensity stack with its angles (`theta_units`: their unit where the list states
    /// none), tilt and shading.
    TiffStack {
        path: PathBuf,
        angles: PathBuf,
        theta_units: Option<AngleUnit>,
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
    /// Where the tilt came from: `--tilt-deg`, a dataset of the file, the geometry file.
    pub tilt_source: String,
    /// Where the projection angles came from: a dataset of the file, an angle list, the
    /// geometry file.
    pub angles_source: String,
    /// Projections (frames) decoded from the file: every angle's, or an MPI rank's share only
    /// ([`load_projection_share`]); flats and darks are not counted.
    pub frames_read: usize,
}

impl LoadedProjections {
    /// Line integrals a caller gives in memory (nothing read, nothing to note or warn of):
    /// `tilt_source` and `angles_source` say where the caller's tilt and angles came from.
    pub fn given(projections: Projections, tilt_source: &str, angles_source: &str) -> Self {
        let frames_read = projections.geometry().ntheta();
        Self {
            projections,
            notes: Vec::new(),
            warnings: Vec::new(),
            clamps: None,
            pixel_size: None,
            tilt_source: tilt_source.into(),
            angles_source: angles_source.into(),
            frames_read,
        }
    }
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
    load_projection_share(input, options, &|count| 0..count)
}

/// The geometry file of `.npy` line integrals: any volume and detector size of at least 1, as
/// for the other inputs (the reconstruction pads them to what the operator takes, see
/// [`crate::recon::padding`]); everything else checked as the operator checks it.
fn read_scan_geometry(path: &Path) -> Result<Geometry, InputError> {
    let g = Geometry::parse_json(path)?;
    crate::scan::validate_scan_geometry(&g).map_err(|e| GeometryError::File {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok(g)
}

/// The reference's geometry for a detector of `deth x detw` pixels, binned by `b`.
fn detector_geometry(
    deth: usize,
    detw: usize,
    theta: Vec<f64>,
    tilt: Tilt,
    b: usize,
) -> Result<Geometry, InputError> {
    Ok(bin_geometry(
        &Geometry::for_detector(deth, detw, theta, tilt),
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
            Ok(bin_geometry(&read_scan_geometry(geometry)?, b)?)
        }
        ProjectionInput::DXchange { .. } => {
            let (scan, path, tilt_deg) = hdf5_scan(input)?;
            let info = scan.info();
            let tilt = scan_tilt(path, tilt_deg, info)?.tilt;
            let [_, deth, detw] = info.projections.shape;
            detector_geometry(deth, detw, info.theta.clone(), tilt, b)
        }
        ProjectionInput::TiffStack {
            path,
            angles,
            theta_units,
            tilt_deg,
            ..
        } => {
            let theta = read_angle_list_in(angles, *theta_units)?;
            let stack = StackReader::open(path)?;
            check_angle_count(path, angles, theta.len(), stack.count())?;
            let tilt = Tilt::from_degrees(*tilt_deg);
            detector_geometry(stack.height(), stack.width(), theta, tilt, b)
        }
    }
}

/// [`Hdf5Scan::open`] for an input known to be an HDF5 scan.
fn hdf5_scan(input: &ProjectionInput) -> Result<OpenedScan<'_>, InputError> {
    Hdf5Scan::open(input).unwrap_or_else(|| {
        Err(InputError::Missing(
            "an HDF5 scan was expected (DXchange or NXtomo)".into(),
        ))
    })
}

/// A scan's tilt and what a user must be told about it.
struct ScanTilt {
    tilt: Tilt,
    /// Where it came from.
    source: String,
    /// `--tilt-deg` overriding a tilt the file records differently, or one it could not read.
    warning: Option<String>,
}

/// The tilt of the HDF5 scan at `path` (`info`): `tilt_deg` given, else what the file records
/// (its source said); a given tilt that differs from the file's wins, said.
fn scan_tilt(path: &Path, tilt_deg: Option<f64>, info: &ScanInfo) -> Result<ScanTilt, InputError> {
    let recorded = info.tilt.zip(info.tilt_source.as_ref());
    match (tilt_deg, recorded) {
        (Some(t), recorded) => {
            let warning = match (recorded, &info.tilt_unread) {
                (Some((tilt, from)), _) if (tilt.degrees() - t).abs() > 1e-9 => Some(format!(
                    "--tilt-deg {t} overrides the tilt of {:.6} degrees that {} records in {from}",
                    tilt.degrees(),
                    path.display()
                )),
                (None, Some(why)) => Some(format!(
                    "--tilt-deg {t} gives the tilt; the one {} names was not read: {why}",
                    path.display()
                )),
                _ => None,
            };
            Ok(ScanTilt {
                tilt: Tilt::from_degrees(t),
                source: "--tilt-deg".into(),
                warning,
            })
        }
        (None, Some((tilt, from))) => Ok(ScanTilt {
            tilt,
            source: from.clone(),
            warning: None,
        }),
        (None, None) => Err(InputError::Missing(format!(
            "{} records no tilt where lamino looks (/lamino/phi_deg; an NXtomo \
             sample/rotation_angle's NeXus `vector`): pass --tilt-deg T (`--tilt-deg 0` for \
             plain CT), or --tilt-path /DATASET naming where the file holds it",
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

/// An open HDF5 scan with its path and the tilt given (`--tilt-deg`).
type OpenedScan<'a> = (Hdf5Scan, &'a Path, Option<f64>);

/// An open HDF5 scan of either layout lamino reads (boxed: one is held per load, and the two
/// readers differ much in size).
enum Hdf5Scan {
    Dxchange(Box<DxchangeReader>),
    Nxtomo(Box<NxtomoReader>),
}

impl Hdf5Scan {
    /// Opens the HDF5 scan `input` describes (`None` for other inputs), with its angle list
    /// replacing the file's angles, `theta_units` giving their unit and `tilt_path` /
    /// `theta_path` naming where the file holds its tilt and angles: as DXchange when it has
    /// `/exchange/data`, else as NXtomo. Returns the path and the tilt given too.
    fn open(input: &ProjectionInput) -> Option<Result<OpenedScan<'_>, InputError>> {
        let ProjectionInput::DXchange {
            path,
            tilt_deg,
            angles,
            theta_units,
            tilt_path,
            theta_path,
        } = input
        else {
            return None;
        };
        let theta_units = *theta_units;
        let open = || {
            let options = ScanOptions {
                theta_units,
                theta: angles
                    .as_deref()
                    .map(|a| {
                        Ok::<_, InputError>((a.to_path_buf(), read_angle_list_in(a, theta_units)?))
                    })
                    .transpose()?,
                theta_path: theta_path.clone(),
                tilt_path: tilt_path.clone(),
                tilt_deg: *tilt_deg,
            };
            Ok((Self::open_with(path, &options)?, path.as_path(), *tilt_deg))
        };
        Some(open())
    }

    /// Opens the scan at `path` with `options`: as DXchange when it has `/exchange/data`, else as
    /// NXtomo.
    fn open_with(path: &Path, options: &ScanOptions) -> Result<Self, InputError> {
        match DxchangeReader::open_with(path, options) {
            Err(IoError::MissingDataset { dataset, .. }) if dataset == "/exchange/data" => {
                match NxtomoReader::open(path, options) {
                    Err(IoError::MissingDataset { dataset, .. }) if dataset == NXTOMO_NO_ENTRY => {
                        Err(IoError::MissingDataset {
                            path: path.to_path_buf(),
                            dataset:
                                "/exchange/data (DXchange) or /<entry>/instrument/detector/data \
                                  (NXtomo)"
                                    .into(),
                        }
                        .into())
                    }
                    other => Ok(Self::Nxtomo(Box::new(other?))),
                }
            }
            other => Ok(Self::Dxchange(Box::new(other?))),
        }
    }

    fn info(&self) -> &ScanInfo {
        match self {
            Self::Dxchange(r) => r.info(),
            Self::Nxtomo(r) => &r.info().scan,
        }
    }
}

/// Projection angles from an angle list, in radians: numbers separated by white space, or CSV
/// (see [`parse_angle_list`]); `#` comments and blank lines are skipped. Their unit is the one
/// a CSV header names (`theta_deg`, `angle (rad)`), else `units`, else degrees when plausible
/// (see [`angles_in_radians`]).
pub fn read_angle_list_in(path: &Path, units: Option<AngleUnit>) -> Result<Vec<f64>, InputError> {
    let bad = |reason: String| InputError::Angles {
        path: path.into(),
        reason,
    };
    let text = crate::io::read_text(path).map_err(|e| bad(e.to_string()))?;
    let list = parse_angle_list(&text).map_err(bad)?;
    if list.values.is_empty() {
        return Err(bad("holds no angle".into()));
    }
    let what = match &list.column {
        Some(column) => format!("the angle list's column {column:?}"),
        None => "the angle list".into(),
    };
    Ok(angles_in_radians(
        path,
        &what,
        list.values,
        list.units,
        units,
    )?)
}

/// [`read_angle_list_in`] with no unit given.
pub fn read_angle_list(path: &Path) -> Result<Vec<f64>, InputError> {
    read_angle_list_in(path, None)
}

/// A multi-page TIFF or `.npy` intensity stack as f32 `(count, height, width)`.
pub fn read_intensity_stack(path: &Path) -> Result<Stack, InputError> {
    Ok(read_stack(path)?.into_f32())
}

/// The warning of a scan some of whose pixels were clamped (none when none were).
fn clamp_warning(counts: ClampCount) -> Option<String> {
    (counts.clamped > 0).then(|| {
        format!(
            "{} of {} pixels ({:.3} %) had a transmission (I - D) / (F - D) below \
             {RATIO_FLOOR:e} (intensity at or below the dark, or a flat at or below the dark) and \
             were raised to it (dead pixels or wrong flats?)",
            counts.clamped,
            counts.pixels,
            100.0 * counts.fraction()
        )
    })
}

/// Line integrals from a DXchange scan: flat/dark normalisation and -log. `tilt_deg` overrides
/// the tilt the scan records; one of the two must exist. Refused when more than
/// [`MAX_CLAMPED_FRACTION`] of the pixels are clamped.
pub fn projections_from_scan(
    path: &Path,
    scan: Scan,
    tilt_deg: Option<f64>,
) -> Result<LoadedProjections, InputError> {
    let (tilt, tilt_source) = match (tilt_deg, scan.tilt) {
        (Some(t), _) => (Tilt::from_degrees(t), "--tilt-deg".to_string()),
        (None, Some(tilt)) => (tilt, "the scan's phi".to_string()),
        (None, None) => {
            return Err(InputError::Missing(format!(
                "{} records no tilt: pass --tilt-deg T (`--tilt-deg 0` for plain CT)",
                path.display()
            )))
        }
    };
    let [ntheta, deth, detw] = scan.data.shape;
    let geometry = Geometry::for_detector(deth, detw, scan.theta, tilt);
    let (projections, clamps) =
        Projections::from_intensities(geometry, &scan.data, &scan.flats, &scan.darks).map_err(
            |e| match e {
                ScanError::Clamped { counts, limit } => InputError::Clamped {
                    path: path.into(),
                    counts,
                    limit,
                },
                e => e.into(),
            },
        )?;
    Ok(LoadedProjections {
        projections,
        notes: Vec::new(),
        warnings: clamp_warning(clamps).into_iter().collect(),
        clamps: Some(clamps),
        pixel_size: None,
        tilt_source,
        angles_source: "the scan's theta".into(),
        frames_read: ntheta,
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
