//! The two-level pass: a sub-transform of length `a * b` in one workgroup, each invocation
//! transforming a whole row of `a` (then of `b`) elements in its private array, with one exchange
//! through workgroup memory between the levels (`shaders/fft/two_level.wgsl`).
//!
//! The row transforms are generated here as straight-line WGSL for each (a, b, largest radix):
//! every index into the private array is a constant and every twiddle of a row a literal, so the
//! array stays in registers. On lavapipe 64 MiB of 4096-point transforms took 53 ms written this
//! way against 74 ms in workgroup memory with radix-16 stages (two exchanges) and 89-97 ms with the
//! same two levels written as loops (the private array then indexed at run time); 49 ms with
//! unit-stride indexing.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Mutex, OnceLock};

use super::recipe::stage_radices;
use crate::shaders::{self, Shader};

/// Longest row: one invocation holds `max(a, b)` complex values in registers.
pub const MAX_ROW: usize = 128;

/// The split `sub = a * b` with `a <= b` and `b` as small as possible, when `b` is a row the kernel
/// holds and `a` at least 2 (every prime factor at most 13).
pub fn split(sub: usize) -> Option<(usize, usize)> {
    stage_radices(sub, 16)?;
    let mut a = sub.isqrt();
    while a > 1 && !sub.is_multiple_of(a) {
        a -= 1;
    }
    let b = sub / a;
    (a >= 2 && b <= MAX_ROW).then_some((a, b))
}

/// The shaders composed so far, by (a, b, largest radix).
type Composed = HashMap<(usize, usize, u32), &'static Shader>;

/// The pass shader for rows of `a` then `b` with register radices up to `max_radix`, composed once
/// per process and kept (a few variants per run).
pub fn shader(a: usize, b: usize, max_radix: u32) -> &'static Shader {
    static SHADERS: OnceLock<Mutex<Composed>> = OnceLock::new();
    let mut known = SHADERS
        .get_or_init(Default::default)
        .lock()
        .expect("two-level shaders poisoned");
    known.entry((a, b, max_radix)).or_insert_with(|| {
        shaders::fft_pass_two_level(
            format!("fft/pass_two_level_{a}x{b}_r{max_radix}"),
            generated(a, b, max_radix),
        )
    })
}

/// The generated helpers of the template: the constants and the `tl_*` functions.
fn generated(a: usize, b: usize, max_radix: u32) -> String {
    let mut w = String::new();
    let max = a.max(b);
    let _ = writeln!(
        w,
        "const TL_A: u32 = {a}u;\nconst TL_B: u32 = {b}u;\nconst TL_MAX: u32 = {max}u;\n"
    );
    // Level 1 loads row t: inputs t + b n1.
    let _ = writeln!(
        w,
        "fn tl_load(col: Column, t: u32, x: ptr<function, LevelArray>) {{"
    );
    for n1 in 0..a {
        let _ = writeln!(w, "    (*x)[{n1}] = load_input(col, t + {}u);", b * n1);
    }
    let _ = writeln!(w, "}}\n");
    // Output k1 of row t, times w_SUB^(t k1), to k1 b + t.
    let _ = writeln!(
        w,
        "fn tl_to_exchange(t: u32, x: ptr<function, LevelArray>) {{"
    );
    let _ = writeln!(w, "    exchange[t] = (*x)[0];");
    for k1 in 1..a {
        let _ = writeln!(
            w,
            "    exchange[{}u + t] = cmul((*x)[{k1}], stage_twiddle(t * {k1}u, len_sub()));",
            k1 * b
        );
    }
    let _ = writeln!(w, "}}\n");
    let _ = writeln!(
        w,
        "fn tl_from_exchange(t: u32, x: ptr<function, LevelArray>) {{"
    );
    for n2 in 0..b {
        let _ = writeln!(w, "    (*x)[{n2}] = exchange[t * {b}u + {n2}u];");
    }
    let _ = writeln!(w, "}}\n");
    let _ = writeln!(
        w,
        "fn tl_store(col: Column, t: u32, x: ptr<function, LevelArray>) {{"
    );
    for k2 in 0..b {
        let _ = writeln!(w, "    store_output(col, t + {}u, (*x)[{k2}]);", a * k2);
    }
    let _ = writeln!(w, "}}\n");
    row_transform(&mut w, "tl_fft_a", a, max_radix);
    row_transform(&mut w, "tl_fft_b", b, max_radix);
    w
}

/// A straight-line DFT of `(*x)[0 .. n)` in natural order in and out: decimation in frequency
/// over the stage radices of `n` (as `pass.wgsl` runs them), then the digit reversal.
fn row_transform(w: &mut String, name: &str, n: usize, max_radix: u32) {
    let radices = stage_radices(n, max_radix).expect("rows have prime factors up to 13");
    let _ = writeln!(w, "fn {name}(x: ptr<function, LevelArray>) {{");
    let _ = writeln!(w, "    var v: array<vec2<f32>, MAX_RADIX>;");
    let mut block = n;
    let mut nexts = Vec::with_capacity(radices.len());
    for &radix in &radices {
        let r = radix as usize;
        let next = block / r;
        nexts.push(next);
        for first in (0..n).step_by(block) {
            for j in 0..next {
                let pos = first + j;
                for m in 0..r {
                    let _ = writeln!(w, "    v[{m}] = (*x)[{}];", pos + m * next);
                }
                let _ = writeln!(w, "    {};", dft_call(radix));
                for m in 0..r {
                    let at = pos + m * next;
                    // Twiddle w_(r next)^(j m), reduced; none after the last stage.
                    let (num, den) = ((j * m) % block, block);
                    if next == 1 || num == 0 {
                        let _ = writeln!(w, "    (*x)[{at}] = v[{m}];");
                    } else {
                        let angle = 2.0 * std::f64::consts::PI * num as f64 / den as f64;
                        let _ = writeln!(
                            w,
                            "    (*x)[{at}] = rotate_by(v[{m}], {:?}, {:?});",
                            angle.cos() as f32,
                            angle.sin() as f32
                        );
                    }
                }
            }
        }
        block = next;
    }
    // Position pos holds frequency sum_s digit_s(pos) * (product of the earlier radices).
    let _ = writeln!(w, "    let y = *x;");
    for pos in 0..n {
        let mut k = 0;
        let mut weight = 1;
        for (&radix, &next) in radices.iter().zip(&nexts) {
            k += (pos / next) % radix as usize * weight;
            weight *= radix as usize;
        }
        if k != pos {
            let _ = writeln!(w, "    (*x)[{k}] = y[{pos}];");
        }
    }
    let _ = writeln!(w, "}}\n");
}

fn dft_call(radix: u32) -> String {
    match radix {
        2 => "dft2(&v)".into(),
        4 => "dft4(&v, 0u, 1u)".into(),
        8 => "dft8(&v)".into(),
        16 => "dft16(&v)".into(),
        odd => format!("dft_odd(&v, {odd}u)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_are_near_square_and_bounded() {
        assert_eq!(split(4096), Some((64, 64)));
        assert_eq!(split(2048), Some((32, 64)));
        assert_eq!(split(2000), Some((40, 50)));
        assert_eq!(split(1331), Some((11, 121)));
        // 2 x 2 x 1031 has a prime factor beyond the Stockham radices; 8192 = 64 x 128.
        assert_eq!(split(4124), None);
        assert_eq!(split(8192), Some((64, 128)));
        assert_eq!(split(3 * 3 * 11 * 13 * 13), None);
        for sub in 2..=8192 {
            if let Some((a, b)) = split(sub) {
                assert_eq!(a * b, sub);
                assert!(2 <= a && a <= b && b <= MAX_ROW, "{sub}");
            }
        }
    }
}
