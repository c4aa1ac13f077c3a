//! The ADMM-TV iteration on the CPU with every vector operation and reduction in f64, the operator
//! stages from [`CpuOperator`] (f32): an independent implementation of exactly the GPU solver's
//! iterations, which the GPU results are compared with.

use num_complex::{Complex32, Complex64};

use super::CpuOperator;
use crate::fft::Direction;
use crate::operator::Geometry;
use crate::params::AdmmParams;

/// The GPU solver's iterations (exact-step CG inner solver) on the CPU.
pub struct CpuAdmm {
    op: CpuOperator,
    g: Geometry,
    params: AdmmParams,
    n_fourier: f64,
    rho: f64,
    dhat: Vec<Complex64>,
    u: Vec<f64>,
    psi: Vec<f64>,
    lambda: Vec<f64>,
    grad_u: Vec<f64>,
    au: Vec<Complex64>,
    /// Experiment (issue 31): fast ADMM with restart (Goldstein et al. 2014, algorithm 8) with
    /// this eta, and residual balancing (mu, factor).
    pub restart_eta: Option<f64>,
    pub balancing: (f64, f64),
    fast: Fast,
    /// Experiment: the transfer function of (1/N) Re A*A (circulant approximation) when the CG
    /// of the u-subproblem is preconditioned with (w(k) + rho l(k))^-1.
    data_transfer: Option<Vec<f64>>,
}

/// The state of fast ADMM: the last iterates of (psi, lambda), the momentum and the combined
/// residual.
#[derive(Default)]
struct Fast {
    psi_prev: Vec<f64>,
    lambda_prev: Vec<f64>,
    alpha: f64,
    c_prev: f64,
    restarts: usize,
}

fn to32(x: &[f64]) -> Vec<Complex32> {
    x.iter().map(|&v| Complex32::new(v as f32, 0.0)).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn dot_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
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
        Self {
            op,
            g: g.clone(),
            params,
            n_fourier,
            rho: params.rho0,
            dhat,
            u: vec![0.0; v],
            psi: vec![0.0; 3 * v],
            lambda: vec![0.0; 3 * v],
            grad_u: vec![0.0; 3 * v],
            au: vec![Complex64::new(0.0, 0.0); g.data_len()],
            restart_eta: None,
            balancing: (10.0, 2.0),
            fast: Fast {
                psi_prev: vec![0.0; 3 * v],
                lambda_prev: vec![0.0; 3 * v],
                alpha: 1.0,
                c_prev: f64::INFINITY,
                restarts: 0,
            },
            data_transfer: None,
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
        let resid: Vec<Complex64> = self.dhat.iter().zip(&self.au).map(|(d, a)| d - a).collect();
        let tmp: Vec<f64> = g.iter().zip(&self.grad_u).map(|(a, b)| a - b).collect();
        let mut r: Vec<f64> = self
            .a_adjoint_real(&resid)
            .iter()
            .map(|x| x * inv_n)
            .collect();
        for (ri, t) in r.iter_mut().zip(self.gradient_adjoint(&tmp)) {
            *ri += rho * t;
        }
        let transfer = self.data_transfer.take();
        let pre = |s: &Self, r: &[f64]| match &transfer {
            Some(w) => s.precondition(r, w),
            None => r.to_vec(),
        };
        let mut z = pre(self, &r);
        let mut rr = dot(&r, &z);
        let mut p = vec![0.0; v];
        let mut beta = 0.0;
        for _ in 0..self.params.inner_iterations {
            if rr == 0.0 {
                break;
            }
            p.iter_mut()
                .zip(&z)
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
            let hp_tv = self.gradient_adjoint(&gp);
            for i in 0..v {
                r[i] -= step * (hp_data[i] * inv_n + rho * hp_tv[i]);
            }
            z = pre(self, &r);
            let rr_new = dot(&r, &z);
            beta = rr_new / rr;
            rr = rr_new;
        }
        let (psi_hat, lambda_hat) = if self.restart_eta.is_some() {
            (self.psi.clone(), self.lambda.clone())
        } else {
            (Vec::new(), Vec::new())
        };
        self.data_transfer = transfer;
        let tau = self.params.alpha / rho;
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
        let (mu, factor) = self.balancing;
        let rho_before = self.rho;
        if primal > mu * dual {
            self.rho *= factor;
        } else if dual > mu * primal {
            self.rho /= factor;
        }
        if let Some(eta) = self.restart_eta {
            // psi, lambda now hold the new iterates; h0 holds nothing of them: the hats the
            // u-step used were psi_hat, lambda_hat = the values before this step's updates.
            let f = &mut self.fast;
            let c = dot_diff(&self.lambda, &lambda_hat) / rho + rho * dot_diff(&self.psi, &psi_hat);
            if self.rho != rho_before {
                // A new penalty: start the momentum afresh from the new iterates.
                f.alpha = 1.0;
                f.c_prev = f64::INFINITY;
                f.psi_prev.clone_from(&self.psi);
                f.lambda_prev.clone_from(&self.lambda);
            } else if c < eta * f.c_prev {
                let next = 0.5 * (1.0 + (1.0 + 4.0 * f.alpha * f.alpha).sqrt());
                let w = (f.alpha - 1.0) / next;
                for i in 0..self.psi.len() {
                    let (p, l) = (self.psi[i], self.lambda[i]);
                    self.psi[i] = p + w * (p - f.psi_prev[i]);
                    self.lambda[i] = l + w * (l - f.lambda_prev[i]);
                    f.psi_prev[i] = p;
                    f.lambda_prev[i] = l;
                }
                f.alpha = next;
                f.c_prev = c;
            } else {
                // Restart: back to the previous iterates, no momentum.
                f.restarts += 1;
                f.alpha = 1.0;
                f.c_prev /= eta;
                for i in 0..self.psi.len() {
                    let (p, l) = (self.psi[i], self.lambda[i]);
                    self.psi[i] = f.psi_prev[i];
                    self.lambda[i] = f.lambda_prev[i];
                    f.psi_prev[i] = p;
                    f.lambda_prev[i] = l;
                }
            }
        }
    }

    /// Experiment: precondition the CG with the circulant approximation of the subproblem's
    /// normal operator, the data part measured once as the response to a centred impulse.
    pub fn enable_preconditioner(&mut self) {
        let (n0, n1, n2) = (self.g.n0, self.g.n1, self.g.n2);
        let v = self.u.len();
        let mut delta = vec![0.0; v];
        let c = (n0 / 2 * n1 + n1 / 2) * n2 + n2 / 2;
        delta[c] = 1.0;
        let inv_n = 1.0 / self.n_fourier;
        let response: Vec<f64> = self
            .a_adjoint_real(&self.a(&delta))
            .iter()
            .map(|x| x * inv_n)
            .collect();
        // Roll the response so that the impulse sits at index 0, then transform.
        let mut rolled = vec![Complex64::new(0.0, 0.0); v];
        for z in 0..n0 {
            for y in 0..n1 {
                for x in 0..n2 {
                    let (zz, yy, xx) = (
                        (z + n0 - n0 / 2) % n0,
                        (y + n1 - n1 / 2) % n1,
                        (x + n2 - n2 / 2) % n2,
                    );
                    rolled[(zz * n1 + yy) * n2 + xx] =
                        Complex64::new(response[(z * n1 + y) * n2 + x], 0.0);
                }
            }
        }
        crate::reference::fft_last_axes(&mut rolled, &[n0, n1, n2], 3, Direction::Forward, 2);
        self.data_transfer = Some(rolled.iter().map(|c| c.re.max(0.0)).collect());
    }

    /// `(w(k) + rho l(k) + floor)^-1 r` through 3D FFTs.
    fn precondition(&self, r: &[f64], w: &[f64]) -> Vec<f64> {
        let (n0, n1, n2) = (self.g.n0, self.g.n1, self.g.n2);
        let mut x: Vec<Complex64> = r.iter().map(|&v| Complex64::new(v, 0.0)).collect();
        crate::reference::fft_last_axes(&mut x, &[n0, n1, n2], 3, Direction::Forward, 2);
        let s = |k: usize, n: usize| {
            let t = (std::f64::consts::PI * k as f64 / n as f64).sin();
            4.0 * t * t
        };
        let wmax = w.iter().cloned().fold(0.0, f64::max);
        let floor = 1e-3 * wmax;
        for z in 0..n0 {
            for y in 0..n1 {
                for xx in 0..n2 {
                    let i = (z * n1 + y) * n2 + xx;
                    let l = (s(z, n0) + s(y, n1) + s(xx, n2)) / 3.0;
                    x[i] /= w[i] + self.rho * l + floor;
                }
            }
        }
        crate::reference::fft_last_axes(&mut x, &[n0, n1, n2], 3, Direction::Inverse, 2);
        let scale = 1.0 / r.len() as f64;
        x.iter().map(|c| c.re * scale).collect()
    }

    /// Restarts of fast ADMM so far (experiment).
    pub fn restarts(&self) -> usize {
        self.fast.restarts
    }

    /// The current volume.
    pub fn volume(&self) -> &[f64] {
        &self.u
    }
}
