// Stage U2: 2D unequally spaced FFT per detector row, from the (y, x) spectrum plane onto the
// points (x_p, y_p) of every angle and detector column, with Gaussian gridding on the 2n1 x 2n2
// grid indexed modulo its size. Chunk-local layouts for `rows` detector rows:
//   plane [r][y][x]    (rows, n1, n2)
//   grid  [r][py][px]  (rows, 2 n1, 2 n2)   (2D FFT over the last two axes in between)
//   out   [r][pt]      (rows, ntheta * detw), pt = t * detw + w
// The adjoint gathers too, by tiles of the grid (u2_spread): the points near each tile are
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
    cx: f32,
    cy: f32,
    ex: f32,
    ey: f32,
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

fn thread_id(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * groups.x) * WORKGROUP + lid;
}

fn wrap(i: i32, n: u32) -> u32 {
    let m = i % i32(n);
    return u32(select(m, m + i32(n), m < 0));
}

fn weight(l: i32, xi: f32, grid_len: u32, c: f32, e: f32) -> f32 {
    let d = f32(l) / f32(grid_len) - xi;
    return c * exp(-e * d * d);
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
    let bx = i32(floor(f32(p.gx) * xy.x));
    let by = i32(floor(f32(p.gy) * xy.y));
    // The separable kernel: the x weights and wrapped columns once per point, reused by every row.
    var wx: array<f32, 15>;
    var cols: array<u32, 15>;
    let taps = u32(2 * p.mx + 1);
    for (var i = 0u; i < taps; i++) {
        let l = bx - p.mx + i32(i);
        wx[i] = weight(l, xy.x, p.gx, p.cx, p.ex);
        cols[i] = wrap(l, p.gx);
    }
    let base = r * p.gy * p.gx;
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = -p.my; j <= p.my; j++) {
        let row = base + wrap(by + j, p.gy) * p.gx;
        var line = vec2<f32>(0.0, 0.0);
        for (var i = 0u; i < taps; i++) {
            line += wx[i] * grid[row + cols[i]];
        }
        acc += weight(by + j, xy.y, p.gy, p.cy, p.ey) * line;
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

// The adjoint is output-driven by tiles (cuFINUFFT's subproblems, gathering): a workgroup owns
// U2_TILE x U2_TILE cells of one row's grid, one invocation per cell. The points whose footprint
// can reach the tile are those whose base cell lies in the tile widened by the kernel's
// half-width: one column range per base row of that window, found in the sorted lists once per
// tile. The workgroup walks them in batches of U2_BATCH; for each point one invocation evaluates
// the separable kernel once, at the tile's U2_TILE columns and rows (2 U2_TILE exponentials instead
// of 2 per cell and point), into workgroup memory; then every invocation adds the batch's points
// to its cell in list order. The order of every sum is fixed by the geometry (window rows in
// order, their column segments, the sorted lists): no atomics, the same bits for any chunking.
// U2_TILE and U2_BATCH = U2_TILE^2 come from src/shaders.rs (shared with u2.rs, which dispatches
// one workgroup per tile of every row).
// Half-widths are at most 7 (geometry.rs, gridding_minimum): at most U2_TILE + 14 base rows,
// each with at most two column segments (the window wraps around the grid).
const U2_RANGES: u32 = 2u * (U2_TILE + 14u);

var<workgroup> range_first: array<u32, U2_RANGES>;
var<workgroup> range_len: array<u32, U2_RANGES>;
// Where each range starts in the tile's list of points (ranges one after another), and the
// list's length after the last.
var<workgroup> range_start: array<u32, U2_RANGES + 1u>;
var<workgroup> window_points: u32;
// The batch: the x weights of each point at the tile's columns, and its value times its y
// weights at the tile's rows.
var<workgroup> batch_wx: array<array<f32, U2_TILE>, U2_BATCH>;
var<workgroup> batch_wyv: array<array<vec2<f32>, U2_TILE>, U2_BATCH>;

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

@compute @workgroup_size(U2_BATCH)
fn u2_spread(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let tiles_x = (p.gx + U2_TILE - 1u) / U2_TILE;
    let tiles = tiles_x * ((p.gy + U2_TILE - 1u) / U2_TILE);
    let tile = wid.x + wid.y * groups.x;
    if (tile >= p.rows * tiles) {
        return;
    }
    let r = tile / tiles;
    let ty0 = (tile % tiles) / tiles_x * U2_TILE;
    let tx0 = (tile % tiles) % tiles_x * U2_TILE;
    let tile_h = min(U2_TILE, p.gy - ty0);
    let tile_w = min(U2_TILE, p.gx - tx0);
    let list = r * p.points;
    let starts = p.row_start_offset + r * (p.gy + 1u);
    // The window's base rows (all of them, once each, when it covers the grid) ...
    let whole_y = tile_h + 2u * u32(p.my) >= p.gy;
    let window_rows = select(tile_h + 2u * u32(p.my), p.gy, whole_y);
    let first_row = select(i32(ty0) - p.my, 0, whole_y);
    // ... and its base columns as at most two ascending segments.
    let lo = i32(tx0) - p.mx;
    let hi = i32(tx0 + tile_w - 1u) + p.mx;
    var seg_lo = array<u32, 2>(u32(max(lo, 0)), 0u);
    var seg_hi = array<u32, 2>(u32(min(hi, i32(p.gx) - 1)), 0u);
    var segments = 1u;
    if (tile_w + 2u * u32(p.mx) >= p.gx) {
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
    let ranges = window_rows * segments;
    if (lid < ranges) {
        let bin_row = wrap(first_row + i32(lid / segments), p.gy);
        let s = lid % segments;
        let first = row_start[starts + bin_row];
        let last = row_start[starts + bin_row + 1u];
        let a = lower_bound(list + first, list + last, seg_lo[s]);
        range_first[lid] = a;
        range_len[lid] = lower_bound(a, list + last, seg_hi[s] + 1u) - a;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var at = 0u;
        for (var k = 0u; k < ranges; k++) {
            range_start[k] = at;
            at += range_len[k];
        }
        range_start[ranges] = at;
        window_points = at;
    }
    let total = workgroupUniformLoad(&window_points);
    let row = lid / U2_TILE;
    let col = lid % U2_TILE;
    // The list is in window-row order, so the points whose base row is within the half-width of
    // this cell's row (window rows row .. row + 2 my) are one span of it: the cell skips the rest
    // (all of it is needed when the window covers the grid).
    var span_lo = 0u;
    var span_hi = total;
    if (!whole_y) {
        span_lo = range_start[min(row * segments, ranges)];
        span_hi = range_start[min((row + 2u * u32(p.my) + 1u) * segments, ranges)];
    }
    var acc = vec2<f32>(0.0, 0.0);
    for (var b0 = 0u; b0 < total; b0 += U2_BATCH) {
        let s = b0 + lid;
        if (s < total) {
            // The last range starting at or before s holds it (empty ranges share starts).
            var a = 0u;
            var z = ranges;
            while (z - a > 1u) {
                let mid = (a + z) / 2u;
                if (range_start[mid] <= s) {
                    a = mid;
                } else {
                    z = mid;
                }
            }
            let entry = sorted[p.sorted_offset + range_first[a] + (s - range_start[a])];
            let xy = coords[p.coords_offset + list + entry.x];
            let value = out[list + entry.x];
            let bx = i32(floor(f32(p.gx) * xy.x));
            let by = i32(floor(f32(p.gy) * xy.y));
            let by_cell = wrap(by, p.gy);
            for (var c = 0u; c < U2_TILE; c++) {
                let i = tap(tx0 + c, entry.y, p.gx, p.mx);
                var w = 0.0;
                if (abs(i) <= p.mx) {
                    w = weight(bx + i, xy.x, p.gx, p.cx, p.ex);
                }
                batch_wx[lid][c] = w;
                let j = tap(ty0 + c, by_cell, p.gy, p.my);
                var wy = 0.0;
                if (abs(j) <= p.my) {
                    wy = weight(by + j, xy.y, p.gy, p.cy, p.ey);
                }
                batch_wyv[lid][c] = wy * value;
            }
        }
        workgroupBarrier();
        let q_end = min(span_hi, b0 + U2_BATCH);
        for (var q = max(span_lo, b0); q < q_end; q++) {
            acc += batch_wx[q - b0][col] * batch_wyv[q - b0][row];
        }
        workgroupBarrier();
    }
    if (row < tile_h && col < tile_w) {
        grid[(r * p.gy + ty0 + row) * p.gx + tx0 + col] = acc;
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
