//! `lamino demo`: the built-in example, end to end, with the score against the truth.

use std::path::PathBuf;

use clap::Args;

use lamino::gpu::GpuContext;
use lamino::io::{write_dxchange, OutputSet};
use lamino::memo::MemoOptions;
use lamino::params::AdmmParams;
use lamino::recon::input::projections_from_scan;
use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};

use super::reconstruct::{report_loaded, run_reconstruction, MemoryBudgets, RunOptions};
use super::{Cli, CliResult};

#[derive(Args)]
pub struct DemoArgs {
    /// Volume side (default 128 on a hardware GPU, 64 on a software adapter).
    #[arg(long)]
    size: Option<usize>,
    /// Output directory.
    #[arg(long, default_value = "lamino-demo")]
    out: PathBuf,
}

pub fn run(cli: &Cli, args: &DemoArgs) -> CliResult {
    let devices = cli.contexts()?;
    let mut set = OutputSet::begin(&args.out, "demo")?;
    let result = demo(&devices, args, &mut set);
    let (summary, _) = set.complete(result)?;
    println!("{summary}");
    Ok(())
}

/// The demo with its files staged in `set`; returns the summary to print once they are in place.
fn demo(
    devices: &[GpuContext],
    args: &DemoArgs,
    set: &mut OutputSet,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let ctx = &devices[0];
    // 128^3 on a GPU; a software adapter is one to two orders of magnitude slower, so the same
    // example at 64^3 keeps its run to minutes there. The parameters are the defaults either way.
    let n = args
        .size
        .unwrap_or(if ctx.info().software { 64 } else { 128 });
    let out = &args.out;
    let start = std::time::Instant::now();
    let simulated = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size: n,
        angles: n,
        tilt_deg: 30.0,
        photons: Some(1e5),
        seed: 0,
        rotation_axis: None,
    })?;
    let scan_path = out.join("scan.h5");
    write_dxchange(&set.stage("scan.h5")?, &simulated.scan)?;
    eprintln!(
        "simulated a {n}^3 chip, {n} angles, 30 deg tilt, 1e5 photons: {}",
        scan_path.display()
    );
    let scan = simulated.scan;
    let truth = scan
        .truth
        .clone()
        .ok_or("the simulated scan has no truth")?;
    let projections = report_loaded(projections_from_scan(&scan_path, scan, None)?, false);
    let options = RunOptions {
        memo: MemoOptions::default(),
        budgets: MemoryBudgets::default(),
        pad: false,
        checkpoint_every: None,
        resume: false,
        quiet: false,
        ranks: None,
        formats: lamino::recon::DEFAULT_FORMATS.to_vec(),
        provenance: Some(lamino::recon::Provenance::now(None)),
    };
    let result = run_reconstruction(
        devices,
        &projections,
        AdmmParams::default(),
        out,
        Some(set),
        &options,
        None,
    )?
    .into_reconstruction()?;
    let score = lamino::metrics::score(&result.volume, &truth.values, truth.shape);
    let panel = out.join("comparison.png");
    let rec = lamino::io::Stack {
        shape: truth.shape,
        values: result.volume.clone(),
    };
    lamino::plot::write_comparison_png(&set.stage("comparison.png")?, &truth, &rec)
        .map_err(|e| e.into_io(&panel))?;
    Ok(serde_json::json!({
            "size": n,
            "score": score,
            "reconstruction_s": result.setup_s + result.iterations_s,
            "total_s": start.elapsed().as_secs_f64(),
            "device": result.device,
            "out": out.display().to_string(),
            "comparison": panel.display().to_string(),
    }))
}
