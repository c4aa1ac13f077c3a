//! DXchange HDF5 files (the APS Data Exchange layout read by tomopy and tomocupy).
//!
//! Datasets:
//! * `/exchange/data` `(ntheta, deth, detw)`: projection intensities. Written as f32; read from any
//!   integer (1 to 8 bytes) or float32/float64 type, converted to f32 (detectors usually store
//!   uint16).
//! * `/exchange/data_white` `(nflat, deth, detw)` and `/exchange/data_dark` `(ndark, deth, detw)`:
//!   flat and dark fields, same types. The darks are optional: a scan without them is read with
//!   one zero dark frame (detectors whose offset is already subtracted).
//! * `/exchange/theta` `(ntheta,)`: projection angles in **degrees** (written as f64, read from any
//!   of those types); [`Scan::theta`] holds radians. Without it, the angles are
//!   `rotation_start + i * rotation_step` from `/process/acquisition/rotation/` (dxchange's
//!   `read_aps_32id` fallback; `num_angles` there, when present, must equal the projections).
//! * `/lamino/phi_deg` (optional, scalar f64): lamino's tilt `phi` in degrees, the operator's
//!   convention where 90 is plain tomography and 90 + T a laminographic tilt of T degrees. A
//!   dataset rather than an attribute so that `h5ls -r` shows it next to the data. DXchange has
//!   no standard place for the tilt: [`ScanOptions::tilt_path`] names any dataset holding `T`
//!   (read in its place), and [`ScanOptions::theta_path`] any holding the angles.
//! * `/truth/volume` (optional) `(n0, n1, n2)` f32: the ground truth of simulated scans.
//!
//! An attribute `units` on the angles (`/exchange/theta`, or `rotation_start`) may say `deg`,
//! `degree(s)`, `rad` or `radian(s)`; any other unit is refused rather than guessed. Without one,
//! the unit is `--theta-units` ([`ScanOptions::theta_units`]), else degrees unless the angles
//! look like radians or span too little for a scan ([`angles_in_radians`]): never a silent guess.
//!
//! [`DxchangeReader`] opens a scan and reports its shapes, element types, angles and tilt without
//! reading the stacks, then reads projections in blocks of angles (what the streaming mode needs);
//! [`read_dxchange`] reads everything at once.

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::geometry::Tilt;

use super::angles::{angles_in_radians, finite, AngleUnit};
use super::h5::{H5Dataset, H5File, H5Writer, SampleType};
use super::PixelSize;
use super::{write_atomically, IoError, Stack};

/// A scan as stored in a DXchange file.
#[derive(Debug, Clone, PartialEq)]
pub struct Scan {
    /// Intensities `(ntheta, deth, detw)`.
    pub data: Stack,
    /// Flat fields `(nflat, deth, detw)`.
    pub flats: Stack,
    /// Dark fields `(ndark, deth, detw)`.
    pub darks: Stack,
    /// Projection angles in radians, one per projection.
    pub theta: Vec<f64>,
    /// The tilt, when the file records it.
    pub tilt: Option<Tilt>,
    /// The ground-truth volume of a simulated scan.
    pub truth: Option<Stack>,
}

const DATA: &str = "/exchange/data";
const WHITE: &str = "/exchange/data_white";
const DARK: &str = "/exchange/data_dark";
const THETA: &str = "/exchange/theta";
const ROTATION: &str = "/process/acquisition/rotation";
const PHI: &str = "/lamino/phi_deg";
const TRUTH: &str = "/truth/volume";

/// Checks shapes, lengths and finiteness of a scan about to be written to `path`.
fn check(path: &Path, scan: &Scan) -> Result<(), IoError> {
    let mut stacks = vec![
        (DATA, &scan.data),
        (WHITE, &scan.flats),
        (DARK, &scan.darks),
    ];
    if let Some(truth) = &scan.truth {
        stacks.push((TRUTH, truth));
    }
    for (dataset, s) in &stacks {
        if s.shape.contains(&0) {
            return Err(IoError::ZeroSize {
                path: path.to_path_buf(),
                shape: s.shape.to_vec(),
            });
        }
        if s.values.len() != s.shape.iter().product::<usize>() {
            return Err(IoError::BadShape {
                path: path.to_path_buf(),
                dataset: dataset.to_string(),
                shape: s.shape.to_vec(),
                expected: format!("{} values as in memory", s.values.len()),
            });
        }
        if let Some(index) = s.values.iter().position(|v| !v.is_finite()) {
            return Err(IoError::NonFinite {
                path: path.to_path_buf(),
                dataset: dataset.to_string(),
                index,
                value: s.values[index] as f64,
            });
        }
    }
    let detector = &scan.data.shape[1..];
    for (dataset, s) in [(WHITE, &scan.flats), (DARK, &scan.darks)] {
        if &s.shape[1..] != detector {
            return Err(IoError::BadShape {
                path: path.to_path_buf(),
                dataset: dataset.to_string(),
                shape: s.shape.to_vec(),
                expected: format!("(frames, {}, {}) as {DATA}", detector[0], detector[1]),
            });
        }
    }
    if scan.theta.len() != scan.data.shape[0] {
        return Err(IoError::ThetaLength {
            path: path.to_path_buf(),
            angles: THETA.to_string(),
            theta: scan.theta.len(),
            projections: scan.data.shape[0],
        });
    }
    finite(path, THETA, &scan.theta)?;
    finite(path, PHI, scan.tilt.map(Tilt::phi).as_slice())
}

/// Writes `scan` to `path` atomically: into a temporary file in the same directory, renamed over
/// `path` only once complete, so readers never see a half-written file.
pub fn write_dxchange(path: &Path, scan: &Scan) -> Result<(), IoError> {
    check(path, scan)?;
    write_atomically(path, |tmp| {
        let mut file = H5Writer::default();
        for (name, s) in [
            (DATA, &scan.data),
            (WHITE, &scan.flats),
            (DARK, &scan.darks),
        ] {
            file.add(name, &s.shape, &s.values, &[])?;
        }
        let degrees: Vec<f64> = scan.theta.iter().map(|t| t.to_degrees()).collect();
        file.add(THETA, &[degrees.len()], &degrees, &[("units", "degrees")])?;
        if let Some(tilt) = scan.tilt {
            file.add(PHI, &[], &[tilt.phi().to_degrees()], &[])?;
        }
        if let Some(truth) = &scan.truth {
            file.add(TRUTH, &truth.shape, &truth.values, &[])?;
        }
        file.write(tmp)
    })
}

/// Writes a float32 volume `(n0, n1, n2)` as the dataset `/volume` of an HDF5 file, atomically.
pub fn write_volume_h5(path: &Path, volume: &Stack) -> Result<(), IoError> {
    super::write_volume_as(path, super::StackFormat::Hdf5, volume)
}

/// Reads a DXchange file, checking that the required datasets exist, that shapes agree
/// (frames of the same detector size, one angle per projection) and that all values are finite.
pub fn read_dxchange(path: &Path) -> Result<Scan, IoError> {
    read_dxchange_with(path, &ScanOptions::default())
}

/// [`read_dxchange`] with the angles' unit or the angles themselves given.
pub fn read_dxchange_with(path: &Path, options: &ScanOptions) -> Result<Scan, IoError> {
    let reader = DxchangeReader::open_with(path, options)?;
    let info = reader.info();
    Ok(Scan {
        data: reader.read_projections(0..info.projections.shape[0])?,
        flats: reader.read_flats()?,
        darks: reader.read_darks()?,
        theta: info.theta.clone(),
        tilt: info.tilt,
        truth: reader.read_truth()?,
    })
}

/// The dataset `name` of `file` if it exists, checked as a stack: three axes, none empty.
pub(super) fn volume_stack(
    file: &H5File,
    path: &Path,
    name: &str,
) -> Result<Option<(H5Dataset, StackInfo)>, IoError> {
    let Some(d) = file.dataset(name)? else {
        return Ok(None);
    };
    let shape: [usize; 3] = d
        .shape
        .as_slice()
        .try_into()
        .map_err(|_| IoError::BadShape {
            path: path.to_path_buf(),
            dataset: name.to_string(),
            shape: d.shape.clone(),
            expected: "three axes".into(),
        })?;
    if shape.contains(&0) {
        return Err(IoError::ZeroSize {
            path: path.to_path_buf(),
            shape: shape.to_vec(),
        });
    }
    let info = StackInfo {
        shape,
        sample: d.sample,
    };
    Ok(Some((d, info)))
}

/// Where a volume lives in an HDF5 file: lamino's reconstructions write `/volume`, simulated
/// scans carry their phantom in `/truth/volume`.
const VOLUME_DATASETS: [&str; 2] = [super::h5::VOLUME, TRUTH];

/// Reads the volume of an HDF5 file: a reconstruction's `/volume`, else a simulated scan's
/// `/truth/volume`, without reading anything else.
pub fn read_volume_h5(path: &Path) -> Result<Stack, IoError> {
    let file = H5File::open(path)?;
    for name in VOLUME_DATASETS {
        if let Some((d, info)) = volume_stack(&file, path, name)? {
            let values = file.read_rows_f32(&d, 0..info.shape[0])?;
            return Ok(Stack {
                shape: info.shape,
                values,
            });
        }
    }
    Err(IoError::MissingDataset {
        path: path.to_path_buf(),
        dataset: VOLUME_DATASETS.join(" or "),
    })
}

/// Shape `(frames, rows, columns)` and stored element type of one stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackInfo {
    pub shape: [usize; 3],
    pub sample: SampleType,
}

/// What a DXchange file holds, learned without reading its stacks.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanInfo {
    /// `/exchange/data`: `(ntheta, deth, detw)`.
    pub projections: StackInfo,
    /// `/exchange/data_white`.
    pub flats: StackInfo,
    /// `/exchange/data_dark`, when the scan has darks (else they are taken as zero).
    pub darks: Option<StackInfo>,
    /// Projection angles in radians, one per projection.
    pub theta: Vec<f64>,
    /// Where the angles came from: a dataset of the file, or the file that overrode them.
    pub theta_source: String,
    /// The tilt, when the file records it.
    pub tilt: Option<Tilt>,
    /// Where [`tilt`](Self::tilt) was read (a dataset, or an attribute `dataset@name`).
    pub tilt_source: Option<String>,
    /// Why the file's tilt could not be read although it names one, when `--tilt-deg`
    /// ([`ScanOptions::tilt_deg`]) gives the tilt anyway (without it, that is an error).
    pub tilt_unread: Option<String>,
    /// `/truth/volume`, when the file has one.
    pub truth: Option<StackInfo>,
}

/// An open DXchange file: its [`ScanInfo`] is read and checked at [`open`](Self::open), the
/// stacks when asked for, projections in any block of angles. Every value read is checked
/// finite.
pub struct DxchangeReader {
    file: H5File,
    path: PathBuf,
    info: ScanInfo,
    data: H5Dataset,
    flats: H5Dataset,
    darks: Option<H5Dataset>,
    truth: Option<H5Dataset>,
}

/// How to read a scan's angles.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanOptions {
    /// The unit of the file's angles (`--theta-units`): supplies it where the file states none;
    /// a file stating another unit is an error.
    pub theta_units: Option<AngleUnit>,
    /// Angles in radians that replace the file's, one per projection, with the file they were
    /// read from (`--angles FILE`).
    pub theta: Option<(PathBuf, Vec<f64>)>,
    /// A dataset of the file holding the angles (`--theta-path`), read in place of the layout's
    /// own: one per projection (or, in an NXtomo file, one per frame), unit by the
    /// [`angles_in_radians`] rules.
    pub theta_path: Option<String>,
    /// A dataset of the file holding the laminographic tilt `T` (`--tilt-path`): one value, in
    /// degrees unless its `units` attribute says radians ([`read_tilt_dataset`]).
    pub tilt_path: Option<String>,
    /// The tilt `T` in degrees given on the command line (`--tilt-deg`): it overrides the
    /// file's, so a file's tilt that cannot be read is then noted, not an error.
    pub tilt_deg: Option<f64>,
}

impl DxchangeReader {
    /// Opens `path` and reads its metadata: the stacks' shapes and types (every one checked
    /// against the file's size and probed for decodability), the angles and the tilt.
    pub fn open(path: &Path) -> Result<Self, IoError> {
        Self::open_with(path, &ScanOptions::default())
    }

    /// [`open`](Self::open) with the angles' unit or the angles themselves given.
    pub fn open_with(path: &Path, options: &ScanOptions) -> Result<Self, IoError> {
        let file = H5File::open(path)?;
        let stack = |name: &str| volume_stack(&file, path, name);
        let required = |name: &str| {
            stack(name)?.ok_or_else(|| IoError::MissingDataset {
                path: path.to_path_buf(),
                dataset: name.to_string(),
            })
        };
        let (data, projections) = required(DATA)?;
        let (flats, flat_info) = required(WHITE)?;
        let (darks, dark_info) = stack(DARK)?.unzip();
        let detector = &projections.shape[1..];
        for (name, s) in [(WHITE, Some(&flat_info)), (DARK, dark_info.as_ref())] {
            let Some(s) = s else { continue };
            if &s.shape[1..] != detector {
                return Err(IoError::BadShape {
                    path: path.to_path_buf(),
                    dataset: name.to_string(),
                    shape: s.shape.to_vec(),
                    expected: format!("(frames, {}, {}) as {DATA}", detector[0], detector[1]),
                });
            }
        }
        let (truth, truth_info) = stack(TRUTH)?.unzip();
        let (theta, theta_source) = read_theta(&file, path, projections.shape[0], options)?;
        let tilt = match &options.tilt_path {
            Some(name) => read_tilt_dataset(&file, path, name).map(Some),
            None => read_phi(&file, path).map(|tilt| tilt.map(|tilt| (tilt, PHI.to_string()))),
        };
        let (tilt, tilt_unread) = recorded_tilt(tilt, options)?;
        let (tilt, tilt_source) = tilt.unzip();
        Ok(Self {
            file,
            path: path.to_path_buf(),
            info: ScanInfo {
                projections,
                flats: flat_info,
                darks: dark_info,
                theta,
                theta_source,
                tilt,
                tilt_source,
                tilt_unread,
                truth: truth_info,
            },
            data,
            flats,
            darks,
            truth,
        })
    }

    /// The file's shapes, types, angles and tilt.
    pub fn info(&self) -> &ScanInfo {
        &self.info
    }

    /// Projections `angles` (`a0..a1`, indices into [`ScanInfo::theta`]) as f32,
    /// shape `(a1 - a0, deth, detw)`. Reads only the storage those angles occupy.
    pub fn read_projections(&self, angles: Range<usize>) -> Result<Stack, IoError> {
        let n = self.info.projections.shape[0];
        if angles.start >= angles.end || angles.end > n {
            return Err(IoError::BadRange {
                path: self.path.clone(),
                dataset: DATA.to_string(),
                range: angles,
                len: n,
            });
        }
        self.read_rows(&self.data, angles)
    }

    /// All flat fields as f32.
    pub fn read_flats(&self) -> Result<Stack, IoError> {
        self.read_rows(&self.flats, 0..self.info.flats.shape[0])
    }

    /// All dark fields as f32; one zero frame when the scan has none.
    pub fn read_darks(&self) -> Result<Stack, IoError> {
        match &self.darks {
            Some(d) => self.read_rows(d, 0..d.shape[0]),
            None => Ok(zero_frame(self.info.projections.shape)),
        }
    }

    /// The ground-truth volume of a simulated scan, if the file has one.
    pub fn read_truth(&self) -> Result<Option<Stack>, IoError> {
        self.truth
            .as_ref()
            .map(|d| self.read_rows(d, 0..d.shape[0]))
            .transpose()
    }

    fn read_rows(&self, d: &H5Dataset, rows: Range<usize>) -> Result<Stack, IoError> {
        read_frames(&self.file, &self.path, d, rows)
    }
}

/// One dark frame of zeros for projections of `shape` `(frames, rows, columns)`: the dark of a
/// scan that records none.
pub(super) fn zero_frame(shape: [usize; 3]) -> Stack {
    Stack {
        shape: [1, shape[1], shape[2]],
        values: vec![0.0; shape[1] * shape[2]],
    }
}

/// Frames `rows` of the stack `d` of `file` (at `path`) as f32, checked finite.
pub(super) fn read_frames(
    file: &H5File,
    path: &Path,
    d: &H5Dataset,
    rows: Range<usize>,
) -> Result<Stack, IoError> {
    let frame = d.shape[1] * d.shape[2];
    let values = file.read_rows_f32(d, rows.clone())?;
    if values.len() != rows.len() * frame {
        return Err(IoError::Hdf5 {
            path: path.to_path_buf(),
            dataset: d.name.clone(),
            reason: format!(
                "read {} values for rows {rows:?}; expected {}",
                values.len(),
                rows.len() * frame
            ),
        });
    }
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(IoError::NonFinite {
            path: path.to_path_buf(),
            dataset: d.name.clone(),
            index: rows.start * frame + i,
            value: values[i] as f64,
        });
    }
    Ok(Stack {
        shape: [rows.len(), d.shape[1], d.shape[2]],
        values,
    })
}

/// The angles `options` give in place of those of the scan at `path`, with the file they came
/// from, checked: one finite angle per projection.
pub(super) fn given_theta(
    path: &Path,
    options: &ScanOptions,
    projections: usize,
) -> Result<Option<(Vec<f64>, String)>, IoError> {
    let Some((source, theta)) = &options.theta else {
        return Ok(None);
    };
    let source = source.display().to_string();
    if theta.len() != projections {
        return Err(IoError::ThetaLength {
            path: path.to_path_buf(),
            angles: source,
            theta: theta.len(),
            projections,
        });
    }
    finite(path, &source, theta)?;
    Ok(Some((theta.clone(), source)))
}

/// The projection angles in radians, one per projection, and where they came from: the angles
/// `options` give, else `/exchange/theta`, else `rotation_start + i * rotation_step` of
/// `/process/acquisition/rotation` (in the unit [`angles_in_radians`] settles).
fn read_theta(
    file: &H5File,
    path: &Path,
    projections: usize,
    options: &ScanOptions,
) -> Result<(Vec<f64>, String), IoError> {
    let length = |angles: &str, theta: usize| {
        if theta == projections {
            return Ok(());
        }
        Err(IoError::ThetaLength {
            path: path.to_path_buf(),
            angles: angles.to_string(),
            theta,
            projections,
        })
    };
    if let Some(given) = given_theta(path, options, projections)? {
        return Ok(given);
    }
    let named = match &options.theta_path {
        Some(name) => Some((
            name.as_str(),
            file.dataset(name)?.ok_or_else(|| IoError::MissingDataset {
                path: path.to_path_buf(),
                dataset: format!("{name} (--theta-path)"),
            })?,
        )),
        None => file.dataset(THETA)?.map(|d| (THETA, d)),
    };
    if let Some((name, d)) = named {
        let (values, units) = angle_dataset(file, path, name, &d)?;
        length(name, values.len())?;
        let theta = angles_in_radians(path, name, values, units.as_deref(), options.theta_units)?;
        return Ok((theta, name.to_string()));
    }
    let start_name = format!("{ROTATION}/rotation_start");
    let scalar = |name: &str| -> Result<Option<(f64, Option<String>)>, IoError> {
        let Some(d) = file.dataset(name)? else {
            return Ok(None);
        };
        let values = file.read_all_f64(&d)?;
        // APS writers store these as one-element arrays.
        let [value] = values[..] else {
            return Err(IoError::BadShape {
                path: path.to_path_buf(),
                dataset: name.to_string(),
                shape: d.shape.clone(),
                expected: "one value".into(),
            });
        };
        finite(path, name, &[value])?;
        Ok(Some((value, file.string_attr(&d, "units")?)))
    };
    let start = scalar(&start_name)?;
    let step = scalar(&format!("{ROTATION}/rotation_step"))?;
    let (Some((start, units)), Some((step, _))) = (start, step) else {
        return Err(IoError::MissingDataset {
            path: path.to_path_buf(),
            dataset: format!("{THETA} (or {ROTATION}/rotation_start and rotation_step)"),
        });
    };
    let source = format!("{ROTATION}/rotation_start + i * rotation_step");
    if let Some((count, _)) = scalar(&format!("{ROTATION}/num_angles"))? {
        length(&format!("{ROTATION}/num_angles"), count as usize)?;
    }
    let theta = (0..projections).map(|i| start + i as f64 * step).collect();
    let theta = angles_in_radians(path, &source, theta, units.as_deref(), options.theta_units)?;
    Ok((theta, source))
}

/// The tilt `/lamino/phi_deg` records (the operator's angle in degrees), if present: one finite
/// value.
fn read_phi(file: &H5File, path: &Path) -> Result<Option<Tilt>, IoError> {
    let Some(d) = file.dataset(PHI)? else {
        return Ok(None);
    };
    if d.shape.iter().product::<usize>() != 1 {
        return Err(IoError::BadShape {
            path: path.to_path_buf(),
            dataset: PHI.to_string(),
            shape: d.shape.clone(),
            expected: "one value (the tilt in degrees)".into(),
        });
    }
    let phi = file.read_all_f64(&d)?;
    finite(path, PHI, &phi)?;
    Ok(phi.first().map(|p| Tilt::from_phi(p.to_radians())))
}

/// The values of the angle dataset `d` (`name` in `path`), which must have one axis, with its
/// `units` attribute.
pub(super) fn angle_dataset(
    file: &H5File,
    path: &Path,
    name: &str,
    d: &H5Dataset,
) -> Result<(Vec<f64>, Option<String>), IoError> {
    if d.shape.len() != 1 {
        return Err(IoError::BadShape {
            path: path.to_path_buf(),
            dataset: name.to_string(),
            shape: d.shape.clone(),
            expected: "one axis (one angle per projection)".into(),
        });
    }
    Ok((file.read_all_f64(d)?, file.string_attr(d, "units")?))
}

/// The tilt a dataset `name` of `file` records (`--tilt-path`): one finite value `T`, the
/// laminographic tilt from the tomography plane as `--tilt-deg` and tomocupy's
/// `--lamino-angle` take it, in degrees, or in radians when its `units` attribute says so (any
/// other unit is refused); strictly between -90 and 90 degrees. Returns it with where it was
/// read (the unit said).
pub(super) fn read_tilt_dataset(
    file: &H5File,
    path: &Path,
    name: &str,
) -> Result<RecordedTilt, IoError> {
    let d = file.dataset(name)?.ok_or_else(|| IoError::MissingDataset {
        path: path.to_path_buf(),
        dataset: format!("{name} (--tilt-path)"),
    })?;
    let [tilt] = file.read_all_f64(&d)?[..] else {
        return Err(IoError::BadShape {
            path: path.to_path_buf(),
            dataset: name.to_string(),
            shape: d.shape.clone(),
            expected: "one value (the tilt)".into(),
        });
    };
    finite(path, name, &[tilt])?;
    let units = file.string_attr(&d, "units")?;
    let unit = match units.as_deref() {
        None => None,
        Some(u) => Some(AngleUnit::parse(u).ok_or_else(|| IoError::ThetaUnits {
            path: path.to_path_buf(),
            dataset: name.to_string(),
            units: u.to_string(),
        })?),
    };
    let degrees = match unit {
        Some(AngleUnit::Radians) => tilt.to_degrees(),
        _ => tilt,
    };
    checked_tilt(path, name, degrees).map(|tilt| {
        let said = match unit {
            Some(u) => format!("{name} (units {u})"),
            None => format!("{name} (no units attribute: degrees, as --tilt-deg)"),
        };
        (tilt, said)
    })
}

/// The tilt of `degrees` read from `name`, which must lie strictly between -90 and 90.
pub(super) fn checked_tilt(path: &Path, name: &str, degrees: f64) -> Result<Tilt, IoError> {
    if degrees.abs() < 90.0 {
        return Ok(Tilt::from_degrees(degrees));
    }
    Err(IoError::Hdf5 {
        path: path.to_path_buf(),
        dataset: name.to_string(),
        reason: format!(
            "records a tilt of {degrees} degrees; a laminographic tilt lies strictly between -90              and 90 (0 is plain CT)"
        ),
    })
}

/// A tilt a file records and where it was read.
pub(super) type RecordedTilt = (Tilt, String);

/// The tilt a file records (`read`, with where from) as the scan will hold it: an error in
/// reading it is the scan's error, unless `--tilt-deg` gives the tilt anyway, when the reason
/// is kept to be said.
pub(super) fn recorded_tilt(
    read: Result<Option<RecordedTilt>, IoError>,
    options: &ScanOptions,
) -> Result<(Option<RecordedTilt>, Option<String>), IoError> {
    match (read, options.tilt_deg) {
        (Ok(tilt), _) => Ok((tilt, None)),
        (Err(e), Some(_)) => Ok((None, Some(e.to_string()))),
        (Err(e), None) => Err(e),
    }
}

/// Where APS beamlines record the detector's effective pixel size (micrometres at the sample),
/// in the order tomopy-cli's and tomocupy's readers try them.
pub const PIXEL_SIZE_PATHS: [&str; 2] = [
    "/measurement/instrument/detection_system/objective/resolution",
    "/measurement/instrument/detector/actual_pixel_size_x",
];
/// The camera's own pixel size (micrometres) and the objective's magnification: older files
/// record only these, and the pixel size at the sample is their quotient.
pub const CAMERA_PIXEL_SIZE_PATH: &str = "/measurement/instrument/detector/pixel_size_x";
pub const MAGNIFICATION_PATH: &str =
    "/measurement/instrument/detection_system/objective/magnification";

/// The effective pixel size `path` records and where it was read from: the first of
/// [`PIXEL_SIZE_PATHS`], else [`CAMERA_PIXEL_SIZE_PATH`] over [`MAGNIFICATION_PATH`], that holds a
/// value other than 0 (beamline software's "not set"); `None` when none does. That value decides:
/// one that is no pixel size (negative, NaN, infinite, out of [`PixelSize::micrometers`]'s range,
/// or a magnification that is not positive) is an error naming its dataset, which the scan's
/// reader turns into an input warning (the outputs are left uncalibrated), as for NXtomo.
pub fn read_pixel_size(path: &Path) -> Result<Option<(PixelSize, String)>, IoError> {
    let file = H5File::open(path)?;
    // The first value of a scalar or one-element metadata dataset, if present and set.
    let value = |name: &str| -> Result<Option<f64>, IoError> {
        match file.dataset(name)? {
            Some(d) => Ok(file
                .read_all_f64(&d)?
                .first()
                .copied()
                .filter(|v| *v != 0.0)),
            None => Ok(None),
        }
    };
    let unusable = |dataset: &str, reason: String| IoError::Hdf5 {
        path: path.to_path_buf(),
        dataset: dataset.to_string(),
        reason,
    };
    for name in PIXEL_SIZE_PATHS {
        if let Some(v) = value(name)? {
            return match PixelSize::micrometers(v) {
                Ok(size) => Ok(Some((size, name.to_string()))),
                Err(reason) => Err(unusable(name, reason)),
            };
        }
    }
    let Some(pixel) = value(CAMERA_PIXEL_SIZE_PATH)? else {
        return Ok(None);
    };
    let from = format!("{CAMERA_PIXEL_SIZE_PATH} / {MAGNIFICATION_PATH}");
    match file.dataset(MAGNIFICATION_PATH)? {
        None => Ok(None),
        Some(d) => match file.read_all_f64(&d)?.first().copied() {
            Some(m) if m.is_finite() && m > 0.0 => match PixelSize::micrometers(pixel / m) {
                Ok(size) => Ok(Some((size, from))),
                Err(reason) => Err(unusable(&from, reason)),
            },
            m => Err(unusable(
                MAGNIFICATION_PATH,
                format!("the magnification is {m:?}; expected a positive number"),
            )),
        },
    }
}

#[cfg(test)]
mod pixel_size_tests {
    use super::*;

    /// A file holding only the metadata `datasets` (scalars, as beamline software writes them).
    fn metadata_file(dir: &Path, datasets: &[(&str, f64)]) -> PathBuf {
        let path = dir.join(format!("m{}.h5", datasets.len()));
        let mut file = H5Writer::default();
        for (name, value) in datasets {
            file.add(name, &[1], &[*value], &[]).unwrap();
        }
        file.write(&path).unwrap();
        path
    }

    #[test]
    fn the_pixel_size_is_read_where_aps_beamlines_record_it() {
        let dir = tempfile::tempdir().unwrap();
        let read = |datasets: &[(&str, f64)]| {
            read_pixel_size(&metadata_file(dir.path(), datasets))
                .unwrap()
                .map(|(size, from)| (size.value, from))
        };
        let [resolution, actual] = PIXEL_SIZE_PATHS;
        assert!(read(&[(resolution, 0.65)]) == Some((0.65, resolution.to_string())));
        // A zero (not set) falls through to the next place; the camera's pixel over the
        // magnification last.
        assert!(read(&[(resolution, 0.0), (actual, 1.3)]) == Some((1.3, actual.to_string())));
        let camera = [(CAMERA_PIXEL_SIZE_PATH, 6.5), (MAGNIFICATION_PATH, 10.0)];
        let (size, from) = read(&[(resolution, 0.0), camera[0], camera[1], ("/x", 0.0)]).unwrap();
        assert!(
            size == 0.65 && from.contains(MAGNIFICATION_PATH),
            "{size} {from}"
        );
        assert!(read(&[("/exchange/other", 1.0)]).is_none());
    }

    /// One rule for a recorded pixel size that is no pixel size, as for NXtomo's: the first place
    /// holding a value other than 0 decides, and a value that cannot be used is an error naming
    /// its dataset (an input warning), never dropped in silence for the next place's.
    #[test]
    fn a_recorded_pixel_size_that_is_none_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let read = |datasets: &[(&str, f64)]| {
            read_pixel_size(&metadata_file(dir.path(), datasets)).map(|v| v.map(|(s, _)| s.value))
        };
        let [resolution, actual] = PIXEL_SIZE_PATHS;
        for bad in [-0.65, f64::NAN, f64::INFINITY, 1e300, 1e-300] {
            let e = read(&[(resolution, bad), (actual, 1.3)])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(resolution) && e.contains("pixel size of"),
                "{bad}: {e}"
            );
        }
        for m in [0.0, -10.0, f64::NAN] {
            let e = read(&[(CAMERA_PIXEL_SIZE_PATH, 6.5), (MAGNIFICATION_PATH, m)])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(MAGNIFICATION_PATH) && e.contains("magnification"),
                "{m}: {e}"
            );
        }
        let e = read(&[(CAMERA_PIXEL_SIZE_PATH, -6.5), (MAGNIFICATION_PATH, 10.0)])
            .unwrap_err()
            .to_string();
        assert!(e.contains(CAMERA_PIXEL_SIZE_PATH), "{e}");
        // No camera pixel (or 0): nothing recorded, whatever the magnification.
        assert!(
            read(&[(CAMERA_PIXEL_SIZE_PATH, 0.0), (MAGNIFICATION_PATH, 0.0)])
                .unwrap()
                .is_none()
        );
    }
}
