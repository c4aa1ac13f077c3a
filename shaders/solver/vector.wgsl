// Vector kernels of the ADMM-TV solver. Real arrays are f32; complex arrays are read as f32 pairs.
// Every kernel is a gather with one writer per output element: same input, same bits.

struct VectorParams {
    count: u32,
    n0: u32,
    n1: u32,
    n2: u32,
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

// z = a x + b y + c z
@compute @workgroup_size(WORKGROUP)
fn axpby(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = thread_id(wid, groups, lid);
    if (i < p.count) {
        z[i] = p.a * x[i] + p.b * y[i] + p.c * z[i];
    }
}

// z (complex, as pairs) = (a x, 0): a real volume into the operator's complex volume.
@compute @workgroup_size(WORKGROUP)
fn to_complex(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = thread_id(wid, groups, lid);
    if (i < p.count) {
        z[2u * i] = p.a * x[i];
        z[2u * i + 1u] = 0.0;
    }
}

// z = a Re(x) + c z, x complex: the real part of the operator's adjoint output.
@compute @workgroup_size(WORKGROUP)
fn real_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = thread_id(wid, groups, lid);
    if (i < p.count) {
        z[i] = p.a * x[2u * i] + p.c * z[i];
    }
}

// Forward differences scaled by 1/sqrt(3), zero at the last index of each axis; component-major
// output z[c * V + i] with components (x, y, z) = axes (2, 1, 0) of the (n0, n1, n2) volume.
@compute @workgroup_size(WORKGROUP)
fn gradient(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = thread_id(wid, groups, lid);
    if (i >= p.count) {
        return;
    }
    let ix = i % p.n2;
    let iy = (i / p.n2) % p.n1;
    let iz = i / (p.n2 * p.n1);
    let v = x[i];
    var gx = 0.0;
    var gy = 0.0;
    var gz = 0.0;
    if (ix + 1u < p.n2) {
        gx = (x[i + 1u] - v) * INV_SQRT3;
    }
    if (iy + 1u < p.n1) {
        gy = (x[i + p.n2] - v) * INV_SQRT3;
    }
    if (iz + 1u < p.n0) {
        gz = (x[i + p.n2 * p.n1] - v) * INV_SQRT3;
    }
    z[i] = gx;
    z[p.count + i] = gy;
    z[2u * p.count + i] = gz;
}

// z = a grad*(x) + c z: the exact adjoint of `gradient` for every x (the difference into the last
// index is kept, so no assumption on x is needed).
@compute @workgroup_size(WORKGROUP)
fn gradient_adjoint(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = thread_id(wid, groups, lid);
    if (i >= p.count) {
        return;
    }
    let ix = i % p.n2;
    let iy = (i / p.n2) % p.n1;
    let iz = i / (p.n2 * p.n1);
    let strides = array<u32, 3>(1u, p.n2, p.n2 * p.n1);
    let index = array<u32, 3>(ix, iy, iz);
    let sizes = array<u32, 3>(p.n2, p.n1, p.n0);
    var acc = 0.0;
    for (var c = 0u; c < 3u; c++) {
        let q = x[c * p.count + i];
        // -(q_i - q_{i-1}) with q_{-1} = 0, and q_{n-1} (the difference that is always zero)
        // contributes nothing to element n-1.
        if (index[c] + 1u < sizes[c]) {
            acc -= q;
        }
        if (index[c] > 0u) {
            acc += x[c * p.count + i - strides[c]];
        }
    }
    z[i] = p.a * INV_SQRT3 * acc + p.c * z[i];
}

// z = S_tau(x + b y): isotropic shrinkage of the 3-vectors (x_c + b y_c) with tau = a:
// scaled by (1 - tau/|v|) where |v| > tau, zero otherwise.
@compute @workgroup_size(WORKGROUP)
fn shrink(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = thread_id(wid, groups, lid);
    if (i >= p.count) {
        return;
    }
    let v = vec3<f32>(
        x[i] + p.b * y[i],
        x[p.count + i] + p.b * y[p.count + i],
        x[2u * p.count + i] + p.b * y[2u * p.count + i],
    );
    let norm = length(v);
    var s = 0.0;
    if (norm > p.a) {
        s = 1.0 - p.a / norm;
    }
    z[i] = s * v.x;
    z[p.count + i] = s * v.y;
    z[2u * p.count + i] = s * v.z;
}

// Per-workgroup partial sums, combined in f64 on the host; a fixed-order tree, so repeat runs give
// the same bits. `dot`: sum x_i y_i. `iso_norm`: sum over voxels of |(x_0, x_1, x_2)|.
fn reduce_store(lid: u32, group: u32, value: f32) {
    partial[lid] = value;
    workgroupBarrier();
    for (var s = WORKGROUP / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        z[group] = partial[0];
    }
}

@compute @workgroup_size(WORKGROUP)
fn dot(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * groups.x;
    let i = group * WORKGROUP + lid;
    var value = 0.0;
    if (i < p.count) {
        value = x[i] * y[i];
    }
    reduce_store(lid, group, value);
}

@compute @workgroup_size(WORKGROUP)
fn iso_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * groups.x;
    let i = group * WORKGROUP + lid;
    var value = 0.0;
    if (i < p.count) {
        value = length(vec3<f32>(x[i], x[p.count + i], x[2u * p.count + i]));
    }
    reduce_store(lid, group, value);
}
