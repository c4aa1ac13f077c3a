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

/// The twiddle and root table of a Stockham plan, plus per-pass offsets into it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StockhamTables {
    /// Forward twiddles, then roots of unity of the radices that use the direct DFT.
    pub values: Vec<[f32; 2]>,
    /// Per pass: (radix, ns, twiddle offset, root offset).
    pub passes: Vec<[u32; 4]>,
}

/// Pass `s` with radix R after sub-transforms of length Ns needs `w^(k r)` for k < Ns and
/// 1 <= r < R, with `w = e^{-2 pi i/(Ns R)}`: Ns values (N-1 over all passes).
pub(crate) fn stockham_tables(radices: &[u32]) -> StockhamTables {
    let mut values = Vec::new();
    let mut passes = Vec::new();
    let mut ns = 1u64;
    for &radix in radices {
        let r = radix as u64;
        let offset = values.len() as u32;
        for k in 0..ns {
            for j in 1..r {
                values.push(to_f32(root(k * j, ns * r)));
            }
        }
        passes.push([radix, ns as u32, offset, 0]);
        ns *= r;
    }
    // Roots for the direct small DFTs, one set per distinct radix.
    for pass in 0..passes.len() {
        let radix = passes[pass][0];
        if matches!(radix, 2 | 4 | 8) {
            continue;
        }
        let existing = passes[..pass].iter().find(|p| p[0] == radix).map(|p| p[3]);
        passes[pass][3] = existing.unwrap_or_else(|| {
            let offset = values.len() as u32;
            values.extend((0..radix as u64).map(|m| to_f32(root(m, radix as u64))));
            offset
        });
    }
    StockhamTables { values, passes }
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
    fn tables_have_n_minus_one_twiddles_and_shared_roots() {
        let t = stockham_tables(&[8, 3, 3, 5]);
        let n = 8 * 3 * 3 * 5;
        // N - 1 twiddles, then one root set for 3 and one for 5.
        assert_eq!(t.values.len(), n - 1 + 3 + 5);
        assert_eq!(t.passes[1][3], t.passes[2][3]);
        assert_eq!(
            t.passes.iter().map(|p| p[1]).collect::<Vec<_>>(),
            vec![1, 8, 24, 72]
        );
        let last = t.passes[3];
        // k = 1, r = 1 of the last pass: e^{-2 pi i / N}.
        let w = t.values[(last[2] + 4) as usize];
        let expect = root(1, n as u64);
        assert!((w[0] as f64 - expect.re).abs() < 1e-7 && (w[1] as f64 - expect.im).abs() < 1e-7);
    }
}
