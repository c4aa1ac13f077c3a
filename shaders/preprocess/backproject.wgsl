// Backprojection of filtered projections into a thin slab of the volume, for one candidate
// rotation axis and tilt: every voxel adds, over the angles of one chunk, the bilinearly
// interpolated filtered value where its ray meets the detector to its running sum.
//
// Voxel (s, y, x) of the slab sits at r = (x - n2/2, y - n1/2, z_first + s) (voxel units from
// the volume centre). At angle theta with tilt phi it meets the detector at
//   column w = r . e1 + center,        e1 = (cos theta, sin theta, 0)
//   row    v = r . e2 + row_origin,    e2 = (sin theta cos phi, -cos theta cos phi, sin phi)
// (row_origin = deth/2 minus the first staged row). Samples outside the staged rows or the
// detector's columns count as zero. The slab holds the running sum, unscaled: a chunk continues
// it angle by angle (`accumulate`), so the sum has one order, every angle in turn, whatever the
// chunks and whichever MPI rank holds them. The host multiplies it by sin phi after the last
// angle (the laminographic backprojection's transfer function is 1/(sin phi |k_u|) per angle, and
// the ramp filter supplies only |k_u|).

struct BackprojectParams {
    n1: u32,
    n2: u32,
    slices: u32,
    angles: u32,
    rows: u32,
    pitch: u32,
    detw: u32,
    accumulate: u32,
    center: f32,
    cos_phi: f32,
    sin_phi: f32,
    row_origin: f32,
    z_first: f32,
    pad1: f32,
    pad2: f32,
    pad3: f32,
}

@group(0) @binding(0) var<storage, read> filtered: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read> trig: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> slab: array<f32>;
@group(0) @binding(3) var<uniform> p: BackprojectParams;

override WORKGROUP: u32 = 64u;

fn sample(angle: u32, v: i32, w: i32) -> f32 {
    if (v < 0 || v >= i32(p.rows) || w < 0 || w >= i32(p.detw)) {
        return 0.0;
    }
    return filtered[(angle * p.rows + u32(v)) * p.pitch + u32(w)].x;
}

@compute @workgroup_size(WORKGROUP)
fn backproject(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    if (g >= p.slices * p.n1 * p.n2) {
        return;
    }
    let x = g % p.n2;
    let y = (g / p.n2) % p.n1;
    let s = g / (p.n1 * p.n2);
    let rx = f32(x) - f32(p.n2 / 2u);
    let ry = f32(y) - f32(p.n1 / 2u);
    let rz = p.z_first + f32(s);
    var sum = 0.0;
    if (p.accumulate == 1u) {
        sum = slab[g];
    }
    for (var a = 0u; a < p.angles; a = a + 1u) {
        let cs = trig[a];
        let w = rx * cs.x + ry * cs.y + p.center;
        let v = (rx * cs.y - ry * cs.x) * p.cos_phi + rz * p.sin_phi + p.row_origin;
        let w0 = floor(w);
        let v0 = floor(v);
        let fw = w - w0;
        let fv = v - v0;
        let wi = i32(w0);
        let vi = i32(v0);
        let top = (1.0 - fw) * sample(a, vi, wi) + fw * sample(a, vi, wi + 1);
        let bottom = (1.0 - fw) * sample(a, vi + 1, wi) + fw * sample(a, vi + 1, wi + 1);
        sum = sum + (1.0 - fv) * top + fv * bottom;
    }
    slab[g] = sum;
}
