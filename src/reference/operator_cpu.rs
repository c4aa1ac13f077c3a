//! The laminography operator on the CPU in f32 with rustfft, on all cores: the same gridding, tables
//! and FFT sizes as the GPU stages. It is the CPU side of `lamino bench operator` and a second,
//! independent implementation the GPU results are compared with.

use num_complex::Complex32;
use rustfft::{Fft, FftPlanner};
use std::sync::Arc;

use super::fft::fft_last_axes;
use crate::fft::Direction;
use crate::geometry::Geometry;
use crate::operator::tables::{U1Tables, U2Tables};

const ZERO: Complex32 = Complex32::new(0.0, 0.0);

/// `L`, `L*` and their stages on the CPU.
pub struct CpuOperator {
    g: Geometry,
    u1: U1Tables,
    u2: U2Tables,
    threads: usize,
}

/// Runs `work(i)` for i in 0..n on up to `threads` threads and returns the results in order.
fn parallel<T: Send>(n: usize, threads: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let per = n.div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .step_by(per)
            .map(|start| {
                let work = &work;
                s.spawn(move || (start..(start + per).min(n)).map(work).collect::<Vec<T>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker panicked"))
            .collect()
    })
}

fn plan(n: usize, direction: Direction) -> Arc<dyn Fft<f32>> {
    let mut planner = FftPlanner::new();
    match direction {
        Direction::Forward => planner.plan_fft_forward(n),
        Direction::Inverse => planner.plan_fft_inverse(n),
    }
}

impl CpuOperator {
    pub fn new(g: &Geometry, threads: usize) -> Self {
        Self {
            g: g.clone(),
            u1: U1Tables::new(g),
            u2: U2Tables::new(g),
            threads,
        }
    }

    /// `L`: volume `(n0, n1, n2)` to data `(ntheta, deth, detw)`.
    pub fn forward(&self, volume: &[Complex32]) -> Vec<Complex32> {
        let mut data = self.usfft2d(&self.usfft1d(volume));
        self.fft2d(&mut data, Direction::Inverse);
        data
    }

    /// `L*`: data to volume.
    pub fn adjoint(&self, data: &[Complex32]) -> Vec<Complex32> {
        let mut d = data.to_vec();
        self.fft2d(&mut d, Direction::Forward);
        self.usfft1d_adjoint(&self.usfft2d_adjoint(&d))
    }

    /// U1 along z for every (y, x) column.
    pub fn usfft1d(&self, volume: &[Complex32]) -> Vec<Complex32> {
        let g = &self.g;
        let (n, grid, half) = (g.n0, self.u1.axis.grid, g.n0 / 2);
        let taps = 2 * self.u1.axis.half_width + 1;
        let fft = plan(grid, Direction::Forward);
        let per_y = parallel(g.n1, self.threads, |y| {
            let mut out = vec![ZERO; g.deth * g.n2];
            let mut column = vec![ZERO; grid];
            for x in 0..g.n2 {
                column.fill(ZERO);
                for j in 0..n {
                    let cell = (j + grid - half) % grid;
                    column[cell] = volume[(j * g.n1 + y) * g.n2 + x] * self.u1.deconvolution[j];
                }
                fft.process(&mut column);
                for k in 0..g.deth {
                    out[k * g.n2 + x] = (0..taps)
                        .map(|i| {
                            column[self.u1.tap_cell[k * taps + i] as usize]
                                * self.u1.tap_weight[k * taps + i]
                        })
                        .sum();
                }
            }
            out
        });
        let mut spectrum = vec![ZERO; g.spectrum_len()];
        for (y, rows) in per_y.iter().enumerate() {
            for k in 0..g.deth {
                spectrum[(k * g.n1 + y) * g.n2..][..g.n2]
                    .copy_from_slice(&rows[k * g.n2..][..g.n2]);
            }
        }
        spectrum
    }

    /// U1*.
    pub fn usfft1d_adjoint(&self, spectrum: &[Complex32]) -> Vec<Complex32> {
        let g = &self.g;
        let (n, grid, half) = (g.n0, self.u1.axis.grid, g.n0 / 2);
        let taps = 2 * self.u1.axis.half_width + 1;
        let fft = plan(grid, Direction::Inverse);
        let per_y = parallel(g.n1, self.threads, |y| {
            let mut out = vec![ZERO; n * g.n2];
            let mut column = vec![ZERO; grid];
            for x in 0..g.n2 {
                column.fill(ZERO);
                for k in 0..g.deth {
                    let v = spectrum[(k * g.n1 + y) * g.n2 + x];
                    for i in 0..taps {
                        column[self.u1.tap_cell[k * taps + i] as usize] +=
                            v * self.u1.tap_weight[k * taps + i];
                    }
                }
                fft.process(&mut column);
                for z in 0..n {
                    out[z * g.n2 + x] = column[(z + grid - half) % grid] * self.u1.deconvolution[z];
                }
            }
            out
        });
        let mut volume = vec![ZERO; g.volume_len()];
        for (y, cols) in per_y.iter().enumerate() {
            for z in 0..n {
                volume[(z * g.n1 + y) * g.n2..][..g.n2].copy_from_slice(&cols[z * g.n2..][..g.n2]);
            }
        }
        volume
    }

    /// 1/sqrt(ntheta) (the total number of angles), part of the operator's scale, applied with
    /// the y weights.
    fn u2_scale(&self) -> f32 {
        (1.0 / (self.g.ntheta() as f64).sqrt()) as f32
    }

    /// U2 for every detector row.
    pub fn usfft2d(&self, spectrum: &[Complex32]) -> Vec<Complex32> {
        let g = &self.g;
        let (gx, gy) = (self.u2.axis_x.grid, self.u2.axis_y.grid);
        let (mx, my) = (
            self.u2.axis_x.half_width as i64,
            self.u2.axis_y.half_width as i64,
        );
        let (taps, scale) = (&self.u2.taps, self.u2_scale());
        let points = g.ntheta() * g.detw;
        let per_row = parallel(g.deth, self.threads, |k| {
            let mut grid = vec![ZERO; gy * gx];
            let mut wx = Vec::with_capacity(taps.taps);
            for y in 0..g.n1 {
                for x in 0..g.n2 {
                    let cell = ((y + gy - g.n1 / 2) % gy) * gx + (x + gx - g.n2 / 2) % gx;
                    grid[cell] = spectrum[(k * g.n1 + y) * g.n2 + x]
                        * (self.u2.deconvolution_x[x] * self.u2.deconvolution_y[y]);
                }
            }
            fft_last_axes(&mut grid, &[gy, gx], 2, Direction::Forward, 1);
            (0..points)
                .map(|p| {
                    let [xi, yi] = self.u2.coords[k * points + p];
                    let (bx, by) = (self.u2.axis_x.base_cell(xi), self.u2.axis_y.base_cell(yi));
                    wx.clear();
                    wx.extend(taps.weights(xi, gx, bx));
                    let mut acc = ZERO;
                    for (ly, wy) in (by - my..=by + my).zip(taps.weights(yi, gy, by)) {
                        let row = ly.rem_euclid(gy as i64) as usize * gx;
                        let line: Complex32 = (bx - mx..=bx + mx)
                            .zip(&wx)
                            .map(|(lx, &w)| grid[row + lx.rem_euclid(gx as i64) as usize] * w)
                            .sum();
                        acc += line * (scale * wy);
                    }
                    acc
                })
                .collect::<Vec<_>>()
        });
        let mut data = vec![ZERO; g.data_len()];
        for (k, row) in per_row.iter().enumerate() {
            for t in 0..g.ntheta() {
                data[(t * g.deth + k) * g.detw..][..g.detw]
                    .copy_from_slice(&row[t * g.detw..][..g.detw]);
            }
        }
        data
    }

    /// U2*.
    pub fn usfft2d_adjoint(&self, data: &[Complex32]) -> Vec<Complex32> {
        let g = &self.g;
        let (gx, gy) = (self.u2.axis_x.grid, self.u2.axis_y.grid);
        let (mx, my) = (
            self.u2.axis_x.half_width as i64,
            self.u2.axis_y.half_width as i64,
        );
        let (taps, scale) = (&self.u2.taps, self.u2_scale());
        let points = g.ntheta() * g.detw;
        let per_row = parallel(g.deth, self.threads, |k| {
            let mut grid = vec![ZERO; gy * gx];
            let mut wx = Vec::with_capacity(taps.taps);
            for p in 0..points {
                let (t, w) = (p / g.detw, p % g.detw);
                let v = data[(t * g.deth + k) * g.detw + w];
                let [xi, yi] = self.u2.coords[k * points + p];
                let (bx, by) = (self.u2.axis_x.base_cell(xi), self.u2.axis_y.base_cell(yi));
                wx.clear();
                wx.extend(taps.weights(xi, gx, bx));
                for (ly, wy) in (by - my..=by + my).zip(taps.weights(yi, gy, by)) {
                    let row = ly.rem_euclid(gy as i64) as usize * gx;
                    let vy = v * (scale * wy);
                    for (lx, &w) in (bx - mx..=bx + mx).zip(&wx) {
                        grid[row + lx.rem_euclid(gx as i64) as usize] += vy * w;
                    }
                }
            }
            fft_last_axes(&mut grid, &[gy, gx], 2, Direction::Inverse, 1);
            let mut plane = vec![ZERO; g.n1 * g.n2];
            for y in 0..g.n1 {
                for x in 0..g.n2 {
                    let cell = ((y + gy - g.n1 / 2) % gy) * gx + (x + gx - g.n2 / 2) % gx;
                    plane[y * g.n2 + x] =
                        grid[cell] * (self.u2.deconvolution_x[x] * self.u2.deconvolution_y[y]);
                }
            }
            plane
        });
        per_row.concat()
    }

    /// The centred 2D FFT of every projection with the operator's scale and sign: `Inverse` is
    /// F_adj (the last stage of L), `Forward` its adjoint.
    pub fn fft2d(&self, data: &mut [Complex32], direction: Direction) {
        let g = &self.g;
        let sign = if (g.deth / 2 + g.detw / 2).is_multiple_of(2) {
            1.0
        } else {
            -1.0
        };
        let scale = sign / (g.deth * g.detw) as f32;
        let modulate = |data: &mut [Complex32], s: f32| {
            for (i, v) in data.iter_mut().enumerate() {
                let (row, col) = ((i / g.detw) % g.deth, i % g.detw);
                *v *= if (row + col) % 2 == 1 { -s } else { s };
            }
        };
        // The projections' shifts (the rotation axis and the volume's offset): before the
        // inverse transform (F_adj), conjugated after the forward one (its adjoint).
        let phases = g.detector_phases();
        let shift = |data: &mut [Complex32], conjugate: bool| {
            for (i, v) in data.iter_mut().enumerate() {
                let (t, row, col) = (i / (g.deth * g.detw), (i / g.detw) % g.deth, i % g.detw);
                let [c, s] = phases.at(t, row, col);
                let p = Complex32::new(c, s);
                *v *= if conjugate { p.conj() } else { p };
            }
        };
        modulate(data, 1.0);
        if direction == Direction::Inverse {
            shift(data, false);
        }
        fft_last_axes(
            data,
            &[g.ntheta(), g.deth, g.detw],
            2,
            direction,
            self.threads,
        );
        modulate(data, scale);
        if direction == Direction::Forward {
            shift(data, true);
        }
    }
}
