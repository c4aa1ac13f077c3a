// A plain copy, 16 bytes per thread: the memory-bandwidth yardstick that benchmarks compare to.

struct CopyParams {
    count: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@group(0) @binding(2) var<uniform> p: CopyParams;

override WORKGROUP: u32 = 256u;

@compute @workgroup_size(WORKGROUP)
fn copy_vec4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    if (g < p.count) {
        dst[g] = src[g];
    }
}
