// Multiplies a window of a (batch, height, width) complex array by
// scale * (-1)^(v + w) * phase(t, v, w): the centring signs of the per-projection 2D FFT, folded
// with its scale and with the projection's Fourier shift (the rotation axis and the volume's
// offset), phase(t, v, w) = columns[t][w] * rows[t][v] for projection t = angle0 + (element's
// batch index), or its conjugate. A table of one angle (angles_vary = 0) serves every
// projection. Without a shift every phase is exactly one and the product is exact, so a centred
// operator keeps its bits.

struct ModulateParams {
    first: u32,
    count: u32,
    offset: u32,
    height: u32,
    width: u32,
    scale: f32,
    angle0: u32,
    angles_vary: u32,
    conjugate: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> data: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read> columns: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> rows: array<vec2<f32>>;
@group(0) @binding(3) var<uniform> p: ModulateParams;

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
    let t = select(0u, p.angle0 + e / (p.width * p.height), p.angles_vary == 1u);
    let sign = select(1.0, -1.0, ((v + w) & 1u) == 1u);
    let a = data[p.offset + g] * (sign * p.scale);
    let cw = columns[t * p.width + w];
    let rv = rows[t * p.height + v];
    var c = vec2<f32>(cw.x * rv.x - cw.y * rv.y, cw.x * rv.y + cw.y * rv.x);
    if (p.conjugate == 1u) {
        c.y = -c.y;
    }
    data[p.offset + g] = vec2<f32>(a.x * c.x - a.y * c.y, a.x * c.y + a.y * c.x);
}
