// Stage U2: 2D unequally spaced FFT per detector row, from the (y, x) spectrum plane onto the
// points (x_p, y_p) of every angle and detector column, gridding with the kernel of GriddingAxis
// on the 2n1 x 2n2 grid indexed modulo its size. Chunk-local layouts for `rows` detector rows:
//   plane [r][y][x]    (rows, n1, n2)
//   grid  [r][py][px]  (rows, 2 n1, 2 n2)   (2D FFT over the last two axes in between)
//   out   [r][pt]      (rows, ntheta * detw), pt = t * detw + w
// The adjoint gathers too, by blocks of the grid: each block reads the points whose footprint's
// corner lies in the blocks up and left of it (host tables sorted by that corner), evaluating
// their weights itself (u2_spread) or reading them from records written once per point
// (u2_spread_records, then u2_spread_tabulated; AdjointGridding in src/operator/mod.rs).

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
    // How many blocks a footprint reaches from its corner's, in rows and in columns.
    reach_rows: u32,
    reach_columns: u32,
    pad2: u32,
    // 1/sqrt(ntheta), part of the operator's scale, applied with the y weights.
    scale: f32,
    pad3: f32,
    pad4: f32,
    pad5: f32,
    // The kernel's tap polynomials (GriddingAxis::tap_polynomials; both axes share them: they
    // follow eps alone): 2 HALF_WIDTH + 1 taps of TAP_TERMS coefficients, tap-major, ascending
    // powers, four to a vector.
    kernel: array<vec4<f32>, KERNEL_VECTORS>,
}

@group(0) @binding(0) var<storage, read_write> plane: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> grid: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec2<f32>>;
// Deconvolution factors: n2 values for x, then n1 values for y.
@group(0) @binding(3) var<storage, read> deconv: array<f32>;
@group(0) @binding(4) var<storage, read> coords: array<vec2<f32>>;
// Per row, where the points whose footprint's corner (first tap in y and x) lies in each block
// start in corner_points (blocks row-major, one more for the end).
@group(0) @binding(5) var<storage, read> corner_start: array<u32>;
// Per row, the points by (corner block, base row, base column, point index).
@group(0) @binding(6) var<storage, read> corner_points: array<u32>;
@group(0) @binding(7) var<uniform> p: U2Params;
// The tabulated adjoint's records, one per entry of corner_points (row-major over the chunk's
// rows), of 1 + reach_rows + reach_columns vectors (U2Tables::record_vectors): the point's value
// times the scale and the column of its corner's block (a small integer, exact in f32), then its
// weights on the 4 rows of each of the reach_rows blocks down from its corner's, then on the 4
// columns of each of the reach_columns blocks right of it. Written by u2_spread_records, read by
// u2_spread_tabulated; a single vector where the adjoint evaluates its weights.
@group(0) @binding(8) var<storage, read_write> records: array<vec4<f32>>;

override WORKGROUP: u32 = 64u;
// The kernel's half-width m (2m + 1 taps per axis; both axes share it: it follows eps alone), a
// pipeline constant so that the tap loops have fixed trip counts and their weights stay in
// registers.
override HALF_WIDTH: i32 = 2;
// Coefficients per tap polynomial (TapPolynomials::terms).
override TAP_TERMS: i32;

fn thread_id(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * groups.x) * WORKGROUP + lid;
}

// i modulo n for i in (-n, 2n), by selects: the cells wrapped here lie within a half-width of
// the base cell of a coordinate in [-1/2, 1/2], so in [-n/2 - m, n/2 + m] with n > 2m + 1, and
// an integer division per lane (what `%` costs where lanes are emulated) buys nothing.
fn wrap(i: i32, n: u32) -> u32 {
    let below = select(i, i + i32(n), i < 0);
    return u32(select(below, below - i32(n), below >= i32(n)));
}

// The cell nearest grid_len * x (halves up), as GriddingAxis::base_cell picks it: floor(2 grid_len x),
// one rounded product, halved upwards.
fn nearest(x: f32, grid_len: u32) -> i32 {
    return (i32(floor(f32(2u * grid_len) * x)) + 1) >> 1u;
}

fn coefficient(index: i32) -> f32 {
    return p.kernel[index / 4][index % 4];
}

// The weights of the kernel's taps base - m .. base + m (m = HALF_WIDTH) for the point
// grid_len x, base its nearest cell: each tap's polynomial in t = 2 (grid_len x - base) by
// Horner's rule, as TapPolynomials::weights computes them.
fn tap_weights(x: f32, grid_len: u32, base: i32) -> array<f32, MAX_TAPS> {
    let t = 2.0 * (f32(grid_len) * x - f32(base));
    var w: array<f32, MAX_TAPS>;
    for (var i = 0; i < 2 * HALF_WIDTH + 1; i++) {
        var acc = 0.0;
        for (var d = TAP_TERMS - 1; d >= 0; d--) {
            acc = acc * t + coefficient(i * TAP_TERMS + d);
        }
        w[i] = acc;
    }
    return w;
}

// The weight of tap i (in [0, 2m]) of `w`, zero for any other i: a chain of selects, which keeps
// `w` in registers where an index computed per invocation would not.
fn pick(w: array<f32, MAX_TAPS>, i: i32) -> f32 {
    var v = 0.0;
    for (var t = 0; t < 2 * HALF_WIDTH + 1; t++) {
        v = select(v, w[t], t == i);
    }
    return v;
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
    // The separable kernel: the weights of both axes and the wrapped columns once per point.
    let wx = tap_weights(xy.x, p.gx, bx);
    let wy = tap_weights(xy.y, p.gy, by);
    var cols: array<u32, MAX_TAPS>;
    let taps = 2 * HALF_WIDTH + 1;
    for (var i = 0; i < taps; i++) {
        cols[i] = wrap(bx - HALF_WIDTH + i, p.gx);
    }
    let base = r * p.gy * p.gx;
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = 0; j < taps; j++) {
        let row = base + wrap(by - HALF_WIDTH + j, p.gy) * p.gx;
        var line = vec2<f32>(0.0, 0.0);
        for (var i = 0; i < taps; i++) {
            line += wx[i] * grid[row + cols[i]];
        }
        acc += p.scale * wy[j] * line;
    }
    out[g] = acc;
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

struct BlockCounts {
    rows: u32,
    columns: u32,
}

// The blocks of U2_BLOCK_ROWS x U2_BLOCK_COLUMNS cells that tile each row's grid (its sides are
// multiples of 4).
fn spread_blocks() -> BlockCounts {
    return BlockCounts(p.gy / U2_BLOCK_ROWS, p.gx / U2_BLOCK_COLUMNS);
}

// The block of an adjoint invocation and what it reads: its chunk row r, its block (row-major)
// and first cell, where the row's points and corner starts begin, and the first corner column c0
// of its reach, which wraps past the last block column when `wraps`.
struct SpreadBlock {
    r: u32,
    block: u32,
    py0: u32,
    px0: u32,
    list: u32,
    starts: u32,
    c0: u32,
    wraps: bool,
}

// The block of invocation g < rows x blocks.
fn spread_block(g: u32) -> SpreadBlock {
    let n = spread_blocks();
    let blocks = n.rows * n.columns;
    var b: SpreadBlock;
    b.r = g / blocks;
    b.block = g % blocks;
    b.py0 = b.block / n.columns * U2_BLOCK_ROWS;
    b.px0 = b.block % n.columns * U2_BLOCK_COLUMNS;
    b.list = b.r * p.points;
    b.starts = p.corner_start_offset + b.r * (blocks + 1u);
    b.c0 = (b.block % n.columns + n.columns + 1u - p.reach_columns) % n.columns;
    b.wraps = b.c0 + p.reach_columns > n.columns;
    return b;
}

// The entries [x, y) of the sorted points whose corner lies in the block row i of b's reach
// (from the top) and in its corner columns [lo, hi): c0 up to the reach or the row's end
// (s = 0), then from 0 where the reach wraps (s = 1).
fn corner_run(b: SpreadBlock, i: u32, s: u32) -> vec2<u32> {
    let n = spread_blocks();
    let corner_row = (b.block / n.columns + n.rows + 1u - p.reach_rows + i) % n.rows;
    let row_blocks = b.starts + corner_row * n.columns;
    let lo = select(b.c0, 0u, s == 1u);
    let hi = select(min(b.c0 + p.reach_columns, n.columns), b.c0 + p.reach_columns - n.columns, s == 1u);
    return vec2<u32>(corner_start[row_blocks + lo], corner_start[row_blocks + hi]);
}

// Writes a block's sums to its cells of the grid.
fn store_block(b: SpreadBlock, acc: array<array<vec2<f32>, U2_BLOCK_COLUMNS>, U2_BLOCK_ROWS>) {
    for (var k = 0u; k < U2_BLOCK_ROWS; k++) {
        for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
            grid[(b.r * p.gy + b.py0 + k) * p.gx + b.px0 + c] = acc[k][c];
        }
    }
}

// The adjoint is output-driven and needs no workgroup memory: an invocation owns a block of
// U2_BLOCK_ROWS x U2_BLOCK_COLUMNS cells of one row's grid and keeps their sums in registers.
// The points that reach it are those whose footprint's corner lies in the reach_rows x
// reach_columns blocks up and left of it, wrapped (the block itself included): with the points
// sorted by their corner's block (host tables, U2Tables::row), one run per block row, or two
// where the columns wrap, read without a search. Each point adds its value times its x weights
// at the block's columns and its y weights at its rows (tap offsets outside [-m, m] weigh
// nothing: a point of those blocks whose footprint stops short of this one adds zeros). Small
// blocks keep the sums few; the runs keep the loop trip counts of neighbouring invocations
// close. The order of every sum is fixed by the geometry: no atomics, the same bits for any
// chunking. U2_BLOCK_ROWS and U2_BLOCK_COLUMNS come from src/shaders.rs (shared with u2.rs,
// which dispatches one invocation per block of every row's grid).
@compute @workgroup_size(WORKGROUP)
fn u2_spread(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    let n = spread_blocks();
    if (g >= p.rows * n.rows * n.columns) {
        return;
    }
    let b = spread_block(g);
    let entries = p.corner_points_offset + b.list;
    var acc: array<array<vec2<f32>, U2_BLOCK_COLUMNS>, U2_BLOCK_ROWS>;
    for (var i = 0u; i < p.reach_rows; i++) {
        for (var s = 0u; s < select(1u, 2u, b.wraps); s++) {
            let run = corner_run(b, i, s);
            for (var e = run.x; e < run.y; e++) {
                let point = b.list + corner_points[entries + e];
                let xy = coords[p.coords_offset + point];
                let bx = nearest(xy.x, p.gx);
                let by = nearest(xy.y, p.gy);
                let value = out[point];
                let tx = tap_weights(xy.x, p.gx, bx);
                let ty = tap_weights(xy.y, p.gy, by);
                // gx, gy > 2m: a cell is within the wrapped footprint by one offset at most.
                let col = wrap(bx, p.gx);
                let row = wrap(by, p.gy);
                var wx: array<f32, U2_BLOCK_COLUMNS>;
                for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
                    wx[c] = pick(tx, tap(b.px0 + c, col, p.gx, HALF_WIDTH) + HALF_WIDTH);
                }
                let scaled = p.scale * value;
                for (var k = 0u; k < U2_BLOCK_ROWS; k++) {
                    let wyv = pick(ty, tap(b.py0 + k, row, p.gy, HALF_WIDTH) + HALF_WIDTH) * scaled;
                    for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
                        acc[k][c] += wx[c] * wyv;
                    }
                }
            }
        }
    }
    store_block(b, acc);
}

// The weights of the 4 cells of the block `slot` blocks on from the block of a footprint's
// corner, which lies `offset` cells into its block, on an axis of n cells: the cell at `4 slot + c`
// from the block's start is tap `4 slot + c - offset`, wrapped (a reach of every block of a short
// axis may meet the footprint's start again), weighing nothing beyond the footprint.
fn window(w: array<f32, MAX_TAPS>, slot: u32, offset: u32, n: u32) -> vec4<f32> {
    var v: vec4<f32>;
    for (var c = 0u; c < 4u; c++) {
        var i = i32(4u * slot + c) - i32(offset);
        i = select(i, i + i32(n), i < 0);
        v[c] = pick(w, i);
    }
    return v;
}

// The tabulated adjoint's records (see `records`), one invocation per entry of corner_points:
// each point's weights evaluated once, where u2_spread evaluates them at every block it reaches
// (reach_rows x reach_columns times).
@compute @workgroup_size(WORKGROUP)
fn u2_spread_records(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    if (g >= p.rows * p.points) {
        return;
    }
    let list = g / p.points * p.points;
    let point = list + corner_points[p.corner_points_offset + g];
    let xy = coords[p.coords_offset + point];
    let bx = nearest(xy.x, p.gx);
    let by = nearest(xy.y, p.gy);
    let tx = tap_weights(xy.x, p.gx, bx);
    let ty = tap_weights(xy.y, p.gy, by);
    // The footprint's corner cell on each axis (its first tap).
    let corner_x = wrap(bx - HALF_WIDTH, p.gx);
    let corner_y = wrap(by - HALF_WIDTH, p.gy);
    let at = g * (1u + p.reach_rows + p.reach_columns);
    records[at] = vec4<f32>(p.scale * out[point], f32(corner_x / U2_BLOCK_COLUMNS), 0.0);
    for (var j = 0u; j < p.reach_rows; j++) {
        records[at + 1u + j] = window(ty, j, corner_y % U2_BLOCK_ROWS, p.gy);
    }
    for (var j = 0u; j < p.reach_columns; j++) {
        records[at + 1u + p.reach_rows + j] = window(tx, j, corner_x % U2_BLOCK_COLUMNS, p.gx);
    }
}

// u2_spread with the records of u2_spread_records: the same blocks, points, products and order
// of sums (so the same values), each visit reading the point's value and the windows of its
// weights on this block's rows and columns instead of evaluating them.
@compute @workgroup_size(WORKGROUP)
fn u2_spread_tabulated(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    let n = spread_blocks();
    if (g >= p.rows * n.rows * n.columns) {
        return;
    }
    let b = spread_block(g);
    let column = b.block % n.columns;
    let record = 1u + p.reach_rows + p.reach_columns;
    var acc: array<array<vec2<f32>, U2_BLOCK_COLUMNS>, U2_BLOCK_ROWS>;
    for (var i = 0u; i < p.reach_rows; i++) {
        // This block is reach_rows - 1 - i blocks below the corner's.
        let y_slot = p.reach_rows - i;
        for (var s = 0u; s < select(1u, 2u, b.wraps); s++) {
            let run = corner_run(b, i, s);
            for (var e = run.x; e < run.y; e++) {
                let at = (b.list + e) * record;
                let head = records[at];
                // This block is `ahead` blocks right of the corner's column (head.z).
                let ahead = i32(column) - i32(head.z);
                let x_slot = u32(select(ahead, ahead + i32(n.columns), ahead < 0));
                let wy = records[at + y_slot];
                let wx = records[at + 1u + p.reach_rows + x_slot];
                let value = head.xy;
                for (var k = 0u; k < U2_BLOCK_ROWS; k++) {
                    let wyv = wy[k] * value;
                    for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
                        acc[k][c] += wx[c] * wyv;
                    }
                }
            }
        }
    }
    store_block(b, acc);
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
