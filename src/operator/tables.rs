//! Host-side tables of the two gridding stages, computed once per geometry in f64 and rounded
//! once. Forward and adjoint read the same f32 weights, so they are exact adjoints of each other up
//! to summation rounding, and every sum runs in a fixed order (no atomics): same input, same bits.

use super::geometry::Geometry;
use super::gridding::GriddingAxis;

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
    /// `(x, y)` frequency of every point, layout `[k][t][w]`.
    pub coords: Vec<[f32; 2]>,
}

/// The U2 tables of one detector row, as the kernels read them.
pub(crate) struct U2Row {
    /// `(x, y)` frequency of every point `t * detw + w`.
    pub coords: Vec<[f32; 2]>,
    /// For each grid row py (and one past the end), the first sorted point whose base cell row
    /// is >= py: `grid_y + 1` entries.
    pub row_start: Vec<u32>,
    /// (point index, base column mod grid_x), sorted by (base row, base column, index).
    pub sorted: Vec<[u32; 2]>,
}

impl U2Tables {
    /// The gridding axes of U2 for `g`: (x along n2, y along n1).
    pub fn axes(g: &Geometry) -> (GriddingAxis, GriddingAxis) {
        (
            GriddingAxis::new(g.n2, g.eps),
            GriddingAxis::new(g.n1, g.eps),
        )
    }

    /// The tables of detector row `k` alone: what a streaming operator uploads for a chunk, and
    /// what the whole tables are made of, so both hold the same values.
    pub fn row(g: &Geometry, axis_x: &GriddingAxis, axis_y: &GriddingAxis, k: usize) -> U2Row {
        let (gx, gy) = (axis_x.grid as i64, axis_y.grid as i64);
        let points = g.ntheta() * g.detw;
        let mut coords = Vec::with_capacity(points);
        let mut keyed: Vec<(u32, u32, u32)> = Vec::with_capacity(points);
        for t in 0..g.ntheta() {
            for w in 0..g.detw {
                let xy = g.xy_frequency(t, k, w);
                coords.push(xy);
                let bx = axis_x.base_cell(xy[0]).rem_euclid(gx) as u32;
                let by = axis_y.base_cell(xy[1]).rem_euclid(gy) as u32;
                keyed.push((by, bx, (t * g.detw + w) as u32));
            }
        }
        keyed.sort_unstable();
        let mut row_start = Vec::with_capacity(axis_y.grid + 1);
        let mut next = 0usize;
        for py in 0..=axis_y.grid as u32 {
            while next < keyed.len() && keyed[next].0 < py {
                next += 1;
            }
            row_start.push(next as u32);
        }
        U2Row {
            coords,
            row_start,
            sorted: keyed.iter().map(|e| [e.2, e.1]).collect(),
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
        Self {
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

    #[test]
    fn u1_cell_lists_are_the_transpose_of_the_taps() {
        let g = Geometry::cube(16, 4, 1.9);
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

    #[test]
    fn u2_points_are_sorted_by_cell_and_every_point_appears_once() {
        let g = Geometry::cube(8, 6, 1.2);
        let t = U2Tables::new(&g);
        let points = g.ntheta() * g.detw;
        for k in 0..g.deth {
            let row = U2Tables::row(&g, &t.axis_x, &t.axis_y, k);
            assert_eq!(row.coords, t.coords[k * points..(k + 1) * points]);
            let mut seen = vec![false; points];
            row.sorted.iter().for_each(|e| seen[e[0] as usize] = true);
            assert!(seen.iter().all(|&s| s));
            let starts = &row.row_start;
            assert_eq!(starts.len(), t.axis_y.grid + 1);
            assert_eq!(starts[t.axis_y.grid] as usize, points);
            for py in 0..t.axis_y.grid {
                for e in &row.sorted[starts[py] as usize..starts[py + 1] as usize] {
                    let xy = row.coords[e[0] as usize];
                    let by = t.axis_y.base_cell(xy[1]).rem_euclid(t.axis_y.grid as i64) as usize;
                    let bx = t.axis_x.base_cell(xy[0]).rem_euclid(t.axis_x.grid as i64) as u32;
                    assert_eq!(by, py);
                    assert_eq!(bx, e[1]);
                }
            }
        }
    }
}
