// One radix-R Stockham autosort pass over global memory (used when a transform does not fit in
// workgroup memory). Thread g handles butterfly j of transform b:
//   v[r] = src[j + r*N/R] * w^(k*r),  k = j mod Ns,  w = e^(-2 pi i / (Ns*R))
//   DFT_R(v);  dst[(j/Ns)*Ns*R + k + r*Ns] = v[r]
// After the last pass (Ns*R = N) the output is in natural order.

struct PassParams {
    src: Layout,
    dst: Layout,
    n: u32,
    radix: u32,
    ns: u32,
    twiddle_offset: u32,
    root_offset: u32,
    batch_count: u32,
    dir: f32,
    scale: f32,
}

@group(0) @binding(0) var<storage, read> src: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> twiddles: array<vec2<f32>>;
@group(0) @binding(3) var<uniform> p: PassParams;

override WORKGROUP: u32 = 64u;

@compute @workgroup_size(WORKGROUP)
fn stockham_pass(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    let per = p.n / p.radix;
    if (g >= per * p.batch_count) {
        return;
    }
    let b = g / per;
    let j = g % per;
    let k = j % p.ns;
    var v: array<vec2<f32>, MAX_RADIX>;
    let tw = p.twiddle_offset + k * (p.radix - 1u);
    v[0] = src[layout_index(p.src, b, j)];
    for (var r = 1u; r < p.radix; r++) {
        v[r] = cmul(src[layout_index(p.src, b, j + r * per)], table_twiddle(twiddles[tw + r - 1u], p.dir));
    }
    small_dft(&v, p.radix, p.root_offset, p.dir);
    let base = (j / p.ns) * p.ns * p.radix + k;
    for (var r = 0u; r < p.radix; r++) {
        dst[layout_index(p.dst, b, base + r * p.ns)] = v[r] * p.scale;
    }
}
