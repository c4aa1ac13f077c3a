// Kernels of the memo layer (src/memo): pooled keys of staged chunk inputs, the inner products and
// residual norms that certify a reuse (finished on the GPU in a fixed double-word order), and block
// copies and combinations between the operator's chunk buffers, the cache slab and the outbox.
//
// Every kernel runs a batch of jobs in one dispatch: job `first + j` owns workgroups
// [j * groups_per_job, (j + 1) * groups_per_job). A stage's chunks are one batch (keys, certification
// sums), or one job each when a copy must sit between the operator's own steps for that chunk.
// A block is a 3D array of complex values (e0, e1, e2) at a strided view of a buffer (complex
// elements, stored as f32 pairs); cache slots hold blocks contiguously. Every sum is formed in a
// fixed order that depends only on the block's size, so the same input gives the same bits.

struct View {
    offset: u32,
    s0: u32,
    s1: u32,
    s2: u32,
}

struct Job {
    // The block read from x (pool_key, dots, residual, copy) and, for combine, the strides of its
    // sources.
    vx: View,
    // The block written to out (copy, combine).
    vo: View,
    e0: u32,
    e1: u32,
    e2: u32,
    channel_axis: u32,
    // Offsets of up to four blocks: candidates in y (dots, residual) or sources in x (combine).
    candidates: vec4<u32>,
    count: u32,
    // Where the job's results start in out, in f32 words: keys, or per-workgroup partial sums.
    out_offset: u32,
    // finish: where the job's finished double words go in out, in f32 words.
    result: u32,
    pad0: u32,
    // Complex coefficients alpha_c = (alphas[c / 2].xy or .zw).
    alphas: array<vec4<f32>, 2>,
}

struct Batch {
    jobs: u32,
    groups_per_job: u32,
    // finish: values per job, and partial sums per value.
    values: u32,
    partials: u32,
    first: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> jobs: array<Job>;
@group(0) @binding(4) var<uniform> batch: Batch;

// WORKGROUP, MAX_CANDIDATES and DOT_VALUES (|x|^2; <c_i, x> (2 each); |c_i|^2 (1 each);
// <c_i, c_j> for i < j (2 each)) are composed ahead of this file from the Rust side
// (`shaders::memo`).

fn xc(i: u32) -> vec2<f32> {
    return vec2<f32>(x[2u * i], x[2u * i + 1u]);
}

fn yc(i: u32) -> vec2<f32> {
    return vec2<f32>(y[2u * i], y[2u * i + 1u]);
}

fn block_len(job: Job) -> u32 {
    return job.e0 * job.e1 * job.e2;
}

// The index of element i (row-major over e0, e1, e2) of the job's block at view v. Slot-side views
// are contiguous (one branch for every invocation of a job, no division); the operator-side view
// is strided.
fn at(job: Job, v: View, i: u32) -> u32 {
    if (v.s2 == 1u && v.s1 == job.e2 && v.s0 == job.e1 * job.e2) {
        return v.offset + i;
    }
    let j0 = i / (job.e2 * job.e1);
    let j1 = (i / job.e2) % job.e1;
    let j2 = i % job.e2;
    return v.offset + j0 * v.s0 + j1 * v.s1 + j2 * v.s2;
}

fn alpha(job: Job, c: u32) -> vec2<f32> {
    let a = job.alphas[c / 2u];
    if (c % 2u == 0u) {
        return a.xy;
    }
    return a.zw;
}

// conj(a) b
fn cdot(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x * b.x + a.y * b.y, a.x * b.y - a.y * b.x);
}

fn cmul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

fn extent(job: Job, axis: u32) -> u32 {
    if (axis == 0u) {
        return job.e0;
    }
    if (axis == 1u) {
        return job.e1;
    }
    return job.e2;
}

// The workgroup's linear index, from a dispatch the host may have laid out in two dimensions.
fn group_index(wid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return wid.x + wid.y * groups.x;
}

// PyTorch AdaptiveAvgPool bin i of 3 over n: [floor(i n / 3), ceil((i + 1) n / 3)).
fn bin_start(i: u32, n: u32) -> u32 {
    return (i * n) / 3u;
}

fn bin_end(i: u32, n: u32) -> u32 {
    return ((i + 1u) * n + 2u) / 3u;
}

// Key value k = ((2 channel + part) 3 + bi) 3 + bj of each job's block: a 3x3 adaptive average pool
// of the real (part 0) and imaginary (part 1) plane of every channel over the block's two other
// axes, written at out[out_offset + k].
@compute @workgroup_size(WORKGROUP)
fn pool_key(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = group_index(wid, groups);
    let j = g / batch.groups_per_job;
    if (j >= batch.jobs) {
        return;
    }
    let job = jobs[batch.first + j];
    let k = (g % batch.groups_per_job) * WORKGROUP + lid;
    let channels = extent(job, job.channel_axis);
    if (k >= 18u * channels) {
        return;
    }
    let channel = k / 18u;
    let part = (k / 9u) % 2u;
    let bi = (k % 9u) / 3u;
    let bj = k % 3u;
    var axis_a = 0u;
    var axis_b = 2u;
    if (job.channel_axis == 0u) {
        axis_a = 1u;
    } else if (job.channel_axis == 2u) {
        axis_b = 1u;
    }
    let na = extent(job, axis_a);
    let nb = extent(job, axis_b);
    var strides = array<u32, 3>(job.vx.s0, job.vx.s1, job.vx.s2);
    let base = job.vx.offset + channel * strides[job.channel_axis];
    var sum = 0.0;
    for (var a = bin_start(bi, na); a < bin_end(bi, na); a++) {
        for (var b = bin_start(bj, nb); b < bin_end(bj, nb); b++) {
            sum += x[2u * (base + a * strides[axis_a] + b * strides[axis_b]) + part];
        }
    }
    let cells = (bin_end(bi, na) - bin_start(bi, na)) * (bin_end(bj, nb) - bin_start(bj, nb));
    out[job.out_offset + k] = sum / f32(cells);
}

var<workgroup> shared_dots: array<f32, WORKGROUP * DOT_VALUES>;

// Per-workgroup sums (a fixed tree over the workgroup's invocations) of |x|^2 and, for the
// candidates c_i in y (contiguous blocks), <c_i, x>, |c_i|^2 and <c_i, c_j> (i < j): the normal
// equations of the least-squares combination. Workgroup g of a job writes its DOT_VALUES sums at
// out[out_offset + g DOT_VALUES].
@compute @workgroup_size(WORKGROUP)
fn dots(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = group_index(wid, groups);
    let j = g / batch.groups_per_job;
    // Uniform across the workgroup, so every invocation reaches the barriers below or none does.
    if (j >= batch.jobs) {
        return;
    }
    let job = jobs[batch.first + j];
    let local_group = g % batch.groups_per_job;
    // Written out for MAX_CANDIDATES = 4 (asserted in src/shaders.rs): named accumulators stay in
    // registers, where an indexed private array would not on every compiler. A missing candidate
    // (index >= count) reads as zero.
    let k = min(job.count, MAX_CANDIDATES);
    var xx = 0.0;
    var b0 = vec2<f32>(0.0);
    var b1 = vec2<f32>(0.0);
    var b2 = vec2<f32>(0.0);
    var b3 = vec2<f32>(0.0);
    var n = vec4<f32>(0.0);
    var g01 = vec2<f32>(0.0);
    var g02 = vec2<f32>(0.0);
    var g03 = vec2<f32>(0.0);
    var g12 = vec2<f32>(0.0);
    var g13 = vec2<f32>(0.0);
    var g23 = vec2<f32>(0.0);
    let len = block_len(job);
    let stride = batch.groups_per_job * WORKGROUP;
    for (var i = local_group * WORKGROUP + lid; i < len; i += stride) {
        let xv = xc(at(job, job.vx, i));
        var c0 = vec2<f32>(0.0);
        var c1 = vec2<f32>(0.0);
        var c2 = vec2<f32>(0.0);
        var c3 = vec2<f32>(0.0);
        if (k > 0u) {
            c0 = yc(job.candidates[0] + i);
        }
        if (k > 1u) {
            c1 = yc(job.candidates[1] + i);
        }
        if (k > 2u) {
            c2 = yc(job.candidates[2] + i);
        }
        if (k > 3u) {
            c3 = yc(job.candidates[3] + i);
        }
        xx += dot(xv, xv);
        b0 += cdot(c0, xv);
        b1 += cdot(c1, xv);
        b2 += cdot(c2, xv);
        b3 += cdot(c3, xv);
        n += vec4<f32>(dot(c0, c0), dot(c1, c1), dot(c2, c2), dot(c3, c3));
        g01 += cdot(c0, c1);
        g02 += cdot(c0, c2);
        g03 += cdot(c0, c3);
        g12 += cdot(c1, c2);
        g13 += cdot(c1, c3);
        g23 += cdot(c2, c3);
    }
    var acc = array<f32, DOT_VALUES>(
        xx, b0.x, b0.y, b1.x, b1.y, b2.x, b2.y, b3.x, b3.y, n.x, n.y, n.z, n.w,
        g01.x, g01.y, g02.x, g02.y, g03.x, g03.y, g12.x, g12.y, g13.x, g13.y, g23.x, g23.y,
    );
    for (var v = 0u; v < DOT_VALUES; v++) {
        shared_dots[lid * DOT_VALUES + v] = acc[v];
    }
    workgroupBarrier();
    for (var s = WORKGROUP / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            for (var v = 0u; v < DOT_VALUES; v++) {
                shared_dots[lid * DOT_VALUES + v] += shared_dots[(lid + s) * DOT_VALUES + v];
            }
        }
        workgroupBarrier();
    }
    if (lid < DOT_VALUES) {
        out[job.out_offset + local_group * DOT_VALUES + lid] = shared_dots[lid];
    }
}

var<workgroup> shared_sum: array<f32, 64>;

// Per-workgroup sums of |x - sum_c alpha_c y_c|^2, y_c the contiguous candidate blocks: the
// residual of a combination computed elementwise, free of the cancellation of the normal
// equations. Workgroup g of a job writes its sum at out[out_offset + g].
@compute @workgroup_size(WORKGROUP)
fn residual(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = group_index(wid, groups);
    let j = g / batch.groups_per_job;
    if (j >= batch.jobs) {
        return;
    }
    let job = jobs[batch.first + j];
    let local_group = g % batch.groups_per_job;
    var acc = 0.0;
    let n = block_len(job);
    let k = min(job.count, MAX_CANDIDATES);
    let stride = batch.groups_per_job * WORKGROUP;
    for (var i = local_group * WORKGROUP + lid; i < n; i += stride) {
        var d = xc(at(job, job.vx, i));
        for (var c = 0u; c < MAX_CANDIDATES; c++) {
            if (c < k) {
                d -= cmul(alpha(job, c), yc(job.candidates[c] + i));
            }
        }
        acc += dot(d, d);
    }
    shared_sum[lid] = acc;
    workgroupBarrier();
    for (var s = WORKGROUP / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            shared_sum[lid] += shared_sum[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[job.out_offset + local_group] = shared_sum[0];
    }
}

var<workgroup> shared_dw: array<vec2<f32>, 64>;

// One workgroup per (job, value): adds the job's `partials` per-workgroup sums of that value (at
// x[out_offset + p values + value]) in a fixed order into a double word, written to
// out[result + 2 value] (hi) and out[result + 2 value + 1] (lo).
@compute @workgroup_size(WORKGROUP)
fn finish_sums(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = group_index(wid, groups);
    let j = g / batch.values;
    if (j >= batch.jobs) {
        return;
    }
    let job = jobs[batch.first + j];
    let value = g % batch.values;
    var acc = vec2<f32>(0.0, 0.0);
    for (var p = lid; p < batch.partials; p += WORKGROUP) {
        acc = dw_add(acc, vec2<f32>(x[job.out_offset + p * batch.values + value], 0.0));
    }
    shared_dw[lid] = acc;
    workgroupBarrier();
    for (var s = WORKGROUP / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            shared_dw[lid] = dw_add(shared_dw[lid], shared_dw[lid + s]);
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[job.result + 2u * value] = shared_dw[0].x;
        out[job.result + 2u * value + 1u] = shared_dw[0].y;
    }
}

// out[vo] = x[vx] for every element of each job's block, bit for bit. Each invocation copies
// every stride-th element from its own (a job's table entry is read once per invocation).
@compute @workgroup_size(WORKGROUP)
fn copy_block(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = group_index(wid, groups);
    let j = g / batch.groups_per_job;
    if (j >= batch.jobs) {
        return;
    }
    let job = jobs[batch.first + j];
    let n = block_len(job);
    let stride = batch.groups_per_job * WORKGROUP;
    for (var i = (g % batch.groups_per_job) * WORKGROUP + lid; i < n; i += stride) {
        let s = at(job, job.vx, i);
        let d = at(job, job.vo, i);
        out[2u * d] = x[2u * s];
        out[2u * d + 1u] = x[2u * s + 1u];
    }
}

// out[vo] = sum_c alpha_c x[source c] for every element of each job's block, source c laid out
// with the strides of vx from offset candidates[c].
@compute @workgroup_size(WORKGROUP)
fn combine(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = group_index(wid, groups);
    let j = g / batch.groups_per_job;
    if (j >= batch.jobs) {
        return;
    }
    let job = jobs[batch.first + j];
    let n = block_len(job);
    let stride = batch.groups_per_job * WORKGROUP;
    for (var i = (g % batch.groups_per_job) * WORKGROUP + lid; i < n; i += stride) {
        let r = at(job, job.vx, i) - job.vx.offset;
        var v = vec2<f32>(0.0, 0.0);
        for (var c = 0u; c < MAX_CANDIDATES; c++) {
            if (c < job.count) {
                v += cmul(alpha(job, c), xc(job.candidates[c] + r));
            }
        }
        let d = at(job, job.vo, i);
        out[2u * d] = v.x;
        out[2u * d + 1u] = v.y;
    }
}
