//! Several devices, and several processes, working on one reconstruction with the bits of one.
//!
//! - [`collective`]: the processes of a run as a value, [`Collective`]: this one alone
//!   ([`OneProcess`]) or MPI ranks; the solver, the preprocessing and the outputs take it and
//!   are written once for both ([`launch`] gives the run's).
//! - [`shares`]: how the chunks and planes are divided among the members of a team.
//! - `team` (crate-internal): the devices of one process, one host thread each, meeting where a
//!   value may come from another device ([`Share`](team::Share), [`TeamSync`](team::TeamSync)).
//! - [`ranks`] (feature `mpi`): MPI ranks, each keeping its home of the arrays and exchanging the
//!   blocks the next stage needs ([`Ranks`](ranks::Ranks)).
//!
//! The cost model of such runs (bytes, network, time per iteration) is a model, not a runtime:
//! it lives in [`crate::plan::cluster_model`].

pub mod collective;
#[cfg(feature = "mpi")]
pub mod ranks;
pub mod shares;
pub(crate) mod team;

pub use collective::{
    agree, ClusterError, Collective, OneProcess, ScratchLedger, Traffic, EXCHANGE_OVERLAP_ENV,
    RANKS_BUILT,
};

/// The processes of this run: the MPI ranks when an MPI launcher started more than one (and
/// lamino was built with `mpi`), else this process alone.
pub fn launch() -> Result<std::sync::Arc<dyn Collective>, ClusterError> {
    #[cfg(feature = "mpi")]
    if let Some(ranks) = ranks::Ranks::from_launcher()? {
        return Ok(ranks);
    }
    Ok(OneProcess::shared())
}
