//! The laminography operator on the GPU: `L = F_adj . U2 . U1` and its exact adjoint, plus the
//! Fourier-domain pair `A = U2 . U1`, `A*` that the solver uses (docs/operator-method.md,
//! "Operator L", "Fourier-domain pair", "Adjoints and determinism").
//!
//! - U1: 1D USFFT along z for every (y, x) column, onto the frequencies `z_k` of the detector rows.
//!   Volume `(n0, n1, n2)` -> spectrum `(deth, n1, n2)`.
//! - U2: 2D USFFT of every spectrum plane `k` onto the (x, y) frequencies of each angle and column.
//!   Spectrum -> Fourier-domain data `(ntheta, deth, detw)`.
//! - F_adj: the centred inverse 2D FFT of each projection, scaled by `1/(deth detw)`, with the
//!   reference's sign `(-1)^((deth+detw)/2)` corrected so that L is the true projector for every
//!   even size: `L u (theta) ~ P_theta u / sqrt(n2 ntheta)`.
//!
//! Every adjoint is a gather (no float atomics), so the same input gives the same bits. Each stage
//! runs chunk by chunk along its own axis (U1 along y, U2 along detector rows, F along angles), a
//! chunk an independent computation on chunk-local buffers, so results do not depend on the chunk
//! sizes. The operator owns only its intermediate, the spectrum; an [`Application`] binds a stage
//! sequence to the caller's arrays once ([`Source`] in, [`Sink`] out: complex, real, the
//! difference of two arrays, a scaled real part added to an array), so the solver's vector
//! updates around an operator application happen while a chunk is on its way in or out.

mod geometry;
mod staging;
pub(crate) mod tables;

pub use geometry::{Geometry, GeometryError, GriddingAxis, DEFAULT_EPS, MIN_EPS};
pub use staging::{Sink, Source};

use bytemuck::{Pod, Zeroable};
use serde::Serialize;
use thiserror::Error;

use std::sync::Arc;

use crate::array::{BlockView, Field, PlaneLayout, Residency, Role, Scalars, Staging};
use crate::distributed::team::{Reads, Share};
use crate::fft::{
    Direction, FftDescriptor, FftError, FftPlan, FftPlan1d, Layout, Normalization, Strategy,
};
use crate::gpu::GpuError;
use crate::gpu::{Bound, BufferSlice, Completion, GpuBuffer, GpuContext, KernelSpec, Recorder};
use crate::shaders;
pub(crate) use staging::View;
use staging::{groups, modulate, stage_in, stage_out, window, WORKGROUP};
use tables::{U1Tables, U2Tables};

/// Errors of operator construction and application.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OperatorError {
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Fft(#[from] FftError),
    /// A buffer the operator needs cannot exist on this device.
    #[error("{what} needs {bytes} bytes, but this device allows {limit} bytes")]
    TooLarge {
        what: String,
        bytes: u64,
        limit: u64,
    },
    /// An axis is shorter than the gridding kernel.
    #[error("{name} = {value} is too small for the gridding kernel at eps = {eps}: it needs at least {min}")]
    TooSmall {
        name: &'static str,
        value: usize,
        eps: f64,
        min: usize,
    },
    /// An array does not have the shape the geometry implies.
    #[error("{what} has shape {got:?}, but the geometry needs {expected:?}")]
    ShapeMismatch {
        what: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    /// An application asks for something the stages cannot do.
    #[error("{0}")]
    Unsupported(&'static str),
    #[error(transparent)]
    Storage(crate::array::StorageError),
}

impl From<crate::array::StorageError> for OperatorError {
    fn from(e: crate::array::StorageError) -> Self {
        match e {
            crate::array::StorageError::Gpu(g) => Self::Gpu(g),
            other => Self::Storage(other),
        }
    }
}

/// Each stage runs in at least this many chunks by default (fewer only where the axis is
/// shorter): devices and MPI ranks share a stage's chunks, so a stage of one chunk would run
/// on one of them; the chunking does not depend on how many share it, so neither do the bits.
pub const MIN_STAGE_CHUNKS: usize = 8;

/// Chunking limits; by default chunks are as large as the device's binding limit allows, and
/// each stage has at least [`MIN_STAGE_CHUNKS`] chunks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperatorOptions {
    /// At most this many y rows per U1 chunk.
    pub max_chunk_y: Option<usize>,
    /// At most this many detector rows per U2 chunk.
    pub max_chunk_rows: Option<usize>,
    /// At most this many projections per chunk of the 2D FFT stage.
    pub max_chunk_angles: Option<usize>,
}

/// What to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    /// `L`: volume -> data.
    Forward,
    /// `L*`: data -> volume (the source array is used as workspace and overwritten).
    Adjoint,
    /// `A = U2 U1`: volume -> data (Fourier domain).
    FourierForward,
    /// `A*`: data (Fourier domain) -> volume.
    FourierAdjoint,
    /// `U1`: volume -> spectrum.
    Usfft1d,
    /// `U1*`: spectrum -> volume.
    Usfft1dAdjoint,
    /// `U2`: spectrum -> data.
    Usfft2d,
    /// `U2*`: data -> spectrum.
    Usfft2dAdjoint,
    /// `F_adj` (the last stage of L).
    Fft2dAdjoint,
    /// `F_fwd = F_adj*` (the first stage of L*).
    Fft2d,
}

/// The arrays an [`Apply`] reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// `(n0, n1, n2)`
    Volume,
    /// `(deth, n1, n2)`, after U1
    Spectrum,
    /// `(ntheta, deth, detw)`, spatial or Fourier-domain data
    Data,
}

impl Space {
    /// The array shape in this geometry.
    pub fn shape(self, g: &Geometry) -> Vec<usize> {
        match self {
            Self::Volume => vec![g.n0, g.n1, g.n2],
            Self::Spectrum => vec![g.deth, g.n1, g.n2],
            Self::Data => vec![g.ntheta(), g.deth, g.detw],
        }
    }

    /// The plane layout of an array of this space with `words` f32 words per element (1 real,
    /// 2 complex).
    pub fn layout(self, g: &Geometry, words: usize) -> PlaneLayout {
        let shape = self.shape(g);
        PlaneLayout {
            planes: shape[0],
            plane_words: words * shape[1] * shape[2],
        }
    }
}

impl Apply {
    /// (input, output) arrays.
    pub fn spaces(self) -> (Space, Space) {
        match self {
            Self::Forward | Self::FourierForward => (Space::Volume, Space::Data),
            Self::Adjoint | Self::FourierAdjoint => (Space::Data, Space::Volume),
            Self::Usfft1d => (Space::Volume, Space::Spectrum),
            Self::Usfft1dAdjoint => (Space::Spectrum, Space::Volume),
            Self::Usfft2d => (Space::Spectrum, Space::Data),
            Self::Usfft2dAdjoint => (Space::Data, Space::Spectrum),
            Self::Fft2d | Self::Fft2dAdjoint => (Space::Data, Space::Data),
        }
    }

    fn kinds(self) -> &'static [Kind] {
        use Kind::*;
        match self {
            Self::Forward => &[U1Fwd, U2Fwd, FAdj],
            Self::Adjoint => &[FFwd, U2Adj, U1Adj],
            Self::FourierForward => &[U1Fwd, U2Fwd],
            Self::FourierAdjoint => &[U2Adj, U1Adj],
            Self::Usfft1d => &[U1Fwd],
            Self::Usfft1dAdjoint => &[U1Adj],
            Self::Usfft2d => &[U2Fwd],
            Self::Usfft2dAdjoint => &[U2Adj],
            Self::Fft2dAdjoint => &[FAdj],
            Self::Fft2d => &[FFwd],
        }
    }
}

/// The six chunked stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    U1Fwd,
    U1Adj,
    U2Fwd,
    U2Adj,
    FAdj,
    FFwd,
}

impl Kind {
    fn spaces(self) -> (Space, Space) {
        match self {
            Self::U1Fwd => (Space::Volume, Space::Spectrum),
            Self::U1Adj => (Space::Spectrum, Space::Volume),
            Self::U2Fwd => (Space::Spectrum, Space::Data),
            Self::U2Adj => (Space::Data, Space::Spectrum),
            Self::FAdj | Self::FFwd => (Space::Data, Space::Data),
        }
    }

    fn stage(self) -> Option<Stage> {
        match self {
            Self::U1Fwd => Some(Stage::Usfft1d),
            Self::U1Adj => Some(Stage::Usfft1dAdjoint),
            Self::U2Fwd => Some(Stage::Usfft2d),
            Self::U2Adj => Some(Stage::Usfft2dAdjoint),
            Self::FAdj | Self::FFwd => None,
        }
    }
}

pub(crate) enum Step {
    Dispatch(Bound, u32),
    Fft(usize),
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

/// A gridding stage that runs chunk by chunk, each chunk an independent linear map from a
/// chunk-local input block to a chunk-local output block (what the memo layer reuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// U1, volume -> spectrum, chunked along y.
    Usfft1d,
    /// U1*, spectrum -> volume, chunked along y.
    Usfft1dAdjoint,
    /// U2, spectrum -> data, chunked along detector rows.
    Usfft2d,
    /// U2*, data -> spectrum, chunked along detector rows.
    Usfft2dAdjoint,
}

impl Stage {
    /// All four, in a fixed order.
    pub const ALL: [Stage; 4] = [
        Stage::Usfft1d,
        Stage::Usfft1dAdjoint,
        Stage::Usfft2d,
        Stage::Usfft2dAdjoint,
    ];

    /// Its name in reports and on the command line (as serialised).
    pub fn name(self) -> &'static str {
        match self {
            Self::Usfft1d => "usfft1d",
            Self::Usfft1dAdjoint => "usfft1d_adjoint",
            Self::Usfft2d => "usfft2d",
            Self::Usfft2dAdjoint => "usfft2d_adjoint",
        }
    }

    fn kind(self) -> Kind {
        match self {
            Self::Usfft1d => Kind::U1Fwd,
            Self::Usfft1dAdjoint => Kind::U1Adj,
            Self::Usfft2d => Kind::U2Fwd,
            Self::Usfft2dAdjoint => Kind::U2Adj,
        }
    }

    /// Whether every chunk of the stage applies the same map (U1 acts on every (y, x) column
    /// alike), so a chunk's result can stand in for another chunk of the same size; U2's map
    /// depends on the detector row.
    pub fn chunks_share_map(self) -> bool {
        matches!(self, Self::Usfft1d | Self::Usfft1dAdjoint)
    }

    /// The whole-array stage this is.
    pub fn apply(self) -> Apply {
        match self {
            Self::Usfft1d => Apply::Usfft1d,
            Self::Usfft1dAdjoint => Apply::Usfft1dAdjoint,
            Self::Usfft2d => Apply::Usfft2d,
            Self::Usfft2dAdjoint => Apply::Usfft2dAdjoint,
        }
    }
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
struct Chunk {
    /// Uploads of the chunk's slice of host tables (U2 in streaming mode), recorded before its
    /// input is staged so that they share its recording segment; empty when tables are resident.
    tables: Vec<Step>,
    input: Block,
    whole_in: View,
    compute: Vec<Step>,
    output: Block,
    whole_out: View,
}

/// A stage sequence bound to the caller's arrays, built once and recorded any number of times.
pub struct Application {
    stages: Vec<BoundStage>,
    staging: Option<Arc<Staging>>,
}

struct BoundStage {
    kind: Kind,
    /// Whether the stage-out copies complex values unchanged (its download, if any, brings the
    /// chunk's output block itself).
    complex_sink: bool,
    /// Per chunk: stage in, stage out.
    chunks: Vec<(Vec<Step>, Vec<Step>)>,
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

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct U1Params {
    n: u32,
    grid_len: u32,
    deth: u32,
    columns: u32,
    taps: u32,
    pad: [u32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct U2Params {
    n1: u32,
    n2: u32,
    gy: u32,
    gx: u32,
    rows: u32,
    points: u32,
    my: i32,
    mx: i32,
    coords_offset: u32,
    row_start_offset: u32,
    sorted_offset: u32,
    pad: u32,
    cx: f32,
    cy: f32,
    ex: f32,
    ey: f32,
}

/// Bytes of each slot of the shared FFT workspace the operator's plans need (U1 along 2 n0, the
/// 2 n1 x 2 n2 grids of U2, the projections of F; forward and inverse alike) for chunks of `cy` y
/// rows, `ck` detector rows and `ca` angles.
fn fft_workspace(ctx: &GpuContext, g: &Geometry, (cy, ck, ca): (u64, u64, u64)) -> [u64; 2] {
    let (n0, n1, n2) = (g.n0 as u64, g.n1 as u64, g.n2 as u64);
    let (deth, detw) = (g.deth as u64, g.detw as u64);
    let slots = |n: u64, batch: u64| {
        crate::fft::workspace_slot_bytes(ctx, n as usize, batch, Strategy::Auto)
    };
    crate::fft::max_slots([
        slots(2 * n0, cy * n2),
        slots(2 * n2, ck * 2 * n1),
        slots(2 * n1, ck * 2 * n2),
        slots(detw, ca * deth),
        slots(deth, ca * detw),
    ])
}

/// The laminography operator for one geometry, with its spectrum, chunk buffers, tables, kernels
/// and FFT plans built once.
pub struct LaminoOperator {
    geometry: Geometry,
    spectrum: Field,
    stages: StageChunks,
    ffts: Vec<FftPlan1d>,
    chunk_y: usize,
    chunk_rows: usize,
    chunk_angles: usize,
    /// Bytes of each slot of the context's shared FFT workspace the plans need together.
    fft_workspace: [u64; 2],
    buffers: Vec<GpuBuffer>,
    /// The coefficients of applications the operator runs for itself (no scaled sinks).
    own_scalars: Scalars,
    /// As a member of a multi-device team: which chunks of each stage it computes.
    share: Option<Arc<Share>>,
}

/// The recorded chunks of each of the six stages, one named field per stage.
#[derive(Default)]
struct StageChunks {
    u1_forward: Vec<Chunk>,
    u1_adjoint: Vec<Chunk>,
    u2_forward: Vec<Chunk>,
    u2_adjoint: Vec<Chunk>,
    fft2d_adjoint: Vec<Chunk>,
    fft2d_forward: Vec<Chunk>,
}

impl StageChunks {
    fn of(&self, kind: Kind) -> &Vec<Chunk> {
        match kind {
            Kind::U1Fwd => &self.u1_forward,
            Kind::U1Adj => &self.u1_adjoint,
            Kind::U2Fwd => &self.u2_forward,
            Kind::U2Adj => &self.u2_adjoint,
            Kind::FAdj => &self.fft2d_adjoint,
            Kind::FFwd => &self.fft2d_forward,
        }
    }

    fn of_mut(&mut self, kind: Kind) -> &mut Vec<Chunk> {
        match kind {
            Kind::U1Fwd => &mut self.u1_forward,
            Kind::U1Adj => &mut self.u1_adjoint,
            Kind::U2Fwd => &mut self.u2_forward,
            Kind::U2Adj => &mut self.u2_adjoint,
            Kind::FAdj => &mut self.fft2d_adjoint,
            Kind::FFwd => &mut self.fft2d_forward,
        }
    }
}

impl std::fmt::Debug for LaminoOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaminoOperator")
            .field("geometry", &self.geometry)
            .field("chunk_y", &self.chunk_y)
            .field("chunk_rows", &self.chunk_rows)
            .field("chunk_angles", &self.chunk_angles)
            .finish_non_exhaustive()
    }
}

fn complex_buffer(ctx: &GpuContext, label: &str, elems: usize) -> Result<GpuBuffer, OperatorError> {
    let bytes = elems as u64 * 8;
    if bytes > ctx.max_buffer_bytes() {
        return Err(OperatorError::TooLarge {
            what: label.to_string(),
            bytes,
            limit: ctx.max_buffer_bytes(),
        });
    }
    Ok(ctx.storage_buffer(label, bytes)?)
}

/// Per-unit bytes of a stage's chunk: buffers bound whole (at offset 0, so they may fill a binding
/// exactly) and tables bound as a window at an unaligned start (which needs room for the alignment).
struct ChunkUnit {
    whole: u64,
    windowed: u64,
}

/// Largest chunk (at most `cap`) whose buffers fit one binding each.
fn chunk_size(
    ctx: &GpuContext,
    what: &str,
    unit: ChunkUnit,
    cap: usize,
) -> Result<usize, OperatorError> {
    let limit = ctx.max_binding_bytes();
    let room = limit.saturating_sub(ctx.binding_alignment());
    // A unit of 0 bytes (no such buffer) bounds nothing.
    let fit = |bytes: u64, room: u64| room.checked_div(bytes).unwrap_or(u64::MAX);
    let n = fit(unit.whole, limit).min(fit(unit.windowed, room));
    if n == 0 {
        let (bytes, limit) = if unit.whole > limit {
            (unit.whole, limit)
        } else {
            (unit.windowed, room)
        };
        return Err(OperatorError::TooLarge {
            what: format!("one {what} of the operator's chunk buffers"),
            bytes,
            limit,
        });
    }
    Ok(n.min(cap as u64) as usize)
}

/// The binding layout shared by both gridding stages' kernels: three chunk-local arrays (read and
/// written), four read-only tables, the parameters.
fn gridding_kernel(shader: &'static shaders::Shader, entry: &'static str) -> KernelSpec {
    KernelSpec {
        shader,
        entry,
        overrides: vec![("WORKGROUP", WORKGROUP as f64)],
    }
}

/// y rows per U1 chunk: columns, grid and rows of one chunk each fit one binding.
fn u1_chunk(
    ctx: &GpuContext,
    g: &Geometry,
    options: &OperatorOptions,
) -> Result<usize, OperatorError> {
    let unit = ChunkUnit {
        whole: (2 * g.n0).max(g.deth) as u64 * g.n2 as u64 * 8,
        windowed: 0,
    };
    chunk_size(
        ctx,
        "y row",
        unit,
        options
            .max_chunk_y
            .unwrap_or(g.n1.div_ceil(MIN_STAGE_CHUNKS))
            .max(1)
            .min(g.n1),
    )
}

/// Detector rows per U2 chunk: the 2n1 x 2n2 grids and the points of one chunk each fit one binding
/// (a 2048^2 row's grid is 128 MiB, lavapipe's whole binding), and so does the window of the
/// chunk's rows of the device-resident tables.
fn u2_chunk(
    ctx: &GpuContext,
    g: &Geometry,
    options: &OperatorOptions,
) -> Result<usize, OperatorError> {
    let points = (g.ntheta() * g.detw) as u64 * 8;
    let unit = ChunkUnit {
        whole: ((4 * g.n1 * g.n2) as u64 * 8).max(points),
        windowed: points,
    };
    chunk_size(
        ctx,
        "detector row",
        unit,
        options
            .max_chunk_rows
            .unwrap_or(g.deth.div_ceil(MIN_STAGE_CHUNKS))
            .max(1)
            .min(g.deth),
    )
}

/// Projections per chunk of the 2D FFT stage: the chunk fits one binding.
fn f_chunk(
    ctx: &GpuContext,
    g: &Geometry,
    options: &OperatorOptions,
) -> Result<usize, OperatorError> {
    let unit = ChunkUnit {
        whole: (g.deth * g.detw) as u64 * 8,
        windowed: 0,
    };
    chunk_size(
        ctx,
        "projection",
        unit,
        options
            .max_chunk_angles
            .unwrap_or(g.ntheta().div_ceil(MIN_STAGE_CHUNKS))
            .max(1)
            .min(g.ntheta()),
    )
}

/// The U2 tables as arrays of one plane per detector row: (x, y) coordinates of every point,
/// the row starts of the sorted lists, and the sorted (point, column) pairs.
fn u2_table_layouts(g: &Geometry) -> [(&'static str, PlaneLayout); 3] {
    let points = g.ntheta() * g.detw;
    let grid_y = U2Tables::axes(g).1.grid;
    let layout = |plane_words| PlaneLayout {
        planes: g.deth,
        plane_words,
    };
    [
        ("u2 coordinates", layout(2 * points)),
        ("u2 row starts", layout(grid_y + 1)),
        ("u2 sorted points", layout(2 * points)),
    ]
}

/// Bytes of the U2 tables of one detector row.
fn u2_table_row_bytes(g: &Geometry) -> u64 {
    u2_table_layouts(g)
        .iter()
        .map(|(_, l)| l.plane_words as u64 * 4)
        .sum()
}

impl LaminoOperator {
    /// Bytes of the whole U2 tables (about 16 per point of the data): what a streaming plan holds
    /// on the host (or in scratch) and uploads a chunk's slice of at every U2 application.
    pub fn u2_table_bytes(geometry: &Geometry) -> u64 {
        geometry.deth as u64 * u2_table_row_bytes(geometry)
    }

    /// The chunk sizes an operator for `geometry` with `options` uses on this device (see
    /// [`chunks`](Self::chunks)), computed before anything is allocated.
    pub fn chunk_sizes(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
    ) -> Result<(usize, usize, usize), OperatorError> {
        Ok((
            u1_chunk(ctx, geometry, options)?,
            u2_chunk(ctx, geometry, options)?,
            f_chunk(ctx, geometry, options)?,
        ))
    }

    /// Device memory the operator for `geometry` will hold, computed before anything is allocated:
    /// the spectrum, the chunk buffers, the gridding tables and the FFT plans' tables (FFTs of
    /// lengths beyond workgroup memory add scratch of about one chunk grid).
    /// With the U2 tables off the device (`u2_tables` not [`Residency::Device`]), they count as
    /// the slice buffers of one chunk's rows.
    pub fn estimate_device_bytes(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
        u2_tables: &Residency,
    ) -> Result<u64, OperatorError> {
        geometry.validate()?;
        let g = geometry;
        let (n0, n1, n2) = (g.n0 as u64, g.n1 as u64, g.n2 as u64);
        let (deth, detw, nt) = (g.deth as u64, g.detw as u64, g.ntheta() as u64);
        let (cy, ck, ca) = (
            u1_chunk(ctx, g, options)? as u64,
            u2_chunk(ctx, g, options)? as u64,
            f_chunk(ctx, g, options)? as u64,
        );
        let spectrum = 8 * deth * n1 * n2;
        let u1 = 8 * (n0 + 2 * n0 + deth) * cy * n2 + 8 * (2 * 9 * deth + 2 * n0) + 4 * n0;
        let points = nt * detw;
        let table_rows = match u2_tables {
            Residency::Device => deth,
            _ => ck,
        };
        let u2 = 8 * ck * (n1 * n2 + 4 * n1 * n2 + points)
            + 4 * (n1 + n2)
            + table_rows * u2_table_row_bytes(g);
        let f = 8 * ca * deth * detw;
        let twiddles = 8 * 2 * (2 * n0 + 2 * n1 + 2 * n2 + deth + detw);
        // The rotation axis's phase, its conjugate and ones (F stage).
        let phases = 3 * 8 * detw;
        let ffts: u64 = fft_workspace(ctx, g, (cy, ck, ca)).iter().sum();
        Ok(spectrum + u1 + u2 + f + twiddles + phases + ffts)
    }

    /// Validates the geometry and builds everything: the spectrum, chunk buffers, host tables,
    /// kernels, FFT plans and the bind groups of every chunk's computation.
    pub fn new(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
    ) -> Result<Self, OperatorError> {
        Self::with_residency(
            ctx,
            geometry,
            options,
            &Residency::Device,
            &Residency::Device,
        )
    }

    /// As [`new`](Self::new), with the spectrum and the U2 tables where the residencies say (a
    /// memory plan's streaming mode keeps the tables, and may keep the spectrum, on the host or
    /// in scratch files; a chunk then receives its rows' slice of the tables before it computes,
    /// so the kernels read the same values and give the same bits).
    pub fn with_residency(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
        spectrum: &Residency,
        u2_tables: &Residency,
    ) -> Result<Self, OperatorError> {
        geometry.validate()?;
        let g = geometry;
        for (name, value) in [("n0", g.n0), ("n1", g.n1), ("n2", g.n2)] {
            let m = GriddingAxis::new(value, g.eps).half_width;
            // The grid of 2n cells must be wider than the 2m+1 taps, and the kernels hold at most
            // 15 taps per axis.
            if 2 * value <= 2 * m + 1 || m > 7 {
                return Err(OperatorError::TooSmall {
                    name,
                    value,
                    eps: g.eps,
                    min: m + 1,
                });
            }
        }
        let spectrum = Field::new(
            ctx,
            "spectrum (deth, n1, n2)",
            Space::Spectrum.layout(g, 2),
            spectrum,
        )?;
        let mut op = Self {
            geometry: g.clone(),
            spectrum,
            stages: Default::default(),
            ffts: Vec::new(),
            chunk_y: u1_chunk(ctx, g, options)?,
            chunk_rows: u2_chunk(ctx, g, options)?,
            chunk_angles: f_chunk(ctx, g, options)?,
            fft_workspace: [0, 0],
            buffers: Vec::new(),
            own_scalars: Scalars::new(ctx, 1, 1)?,
            share: None,
        };
        // Every FFT plan binds the same workspace buffers when the pool is sized for the largest
        // before the first plan is built.
        let chunks = (
            op.chunk_y as u64,
            op.chunk_rows as u64,
            op.chunk_angles as u64,
        );
        op.fft_workspace = fft_workspace(ctx, g, chunks);
        crate::fft::reserve_workspace(ctx, op.fft_workspace)?;
        op.build_u1(ctx)?;
        op.build_u2(ctx, u2_tables)?;
        op.build_f(ctx)?;
        Ok(op)
    }

    fn build_u1(&mut self, ctx: &GpuContext) -> Result<(), OperatorError> {
        let g = self.geometry.clone();
        let t = U1Tables::new(&g);
        let (n0, n1, n2, deth) = (g.n0 as u64, g.n1 as u64, g.n2 as u64, g.deth as u64);
        let grid_len = t.axis.grid as u64;
        let cy = self.chunk_y;
        let columns = cy as u64 * n2;
        let col = complex_buffer(ctx, "u1 columns", (n0 * columns) as usize)?;
        let grid = complex_buffer(ctx, "u1 grid", (grid_len * columns) as usize)?;
        let rows = complex_buffer(ctx, "u1 rows", (deth * columns) as usize)?;
        let deconv = ctx.upload("u1 deconvolution", &t.deconvolution)?;
        let taps: Vec<[u32; 2]> = t
            .tap_cell
            .iter()
            .zip(&t.tap_weight)
            .map(|(&c, &w)| [c, w.to_bits()])
            .collect();
        let taps = ctx.upload("u1 taps", &taps)?;
        let cell_start = ctx.upload("u1 cell starts", &t.cell_start)?;
        let entries: Vec<[u32; 2]> = t
            .cell_row
            .iter()
            .zip(&t.cell_weight)
            .map(|(&k, &w)| [k, w.to_bits()])
            .collect();
        let entries = ctx.upload("u1 cell entries", &entries)?;
        let params = ctx.uniform(
            "u1 params",
            &U1Params {
                n: n0 as u32,
                grid_len: grid_len as u32,
                deth: deth as u32,
                columns: columns as u32,
                taps: (2 * t.axis.half_width + 1) as u32,
                pad: [0; 3],
            },
        )?;
        let spec = |entry| gridding_kernel(&shaders::USFFT1D, entry);
        let slices: [BufferSlice; 8] = [
            (&col).into(),
            (&grid).into(),
            (&rows).into(),
            (&deconv).into(),
            (&taps).into(),
            (&cell_start).into(),
            (&entries).into(),
            (&params).into(),
        ];
        let bind = |entry| -> Result<Bound, OperatorError> {
            Ok(ctx.kernel(&spec(entry))?.bind(ctx, &slices)?)
        };
        let (divker, gather) = (bind("u1_divker")?, bind("u1_gather")?);
        let (spread, divker_adj) = (bind("u1_spread")?, bind("u1_divker_adjoint")?);
        // FFT along the slow axis p of the (2 n0, columns) grid: the U1 plan
        // (docs/operator-method.md, "FFT plans").
        let fft_layout = Layout::axis_of(&[grid_len as usize, columns as usize], 0);
        // The operator's plans run at every application: kernels specialised to their sizes,
        // however small the chunks.
        let fft = |direction| {
            FftPlan1d::specialized(
                ctx,
                FftDescriptor {
                    len: grid_len as usize,
                    layout: fft_layout.clone(),
                    direction,
                    normalization: Normalization::None,
                },
                &grid,
            )
        };
        let (fft_fwd, fft_inv) = (self.ffts.len(), self.ffts.len() + 1);
        self.ffts.push(fft(Direction::Forward)?);
        self.ffts.push(fft(Direction::Inverse)?);

        let plane = n1 * n2;
        for y0 in (0..n1).step_by(cy) {
            let c = (n1 - y0).min(cy as u64);
            // Whole arrays: volume [z][y][x], spectrum [k][y][x]; chunk-local: [.][yc][x].
            let whole = View {
                offset: y0 * n2,
                strides: [plane, n2, 1],
            };
            let local = View {
                offset: 0,
                strides: [columns, n2, 1],
            };
            // Threads of the local kernels cover the full chunk width: rows beyond a short last
            // chunk hold finite stale values that are never copied out.
            let block = |buffer: &GpuBuffer, len: u64| Block {
                buffer: buffer.clone(),
                view: local,
                extents: [len, c, n2],
                channel_axis: 1,
            };
            self.stages.of_mut(Kind::U1Fwd).push(Chunk {
                tables: Vec::new(),
                input: block(&col, n0),
                whole_in: whole,
                compute: vec![
                    Step::Dispatch(divker.clone(), groups(grid_len * columns)),
                    Step::Fft(fft_fwd),
                    Step::Dispatch(gather.clone(), groups(deth * columns)),
                ],
                output: block(&rows, deth),
                whole_out: whole,
            });
            self.stages.of_mut(Kind::U1Adj).push(Chunk {
                tables: Vec::new(),
                input: block(&rows, deth),
                whole_in: whole,
                compute: vec![
                    Step::Dispatch(spread.clone(), groups(grid_len * columns)),
                    Step::Fft(fft_inv),
                    Step::Dispatch(divker_adj.clone(), groups(n0 * columns)),
                ],
                output: block(&col, n0),
                whole_out: whole,
            });
        }
        self.buffers
            .extend([col, grid, rows, deconv, taps, cell_start, entries, params]);
        Ok(())
    }

    fn build_u2(&mut self, ctx: &GpuContext, tables: &Residency) -> Result<(), OperatorError> {
        let g = self.geometry.clone();
        let (ax, ay) = U2Tables::axes(&g);
        let (n1, n2, deth, detw) = (g.n1 as u64, g.n2 as u64, g.deth as u64, g.detw as u64);
        let (gy, gx) = (ay.grid as u64, ax.grid as u64);
        let points = g.ntheta() as u64 * detw;
        let ck = self.chunk_rows as u64;
        let plane_buf = complex_buffer(ctx, "u2 planes", (ck * n1 * n2) as usize)?;
        let grid = complex_buffer(ctx, "u2 grids", (ck * gy * gx) as usize)?;
        let out = complex_buffer(ctx, "u2 points", (ck * points) as usize)?;
        let mut deconv = ax.deconvolution();
        deconv.extend(ay.deconvolution());
        let deconv = ctx.upload("u2 deconvolution", &deconv)?;
        // The tables, one plane per detector row ([k][...]), so that a chunk's rows are one
        // contiguous block: on the device whole (each chunk binds its window), or on the host,
        // a chunk's block uploaded into slice buffers of one chunk's rows before it computes.
        let [coords, row_start, sorted] = u2_table_layouts(&g).map(|(label, layout)| {
            Field::new(ctx, label, layout, tables).map_err(OperatorError::from)
        });
        let (coords, row_start, sorted) = (coords?, row_start?, sorted?);
        for k in 0..g.deth {
            let row = U2Tables::row(&g, &ax, &ay, k);
            let at = |field: &Field| k * field.layout().plane_words;
            coords.write_words(ctx, at(&coords), bytemuck::cast_slice(&row.coords))?;
            row_start.write_words(ctx, at(&row_start), bytemuck::cast_slice(&row.row_start))?;
            sorted.write_words(ctx, at(&sorted), bytemuck::cast_slice(&row.sorted))?;
        }
        let resident = *tables == Residency::Device;
        let chunk_tables = if resident {
            None
        } else {
            let slice = |field: &Field, label: &str| {
                ctx.storage_buffer(label, ck * field.layout().plane_words as u64 * 4)
            };
            Some((
                slice(&coords, "u2 coordinates (chunk)")?,
                slice(&row_start, "u2 row starts (chunk)")?,
                slice(&sorted, "u2 sorted points (chunk)")?,
            ))
        };
        let spec = |entry| gridding_kernel(&shaders::USFFT2D, entry);
        let kernels = ["u2_divker", "u2_gather", "u2_spread", "u2_divker_adjoint"]
            .map(|entry| ctx.kernel(&spec(entry)));
        let [divker, gather, spread, divker_adj] = kernels;
        let (divker, gather, spread, divker_adj) = (divker?, gather?, spread?, divker_adj?);
        // 2D FFT over the last two axes of the (rows, 2 n1, 2 n2) grids: the U2 plan
        // (docs/operator-method.md, "FFT plans").
        let shape = [ck as usize, gy as usize, gx as usize];
        let first_fft = self.ffts.len();
        for direction in [Direction::Forward, Direction::Inverse] {
            let plan = FftPlan::specialized(ctx, &shape, 2, direction, Normalization::None, &grid)?;
            self.ffts.extend(plan.into_axis_plans());
        }
        let (fwd_ffts, inv_ffts) = ([first_fft, first_fft + 1], [first_fft + 2, first_fft + 3]);
        let pi2 = std::f64::consts::PI * std::f64::consts::PI;

        let mut keep = Vec::new();
        for k0 in (0..deth).step_by(ck as usize) {
            let c = (deth - k0).min(ck);
            let (
                coords_slice,
                coords_offset,
                starts_slice,
                row_start_offset,
                sorted_slice,
                sorted_offset,
            );
            let mut fill = Vec::new();
            match &chunk_tables {
                None => {
                    (coords_slice, coords_offset) =
                        window(ctx, coords.buffer(), 8, k0 * points, c * points);
                    (starts_slice, row_start_offset) =
                        window(ctx, row_start.buffer(), 4, k0 * (gy + 1), c * (gy + 1));
                    (sorted_slice, sorted_offset) =
                        window(ctx, sorted.buffer(), 8, k0 * points, c * points);
                }
                Some((c_buf, r_buf, s_buf)) => {
                    (coords_slice, coords_offset) = (c_buf.into(), 0);
                    (starts_slice, row_start_offset) = (r_buf.into(), 0);
                    (sorted_slice, sorted_offset) = (s_buf.into(), 0);
                    for (field, buffer) in [(&coords, c_buf), (&row_start, r_buf), (&sorted, s_buf)]
                    {
                        let words = field.layout().plane_words;
                        let view = BlockView::planes(k0 as usize, (k0 + c) as usize, words);
                        fill.push((field.clone(), buffer.clone(), view));
                    }
                }
            }
            let params = ctx.uniform(
                "u2 params",
                &U2Params {
                    n1: n1 as u32,
                    n2: n2 as u32,
                    gy: gy as u32,
                    gx: gx as u32,
                    rows: c as u32,
                    points: points as u32,
                    my: ay.half_width as i32,
                    mx: ax.half_width as i32,
                    coords_offset,
                    row_start_offset,
                    sorted_offset,
                    pad: 0,
                    cx: (std::f64::consts::PI / ax.mu).sqrt() as f32,
                    // 1/sqrt(ntheta) (the total number of angles) is part of the operator's scale.
                    cy: ((std::f64::consts::PI / ay.mu).sqrt() / (g.ntheta() as f64).sqrt()) as f32,
                    ex: (pi2 / ax.mu) as f32,
                    ey: (pi2 / ay.mu) as f32,
                },
            )?;
            let slices = [
                (&plane_buf).into(),
                (&grid).into(),
                (&out).into(),
                (&deconv).into(),
                coords_slice,
                starts_slice,
                sorted_slice,
                (&params).into(),
            ];
            let bound = [&divker, &gather, &spread, &divker_adj].map(|k| k.bind(ctx, &slices));
            let [b_divker, b_gather, b_spread, b_divker_adj] = bound;
            // Spectrum [k][y][x] <-> planes [r][y][x]; data [t][k][w] <-> points [r][t][w],
            // staged with the data's slowest axis (t) first.
            let spectrum_view = View {
                offset: k0 * n1 * n2,
                strides: [n1 * n2, n2, 1],
            };
            let data_view = View {
                offset: k0 * detw,
                strides: [deth * detw, detw, 1],
            };
            let plane_block = Block {
                buffer: plane_buf.clone(),
                view: View {
                    offset: 0,
                    strides: [n1 * n2, n2, 1],
                },
                extents: [c, n1, n2],
                channel_axis: 0,
            };
            let points_block = Block {
                buffer: out.clone(),
                view: View {
                    offset: 0,
                    strides: [detw, points, 1],
                },
                extents: [g.ntheta() as u64, c, detw],
                channel_axis: 1,
            };
            let mut compute_fwd = vec![Step::Dispatch(b_divker?, groups(c * gy * gx))];
            compute_fwd.extend(fwd_ffts.map(Step::Fft));
            compute_fwd.push(Step::Dispatch(b_gather?, groups(c * points)));
            // The forward pass reads the coordinates only; the adjoint all three tables.
            let fills = |n: usize| -> Vec<Step> {
                fill.iter()
                    .take(n)
                    .map(|(field, buffer, view)| Step::Fill {
                        field: field.clone(),
                        buffer: buffer.clone(),
                        view: *view,
                    })
                    .collect()
            };
            self.stages.of_mut(Kind::U2Fwd).push(Chunk {
                tables: fills(1),
                input: plane_block.clone(),
                whole_in: spectrum_view,
                compute: compute_fwd,
                output: points_block.clone(),
                whole_out: data_view,
            });
            let mut compute_adj = vec![Step::Dispatch(b_spread?, groups(c * gy * gx))];
            compute_adj.extend(inv_ffts.map(Step::Fft));
            compute_adj.push(Step::Dispatch(b_divker_adj?, groups(c * n1 * n2)));
            self.stages.of_mut(Kind::U2Adj).push(Chunk {
                tables: fills(3),
                input: points_block,
                whole_in: data_view,
                compute: compute_adj,
                output: plane_block,
                whole_out: spectrum_view,
            });
            keep.push(params);
        }
        self.buffers.extend(keep);
        self.buffers.extend([plane_buf, grid, out, deconv]);
        match chunk_tables {
            None => self
                .buffers
                .extend([coords, row_start, sorted].map(|field| field.buffer().clone())),
            Some((c, r, s)) => self.buffers.extend([c, r, s]),
        }
        Ok(())
    }

    /// The centred 2D FFT of each projection, chunk by chunk along the angles.
    fn build_f(&mut self, ctx: &GpuContext) -> Result<(), OperatorError> {
        let g = self.geometry.clone();
        let (deth, detw) = (g.deth as u64, g.detw as u64);
        let nt = g.ntheta() as u64;
        let ca = self.chunk_angles as u64;
        let local = complex_buffer(ctx, "projection chunk", (ca * deth * detw) as usize)?;
        // The centred DFT of even length n equals (-1)^(n/2) (-1)^v DFT((-1)^a x_a): the factor
        // (-1)^((deth+detw)/2) is kept (the reference drops it), so L is the projector itself.
        let sign = if (g.deth / 2 + g.detw / 2).is_multiple_of(2) {
            1.0
        } else {
            -1.0
        };
        let scale = (sign / (g.deth as f64 * g.detw as f64)) as f32;
        // The rotation axis: F_adj moves the centred projection to the axis with the phase R
        // before its inverse FFT (L = R-shifted projector); F_fwd undoes it with conj(R) after its
        // forward FFT. R is diagonal and unitary, so the pair stays exactly adjoint, and the
        // solver (which applies F once to the data) needs nothing else.
        let phase = g.axis_phase();
        let conjugate: Vec<[f32; 2]> = phase.iter().map(|&[c, s]| [c, -s]).collect();
        let ones = vec![[1.0f32, 0.0]; g.detw];
        let [phase, conjugate, ones] = [
            ("axis phase", &phase),
            ("conjugate axis phase", &conjugate),
            ("unit phase", &ones),
        ]
        .map(|(label, values)| ctx.upload(label, values));
        let (phase, conjugate, ones) = (phase?, conjugate?, ones?);
        let mut keep = Vec::new();
        let shape = [ca, deth, detw];
        let mut programs = Vec::new();
        for (direction, pre_phase, post_phase) in [
            (Direction::Inverse, &phase, &ones),
            (Direction::Forward, &ones, &conjugate),
        ] {
            let chunk = [ca * deth * detw, deth, detw];
            let pre = modulate(ctx, &local, chunk, 1.0, pre_phase, &mut keep)?;
            let post = modulate(ctx, &local, chunk, scale, post_phase, &mut keep)?;
            let first = self.ffts.len();
            let plan = FftPlan::specialized(
                ctx,
                &shape.map(|s| s as usize),
                2,
                direction,
                Normalization::None,
                &local,
            )?;
            self.ffts.extend(plan.into_axis_plans());
            let mut compute = vec![Step::Dispatch(pre.0.clone(), pre.1)];
            compute.extend((first..self.ffts.len()).map(Step::Fft));
            compute.push(Step::Dispatch(post.0.clone(), post.1));
            programs.push(compute);
        }
        let view = |t0: u64| View {
            offset: t0 * deth * detw,
            strides: [deth * detw, detw, 1],
        };
        for t0 in (0..nt).step_by(ca as usize) {
            let c = (nt - t0).min(ca);
            let block = Block {
                buffer: local.clone(),
                view: view(0),
                extents: [c, deth, detw],
                channel_axis: 0,
            };
            for (kind, compute) in [(Kind::FAdj, &programs[0]), (Kind::FFwd, &programs[1])] {
                let compute = compute
                    .iter()
                    .map(|s| match s {
                        Step::Dispatch(b, n) => Step::Dispatch(b.clone(), *n),
                        Step::Fft(i) => Step::Fft(*i),
                        _ => unreachable!("computations hold no transfers"),
                    })
                    .collect();
                self.stages.of_mut(kind).push(Chunk {
                    tables: Vec::new(),
                    input: block.clone(),
                    whole_in: view(t0),
                    compute,
                    output: block.clone(),
                    whole_out: view(t0),
                });
            }
        }
        self.buffers.extend(keep);
        self.buffers.push(local);
        self.buffers.extend([phase, conjugate, ones]);
        Ok(())
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The operator as member `share` of a multi-device team: its applications compute the
    /// member's share of each stage's chunks, with the team's `spectrum` (a host array) between
    /// the stages, and meet the other members before each stage and after the last.
    pub(crate) fn into_member(mut self, spectrum: Field, share: Arc<Share>) -> Self {
        assert_eq!(
            spectrum.layout(),
            self.spectrum.layout(),
            "a spectrum of the geometry"
        );
        self.spectrum = spectrum;
        self.share = Some(share);
        self
    }

    /// The spectrum after U1, `(deth, n1, n2)` complex64.
    pub fn spectrum(&self) -> &Field {
        &self.spectrum
    }

    /// Chunk sizes in use: (y rows per U1 chunk, detector rows per U2 chunk, projections per F
    /// chunk).
    pub fn chunks(&self) -> (usize, usize, usize) {
        (self.chunk_y, self.chunk_rows, self.chunk_angles)
    }

    /// Bytes of device memory the operator holds (spectrum when on the device, chunk buffers,
    /// tables, FFT plans and the FFT workspace they share).
    pub fn device_bytes(&self) -> u64 {
        let spectrum = match self.spectrum.residency() {
            Residency::Device => self.spectrum.layout().bytes(),
            _ => 0,
        };
        spectrum
            + self.buffers.iter().map(GpuBuffer::bytes).sum::<u64>()
            + self.ffts.iter().map(FftPlan1d::device_bytes).sum::<u64>()
            + self.fft_workspace.iter().sum::<u64>()
    }

    /// Bytes of FFT workspace: what the operator's plans bind of the context's shared pool, and
    /// what they would hold with workspace of their own (the sum of their needs). The difference is
    /// the memory the shared pool saves.
    pub fn fft_workspace_bytes(&self) -> (u64, u64) {
        let own = self
            .ffts
            .iter()
            .flat_map(|p| p.workspace_slot_bytes())
            .sum();
        (self.fft_workspace.iter().sum(), own)
    }

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
                Step::Fft(i) => self.ffts[*i].record(rec),
                Step::Upload { field, role, view } => {
                    let staging = staging.expect("host arrays have staging");
                    rec.upload_with(ctx, staging.buffer(*role), 0, || field.gather(ctx, view))?;
                }
                Step::Fill {
                    field,
                    buffer,
                    view,
                } => rec.upload_with(ctx, buffer, 0, || field.gather(ctx, view))?,
                Step::Download { field, view } => {
                    let staging = staging.expect("host arrays have staging");
                    let bytes = view.len_words() as u64 * 4;
                    let scatter = field.scatter(*view);
                    let done: Completion = match tap.take() {
                        Some(tap) => Box::new(move |bytes: &[u8]| {
                            tap(bytes);
                            scatter(bytes);
                        }),
                        None => scatter,
                    };
                    rec.download(ctx, staging.buffer(Role::Out), 0, bytes, done)?;
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
        for position in 0..application.stages.len() {
            // A stage's chunks cross the previous stage's (or the vector kernels') shares.
            if let Some(share) = &self.share {
                share.sync(ctx, rec, || self.stage_reads(application, position))?;
            }
            self.record_stage(ctx, rec, application, position)?;
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

    /// This member's chunks of a stage (all of them alone).
    fn own_chunks(&self, kind: Kind) -> std::ops::Range<usize> {
        let count = self.stages.of(kind).len();
        self.share.as_ref().map_or(0..count, |s| s.range(count))
    }

    /// Number of chunks of `stage`.
    pub fn chunk_count(&self, stage: Stage) -> usize {
        self.stages.of(stage.kind()).len()
    }

    /// The chunk-local (input, output) blocks of chunk `chunk` of `stage`.
    pub(crate) fn chunk_io(&self, stage: Stage, chunk: usize) -> (&Block, &Block) {
        let c = &self.stages.of(stage.kind())[chunk];
        (&c.input, &c.output)
    }

    /// Records stage number `position` of `application` for every chunk (a team member's share
    /// of them).
    pub(crate) fn record_stage(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        application: &Application,
        position: usize,
    ) -> Result<(), GpuError> {
        let stage = &application.stages[position];
        let staging = application.staging.as_deref();
        let chunks = self.stages.of(stage.kind);
        let own = self.own_chunks(stage.kind);
        for (chunk, (steps_in, steps_out)) in chunks[own.clone()].iter().zip(&stage.chunks[own]) {
            self.record_steps(ctx, rec, &chunk.tables, staging, None)?;
            self.record_steps(ctx, rec, steps_in, staging, None)?;
            self.record_steps(ctx, rec, &chunk.compute, staging, None)?;
            self.record_steps(ctx, rec, steps_out, staging, None)?;
        }
        Ok(())
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
        let chunk = &self.stages.of(stage.kind())[chunk];
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

    /// Chunks far below the size at which a one-off FFT gets specialised kernels (2^16 elements)
    /// still get them: the operator runs its plans at every application.
    #[test]
    fn every_fft_pass_of_a_chunked_operator_is_specialised() {
        let ctx = crate::gpu::test_context();
        let g = Geometry::cube(16, 8, 1.0);
        let options = OperatorOptions {
            max_chunk_y: Some(2),
            max_chunk_rows: Some(2),
            max_chunk_angles: Some(2),
        };
        let op = LaminoOperator::new(&ctx, &g, &options).unwrap();
        let passes: Vec<&crate::fft::PassInfo> = op.ffts.iter().flat_map(|p| p.passes()).collect();
        assert!(!passes.is_empty());
        assert!(
            passes.iter().all(|p| p.specialized),
            "{:?}",
            passes
                .iter()
                .map(|p| (p.sub, p.specialized))
                .collect::<Vec<_>>()
        );
    }
}
