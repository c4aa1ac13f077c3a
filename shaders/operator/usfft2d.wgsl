// Stage U2: 2D unequally spaced FFT per detector row, from the (y, x) spectrum plane onto the
// points (x_p, y_p) of every angle and detector column, gridding with the kernel of GriddingAxis
// on the 2n1 x 2n2 grid indexed modulo its size. Chunk-local layouts for `rows` detector rows:
//   plane [r][y][x]    (rows, n1, n2)
//   grid  [r][py][px]  (rows, 2 n1, 2 n2)   (2D FFT over the last two axes in between)
//   out   [r][pt]      (rows, ntheta * detw), pt = t * detw + w
// The adjoint gathers too, by blocks of the grid (u2_spread): the points near each block are
// found through the per-row point lists sorted by base cell (host tables).

struct U2Params {
    n1: u32,
    n2: u32,
    gy: u32,
    gx: u32,
    rows: u32,
    points: u32,
    coords_offset: u32,
    row_start_offset: u32,
    sorted_offset: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    // 1/sqrt(ntheta), part of the operator's scale, applied with the y weights.
    scale: f32,
    // The kernel's shape and 2 / width (both axes share them: the width follows eps alone).
    beta: f32,
    zscale: f32,
    pad3: f32,
}

@group(0) @binding(0) var<storage, read_write> plane: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> grid: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec2<f32>>;
// Deconvolution factors: n2 values for x, then n1 values for y.
@group(0) @binding(3) var<storage, read> deconv: array<f32>;
@group(0) @binding(4) var<storage, read> coords: array<vec2<f32>>;
@group(0) @binding(5) var<storage, read> row_start: array<u32>;
// (point index, base column mod gx), sorted by (base row, base column, point index) per row.
@group(0) @binding(6) var<storage, read> sorted: array<vec2<u32>>;
@group(0) @binding(7) var<uniform> p: U2Params;

override WORKGROUP: u32 = 64u;
// The kernel's half-width m (2m + 1 taps per axis; both axes share it: it follows eps alone), a
// pipeline constant so that the tap loops have fixed trip counts and their weights stay in
// registers.
override HALF_WIDTH: i32 = 2;

fn thread_id(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * groups.x) * WORKGROUP + lid;
}

fn wrap(i: i32, n: u32) -> u32 {
    let m = i % i32(n);
    return u32(select(m, m + i32(n), m < 0));
}

// The cell nearest grid_len * x (halves up), as GriddingAxis::base_cell picks it: floor(2 grid_len x),
// one rounded product, halved upwards.
fn nearest(x: f32, grid_len: u32) -> i32 {
    return (i32(floor(f32(2u * grid_len) * x)) + 1) >> 1u;
}

// The gridding kernel at grid frequency l for the point x: e^{beta (sqrt(1 - z^2) - 1)} with
// z = (l - grid_len x) 2 / width, zero beyond the kernel's support (|z| >= 1).
fn weight(l: i32, x: f32, grid_len: u32) -> f32 {
    let z = (f32(l) - f32(grid_len) * x) * p.zscale;
    let inside = 1.0 - z * z;
    return select(0.0, exp(p.beta * (sqrt(max(inside, 0.0)) - 1.0)), inside > 0.0);
}

@compute @workgroup_size(WORKGROUP)
fn u2_divker(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    let cells = p.gy * p.gx;
    if (g >= p.rows * cells) {
        return;
    }
    let r = g / cells;
    let py = (g % cells) / p.gx;
    let px = g % p.gx;
    let hy = p.n1 / 2u;
    let hx = p.n2 / 2u;
    var value = vec2<f32>(0.0, 0.0);
    let y_in = py < hy || py >= p.gy - hy;
    let x_in = px < hx || px >= p.gx - hx;
    if (y_in && x_in) {
        let y = (py + hy) % p.gy;
        let x = (px + hx) % p.gx;
        value = plane[(r * p.n1 + y) * p.n2 + x] * (deconv[x] * deconv[p.n2 + y]);
    }
    grid[g] = value;
}

@compute @workgroup_size(WORKGROUP)
fn u2_gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    if (g >= p.rows * p.points) {
        return;
    }
    let r = g / p.points;
    let xy = coords[p.coords_offset + g];
    let bx = nearest(xy.x, p.gx);
    let by = nearest(xy.y, p.gy);
    // The separable kernel: the x weights and wrapped columns once per point, reused by every row.
    var wx: array<f32, 15>;
    var cols: array<u32, 15>;
    let taps = u32(2 * HALF_WIDTH + 1);
    for (var i = 0u; i < taps; i++) {
        let l = bx - HALF_WIDTH + i32(i);
        wx[i] = weight(l, xy.x, p.gx);
        cols[i] = wrap(l, p.gx);
    }
    let base = r * p.gy * p.gx;
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = -HALF_WIDTH; j <= HALF_WIDTH; j++) {
        let row = base + wrap(by + j, p.gy) * p.gx;
        var line = vec2<f32>(0.0, 0.0);
        for (var i = 0u; i < taps; i++) {
            line += wx[i] * grid[row + cols[i]];
        }
        acc += p.scale * weight(by + j, xy.y, p.gy) * line;
    }
    out[g] = acc;
}

// First entry in [lo, hi) of the sorted list whose base column is >= column.
fn lower_bound(lo: u32, hi: u32, column: u32) -> u32 {
    var a = lo;
    var b = hi;
    while (a < b) {
        let mid = (a + b) / 2u;
        if (sorted[p.sorted_offset + mid].y < column) {
            a = mid + 1u;
        } else {
            b = mid;
        }
    }
    return a;
}

// The tap offset in [-m, m] that takes base cell `base` (mod n) to cell `cell` (mod n), or a
// value outside [-m, m] when the cell is beyond the footprint (n > 2m + 1: at most one offset).
fn tap(cell: u32, base: u32, n: u32, m: i32) -> i32 {
    var i = i32(cell) - i32(base);
    if (i > m) {
        i -= i32(n);
    } else if (i < -m) {
        i += i32(n);
    }
    return i;
}

// The adjoint is output-driven and needs no workgroup memory: an invocation owns a block of
// U2_BLOCK_ROWS rows x U2_BLOCK_COLUMNS columns of one row's grid and keeps their sums in registers. It walks
// the base rows that can reach the block (py0 - m .. py0 + U2_BLOCK_ROWS - 1 + m, m = HALF_WIDTH) in ascending order;
// in each, the points whose base column lies within the half-width of the block's columns are one
// or two runs of the row's point list sorted by base cell (host tables), found by one binary
// search per run and walked until the base column leaves the window. Each point read adds its
// value times its separable weights to the cells of its footprint in the block: its x weights at
// the block's columns and its y weights at its rows, each evaluated once per point and block.
// Neighbouring invocations own neighbouring blocks of one block row, so they walk the same lists
// side by side, and the row offsets (hence the branches on them) are the same for all of them.
// The order of every sum is fixed by the geometry (base rows ascending, then the sorted lists):
// no atomics, the same bits for any chunking. U2_BLOCK_ROWS and U2_BLOCK_COLUMNS come from src/shaders.rs
// (shared with u2.rs, which dispatches one invocation per block of every row's grid).
@compute @workgroup_size(WORKGROUP)
fn u2_spread(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    let blocks_y = (p.gy + U2_BLOCK_ROWS - 1u) / U2_BLOCK_ROWS;
    let blocks_x = (p.gx + U2_BLOCK_COLUMNS - 1u) / U2_BLOCK_COLUMNS;
    if (g >= p.rows * blocks_y * blocks_x) {
        return;
    }
    let r = g / (blocks_y * blocks_x);
    let py0 = (g / blocks_x) % blocks_y * U2_BLOCK_ROWS;
    let px0 = g % blocks_x * U2_BLOCK_COLUMNS;
    let list = r * p.points;
    let starts = p.row_start_offset + r * (p.gy + 1u);
    // The window's base columns as at most two ascending segments, or the whole row when it
    // covers the grid (gx > 2 HALF_WIDTH: a point then still reaches each column by one tap at most).
    let lo = i32(px0) - HALF_WIDTH;
    let hi = i32(px0 + U2_BLOCK_COLUMNS - 1u) + HALF_WIDTH;
    var seg_lo = array<u32, 2>(u32(max(lo, 0)), 0u);
    var seg_hi = array<u32, 2>(u32(min(hi, i32(p.gx) - 1)), 0u);
    var segments = 1u;
    if (U2_BLOCK_COLUMNS + 2u * u32(HALF_WIDTH) >= p.gx) {
        seg_lo[0] = 0u;
        seg_hi[0] = p.gx - 1u;
    } else if (lo < 0) {
        seg_lo = array<u32, 2>(u32(lo + i32(p.gx)), 0u);
        seg_hi = array<u32, 2>(p.gx - 1u, u32(hi));
        segments = 2u;
    } else if (hi >= i32(p.gx)) {
        seg_hi[0] = p.gx - 1u;
        seg_hi[1] = u32(hi - i32(p.gx));
        segments = 2u;
    }
    var acc: array<array<vec2<f32>, U2_BLOCK_COLUMNS>, U2_BLOCK_ROWS>;
    // Unwrapped base rows: a point's offset from the block's rows is then py0 + k - b. When the
    // block and its reach cover more than the grid, a point is met twice, but gy > 2 HALF_WIDTH leaves at
    // most one of its two offsets within the footprint for any cell.
    for (var b = i32(py0) - HALF_WIDTH; b <= i32(py0 + U2_BLOCK_ROWS - 1u) + HALF_WIDTH; b++) {
        let bin_row = wrap(b, p.gy);
        let first = list + row_start[starts + bin_row];
        let last = list + row_start[starts + bin_row + 1u];
        for (var s = 0u; s < segments; s++) {
            for (var e = lower_bound(first, last, seg_lo[s]); e < last; e++) {
                let entry = sorted[p.sorted_offset + e];
                if (entry.y > seg_hi[s]) {
                    break;
                }
                let xy = coords[p.coords_offset + list + entry.x];
                let bx = nearest(xy.x, p.gx);
                let by = nearest(xy.y, p.gy);
                let value = out[list + entry.x];
                var wx: array<f32, U2_BLOCK_COLUMNS>;
                for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
                    let i = tap(px0 + c, entry.y, p.gx, HALF_WIDTH);
                    wx[c] = select(0.0, weight(bx + i, xy.x, p.gx), abs(i) <= HALF_WIDTH);
                }
                for (var k = 0u; k < U2_BLOCK_ROWS; k++) {
                    let j = i32(py0 + k) - b;
                    if (abs(j) <= HALF_WIDTH) {
                        let wyv = p.scale * weight(by + j, xy.y, p.gy) * value;
                        for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
                            acc[k][c] += wx[c] * wyv;
                        }
                    }
                }
            }
        }
    }
    for (var k = 0u; k < U2_BLOCK_ROWS; k++) {
        for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
            if (py0 + k < p.gy && px0 + c < p.gx) {
                grid[(r * p.gy + py0 + k) * p.gx + px0 + c] = acc[k][c];
            }
        }
    }
}

@compute @workgroup_size(WORKGROUP)
fn u2_divker_adjoint(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    let plane_len = p.n1 * p.n2;
    if (g >= p.rows * plane_len) {
        return;
    }
    let r = g / plane_len;
    let y = (g % plane_len) / p.n2;
    let x = g % p.n2;
    let py = (y + p.gy - p.n1 / 2u) % p.gy;
    let px = (x + p.gx - p.n2 / 2u) % p.gx;
    plane[g] = grid[(r * p.gy + py) * p.gx + px] * (deconv[x] * deconv[p.n2 + y]);
}
