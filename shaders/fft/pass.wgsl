// One pass of a batched FFT: every column of the pass runs a whole sub-transform of length SUB in
// one dispatch. A transform of length LEN is one pass (SUB = LEN) when it fits the exchange
// buffer, else several Stockham passes with large radices (the four-step method):
//
//   pass with sub-length SUB after NS = product of the earlier sub-lengths, J = LEN / SUB columns:
//     column j of a transform reads x[j + q J] (q < SUB), multiplies by w^(q (j mod NS)) with
//     w = e^{-2 pi i / (NS SUB)} (the four-step twiddle, fused into the load), transforms over q
//     and writes X[q] to (j / NS) NS SUB + (j mod NS) + q NS.
//
// The sub-transform is a mixed-radix decimation in frequency in place in the exchange buffer
// (workgroup memory shared by the column's invocations, or one invocation's private array): stage
// s with radix R over blocks of R * next elements runs butterfly (block, j) on positions
// block R next + j + m next (m < R) in registers, multiplies output m by w_(R next)^(j m) and
// writes it back where it came from. The first stage reads global memory and the last writes it,
// so the exchange buffer is used only between register stages, with one barrier each. Outputs come
// out in digit-reversed positions; the last stage writes them to their natural frequencies.
//
// Everything that sizes the transform is either specialised into the pipeline (SPECIALIZED:
// constant divisions and fully unrolled butterflies, for large batches) or read from the uniform
// parameters (one pipeline for every length, for small batches).
//
// Twiddles are computed in the kernel (exact integer octant reduction and minimax polynomials, no
// builtin sin/cos) or, for the register stages with TWIDDLE_TABLE, read from a table of the
// sub-length's roots; the four-step twiddles are always computed.
//
// Bluestein hooks: LOAD_HOOK = 1 multiplies input e by table[load_table + e] and reads zero for
// e >= hook_len; STORE_HOOK = 1 multiplies output e by table[store_table + e], STORE_HOOK = 2 also
// drops outputs e >= hook_len.

struct PassParams {
    src: Layout,
    dst: Layout,
    // Columns in this dispatch: transforms x J.
    columns: u32,
    scale: f32,
    len: u32,
    sub: u32,
    ns: u32,
    dir: f32,
    hook_len: u32,
    load_table: u32,
    store_table: u32,
    twiddle_table: u32,
    pad0: u32,
    pad1: u32,
    // Stage radices (1 after the last stage) and the block length after each stage.
    radices: array<vec4<u32>, 2>,
    nexts: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<storage, read> src: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> table: array<vec2<f32>>;
@group(0) @binding(3) var<uniform> p: PassParams;

// Launch shape: THREADS invocations per column, COLUMNS columns per workgroup; lanes step through
// columns first (COLUMNS_FASTEST, for strided axes: neighbouring columns are neighbouring
// addresses) or through a column's butterflies first.
override THREADS: u32 = 1u;
override COLUMNS: u32 = 1u;
override WORKGROUP: u32 = 1u;
override COLUMNS_FASTEST: bool = false;
// Read from `dst` (one buffer, in place) instead of `src`.
override IN_PLACE: bool = true;
override LOAD_HOOK: u32 = 0u;
override STORE_HOOK: u32 = 0u;
// Twiddles of the register stages from table[twiddle_table + x] = w_SUB^x instead of computed.
override TWIDDLE_TABLE: bool = false;
// The source (destination) elements of a transform are contiguous: index them without the
// layout's stride, so that drivers see neighbouring lanes write neighbouring addresses (on
// lavapipe a quarter of a 4096-point two-level pass's time went to stores it could not merge).
override SRC_UNIT_STRIDE: bool = false;
override DST_UNIT_STRIDE: bool = false;

override SPECIALIZED: bool = false;
override LEN: u32 = 1u;
override SUB: u32 = 1u;
override NS: u32 = 1u;
override DIR: f32 = 1.0;
override S0: u32 = 1u;
override S1: u32 = 1u;
override S2: u32 = 1u;
override S3: u32 = 1u;
override S4: u32 = 1u;
override S5: u32 = 1u;
override S6: u32 = 1u;
override S7: u32 = 1u;
override L1: u32 = SUB / S0;
override L2: u32 = L1 / S1;
override L3: u32 = L2 / S2;
override L4: u32 = L3 / S3;
override L5: u32 = L4 / S4;
override L6: u32 = L5 / S5;
override L7: u32 = L6 / S6;

fn len_total() -> u32 {
    if (SPECIALIZED) {
        return LEN;
    }
    return p.len;
}

fn len_sub() -> u32 {
    if (SPECIALIZED) {
        return SUB;
    }
    return p.sub;
}

fn len_before() -> u32 {
    if (SPECIALIZED) {
        return NS;
    }
    return p.ns;
}

// DIR 0 leaves the direction to the parameters even when specialised: a CPU rasteriser then
// compiles one pipeline for both directions (the sign only multiplies exactly by +-1).
fn dir_sign() -> f32 {
    if (SPECIALIZED && DIR != 0.0) {
        return DIR;
    }
    return p.dir;
}

fn radix_at(s: u32) -> u32 {
    if (SPECIALIZED) {
        switch s {
            case 0u: {
                return S0;
            }
            case 1u: {
                return S1;
            }
            case 2u: {
                return S2;
            }
            case 3u: {
                return S3;
            }
            case 4u: {
                return S4;
            }
            case 5u: {
                return S5;
            }
            case 6u: {
                return S6;
            }
            default: {
                return S7;
            }
        }
    }
    return p.radices[s / 4u][s % 4u];
}

// Block length after stage s (1 after the last stage).
fn next_at(s: u32) -> u32 {
    if (SPECIALIZED) {
        switch s {
            case 0u: {
                return L1;
            }
            case 1u: {
                return L2;
            }
            case 2u: {
                return L3;
            }
            case 3u: {
                return L4;
            }
            case 4u: {
                return L5;
            }
            case 5u: {
                return L6;
            }
            case 6u: {
                return L7;
            }
            default: {
                return 1u;
            }
        }
    }
    return p.nexts[s / 4u][s % 4u];
}

// The twiddle w_m^a of a register stage (m divides the sub-length): from the table of roots or
// computed.
fn stage_twiddle(a: u32, m: u32) -> vec2<f32> {
    if (TWIDDLE_TABLE) {
        let w = table[p.twiddle_table + a * (len_sub() / m)];
        return vec2<f32>(w.x, w.y * dir_sign());
    }
    return twiddle(a, m);
}

// e^{-i dir 2 pi a / m} for integers 0 <= a < m <= 2^28: the octant is found exactly in integers,
// then sine and cosine on [0, pi/4] by minimax polynomials (about 1 ulp); no builtin sin/cos,
// whose accuracy WGSL leaves to the device.
fn twiddle(a: u32, m: u32) -> vec2<f32> {
    let a8 = 8u * a;
    let o = a8 / m;
    let rem = a8 - o * m;
    let r = select(rem, m - rem, (o & 1u) == 1u);
    let x = f32(r) * (0.78539816339744831 / f32(m));
    let z = x * x;
    let s = x + x * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
    let c = 1.0 - 0.5 * z
        + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
    // Octant o covers [o pi/4, (o + 1) pi/4); odd octants measure x from the upper end.
    let swap = ((o + 1u) & 2u) != 0u;
    var cs = select(c, s, swap);
    var sn = select(s, c, swap);
    cs = select(cs, -cs, o >= 2u && o <= 5u);
    sn = select(sn, -sn, o >= 4u);
    return vec2<f32>(cs, -dir_sign() * sn);
}

// Outputs 1 .. radix-1 of a butterfly times w_m^(j r). Specialised kernels have them written
// out so that every index is a constant (a loop around the twiddle is too large for drivers to
// unroll); the shared kernel keeps one copy (compile time).
fn twiddle_outputs(v: ptr<function, array<vec2<f32>, MAX_RADIX>>, radix: u32, j: u32, m: u32) {
    if (!SPECIALIZED) {
        for (var r = 1u; r < radix; r++) {
            (*v)[r] = cmul((*v)[r], stage_twiddle(r * j, m));
        }
        return;
    }
    if (radix > 1u) {
        (*v)[1] = cmul((*v)[1], stage_twiddle(j, m));
    }
    if (radix > 2u) {
        (*v)[2] = cmul((*v)[2], stage_twiddle(2u * j, m));
    }
    if (radix > 3u) {
        (*v)[3] = cmul((*v)[3], stage_twiddle(3u * j, m));
    }
    if (radix > 4u) {
        (*v)[4] = cmul((*v)[4], stage_twiddle(4u * j, m));
    }
    if (radix > 5u) {
        (*v)[5] = cmul((*v)[5], stage_twiddle(5u * j, m));
    }
    if (radix > 6u) {
        (*v)[6] = cmul((*v)[6], stage_twiddle(6u * j, m));
    }
    if (radix > 7u) {
        (*v)[7] = cmul((*v)[7], stage_twiddle(7u * j, m));
    }
    if (radix > 8u) {
        (*v)[8] = cmul((*v)[8], stage_twiddle(8u * j, m));
    }
    if (radix > 9u) {
        (*v)[9] = cmul((*v)[9], stage_twiddle(9u * j, m));
    }
    if (radix > 10u) {
        (*v)[10] = cmul((*v)[10], stage_twiddle(10u * j, m));
    }
    if (radix > 11u) {
        (*v)[11] = cmul((*v)[11], stage_twiddle(11u * j, m));
    }
    if (radix > 12u) {
        (*v)[12] = cmul((*v)[12], stage_twiddle(12u * j, m));
    }
    if (radix > 13u) {
        (*v)[13] = cmul((*v)[13], stage_twiddle(13u * j, m));
    }
    if (radix > 14u) {
        (*v)[14] = cmul((*v)[14], stage_twiddle(14u * j, m));
    }
    if (radix > 15u) {
        (*v)[15] = cmul((*v)[15], stage_twiddle(15u * j, m));
    }
}

struct Column {
    // Inside the dispatch (idle lanes of the last workgroup still reach every barrier).
    valid: bool,
    // Column slot in the workgroup and invocation within the column.
    slot: u32,
    t: u32,
    // Element 0 of the column's transform in `src` and `dst`, and the column within it.
    src_base: u32,
    dst_base: u32,
    j: u32,
}

fn read_input(col: Column, e: u32) -> vec2<f32> {
    let at = col.src_base + select(e * p.src.stride, e, SRC_UNIT_STRIDE);
    if (IN_PLACE) {
        return dst[at];
    }
    return src[at];
}

// Element q of the column's sub-transform input.
fn load_input(col: Column, q: u32) -> vec2<f32> {
    let e = col.j + q * (len_total() / len_sub());
    var x = vec2<f32>(0.0, 0.0);
    if (LOAD_HOOK == 1u) {
        if (e < p.hook_len) {
            x = cmul(read_input(col, e), table[p.load_table + e]);
        }
    } else {
        x = read_input(col, e);
    }
    let ns = len_before();
    if (ns > 1u) {
        x = cmul(x, twiddle((col.j % ns) * q, ns * len_sub()));
    }
    return x;
}

// Output frequency q of the column's sub-transform.
fn store_output(col: Column, q: u32, x: vec2<f32>) {
    let ns = len_before();
    let e = (col.j / ns) * ns * len_sub() + col.j % ns + q * ns;
    var y = x * p.scale;
    if (STORE_HOOK != 0u) {
        if (STORE_HOOK == 2u && e >= p.hook_len) {
            return;
        }
        y = cmul(y, table[p.store_table + e]);
    }
    dst[col.dst_base + select(e * p.dst.stride, e, DST_UNIT_STRIDE)] = y;
}

// The frequency whose value the decimation in frequency leaves at position `pos`: the digits of
// `pos` in the stage radices, reversed.
fn frequency(pos: u32) -> u32 {
    var k = 0u;
    var weight = 1u;
    for (var s = 0u; s < 8u; s++) {
        let r = radix_at(s);
        if (r > 1u) {
            k += ((pos / next_at(s)) % r) * weight;
            weight *= r;
        }
    }
    return k;
}

// Stage of radix `radix` over blocks of radix * next elements (next = 1 for the last stage).
fn stage(col: Column, first: bool, radix: u32, next: u32) {
    let last = next == 1u;
    let sub = len_sub();
    let per = sub / radix;
    let rounds = (per + THREADS - 1u) / THREADS;
    for (var i = 0u; i < rounds; i++) {
        let g = col.t + i * THREADS;
        if (col.valid && g < per) {
            let j = g % next;
            let pos = (g / next) * next * radix + j;
            var v: array<vec2<f32>, MAX_RADIX>;
            for (var m = 0u; m < radix; m++) {
                if (first) {
                    v[m] = load_input(col, pos + m * next);
                } else {
                    v[m] = exchange_load(col.slot, pos + m * next);
                }
            }
            dft(&v, radix);
            if (last) {
                // The last stage's outputs m are frequencies k0 + m sub / radix.
                let k0 = select(frequency(pos), 0u, first);
                for (var m = 0u; m < radix; m++) {
                    store_output(col, k0 + m * per, v[m]);
                }
            } else {
                twiddle_outputs(&v, radix, j, next * radix);
                for (var m = 0u; m < radix; m++) {
                    exchange_store(col.slot, pos + m * next, v[m]);
                }
            }
        }
    }
}

// Column `c` of the dispatch: whether it exists, its transform's first elements and its place in
// the transform.
fn place_column(col: ptr<function, Column>, c: u32) {
    (*col).valid = c < p.columns;
    let columns_per_transform = len_total() / len_sub();
    let b = c / columns_per_transform;
    (*col).j = c % columns_per_transform;
    (*col).src_base = layout_index(p.src, b, 0u);
    (*col).dst_base = layout_index(p.dst, b, 0u);
}

fn later_stage(col: Column, s: u32) {
    let radix = radix_at(s);
    if (radix > 1u) {
        exchange_barrier();
        stage(col, false, radix, next_at(s));
    }
}

@compute @workgroup_size(WORKGROUP)
fn fft_pass(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    var col: Column;
    if (THREADS == 1u) {
        col.t = 0u;
        col.slot = lid;
    } else if (COLUMNS_FASTEST) {
        col.slot = lid % COLUMNS;
        col.t = lid / COLUMNS;
    } else {
        col.t = lid % THREADS;
        col.slot = lid / THREADS;
    }
    place_column(&col, (wid.x + wid.y * groups.x) * COLUMNS + col.slot);
    if (SPECIALIZED) {
        // Written out: every stage's radix and block length become constants.
        stage(col, true, radix_at(0u), next_at(0u));
        later_stage(col, 1u);
        later_stage(col, 2u);
        later_stage(col, 3u);
        later_stage(col, 4u);
        later_stage(col, 5u);
        later_stage(col, 6u);
        later_stage(col, 7u);
    } else {
        // One copy of the stage for every length (compile time).
        for (var s = 0u; s < 8u; s++) {
            let radix = radix_at(s);
            if (radix > 1u) {
                if (s > 0u) {
                    exchange_barrier();
                }
                stage(col, s == 0u, radix, next_at(s));
            }
        }
    }
}
