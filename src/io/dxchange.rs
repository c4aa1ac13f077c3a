//! DXchange HDF5 files (the APS Data Exchange layout read by tomopy and tomocupy).
//!
//! Datasets:
//! * `/exchange/data` `(ntheta, deth, detw)`: projection intensities. Written as f32; read from any
//!   numeric type HDF5 converts to f32 (detectors usually store uint16).
//! * `/exchange/data_white` `(nflat, deth, detw)` and `/exchange/data_dark` `(ndark, deth, detw)`:
//!   flat and dark fields, same types.
//! * `/exchange/theta` `(ntheta,)`: projection angles in **degrees** (written as f64, read from any
//!   float type); [`Scan::theta`] holds radians.
//! * `/lamino/phi_deg` (optional, scalar f64): lamino's tilt `phi` in degrees, the operator's
//!   convention where 90 is plain tomography and 90 + T a laminographic tilt of T degrees. A
//!   dataset rather than an attribute so that `h5ls -r` shows it next to the data.
//! * `/truth/volume` (optional) `(n0, n1, n2)` f32: the ground truth of simulated scans.

use std::path::Path;

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
    /// Tilt in radians (pi/2 is plain tomography), when the file records it.
    pub phi: Option<f64>,
    /// The ground-truth volume of a simulated scan.
    pub truth: Option<Stack>,
}

const DATA: &str = "/exchange/data";
const WHITE: &str = "/exchange/data_white";
const DARK: &str = "/exchange/data_dark";
const THETA: &str = "/exchange/theta";
const PHI: &str = "/lamino/phi_deg";
const TRUTH: &str = "/truth/volume";

/// Checks shapes, lengths and finiteness; `path` is the file the scan comes from or goes to.
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
            theta: scan.theta.len(),
            projections: scan.data.shape[0],
        });
    }
    let angles = scan.theta.iter().chain(&scan.phi);
    if let Some((index, &value)) = angles.enumerate().find(|(_, t)| !t.is_finite()) {
        let dataset = if index < scan.theta.len() { THETA } else { PHI };
        return Err(IoError::NonFinite {
            path: path.to_path_buf(),
            dataset: dataset.to_string(),
            index,
            value,
        });
    }
    Ok(())
}

/// Writes `scan` to `path` atomically: into a temporary file in the same directory, renamed over
/// `path` only once complete, so readers never see a half-written file.
pub fn write_dxchange(path: &Path, scan: &Scan) -> Result<(), IoError> {
    check(path, scan)?;
    write_atomically(path, |tmp| write_file(tmp, scan))
}

/// Writes a float32 volume `(n0, n1, n2)` as the dataset `/volume` of an HDF5 file, atomically.
pub fn write_volume_h5(path: &Path, volume: &Stack) -> Result<(), IoError> {
    write_atomically(path, |tmp| {
        let file = hdf5::File::create(tmp).map_err(|e| format!("creating the file: {e}"))?;
        file.new_dataset::<f32>()
            .shape(volume.shape)
            .create("volume")
            .and_then(|d| d.write_raw(&volume.values))
            .map_err(|e| format!("/volume: {e}"))
    })
}

fn write_file(tmp: &Path, scan: &Scan) -> Result<(), String> {
    let e = |what: &str, err: hdf5::Error| format!("{what}: {err}");
    let file = hdf5::File::create(tmp).map_err(|err| e("creating the file", err))?;
    let exchange = file
        .create_group("exchange")
        .map_err(|err| e("/exchange", err))?;
    for (name, s) in [
        ("data", &scan.data),
        ("data_white", &scan.flats),
        ("data_dark", &scan.darks),
    ] {
        exchange
            .new_dataset::<f32>()
            .shape(s.shape)
            .create(name)
            .and_then(|d| d.write_raw(&s.values))
            .map_err(|err| e(name, err))?;
    }
    let degrees: Vec<f64> = scan.theta.iter().map(|t| t.to_degrees()).collect();
    exchange
        .new_dataset::<f64>()
        .shape([degrees.len()])
        .create("theta")
        .and_then(|d| d.write_raw(&degrees))
        .map_err(|err| e(THETA, err))?;
    if let Some(phi) = scan.phi {
        file.create_group("lamino")
            .and_then(|g| g.new_dataset::<f64>().create("phi_deg"))
            .and_then(|d| d.write_scalar(&phi.to_degrees()))
            .map_err(|err| e(PHI, err))?;
    }
    if let Some(truth) = &scan.truth {
        file.create_group("truth")
            .and_then(|g| g.new_dataset::<f32>().shape(truth.shape).create("volume"))
            .and_then(|d| d.write_raw(&truth.values))
            .map_err(|err| e(TRUTH, err))?;
    }
    file.close().map_err(|err| e("closing the file", err))
}

/// Reads a DXchange file, checking that the required datasets exist, that shapes agree
/// (frames of the same detector size, one angle per projection) and that all values are finite.
pub fn read_dxchange(path: &Path) -> Result<Scan, IoError> {
    // Tell a missing or unreadable file from one that is not HDF5.
    std::fs::File::open(path).map_err(|e| IoError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let file = hdf5::File::open(path).map_err(|e| IoError::NotHdf5 {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let scan = Scan {
        data: read_stack(path, &file, DATA)?,
        flats: read_stack(path, &file, WHITE)?,
        darks: read_stack(path, &file, DARK)?,
        theta: read_theta(path, &file)?,
        phi: optional(&file, PHI)
            .map(|d| read_phi(path, &d))
            .transpose()?,
        truth: optional(&file, TRUTH)
            .map(|_| read_stack(path, &file, TRUTH))
            .transpose()?,
    };
    check(path, &scan)?;
    Ok(scan)
}

/// The dataset at `name` if the file has one. `link_exists` on a path whose group is missing
/// reports false rather than failing, so each level is checked in turn.
fn optional(file: &hdf5::File, name: &str) -> Option<hdf5::Dataset> {
    let mut prefix = String::new();
    for part in name.trim_start_matches('/').split('/') {
        prefix.push('/');
        prefix.push_str(part);
        if !file.link_exists(&prefix) {
            return None;
        }
    }
    file.dataset(name).ok()
}

fn required(path: &Path, file: &hdf5::File, name: &str) -> Result<hdf5::Dataset, IoError> {
    optional(file, name).ok_or_else(|| IoError::MissingDataset {
        path: path.to_path_buf(),
        dataset: name.to_string(),
    })
}

fn hdf5_error(path: &Path, dataset: &str, e: hdf5::Error) -> IoError {
    IoError::Hdf5 {
        path: path.to_path_buf(),
        dataset: dataset.to_string(),
        reason: e.to_string(),
    }
}

fn read_stack(path: &Path, file: &hdf5::File, name: &str) -> Result<Stack, IoError> {
    let d = required(path, file, name)?;
    let shape: [usize; 3] = d.shape().try_into().map_err(|_| IoError::BadShape {
        path: path.to_path_buf(),
        dataset: name.to_string(),
        shape: d.shape(),
        expected: "three axes".into(),
    })?;
    let values = d.read_raw::<f32>().map_err(|e| hdf5_error(path, name, e))?;
    Ok(Stack { shape, values })
}

fn read_theta(path: &Path, file: &hdf5::File) -> Result<Vec<f64>, IoError> {
    let d = required(path, file, THETA)?;
    if d.ndim() != 1 {
        return Err(IoError::BadShape {
            path: path.to_path_buf(),
            dataset: THETA.to_string(),
            shape: d.shape(),
            expected: "one axis (one angle per projection)".into(),
        });
    }
    let degrees = d
        .read_raw::<f64>()
        .map_err(|e| hdf5_error(path, THETA, e))?;
    Ok(degrees.into_iter().map(f64::to_radians).collect())
}

fn read_phi(path: &Path, d: &hdf5::Dataset) -> Result<f64, IoError> {
    d.read_scalar::<f64>()
        .map(f64::to_radians)
        .map_err(|e| hdf5_error(path, PHI, e))
}
