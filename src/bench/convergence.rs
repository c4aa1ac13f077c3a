//! `lamino bench convergence`: the default stopping rule against a long run, on noisy simulated
//! scans; and the noisy scans and the stop-then-continue run the convergence tests share.

use std::time::Instant;

use serde::Serialize;

use super::{print_json, BenchError};
use crate::gpu::GpuContext;
use crate::simulate::PhantomKind;

/// The volumes of one long run at the iteration where the default convergence test first passed
/// and at its end. The default run's iterates are the first iterates of the long run (same data,
/// same parameters but the stopping rule), so one run gives both.
pub struct ConvergedPrefix {
    /// Outer iterations after which the default test first passed, with the volume there;
    /// `None` when it never passed.
    pub at_stop: Option<(usize, Vec<f32>)>,
    /// The volume after all the run's iterations.
    pub at_end: Vec<f32>,
}

/// Runs exactly `iterations` outer iterations of the default solver and records where the
/// default convergence test first passed.
pub fn converge_then_continue(
    ctx: &GpuContext,
    g: &crate::operator::Geometry,
    data: &[f32],
    iterations: usize,
) -> Result<ConvergedPrefix, crate::solver::SolverError> {
    use crate::operator::OperatorOptions;
    use crate::params::AdmmParams;
    use crate::params::Convergence;
    use crate::solver::AdmmSolver;
    let params = AdmmParams::exactly(iterations);
    let mut solver = AdmmSolver::new(ctx, g, data, params, &OperatorOptions::default())?;
    let mut at_stop = None;
    while solver.stop_reason().is_none() {
        let report = solver.step(ctx)?;
        if at_stop.is_none() && report.converged(&Convergence::DEFAULT) {
            at_stop = Some((report.iteration + 1, solver.volume(ctx)?));
        }
    }
    Ok(ConvergedPrefix {
        at_stop,
        at_end: solver.volume(ctx)?,
    })
}

/// One line of `lamino bench convergence --json`.
#[derive(Debug, Clone, Serialize)]
pub struct ConvergenceBenchRecord {
    pub phantom: String,
    pub size: usize,
    pub angles: usize,
    pub tilt_deg: f64,
    pub photons: f64,
    /// Outer iterations the default run makes (where the default test first passed); `None`
    /// when it did not pass within `reference_iterations`.
    pub default_iterations: Option<usize>,
    pub reference_iterations: usize,
    /// Relative L2 distance of the default run's volume from the reference run's.
    pub default_to_reference: Option<f64>,
    /// Relative L2 distances from the phantom.
    pub default_to_truth: Option<f64>,
    pub reference_to_truth: f64,
    /// Wall time of the reference run (which contains the default run), s.
    pub seconds: f64,
    pub device: String,
}

/// Why `lamino bench convergence` could not measure.
#[derive(Debug, thiserror::Error)]
pub enum ConvergenceBenchError {
    #[error(transparent)]
    Simulate(#[from] crate::simulate::SimulateError),
    #[error(transparent)]
    Input(#[from] crate::recon::input::InputError),
    #[error(transparent)]
    Solver(#[from] crate::solver::SolverError),
}

/// The line integrals of a noisy simulated scan of `phantom` (Poisson noise, seed 0), as a
/// reconstruction reads them: the scans the convergence defaults are measured and tested on.
pub fn noisy_projections(
    phantom: PhantomKind,
    size: usize,
    (angles, tilt_deg, photons): (usize, f64, f64),
) -> Result<crate::scan::Projections, ConvergenceBenchError> {
    use crate::recon::input::projections_from_scan;
    use crate::simulate::{simulated_scan, ScanSpec};
    let sim = simulated_scan(&ScanSpec {
        phantom,
        size,
        angles,
        tilt_deg,
        photons: Some(photons),
        seed: 0,
        rotation_axis: None,
    })?;
    Ok(projections_from_scan(std::path::Path::new("simulated"), sim.scan, None)?.projections)
}

/// Simulates a noisy scan of `phantom` (seed 0) and measures how far the default stopping rule
/// stops from a run of `reference_iterations` outer iterations.
pub fn bench_convergence(
    ctx: &GpuContext,
    phantom: PhantomKind,
    size: usize,
    (angles, tilt_deg, photons): (usize, f64, f64),
    reference_iterations: usize,
) -> Result<ConvergenceBenchRecord, ConvergenceBenchError> {
    use crate::metrics::rel_l2;
    use crate::simulate::rasterize;
    let p = noisy_projections(phantom, size, (angles, tilt_deg, photons))?;
    let truth = rasterize(&phantom.build(size), p.geometry());
    let start = Instant::now();
    let run = converge_then_continue(ctx, p.geometry(), &p.operator_data(), reference_iterations)?;
    let seconds = start.elapsed().as_secs_f64();
    let at_stop = run.at_stop.as_ref();
    Ok(ConvergenceBenchRecord {
        phantom: phantom.to_string(),
        size,
        angles,
        tilt_deg,
        photons,
        default_iterations: at_stop.map(|(k, _)| *k),
        reference_iterations,
        default_to_reference: at_stop.map(|(_, v)| rel_l2(v, &run.at_end)),
        default_to_truth: at_stop.map(|(_, v)| rel_l2(v, &truth)),
        reference_to_truth: rel_l2(&run.at_end, &truth),
        seconds,
        device: ctx.info().name.clone(),
    })
}

/// Prints [`bench_convergence`] for each of `phantoms`.
pub fn print(
    ctx: &GpuContext,
    json: bool,
    (size, angles, tilt_deg, photons): (usize, usize, f64, f64),
    phantoms: &[PhantomKind],
    reference_iterations: usize,
) -> Result<(), BenchError> {
    let percent = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{:.3} %", 100.0 * x));
    for &phantom in phantoms {
        let r = bench_convergence(
            ctx,
            phantom,
            size,
            (angles, tilt_deg, photons),
            reference_iterations,
        )?;
        if json {
            print_json(&r)?;
        } else {
            println!(
                "{} n={} angles={} tilt={} deg photons={:e}: default stops after {} iterations, {} from the {}-iteration volume; from the phantom: default {}, {} iterations {} ({:.0} s)",
                r.phantom,
                r.size,
                r.angles,
                r.tilt_deg,
                r.photons,
                r.default_iterations
                    .map_or("(never within the run)".to_string(), |k| k.to_string()),
                percent(r.default_to_reference),
                r.reference_iterations,
                percent(r.default_to_truth),
                r.reference_iterations,
                percent(Some(r.reference_to_truth)),
                r.seconds
            );
        }
    }
    Ok(())
}
