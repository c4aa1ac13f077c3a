//! Chunk sizing and the memory estimate: how many y rows, detector rows and projections a chunk
//! of each stage holds on a device (its buffers each fit one storage binding), the FFT workspace
//! those chunks need, and the device bytes an operator will hold, all computed before anything is
//! allocated (the memory planner sizes its plans from them).

use super::tables::U2Tables;
use super::{
    AdjointGridding, Geometry, LaminoOperator, OperatorError, OperatorOptions, MIN_STAGE_CHUNKS,
};
use crate::array::{PlaneLayout, Residency};
use crate::fft::Strategy;
use crate::gpu::GpuContext;

/// Bytes of each slot of the shared FFT workspace the operator's plans need (U1 along 2 n0, the
/// 2 n1 x 2 n2 grids of U2, the projections of F; forward and inverse alike) for chunks of `cy` y
/// rows, `ck` detector rows and `ca` angles.
pub(super) fn fft_workspace(
    ctx: &GpuContext,
    g: &Geometry,
    (cy, ck, ca): (u64, u64, u64),
) -> [u64; 2] {
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

/// y rows per U1 chunk: columns, grid and rows of one chunk each fit one binding.
pub(super) fn u1_chunk(
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
pub(super) fn u2_chunk(
    ctx: &GpuContext,
    g: &Geometry,
    options: &OperatorOptions,
) -> Result<usize, OperatorError> {
    let points = (g.ntheta() * g.detw) as u64 * 8;
    let records = match u2_adjoint_gridding(ctx, g, options) {
        AdjointGridding::Tabulated => u2_record_row_bytes(g),
        _ => 0,
    };
    let unit = ChunkUnit {
        whole: ((4 * g.n1 * g.n2) as u64 * 8).max(points).max(records),
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

/// Bytes of U2*'s records of one detector row ([`AdjointGridding::Tabulated`]): per point, its
/// value and its weights on the blocks it reaches, a vector of 4 words each
/// ([`U2Tables::record_vectors`]).
fn u2_record_row_bytes(g: &Geometry) -> u64 {
    let (ax, ay) = U2Tables::axes(g);
    (g.ntheta() * g.detw) as u64 * 16 * U2Tables::record_vectors(&ax, &ay) as u64
}

/// Bytes of the buffer of U2*'s records for chunks of `ck` detector rows when it weighs its
/// points `way`: the records, or the one vector bound in their place where it evaluates.
pub(super) fn u2_records_bytes(way: AdjointGridding, g: &Geometry, ck: u64) -> u64 {
    match way {
        AdjointGridding::Tabulated => ck * u2_record_row_bytes(g),
        _ => 16,
    }
}

/// The way U2* weighs its points that `options` resolves to on this device: `Auto` tabulates
/// where one detector row's records fit a storage binding.
pub(super) fn u2_adjoint_gridding(
    ctx: &GpuContext,
    g: &Geometry,
    options: &OperatorOptions,
) -> AdjointGridding {
    match options.adjoint_gridding {
        AdjointGridding::Auto if u2_record_row_bytes(g) <= ctx.max_binding_bytes() => {
            AdjointGridding::Tabulated
        }
        AdjointGridding::Auto => AdjointGridding::Evaluated,
        chosen => chosen,
    }
}

/// Projections per chunk of the 2D FFT stage: the chunk fits one binding.
pub(super) fn f_chunk(
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
/// the starts of the runs of points by the block of their footprint's corner, and the points in
/// that order (what the adjoint's blocks read).
pub(super) fn u2_table_layouts(g: &Geometry) -> [(&'static str, PlaneLayout); 3] {
    let points = g.ntheta() * g.detw;
    let (ax, ay) = U2Tables::axes(g);
    let (blocks_y, blocks_x) = U2Tables::blocks(&ax, &ay);
    let layout = |plane_words| PlaneLayout {
        planes: g.deth,
        plane_words,
        axes_swapped: false,
    };
    [
        ("u2 coordinates", layout(2 * points)),
        ("u2 corner starts", layout(blocks_y * blocks_x + 1)),
        ("u2 corner points", layout(points)),
    ]
}

/// Bytes of each U2 table's plane of one detector row.
fn u2_table_plane_bytes(g: &Geometry) -> impl Iterator<Item = u64> {
    u2_table_layouts(g)
        .into_iter()
        .map(|(_, l)| l.plane_words as u64 * 4)
}

/// Bytes of the U2 tables of one detector row.
fn u2_table_row_bytes(g: &Geometry) -> u64 {
    u2_table_plane_bytes(g).sum()
}

impl LaminoOperator {
    /// Bytes of the whole U2 tables (about 13 per point of the data): what a streaming plan holds
    /// on the host (or in scratch) and uploads a chunk's slice of at every U2 application.
    pub fn u2_table_bytes(geometry: &Geometry) -> u64 {
        geometry.deth as u64 * u2_table_row_bytes(geometry)
    }

    /// Bytes of one detector row of the largest U2 table (the coordinates, 8 per point of the
    /// data): each table is one buffer when resident.
    pub fn u2_largest_table_row_bytes(geometry: &Geometry) -> u64 {
        u2_table_plane_bytes(geometry).max().unwrap_or(0)
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
        let records = u2_records_bytes(u2_adjoint_gridding(ctx, g, options), g, ck);
        let u2 = 8 * ck * (n1 * n2 + 4 * n1 * n2 + points)
            + 4 * (n1 + n2)
            + table_rows * u2_table_row_bytes(g)
            + records;
        let f = 8 * ca * deth * detw;
        let twiddles = 8 * 2 * (2 * n0 + 2 * n1 + 2 * n2 + deth + detw);
        // The projections' column and row phases (the rotation axis and the volume's offset; per
        // angle with an offset) and ones (F stage).
        let phase_angles = g.detector_phase_angles() as u64;
        let phases = 8 * (phase_angles * (deth + detw) + deth.max(detw));
        let ffts: u64 = fft_workspace(ctx, g, (cy, ck, ca)).iter().sum();
        Ok(spectrum + u1 + u2 + f + twiddles + phases + ffts)
    }
}
