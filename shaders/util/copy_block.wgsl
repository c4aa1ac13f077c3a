// Copies a 3D block between two strided views of complex arrays: the staging step between the
// whole-array buffers (volume, spectrum, data) and the chunk-local buffers the stages work on.
// View offsets are relative to each binding's window (wrapping u32 arithmetic, see Layout).

struct View {
    offset: u32,
    s0: u32,
    s1: u32,
    s2: u32,
}

struct BlockParams {
    src: View,
    dst: View,
    e0: u32,
    e1: u32,
    e2: u32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec2<f32>>;
@group(0) @binding(2) var<uniform> p: BlockParams;

override WORKGROUP: u32 = 64u;

@compute @workgroup_size(WORKGROUP)
fn copy_block(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    if (g >= p.e0 * p.e1 * p.e2) {
        return;
    }
    let i2 = g % p.e2;
    let i1 = (g / p.e2) % p.e1;
    let i0 = g / (p.e2 * p.e1);
    let s = p.src.offset + i0 * p.src.s0 + i1 * p.src.s1 + i2 * p.src.s2;
    let d = p.dst.offset + i0 * p.dst.s0 + i1 * p.dst.s1 + i2 * p.dst.s2;
    dst[d] = src[s];
}
