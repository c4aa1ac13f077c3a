//! The Gaussian gridding kernel of one transformed axis: its constants, weights and the taps
//! every implementation (WGSL kernels, CPU references, padding) picks.

use std::f64::consts::PI;

/// Gaussian-gridding constants of one transformed axis of length `n`
/// (docs/operator-method.md, "Gridding kernel"):
/// `mu = -ln(eps) / (2 n^2)` (kept in f32 as the reference does) and the half-width
/// `m = ceil((2n/pi) sqrt(-mu ln eps + (mu n)^2 / 4))`, which is 4 for eps = 1e-3 at every n.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GriddingAxis {
    pub n: usize,
    /// Oversampled grid length, 2n.
    pub grid: usize,
    pub mu: f64,
    pub half_width: usize,
}

impl GriddingAxis {
    pub fn new(n: usize, eps: f64) -> Self {
        let mu = (-eps.ln() / (2.0 * (n * n) as f64)) as f32 as f64;
        let nf = n as f64;
        let m = ((2.0 * nf / PI) * (-mu * eps.ln() + (mu * nf) * (mu * nf) / 4.0).sqrt()).ceil();
        Self {
            n,
            grid: 2 * n,
            mu,
            half_width: m as usize,
        }
    }

    /// `1 / (e^{-mu j'^2} * grid)` for memory index j (centred j' = j - n/2): the deconvolution that
    /// undoes the Gaussian's spectrum, with the quadrature weight 1/grid.
    pub fn deconvolution(&self) -> Vec<f32> {
        (0..self.n)
            .map(|j| {
                let c = j as f64 - (self.n / 2) as f64;
                (1.0 / ((-self.mu * c * c).exp() * self.grid as f64)) as f32
            })
            .collect()
    }

    /// Interpolation weight of grid frequency `l` (unwrapped) for the point `xi` (cycles/sample):
    /// `sqrt(pi/mu) e^{-(pi^2/mu)(l/grid - xi)^2}`.
    pub fn weight(&self, l: i64, xi: f64) -> f64 {
        let d = l as f64 / self.grid as f64 - xi;
        (PI / self.mu).sqrt() * (-(PI * PI / self.mu) * d * d).exp()
    }

    /// The grid cell at or below `grid * xi`, computed in f32 as the reference's kernels do, so
    /// that every implementation picks the same taps.
    pub fn base_cell(&self, xi: f32) -> i64 {
        (self.grid as f32 * xi).floor() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::DEFAULT_EPS;

    #[test]
    fn constants_match_the_reference() {
        for n in [16usize, 22, 64, 100, 128, 1024, 2048] {
            let a = GriddingAxis::new(n, DEFAULT_EPS);
            assert!(
                (a.mu * (n * n) as f64 - 3.45388).abs() < 1e-4,
                "n = {n}: mu n^2 = {}",
                a.mu * (n * n) as f64
            );
            assert_eq!(a.half_width, 4, "n = {n}");
            assert_eq!(a.grid, 2 * n);
        }
        assert!(GriddingAxis::new(64, 1e-6).half_width > 4);
    }
}
