//! The `lamino` command line: the argument grammar and the dispatch to one module per command.
//! Library work (reading scans, simulating, reconstructing, benchmarking) lives in the library;
//! these modules parse, print and choose the device.

mod apply;
mod bench;
mod demo;
mod devices;
mod flatfield;
mod names;
mod progress;
mod reconstruct;
mod score;
mod selftest;
mod signals;
mod simulate;
mod r#try;

use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::gpu::{Backend, DeviceLimits, DeviceOptions, DeviceSet, GpuContext};

/// What every command returns: errors are printed once, by [`main`].
pub type CliResult = Result<(), Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(
    name = "lamino",
    version,
    about = "Laminography reconstruction on any GPU"
)]
pub struct Cli {
    /// The adapter(s) of the commands that use a GPU (see their `--device`); also accepted
    /// after the command, where its help shows it.
    #[arg(long)]
    device: Option<DeviceSet>,
    /// Accept a software adapter (see the commands' `--allow-software-gpu`); also accepted after
    /// the command.
    #[arg(long)]
    allow_software_gpu: bool,
    /// The device limits (see the commands' `--limits`); also accepted after the command.
    #[arg(long, value_enum)]
    limits: Option<LimitsArg>,
    /// The graphics API whose adapters are listed and used (see the commands' `--backend`);
    /// `lamino devices --backend gl` lists the GL adapters with the indices `--device` takes
    /// with it. Also accepted after the command.
    #[arg(long, value_enum)]
    backend: Option<BackendArg>,
    #[command(subcommand)]
    command: Command,
}

/// The device options of the commands that run on a GPU (not `score`, `simulate`, `devices`).
#[derive(Args, Clone)]
#[command(next_help_heading = "GPU options")]
pub struct GpuArgs {
    /// Adapter to run on: an index from `lamino devices`, or "best" (hardware GPUs first).
    /// `reconstruct` and `demo` also take several: a list ("0,2") or "all" (every hardware GPU);
    /// each device computes its share of every stage, with the same bits as one device.
    #[arg(long, global = true, default_value_t = DeviceSet::default())]
    device: DeviceSet,
    /// Accept a software adapter (lavapipe, WARP) when no hardware GPU exists. Also set by
    /// LAMINO_ALLOW_SOFTWARE_GPU=1. Meant for tests, CI and batch runs: it is slow.
    #[arg(long, global = true)]
    allow_software_gpu: bool,
    /// The limits to open the device with: "adapter" (everything it offers, the default) or
    /// "portable" (WebGPU's defaults: 8 storage buffers per stage, 128 MiB bindings, 16 KiB
    /// workgroup memory, 256 invocations; what any WebGPU GPU offers). Also set by
    /// LAMINO_LIMITS.
    #[arg(long, global = true, value_enum)]
    limits: Option<LimitsArg>,
    /// The graphics API to run through: "vulkan", "gl" (OpenGL 4.3 / GLES 3.1, through EGL on
    /// Linux), "metal" or "dx12"; only its adapters are listed, chosen from and indexed (as
    /// `lamino --backend B devices` lists them). Unset: every backend built in, or those
    /// wgpu's WGPU_BACKEND names.
    #[arg(long, global = true, value_enum)]
    backend: Option<BackendArg>,
}

/// `--backend`: the library's [`Backend`] by name.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    Vulkan,
    Gl,
    Metal,
    Dx12,
}

impl From<BackendArg> for Backend {
    fn from(a: BackendArg) -> Self {
        match a {
            BackendArg::Vulkan => Backend::Vulkan,
            BackendArg::Gl => Backend::Gl,
            BackendArg::Metal => Backend::Metal,
            BackendArg::Dx12 => Backend::Dx12,
        }
    }
}

/// `--limits`: the library's [`DeviceLimits`] by name.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LimitsArg {
    Adapter,
    Portable,
}

impl From<LimitsArg> for DeviceLimits {
    fn from(a: LimitsArg) -> Self {
        match a {
            LimitsArg::Adapter => DeviceLimits::Adapter,
            LimitsArg::Portable => DeviceLimits::Portable,
        }
    }
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
        #[command(flatten)]
        gpu: GpuArgs,
    },
    /// Print benchmark figures.
    Bench {
        #[command(subcommand)]
        what: bench::BenchWhat,
        #[command(flatten)]
        gpu: GpuArgs,
    },
    /// Reconstruct a volume with ADMM-TV. INPUT: a DXchange `.h5` scan (normalised with its
    /// flats and darks, -log), a multi-page TIFF of intensities with an angle list, or `.npy`
    /// line integrals (ntheta, deth, detw) with `--geometry`. Writes DIR/recon.tif, DIR/recon.h5
    /// (or the --format chosen, DIR/recon.zarr among them), DIR/report.json, DIR/preview_*.png
    /// and DIR/convergence.png.
    #[command(after_help = reconstruct::EXAMPLES)]
    Reconstruct {
        // Boxed: the largest arguments by far, and the enum is as large as its largest variant.
        #[command(flatten)]
        args: Box<reconstruct::ReconstructArgs>,
        #[command(flatten)]
        gpu: GpuArgs,
    },
    /// Compare a volume with the truth: prints {"rel_l2", "psnr" (null when identical), "ssim"}
    /// as JSON and writes a truth | reconstruction | difference panel of the central slices
    /// (`--panel`).
    Score(score::ScoreArgs),
    /// The built-in example: simulate a chip (a layered circuit slab) with Poisson noise,
    /// reconstruct it with the default parameters, write previews, the report, the score and a
    /// truth | reconstruction | difference panel (DIR/comparison.png).
    Demo {
        #[command(flatten)]
        args: demo::DemoArgs,
        #[command(flatten)]
        gpu: GpuArgs,
    },
    /// Check this device: GPU FFTs against an f64 CPU reference on fixed signals (1D smooth and
    /// prime lengths, 2D, 3D), with the errors against the accuracy bound.
    Selftest {
        #[command(flatten)]
        gpu: GpuArgs,
    },
    /// Simulate a scan of a preset phantom (exact analytic projections, optional Poisson noise)
    /// and write it as DXchange HDF5 with the ground truth in /truth/volume.
    Simulate(simulate::SimulateArgs),
    /// Find the rotation axis and the tilt of a scan: reconstruct a thin slab for every
    /// candidate (--rotation-axis-range A:B:STEP, --tilt-range A:B:STEP), write one preview per
    /// candidate and the sharpness scores, print the best. Takes the inputs of `reconstruct`.
    Try {
        #[command(flatten)]
        args: r#try::TryArgs,
        #[command(flatten)]
        gpu: GpuArgs,
    },
    /// BaSiC flat-field / dark-field estimation and correction.
    Flatfield {
        #[command(subcommand)]
        op: flatfield::FlatfieldOp,
        #[command(flatten)]
        gpu: GpuArgs,
    },
    /// Lists every option of every command whose value holds a number, one `COMMAND
    /// [SUBCOMMAND] --OPTION` a line: what the test of extreme values feeds, so an option added
    /// later is covered without a list to keep.
    #[command(hide = true)]
    NumericOptions,
}

impl Cli {
    /// The GPU options of the command, if it uses a GPU.
    fn command_gpu(&self) -> Option<&GpuArgs> {
        match &self.command {
            Command::Apply { gpu, .. }
            | Command::Bench { gpu, .. }
            | Command::Reconstruct { gpu, .. }
            | Command::Demo { gpu, .. }
            | Command::Selftest { gpu }
            | Command::Try { gpu, .. }
            | Command::Flatfield { gpu, .. } => Some(gpu),
            Command::Devices { .. }
            | Command::Score(_)
            | Command::Simulate(_)
            | Command::NumericOptions => None,
        }
    }

    /// Folds the command's GPU options into the ones given before the command (one place for
    /// the device methods to read); clap gives a `--device` after the command precedence.
    fn merge_gpu_args(&mut self) {
        let Some(gpu) = self.command_gpu().cloned() else {
            return;
        };
        self.allow_software_gpu |= gpu.allow_software_gpu;
        self.limits = gpu.limits.or(self.limits);
        self.backend = gpu.backend.or(self.backend);
        // The command's `--device` is its default unless given: a default never overrides a
        // device named before the command.
        if gpu.device != DeviceSet::default() {
            self.device = Some(gpu.device);
        }
    }

    /// The devices the options name (`best` unless `--device` was given).
    fn device_set(&self) -> DeviceSet {
        self.device.clone().unwrap_or_default()
    }

    /// The device limits `--limits` asks for (`None`: as LAMINO_LIMITS says).
    fn device_limits(&self) -> Option<DeviceLimits> {
        self.limits.map(DeviceLimits::from)
    }

    /// The backend `--backend` names (`None`: as WGPU_BACKEND says).
    fn backend(&self) -> Option<Backend> {
        self.backend.map(Backend::from)
    }

    /// The device options of the GPU flags, for commands that run on one device.
    fn device_options(&self) -> Result<DeviceOptions, String> {
        match self.device_set() {
            DeviceSet::One(selection) => Ok(DeviceOptions {
                limits: self.device_limits(),
                backend: self.backend(),
                ..DeviceOptions::new(selection, self.allow_software_gpu)
            }),
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

    /// Under MPI, the devices of the rank that is number `local` among its node's ranks (a
    /// software adapter accepted without the opt-in when they are only `planning`, see
    /// [`planning_contexts`](Self::planning_contexts)). Only the first rank `speaks` (notes
    /// the software adapter): the others run quietly, and a line of theirs could land inside one
    /// of the first rank's in mpirun's merged stderr.
    fn rank_contexts(
        &self,
        local: usize,
        speaks: bool,
        planning: bool,
    ) -> Result<Vec<GpuContext>, crate::GpuError> {
        let devices = self.device_set().open_for_rank(
            self.allow_software_gpu || planning,
            self.device_limits(),
            self.backend(),
            local,
        )?;
        if speaks {
            devices.iter().for_each(|d| self.note_adapter(d, planning));
        }
        Ok(devices)
    }

    /// The GPU flags as arguments before the command, for a lamino this one starts.
    fn global_args(&self) -> Vec<String> {
        let mut args = vec!["--device".to_string(), self.device_set().to_string()];
        if self.allow_software_gpu {
            args.push("--allow-software-gpu".into());
        }
        if let Some(limits) = self.limits.and_then(|l| l.to_possible_value()) {
            args.extend(["--limits".into(), limits.get_name().into()]);
        }
        if let Some(backend) = self.backend.and_then(|b| b.to_possible_value()) {
            args.extend(["--backend".into(), backend.get_name().into()]);
        }
        args
    }

    /// Every device the GPU options name (one unless `--device` lists several).
    fn contexts(&self) -> Result<Vec<GpuContext>, crate::GpuError> {
        let devices = self.device_set().open(
            self.allow_software_gpu,
            self.device_limits(),
            self.backend(),
        )?;
        devices.iter().for_each(note_software);
        Ok(devices)
    }

    /// The devices a plan is made for (`--dry-run`): as [`contexts`](Self::contexts), but a
    /// software adapter needs no opt-in, since a plan only reads the adapter's limits and runs
    /// nothing on it (hardware GPUs still come first); says which adapter the plan is for.
    fn planning_contexts(&self) -> Result<Vec<GpuContext>, crate::GpuError> {
        let devices = self
            .device_set()
            .open(true, self.device_limits(), self.backend())?;
        devices.iter().for_each(|d| self.note_adapter(d, true));
        Ok(devices)
    }

    /// Says so when `ctx` is a software adapter; one opened only for `planning` without the
    /// opt-in is named as the adapter the plan is for.
    fn note_adapter(&self, ctx: &GpuContext, planning: bool) {
        let info = ctx.info();
        let opted_in = self.allow_software_gpu || crate::gpu::software_opt_in_from_env();
        match (info.software, planning && !opted_in) {
            (true, true) => eprintln!(
                "note: the plan is for the software adapter {info} (a dry run does no GPU work; \
                 running on it needs --allow-software-gpu)"
            ),
            (true, false) => note_software(ctx),
            (false, _) => {}
        }
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
        Command::Devices { json } => devices::run(*json, cli.backend()),
        Command::Apply { op, .. } => apply::run(cli, op),
        Command::Bench { what, .. } => bench::run(cli, what),
        Command::Reconstruct { args, .. } => reconstruct::run(cli, args),
        Command::Score(args) => score::run(args),
        Command::Demo { args, .. } => demo::run(cli, args),
        Command::Selftest { .. } => selftest::run(cli),
        Command::Simulate(args) => simulate::run(args),
        Command::Try { args, .. } => r#try::run(cli, args),
        Command::Flatfield { op, .. } => flatfield::run(cli, op),
        Command::NumericOptions => {
            numeric_options(&Cli::command(), &mut Vec::new());
            Ok(())
        }
    }
}

/// Prints the options of `command` (reached by `path`) and of its subcommands whose values hold
/// numbers: every option that takes a value other than a path, a text or a choice from a list.
fn numeric_options(command: &clap::Command, path: &mut Vec<String>) {
    use std::any::TypeId;
    let texts = [
        TypeId::of::<String>(),
        TypeId::of::<std::path::PathBuf>(),
        TypeId::of::<std::ffi::OsString>(),
    ];
    for sub in command.get_subcommands().filter(|c| !c.is_hide_set()) {
        path.push(sub.get_name().to_string());
        numeric_options(sub, path);
        path.pop();
    }
    if command.has_subcommands() || path.is_empty() {
        return;
    }
    for arg in command.get_arguments() {
        let takes_number = arg.get_action().takes_values()
            && !arg.is_hide_set()
            && arg.get_possible_values().is_empty()
            && !texts.iter().any(|t| arg.get_value_parser().type_id() == *t);
        if let (true, Some(long)) = (takes_number, arg.get_long()) {
            println!("{} --{long}", path.join(" "));
        }
    }
}

/// Parses the command line, runs the command and prints its error, if any.
pub(crate) fn main() -> ExitCode {
    // First, while this is the only thread: the Vulkan loader reads it when a device is opened.
    #[cfg(unix)]
    crate::gpu::provide_runtime_dir();
    let command = Cli::command()
        .mut_subcommand("reconstruct", names::refuse_tomocupy_options)
        .mut_subcommand("try", names::refuse_tomocupy_options);
    let mut cli = Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit());
    cli.merge_gpu_args();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            // A run a signal stopped exits as if the signal had ended it (130, 143, ...).
            match e.downcast_ref::<signals::Interrupted>() {
                Some(stopped) => ExitCode::from(stopped.exit_status()),
                None => ExitCode::FAILURE,
            }
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
