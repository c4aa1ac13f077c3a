//! `lamino bench convergence`: the default solver and plain ADMM against a long run on noisy
//! simulated scans, where each stopping rule stops and where each run first comes within 0.5 %
//! of the long run (time to solution); and the noisy scans and the stop-then-continue run the
//! convergence tests share.

use std::time::Instant;

use serde::Serialize;

use super::{print_json, BenchError};
use crate::gpu::GpuContext;
use crate::params::{AdmmParams, Convergence, NormalOperator};
use crate::simulate::PhantomKind;
use crate::solver::{outer_loop, AdmmSolver, IterationReport};

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
    g: &crate::geometry::Geometry,
    data: &[f32],
    params: AdmmParams,
    iterations: usize,
) -> Result<ConvergedPrefix, crate::solver::SolverError> {
    use crate::operator::OperatorOptions;
    let test = params.convergence.unwrap_or(Convergence::DEFAULT);
    let long = AdmmParams {
        outer_iterations: iterations,
        convergence: None,
        ..params
    };
    let start = Instant::now();
    let mut solver = AdmmSolver::new(ctx, g, data, long, &OperatorOptions::default())?;
    let mut at_stop = None;
    let after = |solver: &mut AdmmSolver, report: &IterationReport| {
        if at_stop.is_none() && report.converged(&test) {
            let seconds = start.elapsed().as_secs_f64();
            at_stop = Some((report.iteration + 1, solver.volume(ctx)?, seconds));
        }
        Ok(true)
    };
    let step = |s: &mut AdmmSolver| s.step(ctx);
    let (reports, _) = outer_loop(&mut solver, AdmmSolver::stop_reason, step, after)?;
    Ok(ConvergedPrefix {
        at_stop,
        at_end: solver.volume(ctx)?,
        reports,
    })
}

/// The distance from the reference within which a run counts as having reached it: the goal of
/// issue 31 ("the same converged volume": within 0.5 % rel. L2 of the 300-iteration result).
pub const REACHED: f64 = 0.005;

/// A run's history, one entry per outer iteration, as [`track`] records it.
struct Tracked {
    reports: Vec<IterationReport>,
    /// Seconds from the solver's setup to the end of each outer iteration, without the volume
    /// readbacks the tracking adds.
    seconds: Vec<f64>,
    /// Rel. L2 distance of each iterate from the reference (empty until it is known).
    distances: Vec<f64>,
    /// Every iterate, when the reference is the run's own end (the plain run).
    volumes: Vec<Vec<f32>>,
    /// Outer iterations after which the stopping test first passed, and the volume there.
    at_stop: Option<(usize, Vec<f32>)>,
    at_end: Vec<f32>,
}

/// Runs `params` for at most `iterations` outer iterations, reading the volume back after each:
/// against `reference` when given (and then only until the stopping test has passed and the run
/// has come within [`REACHED`] of it), else keeping every iterate in host memory (4 n^3 bytes
/// each: 300 MB for 300 iterations at 64^3) so that the distances can be measured once the run's
/// own end is known.
fn track(
    ctx: &GpuContext,
    g: &crate::geometry::Geometry,
    data: &[f32],
    params: AdmmParams,
    iterations: usize,
    reference: Option<&[f32]>,
    normal: NormalOperator,
) -> Result<Tracked, crate::solver::SolverError> {
    use crate::metrics::rel_l2;
    use crate::operator::OperatorOptions;
    let test = params.convergence.unwrap_or(Convergence::DEFAULT);
    let long = AdmmParams {
        outer_iterations: iterations,
        convergence: None,
        ..params
    };
    let start = Instant::now();
    let mut readback = std::time::Duration::ZERO;
    let mut solver = AdmmSolver::new(ctx, g, data, long, &OperatorOptions::default())?;
    solver.set_normal_operator(ctx, normal, false)?;
    let mut t = Tracked {
        reports: Vec::new(),
        seconds: Vec::new(),
        distances: Vec::new(),
        volumes: Vec::new(),
        at_stop: None,
        at_end: Vec::new(),
    };
    let after = |solver: &mut AdmmSolver, report: &IterationReport| {
        t.seconds.push((start.elapsed() - readback).as_secs_f64());
        let read = Instant::now();
        let volume = solver.volume(ctx)?;
        readback += read.elapsed();
        if t.at_stop.is_none() && report.converged(&test) {
            t.at_stop = Some((report.iteration + 1, volume.clone()));
        }
        Ok(match reference {
            Some(reference) => {
                t.distances.push(rel_l2(&volume, reference));
                t.at_end = volume;
                // Until the test has passed and the run has come within REACHED.
                !(t.at_stop.is_some() && t.distances.iter().any(|&d| d <= REACHED))
            }
            None => {
                t.at_end = volume.clone();
                t.volumes.push(volume);
                true
            }
        })
    };
    let step = |s: &mut AdmmSolver| s.step(ctx);
    (t.reports, _) = outer_loop(&mut solver, AdmmSolver::stop_reason, step, after)?;
    if reference.is_none() {
        t.distances = t.volumes.iter().map(|v| rel_l2(v, &t.at_end)).collect();
        t.volumes = Vec::new();
    }
    Ok(t)
}

/// Where a run first came within [`REACHED`] of the reference.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Reached {
    pub outer_iterations: usize,
    pub inner_iterations: usize,
    /// Applications of A and of A* until then.
    pub applications: (u64, u64),
    /// Wall time from the solver's setup, s.
    pub seconds: f64,
    /// The distance there (at most [`REACHED`]).
    pub to_reference: f64,
}

impl Reached {
    /// The first outer iteration of a history (`distances[k]`, `seconds[k]` after iteration
    /// `k + 1`) within `tolerance` of the reference, costed with `params`' applications per
    /// outer iteration on an operator `width` voxels wide; `None` when no iterate came that
    /// close.
    pub fn first(
        params: &AdmmParams,
        width: usize,
        distances: &[f64],
        seconds: &[f64],
        tolerance: f64,
    ) -> Option<Self> {
        let i = distances.iter().position(|&d| d <= tolerance)?;
        let k = i + 1;
        Some(Self {
            outer_iterations: k,
            inner_iterations: k * params.inner_steps(width),
            applications: crate::plan::operator_applications_in(params, width, k),
            seconds: seconds[i],
            to_reference: distances[i],
        })
    }

    /// Applications of A and A* together.
    pub fn total_applications(&self) -> u64 {
        self.applications.0 + self.applications.1
    }
}

/// One solver's run against the reference volume: where its stopping test passed, and where it
/// first came within [`REACHED`] of the reference (the fair measure of time to solution: a rule
/// that stops late or early does not change it).
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
    /// Where the run first came within [`REACHED`] of the reference; `None` when it did not
    /// within the reference's iteration count.
    pub reached: Option<Reached>,
}

impl StoppedRun {
    fn new(
        (params, width): (&AdmmParams, usize),
        run: &Tracked,
        reference: &[f32],
        truth: &[f32],
    ) -> Self {
        use crate::metrics::rel_l2;
        let stop = run.at_stop.as_ref();
        let k = stop.map(|(k, _)| *k);
        Self {
            outer_iterations: k,
            inner_iterations: k.map(|k| k * params.inner_steps(width)),
            applications: k.map(|k| crate::plan::operator_applications_in(params, width, k)),
            seconds: k.map(|k| run.seconds[k - 1]),
            to_reference: stop.map(|(_, v)| rel_l2(v, reference)),
            to_truth: stop.map(|(_, v)| rel_l2(v, truth)),
            reached: Reached::first(params, width, &run.distances, &run.seconds, REACHED),
        }
    }
}

/// One line of `lamino bench convergence --json`: the default solver and plain ADMM
/// ([`AdmmParams::plain`], the default before over-relaxation), each run to its stopping test
/// and until it came within [`REACHED`] of plain ADMM after `reference_iterations` outer
/// iterations.
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
    /// Plain ADMM's run (the reference run's first iterations).
    pub plain: StoppedRun,
    /// The distance within which a run counts as having reached the reference ([`REACHED`]).
    pub reached_within: f64,
    /// Default over plain: operator applications until each first came within `reached_within`
    /// of the reference (the goal of issue 31: at most 0.5).
    pub reached_applications_ratio: Option<f64>,
    /// Default over plain: wall time until then.
    pub reached_seconds_ratio: Option<f64>,
    /// The default with the Toeplitz inner loop (`--normal-operator toeplitz`) against the
    /// default with gridding; `None` where it does not run on this device.
    pub toeplitz: Option<ToeplitzRun>,
    /// Relative L2 distance of the reference from the phantom.
    pub reference_to_truth: f64,
    /// Wall time of every run, s.
    pub seconds: f64,
    pub device: String,
}

/// The default solver with the Toeplitz inner loop against the same with gridding (the
/// default's own run).
#[derive(Debug, Clone, Serialize)]
pub struct ToeplitzRun {
    /// Outer iterations until its test passed (`None`: not within the reference's count).
    pub outer_iterations: Option<usize>,
    /// Wall time from the solver's setup (the kernel's computation included) to the stop, s.
    pub seconds: Option<f64>,
    /// Its seconds over the gridding run's, each to its own stop.
    pub seconds_ratio: Option<f64>,
    /// Wall time until within [`REACHED`] of the reference, over the gridding run's.
    pub reached_seconds_ratio: Option<f64>,
    /// Relative L2 distance of its stopped volume from the gridding run's.
    pub to_gridding: Option<f64>,
}

impl ToeplitzRun {
    fn new(toeplitz: &Tracked, gridding: &Tracked, width: usize) -> Self {
        fn stop(t: &Tracked) -> Option<(usize, &Vec<f32>)> {
            t.at_stop.as_ref().map(|(k, v)| (*k, v))
        }
        let seconds = |t: &Tracked| stop(t).map(|(k, _)| t.seconds[k - 1]);
        let reached = |t: &Tracked| {
            let d = AdmmParams::default();
            Reached::first(&d, width, &t.distances, &t.seconds, REACHED).map(|r| r.seconds)
        };
        let ratio = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
        Self {
            outer_iterations: stop(toeplitz).map(|(k, _)| k),
            seconds: seconds(toeplitz),
            seconds_ratio: ratio(seconds(toeplitz), seconds(gridding)),
            reached_seconds_ratio: ratio(reached(toeplitz), reached(gridding)),
            to_gridding: stop(toeplitz)
                .zip(stop(gridding))
                .map(|((_, a), (_, b))| crate::metrics::rel_l2(a, b)),
        }
    }
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
/// outer iterations (the reference, computed once; its first iterates are the plain run) and the
/// default solver until its test has passed and it has come within [`REACHED`] of the reference
/// (at most as many iterations), and measures both against the reference. With `plots`, writes
/// the convergence history of both runs up to their stop there
/// (`convergence_{phantom}_{size}_{default,plain}.png`).
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
    let gridding = NormalOperator::Gridding;
    let reference = track(
        ctx,
        p.geometry(),
        &data,
        plain,
        reference_iterations,
        None,
        gridding,
    )?;
    let reference_volume = &reference.at_end;
    let tracked = |normal| {
        track(
            ctx,
            p.geometry(),
            &data,
            default,
            reference_iterations,
            Some(reference_volume),
            normal,
        )
    };
    let run = tracked(gridding)?;
    // The default with the Toeplitz inner loop, where it runs on this device.
    let toeplitz = match tracked(NormalOperator::Toeplitz) {
        Ok(t) => Some(t),
        Err(crate::solver::SolverError::ToeplitzUnavailable { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let seconds = start.elapsed().as_secs_f64();
    if let Some(dir) = plots {
        for (name, r, params) in [("default", &run, default), ("plain", &reference, plain)] {
            let k = r.at_stop.as_ref().map_or(r.reports.len(), |(k, _)| *k);
            let path = dir.join(format!("convergence_{phantom}_{size}_{name}.png"));
            crate::plot::write_convergence_png(&path, &r.reports[..k], params.convergence.as_ref())
                .map_err(|source| ConvergenceBenchError::Plot {
                    path,
                    source: Box::new(source),
                })?;
        }
    }
    let width = p.geometry().n2;
    let toeplitz = toeplitz.map(|t| ToeplitzRun::new(&t, &run, width));
    let default = StoppedRun::new((&default, width), &run, reference_volume, &truth);
    let plain = StoppedRun::new((&plain, width), &reference, reference_volume, &truth);
    let ratio = |of: fn(&Reached) -> f64| match (&default.reached, &plain.reached) {
        (Some(d), Some(p)) => Some(of(d) / of(p)),
        _ => None,
    };
    Ok(ConvergenceBenchRecord {
        phantom: phantom.to_string(),
        size,
        angles,
        tilt_deg,
        photons,
        default_iterations: default.outer_iterations,
        reference_iterations,
        default_to_reference: default.to_reference,
        reached_within: REACHED,
        reached_applications_ratio: ratio(|r| r.total_applications() as f64),
        reached_seconds_ratio: ratio(|r| r.seconds),
        plain,
        default,
        toeplitz,
        reference_to_truth: rel_l2(reference_volume, &truth),
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
    let reached = |name: &str, r: &StoppedRun, within: f64| {
        match &r.reached {
        Some(c) => format!(
            "  {name}: within {} of the reference after {} iterations ({} inner), {} A + {} A*, {:.1} s",
            percent(Some(within)),
            c.outer_iterations,
            c.inner_iterations,
            c.applications.0,
            c.applications.1,
            c.seconds,
        ),
        None => format!(
            "  {name}: never within {} of the reference",
            percent(Some(within))
        ),
    }
    };
    let ratio = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x:.2}x"));
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
            println!("{}", reached("default", &r.default, r.reached_within));
            println!("{}", reached("plain  ", &r.plain, r.reached_within));
            println!(
                "  default / plain until within {}: {} the applications, {} the time",
                percent(Some(r.reached_within)),
                ratio(r.reached_applications_ratio),
                ratio(r.reached_seconds_ratio),
            );
            match &r.toeplitz {
                Some(t) => println!(
                    "  default, Toeplitz inner loop: stops after {} iterations, {} s ({} the gridding run's time to its stop, {} its time to within {}), {} from its volume",
                    t.outer_iterations.map_or("n/a".into(), |k| k.to_string()),
                    t.seconds.map_or("n/a".into(), |s| format!("{s:.1}")),
                    ratio(t.seconds_ratio),
                    ratio(t.reached_seconds_ratio),
                    percent(Some(r.reached_within)),
                    percent(t.to_gridding),
                ),
                None => println!("  default, Toeplitz inner loop: does not run on this device"),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_iterate_within_the_tolerance_is_costed_with_the_applications_before_it() {
        // Plain ADMM: 4 CG steps, so 4 A and 5 A* per outer iteration.
        let plain = AdmmParams::plain();
        let distances = [0.3, 0.02, 0.0051, 0.005, 0.007, 0.001];
        let seconds = [1.0, 2.0, 3.0, 4.5, 6.0, 7.0];
        let r = Reached::first(&plain, 32, &distances, &seconds, REACHED).unwrap();
        assert_eq!((r.outer_iterations, r.inner_iterations), (4, 16));
        assert_eq!((r.applications, r.total_applications()), ((16, 20), 36));
        assert_eq!((r.seconds, r.to_reference), (4.5, 0.005));
        // The default 32 wide: 2 CG steps, 2 A and 2 A* per outer iteration and the A* that
        // forms the carried residual once; the first crossing counts even when a later iterate
        // moves away again. 64 wide: 3 CG steps.
        let r = Reached::first(&AdmmParams::default(), 32, &distances, &seconds, 0.01).unwrap();
        assert_eq!((r.outer_iterations, r.applications), (3, (6, 7)));
        let r = Reached::first(&AdmmParams::default(), 64, &distances, &seconds, 0.01).unwrap();
        assert_eq!((r.inner_iterations, r.applications), (9, (9, 10)));
        assert_eq!(r.seconds, 3.0);
        assert_eq!(
            Reached::first(&plain, 32, &distances[..3], &seconds, REACHED),
            None
        );
        assert_eq!(Reached::first(&plain, 32, &[], &[], REACHED), None);
        // NaN never counts as reached.
        assert_eq!(
            Reached::first(&plain, 32, &[f64::NAN], &[1.0], REACHED),
            None
        );
    }
}
