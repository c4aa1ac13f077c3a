// A whole Stockham FFT in workgroup memory: each transform is read from global memory once, all
// radix passes run between workgroup barriers on two halves of one workgroup array (ping-pong),
// and the result is written back once, in place. A workgroup holds `transforms_per_group`
// transforms with `threads_per_transform` threads each.
//
// Each radix has its own pass function with fixed-size arrays and constant loop bounds, so that
// drivers keep the butterfly in registers (dynamically indexed private arrays spill to memory).

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
// Two buffers of transforms_per_group * n elements each.
override SHARED_ELEMS: u32 = 4096u;

var<workgroup> sm: array<vec2<f32>, SHARED_ELEMS>;

// Loads input r of butterfly j (index j + r*per of the source) times its twiddle w^(k r).
fn load(src: u32, j: u32, r: u32, per: u32, tw: u32) -> vec2<f32> {
    let x = sm[src + j + r * per];
    if (r == 0u) {
        return x;
    }
    return cmul(x, table_twiddle(twiddles[tw + r - 1u], p.dir));
}

fn pass_r2(src: u32, dst: u32, j: u32, per: u32, ns: u32, tw: u32) {
    let a = load(src, j, 0u, per, tw);
    let b = load(src, j, 1u, per, tw);
    let base = dst + (j / ns) * ns * 2u + j % ns;
    sm[base] = a + b;
    sm[base + ns] = a - b;
}

fn pass_r4(src: u32, dst: u32, j: u32, per: u32, ns: u32, tw: u32) {
    var v: array<vec2<f32>, MAX_RADIX>;
    for (var r = 0u; r < 4u; r++) {
        v[r] = load(src, j, r, per, tw);
    }
    dft4(&v, 0u, 1u, p.dir);
    let base = dst + (j / ns) * ns * 4u + j % ns;
    for (var r = 0u; r < 4u; r++) {
        sm[base + r * ns] = v[r];
    }
}

fn pass_r8(src: u32, dst: u32, j: u32, per: u32, ns: u32, tw: u32) {
    var v: array<vec2<f32>, MAX_RADIX>;
    for (var r = 0u; r < 8u; r++) {
        v[r] = load(src, j, r, per, tw);
    }
    dft8(&v, p.dir);
    let base = dst + (j / ns) * ns * 8u + j % ns;
    for (var r = 0u; r < 8u; r++) {
        sm[base + r * ns] = v[r];
    }
}

fn pass_r3(src: u32, dst: u32, j: u32, per: u32, ns: u32, tw: u32) {
    let a = load(src, j, 0u, per, tw);
    let b = load(src, j, 1u, per, tw);
    let c = load(src, j, 2u, per, tw);
    // DFT3: y0 = a + b + c, y1,2 = a - (b + c)/2 -+ i dir sqrt(3)/2 (b - c).
    let s = b + c;
    let m = a - 0.5 * s;
    let d = 0.86602540378443865 * rot(b - c, p.dir);
    let base = dst + (j / ns) * ns * 3u + j % ns;
    sm[base] = a + s;
    sm[base + ns] = m + d;
    sm[base + 2u * ns] = m - d;
}

// Radices 5, 7, 11, 13: the direct sum with roots of unity from the table.
fn pass_generic(src: u32, dst: u32, j: u32, per: u32, ns: u32, tw: u32, radix: u32, roots: u32) {
    var v: array<vec2<f32>, MAX_RADIX>;
    for (var r = 0u; r < radix; r++) {
        v[r] = load(src, j, r, per, tw);
    }
    small_dft(&v, radix, roots, p.dir);
    let base = dst + (j / ns) * ns * radix + j % ns;
    for (var r = 0u; r < radix; r++) {
        sm[base + r * ns] = v[r];
    }
}

@compute @workgroup_size(WORKGROUP)
fn stockham_fused(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let group = wid.x + wid.y * groups.x;
    let threads = p.threads_per_transform;
    let slot = lid / threads;
    let t = lid % threads;
    let b = group * p.transforms_per_group + slot;
    let in_batch = slot < p.transforms_per_group && b < p.batch_count;
    let half = p.transforms_per_group * p.n;
    var src = slot * p.n;
    var dst = half + slot * p.n;
    if (in_batch) {
        for (var i = t; i < p.n; i += threads) {
            sm[src + i] = data[layout_index(p.data, b, i)];
        }
    }
    workgroupBarrier();
    for (var s = 0u; s < p.passes; s++) {
        let info = pass_table[s];
        let radix = info.x;
        let per = p.n / radix;
        if (in_batch) {
            for (var j = t; j < per; j += threads) {
                let tw = info.z + (j % info.y) * (radix - 1u);
                switch radix {
                    case 2u: {
                        pass_r2(src, dst, j, per, info.y, tw);
                    }
                    case 3u: {
                        pass_r3(src, dst, j, per, info.y, tw);
                    }
                    case 4u: {
                        pass_r4(src, dst, j, per, info.y, tw);
                    }
                    case 8u: {
                        pass_r8(src, dst, j, per, info.y, tw);
                    }
                    default: {
                        pass_generic(src, dst, j, per, info.y, tw, radix, info.w);
                    }
                }
            }
        }
        workgroupBarrier();
        let swap = src;
        src = dst;
        dst = swap;
    }
    if (in_batch) {
        for (var i = t; i < p.n; i += threads) {
            data[layout_index(p.data, b, i)] = sm[src + i] * p.scale;
        }
    }
}
