//! Recording an application: each stage's chunks (table fills, stage-in, computation,
//! stage-out) in order, a team member's share of them between the team's syncs, and the
//! chunk-by-chunk entry points the memo layer records a chunk's parts through.

use super::chunk_program::{Block, Step};
use super::program::{Kind, Stage};
use super::{Application, LaminoOperator, OperatorError};
use crate::array::{BlockView, Field, Role, Staging};
use crate::distributed::shares::share_range;
use crate::distributed::team::{Ahead, Reads, Ready};
use crate::gpu::GpuError;
use crate::gpu::{Completion, GpuContext, Recorder};

impl LaminoOperator {
    /// Records `steps`; `tap`, if any, also receives the bytes of their download.
    fn record_steps(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        steps: &[Step],
        staging: Option<&Staging>,
        mut tap: Option<Completion>,
    ) -> Result<(), GpuError> {
        for step in steps {
            match step {
                Step::Dispatch(bound, groups) => rec.dispatch(bound, *groups),
                Step::Fft(id) => self.ffts.record(*id, rec),
                Step::Upload { field, role, view } => {
                    let staging = staging.expect("host arrays have staging");
                    field.record_in(ctx, rec, staging.buffer(*role), view)?;
                }
                Step::Fill {
                    field,
                    buffer,
                    view,
                } => field.record_in(ctx, rec, buffer, view)?,
                Step::Download { field, view } => {
                    let staging = staging.expect("host arrays have staging");
                    field.record_out(ctx, rec, staging.buffer(Role::Out), view, tap.take())?;
                }
            }
        }
        Ok(())
    }

    /// Records `application` into `rec`.
    pub fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        application: &Application,
    ) -> Result<(), GpuError> {
        let stages = application.stages.len();
        // The next stage's reads, asked for ahead so that this stage sends them as it writes.
        let mut ahead: Option<Ahead> = None;
        for position in 0..stages {
            // A stage's chunks cross the previous stage's (or the vector kernels') shares.
            if let Some(share) = &self.share {
                match ahead.take() {
                    Some(asked) => share.finish_ahead(ctx, rec, asked)?,
                    None => share.sync(ctx, rec, || self.stage_reads(application, position))?,
                }
                if position + 1 < stages {
                    ahead = share.ask_ahead(|| self.stage_reads(application, position + 1))?;
                }
            }
            self.record_stage(ctx, rec, application, position, ahead.as_ref())?;
        }
        // What follows reads this member's planes of the output.
        if let Some(share) = &self.share {
            share.sync(ctx, rec, Vec::new)?;
        }
        Ok(())
    }

    /// The blocks of host arrays this member's chunks of stage `position` of `application`
    /// upload (their inputs, and the outputs they add to).
    fn stage_reads(&self, application: &Application, position: usize) -> Reads {
        let stage = &application.stages[position];
        let own = self.own_chunks(stage.kind);
        stage.chunks[own]
            .iter()
            .flat_map(|(steps_in, steps_out)| steps_in.iter().chain(steps_out))
            .filter_map(|step| match step {
                Step::Upload { field, view, .. } => Some((field.clone(), *view)),
                _ => None,
            })
            .collect()
    }

    /// This member's chunks of a stage (all of them alone), as indices of the chunks built
    /// (of U2, an operator built for a member holds its share only).
    fn own_chunks(&self, kind: Kind) -> std::ops::Range<usize> {
        let built = self.stages.of(kind).len();
        let first = match kind {
            Kind::Gridding(Stage::Usfft2d | Stage::Usfft2dAdjoint) => self.u2_chunks.start,
            _ => 0,
        };
        let count = self.all_chunks(kind);
        let own = self.share.as_ref().map_or(0..count, |s| s.range(count));
        debug_assert!(own.start >= first && own.end - first <= built);
        own.start - first..own.end - first
    }

    /// The chunks of a stage, every member's together.
    fn all_chunks(&self, kind: Kind) -> usize {
        match kind {
            Kind::Gridding(Stage::Usfft2d | Stage::Usfft2dAdjoint) => {
                self.geometry.deth.div_ceil(self.chunk_rows)
            }
            _ => self.stages.of(kind).len(),
        }
    }

    /// Number of chunks of `stage`.
    pub fn chunk_count(&self, stage: Stage) -> usize {
        self.stages.of(Kind::Gridding(stage)).len()
    }

    /// The chunk-local (input, output) blocks of chunk `chunk` of `stage`.
    pub(crate) fn chunk_io(&self, stage: Stage, chunk: usize) -> (&Block, &Block) {
        let c = &self.stages.of(Kind::Gridding(stage))[chunk];
        (&c.input, &c.output)
    }

    /// Records stage number `position` of `application` for every chunk (a team member's share
    /// of them). With the next stage's reads asked `ahead`, in groups of chunks: each group is
    /// submitted as it is recorded, and once its downloads have landed, while the next group
    /// computes, the blocks it wrote go out to their homes and to the ranks that asked.
    pub(crate) fn record_stage(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        application: &Application,
        position: usize,
        ahead: Option<&Ahead>,
    ) -> Result<(), GpuError> {
        let stage = &application.stages[position];
        let staging = application.staging.as_deref();
        let chunks = self.stages.of(stage.kind);
        let own = self.own_chunks(stage.kind);
        let groups = self
            .share
            .as_ref()
            .map_or(1, |s| s.groups(ahead, self.all_chunks(stage.kind)));
        let mut sending: Option<Ready> = None;
        for group in 0..groups {
            let part = share_range(group, groups, own.len());
            let part = own.start + part.start..own.start + part.end;
            for (chunk, (steps_in, steps_out)) in
                chunks[part.clone()].iter().zip(&stage.chunks[part.clone()])
            {
                self.record_steps(ctx, rec, &chunk.tables, staging, None)?;
                self.record_steps(ctx, rec, steps_in, staging, None)?;
                self.record_steps(ctx, rec, &chunk.compute, staging, None)?;
                self.record_steps(ctx, rec, steps_out, staging, None)?;
            }
            let (Some(share), Some(ahead)) = (&self.share, ahead) else {
                continue;
            };
            let written = Self::downloads(&stage.chunks[part]);
            let ready = share.record_ready(ctx, rec, ahead, &written)?;
            // The last group's blocks go out when the next stage starts, with the rest.
            if let Some(previous) = sending.replace(ready) {
                share.push_ready(ctx, ahead, previous)?;
            }
        }
        Ok(())
    }

    /// The host arrays and blocks the stage-outs of `chunks` download into.
    fn downloads(chunks: &[(Vec<Step>, Vec<Step>)]) -> Reads {
        chunks
            .iter()
            .flat_map(|(_, steps_out)| steps_out)
            .filter_map(|step| match step {
                Step::Download { field, view } => Some((field.clone(), *view)),
                _ => None,
            })
            .collect()
    }

    /// Records the copy of chunk `chunk`'s input from the whole array into its input block, for
    /// stage number `position` of `application`.
    pub(crate) fn record_chunk_in(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        application: &Application,
        position: usize,
        chunk: usize,
    ) -> Result<(), GpuError> {
        let steps = &application.stages[position].chunks[chunk].0;
        self.record_steps(ctx, rec, steps, application.staging.as_deref(), None)
    }

    /// The host arrays and blocks the stage-in of chunk `chunk` uploads, for stage number
    /// `position` of `application`, in binding order (x, then y of a difference); empty when it
    /// reads device arrays. The memo layer pools a chunk's key from them without an upload.
    pub(crate) fn chunk_uploads<'a>(
        &self,
        application: &'a Application,
        position: usize,
        chunk: usize,
    ) -> Vec<(&'a Field, &'a BlockView)> {
        application.stages[position].chunks[chunk]
            .0
            .iter()
            .filter_map(|step| match step {
                Step::Upload { field, view, .. } => Some((field, view)),
                _ => None,
            })
            .collect()
    }

    /// Records the chunk's map from its input block to its output block.
    pub(crate) fn record_chunk_compute(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        stage: Stage,
        chunk: usize,
    ) -> Result<(), GpuError> {
        let chunk = &self.stages.of(Kind::Gridding(stage))[chunk];
        self.record_steps(ctx, rec, &chunk.tables, None, None)?;
        self.record_steps(ctx, rec, &chunk.compute, None, None)
    }

    /// Records the copy of the chunk's output block into the whole array, for stage number
    /// `position` of `application`; `tap` also receives the bytes downloaded into a host array
    /// (see [`chunk_download`](Self::chunk_download)).
    pub(crate) fn record_chunk_out(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        application: &Application,
        position: usize,
        chunk: usize,
        tap: Option<Completion>,
    ) -> Result<(), GpuError> {
        let steps = &application.stages[position].chunks[chunk].1;
        self.record_steps(ctx, rec, steps, application.staging.as_deref(), tap)
    }

    /// The host array and block that the stage-out of chunk `chunk` downloads its output block
    /// into unchanged (complex values, row-major), for stage number `position` of
    /// `application`; `None` when it writes a device array or converts the values (a real
    /// sink). The memo layer forms a reused output there without a transfer.
    pub(crate) fn chunk_download<'a>(
        &self,
        application: &'a Application,
        position: usize,
        chunk: usize,
    ) -> Option<(&'a Field, &'a BlockView)> {
        let stage = &application.stages[position];
        if !stage.complex_sink {
            return None;
        }
        stage.chunks[chunk].1.iter().find_map(|step| match step {
            Step::Download { field, view } => Some((field, view)),
            _ => None,
        })
    }

    /// Runs `application` and waits for it.
    pub fn run(&self, ctx: &GpuContext, application: &Application) -> Result<(), OperatorError> {
        let mut rec = ctx.recorder("laminography operator");
        self.record(ctx, &mut rec, application)?;
        ctx.submit_and_wait(rec)?;
        Ok(ctx.complete_downloads()?)
    }
}
