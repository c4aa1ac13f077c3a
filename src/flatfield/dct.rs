//! The orthonormal 2D DCT-II/III by the matrix method (docs/flatfield-method.md, "DCT"): exact for
//! any size,
//! and the working grid is small (4 transforms of 128x128 per iteration). The matrix is computed
//! in f64 on the host; the GPU gets it as f32.

/// `C[k][n] = s_k cos(π (2n+1) k / 2n)`, row-major `k * n + n`, with `s_0 = √(1/n)`,
/// `s_k = √(2/n)`: `DCT(x) = C x`, `IDCT(X) = Cᵀ X`.
pub fn dct_matrix(n: usize) -> Vec<f64> {
    let mut c = vec![0.0; n * n];
    for k in 0..n {
        let s = if k == 0 {
            (1.0 / n as f64).sqrt()
        } else {
            (2.0 / n as f64).sqrt()
        };
        for i in 0..n {
            // Reduce the angle in integers (period 4n) so that large k·i loses no precision.
            let m = ((2 * i + 1) * k) % (4 * n);
            c[k * n + i] = s * (std::f64::consts::PI * m as f64 / (2 * n) as f64).cos();
        }
    }
    c
}

/// The transpose of a row-major `n x n` matrix.
pub(super) fn transpose(c: &[f64], n: usize) -> Vec<f64> {
    (0..n * n).map(|i| c[(i % n) * n + i / n]).collect()
}

/// A square 2D orthonormal DCT of side `n` in f64 (the oracle's transform).
#[derive(Debug, Clone)]
pub struct Dct2 {
    n: usize,
    c: Vec<f64>,
    /// `Cᵀ`, so that both passes of both directions read their coefficients contiguously.
    ct: Vec<f64>,
    scratch: Vec<f64>,
}

impl Dct2 {
    pub fn new(n: usize) -> Self {
        let c = dct_matrix(n);
        let ct = transpose(&c, n);
        Self {
            n,
            c,
            ct,
            scratch: vec![0.0; n * n],
        }
    }

    /// `out = C x Cᵀ` (forward, DCT-II along both axes).
    pub fn forward(&mut self, x: &[f64], out: &mut [f64]) {
        self.apply(x, out, false);
    }

    /// `out = Cᵀ X C` (inverse, DCT-III along both axes).
    pub fn inverse(&mut self, x: &[f64], out: &mut [f64]) {
        self.apply(x, out, true);
    }

    fn apply(&mut self, x: &[f64], out: &mut [f64], inverse: bool) {
        let n = self.n;
        assert_eq!(x.len(), n * n);
        assert_eq!(out.len(), n * n);
        // Coefficient (k, i) of the 1D transform: m(k, i) = C[k][i] forward, C[i][k] inverse.
        // `by_output[k]` is the row (m(k, i))_i, `by_input[i]` the row (m(k, i))_k.
        let (by_output, by_input) = if inverse {
            (&self.ct, &self.c)
        } else {
            (&self.c, &self.ct)
        };
        // Along x: scratch[y][k] = Σ_i x[y][i] m(k, i).
        for (dst, row) in self.scratch.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
            accumulate_rows(dst, row, by_input);
        }
        // Along y: out[k][x] = Σ_i m(k, i) scratch[i][x].
        for (dst, coefs) in out.chunks_exact_mut(n).zip(by_output.chunks_exact(n)) {
            accumulate_rows(dst, coefs, &self.scratch);
        }
    }
}

/// `dst = Σ_i weights[i] rows[i]`, `rows` row-major with rows as long as `dst`, each element's sum
/// taken over `i` in increasing order from zero. Four rows per sweep of `dst`, added left to
/// right (the roundings of the one-row-at-a-time sum, so the same values), read and write `dst`
/// a quarter as often: the oracle runs in the tests' build (opt-level 1), where the DCT's former
/// loops took about 60 % of the auto-data test's profile (perf).
fn accumulate_rows(dst: &mut [f64], weights: &[f64], rows: &[f64]) {
    let n = dst.len();
    dst.fill(0.0);
    let mut weight_quads = weights.chunks_exact(4);
    let mut row_quads = rows.chunks_exact(4 * n);
    for (w, quad) in weight_quads.by_ref().zip(row_quads.by_ref()) {
        let (r0, rest) = quad.split_at(n);
        let (r1, rest) = rest.split_at(n);
        let (r2, r3) = rest.split_at(n);
        for ((((d, a), b), c), e) in dst.iter_mut().zip(r0).zip(r1).zip(r2).zip(r3) {
            *d = *d + w[0] * a + w[1] * b + w[2] * c + w[3] * e;
        }
    }
    for (w, row) in weight_quads
        .remainder()
        .iter()
        .zip(row_quads.remainder().chunks_exact(n))
    {
        for (d, r) in dst.iter_mut().zip(row) {
            *d += w * r;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    /// The closed-form definition, evaluated directly.
    fn direct(x: &[f64], n: usize) -> Vec<f64> {
        let s = |k: usize| {
            if k == 0 {
                (1.0 / n as f64).sqrt()
            } else {
                (2.0 / n as f64).sqrt()
            }
        };
        let pi = std::f64::consts::PI;
        let mut out = vec![0.0; n * n];
        for ky in 0..n {
            for kx in 0..n {
                let mut acc = 0.0;
                for y in 0..n {
                    for xx in 0..n {
                        acc += x[y * n + xx]
                            * (pi * ((2 * y + 1) * ky) as f64 / (2 * n) as f64).cos()
                            * (pi * ((2 * xx + 1) * kx) as f64 / (2 * n) as f64).cos();
                    }
                }
                out[ky * n + kx] = s(ky) * s(kx) * acc;
            }
        }
        out
    }

    #[test]
    fn matches_the_definition_and_inverts() {
        for n in [1usize, 2, 3, 5, 8, 17] {
            let mut rng = SplitMix64::new(n as u64);
            let x: Vec<f64> = (0..n * n).map(|_| rng.next_f64() - 0.3).collect();
            let mut dct = Dct2::new(n);
            let mut coef = vec![0.0; n * n];
            dct.forward(&x, &mut coef);
            let want = direct(&x, n);
            for (a, b) in coef.iter().zip(&want) {
                assert!((a - b).abs() < 1e-12, "n={n}: {a} vs {b}");
            }
            let mut back = vec![0.0; n * n];
            dct.inverse(&coef, &mut back);
            for (a, b) in back.iter().zip(&x) {
                assert!((a - b).abs() < 1e-12, "n={n} round trip");
            }
        }
    }

    #[test]
    fn dc_coefficient_of_ones_is_the_side() {
        // The λ_F sanity value (docs/flatfield-method.md, "DCT"): DCT2 of a 128x128 all-ones image
        // has DC = 128.
        let mut dct = Dct2::new(128);
        let mut coef = vec![0.0; 128 * 128];
        dct.forward(&vec![1.0; 128 * 128], &mut coef);
        assert!((coef[0] - 128.0).abs() < 1e-9);
        assert!(coef[1..].iter().all(|c| c.abs() < 1e-9));
    }
}
