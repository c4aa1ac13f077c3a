//! What a chunk's recorded program is made of: the steps (dispatches, FFT passes, transfers),
//! the operator's FFT plans and the typed handles steps name them by, and each stage's chunks
//! (input block, computation, output block).

use super::program::{Kind, Stage};
use crate::array::{BlockView, Field, Role};
use crate::fft::FftPlan1d;
use crate::gpu::{Bound, GpuBuffer, Recorder};

/// A strided 3D view of an array: element (i0, i1, i2) at offset + i0 s0 + i1 s1 + i2 s2.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    pub offset: u64,
    pub strides: [u64; 3],
}

impl View {
    /// This view of an array of `shape` (elements) as a view of the same elements stored with
    /// the array's first two axes swapped. Every stride and the offset is a sum of whole steps
    /// along the axes, so the map, linear, takes each of them alone.
    pub(crate) fn with_axes_swapped(self, [a, b, c]: [u64; 3]) -> View {
        let map = |e: u64| {
            let (x0, x1, x2) = (e / (b * c), e / c % b, e % c);
            x1 * a * c + x0 * c + x2
        };
        View {
            offset: map(self.offset),
            strides: self.strides.map(map),
        }
    }
}

/// One of the operator's FFT plans: only [`FftPlans::add`] hands these out, so a step cannot
/// name a plan by a count or size that happens to be a valid index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FftPlanId(usize);

/// The operator's FFT plans, in the order they were built.
#[derive(Default)]
pub(super) struct FftPlans(Vec<FftPlan1d>);

impl FftPlans {
    /// Adds `plans` (the axis passes of one transform, in the order they run) and returns their
    /// handles in that order.
    pub(super) fn add(&mut self, plans: impl IntoIterator<Item = FftPlan1d>) -> Vec<FftPlanId> {
        let first = self.0.len();
        self.0.extend(plans);
        (first..self.0.len()).map(FftPlanId).collect()
    }

    /// Records plan `id`.
    pub(super) fn record(&self, id: FftPlanId, rec: &mut Recorder) {
        self.0[id.0].record(rec);
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &FftPlan1d> {
        self.0.iter()
    }
}

/// One recorded step of a chunk's program.
#[derive(Clone)]
pub(super) enum Step {
    /// A bound kernel over this many workgroups.
    Dispatch(Bound, u32),
    Fft(FftPlanId),
    /// A block of a host array into a staging buffer (starts a recording segment).
    Upload {
        field: Field,
        role: Role,
        view: BlockView,
    },
    /// A block of a host array into a device buffer of the operator's own (a chunk's slice of
    /// the U2 tables).
    Fill {
        field: Field,
        buffer: GpuBuffer,
        view: BlockView,
    },
    /// The output staging buffer into a block of a host array.
    Download {
        field: Field,
        view: BlockView,
    },
}

/// A 3D block of complex values inside a chunk-local buffer.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub buffer: GpuBuffer,
    pub view: View,
    pub extents: [u64; 3],
    /// The axis whose index is the chunk's row (y or detector row): the key's channels.
    pub channel_axis: usize,
}

impl Block {
    pub fn len(&self) -> u64 {
        self.extents.iter().product()
    }
}

/// One chunk of a stage: where its input block comes from in the whole input array, its
/// computation, and where its output block goes in the whole output array.
pub(super) struct Chunk {
    /// Uploads of the chunk's slice of host tables (U2 in streaming mode), recorded before its
    /// input is staged so that they share its recording segment; empty when tables are resident.
    pub(super) tables: Vec<Step>,
    pub(super) input: Block,
    pub(super) whole_in: View,
    pub(super) compute: Vec<Step>,
    pub(super) output: Block,
    pub(super) whole_out: View,
}

/// The recorded chunks of each of the six stages, one named field per stage.
#[derive(Default)]
pub(super) struct StageChunks {
    u1_forward: Vec<Chunk>,
    u1_adjoint: Vec<Chunk>,
    u2_forward: Vec<Chunk>,
    u2_adjoint: Vec<Chunk>,
    fft2d_adjoint: Vec<Chunk>,
    fft2d_forward: Vec<Chunk>,
}

impl StageChunks {
    pub(super) fn of(&self, kind: Kind) -> &Vec<Chunk> {
        match kind {
            Kind::Gridding(Stage::Usfft1d) => &self.u1_forward,
            Kind::Gridding(Stage::Usfft1dAdjoint) => &self.u1_adjoint,
            Kind::Gridding(Stage::Usfft2d) => &self.u2_forward,
            Kind::Gridding(Stage::Usfft2dAdjoint) => &self.u2_adjoint,
            Kind::FAdj => &self.fft2d_adjoint,
            Kind::FFwd => &self.fft2d_forward,
        }
    }

    pub(super) fn of_mut(&mut self, kind: Kind) -> &mut Vec<Chunk> {
        match kind {
            Kind::Gridding(Stage::Usfft1d) => &mut self.u1_forward,
            Kind::Gridding(Stage::Usfft1dAdjoint) => &mut self.u1_adjoint,
            Kind::Gridding(Stage::Usfft2d) => &mut self.u2_forward,
            Kind::Gridding(Stage::Usfft2dAdjoint) => &mut self.u2_adjoint,
            Kind::FAdj => &mut self.fft2d_adjoint,
            Kind::FFwd => &mut self.fft2d_forward,
        }
    }
}
