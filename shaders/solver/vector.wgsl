// Vector kernels of the ADMM-TV solver. Real arrays are f32; complex arrays are read as f32 pairs;
// 3-vector fields (gradients, psi, lambda) are interleaved, element 3 i + c for voxel i.
// A dispatch covers `count` voxels starting at global voxel `first`; each binding is a window of
// its array, and `ox`, `oy`, `oz` place global voxel `first` inside the windows, so arrays larger
// than one storage binding are processed window by window. Every kernel is a gather with one
// writer per output element: same input, same bits.

struct VectorParams {
    count: u32,
    first: u32,
    n0: u32,
    n1: u32,
    n2: u32,
    ox: u32,
    oy: u32,
    oz: u32,
    a: f32,
    b: f32,
    c: f32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> z: array<f32>;
@group(0) @binding(3) var<uniform> p: VectorParams;

override WORKGROUP: u32 = 256u;
const INV_SQRT3: f32 = 0.57735026918962576;

var<workgroup> partial: array<f32, WORKGROUP>;

fn thread_id(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * groups.x) * WORKGROUP + lid;
}

// z = a x + b y + c z, over `count` scalars.
@compute @workgroup_size(WORKGROUP)
fn axpby(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = thread_id(wid, groups, lid);
    if (k < p.count) {
        z[p.oz + k] = p.a * x[p.ox + k] + p.b * y[p.oy + k] + p.c * z[p.oz + k];
    }
}

// z (complex) = (a x, 0): a real volume into the operator's complex volume.
@compute @workgroup_size(WORKGROUP)
fn to_complex(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = thread_id(wid, groups, lid);
    if (k < p.count) {
        z[p.oz + 2u * k] = p.a * x[p.ox + k];
        z[p.oz + 2u * k + 1u] = 0.0;
    }
}

// z = a Re(x) + c z, x complex: the real part of the operator's adjoint output.
@compute @workgroup_size(WORKGROUP)
fn real_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = thread_id(wid, groups, lid);
    if (k < p.count) {
        z[p.oz + k] = p.a * x[p.ox + 2u * k] + p.c * z[p.oz + k];
    }
}

// Forward differences scaled by 1/sqrt(3), zero at the last index of each axis; components
// (x, y, z) = axes (2, 1, 0) of the (n0, n1, n2) volume. x's window reaches one z plane beyond.
@compute @workgroup_size(WORKGROUP)
fn gradient(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = thread_id(wid, groups, lid);
    if (k >= p.count) {
        return;
    }
    let i = p.first + k;
    let ix = i % p.n2;
    let iy = (i / p.n2) % p.n1;
    let iz = i / (p.n2 * p.n1);
    let at = p.ox + k;
    let v = x[at];
    var d = vec3<f32>(0.0, 0.0, 0.0);
    if (ix + 1u < p.n2) {
        d.x = (x[at + 1u] - v) * INV_SQRT3;
    }
    if (iy + 1u < p.n1) {
        d.y = (x[at + p.n2] - v) * INV_SQRT3;
    }
    if (iz + 1u < p.n0) {
        d.z = (x[at + p.n2 * p.n1] - v) * INV_SQRT3;
    }
    z[p.oz + 3u * k] = d.x;
    z[p.oz + 3u * k + 1u] = d.y;
    z[p.oz + 3u * k + 2u] = d.z;
}

// z = a grad*(x) + c z: the exact adjoint of `gradient` for every x (the difference into the last
// index is kept, so no assumption on x is needed). x's window reaches one z plane before.
@compute @workgroup_size(WORKGROUP)
fn gradient_adjoint(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = thread_id(wid, groups, lid);
    if (k >= p.count) {
        return;
    }
    let i = p.first + k;
    let index = array<u32, 3>(i % p.n2, (i / p.n2) % p.n1, i / (p.n2 * p.n1));
    let strides = array<u32, 3>(1u, p.n2, p.n2 * p.n1);
    let sizes = array<u32, 3>(p.n2, p.n1, p.n0);
    let at = p.ox + 3u * k;
    var acc = 0.0;
    for (var c = 0u; c < 3u; c++) {
        // -(q_i - q_{i-1}) with q_{-1} = 0; q_{n-1} (a difference that is always zero) adds
        // nothing to element n-1.
        if (index[c] + 1u < sizes[c]) {
            acc -= x[at + c];
        }
        if (index[c] > 0u) {
            acc += x[at + c - 3u * strides[c]];
        }
    }
    z[p.oz + k] = p.a * INV_SQRT3 * acc + p.c * z[p.oz + k];
}

// z = S_tau(x + b y) with tau = a: isotropic shrinkage of the 3-vectors, scaled by (1 - tau/|v|)
// where |v| > tau, zero otherwise.
@compute @workgroup_size(WORKGROUP)
fn shrink(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = thread_id(wid, groups, lid);
    if (k >= p.count) {
        return;
    }
    let xi = p.ox + 3u * k;
    let yi = p.oy + 3u * k;
    let v = vec3<f32>(x[xi], x[xi + 1u], x[xi + 2u]) + p.b * vec3<f32>(y[yi], y[yi + 1u], y[yi + 2u]);
    let norm = length(v);
    var s = 0.0;
    if (norm > p.a) {
        s = 1.0 - p.a / norm;
    }
    let zi = p.oz + 3u * k;
    z[zi] = s * v.x;
    z[zi + 1u] = s * v.y;
    z[zi + 2u] = s * v.z;
}

// Per-workgroup partial sums at z[oz + group], combined in f64 on the host; a fixed-order tree, so
// repeat runs give the same bits. `dot`: sum x_k y_k over `count` scalars. `iso_norm`: sum over
// `count` voxels of |(x_3k, x_3k+1, x_3k+2)|.
fn reduce_store(lid: u32, group: u32, value: f32) {
    partial[lid] = value;
    workgroupBarrier();
    for (var s = WORKGROUP / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    // A dispatch laid out in two dimensions has surplus workgroups past the last one that covers
    // a unit: they must not write past the partial sums of their window.
    if (lid == 0u && group * WORKGROUP < p.count) {
        z[p.oz + group] = partial[0];
    }
}

@compute @workgroup_size(WORKGROUP)
fn dot(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * groups.x;
    let k = group * WORKGROUP + lid;
    var value = 0.0;
    if (k < p.count) {
        value = x[p.ox + k] * y[p.oy + k];
    }
    reduce_store(lid, group, value);
}

@compute @workgroup_size(WORKGROUP)
fn iso_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * groups.x;
    let k = group * WORKGROUP + lid;
    var value = 0.0;
    if (k < p.count) {
        let i = p.ox + 3u * k;
        value = length(vec3<f32>(x[i], x[i + 1u], x[i + 2u]));
    }
    reduce_store(lid, group, value);
}
