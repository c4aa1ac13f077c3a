//! `lamino bench convergence`: the default stopping rule against a long run, on noisy simulated
//! scans; and the noisy scans and the stop-then-continue run the convergence tests share.

use std::time::Instant;

use serde::Serialize;

use super::{print_json, BenchError};
use crate::gpu::GpuContext;
use crate::params::{AdmmParams, Convergence};
use crate::simulate::PhantomKind;
use crate::solver::IterationReport;

/// The volumes of one long run at the iteration where a convergence test first passed and at
/// its end. A run that stops on the test makes the first iterates of the long run (same data,
/// same parameters but the stopping rule), so one run gives both.
pub struct ConvergedPrefix {
    /// Outer iterations after which the test first passed, with the volume there and the
    /// seconds the run had taken; `None` when it never passed.
    pub at_stop: Option<(usize, Vec<f32>, f64)>,
    /// The volume after all the run's iterations.
    pub at_end: Vec<f32>,
    /// The report of every iteration.
    pub reports: Vec<IterationReport>,
}

/// Runs exactly `iterations` outer iterations of `params` and records where its convergence
/// test (`params.convergence`, else the default test) first passed.
pub fn converge_then_continue(
    ctx: &GpuContext,
    g: &crate::operator::Geometry,
    data: &[f32],
    params: AdmmParams,
    iterations: usize,
) -> Result<ConvergedPrefix, crate::solver::SolverError> {
    use crate::operator::OperatorOptions;
    use crate::solver::AdmmSolver;
    let test = params.convergence.unwrap_or(Convergence::DEFAULT);
    let long = AdmmParams {
        outer_iterations: iterations,
        convergence: None,
        ..params
    };
    let start = Instant::now();
    let mut solver = AdmmSolver::new(ctx, g, data, long, &OperatorOptions::default())?;
    let mut at_stop = None;
    let mut reports = Vec::new();
    while solver.stop_reason().is_none() {
        let report = solver.step(ctx)?;
        if at_stop.is_none() && report.converged(&test) {
            let seconds = start.elapsed().as_secs_f64();
            at_stop = Some((report.iteration + 1, solver.volume(ctx)?, seconds));
        }
        reports.push(report);
    }
    Ok(ConvergedPrefix {
        at_stop,
        at_end: solver.volume(ctx)?,
        reports,
    })
}

/// Runs `params` until its stopping rule says so (at most `max_iterations`), timed from the
/// solver's setup; `at_stop` is the end when the test passed.
fn run_to_stop(
    ctx: &GpuContext,
    g: &crate::operator::Geometry,
    data: &[f32],
    params: AdmmParams,
    max_iterations: usize,
) -> Result<ConvergedPrefix, crate::solver::SolverError> {
    use crate::operator::OperatorOptions;
    use crate::solver::{AdmmSolver, StopReason};
    let params = AdmmParams {
        outer_iterations: max_iterations,
        ..params
    };
    let start = Instant::now();
    let mut solver = AdmmSolver::new(ctx, g, data, params, &OperatorOptions::default())?;
    let reports = solver.run(ctx, |_| {})?;
    let volume = solver.volume(ctx)?;
    let seconds = start.elapsed().as_secs_f64();
    let at_stop = (solver.stop_reason() == Some(StopReason::Converged))
        .then(|| (reports.len(), volume.clone(), seconds));
    Ok(ConvergedPrefix {
        at_stop,
        at_end: volume,
        reports,
    })
}

/// One solver's run to its stopping test, measured against the reference volume.
#[derive(Debug, Clone, Serialize)]
pub struct StoppedRun {
    /// Outer iterations until the test passed; `None` when it did not pass within the
    /// reference's iteration count.
    pub outer_iterations: Option<usize>,
    /// Inner (CG) iterations in all.
    pub inner_iterations: Option<usize>,
    /// Applications of A and of A* in all.
    pub applications: Option<(u64, u64)>,
    /// Wall time from the solver's setup to the stop, s.
    pub seconds: Option<f64>,
    /// Relative L2 distance of the stopped volume from the reference run's.
    pub to_reference: Option<f64>,
    /// Relative L2 distance of the stopped volume from the phantom.
    pub to_truth: Option<f64>,
}

impl StoppedRun {
    fn new(params: &AdmmParams, run: &ConvergedPrefix, reference: &[f32], truth: &[f32]) -> Self {
        use crate::metrics::rel_l2;
        let stop = run.at_stop.as_ref();
        let k = stop.map(|(k, _, _)| *k);
        let (forward, adjoint) = crate::plan::operator_applications(params);
        Self {
            outer_iterations: k,
            inner_iterations: k.map(|k| k * params.inner_iterations),
            applications: k.map(|k| (k as u64 * forward, k as u64 * adjoint)),
            seconds: stop.map(|(_, _, s)| *s),
            to_reference: stop.map(|(_, v, _)| rel_l2(v, reference)),
            to_truth: stop.map(|(_, v, _)| rel_l2(v, truth)),
        }
    }
}

/// One line of `lamino bench convergence --json`: the default solver and plain ADMM
/// ([`AdmmParams::plain`], the default before over-relaxation), each run to its stopping test,
/// against plain ADMM after `reference_iterations` outer iterations.
#[derive(Debug, Clone, Serialize)]
pub struct ConvergenceBenchRecord {
    pub phantom: String,
    pub size: usize,
    pub angles: usize,
    pub tilt_deg: f64,
    pub photons: f64,
    /// Outer iterations the default run makes (where its test first passed); `None` when it did
    /// not pass within `reference_iterations`.
    pub default_iterations: Option<usize>,
    pub reference_iterations: usize,
    /// Relative L2 distance of the default run's volume from the reference run's.
    pub default_to_reference: Option<f64>,
    /// The default solver's run in full.
    pub default: StoppedRun,
    /// Plain ADMM's run.
    pub plain: StoppedRun,
    /// Relative L2 distance of the reference from the phantom.
    pub reference_to_truth: f64,
    /// Wall time of every run, s.
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
    #[error("writing the convergence plot {path}: {source}")]
    Plot {
        path: std::path::PathBuf,
        /// Boxed: the error of every bench driver carries this enum.
        source: Box<crate::plot::PlotError>,
    },
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

/// Simulates a noisy scan of `phantom` (seed 0), runs plain ADMM for `reference_iterations`
/// outer iterations (noting where its test first passed: the plain run) and the default solver
/// to its stop (at most as many), and measures both stopping points against the plain long run. With `plots`, writes
/// the convergence history of both runs there (`convergence_{phantom}_{size}_{default,plain}.png`).
pub fn bench_convergence(
    ctx: &GpuContext,
    phantom: PhantomKind,
    size: usize,
    (angles, tilt_deg, photons): (usize, f64, f64),
    reference_iterations: usize,
    plots: Option<&std::path::Path>,
) -> Result<ConvergenceBenchRecord, ConvergenceBenchError> {
    use crate::metrics::rel_l2;
    use crate::simulate::rasterize;
    let p = noisy_projections(phantom, size, (angles, tilt_deg, photons))?;
    let truth = rasterize(&phantom.build(size), p.geometry());
    let start = Instant::now();
    let data = p.operator_data();
    let (plain, default) = (AdmmParams::plain(), AdmmParams::default());
    let reference = converge_then_continue(ctx, p.geometry(), &data, plain, reference_iterations)?;
    let run = run_to_stop(ctx, p.geometry(), &data, default, reference_iterations)?;
    let seconds = start.elapsed().as_secs_f64();
    if let Some(dir) = plots {
        for (name, r, params) in [("default", &run, default), ("plain", &reference, plain)] {
            let k = r.at_stop.as_ref().map_or(r.reports.len(), |(k, _, _)| *k);
            let path = dir.join(format!("convergence_{phantom}_{size}_{name}.png"));
            crate::plot::write_convergence_png(&path, &r.reports[..k], params.convergence.as_ref())
                .map_err(|source| ConvergenceBenchError::Plot {
                    path,
                    source: Box::new(source),
                })?;
        }
    }
    let default = StoppedRun::new(&default, &run, &reference.at_end, &truth);
    Ok(ConvergenceBenchRecord {
        phantom: phantom.to_string(),
        size,
        angles,
        tilt_deg,
        photons,
        default_iterations: default.outer_iterations,
        reference_iterations,
        default_to_reference: default.to_reference,
        plain: StoppedRun::new(&plain, &reference, &reference.at_end, &truth),
        default,
        reference_to_truth: rel_l2(&reference.at_end, &truth),
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
    plots: Option<&std::path::Path>,
) -> Result<(), BenchError> {
    let percent = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{:.3} %", 100.0 * x));
    let line = |name: &str, r: &StoppedRun| {
        match (r.outer_iterations, r.applications, r.seconds) {
        (Some(k), Some((fwd, adj)), Some(s)) => format!(
            "  {name}: stops after {k} iterations ({} inner), {fwd} A + {adj} A*, {s:.1} s, {} from the reference, {} from the phantom",
            r.inner_iterations.unwrap_or(0),
            percent(r.to_reference),
            percent(r.to_truth),
        ),
        _ => format!("  {name}: the test never passed within the reference's iterations"),
    }
    };
    for &phantom in phantoms {
        let r = bench_convergence(
            ctx,
            phantom,
            size,
            (angles, tilt_deg, photons),
            reference_iterations,
            plots,
        )?;
        if json {
            print_json(&r)?;
        } else {
            println!(
                "{} n={} angles={} tilt={} deg photons={:e}; reference: plain ADMM, {} iterations, {} from the phantom ({:.0} s in all)",
                r.phantom,
                r.size,
                r.angles,
                r.tilt_deg,
                r.photons,
                r.reference_iterations,
                percent(Some(r.reference_to_truth)),
                r.seconds
            );
            println!("{}", line("default", &r.default));
            println!("{}", line("plain  ", &r.plain));
        }
    }
    Ok(())
}
