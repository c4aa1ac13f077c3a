// Small DFTs on an invocation's registers: radices 2, 4, 8 and 16 straight-line, the odd primes
// 3, 5, 7, 11 and 13 by the direct sum over symmetric pairs. Every index is a constant once the
// kernel's radix is known, so drivers keep `v` in registers. `dir_sign()` (defined by the kernel)
// is +1 for the forward transform (e^-) and -1 for the inverse (e^+).

const MAX_RADIX: u32 = 16u;

// Multiplication by -i dir: the forward w4^1.
fn rot(a: vec2<f32>) -> vec2<f32> {
    let d = dir_sign();
    return vec2<f32>(a.y * d, -a.x * d);
}

// a (c - i dir s): multiplication by the forward root with cosine c and sine s.
fn rotate_by(a: vec2<f32>, c: f32, s: f32) -> vec2<f32> {
    let ds = dir_sign() * s;
    return vec2<f32>(a.x * c + ds * a.y, a.y * c - ds * a.x);
}

const H: f32 = 0.70710678118654752;
const C16: f32 = 0.92387953251128676;
const S16: f32 = 0.38268343236508977;

fn dft2(v: ptr<function, array<vec2<f32>, MAX_RADIX>>) {
    let a = (*v)[0];
    let b = (*v)[1];
    (*v)[0] = a + b;
    (*v)[1] = a - b;
}

// DFT4 of v[o + s k], in place.
fn dft4(v: ptr<function, array<vec2<f32>, MAX_RADIX>>, o: u32, s: u32) {
    let a0 = (*v)[o];
    let a1 = (*v)[o + s];
    let a2 = (*v)[o + 2u * s];
    let a3 = (*v)[o + 3u * s];
    let t0 = a0 + a2;
    let t1 = a0 - a2;
    let t2 = a1 + a3;
    let t3 = rot(a1 - a3);
    (*v)[o] = t0 + t2;
    (*v)[o + s] = t1 + t3;
    (*v)[o + 2u * s] = t0 - t2;
    (*v)[o + 3u * s] = t1 - t3;
}

// DFT8: two DFT4 of the even and odd inputs, then one radix-2 combine with w8^k.
fn dft8(v: ptr<function, array<vec2<f32>, MAX_RADIX>>) {
    dft4(v, 0u, 2u);
    dft4(v, 1u, 2u);
    let e0 = (*v)[0];
    let e1 = (*v)[2];
    let e2 = (*v)[4];
    let e3 = (*v)[6];
    let o0 = (*v)[1];
    let o1 = rotate_by((*v)[3], H, H);
    let o2 = rot((*v)[5]);
    let o3 = rotate_by((*v)[7], -H, H);
    (*v)[0] = e0 + o0;
    (*v)[4] = e0 - o0;
    (*v)[1] = e1 + o1;
    (*v)[5] = e1 - o1;
    (*v)[2] = e2 + o2;
    (*v)[6] = e2 - o2;
    (*v)[3] = e3 + o3;
    (*v)[7] = e3 - o3;
}

// DFT16 as 4 x 4: four DFT4 over n1 (stride 4), twiddles w16^(n2 k1) on element (n2, k1) at
// n2 + 4 k1, four DFT4 over n2; X[k1 + 4 k2] then sits at 4 k1 + k2 and is transposed back.
fn dft16(v: ptr<function, array<vec2<f32>, MAX_RADIX>>) {
    dft4(v, 0u, 4u);
    dft4(v, 1u, 4u);
    dft4(v, 2u, 4u);
    dft4(v, 3u, 4u);
    (*v)[5] = rotate_by((*v)[5], C16, S16);
    (*v)[9] = rotate_by((*v)[9], H, H);
    (*v)[13] = rotate_by((*v)[13], S16, C16);
    (*v)[6] = rotate_by((*v)[6], H, H);
    (*v)[10] = rot((*v)[10]);
    (*v)[14] = rotate_by((*v)[14], -H, H);
    (*v)[7] = rotate_by((*v)[7], S16, C16);
    (*v)[11] = rotate_by((*v)[11], -H, H);
    (*v)[15] = rotate_by((*v)[15], -C16, -S16);
    dft4(v, 0u, 1u);
    dft4(v, 4u, 1u);
    dft4(v, 8u, 1u);
    dft4(v, 12u, 1u);
    let t = *v;
    (*v)[1] = t[4];
    (*v)[2] = t[8];
    (*v)[3] = t[12];
    (*v)[4] = t[1];
    (*v)[6] = t[9];
    (*v)[7] = t[13];
    (*v)[8] = t[2];
    (*v)[9] = t[6];
    (*v)[11] = t[14];
    (*v)[12] = t[3];
    (*v)[13] = t[7];
    (*v)[14] = t[11];
}

// cos(2 pi k / R) and sin(2 pi k / R) for R = 3, 5, 7, 11, 13 (R values each, from odd_offset(R)),
// rounded once from double precision.
const ODD_COS = array<f32, 39>(
    1.0, -0.5, -0.5,
    1.0, 0.30901699437494742, -0.80901699437494742, -0.80901699437494742, 0.30901699437494742,
    1.0, 0.62348980185873353, -0.22252093395631440, -0.90096886790241913, -0.90096886790241913,
    -0.22252093395631440, 0.62348980185873353,
    1.0, 0.84125353283118117, 0.41541501300188643, -0.14231483827328514, -0.65486073394528506,
    -0.95949297361449739, -0.95949297361449739, -0.65486073394528506, -0.14231483827328514,
    0.41541501300188643, 0.84125353283118117,
    1.0, 0.88545602565320989, 0.56806474673115580, 0.12053668025532305, -0.35460488704253562,
    -0.74851074817110109, -0.97094181742605203, -0.97094181742605203, -0.74851074817110109,
    -0.35460488704253562, 0.12053668025532305, 0.56806474673115580, 0.88545602565320989,
);
const ODD_SIN = array<f32, 39>(
    0.0, 0.86602540378443865, -0.86602540378443865,
    0.0, 0.95105651629515357, 0.58778525229247313, -0.58778525229247313, -0.95105651629515357,
    0.0, 0.78183148246802981, 0.97492791218182361, 0.43388373911755812, -0.43388373911755812,
    -0.97492791218182361, -0.78183148246802981,
    0.0, 0.54064081745559756, 0.90963199535451837, 0.98982144188093273, 0.75574957435425828,
    0.28173255684142969, -0.28173255684142969, -0.75574957435425828, -0.98982144188093273,
    -0.90963199535451837, -0.54064081745559756,
    0.0, 0.46472317204376854, 0.82298386589365639, 0.99270887409805399, 0.93501624268541482,
    0.66312265824079520, 0.23931566428755777, -0.23931566428755777, -0.66312265824079520,
    -0.93501624268541482, -0.99270887409805399, -0.82298386589365639, -0.46472317204376854,
);

fn odd_offset(radix: u32) -> u32 {
    switch radix {
        case 3u: {
            return 0u;
        }
        case 5u: {
            return 3u;
        }
        case 7u: {
            return 8u;
        }
        case 11u: {
            return 15u;
        }
        default: {
            return 26u;
        }
    }
}

// DFT of an odd prime radix by the direct sum over symmetric pairs (r, R - r):
//   X[k], X[R-k] = x0 + sum_r (x_r + x_{R-r}) cos(2 pi r k/R) -+ i dir (x_r - x_{R-r}) sin(2 pi r k/R).
fn dft_odd(v: ptr<function, array<vec2<f32>, MAX_RADIX>>, radix: u32) {
    let half = radix / 2u;
    let o = odd_offset(radix);
    var sum: array<vec2<f32>, 6>;
    var dif: array<vec2<f32>, 6>;
    var y0 = (*v)[0];
    for (var r = 1u; r <= half; r++) {
        sum[r - 1u] = (*v)[r] + (*v)[radix - r];
        dif[r - 1u] = (*v)[r] - (*v)[radix - r];
        y0 += sum[r - 1u];
    }
    var y: array<vec2<f32>, MAX_RADIX>;
    y[0] = y0;
    for (var k = 1u; k <= half; k++) {
        var a = (*v)[0];
        var b = vec2<f32>(0.0, 0.0);
        var idx = k;
        for (var r = 1u; r <= half; r++) {
            a += sum[r - 1u] * ODD_COS[o + idx];
            b += dif[r - 1u] * ODD_SIN[o + idx];
            idx += k;
            if (idx >= radix) {
                idx -= radix;
            }
        }
        let ib = rot(b);
        y[k] = a + ib;
        y[radix - k] = a - ib;
    }
    for (var k = 0u; k < radix; k++) {
        (*v)[k] = y[k];
    }
}

// In-place DFT of v[0 .. radix), natural order in and out.
fn dft(v: ptr<function, array<vec2<f32>, MAX_RADIX>>, radix: u32) {
    switch radix {
        case 2u: {
            dft2(v);
        }
        case 4u: {
            dft4(v, 0u, 1u);
        }
        case 8u: {
            dft8(v);
        }
        case 16u: {
            dft16(v);
        }
        default: {
            dft_odd(v, radix);
        }
    }
}
