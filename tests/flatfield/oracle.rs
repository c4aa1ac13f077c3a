//! The f64 CPU oracle against synthetic ground truth (docs/flatfield-method.md,
//! "Synthetic stacks"), at production parameters.

use lamino::flatfield::synthetic::{generate, Synthetic};
use lamino::flatfield::{fit_oracle, BasicParams};
use lamino::metrics::nan_max;

/// `(flat_rmse, flat_max_rel, dark_mean_err, dark_rmse)` against the truth
/// (docs/flatfield-method.md, "Test metrics and thresholds").
fn metrics(flat: &[f32], dark: &[f32], true_flat: &[f64], true_dark: &[f64]) -> [f64; 4] {
    let n = flat.len() as f64;
    let flat_rmse = (flat
        .iter()
        .zip(true_flat)
        .map(|(a, b)| (*a as f64 - b).powi(2))
        .sum::<f64>()
        / n)
        .sqrt();
    let flat_max_rel = flat
        .iter()
        .zip(true_flat)
        .map(|(a, b)| (*a as f64 / b - 1.0).abs())
        .fold(0.0, nan_max);
    let dark_mean_err =
        (dark.iter().map(|&v| v as f64).sum::<f64>() - true_dark.iter().sum::<f64>()) / n;
    let dark_rmse = (dark
        .iter()
        .zip(true_dark)
        .map(|(a, b)| (*a as f64 - b).powi(2))
        .sum::<f64>()
        / n)
        .sqrt();
    [flat_rmse, flat_max_rel, dark_mean_err, dark_rmse]
}

#[test]
fn s1_fields_are_recovered_within_the_spec_thresholds() {
    let data = generate(&Synthetic::s1(1));
    let fit = fit_oracle(&data.stack, &BasicParams::default()).unwrap();
    let [flat_rmse, flat_max_rel, dark_mean_err, dark_rmse] = metrics(
        &fit.fields.flatfield,
        &fit.fields.darkfield,
        &data.flatfield,
        &data.darkfield,
    );
    eprintln!(
        "S1 oracle: flat_rmse {flat_rmse:.4} flat_max_rel {flat_max_rel:.4} dark_mean_err \
         {dark_mean_err:.2} dark_rmse {dark_rmse:.2}, solves {:?}",
        fit.report
            .solves
            .iter()
            .map(|s| s.iterations)
            .collect::<Vec<_>>()
    );
    // CI thresholds (docs/flatfield-method.md, "Test metrics and thresholds"): about 1.5-2x the
    // measured 0.0087 / 3.4 % / -7.2 / 9.2.
    assert!(flat_rmse < 0.015, "flat_rmse {flat_rmse}");
    assert!(flat_max_rel < 0.06, "flat_max_rel {flat_max_rel}");
    assert!(dark_mean_err.abs() < 15.0, "dark_mean_err {dark_mean_err}");
    assert!(dark_rmse < 15.0, "dark_rmse {dark_rmse}");
    assert!(fit.report.converged && !fit.report.fallback);
    assert!(fit.report.solves.iter().all(|s| s.converged));
}

#[test]
fn s2_without_a_dark_field_hallucinates_none() {
    let spec = Synthetic {
        darkfield: false,
        ..Synthetic::s1(2)
    };
    let data = generate(&spec);
    let with_dark = fit_oracle(&data.stack, &BasicParams::default()).unwrap();
    let flat_only = fit_oracle(
        &data.stack,
        &BasicParams {
            get_darkfield: false,
            ..BasicParams::default()
        },
    )
    .unwrap();
    let [flat_rmse, ..] = metrics(
        &with_dark.fields.flatfield,
        &with_dark.fields.darkfield,
        &data.flatfield,
        &data.darkfield,
    );
    let max_dark = with_dark
        .fields
        .darkfield
        .iter()
        .fold(0.0, |m, v| nan_max(m, v.abs() as f64));
    let diffs: Vec<f64> = with_dark
        .fields
        .flatfield
        .iter()
        .zip(&flat_only.fields.flatfield)
        .map(|(a, b)| (a - b).abs() as f64)
        .collect();
    let delta_max = diffs.iter().cloned().fold(0.0, nan_max);
    let delta_rms = (diffs.iter().map(|d| d * d).sum::<f64>() / diffs.len() as f64).sqrt();
    let mean_dark = with_dark
        .fields
        .darkfield
        .iter()
        .map(|&v| v as f64)
        .sum::<f64>()
        / with_dark.fields.darkfield.len() as f64;
    eprintln!(
        "S2: flat_rmse {flat_rmse:.4}, dark mean {mean_dark:.2}, max |dark| {max_dark:.2}, \
         flat-field |Δ| to the flat-only fit: rms {delta_rms:.2e}, max {delta_max:.2e}"
    );
    // The prototype measured flat_rmse 0.0025 and a dark mean of 0.9 (truth 0) for S2
    // (docs/flatfield-method.md, "Test metrics and thresholds"); this port
    // gives 0.0019-0.0021 and 0.00-0.01 (seeds 1, 2, 4), so nothing constant is hallucinated.
    // "Within 0.002 of the flat-only fit" is read in that page's own metric, the RMS: measured
    // 8.3e-4 to 8.7e-4. Its other two suggestions were not measurements and a correct fit does
    // not meet them: the dark-field keeps a smooth zero-mean o_R of ±4-6 counts (0.7 % of the
    // ~700-count background; it is the background left after removing ā_V·w, which the
    // dark-field step smooths but cannot zero), so max |D| is 5.4-5.7 (bound 10), and that o_R
    // moves the flat-field by at most 3.5e-3 to 4.0e-3 (bound 0.008). The GPU fit gives the same
    // figures, and both agree with BaSiCPy's own fits on real data (flatfield/real.rs).
    assert!(flat_rmse < 0.005, "{flat_rmse}");
    assert!(mean_dark.abs() < 1.0, "{mean_dark}");
    assert!(delta_rms < 0.002, "{delta_rms}");
    assert!(max_dark < 10.0, "{max_dark}");
    assert!(delta_max < 0.008, "{delta_max}");
    assert!(flat_only.fields.darkfield.iter().all(|&v| v == 0.0));
    assert_eq!(
        flat_only.report.changed_parameters,
        vec!["get_darkfield = false (default true)".to_string()]
    );
}

#[test]
fn s5_narrow_brightness_is_finite_and_flagged() {
    let data = generate(&Synthetic {
        background: (600.0, 800.0),
        ..Synthetic::s1(3)
    });
    let fit = fit_oracle(&data.stack, &BasicParams::default()).unwrap();
    let f = &fit.fields;
    assert!(f.flatfield.iter().all(|v| v.is_finite() && *v > 0.0));
    assert!(f.darkfield.iter().all(|v| v.is_finite()));
    let wide = generate(&Synthetic::s1(3));
    let wide_fit = fit_oracle(&wide.stack, &BasicParams::default()).unwrap();
    eprintln!(
        "brightness spread: S5 {:.3}, S1 {:.3}",
        fit.report.brightness_spread, wide_fit.report.brightness_spread
    );
    // The dark-field is identifiable only with a wide brightness range
    // (docs/flatfield-method.md, "Dark-field identifiability"): the report
    // says how wide it was.
    assert!(fit.report.brightness_spread < 0.5 * wide_fit.report.brightness_spread);
    assert!(
        fit.report
            .warnings
            .iter()
            .any(|w| w.contains("poorly identifiable")),
        "{:?}",
        fit.report.warnings
    );
    assert!(
        wide_fit.report.warnings.is_empty(),
        "{:?}",
        wide_fit.report.warnings
    );
}

#[test]
fn kintsugi_compat_on_s1_stays_within_its_regression_bounds() {
    let data = generate(&Synthetic::s1(1));
    let fit = fit_oracle(&data.stack, &BasicParams::kintsugi_compat()).unwrap();
    let [flat_rmse, _, _, dark_rmse] = metrics(
        &fit.fields.flatfield,
        &fit.fields.darkfield,
        &data.flatfield,
        &data.darkfield,
    );
    eprintln!("S1 kintsugi_compat: flat_rmse {flat_rmse:.4}, dark_rmse {dark_rmse:.1}");
    // docs/flatfield-method.md, "Test metrics and thresholds": a regression guard (measured
    // 0.048 / 41), not a quality claim.
    assert!(flat_rmse < 0.08, "{flat_rmse}");
    assert!(dark_rmse < 60.0, "{dark_rmse}");
    assert_eq!(
        fit.report.changed_parameters,
        vec!["sort_intensity = true (default false)".to_string()]
    );
}

/// `(max |ΔS|, max |ΔD|)` between two fits' full-size fields.
fn field_distance(a: &lamino::flatfield::Fit, b: &lamino::flatfield::Fit) -> (f64, f64) {
    let max = |x: &[f32], y: &[f32]| {
        x.iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs() as f64)
            .fold(0.0, nan_max)
    };
    (
        max(&a.fields.flatfield, &b.fields.flatfield),
        max(&a.fields.darkfield, &b.fields.darkfield),
    )
}

#[test]
fn reweighting_stops_within_a_bound_of_the_converged_fields() {
    // Issue 15: the stop measures the dark-field change relative to the signal and adds the
    // change still expected at the observed contraction rate. Reference: the same fit run to
    // reweighting_tolerance 1e-6 (the fields where the loop would settle). Measured on these
    // stacks (S1 and S2 of docs/flatfield-method.md, "Synthetic stacks", seed 1): rounds 4 and 3
    // (5 and 8 with the criterion
    // relative to the dark-field itself); S1 max |ΔS| 2.1e-4, max |ΔD| 0.54 counts; S2 1.25e-3 and
    // 1.8 counts (0.25 % of the ~700-count mean intensity). Bounds: 1.5x those.
    for (spec, rounds, flat_bound, dark_bound) in [
        (Synthetic::s1(1), 4, 3.2e-4, 0.8),
        (
            Synthetic {
                darkfield: false,
                ..Synthetic::s1(1)
            },
            3,
            1.9e-3,
            2.7,
        ),
    ] {
        let data = generate(&spec);
        let fit = fit_oracle(&data.stack, &BasicParams::default()).unwrap();
        let tight = fit_oracle(
            &data.stack,
            &BasicParams {
                reweighting_tolerance: 1e-6,
                ..BasicParams::default()
            },
        )
        .unwrap();
        let (flat, dark) = field_distance(&fit, &tight);
        eprintln!(
            "dark-field {}: {} rounds (to 1e-6: {}), max |ΔS| {flat:.2e}, max |ΔD| {dark:.2} counts",
            spec.darkfield,
            fit.report.reweighting_rounds,
            tight.report.reweighting_rounds
        );
        assert!(fit.report.converged);
        assert_eq!(fit.report.reweighting_rounds, fit.report.solves.len());
        assert!(fit.report.reweighting_rounds <= rounds);
        assert!(flat <= flat_bound, "{flat}");
        assert!(dark <= dark_bound, "{dark}");
    }
}

/// Pearson correlation of the fitted baseline with the true background levels.
fn baseline_correlation(fit: &lamino::flatfield::Fit, truth: &[f64]) -> f64 {
    let n = truth.len() as f64;
    let x: Vec<f64> = fit.fields.baseline.iter().map(|&v| v as f64).collect();
    let (mx, my) = (x.iter().sum::<f64>() / n, truth.iter().sum::<f64>() / n);
    let sxy: f64 = x.iter().zip(truth).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    let syy: f64 = truth.iter().map(|b| (b - my).powi(2)).sum();
    sxy / (sxx * syy).sqrt()
}

#[test]
fn the_baseline_follows_the_true_brightness_in_both_presets() {
    // Issue 15: with sorting on, rows are order statistics; the baseline is re-fitted on the
    // images in their order once the fields are fixed (both presets). Measured on S1 (seed 1):
    // correlation 0.99997 without sorting, 0.99986 with (the sorted rows gave 0.01-0.10).
    let data = generate(&Synthetic::s1(1));
    for params in [BasicParams::default(), BasicParams::kintsugi_compat()] {
        let fit = fit_oracle(&data.stack, &params).unwrap();
        let r = baseline_correlation(&fit, &data.background);
        eprintln!(
            "sorting {}: baseline correlation {r:.6}, {} baseline rounds",
            params.sort_intensity,
            fit.report.baseline_solves.len()
        );
        assert!(r >= 0.999, "{r}");
        assert!(fit.report.baseline_solves.iter().all(|s| s.converged));
    }
}
