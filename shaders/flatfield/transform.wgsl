// The BaSiC correction (docs/flatfield-method.md, "Correction"), in place on a batch of images:
//   data = (data - dark) / max(flat, flat_min), then clipped at 0 when `clip` is set.

struct TransformParams {
    count: u32,
    pixels: u32,
    flat_min: f32,
    clip: u32,
}

@group(0) @binding(0) var<storage, read_write> data: array<f32>;
@group(0) @binding(1) var<storage, read> flat: array<f32>;
@group(0) @binding(2) var<storage, read> dark: array<f32>;
@group(0) @binding(3) var<uniform> p: TransformParams;

override WORKGROUP: u32 = 256u;

@compute @workgroup_size(WORKGROUP)
fn correct(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    if (g >= p.count) {
        return;
    }
    let j = g % p.pixels;
    var v = (data[g] - dark[j]) / max(flat[j], p.flat_min);
    if (p.clip != 0u) {
        v = max(v, 0.0);
    }
    data[g] = v;
}
