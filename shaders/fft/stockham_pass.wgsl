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

fn load(b: u32, j: u32, r: u32, per: u32, tw: u32) -> vec2<f32> {
    let x = src[layout_index(p.src, b, j + r * per)];
    if (r == 0u) {
        return x;
    }
    return cmul(x, table_twiddle(twiddles[tw + r - 1u], p.dir));
}

fn store(b: u32, index: u32, value: vec2<f32>) {
    dst[layout_index(p.dst, b, index)] = value * p.scale;
}

// One pass function per radix with fixed-size arrays and constant loop bounds, so that drivers
// keep the butterfly in registers (dynamically indexed private arrays spill to memory).
fn pass_r2(b: u32, j: u32, per: u32, tw: u32, base: u32) {
    let a = load(b, j, 0u, per, tw);
    let c = load(b, j, 1u, per, tw);
    store(b, base, a + c);
    store(b, base + p.ns, a - c);
}

fn pass_r3(b: u32, j: u32, per: u32, tw: u32, base: u32) {
    let a = load(b, j, 0u, per, tw);
    let c1 = load(b, j, 1u, per, tw);
    let c2 = load(b, j, 2u, per, tw);
    let s = c1 + c2;
    let m = a - 0.5 * s;
    let d = 0.86602540378443865 * rot(c1 - c2, p.dir);
    store(b, base, a + s);
    store(b, base + p.ns, m + d);
    store(b, base + 2u * p.ns, m - d);
}

fn pass_r4(b: u32, j: u32, per: u32, tw: u32, base: u32) {
    var v: array<vec2<f32>, MAX_RADIX>;
    for (var r = 0u; r < 4u; r++) {
        v[r] = load(b, j, r, per, tw);
    }
    dft4(&v, 0u, 1u, p.dir);
    for (var r = 0u; r < 4u; r++) {
        store(b, base + r * p.ns, v[r]);
    }
}

fn pass_r8(b: u32, j: u32, per: u32, tw: u32, base: u32) {
    var v: array<vec2<f32>, MAX_RADIX>;
    for (var r = 0u; r < 8u; r++) {
        v[r] = load(b, j, r, per, tw);
    }
    dft8(&v, p.dir);
    for (var r = 0u; r < 8u; r++) {
        store(b, base + r * p.ns, v[r]);
    }
}

fn pass_generic(b: u32, j: u32, per: u32, tw: u32, base: u32) {
    var v: array<vec2<f32>, MAX_RADIX>;
    for (var r = 0u; r < p.radix; r++) {
        v[r] = load(b, j, r, per, tw);
    }
    small_dft(&v, p.radix, p.root_offset, p.dir);
    for (var r = 0u; r < p.radix; r++) {
        store(b, base + r * p.ns, v[r]);
    }
}

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
    let tw = p.twiddle_offset + k * (p.radix - 1u);
    let base = (j / p.ns) * p.ns * p.radix + k;
    switch p.radix {
        case 2u: {
            pass_r2(b, j, per, tw, base);
        }
        case 3u: {
            pass_r3(b, j, per, tw, base);
        }
        case 4u: {
            pass_r4(b, j, per, tw, base);
        }
        case 8u: {
            pass_r8(b, j, per, tw, base);
        }
        default: {
            pass_generic(b, j, per, tw, base);
        }
    }
}
