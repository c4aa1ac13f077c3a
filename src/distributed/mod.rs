//! Several devices, and several processes, working on one reconstruction with the bits of one.
//!
//! - [`shares`]: how the chunks and planes are divided among the members of a team.
//! - `team` (crate-internal): the devices of one process, one host thread each, meeting where a
//!   value may come from another device ([`Share`](team::Share), [`TeamSync`](team::TeamSync)).
//! - [`ranks`] (feature `mpi`): MPI ranks, each keeping its home of the arrays and exchanging the
//!   blocks the next stage needs ([`Ranks`](ranks::Ranks)).
//!
//! The cost model of such runs (bytes, network, time per iteration) is a model, not a runtime:
//! it lives in [`crate::plan::cluster_model`].

#[cfg(feature = "mpi")]
pub mod ranks;
pub mod shares;
pub(crate) mod team;
