// Stage out: copies a stage's chunk-local complex result into a 3D block of a whole array (read
// and written through a window of it): complex (mode 0), or the real part scaled by a
// coefficient `c * coefficients[slot]` and added to the array when `accumulate` is set (mode 1),
// which is how the solver folds `r += (-s/N) Re A* (A p)` into the operator's last stage.

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
    c: f32,
    slot: u32,
    accumulate: u32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> local: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> whole: array<f32>;
@group(0) @binding(2) var<storage, read> coefficients: array<f32>;
@group(0) @binding(3) var<uniform> p: StageParams;

override WORKGROUP: u32 = 64u;

@compute @workgroup_size(WORKGROUP)
fn stage_out(
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
    let value = local[l];
    if (p.mode == 1u) {
        var kept = 0.0;
        if (p.accumulate != 0u) {
            kept = whole[w];
        }
        whole[w] = p.c * coefficients[p.slot] * value.x + kept;
    } else {
        whole[2u * w] = value.x;
        whole[2u * w + 1u] = value.y;
    }
}
