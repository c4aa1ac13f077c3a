//! Volumes larger than the device: the memory planner and the streaming mode. A reconstruction
//! forced to stream (device budget 1/8 of the in-core need, host budget that pushes arrays to
//! scratch files) gives the bits of the in-core run with the same chunks (whose operator keeps its
//! U2 tables resident, where streaming uploads a chunk's slice of them), agrees with the default
//! in-core chunking to f32 rounding, and never holds more device memory than its budget.

mod common;

use lamino::Tilt;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the heap bytes this thread holds, and their peak, to measure what writing a volume
/// holds in host memory.
struct CountingAllocator;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn count(delta: i64) {
    // `try_with`: the counters may be gone while the thread ends.
    let _ = LIVE.try_with(|live| {
        live.set(live.get() + delta);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
    });
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as i64);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as i64));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as i64 - layout.size() as i64);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Runs `f` and returns its result with the most heap bytes this thread held during it beyond
/// what it held before.
fn peak_heap_during<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(before));
    let out = f();
    (out, (PEAK.with(Cell::get) - before).max(0) as u64)
}

use lamino::array::Residency;
use lamino::geometry::Geometry;
use lamino::io::{SlabVisitor, VolumeSlabs};
use lamino::operator::OperatorOptions;
use lamino::params::AdmmParams;
use lamino::plan::{plan, Array, Budgets, MemoryPlan, Mode, NormalLoop, PlanError};
use lamino::recon::Reconstructor;
use lamino::scan::Projections;
use lamino::solver::AdmmSolver;
use std::path::Path;

fn projections(size: usize) -> Projections {
    common::chip_projections(size, 2)
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

/// The in-core plan's device need with whole arrays as chunks (the most an in-core run of `g`
/// takes): the budgets below are fractions of it.
fn whole_chunk_need(ctx: &lamino::gpu::GpuContext, g: &Geometry, params: &AdmmParams) -> u64 {
    let whole = OperatorOptions {
        max_chunk_y: Some(g.n1),
        max_chunk_rows: Some(g.deth),
        max_chunk_angles: Some(g.ntheta()),
        ..OperatorOptions::default()
    };
    MemoryPlan::in_core(ctx, g, params, &whole)
        .unwrap()
        .device_bytes
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
    let need = whole_chunk_need(ctx, g, &params);
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

/// The U2 tables (about 13 bytes per data point, 208 MiB) no longer sit whole on the device:
/// 256^3 at 256 angles plans within 192 MiB, a budget below the tables alone.
#[test]
fn a_256_cube_plans_within_192_mib_with_streamed_tables() {
    let g = lamino::geometry::Geometry::cube(256, 256, Tilt::from_degrees(30.0));
    let budget = 192 << 20;
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

/// 2048^3 at 2048 angles plans on this device's limits (a U2 grid row of 128 MiB fills
/// lavapipe's binding exactly) within 8 GiB: the reductions hold one window's partial sums, not
/// 1/256 of the array per call site (6.4 GiB); what exceeds 512 GiB of host goes to scratch.
#[test]
fn a_2048_cube_plans_within_8_gib_on_paper() {
    let g = lamino::geometry::Geometry::cube(2048, 2048, Tilt::from_degrees(30.0));
    let budget = 8 << 30;
    let p = lamino::plan::plan_on_paper(
        common::ctx(),
        &g,
        &AdmmParams::default(),
        &OperatorOptions::default(),
        &budgets(budget, 1 << 39, Some(std::path::Path::new("nvme"))),
        NormalLoop::Gridding,
    )
    .unwrap();
    eprintln!("{p}");
    assert_eq!(p.mode, Mode::Streaming);
    assert!(p.device_bytes <= budget, "{} > {budget}", p.device_bytes);
    assert!(p.host_bytes <= 1 << 39, "{}", p.host_bytes);
    assert!(p.scratch_bytes > 0, "512 GiB of host cannot hold the state");
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
    let budget = whole_chunk_need(&common::new_context(), p.geometry(), &params) / 3;
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

/// Left to the planner (`AdjointGridding::Auto`), U2* tabulates its weights where its records
/// (80 bytes per data point of a chunk) cost the plan nothing: in-core with room to spare; at a
/// budget where the records would not fit beside even the smallest streaming plan, it evaluates
/// them instead of refusing the run.
#[test]
fn the_planner_tabulates_the_u2_adjoints_weights_only_where_they_cost_the_plan_nothing() {
    use lamino::operator::AdjointGridding;
    let p = projections(32);
    let g = p.geometry();
    let params = AdmmParams::exactly(2);
    let ctx = common::new_context();
    let way = |adjoint_gridding| OperatorOptions {
        adjoint_gridding,
        ..OperatorOptions::default()
    };
    let roomy = plan(
        &ctx,
        g,
        &params,
        &way(AdjointGridding::Auto),
        &budgets(u64::MAX / 2, u64::MAX, None),
    )
    .unwrap();
    assert_eq!(roomy.mode, Mode::InCore);
    assert_eq!(roomy.operator.adjoint_gridding, AdjointGridding::Tabulated);
    let tight = budgets(whole_chunk_need(&ctx, g, &params) / 12, u64::MAX, None);
    let refused = plan(&ctx, g, &params, &way(AdjointGridding::Tabulated), &tight);
    assert!(
        matches!(refused, Err(PlanError::DeviceBudget { .. })),
        "{refused:?}"
    );
    let evaluated = plan(&ctx, g, &params, &way(AdjointGridding::Evaluated), &tight).unwrap();
    let auto = plan(&ctx, g, &params, &way(AdjointGridding::Auto), &tight).unwrap();
    assert_eq!(auto.operator, evaluated.operator);
    assert_eq!(auto.device_bytes, evaluated.device_bytes);
}

/// The plan's bytes moved per outer iteration are the bytes the context counts moving (uploads
/// and downloads) over one streaming iteration at 32^3, for both inner solvers and both normal
/// operators: every host array's accesses, the halo planes of the gradient passes and the U2
/// table slices. What the plan leaves out is the reductions' readback, a few hundred bytes.
#[test]
fn the_plan_predicts_the_bytes_moved_per_iteration() {
    use lamino::params::{InnerSolver, NormalOperator};
    use lamino::plan::{plan_for_loop, toeplitz_need_bytes};
    use InnerSolver::{ConjugateGradient, DaiYuan};
    use NormalLoop::{Gridding, Toeplitz};
    let p = projections(32);
    let g = p.geometry();
    // Plain ADMM (4 CG steps): at 1/2 most arrays and the U2 tables stay on the device; at 1/8
    // the two most used arrays; at 1/12 none. The default (over-relaxed: one more pass over the
    // gradient arrays, 2 CG steps) at 1/8 and 1/12.
    let plain = AdmmParams {
        outer_iterations: 2,
        convergence: None,
        ..AdmmParams::plain()
    };
    // The Toeplitz loop (the default CG) with as much room for the arrays beside its own memory
    // as gridding has at 1/8 and 1/12: the data-space arrays and the spectrum go last, the U2
    // tables are not read.
    let default = AdmmParams::exactly(2);
    let dai_yuan = DaiYuan { step: 1.0 };
    for (inner, fraction, base, normal) in [
        (ConjugateGradient, 2, &plain, Gridding),
        (ConjugateGradient, 8, &plain, Gridding),
        (ConjugateGradient, 12, &plain, Gridding),
        (dai_yuan, 8, &plain, Gridding),
        (dai_yuan, 12, &plain, Gridding),
        (ConjugateGradient, 8, &default, Gridding),
        (ConjugateGradient, 12, &default, Gridding),
        (ConjugateGradient, 8, &default, Toeplitz),
        (ConjugateGradient, 12, &default, Toeplitz),
    ] {
        let params = AdmmParams { inner, ..*base };
        let ctx = common::new_context();
        let scratch = tempfile::tempdir().unwrap();
        let host_arrays: u64 = Array::BY_TRAFFIC.iter().map(|a| a.layout(g).bytes()).sum();
        let loop_bytes = match normal {
            Gridding => 0,
            Toeplitz => toeplitz_need_bytes(&ctx, g, false).unwrap(),
        };
        let streaming = plan_for_loop(
            &ctx,
            g,
            &params,
            &OperatorOptions::default(),
            &budgets(
                loop_bytes + whole_chunk_need(&ctx, g, &params) / fraction,
                host_arrays / 3,
                Some(scratch.path()),
            ),
            normal,
        )
        .unwrap();
        assert_eq!(streaming.mode, Mode::Streaming);
        assert_eq!(streaming.inner_loop, normal);
        assert_eq!(
            streaming.u2_tables == Residency::Device,
            fraction == 2,
            "U2 tables {:?} at 1/{fraction}",
            streaming.u2_tables
        );
        ctx.set_device_budget(streaming.budgets.device_bytes);
        let mut solver =
            AdmmSolver::with_plan(&ctx, g, &p.operator_data(), params, &streaming).unwrap();
        if normal == Toeplitz {
            let choice = solver
                .set_normal_operator(&ctx, NormalOperator::Toeplitz, false)
                .unwrap();
            assert_eq!(choice.used, "toeplitz");
            for a in [Array::Ap, Array::Au, Array::DHat, Array::Spectrum] {
                assert_eq!(
                    streaming
                        .arrays
                        .iter()
                        .find(|x| x.array == a)
                        .unwrap()
                        .accesses_per_iteration,
                    0,
                    "{a:?}"
                );
            }
        }
        solver.step(&ctx).unwrap();
        let before = ctx.traffic();
        solver.step(&ctx).unwrap();
        let t = ctx.traffic() - before;
        let measured = t.bytes_uploaded + t.bytes_downloaded;
        let planned = streaming.bytes_moved_per_iteration;
        eprintln!(
            "{inner:?} by {normal:?}, 1/{fraction} of the device, {} arrays resident, U2 tables \
             {:?}: planned {planned} bytes, measured {measured} bytes per iteration ({} \
             submissions, {} waits)",
            streaming.resident_arrays(),
            streaming.u2_tables,
            t.submissions,
            t.waits
        );
        assert!(
            (measured as f64 - planned as f64).abs() <= 1e-3 * planned as f64,
            "{inner:?} by {normal:?}: planned {planned}, measured {measured}"
        );
        assert!(ctx.peak_device_bytes() <= streaming.budgets.device_bytes);
    }
}

/// The volume written from a streaming run (host budget forcing scratch files, lateral padding
/// cropped slab by slab) is the in-core run's file, bit for bit, in every format; writing it
/// holds a slab of host memory, not the volume (measured: the heap bytes this thread holds).
#[test]
fn a_streamed_volume_writes_the_in_core_files_holding_one_slab() {
    use lamino::io::{read_f32_npy, read_tiff_volume, write_volume};
    let p = projections(32);
    let params = AdmmParams::exactly(1);
    let pad = 2;
    let scratch = tempfile::tempdir().unwrap();
    let ctx = common::new_context();
    let need = Reconstructor::new(&ctx)
        .params(params)
        .lateral_padding(pad)
        .plan(p.geometry())
        .unwrap()
        .device_bytes;
    let streaming = || {
        Reconstructor::new(&ctx)
            .params(params)
            .lateral_padding(pad)
            .device_memory_budget(need / 3)
            .host_memory_budget(1 << 10)
            .scratch_dir(scratch.path().into())
    };
    // In-core with the streaming plan's chunks: the same bits (see above).
    let chunks = streaming().plan(p.geometry()).unwrap().operator;
    let in_core = Reconstructor::new(&common::new_context())
        .params(params)
        .lateral_padding(pad)
        .operator_options(chunks)
        .run(&p)
        .unwrap();
    assert_eq!(in_core.plan.mode, Mode::InCore);
    let streamed = streaming().solve(&p).unwrap().with_slab_planes(3);
    assert_eq!(streamed.report.plan.mode, Mode::Streaming);
    assert!(streamed.report.plan.scratch_bytes > 0);
    assert_eq!(streamed.shape(), [32, 32, 32]);
    let dir = tempfile::tempdir().unwrap();
    let volume_bytes = 32 * 32 * 32 * 4;
    // Three padded slices read, three cropped ones handed to the writer.
    let slab_bytes = 3 * (32 + 2 * pad as u64).pow(2) * 4 + 3 * 32 * 32 * 4;
    for ext in ["tif", "h5", "npy"] {
        let whole = dir.path().join(format!("in-core.{ext}"));
        let (written, whole_peak) = peak_heap_during(|| write_volume(&whole, &in_core));
        written.unwrap();
        let slabs = dir.path().join(format!("streamed.{ext}"));
        let (written, peak) = peak_heap_during(|| write_volume(&slabs, &streamed));
        written.unwrap();
        eprintln!(
            "{ext}: writing held at most {peak} heap bytes from the streaming run (slab \
             {slab_bytes}, volume {volume_bytes}), {whole_peak} from the in-core volume"
        );
        assert!(
            std::fs::read(&whole).unwrap() == std::fs::read(&slabs).unwrap(),
            "{ext}: the streamed file differs from the in-core one"
        );
        // One slab, the writer's buffer (8 KiB) and one encoded slice (4 KiB, twice for TIFF).
        assert!(
            peak <= slab_bytes + 24 * 1024,
            "{ext}: writing held {peak} bytes, more than a slab ({slab_bytes}) and the writer's buffers"
        );
        assert!(peak < volume_bytes / 2, "{ext}: {peak} bytes held");
    }
    let tif = read_tiff_volume(&dir.path().join("streamed.tif")).unwrap();
    assert_eq!(tif.shape, [32, 32, 32]);
    assert!(same_bits(&tif.values, &in_core.volume));
    let npy = read_f32_npy(&dir.path().join("streamed.npy")).unwrap();
    assert_eq!(npy.shape(), &[32, 32, 32]);
    assert!(same_bits(npy.as_slice().unwrap(), &in_core.volume));
    let whole = streamed.into_reconstruction().unwrap();
    assert!(same_bits(&whole.volume, &in_core.volume));
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}

/// A volume source that fails after its first slab (a device lost, a scratch file unreadable).
struct FailsAfterOneSlab;

impl VolumeSlabs for FailsAfterOneSlab {
    fn shape(&self) -> [usize; 3] {
        [4, 3, 2]
    }

    fn visit_slabs(&self, visit: &mut SlabVisitor<'_>) -> Result<(), String> {
        visit(0, &[1.5; 6])?;
        Err("the device was lost".into())
    }
}

/// A write that fails half way leaves no file under the final name, keeps an earlier file as it
/// was, and leaves no temporary file behind, in every format.
#[test]
fn a_volume_write_failing_mid_way_damages_nothing() {
    use lamino::io::write_volume;
    let dir = tempfile::tempdir().unwrap();
    for ext in ["tif", "h5", "npy"] {
        let fresh = dir.path().join(format!("fresh.{ext}"));
        let err = write_volume(&fresh, &FailsAfterOneSlab).unwrap_err();
        assert!(err.to_string().contains("the device was lost"), "{err}");
        assert!(err.to_string().contains(&format!("fresh.{ext}")), "{err}");
        assert!(
            !fresh.exists(),
            "{ext}: a partial file under the final name"
        );
        let earlier = dir.path().join(format!("earlier.{ext}"));
        std::fs::write(&earlier, b"an earlier result").unwrap();
        write_volume(&earlier, &FailsAfterOneSlab).unwrap_err();
        assert_eq!(std::fs::read(&earlier).unwrap(), b"an earlier result");
    }
    // Several files written in one pass: none of them appears.
    let (tif, h5) = (dir.path().join("both.tif"), dir.path().join("both.h5"));
    let files = [
        (tif.as_path(), lamino::io::StackFormat::Tiff),
        (h5.as_path(), lamino::io::StackFormat::Hdf5),
    ];
    let err = lamino::io::write_volume_files(&files, &FailsAfterOneSlab).unwrap_err();
    assert!(err.to_string().contains("the device was lost"), "{err}");
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["earlier.h5", "earlier.npy", "earlier.tif"]);
}

/// Memoization in streaming mode: forced to stream (a third of the in-core device need, the
/// arrays in scratch files) with the memo cache reserved out of the budgets, `mlr` gives the bits
/// of an in-core run with the same chunks and the same cache contents (its decisions depend only
/// on the chunks' keys, which are the same bits, and on which entries exist); `certified` decides on the host in f64 (in-core:
/// on the device in f32), so the two agree to the certificate, not bit for bit. Both reuse
/// chunks, keep the device peak within the budget, and a reused chunk crosses neither way (keyed
/// and decided on the host, formed on the host from host copies or on the device from its
/// slots), so the run uploads and downloads less than without the memo.
#[test]
fn memo_streams_to_the_in_core_result_within_the_device_budget() {
    use lamino::memo::{MemoOptions, MemoPolicy};
    let p = projections(32);
    let params = AdmmParams::exactly(3);
    for policy in ["mlr:0.5", "certified:0.5"] {
        let memo = MemoOptions {
            policy: policy.parse::<MemoPolicy>().unwrap(),
            device_bytes: 8 << 20,
            host_bytes: 32 << 20,
            ..MemoOptions::DEFAULT
        };
        let ctx = common::new_context();
        let in_core_need = Reconstructor::new(&ctx)
            .params(params)
            .memo(memo)
            .plan(p.geometry())
            .unwrap()
            .device_bytes;
        let budget = (in_core_need - memo.device_bytes) / 3 + memo.device_bytes;
        let scratch = tempfile::tempdir().unwrap();
        let streaming = || {
            Reconstructor::new(&ctx)
                .params(params)
                .memo(memo)
                .device_memory_budget(budget)
                .host_memory_budget(memo.host_bytes + (1 << 10))
                .scratch_dir(scratch.path().into())
        };
        let plan = streaming().plan(p.geometry()).unwrap();
        assert_eq!(plan.mode, Mode::Streaming);
        assert!(plan.scratch_bytes > 0);
        assert!(plan.device_bytes <= budget);
        let before = ctx.traffic();
        let streamed = streaming().run(&p).unwrap();
        let moved = ctx.traffic() - before;
        // In streaming mode an entry moves to the host tier only with both host copies (a
        // readback would cost the transfers the streaming mode is short of); no stage here has
        // both arrays on the host, so none does, and the cache holds what an in-core run without
        // a host tier holds.
        let no_host_tier = MemoOptions {
            host_bytes: 0,
            ..memo
        };
        let in_core = Reconstructor::new(&common::new_context())
            .params(params)
            .memo(no_host_tier)
            .operator_options(plan.operator)
            .run(&p)
            .unwrap();
        assert_eq!(in_core.plan.mode, Mode::InCore);
        let (s, c) = (
            streamed.memo_stats.clone().unwrap(),
            in_core.memo_stats.clone().unwrap(),
        );
        eprintln!(
            "{policy}: in-core need {in_core_need} bytes, streaming budget {budget} (memo \
             {}), peak {}; hits {} of {} chunks streaming ({} formed on the host), {} of {} \
             in-core",
            memo.device_bytes,
            streamed.peak_device_bytes,
            s.hits,
            s.chunks,
            s.formed_on_host,
            c.hits,
            c.chunks
        );
        for st in s.stages.iter().chain(&c.stages) {
            eprintln!(
                "  {:?}: {} hits of {} chunks, {} formed on the host, {} slots, waves of {}, \
                 {} demoted, {} dropped, disabled: {:?}",
                st.stage,
                st.hits,
                st.chunks,
                st.formed_on_host,
                st.slots,
                st.wave,
                st.demoted,
                st.dropped,
                st.disabled
            );
        }
        assert!(s.hits > 0, "{policy}: nothing was reused");
        assert!(
            s.formed_on_host > 0,
            "{policy}: nothing was formed on the host"
        );
        // The same plan without the memo layer moves every chunk's input and output.
        let plain_ctx = common::new_context();
        let plain = Reconstructor::new(&plain_ctx)
            .params(params)
            .operator_options(plan.operator)
            .device_memory_budget(budget - memo.device_bytes)
            .host_memory_budget(1 << 10)
            .scratch_dir(scratch.path().into())
            .run(&p)
            .unwrap();
        assert_eq!(plain.plan.chunks, plan.chunks);
        let plain_moved = plain_ctx.traffic();
        eprintln!(
            "  bytes uploaded / downloaded: {} / {} with the memo, {} / {} without",
            moved.bytes_uploaded,
            moved.bytes_downloaded,
            plain_moved.bytes_uploaded,
            plain_moved.bytes_downloaded
        );
        assert!(
            moved.bytes_uploaded < plain_moved.bytes_uploaded,
            "{policy}"
        );
        assert!(
            moved.bytes_downloaded < plain_moved.bytes_downloaded,
            "{policy}"
        );
        if policy.starts_with("mlr") {
            assert_eq!((s.hits, s.chunks), (c.hits, c.chunks), "{policy}");
            assert!(
                same_bits(&streamed.volume, &in_core.volume),
                "{policy}: streaming changed the volume"
            );
        } else {
            let difference = lamino::metrics::rel_l2(&streamed.volume, &in_core.volume);
            eprintln!("  relative L2 difference to the in-core run: {difference:.3e}");
            // NaN fails this comparison.
            // Measured: 7.6e-7 (the same reuses, coefficients from f64 instead of f32 sums).
            assert!(difference <= 1e-4, "{policy}: {difference}");
        }
        assert!(
            streamed.peak_device_bytes <= budget,
            "{policy}: peak {} above the budget {budget}",
            streamed.peak_device_bytes
        );
        assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
    }
}

/// The host waits of streamed stage applications (host arrays in and out, 1 to 16 chunks a
/// stage): only where a readback buffer is about to be reused whose download has not landed, or
/// where a stage reads a block of what the previous stage is still writing (U2 reads every U1
/// chunk's output, F every U2 chunk's), never once per chunk. With readback room for every
/// chunk the count does not grow with the chunks; with two blocks' room (the planner's) it is
/// at most the reuses. The results are the device-resident application's, bit for bit.
#[test]
fn streamed_stages_wait_only_to_reuse_a_buffer_or_read_unfinished_blocks() {
    use lamino::array::{Field, Scalars, Staging};
    use lamino::geometry::Geometry;
    use lamino::operator::{Apply, LaminoOperator, Sink, Source, Stage};
    use std::sync::Arc;
    let g = Geometry::cube(16, 16, Tilt::from_degrees(20.0));
    for chunk in [16usize, 4, 1] {
        // A fresh context: its readback pool holds only this chunking's buffers.
        let ctx = common::new_context();
        let scalars = Scalars::new(&ctx, 1, 1).unwrap();
        let options = OperatorOptions {
            max_chunk_y: Some(chunk),
            max_chunk_rows: Some(chunk),
            max_chunk_angles: Some(chunk),
            ..OperatorOptions::default()
        };
        let op = LaminoOperator::new(&ctx, &g, &options).unwrap();
        // Every block of every stage at this chunking: chunk planes of 16 x 16 complex values.
        let block_words = chunk * 16 * 16 * 2;
        let staging = Arc::new(Staging::new(&ctx, block_words).unwrap());
        let chunks = |what: Apply| -> usize {
            let (u1, u2) = (
                op.chunk_count(Stage::Usfft1d),
                op.chunk_count(Stage::Usfft2d),
            );
            match what {
                Apply::Usfft1d => u1,
                Apply::Usfft2d => u2,
                _ => u1 + u2 + g.ntheta().div_ceil(chunk),
            }
        };
        for (what, boundaries) in [
            (Apply::Usfft1d, 0),
            (Apply::Usfft2d, 0),
            (Apply::Forward, 2),
        ] {
            let (from, to) = what.spaces();
            let input: Vec<f32> = (0..from.layout(&g, 2).words())
                .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
                .collect();
            let expected = {
                let x = Field::zeros(&ctx, "x", from.layout(&g, 2)).unwrap();
                let y = Field::zeros(&ctx, "y", to.layout(&g, 2)).unwrap();
                x.write(&ctx, &input).unwrap();
                let app = op
                    .application(
                        &ctx,
                        &scalars,
                        None,
                        what,
                        Source::Complex(&x),
                        Sink::Complex(&y),
                    )
                    .unwrap();
                op.run(&ctx, &app).unwrap();
                y.read(&ctx).unwrap()
            };
            // Readback room for every chunk, then for two blocks.
            for (room, reuses) in [(chunks(what), 0), (2, chunks(what).saturating_sub(2))] {
                ctx.set_readback_pool_bytes((room * block_words * 4) as u64);
                let x = Field::new(&ctx, "x", from.layout(&g, 2), &Residency::Host).unwrap();
                let y = Field::new(&ctx, "y", to.layout(&g, 2), &Residency::Host).unwrap();
                x.write(&ctx, &input).unwrap();
                let app = op
                    .application(
                        &ctx,
                        &scalars,
                        Some(&staging),
                        what,
                        Source::Complex(&x),
                        Sink::Complex(&y),
                    )
                    .unwrap();
                let before = ctx.traffic();
                let mut rec = ctx.recorder("streamed stages");
                op.record(&ctx, &mut rec, &app).unwrap();
                ctx.submit(rec).unwrap();
                let t = ctx.traffic() - before;
                eprintln!(
                    "{what:?}, {} chunks, readback room for {room}: {} waits, {} submissions",
                    chunks(what),
                    t.waits,
                    t.submissions
                );
                assert!(
                    t.waits <= (boundaries + reuses) as u64,
                    "{what:?} in {} chunks, room for {room}: {} waits",
                    chunks(what),
                    t.waits
                );
                assert!(
                    same_bits(&y.read(&ctx).unwrap(), &expected),
                    "{what:?} in {chunk}s"
                );
            }
        }
    }
}

/// A context reused for a budgeted run after an in-core one: what the first run left pooled on
/// the context (its FFT workspace, its readback buffers, the staging buffer its volume was read
/// through) is let go, not counted against the second run's budget (before, the second run was
/// refused at 52 KB over its 0.9 MB budget).
#[test]
fn a_budgeted_run_after_an_in_core_one_on_the_same_context_keeps_its_budget() {
    let p = projections(32);
    let params = AdmmParams::exactly(1);
    let ctx = common::new_context();
    let need = whole_chunk_need(&ctx, p.geometry(), &params);
    let in_core = Reconstructor::new(&ctx).params(params).run(&p).unwrap();
    assert_eq!(in_core.plan.mode, Mode::InCore);
    let budget = need / 8;
    let streamed = Reconstructor::new(&ctx)
        .params(params)
        .device_memory_budget(budget)
        .run(&p)
        .unwrap();
    assert_eq!(streamed.plan.mode, Mode::Streaming);
    assert!(
        streamed.peak_device_bytes <= budget,
        "peak {} above the budget {budget}",
        streamed.peak_device_bytes
    );
    assert!(same_bits(&streamed.volume, &in_core.volume));
}

/// The Toeplitz inner loop on a streaming plan (u on the host: u and p copied into the
/// convolution's input on the device): the bits of the in-core Toeplitz run with the same
/// chunks, within the plan's budget and the loop's own memory. Through the reconstructor,
/// `--normal-operator toeplitz` sets the loop's memory aside before placing the arrays, so a
/// budget that streams still runs it.
#[test]
fn the_toeplitz_loop_streams_to_the_in_core_bits() {
    use lamino::params::NormalOperator;
    let p = projections(32);
    let g = p.geometry();
    let params = AdmmParams::exactly(4);
    let ctx = common::ctx();
    let need = whole_chunk_need(ctx, g, &params);
    let streaming = plan(
        ctx,
        g,
        &params,
        &OperatorOptions::default(),
        &budgets(need / 8, u64::MAX, None),
    )
    .unwrap();
    assert_eq!(streaming.mode, Mode::Streaming);
    // u on the host: the convolution reads a device copy of u and of p.
    assert_ne!(*streaming.residency(Array::U), Residency::Device);
    let toeplitz = |plan: &MemoryPlan| {
        let ctx = common::new_context();
        let reserve = lamino::plan::toeplitz_need_bytes(&ctx, g, false).unwrap();
        let budget = plan.budgets.device_bytes.min(u64::MAX / 2) + reserve;
        ctx.set_device_budget(budget);
        ctx.reset_peak_device_bytes();
        let mut solver = AdmmSolver::with_plan(&ctx, g, &p.operator_data(), params, plan).unwrap();
        let choice = solver
            .set_normal_operator(&ctx, NormalOperator::Toeplitz, false)
            .unwrap();
        assert_eq!(choice.used, "toeplitz");
        while solver.stop_reason().is_none() {
            solver.step(&ctx).unwrap();
        }
        let peak = ctx.peak_device_bytes();
        assert!(peak <= budget, "peak {peak} above {budget}");
        solver.volume(&ctx).unwrap()
    };
    let same_chunks = MemoryPlan::in_core(ctx, g, &params, &streaming.operator).unwrap();
    let reference = toeplitz(&same_chunks);
    assert!(
        same_bits(&reference, &toeplitz(&streaming)),
        "streaming changed the Toeplitz loop's volume"
    );
    // The reconstructor with a budget that streams: the loop's memory set aside, the arrays
    // streamed in the rest.
    let reserve = lamino::plan::toeplitz_need_bytes(ctx, g, false).unwrap();
    let budget = need / 8 + reserve;
    let run = Reconstructor::new(&common::new_context())
        .params(params)
        .device_memory_budget(budget)
        .normal_operator(NormalOperator::Toeplitz)
        .run(&p)
        .unwrap();
    assert_eq!(run.plan.mode, Mode::Streaming);
    assert_eq!(run.normal_operator.used, "toeplitz");
    assert!(
        run.peak_device_bytes <= budget,
        "{} > {budget}",
        run.peak_device_bytes
    );
    // Other chunks than the reference's: FFT batches round differently.
    let chunking = lamino::metrics::rel_l2(&run.volume, &reference);
    assert!(chunking <= 1e-5, "{chunking}");
}
