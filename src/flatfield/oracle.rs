//! The f64 CPU oracle: docs/flatfield-method.md, "ALM iteration", written out literally (no
//! fusion, no DCT-domain shortcuts), the
//! reference the GPU solver is compared with in the tests and the benchmark's CPU baseline.

use super::dct::Dct2;
use super::params::BasicParams;
use super::solver::{
    baseline_step, brightness_step, shrink, BaselineSolve, FieldStats, ImageSums, Prepared,
    SmoothnessWeights, SolveBackend, SolveOutput, ENT2, MASK_TOLERANCE, MU_CAP, MU_COEF, MU_GROWTH,
};
use super::FlatfieldError;
use crate::metrics::{nan_max, nan_min};

/// The f64 backend: every N×M array in host memory.
#[derive(Debug)]
pub struct OracleBackend<'a> {
    prepared: &'a Prepared,
    d: Vec<f64>,
    e: Vec<f64>,
    y: Vec<f64>,
    omega: Vec<f64>,
    dct: Dct2,
}

impl<'a> OracleBackend<'a> {
    pub fn new(prepared: &'a Prepared) -> Self {
        let len = prepared.data.len();
        Self {
            prepared,
            d: prepared.data.iter().map(|&v| v as f64).collect(),
            e: vec![0.0; len],
            y: vec![0.0; len],
            omega: vec![1.0; len],
            dct: Dct2::new(prepared.size),
        }
    }
}

impl SolveBackend for OracleBackend<'_> {
    fn solve(
        &mut self,
        params: &BasicParams,
        lambda: SmoothnessWeights,
    ) -> Result<SolveOutput, FlatfieldError> {
        let c = &self.prepared.constants;
        let (n, m) = (self.prepared.count, self.prepared.size * self.prepared.size);
        let mut w_hat = vec![0.0; m];
        let mut w = vec![0.0; m];
        let mut a = vec![1.0; n];
        let mut o = vec![0.0; m];
        let mut beta = 0.0;
        self.e.fill(0.0);
        self.y.fill(0.0);
        let mut mu = c.mu0;
        let mut t = vec![0.0; m];
        let mut coef = vec![0.0; m];
        let mut sums = vec![ImageSums::default(); n];
        let mut k = 0;
        loop {
            // Steps 1-3: w is cached from the previous iteration's step 5.
            t.fill(0.0);
            for (i, ai) in a.iter().enumerate() {
                let row = i * m..(i + 1) * m;
                let (d, e, y) = (&self.d[row.clone()], &self.e[row.clone()], &self.y[row]);
                for j in 0..m {
                    t[j] += d[j] - ai * w[j] - o[j] - e[j] + y[j] / mu;
                }
            }
            t.iter_mut().for_each(|v| *v /= n as f64);
            // Steps 4-5.
            self.dct.forward(&t, &mut coef);
            let thr = lambda.flatfield / mu;
            for (wh, cf) in w_hat.iter_mut().zip(&coef) {
                *wh = shrink(*wh + cf, thr);
            }
            self.dct.inverse(&w_hat, &mut w);
            let w_mean = w.iter().sum::<f64>() / m as f64;
            let stats = FieldStats {
                w_mean,
                w_min: w.iter().cloned().fold(f64::INFINITY, nan_min),
                w_max: w.iter().cloned().fold(f64::NEG_INFINITY, nan_max),
                n_in: w
                    .iter()
                    .filter(|&&v| v > w_mean * (1.0 - MASK_TOLERANCE))
                    .count(),
                n_out: w
                    .iter()
                    .filter(|&&v| v < w_mean * (1.0 + MASK_TOLERANCE))
                    .count(),
                o_mean: o.iter().sum::<f64>() / m as f64,
            };
            // Steps 6, 7, 10, 11 and the per-image sums of step 8.
            for (i, s) in sums.iter_mut().enumerate() {
                *s = ImageSums::default();
                for j in i * m..(i + 1) * m {
                    let p = j - i * m;
                    let l = a[i] * w[p] + o[p];
                    let e = shrink(self.d[j] - l + self.y[j] / mu, self.omega[j] / mu);
                    let z = self.d[j] - l - e;
                    self.e[j] = e;
                    self.y[j] += mu * z;
                    let r = self.d[j] - e;
                    s.r += r;
                    if w[p] > w_mean * (1.0 - MASK_TOLERANCE) {
                        s.r_in += r;
                    }
                    if w[p] < w_mean * (1.0 + MASK_TOLERANCE) {
                        s.r_out += r;
                    }
                    s.z2 += z * z;
                }
            }
            let a_old = a.clone();
            let o_old = o.clone();
            // Steps 8-9.
            let step = brightness_step(&sums, &stats, &a, m, params.get_darkfield, c);
            a = step.a;
            if let Some(dark) = step.dark {
                beta = dark.beta;
                let mut u = vec![0.0; m];
                for i in (0..n).filter(|&i| step.valid[i]) {
                    for (p, uj) in u.iter_mut().enumerate() {
                        *uj += self.d[i * m + p] - self.e[i * m + p];
                    }
                }
                for (uj, wj) in u.iter_mut().zip(&w) {
                    *uj = *uj / dark.count_valid as f64 - dark.a_mean_valid * wj;
                }
                let u_mean = u.iter().sum::<f64>() / m as f64;
                let z: Vec<f64> = w.iter().map(|wj| beta * (w_mean - wj)).collect();
                let o1: Vec<f64> = u.iter().zip(&z).map(|(uj, zj)| uj - u_mean - zj).collect();
                let thr = lambda.darkfield / (ENT2 * mu);
                self.dct.forward(&o1, &mut coef);
                coef.iter_mut().for_each(|v| *v = shrink(*v, thr));
                let mut o2 = vec![0.0; m];
                self.dct.inverse(&coef, &mut o2);
                for ((oj, o2j), zj) in o.iter_mut().zip(&o2).zip(&z) {
                    *oj = shrink(*o2j, thr) + zj;
                }
            }
            // Steps 12-13.
            let residual = sums.iter().map(|s| s.z2).sum::<f64>().sqrt() / c.d_norm;
            mu = (mu * MU_GROWTH).min(c.mu_bar);
            k += 1;
            if residual < params.optimization_tolerance || k >= params.max_iterations {
                return Ok(SolveOutput {
                    a_old,
                    w,
                    o_old,
                    o_new: o,
                    beta,
                    iterations: k,
                    residual,
                });
            }
        }
    }

    fn reweight(&mut self, ell: &[f64], epsilon: f64) -> Result<(), FlatfieldError> {
        let m = self.prepared.size * self.prepared.size;
        let mut total = 0.0;
        for (i, l) in ell.iter().enumerate() {
            for j in i * m..(i + 1) * m {
                let v = 1.0 / ((self.e[j] / (l + 1e-6)).abs() + epsilon);
                self.omega[j] = v;
                total += v;
            }
        }
        let scale = self.omega.len() as f64 / total;
        self.omega.iter_mut().for_each(|v| *v *= scale);
        Ok(())
    }

    fn reset_weights(&mut self, _epsilon: f64) -> Result<(), FlatfieldError> {
        self.omega.fill(1.0);
        Ok(())
    }

    fn start_baseline(&mut self, epsilon: f64) -> Result<(), FlatfieldError> {
        if let Some(original) = &self.prepared.original {
            self.d = original.iter().map(|&v| v as f64).collect();
        }
        self.reset_weights(epsilon)
    }

    fn solve_baseline(
        &mut self,
        s: &[f64],
        d: &[f64],
        start: &[f64],
        params: &BasicParams,
    ) -> Result<BaselineSolve, FlatfieldError> {
        let c = &self.prepared.constants;
        let m = s.len();
        let d_mean = d.iter().sum::<f64>() / m as f64;
        let mu0 = MU_COEF / c.sigma1_original;
        let mut mu = mu0;
        let mut b = start.to_vec();
        self.e.fill(0.0);
        self.y.fill(0.0);
        let mut sums = vec![ImageSums::default(); b.len()];
        let mut k = 0;
        loop {
            for (i, sum) in sums.iter_mut().enumerate() {
                *sum = ImageSums::default();
                for p in 0..m {
                    let j = i * m + p;
                    let l = b[i] * s[p] + d[p];
                    let e = shrink(self.d[j] - l + self.y[j] / mu, self.omega[j] / mu);
                    let z = self.d[j] - l - e;
                    self.e[j] = e;
                    self.y[j] += mu * z;
                    sum.r += self.d[j] - e;
                    sum.z2 += z * z;
                }
            }
            b = baseline_step(&sums, m, d_mean);
            let residual = sums.iter().map(|s| s.z2).sum::<f64>().sqrt() / c.d_norm;
            mu = (mu * MU_GROWTH).min(MU_CAP * mu0);
            k += 1;
            if residual < params.optimization_tolerance || k >= params.max_iterations {
                return Ok(BaselineSolve {
                    baseline: b,
                    iterations: k,
                    residual,
                });
            }
        }
    }
}
