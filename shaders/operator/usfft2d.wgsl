// Stage U2: 2D unequally spaced FFT per detector row, from the (y, x) spectrum plane onto the
// points (x_p, y_p) of every angle and detector column, with Gaussian gridding on the 2n1 x 2n2
// grid indexed modulo its size. Chunk-local layouts for `rows` detector rows:
//   plane [r][y][x]    (rows, n1, n2)
//   grid  [r][py][px]  (rows, 2 n1, 2 n2)   (2D FFT over the last two axes in between)
//   out   [r][pt]      (rows, ntheta * detw), pt = t * detw + w
// The adjoint gathers too: each grid cell visits the points whose base cell lies within the
// kernel's half-width, found through the per-row point lists sorted by base cell (host tables).

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
    var wx: array<f32, 32>;
    for (var i = -p.mx; i <= p.mx; i++) {
        wx[i + p.mx] = weight(bx + i, xy.x, p.gx, p.cx, p.ex);
    }
    let base = r * p.gy * p.gx;
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = -p.my; j <= p.my; j++) {
        let row = base + wrap(by + j, p.gy) * p.gx;
        var line = vec2<f32>(0.0, 0.0);
        for (var i = -p.mx; i <= p.mx; i++) {
            line += wx[i + p.mx] * grid[row + wrap(bx + i, p.gx)];
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

@compute @workgroup_size(WORKGROUP)
fn u2_spread(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    let cells = p.gy * p.gx;
    if (g >= p.rows * cells) {
        return;
    }
    let r = g / cells;
    let py = (g % cells) / p.gx;
    let px = g % p.gx;
    let list = r * p.points;
    let starts = p.row_start_offset + r * (p.gy + 1u);
    // The columns [px - mx, px + mx] modulo gx, as at most two ascending segments.
    let lo = i32(px) - p.mx;
    let hi = i32(px) + p.mx;
    var seg_lo = array<u32, 2>(u32(max(lo, 0)), 0u);
    var seg_hi = array<u32, 2>(u32(min(hi, i32(p.gx) - 1)), 0u);
    var segments = 1u;
    if (lo < 0) {
        seg_lo = array<u32, 2>(u32(lo + i32(p.gx)), 0u);
        seg_hi = array<u32, 2>(p.gx - 1u, u32(hi));
        segments = 2u;
    } else if (hi >= i32(p.gx)) {
        seg_hi[0] = p.gx - 1u;
        seg_lo[1] = 0u;
        seg_hi[1] = u32(hi - i32(p.gx));
        segments = 2u;
    }
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = -p.my; j <= p.my; j++) {
        let bin_row = wrap(i32(py) - j, p.gy);
        let first = row_start[starts + bin_row];
        let last = row_start[starts + bin_row + 1u];
        for (var s = 0u; s < segments; s++) {
            for (var e = lower_bound(list + first, list + last, seg_lo[s]); e < list + last; e++) {
                let entry = sorted[p.sorted_offset + e];
                if (entry.y > seg_hi[s]) {
                    break;
                }
                let xy = coords[p.coords_offset + list + entry.x];
                let bx = i32(floor(f32(p.gx) * xy.x));
                let by = i32(floor(f32(p.gy) * xy.y));
                // The tap offset i in [-mx, mx] with bx + i = px (mod gx).
                var i = i32(px) - i32(entry.y);
                if (i > p.mx) {
                    i -= i32(p.gx);
                } else if (i < -p.mx) {
                    i += i32(p.gx);
                }
                let w = weight(bx + i, xy.x, p.gx, p.cx, p.ex) * weight(by + j, xy.y, p.gy, p.cy, p.ey);
                acc += w * out[list + entry.x];
            }
        }
    }
    grid[g] = acc;
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
