// Kernels of the memo layer (src/memo): pooled keys of a chunk's input block, the inner products
// and residual norms that certify a reuse, and scaled block copies into and out of the cache slab.
//
// A block is a 3D array of complex values (e0, e1, e2) at a strided view of a buffer; cache slots
// hold blocks contiguously. Every reduction writes per-invocation partial sums over a fixed set of
// elements (summed in f64 on the host in a fixed order), so the same input gives the same bits.

struct View {
    offset: u32,
    s0: u32,
    s1: u32,
    s2: u32,
}

struct MemoParams {
    // The block read from x (pool_key, dots, residual) and its strides for combine.
    vx: View,
    // The block written by combine (a strided view of out).
    vo: View,
    e0: u32,
    e1: u32,
    e2: u32,
    channel_axis: u32,
    // Offsets of up to four source blocks: candidates in y (dots, residual, contiguous) or
    // sources in x (combine, with the strides of vx).
    candidates: vec4<u32>,
    count: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    // Complex coefficients alpha_c = (alphas[c / 2].xy or .zw).
    alphas: array<vec4<f32>, 2>,
}

@group(0) @binding(0) var<storage, read> x: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read> y: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: MemoParams;

const WORKGROUP: u32 = 64u;

const MAX_CANDIDATES: u32 = 4u;
// |x|^2; <c_i, x> (2 each); |c_i|^2 (1 each); <c_i, c_j> for i < j (2 each).
const DOT_VALUES: u32 = 25u;

fn block_len() -> u32 {
    return p.e0 * p.e1 * p.e2;
}

fn index3(i: u32) -> vec3<u32> {
    return vec3<u32>(i / (p.e2 * p.e1), (i / p.e2) % p.e1, i % p.e2);
}

fn at(v: View, i: u32) -> u32 {
    let j = index3(i);
    return v.offset + j.x * v.s0 + j.y * v.s1 + j.z * v.s2;
}

fn alpha(c: u32) -> vec2<f32> {
    let a = p.alphas[c / 2u];
    if (c % 2u == 0u) {
        return a.xy;
    }
    return a.zw;
}

fn cmul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// conj(a) b
fn cdot(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x * b.x + a.y * b.y, a.x * b.y - a.y * b.x);
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

// Partial sums (per invocation, DOT_VALUES each, no workgroup reduction: barriers cost more than
// the host's summing a few thousand values) of |x|^2 and, for the candidates c_i in y
// (contiguous blocks), <c_i, x>, |c_i|^2 and <c_i, c_j> (i < j): the normal equations of the
// least-squares combination.
@compute @workgroup_size(WORKGROUP)
fn dots(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    var acc: array<f32, 25>;
    for (var v = 0u; v < DOT_VALUES; v++) {
        acc[v] = 0.0;
    }
    let n = block_len();
    let k = min(p.count, MAX_CANDIDATES);
    let stride = groups.x * WORKGROUP;
    for (var i = gid.x; i < n; i += stride) {
        let xv = x[at(p.vx, i)];
        acc[0] += dot(xv, xv);
        // Constant trip counts (guarded by k) let the compiler unroll the loops and keep the
        // accumulators in registers.
        var c: array<vec2<f32>, 4>;
        for (var a = 0u; a < MAX_CANDIDATES; a++) {
            if (a < k) {
                c[a] = y[p.candidates[a] + i];
                let b = cdot(c[a], xv);
                acc[1u + 2u * a] += b.x;
                acc[2u + 2u * a] += b.y;
                acc[9u + a] += dot(c[a], c[a]);
            }
        }
        var pair = 0u;
        for (var a = 0u; a < MAX_CANDIDATES; a++) {
            for (var b = a + 1u; b < MAX_CANDIDATES; b++) {
                if (b < k) {
                    let g = cdot(c[a], c[b]);
                    acc[13u + 2u * pair] += g.x;
                    acc[14u + 2u * pair] += g.y;
                }
                pair++;
            }
        }
    }
    for (var v = 0u; v < DOT_VALUES; v++) {
        out[gid.x * DOT_VALUES + v] = acc[v];
    }
}

// Partial sums (per invocation) of |x - sum_c alpha_c y_c|^2, y_c the contiguous candidate
// blocks: the residual of a combination computed elementwise, free of the cancellation of the
// normal equations.
@compute @workgroup_size(WORKGROUP)
fn residual(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    var acc = 0.0;
    let n = block_len();
    let k = min(p.count, MAX_CANDIDATES);
    let stride = groups.x * WORKGROUP;
    for (var i = gid.x; i < n; i += stride) {
        var d = x[at(p.vx, i)];
        for (var c = 0u; c < MAX_CANDIDATES; c++) {
            if (c < k) {
                d -= cmul(alpha(c), y[p.candidates[c] + i]);
            }
        }
        acc += dot(d, d);
    }
    out[gid.x] = acc;
}

// out[vo] = sum_c alpha_c x[source c] for every element of the block, source c laid out with
// the strides of vx from offset candidates[c] (out holds complex values as f32 pairs).
@compute @workgroup_size(WORKGROUP)
fn combine(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    if (i >= block_len()) {
        return;
    }
    let j = index3(i);
    let rel = j.x * p.vx.s0 + j.y * p.vx.s1 + j.z * p.vx.s2;
    var v = vec2<f32>(0.0, 0.0);
    for (var c = 0u; c < MAX_CANDIDATES; c++) {
        if (c < p.count) {
            v += cmul(alpha(c), x[p.candidates[c] + rel]);
        }
    }
    let d = at(p.vo, i);
    out[2u * d] = v.x;
    out[2u * d + 1u] = v.y;
}
