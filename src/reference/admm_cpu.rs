//! The ADMM-TV iteration on the CPU with every vector operation and reduction in f64, the operator
//! stages from [`CpuOperator`] (f32): an independent implementation of exactly the GPU solver's
//! iterations, which the GPU results are compared with.

use num_complex::{Complex32, Complex64};

use super::CpuOperator;
use crate::fft::Direction;
use crate::geometry::Geometry;
use crate::params::{AdmmParams, DataScale};

/// The GPU solver's iterations (exact-step CG inner solver) on the CPU.
pub struct CpuAdmm {
    op: CpuOperator,
    g: Geometry,
    params: AdmmParams,
    n_fourier: f64,
    rho: f64,
    /// Outer iterations done.
    iteration: usize,
    /// The TV term's weight: alpha relative to the data's scale, as the GPU solver takes it.
    tv_weight: f64,
    dhat: Vec<Complex64>,
    u: Vec<f64>,
    psi: Vec<f64>,
    lambda: Vec<f64>,
    grad_u: Vec<f64>,
    au: Vec<Complex64>,
    /// The carried data part of the residual, `(1/N) Re A*(D - A u)`, once formed.
    data_residual: Option<Vec<f64>>,
}

fn to32(x: &[f64]) -> Vec<Complex32> {
    x.iter().map(|&v| Complex32::new(v as f32, 0.0)).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn cdot(a: &[Complex64]) -> f64 {
    a.iter().map(|c| c.norm_sqr()).sum()
}

impl CpuAdmm {
    pub fn new(g: &Geometry, data: &[f32], params: AdmmParams, threads: usize) -> Self {
        let op = CpuOperator::new(g, threads);
        let n_fourier = (g.deth * g.detw) as f64;
        let mut d: Vec<Complex32> = data.iter().map(|&v| Complex32::new(v, 0.0)).collect();
        op.fft2d(&mut d, Direction::Forward);
        let dhat = d
            .iter()
            .map(|c| Complex64::new(c.re as f64, c.im as f64) * n_fourier)
            .collect();
        let v = g.volume_len();
        let plane = g.deth * g.detw;
        let abs_sums: Vec<f64> = data
            .chunks(plane)
            .map(|p| p.iter().map(|&x| f64::from(x).abs()).sum())
            .collect();
        let scale = DataScale::of_operator_data(&abs_sums, g.n2, v);
        Self {
            op,
            g: g.clone(),
            params,
            n_fourier,
            rho: params.rho0,
            iteration: 0,
            tv_weight: params.alpha * scale.tv_unit(),
            dhat,
            u: vec![0.0; v],
            psi: vec![0.0; 3 * v],
            lambda: vec![0.0; 3 * v],
            grad_u: vec![0.0; 3 * v],
            au: vec![Complex64::new(0.0, 0.0); g.data_len()],
            data_residual: None,
        }
    }

    fn a(&self, x: &[f64]) -> Vec<Complex64> {
        let y = self.op.usfft2d(&self.op.usfft1d(&to32(x)));
        y.iter()
            .map(|c| Complex64::new(c.re as f64, c.im as f64))
            .collect()
    }

    fn a_adjoint_real(&self, y: &[Complex64]) -> Vec<f64> {
        let y32: Vec<Complex32> = y
            .iter()
            .map(|c| Complex32::new(c.re as f32, c.im as f32))
            .collect();
        self.op
            .usfft1d_adjoint(&self.op.usfft2d_adjoint(&y32))
            .iter()
            .map(|c| c.re as f64)
            .collect()
    }

    fn gradient(&self, u: &[f64]) -> Vec<f64> {
        let (n0, n1, n2) = (self.g.n0, self.g.n1, self.g.n2);
        let v = u.len();
        let s = 1.0 / 3f64.sqrt();
        let mut out = vec![0.0; 3 * v];
        for i in 0..v {
            let (x, y, z) = (i % n2, (i / n2) % n1, i / (n1 * n2));
            if x + 1 < n2 {
                out[i] = (u[i + 1] - u[i]) * s;
            }
            if y + 1 < n1 {
                out[v + i] = (u[i + n2] - u[i]) * s;
            }
            if z + 1 < n0 {
                out[2 * v + i] = (u[i + n1 * n2] - u[i]) * s;
            }
        }
        out
    }

    fn gradient_adjoint(&self, q: &[f64]) -> Vec<f64> {
        let (n0, n1, n2) = (self.g.n0, self.g.n1, self.g.n2);
        let v = q.len() / 3;
        let s = 1.0 / 3f64.sqrt();
        (0..v)
            .map(|i| {
                let index = [i % n2, (i / n2) % n1, i / (n1 * n2)];
                let (sizes, strides) = ([n2, n1, n0], [1, n2, n1 * n2]);
                let mut acc = 0.0;
                for c in 0..3 {
                    if index[c] + 1 < sizes[c] {
                        acc -= q[c * v + i];
                    }
                    if index[c] > 0 {
                        acc += q[c * v + i - strides[c]];
                    }
                }
                acc * s
            })
            .collect()
    }

    /// `r = q + rho grad*(g - grad u)`: the residual of the u-subproblem from its data part `q`.
    fn full_residual(&self, q: &[f64], g: &[f64], rho: f64) -> Vec<f64> {
        let tmp: Vec<f64> = g.iter().zip(&self.grad_u).map(|(a, b)| a - b).collect();
        q.iter()
            .zip(self.gradient_adjoint(&tmp))
            .map(|(qi, t)| qi + rho * t)
            .collect()
    }

    /// One outer iteration, as `AdmmSolver::step` does it.
    pub fn step(&mut self) {
        let (rho, inv_n, v) = (self.rho, 1.0 / self.n_fourier, self.u.len());
        let g: Vec<f64> = self
            .psi
            .iter()
            .zip(&self.lambda)
            .map(|(p, l)| p - l / rho)
            .collect();
        let h0 = self.grad_u.clone();
        let carried = self.params.carries_residual();
        let data_residual = match &self.data_residual {
            Some(q) if carried => q.clone(),
            _ => {
                let resid: Vec<Complex64> =
                    self.dhat.iter().zip(&self.au).map(|(d, a)| d - a).collect();
                let q: Vec<f64> = self
                    .a_adjoint_real(&resid)
                    .iter()
                    .map(|x| x * inv_n)
                    .collect();
                if carried {
                    self.data_residual = Some(q.clone());
                }
                q
            }
        };
        let mut r = self.full_residual(&data_residual, &g, rho);
        let mut rr = dot(&r, &r);
        let mut p = vec![0.0; v];
        let mut beta = 0.0;
        for _ in 0..self.params.inner_steps(self.g.n2) {
            if rr == 0.0 {
                break;
            }
            p.iter_mut()
                .zip(&r)
                .for_each(|(pi, ri)| *pi = ri + beta * *pi);
            let ap = self.a(&p);
            let gp = self.gradient(&p);
            let p_hp = cdot(&ap) * inv_n + rho * dot(&gp, &gp);
            if p_hp <= 0.0 {
                break;
            }
            let step = rr / p_hp;
            self.u
                .iter_mut()
                .zip(&p)
                .for_each(|(u, pi)| *u += step * pi);
            self.au
                .iter_mut()
                .zip(&ap)
                .for_each(|(a, b)| *a += step * b);
            self.grad_u
                .iter_mut()
                .zip(&gp)
                .for_each(|(a, b)| *a += step * b);
            let hp_data = self.a_adjoint_real(&ap);
            match self.data_residual.take() {
                // The carried data residual takes the step; r is formed from it afresh.
                Some(mut q) if carried => {
                    q.iter_mut()
                        .zip(&hp_data)
                        .for_each(|(qi, h)| *qi -= step * h * inv_n);
                    r = self.full_residual(&q, &g, rho);
                    self.data_residual = Some(q);
                }
                _ => {
                    let hp_tv = self.gradient_adjoint(&gp);
                    for i in 0..v {
                        r[i] -= step * (hp_data[i] * inv_n + rho * hp_tv[i]);
                    }
                }
            }
            let rr_new = dot(&r, &r);
            beta = rr_new / rr;
            rr = rr_new;
        }
        let tau = self.tv_weight / rho;
        // The over-relaxed split h = a grad u + (1 - a) psi (grad u itself for plain ADMM).
        let a = self.params.relaxation;
        let h: Vec<f64> = if a == 1.0 {
            self.grad_u.clone()
        } else {
            self.grad_u
                .iter()
                .zip(&self.psi)
                .map(|(g, p)| a * g + (1.0 - a) * p)
                .collect()
        };
        for i in 0..v {
            let w = [0, 1, 2].map(|c| h[c * v + i] + self.lambda[c * v + i] / rho);
            let norm = (w[0] * w[0] + w[1] * w[1] + w[2] * w[2]).sqrt();
            let s = if norm > tau { 1.0 - tau / norm } else { 0.0 };
            for (c, wc) in w.iter().enumerate() {
                self.psi[c * v + i] = s * wc;
            }
        }
        self.lambda
            .iter_mut()
            .zip(h.iter().zip(&self.psi))
            .for_each(|(l, (h, p))| *l += rho * (h - p));
        let primal: f64 = self
            .grad_u
            .iter()
            .zip(&self.psi)
            .map(|(g, p)| (g - p) * (g - p))
            .sum();
        let dual = rho
            * rho
            * self
                .grad_u
                .iter()
                .zip(&h0)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f64>();
        if primal > 10.0 * dual {
            self.rho *= 2.0;
        } else if dual > 10.0 * primal {
            self.rho /= 2.0;
        }
        self.iteration += 1;
        if let Some(rule) = self.params.penalty_from_gradient {
            let norm = dot(&self.grad_u, &self.grad_u).sqrt();
            self.rho = rule.rho_after(self.iteration, self.rho, self.tv_weight, norm, v);
        }
    }

    /// The penalty the next outer iteration uses.
    pub fn rho(&self) -> f64 {
        self.rho
    }

    /// The current volume.
    pub fn volume(&self) -> &[f64] {
        &self.u
    }
}
