//! Host-side tables of the two gridding stages, computed once per geometry in f64 and rounded
//! once. Forward and adjoint read the same f32 weights, so they are exact adjoints of each other up
//! to summation rounding, and every sum runs in a fixed order (no atomics): same input, same bits.

use super::gridding::{GriddingAxis, TapPolynomials};
use super::Geometry;
use crate::shaders::usfft2d::{U2_BLOCK_COLUMNS, U2_BLOCK_ROWS};

/// Stage U1 (1D gridding along z): forward taps per detector row and their transpose per cell.
#[derive(Debug, Clone)]
pub(crate) struct U1Tables {
    pub axis: GriddingAxis,
    pub deconvolution: Vec<f32>,
    /// Per row k, `2m+1` grid cells (mod 2n) and weights.
    pub tap_cell: Vec<u32>,
    pub tap_weight: Vec<f32>,
    /// Per grid cell p, the (row, weight) pairs that touch it, in increasing row order.
    pub cell_start: Vec<u32>,
    pub cell_row: Vec<u32>,
    pub cell_weight: Vec<f32>,
}

impl U1Tables {
    pub fn new(g: &Geometry) -> Self {
        let axis = GriddingAxis::new(g.n0, g.eps);
        let m = axis.half_width as i64;
        let grid = axis.grid as i64;
        // The reference folds 1/sqrt(n2) (the size of an unrelated axis) into this stage: a global
        // scale that makes |L*L| about 1. It is part of the operator's definition.
        let scale = 1.0 / (g.n2 as f64).sqrt();
        let mut tap_cell = Vec::new();
        let mut tap_weight = Vec::new();
        for &z in &g.z_frequencies() {
            let base = axis.base_cell(z);
            for l in base - m..=base + m {
                tap_cell.push(l.rem_euclid(grid) as u32);
                tap_weight.push((axis.weight(l, z as f64) * scale) as f32);
            }
        }
        let taps = (2 * m + 1) as usize;
        let mut per_cell: Vec<Vec<(u32, f32)>> = vec![Vec::new(); axis.grid];
        for (i, (&cell, &w)) in tap_cell.iter().zip(&tap_weight).enumerate() {
            per_cell[cell as usize].push(((i / taps) as u32, w));
        }
        let mut cell_start = vec![0u32];
        let (mut cell_row, mut cell_weight) = (Vec::new(), Vec::new());
        for entries in per_cell {
            for (k, w) in entries {
                cell_row.push(k);
                cell_weight.push(w);
            }
            cell_start.push(cell_row.len() as u32);
        }
        Self {
            deconvolution: axis.deconvolution(),
            axis,
            tap_cell,
            tap_weight,
            cell_start,
            cell_row,
            cell_weight,
        }
    }
}

/// Stage U2 (2D gridding per detector row): the gridding axes, deconvolution factors and the
/// coordinates of every point; the per-row tables the kernels read come from [`U2Tables::row`].
#[derive(Debug, Clone)]
pub(crate) struct U2Tables {
    pub axis_x: GriddingAxis,
    pub axis_y: GriddingAxis,
    pub deconvolution_x: Vec<f32>,
    pub deconvolution_y: Vec<f32>,
    /// The kernel's tap polynomials (both axes share them: the width follows eps alone).
    pub taps: TapPolynomials,
    /// `(x, y)` frequency of every point, layout `[k][t][w]`.
    pub coords: Vec<[f32; 2]>,
}

/// The U2 tables of one detector row, as the kernels read them.
pub(crate) struct U2Row {
    /// `(x, y)` frequency of every point `t * detw + w`.
    pub coords: Vec<[f32; 2]>,
    /// For each block of `U2_BLOCK_ROWS x U2_BLOCK_COLUMNS` grid cells (row-major over the
    /// blocks) and one past the last, the first entry of `corner_points` whose footprint's corner
    /// (its first tap in y and in x) lies in it.
    pub corner_start: Vec<u32>,
    /// The points ordered by the block of their footprint's corner, then base row, base column
    /// and index: a block of the adjoint reads the points of the `reach` blocks up and left of it
    /// (and itself), one run per block row.
    pub corner_points: Vec<u32>,
}

/// The blocks of `block` cells a footprint of `2m + 1` cells can reach along an axis of `grid`
/// cells (a multiple of `block`), counted from the block of its first cell: its `2m` steps cross
/// at most `ceil(2m / block)` boundaries, and no more blocks than exist are reached.
fn reach(m: usize, block: usize, grid: usize) -> usize {
    ((2 * m).div_ceil(block) + 1).min(grid / block)
}

impl U2Tables {
    /// The gridding axes of U2 for `g`: (x along n2, y along n1).
    pub fn axes(g: &Geometry) -> (GriddingAxis, GriddingAxis) {
        (
            GriddingAxis::new(g.n2, g.eps),
            GriddingAxis::new(g.n1, g.eps),
        )
    }

    /// The adjoint's blocks of one row's grid (rows, columns): they tile it, the grid's sides
    /// being twice even sizes, multiples of 4 (`src/shaders.rs`).
    pub fn blocks(axis_x: &GriddingAxis, axis_y: &GriddingAxis) -> (usize, usize) {
        (
            axis_y.grid / U2_BLOCK_ROWS as usize,
            axis_x.grid / U2_BLOCK_COLUMNS as usize,
        )
    }

    /// How many blocks a footprint reaches at most (rows, columns) from the block of its corner:
    /// 2 x 2 at eps 1e-3 (5 taps always span two blocks of 4), 3 x 3 at 1e-4 to 1e-6.
    pub fn reach(axis_x: &GriddingAxis, axis_y: &GriddingAxis) -> (usize, usize) {
        (
            reach(axis_y.half_width, U2_BLOCK_ROWS as usize, axis_y.grid),
            reach(axis_x.half_width, U2_BLOCK_COLUMNS as usize, axis_x.grid),
        )
    }

    /// Vectors of 4 words in a point's record of the tabulated U2* (`records` in
    /// shaders/operator/usfft2d.wgsl): its value, then its weights on the cells of each block row
    /// and each block column its footprint reaches.
    pub fn record_vectors(axis_x: &GriddingAxis, axis_y: &GriddingAxis) -> usize {
        let (rows, columns) = Self::reach(axis_x, axis_y);
        1 + rows + columns
    }

    /// The tables of detector row `k` alone: what a streaming operator uploads for a chunk, and
    /// what the whole tables are made of, so both hold the same values.
    pub fn row(g: &Geometry, axis_x: &GriddingAxis, axis_y: &GriddingAxis, k: usize) -> U2Row {
        let (gx, gy) = (axis_x.grid as i64, axis_y.grid as i64);
        let (mx, my) = (axis_x.half_width as i64, axis_y.half_width as i64);
        let (blocks_y, blocks_x) = Self::blocks(axis_x, axis_y);
        let (rows, columns) = (U2_BLOCK_ROWS as i64, U2_BLOCK_COLUMNS as i64);
        let points = g.ntheta() * g.detw;
        let mut coords = Vec::with_capacity(points);
        let mut keyed: Vec<(usize, i64, i64, u32)> = Vec::with_capacity(points);
        for t in 0..g.ntheta() {
            for w in 0..g.detw {
                let xy = g.xy_frequency(t, k, w);
                coords.push(xy);
                let bx = axis_x.base_cell(xy[0]).rem_euclid(gx);
                let by = axis_y.base_cell(xy[1]).rem_euclid(gy);
                let corner_row = ((by - my).rem_euclid(gy) / rows) as usize;
                let corner_column = ((bx - mx).rem_euclid(gx) / columns) as usize;
                let corner = corner_row * blocks_x + corner_column;
                keyed.push((corner, by, bx, (t * g.detw + w) as u32));
            }
        }
        keyed.sort_unstable();
        let mut corner_start = Vec::with_capacity(blocks_y * blocks_x + 1);
        let mut next = 0usize;
        for block in 0..=blocks_y * blocks_x {
            while next < keyed.len() && keyed[next].0 < block {
                next += 1;
            }
            corner_start.push(next as u32);
        }
        U2Row {
            coords,
            corner_start,
            corner_points: keyed.iter().map(|e| e.3).collect(),
        }
    }

    pub fn new(g: &Geometry) -> Self {
        let (axis_x, axis_y) = Self::axes(g);
        let coords = (0..g.deth)
            .flat_map(|k| Self::row(g, &axis_x, &axis_y, k).coords)
            .collect();
        // 1/(grid_x grid_y) quadrature weight folded into the x deconvolution.
        let deconvolution_x = axis_x.deconvolution();
        let deconvolution_y: Vec<f32> = axis_y.deconvolution();
        debug_assert_eq!(axis_x.half_width, axis_y.half_width);
        Self {
            taps: axis_x.tap_polynomials(),
            axis_x,
            axis_y,
            deconvolution_x,
            deconvolution_y,
            coords,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Tilt;

    #[test]
    fn u1_cell_lists_are_the_transpose_of_the_taps() {
        let g = Geometry::cube(16, 4, Tilt::from_phi(1.9));
        let t = U1Tables::new(&g);
        let taps = 2 * t.axis.half_width + 1;
        assert_eq!(t.tap_cell.len(), g.deth * taps);
        assert_eq!(*t.cell_start.last().unwrap() as usize, t.tap_cell.len());
        for p in 0..t.axis.grid {
            for e in t.cell_start[p] as usize..t.cell_start[p + 1] as usize {
                let k = t.cell_row[e] as usize;
                let found = (0..taps).any(|i| {
                    t.tap_cell[k * taps + i] as usize == p
                        && t.tap_weight[k * taps + i] == t.cell_weight[e]
                });
                assert!(found, "cell {p} lists row {k} but the row has no such tap");
            }
        }
    }

    /// The runs a block reads (the corner blocks up to `reach - 1` blocks up and left of it,
    /// wrapped) hold every point with a tap in it exactly once, on grids of two blocks (8 cells,
    /// footprints reaching both, some through the wrap) to 20 cells, at every width.
    #[test]
    fn u2_corner_runs_hold_the_points_that_reach_each_block_once() {
        for (n, eps) in [(4, 1e-3), (8, 1e-3), (6, 1e-6), (10, 1e-4)] {
            let g = Geometry {
                eps,
                ..Geometry::cube(n, 6, Tilt::from_phi(1.2))
            };
            let t = U2Tables::new(&g);
            let (ax, ay) = (&t.axis_x, &t.axis_y);
            let (blocks_y, blocks_x) = U2Tables::blocks(ax, ay);
            let (reach_y, reach_x) = U2Tables::reach(ax, ay);
            let (mx, my) = (ax.half_width as i64, ay.half_width as i64);
            let (rows, columns) = (U2_BLOCK_ROWS as i64, U2_BLOCK_COLUMNS as i64);
            let points = g.ntheta() * g.detw;
            for k in 0..g.deth {
                let row = U2Tables::row(&g, ax, ay, k);
                assert_eq!(row.coords, t.coords[k * points..(k + 1) * points]);
                assert_eq!(row.corner_start.len(), blocks_y * blocks_x + 1);
                assert_eq!(row.corner_points.len(), points);
                for block in 0..blocks_y * blocks_x {
                    let (br, bc) = (block / blocks_x, block % blocks_x);
                    let mut read = Vec::new();
                    for i in 0..reach_y {
                        let corner_row = (br + blocks_y - reach_y + 1 + i) % blocks_y;
                        for j in 0..reach_x {
                            let corner = corner_row * blocks_x
                                + (bc + blocks_x - reach_x + 1 + j) % blocks_x;
                            let run = row.corner_start[corner] as usize
                                ..row.corner_start[corner + 1] as usize;
                            read.extend_from_slice(&row.corner_points[run]);
                        }
                    }
                    let reaches = |p: u32| {
                        let [x, y] = row.coords[p as usize];
                        let hits = |base: i64, m: i64, start: i64, len: i64, grid: usize| {
                            (base - m..=base + m).any(|l| {
                                let cell = l.rem_euclid(grid as i64);
                                cell >= start && cell < start + len
                            })
                        };
                        hits(ay.base_cell(y), my, br as i64 * rows, rows, ay.grid)
                            && hits(ax.base_cell(x), mx, bc as i64 * columns, columns, ax.grid)
                    };
                    let mut once = read.clone();
                    once.sort_unstable();
                    once.dedup();
                    assert_eq!(
                        once.len(),
                        read.len(),
                        "row {k}, block {block}: a point read twice"
                    );
                    once.retain(|&p| reaches(p));
                    let expected: Vec<u32> = (0..points as u32).filter(|&p| reaches(p)).collect();
                    assert_eq!(once, expected, "row {k}, block {block}");
                }
            }
        }
    }
}
