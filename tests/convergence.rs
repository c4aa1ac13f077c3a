//! The default stopping rule: on noisy 32^3 scans of the three phantoms the iteration stops on
//! the convergence test, and the volume it stops at is within 1 % (relative L2) of the volume
//! after 300 outer iterations. The default run's iterates are the first iterates of the
//! 300-iteration run (same data, same parameters but the stopping rule), so one run gives both.

mod common;

use lamino::input::projections_from_scan;
use lamino::metrics::rel_l2;
use lamino::operator::OperatorOptions;
use lamino::recon::{Projections, Reconstructor};
use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};
use lamino::solver::{AdmmParams, AdmmSolver, Convergence, StopReason};

fn projections(phantom: PhantomKind) -> Projections {
    let sim = simulated_scan(&ScanSpec {
        phantom,
        size: 32,
        angles: 32,
        tilt_deg: 30.0,
        photons: Some(1e5),
        seed: 0,
        rotation_axis: None,
    })
    .unwrap();
    projections_from_scan(std::path::Path::new("simulated"), sim.scan, None)
        .unwrap()
        .projections
}

/// Runs 300 iterations; returns the iteration where the default test first passes, the volume
/// there and the final volume.
fn converge_then_continue(p: &Projections) -> (usize, Vec<f32>, Vec<f32>) {
    let ctx = common::ctx();
    let g = p.geometry();
    let data = p.operator_data();
    let mut solver = AdmmSolver::new(
        ctx,
        g,
        &data,
        AdmmParams::exactly(300),
        &OperatorOptions::default(),
    )
    .unwrap();
    let mut stopped = None;
    while solver.stop_reason().is_none() {
        let report = solver.step(ctx).unwrap();
        if stopped.is_none() && report.converged(&Convergence::DEFAULT) {
            stopped = Some((report.iteration + 1, solver.volume(ctx).unwrap()));
        }
    }
    let (k, at_k) = stopped.expect("the default test never passed in 300 iterations");
    (k, at_k, solver.volume(ctx).unwrap())
}

fn check(phantom: PhantomKind) -> (usize, Vec<f32>) {
    let p = projections(phantom);
    let (k, at_k, at_300) = converge_then_continue(&p);
    let difference = rel_l2(&at_k, &at_300);
    eprintln!(
        "{phantom}: the default stops after {k} iterations, {:.3} % from the 300-iteration volume",
        100.0 * difference
    );
    assert!(difference <= 0.01, "{phantom}: {difference}");
    (k, at_k)
}

#[test]
fn chip_stops_within_one_percent_of_three_hundred_iterations() {
    check(PhantomKind::Chip);
}

#[test]
fn blobs_stop_within_one_percent_of_three_hundred_iterations() {
    check(PhantomKind::Blobs);
}

#[test]
fn shepp_logan_stops_within_one_percent_and_the_default_run_stops_there() {
    let (k, at_k) = check(PhantomKind::Shepp);
    let result = Reconstructor::new(common::ctx())
        .run(&projections(PhantomKind::Shepp))
        .unwrap();
    assert_eq!(result.stop, StopReason::Converged);
    assert_eq!(result.reports.len(), k);
    assert!(
        result.volume == at_k,
        "the default run is not the prefix of the long run"
    );
}
