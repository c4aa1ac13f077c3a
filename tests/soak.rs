//! Soak: 500 outer iterations at 16^3 hold host and device memory flat (growth < 1 %), so a long
//! reconstruction cannot creep out of memory.

mod common;

use lamino::geometry::Geometry;
use lamino::memory::resident_bytes;
use lamino::operator::OperatorOptions;
use lamino::params::AdmmParams;
use lamino::random::SplitMix64;
use lamino::solver::AdmmSolver;
use lamino::Tilt;

#[test]
fn five_hundred_iterations_hold_host_and_device_memory_flat() {
    let ctx = common::new_context();
    let n = 16;
    let g = Geometry::cube(n, n, Tilt::from_degrees(30.0));
    let mut rng = SplitMix64::new(5);
    let data: Vec<f32> = (0..g.data_len())
        .map(|_| 0.01 * rng.next_f64() as f32)
        .collect();
    let mut solver = AdmmSolver::new(
        &ctx,
        &g,
        &data,
        AdmmParams::exactly(500),
        &OperatorOptions::default(),
    )
    .unwrap();
    // Warm-up: first-use allocations (readback staging, shader compilation) happen here.
    for _ in 0..20 {
        solver.step(&ctx).unwrap();
    }
    let (host_start, device_start) = (resident_bytes(), ctx.device_bytes_held());
    let mut host_peak = host_start;
    while solver.stop_reason().is_none() {
        let report = solver.step(&ctx).unwrap();
        assert!(report.lagrangian.is_finite());
        host_peak = host_peak.max(resident_bytes());
    }
    let (host_end, device_end) = (resident_bytes(), ctx.device_bytes_held());
    let growth = |start: u64, end: u64| (end as f64 - start as f64) / start as f64;
    eprintln!(
        "soak, 500 outer iterations at {n}^3: host RSS {:.1} -> {:.1} MiB (peak {:.1}, growth {:+.3} %), \
         device {:.1} -> {:.1} MiB (growth {:+.3} %)",
        host_start as f64 / 1048576.0,
        host_end as f64 / 1048576.0,
        host_peak as f64 / 1048576.0,
        100.0 * growth(host_start, host_peak),
        device_start as f64 / 1048576.0,
        device_end as f64 / 1048576.0,
        100.0 * growth(device_start, device_end)
    );
    assert_eq!(solver.iterations_done(), 500);
    assert!(
        growth(device_start, device_end) <= 0.0,
        "device memory grew"
    );
    assert!(
        growth(host_start, host_peak) < 0.01,
        "host memory grew by {:.3} %",
        100.0 * growth(host_start, host_peak)
    );
}
