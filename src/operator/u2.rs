//! Building U2, the 2D USFFT of every spectrum plane onto the (x, y) frequencies of each angle
//! and detector column: its chunk buffers, tables (resident, or sliced per chunk), kernels and
//! FFT plans, and the forward and adjoint chunks along detector rows.

use std::ops::Range;
use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use super::block_copies::{groups, window};
use super::build::{complex_buffer, gridding_kernel};
use super::chunk_program::{Block, Chunk, FftPlanId, Step};
use super::gridding::TapPolynomials;
use super::program::{Kind, Stage};
use super::sizing::{u2_records_bytes, u2_table_layouts};
use super::tables::U2Tables;
use super::{AdjointGridding, Geometry, GriddingAxis, LaminoOperator, OperatorError, View};
use crate::array::{BlockView, Field, PlaneLayout, Residency};
use crate::fft::{Direction, FftPlan, Normalization};
use crate::gpu::{BufferSlice, GpuBuffer, GpuContext, Kernel};
use crate::shaders;

/// The uniforms of the U2 kernels (shaders/operator/usfft2d.wgsl).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct U2Params {
    n1: u32,
    n2: u32,
    gy: u32,
    gx: u32,
    rows: u32,
    points: u32,
    coords_offset: u32,
    corner_start_offset: u32,
    corner_points_offset: u32,
    /// How many blocks a footprint reaches from its corner's (rows, columns).
    reach_rows: u32,
    reach_columns: u32,
    pad: u32,
    scale: f32,
    pad1: [f32; 3],
    /// The tap polynomials, four coefficients to a vector.
    kernel: [[f32; 4]; shaders::usfft2d::KERNEL_VECTORS as usize],
}

/// The U2 tables, one plane per detector row ([k][...]), so that a chunk's rows are one
/// contiguous block: on the device whole (each chunk binds its window), or on the host, a
/// chunk's block uploaded into slice buffers of one chunk's rows before it computes.
struct U2TableFields {
    /// The first detector row the tables hold (they hold the rows of the chunks built).
    first_row: u64,
    coords: Field,
    corner_start: Field,
    corner_points: Field,
    /// The slice buffers of one chunk's rows (coordinates, corner starts, corner points), when the
    /// tables are off the device.
    slices: Option<(GpuBuffer, GpuBuffer, GpuBuffer)>,
}

impl U2TableFields {
    /// Computes the tables of detector rows `rows` into arrays where `residency` says, with
    /// slice buffers of `ck` rows when that is off the device.
    fn new(
        ctx: &GpuContext,
        g: &Geometry,
        (ax, ay): (&GriddingAxis, &GriddingAxis),
        ck: u64,
        (residency, rows): (&Residency, Range<usize>),
    ) -> Result<Self, OperatorError> {
        let [coords, corner_start, corner_points] = u2_table_layouts(g).map(|(label, layout)| {
            let layout = PlaneLayout {
                planes: rows.len(),
                ..layout
            };
            Field::new(ctx, label, layout, residency).map_err(OperatorError::from)
        });
        let (coords, corner_start, corner_points) = (coords?, corner_start?, corner_points?);
        for k in rows.clone() {
            let row = U2Tables::row(g, ax, ay, k);
            let at = |field: &Field| (k - rows.start) * field.layout().plane_words;
            coords.write_words(ctx, at(&coords), bytemuck::cast_slice(&row.coords))?;
            corner_start.write_words(
                ctx,
                at(&corner_start),
                bytemuck::cast_slice(&row.corner_start),
            )?;
            corner_points.write_words(
                ctx,
                at(&corner_points),
                bytemuck::cast_slice(&row.corner_points),
            )?;
        }
        let resident = *residency == Residency::Device;
        let slices = if resident {
            None
        } else {
            let slice = |field: &Field, label: &str| {
                ctx.storage_buffer(label, ck * field.layout().plane_words as u64 * 4)
            };
            Some((
                slice(&coords, "u2 coordinates (chunk)")?,
                slice(&corner_start, "u2 corner starts (chunk)")?,
                slice(&corner_points, "u2 corner points (chunk)")?,
            ))
        };
        Ok(Self {
            first_row: rows.start as u64,
            coords,
            corner_start,
            corner_points,
            slices,
        })
    }

    /// Where the kernels of the chunk of detector rows `[k0, k0 + c)` read the tables
    /// (coordinates, corner starts, corner points), with the index of the chunk's first element in
    /// each binding, and the fills that upload the chunk's slice of each table first (none when
    /// the tables are resident).
    fn chunk_bindings(
        &self,
        ctx: &GpuContext,
        k0: u64,
        c: u64,
    ) -> ([BufferSlice<'_>; 3], [u32; 3], Vec<Step>) {
        // The tables' own row of detector row k0.
        let k0 = k0 - self.first_row;
        match &self.slices {
            None => {
                // Each table's window in its own elements (a point's coordinates are 2 words).
                let [coords, starts, lists] = [
                    (&self.coords, 2),
                    (&self.corner_start, 1),
                    (&self.corner_points, 1),
                ]
                .map(|(field, words)| {
                    let per_row = (field.layout().plane_words / words) as u64;
                    let bytes = 4 * words as u64;
                    window(ctx, field.buffer(), bytes, k0 * per_row, c * per_row)
                });
                (
                    [coords.0, starts.0, lists.0],
                    [coords.1, starts.1, lists.1],
                    Vec::new(),
                )
            }
            Some((c_buf, r_buf, s_buf)) => {
                let mut fill = Vec::new();
                for (field, buffer) in [
                    (&self.coords, c_buf),
                    (&self.corner_start, r_buf),
                    (&self.corner_points, s_buf),
                ] {
                    let words = field.layout().plane_words;
                    let view = BlockView::planes(k0 as usize, (k0 + c) as usize, words);
                    fill.push(Step::Fill {
                        field: field.clone(),
                        buffer: buffer.clone(),
                        view,
                    });
                }
                ([c_buf.into(), r_buf.into(), s_buf.into()], [0; 3], fill)
            }
        }
    }

    /// The buffers the operator keeps: the whole tables when on the device, else the slices.
    fn into_buffers(self) -> [GpuBuffer; 3] {
        match self.slices {
            None => [self.coords, self.corner_start, self.corner_points]
                .map(|field| field.buffer().clone()),
            Some((c, r, s)) => [c, r, s],
        }
    }
}

/// U2*'s gridding kernels ([`AdjointGridding`]): each dispatched over the blocks of every row's
/// grid, the tabulated one after a pass over the chunk's points that writes their records.
enum Spread {
    Evaluated(Arc<Kernel>),
    Tabulated {
        records: Arc<Kernel>,
        blocks: Arc<Kernel>,
    },
}

/// What every U2 chunk binds or runs alike.
struct U2Parts {
    ax: GriddingAxis,
    ay: GriddingAxis,
    /// The kernel's tap polynomials (both axes share them), fitted once for every chunk.
    taps: TapPolynomials,
    /// Chunk-local spectrum planes `[r][y][x]`.
    planes: GpuBuffer,
    /// Chunk-local `2 n1 x 2 n2` grids.
    grid: GpuBuffer,
    /// Chunk-local data points `[r][t][w]`.
    points: GpuBuffer,
    deconv: GpuBuffer,
    /// The tabulated adjoint's records of a chunk's points (one vector where the adjoint
    /// evaluates its weights: the kernels' layout binds it either way).
    records: GpuBuffer,
    tables: U2TableFields,
    /// `u2_divker`, `u2_gather`, `u2_divker_adjoint`.
    kernels: [Arc<Kernel>; 3],
    spread: Spread,
    forward_ffts: Vec<FftPlanId>,
    inverse_ffts: Vec<FftPlanId>,
}

impl LaminoOperator {
    /// Builds U2 and U2* chunk by chunk along detector rows: the chunks `self.u2_chunks`,
    /// with the tables of their rows.
    pub(super) fn build_u2(
        &mut self,
        ctx: &GpuContext,
        tables: &Residency,
    ) -> Result<(), OperatorError> {
        let g = self.geometry.clone();
        let (deth, ck) = (g.deth as u64, self.chunk_rows as u64);
        let chunks = &self.u2_chunks;
        let rows = chunks.start * ck as usize..(chunks.end * ck as usize).min(g.deth);
        let parts = self.u2_parts(ctx, &g, (tables, rows.clone()))?;
        let mut keep = Vec::new();
        for k0 in (rows.start as u64..rows.end as u64).step_by(ck as usize) {
            let c = (deth - k0).min(ck);
            keep.push(self.build_u2_chunk(ctx, &g, &parts, k0, c)?);
        }
        self.buffers.extend(keep);
        self.buffers.extend([
            parts.planes,
            parts.grid,
            parts.points,
            parts.deconv,
            parts.records,
        ]);
        self.buffers.extend(parts.tables.into_buffers());
        Ok(())
    }

    /// The chunk buffers, tables, kernels and FFT plans every U2 chunk shares.
    fn u2_parts(
        &mut self,
        ctx: &GpuContext,
        g: &Geometry,
        tables: (&Residency, Range<usize>),
    ) -> Result<U2Parts, OperatorError> {
        let (ax, ay) = U2Tables::axes(g);
        let (n1, n2, detw) = (g.n1 as u64, g.n2 as u64, g.detw as u64);
        let (gy, gx) = (ay.grid as u64, ax.grid as u64);
        let points = g.ntheta() as u64 * detw;
        let ck = self.chunk_rows as u64;
        let planes = complex_buffer(ctx, "u2 planes", (ck * n1 * n2) as usize)?;
        let grid = complex_buffer(ctx, "u2 grids", (ck * gy * gx) as usize)?;
        let out = complex_buffer(ctx, "u2 points", (ck * points) as usize)?;
        let mut deconv = ax.deconvolution();
        deconv.extend(ay.deconvolution());
        let deconv = ctx.upload("u2 deconvolution", &deconv)?;
        let record_bytes = u2_records_bytes(self.adjoint_gridding, g, ck);
        let records = ctx.storage_buffer("u2 adjoint records", record_bytes)?;
        let tables = U2TableFields::new(ctx, g, (&ax, &ay), ck, tables)?;
        // The kernel's half-width and polynomials' length are pipeline constants (both axes
        // share them).
        debug_assert_eq!(ax.half_width, ay.half_width);
        let taps = ax.tap_polynomials();
        let spec = |entry| {
            let mut spec = gridding_kernel(&shaders::USFFT2D, entry);
            spec.overrides.push(("HALF_WIDTH", ax.half_width as f64));
            spec.overrides.push(("TAP_TERMS", taps.terms as f64));
            spec
        };
        let kernels =
            ["u2_divker", "u2_gather", "u2_divker_adjoint"].map(|entry| ctx.kernel(&spec(entry)));
        let [divker, gather, divker_adj] = kernels;
        let kernels = [divker?, gather?, divker_adj?];
        let spread = match self.adjoint_gridding {
            AdjointGridding::Tabulated => Spread::Tabulated {
                records: ctx.kernel(&spec("u2_spread_records"))?,
                blocks: ctx.kernel(&spec("u2_spread_tabulated"))?,
            },
            _ => Spread::Evaluated(ctx.kernel(&spec("u2_spread"))?),
        };
        // 2D FFT over the last two axes of the (rows, 2 n1, 2 n2) grids: the U2 plan of
        // docs/operator-method.md, "FFT plans".
        let shape = [ck as usize, gy as usize, gx as usize];
        let mut plans = |direction| -> Result<Vec<FftPlanId>, OperatorError> {
            let plan = FftPlan::specialized(ctx, &shape, 2, direction, Normalization::None, &grid)?;
            Ok(self.ffts.add(plan.into_axis_plans()))
        };
        let forward_ffts = plans(Direction::Forward)?;
        let inverse_ffts = plans(Direction::Inverse)?;
        Ok(U2Parts {
            ax,
            ay,
            taps,
            planes,
            grid,
            points: out,
            deconv,
            records,
            tables,
            kernels,
            spread,
            forward_ffts,
            inverse_ffts,
        })
    }

    /// Builds the forward and adjoint chunks of detector rows `[k0, k0 + c)` and returns their
    /// parameters, which live as long as the operator.
    fn build_u2_chunk(
        &mut self,
        ctx: &GpuContext,
        g: &Geometry,
        parts: &U2Parts,
        k0: u64,
        c: u64,
    ) -> Result<GpuBuffer, OperatorError> {
        let (n1, n2, deth, detw) = (g.n1 as u64, g.n2 as u64, g.deth as u64, g.detw as u64);
        let (gy, gx) = (parts.ay.grid as u64, parts.ax.grid as u64);
        let points = g.ntheta() as u64 * detw;
        let (table_slices, offsets, fill) = parts.tables.chunk_bindings(ctx, k0, c);
        let params = ctx.uniform(
            "u2 params",
            &u2_params(g, (&parts.ax, &parts.ay), &parts.taps, c, offsets),
        )?;
        let [coords_slice, starts_slice, lists_slice] = table_slices;
        let slices = [
            (&parts.planes).into(),
            (&parts.grid).into(),
            (&parts.points).into(),
            (&parts.deconv).into(),
            coords_slice,
            starts_slice,
            lists_slice,
            (&params).into(),
            (&parts.records).into(),
        ];
        let bound = parts.kernels.each_ref().map(|k| k.bind(ctx, &slices));
        let [b_divker, b_gather, b_divker_adj] = bound;
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
            buffer: parts.planes.clone(),
            view: View {
                offset: 0,
                strides: [n1 * n2, n2, 1],
            },
            extents: [c, n1, n2],
            channel_axis: 0,
        };
        let points_block = Block {
            buffer: parts.points.clone(),
            view: View {
                offset: 0,
                strides: [detw, points, 1],
            },
            extents: [g.ntheta() as u64, c, detw],
            channel_axis: 1,
        };
        let mut compute_fwd = vec![Step::Dispatch(b_divker?, groups(c * gy * gx))];
        compute_fwd.extend(parts.forward_ffts.iter().map(|&id| Step::Fft(id)));
        compute_fwd.push(Step::Dispatch(b_gather?, groups(c * points)));
        // The forward pass reads the coordinates only; the adjoint all three tables.
        self.stages
            .of_mut(Kind::Gridding(Stage::Usfft2d))
            .push(Chunk {
                tables: fill.iter().take(1).cloned().collect(),
                input: plane_block.clone(),
                whole_in: spectrum_view,
                compute: compute_fwd,
                output: points_block.clone(),
                whole_out: data_view,
            });
        // One invocation per block of every row's grid.
        let (blocks_y, blocks_x) = U2Tables::blocks(&parts.ax, &parts.ay);
        let blocks = c * (blocks_y * blocks_x) as u64;
        let mut compute_adj = match &parts.spread {
            Spread::Evaluated(spread) => {
                vec![Step::Dispatch(spread.bind(ctx, &slices)?, groups(blocks))]
            }
            Spread::Tabulated { records, blocks: b } => vec![
                Step::Dispatch(records.bind(ctx, &slices)?, groups(c * points)),
                Step::Dispatch(b.bind(ctx, &slices)?, groups(blocks)),
            ],
        };
        compute_adj.extend(parts.inverse_ffts.iter().map(|&id| Step::Fft(id)));
        compute_adj.push(Step::Dispatch(b_divker_adj?, groups(c * n1 * n2)));
        self.stages
            .of_mut(Kind::Gridding(Stage::Usfft2dAdjoint))
            .push(Chunk {
                tables: fill,
                input: points_block,
                whole_in: data_view,
                compute: compute_adj,
                output: plane_block,
                whole_out: spectrum_view,
            });
        Ok(params)
    }
}

/// The parameters of a chunk of `c` detector rows whose tables start at element `offsets` of
/// their bindings.
fn u2_params(
    g: &Geometry,
    (ax, ay): (&GriddingAxis, &GriddingAxis),
    taps: &TapPolynomials,
    c: u64,
    [coords_offset, corner_start_offset, corner_points_offset]: [u32; 3],
) -> U2Params {
    let (reach_rows, reach_columns) = U2Tables::reach(ax, ay);
    let mut kernel = [[0.0; 4]; shaders::usfft2d::KERNEL_VECTORS as usize];
    for (slot, &c) in kernel.as_flattened_mut().iter_mut().zip(&taps.coefficients) {
        *slot = c;
    }
    U2Params {
        n1: g.n1 as u32,
        n2: g.n2 as u32,
        gy: ay.grid as u32,
        gx: ax.grid as u32,
        rows: c as u32,
        points: (g.ntheta() * g.detw) as u32,
        coords_offset,
        corner_start_offset,
        corner_points_offset,
        reach_rows: reach_rows as u32,
        reach_columns: reach_columns as u32,
        pad: 0,
        // 1/sqrt(ntheta) (the total number of angles) is part of the operator's scale.
        scale: (1.0 / (g.ntheta() as f64).sqrt()) as f32,
        pad1: [0.0; 3],
        kernel,
    }
}
