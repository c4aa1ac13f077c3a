//! The `lamino` command line: the argument grammar and the dispatch to one module per command.
//! Library work (reading scans, simulating, reconstructing, benchmarking) lives in the library;
//! these modules parse, print and choose the device.

mod apply;
mod bench;
mod demo;
mod devices;
mod flatfield;
mod progress;
mod reconstruct;
mod score;
mod selftest;
mod simulate;
mod r#try;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use lamino::gpu::{DeviceOptions, DeviceSet, GpuContext};

/// What every command returns: errors are printed once, by [`main`].
pub type CliResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(
    name = "lamino",
    version,
    about = "Laminography reconstruction on any GPU"
)]
pub struct Cli {
    /// Adapter to run on: an index from `lamino devices`, or "best" (hardware GPUs first).
    /// `reconstruct` and `demo` also take several: a list ("0,2") or "all" (every hardware GPU);
    /// each device computes its share of every stage, with the same bits as one device.
    #[arg(long, global = true, default_value = "best")]
    device: DeviceSet,
    /// Accept a software adapter (lavapipe, WARP) when no hardware GPU exists. Also set by
    /// LAMINO_ALLOW_SOFTWARE_GPU=1. Meant for tests, CI and batch runs: it is slow.
    #[arg(long, global = true)]
    allow_software_gpu: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every GPU adapter with its index, type and key limits.
    Devices {
        /// One JSON object per adapter.
        #[arg(long)]
        json: bool,
    },
    /// Apply one operator to an array file.
    Apply {
        #[command(subcommand)]
        op: apply::ApplyOp,
    },
    /// Print benchmark figures.
    Bench {
        #[command(subcommand)]
        what: bench::BenchWhat,
    },
    /// Reconstruct a volume with ADMM-TV. INPUT: a DXchange `.h5` scan (normalised with its
    /// flats and darks, -log), a multi-page TIFF of intensities with an angle list, or `.npy`
    /// line integrals (ntheta, deth, detw) with `--geometry`. Writes DIR/recon.tif, DIR/recon.h5
    /// (or the --format chosen, DIR/recon.zarr among them), DIR/report.json, DIR/preview_*.png
    /// and DIR/convergence.png.
    Reconstruct(reconstruct::ReconstructArgs),
    /// Compare a volume with the truth: prints {"rel_l2", "psnr" (null when identical), "ssim"}
    /// as JSON and writes a truth | reconstruction | difference panel of the central slices
    /// (`--panel`).
    Score(score::ScoreArgs),
    /// The built-in example: simulate a chip (a layered circuit slab) with Poisson noise,
    /// reconstruct it with the default parameters, write previews, the report, the score and a
    /// truth | reconstruction | difference panel (DIR/comparison.png).
    Demo(demo::DemoArgs),
    /// Check this device: GPU FFTs against an f64 CPU reference on fixed signals (1D smooth and
    /// prime lengths, 2D, 3D), with the errors against the accuracy bound.
    Selftest,
    /// Simulate a scan of a preset phantom (exact analytic projections, optional Poisson noise)
    /// and write it as DXchange HDF5 with the ground truth in /truth/volume.
    Simulate(simulate::SimulateArgs),
    /// Find the rotation axis and the tilt of a scan: reconstruct a thin slab for every
    /// candidate (--rotation-axis-range A:B:STEP, --tilt-range A:B:STEP), write one preview per
    /// candidate and the sharpness scores, print the best. Takes the inputs of `reconstruct`.
    Try(r#try::TryArgs),
    /// BaSiC flat-field / dark-field estimation and correction.
    Flatfield {
        #[command(subcommand)]
        op: flatfield::FlatfieldOp,
    },
}

impl Cli {
    /// The device options of the global flags, for commands that run on one device.
    fn device_options(&self) -> Result<DeviceOptions, String> {
        match &self.device {
            DeviceSet::One(selection) => {
                Ok(DeviceOptions::new(*selection, self.allow_software_gpu))
            }
            several => Err(format!(
                "--device {several}: this command runs on one device; several devices apply to \
                 `reconstruct` and `demo`"
            )),
        }
    }

    /// A device by the global options, saying so when it is a software adapter.
    fn context(&self) -> Result<GpuContext, Box<dyn std::error::Error>> {
        let ctx = GpuContext::new(&self.device_options()?)?;
        note_software(&ctx);
        Ok(ctx)
    }

    /// Under MPI, the devices of the rank that is number `local` among its node's ranks.
    #[cfg(feature = "mpi")]
    fn rank_contexts(&self, local: usize) -> Result<Vec<GpuContext>, lamino::GpuError> {
        let devices = self.device.open_for_rank(self.allow_software_gpu, local)?;
        devices.iter().for_each(note_software);
        Ok(devices)
    }

    /// The global flags as arguments, for a lamino this one starts.
    #[cfg(feature = "mpi")]
    fn global_args(&self) -> Vec<String> {
        let mut args = vec!["--device".to_string(), self.device.to_string()];
        if self.allow_software_gpu {
            args.push("--allow-software-gpu".into());
        }
        args
    }

    /// Every device the global options name (one unless `--device` lists several).
    fn contexts(&self) -> Result<Vec<GpuContext>, lamino::GpuError> {
        let devices = self.device.open(self.allow_software_gpu)?;
        devices.iter().for_each(note_software);
        Ok(devices)
    }
}

/// Says so when `ctx` is a software adapter.
fn note_software(ctx: &GpuContext) {
    let info = ctx.info();
    if info.software {
        eprintln!("note: running on the software adapter {info} (opted in); expect it to be slow");
    }
}

fn run(cli: &Cli) -> CliResult {
    match &cli.command {
        Command::Devices { json } => devices::run(*json),
        Command::Apply { op } => apply::run(cli, op),
        Command::Bench { what } => bench::run(cli, what),
        Command::Reconstruct(args) => reconstruct::run(cli, args),
        Command::Score(args) => score::run(args),
        Command::Demo(args) => demo::run(cli, args),
        Command::Selftest => selftest::run(cli),
        Command::Simulate(args) => simulate::run(args),
        Command::Try(args) => r#try::run(cli, args),
        Command::Flatfield { op } => flatfield::run(cli, op),
    }
}

/// Parses the command line, runs the command and prints its error, if any.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A size given in MiB, as bytes; the clap parser of every MiB option.
fn mib_as_bytes(s: &str) -> Result<u64, String> {
    units_as_bytes(s, 20, "MiB")
}

/// A size given in GiB, as bytes; the clap parser of every GiB option.
fn gib_as_bytes(s: &str) -> Result<u64, String> {
    units_as_bytes(s, 30, "GiB")
}

/// `s` units of `2^shift` bytes, checked: a value whose bytes do not fit 64 bits is refused
/// (clap names the option) instead of wrapping to a small or zero budget.
fn units_as_bytes(s: &str, shift: u32, unit: &str) -> Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a whole number of {unit}: {e}"))?;
    n.checked_mul(1 << shift).ok_or_else(|| {
        format!(
            "{n} {unit} is more than 2^64 bytes (at most {} {unit})",
            u64::MAX >> shift
        )
    })
}
