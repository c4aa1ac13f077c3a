//! `lamino-viewer`: a desktop application that embeds lamino. The UI (eframe/egui on its wgpu
//! renderer) and lamino share one wgpu device ([`GpuContext::from_wgpu`]); the reconstruction
//! runs on a worker thread (`worker`), and the slices of every iterate go from lamino's buffers
//! into the UI's textures on the device (`slices`). With `--exit` it runs a scan given on the
//! command line, takes a screenshot, saves the volume and exits (what its test does).

mod app;
mod plot;
mod slices;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::Parser;
use eframe::egui;
use eframe::egui_wgpu::{WgpuSetup, WgpuSetupCreateNew};
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
    /// The simulated scan's projection angles, equispaced over [0, 360) degrees (default: the
    /// size).
    #[arg(long)]
    angles: Option<usize>,
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
    /// intensities (with --angle-list, --tilt-deg and --flats or --envelope).
    #[arg(long)]
    open: Option<PathBuf>,
    /// A TIFF stack's projection angles (one per projection; as `lamino reconstruct --angles`).
    #[arg(long)]
    angle_list: Option<PathBuf>,
    /// A TIFF stack's white fields (multi-page TIFF or .npy).
    #[arg(long)]
    flats: Option<PathBuf>,
    /// A TIFF stack's dark fields.
    #[arg(long)]
    darks: Option<PathBuf>,
    /// A TIFF stack without white fields: estimate the open beam from the projections
    /// (`lamino reconstruct --flatfield envelope`).
    #[arg(long, conflicts_with = "flats")]
    envelope: bool,
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
}

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = Arc::new(Mutex::new(None));
    let mut options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_inner_size([1280.0, 820.0])
            .with_title("lamino viewer"),
        renderer: eframe::Renderer::Wgpu,
        ..Default::default()
    };
    // The UI's device is created with lamino's descriptor (the adapter's limits), so that the
    // reconstruction's kernels get what they would get on a device of their own.
    options.wgpu_options.wgpu_setup = WgpuSetup::CreateNew(WgpuSetupCreateNew {
        device_descriptor: Arc::new(GpuContext::device_descriptor),
        ..WgpuSetupCreateNew::without_display_handle()
    });
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
    if let Err(e) = result {
        eprintln!("lamino-viewer: {e}");
        return ExitCode::FAILURE;
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
