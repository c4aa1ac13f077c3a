//! N-dimensional FFTs on the CPU with rustfft, generic over f32 and f64, parallel across blocks.

use num_complex::Complex;
use rustfft::{FftNum, FftPlanner};

use crate::fft::Direction;

/// Transforms the last `axes` axes of the row-major array `data` of `shape` in place (unnormalised,
/// the GPU's sign convention), using up to `threads` threads.
pub fn fft_last_axes<T: FftNum>(
    data: &mut [Complex<T>],
    shape: &[usize],
    axes: usize,
    direction: Direction,
    threads: usize,
) {
    assert_eq!(
        data.len(),
        shape.iter().product::<usize>(),
        "shape does not match the data"
    );
    let mut planner = FftPlanner::<T>::new();
    for axis in (shape.len() - axes..shape.len()).rev() {
        let n = shape[axis];
        let after: usize = shape[axis + 1..].iter().product();
        let fft = match direction {
            Direction::Forward => planner.plan_fft_forward(n),
            Direction::Inverse => planner.plan_fft_inverse(n),
        };
        // Independent blocks: one per index of the leading axes, `n * after` elements each.
        let block = n * after;
        let blocks = data.len() / block;
        let per_thread = blocks.div_ceil(threads.max(1)).max(1);
        std::thread::scope(|scope| {
            for group in data.chunks_mut(per_thread * block) {
                let fft = fft.clone();
                scope.spawn(move || {
                    let mut scratch =
                        vec![Complex::new(T::zero(), T::zero()); fft.get_inplace_scratch_len()];
                    let mut lines = vec![
                        Complex::new(T::zero(), T::zero());
                        if after == 1 { 0 } else { block }
                    ];
                    for b in group.chunks_mut(block) {
                        if after == 1 {
                            fft.process_with_scratch(b, &mut scratch);
                            continue;
                        }
                        // Gather the strided columns into contiguous lines, transform, scatter.
                        for c in 0..after {
                            for k in 0..n {
                                lines[c * n + k] = b[k * after + c];
                            }
                        }
                        fft.process_with_scratch(&mut lines, &mut scratch);
                        for c in 0..after {
                            for k in 0..n {
                                b[k * after + c] = lines[c * n + k];
                            }
                        }
                    }
                });
            }
        });
    }
}

/// `max |a - b| / max |b|`, the relative L-infinity error of `a` against the reference `b`.
/// Returns infinity when `a` holds a NaN or infinity, so a broken result can never pass.
pub fn max_relative_error(a: &[Complex<f32>], b: &[Complex<f64>]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mut max_diff = 0.0f64;
    let mut max_ref = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        let x = Complex::new(x.re as f64, x.im as f64);
        if !x.re.is_finite() || !x.im.is_finite() {
            return f64::INFINITY;
        }
        max_diff = max_diff.max((x - y).norm());
        max_ref = max_ref.max(y.norm());
    }
    if max_ref == 0.0 {
        max_diff
    } else {
        max_diff / max_ref
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direct O(N^2) DFT along one axis, the definition the references must agree with.
    fn naive_dft_2d(x: &[Complex<f64>], n0: usize, n1: usize) -> Vec<Complex<f64>> {
        let mut out = vec![Complex::new(0.0, 0.0); n0 * n1];
        for k0 in 0..n0 {
            for k1 in 0..n1 {
                let mut acc = Complex::new(0.0, 0.0);
                for j0 in 0..n0 {
                    for j1 in 0..n1 {
                        let phase = -2.0
                            * std::f64::consts::PI
                            * ((j0 * k0) as f64 / n0 as f64 + (j1 * k1) as f64 / n1 as f64);
                        acc += x[j0 * n1 + j1] * Complex::from_polar(1.0, phase);
                    }
                }
                out[k0 * n1 + k1] = acc;
            }
        }
        out
    }

    #[test]
    fn matches_the_direct_dft_in_2d_with_a_batch_axis() {
        let (batch, n0, n1) = (3, 6, 5);
        let mut rng = crate::random::SplitMix64::new(1);
        let x: Vec<Complex<f64>> = rng
            .complex_uniform(batch * n0 * n1)
            .iter()
            .map(|c| Complex::new(c.re as f64, c.im as f64))
            .collect();
        let mut y = x.clone();
        fft_last_axes(&mut y, &[batch, n0, n1], 2, Direction::Forward, 2);
        for b in 0..batch {
            let block = b * n0 * n1..(b + 1) * n0 * n1;
            let direct = naive_dft_2d(&x[block.clone()], n0, n1);
            for (u, v) in y[block].iter().zip(&direct) {
                assert!((u - v).norm() < 1e-12, "{u} vs {v}");
            }
        }
    }

    #[test]
    fn relative_error_flags_non_finite_values() {
        let b = [Complex::new(1.0, 0.0)];
        assert_eq!(
            max_relative_error(&[Complex::new(f32::NAN, 0.0)], &b),
            f64::INFINITY
        );
        assert!((max_relative_error(&[Complex::new(1.5, 0.0)], &b) - 0.5).abs() < 1e-12);
    }
}
