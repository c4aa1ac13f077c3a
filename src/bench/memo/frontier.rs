//! `lamino bench memo`: the accuracy-time frontier of the memo policies against the exact
//! reconstruction, in one process, with the mLR paper's published points for comparison.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::bench::process_cpu_seconds;
use crate::geometry::Geometry;
use crate::geometry::Tilt;
use crate::gpu::GpuContext;
use crate::io::{IoError, OutputSet};
use crate::memo::{MemoOptions, MemoPolicy, AUTO_FLOOR};
use crate::metrics::rel_l2;
use crate::operator::{OperatorOptions, Stage};
use crate::params::AdmmParams;
use crate::plan::Mode;
use crate::plot::{write_scatter_png, Marker, PlotSpec, Series};
use crate::recon::{ReconError, Reconstruction, Reconstructor};
use crate::scan::Projections;
use crate::simulate::{project, PhantomKind};
use crate::solver::SolverError;

/// The mLR paper's rebuttal Table C.2: (tau, accuracy, normalised time).
pub const PAPER_POINTS: [(f64, f64, f64); 6] = [
    (0.86, 0.691, 0.477),
    (0.88, 0.808, 0.538),
    (0.90, 0.901, 0.662),
    (0.92, 0.946, 0.794),
    (0.94, 0.958, 0.874),
    (0.96, 0.973, 0.940),
];

/// The swept settings: the paper's tau values, certified tolerances from loose to tight, and the
/// scales of `certified:auto` (its tolerance `scale x` the relative primal residual, floored at
/// `AUTO_FLOOR`).
pub const MLR_TAUS: [f64; 6] = [0.86, 0.88, 0.90, 0.92, 0.94, 0.96];
pub const CERTIFIED_TOLS: [f64; 8] = [0.3, 0.1, 0.03, 0.02, 0.015, 0.01, 3e-3, 1e-3];
pub const AUTO_SCALES: [f64; 3] = [0.1, 0.3, 1.0];

/// Every swept policy, in order.
pub fn swept_policies() -> Vec<MemoPolicy> {
    let mlr = MLR_TAUS.iter().map(|&tau| MemoPolicy::Mlr { tau });
    let certified = CERTIFIED_TOLS
        .iter()
        .map(|&tol| MemoPolicy::Certified { tol });
    let auto = AUTO_SCALES.iter().map(|&scale| MemoPolicy::CertifiedAuto {
        scale,
        floor: AUTO_FLOOR,
    });
    mlr.chain(certified).chain(auto).collect()
}

/// The family name and swept parameter of a policy, as the CSV and the plot group them.
pub fn family(policy: MemoPolicy) -> (&'static str, Option<f64>) {
    match policy {
        MemoPolicy::Off => ("off", None),
        MemoPolicy::Mlr { tau } => ("mlr", Some(tau)),
        MemoPolicy::Certified { tol } => ("certified", Some(tol)),
        MemoPolicy::CertifiedAuto { scale, .. } => ("certified_auto", Some(scale)),
    }
}

/// One run of the sweep.
#[derive(Debug, Clone, Serialize)]
pub struct FrontierPoint {
    /// `exact`, `off` (memo off at the memo chunking), `mlr`, `certified` or `certified_auto`.
    pub policy: String,
    pub param: Option<f64>,
    /// The policy as `--memo` spells it (`off` for the exact run).
    pub setting: String,
    /// `max(0, 1 - |u - u_exact| / |u_exact|)`
    pub accuracy: f64,
    /// Wall time of the run over the exact run's, measured in this process.
    pub normalized_time: f64,
    pub time_s: f64,
    /// Process CPU time of the run over the exact run's (on a software adapter: the work done,
    /// which other load on the machine disturbs less than wall time), and in seconds.
    pub normalized_cpu_time: Option<f64>,
    pub cpu_s: Option<f64>,
    pub hit_rate: f64,
    /// Per stage (U1, U1*, U2, U2*): the share of its chunks reused.
    pub stage_hit_rates: Vec<(Stage, f64)>,
    pub lookup_ms_median: f64,
    pub lookup_ms_p99: f64,
    /// Host round trips per stage application through the memo layer (mean and most).
    pub round_trips_per_application: f64,
    pub max_round_trips_per_application: u64,
    /// Peak bytes of the cache (device and host tiers).
    pub cache_bytes: u64,
    /// `in_core` or `streaming` (the memory plan's mode), the device budget of a streamed run,
    /// and the bytes moved between host and device (both ways, the memo's own included).
    pub mode: String,
    pub device_budget: Option<u64>,
    pub bytes_moved: u64,
    /// `|u - truth| / |truth|` of the reconstruction.
    pub rel_l2_truth: f64,
    /// Why the run stopped early (a diverging iteration): accuracy 0, time up to the failure.
    pub error: Option<String>,
    pub size: usize,
    pub outer_iterations: usize,
    pub inner_solver: String,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct FrontierConfig {
    pub size: usize,
    /// Solver parameters of every run (their outer iterations included).
    pub params: AdmmParams,
    pub memo: MemoOptions,
    /// The memo policies swept (default: [`swept_policies`]).
    pub policies: Vec<MemoPolicy>,
    /// Timed runs per setting; the fastest counts (other work on the machine only slows runs
    /// down). The result of the last is used.
    pub repeats: usize,
    /// Streams every run through a device budget of `1 / fraction` of its in-core need, the
    /// memo's device cache scaled alike, the other arrays on the host; `None`: in core.
    pub device_fraction: Option<u64>,
}

/// A run's setting: solver parameters, memo options, chunk caps, and the device fraction.
#[derive(Debug, Clone, Copy)]
struct RunSetting {
    params: AdmmParams,
    memo: MemoOptions,
    chunking: OperatorOptions,
    device_fraction: Option<u64>,
}

/// Wall and process CPU seconds of one run, and the bytes it moved between host and device.
#[derive(Debug, Clone, Copy)]
struct Timing {
    wall: f64,
    cpu: Option<f64>,
    bytes_moved: u64,
}

/// The reconstructor of `setting`, with its device budget when it streams.
fn reconstructor<'a>(
    ctx: &'a GpuContext,
    g: &Geometry,
    setting: RunSetting,
) -> Result<Reconstructor<'a>, ReconError> {
    let base = || {
        Reconstructor::new(ctx)
            .params(setting.params)
            .operator_options(setting.chunking)
            .memo(setting.memo)
    };
    let Some(fraction) = setting.device_fraction.map(|f| f.max(1)) else {
        return Ok(base());
    };
    // The memo's device cache shrinks with the arrays' share: the whole run holds 1/F of what
    // it holds in core.
    let memo = MemoOptions {
        device_bytes: setting.memo.device_bytes / fraction,
        ..setting.memo
    };
    let memo_bytes = match memo.policy {
        MemoPolicy::Off => 0,
        _ => memo.device_bytes,
    };
    let need = base().memo(memo).plan(g)?.device_bytes;
    let budget = need.saturating_sub(memo_bytes) / fraction + memo_bytes;
    Ok(base().memo(memo).device_memory_budget(budget))
}

fn run(
    ctx: &GpuContext,
    projections: &Projections,
    setting: RunSetting,
) -> Result<(Reconstruction, Timing), ReconError> {
    let reconstructor = reconstructor(ctx, projections.geometry(), setting)?;
    let start = Instant::now();
    let cpu = process_cpu_seconds();
    let traffic = ctx.traffic();
    let r = reconstructor.run(projections)?;
    let moved = ctx.traffic() - traffic;
    let timing = Timing {
        wall: start.elapsed().as_secs_f64(),
        cpu: cpu.zip(process_cpu_seconds()).map(|(a, b)| b - a),
        bytes_moved: moved.bytes_uploaded + moved.bytes_downloaded,
    };
    Ok((r, timing))
}

/// [`run`] `repeats` times (at least once): the last result and the fastest times.
fn best_of(
    repeats: usize,
    mut once: impl FnMut() -> Result<(Reconstruction, Timing), ReconError>,
) -> Result<(Reconstruction, Timing), ReconError> {
    let (mut r, mut t) = once()?;
    for _ in 1..repeats {
        let (next, time) = once()?;
        r = next;
        t = Timing {
            wall: t.wall.min(time.wall),
            cpu: t.cpu.zip(time.cpu).map(|(a, b)| a.min(b)),
            bytes_moved: time.bytes_moved,
        };
    }
    Ok((r, t))
}

/// Reconstructs a simulated chip phantom exactly, then with memo off at the memo chunking, then
/// with every swept policy, calling `on_point` after each run.
pub fn run_frontier(
    ctx: &GpuContext,
    config: &FrontierConfig,
    mut on_point: impl FnMut(&FrontierPoint),
) -> Result<Vec<FrontierPoint>, ReconError> {
    let n = config.size;
    let g = Geometry::cube(n, n, Tilt::from_degrees(30.0));
    let phantom = PhantomKind::Chip.build(n);
    let truth = crate::simulate::rasterize(&phantom, &g);
    let projections = Projections::new(g.clone(), project(&phantom, &g))?;
    let params = config.params;
    let off = MemoOptions {
        policy: MemoPolicy::Off,
        ..config.memo
    };
    let rows = Some(config.memo.chunk_rows);
    let memo_chunks = OperatorOptions {
        max_chunk_y: rows,
        max_chunk_rows: rows,
        ..OperatorOptions::default()
    };
    // Pipelines are compiled once per context: one untimed outer iteration at each chunking
    // first, so that no timed run pays for them.
    let warm = AdmmParams {
        outer_iterations: 1,
        convergence: None,
        ..params
    };
    let setting = |params, memo, chunking| RunSetting {
        params,
        memo,
        chunking,
        device_fraction: config.device_fraction,
    };
    for chunking in [OperatorOptions::default(), memo_chunks] {
        run(ctx, &projections, setting(warm, off, chunking))?;
    }
    let repeats = config.repeats;
    let exact_setting = setting(params, off, OperatorOptions::default());
    let (exact, t_exact) = best_of(repeats, || run(ctx, &projections, exact_setting))?;
    let point =
        |policy: MemoPolicy, is_exact: bool, r: Result<&Reconstruction, String>, t: Timing| {
            let stats = r.as_ref().ok().and_then(|r| r.memo_stats.as_ref());
            let nan_if_failed = |v: f64| if r.is_ok() { v } else { f64::NAN };
            let (name, param) = if is_exact {
                ("exact", None)
            } else {
                family(policy)
            };
            FrontierPoint {
                policy: name.to_string(),
                param,
                setting: policy.to_string(),
                accuracy: r
                    .as_ref()
                    .map_or(0.0, |r| (1.0 - rel_l2(&r.volume, &exact.volume)).max(0.0)),
                normalized_time: t.wall / t_exact.wall,
                time_s: t.wall,
                normalized_cpu_time: t.cpu.zip(t_exact.cpu).map(|(c, e)| c / e),
                cpu_s: t.cpu,
                hit_rate: nan_if_failed(stats.map_or(0.0, |s| s.hit_rate)),
                stage_hit_rates: stats.map_or(Vec::new(), |s| {
                    s.stages
                        .iter()
                        .map(|st| (st.stage, st.hits as f64 / st.chunks.max(1) as f64))
                        .collect()
                }),
                lookup_ms_median: nan_if_failed(stats.map_or(0.0, |s| s.lookup_ms_median)),
                lookup_ms_p99: nan_if_failed(stats.map_or(0.0, |s| s.lookup_ms_p99)),
                round_trips_per_application: stats.map_or(0.0, |s| {
                    s.round_trips as f64 / (s.applications.max(1)) as f64
                }),
                max_round_trips_per_application: stats
                    .map_or(0, |s| s.max_round_trips_per_application),
                cache_bytes: stats.map_or(0, |s| s.peak_cache_bytes),
                mode: r.as_ref().map_or(String::new(), |r| match r.plan.mode {
                    Mode::InCore => "in_core".into(),
                    Mode::Streaming => "streaming".into(),
                }),
                device_budget: r
                    .as_ref()
                    .ok()
                    .filter(|r| r.plan.mode == Mode::Streaming)
                    .map(|r| r.plan.budgets.device_bytes),
                bytes_moved: t.bytes_moved,
                rel_l2_truth: r.as_ref().map_or(f64::NAN, |r| rel_l2(&r.volume, &truth)),
                size: n,
                outer_iterations: params.outer_iterations,
                inner_solver: format!("{:?}", params.inner),
                error: r.err(),
            }
        };
    let mut points = Vec::new();
    let mut emit = |p: FrontierPoint| {
        on_point(&p);
        points.push(p);
    };
    emit(point(MemoPolicy::Off, true, Ok(&exact), t_exact));
    let off_setting = setting(params, off, memo_chunks);
    let (r, t) = best_of(repeats, || run(ctx, &projections, off_setting))?;
    emit(point(MemoPolicy::Off, false, Ok(&r), t));
    for policy in config.policies.iter().copied() {
        let memo = MemoOptions {
            policy,
            ..config.memo
        };
        let (start, cpu) = (Instant::now(), process_cpu_seconds());
        let traffic = ctx.traffic();
        match best_of(repeats, || {
            run(ctx, &projections, setting(params, memo, memo_chunks))
        }) {
            Ok((r, t)) => emit(point(policy, false, Ok(&r), t)),
            // A diverging run is a point at accuracy 0 (timed up to the failure), not the end
            // of the sweep.
            Err(ReconError::Solver(e @ SolverError::NonFinite { .. })) => {
                let moved = ctx.traffic() - traffic;
                let t = Timing {
                    wall: start.elapsed().as_secs_f64(),
                    cpu: cpu.zip(process_cpu_seconds()).map(|(a, b)| b - a),
                    bytes_moved: moved.bytes_uploaded + moved.bytes_downloaded,
                };
                emit(point(policy, false, Err(e.to_string()), t));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(points)
}

/// Columns of the frontier table.
const COLUMNS: usize = 17;

/// The frontier table: one row per run, then the paper's points. Error messages are kept verbatim
/// (quoted by the CSV writer where they hold commas).
fn frontier_csv(points: &[FrontierPoint]) -> Result<Vec<u8>, csv::Error> {
    let mut csv = csv::Writer::from_writer(Vec::new());
    csv.write_record([
        "policy",
        "param",
        "setting",
        "accuracy",
        "normalized_time",
        "time_s",
        "normalized_cpu_time",
        "cpu_s",
        "hit_rate",
        "lookup_ms_median",
        "lookup_ms_p99",
        "round_trips_per_application",
        "cache_bytes",
        "mode",
        "bytes_moved",
        "rel_l2_truth",
        "error",
    ])?;
    for p in points {
        csv.write_record([
            p.policy.clone(),
            p.param.map_or(String::new(), |v| v.to_string()),
            p.setting.clone(),
            format!("{:.6}", p.accuracy),
            format!("{:.4}", p.normalized_time),
            format!("{:.3}", p.time_s),
            p.normalized_cpu_time
                .map_or(String::new(), |v| format!("{v:.4}")),
            p.cpu_s.map_or(String::new(), |v| format!("{v:.3}")),
            format!("{:.4}", p.hit_rate),
            format!("{:.5}", p.lookup_ms_median),
            format!("{:.5}", p.lookup_ms_p99),
            format!("{:.3}", p.round_trips_per_application),
            p.cache_bytes.to_string(),
            p.mode.clone(),
            p.bytes_moved.to_string(),
            format!("{:.5}", p.rel_l2_truth),
            p.error.clone().unwrap_or_default(),
        ])?;
    }
    for (tau, accuracy, time) in PAPER_POINTS {
        let mut row = vec![
            "paper_mlr".to_string(),
            tau.to_string(),
            String::new(),
            accuracy.to_string(),
            time.to_string(),
        ];
        row.resize(COLUMNS, String::new());
        csv.write_record(&row)?;
    }
    csv.into_inner().map_err(|e| e.into_error().into())
}

/// Writes `DIR/memo_frontier.csv` and `DIR/memo_frontier.png` (accuracy against normalised
/// time: our mlr and certified runs, the paper's points, the exact run at (1, 1)).
pub fn write_frontier(dir: &Path, points: &[FrontierPoint]) -> Result<Vec<PathBuf>, IoError> {
    let mut set = OutputSet::begin(dir, "bench-memo")?;
    let staged = stage_frontier(&mut set, points);
    Ok(set.complete(staged)?.1)
}

/// The files of [`write_frontier`], staged in `set`.
fn stage_frontier(set: &mut OutputSet, points: &[FrontierPoint]) -> Result<(), IoError> {
    let csv_path = set.final_path("memo_frontier.csv");
    let csv = frontier_csv(points).map_err(|e| IoError::Write {
        path: csv_path.clone(),
        reason: e.to_string(),
    })?;
    std::fs::write(set.stage("memo_frontier.csv")?, &csv).map_err(|e| IoError::Write {
        path: csv_path,
        reason: e.to_string(),
    })?;
    let select = |name: &str| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter(|p| p.policy == name)
            .map(|p| (p.normalized_time, p.accuracy))
            .collect()
    };
    let (mlr, certified, auto, exact, off) = (
        select("mlr"),
        select("certified"),
        select("certified_auto"),
        select("exact"),
        select("off"),
    );
    let paper: Vec<(f64, f64)> = PAPER_POINTS.iter().map(|&(_, a, t)| (t, a)).collect();
    // Runs that diverged are drawn at accuracy 0 (at their time to failure): say so.
    let label = |name: &str, text: &str| {
        if points.iter().any(|p| p.policy == name && p.error.is_some()) {
            format!("{text} (at 0: diverged)")
        } else {
            text.to_string()
        }
    };
    let (mlr_label, certified_label, auto_label) = (
        label("mlr", "lamino mlr:tau"),
        label("certified", "lamino certified:tol"),
        label("certified_auto", "lamino certified:auto:scale"),
    );
    let x_max = points
        .iter()
        .map(|p| p.normalized_time)
        .fold(1.1, f64::max)
        .min(4.0);
    let series = [
        Series {
            label: "mLR paper (tau 0.86-0.96)",
            color: [120, 120, 120],
            marker: Marker::Cross,
            points: &paper,
            connect: true,
        },
        Series {
            label: &mlr_label,
            color: [214, 96, 20],
            marker: Marker::Square,
            points: &mlr,
            connect: true,
        },
        Series {
            label: &certified_label,
            color: [30, 90, 200],
            marker: Marker::Circle,
            points: &certified,
            connect: true,
        },
        Series {
            label: &auto_label,
            color: [140, 40, 170],
            marker: Marker::Cross,
            points: &auto,
            connect: true,
        },
        Series {
            label: "memo off, same chunks",
            color: [40, 160, 60],
            marker: Marker::Square,
            points: &off,
            connect: false,
        },
        Series {
            label: "exact",
            color: [0, 0, 0],
            marker: Marker::Circle,
            points: &exact,
            connect: false,
        },
    ];
    let png_path = set.final_path("memo_frontier.png");
    write_scatter_png(
        &set.stage("memo_frontier.png")?,
        &PlotSpec {
            title: "Memoization: accuracy vs time",
            x_label: "time / exact time",
            y_label: "accuracy = 1 - rel. L2 to exact",
            x_range: (0.0, x_max),
            y_range: (0.0, 1.02),
            series: &series,
        },
    )
    .map_err(|e| IoError::Write {
        path: png_path,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(
        policy: &str,
        param: Option<f64>,
        accuracy: f64,
        time: f64,
        error: bool,
    ) -> FrontierPoint {
        FrontierPoint {
            policy: policy.to_string(),
            param,
            setting: format!("{policy}:{}", param.unwrap_or(0.0)),
            accuracy,
            normalized_time: time,
            time_s: 10.0 * time,
            normalized_cpu_time: Some(time),
            cpu_s: None,
            hit_rate: 0.5,
            stage_hit_rates: vec![(Stage::Usfft1d, 0.5)],
            lookup_ms_median: 0.01,
            lookup_ms_p99: 0.1,
            round_trips_per_application: 2.5,
            max_round_trips_per_application: 3,
            cache_bytes: 1 << 20,
            mode: "streaming".into(),
            device_budget: Some(1 << 24),
            bytes_moved: 1 << 22,
            rel_l2_truth: 0.5,
            size: 16,
            outer_iterations: 10,
            inner_solver: "ConjugateGradient".into(),
            error: error.then(|| "the residual became non-finite, at outer iteration 2".into()),
        }
    }

    #[test]
    fn writes_every_run_and_the_paper_points_to_csv_and_a_png() {
        let points = [
            point("exact", None, 1.0, 1.0, false),
            point("off", None, 1.0, 1.02, false),
            point("mlr", Some(0.9), 0.0, 0.3, true),
            point("certified", Some(0.01), 0.995, 1.1, false),
            point("certified_auto", Some(0.3), 0.999, 0.9, false),
        ];
        let dir = tempfile::tempdir().unwrap();
        let written = write_frontier(dir.path(), &points).unwrap();
        let mut csv = csv::Reader::from_path(&written[0]).unwrap();
        assert_eq!(csv.headers().unwrap().len(), COLUMNS);
        let rows: Vec<csv::StringRecord> = csv.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), points.len() + PAPER_POINTS.len());
        assert!(rows.iter().all(|r| r.len() == COLUMNS));
        let mlr = &rows[2];
        assert_eq!(
            (&mlr[0], &mlr[1], &mlr[2], &mlr[3], &mlr[4]),
            ("mlr", "0.9", "mlr:0.9", "0.000000", "0.3000")
        );
        // The error message survives verbatim, commas included.
        assert_eq!(
            &mlr[COLUMNS - 1],
            "the residual became non-finite, at outer iteration 2"
        );
        let last = rows.last().unwrap();
        assert_eq!(
            (&last[0], &last[1], &last[2], &last[3], &last[4]),
            ("paper_mlr", "0.96", "", "0.973", "0.94")
        );
        let png = image::open(&written[1]).unwrap();
        assert_eq!((png.width(), png.height()), (800, 600));
    }
}
