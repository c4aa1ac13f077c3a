// Stage in: copies a 3D block of a whole array (a volume, the spectrum or the data, read through
// a window of it) into a stage's chunk-local complex buffer. The whole array is complex (mode 0),
// real (mode 1: imaginary parts 0) or the difference of two complex arrays a - b (mode 2, the
// residual D - A u, formed on the fly instead of stored). Views count elements (complex or real)
// from each binding's start.

struct View {
    offset: u32,
    s0: u32,
    s1: u32,
    s2: u32,
}

struct StageParams {
    whole: View,
    local: View,
    e0: u32,
    e1: u32,
    e2: u32,
    mode: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> local: array<vec2<f32>>;
@group(0) @binding(3) var<uniform> p: StageParams;

override WORKGROUP: u32 = 64u;

@compute @workgroup_size(WORKGROUP)
fn stage_in(
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
    let w = p.whole.offset + i0 * p.whole.s0 + i1 * p.whole.s1 + i2 * p.whole.s2;
    let l = p.local.offset + i0 * p.local.s0 + i1 * p.local.s1 + i2 * p.local.s2;
    switch p.mode {
        case 1u: {
            local[l] = vec2<f32>(a[w], 0.0);
        }
        case 2u: {
            local[l] = vec2<f32>(a[2u * w] - b[2u * w], a[2u * w + 1u] - b[2u * w + 1u]);
        }
        default: {
            local[l] = vec2<f32>(a[2u * w], a[2u * w + 1u]);
        }
    }
}
