//! FFT accuracy against rustfft in f64: relative L-infinity error max|a-b|/max|b| at most
//! 2e-6 + 5e-7 log10(N), doubled when N has a prime factor above 13, for random input uniform in
//! [-0.5, 0.5] (fixed seeds), forward and inverse.
//!
//! The default suite covers every length 2..=1024 plus named sizes; the full sweep to 4096 runs with
//! `cargo test --release --test fft accuracy:: -- --ignored --nocapture`.

use crate::common::{ctx, fft_error_ratio, fft_error_ratio_with};
use lamino::fft::{Direction, Strategy};

/// Checks lengths `lens` (batch of 3, so batching is exercised everywhere) with both strategies
/// (fused where the length fits workgroup memory, multi-pass where it has two or more passes;
/// where only one applies it runs for both) and reports the worst.
fn sweep(lens: impl Iterator<Item = usize>) {
    let mut worst = (0.0f64, 0usize, Direction::Forward, Strategy::Auto);
    let mut failures = Vec::new();
    for n in lens {
        for direction in [Direction::Forward, Direction::Inverse] {
            for strategy in [Strategy::Fused, Strategy::MultiPass] {
                let ratio = fft_error_ratio_with(ctx(), &[3, n], 1, direction, n as u64, strategy);
                if ratio > worst.0 {
                    worst = (ratio, n, direction, strategy);
                }
                if ratio.is_nan() || ratio > 1.0 {
                    failures.push(format!(
                        "N={n} {direction:?} {strategy:?}: error/bound = {ratio:.3}"
                    ));
                }
            }
        }
    }
    eprintln!(
        "worst error/bound ratio {:.3} at N={} ({:?}, {:?})",
        worst.0, worst.1, worst.2, worst.3
    );
    assert!(
        failures.is_empty(),
        "{} lengths above the bound:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_length_from_2_to_1024() {
    sweep(2..=1024);
}

#[test]
#[ignore = "full sweep: cargo test --release --test fft accuracy:: -- --ignored --nocapture"]
fn every_length_from_2_to_4096() {
    sweep(2..=4096);
}

#[test]
fn named_lengths_from_the_operator_and_beyond_workgroup_memory() {
    // Sizes of real laminography data (768 = 2^8 3, 2304, 1152, 2000, 1600) and lengths that need
    // the multi-pass path (8192 and 2^14..2^20 exceed workgroup memory).
    // Batches of 2 so that the multi-pass path also addresses several transforms per binding.
    let mut lens = vec![768, 1152, 2304, 2000, 1600, 8192, 4099];
    lens.extend((14..=20).map(|p| 1usize << p));
    for n in lens {
        for direction in [Direction::Forward, Direction::Inverse] {
            let ratio = fft_error_ratio(ctx(), &[2, n], 1, direction, 7);
            assert!(
                ratio <= 1.0,
                "N={n} {direction:?}: error/bound = {ratio:.3}"
            );
        }
    }
}

#[test]
fn two_and_three_dimensional_shapes() {
    let shapes: [&[usize]; 5] = [
        &[256, 256],
        &[768, 768],
        &[100, 60],
        &[64, 64, 64],
        &[2, 17, 30],
    ];
    for shape in shapes {
        let axes = shape.len().min(3) - usize::from(shape == [2, 17, 30]);
        for direction in [Direction::Forward, Direction::Inverse] {
            let ratio = fft_error_ratio(ctx(), shape, axes, direction, 11);
            assert!(
                ratio <= 1.0,
                "{shape:?} {direction:?}: error/bound = {ratio:.3}"
            );
        }
    }
}

#[test]
fn specialised_kernels_of_every_strategy() {
    // Batches of at least 2^16 elements get kernels specialised to their sizes, with other
    // launches than the small batches above: odd sub-lengths in the multi-pass chain (768 = 32 x 24),
    // strided axes and 3D.
    let shapes: [(&[usize], usize); 4] = [
        (&[128, 768], 1),
        (&[96, 768], 1),
        (&[2, 768, 768], 2),
        (&[4, 64, 64, 64], 3),
    ];
    for (shape, axes) in shapes {
        for strategy in [Strategy::Fused, Strategy::MultiPass] {
            let ratio = fft_error_ratio_with(ctx(), shape, axes, Direction::Forward, 13, strategy);
            assert!(
                ratio <= 1.0,
                "{shape:?} {strategy:?}: error/bound = {ratio:.3}"
            );
        }
    }
}
