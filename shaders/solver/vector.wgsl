// Vector kernels of the ADMM-TV solver over arrays made of planes (volume fields: z planes of
// n1 n2 voxels; data fields: one projection per plane). A dispatch covers `planes` whole planes of
// `plane_len` units starting at global plane `first_plane`; a workgroup covers part of one plane.
// Every binding is a window of its array and `o*` is the offset (in `Word`s) of the window's
// first plane inside it, so arrays larger than one binding, and arrays streamed through the
// device a slab at a time, are processed window by window with the same arithmetic.
//
// This part is shared by two modules that differ in their first part, which defines `Word`, the
// element of the arrays: `f32` (vector_f32.wgsl, with the kernels over voxels in
// vector_voxels.wgsl) or `vec4<f32>` (vector_vec4.wgsl: four words per load and store, for
// arrays whose planes are whole `vec4`s).
//
// Coefficients are `c[i] * scalars[s[i]]`: constants fixed when the call site is built times a
// scalar the host writes once per outer iteration (rho) or a kernel computes on the GPU (the CG
// step), so a call site is recorded as often as needed without waiting for the host. A term
// whose constant is zero is not read at all (`TERMS`), so a call site reads only the arrays it
// uses and a NaN in an unused array cannot spread.
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

@group(0) @binding(0) var<storage, read> x: array<Word>;
@group(0) @binding(1) var<storage, read> y: array<Word>;
@group(0) @binding(2) var<storage, read> w: array<Word>;
@group(0) @binding(3) var<storage, read> v: array<Word>;
@group(0) @binding(4) var<storage, read_write> z: array<Word>;
@group(0) @binding(5) var<storage, read> scalars: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

override WORKGROUP: u32 = 256u;
// Units each invocation of `lincomb` and `dot` covers, WORKGROUP apart (contiguous across the
// workgroup): a workgroup covers WORKGROUP * UNITS_PER_INVOCATION units, so a reduction has that
// many fewer partial sums and workgroup barriers.
override UNITS_PER_INVOCATION: u32 = 4u;
// Bit i set: the term of coefficient i is read (its constant is not zero).
override TERMS: u32 = 15u;

var<workgroup> partial: array<f32, WORKGROUP>;

fn coef(i: u32) -> f32 {
    return p.c[i] * scalars[p.s[i]];
}

fn uses(i: u32) -> bool {
    return ((TERMS >> i) & 1u) != 0u;
}

struct Unit {
    // Position of the unit inside the window (units from the window's first plane).
    local: u32,
    // Global unit index (for the volume's coordinates).
    global: u32,
    valid: bool,
}

fn group_of(wid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return wid.x + wid.y * groups.x;
}

// Unit `k` of the plane of workgroup `group` (the window's workgroups, `groups_per_plane` per
// plane).
fn unit_of(group: u32, k: u32) -> Unit {
    let plane = group / p.groups_per_plane;
    var u: Unit;
    u.local = plane * p.plane_len + k;
    u.global = (p.first_plane + plane) * p.plane_len + k;
    u.valid = plane < p.planes && k < p.plane_len;
    return u;
}

// Unit `j` of invocation `lid` in a kernel that covers UNITS_PER_INVOCATION units per invocation.
fn strided_unit(group: u32, lid: u32, j: u32) -> Unit {
    let first = (group % p.groups_per_plane) * WORKGROUP * UNITS_PER_INVOCATION;
    return unit_of(group, first + j * WORKGROUP + lid);
}

// z = a x + b y + c w + d z, over words.
@compute @workgroup_size(WORKGROUP)
fn lincomb(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let group = group_of(wid, groups);
    for (var j = 0u; j < UNITS_PER_INVOCATION; j++) {
        let u = strided_unit(group, lid, j);
        if (u.valid) {
            let k = u.local;
            var acc = Word(0.0);
            if (uses(0u)) {
                acc = coef(0u) * x[p.ox + k];
            }
            if (uses(1u)) {
                acc += coef(1u) * y[p.oy + k];
            }
            if (uses(2u)) {
                acc += coef(2u) * w[p.ow + k];
            }
            if (uses(3u)) {
                acc += coef(3u) * z[p.oz + k];
            }
            z[p.oz + k] = acc;
        }
    }
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
        store_partial(group, partial[0]);
    }
}

// Partial sums of (x + b y)(w + d v) over words.
@compute @workgroup_size(WORKGROUP)
fn dot(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let group = group_of(wid, groups);
    var acc = Word(0.0);
    for (var j = 0u; j < UNITS_PER_INVOCATION; j++) {
        let u = strided_unit(group, lid, j);
        if (u.valid) {
            let k = u.local;
            var left = x[p.ox + k];
            if (uses(1u)) {
                left += coef(1u) * y[p.oy + k];
            }
            var right = w[p.ow + k];
            if (uses(3u)) {
                right += coef(3u) * v[p.ov + k];
            }
            acc += left * right;
        }
    }
    reduce_store(lid, group, word_sum(acc));
}
