// A whole Stockham FFT in workgroup memory: each transform is read from global memory once, all
// radix passes run between workgroup barriers, and the result is written back once, in place.
// A workgroup holds `transforms_per_group` transforms with `threads_per_transform` threads each.
// Each pass first loads every butterfly input of the thread into registers, then (after a
// barrier) computes and writes, so a single workgroup array suffices.

struct FusedParams {
    data: Layout,
    n: u32,
    passes: u32,
    batch_count: u32,
    dir: f32,
    scale: f32,
    threads_per_transform: u32,
    transforms_per_group: u32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read_write> data: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read> twiddles: array<vec2<f32>>;
// Per pass: (radix, ns, twiddle offset, root offset).
@group(0) @binding(2) var<storage, read> pass_table: array<vec4<u32>>;
@group(0) @binding(3) var<uniform> p: FusedParams;

override WORKGROUP: u32 = 256u;
override SHARED_ELEMS: u32 = 2048u;
// Registers per thread: the planner guarantees ceil((n/radix)/threads) * radix <= MAX_REGS.
const MAX_REGS: u32 = 32u;

var<workgroup> shared_data: array<vec2<f32>, SHARED_ELEMS>;

@compute @workgroup_size(WORKGROUP)
fn stockham_fused(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let group = wid.x + wid.y * groups.x;
    let slot = lid / p.threads_per_transform;
    let t = lid % p.threads_per_transform;
    let b = group * p.transforms_per_group + slot;
    let in_batch = slot < p.transforms_per_group && b < p.batch_count;
    let sbase = slot * p.n;
    let threads = p.threads_per_transform;
    var regs: array<vec2<f32>, MAX_REGS>;
    for (var s = 0u; s < p.passes; s++) {
        let pass_info = pass_table[s];
        let radix = pass_info.x;
        let ns = pass_info.y;
        let per = p.n / radix;
        if (in_batch) {
            var q = 0u;
            for (var j = t; j < per; j += threads) {
                for (var r = 0u; r < radix; r++) {
                    let idx = j + r * per;
                    if (s == 0u) {
                        regs[q + r] = data[layout_index(p.data, b, idx)];
                    } else {
                        regs[q + r] = shared_data[sbase + idx];
                    }
                }
                q += radix;
            }
        }
        // All reads of this pass (global on the first, shared later) happen before any write.
        storageBarrier();
        workgroupBarrier();
        if (in_batch) {
            let last = s + 1u == p.passes;
            var q = 0u;
            for (var j = t; j < per; j += threads) {
                let k = j % ns;
                let tw = pass_info.z + k * (radix - 1u);
                var v: array<vec2<f32>, MAX_RADIX>;
                v[0] = regs[q];
                for (var r = 1u; r < radix; r++) {
                    v[r] = cmul(regs[q + r], table_twiddle(twiddles[tw + r - 1u], p.dir));
                }
                small_dft(&v, radix, pass_info.w, p.dir);
                let base = (j / ns) * ns * radix + k;
                for (var r = 0u; r < radix; r++) {
                    let idx = base + r * ns;
                    if (last) {
                        data[layout_index(p.data, b, idx)] = v[r] * p.scale;
                    } else {
                        shared_data[sbase + idx] = v[r];
                    }
                }
                q += radix;
            }
        }
        workgroupBarrier();
    }
}
