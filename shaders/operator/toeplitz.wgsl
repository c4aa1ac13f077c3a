// The normal operator Re A*A as a Toeplitz convolution (docs/operator-method.md, "Normal operator
// by Toeplitz embedding"): a real volume of shape (a0, a1, a2) is zero-padded onto the doubled
// grid (2 a0, 2 a1, 2 a2), transformed, multiplied by the kernel's real spectrum, transformed
// back and cropped. The grid is real, so its transform along the last axis is done as a complex
// one of half the length (a2: each complex element holds two neighbouring reals) followed by
// `toeplitz_split`, which forms the a2 + 1 frequencies of the real line; the complex grid is
// (2 a0, 2 a1, a2 + 1) and the inverse mirrors it (`toeplitz_merge`). These kernels are the steps
// between the FFTs. One invocation per element or per pair of frequencies, no sums across
// invocations: every output bit is fixed by its inputs.

struct ToeplitzParams {
    a0: u32,
    a1: u32,
    a2: u32,
    // Elements the dispatch covers.
    count: u32,
    // Complex elements per line of the grid: a2 + 1.
    pitch: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> volume: array<f32>;
@group(0) @binding(1) var<storage, read_write> grid: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> spectrum: array<f32>;
@group(0) @binding(3) var<storage, read_write> result: array<f32>;
// e^{-i pi k / a2} for k = 0 .. a2/2: the twiddles between a line's halves.
@group(0) @binding(4) var<storage, read> twiddles: array<vec2<f32>>;
@group(0) @binding(5) var<uniform> p: ToeplitzParams;

override WORKGROUP: u32 = 64u;

fn element(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * groups.x) * WORKGROUP + lid;
}

fn cmul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

fn conj(a: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x, -a.y);
}

// The first grid element of the volume's line `line` (z-major over its a0 a1 lines).
fn line_start(line: u32) -> u32 {
    let i1 = line % p.a1;
    let i0 = line / p.a1;
    return (i0 * 2u * p.a1 + i1) * p.pitch;
}

// Invocation g of a split or merge: its pair (k, a2 - k) of frequencies and its line's start.
fn pair_of(g: u32) -> vec2<u32> {
    let pairs = p.a2 / 2u + 1u;
    return vec2<u32>(g % pairs, line_start(g / pairs));
}

// The volume's lines of the grid: the volume's reals, two per element along the last axis, then
// zeros to the half-length transform's a2 elements (element a2 is the split's). The rest of the
// grid, zero outside the volume's corner, is cleared by a fill before this. A workgroup per
// volume line, its invocations along the line: the line's place is divided out once per
// invocation, not per element (count: the volume's lines).
@compute @workgroup_size(WORKGROUP)
fn toeplitz_pad(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let line = wid.x + wid.y * groups.x;
    if (line >= p.count) {
        return;
    }
    let start = line_start(line);
    let first = line * p.a2;
    let filled = p.a2 / 2u;
    for (var m = lid; m < p.a2; m += WORKGROUP) {
        var v = vec2<f32>(0.0, 0.0);
        if (m < filled) {
            v = vec2<f32>(volume[first + 2u * m], volume[first + 2u * m + 1u]);
        }
        grid[start + m] = v;
    }
}

// After the half-length transform Z of a volume line: its real line's frequencies
// X[k] = E + W^k O and X[a2 - k] = conj(E - W^k O), with E = (Z[k] + conj Z[a2 - k]) / 2 and
// O = (Z[k] - conj Z[a2 - k]) / 2i the transforms of the even and odd reals, W^k = e^{-i pi k/a2}
// (count: the volume's lines times a2/2 + 1 pairs).
@compute @workgroup_size(WORKGROUP)
fn toeplitz_split(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = element(wid, groups, lid);
    if (g >= p.count) {
        return;
    }
    let pair = pair_of(g);
    let k = pair.x;
    let o = pair.y;
    let zk = grid[o + k];
    let zm = conj(grid[o + (p.a2 - k) % p.a2]);
    let e = 0.5 * (zk + zm);
    let d = zk - zm;
    let odd = 0.5 * vec2<f32>(d.y, -d.x);
    let wo = cmul(twiddles[k], odd);
    grid[o + k] = e + wo;
    grid[o + p.a2 - k] = conj(e - wo);
}

// grid *= spectrum, a real factor per element (count: the grid's elements).
@compute @workgroup_size(WORKGROUP)
fn toeplitz_multiply(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = element(wid, groups, lid);
    if (g >= p.count) {
        return;
    }
    grid[g] = grid[g] * spectrum[g];
}

// The inverse of `toeplitz_split` on a line of a Hermitian spectrum X[0 .. a2]: the half-length
// line Z whose inverse transform holds the real line's even and odd elements, unscaled:
// Z[k] = E + i O, Z[a2 - k] = conj E + i conj O with E = X[k] + conj X[a2 - k] and
// O = (X[k] - conj X[a2 - k]) conj W^k (count: as `toeplitz_split`).
@compute @workgroup_size(WORKGROUP)
fn toeplitz_merge(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = element(wid, groups, lid);
    if (g >= p.count) {
        return;
    }
    let pair = pair_of(g);
    let k = pair.x;
    let o = pair.y;
    let xk = grid[o + k];
    let xm = conj(grid[o + p.a2 - k]);
    let e = xk + xm;
    let odd = cmul(xk - xm, conj(twiddles[k]));
    grid[o + k] = e + vec2<f32>(-odd.y, odd.x);
    let odd_c = conj(odd);
    grid[o + p.a2 - k] = conj(e) + vec2<f32>(-odd_c.y, odd_c.x);
}

// result = the volume's corner of the grid, two reals per element (count: the volume's elements).
@compute @workgroup_size(WORKGROUP)
fn toeplitz_crop(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = element(wid, groups, lid);
    if (g >= p.count) {
        return;
    }
    let i2 = g % p.a2;
    let z = grid[line_start(g / p.a2) + i2 / 2u];
    result[g] = select(z.y, z.x, (i2 & 1u) == 0u);
}
