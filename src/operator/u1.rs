//! Building U1, the 1D USFFT along z of every (y, x) column: its chunk buffers, tables, kernels
//! and FFT plans, and the forward and adjoint chunks along y.

use bytemuck::{Pod, Zeroable};

use super::block_copies::groups;
use super::build::{complex_buffer, gridding_kernel};
use super::chunk_program::{Block, Chunk, Step};
use super::program::{Kind, Stage};
use super::tables::U1Tables;
use super::{LaminoOperator, OperatorError, View};
use crate::fft::{Direction, FftDescriptor, FftPlan1d, Layout, Normalization};
use crate::gpu::{Bound, BufferSlice, GpuBuffer, GpuContext};
use crate::shaders;

/// The uniforms of the U1 kernels (shaders/operator/usfft1d.wgsl).
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

impl LaminoOperator {
    /// Builds U1 and U1* chunk by chunk along y.
    pub(super) fn build_u1(&mut self, ctx: &GpuContext) -> Result<(), OperatorError> {
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
        // FFT along the slow axis p of the (2 n0, columns) grid: the U1 plan of
        // docs/operator-method.md, "FFT plans".
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
        let fft_fwd = self.ffts.add([fft(Direction::Forward)?])[0];
        let fft_inv = self.ffts.add([fft(Direction::Inverse)?])[0];

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
            self.stages
                .of_mut(Kind::Gridding(Stage::Usfft1d))
                .push(Chunk {
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
            self.stages
                .of_mut(Kind::Gridding(Stage::Usfft1dAdjoint))
                .push(Chunk {
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
}
