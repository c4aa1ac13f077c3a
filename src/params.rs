//! The reconstruction's scientific parameters (ADMM-TV: regularisation, iterations, convergence
//! test, inner solver): their defaults in one place, each with its reason, and their validation.
//! Below the planner and the solver, which both read them.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::io::number_as_typed;

/// A solver parameter outside the range where the iteration is defined.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("solver parameter {name} = {value}: it must be {bound}")]
pub struct InvalidParameter {
    pub name: &'static str,
    pub value: String,
    pub bound: &'static str,
}

/// Parameters of the ADMM-TV solver.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdmmParams {
    /// Outer ADMM iterations: the most that run when `convergence` is set (a safety net), exactly
    /// this many when it is not. Default 300 as the net: see `Convergence::DEFAULT`.
    pub outer_iterations: usize,
    /// Conjugate-gradient iterations per outer iteration (the u-subproblem is solved inexactly,
    /// warm-started from the last u). `None`, the default: by the width of the volume the
    /// operator reconstructs, [`AdmmParams::inner_for_width`]; a number is taken as given (and a
    /// checkpoint's or report's parameters hold the count the run used).
    pub inner_iterations: Option<usize>,
    /// TV weight alpha, relative to the data's own scale: the TV term's weight is
    /// `alpha x` [`DataScale::tv_unit`], estimated from the projections before the solve, so that
    /// the reconstruction of `c d` is `c` times that of `d` for any `c > 0` (units, pixel size,
    /// photon energy) and the balance of the two terms does not move with the volume's width.
    /// Default 5: on the noisy 32^3 chip it is the absolute weight 1e-3 the solver's other
    /// defaults were chosen with (docs/reconstruct.md, "Regularisation in the data's units").
    pub alpha: f64,
    /// The inner solver of the quadratic subproblem.
    pub inner: InnerSolver,
    /// Initial penalty rho. Default 0.125: with over-relaxation and 2 CG steps a smaller penalty
    /// converges faster on the phantoms than the reference's `rho0` 0.5 (which the adaptive rule
    /// then holds); the rule (double when the primal residual dominates tenfold, halve in the
    /// opposite case) adjusts it (to 0.25 after one iteration on the 32^3 chip).
    pub rho0: f64,
    /// Stop once the iterates have converged (the default); `None` runs exactly
    /// `outer_iterations` (benchmarks, checkpoint tests).
    pub convergence: Option<Convergence>,
    /// Over-relaxation factor of the splitting (Boyd et al., §3.4.3): the shrinkage and the
    /// multiplier update see `a grad u + (1 - a) psi` instead of `grad u`. 1 is plain ADMM; the
    /// iteration converges for 0 < a < 2. Default 1.7 (Boyd's 1.5-1.8). Absent from checkpoints
    /// written before it existed, which ran plain ADMM.
    #[serde(default = "plain_relaxation")]
    pub relaxation: f64,
    /// With the CG inner solver: carry the data part of the residual, `(1/N) Re A*(D - A u)`,
    /// from one outer iteration to the next, updated by each CG step's `A*(A p)`, instead of
    /// applying `A*` to `D - A u` again at the start of every outer iteration. The iterates are
    /// the same in exact arithmetic; each outer iteration costs one application fewer (4 instead
    /// of 5 with 2 CG steps). Default on; off in [`plain`](Self::plain) and in checkpoints
    /// written before it existed, which recomputed it. Dai-Yuan recomputes its residual every
    /// step either way.
    #[serde(default)]
    pub carried_residual: bool,
    /// Set the penalty once, early, from the iterate's gradient (see [`GradientPenalty`]); then
    /// residual balancing goes on as before. Default on; off in [`plain`](Self::plain) and in
    /// checkpoints written before it existed.
    #[serde(default)]
    pub penalty_from_gradient: Option<GradientPenalty>,
}

/// The penalty set once, after `after_iterations` outer iterations, to the power of two nearest
/// `scale sqrt(alpha / g)`, `g` the rms over voxels of `|grad u|` of the iterate: the form of
/// spectral penalty selection's `sqrt(alpha beta)` with the TV term's curvature `alpha / |psi|`.
/// Residual balancing keeps the two residuals within a factor of ten of each other, which holds
/// whichever penalty it reaches first: on blobs at 64^3 it held 0.5 where 1 reaches the
/// converged volume in half the iterations, and the residuals cannot tell the two apart
/// (docs/reconstruct.md, "Time to solution").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GradientPenalty {
    /// Outer iterations before the penalty is set: by then the iterate's gradient has formed
    /// (after 10, its rms was 0.81x the converged volume's on the noisy 32^3 chip, 0.99x on
    /// blobs at 32^3 and 64^3).
    pub after_iterations: usize,
    /// The constant: 0.85 puts the best of the powers of two tried on the chip at 32^3 (0.25)
    /// and on blobs at 32^3 (0.5) and 64^3 (1) nearest.
    pub scale: f64,
}

impl GradientPenalty {
    pub const DEFAULT: GradientPenalty = GradientPenalty {
        after_iterations: 10,
        scale: 0.85,
    };

    /// The most the rule moves the penalty, up or down: two of residual balancing's steps.
    /// On the benchmark's scans it moved it by 1 or 2; the bound keeps an unusual volume (one
    /// with almost no gradient) from a penalty so large that the iterate barely moves and the
    /// stopping test passes early.
    pub const MAX_FACTOR: f64 = 4.0;

    /// The penalty after `done` outer iterations, given the penalty `rho` held until now: the
    /// rule's value when `done` equals `after_iterations`, `rho` otherwise. `gradient_norm` is
    /// `||grad u||` over the `voxels` of the volume. The GPU solver and the CPU reference both
    /// call this, so they fire at the same iteration with the same value.
    pub fn rho_after(
        &self,
        done: usize,
        rho: f64,
        alpha: f64,
        gradient_norm: f64,
        voxels: usize,
    ) -> f64 {
        match done == self.after_iterations {
            true => self.penalty(rho, alpha, gradient_norm / (voxels as f64).sqrt()),
            false => rho,
        }
    }

    /// The penalty for TV weight `alpha` at gradient rms `gradient_rms`, replacing `rho`; `rho`
    /// itself where the rule has nothing to say (no TV term, a volume without gradient).
    fn penalty(&self, rho: f64, alpha: f64, gradient_rms: f64) -> f64 {
        let target = self.scale * (alpha / gradient_rms).sqrt();
        if !(target.is_finite() && target > 0.0) {
            return rho;
        }
        2f64.powf(target.log2().round())
            .clamp(rho / Self::MAX_FACTOR, rho * Self::MAX_FACTOR)
    }
}

/// The scale of the data that [`AdmmParams::alpha`] is relative to, estimated from the
/// projections before the solve (every angle, in angle order, whoever holds them).
///
/// The objective is `1/2 |L u - d|^2 + w sum |grad u|`, `d` the line integrals `p` in the
/// operator's normalisation (`p / sqrt(n2 ntheta)`). Scaling the data by `c` scales the
/// minimiser by `c` only if `w` scales by `c` (the data term is quadratic, TV homogeneous of
/// degree one); and `L*L ~ 1 / (pi n2 |k|)` (`k` in cycles per voxel), so the same weight
/// smooths a volume `n2` voxels wide as if it were `n2` times stronger relative to the data.
/// Hence `w = alpha x mean attenuation per voxel / n2`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DataScale {
    /// The mean attenuation per voxel of the volume box: every projection's line integrals,
    /// summed over the detector, are the volume's integral over what the beam crosses, so
    /// `sum |p| / (ntheta x voxels)` (absolute values, so that signed data such as phase or a
    /// flat-field offset do not cancel). The mean over the whole box, air included.
    pub attenuation_per_voxel: f64,
    /// The width `n2` (voxels along x) of the volume the operator reconstructs, detector
    /// padding included: the operator's normalisation `1/sqrt(n2)` weighs the data term by
    /// `1/n2`, which the TV weight follows, so that a box narrower than the detector solves the
    /// full volume's problem restricted to it.
    pub width: usize,
}

impl DataScale {
    /// How the scale is estimated, in words (report.json states it beside the values).
    pub const ESTIMATE: &'static str = "mean |line integral| over every angle and detector pixel, \
        summed over the detector and divided by the volume's voxels: the mean attenuation per \
        voxel of the volume box; the TV weight is alpha x that / the width of the volume the \
        operator reconstructs (voxels along x, detector padding included)";

    /// The scale of projections whose line integrals `p` (in the operator's normalisation,
    /// `d = p / sqrt(n2 ntheta)`) have absolute sums `abs_sums` (one per projection, in angle
    /// order: the sum over that projection's pixels of `|d|`), for a volume of `voxels` voxels
    /// `n2` wide.
    pub fn of_operator_data(abs_sums: &[f64], n2: usize, voxels: usize) -> Self {
        let ntheta = abs_sums.len();
        let total: f64 = abs_sums.iter().sum();
        let raw = total * ((n2 * ntheta) as f64).sqrt();
        Self {
            attenuation_per_voxel: raw / (ntheta as f64 * voxels as f64),
            width: n2,
        }
    }

    /// The TV weight of relative weight 1: `attenuation_per_voxel / width`; 0 for data without
    /// attenuation (nothing to regularise), and for a scale that is not finite (the solver's
    /// own checks refuse such data).
    pub fn tv_unit(&self) -> f64 {
        let unit = self.attenuation_per_voxel / self.width as f64;
        if unit.is_finite() {
            unit
        } else {
            0.0
        }
    }
}

/// The relaxation of plain ADMM (what checkpoints without the field ran).
fn plain_relaxation() -> f64 {
    1.0
}

impl Default for AdmmParams {
    fn default() -> Self {
        Self {
            outer_iterations: 300,
            inner_iterations: None,
            alpha: 5.0,
            inner: InnerSolver::ConjugateGradient,
            rho0: 0.125,
            convergence: Some(Convergence::DEFAULT),
            relaxation: 1.7,
            carried_residual: true,
            penalty_from_gradient: Some(GradientPenalty::DEFAULT),
        }
    }
}

/// When the outer iteration has converged: all three relative measures below their tolerances
/// (Boyd et al., "Distributed optimization ... ADMM", §3.3, in relative form).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Convergence {
    /// `|u_k - u_{k-1}| / |u_k|`: the volume has stopped changing.
    pub change: f64,
    /// `|grad u - psi| / max(|grad u|, |psi|)`: the split is consistent.
    pub primal: f64,
    /// `rho |grad u_k - grad u_{k-1}| / |lambda|`: the multipliers have settled.
    pub dual: f64,
}

impl Convergence {
    /// Chosen so that on the three simulated phantoms with Poisson noise at 32^3 and 64^3 the
    /// result is within 1 % (relative L2) of a 300-iteration run (docs/benchmarks.md, "Convergence of the default stopping rule").
    pub const DEFAULT: Convergence = Convergence {
        change: 2e-4,
        primal: 5e-4,
        dual: 3e-3,
    };
}

impl AdmmParams {
    /// The most outer iterations a run may take: far beyond any run that converges (hundreds),
    /// and the report keeps one record per iteration.
    pub const MAX_OUTER_ITERATIONS: usize = 100_000;

    /// The most inner iterations per outer iteration: a stop (Ctrl-C, SIGTERM, a window's
    /// Cancel) is honoured between outer iterations, so an outer iteration must stay short; 2 to
    /// 4 warm-started CG steps are what pays.
    pub const MAX_INNER_ITERATIONS: usize = 100;

    /// CG iterations per outer iteration by default, below [`WIDE_FROM`](Self::WIDE_FROM):
    /// on the 32^3 chip with noise, 2 steps reach a given distance from the converged volume in
    /// fewer operator applications than the reference's 4 (`titer`) and than 3 (1.4x fewer
    /// seconds; docs/reconstruct.md, "Time to solution").
    pub const INNER_ITERATIONS: usize = 2;

    /// CG iterations per outer iteration by default from [`WIDE_FROM`](Self::WIDE_FROM) on.
    /// The u-subproblem's conditioning grows with the width `n2` (`L*L ~ 1/(pi n2 |k|)` against
    /// the TV penalty's `rho |k|^2`), and 2 steps then leave ADMM's primal residual to fall
    /// slowly: a CT scan 640 columns wide (2 rows, 181 angles) stopped at 300 outer iterations
    /// unconverged with 2, converged in 202 with 3; the 64^3 chip took 132 instead of 203 in
    /// 5 % less time (docs/benchmarks.md, "CG steps per outer iteration and the detector's
    /// width").
    pub const WIDE_INNER_ITERATIONS: usize = 3;

    /// The operator width (voxels along x, detector padding included) from which the default
    /// takes [`WIDE_INNER_ITERATIONS`](Self::WIDE_INNER_ITERATIONS): 64, the narrowest measured
    /// where 3 steps were not slower (at 64^3 the chip, Shepp-Logan and blobs took 0.65x, 0.68x
    /// and 0.59x the outer iterations in 0.95x, 0.98x and 0.85x the time; at 32^3 the chip
    /// 1.4x the time, Shepp-Logan and blobs the same).
    pub const WIDE_FROM: usize = 64;

    /// The default CG iterations per outer iteration for an operator `width` voxels wide.
    pub const fn inner_for_width(width: usize) -> usize {
        if width >= Self::WIDE_FROM {
            Self::WIDE_INNER_ITERATIONS
        } else {
            Self::INNER_ITERATIONS
        }
    }

    /// The CG iterations per outer iteration these parameters take on an operator `width` voxels
    /// wide: the count given, else [`inner_for_width`](Self::inner_for_width).
    pub fn inner_steps(&self, width: usize) -> usize {
        self.inner_iterations
            .unwrap_or(Self::inner_for_width(width))
    }

    /// These parameters with the CG iterations per outer iteration stated for an operator
    /// `width` voxels wide: what a solver runs and a report or checkpoint records.
    pub fn for_width(self, width: usize) -> Self {
        Self {
            inner_iterations: Some(self.inner_steps(width)),
            ..self
        }
    }

    /// Plain ADMM: the default before over-relaxation (relaxation 1, 4 CG steps per outer
    /// iteration, rho0 0.5, the residual recomputed every outer iteration, the penalty adapted
    /// by residual balancing alone), kept as the
    /// baseline `lamino bench convergence` measures the default against.
    pub fn plain() -> Self {
        Self {
            inner_iterations: Some(4),
            rho0: 0.5,
            relaxation: 1.0,
            carried_residual: false,
            penalty_from_gradient: None,
            ..Self::default()
        }
    }

    /// The defaults with exactly `n` outer iterations and no convergence test.
    pub fn exactly(n: usize) -> Self {
        Self {
            outer_iterations: n,
            convergence: None,
            ..Self::default()
        }
    }

    /// Checks every parameter against the range where the iteration is defined.
    pub fn validate(&self) -> Result<(), InvalidParameter> {
        let bad = |name, value: String, bound| Err(InvalidParameter { name, value, bound });
        if !(1..=Self::MAX_OUTER_ITERATIONS).contains(&self.outer_iterations) {
            return bad(
                "outer_iterations",
                self.outer_iterations.to_string(),
                "from 1 to 100000 (a run that converges takes hundreds)",
            );
        }
        if let Some(inner) = self
            .inner_iterations
            .filter(|k| !(1..=Self::MAX_INNER_ITERATIONS).contains(k))
        {
            return bad(
                "inner_iterations",
                inner.to_string(),
                "from 1 to 100 (a stop is honoured between outer iterations, which must stay short)",
            );
        }
        if !(self.alpha.is_finite() && self.alpha >= 0.0) {
            return bad(
                "alpha",
                number_as_typed(self.alpha),
                "finite and >= 0 (a negative TV weight makes the shrinkage grow vectors)",
            );
        }
        if !(self.rho0.is_finite() && self.rho0 > 0.0) {
            return bad("rho0", number_as_typed(self.rho0), "finite and > 0");
        }
        if let InnerSolver::DaiYuan { step } = self.inner {
            if !(step.is_finite() && step > 0.0) {
                return bad("dai_yuan_step", number_as_typed(step), "finite and > 0");
            }
        }
        if !(self.relaxation > 0.0 && self.relaxation < 2.0) {
            return bad(
                "relaxation",
                number_as_typed(self.relaxation),
                "between 0 and 2 (ADMM diverges outside)",
            );
        }
        if let Some(rule) = self.penalty_from_gradient {
            if !(rule.scale.is_finite() && rule.scale > 0.0) {
                return bad(
                    "penalty_from_gradient.scale",
                    number_as_typed(rule.scale),
                    "finite and > 0",
                );
            }
        }
        if let Some(c) = self.convergence {
            for (name, v) in [
                ("convergence.change", c.change),
                ("convergence.primal", c.primal),
                ("convergence.dual", c.dual),
            ] {
                if !(v.is_finite() && v > 0.0 && v < 1.0) {
                    return bad(name, number_as_typed(v), "between 0 and 1");
                }
            }
        }
        Ok(())
    }

    /// Whether the iteration carries the data residual: asked for, with the CG inner solver.
    pub fn carries_residual(&self) -> bool {
        self.carried_residual && self.inner == InnerSolver::ConjugateGradient
    }

    /// The parameters that shape the iterates (everything but when to stop, and whether the
    /// residual is carried, which changes only rounding): a checkpoint resumes only under the
    /// same ones.
    pub fn iterates_shape(&self) -> Self {
        Self {
            outer_iterations: 0,
            convergence: None,
            carried_residual: false,
            ..*self
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

/// How the inner solver applies its normal operator `(1/N) Re A*A` (docs/operator-method.md,
/// "Normal operator by Toeplitz embedding"). The two agree to the gridding accuracy (2e-4
/// relative in `tests/operator.rs`); the volumes they reach differ by that much.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormalOperator {
    /// Gridding for now: the Toeplitz loop is faster where it runs (`lamino bench normal`), but
    /// it runs on one device only, and `auto` must give the same bits
    /// whatever the plan and the device count ([`crate::plan::AUTO_RUNS_GRIDDING`]).
    #[default]
    Auto,
    /// One zero-padded FFT convolution per CG step, with the kernel computed once per
    /// geometry: no gridding in the inner loop.
    Toeplitz,
    /// A then A* per CG step (the reference's way; the memo layer memoizes it).
    Gridding,
}

impl NormalOperator {
    /// Every choice with its name (`--normal-operator`, report.json).
    pub const ALL: [(&'static str, Self); 3] = [
        ("auto", Self::Auto),
        ("toeplitz", Self::Toeplitz),
        ("gridding", Self::Gridding),
    ];

    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|e| e.1 == self).map_or("", |e| e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let d = AdmmParams::default();
        assert_eq!((d.outer_iterations, d.inner_iterations), (300, None));
        assert_eq!((d.inner_steps(32), d.inner_steps(63)), (2, 2));
        assert_eq!((d.inner_steps(64), d.inner_steps(640)), (3, 3));
        assert_eq!(d.for_width(640).inner_iterations, Some(3));
        // A count given is kept whatever the width.
        assert_eq!(AdmmParams::plain().for_width(640).inner_iterations, Some(4));
        assert_eq!((d.alpha, d.rho0, d.relaxation), (5.0, 0.125, 1.7));
        let p = AdmmParams::plain();
        assert_eq!(
            (p.inner_iterations, p.rho0, p.relaxation),
            (Some(4), 0.5, 1.0)
        );
        assert!(d.carried_residual && !p.carried_residual);
        assert_eq!(d.penalty_from_gradient, Some(GradientPenalty::DEFAULT));
        assert_eq!(p.penalty_from_gradient, None);
        assert_eq!(
            (
                GradientPenalty::DEFAULT.after_iterations,
                GradientPenalty::DEFAULT.scale
            ),
            (10, 0.85)
        );
        assert_eq!(p.convergence, d.convergence);
        p.validate().unwrap();
        assert_eq!(d.inner, InnerSolver::ConjugateGradient);
        assert_eq!(d.convergence, Some(Convergence::DEFAULT));
        d.validate().unwrap();
        let e = AdmmParams::exactly(7);
        assert_eq!((e.outer_iterations, e.convergence), (7, None));
    }

    #[test]
    fn every_parameter_is_checked_with_a_message_naming_its_bound() {
        let cases = [
            AdmmParams {
                alpha: -1.0,
                ..AdmmParams::default()
            },
            AdmmParams {
                alpha: f64::NAN,
                ..AdmmParams::default()
            },
            AdmmParams {
                rho0: 0.0,
                ..AdmmParams::default()
            },
            AdmmParams {
                inner_iterations: Some(0),
                ..AdmmParams::default()
            },
            AdmmParams {
                outer_iterations: 0,
                ..AdmmParams::default()
            },
            AdmmParams {
                inner_iterations: Some(AdmmParams::MAX_INNER_ITERATIONS + 1),
                ..AdmmParams::default()
            },
            AdmmParams {
                outer_iterations: usize::MAX,
                ..AdmmParams::default()
            },
            AdmmParams {
                inner: InnerSolver::DaiYuan { step: -1.0 },
                ..AdmmParams::default()
            },
            AdmmParams {
                relaxation: 2.0,
                ..AdmmParams::default()
            },
            AdmmParams {
                relaxation: f64::NAN,
                ..AdmmParams::default()
            },
            AdmmParams {
                relaxation: 1e300,
                ..AdmmParams::default()
            },
            AdmmParams {
                convergence: Some(Convergence {
                    change: 0.0,
                    ..Convergence::DEFAULT
                }),
                ..AdmmParams::default()
            },
            AdmmParams {
                penalty_from_gradient: Some(GradientPenalty {
                    scale: f64::INFINITY,
                    ..GradientPenalty::DEFAULT
                }),
                ..AdmmParams::default()
            },
        ];
        for (p, name) in cases.iter().zip([
            "alpha",
            "alpha",
            "rho0",
            "inner_iterations",
            "outer_iterations",
            "inner_iterations",
            "outer_iterations",
            "dai_yuan_step",
            "relaxation",
            "relaxation",
            "relaxation",
            "convergence.change",
            "penalty_from_gradient.scale",
        ]) {
            let e = p.validate().unwrap_err();
            assert_eq!(e.name, name);
            assert!(e.to_string().contains("must be"), "{e}");
            assert!(e.value.len() <= 20, "the value as a user types it: {e}");
        }
    }

    #[test]
    fn the_penalty_from_the_gradient_is_the_nearest_power_of_two_within_a_factor_four() {
        let rule = GradientPenalty::DEFAULT;
        // The scans of docs/benchmarks.md: (alpha, rms of |grad u| after 10 iterations, held
        // penalty) -> set penalty.
        for (alpha, g, rho, expect) in [
            (1e-3, 0.01160, 0.25, 0.25),
            (1e-3, 0.00271, 0.5, 0.5),
            (1e-3, 0.00069, 0.5, 1.0),
            (1e-3, 0.00074, 0.5, 1.0),
        ] {
            assert_eq!(rule.penalty(rho, alpha, g), expect, "{g}");
        }
        // Bounded to a factor of four either way.
        assert_eq!(rule.penalty(0.5, 1e-3, 1e-12), 2.0);
        assert_eq!(rule.penalty(0.5, 1e-3, 1e3), 0.125);
        // Nothing to say: no TV term, a volume without gradient, NaN.
        assert_eq!(rule.penalty(0.5, 0.0, 0.01), 0.5);
        assert_eq!(rule.penalty(0.5, 1e-3, 0.0), 0.5);
        assert_eq!(rule.penalty(0.5, 1e-3, f64::NAN), 0.5);
        // Only after `after_iterations` outer iterations; the norm over the voxels is the rms.
        assert_eq!(rule.rho_after(9, 0.5, 1e-3, 0.00069 * 8.0, 64), 0.5);
        assert_eq!(rule.rho_after(10, 0.5, 1e-3, 0.00069 * 8.0, 64), 1.0);
        assert_eq!(rule.rho_after(11, 0.5, 1e-3, 0.00069 * 8.0, 64), 0.5);
    }
}
