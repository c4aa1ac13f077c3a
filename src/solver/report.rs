//! What the solver reports: the Lagrangian terms and convergence measures of each outer
//! iteration, and why the iteration stopped. Checkpoints store (and check) the last report, so
//! these types live apart from the iteration that fills them.

use serde::{Deserialize, Serialize};

use crate::params::Convergence;

/// The Lagrangian terms and residuals after one outer iteration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IterationReport {
    pub iteration: usize,
    /// `|L u - d|^2`
    pub data_term: f64,
    /// `alpha sum |psi|_2`
    pub tv_term: f64,
    /// `<lambda, grad u - psi>`
    pub dual_term: f64,
    /// `rho |grad u - psi|^2`
    pub penalty_term: f64,
    /// `data_term / 2 + tv_term + dual_term + penalty_term / 2`
    pub lagrangian: f64,
    /// `|psi - grad u|^2`
    pub primal_residual: f64,
    /// `|rho (grad u - grad u_previous)|^2`
    pub dual_residual: f64,
    /// The penalty used in this iteration.
    pub rho: f64,
    /// `|u_k - u_{k-1}| / |u_k|` (the convergence test's first measure).
    pub change: f64,
    /// `|grad u - psi| / max(|grad u|, |psi|)`.
    pub primal_relative: f64,
    /// `rho |grad u_k - grad u_{k-1}| / max(|lambda|, rho |grad u|)`.
    pub dual_relative: f64,
}

impl IterationReport {
    /// Whether this iteration meets `c`.
    pub fn converged(&self, c: &Convergence) -> bool {
        // Written so that NaN never counts as converged.
        self.change <= c.change && self.primal_relative <= c.primal && self.dual_relative <= c.dual
    }
}

/// `num / den` where a zero numerator is zero change whatever the scale (all-zero iterates, as
/// from all-zero data, have converged), so the measures never become 0/0.
pub(super) fn relative(num: f64, den: f64) -> f64 {
    if num == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// Why the outer iteration stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The convergence test passed at this many iterations.
    Converged,
    /// The safety net: the most iterations allowed ran without the test passing.
    MaxIterations,
    /// Exactly the requested number of iterations ran (no convergence test).
    Exactly,
    /// Cancelled by the caller (a checkpoint holds the state).
    Cancelled,
}

impl StopReason {
    /// A sentence for people.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Converged => "converged (change, primal and dual residuals below tolerance)",
            Self::MaxIterations => {
                "NOT converged: the maximum number of iterations ran first (raise --max-iterations)"
            }
            Self::Exactly => "the requested number of iterations ran",
            Self::Cancelled => "cancelled",
        }
    }
}

/// The values of a report with their names, for the finiteness check.
pub(super) fn report_values(r: &IterationReport) -> impl Iterator<Item = (&'static str, f64)> {
    // Destructured so that a new field cannot be forgotten here.
    let IterationReport {
        iteration: _,
        data_term,
        tv_term,
        dual_term,
        penalty_term,
        lagrangian,
        primal_residual,
        dual_residual,
        rho,
        change,
        primal_relative,
        dual_relative,
    } = *r;
    [
        ("data_term", data_term),
        ("tv_term", tv_term),
        ("dual_term", dual_term),
        ("penalty_term", penalty_term),
        ("lagrangian", lagrangian),
        ("primal_residual", primal_residual),
        ("dual_residual", dual_residual),
        ("rho", rho),
        ("change", change),
        ("primal_relative", primal_relative),
        ("dual_relative", dual_relative),
    ]
    .into_iter()
}
