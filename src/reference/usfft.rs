//! Direct nonuniform DFT sums in f64: the definitions the GPU operator's stages approximate
//! (docs/operator-method.md, "Stage U1", "Stage U2", "Stage F"), at the same f32 sample
//! frequencies the operator uses.

use std::f64::consts::PI;

use num_complex::Complex;

use crate::geometry::Geometry;

type C64 = Complex<f64>;

fn phases(n: usize, xi: f64) -> Vec<C64> {
    (0..n)
        .map(|j| Complex::from_polar(1.0, -2.0 * PI * (j as f64 - (n / 2) as f64) * xi))
        .collect()
}

/// U1: `g[k, y, x] = (1/sqrt(n2)) sum_z u[z, y, x] e^{-2 pi i (z - n0/2) z_k}`, volume `(n0, n1, n2)`
/// to spectrum `(deth, n1, n2)`.
pub fn usfft1d_direct(g: &Geometry, volume: &[C64]) -> Vec<C64> {
    let plane = g.n1 * g.n2;
    let scale = 1.0 / (g.n2 as f64).sqrt();
    let mut out = vec![Complex::new(0.0, 0.0); g.deth * plane];
    for (k, &zk) in g.z_frequencies().iter().enumerate() {
        let e = phases(g.n0, zk as f64);
        let row = &mut out[k * plane..(k + 1) * plane];
        for (z, ez) in e.iter().enumerate() {
            for (o, v) in row.iter_mut().zip(&volume[z * plane..(z + 1) * plane]) {
                *o += v * ez;
            }
        }
        row.iter_mut().for_each(|o| *o *= scale);
    }
    out
}

/// U2: `d[t, k, w] = (1/sqrt(ntheta)) sum_{y,x} G[k, y, x] e^{-2 pi i ((x - n2/2) xi_x + (y - n1/2) xi_y)}`
/// at the clamped frequencies of angle t, row k, column w; spectrum `(deth, n1, n2)` to data.
pub fn usfft2d_direct(g: &Geometry, spectrum: &[C64]) -> Vec<C64> {
    let plane = g.n1 * g.n2;
    let scale = 1.0 / (g.ntheta() as f64).sqrt();
    let mut out = vec![Complex::new(0.0, 0.0); g.data_len()];
    for t in 0..g.ntheta() {
        for k in 0..g.deth {
            let src = &spectrum[k * plane..(k + 1) * plane];
            for w in 0..g.detw {
                let [x, y] = g.xy_frequency(t, k, w);
                let (ex, ey) = (phases(g.n2, x as f64), phases(g.n1, y as f64));
                let mut acc = Complex::new(0.0, 0.0);
                for (yi, eyv) in ey.iter().enumerate() {
                    let line: C64 = src[yi * g.n2..(yi + 1) * g.n2]
                        .iter()
                        .zip(&ex)
                        .map(|(v, e)| v * e)
                        .sum();
                    acc += line * eyv;
                }
                out[(t * g.deth + k) * g.detw + w] = acc * scale;
            }
        }
    }
    out
}

/// F_adj: the centred inverse DFT of every projection, `(1/(deth detw)) sum_{a,b} D[t,a,b]
/// e^{+2 pi i ((a - deth/2)(v - s_v - deth/2)/deth + (b - detw/2)(w - s_u - detw/2)/detw)}`, with
/// `[s_v, s_u]` where the rotation axis and the volume's offset put the volume's centre at angle t
/// ([`Geometry::projection_shift`]).
pub fn fft2d_adjoint_direct(g: &Geometry, data: &[C64]) -> Vec<C64> {
    let (h, w) = (g.deth, g.detw);
    let centred_at = |n: usize, a: usize, b: f64| {
        let p = (a as f64 - (n / 2) as f64) * (b - (n / 2) as f64) / n as f64;
        Complex::from_polar(1.0, 2.0 * PI * p)
    };
    let mut out = vec![Complex::new(0.0, 0.0); data.len()];
    for t in 0..g.ntheta() {
        // Output pixel (v, ww) sits at (v - s_v, ww - s_u) relative to the volume's centre: the
        // direct sum evaluates the centred inverse DFT there (the Fourier shift theorem, in f64).
        let [sv, su] = g.projection_shift(t);
        let src = &data[t * h * w..(t + 1) * h * w];
        // Along w, then along v (separable).
        let mut rows = vec![Complex::new(0.0, 0.0); h * w];
        for a in 0..h {
            for ww in 0..w {
                rows[a * w + ww] = (0..w)
                    .map(|b| src[a * w + b] * centred_at(w, b, ww as f64 - su))
                    .sum();
            }
        }
        for v in 0..h {
            for ww in 0..w {
                let s: C64 = (0..h)
                    .map(|a| rows[a * w + ww] * centred_at(h, a, v as f64 - sv))
                    .sum();
                out[t * h * w + v * w + ww] = s / (h * w) as f64;
            }
        }
    }
    out
}
