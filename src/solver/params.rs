//! Solver defaults, in one place, each with its reason.

use serde::{Deserialize, Serialize};

/// Parameters of the ADMM-TV solver.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdmmParams {
    /// Outer ADMM iterations. Default 33: the upstream reference's chip reconstruction
    /// (`tests/test_admm.py`), which reaches its final Lagrangian well before the end.
    pub outer_iterations: usize,
    /// Conjugate-gradient iterations per outer iteration. Default 4: the reference's `titer`; with
    /// the exact step (rather than the reference's fixed step) each one is a full CG step.
    pub inner_iterations: usize,
    /// TV weight alpha, in the units of the data. Default 1e-3: suited to volumes of attenuation
    /// per voxel of order 1 (the simulated phantoms); scale it with the data for other units.
    pub alpha: f64,
    /// The inner solver of the quadratic subproblem.
    pub inner: InnerSolver,
    /// Initial penalty rho. Default 0.5: the reference's `rho0`; the adaptive rule (double when the
    /// primal residual dominates tenfold, halve in the opposite case) adjusts it.
    pub rho0: f64,
}

impl Default for AdmmParams {
    fn default() -> Self {
        Self {
            outer_iterations: 33,
            inner_iterations: 4,
            alpha: 1e-3,
            inner: InnerSolver::ConjugateGradient,
            rho0: 0.5,
        }
    }
}

/// How the quadratic subproblem of each outer iteration is solved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum InnerSolver {
    /// Conjugate gradient with the exact step (default): the subproblem is quadratic, so the
    /// optimal step is known; each iteration costs one A and one A*.
    ConjugateGradient,
    /// The reference's Dai-Yuan directions with a fixed step (its `gamma`, 1 by default there):
    /// available to reproduce the reference, not recommended (the step is not adapted).
    DaiYuan { step: f64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let d = AdmmParams::default();
        assert_eq!((d.outer_iterations, d.inner_iterations), (33, 4));
        assert_eq!((d.alpha, d.rho0), (1e-3, 0.5));
        assert_eq!(d.inner, InnerSolver::ConjugateGradient);
    }
}
