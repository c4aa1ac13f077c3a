//! `lamino bench memo`'s comparison that decides the default: wall time to reach a
//! reconstruction within `target` (relative L2) of the converged result, for exact-step CG,
//! Dai-Yuan, and Dai-Yuan with each certified memo setting, per phantom.
//!
//! The converged result is exact-step CG run until its relative change
//! `|u_k - u_k-1| / |u_k|` has stayed below `target x REFERENCE_CHANGE` for three iterations
//! (or `reference_iterations` ran; the record says which). The CG contestant is that same run:
//! its time to target is read off the reference's trajectory. Every other run steps until it is
//! within `target` of the converged result or `max_iterations` ran. Times are wall-clock seconds
//! from the start of the solver's construction (the Fourier-domain data, the memo layer) to the
//! end of the outer iteration that reached the target; the distance checks between iterations
//! (a volume readback and a CPU norm) are not counted. Each configuration first runs one
//! untimed outer iteration so that pipeline compilation is not counted either.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bench::process_cpu_seconds;
use crate::geometry::Geometry;
use crate::geometry::Tilt;
use crate::gpu::GpuContext;
use crate::memo::{MemoOptions, MemoPolicy};
use crate::metrics::rel_l2;
use crate::operator::OperatorOptions;
use crate::params::AdmmParams;
use crate::params::InnerSolver;
use crate::recon::ReconError;
use crate::scan::Projections;
use crate::simulate::{project, PhantomKind};
use crate::solver::{AdmmSolver, SolverError};

/// The reference's change must stay below `target` times this.
pub const REFERENCE_CHANGE: f64 = 0.01;
/// ... for this many consecutive iterations.
const REFERENCE_STREAK: usize = 3;

/// What to compare.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    pub size: usize,
    pub phantoms: Vec<PhantomKind>,
    /// Relative L2 distance to the converged result that counts as reached.
    pub target: f64,
    /// Most outer iterations of the reference (the converged result).
    pub reference_iterations: usize,
    /// Most outer iterations of every other run.
    pub max_iterations: usize,
    /// Dai-Yuan's fixed step.
    pub dai_yuan_step: f64,
    /// Memo settings tried with Dai-Yuan (besides none).
    pub certified: Vec<MemoPolicy>,
    /// Budgets and chunking of the memo runs.
    pub memo: MemoOptions,
}

/// One line of the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct CompareRecord {
    pub phantom: String,
    /// `reference` (the converged result) or `run`.
    pub kind: String,
    /// `cg` or `dai_yuan`.
    pub solver: String,
    /// The memo policy as `--memo` spells it.
    pub memo: String,
    /// Whether the run came within `target` of the converged result (for the reference: whether
    /// its change criterion was met).
    pub reached: bool,
    /// Outer iterations to the target (or all that ran).
    pub iterations: usize,
    /// Seconds to the target (or to the last iteration).
    pub time_s: f64,
    /// `time_s` over the CG run's on the same phantom.
    pub normalized_time: f64,
    /// Process CPU seconds to the target, and over the CG run's (on a software adapter the
    /// device's work is the process's: less disturbed by other load than wall time).
    pub cpu_s: Option<f64>,
    pub normalized_cpu_time: Option<f64>,
    /// Relative L2 distance to the converged result at the stop (0 for the reference).
    pub distance: f64,
    /// Relative change of the last iteration.
    pub last_change: f64,
    pub hit_rate: f64,
    pub round_trips_per_application: f64,
    /// Among the memo settings with Dai-Yuan on this phantom: the fastest to reach the target.
    pub best_memo: bool,
    pub size: usize,
    pub target: f64,
    pub error: Option<String>,
}

/// Wall time and process CPU seconds so far (timed parts only).
type Elapsed = (Duration, Option<f64>);

struct Run {
    reached: bool,
    iterations: usize,
    time: Duration,
    cpu: Option<f64>,
    distance: f64,
    last_change: f64,
    hit_rate: f64,
    round_trips: f64,
    error: Option<String>,
}

/// Builds a solver for `params` and `memo` and steps it, calling `check(solver, change, times
/// so far)` (untimed) after every outer iteration until it returns true or `max` iterations ran.
/// One untimed iteration of a separate solver warms the pipelines first.
fn timed_run(
    ctx: &GpuContext,
    (g, data): (&Geometry, &[f32]),
    params: AdmmParams,
    memo: MemoOptions,
    max: usize,
    mut check: impl FnMut(&AdmmSolver, f64, Elapsed) -> Result<bool, SolverError>,
) -> Result<Run, ReconError> {
    let chunking = if memo.policy.is_active() {
        let rows = Some(memo.chunk_rows.max(1));
        OperatorOptions {
            max_chunk_y: rows,
            max_chunk_rows: rows,
            ..OperatorOptions::default()
        }
    } else {
        OperatorOptions::default()
    };
    let build = || -> Result<AdmmSolver, SolverError> {
        // Construction is timed: the Fourier-domain data and the memo layer are part of a run.
        let mut solver = AdmmSolver::new(ctx, g, data, params, &chunking)?;
        solver.set_memo(ctx, memo)?;
        Ok(solver)
    };
    build()?.step(ctx)?;
    let start = Instant::now();
    let cpu_start = process_cpu_seconds();
    let mut untimed = Duration::ZERO;
    let mut cpu_untimed = 0.0;
    let mut solver = build()?;
    let mut run = Run {
        reached: false,
        iterations: 0,
        time: Duration::ZERO,
        cpu: None,
        distance: f64::NAN,
        last_change: f64::NAN,
        hit_rate: 0.0,
        round_trips: 0.0,
        error: None,
    };
    while run.iterations < max {
        match solver.step(ctx) {
            Ok(report) => run.last_change = report.change,
            // A diverging run ends here, not reached; the others are errors.
            Err(e @ SolverError::NonFinite { .. }) => {
                run.error = Some(e.to_string());
                break;
            }
            Err(e) => return Err(e.into()),
        }
        run.iterations += 1;
        run.time = start.elapsed() - untimed;
        let cpu_now = process_cpu_seconds();
        run.cpu = cpu_start.zip(cpu_now).map(|(a, b)| b - a - cpu_untimed);
        let t = Instant::now();
        let done = check(&solver, run.last_change, (run.time, run.cpu))?;
        untimed += t.elapsed();
        if let Some((a, b)) = cpu_now.zip(process_cpu_seconds()) {
            cpu_untimed += b - a;
        }
        if done {
            run.reached = true;
            break;
        }
    }
    if let Some(s) = solver.memo_stats() {
        run.hit_rate = s.hit_rate;
        run.round_trips = s.round_trips as f64 / s.applications.max(1) as f64;
    }
    Ok(run)
}

/// Runs the comparison on every phantom, calling `on_record` after each run.
pub fn run_comparison(
    ctx: &GpuContext,
    config: &CompareConfig,
    mut on_record: impl FnMut(&CompareRecord),
) -> Result<Vec<CompareRecord>, ReconError> {
    let n = config.size;
    let g = Geometry::cube(n, n, Tilt::from_degrees(30.0));
    let mut records = Vec::new();
    for &phantom in &config.phantoms {
        let projections = Projections::new(g.clone(), project(&phantom.build(n), &g))?;
        let data = projections.operator_data();
        let problem = (&g, data.as_slice());
        let off = MemoOptions {
            policy: MemoPolicy::Off,
            ..config.memo
        };
        let record = |kind: &str, solver: &str, memo: MemoPolicy, run: &Run| CompareRecord {
            phantom: phantom.name().to_string(),
            kind: kind.to_string(),
            solver: solver.to_string(),
            memo: memo.to_string(),
            reached: run.reached,
            iterations: run.iterations,
            time_s: run.time.as_secs_f64(),
            normalized_time: f64::NAN,
            cpu_s: run.cpu,
            normalized_cpu_time: None,
            distance: run.distance,
            last_change: run.last_change,
            hit_rate: run.hit_rate,
            round_trips_per_application: run.round_trips,
            best_memo: false,
            size: n,
            target: config.target,
            error: run.error.clone(),
        };
        // The converged result, keeping the trajectory (volume and time after each iteration).
        let cg = AdmmParams::exactly(config.reference_iterations);
        let mut trajectory: Vec<(Vec<f32>, Elapsed)> = Vec::new();
        let mut streak = 0;
        let mut reference = timed_run(
            ctx,
            problem,
            cg,
            off,
            config.reference_iterations,
            |solver, change, time| {
                streak = if change <= config.target * REFERENCE_CHANGE {
                    streak + 1
                } else {
                    0
                };
                trajectory.push((solver.volume(ctx)?, time));
                Ok(streak >= REFERENCE_STREAK)
            },
        )?;
        let Some((converged, _)) = trajectory.last().cloned() else {
            return Err(ReconError::Solver(SolverError::NonFinite {
                what: "the reference run's first iteration",
                iteration: 0,
            }));
        };
        reference.distance = 0.0;
        let mut phantom_records = vec![record("reference", "cg", MemoPolicy::Off, &reference)];
        // CG to the target, read off the reference's trajectory.
        let hit = trajectory
            .iter()
            .position(|(v, _)| rel_l2(v, &converged) <= config.target);
        let k = hit.unwrap_or(trajectory.len() - 1);
        let cg_run = Run {
            reached: hit.is_some(),
            iterations: k + 1,
            time: trajectory[k].1 .0,
            cpu: trajectory[k].1 .1,
            distance: rel_l2(&trajectory[k].0, &converged),
            last_change: f64::NAN,
            hit_rate: 0.0,
            round_trips: 0.0,
            error: None,
        };
        let (cg_time, cg_cpu) = (cg_run.time.as_secs_f64(), cg_run.cpu);
        phantom_records.push(record("run", "cg", MemoPolicy::Off, &cg_run));
        drop(trajectory);
        let dy = AdmmParams {
            inner: InnerSolver::DaiYuan {
                step: config.dai_yuan_step,
            },
            ..AdmmParams::exactly(config.max_iterations)
        };
        let policies = std::iter::once(MemoPolicy::Off).chain(config.certified.iter().copied());
        for policy in policies {
            let memo = MemoOptions {
                policy,
                ..config.memo
            };
            let mut distance = f64::NAN;
            let mut run = timed_run(
                ctx,
                problem,
                dy,
                memo,
                config.max_iterations,
                |solver, _, _| {
                    distance = rel_l2(&solver.volume(ctx)?, &converged);
                    Ok(distance <= config.target)
                },
            )?;
            run.distance = distance;
            phantom_records.push(record("run", "dai_yuan", policy, &run));
        }
        for r in &mut phantom_records {
            r.normalized_time = r.time_s / cg_time;
            r.normalized_cpu_time = r.cpu_s.zip(cg_cpu).map(|(c, g)| c / g);
        }
        let best = phantom_records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.solver == "dai_yuan" && r.memo != "off" && r.reached)
            .min_by(|a, b| a.1.time_s.total_cmp(&b.1.time_s))
            .map(|(i, _)| i);
        if let Some(i) = best {
            phantom_records[i].best_memo = true;
        }
        phantom_records.iter().for_each(&mut on_record);
        records.extend(phantom_records);
    }
    Ok(records)
}
