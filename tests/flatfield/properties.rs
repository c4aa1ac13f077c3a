//! Properties of the GPU fit (docs/flatfield-method.md, "Properties") and its handling of bad
//! input, at production parameters. The invariance properties use S1 (docs/flatfield-method.md,
//! "Synthetic stacks"), on which their thresholds were measured.

use crate::common;

use std::sync::OnceLock;

use lamino::flatfield::synthetic::{generate, Synthetic, SyntheticData};
use lamino::flatfield::{
    fit, transform, transform_cpu, BasicParams, Fit, FlatfieldError, Pixels, Stack, TransformParams,
};
use lamino::metrics::nan_max;
use lamino::random::SplitMix64;

/// S1's recipe on 128x128 images (the working grid): 10 blobs keep S1's density.
fn small(seed: u64) -> Synthetic {
    Synthetic {
        height: 128,
        width: 128,
        blobs: 10,
        ..Synthetic::s1(seed)
    }
}

fn base() -> &'static (SyntheticData, Fit) {
    static BASE: OnceLock<(SyntheticData, Fit)> = OnceLock::new();
    BASE.get_or_init(|| {
        let data = generate(&Synthetic::s1(5));
        let fitted = fit(common::ctx(), &data.stack, &BasicParams::default(), |_| {}).unwrap();
        (data, fitted)
    })
}

fn map_stack(stack: &Stack, f: impl Fn(usize, &[f32]) -> Vec<f32>) -> Stack {
    let px = stack.height() * stack.width();
    let mut out = Vec::with_capacity(stack.count() * px);
    for i in 0..stack.count() {
        out.extend(f(i, &stack.image_f32(i)));
    }
    Stack::new(
        stack.count(),
        stack.height(),
        stack.width(),
        Pixels::F32(out),
    )
    .unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() as f64)
        .fold(0.0, nan_max)
}

fn mean(v: &[f32]) -> f64 {
    v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64
}

fn std(v: &[f32]) -> f64 {
    let m = mean(v);
    (v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
}

fn fit_default(stack: &Stack) -> Fit {
    fit(common::ctx(), stack, &BasicParams::default(), |_| {}).unwrap()
}

#[test]
fn repeated_runs_are_bit_identical() {
    let (data, first) = base();
    let again = fit_default(&data.stack);
    assert_eq!(first.fields, again.fields);
    assert_eq!(first.report, again.report);
}

#[test]
fn scaling_the_images_scales_only_the_dark_field() {
    let (data, reference) = base();
    let scaled = fit_default(&map_stack(&data.stack, |_, im| {
        im.iter().map(|v| 3.0 * v).collect()
    }));
    let flat = max_diff(&scaled.fields.flatfield, &reference.fields.flatfield);
    let ratio = mean(&scaled.fields.darkfield) / mean(&reference.fields.darkfield);
    eprintln!("x3: flat max |Δ| {flat:.2e}, dark ratio {ratio:.5}");
    assert!(flat < 1e-4, "{flat}");
    assert!((ratio - 3.0).abs() < 0.003, "{ratio}");
}

#[test]
fn an_offset_moves_the_dark_field_by_the_offset() {
    // The prototype measured this property (docs/flatfield-method.md, "Properties") with
    // MATLAB's dark-field weight λ_D = 0.4 λ_F (+495.9
    // counts, flat Δ 0.006) and set its bounds on that: flat Δ < 0.01, shift within ±2 %. This
    // port at 0.4: +494.4, Δ 0.0048. At the default 0.2 no correct fit meets Δ < 0.01: the GPU
    // and the f64 oracle both give Δ 0.0106 and +490.6 on this stack (0.1: 0.0159, +486.7). The
    // offset shrinks the brightness spread from 1.09 to 0.70, so the dark-field is less
    // identifiable (docs/flatfield-method.md, "Dark-field identifiability"), and the less the
    // dark-field is smoothed, the more of the
    // unexplained offset its smooth part o_R passes to the flat-field. The default is checked
    // with a bound of 1.5x its measurement.
    let (data, default_fit) = base();
    let shifted = map_stack(&data.stack, |_, im| im.iter().map(|v| v + 500.0).collect());
    for (ratio, flat_bound) in [(0.4, 0.01), (0.2, 0.016)] {
        let params = BasicParams {
            darkfield_ratio: ratio,
            ..BasicParams::default()
        };
        let reference = if params == BasicParams::default() {
            default_fit.clone()
        } else {
            fit(common::ctx(), &data.stack, &params, |_| {}).unwrap()
        };
        let moved = fit(common::ctx(), &shifted, &params, |_| {}).unwrap();
        let flat = max_diff(&moved.fields.flatfield, &reference.fields.flatfield);
        let shift = mean(&moved.fields.darkfield) - mean(&reference.fields.darkfield);
        eprintln!("+500 (λ_D = {ratio} λ_F): flat max |Δ| {flat:.2e}, dark shift {shift:.1}");
        assert!(flat < flat_bound, "{ratio}: {flat}");
        assert!((shift - 500.0).abs() < 10.0, "{ratio}: {shift}");
    }
}

#[test]
fn image_order_does_not_matter() {
    let (data, reference) = base();
    let n = data.stack.count();
    let reversed = fit_default(&map_stack(&data.stack, |i, _| {
        data.stack.image_f32(n - 1 - i)
    }));
    let flat = max_diff(&reversed.fields.flatfield, &reference.fields.flatfield);
    let dark = max_diff(&reversed.fields.darkfield, &reference.fields.darkfield);
    eprintln!("reversed: flat max |Δ| {flat:.2e}, dark max |Δ| {dark:.2e}");
    assert!(flat < 1e-5, "{flat}");
    assert!(dark < 0.01, "{dark}");
}

#[test]
fn uniform_illumination_gives_a_flat_flat_field() {
    let data = generate(&Synthetic {
        vignette: false,
        ..Synthetic::s1(9)
    });
    let fitted = fit_default(&data.stack);
    let s = std(&fitted.fields.flatfield);
    eprintln!("uniform illumination: flat-field std {s:.4}");
    assert!(s < 0.01, "{s}");
}

#[test]
fn a_blank_low_signal_channel_gives_finite_positive_fields() {
    // KINTSUGI's regression data: integers U(50, 200) and a few 4x4 spots of 2000.
    let (n, h, w) = (10, 64, 64);
    let mut rng = SplitMix64::new(11);
    let mut px: Vec<u16> = (0..n * h * w)
        .map(|_| 50 + (rng.next_f64() * 151.0) as u16)
        .collect();
    for _ in 0..6 {
        let (i, y, x) = (
            (rng.next_f64() * n as f64) as usize,
            (rng.next_f64() * (h - 4) as f64) as usize,
            (rng.next_f64() * (w - 4) as f64) as usize,
        );
        for dy in 0..4 {
            for dx in 0..4 {
                px[i * h * w + (y + dy) * w + x + dx] = 2000;
            }
        }
    }
    let stack = Stack::new(n, h, w, Pixels::U16(px)).unwrap();
    let fitted = fit_default(&stack);
    let f = &fitted.fields;
    assert!(f.flatfield.iter().all(|v| v.is_finite() && *v > 0.0));
    assert!(f.darkfield.iter().all(|v| v.is_finite()));
    assert!(std(&f.flatfield) < 0.5);
    let corrected = transform(common::ctx(), &stack, f, &TransformParams::default()).unwrap();
    assert!(corrected.iter().all(|v| v.is_finite() && *v >= 0.0));
}

#[test]
fn one_image_tiny_and_non_square_stacks_give_correct_shapes() {
    // (images, height, width, blobs per image). Stacks of 3-4 noisy images make the reweighting
    // dither until the 25-solve cap (measured: 14 s for 4 of 16x16 on lavapipe); these converge
    // in 2-5 solves and test the same shapes.
    for (n, h, w, blobs) in [
        (1usize, 40usize, 30usize, 10usize),
        (12, 16, 16, 0),
        (12, 128, 171, 3),
    ] {
        let data = generate(&Synthetic {
            count: n,
            height: h,
            width: w,
            blobs,
            ..small(13)
        });
        let fitted = fit_default(&data.stack);
        let f = &fitted.fields;
        assert_eq!((f.height, f.width), (h, w));
        assert_eq!(f.flatfield.len(), h * w);
        assert_eq!(f.darkfield.len(), h * w);
        assert_eq!(f.baseline.len(), n);
        assert!(f
            .flatfield
            .iter()
            .chain(&f.darkfield)
            .all(|v| v.is_finite()));
        assert!((mean(&f.flatfield) - 1.0).abs() < 1e-4 || fitted.report.fallback);
    }
}

#[test]
fn the_gpu_transform_matches_the_cpu_reference() {
    let (data, fitted) = base();
    for params in [
        TransformParams::default(),
        TransformParams {
            flat_min: 0.9,
            clip_negative: false,
        },
    ] {
        let gpu = transform(common::ctx(), &data.stack, &fitted.fields, &params).unwrap();
        let cpu = transform_cpu(&data.stack, &fitted.fields, &params);
        let worst = gpu
            .iter()
            .zip(&cpu)
            .map(|(a, b)| ((a - b).abs() / b.abs().max(1.0)) as f64)
            .fold(0.0, nan_max);
        assert!(worst < 1e-6, "{worst}");
        assert_eq!(gpu.iter().any(|v| *v < 0.0), cpu.iter().any(|v| *v < 0.0));
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let ctx = common::ctx();
    let p = BasicParams::default();
    let mut px = vec![1.0f32; 2 * 8 * 8];
    px[64 + 9] = f32::NAN;
    let nan = Stack::new(2, 8, 8, Pixels::F32(px)).unwrap();
    match fit(ctx, &nan, &p, |_| {}) {
        Err(FlatfieldError::NonFiniteInput {
            index: 1,
            y: 1,
            x: 1,
        }) => {}
        other => panic!("NaN input: {other:?}"),
    }
    let zero = Stack::new(3, 8, 8, Pixels::U8(vec![0; 3 * 64])).unwrap();
    assert!(matches!(
        fit(ctx, &zero, &p, |_| {}),
        Err(FlatfieldError::AllZero { count: 3 })
    ));
    let empty = Stack::new(0, 8, 8, Pixels::U8(vec![])).unwrap();
    assert!(matches!(
        fit(ctx, &empty, &p, |_| {}),
        Err(FlatfieldError::NoImages)
    ));
    assert!(matches!(
        Stack::new(2, 8, 8, Pixels::U16(vec![0; 100])),
        Err(FlatfieldError::BufferSize { found: 100, .. })
    ));
    let (data, fitted) = base();
    let other = Stack::new(1, 16, 16, Pixels::U8(vec![1; 256])).unwrap();
    let msg = transform(ctx, &other, &fitted.fields, &TransformParams::default())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("256x256") && msg.contains("16x16"), "{msg}");
    let _ = data;
}
