//! `lamino bench scale`: volumes larger than the device. Streaming at 1/8 of the in-core device
//! need against in-core (same process), one iteration of a large volume within a device budget
//! with scratch files, and the memory plans of large volumes at several device budgets; and
//! what the cost model of `lamino bench scale --model` shares with them (the scans, the timed
//! iterations).

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use super::{host_peak_bytes, median, print_json, BenchError};
use crate::fft::FftError;
use crate::geometry::Tilt;
use crate::gpu::GpuContext;
use crate::random::SplitMix64;

/// One line of `lamino bench scale --json`: a run (`kind` "ratio" or "large") or a plan only
/// (`kind` "plan").
#[derive(Debug, Clone, Serialize)]
pub struct ScaleBenchRecord {
    pub kind: &'static str,
    pub size: usize,
    pub angles: usize,
    pub plan: crate::plan::MemoryPlan,
    /// Median wall time of a timed outer iteration under `plan`, ms (runs only).
    pub ms_per_iteration: Option<f64>,
    /// The same for every array on the device, in the same process (the "ratio" run).
    pub in_core_ms_per_iteration: Option<f64>,
    /// `ms_per_iteration / in_core_ms_per_iteration`.
    pub streaming_over_in_core: Option<f64>,
    /// Host <-> device bytes per timed iteration, counted by the context (runs only).
    pub bytes_moved_per_iteration: Option<u64>,
    /// Those bytes over the streamed iteration's time, GB/s: the rate its transfers sustained
    /// (they overlap the computation, so the link carried at least this; the extra time over
    /// in-core is no measure when streaming is not slower).
    pub achieved_gbps: Option<f64>,
    /// A plain upload and download of the staging size through the same context, GB/s.
    pub copy_gbps: Option<f64>,
    /// The most device memory held at once, bytes (runs only).
    pub peak_device_bytes: Option<u64>,
    /// The process's peak resident set after the run (Linux VmHWM; it includes the pages of
    /// scratch files mapped in while they were read or written), bytes (runs only).
    pub peak_host_bytes: Option<u64>,
    pub device: String,
    /// The largest storage binding the plan was made with, bytes: this device's for a run, the
    /// target GPU's for a plan (`--target-max-binding`).
    pub max_binding_bytes: u64,
    /// For a plan: what `--normal-operator toeplitz` would plan beside `plan` (the gridding
    /// loop's, which `auto` runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toeplitz: Option<ToeplitzPlanFigures>,
}

/// The plan of the Toeplitz inner loop for the same volume and budgets: its traffic, or why it
/// cannot run.
#[derive(Debug, Clone, Serialize)]
pub struct ToeplitzPlanFigures {
    /// Host <-> device bytes per outer iteration of its plan (absent where it cannot run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_moved_per_iteration: Option<u64>,
    /// Arrays its plan keeps on the device.
    pub resident_arrays: usize,
    /// Device memory the loop holds beside the arrays (its grid, spectrum and volumes), bytes.
    pub loop_device_bytes: u64,
    /// Why it cannot run, where it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// The tilt of the scale benchmark's scans (30 degrees).
pub(super) const SCALE_TILT_DEGREES: f64 = 30.0;

/// Times `iterations` outer iterations (after one untimed with `warm_up`) under `plan` on a
/// fresh context whose budget is the plan's; returns (median ms, bytes moved per timed
/// iteration, peak).
pub(super) fn timed_iterations(
    options: &crate::gpu::DeviceOptions,
    g: &crate::geometry::Geometry,
    data: &[f32],
    plan: &crate::plan::MemoryPlan,
    iterations: usize,
    warm_up: bool,
) -> Result<(f64, u64, u64), ScaleBenchError> {
    use crate::params::AdmmParams;
    use crate::solver::AdmmSolver;
    let ctx = GpuContext::new(options)?;
    ctx.set_device_budget(plan.budgets.device_bytes);
    let params = AdmmParams::exactly(iterations + usize::from(warm_up));
    let mut solver = AdmmSolver::with_plan(&ctx, g, data, params, plan)?;
    if warm_up {
        solver.step(&ctx)?; // pays shader compilation
    }
    let before = ctx.traffic();
    let mut times = Vec::new();
    for _ in 0..iterations {
        let start = Instant::now();
        solver.step(&ctx)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let after = ctx.traffic();
    let moved = (after.bytes_uploaded + after.bytes_downloaded)
        - (before.bytes_uploaded + before.bytes_downloaded);
    Ok((
        median(times),
        moved / iterations as u64,
        ctx.peak_device_bytes(),
    ))
}

/// Errors of the scale benchmark.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScaleBenchError {
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error(transparent)]
    Solver(#[from] crate::solver::SolverError),
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    #[error(transparent)]
    Fft(#[from] FftError),
}

/// Random data in the operator's range of values for an `n`^3 volume seen at `angles`.
pub(super) fn scale_scan(n: usize, angles: usize) -> (crate::geometry::Geometry, Vec<f32>) {
    let g = crate::geometry::Geometry::cube(n, angles, Tilt::from_degrees(SCALE_TILT_DEGREES));
    let mut rng = SplitMix64::new(5);
    let data = (0..g.data_len()).map(|_| rng.next_f64() as f32).collect();
    (g, data)
}

/// `lamino bench scale`, the streaming case: per-iteration time at 1/8 of the in-core device
/// need against in-core, in the same process, with the bytes moved and a plain copy's rate.
pub fn bench_scale_ratio(
    options: &crate::gpu::DeviceOptions,
    n: usize,
    angles: usize,
    iterations: usize,
) -> Result<ScaleBenchRecord, ScaleBenchError> {
    use crate::operator::OperatorOptions;
    use crate::params::AdmmParams;
    use crate::plan::{plan, Budgets, MemoryPlan};
    let iterations = iterations.max(1);
    let (g, data) = scale_scan(n, angles);
    let params = AdmmParams::exactly(iterations + 1);
    let ctx = GpuContext::new(options)?;
    let in_core = MemoryPlan::in_core(&ctx, &g, &params, &OperatorOptions::default())?;
    let budgets = Budgets::given(in_core.device_bytes / 8, u64::MAX, None);
    let streaming = plan(&ctx, &g, &params, &OperatorOptions::default(), &budgets)?;
    let copy = copy_round_trip_gbps(&ctx, streaming.staging_words.max(1 << 20))?;
    let device = ctx.info().name.clone();
    let max_binding_bytes = ctx.max_binding_bytes();
    drop(ctx);
    let (in_core_ms, _, _) = timed_iterations(options, &g, &data, &in_core, iterations, true)?;
    let (ms, moved, peak) = timed_iterations(options, &g, &data, &streaming, iterations, true)?;
    Ok(ScaleBenchRecord {
        kind: "ratio",
        size: n,
        angles,
        plan: streaming,
        ms_per_iteration: Some(ms),
        in_core_ms_per_iteration: Some(in_core_ms),
        streaming_over_in_core: Some(ms / in_core_ms),
        bytes_moved_per_iteration: Some(moved),
        achieved_gbps: Some(moved as f64 / (ms / 1e3) / 1e9),
        copy_gbps: Some(copy),
        peak_device_bytes: Some(peak),
        peak_host_bytes: host_peak_bytes(),
        device: device.clone(),
        max_binding_bytes,
        toeplitz: None,
    })
}

/// `lamino bench scale`, the large case: one timed outer iteration of an `n`^3 volume within
/// `device_bytes` on the device and `host_bytes` in host memory, the rest in `scratch`.
pub fn bench_scale_large(
    options: &crate::gpu::DeviceOptions,
    n: usize,
    angles: usize,
    device_bytes: u64,
    host_bytes: u64,
    scratch: &std::path::Path,
) -> Result<ScaleBenchRecord, ScaleBenchError> {
    use crate::operator::OperatorOptions;
    use crate::params::AdmmParams;
    use crate::plan::{plan, Budgets};
    let (g, data) = scale_scan(n, angles);
    let params = AdmmParams::exactly(1);
    let ctx = GpuContext::new(options)?;
    let budgets = Budgets::given(device_bytes, host_bytes, Some(scratch.into()));
    let streaming = plan(&ctx, &g, &params, &OperatorOptions::default(), &budgets)?;
    let device = ctx.info().name.clone();
    let max_binding_bytes = ctx.max_binding_bytes();
    drop(ctx);
    // One iteration, the first: on lavapipe a 256^3 iteration takes tens of minutes, against
    // well under a second of shader compilation.
    let (ms, moved, peak) = timed_iterations(options, &g, &data, &streaming, 1, false)?;
    Ok(ScaleBenchRecord {
        kind: "large",
        size: n,
        angles,
        plan: streaming,
        ms_per_iteration: Some(ms),
        in_core_ms_per_iteration: None,
        streaming_over_in_core: None,
        bytes_moved_per_iteration: Some(moved),
        achieved_gbps: None,
        copy_gbps: None,
        peak_device_bytes: Some(peak),
        peak_host_bytes: host_peak_bytes(),
        device: device.clone(),
        max_binding_bytes,
        toeplitz: None,
    })
}

/// `lamino bench scale`, plans only: an `n`^3 volume seen at `n` angles within the budgets, on
/// the limits of the GPU planned for (nothing is allocated): `ctx` reports that GPU's largest
/// binding ([`GpuContext::modelling_max_binding_bytes`]), and its largest buffer is
/// `max_buffer_bytes`. What exceeds the host budget is planned into scratch files (a node's
/// NVMe, as mLR offloads), whose space is not checked here.
pub fn bench_scale_plan(
    ctx: &GpuContext,
    n: usize,
    (device_bytes, host_bytes): (u64, u64),
    max_buffer_bytes: u64,
) -> Result<ScaleBenchRecord, ScaleBenchError> {
    use crate::geometry::Geometry;
    use crate::operator::OperatorOptions;
    use crate::params::NormalOperator;
    use crate::plan::{plan_on_paper, planned_normal_operator, Budgets, NormalLoop};
    let g = Geometry::cube(n, n, Tilt::from_degrees(SCALE_TILT_DEGREES));
    let budgets = Budgets::given(device_bytes, host_bytes, Some("scratch".into()))
        .for_max_buffer(max_buffer_bytes);
    let params = crate::params::AdmmParams::default();
    let on_paper = |normal| {
        plan_on_paper(
            ctx,
            &g,
            &params,
            &OperatorOptions::default(),
            &budgets,
            normal,
        )
    };
    let mut p = on_paper(NormalLoop::Gridding)?;
    p.normal_operator = Some(planned_normal_operator(
        ctx,
        &g,
        NormalOperator::default(),
        p.toeplitz_conditions(1, &params, false),
    ));
    let planned = on_paper(NormalLoop::Toeplitz);
    let toeplitz = toeplitz_plan_figures(ctx, (&g, &params), device_bytes, planned)?;
    Ok(ScaleBenchRecord {
        kind: "plan",
        size: n,
        angles: n,
        plan: p,
        ms_per_iteration: None,
        in_core_ms_per_iteration: None,
        streaming_over_in_core: None,
        bytes_moved_per_iteration: None,
        achieved_gbps: None,
        copy_gbps: None,
        peak_device_bytes: None,
        peak_host_bytes: None,
        device: ctx.info().name.clone(),
        max_binding_bytes: ctx.max_binding_bytes(),
        toeplitz: Some(toeplitz),
    })
}

/// What `--normal-operator toeplitz` would get for `g` and `params` within `device_bytes`,
/// beside gridding's plan, as the reconstructor decides it: refused for what it cannot run
/// with whatever memory (see [`crate::plan::toeplitz_obstacle`]), else its plan `planned` (the
/// arrays placed after its memory is set aside), or refused where that memory leaves too
/// little for them.
fn toeplitz_plan_figures(
    ctx: &GpuContext,
    (g, params): (&crate::geometry::Geometry, &crate::params::AdmmParams),
    device_bytes: u64,
    planned: Result<crate::plan::MemoryPlan, crate::plan::PlanError>,
) -> Result<ToeplitzPlanFigures, ScaleBenchError> {
    use crate::params::NormalOperator;
    use crate::plan::{planned_normal_operator, toeplitz_obstacle, PlanError, ToeplitzConditions};
    let refused = |reason| ToeplitzPlanFigures {
        bytes_moved_per_iteration: None,
        resident_arrays: 0,
        loop_device_bytes: 0,
        refused: Some(reason),
    };
    let before_the_plan = ToeplitzConditions {
        shared: false,
        volumes_on_device: false,
        carried_cg: params.carries_residual(),
        memo: false,
        free_device_bytes: None,
    };
    if let Some(reason) = toeplitz_obstacle(ctx, g, before_the_plan) {
        return Ok(refused(reason));
    }
    match planned {
        Ok(t) => {
            let choice = planned_normal_operator(
                ctx,
                g,
                NormalOperator::Toeplitz,
                t.toeplitz_conditions(1, params, false),
            );
            Ok(ToeplitzPlanFigures {
                bytes_moved_per_iteration: choice
                    .reason
                    .is_none()
                    .then_some(t.bytes_moved_per_iteration),
                resident_arrays: t.resident_arrays(),
                loop_device_bytes: choice.device_bytes,
                refused: choice.reason,
            })
        }
        Err(PlanError::DeviceBudget { .. }) => {
            let need = crate::plan::toeplitz_need_bytes(ctx, g, false);
            let room = match need {
                Some(need) if need <= device_bytes => "leaves too little of",
                _ => "is more than",
            };
            Ok(refused(format!(
                "its memory ({} bytes, the kernel's computation included) {room} the device \
                 budget of {device_bytes} bytes beside the smallest streaming plan",
                need.map_or("more than 2^64".to_string(), |b| b.to_string())
            )))
        }
        Err(e) => Err(e.into()),
    }
}

/// Host -> device -> host through the context's own write and read paths: `words` f32 each
/// way, the median of five, GB/s counting both directions.
fn copy_round_trip_gbps(ctx: &GpuContext, words: usize) -> Result<f64, ScaleBenchError> {
    let buffer = ctx.storage_buffer("copy probe", words as u64 * 4)?;
    let host = vec![1.0f32; words];
    let mut times = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        ctx.write(&buffer, 0, &host);
        let back: Vec<f32> = ctx.read(&buffer, 0, words)?;
        times.push(start.elapsed().as_secs_f64());
        debug_assert_eq!(back.len(), words);
    }
    Ok(2.0 * words as f64 * 4.0 / median(times) / 1e9)
}

/// Prints one record: its plan, and the figures of a run.
fn print_record(json: bool, r: &ScaleBenchRecord) -> Result<(), BenchError> {
    if json {
        return Ok(print_json(r)?);
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let p = &r.plan;
    let tables = match p.u2_tables {
        crate::array::Residency::Device => "device",
        crate::array::Residency::Host => "host",
        crate::array::Residency::Scratch(_) => "scratch",
    };
    print!(
        "{:<5} {}^3 x {} angles, device budget {:.2} GiB: {:?}, chunks {:?} (U2* {}), {} of {} arrays on the device, the U2 tables ({:.2} GiB) on the {tables}; device {:.2} GiB, host {:.2} GiB, scratch {:.2} GiB, planned {:.2} GiB moved per iteration",
        r.kind,
        r.size,
        r.angles,
        gib(p.budgets.device_bytes),
        p.mode,
        p.chunks,
        p.operator.adjoint_gridding.name(),
        p.resident_arrays(),
        p.arrays.len(),
        gib(p.u2_table_bytes),
        gib(p.device_bytes),
        gib(p.host_bytes),
        gib(p.scratch_bytes),
        gib(p.bytes_moved_per_iteration)
    );
    if let Some(choice) = &p.normal_operator {
        print!("; inner loop by {}", choice.used);
        if let Some(reason) = &choice.reason {
            print!(" ({reason})");
        }
    }
    match &r.toeplitz {
        Some(ToeplitzPlanFigures {
            bytes_moved_per_iteration: Some(moved),
            resident_arrays,
            loop_device_bytes,
            ..
        }) => print!(
            "; the Toeplitz loop's plan: {resident_arrays} of {} arrays on the device beside its \
             {:.2} GiB, {:.2} GiB moved per iteration",
            p.arrays.len(),
            gib(*loop_device_bytes),
            gib(*moved)
        ),
        // Unless the choice above said why already.
        Some(ToeplitzPlanFigures {
            refused: Some(reason),
            ..
        }) if p.normal_operator.as_ref().and_then(|c| c.reason.as_ref()) != Some(reason) => {
            print!("; the Toeplitz loop cannot run: {reason}")
        }
        _ => {}
    }
    if let Some(ms) = r.ms_per_iteration {
        print!("; {ms:.0} ms per iteration");
    }
    if let (Some(ratio), Some(base)) = (r.streaming_over_in_core, r.in_core_ms_per_iteration) {
        print!(" = {ratio:.2} x in-core ({base:.0} ms)");
    }
    if let Some(moved) = r.bytes_moved_per_iteration {
        print!(", {:.2} GiB moved", gib(moved));
    }
    if let (Some(a), Some(c)) = (r.achieved_gbps, r.copy_gbps) {
        print!(" at {a:.2} GB/s beyond in-core (plain copy {c:.2} GB/s)");
    }
    if let Some(peak) = r.peak_device_bytes {
        print!(", device peak {:.3} GiB", gib(peak));
    }
    if let Some(peak) = r.peak_host_bytes {
        print!(", host peak resident {:.2} GiB", gib(peak));
    }
    println!();
    Ok(())
}

/// Prints the streaming-vs-in-core run of `size` (0: skipped) and the large run of `large` (0:
/// skipped) within `large_device_bytes`, its scratch files in a temporary directory in `scratch`.
pub fn print_runs(
    options: &crate::gpu::DeviceOptions,
    json: bool,
    (size, iterations): (usize, usize),
    (large, large_device_bytes, scratch): (usize, u64, &Path),
) -> Result<(), BenchError> {
    if size > 0 {
        print_record(json, &bench_scale_ratio(options, size, size, iterations)?)?;
    }
    if large > 0 {
        // A host budget of a third of the large run's arrays forces the rest to scratch.
        let third = (large * large * large) as u64 * 4 * 13 / 3;
        let dir = tempfile::tempdir_in(scratch).map_err(|source| BenchError::Scratch {
            dir: scratch.to_path_buf(),
            source,
        })?;
        print_record(
            json,
            &bench_scale_large(options, large, large, large_device_bytes, third, dir.path())?,
        )?;
    }
    Ok(())
}

/// Prints the memory plan of each of `plan_sizes` at each of `plan_device_bytes` (and
/// `plan_host_bytes` on the host), or where the planner refused it, for a GPU whose largest
/// binding is `max_binding_bytes` and largest buffer `max_buffer_bytes` (`None`: its memory,
/// each device budget), whatever this device's limits are.
pub fn print_plans(
    options: &crate::gpu::DeviceOptions,
    json: bool,
    (plan_sizes, plan_device_bytes, plan_host_bytes): (&[usize], &[u64], u64),
    (max_binding_bytes, max_buffer_bytes): (u64, Option<u64>),
) -> Result<(), BenchError> {
    if plan_sizes.is_empty() {
        return Ok(());
    }
    let ctx = GpuContext::new(options)?.modelling_max_binding_bytes(max_binding_bytes);
    if !json {
        println!(
            "plans for a GPU whose largest binding is {} MiB and largest buffer {}:",
            ctx.max_binding_bytes() >> 20,
            max_buffer_bytes.map_or("its memory".to_string(), |b| format!(
                "{:.0} GiB",
                b as f64 / (1u64 << 30) as f64
            ))
        );
    }
    for &n in plan_sizes {
        for &budget in plan_device_bytes {
            let max_buffer = max_buffer_bytes.unwrap_or(budget);
            match bench_scale_plan(&ctx, n, (budget, plan_host_bytes), max_buffer) {
                Ok(r) => print_record(json, &r)?,
                // A refusal is a figure too: where the planner's limit lies.
                Err(ScaleBenchError::Plan(e)) if json => println!(
                    "{}",
                    serde_json::json!({ "kind": "plan", "size": n, "angles": n,
                        "device_budget_bytes": budget, "refused": e.to_string() })
                ),
                Err(ScaleBenchError::Plan(e)) => {
                    println!(
                        "plan  {n}^3 x {n} angles at {} GiB: refused: {e}",
                        budget >> 30
                    )
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plans of a target GPU take its largest binding and buffer, not this device's: a
    /// larger device holds more of a 1024^3 reconstruction and moves less (before, lavapipe's
    /// buffer limit gave the same plan at every budget).
    #[test]
    fn plans_take_the_target_gpus_limits_and_use_its_memory() {
        let ctx = crate::gpu::test_context().modelling_max_binding_bytes(2047 << 20);
        let plan = |gib: u64| {
            let bytes = gib << 30;
            bench_scale_plan(&ctx, 1024, (bytes, 1024 << 30), bytes).unwrap()
        };
        let (small, large) = (plan(8), plan(80));
        for r in [&small, &large] {
            assert_eq!(r.max_binding_bytes, 2047 << 20);
            assert!(r.plan.device_bytes <= r.plan.budgets.device_bytes);
            let choice = r.plan.normal_operator.as_ref().unwrap();
            assert_eq!(choice.used, "gridding", "{choice:?}");
        }
        assert!(large.plan.resident_arrays() > small.plan.resident_arrays());
        assert!(large.plan.chunks.0 > small.plan.chunks.0);
        let moved = |r: &ScaleBenchRecord| r.plan.bytes_moved_per_iteration;
        assert!(
            2 * moved(&large) < moved(&small),
            "{} {}",
            moved(&large),
            moved(&small)
        );
        // The Toeplitz loop's plan beside each: at 1024^3 its kernel's doubled grid exceeds the
        // target's binding (said, with the bytes); at 256^3 it exceeds neither that binding nor
        // 8 GiB, and every array stays on the device beside its grid and spectrum (48 bytes per
        // voxel) and its volumes; on 2 GiB its memory, the kernel's computation included, is
        // more than the budget.
        let reason = |r: &ScaleBenchRecord| {
            let t = r.toeplitz.as_ref().unwrap();
            assert_eq!(t.bytes_moved_per_iteration, None, "{t:?}");
            t.refused.clone().unwrap()
        };
        let binding = reason(&large);
        assert!(
            binding.contains("more than the device's largest binding"),
            "{binding}"
        );
        let plan = |n, gib: u64| bench_scale_plan(&ctx, n, (gib << 30, 1024 << 30), gib << 30);
        let fits = plan(256, 8).unwrap().toeplitz.unwrap();
        assert_eq!(
            (fits.bytes_moved_per_iteration, fits.resident_arrays),
            (Some(0), 14)
        );
        assert!(fits.loop_device_bytes >= 48 * 256u64.pow(3), "{fits:?}");
        let memory = reason(&plan(256, 2).unwrap());
        assert!(
            memory.contains("is more than the device budget"),
            "{memory}"
        );
    }
}
