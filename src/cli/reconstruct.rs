//! `lamino reconstruct`: read a scan, preprocess it (binning, stripe removal, the rotation axis),
//! reconstruct with ADMM-TV (progress bar, Ctrl-C stops after the current iteration and leaves a
//! checkpoint), write the outputs.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Args, ValueEnum};

use lamino::gpu::GpuContext;
use lamino::io::PixelSize;
use lamino::io::{OutputSet, StackFormat, MAX_CLAMPED_FRACTION};
use lamino::memo::{MemoOptions, MemoPolicy, MemoStages};
use lamino::params::AdmmParams;
use lamino::params::InnerSolver;
use lamino::preprocess::{
    find_rotation_axis, remove_stripes, AxisSearch, AxisSource, Preprocessing, StripeRemoval,
    AUTO_AXIS_RANGE_FRACTION, FW_SIGMA,
};
use lamino::recon::input::{
    extension, input_geometry, load_projection_share, load_projections_with, LoadOptions,
    LoadedProjections, ProjectionInput, Shading,
};
use lamino::recon::{Provenance, Reconstructor, Solved};
use lamino::scan::Projections;

use super::progress::bar;
use super::{Cli, CliResult};

/// Where the projections come from: the input routes shared by `reconstruct` and `try`.
#[derive(Args)]
pub struct InputArgs {
    /// Projections: a DXchange `.h5` scan, a multi-page TIFF of intensities (with --angles,
    /// --tilt-deg and --flats or --flatfield), or `.npy` line integrals -ln(I/I0) in voxel units,
    /// shape (ntheta, deth, detw), with --geometry.
    input: PathBuf,
    /// Laminographic tilt in degrees (phi = 90 + T), for scans that do not record it.
    #[arg(long, allow_hyphen_values = true)]
    tilt_deg: Option<f64>,
    /// For a TIFF intensity stack: a text file with one projection angle in degrees per line.
    #[arg(long)]
    angles: Option<PathBuf>,
    /// For a TIFF intensity stack: white fields (multi-page TIFF or .npy), averaged.
    #[arg(long)]
    flats: Option<PathBuf>,
    /// For a TIFF intensity stack: dark fields (multi-page TIFF or .npy), averaged; zero if absent.
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
    /// Bin the detector by 1, 2 or 4: counts (and white and dark fields) are summed over b x b
    /// pixels before the -log (line integrals are averaged), and the volume's voxels are b times
    /// larger, so its values (attenuation per voxel) are b times those of an unbinned
    /// reconstruction. --rotation-axis stays in unbinned detector columns.
    #[arg(long, default_value_t = 1, value_parser = parse_binning)]
    binning: usize,
    /// Refuse a scan when flat/dark normalisation clamps more than this fraction of its pixels
    /// (transmission at or below zero: white field zero or below the dark, data at or below the
    /// dark). The clamped count is recorded in report.json either way.
    #[arg(long, default_value_t = MAX_CLAMPED_FRACTION, value_parser = parse_fraction)]
    max_clamped_fraction: f64,
    /// Remove stripes from the sinograms (rings in the volume), after the -log: `fw` the
    /// Fourier-wavelet method (Munch et al. 2009), `sort` the sorting method (Vo et al. 2018).
    #[arg(long, value_enum)]
    remove_stripe: Option<StripeMethod>,
    /// For `--remove-stripe fw`: wavelet levels (default log2(width) - 5, at least 1: stripes up
    /// to width/32 pixels wide).
    #[arg(long)]
    fw_level: Option<usize>,
    /// For `--remove-stripe fw`: damping width in angular frequency samples (default 1).
    #[arg(long)]
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

fn parse_binning(s: &str) -> Result<usize, String> {
    match s {
        "1" => Ok(1),
        "2" => Ok(2),
        "4" => Ok(4),
        _ => Err(format!("binning {s:?}: expected 1, 2 or 4")),
    }
}

/// The stripe-removal methods of the command line.
#[derive(Clone, Copy, ValueEnum)]
enum StripeMethod {
    /// The Fourier-wavelet method (Munch et al. 2009).
    Fw,
    /// The sorting method (Vo et al. 2018, algorithm 3).
    Sort,
}

impl PreprocessArgs {
    fn load_options(&self) -> LoadOptions {
        LoadOptions {
            binning: self.binning,
            max_clamped_fraction: self.max_clamped_fraction,
        }
    }

    /// The stripe removal the options ask for, or why they contradict each other.
    fn stripe_removal(&self) -> Result<Option<StripeRemoval>, String> {
        let fw_options = self.fw_level.is_some() || self.fw_sigma.is_some();
        match self.remove_stripe {
            None if fw_options || self.sort_size.is_some() => {
                Err("--fw-level, --fw-sigma and --sort-size need --remove-stripe".into())
            }
            None => Ok(None),
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
        let mut pre = Preprocessing {
            binning: self.binning,
            stripe_removal: None,
            rotation_axis_source: AxisSource::Geometry,
            rotation_axis: unbinned_column(g.rotation_axis(), self.binning),
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
        if self.binning > 1 && !quiet {
            let g = projections.geometry();
            eprintln!(
                "binned {b} x {b}: {} x {} detector, voxels {b} times larger (values {b} times \
                 those of an unbinned reconstruction)",
                g.deth,
                g.detw,
                b = self.binning
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
    /// eighth of the detector width, coarse to fine, at the scan's tilt.
    #[arg(long)]
    rotation_axis: Option<AxisChoice>,

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
    /// The most outer iterations a run that stops on convergence may take (default 300).
    #[arg(long)]
    max_iterations: Option<usize>,
    /// Inner iterations per outer iteration (default 4).
    #[arg(long)]
    inner: Option<usize>,
    /// TV weight (default 1e-3, for volumes of order 1 per voxel).
    #[arg(long)]
    alpha: Option<f64>,
    /// Initial ADMM penalty (default 0.5).
    #[arg(long)]
    rho0: Option<f64>,
    /// Use the reference's Dai-Yuan inner iteration with this fixed step instead of exact-step CG.
    #[arg(long)]
    dai_yuan_step: Option<f64>,
    /// Pad the detector laterally by a quarter of its width on each side (edge values), as the
    /// reference does for samples wider than the field of view; cropped afterwards.
    #[arg(long)]
    pad: bool,
    /// Write the solver state to DIR/checkpoint.ckpt every K outer iterations (it is always
    /// written when Ctrl-C stops a run).
    #[arg(long)]
    checkpoint_every: Option<usize>,
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

/// How `reconstruct` estimates the open beam of projections without white fields.
#[derive(Clone, Copy, ValueEnum)]
enum OpenBeamMethod {
    /// `lamino::flatfield::estimate_open_beam`.
    Envelope,
    /// The name the flat-field issue asked for. BaSiC itself cannot be used on projections: a
    /// sample that is always in view is what every projection shares, so BaSiC puts it into
    /// the flat-field (measured: relative L2 3.4 on a simulated scan). This runs the envelope
    /// estimate and says so.
    Basic,
}

/// Memoization of the operator's chunk computations across iterations.
#[derive(Args)]
struct MemoArgs {
    /// `off`, `mlr:TAU` (the mLR paper's policy: reuse when the pooled keys' cosine similarity is
    /// at least TAU; trades accuracy for time, no error bound), `certified:TOL` (reuse
    /// least-squares combinations of stored chunks while the reused chunks' input residuals
    /// together stay below TOL of each stage's input, with a bound on the error) or
    /// `certified:auto[:SCALE[:FLOOR]]` (TOL follows the ADMM primal residual).
    /// Default: off (see docs/memoization.md, "When to use it").
    #[arg(long, default_value_t = MemoPolicy::DEFAULT)]
    memo: MemoPolicy,
    /// The stages memoized: `all`, or a comma-separated list of usfft1d, usfft1d_adjoint,
    /// usfft2d, usfft2d_adjoint (default: the 2D gridding stages, where reuse pays).
    #[arg(long, default_value_t = MemoStages::DEFAULT)]
    memo_stages: MemoStages,
    /// Device memory for the memo cache (MiB, default 256).
    #[arg(long = "memo-device-mib", value_parser = super::mib_as_bytes)]
    memo_device_bytes: Option<u64>,
    /// Host memory for the memo cache (MiB, default 1024).
    #[arg(long = "memo-host-mib", value_parser = super::mib_as_bytes)]
    memo_host_bytes: Option<u64>,
    /// Rows per memoized chunk (default 8).
    #[arg(long)]
    memo_chunk: Option<usize>,
}

impl MemoArgs {
    fn options(&self) -> MemoOptions {
        let d = MemoOptions::default();
        MemoOptions {
            policy: self.memo,
            stages: self.memo_stages,
            device_bytes: self.memo_device_bytes.unwrap_or(d.device_bytes),
            host_bytes: self.memo_host_bytes.unwrap_or(d.host_bytes),
            chunk_rows: self.memo_chunk.unwrap_or(d.chunk_rows),
            ..d
        }
    }
}

impl ReconstructArgs {
    fn solver_params(&self) -> AdmmParams {
        let mut p = AdmmParams::default();
        if let Some(v) = self.iterations {
            p.outer_iterations = v;
            p.convergence = None;
        }
        if let Some(v) = self.max_iterations {
            p.outer_iterations = v;
        }
        if let Some(v) = self.inner {
            p.inner_iterations = v;
        }
        if let Some(v) = self.alpha {
            p.alpha = v;
        }
        if let Some(v) = self.rho0 {
            p.rho0 = v;
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

    /// The input route the arguments describe, or why they describe none.
    fn projection_input(&self) -> Result<ProjectionInput, Box<dyn std::error::Error>> {
        let path = self.input.clone();
        let ext = extension(&path);
        if self.flatfield.is_some() && !matches!(ext.as_str(), "tif" | "tiff") {
            return Err(format!(
                "--flatfield applies to TIFF intensity stacks; {} holds line integrals or its own \
                 white fields",
                path.display()
            )
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
            "h5" | "hdf5" => ProjectionInput::DXchange {
                path,
                tilt_deg: self.tilt_deg,
            },
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
                    tilt_deg,
                    shading,
                }
            }
            other => {
                return Err(format!(
                    "{}: unsupported projection format {other:?} (expected .h5, .tif or .npy)",
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
    let first = is_first(&ranks);
    let options = RunOptions {
        memo: args.memo.options(),
        budgets: MemoryBudgets {
            device_bytes: args.max_device_memory,
            host_bytes: args.max_host_memory,
            scratch: args.scratch.clone(),
        },
        pad: args.pad,
        checkpoint_every: args.checkpoint_every,
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
        let devices = open_devices(cli, &options.ranks)?;
        let plan = options
            .budgets
            .apply(reconstructor(&devices, &options.ranks))
            .params(params)
            .memo(options.memo)
            .lateral_padding(if options.pad { g.detw / 4 } else { 0 })
            .plan(&g)?;
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
    let ((), written) = set.complete(result)?;
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
    pub checkpoint_every: Option<usize>,
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

/// Reconstructs with a progress bar and Ctrl-C handling (the checkpoint in `out`), and stages
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
        let defaults = AdmmParams::default();
        if params != defaults {
            eprintln!("solver parameters (changed from the defaults {defaults:?}): {params:?}");
        }
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
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))?;
    let progress = bar(params.outer_iterations as u64, "iterations", o.quiet);
    let mut builder = o
        .budgets
        .apply(reconstructor(devices, &o.ranks))
        .params(params)
        .memo(o.memo)
        .lateral_padding(if o.pad { g.detw / 4 } else { 0 })
        .checkpoint_every(checkpoint.clone(), o.checkpoint_every.unwrap_or(usize::MAX))
        .cancel_flag(cancel)
        .on_progress({
            let progress = progress.clone();
            move |p| {
                progress.set_position(p.iteration as u64 + 1);
                progress.set_message(format!(
                    "|Lu-d|^2 {:.4e}, rho {}, change {:.1e}",
                    p.report.data_term, p.report.rho, p.report.change
                ));
            }
        });
    if o.resume {
        builder = builder.resume_from(checkpoint.clone());
    }
    let plan = builder.plan(g)?;
    if !o.quiet && plan.mode == lamino::plan::Mode::Streaming {
        progress.suspend(|| eprintln!("{plan}"));
    }
    let mut solved = builder.solve(projections)?;
    let Some(set) = set else {
        return Ok(solved);
    };
    solved.report.preprocessing = preprocessing;
    let result = &solved.report;
    progress.finish_and_clear();
    if !result.completed {
        eprintln!(
            "stopped after iteration {}: the state is in {}; rerun with --resume to continue",
            result.reports.last().map_or(0, |r| r.iteration + 1),
            checkpoint.display()
        );
        return Err("interrupted".into());
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
    Ok(solved)
}
