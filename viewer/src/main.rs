//! `lamino-viewer`: a desktop application that embeds lamino. The UI (eframe/egui on its wgpu
//! renderer) and lamino share one wgpu device ([`GpuContext::from_wgpu`]); the reconstruction
//! runs on a worker thread (`worker`), and the slices of every iterate go from lamino's buffers
//! into the UI's textures on the device (`slices`). With `--exit` it runs a scan given on the
//! command line, takes a screenshot, saves the volume and exits (what its test does).

mod app;
mod form;
mod plot;
mod slices;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::{CommandFactory, Parser, ValueEnum};
use eframe::egui;
use eframe::egui_wgpu::{WgpuSetup, WgpuSetupCreateNew};
use lamino::gpu::DeviceLimits;
use lamino::params::AdmmParams;
use lamino::preprocess::{AxisChoice, StripeRemoval, FW_SIGMA};
use lamino::simulate::PhantomKind;
use lamino::GpuContext;

/// The desktop viewer of lamino: open or simulate a scan, reconstruct it on the GPU the window
/// draws with, watch the slices of the iterate and the convergence, save the volume.
#[derive(Parser, Debug, Clone)]
#[command(version)]
pub struct Args {
    /// Simulate a scan of this phantom (shepp, chip, blobs) and open it.
    #[arg(long, conflicts_with = "open")]
    simulate: Option<PhantomKind>,
    /// The simulated volume's side n (n^3 voxels, n x n detector; even).
    #[arg(long, default_value_t = 32)]
    size: usize,
    /// With --simulate: the number of projection angles, equispaced over [0, 360) degrees (as
    /// `lamino simulate --angles N`; default: the size). With --open: a file of projection
    /// angles, one per projection (as `lamino reconstruct --angles FILE`): needed for a TIFF
    /// stack, and for an HDF5 scan it replaces the file's angles.
    #[arg(long, value_name = "N|FILE")]
    angles: Option<PathBuf>,
    /// Laminographic tilt in degrees (the simulated scan's; for a file, overrides the tilt it
    /// records, and a TIFF stack needs it).
    #[arg(long, allow_hyphen_values = true)]
    tilt_deg: Option<f64>,
    /// The simulated scan's incident photons per pixel (Poisson noise; default: noiseless).
    #[arg(long)]
    photons: Option<f64>,
    /// Seed of the simulated scan's noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Open a scan: DXchange or NXtomo HDF5 (.h5, .hdf5, .nxs, .nx), or a multi-page TIFF of
    /// intensities (with --angles, --tilt-deg and --flats or --flatfield envelope).
    #[arg(long)]
    open: Option<PathBuf>,
    /// A TIFF stack's white fields (multi-page TIFF or .npy).
    #[arg(long)]
    flats: Option<PathBuf>,
    /// A TIFF stack's dark fields.
    #[arg(long)]
    darks: Option<PathBuf>,
    /// A TIFF stack without white fields: estimate the open beam from the projections (as
    /// `lamino reconstruct --flatfield envelope`; the projections must be dark-subtracted).
    #[arg(long, value_enum, conflicts_with_all = ["flats", "darks"])]
    flatfield: Option<OpenBeam>,
    /// Bin the detector by 2^b, as tomocupy's and `lamino reconstruct`'s --binning: 0 none, 1
    /// 2 x 2, 2 4 x 4, 3 8 x 8 pixels (voxels 2^b times larger). --rotation-axis stays in
    /// unbinned detector columns.
    #[arg(long, default_value_t = 0, value_parser = lamino::preprocess::parse_binning)]
    binning: u32,
    /// Remove stripes from the sinograms (rings in the volume) after the -log, with the
    /// defaults of `lamino reconstruct --remove-stripe`: `fw` (Fourier-wavelet), `sort` (Vo et
    /// al.'s sorting).
    #[arg(long, value_enum, default_value_t = StripeMethod::None)]
    remove_stripe: StripeMethod,
    /// The detector column the rotation axis projects onto, in unbinned pixels (sub-pixel;
    /// default: the detector's centre column, width/2), or `auto` to search it (as `lamino
    /// reconstruct --rotation-axis`). tomopy's `center`.
    #[arg(long, visible_alias = "center", value_name = "COLUMN|auto")]
    rotation_axis: Option<AxisChoice>,
    /// TV weight of ADMM-TV (as `lamino reconstruct --alpha`).
    #[arg(long, default_value_t = AdmmParams::default().alpha)]
    alpha: f64,
    /// Run exactly N outer iterations (default: until the convergence test passes).
    #[arg(long)]
    iterations: Option<usize>,
    /// Start the reconstruction as soon as the scan is open.
    #[arg(long)]
    start: bool,
    /// Device memory the reconstruction may hold (MiB; beyond it the volume streams and the
    /// slices come from a host copy). Default: the library's.
    #[arg(long)]
    max_device_mib: Option<u64>,
    /// Draw the slices once at the end instead of after every outer iteration (to measure what
    /// the live display costs).
    #[arg(long)]
    no_live_slices: bool,
    /// Where simulated scans and the checkpoint (Cancel, Resume) go (default: a temporary
    /// directory removed at exit).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// When the run has finished: a screenshot of the window to this PNG.
    #[arg(long)]
    screenshot: Option<PathBuf>,
    /// When the run has finished: the volume to this file (.tif, .h5, .npy or .zarr, as
    /// `lamino reconstruct` writes it).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Start the run, and once it has finished and the screenshot and volume are written, exit
    /// (status 0 on success); prints the timings.
    #[arg(long)]
    exit: bool,
    /// Allow a software adapter (lavapipe, WARP), as the CLI's --allow-software-gpu (or
    /// LAMINO_ALLOW_SOFTWARE_GPU=1).
    #[arg(long)]
    allow_software_gpu: bool,
    /// The graphics API to run through, as the CLI's --backend: vulkan, gl, metal or dx12
    /// (unset: the backends wgpu's WGPU_BACKEND names, every one built in when it is unset).
    #[arg(long, value_parser = |s: &str| s.parse::<lamino::gpu::Backend>())]
    backend: Option<lamino::gpu::Backend>,
    /// `--angles` read as a count (with --simulate; set by [`Args::check`]).
    #[arg(skip)]
    angle_count: Option<usize>,
}

/// `--flatfield`: how a TIFF stack without white fields gets its open beam.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OpenBeam {
    /// A smooth surface fitted to the brightest projections at each pixel.
    Envelope,
}

/// `--remove-stripe`: the stripe removal of `lamino reconstruct`, with its default parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StripeMethod {
    /// No stripe removal.
    None,
    /// The Fourier-wavelet method (Munch et al. 2009).
    Fw,
    /// The sorting method (Vo et al. 2018, algorithm 3).
    Sort,
}

impl StripeMethod {
    pub const ALL: [Self; 3] = [Self::None, Self::Fw, Self::Sort];

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Fw => "fw",
            Self::Sort => "sort",
        }
    }

    /// The library's removal with `lamino reconstruct`'s defaults (none for [`Self::None`]).
    pub fn removal(self) -> Option<StripeRemoval> {
        match self {
            Self::None => None,
            Self::Fw => Some(StripeRemoval::FourierWavelet {
                level: None,
                sigma: FW_SIGMA,
            }),
            Self::Sort => Some(StripeRemoval::Sorting { size: None }),
        }
    }
}

impl Args {
    /// Reads `--angles` as the scan asks: a count of angles for a simulation, a file for a scan
    /// that is opened.
    fn check(&mut self) -> Result<(), String> {
        if let (None, Some(angles)) = (&self.open, &self.angles) {
            let count = angles.to_str().and_then(|a| a.parse::<usize>().ok());
            match count {
                Some(n) if n > 0 => self.angle_count = Some(n),
                _ => {
                    return Err(format!(
                        "--angles {}: a simulated scan takes a number of angles (a file of angles \
                         goes with --open)",
                        angles.display()
                    ))
                }
            }
        }
        Ok(())
    }
}

/// Why no window can open, known before trying: no display server named in the environment.
fn missing_display() -> Option<String> {
    if !cfg!(all(unix, not(target_os = "macos"))) {
        return None;
    }
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let (x11, wayland) = (set("DISPLAY"), set("WAYLAND_DISPLAY"));
    if x11 || (wayland && cfg!(feature = "wayland")) {
        return None;
    }
    let why = match wayland {
        true => {
            "DISPLAY is unset, and this build draws through X11 (a Wayland desktop's \
                 XWayland sets DISPLAY; `--features wayland` adds native Wayland)"
        }
        false => "DISPLAY and WAYLAND_DISPLAY are unset",
    };
    Some(format!(
        "no display to open a window on ({why}); run it on a desktop, or under xvfb-run"
    ))
}

fn main() -> ExitCode {
    // First, while this is the only thread: the Vulkan loader reads it when the device opens.
    #[cfg(unix)]
    lamino::gpu::provide_runtime_dir();
    let mut args = Args::parse();
    if let Err(e) = args.check() {
        Args::command()
            .error(clap::error::ErrorKind::ValueValidation, e)
            .exit();
    }
    if let Some(why) = missing_display() {
        eprintln!("lamino-viewer: {why}");
        return ExitCode::FAILURE;
    }
    // The limits the device opens with (LAMINO_LIMITS), checked before any window opens.
    let limits = match DeviceLimits::from_env() {
        Ok(limits) => limits,
        Err(e) => {
            eprintln!("lamino-viewer: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = Arc::new(Mutex::new(None));
    let mut options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_inner_size([1280.0, 820.0])
            .with_title("lamino viewer"),
        renderer: eframe::Renderer::Wgpu,
        ..Default::default()
    };
    // The UI's device is created with lamino's descriptor (the adapter's limits, or the portable
    // ones), so that the reconstruction's kernels get what they would get on a device of their
    // own.
    let mut setup = WgpuSetupCreateNew {
        device_descriptor: Arc::new(move |adapter| GpuContext::device_descriptor(adapter, limits)),
        ..WgpuSetupCreateNew::without_display_handle()
    };
    if let Some(backend) = args.backend {
        setup.instance_descriptor.backends = backend.wgpu_backends();
    }
    options.wgpu_options.wgpu_setup = WgpuSetup::CreateNew(setup);
    let creator_outcome = outcome.clone();
    let result = eframe::run_native(
        "lamino-viewer",
        options,
        Box::new(move |cc| {
            let render = cc
                .wgpu_render_state
                .clone()
                .ok_or("eframe started without its wgpu renderer")?;
            let ctx = GpuContext::from_wgpu(
                &render.adapter,
                render.device.clone(),
                render.queue.clone(),
                args.allow_software_gpu,
            )?;
            let app = app::App::new(&cc.egui_ctx, render, ctx, args, creator_outcome)?;
            Ok(Box::new(app))
        }),
    );
    match result {
        // The display named in the environment could not be opened (gone, refused, no server).
        Err(e @ (eframe::Error::Winit(_) | eframe::Error::WinitEventLoop(_))) => {
            eprintln!(
                "lamino-viewer: cannot open a window on the display ({e}); run it on a desktop, \
                 or under xvfb-run"
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("lamino-viewer: {e}");
            return ExitCode::FAILURE;
        }
        Ok(()) => {}
    }
    // Without --exit the window's close button ends the program: that is a success.
    let outcome = outcome.lock().unwrap().take();
    match outcome {
        Some(Err(e)) => {
            eprintln!("lamino-viewer: {e}");
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}
