//! Plan-time tuning: a tuned plan is as exact as the default one and repeats its bits, the winner is
//! written to the cache file, and the next plan of the same problem takes it from there.
//!
//! One test function: it points the cache at a temporary folder and asks for tuning of every plan
//! before the first plan of the process (both settings are read from the environment), so it is
//! a test binary of its own: in a binary with other tests their plans would be tuned too.

mod common;

use common::{new_context, to_f64};
use lamino::fft::{
    Direction, FftPlan, LaunchSource, Normalization, Strategy, FFT_CACHE_ENV, FFT_TUNE_ENV,
};
use lamino::random::SplitMix64;
use lamino::reference::{fft_last_axes, max_relative_error};

#[test]
fn tuned_plans_are_exact_cached_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("tuning").join("fft-tuning.json");
    std::env::set_var(FFT_CACHE_ENV, &cache);
    std::env::set_var(FFT_TUNE_ENV, "all");
    assert_eq!(
        lamino::fft::tuning_cache_path().as_deref(),
        Some(cache.as_path())
    );
    let ctx = new_context();
    // 128 x 128 (in-place passes along a strided and a contiguous axis) and 2^16 (two out-of-place
    // passes), both large enough for specialised kernels.
    for (shape, axes) in [(vec![4usize, 128, 128], 2usize), (vec![1usize, 1 << 16], 1)] {
        let n: usize = shape.iter().product();
        let input = SplitMix64::new(21).complex_uniform(n);
        let data = ctx.upload("tuning test", &input).unwrap();
        let plan = |strategy| {
            FftPlan::with_strategy(
                &ctx,
                &shape,
                axes,
                Direction::Forward,
                Normalization::None,
                &data,
                strategy,
            )
            .unwrap()
        };
        let run = |plan: &FftPlan| {
            ctx.write(&data, 0, &input);
            plan.execute(&ctx).unwrap();
            ctx.read::<[u32; 2]>(&data, 0, n).unwrap()
        };
        let tuned = plan(Strategy::Auto);
        let sources: Vec<LaunchSource> = tuned
            .axis_plans()
            .iter()
            .flat_map(|p| p.passes().iter().map(|x| x.source))
            .collect();
        assert!(
            sources.iter().all(|&s| s == LaunchSource::Measured),
            "{shape:?}: {sources:?}"
        );
        let first = run(&tuned);
        assert!(
            first == run(&tuned),
            "{shape:?}: a tuned plan repeats its bits"
        );
        let got: Vec<num_complex::Complex<f32>> = first
            .iter()
            .map(|w| num_complex::Complex::new(f32::from_bits(w[0]), f32::from_bits(w[1])))
            .collect();
        let mut reference = to_f64(&input);
        fft_last_axes(&mut reference, &shape, axes, Direction::Forward, 2);
        let err = max_relative_error(&got, &reference);
        let bound = lamino::fft::recipe::accuracy_bound(&shape[shape.len() - axes..]);
        assert!(err <= bound, "{shape:?}: error {err:.2e} above {bound:.2e}");

        // The second plan of the same problem takes every launch from the cache, and computes the
        // same bits.
        let again = plan(Strategy::Auto);
        for (a, b) in tuned.axis_plans().iter().zip(again.axis_plans()) {
            for (x, y) in a.passes().iter().zip(b.passes()) {
                assert_eq!(y.source, LaunchSource::Cache);
                assert_eq!(x.launch, y.launch);
            }
        }
        assert!(
            first == run(&again),
            "{shape:?}: the cached plan repeats the bits"
        );
        // Explicit strategies are never tuned.
        let fused = plan(Strategy::Fused);
        assert!(fused
            .axis_plans()
            .iter()
            .flat_map(|p| p.passes())
            .all(|x| x.source == LaunchSource::Default));
    }
    let text = std::fs::read_to_string(&cache).expect("the cache file is written");
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let entries = file["entries"].as_object().unwrap();
    assert!(entries.len() >= 3, "{entries:?}");
    assert!(entries
        .keys()
        .all(|k| k.contains(&ctx.info().name) && k.contains("lamino ")));
}
