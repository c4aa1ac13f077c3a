//! The solver's state beyond its arrays' contents: writing it to a checkpoint and resuming from
//! one (bit for bit, in-core or streaming; a checkpoint of another geometry refused naming each
//! field that differs), and the team members' adopting of what one member read or resumed (the
//! hash of the data, the iteration count, penalty and last report).

use std::ops::Range;
use std::path::Path;

use super::admm::AdmmSolver;
use super::checkpoint::{Checkpoint, ARRAY_COUNT};
use super::error::SolverError;
use super::geometry_difference::GeometryDifference;
use crate::array::Field;
use crate::gpu::GpuContext;
use crate::params::DataScale;

impl AdmmSolver {
    /// The arrays a checkpoint holds, in [`checkpoint::ARRAYS`](super::checkpoint::ARRAYS) order.
    pub(crate) fn checkpointed(&self) -> [&Field; ARRAY_COUNT] {
        let f = &self.fields;
        [&f.u, &f.psi, &f.lambda, &f.grad_u, &f.au, &f.r_saved]
    }

    /// The state a checkpoint records (the arrays stay where they are).
    fn checkpoint_state(&self) -> Checkpoint {
        Checkpoint {
            iteration: self.iteration,
            rho: self.rho,
            geometry: self.op.geometry().clone(),
            params: self.params,
            data_hash: self.data_hash,
            last_report: self.last,
            lengths: Checkpoint::array_lengths(self.op.geometry(), &self.params),
        }
    }

    /// Writes the complete solver state after the iterations done so far to `path`
    /// (atomically), streaming each array a block at a time wherever it lives.
    pub fn write_checkpoint(&self, ctx: &GpuContext, path: &Path) -> Result<(), SolverError> {
        self.form_au_for_checkpoint(ctx)?;
        let arrays = self.checkpointed();
        self.checkpoint_state().write(path, |a, start, len| {
            Ok::<_, SolverError>(arrays[a].read_words(ctx, start, len)?)
        })
    }

    /// `A u`, which the Toeplitz inner loop does not carry, formed for a checkpoint: a run that
    /// resumes it with gridding reads it.
    fn form_au_for_checkpoint(&self, ctx: &GpuContext) -> Result<(), SolverError> {
        if self.toeplitz.is_some() {
            let mut rec = ctx.recorder("A u for a checkpoint");
            self.op.record(ctx, &mut rec, &self.apps.forward_u)?;
            ctx.submit(rec)?;
        }
        Ok(())
    }

    /// Writes MPI rank `rank`'s part of the checkpoint `path` of `generation`: words `words[a]`
    /// of each checkpointed array `a` (see [`Checkpoint::write_part`]).
    pub(crate) fn write_checkpoint_part(
        &self,
        ctx: &GpuContext,
        path: &Path,
        generation: &str,
        rank: usize,
        words: [Range<usize>; ARRAY_COUNT],
    ) -> Result<super::checkpoint::Part, SolverError> {
        let arrays = self.checkpointed();
        self.checkpoint_state()
            .write_part(path, generation, rank, words, |a, start, len| {
                Ok::<_, SolverError>(arrays[a].read_words(ctx, start, len)?)
            })
    }

    /// Writes the manifest of the checkpoint `path` whose arrays are in `parts` (see
    /// [`Checkpoint::write_manifest`]).
    pub(crate) fn write_checkpoint_manifest(
        &self,
        path: &Path,
        parts: Vec<super::checkpoint::Part>,
    ) -> Result<(), SolverError> {
        Ok(self.checkpoint_state().write_manifest(path, parts)?)
    }

    /// Continues from the checkpoint at `path`: the same geometry, data and parameters (the
    /// number of outer iterations may differ), so the final result equals an uninterrupted run
    /// bit for bit, whether either run was in-core or streaming. A checkpoint that does not
    /// hold the carried data residual (written by plain ADMM or before it existed) resumes a
    /// run that carries it too: the next outer iteration forms it afresh. On an error the
    /// solver's state is undefined: build a new one.
    pub fn resume(&mut self, ctx: &GpuContext, path: &Path) -> Result<Checkpoint, SolverError> {
        self.resume_share(ctx, path, None)
    }

    /// [`resume`](Self::resume) of the words `share[a]` of each checkpointed array `a` only (all
    /// with `None`): an MPI rank reads the planes it keeps, never whole arrays.
    pub(crate) fn resume_share(
        &mut self,
        ctx: &GpuContext,
        path: &Path,
        share: Option<&[Range<usize>; ARRAY_COUNT]>,
    ) -> Result<Checkpoint, SolverError> {
        let mismatch = |what: &'static str| Err(SolverError::CheckpointMismatch { what });
        let geometry = self.op.geometry();
        let (data_hash, shape) = (self.data_hash, self.params.iterates_shape());
        let arrays = self.checkpointed();
        let lengths = arrays.map(|a| a.layout().words());
        let data_residual = ARRAY_COUNT - 1;
        let checkpoint = Checkpoint::read_share(
            path,
            share,
            |c| {
                // Bit-exact comparison: sizes, every angle, the tilt, the accuracy and the rotation axis.
                if c.geometry.fingerprint() != geometry.fingerprint() {
                    return Err(SolverError::CheckpointGeometry {
                        differences: GeometryDifference::list(&c.geometry, geometry),
                    });
                }
                if c.data_hash != data_hash {
                    return mismatch("data");
                }
                if c.params.iterates_shape() != shape {
                    return mismatch("solver parameters");
                }
                // The data residual is there or not (whatever this run does with it).
                let sizes_match = c
                    .lengths
                    .iter()
                    .zip(&lengths)
                    .enumerate()
                    .all(|(a, (c, l))| c == l || (a == data_residual && *c == 0));
                if !sizes_match {
                    return mismatch("array sizes");
                }
                Ok(())
            },
            |a, start, words| Ok(arrays[a].write_words(ctx, start, words)?),
        )?;
        ctx.wait()?;
        self.rho = checkpoint.rho;
        self.iteration = checkpoint.iteration;
        self.last = checkpoint.last_report;
        self.data_residual_formed = checkpoint.lengths[data_residual] > 0;
        Ok(checkpoint)
    }

    /// The hash of the projections (checkpoints name the data by it).
    pub(crate) fn data_hash(&self) -> u64 {
        self.data_hash
    }

    /// The digest of each projection this member read.
    pub(crate) fn projection_digests(&self) -> &super::projections::ProjectionDigests {
        &self.projection_digests
    }

    /// Takes the hash and the scale of the projections from the team member (or the ranks)
    /// that read them.
    pub(crate) fn adopt_data(&mut self, hash: u64, scale: DataScale) {
        self.data_hash = hash;
        self.data_scale = scale;
    }

    /// Takes the iteration count, penalty and last report of `leader` (a team member that
    /// resumed the shared arrays from a checkpoint).
    pub(crate) fn adopt_state(&mut self, leader: &AdmmSolver) {
        self.rho = leader.rho;
        self.iteration = leader.iteration;
        self.last = leader.last;
        self.data_residual_formed = leader.data_residual_formed;
    }
}
