//! Binding a stage sequence to the caller's arrays: which array each stage of an [`Apply`] reads
//! and writes (the caller's, or the operator's spectrum between stages), the shape checks, and
//! the stage-in and stage-out steps of every chunk, built once per application.

use std::sync::Arc;

use super::block_copies::{stage_in, stage_out};
use super::chunk_program::{Step, View};
use super::program::{Kind, Stage};
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

/// A block copy between a chunk-local buffer (viewed through `local`) and `field`, an array of
/// `shape` viewed through `whole`, as it is stored: unchanged, or for an array stored with its
/// first two axes swapped, the whole view mapped onto that storage and the three axes of both
/// views and the extents reordered, the largest whole stride first, so that the copy runs along
/// the storage and its pieces (one binding each) split it by planes.
fn oriented(
    field: &Field,
    shape: [u64; 3],
    whole: View,
    local: View,
    extents: [u64; 3],
) -> (View, View, [u64; 3]) {
    if !field.layout().axes_swapped {
        return (whole, local, extents);
    }
    let whole = whole.with_axes_swapped(shape);
    let mut order = [0, 1, 2];
    order.sort_by_key(|&i| std::cmp::Reverse(whole.strides[i]));
    let reorder = |v: View| View {
        offset: v.offset,
        strides: order.map(|i| v.strides[i]),
    };
    (reorder(whole), reorder(local), order.map(|i| extents[i]))
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
            let shape = |space: Space| {
                let s = space.shape(&self.geometry);
                [s[0], s[1], s[2]].map(|n| n as u64)
            };
            let (shape_in, shape_out) = (shape(from), shape(to));
            for chunk in self.stages.of(kind) {
                let input = &chunk.input;
                let output = &chunk.output;
                let (whole_in, view_in, extents_in) = oriented(
                    stage_source.field(),
                    shape_in,
                    chunk.whole_in,
                    input.view,
                    input.extents,
                );
                let steps_in = stage_in(
                    ctx,
                    staging.map(|s| &**s),
                    stage_source,
                    whole_in,
                    &input.buffer,
                    view_in,
                    extents_in,
                    &mut keep,
                )?;
                let (whole_out, view_out, extents_out) = oriented(
                    stage_sink.field(),
                    shape_out,
                    chunk.whole_out,
                    output.view,
                    output.extents,
                );
                let steps_out = stage_out(
                    ctx,
                    scalars,
                    staging.map(|s| &**s),
                    &output.buffer,
                    view_out,
                    stage_sink,
                    whole_out,
                    extents_out,
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

    /// Checks that `field` holds an array of `space` with `words` words per element, stored
    /// either way ([`crate::array::PlaneLayout::axes_swapped`]).
    fn check(&self, space: Space, words: u64, field: &Field) -> Result<(), OperatorError> {
        let expected = space.layout(&self.geometry, words as usize);
        let swapped = space.swapped_layout(&self.geometry, words as usize);
        if field.layout() != expected && field.layout() != swapped {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::{Coef, Residency};
    use crate::geometry::Geometry;
    use crate::geometry::Tilt;
    use crate::operator::OperatorOptions;
    use crate::random::SplitMix64;

    /// Every size different, so no axis can pass for another; chunks that do not divide the
    /// axes.
    fn geometry() -> Geometry {
        Geometry {
            n0: 16,
            n1: 12,
            n2: 20,
            deth: 14,
            detw: 18,
            ..Geometry::cube(16, 6, Tilt::from_degrees(20.0))
        }
    }

    /// Data `(ntheta, deth, detw)` of `words` words per element, by detector row.
    fn by_row(g: &Geometry, words: usize, by_angle: &[f32]) -> Vec<f32> {
        swap_first_axes([g.ntheta(), g.deth, g.detw], words, by_angle)
    }

    /// `values` of an array of `shape` (`words` words an element) with its first two axes
    /// swapped.
    fn swap_first_axes(shape: [usize; 3], words: usize, values: &[f32]) -> Vec<f32> {
        let [a, b, c] = shape;
        let w = c * words;
        let mut out = vec![0.0; values.len()];
        for (i, v) in values.iter().enumerate() {
            let (i0, i1, i2) = (i / (b * w), i / w % b, i % w);
            out[(i1 * a + i0) * w + i2] = *v;
        }
        out
    }

    /// The operator's applications give the same bits with the data stored by detector row as
    /// by angle and the volume by y row as by z slice (the values in the swapped order), as the
    /// solver keeps them, on the device and through staging buffers from host memory, with
    /// block copies split into windows of a small binding.
    #[test]
    fn arrays_stored_by_row_give_the_bits_of_arrays_by_plane() {
        let g = geometry();
        let options = OperatorOptions {
            max_chunk_y: Some(5),
            max_chunk_rows: Some(3),
            max_chunk_angles: Some(4),
            ..OperatorOptions::default()
        };
        let random = |len: usize, seed| -> Vec<f32> {
            let mut rng = SplitMix64::new(seed);
            (0..len).map(|_| rng.next_f64() as f32 - 0.5).collect()
        };
        let u = random(g.volume_len(), 1);
        let (a, b) = (random(2 * g.data_len(), 2), random(2 * g.data_len(), 3));
        let spatial = random(g.data_len(), 4);
        let tiny = crate::gpu::test_context().with_max_binding_bytes(16 << 10);
        let whole = crate::gpu::test_context();
        for ctx in [&whole, &tiny] {
            let op = LaminoOperator::new(ctx, &g, &options).unwrap();
            let scalars = Scalars::new(ctx, 1, 1).unwrap();
            // Bound whole: at most one binding (every chunk's block fits 16 KiB).
            let words = (2 * g.volume_len().max(g.data_len()).max(g.spectrum_len()))
                .min(ctx.max_binding_bytes() as usize / 4);
            let staging = Arc::new(Staging::new(ctx, words).unwrap());
            for residency in [Residency::Device, Residency::Host] {
                let staging = (residency == Residency::Host).then_some(&staging);
                let field = |layout, values: &[f32]| {
                    let f = Field::new(ctx, "test", layout, &residency).unwrap();
                    f.write(ctx, values).unwrap();
                    f
                };
                let real_data = field(Space::Data.layout(&g, 1), &spatial);
                let by_y = |v: &[f32]| swap_first_axes([g.n0, g.n1, g.n2], 1, v);
                let run = |what, source: Source<'_>, sink: Sink<'_>| {
                    let app = op
                        .application(ctx, &scalars, staging, what, source, sink)
                        .unwrap();
                    op.run(ctx, &app).unwrap();
                    sink.field().read(ctx).unwrap()
                };
                // L, F and L* with the data stored by angle and the volume by z slice
                // (`false`), or by row (`true`).
                let results = |swapped: bool| {
                    let (layout, volume_layout) = match swapped {
                        true => (
                            Space::Data.swapped_layout(&g, 2),
                            Space::Volume.swapped_layout(&g, 1),
                        ),
                        false => (Space::Data.layout(&g, 2), Space::Volume.layout(&g, 1)),
                    };
                    let order = |v: &[f32]| match swapped {
                        true => by_row(&g, 2, v),
                        false => v.to_vec(),
                    };
                    let volume_values = match swapped {
                        true => by_y(&u),
                        false => u.clone(),
                    };
                    let volume = field(volume_layout, &volume_values);
                    let data = field(layout, &vec![0.0; 2 * g.data_len()]);
                    let forward = run(
                        Apply::FourierForward,
                        Source::Real(&volume),
                        Sink::Complex(&data),
                    );
                    let fourier = run(Apply::Fft2d, Source::Real(&real_data), Sink::Complex(&data));
                    let (x, y) = (field(layout, &order(&a)), field(layout, &order(&b)));
                    let sink = field(volume_layout, &volume_values);
                    let adjoint = run(
                        Apply::FourierAdjoint,
                        Source::Difference(&x, &y),
                        Sink::Real {
                            field: &sink,
                            scale: Coef::fixed(0.5),
                            accumulate: true,
                        },
                    );
                    [forward, fourier, adjoint]
                };
                let [forward, fourier, adjoint] = results(false);
                let expected = [
                    by_row(&g, 2, &forward),
                    by_row(&g, 2, &fourier),
                    by_y(&adjoint),
                ];
                for (name, (got, want)) in ["L", "F", "L*"]
                    .iter()
                    .zip(results(true).iter().zip(&expected))
                {
                    let same = got.len() == want.len()
                        && got
                            .iter()
                            .zip(want)
                            .all(|(p, q)| p.to_bits() == q.to_bits());
                    assert!(
                        same,
                        "{name} with {residency:?} arrays and {} bindings differs stored by row",
                        ctx.max_binding_bytes()
                    );
                }
            }
        }
    }
}
