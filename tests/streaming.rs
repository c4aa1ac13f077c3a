//! Volumes larger than the device: the memory planner and the streaming mode. A reconstruction
//! forced to stream (device budget 1/8 of the in-core need, host budget that pushes arrays to
//! scratch files) gives the bits of the in-core run with the same chunks (whose operator keeps its
//! U2 tables resident, where streaming uploads a chunk's slice of them), agrees with the default
//! in-core chunking to f32 rounding, and never holds more device memory than its budget.

mod common;

use lamino::array::Residency;
use lamino::input::projections_from_scan;
use lamino::operator::OperatorOptions;
use lamino::plan::{plan, Array, Budgets, MemoryPlan, Mode, PlanError};
use lamino::recon::{Projections, Reconstructor};
use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};
use lamino::solver::{AdmmParams, AdmmSolver};
use std::path::Path;

fn projections(size: usize) -> Projections {
    let sim = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size,
        angles: size,
        tilt_deg: 30.0,
        photons: Some(1e5),
        seed: 2,
        rotation_axis: None,
    })
    .unwrap();
    projections_from_scan(std::path::Path::new("simulated"), sim.scan, None)
        .unwrap()
        .projections
}

fn budgets(device: u64, host: u64, scratch: Option<&std::path::Path>) -> Budgets {
    Budgets::given(device, host, scratch.map(Into::into))
}

/// Runs the solver under `plan` on a fresh context whose device budget is the plan's: from the
/// checkpoint `resume` if given, writing the checkpoint `save` after `save.0` iterations if
/// given. Returns the volume and the peak device bytes.
fn run(
    p: &Projections,
    params: AdmmParams,
    plan: &MemoryPlan,
    resume: Option<&Path>,
    save: Option<(usize, &Path)>,
) -> (Vec<f32>, u64) {
    let ctx = common::new_context();
    ctx.set_device_budget(plan.budgets.device_bytes.min(u64::MAX / 2));
    ctx.reset_peak_device_bytes();
    let mut solver =
        AdmmSolver::with_plan(&ctx, p.geometry(), &p.operator_data(), params, plan).unwrap();
    if let Some(path) = resume {
        solver.resume(&ctx, path).unwrap();
    }
    while solver.stop_reason().is_none() {
        solver.step(&ctx).unwrap();
        if let Some((at, path)) = save {
            if solver.iterations_done() == at {
                solver.write_checkpoint(&ctx, path).unwrap();
            }
        }
    }
    (solver.volume(&ctx).unwrap(), ctx.peak_device_bytes())
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Streaming at 1/8 of the in-core device need, with scratch files, against in-core: the same
/// bits, the peak within the budget; with `checkpoints`, a checkpoint of each mode resumed in
/// the other ends on the same bits too.
fn check_streaming_matches_in_core(
    size: usize,
    iterations: usize,
    checkpoints: bool,
    fraction: u64,
) {
    let p = projections(size);
    let g = p.geometry();
    let params = AdmmParams::exactly(iterations);
    let ctx = common::ctx();
    let in_core = MemoryPlan::in_core(ctx, g, &params, &OperatorOptions::default()).unwrap();
    assert_eq!(in_core.mode, Mode::InCore);
    let scratch = tempfile::tempdir().unwrap();
    let need = in_core.device_bytes;
    let host_arrays: u64 = Array::BY_TRAFFIC.iter().map(|a| a.layout(g).bytes()).sum();
    // 1/8 of the in-core need on the device; a host budget of a third of the arrays, so the
    // least used go to scratch files.
    let streaming = plan(
        ctx,
        g,
        &params,
        &OperatorOptions::default(),
        &budgets(need / fraction, host_arrays / 3, Some(scratch.path())),
    )
    .unwrap();
    eprintln!(
        "{size}^3: in-core {need} bytes; streaming plan: {} device, {} host, {} scratch bytes, \
         staging {} words, chunks {:?}, {} bytes moved per iteration",
        streaming.device_bytes,
        streaming.host_bytes,
        streaming.scratch_bytes,
        streaming.staging_words,
        streaming.chunks,
        streaming.bytes_moved_per_iteration
    );
    assert_eq!(streaming.mode, Mode::Streaming);
    assert_ne!(streaming.u2_tables, Residency::Device, "U2 tables stream");
    assert!(
        streaming.scratch_bytes > 0,
        "the host budget must force scratch"
    );
    assert!(
        streaming
            .arrays
            .iter()
            .any(|a| matches!(a.residency, Residency::Scratch(_))),
        "{:?}",
        streaming.arrays
    );
    let dir = tempfile::tempdir().unwrap();
    let from_in_core = dir.path().join("in-core.ckpt");
    let from_streaming = dir.path().join("streaming.ckpt");
    let (save_in_core, save_streaming) = match checkpoints {
        true => (
            Some((1, from_in_core.as_path())),
            Some((1, from_streaming.as_path())),
        ),
        false => (None, None),
    };
    // The in-core plan with the streaming plan's chunks: the same work in the same order, so
    // the same bits. The in-core default (whole arrays as chunks) rounds differently in the FFT
    // batches, within f32 rounding (measured and bounded below).
    let same_chunks = MemoryPlan::in_core(ctx, g, &params, &streaming.operator).unwrap();
    let (reference, in_core_peak) = run(&p, params, &same_chunks, None, save_in_core);
    let (streamed, peak) = run(&p, params, &streaming, None, save_streaming);
    let (whole, _) = run(&p, params, &in_core, None, None);
    let chunking = lamino::metrics::rel_l2(&streamed, &whole);
    eprintln!(
        "device peak: in-core {in_core_peak}, streaming {peak} (budget {}); streaming against \
         the in-core default chunking: rel. L2 {chunking:.2e}",
        need / fraction
    );
    assert!(
        peak <= need / fraction,
        "peak {peak} above the budget {}",
        need / fraction
    );
    assert!(
        same_bits(&reference, &streamed),
        "streaming changed the volume"
    );
    assert!(
        chunking <= 1e-5,
        "chunking changed the volume by {chunking}"
    );
    assert_eq!(
        std::fs::read(&from_in_core).ok(),
        std::fs::read(&from_streaming).ok(),
        "the checkpoints of the two modes differ"
    );
    if checkpoints {
        let (resumed, _) = run(&p, params, &streaming, Some(&from_in_core), None);
        assert!(
            same_bits(&reference, &resumed),
            "in-core checkpoint resumed streaming"
        );
        let (resumed, _) = run(&p, params, &same_chunks, Some(&from_streaming), None);
        assert!(
            same_bits(&reference, &resumed),
            "streaming checkpoint resumed in-core"
        );
    }
}

#[test]
fn streaming_at_an_eighth_of_the_device_gives_the_in_core_bits_and_checkpoints_at_32() {
    check_streaming_matches_in_core(32, 3, true, 8);
}

/// The U2 tables (16 bytes per data point) no longer sit whole on the device: 256^3 at 256
/// angles plans within 256 MiB, a budget below the tables alone.
#[test]
fn a_256_cube_plans_within_256_mib_with_streamed_tables() {
    let g = lamino::operator::Geometry::cube(256, 256, std::f64::consts::FRAC_PI_2 + 0.5);
    let budget = 256 << 20;
    let p = plan(
        common::ctx(),
        &g,
        &AdmmParams::default(),
        &OperatorOptions::default(),
        &budgets(budget, u64::MAX, None),
    )
    .unwrap();
    eprintln!("{p}");
    assert_eq!(p.mode, Mode::Streaming);
    assert_eq!(p.u2_tables, Residency::Host);
    assert!(p.u2_table_bytes > budget, "{}", p.u2_table_bytes);
    assert!(p.device_bytes <= budget, "{} > {budget}", p.device_bytes);
}

#[test]
fn streaming_at_an_eighth_of_the_device_gives_the_in_core_bits_at_64() {
    check_streaming_matches_in_core(64, 1, false, 8);
}

/// The library's budgets: a reconstruction that does not fit streams (the report says so, with
/// the peak within the budget) and gives the in-core volume; scratch files leave nothing behind.
#[test]
fn reconstructor_budgets_stream_and_report_the_plan() {
    let p = projections(16);
    let params = AdmmParams::exactly(2);
    let in_core = Reconstructor::new(&common::new_context())
        .params(params)
        .run(&p)
        .unwrap();
    assert_eq!(in_core.plan.mode, Mode::InCore);
    let budget = in_core.plan.device_bytes / 3;
    let scratch = tempfile::tempdir().unwrap();
    let streamed = Reconstructor::new(&common::new_context())
        .params(params)
        .device_memory_budget(budget)
        .host_memory_budget(1 << 10)
        .scratch_dir(scratch.path().into())
        .run(&p)
        .unwrap();
    assert_eq!(streamed.plan.mode, Mode::Streaming);
    assert!(streamed.plan.scratch_bytes > 0);
    assert!(
        streamed.peak_device_bytes <= budget,
        "{} > {budget}",
        streamed.peak_device_bytes
    );
    assert!(same_bits(&in_core.volume, &streamed.volume));
    let report = serde_json::to_value(&streamed).unwrap();
    assert_eq!(report["plan"]["mode"], "streaming");
    assert!(report["peak_device_bytes"].as_u64().unwrap() > 0);
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}

#[test]
fn budgets_too_small_and_hosts_too_full_are_refused_with_sizes() {
    let p = projections(16);
    let g = p.geometry();
    let params = AdmmParams::default();
    let ctx = common::ctx();
    let o = OperatorOptions::default();
    let err = plan(ctx, g, &params, &o, &budgets(4096, u64::MAX, None)).unwrap_err();
    assert!(matches!(err, PlanError::DeviceBudget { .. }), "{err}");
    assert!(
        err.to_string().contains("too small for even one chunk"),
        "{err}"
    );
    let err = plan(ctx, g, &params, &o, &budgets(600_000, 1000, None)).unwrap_err();
    assert!(matches!(err, PlanError::HostBudget { .. }), "{err}");
    let file = tempfile::NamedTempFile::new().unwrap();
    let err = plan(
        ctx,
        g,
        &params,
        &o,
        &budgets(600_000, 1000, Some(file.path())),
    )
    .unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
    // The solver's transient copy of the projections follows the host budget too.
    let dir = tempfile::tempdir().unwrap();
    let scratch = plan(
        ctx,
        g,
        &params,
        &o,
        &budgets(600_000, 1000, Some(dir.path())),
    )
    .unwrap();
    assert_eq!(
        scratch.projections_residency(g),
        Residency::Scratch(dir.path().into())
    );
    let roomy = plan(ctx, g, &params, &o, &budgets(600_000, u64::MAX, None)).unwrap();
    assert_eq!(roomy.projections_residency(g), Residency::Host);
    let big = plan(ctx, g, &params, &o, &budgets(u64::MAX / 2, u64::MAX, None)).unwrap();
    assert_eq!(big.mode, Mode::InCore);
}

/// The plan's bytes moved per outer iteration are the bytes the context counts moving (uploads
/// and downloads) over one streaming iteration at 32^3, for both inner solvers: every host
/// array's accesses, the halo planes of the gradient passes and the U2 table slices. What the
/// plan leaves out is the reductions' readback, a few hundred bytes.
#[test]
fn the_plan_predicts_the_bytes_moved_per_iteration() {
    use lamino::solver::InnerSolver;
    let p = projections(32);
    let g = p.geometry();
    // At 1/2 most arrays and the U2 tables stay on the device; at 1/8 the two most used arrays;
    // at 1/12 none.
    for (inner, fraction) in [
        (InnerSolver::ConjugateGradient, 2),
        (InnerSolver::ConjugateGradient, 8),
        (InnerSolver::ConjugateGradient, 12),
        (InnerSolver::DaiYuan { step: 1.0 }, 8),
        (InnerSolver::DaiYuan { step: 1.0 }, 12),
    ] {
        let params = AdmmParams {
            inner,
            ..AdmmParams::exactly(2)
        };
        let ctx = common::new_context();
        let in_core = MemoryPlan::in_core(&ctx, g, &params, &OperatorOptions::default()).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let host_arrays: u64 = Array::BY_TRAFFIC.iter().map(|a| a.layout(g).bytes()).sum();
        let streaming = plan(
            &ctx,
            g,
            &params,
            &OperatorOptions::default(),
            &budgets(
                in_core.device_bytes / fraction,
                host_arrays / 3,
                Some(scratch.path()),
            ),
        )
        .unwrap();
        assert_eq!(streaming.mode, Mode::Streaming);
        assert_eq!(
            streaming.u2_tables == Residency::Device,
            fraction == 2,
            "U2 tables {:?} at 1/{fraction}",
            streaming.u2_tables
        );
        ctx.set_device_budget(streaming.budgets.device_bytes);
        let mut solver =
            AdmmSolver::with_plan(&ctx, g, &p.operator_data(), params, &streaming).unwrap();
        solver.step(&ctx).unwrap();
        let before = ctx.traffic();
        solver.step(&ctx).unwrap();
        let t = ctx.traffic() - before;
        let measured = t.bytes_uploaded + t.bytes_downloaded;
        let planned = streaming.bytes_moved_per_iteration;
        eprintln!(
            "{inner:?}, 1/{fraction} of the device, {} arrays resident, U2 tables {:?}: planned \
             {planned} bytes, measured {measured} bytes per iteration",
            streaming.resident_arrays(),
            streaming.u2_tables
        );
        assert!(
            (measured as f64 - planned as f64).abs() <= 1e-3 * planned as f64,
            "{inner:?}: planned {planned}, measured {measured}"
        );
        assert!(ctx.peak_device_bytes() <= streaming.budgets.device_bytes);
    }
}
