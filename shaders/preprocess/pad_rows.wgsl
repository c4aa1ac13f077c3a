// Stages detector rows for the ramp filter: each real row of `width` values becomes a complex row
// of `pitch` values, edge-padded (the last value over the first half of the padding, the first
// value over the second half, which the circular filter sees to the left of the row).

struct PadParams {
    count: u32,
    width: u32,
    pitch: u32,
    pad0: u32,
}

@group(0) @binding(0) var<storage, read> raw: array<f32>;
@group(0) @binding(1) var<storage, read_write> rows: array<vec2<f32>>;
@group(0) @binding(2) var<uniform> p: PadParams;

override WORKGROUP: u32 = 64u;

@compute @workgroup_size(WORKGROUP)
fn pad_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    if (g >= p.count) {
        return;
    }
    let row = g / p.pitch;
    let i = g % p.pitch;
    var source = i;
    if (i >= p.width) {
        source = select(0u, p.width - 1u, i < p.width + (p.pitch - p.width) / 2u);
    }
    rows[g] = vec2<f32>(raw[row * p.width + source], 0.0);
}
