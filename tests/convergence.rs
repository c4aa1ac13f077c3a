//! The default stopping rule: on noisy 32^3 scans of the three phantoms the iteration stops on
//! the convergence test, and the volume it stops at is within 1 % (relative L2) of the volume
//! after 300 outer iterations. The default run's iterates are the first iterates of the
//! 300-iteration run (same data, same parameters but the stopping rule), so one run gives both.

mod common;

use lamino::bench::{converge_then_continue, noisy_projections};
use lamino::metrics::rel_l2;
use lamino::recon::Reconstructor;
use lamino::scan::Projections;
use lamino::simulate::PhantomKind;
use lamino::solver::StopReason;

fn projections(phantom: PhantomKind) -> Projections {
    noisy_projections(phantom, 32, (32, 30.0, 1e5)).unwrap()
}

fn check(phantom: PhantomKind) -> (usize, Vec<f32>) {
    let p = projections(phantom);
    let run = converge_then_continue(common::ctx(), p.geometry(), &p.operator_data(), 300).unwrap();
    let (k, at_k) = run
        .at_stop
        .expect("the default test never passed in 300 iterations");
    let at_300 = run.at_end;
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
