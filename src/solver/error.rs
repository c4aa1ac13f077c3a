//! The solver's error type: everything building, running, checkpointing or resuming a solver
//! (alone or in a team) can fail with, in one enum so that callers match on one type.

use thiserror::Error;

use super::checkpoint::CheckpointError;
use crate::array::StorageError;
use crate::gpu::GpuError;
use crate::memo::MemoError;
use crate::operator::OperatorError;
use crate::params::InvalidParameter;
use crate::plan::PlanError;

/// Errors of the solver.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SolverError {
    #[error(transparent)]
    Operator(#[from] OperatorError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Memo(#[from] MemoError),
    #[error(transparent)]
    Parameter(#[from] InvalidParameter),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The data do not have the geometry's shape.
    #[error("the data hold {got} values, but the geometry needs {expected} (ntheta, deth, detw)")]
    DataShape { expected: usize, got: usize },
    /// A checkpoint does not belong to this reconstruction.
    #[error("the checkpoint was written for a different {what}; refusing to resume from it")]
    CheckpointMismatch { what: &'static str },
    /// A checkpoint belongs to another geometry: every field that differs, with both values.
    #[error(
        "the checkpoint was written for a different geometry ({}); refusing to resume from it",
        differences.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    CheckpointGeometry {
        differences: Vec<super::geometry_difference::GeometryDifference>,
    },
    /// A checkpoint file could not be written or read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A run on several devices was given none.
    #[error("no device was given")]
    NoDevices,
    /// A run on several devices was given a plan that keeps arrays on one device.
    #[error(
        "a run on several devices needs a plan that keeps every array in host memory (plan_shared)"
    )]
    TeamPlan,
    /// The devices of a multi-device run chunk the operator's stages differently.
    #[error("device {device} chunks the stages as {chunks:?} (y rows, detector rows, angles), the first device as {first:?}: run these devices separately")]
    TeamChunks {
        device: String,
        chunks: (usize, usize, usize),
        first: (usize, usize, usize),
    },
    /// `--normal-operator toeplitz` where the run cannot use it.
    #[error("--normal-operator toeplitz: {reason}; use --normal-operator auto or gridding")]
    ToeplitzUnavailable { reason: String },
    /// Memoization was asked for on several devices.
    #[error("memoization runs on one device: drop --memo or run on one device")]
    TeamMemo,
    /// Another MPI rank could not read its rows of the volume for the outputs (it reports its
    /// own error).
    #[error("MPI rank {rank} could not read its rows of the volume")]
    RankRead { rank: usize },
    /// A non-finite value appeared (bad input or a diverging iteration).
    #[error("{what} became non-finite at outer iteration {iteration}")]
    NonFinite {
        what: &'static str,
        iteration: usize,
    },
}
