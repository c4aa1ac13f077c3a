// Kernels of the memo layer (src/memo): pooled keys of a chunk's input block, the inner products
// and residual norms that certify a reuse, and scaled block copies into and out of the cache slab.
//
// A block is a 3D array of complex values (e0, e1, e2) at a strided view of a buffer; cache slots
// hold blocks contiguously. Every reduction writes per-workgroup partial sums in a fixed order
// (summed in f64 on the host), so the same input gives the same bits.

struct View {
    offset: u32,
    s0: u32,
    s1: u32,
    s2: u32,
}

struct MemoParams {
    // Block read from x (and, for the reductions, the block of y at the candidates' offsets).
    vx: View,
    // Block written by scaled_copy; for residual the block of y.
    vo: View,
    e0: u32,
    e1: u32,
    e2: u32,
    channel_axis: u32,
    // Offsets in y of up to four candidate blocks (contiguous).
    candidates: vec4<u32>,
    count: u32,
    pad: u32,
    alpha: vec2<f32>,
}

@group(0) @binding(0) var<storage, read> x: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read> y: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: MemoParams;

// Fixed (not overridable): the reduction array below is sized for it.
const WORKGROUP: u32 = 64u;

const MAX_CANDIDATES: u32 = 4u;
// |x|^2, then (Re <c, x>, Im <c, x>, |c|^2) per candidate.
const DOT_VALUES: u32 = 13u;

var<workgroup> reduce: array<f32, 832>; // DOT_VALUES * WORKGROUP

fn block_len() -> u32 {
    return p.e0 * p.e1 * p.e2;
}

fn at(v: View, i: u32) -> u32 {
    let i2 = i % p.e2;
    let i1 = (i / p.e2) % p.e1;
    let i0 = i / (p.e2 * p.e1);
    return v.offset + i0 * v.s0 + i1 * v.s1 + i2 * v.s2;
}

fn extent(axis: u32) -> u32 {
    if (axis == 0u) {
        return p.e0;
    }
    if (axis == 1u) {
        return p.e1;
    }
    return p.e2;
}

// PyTorch AdaptiveAvgPool bin i of 3 over n: [floor(i n / 3), ceil((i + 1) n / 3)).
fn bin_start(i: u32, n: u32) -> u32 {
    return (i * n) / 3u;
}

fn bin_end(i: u32, n: u32) -> u32 {
    return ((i + 1u) * n + 2u) / 3u;
}

// Key value k = ((2 channel + part) 3 + bi) 3 + bj: a 3x3 adaptive average pool of the real
// (part 0) and imaginary (part 1) plane of every channel over the block's two other axes.
@compute @workgroup_size(WORKGROUP)
fn pool_key(@builtin(global_invocation_id) gid: vec3<u32>) {
    let k = gid.x;
    let channels = extent(p.channel_axis);
    if (k >= 18u * channels) {
        return;
    }
    let channel = k / 18u;
    let part = (k / 9u) % 2u;
    let bi = (k % 9u) / 3u;
    let bj = k % 3u;
    var axis_a = 0u;
    var axis_b = 2u;
    if (p.channel_axis == 0u) {
        axis_a = 1u;
    } else if (p.channel_axis == 2u) {
        axis_b = 1u;
    }
    let na = extent(axis_a);
    let nb = extent(axis_b);
    var strides = array<u32, 3>(p.vx.s0, p.vx.s1, p.vx.s2);
    let base = p.vx.offset + channel * strides[p.channel_axis];
    var sum = 0.0;
    for (var a = bin_start(bi, na); a < bin_end(bi, na); a++) {
        for (var b = bin_start(bj, nb); b < bin_end(bj, nb); b++) {
            sum += x[base + a * strides[axis_a] + b * strides[axis_b]][part];
        }
    }
    let cells = (bin_end(bi, na) - bin_start(bi, na)) * (bin_end(bj, nb) - bin_start(bj, nb));
    out[k] = sum / f32(cells);
}

// Partial sums (per workgroup, DOT_VALUES each) of |x|^2 and, for every candidate c in y,
// <c, x> = sum conj(c) x and |c|^2.
@compute @workgroup_size(WORKGROUP)
fn dots(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    var acc: array<f32, 13>;
    for (var v = 0u; v < DOT_VALUES; v++) {
        acc[v] = 0.0;
    }
    let n = block_len();
    let stride = groups.x * WORKGROUP;
    for (var i = wid.x * WORKGROUP + lid; i < n; i += stride) {
        let xv = x[at(p.vx, i)];
        acc[0] += dot(xv, xv);
        for (var c = 0u; c < min(p.count, MAX_CANDIDATES); c++) {
            let cv = y[p.candidates[c] + i];
            acc[1u + 3u * c] += cv.x * xv.x + cv.y * xv.y;
            acc[2u + 3u * c] += cv.x * xv.y - cv.y * xv.x;
            acc[3u + 3u * c] += dot(cv, cv);
        }
    }
    for (var v = 0u; v < DOT_VALUES; v++) {
        reduce[v * WORKGROUP + lid] = acc[v];
    }
    workgroupBarrier();
    for (var s = WORKGROUP / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            for (var v = 0u; v < DOT_VALUES; v++) {
                reduce[v * WORKGROUP + lid] += reduce[v * WORKGROUP + lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        for (var v = 0u; v < DOT_VALUES; v++) {
            out[wid.x * DOT_VALUES + v] = reduce[v * WORKGROUP];
        }
    }
}

// Partial sums of |x - alpha y|^2 (x at view vx, y at view vo): the residual of a reuse computed
// elementwise, free of the cancellation of |x|^2 - |<c, x>|^2 / |c|^2.
@compute @workgroup_size(WORKGROUP)
fn residual(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    var acc = 0.0;
    let n = block_len();
    let stride = groups.x * WORKGROUP;
    for (var i = wid.x * WORKGROUP + lid; i < n; i += stride) {
        let xv = x[at(p.vx, i)];
        let yv = y[at(p.vo, i)];
        let d = xv - vec2<f32>(p.alpha.x * yv.x - p.alpha.y * yv.y, p.alpha.x * yv.y + p.alpha.y * yv.x);
        acc += dot(d, d);
    }
    reduce[lid] = acc;
    workgroupBarrier();
    for (var s = WORKGROUP / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            reduce[lid] += reduce[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[wid.x] = reduce[0];
    }
}

// out[vo] = alpha x[vx] for every element of the block (out holds complex values as f32 pairs).
@compute @workgroup_size(WORKGROUP)
fn scaled_copy(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    if (i >= block_len()) {
        return;
    }
    let v = x[at(p.vx, i)];
    let d = at(p.vo, i);
    out[2u * d] = p.alpha.x * v.x - p.alpha.y * v.y;
    out[2u * d + 1u] = p.alpha.x * v.y + p.alpha.y * v.x;
}
