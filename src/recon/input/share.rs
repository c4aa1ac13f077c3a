//! An MPI rank's share of a scan's projections ([`load_projection_share`]): only its angles are
//! read (a hyperslab of an HDF5 scan, pages of a TIFF stack by index, frames of `.npy` line
//! integrals at their offset), normalised and binned a block at a time. One process reads the
//! share of every angle ([`super::load_projections_with`]).

use std::ops::Range;
use std::path::Path;

use num_complex::Complex32;

use super::{
    check_angle_count, clamp_warning, detector_geometry, hdf5_scan, read_angle_list_in,
    read_intensity_stack, read_scan_geometry, scan_tilt, Hdf5Scan, InputError, LoadOptions,
    LoadedProjections, ProjectionInput, Shading,
};
use crate::flatfield::estimate_open_beam;
use crate::geometry::Tilt;
use crate::io::{
    read_complex_npy, AngleUnit, ClampCount, Dtype, FieldMeans, IoError, NpyReader, PixelSize,
    Stack, StackReader,
};
use crate::preprocess::{bin_frames, bin_projections};
use crate::scan::Projections;

/// The projections of the angles `share(ntheta)` only, for an MPI rank: only those are read
/// (flats and darks whole): a hyperslab of a DXchange scan, the pages of a TIFF stack (or the
/// images of an `.npy` one) by index, the frames of `.npy` line integrals at their offset. The
/// one exception is the open-beam estimate of a TIFF stack without flats, which fits one surface
/// to every projection: that stack is read whole and the other angles dropped.
pub fn load_projection_share(
    input: &ProjectionInput,
    options: &LoadOptions,
    share: &dyn Fn(usize) -> Range<usize>,
) -> Result<LoadedProjections, InputError> {
    match input {
        ProjectionInput::LineIntegrals { path, geometry } => {
            line_integrals_share(path, geometry, options.binning, share)
        }
        ProjectionInput::DXchange { .. } => {
            let (scan, path, tilt_deg) = hdf5_scan(input)?;
            projections_from_dxchange(path, tilt_deg, scan, options, share)
        }
        ProjectionInput::TiffStack {
            path,
            angles,
            theta_units,
            tilt_deg,
            shading,
        } => projections_from_tiff(
            path,
            angles,
            *theta_units,
            *tilt_deg,
            shading,
            options,
            share,
        ),
    }
}

/// `.npy` line integrals `(ntheta, deth, detw)` (complex64, or a real float type promoted as
/// [`read_complex_npy`] does) of the angles `share(ntheta)`, read from their offset in the file,
/// binned by `b`. A Fortran-ordered file holds no angle contiguously: it is read whole and the
/// other angles dropped.
fn line_integrals_share(
    path: &Path,
    geometry_path: &Path,
    b: usize,
    share: &dyn Fn(usize) -> Range<usize>,
) -> Result<LoadedProjections, InputError> {
    let geometry = read_scan_geometry(geometry_path)?;
    let expected = vec![geometry.ntheta(), geometry.deth, geometry.detw];
    let angles = share(geometry.ntheta());
    let mut npy = NpyReader::open(path)?;
    let shape_error = |got: Vec<usize>| InputError::Shape {
        path: path.into(),
        got,
        expected: format!("the geometry needs (ntheta, deth, detw) = {expected:?}"),
    };
    let frame = geometry.deth * geometry.detw;
    let projections = if npy.is_fortran() {
        let array = read_complex_npy(path)?;
        if array.shape != expected {
            return Err(shape_error(array.shape));
        }
        let values = array.data.iter().map(|c| c.re).collect();
        Projections::new(geometry, values)?.keep(angles.clone())?
    } else {
        if npy.shape() != expected {
            return Err(shape_error(npy.shape().to_vec()));
        }
        npy.seek(angles.start * frame)?;
        let len = angles.len() * frame;
        let values = match npy.dtype() {
            Dtype::C64 => npy.read::<Complex32>(len)?.iter().map(|c| c.re).collect(),
            Dtype::F16 | Dtype::F32 | Dtype::F64 => npy.read_f32(len)?,
            _ => {
                return Err(IoError::UnsupportedDtype {
                    path: path.into(),
                    descr: npy.descr(),
                    expected: "complex64 ('<c8'), float32 ('<f4'), float64 ('<f8') or float16 \
                               ('<f2')",
                }
                .into())
            }
        };
        Projections::part(geometry, angles.clone(), values)?
    };
    Ok(LoadedProjections {
        projections: bin_projections(&projections, b)?,
        notes: Vec::new(),
        warnings: Vec::new(),
        clamps: None,
        pixel_size: None,
        tilt_source: format!("{} (phi)", geometry_path.display()),
        angles_source: format!("{} (theta)", geometry_path.display()),
        frames_read: angles.len(),
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

/// Line integrals of the projections `share(count)` of an HDF5 scan (read as that hyperslab),
/// read, binned and normalised a block of angles at a time, so the raw and the normalised
/// projections are never both held whole.
fn projections_from_dxchange(
    path: &Path,
    tilt_deg: Option<f64>,
    reader: Hdf5Scan,
    options: &LoadOptions,
    share: &dyn Fn(usize) -> Range<usize>,
) -> Result<LoadedProjections, InputError> {
    let b = options.binning;
    let info = reader.info().clone();
    let tilt = scan_tilt(path, tilt_deg, &info)?;
    let [count, deth, detw] = info.projections.shape;
    let geometry = detector_geometry(deth, detw, info.theta, tilt.tilt, b)?;
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
    let mut warnings = reader.warnings(path);
    warnings.extend(tilt.warning);
    let clamps = clamp_outcome(path, clamped, values.len(), options, &mut warnings)?;
    let mut notes = vec![format!(
        "tilt {:.6} degrees from {}; angles from {}",
        tilt.tilt.degrees(),
        tilt.source,
        info.theta_source
    )];
    let pixel_size = match reader.pixel_size(path) {
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
        projections: Projections::part(geometry, angles.clone(), values)?,
        notes,
        warnings,
        clamps: Some(clamps),
        pixel_size,
        tilt_source: tilt.source,
        angles_source: info.theta_source,
        frames_read: angles.len(),
    })
}

/// Line integrals of the angles `share(count)` from a multi-page TIFF (or `.npy` stack) of
/// intensities, with angles from a text file and the shading from white and dark fields or the
/// open-beam estimate.
fn projections_from_tiff(
    path: &Path,
    angles: &Path,
    theta_units: Option<AngleUnit>,
    tilt_deg: f64,
    shading: &Shading,
    options: &LoadOptions,
    share: &dyn Fn(usize) -> Range<usize>,
) -> Result<LoadedProjections, InputError> {
    let b = options.binning;
    let theta = read_angle_list_in(angles, theta_units)?;
    let mut pages = StackReader::open(path)?;
    let (count, raw_h, raw_w) = (pages.count(), pages.height(), pages.width());
    check_angle_count(path, angles, theta.len(), count)?;
    let geometry = detector_geometry(raw_h, raw_w, theta, Tilt::from_degrees(tilt_deg), b)?;
    let (deth, detw) = (geometry.deth, geometry.detw);
    let share = share(count);
    let mut notes = Vec::new();
    let mut warnings = Vec::new();
    let mut frames_read = 0;
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
            let mut values = line_integral_buffer(path, share.len(), deth, detw)?;
            let mut clamped = 0;
            pages.seek(share.start)?;
            for _ in share.clone() {
                let page = pages.next_image().ok_or_else(|| IoError::Corrupt {
                    path: path.into(),
                    reason: format!("page {frames_read} of {count} is missing"),
                })?;
                frames_read += 1;
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
            frames_read = count;
            let beam = estimate_open_beam(&data.values, count, deth, detw)?;
            notes.push(format!(
                "open beam estimated from the projections: a smooth surface on {:.0} % of the \
                 detector (residual {:.2e} in ln I)",
                100.0 * beam.support_fraction,
                beam.residual_std
            ));
            warnings.extend(beam.warnings.iter().cloned());
            let frame = deth * detw;
            beam.line_integrals(&data.values[share.start * frame..share.end * frame])
        }
    };
    let clamps = clamp_outcome(path, clamped, values.len(), options, &mut warnings)?;
    Ok(LoadedProjections {
        projections: Projections::part(geometry, share, values)?,
        notes,
        warnings,
        clamps: Some(clamps),
        pixel_size: None,
        tilt_source: "--tilt-deg".into(),
        angles_source: angles.display().to_string(),
        frames_read,
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
    if counts.exceeds(options.max_clamped_fraction) {
        return Err(InputError::Clamped {
            path: path.into(),
            counts,
            limit: options.max_clamped_fraction,
        });
    }
    warnings.extend(clamp_warning(counts));
    Ok(counts)
}

impl Hdf5Scan {
    fn read_projections(&self, angles: Range<usize>) -> Result<Stack, IoError> {
        match self {
            Self::Dxchange(r) => r.read_projections(angles),
            Self::Nxtomo(r) => r.read_projections(angles),
        }
    }

    fn read_flats(&self) -> Result<Stack, IoError> {
        match self {
            Self::Dxchange(r) => r.read_flats(),
            Self::Nxtomo(r) => r.read_flats(),
        }
    }

    fn read_darks(&self) -> Result<Stack, IoError> {
        match self {
            Self::Dxchange(r) => r.read_darks(),
            Self::Nxtomo(r) => r.read_darks(),
        }
    }

    /// The detector's pixel size the scan records, with where it was read: DXchange's metadata
    /// paths ([`crate::io::read_pixel_size`]) or NXtomo's `x_pixel_size` with its unit.
    fn pixel_size(&self, path: &Path) -> Result<Option<(PixelSize, String)>, IoError> {
        match self {
            Self::Dxchange(_) => crate::io::read_pixel_size(path),
            Self::Nxtomo(r) => {
                let info = r.info();
                let Some(stated) = &info.x_pixel_size else {
                    return Ok(None);
                };
                let from = format!("{}/instrument/detector/x_pixel_size", info.entry);
                match stated.micrometers() {
                    Ok(size) => Ok(Some((size, from))),
                    Err(reason) => Err(IoError::Hdf5 {
                        path: path.to_path_buf(),
                        dataset: from,
                        reason,
                    }),
                }
            }
        }
    }

    /// What a user must be told about how the scan was read: angles replaced, darks absent.
    fn warnings(&self, path: &Path) -> Vec<String> {
        let info = self.info();
        let mut warnings = Vec::new();
        if let Self::Dxchange(_) = self {
            if info.theta_source != "/exchange/theta" {
                warnings.push(format!(
                    "angles of {} from {}",
                    path.display(),
                    info.theta_source
                ));
            }
        }
        if let Self::Nxtomo(r) = self {
            warnings.push(format!(
                "{} read as NXtomo (entry {}), angles from {}",
                path.display(),
                r.info().entry,
                info.theta_source
            ));
        }
        if info.darks.is_none() {
            warnings.push(format!(
                "{} has no dark fields: darks taken as zero (right only if the detector's offset \
                 is already subtracted)",
                path.display()
            ));
        }
        warnings
    }
}
