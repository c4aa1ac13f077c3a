//! ADMM-TV reconstruction on the GPU (docs/operator-method.md, "ADMM-TV"):
//! minimise `1/2 |L u - d|^2 + alpha sum |grad u|_2` over real volumes u, with the split
//! `psi = grad u`, isotropic shrinkage, the dual update and the adaptive penalty rule.
//!
//! The data move to the Fourier domain once (`D = N F_fwd d`, `N = deth detw`), so that
//! `|L u - d|^2 = |A u - D|^2 / N` and no 2D FFT runs inside the loop. The inner solver is
//! conjugate gradient with the exact step on the quadratic subproblem; carrying `A u` and `grad u`
//! along, each inner iteration costs one `A` and one `A*`. Every iterate lives on the GPU; only
//! reduction results (partial sums combined in f64) come back. [`AdmmTeam`] runs the same
//! solver on several devices with the same bits.

mod admm;
mod checkpoint;
mod team;
mod vector;

pub(crate) use vector::WORKGROUP as VECTOR_WORKGROUP;

pub use admm::{AdmmSolver, IterationReport, ProjectionBlocks, SolverError, StopReason};
pub use checkpoint::{Checkpoint, CheckpointError};
pub use team::{AdmmTeam, RankReport};
