// Bluestein's chirp-z algorithm for lengths with prime factors above 13: a length-n DFT becomes a
// cyclic convolution of length m >= 2n-1 (m smooth), done with two Stockham FFTs on `scratch`.
//   premul:    scratch[b*m + i] = x_b[i] * chirp[i]   (i < n), 0 otherwise
//   pointwise: scratch[b*m + i] *= kernel_hat[i]      (FFT of the conjugate chirp, divided by m)
//   postmul:   x_b[k] = scratch[b*m + k] * chirp[k] * scale
// All three entry points share one binding layout; `table` is the chirp or the kernel spectrum.

struct BluesteinParams {
    data: Layout,
    n: u32,
    m: u32,
    batch_count: u32,
    scale: f32,
}

@group(0) @binding(0) var<storage, read_write> data: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> scratch: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> table: array<vec2<f32>>;
@group(0) @binding(3) var<uniform> p: BluesteinParams;

override WORKGROUP: u32 = 64u;

fn thread_index(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * groups.x) * WORKGROUP + lid;
}

@compute @workgroup_size(WORKGROUP)
fn premul(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = thread_index(wid, groups, lid);
    if (g >= p.m * p.batch_count) {
        return;
    }
    let b = g / p.m;
    let i = g % p.m;
    var value = vec2<f32>(0.0, 0.0);
    if (i < p.n) {
        value = cmul(data[layout_index(p.data, b, i)], table[i]);
    }
    scratch[g] = value;
}

@compute @workgroup_size(WORKGROUP)
fn pointwise(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = thread_index(wid, groups, lid);
    if (g >= p.m * p.batch_count) {
        return;
    }
    scratch[g] = cmul(scratch[g], table[g % p.m]);
}

@compute @workgroup_size(WORKGROUP)
fn postmul(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = thread_index(wid, groups, lid);
    if (g >= p.n * p.batch_count) {
        return;
    }
    let b = g / p.n;
    let k = g % p.n;
    data[layout_index(p.data, b, k)] = cmul(scratch[b * p.m + k], table[k]) * p.scale;
}
