// Multiplies a window of a (batch, height, width) complex array by scale * (-1)^(v + w) * phase[w]:
// the centring signs of the per-projection 2D FFT, folded with its scale and with a per-column
// phase (the rotation axis's Fourier shift; all ones for a centred axis, where the product is
// exact, so a centred operator keeps its bits).

struct ModulateParams {
    first: u32,
    count: u32,
    offset: u32,
    height: u32,
    width: u32,
    scale: f32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> data: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read> phase: array<vec2<f32>>;
@group(0) @binding(2) var<uniform> p: ModulateParams;

override WORKGROUP: u32 = 64u;

@compute @workgroup_size(WORKGROUP)
fn modulate(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    if (g >= p.count) {
        return;
    }
    let e = p.first + g;
    let v = (e / p.width) % p.height;
    let w = e % p.width;
    let sign = select(1.0, -1.0, ((v + w) & 1u) == 1u);
    let a = data[p.offset + g] * (sign * p.scale);
    let c = phase[w];
    data[p.offset + g] = vec2<f32>(a.x * c.x - a.y * c.y, a.x * c.y + a.y * c.x);
}
