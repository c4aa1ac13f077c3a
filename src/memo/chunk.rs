//! The chunks of a wave and what is decided for each ([`WaveChunk`], [`Outcome`], [`Reuse`]),
//! and what a wave runs in ([`WaveContext`]): the vocabulary the wave's steps share (keying in
//! [`super::wave`], deciding in [`super::mlr`] and [`super::certify`], forming reuses in
//! [`super::reuse`]), below all of them.

use std::sync::Arc;

use num_complex::Complex32;

use super::gpu::{Combination, StageDevice};
use super::index::UnitKey;
use super::keys::chunk_values;
use super::store::Landing;
use super::MemoOptions;
use crate::gpu::GpuContext;
use crate::gpu::GpuError;
use crate::operator::{Application, Block, LaminoOperator, Stage};

/// A reuse the policy accepted.
#[derive(Debug, Clone)]
pub(super) struct Reuse {
    /// Entries and their coefficients.
    pub(super) combination: Combination,
    /// `|x - sum alpha_i c_i| / |x|` and the bound on the output error (certified policies).
    pub(super) certificate: Option<(f64, f64)>,
}

/// What happens to a chunk of a wave.
#[derive(Debug, Clone)]
pub(super) enum Outcome {
    /// Not decided yet.
    Open,
    /// Computed (and stored when it has a key): `recorded` once its computation is recorded.
    Compute { recorded: bool },
    /// Formed from stored outputs.
    Reuse(Reuse),
}

/// A chunk of the wave being handled.
pub(super) struct WaveChunk {
    /// Position in the wave (the chunk kernels' table entry).
    pub(super) j: usize,
    pub(super) stage: Stage,
    pub(super) chunk: usize,
    /// The slot its input is staged in (its entry's slot if it is computed).
    pub(super) slot: usize,
    /// Whether its input is in its slot already (it is not when it was keyed on the host).
    pub(super) staged: bool,
    /// Its input values, when its stage-in reads host arrays (keyed and decided on the host).
    pub(super) host_input: Option<Arc<Vec<Complex32>>>,
    /// Whether its stage-out downloads the output block unchanged into a host array: a reuse
    /// is then formed on the host, and a computed output kept there as it lands.
    pub(super) output_on_host: bool,
    /// The computed output's host copy, set when its download lands.
    pub(super) landing: Option<Landing>,
    pub(super) input: Block,
    pub(super) output: Block,
    pub(super) class: usize,
    pub(super) key: Option<UnitKey>,
    pub(super) outcome: Outcome,
}

/// What a wave needs besides the state: the operator, the application, the device side.
pub(super) struct WaveContext<'a> {
    pub(super) ctx: &'a GpuContext,
    pub(super) op: &'a LaminoOperator,
    pub(super) device: &'a StageDevice,
    pub(super) application: &'a Application,
    pub(super) position: usize,
    pub(super) options: &'a MemoOptions,
}

impl WaveContext<'_> {
    /// Records the stage-in of chunk `c`'s input and its copy into its slot, unless it is there.
    pub(super) fn record_stage_in(
        &self,
        rec: &mut crate::gpu::Recorder,
        c: &WaveChunk,
    ) -> Result<(), GpuError> {
        if !c.staged {
            self.op
                .record_chunk_in(self.ctx, rec, self.application, self.position, c.chunk)?;
            self.device
                .record_copy_in(self.ctx, rec, c.j, &c.input, c.slot);
        }
        Ok(())
    }

    /// The input values of the chunks of `wave`, from the host arrays their stage-ins read, so
    /// that they are keyed and decided on the host and only the chunks computed are uploaded;
    /// `None` if a chunk reads a device array.
    pub(super) fn host_inputs(
        &self,
        wave: &[WaveChunk],
    ) -> Result<Option<Vec<Vec<Complex32>>>, GpuError> {
        let mut inputs = Vec::with_capacity(wave.len());
        for c in wave {
            let uploads = self
                .op
                .chunk_uploads(self.application, self.position, c.chunk);
            if uploads.is_empty() {
                return Ok(None);
            }
            let blocks = uploads
                .into_iter()
                .map(|(field, view)| field.gather(self.ctx, view))
                .collect::<Result<Vec<_>, _>>()?;
            inputs.push(chunk_values(c.input.len() as usize, &blocks));
        }
        Ok(Some(inputs))
    }

    /// Records chunk `c`'s computation from its staged input, the copy of its output into its
    /// slot (when it will be stored) and its stage out.
    /// A chunk that will be stored with its output on the host also keeps the output's
    /// download as its host copy ([`WaveChunk::landing`]).
    fn record_compute(
        &self,
        rec: &mut crate::gpu::Recorder,
        c: &mut WaveChunk,
    ) -> Result<(), GpuError> {
        let d = self.device;
        self.record_stage_in(rec, c)?;
        d.record_restore(self.ctx, rec, c.j, &c.input, c.slot);
        self.op
            .record_chunk_compute(self.ctx, rec, c.stage, c.chunk)?;
        let mut tap: Option<crate::gpu::Completion> = None;
        if c.key.is_some() {
            d.record_store(self.ctx, rec, c.j, &c.output, c.slot);
            if c.output_on_host && self.options.host_bytes > 0 {
                let landing = Landing::default();
                let copy = landing.clone();
                tap = Some(Box::new(move |bytes: &[u8]| {
                    // Set once: the completion runs once.
                    let _ = copy.set(bytemuck::pod_collect_to_vec(bytes));
                }));
                c.landing = Some(landing);
            }
        }
        self.op
            .record_chunk_out(self.ctx, rec, self.application, self.position, c.chunk, tap)
    }

    /// Records every chunk decided `Compute` and not yet recorded.
    pub(super) fn record_decided_computes(
        &self,
        rec: &mut crate::gpu::Recorder,
        wave: &mut [WaveChunk],
    ) -> Result<(), GpuError> {
        for c in wave.iter_mut() {
            if let Outcome::Compute { recorded: false } = c.outcome {
                self.record_compute(rec, c)?;
                c.outcome = Outcome::Compute { recorded: true };
            }
        }
        Ok(())
    }
}
