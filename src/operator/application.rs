//! Binding a stage sequence to the caller's arrays: which array each stage of an [`Apply`] reads
//! and writes (the caller's, or the operator's spectrum between stages), the shape checks, and
//! the stage-in and stage-out steps of every chunk, built once per application.

use std::sync::Arc;

use super::stages::{Kind, Stage};
use super::staging::{stage_in, stage_out};
use super::steps::Step;
use super::{Apply, LaminoOperator, OperatorError, Sink, Source, Space};
use crate::array::{Field, Scalars, Staging};
use crate::gpu::GpuContext;

/// A stage sequence bound to the caller's arrays, built once and recorded any number of times.
pub struct Application {
    pub(super) stages: Vec<BoundStage>,
    pub(super) staging: Option<Arc<Staging>>,
}

/// One stage of an application: its stage-in and stage-out steps for every chunk.
pub(super) struct BoundStage {
    pub(super) kind: Kind,
    /// Whether the stage-out copies complex values unchanged (its download, if any, brings the
    /// chunk's output block itself).
    pub(super) complex_sink: bool,
    /// Per chunk: stage in, stage out.
    pub(super) chunks: Vec<(Vec<Step>, Vec<Step>)>,
}

impl Application {
    /// The gridding stages of the application, in order, with their position in it.
    pub(crate) fn gridding_stages(&self) -> impl Iterator<Item = (usize, Option<Stage>)> + '_ {
        self.stages
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.kind.stage()))
    }
}

impl LaminoOperator {
    /// Binds `what` to read `source` and write `sink` (their shapes are checked against the
    /// geometry); `scalars` holds the coefficient of a scaled real sink. Intermediates go through
    /// the operator's spectrum; the 2D FFT stage works in place on the data array it follows or
    /// precedes (so [`Apply::Adjoint`] overwrites its source).
    pub fn application(
        &self,
        ctx: &GpuContext,
        scalars: &Scalars,
        staging: Option<&Arc<Staging>>,
        what: Apply,
        source: Source<'_>,
        sink: Sink<'_>,
    ) -> Result<Application, OperatorError> {
        let kinds = what.kinds();
        let spectrum = &self.spectrum;
        let mut stages = Vec::new();
        for (i, &kind) in kinds.iter().enumerate() {
            let last = i + 1 == kinds.len();
            let (from, to) = kind.spaces();
            let stage_source = match (i, kind) {
                (0, _) => source,
                (_, Kind::FAdj) => Source::Complex(sink.field()),
                _ if from == Space::Spectrum => Source::Complex(spectrum),
                _ => Source::Complex(source.field()),
            };
            let stage_sink = match (last, kind) {
                (true, _) => sink,
                (false, Kind::FFwd) => Sink::Complex(source.field()),
                (false, _) if to == Space::Spectrum => Sink::Complex(spectrum),
                (false, _) => sink,
            };
            if matches!(kind, Kind::FFwd | Kind::FAdj)
                && !(matches!(stage_source, Source::Complex(_))
                    && matches!(stage_sink, Sink::Complex(_)))
                && !(i == 0 && matches!(stage_source, Source::Real(_)))
            {
                return Err(OperatorError::Unsupported(
                    "the 2D FFT stage reads complex (or real, as the first stage) and writes complex arrays",
                ));
            }
            self.check(from, stage_source.words(), stage_source.field())?;
            if let Source::Difference(_, b) = stage_source {
                self.check(from, 2, b)?;
            }
            self.check(to, stage_sink.words(), stage_sink.field())?;
            let mut keep = Vec::new();
            let mut chunks = Vec::new();
            for chunk in self.stages.of(kind) {
                let input = &chunk.input;
                let output = &chunk.output;
                let steps_in = stage_in(
                    ctx,
                    staging.map(|s| &**s),
                    stage_source,
                    chunk.whole_in,
                    &input.buffer,
                    input.view,
                    input.extents,
                    &mut keep,
                )?;
                let steps_out = stage_out(
                    ctx,
                    scalars,
                    staging.map(|s| &**s),
                    &output.buffer,
                    output.view,
                    stage_sink,
                    chunk.whole_out,
                    output.extents,
                    &mut keep,
                )?;
                chunks.push((steps_in, steps_out));
            }
            // The uniforms live as long as the bind groups that use them.
            drop(keep);
            stages.push(BoundStage {
                kind,
                complex_sink: matches!(stage_sink, Sink::Complex(_)),
                chunks,
            });
        }
        Ok(Application {
            stages,
            staging: staging.cloned(),
        })
    }

    fn check(&self, space: Space, words: u64, field: &Field) -> Result<(), OperatorError> {
        let expected = space.layout(&self.geometry, words as usize);
        if field.layout() != expected {
            let mut e = space.shape(&self.geometry);
            e[2] *= words as usize;
            return Err(OperatorError::ShapeMismatch {
                what: format!("{:?} ({} words per element)", field.label(), words),
                expected: e,
                got: vec![field.layout().planes, field.layout().plane_words],
            });
        }
        Ok(())
    }

    /// Uploads `input` (row-major, of the shape `what` reads), applies `what` and returns its
    /// output. A wrong shape is an error, never a silent reinterpretation.
    pub fn apply_host(
        &self,
        ctx: &GpuContext,
        what: Apply,
        input_shape: &[usize],
        input: &[num_complex::Complex32],
    ) -> Result<Vec<num_complex::Complex32>, OperatorError> {
        let (from, to) = what.spaces();
        let expected = from.shape(&self.geometry);
        if input_shape != expected.as_slice() || input.len() != expected.iter().product::<usize>() {
            return Err(OperatorError::ShapeMismatch {
                what: "the input".into(),
                expected,
                got: input_shape.to_vec(),
            });
        }
        let source = Field::zeros(ctx, "operator input", from.layout(&self.geometry, 2))?;
        ctx.write(source.buffer(), 0, input);
        let sink = Field::zeros(ctx, "operator output", to.layout(&self.geometry, 2))?;
        let application = self.application(
            ctx,
            &self.own_scalars,
            None,
            what,
            Source::Complex(&source),
            Sink::Complex(&sink),
        )?;
        self.run(ctx, &application)?;
        Ok(ctx.read(sink.buffer(), 0, sink.layout().words() / 2)?)
    }
}
