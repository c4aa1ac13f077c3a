//! NeXus NXtomo files: the layout ESRF's tomography software and the `nxtomo` Python package
//! write (`.nx`, `.nxs`, `.h5`, `.hdf5`).
//!
//! One entry group at the root (`NX_class = NXentry`, e.g. `/entry0000`) holds:
//! * `instrument/detector/data` `(frames, rows, columns)`: every frame of the scan, projections,
//!   flats and darks together, of any numeric type.
//! * `instrument/detector/image_key` `(frames,)`: what each frame is: 0 a projection, 1 a flat
//!   (white) field, 2 a dark field, 3 invalid (skipped). `image_key_control`, `nxtomo`'s
//!   extension, is read instead when present: it keeps alignment frames apart (-1, skipped),
//!   which `image_key` files as projections.
//! * `sample/rotation_angle` `(frames,)`: the angle of each frame, with a `units` attribute
//!   (`degree` as `nxtomo` writes it, or `rad`); the projections' angles are those of the frames
//!   with key 0.
//! * `instrument/detector/x_pixel_size`, `y_pixel_size` (optional scalars with `units`, `m` as
//!   `nxtomo` writes them): the detector's pixel size, reported in [`NxtomoInfo`].
//!
//! NXtomo records no laminographic tilt; NeXus's NXtransformations `vector` attribute on
//! `sample/rotation_angle`, when a writer adds it, gives the rotation axis and with it the tilt
//! ([`axis_vector_tilt`]); else it comes from `--tilt-path` or `--tilt-deg`. Darks are optional
//! (one zero frame without them); flats are required.

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::angles::angles_in_radians;
use super::dxchange::{
    angle_dataset, checked_tilt, given_theta, read_frames, read_tilt_dataset, recorded_tilt,
    volume_stack, zero_frame, RecordedTilt, ScanInfo, ScanOptions, StackInfo,
};
use super::h5::{H5Dataset, H5File};
use super::{IoError, PixelSize, Stack};

/// A length with its unit as the file states it (`units` attribute).
#[derive(Debug, Clone, PartialEq)]
pub struct StatedLength {
    pub value: f64,
    /// The `units` attribute (`m`, `um`, ...), when the file has one.
    pub units: Option<String>,
}

impl StatedLength {
    /// The length in micrometres (the unit every output records), or why it is none: the file
    /// states no unit or one that is not a length (NeXus writes SI (`m`) unless the attribute
    /// says otherwise, but a missing attribute is not guessed), or the length is no pixel size
    /// ([`PixelSize::micrometers`]: negative, zero, not finite, out of range).
    pub fn micrometers(&self) -> Result<PixelSize, String> {
        let per_unit = match self.units.as_deref().map(str::trim) {
            Some("m" | "meter" | "metre" | "meters" | "metres") => 1e6,
            Some("mm" | "millimeter" | "millimetre" | "millimeters" | "millimetres") => 1e3,
            Some(
                "um" | "µm" | "μm" | "micrometer" | "micrometre" | "micrometers" | "micrometres"
                | "micron" | "microns",
            ) => 1.0,
            Some("nm" | "nanometer" | "nanometre" | "nanometers" | "nanometres") => 1e-3,
            units => {
                return Err(format!(
                    "the pixel size {} has no length unit lamino knows (units = {units:?})",
                    self.value
                ))
            }
        };
        PixelSize::micrometers(self.value * per_unit)
    }
}

/// What an NXtomo file holds, learned without reading its frames.
#[derive(Debug, Clone, PartialEq)]
pub struct NxtomoInfo {
    /// The entry group read, e.g. `/entry0000`.
    pub entry: String,
    /// Shapes (of the projections, flats and darks once separated), angles; no tilt, no truth.
    pub scan: ScanInfo,
    /// `instrument/detector/x_pixel_size`, when present.
    pub x_pixel_size: Option<StatedLength>,
    /// `instrument/detector/y_pixel_size`, when present.
    pub y_pixel_size: Option<StatedLength>,
}

/// An open NXtomo file: the frames of each kind are found from `image_key` at
/// [`open`](Self::open), read when asked for, projections in any block of angles.
pub struct NxtomoReader {
    file: H5File,
    path: PathBuf,
    info: NxtomoInfo,
    data: H5Dataset,
    /// Frame indices of the projections, flats and darks, in file order.
    projections: Vec<usize>,
    flats: Vec<usize>,
    darks: Vec<usize>,
}

/// What [`NxtomoReader::open`] names as missing when the file holds no NXtomo entry at all (the
/// one missing dataset that says the file is not NXtomo, rather than an NXtomo file lacking
/// one of its datasets).
pub const NO_ENTRY: &str = "an NXtomo entry (/<entry>/instrument/detector/data)";

const ALIGNMENT: i64 = -1;
const PROJECTION: i64 = 0;
const FLAT: i64 = 1;
const DARK: i64 = 2;
const INVALID: i64 = 3;

impl NxtomoReader {
    /// Opens the NXtomo entry of `path`: the one root group holding
    /// `instrument/detector/data` (an error names them when there are several).
    pub fn open(path: &Path, options: &ScanOptions) -> Result<Self, IoError> {
        let file = H5File::open(path)?;
        let mut entries = Vec::new();
        for (name, class) in file.root_groups()? {
            let entry = format!("/{name}");
            if let Some(found) =
                volume_stack(&file, path, &format!("{entry}/instrument/detector/data"))?
            {
                entries.push((entry, class, found));
            }
        }
        // An entry that says it is one wins over groups that merely look like one.
        if entries.len() > 1 {
            entries.retain(|(_, class, _)| class.as_deref() == Some("NXentry"));
        }
        let (entry, (data, stack)) = match entries.len() {
            1 => {
                let (entry, _, found) = entries.remove(0);
                (entry, found)
            }
            0 => {
                return Err(IoError::MissingDataset {
                    path: path.to_path_buf(),
                    dataset: NO_ENTRY.into(),
                })
            }
            _ => {
                let names: Vec<&str> = entries.iter().map(|(e, _, _)| e.as_str()).collect();
                return Err(IoError::Hdf5 {
                    path: path.to_path_buf(),
                    dataset: names.join(", "),
                    reason: "several NXtomo entries; lamino reads files with one".into(),
                });
            }
        };
        let frames = stack.shape[0];
        let per_frame = |name: &str| -> Result<H5Dataset, IoError> {
            let d = file.dataset(name)?.ok_or_else(|| IoError::MissingDataset {
                path: path.to_path_buf(),
                dataset: name.to_string(),
            })?;
            if d.shape != [frames] {
                return Err(IoError::BadShape {
                    path: path.to_path_buf(),
                    dataset: name.to_string(),
                    shape: d.shape.clone(),
                    expected: format!("({frames},), one value per frame of {}", data.name),
                });
            }
            Ok(d)
        };
        let control = format!("{entry}/instrument/detector/image_key_control");
        let key_name = match file.dataset(&control)? {
            Some(_) => control,
            None => format!("{entry}/instrument/detector/image_key"),
        };
        let keys = file.read_all_f64(&per_frame(&key_name)?)?;
        let (mut projections, mut flats, mut darks) = (Vec::new(), Vec::new(), Vec::new());
        for (frame, &key) in keys.iter().enumerate() {
            // Keys are integers; a float dataset holding 0.0/1.0/2.0 is read as such.
            match (key.fract() == 0.0).then_some(key as i64) {
                Some(PROJECTION) => projections.push(frame),
                Some(FLAT) => flats.push(frame),
                Some(DARK) => darks.push(frame),
                Some(INVALID | ALIGNMENT) => {}
                _ => {
                    return Err(IoError::Hdf5 {
                        path: path.to_path_buf(),
                        dataset: key_name,
                        reason: format!(
                            "frame {frame} has image key {key}; expected 0 (projection), 1 \
                             (flat), 2 (dark), 3 (invalid) or -1 (alignment)"
                        ),
                    })
                }
            }
        }
        for (what, key, frames) in [
            ("projections", PROJECTION, &projections),
            ("flat fields", FLAT, &flats),
        ] {
            if frames.is_empty() {
                return Err(IoError::Hdf5 {
                    path: path.to_path_buf(),
                    dataset: key_name,
                    reason: format!("no frame has image key {key}: the scan has no {what}"),
                });
            }
        }
        let [_, rows, columns] = stack.shape;
        let info = |count: usize| StackInfo {
            shape: [count, rows, columns],
            sample: stack.sample,
        };
        let rotation = format!("{entry}/sample/rotation_angle");
        let (theta, theta_source) = match given_theta(path, options, projections.len())? {
            Some(given) => given,
            None => {
                let name = options
                    .theta_path
                    .clone()
                    .unwrap_or_else(|| rotation.clone());
                let d = file
                    .dataset(&name)?
                    .ok_or_else(|| IoError::MissingDataset {
                        path: path.to_path_buf(),
                        dataset: name.clone(),
                    })?;
                let (all, units) = angle_dataset(&file, path, &name, &d)?;
                // One angle per frame (NXtomo's own), or per projection (a `--theta-path`).
                let values = match all.len() {
                    n if n == frames => projections.iter().map(|&f| all[f]).collect(),
                    n if n == projections.len() => all,
                    n => {
                        return Err(IoError::ThetaLength {
                            path: path.to_path_buf(),
                            angles: name,
                            theta: n,
                            projections: projections.len(),
                        })
                    }
                };
                let theta =
                    angles_in_radians(path, &name, values, units.as_deref(), options.theta_units)?;
                (theta, name)
            }
        };
        let tilt = match &options.tilt_path {
            Some(name) => read_tilt_dataset(&file, path, name).map(Some),
            None => axis_vector_tilt(&file, path, &rotation),
        };
        let (tilt, tilt_unread) = recorded_tilt(tilt, options)?;
        let (tilt, tilt_source) = tilt.unzip();
        let pixel = |axis: &str| -> Result<Option<StatedLength>, IoError> {
            let name = format!("{entry}/instrument/detector/{axis}_pixel_size");
            let Some(d) = file.dataset(&name)? else {
                return Ok(None);
            };
            let [value] = file.read_all_f64(&d)?[..] else {
                return Err(IoError::BadShape {
                    path: path.to_path_buf(),
                    dataset: name,
                    shape: d.shape.clone(),
                    expected: "one value (the pixel size)".into(),
                });
            };
            // Any value: one that is no pixel size only leaves the outputs uncalibrated, with a
            // warning ([`StatedLength::micrometers`]), as DXchange metadata does.
            let units = file.string_attr(&d, "units")?;
            Ok(Some(StatedLength { value, units }))
        };
        let info = NxtomoInfo {
            x_pixel_size: pixel("x")?,
            y_pixel_size: pixel("y")?,
            scan: ScanInfo {
                projections: info(projections.len()),
                flats: info(flats.len()),
                darks: (!darks.is_empty()).then(|| info(darks.len())),
                theta,
                theta_source,
                tilt,
                tilt_source,
                tilt_unread,
                truth: None,
            },
            entry,
        };
        Ok(Self {
            file,
            path: path.to_path_buf(),
            info,
            data,
            projections,
            flats,
            darks,
        })
    }

    /// The entry, shapes, angles and pixel sizes.
    pub fn info(&self) -> &NxtomoInfo {
        &self.info
    }

    /// Projections `angles` (indices into the projections, in file order) as f32, shape
    /// `(a1 - a0, rows, columns)`: each run of consecutive frames is read as one hyperslab.
    pub fn read_projections(&self, angles: Range<usize>) -> Result<Stack, IoError> {
        let n = self.projections.len();
        if angles.start >= angles.end || angles.end > n {
            return Err(IoError::BadRange {
                path: self.path.clone(),
                dataset: format!("the projections of {}", self.data.name),
                range: angles,
                len: n,
            });
        }
        self.read_indexed(&self.projections[angles])
    }

    /// All flat fields as f32.
    pub fn read_flats(&self) -> Result<Stack, IoError> {
        self.read_indexed(&self.flats)
    }

    /// All dark fields as f32; one zero frame when the scan has none.
    pub fn read_darks(&self) -> Result<Stack, IoError> {
        if self.darks.is_empty() {
            return Ok(zero_frame(self.info.scan.projections.shape));
        }
        self.read_indexed(&self.darks)
    }

    /// The frames `indices` (increasing), read run by run.
    fn read_indexed(&self, indices: &[usize]) -> Result<Stack, IoError> {
        let [_, rows, columns] = self.info.scan.projections.shape;
        let mut values = Vec::with_capacity(indices.len() * rows * columns);
        let mut start = 0;
        while start < indices.len() {
            let mut end = start + 1;
            while end < indices.len() && indices[end] == indices[end - 1] + 1 {
                end += 1;
            }
            let run = indices[start]..indices[end - 1] + 1;
            values.extend(read_frames(&self.file, &self.path, &self.data, run)?.values);
            start = end;
        }
        Ok(Stack {
            shape: [indices.len(), rows, columns],
            values,
        })
    }
}

/// The laminographic tilt the rotation's axis gives, when the dataset `rotation` (NXtomo's
/// `sample/rotation_angle`) carries NeXus's `vector` attribute (NXtransformations: the axis the
/// rotation turns about, in the McStas frame, z along the beam and y up): `[0, 1, 0]` is plain
/// tomography, and an axis leaning towards the beam, `[0, cos T, sin T]`, a tilt `T`. The
/// `nxtomo` package does not write it (3.1 writes no sample transformation); software that
/// follows the NeXus base class does. An axis leaning sideways (an x component: a roll) is not
/// a tilt the operator models and is refused, as is one along the beam.
fn axis_vector_tilt(
    file: &H5File,
    path: &Path,
    rotation: &str,
) -> Result<Option<RecordedTilt>, IoError> {
    let Some(d) = file.dataset(rotation)? else {
        return Ok(None);
    };
    let Some(vector) = file.f64_attr(&d, "vector")? else {
        return Ok(None);
    };
    let name = format!("{rotation}@vector");
    let bad = |reason: String| IoError::Hdf5 {
        path: path.to_path_buf(),
        dataset: name.clone(),
        reason,
    };
    let [x, y, z] = vector[..] else {
        return Err(bad(format!("{vector:?}: expected three components")));
    };
    let norm = (x * x + y * y + z * z).sqrt();
    if !(norm.is_finite() && norm > 0.0) {
        return Err(bad(format!("{vector:?}: expected a finite, non-zero axis")));
    }
    if x.abs() > 1e-6 * norm {
        return Err(bad(format!(
            "{vector:?}: the rotation axis leans sideways (x, across the beam), which is not a \
             laminographic tilt; give the tilt with --tilt-deg"
        )));
    }
    // The axis as a line: [0, -1, 0] is the same vertical axis, turning the other way.
    let degrees = (z * y.signum()).atan2(y.abs()).to_degrees();
    let tilt = checked_tilt(path, &name, degrees)?;
    Ok(Some((
        tilt,
        format!("{name} (NeXus NXtransformations axis {vector:?})"),
    )))
}
