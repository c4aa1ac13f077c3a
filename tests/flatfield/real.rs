//! Real-data regression (docs/flatfield-method.md, "Real-data regression"): the BaSiC paper's
//! example datasets (`assets/basic`, trimmed
//! as its README says) fitted on the GPU at production parameters and compared with the fits of
//! the original BaSiC reference implementation (pixel sorting on, λ_D = 0.2 λ_F): once with the
//! `kintsugi_compat` preset (the reference's own settings: a reproduction) and once with the
//! default users get (sorting off: a different estimator, held to the measured distance). The
//! re-fitted baseline is compared with the reference's per-image baseline in both presets.
//! `cell_culture` has no reference fit and is not here.

use crate::common;

use std::path::PathBuf;

use lamino::flatfield::io::read_stack;
use lamino::flatfield::{fit, BasicParams};
use ndarray::{Array1, Array2};
use ndarray_npy::ReadNpyExt;

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/basic"))
}

fn open(name: &str) -> std::fs::File {
    let path = fixtures().join(name);
    std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_field(name: &str) -> Vec<f64> {
    Array2::<f32>::read_npy(open(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .iter()
        .map(|&v| v as f64)
        .collect()
}

fn read_vector(name: &str) -> Vec<f64> {
    Array1::<f32>::read_npy(open(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .iter()
        .map(|&v| v as f64)
        .collect()
}

fn centred(v: &[f64]) -> Vec<f64> {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    v.iter().map(|x| x - mean).collect()
}

fn correlation(x: &[f64], y: &[f64]) -> f64 {
    let (x, y) = (centred(x), centred(y));
    let sxy: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
    let sxx: f64 = x.iter().map(|a| a * a).sum();
    let syy: f64 = y.iter().map(|b| b * b).sum();
    sxy / (sxx * syy).sqrt()
}

/// How a fit compares with the reference.
struct Agreement {
    /// Flat-field RMSE (both at the 128x128 working size, both normalised to mean 1).
    flat_rmse: f64,
    /// RMSE of the mean-subtracted dark-fields (the reference stores no constant level).
    dark_rmse: f64,
    /// Correlation of the per-image baselines.
    baseline_correlation: f64,
}

fn compare(name: &str, params: &BasicParams) -> Agreement {
    let stack = read_stack(&fixtures().join(format!("{name}.images.npy"))).unwrap();
    let start = std::time::Instant::now();
    let fitted = fit(common::ctx(), &stack, params, |_| {}).unwrap();
    let reference = read_field(&format!("{name}.ref.flatfield.npy"));
    let mean = reference.iter().sum::<f64>() / reference.len() as f64;
    let ours = &fitted.report.working_flatfield;
    assert_eq!(ours.len(), reference.len());
    let flat_rmse = (ours
        .iter()
        .zip(&reference)
        .map(|(a, b)| (*a as f64 - b / mean).powi(2))
        .sum::<f64>()
        / ours.len() as f64)
        .sqrt();
    let dark: Vec<f64> = fitted
        .report
        .working_darkfield
        .iter()
        .map(|&v| v as f64)
        .collect();
    let dark_ref = read_field(&format!("{name}.ref.darkfield.npy"));
    let dark_rmse = (centred(&dark)
        .iter()
        .zip(centred(&dark_ref))
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        / dark.len() as f64)
        .sqrt();
    let baseline: Vec<f64> = fitted.fields.baseline.iter().map(|&v| v as f64).collect();
    let baseline_ref = read_vector(&format!("{name}.ref.baseline.npy"));
    assert_eq!(baseline.len(), baseline_ref.len());
    let baseline_correlation = correlation(&baseline, &baseline_ref);
    eprintln!(
        "{name} (sorting {}): {} images of {}x{}, fit {:.1} s, rounds {} (iterations {:?}), \
         baseline rounds {}; flat-field RMSE {flat_rmse:.4}, mean-subtracted dark-field RMSE \
         {dark_rmse:.2} counts, baseline correlation {baseline_correlation:.5}",
        params.sort_intensity,
        stack.count(),
        stack.height(),
        stack.width(),
        start.elapsed().as_secs_f64(),
        fitted.report.reweighting_rounds,
        fitted
            .report
            .solves
            .iter()
            .map(|s| s.iterations)
            .collect::<Vec<_>>(),
        fitted.report.baseline_solves.len(),
    );
    assert!(!fitted.report.fallback);
    assert!(fitted
        .fields
        .flatfield
        .iter()
        .all(|v| v.is_finite() && *v > 0.0));
    Agreement {
        flat_rmse,
        dark_rmse,
        baseline_correlation,
    }
}

/// The bounds of one dataset and preset: flat-field RMSE, dark-field RMSE (None: not compared),
/// lowest baseline correlation.
fn check(name: &str, params: &BasicParams, flat: f64, dark: Option<f64>, baseline: f64) {
    let a = compare(name, params);
    assert!(
        a.flat_rmse <= flat,
        "{name}: flat-field RMSE {}",
        a.flat_rmse
    );
    if let Some(dark) = dark {
        assert!(
            a.dark_rmse <= dark,
            "{name}: dark-field RMSE {}",
            a.dark_rmse
        );
    }
    assert!(
        a.baseline_correlation >= baseline,
        "{name}: baseline correlation {}",
        a.baseline_correlation
    );
}

// Bounds: 1.5x the figures measured with the f64 oracle on these (trimmed) files, rounded up;
// the GPU agrees with the oracle to ~1e-5. `kintsugi_compat` reproduces the reference (flat-field
// RMSE 0.0005-0.011, docs/flatfield-method.md, "Real-data regression" suggests < 0.02); the
// default (sorting off) is a different estimator and sits 0.016-0.060 from it
// (docs/flatfield-method.md, "Parameters": BaSiCPy's own sorted and unsorted fits
// differ by 1-9 % with dark-field estimation). Baselines: both presets re-fit them on the images
// in their order; the reference's are BaSiC's own re-fit (`basefluor`). wsi_brain's dark-fields
// differ in level (reference mean 10 counts; every implementation of this algorithm puts it on
// the min(D) bound,
// 655) and in shape (RMSE 141 against a spread of 237), so they are not compared.
//
// Measured (oracle; flat-field RMSE, dark-field RMSE, baseline correlation):
// | dataset | kintsugi_compat | default |
// | timelapse_brightfield | 0.00046, 0.12, 0.99998 | 0.0404, 7.6, 0.99997 |
// | timelapse_nanog (1/4) | 0.0069, 0.39, 0.99988 | 0.0156, 1.9, 0.99980 |
// | timelapse_pu1 (1/4) | 0.0099, 0.71, 0.99822 | 0.0605, 5.7, 0.99796 |
// | wsi_brain | 0.0113, -, 0.99921 | 0.0503, -, 0.99912 |

#[test]
fn timelapse_brightfield_matches_the_reference() {
    let name = "timelapse_brightfield";
    check(
        name,
        &BasicParams::kintsugi_compat(),
        0.001,
        Some(0.2),
        0.9999,
    );
    check(name, &BasicParams::default(), 0.061, Some(11.5), 0.9999);
}

#[test]
fn timelapse_nanog_matches_the_reference() {
    let name = "timelapse_nanog";
    check(
        name,
        &BasicParams::kintsugi_compat(),
        0.0105,
        Some(0.6),
        0.9997,
    );
    check(name, &BasicParams::default(), 0.024, Some(2.9), 0.9997);
}

#[test]
fn timelapse_pu1_matches_the_reference() {
    let name = "timelapse_pu1";
    check(
        name,
        &BasicParams::kintsugi_compat(),
        0.015,
        Some(1.1),
        0.997,
    );
    check(name, &BasicParams::default(), 0.091, Some(8.6), 0.997);
}

#[test]
fn wsi_brain_matches_the_reference() {
    let name = "wsi_brain";
    check(name, &BasicParams::kintsugi_compat(), 0.017, None, 0.9985);
    check(name, &BasicParams::default(), 0.076, None, 0.9985);
}
