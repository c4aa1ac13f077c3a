//! The input routes of `reconstruct` and `try`: which files the arguments name (an HDF5 scan,
//! a TIFF stack or folder, `.npy` line integrals) and the options that apply to each.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::io::AngleUnit;
use crate::recon::input::{extension, InputError, LoadedProjections, ProjectionInput, Shading};

/// Where the projections come from: the input routes shared by `reconstruct` and `try`.
#[derive(Args)]
pub struct InputArgs {
    /// Projections: an HDF5 scan (`.h5`, `.hdf5`, `.nxs`, `.nx`: DXchange or NeXus NXtomo), a
    /// multi-page TIFF of intensities or a folder of single-image TIFFs in natural name order
    /// (with --angles, --tilt-deg and --flats or --flatfield), or `.npy` line integrals
    /// -ln(I/I0) in voxel units, shape (ntheta, deth, detw), with --geometry.
    pub(super) input: PathBuf,
    /// Laminographic tilt in degrees from the tomography plane (0: plain CT; phi = 90 + T), for
    /// scans that do not record it. The same angle as tomocupy's --lamino-angle.
    #[arg(long, allow_hyphen_values = true, visible_alias = "lamino-angle")]
    tilt_deg: Option<f64>,
    /// Projection angles, one per projection: numbers separated by white space or CSV (one
    /// column, or a header naming the angle column), `#` comments allowed. Needed for a TIFF
    /// stack; for an HDF5 scan it replaces the file's angles (said on stderr and in report.json).
    #[arg(long)]
    angles: Option<PathBuf>,
    /// The unit of the projection angles (the HDF5 scan's or --angles') where they state none;
    /// a file stating another unit is an error. Without it, unit-less angles are degrees unless
    /// they look like radians (all within 2 pi) or span under 7 degrees, which is refused.
    #[arg(long, value_enum)]
    theta_units: Option<ThetaUnits>,
    /// For an HDF5 scan: the dataset holding the laminographic tilt T (one value; degrees, or
    /// radians when its `units` attribute says so), for files that record it where lamino does
    /// not look (docs/input-formats.md). --tilt-deg overrides it (said).
    #[arg(long)]
    tilt_path: Option<String>,
    /// For an HDF5 scan: the dataset holding the projection angles (one per projection, or per
    /// frame of an NXtomo file), read instead of /exchange/theta or NXtomo's rotation_angle.
    #[arg(long)]
    theta_path: Option<String>,
    /// For a TIFF intensity stack: white fields (multi-page TIFF, folder of TIFFs or .npy),
    /// averaged.
    #[arg(long)]
    flats: Option<PathBuf>,
    /// For a TIFF intensity stack: dark fields (multi-page TIFF, folder of TIFFs or .npy),
    /// averaged; zero if absent.
    #[arg(long)]
    darks: Option<PathBuf>,
    /// For a TIFF intensity stack without white fields: estimate the open beam (I0 times the
    /// detector shading) from the projections themselves. `envelope`: a smooth surface fitted
    /// to the brightest projections at each pixel, i.e. where the sample leaves the ray. The
    /// intensities must already be dark-subtracted (no dark-field is estimable without dark
    /// frames); pixel-to-pixel gain is not estimated.
    #[arg(long, value_enum, conflicts_with = "flats")]
    flatfield: Option<OpenBeamMethod>,
    /// Geometry JSON (sizes, angles in radians, phi, optional center), needed for `.npy` input.
    #[arg(long)]
    geometry: Option<PathBuf>,
}

/// `--theta-units`.
#[derive(Clone, Copy, ValueEnum)]
enum ThetaUnits {
    Deg,
    Rad,
}

impl From<ThetaUnits> for AngleUnit {
    fn from(u: ThetaUnits) -> Self {
        match u {
            ThetaUnits::Deg => AngleUnit::Degrees,
            ThetaUnits::Rad => AngleUnit::Radians,
        }
    }
}

/// How `reconstruct` estimates the open beam of projections without white fields.
#[derive(Clone, Copy, ValueEnum)]
enum OpenBeamMethod {
    /// A smooth surface fitted to the brightest projections at each pixel.
    Envelope,
    /// Accepted for BaSiC users; runs `envelope` and says so: BaSiC on projections puts a
    /// sample that is always in view into the flat-field.
    Basic,
}

impl InputArgs {
    /// Every file the arguments name, for the check that no output overwrites one.
    pub(in crate::cli) fn files(&self) -> Vec<&Path> {
        std::iter::once(&self.input)
            .chain(
                [&self.angles, &self.flats, &self.darks, &self.geometry]
                    .into_iter()
                    .flatten(),
            )
            .map(PathBuf::as_path)
            .collect()
    }

    /// The input route the arguments describe, or why they describe none. An option that
    /// means nothing for the input's kind is an [`InputError::NotApplicable`].
    pub(super) fn projection_input(&self) -> Result<ProjectionInput, Box<dyn std::error::Error>> {
        let path = self.input.clone();
        // A folder of single-image TIFFs is a TIFF stack, whatever its name.
        let ext = if path.is_dir() {
            "tif".to_string()
        } else {
            extension(&path)
        };
        let theta_units = self.theta_units.map(AngleUnit::from);
        let (kind, why, refused): (_, _, &[(&str, bool)]) = match ext.as_str() {
            "npy" => (
                "`.npy` line integrals",
                "their geometry, angles and tilt come from --geometry",
                &[
                    ("--tilt-deg", self.tilt_deg.is_some()),
                    ("--angles", self.angles.is_some()),
                    ("--theta-units", self.theta_units.is_some()),
                    ("--tilt-path", self.tilt_path.is_some()),
                    ("--theta-path", self.theta_path.is_some()),
                    ("--flats", self.flats.is_some()),
                    ("--darks", self.darks.is_some()),
                    ("--flatfield", self.flatfield.is_some()),
                ],
            ),
            "h5" | "hdf5" | "nxs" | "nx" => (
                "an HDF5 scan",
                "it holds its own flat and dark fields, and its geometry comes from the file \
                 (--angles, --theta-units, --tilt-deg)",
                &[
                    ("--flats", self.flats.is_some()),
                    ("--darks", self.darks.is_some()),
                    ("--flatfield", self.flatfield.is_some()),
                    ("--geometry", self.geometry.is_some()),
                ],
            ),
            "tif" | "tiff" => (
                "a TIFF intensity stack",
                "its geometry comes from --angles and --tilt-deg",
                &[
                    ("--geometry", self.geometry.is_some()),
                    ("--tilt-path", self.tilt_path.is_some()),
                    ("--theta-path", self.theta_path.is_some()),
                ],
            ),
            _ => ("", "", &[]),
        };
        if let Some((option, _)) = refused.iter().find(|(_, given)| *given) {
            return Err(InputError::NotApplicable {
                option,
                path,
                kind,
                why,
            }
            .into());
        }
        Ok(match ext.as_str() {
            "npy" => ProjectionInput::LineIntegrals {
                path,
                geometry: self
                    .geometry
                    .clone()
                    .ok_or("`.npy` projections need --geometry G.json")?,
            },
            "h5" | "hdf5" | "nxs" | "nx" => {
                if let Some(angles) = &self.angles {
                    eprintln!(
                        "note: the angles of {} replace those of {}",
                        angles.display(),
                        path.display()
                    );
                }
                ProjectionInput::DXchange {
                    path,
                    tilt_deg: self.tilt_deg,
                    angles: self.angles.clone(),
                    theta_units,
                    tilt_path: self.tilt_path.clone(),
                    theta_path: self.theta_path.clone(),
                }
            }
            "tif" | "tiff" => {
                let angles = self
                    .angles
                    .clone()
                    .ok_or("a TIFF stack needs --angles FILE (degrees, one per line)")?;
                let tilt_deg = self.tilt_deg.ok_or("a TIFF stack needs --tilt-deg T")?;
                let shading = match (&self.flats, self.flatfield) {
                    (Some(flats), _) => Shading::Fields {
                        flats: flats.clone(),
                        darks: self.darks.clone(),
                    },
                    (None, Some(method)) => {
                        if self.darks.is_some() {
                            return Err("--darks needs --flats: with --flatfield envelope, subtract the dark field from the projections first".into());
                        }
                        if matches!(method, OpenBeamMethod::Basic) {
                            eprintln!(
                                "note: --flatfield basic estimates the open beam with the envelope \
                                 method: BaSiC would absorb a sample that is always in view into \
                                 the flat-field"
                            );
                        }
                        Shading::OpenBeamEnvelope
                    }
                    (None, None) => return Err("a TIFF intensity stack needs --flats (and --darks), or --flatfield envelope to estimate the open beam from the projections".into()),
                };
                ProjectionInput::TiffStack {
                    path,
                    angles,
                    theta_units,
                    tilt_deg,
                    shading,
                }
            }
            other => {
                return Err(format!(
                    "{}: unsupported projection format {other:?} (expected .h5, .hdf5, .nxs, .nx, \
                     .tif, .npy or a folder of .tif files)",
                    path.display()
                )
                .into())
            }
        })
    }
}

/// Prints what reading `loaded` noted and warned of, unless `quiet`.
pub(in crate::cli) fn say_read(loaded: &LoadedProjections, quiet: bool) {
    if !quiet {
        for note in &loaded.notes {
            eprintln!("{note}");
        }
        for warning in &loaded.warnings {
            eprintln!("warning: {warning}");
        }
    }
}
