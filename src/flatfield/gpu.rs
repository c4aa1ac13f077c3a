//! The GPU backend of the fit: a plan that owns every buffer and bind group of one fit (created
//! once, reused by every iteration and solve) and runs the kernels of `shaders/flatfield/basic.wgsl`.
//!
//! Per iteration the host reads back `4N + 8` floats (per-image sums and field statistics, spec
//! §8.7 option (a)) and runs the scalar step of §4.3 steps 8–9.5 in f64 with the code the oracle
//! uses. To need one synchronisation per iteration, the dark-field update of iteration k is
//! recorded at the head of iteration k+1's submission (it only writes `o_next`, which iteration
//! k+1 then commits to `o`).

use bytemuck::{Pod, Zeroable};

use super::dct::dct_matrix;
use super::params::BasicParams;
use super::solver::{
    brightness_step, FieldStats, ImageSums, Prepared, SolveBackend, SolveOutput, ENT2, MU_GROWTH,
};
use super::FlatfieldError;
use crate::gpu::{BindingKind, Bound, GpuBuffer, GpuContext, KernelSpec};
use crate::shaders;

const WORKGROUP: u32 = 256;
const BINDINGS: &[BindingKind] = &[
    BindingKind::StorageRead,
    BindingKind::StorageReadWrite,
    BindingKind::StorageReadWrite,
    BindingKind::StorageReadWrite,
    BindingKind::StorageReadWrite,
    BindingKind::StorageRead,
    BindingKind::Uniform,
    BindingKind::Uniform,
];

/// Sizes and element offsets into the vector buffer; mirrors `Dims` in basic.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Dims {
    n: u32,
    m: u32,
    size: u32,
    off_a: u32,
    off_valid: u32,
    off_w: u32,
    off_what: u32,
    off_o: u32,
    off_onext: u32,
    off_t: u32,
    off_tmp: u32,
    off_scalars: u32,
    off_stats: u32,
    off_sums: u32,
    pad0: u32,
    pad1: u32,
}

/// Mirrors `DctParams` in basic.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct DctParams {
    src: u32,
    dst: u32,
    inverse: u32,
    epilogue: u32,
}

const EPI_STORE: u32 = 0;
const EPI_FLAT: u32 = 1;
const EPI_DARK_COEF: u32 = 2;
const EPI_DARK_OUT: u32 = 3;

/// The host-written scalars, in the order of the `S_*` constants of basic.wgsl.
#[derive(Debug, Clone, Copy, Default)]
struct ScalarBlock {
    mu: f64,
    thr_flat: f64,
    omega_over_mu: f64,
    beta: f64,
    a_mean_valid: f64,
    inv_count_valid: f64,
    thr_dark: f64,
    epsilon: f64,
}

impl ScalarBlock {
    fn to_f32(self) -> [f32; SCALARS] {
        let mut s = [0.0f32; SCALARS];
        s[0] = self.mu as f32;
        s[1] = (1.0 / self.mu) as f32;
        s[2] = self.thr_flat as f32;
        s[3] = self.omega_over_mu as f32;
        s[4] = self.beta as f32;
        s[5] = self.a_mean_valid as f32;
        s[6] = self.inv_count_valid as f32;
        s[7] = self.thr_dark as f32;
        s[8] = self.epsilon as f32;
        s
    }
}

const SCALARS: usize = 16;
const STATS: usize = 8;

/// The bound kernels of one plan, in dispatch order of an iteration.
#[derive(Debug)]
struct Passes {
    reset: Bound,
    commit_offset: Bound,
    column_mean: Bound,
    flat_rows: Bound,
    flat_cols: Bound,
    w_rows: Bound,
    w_cols: Bound,
    field_stats: Bound,
    element: Bound,
    dark_column: Bound,
    dark_rows: Bound,
    dark_cols: Bound,
    dark_inv_rows: Bound,
    dark_inv_cols: Bound,
    reweight: Bound,
}

/// The GPU fit plan for one prepared stack.
#[derive(Debug)]
pub struct GpuSolver<'a> {
    ctx: &'a GpuContext,
    prepared: &'a Prepared,
    dims: Dims,
    vecs: GpuBuffer,
    passes: Passes,
    /// `N·M / Σ Ω_raw` of the current weights (1 before the first reweighting).
    omega_scale: f64,
    // Kept alive for the bind groups.
    _buffers: Vec<GpuBuffer>,
}

impl<'a> GpuSolver<'a> {
    /// Allocates every buffer of the fit and binds every kernel (once per fit).
    pub fn new(ctx: &'a GpuContext, prepared: &'a Prepared) -> Result<Self, FlatfieldError> {
        let (n, size) = (prepared.count, prepared.size);
        let m = size * size;
        let bytes = (n * m * 4) as u64;
        let limit = ctx.max_binding_bytes().min(ctx.max_buffer_bytes());
        if bytes > limit {
            return Err(FlatfieldError::TooManyImages {
                count: n,
                size,
                bytes,
                limit,
                max_images: (limit / (m as u64 * 4)) as usize,
            });
        }
        let mut next = 0u32;
        let mut take = |len: usize| {
            let at = next;
            next += len as u32;
            at
        };
        let dims = Dims {
            n: n as u32,
            m: m as u32,
            size: size as u32,
            off_a: take(n),
            off_valid: take(n),
            off_w: take(m),
            off_what: take(m),
            off_o: take(m),
            off_onext: take(m),
            off_t: take(m),
            off_tmp: take(m),
            off_scalars: take(SCALARS),
            // Statistics and sums are adjacent: one readback per iteration.
            off_stats: take(STATS),
            off_sums: take(4 * n),
            pad0: 0,
            pad1: 0,
        };
        let vec_len = next as usize;
        let d = ctx.upload("basic D", &prepared.data)?;
        let e = ctx.storage_buffer("basic E", bytes)?;
        let y = ctx.storage_buffer("basic Y", bytes)?;
        let omega = ctx.upload("basic omega", &vec![1.0f32; n * m])?;
        let vecs = ctx.storage_buffer("basic vectors", (vec_len * 4) as u64)?;
        // C followed by Cᵀ (see dct_rows in basic.wgsl).
        let c64 = dct_matrix(size);
        let c: Vec<f32> = c64
            .iter()
            .chain(&transpose(&c64, size))
            .map(|&v| v as f32)
            .collect();
        let cmat = ctx.upload("basic DCT matrix", &c)?;
        let dims_buf = ctx.uniform("basic dims", &dims)?;
        let kernel = |entry: &'static str| {
            ctx.kernel(&KernelSpec {
                shader: &shaders::FLATFIELD_BASIC,
                entry,
                bindings: BINDINGS,
                overrides: vec![],
            })
        };
        let mut uniforms = Vec::new();
        let mut bind = |entry: &'static str, dct: DctParams| -> Result<Bound, FlatfieldError> {
            let u = ctx.uniform("basic dct params", &dct)?;
            let bound = kernel(entry)?.bind(
                ctx,
                &[
                    (&d).into(),
                    (&e).into(),
                    (&y).into(),
                    (&omega).into(),
                    (&vecs).into(),
                    (&cmat).into(),
                    (&dims_buf).into(),
                    (&u).into(),
                ],
            )?;
            uniforms.push(u);
            Ok(bound)
        };
        let none = DctParams {
            src: 0,
            dst: 0,
            inverse: 0,
            epilogue: EPI_STORE,
        };
        let dct = |src: u32, dst: u32, inverse: bool, epilogue: u32| DctParams {
            src,
            dst,
            inverse: inverse as u32,
            epilogue,
        };
        let passes = Passes {
            reset: bind("reset_state", none)?,
            commit_offset: bind("commit_offset", none)?,
            column_mean: bind("column_mean", none)?,
            flat_rows: bind("dct_rows", dct(dims.off_t, dims.off_tmp, false, EPI_STORE))?,
            flat_cols: bind(
                "dct_cols",
                dct(dims.off_tmp, dims.off_what, false, EPI_FLAT),
            )?,
            w_rows: bind(
                "dct_rows",
                dct(dims.off_what, dims.off_tmp, true, EPI_STORE),
            )?,
            w_cols: bind("dct_cols", dct(dims.off_tmp, dims.off_w, true, EPI_STORE))?,
            field_stats: bind("field_stats", none)?,
            element: bind("element_pass", none)?,
            dark_column: bind("dark_column", none)?,
            dark_rows: bind("dct_rows", dct(dims.off_t, dims.off_tmp, false, EPI_STORE))?,
            dark_cols: bind(
                "dct_cols",
                dct(dims.off_tmp, dims.off_onext, false, EPI_DARK_COEF),
            )?,
            dark_inv_rows: bind(
                "dct_rows",
                dct(dims.off_onext, dims.off_tmp, true, EPI_STORE),
            )?,
            dark_inv_cols: bind(
                "dct_cols",
                dct(dims.off_tmp, dims.off_onext, true, EPI_DARK_OUT),
            )?,
            reweight: bind("reweight", none)?,
        };
        let mut buffers = vec![d, e, y, omega, cmat, dims_buf];
        buffers.extend(uniforms);
        Ok(Self {
            ctx,
            prepared,
            dims,
            vecs,
            passes,
            omega_scale: 1.0,
            _buffers: buffers,
        })
    }

    fn pixel_groups(&self) -> u32 {
        self.dims.m.div_ceil(WORKGROUP)
    }

    /// Workgroups of a DCT pass: one invocation per 4x4 output block (BLOCK in basic.wgsl).
    fn block_groups(&self) -> u32 {
        self.dims.size.div_ceil(4).pow(2).div_ceil(WORKGROUP)
    }

    fn write_vec(&self, offset: u32, values: &[f64]) {
        let v: Vec<f32> = values.iter().map(|&x| x as f32).collect();
        self.ctx.write(&self.vecs, offset as u64, &v);
    }

    fn read_vec(&self, offset: u32, len: usize) -> Result<Vec<f64>, FlatfieldError> {
        Ok(self
            .ctx
            .read::<f32>(&self.vecs, offset as u64, len)?
            .into_iter()
            .map(f64::from)
            .collect())
    }

    /// Records the dark-field update (§4.3 steps 9.6–9.8) into `o_next`.
    fn record_dark(&self, rec: &mut crate::gpu::Recorder) {
        let p = &self.passes;
        let t = self.block_groups();
        rec.dispatch(&p.dark_column, self.pixel_groups());
        rec.dispatch(&p.dark_rows, t);
        rec.dispatch(&p.dark_cols, t);
        rec.dispatch(&p.dark_inv_rows, t);
        rec.dispatch(&p.dark_inv_cols, t);
    }
}

fn transpose(c: &[f64], n: usize) -> Vec<f64> {
    (0..n * n).map(|i| c[(i % n) * n + i / n]).collect()
}

impl SolveBackend for GpuSolver<'_> {
    fn solve(&mut self, params: &BasicParams) -> Result<SolveOutput, FlatfieldError> {
        let c = self.prepared.constants;
        let (n, m) = (self.dims.n as usize, self.dims.m as usize);
        let dims = self.dims;
        // §4.2 initial state.
        let mut a = vec![1.0; n];
        self.write_vec(dims.off_a, &a);
        self.write_vec(dims.off_valid, &vec![0.0; n]);
        self.write_vec(dims.off_w, &vec![0.0; 4 * m]); // w, Ŵ, o, o_next are adjacent
        let mut rec = self.ctx.recorder("basic reset");
        rec.dispatch(
            &self.passes.reset,
            (n * m).div_ceil(WORKGROUP as usize) as u32,
        );
        self.ctx.submit(rec)?;
        let mut scalars = ScalarBlock {
            mu: c.mu0,
            epsilon: params.epsilon,
            ..ScalarBlock::default()
        };
        let mut pending_dark = false;
        let mut k = 0;
        loop {
            scalars.thr_flat = c.lambda_flatfield / scalars.mu;
            scalars.omega_over_mu = self.omega_scale / scalars.mu;
            self.ctx
                .write(&self.vecs, dims.off_scalars as u64, &scalars.to_f32());
            let p = &self.passes;
            let g = self.pixel_groups();
            let mut rec = self.ctx.recorder("basic iteration");
            if pending_dark {
                self.record_dark(&mut rec);
                rec.dispatch(&p.commit_offset, g);
            }
            rec.dispatch(&p.column_mean, g);
            let t = self.block_groups();
            rec.dispatch(&p.flat_rows, t);
            rec.dispatch(&p.flat_cols, t);
            rec.dispatch(&p.w_rows, t);
            rec.dispatch(&p.w_cols, t);
            rec.dispatch(&p.field_stats, 1);
            rec.dispatch(&p.element, n as u32);
            self.ctx.submit(rec)?;
            let raw = self.read_vec(dims.off_stats, STATS + 4 * n)?;
            let stats = FieldStats {
                w_mean: raw[0] / m as f64,
                w_min: raw[1],
                w_max: raw[2],
                n_in: raw[3] as usize,
                n_out: raw[4] as usize,
                o_mean: raw[5] / m as f64,
            };
            let sums: Vec<ImageSums> = raw[STATS..]
                .chunks_exact(4)
                .map(|s| ImageSums {
                    r: s[0],
                    r_in: s[1],
                    r_out: s[2],
                    z2: s[3],
                })
                .collect();
            let a_old = a.clone();
            let step = brightness_step(&sums, &stats, &a, m, params.get_darkfield, &c);
            a = step.a;
            self.write_vec(dims.off_a, &a);
            pending_dark = match step.dark {
                Some(dark) => {
                    let valid: Vec<f64> = step.valid.iter().map(|&v| f64::from(v)).collect();
                    self.write_vec(dims.off_valid, &valid);
                    scalars.beta = dark.beta;
                    scalars.a_mean_valid = dark.a_mean_valid;
                    scalars.inv_count_valid = 1.0 / dark.count_valid as f64;
                    scalars.thr_dark = c.lambda_darkfield / (ENT2 * scalars.mu);
                    true
                }
                None => false,
            };
            let residual = sums.iter().map(|s| s.z2).sum::<f64>().sqrt() / c.d_norm;
            scalars.mu = (scalars.mu * MU_GROWTH).min(c.mu_bar);
            k += 1;
            if residual < params.optimization_tolerance || k >= params.max_iterations {
                let o_old = self.read_vec(dims.off_o, m)?;
                let o_new = if pending_dark {
                    self.ctx
                        .write(&self.vecs, dims.off_scalars as u64, &scalars.to_f32());
                    let mut rec = self.ctx.recorder("basic final dark-field");
                    self.record_dark(&mut rec);
                    self.ctx.submit(rec)?;
                    self.read_vec(dims.off_onext, m)?
                } else {
                    o_old.clone()
                };
                return Ok(SolveOutput {
                    a_old,
                    w: self.read_vec(dims.off_w, m)?,
                    o_old,
                    o_new,
                    beta: scalars.beta,
                    iterations: k,
                    residual,
                });
            }
        }
    }

    fn reweight(&mut self, ell: &[f64], epsilon: f64) -> Result<(), FlatfieldError> {
        let n = self.dims.n as usize;
        self.write_vec(self.dims.off_a, ell);
        let scalars = ScalarBlock {
            mu: 1.0,
            epsilon,
            ..ScalarBlock::default()
        };
        self.ctx
            .write(&self.vecs, self.dims.off_scalars as u64, &scalars.to_f32());
        let mut rec = self.ctx.recorder("basic reweight");
        rec.dispatch(&self.passes.reweight, n as u32);
        self.ctx.submit(rec)?;
        let sums = self.read_vec(self.dims.off_sums, 4 * n)?;
        let total: f64 = sums.chunks_exact(4).map(|s| s[0]).sum();
        self.omega_scale = (n * self.dims.m as usize) as f64 / total;
        Ok(())
    }
}
