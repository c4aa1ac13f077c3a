//! Several devices in one process: the same bits as one device, with members in-core (each
//! keeping its planes on its device, moving over the bus only the blocks it exchanges) and
//! streaming, and a device that fails stops the others with its cause instead of leaving them
//! waiting.

mod common;

use lamino::distributed::OneProcess;
use lamino::gpu::GpuContext;
use lamino::gpu::GpuError;
use lamino::operator::OperatorOptions;
use lamino::params::AdmmParams;
use lamino::params::InnerSolver;
use lamino::plan::{member_plans, plan, plan_shared, Array, Budgets, MemoryPlan, Mode};
use lamino::scan::Projections;
use lamino::solver::{AdmmSolver, AdmmTeam, IterationReport, SolverError};

fn projections(size: usize) -> Projections {
    common::chip_projections(size, 3)
}

/// `count` devices opened on the same adapter.
fn devices(count: usize) -> Vec<GpuContext> {
    (0..count).map(|_| common::new_context()).collect()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The reports' terms as bits, to compare runs exactly.
fn report_bits(reports: &[IterationReport]) -> Vec<[u64; 4]> {
    reports
        .iter()
        .map(|r| {
            [
                r.lagrangian.to_bits(),
                r.primal_residual.to_bits(),
                r.dual_residual.to_bits(),
                r.change.to_bits(),
            ]
        })
        .collect()
}

fn run_one(
    p: &Projections,
    params: AdmmParams,
    plan: &MemoryPlan,
) -> (Vec<f32>, Vec<IterationReport>) {
    let ctx = common::new_context();
    let mut solver =
        AdmmSolver::with_plan(&ctx, p.geometry(), &p.operator_data(), params, plan).unwrap();
    let reports = solver.run(&ctx, |_| {}).unwrap();
    (solver.volume(&ctx).unwrap(), reports)
}

/// What a team's run did: the volume, the reports, the bytes each device uploaded, and the
/// bytes each moved over the bus (both ways) in the outer iterations.
struct TeamRun {
    volume: Vec<f32>,
    reports: Vec<IterationReport>,
    uploaded: Vec<u64>,
    iteration_bus: Vec<u64>,
}

fn run_team(
    devices: &[GpuContext],
    p: &Projections,
    params: AdmmParams,
    plan: &MemoryPlan,
) -> TeamRun {
    let bus = |d: &GpuContext| d.traffic().bytes_uploaded + d.traffic().bytes_downloaded;
    let before: Vec<u64> = devices.iter().map(|d| d.traffic().bytes_uploaded).collect();
    let data = p.operator_data();
    let mut team = AdmmTeam::new(
        &OneProcess::shared(),
        devices,
        p.geometry(),
        &data[..],
        params,
        plan,
    )
    .unwrap();
    let mut reports = Vec::new();
    let steps: Vec<u64> = devices.iter().map(bus).collect();
    while team.solver().stop_reason().is_none() {
        reports.push(team.step(devices).unwrap());
    }
    let iteration_bus = devices.iter().zip(steps).map(|(d, b)| bus(d) - b).collect();
    let uploaded = devices
        .iter()
        .zip(before)
        .map(|(d, b)| d.traffic().bytes_uploaded - b)
        .collect();
    // Members that keep their planes on their devices bring them to the host arrays first.
    team.bring_to_host(devices).unwrap();
    TeamRun {
        volume: team.solver().volume(&devices[0]).unwrap(),
        reports,
        uploaded,
        iteration_bus,
    }
}

fn check_team_matches_one(
    p: &Projections,
    params: AdmmParams,
    team: &[GpuContext],
    one: &MemoryPlan,
    shared: &MemoryPlan,
) -> TeamRun {
    let (expected, expected_reports) = run_one(p, params, one);
    let run = run_team(team, p, params, shared);
    assert!(expected.iter().all(|v| v.is_finite()));
    assert!(
        same_bits(&expected, &run.volume),
        "{} devices changed the volume: rel. L2 {:.3e}",
        team.len(),
        lamino::metrics::rel_l2(&run.volume, &expected)
    );
    assert_eq!(report_bits(&expected_reports), report_bits(&run.reports));
    run
}

/// Whether each member of a team of `devices` devices is in-core under `shared`.
fn in_core(
    ctx: &GpuContext,
    p: &Projections,
    params: &AdmmParams,
    shared: &MemoryPlan,
    devices: usize,
) -> Vec<bool> {
    member_plans(ctx, p.geometry(), params, shared, (1, devices))
        .unwrap()
        .iter()
        .map(|m| m.mode == Mode::InCore)
        .collect()
}

#[test]
fn two_devices_give_the_in_core_bits_at_32() {
    let p = projections(32);
    let g = p.geometry();
    let ctx = common::ctx();
    let team = devices(2);
    for params in [
        AdmmParams::exactly(3),
        AdmmParams {
            inner: InnerSolver::DaiYuan { step: 1.0 },
            ..AdmmParams::exactly(2)
        },
    ] {
        let unlimited = Budgets::given(u64::MAX / 4, u64::MAX / 4, None);
        let shared = plan_shared(ctx, g, &params, &OperatorOptions::default(), &unlimited).unwrap();
        assert_eq!(
            shared.resident_arrays(),
            0,
            "a shared plan keeps the arrays on the host"
        );
        // Each device's shares fit it: both keep them on their devices.
        assert_eq!(in_core(ctx, &p, &params, &shared, 2), [true, true]);
        // The in-core plan with the shared plan's chunks: the same work split two ways.
        let one = MemoryPlan::in_core(ctx, g, &params, &shared.operator).unwrap();
        assert_eq!(one.mode, Mode::InCore);
        check_team_matches_one(&p, params, &team, &one, &shared);
    }
}

#[test]
fn three_devices_give_the_streaming_bits_at_32() {
    let p = projections(32);
    let g = p.geometry();
    let ctx = common::ctx();
    let params = AdmmParams::exactly(3);
    let need = MemoryPlan::in_core(ctx, g, &params, &OperatorOptions::default())
        .unwrap()
        .device_bytes;
    let host: u64 = Array::BY_TRAFFIC.iter().map(|a| a.layout(g).bytes()).sum();
    // A sixth of the in-core need: the smallest streaming plan at 32^3 needs more than an eighth.
    let budgets = Budgets::given(need / 6, 4 * host, None);
    let options = OperatorOptions::default();
    let shared = plan_shared(ctx, g, &params, &options, &budgets).unwrap();
    // One device streaming with the team's chunks (those that let the fewest members keep
    // their homes on their devices).
    let streaming = plan(ctx, g, &params, &shared.operator, &budgets).unwrap();
    assert_eq!(streaming.mode, Mode::Streaming);
    assert_eq!(shared.chunks, streaming.chunks);
    assert!(shared.device_bytes <= need / 6);
    assert_eq!(in_core(ctx, &p, &params, &shared, 3), [false; 3]);
    // 32 planes and the chunks split 11 + 11 + 10: shares of unequal size.
    let uploaded = check_team_matches_one(&p, params, &devices(3), &streaming, &shared).uploaded;
    // Each device moves its share of what one device moves under the same plan.
    let alone = run_team(&devices(1), &p, params, &shared).uploaded;
    let total: u64 = uploaded.iter().sum();
    eprintln!(
        "uploaded: one device {} bytes, three devices {uploaded:?}",
        alone[0]
    );
    assert!(
        uploaded.iter().all(|&u| 4 * u < 2 * alone[0]) && 10 * total >= 9 * alone[0],
        "three devices uploaded {uploaded:?}, one {alone:?}"
    );
}

/// Two devices under one team plan (the same chunks and staging buffers), once with room for
/// their planes of every array and once without: both give the one-device bits. In-core, each
/// keeps its planes on its device and moves over the bus only what it exchanges with the
/// other: its streaming counterpart moves its planes through its staging buffers at every
/// vector pass besides (the plan's bytes for its share), and exchanges the same blocks.
#[test]
fn in_core_members_give_the_bits_and_move_only_what_they_exchange() {
    let p = projections(32);
    let g = p.geometry();
    let ctx = common::ctx();
    let params = AdmmParams::exactly(2);
    let unlimited = Budgets::given(u64::MAX / 4, u64::MAX / 4, None);
    let shared = plan_shared(ctx, g, &params, &OperatorOptions::default(), &unlimited).unwrap();
    let mut streamed = shared.clone();
    // Room for what the team's plan holds on a device, none for the planes beside it.
    streamed.budgets.device_bytes = shared.device_bytes * 10 / 9 + 16;
    assert_eq!(in_core(ctx, &p, &params, &shared, 2), [true, true]);
    assert_eq!(in_core(ctx, &p, &params, &streamed, 2), [false, false]);
    let one = MemoryPlan::in_core(ctx, g, &params, &shared.operator).unwrap();
    let (expected, expected_reports) = run_one(&p, params, &one);
    let team = devices(2);
    let incore = run_team(&team, &p, params, &shared);
    let streaming = run_team(&team, &p, params, &streamed);
    for run in [&incore, &streaming] {
        assert!(same_bits(&expected, &run.volume));
        assert_eq!(report_bits(&expected_reports), report_bits(&run.reports));
    }
    let members = member_plans(ctx, g, &params, &streamed, (1, 2)).unwrap();
    let iterations = incore.reports.len() as u64;
    eprintln!(
        "bus bytes per iteration: in-core {:?}, streaming {:?}, the plan's share of a streaming \
         member {:?}",
        incore
            .iteration_bus
            .iter()
            .map(|b| b / iterations)
            .collect::<Vec<_>>(),
        streaming
            .iteration_bus
            .iter()
            .map(|b| b / iterations)
            .collect::<Vec<_>>(),
        members
            .iter()
            .map(|m| m.bytes_moved_per_iteration)
            .collect::<Vec<_>>(),
    );
    for (m, member) in members.iter().enumerate().take(2) {
        // The streaming member moves its shares as planned and the exchanged blocks besides
        // (which its planned bytes count too, as part of its share's blocks); the in-core one
        // moves only those blocks: at most what streaming adds beyond its own planes' passes.
        let planned = member.bytes_moved_per_iteration * iterations;
        assert!(streaming.iteration_bus[m] >= planned, "member {m}");
        assert!(incore.iteration_bus[m] > 0, "member {m} exchanges blocks");
        assert!(
            incore.iteration_bus[m] + planned / 2 <= streaming.iteration_bus[m],
            "member {m}: in-core {} bytes, streaming {} of which its planned share {planned}",
            incore.iteration_bus[m],
            streaming.iteration_bus[m]
        );
    }
}

#[test]
fn a_device_that_fails_stops_the_others_with_its_cause() {
    let p = projections(16);
    let g = p.geometry();
    let params = AdmmParams::exactly(1);
    let team = devices(2);
    let unlimited = Budgets::given(u64::MAX / 4, u64::MAX / 4, None);
    let shared = plan_shared(
        &team[0],
        g,
        &params,
        &OperatorOptions::default(),
        &unlimited,
    )
    .unwrap();
    // The second device may hold almost nothing: it fails while the first waits for it.
    team[1].set_device_budget(4096);
    let data = p.operator_data();
    let err = AdmmTeam::new(&OneProcess::shared(), &team, g, &data[..], params, &shared)
        .err()
        .expect("the second device cannot hold its buffers");
    assert!(
        matches!(
            err,
            SolverError::Operator(_) | SolverError::Gpu(GpuError::OverBudget { .. })
        ),
        "the cause, not the stop it caused: {err}"
    );
    assert!(err.to_string().contains("budget"), "{err}");
}
