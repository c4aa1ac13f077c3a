// Stage U2: 2D unequally spaced FFT per detector row, from the (y, x) spectrum plane onto the
// points (x_p, y_p) of every angle and detector column, with Gaussian gridding on the 2n1 x 2n2
// grid indexed modulo its size. Chunk-local layouts for `rows` detector rows:
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
    my: i32,
    mx: i32,
    coords_offset: u32,
    row_start_offset: u32,
    sorted_offset: u32,
    pad0: u32,
    // The Gaussian's exponent per squared grid cell, E (x, then y).
    ex: f32,
    ey: f32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> plane: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> grid: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec2<f32>>;
// Deconvolution factors: n2 values for x, then n1 values for y; then the point-independent
// factors of the taps' weights, c e^{-E i^2} for i = -m..m: 2 mx + 1 for x, then 2 my + 1 for y.
@group(0) @binding(3) var<storage, read> deconv: array<f32>;
@group(0) @binding(4) var<storage, read> coords: array<vec2<f32>>;
@group(0) @binding(5) var<storage, read> row_start: array<u32>;
// (point index, base column mod gx), sorted by (base row, base column, point index) per row.
@group(0) @binding(6) var<storage, read> sorted: array<vec2<u32>>;
@group(0) @binding(7) var<uniform> p: U2Params;

override WORKGROUP: u32 = 64u;

fn thread_id(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * groups.x) * WORKGROUP + lid;
}

fn wrap(i: i32, n: u32) -> u32 {
    let m = i % i32(n);
    return u32(select(m, m + i32(n), m < 0));
}

// The Gaussian weight of the tap at offset i from a point's base cell, the point t cells above
// that cell (0 <= t < 1), is c e^{-E (i - t)^2} = [c e^{-E i^2}] e^{-E t^2} (e^{2 E t})^i: a
// table factor (`tap_x`, `tap_y`), a factor per point, and a power of g = e^{2 E t}. The powers are
// products of g (or 1/g) that start at the tap nearest the point, so that a weight at offset i
// carries about |i| roundings, and the largest weights the fewest: two exponentials per point and
// axis instead of one per tap.
struct Axis {
    // Cells of the point above its base cell, in [0, 1).
    t: f32,
    base: i32,
    // e^{2 E t} and its inverse.
    up: f32,
    down: f32,
}

fn axis(x: f32, grid_len: u32, e: f32) -> Axis {
    let s = f32(grid_len) * x;
    let base = floor(s);
    let t = s - base;
    let up = exp(2.0 * e * t);
    return Axis(t, i32(base), up, 1.0 / up);
}

// g^i by |i| products (|i| <= m).
fn power(a: Axis, i: i32) -> f32 {
    let f = select(a.up, a.down, i < 0);
    var x = 1.0;
    for (var k = 0; k < abs(i); k++) {
        x *= f;
    }
    return x;
}

fn tap_x(i: i32) -> f32 {
    return deconv[p.n2 + p.n1 + u32(i + p.mx)];
}

fn tap_y(j: i32) -> f32 {
    return deconv[p.n2 + p.n1 + u32(2 * p.mx + 1) + u32(j + p.my)];
}

// e^{-E t^2} of both axes: the factor of a point's weights shared by all its taps.
fn point_factor(x: Axis, y: Axis) -> f32 {
    return exp(-(p.ex * x.t * x.t + p.ey * y.t * y.t));
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
    let ax = axis(xy.x, p.gx, p.ex);
    let ay = axis(xy.y, p.gy, p.ey);
    // The separable kernel: the x weights and wrapped columns once per point, reused by every row;
    // the powers of g from the centre tap outwards.
    var wx: array<f32, 15>;
    var cols: array<u32, 15>;
    var wy: array<f32, 15>;
    var rise = 1.0;
    var fall = 1.0;
    wx[p.mx] = tap_x(0);
    for (var i = 1; i <= p.mx; i++) {
        rise *= ax.up;
        fall *= ax.down;
        wx[p.mx + i] = tap_x(i) * rise;
        wx[p.mx - i] = tap_x(-i) * fall;
    }
    rise = 1.0;
    fall = 1.0;
    wy[p.my] = tap_y(0);
    for (var j = 1; j <= p.my; j++) {
        rise *= ay.up;
        fall *= ay.down;
        wy[p.my + j] = tap_y(j) * rise;
        wy[p.my - j] = tap_y(-j) * fall;
    }
    let taps = u32(2 * p.mx + 1);
    for (var i = 0u; i < taps; i++) {
        cols[i] = wrap(ax.base - p.mx + i32(i), p.gx);
    }
    let base = r * p.gy * p.gx;
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = -p.my; j <= p.my; j++) {
        let row = base + wrap(ay.base + j, p.gy) * p.gx;
        var line = vec2<f32>(0.0, 0.0);
        for (var i = 0u; i < taps; i++) {
            line += wx[i] * grid[row + cols[i]];
        }
        acc += wy[u32(j + p.my)] * line;
    }
    out[g] = point_factor(ax, ay) * acc;
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
// the base rows that can reach the block (py0 - my .. py0 + U2_BLOCK_ROWS - 1 + my) in ascending order;
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
    // covers the grid (gx > 2 mx: a point then still reaches each column by one tap at most).
    let lo = i32(px0) - p.mx;
    let hi = i32(px0 + U2_BLOCK_COLUMNS - 1u) + p.mx;
    var seg_lo = array<u32, 2>(u32(max(lo, 0)), 0u);
    var seg_hi = array<u32, 2>(u32(min(hi, i32(p.gx) - 1)), 0u);
    var segments = 1u;
    if (U2_BLOCK_COLUMNS + 2u * u32(p.mx) >= p.gx) {
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
    // block and its reach cover more than the grid, a point is met twice, but gy > 2 my leaves at
    // most one of its two offsets within the footprint for any cell.
    for (var b = i32(py0) - p.my; b <= i32(py0 + U2_BLOCK_ROWS - 1u) + p.my; b++) {
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
                let ax = axis(xy.x, p.gx, p.ex);
                let ay = axis(xy.y, p.gy, p.ey);
                let value = point_factor(ax, ay) * out[list + entry.x];
                // The block's columns within the footprint have consecutive taps (gx > 2 mx + 1);
                // the powers start at the one nearest the point.
                var taps: array<i32, U2_BLOCK_COLUMNS>;
                var lo = p.mx + 1;
                var hi = -p.mx - 1;
                for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
                    taps[c] = tap(px0 + c, entry.y, p.gx, p.mx);
                    if (abs(taps[c]) <= p.mx) {
                        lo = min(lo, taps[c]);
                        hi = max(hi, taps[c]);
                    }
                }
                let ia = clamp(0, lo, hi);
                let anchor_x = power(ax, ia);
                var wx: array<f32, U2_BLOCK_COLUMNS>;
                var rise = anchor_x;
                for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
                    let i = taps[c];
                    if (i > ia && i <= p.mx) {
                        rise *= ax.up;
                    }
                    wx[c] = select(0.0, tap_x(clamp(i, -p.mx, p.mx)) * rise, i >= ia && abs(i) <= p.mx);
                }
                var fall = anchor_x;
                for (var c = U2_BLOCK_COLUMNS; c > 0u; c--) {
                    let i = taps[c - 1u];
                    if (i < ia && abs(i) <= p.mx) {
                        fall *= ax.down;
                        wx[c - 1u] = tap_x(i) * fall;
                    }
                }
                // The rows' taps are consecutive too: j = py0 + k - b.
                let j0 = i32(py0) - b;
                let ja = clamp(0, max(j0, -p.my), min(j0 + i32(U2_BLOCK_ROWS) - 1, p.my));
                let anchor_y = power(ay, ja);
                var wy: array<vec2<f32>, U2_BLOCK_ROWS>;
                rise = anchor_y;
                for (var k = 0u; k < U2_BLOCK_ROWS; k++) {
                    let j = j0 + i32(k);
                    if (j > ja && j <= p.my) {
                        rise *= ay.up;
                    }
                    wy[k] = select(vec2<f32>(0.0), tap_y(clamp(j, -p.my, p.my)) * rise * value, j >= ja && j <= p.my);
                }
                fall = anchor_y;
                for (var k = U2_BLOCK_ROWS; k > 0u; k--) {
                    let j = j0 + i32(k - 1u);
                    if (j < ja && j >= -p.my) {
                        fall *= ay.down;
                        wy[k - 1u] = tap_y(j) * fall * value;
                    }
                }
                for (var k = 0u; k < U2_BLOCK_ROWS; k++) {
                    let j = j0 + i32(k);
                    if (abs(j) <= p.my) {
                        for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
                            acc[k][c] += wx[c] * wy[k];
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
