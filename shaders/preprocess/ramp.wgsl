// Multiplies every row (of `width` complex values, in FFT order) by the real response of the
// ramp filter: the filtering step of the slab backprojection, between a forward and an inverse
// FFT along the rows.

struct RampParams {
    count: u32,
    width: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> rows: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read> response: array<f32>;
@group(0) @binding(2) var<uniform> p: RampParams;

override WORKGROUP: u32 = 64u;

@compute @workgroup_size(WORKGROUP)
fn ramp(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    if (g >= p.count) {
        return;
    }
    rows[g] = rows[g] * response[g % p.width];
}
