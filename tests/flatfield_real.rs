//! Real-data regression (spec §9.4): the BaSiC paper's example datasets (fixtures in
//! `../shared/data/basic`) fitted on the GPU with the `kintsugi_compat` preset (pixel sorting on,
//! λ_D = 0.2 λ_F: the reference implementation's settings) at production parameters, against the
//! reference implementation's flat-fields. `cell_culture` has no reference fit and is not here.

mod common;

use std::path::PathBuf;

use lamino::flatfield::io::read_stack;
use lamino::flatfield::{fit, BasicParams};
use ndarray::Array2;
use ndarray_npy::ReadNpyExt;

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/basic"))
}

fn read_field(name: &str) -> Vec<f64> {
    let path = fixtures().join(name);
    let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Array2::<f32>::read_npy(f)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .iter()
        .map(|&v| v as f64)
        .collect()
}

/// Fits `name` and returns the flat-field RMSE against the reference (both at the 128x128
/// working size, both normalised to mean 1).
fn flat_rmse(name: &str) -> f64 {
    let stack = read_stack(&fixtures().join(format!("{name}.images.npy"))).unwrap();
    let start = std::time::Instant::now();
    let fitted = fit(
        common::ctx(),
        &stack,
        &BasicParams::kintsugi_compat(),
        |_| {},
    )
    .unwrap();
    let reference = read_field(&format!("{name}.ref.flatfield.npy"));
    let mean = reference.iter().sum::<f64>() / reference.len() as f64;
    let ours = &fitted.report.working_flatfield;
    assert_eq!(ours.len(), reference.len());
    let rmse = (ours
        .iter()
        .zip(&reference)
        .map(|(a, b)| (*a as f64 - b / mean).powi(2))
        .sum::<f64>()
        / ours.len() as f64)
        .sqrt();
    eprintln!(
        "{name}: {} images of {}x{}, fit {:.1} s, iterations per solve {:?}, flat-field RMSE {rmse:.4}",
        stack.count(),
        stack.height(),
        stack.width(),
        start.elapsed().as_secs_f64(),
        fitted
            .report
            .solves
            .iter()
            .map(|s| s.iterations)
            .collect::<Vec<_>>()
    );
    assert!(!fitted.report.fallback);
    assert!(fitted
        .fields
        .flatfield
        .iter()
        .all(|v| v.is_finite() && *v > 0.0));
    rmse
}

// Threshold from the issue (spec §9.4: "flat RMSE < 0.02 for reference_results.npz").

#[test]
fn timelapse_brightfield_matches_the_reference() {
    let rmse = flat_rmse("timelapse_brightfield");
    assert!(rmse < 0.02, "{rmse}");
}

#[test]
fn timelapse_nanog_matches_the_reference() {
    let rmse = flat_rmse("timelapse_nanog");
    assert!(rmse < 0.02, "{rmse}");
}

#[test]
fn timelapse_pu1_matches_the_reference() {
    let rmse = flat_rmse("timelapse_pu1");
    assert!(rmse < 0.02, "{rmse}");
}

#[test]
fn wsi_brain_matches_the_reference() {
    let rmse = flat_rmse("wsi_brain");
    assert!(rmse < 0.02, "{rmse}");
}
