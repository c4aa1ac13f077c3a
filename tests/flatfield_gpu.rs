//! The GPU fit (f32) against the f64 oracle and the ground truth on S1 (spec §9.2, §9.3), at
//! production parameters.

mod common;

use lamino::flatfield::synthetic::{generate, Synthetic};
use lamino::flatfield::{fit_prepared, fit_prepared_oracle, BasicParams, Fit};

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn rms(a: &[f32], b: &[f64]) -> f64 {
    let s: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - y).powi(2)).sum();
    (s / a.len() as f64).sqrt()
}

fn iterations(fit: &Fit) -> Vec<usize> {
    fit.report.solves.iter().map(|s| s.iterations).collect()
}

#[test]
fn s1_gpu_matches_the_oracle_and_the_truth() {
    let data = generate(&Synthetic::s1(1));
    let params = BasicParams::default();
    let prepared = data.stack.prepare(&params).unwrap();
    let gpu = fit_prepared(common::ctx(), &prepared, 256, 256, &params, |_| {}).unwrap();
    let cpu = fit_prepared_oracle(&prepared, 256, 256, &params).unwrap();
    let flat = max_abs_diff(&gpu.fields.flatfield, &cpu.fields.flatfield);
    let dark = max_abs_diff(&gpu.fields.darkfield, &cpu.fields.darkfield);
    let mean_intensity =
        prepared.data.iter().map(|&v| v as f64).sum::<f64>() / prepared.data.len() as f64;
    eprintln!(
        "S1 GPU vs oracle: flat max |Δ| {flat:.2e}, dark max |Δ| {dark:.2e} counts \
         (bound {:.3}), iterations {:?} vs {:?}",
        1e-4 * mean_intensity,
        iterations(&gpu),
        iterations(&cpu)
    );
    // Spec §9.3: f32 vs f64 measured 2e-6 (flat) and 0.0066 counts (dark), same iteration counts.
    assert!(flat < 1e-4, "flat-field differs by {flat}");
    assert!(
        (dark as f64) < 1e-4 * mean_intensity,
        "dark-field differs by {dark}"
    );
    assert_eq!(gpu.report.solves.len(), cpu.report.solves.len());
    for (g, c) in iterations(&gpu).iter().zip(iterations(&cpu)) {
        assert!(g.abs_diff(c) <= 1, "{g} vs {c} iterations");
    }
    // And the GPU result itself meets the ground-truth thresholds of §9.2.
    let flat_rmse = rms(&gpu.fields.flatfield, &data.flatfield);
    let dark_rmse = rms(&gpu.fields.darkfield, &data.darkfield);
    assert!(flat_rmse < 0.015, "flat_rmse {flat_rmse}");
    assert!(dark_rmse < 15.0, "dark_rmse {dark_rmse}");
    // Working-size diagnostics are part of the report.
    assert_eq!(gpu.report.working_flatfield.len(), 128 * 128);
    assert_eq!(gpu.fields.baseline.len(), 60);
}

#[test]
fn odd_working_sizes_match_the_oracle() {
    // The DCT kernels work on 4x4 output blocks; working sizes that are not multiples of 4 (and
    // smaller than one workgroup) exercise their edges. A test of that code path, not of the
    // default 128: the stack is S1's recipe at 48x48.
    let data = generate(&Synthetic {
        count: 12,
        height: 48,
        width: 48,
        blobs: 2,
        ..Synthetic::s1(41)
    });
    for size in [17usize, 30] {
        let params = BasicParams {
            working_size: size,
            ..BasicParams::default()
        };
        let prepared = data.stack.prepare(&params).unwrap();
        let gpu = fit_prepared(common::ctx(), &prepared, 48, 48, &params, |_| {}).unwrap();
        let cpu = fit_prepared_oracle(&prepared, 48, 48, &params).unwrap();
        let flat = max_abs_diff(&gpu.report.working_flatfield, &cpu.report.working_flatfield);
        let dark = max_abs_diff(&gpu.report.working_darkfield, &cpu.report.working_darkfield);
        eprintln!("working size {size}: flat max |Δ| {flat:.2e}, dark max |Δ| {dark:.2e}");
        assert!(flat < 1e-4, "{size}: {flat}");
        assert!(dark < 0.1, "{size}: {dark}");
        assert_eq!(iterations(&gpu).len(), iterations(&cpu).len());
    }
}
