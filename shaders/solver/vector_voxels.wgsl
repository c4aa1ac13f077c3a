// The kernels over voxels of the solver's vector module (with vector.wgsl and vector_f32.wgsl):
// the gradient and its adjoint, shrinkage, the isotropic norm, and the fixed-order finish of
// every reduction. The stencils and shrinkage take one unit (a voxel, or a 3-vector of a
// gradient field) per invocation.

const INV_SQRT3: f32 = 0.57735026918962576;

var<workgroup> partial_dw: array<vec2<f32>, WORKGROUP>;

fn voxel_unit(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> Unit {
    let group = group_of(wid, groups);
    return unit_of(group, (group % p.groups_per_plane) * WORKGROUP + lid);
}

// Forward differences scaled by 1/sqrt(3), zero at the last index of each axis; components
// (x, y, z) = axes (2, 1, 0) of the (n0, n1, n2) volume: z = a grad(x) + d z over voxels. x's
// window reaches one z plane beyond the window's planes.
@compute @workgroup_size(WORKGROUP)
fn gradient(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let u = voxel_unit(wid, groups, lid);
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
    var out = coef(0u) * d;
    let o = p.oz + 3u * u.local;
    if (uses(3u)) {
        out += coef(3u) * vec3<f32>(z[o], z[o + 1u], z[o + 2u]);
    }
    z[o] = out.x;
    z[o + 1u] = out.y;
    z[o + 2u] = out.z;
}

// The 3-vector field q = x + b y + c w at voxel `at` (word offsets per binding), component `k`.
fn field3(ax: u32, ay: u32, aw: u32, k: u32) -> f32 {
    var q = x[ax + k];
    if (uses(1u)) {
        q += coef(1u) * y[ay + k];
    }
    if (uses(2u)) {
        q += coef(2u) * w[aw + k];
    }
    return q;
}

// z = a grad*(x + b y + c w) + d z: the exact adjoint of `gradient` for every field (the
// difference into the last index is kept, so no assumption on the field is needed). The
// inputs' windows reach one z plane before the window's planes.
@compute @workgroup_size(WORKGROUP)
fn gradient_adjoint(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let u = voxel_unit(wid, groups, lid);
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
    var out = coef(0u) * INV_SQRT3 * acc;
    if (uses(3u)) {
        out += coef(3u) * z[o];
    }
    z[o] = out;
}

// z = S_tau(x + b y) with tau = a: isotropic shrinkage of the 3-vectors, scaled by (1 - tau/|v|)
// where |v| > tau, zero otherwise.
@compute @workgroup_size(WORKGROUP)
fn shrink(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let u = voxel_unit(wid, groups, lid);
    if (!u.valid) {
        return;
    }
    let k3 = 3u * u.local;
    let xi = p.ox + k3;
    var vec = vec3<f32>(x[xi], x[xi + 1u], x[xi + 2u]);
    if (uses(1u)) {
        let yi = p.oy + k3;
        vec += coef(1u) * vec3<f32>(y[yi], y[yi + 1u], y[yi + 2u]);
    }
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

// Partial sums of |(x_3k, x_3k+1, x_3k+2)| over voxels, UNITS_PER_INVOCATION voxels per
// invocation like `dot`.
@compute @workgroup_size(WORKGROUP)
fn iso_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let group = group_of(wid, groups);
    var value = 0.0;
    for (var j = 0u; j < UNITS_PER_INVOCATION; j++) {
        let u = strided_unit(group, lid, j);
        if (u.valid) {
            let i = p.ox + 3u * u.local;
            value += length(vec3<f32>(x[i], x[i + 1u], x[i + 2u]));
        }
    }
    reduce_store(lid, group, value);
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
