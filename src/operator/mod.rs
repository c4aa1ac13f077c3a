//! The laminography operator on the GPU: `L = F_adj . U2 . U1` and its exact adjoint, plus the
//! Fourier-domain pair `A = U2 . U1`, `A*` that the solver uses (spec sections 3, 4, 12).
//!
//! - U1: 1D USFFT along z for every (y, x) column, onto the frequencies `z_k` of the detector rows.
//!   Volume `(n0, n1, n2)` -> spectrum `(deth, n1, n2)`.
//! - U2: 2D USFFT of every spectrum plane `k` onto the (x, y) frequencies of each angle and column.
//!   Spectrum -> Fourier-domain data `(ntheta, deth, detw)`.
//! - F_adj: the centred inverse 2D FFT of each projection, scaled by `1/(deth detw)`, with the
//!   reference's sign `(-1)^((deth+detw)/2)` corrected so that L is the true projector for every
//!   even size: `L u (theta) ~ P_theta u / sqrt(n2 ntheta)`.
//!
//! Every adjoint is a gather (no float atomics), so the same input gives the same bits. Work is
//! chunked along y (U1) and detector rows (U2) with chunk sizes derived from the device's binding
//! limit; chunk-local buffers are staged from and to the whole arrays by block copies, so arrays
//! larger than one binding work, and results do not depend on the chunk sizes.

mod geometry;
mod staging;
pub(crate) mod tables;

pub use geometry::{Geometry, GeometryError, GriddingAxis, DEFAULT_EPS, MIN_EPS};

use bytemuck::{Pod, Zeroable};
use serde::Serialize;
use thiserror::Error;

use crate::error::GpuError;
use crate::fft::{
    Direction, FftDescriptor, FftError, FftPlan, FftPlan1d, Layout, Normalization, Strategy,
};
use crate::gpu::{BindingKind, Bound, BufferSlice, GpuBuffer, GpuContext, KernelSpec, Recorder};
use crate::shaders;
pub(crate) use staging::View;
use staging::{block_copy, groups, modulate, window, Whole, WORKGROUP};
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
        what: &'static str,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
}

/// Chunking limits; by default chunks are as large as the device's binding limit allows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperatorOptions {
    /// At most this many y rows per U1 chunk.
    pub max_chunk_y: Option<usize>,
    /// At most this many detector rows per U2 chunk.
    pub max_chunk_rows: Option<usize>,
}

/// What to apply (each reads and writes the operator's own buffers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    /// `L`: volume -> data.
    Forward,
    /// `L*`: data -> volume (the data buffer is used as workspace and overwritten).
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
    /// `F_adj` (the last stage of L), in place on the data.
    Fft2dAdjoint,
    /// `F_fwd = F_adj*` (the first stage of L*), in place on the data.
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
}

enum Step {
    Dispatch(Bound, u32),
    Fft(usize),
}

fn dispatch_steps(list: Vec<(Bound, u32)>) -> Vec<Step> {
    list.into_iter()
        .map(|(b, g)| Step::Dispatch(b, g))
        .collect()
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

    fn program(self) -> usize {
        match self {
            Self::Usfft1d => U1_FWD,
            Self::Usfft1dAdjoint => U1_ADJ,
            Self::Usfft2d => U2_FWD,
            Self::Usfft2dAdjoint => U2_ADJ,
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

/// One chunk of a stage: stage in (whole array -> chunk-local input), compute (input -> output),
/// stage out (chunk-local output -> whole array).
#[derive(Default)]
struct ChunkProgram {
    stage_in: Vec<Step>,
    compute: Vec<Step>,
    stage_out: Vec<Step>,
    io: Option<(Block, Block)>,
}

/// A stage's chunks, built once.
#[derive(Default)]
struct Program {
    chunks: Vec<ChunkProgram>,
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

/// The laminography operator for one geometry, with its buffers, tables and kernels built once.
pub struct LaminoOperator {
    geometry: Geometry,
    volume: GpuBuffer,
    spectrum: GpuBuffer,
    data: GpuBuffer,
    programs: [Program; 6],
    ffts: Vec<FftPlan1d>,
    chunk_y: usize,
    chunk_rows: usize,
    buffers: Vec<GpuBuffer>,
}

const U1_FWD: usize = 0;
const U1_ADJ: usize = 1;
const U2_FWD: usize = 2;
const U2_ADJ: usize = 3;
const F_ADJ: usize = 4;
const F_FWD: usize = 5;

impl std::fmt::Debug for LaminoOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaminoOperator")
            .field("geometry", &self.geometry)
            .field("chunk_y", &self.chunk_y)
            .field("chunk_rows", &self.chunk_rows)
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

/// Largest chunk (at most `cap`) whose per-unit buffers of `unit_bytes` fit one binding with room
/// for window alignment.
fn chunk_size(
    ctx: &GpuContext,
    what: &str,
    unit_bytes: u64,
    cap: usize,
) -> Result<usize, OperatorError> {
    let room = ctx
        .max_binding_bytes()
        .saturating_sub(ctx.binding_alignment());
    let fit = (room / unit_bytes) as usize;
    if fit == 0 {
        return Err(OperatorError::TooLarge {
            what: format!("one {what} of the operator's chunk buffers"),
            bytes: unit_bytes,
            limit: room,
        });
    }
    Ok(fit.min(cap))
}

/// The binding layout shared by both gridding stages' kernels: three chunk-local arrays (read and
/// written), four read-only tables, the parameters.
fn gridding_kernel(shader: &'static shaders::Shader, entry: &'static str) -> KernelSpec {
    KernelSpec {
        shader,
        entry,
        bindings: &[
            BindingKind::StorageReadWrite,
            BindingKind::StorageReadWrite,
            BindingKind::StorageReadWrite,
            BindingKind::StorageRead,
            BindingKind::StorageRead,
            BindingKind::StorageRead,
            BindingKind::StorageRead,
            BindingKind::Uniform,
        ],
        overrides: vec![("WORKGROUP", WORKGROUP as f64)],
    }
}

/// y rows per U1 chunk: columns, grid and rows of one chunk each fit one binding.
fn u1_chunk(
    ctx: &GpuContext,
    g: &Geometry,
    options: &OperatorOptions,
) -> Result<usize, OperatorError> {
    let unit = (2 * g.n0).max(g.deth) as u64 * g.n2 as u64 * 8;
    chunk_size(
        ctx,
        "y row",
        unit,
        options.max_chunk_y.unwrap_or(g.n1).max(1).min(g.n1),
    )
}

/// Detector rows per U2 chunk: the 2n1 x 2n2 grids and the points of one chunk each fit one binding.
fn u2_chunk(
    ctx: &GpuContext,
    g: &Geometry,
    options: &OperatorOptions,
) -> Result<usize, OperatorError> {
    let unit = (4 * g.n1 * g.n2).max(g.ntheta() * g.detw) as u64 * 8;
    chunk_size(
        ctx,
        "detector row",
        unit,
        options.max_chunk_rows.unwrap_or(g.deth).max(1).min(g.deth),
    )
}

impl LaminoOperator {
    /// Device memory the operator for `geometry` will hold, computed before anything is allocated:
    /// the volume, spectrum and data arrays, the chunk buffers, the gridding tables and the FFT
    /// plans' tables (FFTs of lengths beyond workgroup memory add scratch of about one chunk grid).
    pub fn estimate_device_bytes(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
    ) -> Result<u64, OperatorError> {
        geometry.validate()?;
        let g = geometry;
        let (n0, n1, n2) = (g.n0 as u64, g.n1 as u64, g.n2 as u64);
        let (deth, detw, nt) = (g.deth as u64, g.detw as u64, g.ntheta() as u64);
        let (cy, ck) = (
            u1_chunk(ctx, g, options)? as u64,
            u2_chunk(ctx, g, options)? as u64,
        );
        let arrays = 8 * (n0 * n1 * n2 + deth * n1 * n2 + nt * deth * detw);
        let u1 = 8 * (n0 + 2 * n0 + deth) * cy * n2 + 8 * (2 * 9 * deth + 2 * n0) + 4 * n0;
        let points = nt * detw;
        let u2 = 8 * ck * (n1 * n2 + 4 * n1 * n2 + points)
            + 16 * deth * points
            + 4 * deth * (2 * n1 + 1);
        let twiddles = 8 * 2 * (2 * n0 + 2 * n1 + 2 * n2 + deth + detw);
        // Forward and inverse plans of every FFT: along 2 n0 (U1), the 2 n1 x 2 n2 grids (U2)
        // and each projection (F).
        let scratch = |n: u64, batch: u64| {
            2 * crate::fft::scratch_bytes(ctx, n as usize, batch, Strategy::Auto)
        };
        let ffts = scratch(2 * n0, cy * n2)
            + scratch(2 * n2, ck * 2 * n1)
            + scratch(2 * n1, ck * 2 * n2)
            + scratch(detw, nt * deth)
            + scratch(deth, nt * detw);
        Ok(arrays + u1 + u2 + twiddles + ffts)
    }

    /// Validates the geometry and builds everything: buffers, host tables, kernels, FFT plans and
    /// bind groups for every chunk.
    pub fn new(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
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
        let volume = complex_buffer(ctx, "volume", g.volume_len())?;
        let spectrum = complex_buffer(ctx, "spectrum (deth, n1, n2)", g.spectrum_len())?;
        let data = complex_buffer(ctx, "data (ntheta, deth, detw)", g.data_len())?;
        let mut op = Self {
            geometry: g.clone(),
            volume,
            spectrum,
            data,
            programs: Default::default(),
            ffts: Vec::new(),
            chunk_y: 0,
            chunk_rows: 0,
            buffers: Vec::new(),
        };
        op.build_u1(ctx, options)?;
        op.build_u2(ctx, options)?;
        op.build_f(ctx)?;
        Ok(op)
    }

    fn build_u1(
        &mut self,
        ctx: &GpuContext,
        options: &OperatorOptions,
    ) -> Result<(), OperatorError> {
        let g = self.geometry.clone();
        let t = U1Tables::new(&g);
        let (n0, n1, n2, deth) = (g.n0 as u64, g.n1 as u64, g.n2 as u64, g.deth as u64);
        let grid_len = t.axis.grid as u64;
        let cy = u1_chunk(ctx, &g, options)?;
        self.chunk_y = cy;
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
        // FFT along the slow axis p of the (2 n0, columns) grid: the U1 plan of section 12.
        let fft_layout = Layout::axis_of(&[grid_len as usize, columns as usize], 0);
        let fft = |direction| {
            FftPlan1d::new(
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

        let mut keep = Vec::new();
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
            let copy = |from_whole: bool,
                        big: &GpuBuffer,
                        small: &GpuBuffer,
                        len: u64,
                        keep: &mut Vec<GpuBuffer>| {
                let direction = if from_whole {
                    Whole::Source
                } else {
                    Whole::Destination
                };
                block_copy(ctx, big, whole, small, local, [len, c, n2], direction, keep)
            };
            // Threads of the local kernels cover the full chunk width: rows beyond a short last
            // chunk hold finite stale values that are never copied out.
            let block = |buffer: &GpuBuffer, len: u64| Block {
                buffer: buffer.clone(),
                view: local,
                extents: [len, c, n2],
                channel_axis: 1,
            };
            self.programs[U1_FWD].chunks.push(ChunkProgram {
                stage_in: dispatch_steps(copy(true, &self.volume, &col, n0, &mut keep)?),
                compute: vec![
                    Step::Dispatch(divker.clone(), groups(grid_len * columns)),
                    Step::Fft(fft_fwd),
                    Step::Dispatch(gather.clone(), groups(deth * columns)),
                ],
                stage_out: dispatch_steps(copy(false, &self.spectrum, &rows, deth, &mut keep)?),
                io: Some((block(&col, n0), block(&rows, deth))),
            });
            self.programs[U1_ADJ].chunks.push(ChunkProgram {
                stage_in: dispatch_steps(copy(true, &self.spectrum, &rows, deth, &mut keep)?),
                compute: vec![
                    Step::Dispatch(spread.clone(), groups(grid_len * columns)),
                    Step::Fft(fft_inv),
                    Step::Dispatch(divker_adj.clone(), groups(n0 * columns)),
                ],
                stage_out: dispatch_steps(copy(false, &self.volume, &col, n0, &mut keep)?),
                io: Some((block(&rows, deth), block(&col, n0))),
            });
        }
        self.buffers.extend(keep);
        self.buffers
            .extend([col, grid, rows, deconv, taps, cell_start, entries, params]);
        Ok(())
    }

    fn build_u2(
        &mut self,
        ctx: &GpuContext,
        options: &OperatorOptions,
    ) -> Result<(), OperatorError> {
        let g = self.geometry.clone();
        let t = U2Tables::new(&g);
        let (n1, n2, deth, detw) = (g.n1 as u64, g.n2 as u64, g.deth as u64, g.detw as u64);
        let (gy, gx) = (t.axis_y.grid as u64, t.axis_x.grid as u64);
        let points = g.ntheta() as u64 * detw;
        let ck = u2_chunk(ctx, &g, options)? as u64;
        self.chunk_rows = ck as usize;
        let plane_buf = complex_buffer(ctx, "u2 planes", (ck * n1 * n2) as usize)?;
        let grid = complex_buffer(ctx, "u2 grids", (ck * gy * gx) as usize)?;
        let out = complex_buffer(ctx, "u2 points", (ck * points) as usize)?;
        let mut deconv = t.deconvolution_x.clone();
        deconv.extend(&t.deconvolution_y);
        let deconv = ctx.upload("u2 deconvolution", &deconv)?;
        let coords = ctx.upload("u2 coordinates", &t.coords)?;
        let row_start = ctx.upload("u2 row starts", &t.row_start)?;
        let sorted: Vec<[u32; 2]> = t
            .sorted_point
            .iter()
            .zip(&t.sorted_column)
            .map(|(&p, &c)| [p, c])
            .collect();
        let sorted = ctx.upload("u2 sorted points", &sorted)?;
        let spec = |entry| gridding_kernel(&shaders::USFFT2D, entry);
        let kernels = ["u2_divker", "u2_gather", "u2_spread", "u2_divker_adjoint"]
            .map(|entry| ctx.kernel(&spec(entry)));
        let [divker, gather, spread, divker_adj] = kernels;
        let (divker, gather, spread, divker_adj) = (divker?, gather?, spread?, divker_adj?);
        // 2D FFT over the last two axes of the (rows, 2 n1, 2 n2) grids: the U2 plan of section 12.
        let shape = [ck as usize, gy as usize, gx as usize];
        let first_fft = self.ffts.len();
        for direction in [Direction::Forward, Direction::Inverse] {
            let plan = FftPlan::new(ctx, &shape, 2, direction, Normalization::None, &grid)?;
            self.ffts.extend(plan.into_axis_plans());
        }
        let (fwd_ffts, inv_ffts) = ([first_fft, first_fft + 1], [first_fft + 2, first_fft + 3]);
        let (ax, ay) = (t.axis_x, t.axis_y);
        let pi2 = std::f64::consts::PI * std::f64::consts::PI;

        let mut keep = Vec::new();
        for k0 in (0..deth).step_by(ck as usize) {
            let c = (deth - k0).min(ck);
            let (coords_slice, coords_offset) = window(ctx, &coords, 8, k0 * points, c * points);
            let (starts_slice, row_start_offset) =
                window(ctx, &row_start, 4, k0 * (gy + 1), c * (gy + 1));
            let (sorted_slice, sorted_offset) = window(ctx, &sorted, 8, k0 * points, c * points);
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
            // Spectrum [k][y][x] <-> planes [r][y][x]; data [t][k][w] <-> points [r][t][w], staged
            // with the data's slowest axis (t) first.
            let spectrum_view = View {
                offset: k0 * n1 * n2,
                strides: [n1 * n2, n2, 1],
            };
            let plane_view = View {
                offset: 0,
                strides: [n1 * n2, n2, 1],
            };
            let data_view = View {
                offset: k0 * detw,
                strides: [deth * detw, detw, 1],
            };
            let points_view = View {
                offset: 0,
                strides: [detw, points, 1],
            };
            let planes = [c, n1, n2];
            let angles = [g.ntheta() as u64, c, detw];
            let plane_block = Block {
                buffer: plane_buf.clone(),
                view: plane_view,
                extents: planes,
                channel_axis: 0,
            };
            let points_block = Block {
                buffer: out.clone(),
                view: points_view,
                extents: angles,
                channel_axis: 1,
            };
            let mut copy = |whole: &GpuBuffer,
                            whole_view: View,
                            local: &GpuBuffer,
                            local_view: View,
                            extents: [u64; 3],
                            direction: Whole| {
                block_copy(
                    ctx, whole, whole_view, local, local_view, extents, direction, &mut keep,
                )
                .map(dispatch_steps)
            };
            let spectrum_in = copy(
                &self.spectrum,
                spectrum_view,
                &plane_buf,
                plane_view,
                planes,
                Whole::Source,
            )?;
            let data_out = copy(
                &self.data,
                data_view,
                &out,
                points_view,
                angles,
                Whole::Destination,
            )?;
            let data_in = copy(
                &self.data,
                data_view,
                &out,
                points_view,
                angles,
                Whole::Source,
            )?;
            let spectrum_out = copy(
                &self.spectrum,
                spectrum_view,
                &plane_buf,
                plane_view,
                planes,
                Whole::Destination,
            )?;
            let mut compute_fwd = vec![Step::Dispatch(b_divker?, groups(c * gy * gx))];
            compute_fwd.extend(fwd_ffts.map(Step::Fft));
            compute_fwd.push(Step::Dispatch(b_gather?, groups(c * points)));
            self.programs[U2_FWD].chunks.push(ChunkProgram {
                stage_in: spectrum_in,
                compute: compute_fwd,
                stage_out: data_out,
                io: Some((plane_block.clone(), points_block.clone())),
            });
            let mut compute_adj = vec![Step::Dispatch(b_spread?, groups(c * gy * gx))];
            compute_adj.extend(inv_ffts.map(Step::Fft));
            compute_adj.push(Step::Dispatch(b_divker_adj?, groups(c * n1 * n2)));
            self.programs[U2_ADJ].chunks.push(ChunkProgram {
                stage_in: data_in,
                compute: compute_adj,
                stage_out: spectrum_out,
                io: Some((points_block, plane_block)),
            });
            keep.push(params);
        }
        self.buffers.extend(keep);
        self.buffers
            .extend([plane_buf, grid, out, deconv, coords, row_start, sorted]);
        Ok(())
    }

    fn build_f(&mut self, ctx: &GpuContext) -> Result<(), OperatorError> {
        let g = &self.geometry;
        let shape = [g.ntheta(), g.deth, g.detw];
        let shape64 = shape.map(|s| s as u64);
        // The centred DFT of even length n equals (-1)^(n/2) (-1)^v DFT((-1)^a x_a): the factor
        // (-1)^((deth+detw)/2) is kept (the reference drops it), so L is the projector itself.
        let sign = if (g.deth / 2 + g.detw / 2).is_multiple_of(2) {
            1.0
        } else {
            -1.0
        };
        let scale = (sign / (g.deth as f64 * g.detw as f64)) as f32;
        let mut keep = Vec::new();
        for (program, direction) in [(F_ADJ, Direction::Inverse), (F_FWD, Direction::Forward)] {
            let pre = modulate(ctx, &self.data, shape64, 1.0, &mut keep)?;
            let post = modulate(ctx, &self.data, shape64, scale, &mut keep)?;
            let first = self.ffts.len();
            let plan = FftPlan::new(ctx, &shape, 2, direction, Normalization::None, &self.data)?;
            self.ffts.extend(plan.into_axis_plans());
            let mut compute = dispatch_steps(pre);
            compute.extend((first..self.ffts.len()).map(Step::Fft));
            compute.extend(dispatch_steps(post));
            self.programs[program].chunks.push(ChunkProgram {
                compute,
                ..Default::default()
            });
        }
        self.buffers.extend(keep);
        Ok(())
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The volume buffer, `(n0, n1, n2)` complex64.
    pub fn volume(&self) -> &GpuBuffer {
        &self.volume
    }

    /// The spectrum buffer after U1, `(deth, n1, n2)` complex64.
    pub fn spectrum(&self) -> &GpuBuffer {
        &self.spectrum
    }

    /// The data buffer, `(ntheta, deth, detw)` complex64.
    pub fn data(&self) -> &GpuBuffer {
        &self.data
    }

    /// Chunk sizes in use: (y rows per U1 chunk, detector rows per U2 chunk).
    pub fn chunks(&self) -> (usize, usize) {
        (self.chunk_y, self.chunk_rows)
    }

    /// Bytes of device memory the operator holds (arrays, chunk buffers, tables, FFT plans).
    pub fn device_bytes(&self) -> u64 {
        [&self.volume, &self.spectrum, &self.data]
            .iter()
            .map(|b| b.bytes())
            .sum::<u64>()
            + self.buffers.iter().map(GpuBuffer::bytes).sum::<u64>()
            + self.ffts.iter().map(FftPlan1d::device_bytes).sum::<u64>()
    }

    fn record_steps(&self, rec: &mut Recorder, steps: &[Step]) {
        for step in steps {
            match step {
                Step::Dispatch(bound, groups) => rec.dispatch(bound, *groups),
                Step::Fft(i) => self.ffts[*i].record(rec),
            }
        }
    }

    fn record_program(&self, rec: &mut Recorder, index: usize) {
        for chunk in &self.programs[index].chunks {
            self.record_steps(rec, &chunk.stage_in);
            self.record_steps(rec, &chunk.compute);
            self.record_steps(rec, &chunk.stage_out);
        }
    }

    /// Number of chunks of `stage`.
    pub fn chunk_count(&self, stage: Stage) -> usize {
        self.programs[stage.program()].chunks.len()
    }

    /// The chunk-local (input, output) blocks of chunk `chunk` of `stage`.
    pub(crate) fn chunk_io(&self, stage: Stage, chunk: usize) -> &(Block, Block) {
        self.programs[stage.program()].chunks[chunk]
            .io
            .as_ref()
            .expect("gridding stages have chunk blocks")
    }

    /// Records the copy of chunk `chunk`'s input from the whole array into its input block.
    pub(crate) fn record_chunk_in(&self, rec: &mut Recorder, stage: Stage, chunk: usize) {
        self.record_steps(rec, &self.programs[stage.program()].chunks[chunk].stage_in);
    }

    /// Records the chunk's map from its input block to its output block.
    pub(crate) fn record_chunk_compute(&self, rec: &mut Recorder, stage: Stage, chunk: usize) {
        self.record_steps(rec, &self.programs[stage.program()].chunks[chunk].compute);
    }

    /// Records the copy of the chunk's output block into the whole array.
    pub(crate) fn record_chunk_out(&self, rec: &mut Recorder, stage: Stage, chunk: usize) {
        self.record_steps(rec, &self.programs[stage.program()].chunks[chunk].stage_out);
    }

    /// Records `what` into `rec`.
    pub fn record(&self, rec: &mut Recorder, what: Apply) {
        let stages: &[usize] = match what {
            Apply::Forward => &[U1_FWD, U2_FWD, F_ADJ],
            Apply::Adjoint => &[F_FWD, U2_ADJ, U1_ADJ],
            Apply::FourierForward => &[U1_FWD, U2_FWD],
            Apply::FourierAdjoint => &[U2_ADJ, U1_ADJ],
            Apply::Usfft1d => &[U1_FWD],
            Apply::Usfft1dAdjoint => &[U1_ADJ],
            Apply::Usfft2d => &[U2_FWD],
            Apply::Usfft2dAdjoint => &[U2_ADJ],
            Apply::Fft2dAdjoint => &[F_ADJ],
            Apply::Fft2d => &[F_FWD],
        };
        for &stage in stages {
            self.record_program(rec, stage);
        }
    }

    /// The operator's buffer for `space`.
    pub fn buffer(&self, space: Space) -> &GpuBuffer {
        match space {
            Space::Volume => &self.volume,
            Space::Spectrum => &self.spectrum,
            Space::Data => &self.data,
        }
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
                what: "the input",
                expected,
                got: input_shape.to_vec(),
            });
        }
        ctx.write(self.buffer(from), 0, input);
        self.apply(ctx, what)?;
        let out = self.buffer(to);
        Ok(ctx.read(out, 0, (out.bytes() / 8) as usize)?)
    }

    /// Runs `what` and waits for it.
    pub fn apply(&self, ctx: &GpuContext, what: Apply) -> Result<(), OperatorError> {
        let mut rec = ctx.recorder("laminography operator");
        self.record(&mut rec, what);
        Ok(ctx.submit(rec)?)
    }
}
