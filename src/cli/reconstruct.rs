//! `lamino reconstruct`: read a scan, preprocess it (binning, stripe removal, the rotation axis),
//! reconstruct with ADMM-TV (progress bar or log lines; Ctrl-C, SIGTERM and SIGUSR1 stop after the
//! current iteration and leave a checkpoint), write the outputs.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::str::FromStr;
#[cfg(feature = "mpi")]
use std::sync::Arc;

use clap::{Args, ValueEnum};

use lamino::gpu::GpuContext;
use lamino::io::{AngleUnit, OutputSet, PixelSize, StackFormat, MAX_CLAMPED_FRACTION};
use lamino::memo::{MemoOptions, MemoPolicy, MemoStages};
use lamino::operator::{Geometry, VolumeBox};
use lamino::params::AdmmParams;
use lamino::params::InnerSolver;
use lamino::preprocess::{
    find_rotation_axis, remove_stripes, AxisSearch, AxisSource, Preprocessing, StripeRemoval,
    AUTO_AXIS_RANGE_FRACTION, FW_SIGMA,
};
use lamino::recon::input::{
    extension, input_geometry, load_projection_share, load_projections_with, InputError,
    LoadOptions, LoadedProjections, ProjectionInput, Shading,
};
use lamino::recon::{CheckpointInterval, Provenance, Reconstructor, Solved};
use lamino::scan::Projections;

use super::progress::IterationProgress;
use super::signals::{Interrupted, StopSignals};
use super::{Cli, CliResult};

/// Where the projections come from: the input routes shared by `reconstruct` and `try`.
#[derive(Args)]
pub struct InputArgs {
    /// Projections: an HDF5 scan (`.h5`, `.hdf5`, `.nxs`, `.nx`: DXchange or NeXus NXtomo), a
    /// multi-page TIFF of intensities or a folder of single-image TIFFs in natural name order
    /// (with --angles, --tilt-deg and --flats or --flatfield), or `.npy` line integrals
    /// -ln(I/I0) in voxel units, shape (ntheta, deth, detw), with --geometry.
    input: PathBuf,
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

/// A volume file format of `reconstruct --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VolumeFormat {
    Tiff,
    H5,
    Zarr,
}

impl VolumeFormat {
    fn stack_format(self) -> StackFormat {
        match self {
            Self::Tiff => StackFormat::Tiff,
            Self::H5 => StackFormat::Hdf5,
            Self::Zarr => StackFormat::Zarr,
        }
    }
}

/// Preprocessing shared by `reconstruct` and `try`.
#[derive(Args)]
pub struct PreprocessArgs {
    /// Bin the detector by 2^b, as tomocupy's --binning: 0 none, 1 2 x 2, 2 4 x 4, 3 8 x 8
    /// pixels. Counts (and white and dark fields) are summed over the binned pixels before the
    /// -log (line integrals are averaged), and the volume's voxels are 2^b times larger, so its
    /// values (attenuation per voxel) are 2^b times those of an unbinned reconstruction.
    /// --rotation-axis stays in unbinned detector columns.
    #[arg(long, default_value_t = 0, value_parser = super::names::parse_binning)]
    binning: u32,
    /// Refuse a scan when flat/dark normalisation clamps more than this fraction of its pixels
    /// (transmission at or below zero: white field zero or below the dark, data at or below the
    /// dark). The clamped count is recorded in report.json either way.
    #[arg(long, default_value_t = MAX_CLAMPED_FRACTION, value_parser = parse_fraction)]
    max_clamped_fraction: f64,
    /// Remove stripes from the sinograms (rings in the volume), after the -log.
    /// tomocupy's --remove-stripe-method; its `vo-all` is Vo et al.'s sorting step and two
    /// more, of which lamino has the sorting step (`sort`).
    #[arg(long, value_enum, visible_alias = "remove-stripe-method")]
    remove_stripe: Option<StripeMethod>,
    /// For `--remove-stripe fw`: wavelet levels (default log2(width) - 5, at least 1: stripes up
    /// to width/32 pixels wide).
    #[arg(long)]
    fw_level: Option<usize>,
    // The default in the help comes from the constant; `None` says it was not given.
    #[arg(long, help = format!(
        "For `--remove-stripe fw`: damping width in angular frequency samples (default {FW_SIGMA})"
    ))]
    fw_sigma: Option<f64>,
    /// For `--remove-stripe sort`: median window across columns (default 21 for detectors wider
    /// than 2000 pixels, else 1 % of the width, at least 5).
    #[arg(long)]
    sort_size: Option<usize>,
    /// The detector's effective pixel size at the sample in micrometres (tomocupy's
    /// --pixel-size), for inputs that do not record it or to override a DXchange file's
    /// metadata. The volume's voxels are this times --binning; the outputs carry it (ImageJ and
    /// OME-Zarr metadata, recon.h5 attributes, report.json). Without it, or the file's, the
    /// voxel size is unknown (unit "pixel").
    #[arg(long, value_parser = parse_pixel_size)]
    pixel_size: Option<PixelSize>,
}

fn parse_pixel_size(s: &str) -> Result<PixelSize, String> {
    s.parse::<f64>()
        .ok()
        .and_then(PixelSize::micrometers)
        .ok_or_else(|| format!("{s:?}: expected a positive pixel size in micrometres"))
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s:?}: expected a fraction from 0 to 1")),
    }
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

/// The stripe-removal methods of the command line, with tomocupy's names of methods lamino does
/// not have (hidden: refused with what lamino offers).
#[derive(Clone, Copy, ValueEnum)]
enum StripeMethod {
    /// No stripe removal (the default).
    None,
    /// The Fourier-wavelet method (Munch et al. 2009).
    Fw,
    /// The sorting method (Vo et al. 2018, algorithm 3).
    Sort,
    #[value(hide = true)]
    VoAll,
    #[value(hide = true)]
    Ti,
}

impl PreprocessArgs {
    /// The binning factor of `--binning` (the library's unit).
    fn binning_factor(&self) -> usize {
        super::names::binning_factor(self.binning)
    }

    fn load_options(&self) -> LoadOptions {
        LoadOptions {
            binning: self.binning_factor(),
            max_clamped_fraction: self.max_clamped_fraction,
        }
    }

    /// The stripe removal the options ask for, or why they contradict each other.
    fn stripe_removal(&self) -> Result<Option<StripeRemoval>, String> {
        let fw_options = self.fw_level.is_some() || self.fw_sigma.is_some();
        match self.remove_stripe {
            Some(StripeMethod::VoAll) => {
                Err("--remove-stripe vo-all: lamino has the sorting step \
                 of Vo et al.'s all-stripe removal as `--remove-stripe sort`, not its large- and \
                 dead-stripe steps"
                    .into())
            }
            Some(StripeMethod::Ti) => Err("--remove-stripe ti: lamino does not offer Titarenko's \
                 method; it offers `fw` (Fourier-wavelet) and `sort` (Vo et al.'s sorting)"
                .into()),
            None | Some(StripeMethod::None) if fw_options || self.sort_size.is_some() => {
                Err("--fw-level, --fw-sigma and --sort-size need --remove-stripe".into())
            }
            None | Some(StripeMethod::None) => Ok(None),
            Some(StripeMethod::Fw) if self.sort_size.is_some() => {
                Err("--sort-size applies to --remove-stripe sort".into())
            }
            Some(StripeMethod::Fw) => Ok(Some(StripeRemoval::FourierWavelet {
                level: self.fw_level,
                sigma: self.fw_sigma.unwrap_or(FW_SIGMA),
            })),
            Some(StripeMethod::Sort) if fw_options => {
                Err("--fw-level and --fw-sigma apply to --remove-stripe fw".into())
            }
            Some(StripeMethod::Sort) => Ok(Some(StripeRemoval::Sorting {
                size: self.sort_size,
            })),
        }
    }

    /// Reads the projections binned and with stripes removed; prints what it did unless `quiet`.
    pub fn load(
        &self,
        input: &InputArgs,
        quiet: bool,
    ) -> Result<(Projections, Preprocessing), Box<dyn std::error::Error>> {
        self.load_share(input, quiet, None)
    }

    /// As [`load`](Self::load), keeping only the angles `share(ntheta)` when given (an MPI
    /// rank's): without stripe removal, which needs every angle of each sinogram, only those
    /// are read (a hyperslab of a DXchange scan).
    pub fn load_share(
        &self,
        input: &InputArgs,
        quiet: bool,
        share: Option<&dyn Fn(usize) -> std::ops::Range<usize>>,
    ) -> Result<(Projections, Preprocessing), Box<dyn std::error::Error>> {
        let stripes = self.stripe_removal()?;
        let options = self.load_options();
        let input = input.projection_input()?;
        let loaded = match (share, stripes) {
            (Some(share), None) => load_projection_share(&input, &options, share)?,
            _ => load_projections_with(&input, &options)?,
        };
        let (clamps, input_warnings) = (loaded.clamps, loaded.warnings.clone());
        let pixel_size = self.pixel_size.or(loaded.pixel_size);
        if let (Some(given), Some(recorded), false) = (self.pixel_size, loaded.pixel_size, quiet) {
            eprintln!(
                "--pixel-size {} um overrides the {} um the input records",
                given.value, recorded.value
            );
        }
        let mut projections = report_loaded(loaded, quiet);
        let g = projections.geometry().clone();
        let b = self.binning_factor();
        let mut pre = Preprocessing {
            binning: b,
            stripe_removal: None,
            rotation_axis_source: AxisSource::Geometry,
            rotation_axis: unbinned_column(g.rotation_axis(), b),
            axis_search: None,
            clamps,
            input_warnings,
            pixel_size,
        };
        if let Some(method) = stripes {
            let start = std::time::Instant::now();
            let method = method.resolved(g.detw);
            projections = remove_stripes(&projections, method)?;
            if !quiet {
                eprintln!(
                    "stripes removed ({method:?}) from {} sinograms of {} x {} in {:.2} s",
                    g.deth,
                    g.ntheta(),
                    g.detw,
                    start.elapsed().as_secs_f64()
                );
            }
            pre.stripe_removal = Some(method);
        }
        if let Some(share) = share {
            let angles = share(projections.geometry().ntheta());
            projections = projections.keep(angles)?;
        }
        if b > 1 && !quiet {
            let g = projections.geometry();
            eprintln!(
                "binning {} = {b} x {b} pixels: {} x {} detector, voxels {b} times larger (values \
                 {b} times those of an unbinned reconstruction)",
                self.binning, g.deth, g.detw,
            );
        }
        Ok((projections, pre))
    }
}

/// A column of the binned detector in unbinned columns (binned pixel j is centred on unbinned
/// coordinate b j + (b - 1)/2).
pub fn unbinned_column(c: f64, b: usize) -> f64 {
    c * b as f64 + (b as f64 - 1.0) / 2.0
}

/// An unbinned detector column on the detector binned by `b`.
pub fn binned_column(c: f64, b: usize) -> f64 {
    (c - (b as f64 - 1.0) / 2.0) / b as f64
}

/// `--rotation-axis`: a detector column or `auto`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AxisChoice {
    Column(f64),
    Auto,
}

impl FromStr for AxisChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "auto" {
            return Ok(Self::Auto);
        }
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Self::Column(v)),
            _ => Err(format!(
                "{s:?}: expected a detector column (pixels, e.g. 1023.5) or `auto`"
            )),
        }
    }
}

#[derive(Args)]
pub struct ReconstructArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    preprocess: PreprocessArgs,
    /// The detector column the rotation axis projects onto, in unbinned pixels (sub-pixel; pixel
    /// w is centred at w; default: the detector's centre column, width/2, or the geometry file's
    /// `center`). `auto` searches it (see `lamino try`): over the default axis plus or minus an
    /// eighth of the detector width, coarse to fine, at the scan's tilt. tomopy's `center`.
    #[arg(long, visible_alias = "center")]
    rotation_axis: Option<AxisChoice>,
    /// Boxed: the ranges would make this the one large variant of the command enum.
    #[command(flatten)]
    volume: Box<VolumeArgs>,

    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// The volume's files, comma-separated: `tiff` (recon.tif, float32 pages with ImageJ
    /// metadata), `h5` (recon.h5, /volume), `zarr` (recon.zarr, OME-Zarr with a multiscale
    /// pyramid, chunked and gzip-compressed: what napari opens natively and what volumes too
    /// large for one TIFF need).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [VolumeFormat::Tiff, VolumeFormat::H5])]
    format: Vec<VolumeFormat>,
    /// Run exactly N outer ADMM iterations (benchmarks, comparisons) instead of stopping on the
    /// convergence test (the default).
    #[arg(long, conflicts_with = "max_iterations")]
    iterations: Option<usize>,
    /// The most outer iterations a run that stops on convergence may take.
    #[arg(long, default_value_t = AdmmParams::default().outer_iterations)]
    max_iterations: usize,
    /// Inner iterations per outer iteration.
    #[arg(long, default_value_t = AdmmParams::default().inner_iterations)]
    inner: usize,
    /// TV weight (the default is for volumes of order 1 per voxel).
    #[arg(long, default_value_t = AdmmParams::default().alpha)]
    alpha: f64,
    /// Initial ADMM penalty.
    #[arg(long, default_value_t = AdmmParams::default().rho0)]
    rho0: f64,
    /// Use the reference's Dai-Yuan inner iteration with this fixed step instead of exact-step CG.
    #[arg(long)]
    dai_yuan_step: Option<f64>,
    /// Pad the detector laterally by a quarter of its width on each side (edge values), as the
    /// reference does for samples wider than the field of view; cropped afterwards.
    #[arg(long)]
    pad: bool,
    /// When to write the solver state to DIR/checkpoint.ckpt: every N outer iterations (`10`),
    /// at the end of the first iteration a time after the last checkpoint (`90s`, `10m`, `1h`),
    /// `never`, or `auto`: every 10 minutes once the run is expected (from the mean time per
    /// iteration so far, at the most iterations it may take) to last more than 30 minutes. It
    /// is always written when Ctrl-C, SIGTERM or SIGUSR1 stops a run (exit status 128 + the
    /// signal's number).
    #[arg(long, default_value_t = CheckpointInterval::Auto)]
    checkpoint_every: CheckpointInterval,
    /// Continue from DIR/checkpoint.ckpt.
    #[arg(long)]
    resume: bool,
    /// No progress bar or parameter echo.
    #[arg(long)]
    quiet: bool,
    /// Device memory the reconstruction may hold (MiB). Default: the device-local memory the
    /// Vulkan driver reports, else 2048. Beyond it the arrays stream through the device in
    /// chunks (same results, more transfers); too small for even one chunk is an error.
    #[arg(long, value_parser = super::mib_as_bytes)]
    max_device_memory: Option<u64>,
    /// Host memory the arrays the device does not hold may take (MiB). Default: 70 % of the
    /// machine's RAM. Beyond it they go to --scratch.
    #[arg(long, value_parser = super::mib_as_bytes)]
    max_host_memory: Option<u64>,
    /// Directory for memory-mapped scratch files holding the arrays beyond --max-host-memory
    /// (a fast local disk; the files have no name and vanish however the run ends).
    #[arg(long)]
    scratch: Option<PathBuf>,
    /// Print the memory plan (in-core or streaming, chunk sizes, device / host / scratch bytes,
    /// bytes moved per iteration) as JSON and stop: no projection is read, no GPU work is done.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    memo: MemoArgs,
}

/// The reconstructed volume as a box of the default volume: the `deth` z planes the detector's
/// rows see and `detw x detw` in x/y centred on the rotation axis, in unbinned voxels.
#[derive(Args)]
struct VolumeArgs {
    /// Reconstruct only z planes START:END (half-open, unbinned voxels) of the default volume,
    /// whose z planes are the detector's rows: for a flat sample, the thin slab holding it
    /// (costs proportionally less). The length must be even and at least the gridding kernel's
    /// minimum (6 at the default accuracy); the error names the nearest valid range.
    #[arg(long, value_parser = parse_span, conflicts_with_all = ["lamino_start_row", "lamino_end_row"])]
    slab: Option<Range<usize>>,
    /// tomocupy's name for the slab's first z plane (with --lamino-end-row; the same as --slab).
    #[arg(long, requires = "lamino_end_row")]
    lamino_start_row: Option<usize>,
    /// tomocupy's name for the slab's end z plane, exclusive (with --lamino-start-row).
    #[arg(long, requires = "lamino_start_row")]
    lamino_end_row: Option<usize>,
    /// Reconstruct only x columns X0:X1 and y rows Y0:Y1 (half-open, unbinned voxels) of the
    /// default volume's detw x detw plane, centred on the rotation axis: an x/y region of
    /// interest. Lengths as for --slab.
    #[arg(long, value_parser = parse_roi)]
    roi: Option<[Range<usize>; 2]>,
}

/// `START:END` with START < END.
pub(super) fn parse_span(s: &str) -> Result<Range<usize>, String> {
    let bad = || format!("{s:?}: expected START:END (voxels, START < END)");
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    let (a, b) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if a >= b {
        return Err(bad());
    }
    Ok(a..b)
}

/// `X0:X1,Y0:Y1`.
fn parse_roi(s: &str) -> Result<[Range<usize>; 2], String> {
    let (x, y) = s
        .split_once(',')
        .ok_or_else(|| format!("{s:?}: expected X0:X1,Y0:Y1 (voxels)"))?;
    Ok([parse_span(x)?, parse_span(y)?])
}

impl VolumeArgs {
    /// The box the options ask for in the default volume of `g` (a detector binned by `b`), or
    /// `None` for the whole default volume.
    fn volume_box(&self, g: &Geometry, b: usize) -> Result<Option<VolumeBox>, String> {
        let slab = match (&self.slab, self.lamino_start_row, self.lamino_end_row) {
            (Some(r), ..) => Some(("--slab", r.clone())),
            (None, Some(s), Some(e)) if s < e => {
                Some(("--lamino-start-row/--lamino-end-row", s..e))
            }
            (None, Some(s), Some(e)) => {
                return Err(format!(
                    "--lamino-start-row {s} --lamino-end-row {e}: the start must be below the end"
                ))
            }
            _ => None,
        };
        if slab.is_none() && self.roi.is_none() {
            return Ok(None);
        }
        // Unbinned voxels to binned ones: both ends on the binned grid.
        let binned = |name: &str, r: Range<usize>| {
            if r.start.is_multiple_of(b) && r.end.is_multiple_of(b) {
                return Ok(r.start / b..r.end / b);
            }
            let near = |v: usize| (v + b / 2) / b * b;
            Err(format!(
                "{name} {}:{} with binning {b} x {b}: both ends must be multiples of {b} (nearest \
                 {}:{})",
                r.start,
                r.end,
                near(r.start),
                near(r.end).max(near(r.start) + b)
            ))
        };
        let full = VolumeBox::full(g);
        let z = match slab {
            Some((name, r)) => binned(name, r)?,
            None => full.z,
        };
        let (x, y) = match &self.roi {
            Some([x, y]) => (binned("--roi x", x.clone())?, binned("--roi y", y.clone())?),
            None => (full.x, full.y),
        };
        let volume = VolumeBox { z, y, x };
        g.with_subvolume(&volume).map_err(|e| {
            let unit = match b {
                1 => String::new(),
                _ => format!(" (ranges in voxels binned by {b})"),
            };
            format!("--slab/--roi: {e}{unit}")
        })?;
        Ok(Some(volume))
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

/// Memoization of the operator's chunk computations across iterations.
#[derive(Args)]
struct MemoArgs {
    /// `off`, `mlr:TAU` (the mLR paper's policy: reuse when the pooled keys' cosine similarity is
    /// at least TAU; trades accuracy for time, no error bound), `certified:TOL` (reuse
    /// least-squares combinations of stored chunks while the reused chunks' input residuals
    /// together stay below TOL of each stage's input, with a bound on the error) or
    /// `certified:auto[:SCALE[:FLOOR]]` (TOL follows the ADMM primal residual); see
    /// docs/memoization.md, "When to use it".
    #[arg(long, default_value_t = MemoPolicy::DEFAULT)]
    memo: MemoPolicy,
    /// The stages memoized: `all`, or a comma-separated list of usfft1d, usfft1d_adjoint,
    /// usfft2d, usfft2d_adjoint (the default is the 2D gridding stages, where reuse pays).
    #[arg(long, default_value_t = MemoStages::DEFAULT)]
    memo_stages: MemoStages,
    /// Device memory for the memo cache (MiB).
    #[arg(long = "memo-device-mib", value_parser = super::mib_as_bytes,
          default_value_t = MemoOptions::DEFAULT.device_bytes >> 20)]
    memo_device_bytes: u64,
    /// Host memory for the memo cache (MiB).
    #[arg(long = "memo-host-mib", value_parser = super::mib_as_bytes,
          default_value_t = MemoOptions::DEFAULT.host_bytes >> 20)]
    memo_host_bytes: u64,
    /// Rows per memoized chunk.
    #[arg(long, default_value_t = MemoOptions::DEFAULT.chunk_rows)]
    memo_chunk: usize,
}

impl MemoArgs {
    fn options(&self) -> MemoOptions {
        let d = MemoOptions::default();
        MemoOptions {
            policy: self.memo,
            stages: self.memo_stages,
            device_bytes: self.memo_device_bytes,
            host_bytes: self.memo_host_bytes,
            chunk_rows: self.memo_chunk,
            ..d
        }
    }
}

impl ReconstructArgs {
    fn solver_params(&self) -> AdmmParams {
        let mut p = AdmmParams {
            outer_iterations: self.max_iterations,
            inner_iterations: self.inner,
            alpha: self.alpha,
            rho0: self.rho0,
            ..AdmmParams::default()
        };
        if let Some(v) = self.iterations {
            p.outer_iterations = v;
            p.convergence = None;
        }
        if let Some(step) = self.dai_yuan_step {
            p.inner = InnerSolver::DaiYuan { step };
        }
        p
    }
}

impl InputArgs {
    /// Every file the arguments name, for the check that no output overwrites one.
    pub(super) fn files(&self) -> Vec<&Path> {
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
    fn projection_input(&self) -> Result<ProjectionInput, Box<dyn std::error::Error>> {
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
                &[("--geometry", self.geometry.is_some())],
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

/// Prints what loading the projections found out (unless `quiet`) and returns them.
pub(super) fn report_loaded(loaded: LoadedProjections, quiet: bool) -> Projections {
    if !quiet {
        for note in &loaded.notes {
            eprintln!("{note}");
        }
        for warning in &loaded.warnings {
            eprintln!("warning: {warning}");
        }
    }
    loaded.projections
}

pub fn run(cli: &Cli, args: &ReconstructArgs) -> CliResult {
    // Started by an MPI launcher: this process is one rank; an error on it stops them all.
    #[cfg(feature = "mpi")]
    if let Some(ranks) = lamino::distributed::ranks::Ranks::from_launcher()? {
        return run_as(cli, args, Some(ranks.clone())).or_else(|e| {
            eprintln!("error on rank {} of {}: {e}", ranks.rank(), ranks.size());
            ranks.abort(1)
        });
    }
    run_as(cli, args, None)
}

/// The MPI ranks this process is one of (never any without the `mpi` feature).
#[cfg(feature = "mpi")]
pub(super) type MpiRanks = Option<Arc<lamino::distributed::ranks::Ranks>>;
#[cfg(not(feature = "mpi"))]
pub(super) type MpiRanks = Option<std::convert::Infallible>;

/// Whether this process writes the outputs and speaks: the first rank, or the only process.
fn is_first(ranks: &MpiRanks) -> bool {
    #[cfg(feature = "mpi")]
    return ranks.as_ref().is_none_or(|r| r.rank() == 0);
    #[cfg(not(feature = "mpi"))]
    ranks.is_none()
}

/// The devices of this process: the global options' devices, or under MPI this rank's (see
/// [`lamino::gpu::DeviceSet::open_for_rank`]), of which every rank is told the number.
fn open_devices(
    cli: &Cli,
    ranks: &MpiRanks,
) -> Result<Vec<GpuContext>, Box<dyn std::error::Error>> {
    #[cfg(feature = "mpi")]
    if let Some(r) = ranks {
        let local = lamino::distributed::ranks::Ranks::local_rank().unwrap_or(r.rank());
        let devices = cli.rank_contexts(local)?;
        r.set_devices(devices.len())?;
        return Ok(devices);
    }
    let _ = ranks;
    Ok(cli.contexts()?)
}

/// The angles an MPI rank keeps, by the number of angles (`None` without ranks).
fn rank_share(ranks: &MpiRanks) -> Option<impl Fn(usize) -> std::ops::Range<usize> + '_> {
    #[cfg(feature = "mpi")]
    return ranks.as_ref().map(|r| move |n| r.home(r.rank(), n));
    #[cfg(not(feature = "mpi"))]
    ranks.as_ref().map(|r| move |_: usize| match *r {})
}

/// A reconstruction on `devices`, as one of `ranks` under MPI.
fn reconstructor<'a>(devices: &'a [GpuContext], ranks: &MpiRanks) -> Reconstructor<'a> {
    let builder = Reconstructor::on_devices(devices);
    #[cfg(feature = "mpi")]
    if let Some(ranks) = ranks {
        return builder.on_ranks(ranks.clone());
    }
    let _ = ranks;
    builder
}

fn run_as(cli: &Cli, args: &ReconstructArgs, ranks: MpiRanks) -> CliResult {
    // Parameters first: a bad one is reported before any file is read.
    let params = args.solver_params();
    params.validate()?;
    args.preprocess.stripe_removal()?;
    let first = is_first(&ranks);
    let options = RunOptions {
        memo: args.memo.options(),
        budgets: MemoryBudgets {
            device_bytes: args.max_device_memory,
            host_bytes: args.max_host_memory,
            scratch: args.scratch.clone(),
        },
        pad: args.pad,
        checkpoint_every: Some(args.checkpoint_every),
        resume: args.resume,
        quiet: args.quiet || !first,
        ranks,
        formats: unique_formats(&args.format),
        provenance: Some(Provenance::now(Some(args.input.input.clone()))),
    };
    if args.dry_run {
        let g = input_geometry(
            &args.input.projection_input()?,
            &args.preprocess.load_options(),
        )?;
        let g = match args
            .volume
            .volume_box(&g, args.preprocess.binning_factor())?
        {
            Some(b) => g.with_subvolume(&b)?,
            None => g,
        };
        let devices = open_devices(cli, &options.ranks)?;
        let builder = options
            .budgets
            .apply(reconstructor(&devices, &options.ranks))
            .params(params)
            .memo(options.memo)
            .lateral_padding(if options.pad { g.detw / 4 } else { 0 });
        if !options.quiet {
            if let Some(padding) = builder.padding(&g).describe(&g) {
                eprintln!("{padding}");
            }
        }
        let plan = builder.plan(&g)?;
        if !options.quiet {
            eprintln!("{plan}");
        }
        if first {
            println!("{}", serde_json::to_string_pretty(&plan)?);
        }
        return Ok(());
    }
    // Only the first rank writes: staging directories are named by process id, which ranks on
    // other nodes may share.
    let mut set = match first {
        true => Some(OutputSet::begin(&args.out, lamino::recon::OUTPUT_KIND)?),
        false => None,
    };
    if let Some(set) = &set {
        let outputs: Vec<&str> = lamino::recon::OUTPUT_NAMES
            .into_iter()
            .chain([AXIS_SEARCH_CSV])
            .collect();
        set.refuse_inputs(&outputs, &args.input.files())?;
    }
    let result = reconstruct_into(cli, args, params, &options, set.as_mut());
    let Some(set) = set else {
        return result;
    };
    // A run a signal stopped keeps its exit status through the output set's message.
    let stopped = result
        .as_ref()
        .err()
        .and_then(|e| e.downcast_ref::<Interrupted>())
        .cloned();
    let ((), written) = match set.complete(result) {
        Ok(done) => done,
        Err(e) => {
            return Err(match stopped {
                Some(stopped) => stopped.retold(e.to_string()).into(),
                None => e.into(),
            })
        }
    };
    if !options.quiet {
        written
            .iter()
            .for_each(|path| eprintln!("wrote {}", path.display()));
    }
    Ok(())
}

/// How sure an axis search is, in words: the slab score's peak half width and, for CT, the
/// Fourier estimate and how far the two disagree (columns).
pub fn describe_axis_search(search: &AxisSearch) -> String {
    let peak = match search.peak_half_width {
        Some(w) => format!("the slab score halves {w:.2} columns from its peak"),
        None => "the slab score has no interior peak".into(),
    };
    match (search.fourier_axis, search.disagreement) {
        (Some(f), Some(d)) => format!(
            "confidence: {peak} (slab search {:.2}, {} slices); Fourier estimate (Vo et al.) \
             {f:.2}, {d:.2} columns apart; using the {}",
            search.slab_axis,
            search.slab.slices,
            if search.method == "fourier" {
                "Fourier estimate"
            } else {
                "slab search"
            }
        ),
        _ => format!(
            "confidence: {peak} (slab search {:.2}, {} slices)",
            search.slab_axis, search.slab.slices
        ),
    }
}

/// Where `reconstruct --rotation-axis auto` writes the scores of its search.
const AXIS_SEARCH_CSV: &str = "axis_search.csv";

/// The reconstruction of [`run_as`] after its checks, with its outputs staged in `set` (the
/// first rank's).
fn reconstruct_into(
    cli: &Cli,
    args: &ReconstructArgs,
    params: AdmmParams,
    options: &RunOptions,
    mut set: Option<&mut OutputSet>,
) -> CliResult {
    // The devices first: under MPI, a rank's share of the projections depends on how many
    // devices every rank has. A rank reads only its share, unless the axis search needs them all.
    let devices = open_devices(cli, &options.ranks)?;
    let share = rank_share(&options.ranks);
    let share = match args.rotation_axis {
        Some(AxisChoice::Auto) => None,
        _ => share
            .as_ref()
            .map(|s| s as &dyn Fn(usize) -> std::ops::Range<usize>),
    };
    let (projections, mut pre) = args
        .preprocess
        .load_share(&args.input, options.quiet, share)?;
    let ctx = &devices[0];
    let b = pre.binning;
    let projections = match args.rotation_axis {
        None => projections,
        Some(AxisChoice::Column(c)) => {
            pre.rotation_axis_source = AxisSource::Given;
            pre.rotation_axis = c;
            projections.with_rotation_axis(binned_column(c, b))?
        }
        Some(AxisChoice::Auto) => {
            let g = projections.geometry();
            let tilt = g.phi.to_degrees() - 90.0;
            let start = std::time::Instant::now();
            let search = find_rotation_axis(ctx, &projections, b, tilt, None, 0.0)?;
            let csv = args.out.join(AXIS_SEARCH_CSV);
            if let Some(set) = set.as_deref_mut() {
                let scored = search.passes.iter().flat_map(|p| &p.scored);
                super::r#try::write_scores(&set.stage(AXIS_SEARCH_CSV)?, scored)?;
            }
            eprintln!(
                "rotation axis searched over [{:.1}, {:.1}] (the default axis +- {} of the width, \
                 {} passes, {:.1} s): {:.2}; scores in {}",
                search.range[0],
                search.range[1],
                AUTO_AXIS_RANGE_FRACTION,
                search.passes.len(),
                start.elapsed().as_secs_f64(),
                search.rotation_axis,
                csv.display()
            );
            eprintln!("{}", describe_axis_search(&search));
            pre.rotation_axis_source = AxisSource::Searched;
            pre.rotation_axis = search.rotation_axis;
            let axis = search.rotation_axis;
            pre.axis_search = Some(search);
            projections.with_rotation_axis(binned_column(axis, b))?
        }
    };
    let projections = match args.volume.volume_box(projections.geometry(), b)? {
        Some(volume) => projections.with_volume(&volume)?,
        None => projections,
    };
    run_reconstruction(
        &devices,
        &projections,
        params,
        &args.out,
        set,
        options,
        Some(pre),
    )?;
    Ok(())
}

/// The solver parameters as the command line names them, one per line, with the default of
/// each one that differs from it.
fn parameter_table(p: &AdmmParams) -> String {
    let d = AdmmParams::default();
    let solver = |s: InnerSolver| match s {
        InnerSolver::ConjugateGradient => "conjugate gradient (exact step)".to_string(),
        InnerSolver::DaiYuan { step } => format!("Dai-Yuan, step {step} (--dai-yuan-step)"),
    };
    let stop = |p: &AdmmParams| match p.convergence {
        Some(c) => format!(
            "on convergence (change {:e}, primal {:e}, dual {:e}), at most {} iterations",
            c.change, c.primal, c.dual, p.outer_iterations
        ),
        None => format!(
            "after exactly {} iterations (--iterations)",
            p.outer_iterations
        ),
    };
    let rows = [
        ("stop", stop(p), stop(&d)),
        (
            "--inner",
            p.inner_iterations.to_string(),
            d.inner_iterations.to_string(),
        ),
        ("--alpha", p.alpha.to_string(), d.alpha.to_string()),
        ("--rho0", p.rho0.to_string(), d.rho0.to_string()),
        ("inner solver", solver(p.inner), solver(d.inner)),
    ];
    let mut table = String::from("solver parameters:\n");
    for (name, value, default) in rows {
        let note = match value == default {
            true => String::new(),
            false => format!("   (default: {default})"),
        };
        table += &format!("  {name:<14}{value}{note}\n");
    }
    table
}

/// `lamino help reconstruct`'s examples.
pub const EXAMPLES: &str = "\
Examples:
  # A DXchange scan, stopping on convergence, the axis searched
  lamino reconstruct scan.h5 --rotation-axis auto --out rec
  # Binned 4 x 4 (tomocupy's --binning 2), rings removed, the axis and tilt given
  lamino reconstruct scan.h5 --binning 2 --remove-stripe fw --rotation-axis 1024.5 \\
      --tilt-deg 30 --out rec-bin4
  # A TIFF stack of intensities with white and dark fields
  lamino reconstruct proj.tif --angles angles.txt --tilt-deg 30 --flats flats.tif \\
      --darks darks.tif --out rec
  # Line integrals with a geometry file, exactly 50 iterations, on two GPUs
  lamino reconstruct data.npy --geometry geometry.json --iterations 50 --device 0,1 --out rec";

/// The memory budgets of the command line (bytes).
#[derive(Default)]
pub(super) struct MemoryBudgets {
    pub device_bytes: Option<u64>,
    pub host_bytes: Option<u64>,
    pub scratch: Option<PathBuf>,
}

impl MemoryBudgets {
    fn apply<'a>(&self, mut builder: Reconstructor<'a>) -> Reconstructor<'a> {
        if let Some(bytes) = self.device_bytes {
            builder = builder.device_memory_budget(bytes);
        }
        if let Some(bytes) = self.host_bytes {
            builder = builder.host_memory_budget(bytes);
        }
        if let Some(dir) = &self.scratch {
            builder = builder.scratch_dir(dir.clone());
        }
        builder
    }
}

/// The run settings of the command line.
pub(super) struct RunOptions {
    pub memo: MemoOptions,
    pub budgets: MemoryBudgets,
    pub pad: bool,
    /// `None`: only when a signal stops the run.
    pub checkpoint_every: Option<CheckpointInterval>,
    pub resume: bool,
    pub quiet: bool,
    pub ranks: MpiRanks,
    /// The formats the volume is written in.
    pub formats: Vec<StackFormat>,
    /// The run, for the report.
    pub provenance: Option<Provenance>,
}

/// `formats` in the order given, each once.
fn unique_formats(formats: &[VolumeFormat]) -> Vec<StackFormat> {
    let mut unique: Vec<StackFormat> = Vec::with_capacity(formats.len());
    for format in formats.iter().map(|f| f.stack_format()) {
        if !unique.contains(&format) {
            unique.push(format);
        }
    }
    unique
}

/// Reconstructs with progress and the stop signals handled (the checkpoint in `out`), and stages
/// the outputs in `set` (absent on the ranks that write nothing). The volume is written a slab
/// at a time from where the solver keeps it, so it never has to fit in host memory; the
/// returned [`Solved`] still holds it.
pub(super) fn run_reconstruction<'a>(
    devices: &'a [GpuContext],
    projections: &Projections,
    params: AdmmParams,
    out: &Path,
    set: Option<&mut OutputSet>,
    o: &RunOptions,
    preprocessing: Option<Preprocessing>,
) -> Result<Solved<'a>, Box<dyn std::error::Error>> {
    let g = projections.geometry();
    if !o.quiet {
        if g.offset != [0.0; 3] {
            eprintln!(
                "volume: a box of the default {}x{}x{}, its centre offset (z, y, x) = {:?} voxels",
                g.deth, g.detw, g.detw, g.offset
            );
        }
        eprintln!(
            "reconstructing {}x{}x{} from {} projections of {}x{} (tilt {:.2} deg, rotation axis \
             at column {:.2}) on {}",
            g.n0,
            g.n1,
            g.n2,
            g.ntheta(),
            g.deth,
            g.detw,
            (g.phi - std::f64::consts::FRAC_PI_2).to_degrees().abs(),
            g.rotation_axis(),
            devices
                .iter()
                .map(|d| d.info().to_string())
                .collect::<Vec<_>>()
                .join(" + ")
        );
        eprint!("{}", parameter_table(&params));
        if o.memo.policy != MemoPolicy::DEFAULT {
            eprintln!(
                "memo policy {} (default {}), chunks of {} rows",
                o.memo.policy,
                MemoPolicy::DEFAULT,
                o.memo.chunk_rows
            );
        }
    }
    if o.memo.policy.trades_accuracy() {
        eprintln!(
            "warning: --memo {} reuses results without an error bound: it trades accuracy for time (`lamino bench memo` measures how much)",
            o.memo.policy
        );
    }
    // The checkpoint's directory (the output set's has made it on the first rank).
    std::fs::create_dir_all(out)
        .map_err(|e| format!("cannot create the output directory {}: {e}", out.display()))?;
    let checkpoint = out.join("checkpoint.ckpt");
    let signals = StopSignals::install()
        .map_err(|e| format!("cannot install the handlers of SIGINT, SIGTERM and SIGUSR1: {e}"))?;
    let progress = IterationProgress::new(
        params.outer_iterations,
        o.quiet,
        params.convergence.is_some(),
    );
    let mut builder = o
        .budgets
        .apply(reconstructor(devices, &o.ranks))
        .params(params)
        .memo(o.memo)
        .lateral_padding(if o.pad { g.detw / 4 } else { 0 })
        .checkpoint_every(
            checkpoint.clone(),
            o.checkpoint_every.unwrap_or(CheckpointInterval::Never),
        )
        .cancel_flag(signals.flag())
        .on_progress({
            let progress = progress.clone();
            move |p| progress.update(p)
        });
    if o.resume {
        builder = builder.resume_from(checkpoint.clone());
    }
    if !o.quiet {
        if let Some(padding) = builder.padding(g).describe(g) {
            progress.suspend(|| eprintln!("{padding}"));
        }
    }
    let plan = builder.plan(g)?;
    if !o.quiet && plan.mode == lamino::plan::Mode::Streaming {
        progress.suspend(|| eprintln!("{plan}"));
    }
    let mut solved = builder.solve(projections)?;
    let Some(set) = set else {
        // A rank that writes nothing sends the writing rank its slices of the volume.
        if solved.report.completed {
            solved.serve_volume()?;
            solved.slab_ledger();
        }
        return Ok(solved);
    };
    solved.report.preprocessing = preprocessing;
    let result = &solved.report;
    progress.finish();
    if !result.completed {
        let iteration = result.reports.last().map_or(0, |r| r.iteration + 1);
        // The cancel flag is set by the stop signals only.
        let (signal, number) = signals.received().unwrap_or(("a signal", 0));
        return Err(Interrupted::new(signal, number, iteration, &checkpoint).into());
    }
    if !o.quiet {
        let iterations = result.reports.last().map_or(0, |r| r.iteration + 1);
        eprintln!(
            "stopped after {iterations} outer iterations: {}",
            result.stop.describe()
        );
    }
    solved.report.provenance = o.provenance.clone();
    solved.stage_outputs_as(set, &o.formats)?;
    let ledger = solved.slab_ledger();
    if !o.quiet && ledger.len() > 1 {
        let slab = solved.slab_bytes();
        for (rank, (held, share)) in ledger.iter().enumerate() {
            eprintln!(
                "writing the volume, rank {rank} held at most {held} bytes of it: its share \
                 {share} bytes and slabs of at most {slab} bytes"
            );
        }
    }
    Ok(solved)
}
