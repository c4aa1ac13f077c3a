//! The flat-field smoothness chosen from the data (`Smoothness::AutoData`, issue 15 §3) against
//! the standard rule, on synthetic stacks with known fields (recipes and variants of
//! docs/flatfield-method.md, "Synthetic stacks") and
//! on the real fixtures, at production parameters.
//!
//! The full comparison (eleven synthetic stacks with the f64 oracle) is the ignored test
//! `evaluation_against_the_standard_rule`, the real fixtures `evaluation_on_the_real_fixtures`:
//! `cargo test --test flatfield smoothness:: -- --ignored --nocapture`.

use crate::common;

use lamino::flatfield::io::read_stack;
use lamino::flatfield::synthetic::{generate, Synthetic, SyntheticData};
use lamino::flatfield::{
    choose_smoothness, choose_smoothness_oracle, fit, fit_prepared_oracle, BasicParams, Fit,
    Smoothness, Stack,
};
use lamino::metrics::nan_max;
use ndarray_npy::ReadNpyExt;

/// The S1 recipe (docs/flatfield-method.md, "Synthetic stacks") on `count` images of 128x128
/// (10 blobs keep S1's density).
fn small(count: usize, seed: u64) -> Synthetic {
    Synthetic {
        count,
        height: 128,
        width: 128,
        blobs: 10,
        ..Synthetic::s1(seed)
    }
}

fn auto_data() -> BasicParams {
    BasicParams {
        smoothness: Smoothness::AutoData,
        ..BasicParams::default()
    }
}

/// `(flat-field RMSE, dark-field RMSE)` against the truth.
fn errors(fit: &Fit, data: &SyntheticData) -> (f64, f64) {
    let rms = |a: &[f32], b: &[f64]| {
        (a.iter()
            .zip(b)
            .map(|(x, y)| (*x as f64 - y).powi(2))
            .sum::<f64>()
            / b.len() as f64)
            .sqrt()
    };
    (
        rms(&fit.fields.flatfield, &data.flatfield),
        rms(&fit.fields.darkfield, &data.darkfield),
    )
}

/// The oracle's standard and auto-data fits of a stack.
fn both(stack: &Stack) -> (Fit, Fit) {
    let (h, w) = (stack.height(), stack.width());
    let standard = BasicParams::default();
    let prepared = stack.prepare(&standard).unwrap();
    let std_fit = fit_prepared_oracle(&prepared, h, w, &standard).unwrap();
    let auto_fit = fit_prepared_oracle(&prepared, h, w, &auto_data()).unwrap();
    (std_fit, auto_fit)
}

#[test]
fn auto_data_follows_the_data_in_both_directions() {
    // Without a dark-field the standard rule smooths too little (the dark-field picks up 2.8
    // counts of noise); with a dark-field four times S1's it smooths too much. Measured (oracle,
    // seed 2): S2 multiplier 1.99, flat-field RMSE 0.00506 vs 0.00580; dark x4: 0.449, 0.0231
    // vs 0.0293 (dark-field RMSE 22.7 vs 44.9 counts).
    for (spec, up, flat_ratio) in [
        (
            Synthetic {
                darkfield: false,
                ..small(60, 2)
            },
            true,
            0.93,
        ),
        (
            Synthetic {
                dark_scale: 4.0,
                ..small(60, 2)
            },
            false,
            0.85,
        ),
    ] {
        let data = generate(&spec);
        let (std_fit, auto_fit) = both(&data.stack);
        let choice = auto_fit.report.smoothness.clone().unwrap();
        let (flat_std, dark_std) = errors(&std_fit, &data);
        let (flat_auto, dark_auto) = errors(&auto_fit, &data);
        eprintln!(
            "dark x{}: multiplier {:.3} (tried {:?}), flat-field RMSE {flat_auto:.5} vs \
             {flat_std:.5}, dark-field RMSE {dark_auto:.2} vs {dark_std:.2}",
            if spec.darkfield { spec.dark_scale } else { 0.0 },
            choice.chosen,
            choice.multipliers
        );
        assert_eq!(choice.chosen > 1.0, up, "{}", choice.chosen);
        assert!(
            flat_auto <= flat_ratio * flat_std,
            "{flat_auto} vs {flat_std}"
        );
        assert!(dark_auto <= dark_std, "{dark_auto} vs {dark_std}");
        assert!(
            (auto_fit.report.lambda_flatfield - choice.chosen * choice.standard_lambda).abs()
                <= 1e-12 * auto_fit.report.lambda_flatfield
        );
        assert!(auto_fit
            .report
            .changed_parameters
            .iter()
            .any(|c| c.contains("smoothness = auto-data")));
    }
}

#[test]
fn the_gpu_choice_matches_the_oracle() {
    // A small stack (24 images of 64x64 on a 64x64 working grid) through every step of the
    // choice on the GPU: the same rungs, the same choice.
    let data = generate(&Synthetic {
        count: 24,
        height: 64,
        width: 64,
        blobs: 3,
        ..Synthetic::s1(5)
    });
    let params = BasicParams {
        working_size: 64,
        ..auto_data()
    };
    let prepared = data.stack.prepare(&params).unwrap();
    let gpu = choose_smoothness(common::ctx(), &prepared, &params).unwrap();
    let cpu = choose_smoothness_oracle(&prepared, &params).unwrap();
    eprintln!("GPU {gpu:?}\noracle {cpu:?}");
    assert_eq!(gpu.multipliers, cpu.multipliers);
    for (g, c) in gpu.scores.iter().zip(&cpu.scores) {
        assert!((g - c).abs() <= 1e-3 * c, "{g} vs {c}");
    }
    assert!(
        (gpu.chosen / cpu.chosen - 1.0).abs() <= 1e-2,
        "{gpu:?} {cpu:?}"
    );
}

#[test]
fn too_few_images_keep_the_standard_rule_and_say_so() {
    let data = generate(&small(6, 3));
    let fitted = fit(common::ctx(), &data.stack, &auto_data(), |_| {}).unwrap();
    assert!(fitted.report.smoothness.is_none());
    let standard = data.stack.prepare(&BasicParams::default()).unwrap();
    assert_eq!(
        fitted.report.lambda_flatfield,
        standard.constants.lambda_flatfield
    );
    assert!(
        fitted
            .report
            .warnings
            .iter()
            .any(|w| w.contains("auto-data needs at least 8 images")),
        "{:?}",
        fitted.report.warnings
    );
}

/// The evaluation set: S1 (docs/flatfield-method.md, "Synthetic stacks") and variants on 128x128
/// images.
fn evaluation_stacks() -> Vec<(&'static str, Synthetic)> {
    vec![
        ("S1", small(60, 2)),
        (
            "S2 (no dark-field)",
            Synthetic {
                darkfield: false,
                ..small(60, 2)
            },
        ),
        (
            "strong vignette (σ 0.35)",
            Synthetic {
                vignette_width: 0.35,
                ..small(60, 2)
            },
        ),
        (
            "dark-field x4",
            Synthetic {
                dark_scale: 4.0,
                ..small(60, 2)
            },
        ),
        (
            "dim (b 20-120, dark x0.2)",
            Synthetic {
                background: (20.0, 120.0),
                dark_scale: 0.2,
                ..small(60, 2)
            },
        ),
        (
            "uniform illumination",
            Synthetic {
                vignette: false,
                ..small(60, 2)
            },
        ),
        (
            "S3 (dense texture)",
            Synthetic {
                blobs: 0,
                texture_sigma: Some(6.0),
                ..small(60, 2)
            },
        ),
        (
            "S5 (narrow brightness)",
            Synthetic {
                background: (600.0, 800.0),
                ..small(60, 2)
            },
        ),
        ("S1, 120 images", small(120, 1)),
        ("S1, 120 images, seed 2", small(120, 2)),
        (
            "strong vignette, 120 images",
            Synthetic {
                vignette_width: 0.35,
                ..small(120, 1)
            },
        ),
    ]
}

#[test]
#[ignore = "the full comparison: an hour with the f64 oracle on 2 cores"]
fn evaluation_against_the_standard_rule() {
    let mut ratios = Vec::new();
    for (name, spec) in evaluation_stacks() {
        let data = generate(&spec);
        let start = std::time::Instant::now();
        let (std_fit, auto_fit) = both(&data.stack);
        let (flat_std, dark_std) = errors(&std_fit, &data);
        let (flat_auto, dark_auto) = errors(&auto_fit, &data);
        let choice = auto_fit.report.smoothness.clone().unwrap();
        println!(
            "| {name} | {:.3} | {flat_std:.5} | {flat_auto:.5} | {:+.1} % | {dark_std:.2} | \
             {dark_auto:.2} | {:.0} s |",
            choice.chosen,
            100.0 * (flat_auto / flat_std - 1.0),
            start.elapsed().as_secs_f64()
        );
        ratios.push(flat_auto / flat_std);
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    let worst = ratios.iter().cloned().fold(f64::MIN, nan_max);
    println!("flat-field RMSE auto / standard: mean {mean:.3}, worst {worst:.3}");
    // The rule of issue 15 for making auto-data the default: better on average and worse on none
    // by more than 5 %. Measured: it does not hold (S5 +29.9 %, docs/benchmarks.md), so the default must
    // stay the standard rule unless a change to the choice makes it hold.
    let rule_holds = mean < 1.0 && worst <= 1.05;
    println!("the rule holds: {rule_holds}");
    if !rule_holds {
        assert_eq!(BasicParams::default().smoothness, Smoothness::Standard);
    }
}

/// The working flat-field's RMSE against a reference fit's (normalised to mean 1).
fn rmse_to(fit: &Fit, reference: &[f64]) -> f64 {
    let mean = reference.iter().sum::<f64>() / reference.len() as f64;
    (fit.report
        .working_flatfield
        .iter()
        .zip(reference)
        .map(|(a, b)| (*a as f64 - b / mean).powi(2))
        .sum::<f64>()
        / reference.len() as f64)
        .sqrt()
}

#[test]
#[ignore = "the real fixtures: half an hour with the f64 oracle on 2 cores"]
fn evaluation_on_the_real_fixtures() {
    // No ground truth here: what auto-data chooses, how far it moves the flat-field, and how far
    // each fit (sorting off) is from the reference implementation's (standard rule, sorting on).
    let dir = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/basic"));
    for name in [
        "timelapse_brightfield",
        "timelapse_nanog",
        "timelapse_pu1",
        "wsi_brain",
    ] {
        let start = std::time::Instant::now();
        let stack = read_stack(&dir.join(format!("{name}.images.npy"))).unwrap();
        let reference: Vec<f64> = ndarray::Array2::<f32>::read_npy(
            std::fs::File::open(dir.join(format!("{name}.ref.flatfield.npy"))).unwrap(),
        )
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect();
        let (std_fit, auto_fit) = both(&stack);
        let moved = (std_fit
            .report
            .working_flatfield
            .iter()
            .zip(&auto_fit.report.working_flatfield)
            .map(|(a, b)| ((a - b) as f64).powi(2))
            .sum::<f64>()
            / std_fit.report.working_flatfield.len() as f64)
            .sqrt();
        let choice = auto_fit.report.smoothness.clone().unwrap();
        println!(
            "| {name} | {:.3} | {moved:.5} | {:.5} | {:.5} | tried {:?} | {:.0} s |",
            choice.chosen,
            rmse_to(&std_fit, &reference),
            rmse_to(&auto_fit, &reference),
            choice.multipliers,
            start.elapsed().as_secs_f64()
        );
    }
}
