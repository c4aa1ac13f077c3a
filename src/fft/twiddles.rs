//! Host-side tables in f64, rounded once to f32 (WGSL has no portable f64).

use std::f64::consts::PI;

use num_complex::Complex;
use rustfft::FftPlanner;

use super::Direction;

/// `e^{-2 pi i num/den}` in f64 with the argument reduced exactly in integers first.
fn root(num: u64, den: u64) -> Complex<f64> {
    let r = num % den;
    Complex::from_polar(1.0, -2.0 * PI * r as f64 / den as f64)
}

fn to_f32(c: Complex<f64>) -> [f32; 2] {
    [c.re as f32, c.im as f32]
}

/// The forward roots `w_n^x = e^{-2 pi i x/n}` for x < n: the twiddle table of a sub-transform of
/// length n (each stage's twiddle `w_m^a`, m dividing n, is entry `a n/m`).
pub(crate) fn root_table(n: usize) -> Vec<[f32; 2]> {
    (0..n as u64).map(|x| to_f32(root(x, n as u64))).collect()
}

/// Bluestein tables for length n through inner length m: the chirp `e^{-+ i pi k^2/n}` and the
/// spectrum of its conjugate (wrapped to length m), divided by m (the inner inverse FFT is
/// unnormalised).
pub(crate) fn bluestein_tables(
    n: usize,
    m: usize,
    direction: Direction,
) -> (Vec<[f32; 2]>, Vec<[f32; 2]>) {
    let (n64, two_n) = (n as u64, 2 * n as u64);
    let chirp64: Vec<Complex<f64>> = (0..n64)
        .map(|k| {
            let c = root(k * k % two_n, two_n);
            match direction {
                Direction::Forward => c,
                Direction::Inverse => c.conj(),
            }
        })
        .collect();
    let mut kernel = vec![Complex::new(0.0, 0.0); m];
    kernel[0] = chirp64[0].conj();
    for k in 1..n {
        kernel[k] = chirp64[k].conj();
        kernel[m - k] = chirp64[k].conj();
    }
    FftPlanner::<f64>::new()
        .plan_fft_forward(m)
        .process(&mut kernel);
    let chirp = chirp64.into_iter().map(to_f32).collect();
    let spectrum = kernel.into_iter().map(|c| to_f32(c / m as f64)).collect();
    (chirp, spectrum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_tables_hold_the_forward_roots() {
        let t = root_table(12);
        assert_eq!(t.len(), 12);
        assert_eq!(t[0], [1.0, 0.0]);
        assert!(t[3][0].abs() < 1e-7 && t[3][1] == -1.0);
        let expect = root(5, 12);
        assert!(
            (t[5][0] as f64 - expect.re).abs() < 1e-7 && (t[5][1] as f64 - expect.im).abs() < 1e-7
        );
    }
}
