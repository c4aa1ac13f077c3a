//! Several devices in one process: the same bits as one device, in-core and streaming, and a
//! device that fails stops the others with its cause instead of leaving them waiting.

mod common;

use lamino::gpu::GpuContext;
use lamino::gpu::GpuError;
use lamino::operator::OperatorOptions;
use lamino::params::AdmmParams;
use lamino::params::InnerSolver;
use lamino::plan::{plan, plan_shared, Array, Budgets, MemoryPlan, Mode};
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

/// The volume, the reports and the bytes each device uploaded.
fn run_team(
    devices: &[GpuContext],
    p: &Projections,
    params: AdmmParams,
    plan: &MemoryPlan,
) -> (Vec<f32>, Vec<IterationReport>, Vec<u64>) {
    let before: Vec<u64> = devices.iter().map(|d| d.traffic().bytes_uploaded).collect();
    let data = p.operator_data();
    let mut team =
        AdmmTeam::with_plan_from(devices, p.geometry(), &data[..], params, plan).unwrap();
    let mut reports = Vec::new();
    while team.solver().stop_reason().is_none() {
        reports.push(team.step(devices).unwrap());
    }
    let uploaded = devices
        .iter()
        .zip(before)
        .map(|(d, b)| d.traffic().bytes_uploaded - b)
        .collect();
    (
        team.solver().volume(&devices[0]).unwrap(),
        reports,
        uploaded,
    )
}

fn check_team_matches_one(
    p: &Projections,
    params: AdmmParams,
    team: &[GpuContext],
    one: &MemoryPlan,
    shared: &MemoryPlan,
) -> Vec<u64> {
    let (expected, expected_reports) = run_one(p, params, one);
    let (got, reports, uploaded) = run_team(team, p, params, shared);
    assert!(expected.iter().all(|v| v.is_finite()));
    assert!(
        same_bits(&expected, &got),
        "{} devices changed the volume: rel. L2 {:.3e}",
        team.len(),
        lamino::metrics::rel_l2(&got, &expected)
    );
    assert_eq!(report_bits(&expected_reports), report_bits(&reports));
    uploaded
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
        // The in-core plan with the shared plan's chunks: the same work split two ways.
        let in_core = MemoryPlan::in_core(ctx, g, &params, &shared.operator).unwrap();
        assert_eq!(in_core.mode, Mode::InCore);
        check_team_matches_one(&p, params, &team, &in_core, &shared);
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
    let streaming = plan(ctx, g, &params, &options, &budgets).unwrap();
    assert_eq!(streaming.mode, Mode::Streaming);
    let shared = plan_shared(ctx, g, &params, &options, &budgets).unwrap();
    assert_eq!(shared.chunks, streaming.chunks);
    assert!(shared.device_bytes <= need / 6);
    // 32 planes and the chunks split 11 + 11 + 10: shares of unequal size.
    let uploaded = check_team_matches_one(&p, params, &devices(3), &streaming, &shared);
    // Each device moves its share of what one device moves under the same plan.
    let (_, _, alone) = run_team(&devices(1), &p, params, &shared);
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
    let err = AdmmTeam::with_plan_from(&team, g, &data[..], params, &shared)
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
