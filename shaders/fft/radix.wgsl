// Small DFTs used by every Stockham pass. `dir` is +1 for the forward transform (e^-) and -1 for the
// inverse (e^+); twiddle and root tables hold forward values computed in f64 on the host, and the
// inverse conjugates them.

const MAX_RADIX: u32 = 16u;

fn table_twiddle(t: vec2<f32>, dir: f32) -> vec2<f32> {
    return vec2<f32>(t.x, t.y * dir);
}

// Multiplication by -i (forward) or +i (inverse).
fn rot(a: vec2<f32>, dir: f32) -> vec2<f32> {
    return vec2<f32>(a.y * dir, -a.x * dir);
}

fn dft4(v: ptr<function, array<vec2<f32>, MAX_RADIX>>, o: u32, s: u32, dir: f32) {
    let a0 = (*v)[o];
    let a1 = (*v)[o + s];
    let a2 = (*v)[o + 2u * s];
    let a3 = (*v)[o + 3u * s];
    let t0 = a0 + a2;
    let t1 = a0 - a2;
    let t2 = a1 + a3;
    let t3 = rot(a1 - a3, dir);
    (*v)[o] = t0 + t2;
    (*v)[o + s] = t1 + t3;
    (*v)[o + 2u * s] = t0 - t2;
    (*v)[o + 3u * s] = t1 - t3;
}

fn dft8(v: ptr<function, array<vec2<f32>, MAX_RADIX>>, dir: f32) {
    // Even and odd halves as two interleaved DFT4s (stride 2), then one radix-2 combine.
    dft4(v, 0u, 2u, dir);
    dft4(v, 1u, 2u, dir);
    let h = 0.70710678118654752;
    var e: array<vec2<f32>, 4>;
    var o: array<vec2<f32>, 4>;
    for (var k = 0u; k < 4u; k++) {
        e[k] = (*v)[2u * k];
        o[k] = (*v)[2u * k + 1u];
    }
    // w8^k for k = 1, 2, 3 (forward: e^{-i pi k / 4}).
    let o1 = h * vec2<f32>(o[1].x + dir * o[1].y, o[1].y - dir * o[1].x);
    let o2 = rot(o[2], dir);
    let o3 = h * vec2<f32>(-o[3].x + dir * o[3].y, -o[3].y - dir * o[3].x);
    (*v)[0] = e[0] + o[0];
    (*v)[4] = e[0] - o[0];
    (*v)[1] = e[1] + o1;
    (*v)[5] = e[1] - o1;
    (*v)[2] = e[2] + o2;
    (*v)[6] = e[2] - o2;
    (*v)[3] = e[3] + o3;
    (*v)[7] = e[3] - o3;
}

// In-place DFT of v[0..radix). Radices 2, 4 and 8 are hand-written; others (3, 5, 7, 11, 13) use the
// direct sum with roots of unity read from `roots[root_offset ..]`.
fn small_dft(v: ptr<function, array<vec2<f32>, MAX_RADIX>>, radix: u32, root_offset: u32, dir: f32) {
    switch radix {
        case 2u: {
            let a = (*v)[0];
            let b = (*v)[1];
            (*v)[0] = a + b;
            (*v)[1] = a - b;
        }
        case 4u: {
            dft4(v, 0u, 1u, dir);
        }
        case 8u: {
            dft8(v, dir);
        }
        default: {
            var y: array<vec2<f32>, MAX_RADIX>;
            for (var k = 0u; k < radix; k++) {
                var acc = (*v)[0];
                var idx = k;
                for (var r = 1u; r < radix; r++) {
                    acc += cmul((*v)[r], table_twiddle(twiddles[root_offset + idx], dir));
                    idx += k;
                    if (idx >= radix) {
                        idx -= radix;
                    }
                }
                y[k] = acc;
            }
            for (var k = 0u; k < radix; k++) {
                (*v)[k] = y[k];
            }
        }
    }
}
