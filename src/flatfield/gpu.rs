//! The GPU backend of the fit: a plan that owns every buffer and bind group of one fit (created
//! once, reused by every iteration and solve) and runs the kernels of `shaders/flatfield/basic.wgsl`.
//!
//! Per iteration the host reads back `4N + 8` floats (per-image sums and field statistics:
//! docs/flatfield-method.md, "Fused GPU kernels") and runs the scalar step, steps 8–9.5 of
//! docs/flatfield-method.md, "ALM iteration", in f64 with the code the oracle
//! uses. To need one synchronisation per iteration, the dark-field update of iteration k is
//! recorded at the head of iteration k+1's submission (it only writes `o_next`, which iteration
//! k+1 then commits to `o`).
//!
//! The four N×M arrays are split along the image axis into blocks that each fit one storage
//! binding (and one buffer); every kernel that touches them is bound once per block and
//! dispatched block after block. The column sums carry their running partial sums from block to
//! block, so a split fit is bit-identical to an unsplit one.

use bytemuck::{Pod, Zeroable};

use super::dct::{dct_matrix, transpose};
use super::params::BasicParams;
use super::solver::{
    baseline_step, brightness_step, BaselineSolve, FieldStats, ImageSums, Prepared,
    SmoothnessWeights, SolveBackend, SolveOutput, ENT2, MU_CAP, MU_COEF, MU_GROWTH,
};
use super::FlatfieldError;
use crate::gpu::{Bound, GpuBuffer, GpuContext, KernelSpec};
use crate::shaders;

use shaders::basic::{BLOCK, WORKGROUP};

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

/// Mirrors `PassParams` in basic.wgsl: a DCT dispatch's source, destination and epilogue, and
/// the image block of the bind group.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct PassParams {
    src: u32,
    dst: u32,
    inverse: u32,
    epilogue: u32,
    first: u32,
    count: u32,
    pad0: u32,
    pad1: u32,
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

/// The bound kernels of one plan, in dispatch order of an iteration. Kernels that read the
/// N×M arrays have one binding per image block (in image order).
#[derive(Debug)]
struct Passes {
    reset: Vec<Bound>,
    commit_offset: Bound,
    column_mean: Vec<Bound>,
    flat_rows: Bound,
    flat_cols: Bound,
    w_rows: Bound,
    w_cols: Bound,
    field_stats: Bound,
    element: Vec<Bound>,
    dark_column: Vec<Bound>,
    dark_rows: Bound,
    dark_cols: Bound,
    dark_inv_rows: Bound,
    dark_inv_cols: Bound,
    reweight: Vec<Bound>,
}

/// The N×M arrays of images `[first, first + count)`.
#[derive(Debug)]
struct Block {
    first: usize,
    count: usize,
    d: GpuBuffer,
    e: GpuBuffer,
    y: GpuBuffer,
    omega: GpuBuffer,
}

/// The GPU fit plan for one prepared stack.
#[derive(Debug)]
pub struct GpuSolver<'a> {
    ctx: &'a GpuContext,
    prepared: &'a Prepared,
    dims: Dims,
    vecs: GpuBuffer,
    /// The image blocks (the last block may hold fewer images).
    blocks: Vec<Block>,
    passes: Passes,
    /// `N·M / Σ Ω_raw` of the current weights (1 before the first reweighting).
    omega_scale: f64,
    // Kept alive for the bind groups.
    _buffers: Vec<GpuBuffer>,
}

/// The offsets of the per-image vectors, fields, scalars, statistics and sums of a fit of `n`
/// images of `size`x`size` in the vector buffer, and the buffer's bytes.
fn vector_layout(n: usize, size: usize) -> (Dims, u64) {
    let m = size * size;
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
    (dims, next as u64 * 4)
}

/// The N×M arrays in blocks of `per_block` images: D uploaded from `prepared`, E and Y
/// allocated, the weights Ω at 1.
fn image_blocks(
    ctx: &GpuContext,
    prepared: &Prepared,
    per_block: usize,
) -> Result<Vec<Block>, FlatfieldError> {
    let n = prepared.count;
    let m = prepared.size * prepared.size;
    (0..n.div_ceil(per_block).max(1))
        .map(|b| {
            let first = b * per_block;
            let count = per_block.min(n - first);
            let bytes = (count * m * 4) as u64;
            Ok(Block {
                first,
                count,
                d: ctx.upload("basic D", &prepared.data[first * m..(first + count) * m])?,
                e: ctx.storage_buffer("basic E", bytes)?,
                y: ctx.storage_buffer("basic Y", bytes)?,
                omega: ctx.upload("basic omega", &vec![1.0f32; count * m])?,
            })
        })
        .collect()
}

/// The DCT matrix C of `size` followed by Cᵀ (see dct_rows in basic.wgsl), on the device.
fn dct_matrices(ctx: &GpuContext, size: usize) -> Result<GpuBuffer, FlatfieldError> {
    let c64 = dct_matrix(size);
    let c: Vec<f32> = c64
        .iter()
        .chain(&transpose(&c64, size))
        .map(|&v| v as f32)
        .collect();
    Ok(ctx.upload("basic DCT matrix", &c)?)
}

/// Binds the kernels of one fit to its buffers, keeping every pass's uniform.
struct Binder<'b> {
    ctx: &'b GpuContext,
    vecs: &'b GpuBuffer,
    cmat: &'b GpuBuffer,
    dims: &'b GpuBuffer,
    /// The pass parameters of every binding, in binding order (the bind groups need them).
    uniforms: Vec<GpuBuffer>,
}

impl Binder<'_> {
    /// `entry` bound to the arrays of `block`, with `pass` for that block.
    fn bind_block(
        &mut self,
        entry: &'static str,
        block: &Block,
        pass: PassParams,
    ) -> Result<Bound, FlatfieldError> {
        let ctx = self.ctx;
        let pass = PassParams {
            first: block.first as u32,
            count: block.count as u32,
            ..pass
        };
        let u = ctx.uniform("basic pass params", &pass)?;
        let bound = ctx
            .kernel(&KernelSpec {
                shader: &shaders::FLATFIELD_BASIC,
                entry,
                overrides: vec![],
            })?
            .bind(
                ctx,
                &[
                    (&block.d).into(),
                    (&block.e).into(),
                    (&block.y).into(),
                    (&block.omega).into(),
                    self.vecs.into(),
                    self.cmat.into(),
                    self.dims.into(),
                    (&u).into(),
                ],
            )?;
        self.uniforms.push(u);
        Ok(bound)
    }

    /// Every kernel of the fit on `blocks`, the DCT passes with the offsets of `dims`.
    fn passes(&mut self, blocks: &[Block], dims: &Dims) -> Result<Passes, FlatfieldError> {
        let none = PassParams {
            src: 0,
            dst: 0,
            inverse: 0,
            epilogue: EPI_STORE,
            first: 0,
            count: 0,
            pad0: 0,
            pad1: 0,
        };
        let mut per_block = |entry: &'static str| -> Result<Vec<Bound>, FlatfieldError> {
            blocks
                .iter()
                .map(|b| self.bind_block(entry, b, none))
                .collect()
        };
        let reset = per_block("reset_state")?;
        let column_mean = per_block("column_mean")?;
        let element = per_block("element_pass")?;
        let dark_column = per_block("dark_column")?;
        let reweight = per_block("reweight")?;
        // The vector-only kernels ignore the image arrays: bind them with the first block's.
        let mut bind =
            |entry: &'static str, pass: PassParams| self.bind_block(entry, &blocks[0], pass);
        let dct = |src: u32, dst: u32, inverse: bool, epilogue: u32| PassParams {
            src,
            dst,
            inverse: inverse as u32,
            epilogue,
            ..none
        };
        Ok(Passes {
            reset,
            commit_offset: bind("commit_offset", none)?,
            column_mean,
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
            element,
            dark_column,
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
            reweight,
        })
    }
}

impl<'a> GpuSolver<'a> {
    /// Allocates every buffer of the fit and binds every kernel (once per fit).
    pub fn new(ctx: &'a GpuContext, prepared: &'a Prepared) -> Result<Self, FlatfieldError> {
        let (n, size) = (prepared.count, prepared.size);
        let m = size * size;
        let limit = ctx.max_binding_bytes().min(ctx.max_buffer_bytes());
        let image_bytes = (m * 4) as u64;
        if image_bytes > limit {
            return Err(FlatfieldError::BindingTooSmall {
                what: format!("one image of the {size}x{size} working grid"),
                bytes: image_bytes,
                limit,
            });
        }
        let per_block = (limit / image_bytes) as usize;
        let (dims, vec_bytes) = vector_layout(n, size);
        if vec_bytes > limit {
            return Err(FlatfieldError::BindingTooSmall {
                what: format!("the per-image vectors of {n} images"),
                bytes: vec_bytes,
                limit,
            });
        }
        let blocks = image_blocks(ctx, prepared, per_block)?;
        let vecs = ctx.storage_buffer("basic vectors", vec_bytes)?;
        let cmat = dct_matrices(ctx, size)?;
        let dims_buf = ctx.uniform("basic dims", &dims)?;
        let mut binder = Binder {
            ctx,
            vecs: &vecs,
            cmat: &cmat,
            dims: &dims_buf,
            uniforms: Vec::new(),
        };
        let passes = binder.passes(&blocks, &dims)?;
        let uniforms = binder.uniforms;
        let mut buffers = vec![cmat, dims_buf];
        buffers.extend(uniforms);
        Ok(Self {
            ctx,
            prepared,
            dims,
            vecs,
            blocks,
            passes,
            omega_scale: 1.0,
            _buffers: buffers,
        })
    }

    fn pixel_groups(&self) -> u32 {
        self.dims.m.div_ceil(WORKGROUP)
    }

    /// Workgroups of a DCT pass: one invocation per BLOCK x BLOCK output block.
    fn block_groups(&self) -> u32 {
        self.dims.size.div_ceil(BLOCK).pow(2).div_ceil(WORKGROUP)
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

    /// Dispatches a per-block kernel once per image block, in image order, with
    /// `groups(images in the block)` workgroups.
    fn dispatch_blocks(
        &self,
        rec: &mut crate::gpu::Recorder,
        bound: &[Bound],
        groups: impl Fn(usize) -> u32,
    ) {
        for (b, block) in bound.iter().zip(&self.blocks) {
            rec.dispatch(b, groups(block.count));
        }
    }

    /// Records the dark-field update (docs/flatfield-method.md, "ALM iteration", steps 9.6–9.8)
    /// into `o_next`.
    fn record_dark(&self, rec: &mut crate::gpu::Recorder) {
        let p = &self.passes;
        let t = self.block_groups();
        let g = self.pixel_groups();
        self.dispatch_blocks(rec, &p.dark_column, |_| g);
        rec.dispatch(&p.dark_rows, t);
        rec.dispatch(&p.dark_cols, t);
        rec.dispatch(&p.dark_inv_rows, t);
        rec.dispatch(&p.dark_inv_cols, t);
    }

    /// `E = 0`, `Y = 0` for every image (docs/flatfield-method.md, "Initial state").
    fn reset_state(&self) -> Result<(), FlatfieldError> {
        let m = self.dims.m as usize;
        let mut rec = self.ctx.recorder("basic reset");
        self.dispatch_blocks(&mut rec, &self.passes.reset, |count| {
            (count * m).div_ceil(WORKGROUP as usize) as u32
        });
        self.ctx.submit(rec)?;
        Ok(())
    }
}

/// The per-image sums block (`Σ R`, `Σ_In R`, `Σ_Out R`, `Σ Z²` per image) as read back.
fn image_sums(raw: &[f64]) -> Vec<ImageSums> {
    raw.chunks_exact(4)
        .map(|s| ImageSums {
            r: s[0],
            r_in: s[1],
            r_out: s[2],
            z2: s[3],
        })
        .collect()
}

impl SolveBackend for GpuSolver<'_> {
    fn solve(
        &mut self,
        params: &BasicParams,
        lambda: SmoothnessWeights,
    ) -> Result<SolveOutput, FlatfieldError> {
        let c = self.prepared.constants;
        let (n, m) = (self.dims.n as usize, self.dims.m as usize);
        let dims = self.dims;
        // The initial state (docs/flatfield-method.md, "Initial state").
        let mut a = vec![1.0; n];
        self.write_vec(dims.off_a, &a);
        self.write_vec(dims.off_valid, &vec![0.0; n]);
        self.write_vec(dims.off_w, &vec![0.0; 4 * m]); // w, Ŵ, o, o_next are adjacent
        self.reset_state()?;
        let mut scalars = ScalarBlock {
            mu: c.mu0,
            epsilon: params.epsilon,
            ..ScalarBlock::default()
        };
        let mut pending_dark = false;
        let mut k = 0;
        loop {
            scalars.thr_flat = lambda.flatfield / scalars.mu;
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
            self.dispatch_blocks(&mut rec, &p.column_mean, |_| g);
            let t = self.block_groups();
            rec.dispatch(&p.flat_rows, t);
            rec.dispatch(&p.flat_cols, t);
            rec.dispatch(&p.w_rows, t);
            rec.dispatch(&p.w_cols, t);
            rec.dispatch(&p.field_stats, 1);
            self.dispatch_blocks(&mut rec, &p.element, |count| count as u32);
            self.ctx.submit_and_wait(rec)?;
            let raw = self.read_vec(dims.off_stats, STATS + 4 * n)?;
            let stats = FieldStats {
                w_mean: raw[0] / m as f64,
                w_min: raw[1],
                w_max: raw[2],
                n_in: raw[3] as usize,
                n_out: raw[4] as usize,
                o_mean: raw[5] / m as f64,
            };
            let sums = image_sums(&raw[STATS..]);
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
                    scalars.thr_dark = lambda.darkfield / (ENT2 * scalars.mu);
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
                    self.ctx.submit_and_wait(rec)?;
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
        self.dispatch_blocks(&mut rec, &self.passes.reweight, |count| count as u32);
        self.ctx.submit_and_wait(rec)?;
        let sums = self.read_vec(self.dims.off_sums, 4 * n)?;
        let total: f64 = sums.chunks_exact(4).map(|s| s[0]).sum();
        self.omega_scale = (n * self.dims.m as usize) as f64 / total;
        Ok(())
    }

    fn reset_weights(&mut self, epsilon: f64) -> Result<(), FlatfieldError> {
        // With E = 0 the reweighting pass sets every raw weight to 1/ε and the scale to their
        // mean's inverse: Ω = 1.
        self.reset_state()?;
        self.reweight(&vec![0.0; self.dims.n as usize], epsilon)
    }

    fn start_baseline(&mut self, epsilon: f64) -> Result<(), FlatfieldError> {
        let m = self.dims.m as usize;
        if let Some(original) = &self.prepared.original {
            for b in &self.blocks {
                self.ctx
                    .write(&b.d, 0, &original[b.first * m..(b.first + b.count) * m]);
            }
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
        let c = self.prepared.constants;
        let (n, m) = (self.dims.n as usize, self.dims.m as usize);
        let dims = self.dims;
        let d_mean = d.iter().sum::<f64>() / m as f64;
        // The element pass computes L = a w + o: here a = b, w = s, o = d.
        self.write_vec(dims.off_w, s);
        self.write_vec(dims.off_o, d);
        let mut b = start.to_vec();
        self.write_vec(dims.off_a, &b);
        self.reset_state()?;
        let mu0 = MU_COEF / c.sigma1_original;
        let mut scalars = ScalarBlock {
            mu: mu0,
            epsilon: params.epsilon,
            ..ScalarBlock::default()
        };
        let mut k = 0;
        loop {
            scalars.omega_over_mu = self.omega_scale / scalars.mu;
            self.ctx
                .write(&self.vecs, dims.off_scalars as u64, &scalars.to_f32());
            let mut rec = self.ctx.recorder("basic baseline iteration");
            self.dispatch_blocks(&mut rec, &self.passes.element, |count| count as u32);
            self.ctx.submit(rec)?;
            let sums = image_sums(&self.read_vec(dims.off_sums, 4 * n)?);
            b = baseline_step(&sums, m, d_mean);
            self.write_vec(dims.off_a, &b);
            let residual = sums.iter().map(|s| s.z2).sum::<f64>().sqrt() / c.d_norm;
            scalars.mu = (scalars.mu * MU_GROWTH).min(MU_CAP * mu0);
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
