// Vector kernels of the ADMM-TV solver over arrays made of planes (volume fields: z planes of
// n1 n2 voxels; data fields: one projection per plane). A dispatch covers `planes` whole planes of
// `plane_len` units starting at global plane `first_plane`; each workgroup covers WORKGROUP units
// of one plane. Every binding is a window of its array and `o*` is the word offset of the
// window's first plane inside it, so arrays larger than one binding, and arrays streamed through
// the device a slab at a time, are processed window by window with the same arithmetic.
//
// Coefficients are `c[i] * scalars[s[i]]`: constants fixed when the call site is built times a
// scalar the host writes once per outer iteration (rho) or a kernel computes on the GPU (the CG
// step), so a call site is recorded as often as needed without waiting for the host.
//
// Reductions write one partial sum per (plane, workgroup), indexed globally, so the partial sums
// and the fixed-order double-word finish (`plane_sums`, `total`) do not depend on how the planes
// were split into windows or slabs: same input, same bits.

struct Params {
    planes: u32,
    plane_len: u32,
    first_plane: u32,
    groups_per_plane: u32,
    n0: u32,
    n1: u32,
    n2: u32,
    ox: u32,
    oy: u32,
    ow: u32,
    ov: u32,
    oz: u32,
    sum_slot: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    c: vec4<f32>,
    s: vec4<u32>,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> z: array<f32>;
@group(0) @binding(5) var<storage, read> scalars: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

override WORKGROUP: u32 = 256u;
const INV_SQRT3: f32 = 0.57735026918962576;

var<workgroup> partial: array<f32, WORKGROUP>;
var<workgroup> partial_dw: array<vec2<f32>, WORKGROUP>;

fn coef(i: u32) -> f32 {
    return p.c[i] * scalars[p.s[i]];
}

struct Unit {
    // Position of the unit inside the window (units from the window's first plane).
    local: u32,
    // Global unit index (for the volume's coordinates).
    global: u32,
    valid: bool,
    // The workgroup's index among the window's workgroups.
    group: u32,
}

fn unit_of(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> Unit {
    let group = wid.x + wid.y * groups.x;
    let plane = group / p.groups_per_plane;
    let k = (group % p.groups_per_plane) * WORKGROUP + lid;
    var u: Unit;
    u.local = plane * p.plane_len + k;
    u.global = (p.first_plane + plane) * p.plane_len + k;
    u.valid = plane < p.planes && k < p.plane_len;
    u.group = group;
    return u;
}

// z = a x + b y + c w + d z, over scalars (plane_len counts words).
@compute @workgroup_size(WORKGROUP)
fn lincomb(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let u = unit_of(wid, groups, lid);
    if (u.valid) {
        let k = u.local;
        z[p.oz + k] = coef(0u) * x[p.ox + k] + coef(1u) * y[p.oy + k] + coef(2u) * w[p.ow + k] + coef(3u) * z[p.oz + k];
    }
}

// Forward differences scaled by 1/sqrt(3), zero at the last index of each axis; components
// (x, y, z) = axes (2, 1, 0) of the (n0, n1, n2) volume: z = a grad(x) + d z over voxels. x's
// window reaches one z plane beyond the window's planes.
@compute @workgroup_size(WORKGROUP)
fn gradient(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let u = unit_of(wid, groups, lid);
    if (!u.valid) {
        return;
    }
    let i = u.global;
    let ix = i % p.n2;
    let iy = (i / p.n2) % p.n1;
    let iz = i / (p.n2 * p.n1);
    let at = p.ox + u.local;
    let value = x[at];
    var d = vec3<f32>(0.0, 0.0, 0.0);
    if (ix + 1u < p.n2) {
        d.x = (x[at + 1u] - value) * INV_SQRT3;
    }
    if (iy + 1u < p.n1) {
        d.y = (x[at + p.n2] - value) * INV_SQRT3;
    }
    if (iz + 1u < p.n0) {
        d.z = (x[at + p.n2 * p.n1] - value) * INV_SQRT3;
    }
    let a = coef(0u);
    let dd = coef(3u);
    let o = p.oz + 3u * u.local;
    z[o] = a * d.x + dd * z[o];
    z[o + 1u] = a * d.y + dd * z[o + 1u];
    z[o + 2u] = a * d.z + dd * z[o + 2u];
}

// The 3-vector field q = x + b y + c w at voxel `at` (word offsets per binding), component `k`.
fn field3(ax: u32, ay: u32, aw: u32, k: u32) -> f32 {
    return x[ax + k] + coef(1u) * y[ay + k] + coef(2u) * w[aw + k];
}

// z = a grad*(x + b y + c w) + d z: the exact adjoint of `gradient` for every field (the
// difference into the last index is kept, so no assumption on the field is needed). The
// inputs' windows reach one z plane before the window's planes.
@compute @workgroup_size(WORKGROUP)
fn gradient_adjoint(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let u = unit_of(wid, groups, lid);
    if (!u.valid) {
        return;
    }
    let i = u.global;
    let index = array<u32, 3>(i % p.n2, (i / p.n2) % p.n1, i / (p.n2 * p.n1));
    let strides = array<u32, 3>(1u, p.n2, p.n2 * p.n1);
    let sizes = array<u32, 3>(p.n2, p.n1, p.n0);
    let k3 = 3u * u.local;
    var acc = 0.0;
    for (var c = 0u; c < 3u; c++) {
        // -(q_i - q_{i-1}) with q_{-1} = 0; q_{n-1} (a difference that is always zero) adds
        // nothing to element n-1.
        if (index[c] + 1u < sizes[c]) {
            acc -= field3(p.ox + k3, p.oy + k3, p.ow + k3, c);
        }
        if (index[c] > 0u) {
            let back = 3u * strides[c];
            acc += field3(p.ox + k3 - back, p.oy + k3 - back, p.ow + k3 - back, c);
        }
    }
    let o = p.oz + u.local;
    z[o] = coef(0u) * INV_SQRT3 * acc + coef(3u) * z[o];
}

// z = S_tau(x + b y) with tau = a: isotropic shrinkage of the 3-vectors, scaled by (1 - tau/|v|)
// where |v| > tau, zero otherwise.
@compute @workgroup_size(WORKGROUP)
fn shrink(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let u = unit_of(wid, groups, lid);
    if (!u.valid) {
        return;
    }
    let k3 = 3u * u.local;
    let b = coef(1u);
    let xi = p.ox + k3;
    let yi = p.oy + k3;
    let vec = vec3<f32>(x[xi], x[xi + 1u], x[xi + 2u]) + b * vec3<f32>(y[yi], y[yi + 1u], y[yi + 2u]);
    let tau = coef(0u);
    let norm = length(vec);
    var scale = 0.0;
    if (norm > tau) {
        scale = 1.0 - tau / norm;
    }
    let zi = p.oz + k3;
    z[zi] = scale * vec.x;
    z[zi + 1u] = scale * vec.y;
    z[zi + 2u] = scale * vec.z;
}

// A fixed-order tree over the workgroup; the workgroup's sum goes to its slot among the window's
// partial sums.
// Surplus workgroups of a dispatch laid out in two dimensions write nothing.
fn reduce_store(lid: u32, group: u32, value: f32) {
    partial[lid] = value;
    workgroupBarrier();
    for (var s = WORKGROUP / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u && group < p.planes * p.groups_per_plane) {
        z[group] = partial[0];
    }
}

// Partial sums of (x + b y)(w + d v) over scalars.
@compute @workgroup_size(WORKGROUP)
fn dot(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let u = unit_of(wid, groups, lid);
    var value = 0.0;
    if (u.valid) {
        let k = u.local;
        value = (x[p.ox + k] + coef(1u) * y[p.oy + k]) * (w[p.ow + k] + coef(3u) * v[p.ov + k]);
    }
    reduce_store(lid, u.group, value);
}

// Partial sums of |(x_3k, x_3k+1, x_3k+2)| over voxels.
@compute @workgroup_size(WORKGROUP)
fn iso_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let u = unit_of(wid, groups, lid);
    var value = 0.0;
    if (u.valid) {
        let i = p.ox + 3u * u.local;
        value = length(vec3<f32>(x[i], x[i + 1u], x[i + 2u]));
    }
    reduce_store(lid, u.group, value);
}

// Double-word (hi + lo) arithmetic: the finish of a reduction adds up to millions of partial
// sums, and error-free transformations keep the result as accurate as an f64 sum would be.
fn two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = a + b;
    let bb = s - a;
    return vec2<f32>(s, (a - (s - bb)) + (b - bb));
}

fn dw_add(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    let s = two_sum(a.x, b.x);
    let e = s.y + a.y + b.y;
    let hi = s.x + e;
    return vec2<f32>(hi, e - (hi - s.x));
}

// Tree of the workgroup's double words, fixed order; the result is in partial_dw[0].
fn reduce_dw(lid: u32, value: vec2<f32>) {
    partial_dw[lid] = value;
    workgroupBarrier();
    for (var s = WORKGROUP / 2u; s > 0u; s /= 2u) {
        if (lid < s) {
            partial_dw[lid] = dw_add(partial_dw[lid], partial_dw[lid + s]);
        }
        workgroupBarrier();
    }
}

// Finish, step 1, right after each window: one workgroup per plane adds the plane's
// `groups_per_plane` partial sums (the window's, from the start of x) in a fixed order into a
// double word, written to z at 2 (first_plane + plane).
@compute @workgroup_size(WORKGROUP)
fn plane_sums(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let plane = wid.x + wid.y * groups.x;
    if (plane >= p.planes) {
        return;
    }
    let base = plane * p.groups_per_plane;
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = lid; j < p.groups_per_plane; j += WORKGROUP) {
        acc = dw_add(acc, vec2<f32>(x[base + j], 0.0));
    }
    reduce_dw(lid, acc);
    if (lid == 0u) {
        let o = 2u * (p.first_plane + plane);
        z[o] = partial_dw[0].x;
        z[o + 1u] = partial_dw[0].y;
    }
}

// Finish, step 2: one workgroup adds the `planes` plane sums (double words in x) in a fixed order
// and writes the total as a double word to z at 2 sum_slot.
@compute @workgroup_size(WORKGROUP)
fn total(@builtin(local_invocation_index) lid: u32) {
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = lid; j < p.planes; j += WORKGROUP) {
        acc = dw_add(acc, vec2<f32>(x[2u * j], x[2u * j + 1u]));
    }
    reduce_dw(lid, acc);
    if (lid == 0u) {
        z[2u * p.sum_slot] = partial_dw[0].x;
        z[2u * p.sum_slot + 1u] = partial_dw[0].y;
    }
}
