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
//!
//! Where things are: `params` holds the parameters, `setup` builds an [`AdmmSolver`] (the arrays
//! of `fields` with the call sites of `ops`, bound with the slots of `slots`, and the data from
//! `projections`), `admm` runs an iteration, `outer` is the outer loop every driver shares
//! ([`outer_loop`]: the solver's `run`, the reconstructor's team, the convergence benchmarks),
//! `report` says what each iteration did, `resume` writes and resumes `checkpoint`s, `vector`
//! holds the vector kernels, `normal` the inner loop on the volume alone (the Toeplitz normal
//! operator instead of A then A*), `team` runs on several devices, and `error` is what all of them
//! fail with.

mod admm;
mod checkpoint;
mod error;
mod fields;
mod geometry_difference;
mod normal;
mod ops;
mod outer;
mod projections;
mod report;
mod resume;
mod setup;
mod slots;
mod team;
mod vector;

pub use admm::AdmmSolver;
pub use checkpoint::{Checkpoint, CheckpointError};
pub use error::SolverError;
pub use geometry_difference::GeometryDifference;
pub use outer::outer_loop;
pub use projections::ProjectionBlocks;
pub use report::{IterationReport, StopReason};
pub use team::{AdmmTeam, ArrayBytes, RankReport};
