//! How a desktop application embeds lamino through the crate's front (`lamino::{...}`): pick a
//! GPU by index (from a device menu), turn the detector's intensities, flats and darks into
//! projections, give the reconstruction memory budgets (what the application leaves it on the
//! device and in RAM, and a scratch directory for the rest), run it on a worker thread, show
//! progress, and cancel from the UI thread.
//!
//! ```sh
//! cargo run --release --example embed                  # hardware GPU
//! LAMINO_ALLOW_SOFTWARE_GPU=1 cargo run --example embed # software adapter (slow)
//! ```

use lamino::Tilt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};
use lamino::{
    list_adapters, write_volume, AdmmParams, DeviceOptions, DeviceSelection, Geometry, GpuContext,
    Projections, Reconstructor,
};

enum Event {
    Progress {
        iteration: usize,
        total: usize,
        data_term: f64,
    },
    Done(Result<usize, String>),
}

/// The application keeps most of the GPU for its own rendering: 64 MiB for lamino, 256 MiB of
/// RAM, and the system's temporary directory for what does not fit. A volume too large for the
/// device streams through it (the same bits as in-core, more transfers); the plan says so.
fn with_budgets(r: Reconstructor<'_>) -> Reconstructor<'_> {
    r.device_memory_budget(64 << 20)
        .host_memory_budget(256 << 20)
        .scratch_dir(std::env::temp_dir())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A device menu would list these; the user's choice becomes an index.
    for a in list_adapters(None) {
        println!("device {a}{}", if a.software { " (software)" } else { "" });
    }
    let options = DeviceOptions::new(DeviceSelection::Best, false);
    let ctx = GpuContext::new(&options)?;

    // Stand-in for what the application's detector recorded: the counts of a chip seen at 32
    // angles with a 30 degree tilt (Poisson noise, 1e5 photons), with its white and dark
    // frames. A real application fills the three stacks from its own files or camera.
    let frames = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size: 32,
        angles: 32,
        tilt_deg: 30.0,
        photons: Some(1e5),
        seed: 1,
        rotation_axis: None,
    })?
    .scan;
    let [_, deth, detw] = frames.data.shape;
    let geometry =
        Geometry::for_detector(deth, detw, frames.theta.clone(), Tilt::from_degrees(30.0));
    // Flat/dark normalisation and -log, as tomopy's normalize + minus_log (and lamino's own
    // file readers) do it; pixels without transmission are counted and a scan with too many
    // is refused.
    let (projections, clamped) =
        Projections::from_intensities(geometry, &frames.data, &frames.flats, &frames.darks)?;
    println!(
        "projections {} x {deth} x {detw}; {} of {} pixels clamped",
        projections.geometry().ntheta(),
        clamped.clamped,
        clamped.pixels
    );

    let plan = with_budgets(Reconstructor::new(&ctx)).plan(projections.geometry())?;
    println!("{plan}");

    let cancel = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let worker_cancel = cancel.clone();
        let ctx = &ctx;
        let projections = &projections;
        s.spawn(move || {
            let progress_tx = tx.clone();
            let result = with_budgets(Reconstructor::new(ctx))
                .params(AdmmParams::exactly(10))
                .cancel_flag(worker_cancel)
                .on_progress(move |p| {
                    let _ = progress_tx.send(Event::Progress {
                        iteration: p.iteration,
                        total: p.total,
                        data_term: p.report.data_term,
                    });
                })
                // `solve` leaves the volume where the solver keeps it; the application writes it
                // a slab of z slices at a time (it never needs the whole volume in RAM).
                .solve(projections)
                .map_err(|e| e.to_string())
                .and_then(|solved| {
                    let path = std::env::temp_dir().join("lamino-embed.tif");
                    write_volume(&path, &solved).map_err(|e| e.to_string())?;
                    println!("wrote {}", path.display());
                    Ok(solved.report.reports.len())
                });
            let _ = tx.send(Event::Done(result));
        });
        // The UI thread: show progress; a "Cancel" button would call cancel.store(true, ..).
        for event in rx {
            match event {
                Event::Progress {
                    iteration,
                    total,
                    data_term,
                } => {
                    println!(
                        "iteration {}/{total}: |Lu - d|^2 = {data_term:.4e}",
                        iteration + 1
                    );
                    if iteration == 7 {
                        cancel.store(true, Ordering::SeqCst);
                        println!("(cancel pressed: the run stops after the current iteration)");
                    }
                }
                Event::Done(result) => {
                    match result {
                        Ok(done) => println!("finished after {done} outer iterations"),
                        Err(e) => println!("failed: {e}"),
                    }
                    break;
                }
            }
        }
    });
    Ok(())
}
