//! `lamino demo`: the built-in example, end to end, with the score against the truth.

use std::path::PathBuf;

use clap::Args;

use crate::gpu::GpuContext;
use crate::io::{write_dxchange, OutputSet};
use crate::memo::MemoOptions;
use crate::params::AdmmParams;
use crate::recon::input::projections_from_scan;
use crate::recon::{Job, JobEvent, JobInput, Preparation};
use crate::simulate::{simulated_scan, PhantomKind, ScanSpec};

use super::reconstruct::{say_read, solving, MemoryBudgets, RunOptions};
use super::{Cli, CliResult};

/// The demo's volume side on a hardware GPU.
pub const HARDWARE_SIZE: usize = 128;
/// The demo's volume side on a software adapter, one to two orders of magnitude slower than a
/// GPU: the converged reconstruction then takes minutes on two shared cores (README.md).
pub const SOFTWARE_SIZE: usize = 32;
/// The most seconds the demo's defaults should take on a software adapter on two shared cores:
/// what `demo` says to expect and `bench demo` checks. Measured with `bench demo`: 344 s on two
/// cores shared with six compilers (docs/benchmarks.md, "The demo"); the bound leaves room for
/// a busier machine.
pub const SOFTWARE_BOUND_S: f64 = 600.0;
/// The demo scan's tilt from the tomography plane (degrees), a typical laminography angle.
const TILT_DEG: f64 = 30.0;
/// The demo scan's incident photons per pixel (Poisson noise).
const PHOTONS: f64 = 1e5;

#[derive(Args, Clone)]
pub struct DemoArgs {
    // The default in the help comes from the constants; `None` lets the adapter choose.
    #[arg(long, help = format!(
        "Volume side n: n^3 voxels, n angles, n x n detector (default {HARDWARE_SIZE} on a \
         hardware GPU, {SOFTWARE_SIZE} on a software adapter, where a converged run of \
         {HARDWARE_SIZE}^3 would take hours)"
    ))]
    size: Option<usize>,
    /// Output directory.
    #[arg(long, default_value = "lamino-demo")]
    out: PathBuf,
}

pub fn run(cli: &Cli, args: &DemoArgs) -> CliResult {
    let summary = run_demo(cli, args)?;
    println!("{summary}");
    Ok(())
}

/// The demo with `args` on the devices of `cli`, its files in place; returns its summary.
pub fn run_demo(
    cli: &Cli,
    args: &DemoArgs,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let devices = cli.contexts()?;
    let mut set = OutputSet::begin(&args.out, "demo")?;
    let result = demo(&devices, args, &mut set);
    let (summary, _) = set.complete(result)?;
    Ok(summary)
}

impl DemoArgs {
    /// The demo's defaults, writing to `out`.
    pub fn defaults(out: PathBuf) -> Self {
        Self { size: None, out }
    }
}

/// The demo with its files staged in `set`; returns the summary to print once they are in place.
fn demo(
    devices: &[GpuContext],
    args: &DemoArgs,
    set: &mut OutputSet,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let ctx = &devices[0];
    // The parameters are the defaults whatever the size: only the size follows the adapter.
    let software = ctx.info().software;
    let n = match (args.size, software) {
        (Some(n), _) => n,
        (None, true) => {
            eprintln!(
                "demo: {SOFTWARE_SIZE}^3 on the software adapter ({HARDWARE_SIZE}^3 on a hardware \
                 GPU; --size to choose), expected under {:.0} min on two cores",
                SOFTWARE_BOUND_S / 60.0
            );
            SOFTWARE_SIZE
        }
        (None, false) => HARDWARE_SIZE,
    };
    let out = &args.out;
    let start = std::time::Instant::now();
    let simulated = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size: n,
        angles: n,
        tilt_deg: TILT_DEG,
        photons: Some(PHOTONS),
        seed: 0,
        rotation_axis: None,
    })?;
    let scan_path = out.join("scan.h5");
    write_dxchange(&set.stage("scan.h5")?, &simulated.scan)?;
    eprintln!(
        "simulated a {n}^3 chip, {n} angles, {TILT_DEG} deg tilt, {PHOTONS:e} photons: {}",
        scan_path.display()
    );
    let scan = simulated.scan;
    let truth = scan
        .truth
        .clone()
        .ok_or("the simulated scan has no truth")?;
    let loaded = projections_from_scan(&scan_path, scan, None)?;
    let options = RunOptions {
        memo: MemoOptions::default(),
        normal_operator: crate::params::NormalOperator::default(),
        budgets: MemoryBudgets::default(),
        pad: false,
        checkpoint_every: None,
        resume: false,
        quiet: false,
        processes: crate::distributed::OneProcess::shared(),
        formats: crate::recon::DEFAULT_FORMATS.to_vec(),
        zarr: None,
        provenance: Some(crate::recon::Provenance::now(None)),
    };
    // The simulated scan as read, reconstructed as it is (no preparation).
    let job = Job {
        input: JobInput::Loaded { loaded, binning: 1 },
        preparation: Preparation::default(),
    };
    let (builder, run) = solving(devices, AdmmParams::default(), out, &options)?;
    let solved = builder
        .run_job(job, &mut |event| {
            if let JobEvent::Loaded(loaded) = &event {
                say_read(loaded, false);
            }
            run.say(&event, devices, &options)
        })
        .map_err(|e| run.job_error(e))?;
    let result = run
        .finish(solved, Some(set), &options)?
        .into_reconstruction()?;
    let score = crate::metrics::score(&result.volume, &truth.values, truth.shape);
    // A chip's layers vary along z, the part of the object laminography does not measure: the
    // relative L2 error alone mostly says how much of the chip lies there.
    let cone =
        crate::metrics::missing_cone_split(&result.volume, &truth.values, truth.shape, TILT_DEG);
    eprintln!(
        "rel. L2 {:.3} against the truth: {:.3} in the frequencies the scan measures, {:.3} in the \
         cone around the rotation axis that no {TILT_DEG}-degree scan measures (which holds {:.0} % \
         of the chip, by L2)",
        score.rel_l2,
        cone.rel_l2_measured,
        cone.rel_l2_missing,
        100.0 * cone.truth_in_cone
    );
    let panel = out.join("comparison.png");
    let rec = crate::io::Stack {
        shape: truth.shape,
        values: result.volume.clone(),
    };
    crate::plot::write_comparison_png(&set.stage("comparison.png")?, &truth, &rec)
        .map_err(|e| e.into_io(&panel))?;
    Ok(serde_json::json!({
            "size": n,
            "score": score,
            "missing_cone": cone,
            "reconstruction_s": result.setup_s + result.iterations_s,
            "total_s": start.elapsed().as_secs_f64(),
            "device": result.device,
            "software": software,
            "iterations": result.reports.len(),
            "out": out.display().to_string(),
            "comparison": panel.display().to_string(),
    }))
}
