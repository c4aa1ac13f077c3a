// BaSiC inexact-ALM iteration (docs/flatfield-method.md, "ALM iteration", "Fused GPU kernels") on
// the working grid, f32.
//
// Every entry point shares one binding layout so that a fit plan builds its bind groups once:
//   d      the images [first, first + count) of the N x M stack (read only), e / y / omega: their
//          sparse part, dual and unnormalised weights. A stack larger than one storage binding is
//          split along the image axis into several such blocks, one bind group each.
//   vecs   all small vectors and scalars of the whole stack, at the offsets of `dims` (see
//          src/flatfield/gpu.rs)
//   cmat   the orthonormal DCT-II matrix C[k][n] then its transpose (size x size each, computed
//          in f64 on the host)
//   dims   sizes and offsets; pass: the image block of the bind group, and the source /
//          destination / epilogue of a DCT dispatch
// Reductions are fixed-order (per-thread strided sums, then a workgroup tree) with no atomics, so
// a run is bit-reproducible on one device. Floats that count pixels are exact below 2^24.

struct Dims {
    n: u32,
    m: u32,
    size: u32,
    off_a: u32,
    off_valid: u32,
    off_w: u32,
    off_what: u32,
    off_o: u32,
    off_onext: u32,
    off_t: u32,
    off_tmp: u32,
    off_scalars: u32,
    off_stats: u32,
    off_sums: u32,
    pad0: u32,
    pad1: u32,
}

struct PassParams {
    src: u32,
    dst: u32,
    // 0: forward (C x), 1: inverse (Cᵀ x)
    inverse: u32,
    // 0: store, 1: flat step (dst = shrink(dst + v, thr_flat)), 2: dark coefficients
    // (shrink(v, thr_dark), DC removed), 3: dark output (shrink(v, thr_dark) + z)
    epilogue: u32,
    // The images of this bind group's block: global indices [first, first + count).
    first: u32,
    count: u32,
    pad0: u32,
    pad1: u32,
}

// Indices into the scalar block (host-written, see ScalarBlock in gpu.rs).
const S_MU: u32 = 0u;
const S_INV_MU: u32 = 1u;
const S_THR_FLAT: u32 = 2u;
const S_OMEGA_OVER_MU: u32 = 3u;
const S_BETA: u32 = 4u;
const S_A_MEAN_VALID: u32 = 5u;
const S_INV_COUNT_VALID: u32 = 6u;
const S_THR_DARK: u32 = 7u;
const S_EPSILON: u32 = 8u;
// Indices into the statistics block (GPU-written by field_stats).
const T_W_SUM: u32 = 0u;
const T_W_MIN: u32 = 1u;
const T_W_MAX: u32 = 2u;
const T_N_IN: u32 = 3u;
const T_N_OUT: u32 = 4u;
const T_O_SUM: u32 = 5u;
const T_W_MEAN: u32 = 6u;
// The relative half-width of the In/Out masks (docs/flatfield-method.md, "f32 numerics", item 1).
const MASK_TOL: f32 = 1e-6;

@group(0) @binding(0) var<storage, read> d: array<f32>;
@group(0) @binding(1) var<storage, read_write> e: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> omega: array<f32>;
@group(0) @binding(4) var<storage, read_write> vecs: array<f32>;
@group(0) @binding(5) var<storage, read> cmat: array<f32>;
@group(0) @binding(6) var<uniform> dims: Dims;
@group(0) @binding(7) var<uniform> dct: PassParams;

// WORKGROUP and BLOCK are composed ahead of this file from the Rust side (`shaders::basic`).
// Images per partial sum of the column passes.
const CHUNK: u32 = 64u;

var<workgroup> red: array<vec4<f32>, WORKGROUP>;

fn linear(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * groups.x) * WORKGROUP + lid;
}

fn group_index(wid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return wid.x + wid.y * groups.x;
}

fn scalar(i: u32) -> f32 {
    return vecs[dims.off_scalars + i];
}

fn stat(i: u32) -> f32 {
    return vecs[dims.off_stats + i];
}

fn shrink(v: f32, t: f32) -> f32 {
    return sign(v) * max(abs(v) - t, 0.0);
}

// Sums red[0..256) into red[0] in a fixed tree order (every lane must call it).
fn tree_sum(lid: u32) {
    for (var s = WORKGROUP / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) {
            red[lid] = red[lid] + red[lid + s];
        }
    }
    workgroupBarrier();
}

// E = 0, Y = 0 at the start of a solve (docs/flatfield-method.md, "Initial state"), for this
// block's images.
@compute @workgroup_size(WORKGROUP)
fn reset_state(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = linear(wid, groups, lid);
    if (g < dct.count * dims.m) {
        e[g] = 0.0;
        y[g] = 0.0;
    }
}

// o <- o_next: the dark-field update of the previous iteration becomes current.
@compute @workgroup_size(WORKGROUP)
fn commit_offset(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let j = linear(wid, groups, lid);
    if (j < dims.m) {
        vecs[dims.off_o + j] = vecs[dims.off_onext + j];
    }
}

// The column passes sum over images in two levels (blocks of CHUNK images): the f32 error grows
// with CHUNK + N / CHUNK rather than with N, for stacks of many thousands of images. A split
// stack runs one dispatch per image block in order; between them the running sums `acc` (at t)
// and `part` (at tmp, the DCT scratch, which no pass reads before the last block overwrites t)
// carry over, so the sums are the same f32 operations in the same order as for one block.
struct ColumnSum {
    acc: f32,
    part: f32,
}

fn column_start(j: u32) -> ColumnSum {
    if (dct.first == 0u) {
        return ColumnSum(0.0, 0.0);
    }
    return ColumnSum(vecs[dims.off_t + j], vecs[dims.off_tmp + j]);
}

fn column_add(s: ptr<function, ColumnSum>, gi: u32, v: f32) {
    (*s).part = (*s).part + v;
    if ((gi + 1u) % CHUNK == 0u) {
        (*s).acc = (*s).acc + (*s).part;
        (*s).part = 0.0;
    }
}

// Stores the running sums, or after the stack's last block `scale · total` at t.
fn column_finish(j: u32, s: ColumnSum, scale: f32) {
    if (dct.first + dct.count == dims.n) {
        vecs[dims.off_t + j] = (s.acc + s.part) * scale;
    } else {
        vecs[dims.off_t + j] = s.acc;
        vecs[dims.off_tmp + j] = s.part;
    }
}

// Steps 2-3 (K1): t_j = mean_i (D - a_i w_j - o_j - E + Y/mu), one thread per pixel.
@compute @workgroup_size(WORKGROUP)
fn column_mean(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let j = linear(wid, groups, lid);
    if (j >= dims.m) {
        return;
    }
    let w = vecs[dims.off_w + j];
    let o = vecs[dims.off_o + j];
    let inv_mu = scalar(S_INV_MU);
    var s = column_start(j);
    for (var i = 0u; i < dct.count; i = i + 1u) {
        let gi = dct.first + i;
        let k = i * dims.m + j;
        column_add(&s, gi, d[k] - vecs[dims.off_a + gi] * w - o - e[k] + y[k] * inv_mu);
    }
    column_finish(j, s, 1.0 / f32(dims.n));
}

// The 2D DCT is two matrix products per transform: along x OUT = SRC · M, along y OUT = M · SRC,
// with M = C or Cᵀ (`cmat` holds C then Cᵀ). Each invocation computes a 4x4 block of OUT from
// 4 + 4 loads per step of the inner dimension (register blocking: 0.5 loads per multiply-add,
// which is what limits software rasterisers). Every output sums in plain ascending order.
// BLOCK is the block's side: 4, one vec4 per block row.

struct Block {
    rows: array<vec4<f32>, 4>,
    row0: u32,
    col0: u32,
}

// The 4x4 block `index` of (A B); A = vecs (at a_off) and B = cmat (at b_off) when `src_left`,
// else A = cmat and B = vecs. Indices past the edge are clamped for loading (never written).
fn block_product(index: u32, src_left: bool, a_off: u32, b_off: u32) -> Block {
    let p = dims.size;
    let per_row = (p + BLOCK - 1u) / BLOCK;
    let row0 = (index / per_row) * BLOCK;
    let col0 = (index % per_row) * BLOCK;
    var rows: array<u32, 4>;
    var cols: array<u32, 4>;
    for (var q = 0u; q < BLOCK; q = q + 1u) {
        rows[q] = min(row0 + q, p - 1u) * p;
        cols[q] = min(col0 + q, p - 1u);
    }
    var acc: array<vec4<f32>, 4>;
    for (var t = 0u; t < p; t = t + 1u) {
        var a: vec4<f32>;
        var b: vec4<f32>;
        if (src_left) {
            a = vec4<f32>(vecs[a_off + rows[0] + t], vecs[a_off + rows[1] + t],
                          vecs[a_off + rows[2] + t], vecs[a_off + rows[3] + t]);
            let bt = b_off + t * p;
            b = vec4<f32>(cmat[bt + cols[0]], cmat[bt + cols[1]], cmat[bt + cols[2]], cmat[bt + cols[3]]);
        } else {
            a = vec4<f32>(cmat[a_off + rows[0] + t], cmat[a_off + rows[1] + t],
                          cmat[a_off + rows[2] + t], cmat[a_off + rows[3] + t]);
            let bt = b_off + t * p;
            b = vec4<f32>(vecs[bt + cols[0]], vecs[bt + cols[1]], vecs[bt + cols[2]], vecs[bt + cols[3]]);
        }
        acc[0] = acc[0] + a.x * b;
        acc[1] = acc[1] + a.y * b;
        acc[2] = acc[2] + a.z * b;
        acc[3] = acc[3] + a.w * b;
    }
    return Block(acc, row0, col0);
}

fn block_count() -> u32 {
    let per_row = (dims.size + BLOCK - 1u) / BLOCK;
    return per_row * per_row;
}

// Along x: out[r][k] = sum_x src[r][x] C[k][x] (forward, M = Cᵀ) or sum_k src[r][k] C[k][x]
// (inverse, M = C).
@compute @workgroup_size(WORKGROUP)
fn dct_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let index = linear(wid, groups, lid);
    if (index >= block_count()) {
        return;
    }
    let p = dims.size;
    let m_off = select(p * p, 0u, dct.inverse == 1u);
    let out = block_product(index, true, dct.src, m_off);
    for (var q = 0u; q < BLOCK; q = q + 1u) {
        for (var c = 0u; c < BLOCK; c = c + 1u) {
            let r = out.row0 + q;
            let x = out.col0 + c;
            if (r < p && x < p) {
                vecs[dct.dst + r * p + x] = out.rows[q][c];
            }
        }
    }
}

// Along y: out[k][x] = sum_r C[k][r] src[r][x] (forward, M = C) or Cᵀ (inverse), with the
// epilogue of the step it finishes.
@compute @workgroup_size(WORKGROUP)
fn dct_cols(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let index = linear(wid, groups, lid);
    if (index >= block_count()) {
        return;
    }
    let p = dims.size;
    let m_off = select(0u, p * p, dct.inverse == 1u);
    let out = block_product(index, false, m_off, dct.src);
    for (var q = 0u; q < BLOCK; q = q + 1u) {
        for (var c = 0u; c < BLOCK; c = c + 1u) {
            let r = out.row0 + q;
            let x = out.col0 + c;
            if (r < p && x < p) {
                dct_epilogue(r * p + x, out.rows[q][c]);
            }
        }
    }
}

// Stores one output of a y-pass with the epilogue of the step it finishes.
fn dct_epilogue(g: u32, acc: f32) {
    switch dct.epilogue {
        case 1u: {
            // Step 4: W_hat <- S_{lambda_F/mu}(W_hat + DCT2(T)).
            vecs[dct.dst + g] = shrink(vecs[dct.dst + g] + acc, scalar(S_THR_FLAT));
        }
        case 2u: {
            // Step 9.8, coefficient side. Removing the DC coefficient subtracts the mean of u
            // (step 9.7); z = beta (w_mean - w) has zero mean, so its DC term is zero as well.
            var v = shrink(acc, scalar(S_THR_DARK));
            if (g == 0u) {
                v = 0.0;
            }
            vecs[dct.dst + g] = v;
        }
        case 3u: {
            // Step 9.8, pixel side: o = S(o'') + z.
            let z = scalar(S_BETA) * (stat(T_W_MEAN) - vecs[dims.off_w + g]);
            vecs[dct.dst + g] = shrink(acc, scalar(S_THR_DARK)) + z;
        }
        default: {
            vecs[dct.dst + g] = acc;
        }
    }
}

// R5: sum, min and max of w, the In/Out mask sizes, and sum of o; one workgroup.
@compute @workgroup_size(WORKGROUP)
fn field_stats(@builtin(local_invocation_index) lid: u32) {
    var s = 0.0;
    var lo = 3.4e38;
    var hi = -3.4e38;
    var so = 0.0;
    for (var j = lid; j < dims.m; j = j + WORKGROUP) {
        let w = vecs[dims.off_w + j];
        s = s + w;
        lo = min(lo, w);
        hi = max(hi, w);
        so = so + vecs[dims.off_o + j];
    }
    red[lid] = vec4<f32>(s, so, 0.0, 0.0);
    tree_sum(lid);
    let w_sum = red[0].x;
    let o_sum = red[0].y;
    workgroupBarrier();
    // min and max with the same fixed tree.
    red[lid] = vec4<f32>(lo, hi, 0.0, 0.0);
    for (var st = WORKGROUP / 2u; st > 0u; st = st / 2u) {
        workgroupBarrier();
        if (lid < st) {
            let other = red[lid + st];
            red[lid] = vec4<f32>(min(red[lid].x, other.x), max(red[lid].y, other.y), 0.0, 0.0);
        }
    }
    workgroupBarrier();
    let w_min = red[0].x;
    let w_max = red[0].y;
    workgroupBarrier();
    let w_mean = w_sum / f32(dims.m);
    var n_in = 0.0;
    var n_out = 0.0;
    for (var j = lid; j < dims.m; j = j + WORKGROUP) {
        let w = vecs[dims.off_w + j];
        n_in = n_in + select(0.0, 1.0, w > w_mean * (1.0 - MASK_TOL));
        n_out = n_out + select(0.0, 1.0, w < w_mean * (1.0 + MASK_TOL));
    }
    red[lid] = vec4<f32>(n_in, n_out, 0.0, 0.0);
    tree_sum(lid);
    if (lid == 0u) {
        let base = dims.off_stats;
        vecs[base + T_W_SUM] = w_sum;
        vecs[base + T_W_MIN] = w_min;
        vecs[base + T_W_MAX] = w_max;
        vecs[base + T_N_IN] = red[0].x;
        vecs[base + T_N_OUT] = red[0].y;
        vecs[base + T_O_SUM] = o_sum;
        vecs[base + T_W_MEAN] = w_mean;
    }
}

// Steps 6, 7, 10, 11 (K3) for image first + i (i = workgroup), and its sums of R = D - E over all
// pixels, over In and over Out, and of Z^2 (step 8, 9.3 and the stop criterion).
@compute @workgroup_size(WORKGROUP)
fn element_pass(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = group_index(wid, groups);
    let gi = dct.first + i;
    let inside = i < dct.count;
    var acc = vec4<f32>(0.0);
    if (inside) {
        let a = vecs[dims.off_a + gi];
        let mu = scalar(S_MU);
        let inv_mu = scalar(S_INV_MU);
        let omega_over_mu = scalar(S_OMEGA_OVER_MU);
        let w_mean = stat(T_W_MEAN);
        for (var j = lid; j < dims.m; j = j + WORKGROUP) {
            let k = i * dims.m + j;
            let w = vecs[dims.off_w + j];
            let l = a * w + vecs[dims.off_o + j];
            let dk = d[k];
            let ek = shrink(dk - l + y[k] * inv_mu, omega[k] * omega_over_mu);
            let z = dk - l - ek;
            e[k] = ek;
            y[k] = y[k] + mu * z;
            let r = dk - ek;
            acc = acc + vec4<f32>(
                r,
                select(0.0, r, w > w_mean * (1.0 - MASK_TOL)),
                select(0.0, r, w < w_mean * (1.0 + MASK_TOL)),
                z * z,
            );
        }
    }
    red[lid] = acc;
    tree_sum(lid);
    if (inside && lid == 0u) {
        let base = dims.off_sums + 4u * gi;
        vecs[base] = red[0].x;
        vecs[base + 1u] = red[0].y;
        vecs[base + 2u] = red[0].z;
        vecs[base + 3u] = red[0].w;
    }
}

// Step 9.7 minus the mean (K5): t_j = mean_{i in V} (D - E) - a_V w_j - beta (w_mean - w_j).
@compute @workgroup_size(WORKGROUP)
fn dark_column(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let j = linear(wid, groups, lid);
    if (j >= dims.m) {
        return;
    }
    var s = column_start(j);
    for (var i = 0u; i < dct.count; i = i + 1u) {
        let gi = dct.first + i;
        var v = 0.0;
        if (vecs[dims.off_valid + gi] != 0.0) {
            let k = i * dims.m + j;
            v = d[k] - e[k];
        }
        column_add(&s, gi, v);
    }
    column_finish(j, s, scalar(S_INV_COUNT_VALID));
    if (dct.first + dct.count == dims.n) {
        let w = vecs[dims.off_w + j];
        let z = scalar(S_BETA) * (stat(T_W_MEAN) - w);
        vecs[dims.off_t + j] = vecs[dims.off_t + j] - scalar(S_A_MEAN_VALID) * w - z;
    }
}

// docs/flatfield-method.md, "Reweighting", item 2 before normalisation:
// omega = 1 / (|E / (l_i + 1e-6)| + eps), with l_i in the
// `a` slot; per-image sums go to the sums block (the host folds them into the scale).
@compute @workgroup_size(WORKGROUP)
fn reweight(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = group_index(wid, groups);
    let gi = dct.first + i;
    let inside = i < dct.count;
    var acc = 0.0;
    if (inside) {
        let l = vecs[dims.off_a + gi] + 1e-6;
        let eps = scalar(S_EPSILON);
        for (var j = lid; j < dims.m; j = j + WORKGROUP) {
            let k = i * dims.m + j;
            let v = 1.0 / (abs(e[k] / l) + eps);
            omega[k] = v;
            acc = acc + v;
        }
    }
    red[lid] = vec4<f32>(acc, 0.0, 0.0, 0.0);
    tree_sum(lid);
    if (inside && lid == 0u) {
        vecs[dims.off_sums + 4u * gi] = red[0].x;
    }
}
