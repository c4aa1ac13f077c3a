// Stage U2: 2D unequally spaced FFT per detector row, from the (y, x) spectrum plane onto the
// points (x_p, y_p) of every angle and detector column, gridding with the kernel of GriddingAxis
// on the 2n1 x 2n2 grid indexed modulo its size. Chunk-local layouts for `rows` detector rows:
//   plane [r][y][x]    (rows, n1, n2)
//   grid  [r][py][px]  (rows, 2 n1, 2 n2)   (2D FFT over the last two axes in between)
//   out   [r][pt]      (rows, ntheta * detw), pt = t * detw + w
// The adjoint gathers too, by blocks of the grid (u2_spread): each block reads the points whose
// footprint's corner lies in the blocks up and left of it (host tables sorted by that corner).

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
    // The blocks tile the grid (its sides are multiples of 4).
    let blocks_y = p.gy / U2_BLOCK_ROWS;
    let blocks_x = p.gx / U2_BLOCK_COLUMNS;
    let blocks = blocks_y * blocks_x;
    if (g >= p.rows * blocks) {
        return;
    }
    let r = g / blocks;
    let block = g % blocks;
    let py0 = block / blocks_x * U2_BLOCK_ROWS;
    let px0 = block % blocks_x * U2_BLOCK_COLUMNS;
    let list = r * p.points;
    let starts = p.corner_start_offset + r * (blocks + 1u);
    let entries = p.corner_points_offset + list;
    // The first corner column, and whether the reach wraps past the last block column.
    let c0 = (block % blocks_x + blocks_x + 1u - p.reach_columns) % blocks_x;
    let wraps = c0 + p.reach_columns > blocks_x;
    var acc: array<array<vec2<f32>, U2_BLOCK_COLUMNS>, U2_BLOCK_ROWS>;
    for (var i = 0u; i < p.reach_rows; i++) {
        let corner_row = (block / blocks_x + blocks_y + 1u - p.reach_rows + i) % blocks_y;
        let row_blocks = starts + corner_row * blocks_x;
        for (var s = 0u; s < select(1u, 2u, wraps); s++) {
            // Corner columns [lo, hi): c0 up to the reach or the row's end, then from 0.
            let lo = select(c0, 0u, s == 1u);
            let hi = select(min(c0 + p.reach_columns, blocks_x), c0 + p.reach_columns - blocks_x, s == 1u);
            let last = corner_start[row_blocks + hi];
            for (var e = corner_start[row_blocks + lo]; e < last; e++) {
                let point = list + corner_points[entries + e];
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
                    wx[c] = pick(tx, tap(px0 + c, col, p.gx, HALF_WIDTH) + HALF_WIDTH);
                }
                let scaled = p.scale * value;
                for (var k = 0u; k < U2_BLOCK_ROWS; k++) {
                    let wyv = pick(ty, tap(py0 + k, row, p.gy, HALF_WIDTH) + HALF_WIDTH) * scaled;
                    for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
                        acc[k][c] += wx[c] * wyv;
                    }
                }
            }
        }
    }
    for (var k = 0u; k < U2_BLOCK_ROWS; k++) {
        for (var c = 0u; c < U2_BLOCK_COLUMNS; c++) {
            grid[(r * p.gy + py0 + k) * p.gx + px0 + c] = acc[k][c];
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
