//! How a desktop application embeds lamino: pick a GPU by index (from a device menu), give the
//! reconstruction memory budgets (what the application leaves it on the device and in RAM, and
//! a scratch directory for the rest), run it on a worker thread, show progress, and cancel from
//! the UI thread.
//!
//! ```sh
//! cargo run --release --example embed                  # hardware GPU
//! LAMINO_ALLOW_SOFTWARE_GPU=1 cargo run --example embed # software adapter (slow)
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use lamino::gpu::{list_adapters, DeviceOptions, DeviceSelection, GpuContext};
use lamino::operator::{Apply, Geometry, LaminoOperator, OperatorOptions};
use lamino::params::AdmmParams;
use lamino::recon::Reconstructor;
use lamino::scan::Projections;
use num_complex::Complex32;

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
    for a in list_adapters() {
        println!("device {a}{}", if a.software { " (software)" } else { "" });
    }
    let options = DeviceOptions::new(DeviceSelection::Best, false);
    let ctx = GpuContext::new(&options)?;

    // Stand-in for projections the application loaded: a box seen at 32 angles with a 30 degree
    // tilt (a real application reads them from its own files).
    let n = 32;
    let geometry = Geometry::cube(n, 32, std::f64::consts::FRAC_PI_2 + 30f64.to_radians());
    let mut volume = vec![Complex32::new(0.0, 0.0); geometry.volume_len()];
    for z in 14..18 {
        for y in 8..24 {
            for x in 8..24 {
                volume[(z * n + y) * n + x] = Complex32::new(1.0, 0.0);
            }
        }
    }
    let op = LaminoOperator::new(&ctx, &geometry, &OperatorOptions::default())?;
    let data = op.apply_host(&ctx, Apply::Forward, &[n, n, n], &volume)?;
    let scale = ((n * geometry.ntheta()) as f32).sqrt();
    let projections = Projections::new(geometry, data.iter().map(|c| c.re * scale).collect())?;
    drop(op);

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
                    lamino::io::write_volume(&path, &solved).map_err(|e| e.to_string())?;
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
