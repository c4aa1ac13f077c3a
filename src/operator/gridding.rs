//! The gridding kernel of one transformed axis: its constants, weights and the taps every
//! implementation (WGSL kernels, CPU references, padding) picks.

use std::f64::consts::PI;

use crate::geometry::kernel_half_width;

/// The "exponential of semicircle" gridding kernel of one transformed axis of length `n`
/// (docs/operator-method.md, "Gridding kernel"): `phi(t) = e^{beta (sqrt(1 - (2t/w)^2) - 1)}` for
/// `|t| <= w/2` grid cells and zero beyond, with an odd width `w = 2m + 1` taps centred on the
/// cell nearest the point. The half-width `m = ceil((log10(1/eps) + 0.9) / 2)` does not depend
/// on n: 2 at eps = 1e-3 (5 taps per axis, 25 in 2D, where the reference's Gaussian takes 9 and
/// 81), 4 at eps = 1e-6. `beta = 2.30 w` is the shape finufft uses on a grid oversampled twice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GriddingAxis {
    pub n: usize,
    /// Oversampled grid length, 2n.
    pub grid: usize,
    pub half_width: usize,
}

impl GriddingAxis {
    pub fn new(n: usize, eps: f64) -> Self {
        let m = kernel_half_width(eps);
        Self {
            n,
            grid: 2 * n,
            half_width: m,
        }
    }

    /// The kernel's width `w = 2m + 1` in grid cells.
    pub fn width(&self) -> f64 {
        (2 * self.half_width + 1) as f64
    }

    /// The kernel's shape parameter, `2.30 w`.
    pub fn beta(&self) -> f64 {
        2.30 * self.width()
    }

    /// The kernel at `t` grid cells from its centre: `e^{beta (sqrt(1 - (2t/w)^2) - 1)}`, zero for
    /// `|t| >= w/2`.
    pub fn kernel(&self, t: f64) -> f64 {
        let z = 2.0 * t / self.width();
        if z.abs() >= 1.0 {
            0.0
        } else {
            (self.beta() * ((1.0 - z * z).sqrt() - 1.0)).exp()
        }
    }

    /// `1 / phi_hat(2 pi j' / grid)` for memory index j (centred j' = j - n/2): the deconvolution
    /// that undoes the kernel's spectrum (the sum over grid cells is its quadrature). The
    /// spectrum `phi_hat(k) = 2 int_0^{w/2} phi(t) cos(k t) dt` is integrated with
    /// `t = (w/2) sin s`, which turns the kernel's square root into `cos s` and leaves a smooth
    /// integrand on `[0, pi/2]`, by Simpson's rule on 400 intervals (far below f32 rounding).
    pub fn deconvolution(&self) -> Vec<f32> {
        const INTERVALS: usize = 400;
        let half = self.width() / 2.0;
        let (h, beta) = ((PI / 2.0) / INTERVALS as f64, self.beta());
        // (t, weight) at every node: the kernel, Simpson's weight and dt/ds.
        let nodes: Vec<(f64, f64)> = (0..=INTERVALS)
            .map(|i| {
                let s = i as f64 * h;
                let simpson = if i == 0 || i == INTERVALS {
                    1.0
                } else if i % 2 == 1 {
                    4.0
                } else {
                    2.0
                };
                let phi = (beta * (s.cos() - 1.0)).exp();
                (half * s.sin(), simpson * h / 3.0 * phi * half * s.cos())
            })
            .collect();
        (0..self.n)
            .map(|j| {
                let k = 2.0 * PI * (j as f64 - (self.n / 2) as f64) / self.grid as f64;
                let spectrum: f64 = nodes.iter().map(|&(t, w)| w * (k * t).cos()).sum();
                (1.0 / (2.0 * spectrum)) as f32
            })
            .collect()
    }

    /// Interpolation weight of grid frequency `l` (unwrapped) for the point `xi`
    /// (cycles/sample): the kernel at `l - grid xi` cells.
    pub fn weight(&self, l: i64, xi: f64) -> f64 {
        self.kernel(l as f64 - self.grid as f64 * xi)
    }

    /// The weights of the kernel's `2m + 1` taps as polynomials of the point's offset from its
    /// nearest cell: what the U2 kernels and the CPU reference evaluate per point (Horner's rule,
    /// a handful of multiply-adds per tap) instead of a square root and an exponential per tap, as
    /// finufft does. Tap `i` (cell `base - m + i`) weighs `phi(i - m - t/2)` at
    /// `t = 2 (grid xi - base)` in `[-1, 1]`; each is interpolated in f64 at the `w + 2` Chebyshev
    /// nodes of `[-1, 1]` (degree `w + 1`) and stored by ascending powers of `t` in f32. Their
    /// error is below the kernel's own jump at the edge of its support (`e^-beta`) plus f32
    /// rounding (`tap_polynomials_follow_the_kernel`), and the transform they make still reaches
    /// eps (`kernel_reaches_its_accuracy`).
    pub fn tap_polynomials(&self) -> TapPolynomials {
        let (m, taps) = (self.half_width as f64, 2 * self.half_width + 1);
        let terms = taps + 2;
        let nodes: Vec<f64> = (0..terms)
            .map(|k| (PI * (k as f64 + 0.5) / terms as f64).cos())
            .collect();
        // The monomial coefficients of the Chebyshev polynomials T_0 .. T_{terms-1}.
        let mut chebyshev = vec![vec![0.0; terms]; terms];
        chebyshev[0][0] = 1.0;
        if terms > 1 {
            chebyshev[1][1] = 1.0;
        }
        for k in 2..terms {
            for d in 0..terms {
                let up = if d > 0 {
                    2.0 * chebyshev[k - 1][d - 1]
                } else {
                    0.0
                };
                chebyshev[k][d] = up - chebyshev[k - 2][d];
            }
        }
        let mut coefficients = Vec::with_capacity(taps * terms);
        for i in 0..taps {
            let values: Vec<f64> = nodes
                .iter()
                .map(|&t| self.kernel(i as f64 - m - t / 2.0))
                .collect();
            let mut monomial = vec![0.0; terms];
            for (k, powers) in chebyshev.iter().enumerate() {
                // Interpolation at the nodes: c_k = (2 - [k = 0]) / N sum_j f(x_j) T_k(x_j).
                let sum: f64 = (0..terms)
                    .map(|j| values[j] * (PI * k as f64 * (j as f64 + 0.5) / terms as f64).cos())
                    .sum();
                let c = sum * if k == 0 { 1.0 } else { 2.0 } / terms as f64;
                for (d, &power) in powers.iter().enumerate() {
                    monomial[d] += c * power;
                }
            }
            coefficients.extend(monomial.iter().map(|&c| c as f32));
        }
        TapPolynomials {
            taps,
            terms,
            coefficients,
        }
    }

    /// The grid cell nearest `grid * xi` (halves up), computed in f32 as the kernels do, so that
    /// every implementation picks the same taps: `floor(2 grid xi)` (one rounded product, which
    /// no compiler can fuse with anything) halved upwards. A `floor(t + 0.5)` or a comparison of
    /// `t - floor(t)` with one half could become a fused multiply-add on a GPU and round
    /// differently from the host.
    pub fn base_cell(&self, xi: f32) -> i64 {
        (((2 * self.grid) as f32 * xi).floor() as i64 + 1) >> 1
    }
}

/// The tap weights of a [`GriddingAxis`] as polynomials ([`GriddingAxis::tap_polynomials`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TapPolynomials {
    /// `2m + 1`.
    pub taps: usize,
    /// Coefficients per tap: the degree plus one.
    pub terms: usize,
    /// `taps x terms`, tap-major, ascending powers.
    pub coefficients: Vec<f32>,
}

impl TapPolynomials {
    /// The weights of taps `base - m ..= base + m` for the point `xi` on a grid of `grid` cells,
    /// in f32 as the U2 kernels compute them (`tap_weights` in shaders/operator/usfft2d.wgsl).
    pub fn weights(&self, xi: f32, grid: usize, base: i64) -> impl Iterator<Item = f32> + '_ {
        let t = 2.0 * (grid as f32 * xi - base as f32);
        self.coefficients.chunks_exact(self.terms).map(move |c| {
            c.iter()
                .rev()
                .fold(0.0f32, |acc, &coefficient| acc * t + coefficient)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::DEFAULT_EPS;
    use crate::random::SplitMix64;
    use num_complex::Complex64;

    #[test]
    fn width_follows_eps_alone() {
        for n in [16usize, 22, 64, 100, 128, 1024, 2048] {
            let a = GriddingAxis::new(n, DEFAULT_EPS);
            assert_eq!(a.half_width, 2, "n = {n}");
            assert_eq!(a.grid, 2 * n);
            assert!((a.beta() - 11.5).abs() < 1e-12, "beta {}", a.beta());
        }
        let m = |eps| GriddingAxis::new(64, eps).half_width;
        assert_eq!([m(0.1), m(1e-4), m(1e-5), m(1e-6)], [1, 3, 3, 4]);
    }

    #[test]
    fn nearest_cell_rounds_halves_up() {
        let a = GriddingAxis::new(8, DEFAULT_EPS);
        // grid 16: xi * 16 = 2.5 (exact in f32) is a half, -2.5 too.
        assert_eq!(a.base_cell(2.5 / 16.0), 3);
        assert_eq!(a.base_cell(-2.5 / 16.0), -2);
        assert_eq!(a.base_cell(2.4 / 16.0), 2);
        assert_eq!(a.base_cell(-0.49 / 16.0), 0);
    }

    /// Every tap's polynomial is within the kernel's jump at its support's edge (`e^-beta`, the
    /// kernel's own truncation) plus f32 rounding of the kernel, at every offset inside the
    /// interval (the jump itself sits at its end) and at every accuracy the operator accepts.
    #[test]
    fn tap_polynomials_follow_the_kernel() {
        for eps in [0.1, 1e-2, 1e-3, 1e-4, 1e-5, crate::geometry::MIN_EPS] {
            let a = GriddingAxis::new(64, eps);
            let polynomials = a.tap_polynomials();
            assert_eq!(polynomials.taps, 2 * a.half_width + 1);
            // The U2 kernels' uniforms hold them.
            let room = 4 * crate::shaders::usfft2d::KERNEL_VECTORS as usize;
            assert!(polynomials.taps <= crate::shaders::usfft2d::MAX_TAPS as usize);
            assert!(polynomials.coefficients.len() <= room);
            let bound = (-a.beta()).exp() / 2.0 + 2e-7;
            let mut worst: f64 = 0.0;
            for s in 1..1000 {
                // Points at offsets t = 2 (grid xi - base) across (-1, 1) from base cell 5.
                let t = -1.0 + 2.0 * s as f64 / 1000.0;
                let (base, xi) = (5, ((5.0 + t / 2.0) / a.grid as f64) as f32);
                for (i, w) in polynomials.weights(xi, a.grid, base).enumerate() {
                    let l = base - a.half_width as i64 + i as i64;
                    worst = worst.max((w as f64 - a.weight(l, xi as f64)).abs());
                }
            }
            assert!(worst <= bound, "eps {eps:e}: {worst:.2e} > {bound:.2e}");
        }
    }

    /// The kernel, its deconvolution and taps reproduce `sum_j' c_j' e^{-2 pi i j' xi}` in f64 to
    /// well within eps (a third of it) at every accuracy the operator accepts: the 1D type-2
    /// transform the stages are made of, with the grid's DFT summed directly.
    #[test]
    fn kernel_reaches_its_accuracy() {
        let mut rng = SplitMix64::new(9);
        for eps in [0.1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6] {
            for n in [8usize, 64] {
                let a = GriddingAxis::new(n, eps);
                let (g, half) = (a.grid, (n / 2) as i64);
                let c: Vec<Complex64> = (0..n)
                    .map(|_| Complex64::new(rng.next_f64() - 0.5, rng.next_f64() - 0.5))
                    .collect();
                let deconv = a.deconvolution();
                let grid: Vec<Complex64> = (0..g)
                    .map(|l| {
                        (0..n)
                            .map(|j| {
                                let jp = (j as i64 - half) as f64;
                                let phase = -2.0 * PI * jp * l as f64 / g as f64;
                                c[j] * deconv[j] as f64 * Complex64::from_polar(1.0, phase)
                            })
                            .sum()
                    })
                    .collect();
                let polynomials = a.tap_polynomials();
                let (mut diff, mut diff_polynomial, mut norm) = (0.0, 0.0, 0.0);
                for _ in 0..400 {
                    let xi = (rng.next_f64() - 0.5) as f32;
                    let exact: Complex64 = (0..n)
                        .map(|j| {
                            let jp = (j as i64 - half) as f64;
                            c[j] * Complex64::from_polar(1.0, -2.0 * PI * jp * xi as f64)
                        })
                        .sum();
                    let base = a.base_cell(xi);
                    let m = a.half_width as i64;
                    let approx: Complex64 = (base - m..=base + m)
                        .map(|l| grid[l.rem_euclid(g as i64) as usize] * a.weight(l, xi as f64))
                        .sum();
                    let polynomial: Complex64 = (base - m..=base + m)
                        .zip(polynomials.weights(xi, g, base))
                        .map(|(l, w)| grid[l.rem_euclid(g as i64) as usize] * w as f64)
                        .sum();
                    diff += (approx - exact).norm_sqr();
                    diff_polynomial += (polynomial - exact).norm_sqr();
                    norm += exact.norm_sqr();
                }
                let err = (diff / norm).sqrt();
                assert!(err < eps / 3.0, "eps {eps:e}, n {n}: {err:.2e}");
                let err = (diff_polynomial / norm).sqrt();
                assert!(
                    err < eps / 3.0,
                    "eps {eps:e}, n {n}, polynomial taps: {err:.2e}"
                );
            }
        }
    }
}
