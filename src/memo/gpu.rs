//! The memo layer's device side for one stage: the cache slab, the key and partial-sum buffers,
//! and every kernel bound once to the stage's chunk-local buffers.

use bytemuck::{Pod, Zeroable};

use crate::error::GpuError;
use crate::gpu::{BindingKind, Bound, BufferSlice, GpuBuffer, GpuContext, KernelSpec, Recorder};
use crate::operator::{Block, View};
use crate::shaders;

const WORKGROUP: u64 = 64;
/// Workgroups of the reductions: about 64 elements per invocation, at most this many groups.
/// The count depends only on the block size, so the summation order never changes.
const REDUCE_GROUPS: u64 = 256;
/// Candidates compared in one pass of the `dots` kernel.
pub const MAX_CANDIDATES: usize = 4;
/// `|x|^2`, `<c_i, x>`, `|c_i|^2`, `<c_i, c_j>` (i < j): see `dots` in memo.wgsl.
const DOT_VALUES: u64 = 25;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
struct MemoParams {
    vx: [u32; 4],
    vo: [u32; 4],
    extents: [u32; 3],
    channel_axis: u32,
    candidates: [u32; 4],
    count: u32,
    pad: [u32; 3],
    alphas: [[f32; 4]; 2],
}

/// A complex coefficient as (re, im).
pub type Coefficient = [f32; 2];

fn with_sources(mut p: MemoParams, sources: &[(u64, Coefficient)]) -> MemoParams {
    p.count = sources.len().min(MAX_CANDIDATES) as u32;
    for (c, &(offset, alpha)) in sources.iter().take(MAX_CANDIDATES).enumerate() {
        p.candidates[c] = offset as u32;
        p.alphas[c / 2][2 * (c % 2)] = alpha[0];
        p.alphas[c / 2][2 * (c % 2) + 1] = alpha[1];
    }
    p
}

fn gpu_view(v: &View) -> [u32; 4] {
    [v.offset, v.strides[0], v.strides[1], v.strides[2]].map(|x| x as u32)
}

/// The contiguous layout of a block of `extents` at element `offset`.
fn contiguous(offset: u64, extents: [u64; 3]) -> View {
    View {
        offset,
        strides: [extents[1] * extents[2], extents[2], 1],
    }
}

struct Op {
    bound: Bound,
    params: GpuBuffer,
}

impl Op {
    fn new(
        ctx: &GpuContext,
        entry: &'static str,
        [x, y, out]: [&GpuBuffer; 3],
    ) -> Result<Self, GpuError> {
        let kernel = ctx.kernel(&KernelSpec {
            shader: &shaders::MEMO,
            entry,
            bindings: &[
                BindingKind::StorageRead,
                BindingKind::StorageRead,
                BindingKind::StorageReadWrite,
                BindingKind::Uniform,
            ],
            overrides: Vec::new(),
        })?;
        let params = ctx.uniform("memo params", &MemoParams::default())?;
        let slices: [BufferSlice; 4] = [x.into(), y.into(), out.into(), (&params).into()];
        Ok(Self {
            bound: kernel.bind(ctx, &slices)?,
            params,
        })
    }

    fn record(&self, ctx: &GpuContext, rec: &mut Recorder, p: MemoParams, groups: u64) {
        ctx.write(&self.params, 0, &[p]);
        rec.dispatch(&self.bound, groups as u32);
    }
}

fn params(x: View, o: View, block: &Block) -> MemoParams {
    MemoParams {
        vx: gpu_view(&x),
        vo: gpu_view(&o),
        extents: block.extents.map(|e| e as u32),
        channel_axis: block.channel_axis as u32,
        ..Default::default()
    }
}

fn reduce_groups(len: u64) -> u64 {
    len.div_ceil(WORKGROUP * 64).clamp(1, REDUCE_GROUPS)
}

/// Sums of one `dots` pass: the normal equations `G alpha = b` of the least-squares
/// combination of the candidates.
#[derive(Debug, Clone)]
pub struct Dots {
    /// `|x|^2`
    pub xx: f64,
    /// `b_i = <c_i, x>`
    pub b: Vec<num_complex::Complex64>,
    /// `G_ij = <c_i, c_j>` (Hermitian).
    pub gram: Vec<Vec<num_complex::Complex64>>,
}

/// One stage's cache slab and bound kernels. Uniform parameters are written before each use, and
/// each kernel is used at most once per submission.
pub struct StageKernels {
    slab: GpuBuffer,
    keys: GpuBuffer,
    partials: GpuBuffer,
    audit: GpuBuffer,
    pool: Op,
    dots: Op,
    residual: Op,
    store_in: Op,
    store_out: Op,
    reuse: Op,
    audit_save: Op,
    audit_diff: Op,
}

impl StageKernels {
    /// Binds every kernel to the stage's chunk-local `input` and `output` buffers and a slab of
    /// `slab_elems` complex values; `key_len` is the longest key, `output_elems` the largest
    /// output block.
    pub fn new(
        ctx: &GpuContext,
        input: &GpuBuffer,
        output: &GpuBuffer,
        slab_elems: u64,
        key_len: u64,
        output_elems: u64,
    ) -> Result<Self, GpuError> {
        let slab = ctx.storage_buffer("memo slab", slab_elems.max(1) * 8)?;
        let keys = ctx.storage_buffer("memo keys", key_len * 4)?;
        let partials = ctx.storage_buffer(
            "memo partial sums",
            REDUCE_GROUPS * WORKGROUP * DOT_VALUES * 4,
        )?;
        let audit = ctx.storage_buffer("memo audit", output_elems * 8)?;
        Ok(Self {
            pool: Op::new(ctx, "pool_key", [input, input, &keys])?,
            dots: Op::new(ctx, "dots", [input, &slab, &partials])?,
            residual: Op::new(ctx, "residual", [input, &slab, &partials])?,
            store_in: Op::new(ctx, "combine", [input, input, &slab])?,
            store_out: Op::new(ctx, "combine", [output, output, &slab])?,
            reuse: Op::new(ctx, "combine", [&slab, &slab, output])?,
            audit_save: Op::new(ctx, "combine", [output, output, &audit])?,
            audit_diff: Op::new(ctx, "residual", [output, &audit, &partials])?,
            slab,
            keys,
            partials,
            audit,
        })
    }

    /// Device bytes held (slab, keys, partial sums, audit buffer).
    pub fn device_bytes(&self) -> u64 {
        [&self.slab, &self.keys, &self.partials, &self.audit]
            .iter()
            .map(|b| b.bytes())
            .sum()
    }

    /// The slab (for uploads and readbacks of cached entries).
    pub fn slab(&self) -> &GpuBuffer {
        &self.slab
    }

    /// Records the pooled key of `input` (already staged).
    pub fn record_key(&self, ctx: &GpuContext, rec: &mut Recorder, input: &Block) {
        let p = params(input.view, input.view, input);
        let len = 18 * input.extents[input.channel_axis];
        self.pool.record(ctx, rec, p, len.div_ceil(WORKGROUP));
    }

    /// Reads the key recorded by [`record_key`](Self::record_key).
    pub fn read_key(&self, ctx: &GpuContext, input: &Block) -> Result<Vec<f32>, GpuError> {
        ctx.read(
            &self.keys,
            0,
            18 * input.extents[input.channel_axis] as usize,
        )
    }

    /// Records `|x|^2` and, for the candidate input blocks at slab offsets `candidates`, the
    /// normal equations of their least-squares combination.
    pub fn record_dots(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        input: &Block,
        candidates: &[u64],
    ) {
        let sources: Vec<(u64, Coefficient)> = candidates.iter().map(|&c| (c, [0.0; 2])).collect();
        let p = with_sources(params(input.view, input.view, input), &sources);
        self.dots.record(ctx, rec, p, reduce_groups(input.len()));
    }

    fn read_sums(&self, ctx: &GpuContext, values: u64, groups: u64) -> Result<Vec<f64>, GpuError> {
        let parts: Vec<f32> =
            ctx.read(&self.partials, 0, (values * groups * WORKGROUP) as usize)?;
        let mut sums = vec![0.0; values as usize];
        for group in parts.chunks(values as usize) {
            for (s, &v) in sums.iter_mut().zip(group) {
                *s += v as f64;
            }
        }
        Ok(sums)
    }

    /// Reads the sums of [`record_dots`](Self::record_dots) for `count` candidates.
    pub fn read_dots(
        &self,
        ctx: &GpuContext,
        input: &Block,
        count: usize,
    ) -> Result<Dots, GpuError> {
        use num_complex::Complex64;
        let s = self.read_sums(ctx, DOT_VALUES, reduce_groups(input.len()))?;
        let k = count.min(MAX_CANDIDATES);
        let mut gram = vec![vec![Complex64::default(); k]; k];
        // Pairs (a, b), a < b, in the shader's order over all MAX_CANDIDATES.
        let pairs = (0..MAX_CANDIDATES).flat_map(|a| (a + 1..MAX_CANDIDATES).map(move |b| (a, b)));
        for (pair, (a, b)) in pairs.enumerate() {
            if b < k {
                let g = Complex64::new(s[13 + 2 * pair], s[14 + 2 * pair]);
                gram[a][b] = g;
                gram[b][a] = g.conj();
            }
        }
        for (a, row) in gram.iter_mut().enumerate() {
            row[a] = Complex64::new(s[9 + a], 0.0);
        }
        Ok(Dots {
            xx: s[0],
            b: (0..k)
                .map(|a| Complex64::new(s[1 + 2 * a], s[2 + 2 * a]))
                .collect(),
            gram,
        })
    }

    /// Records `|x - sum_i alpha_i c_i|^2` for candidate inputs at the given slab offsets.
    pub fn record_residual(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        input: &Block,
        combination: &[(u64, Coefficient)],
    ) {
        let p = with_sources(params(input.view, input.view, input), combination);
        self.residual
            .record(ctx, rec, p, reduce_groups(input.len()));
    }

    /// Reads a sum of [`record_residual`](Self::record_residual) or
    /// [`record_audit_diff`](Self::record_audit_diff).
    pub fn read_residual(&self, ctx: &GpuContext, block: &Block) -> Result<f64, GpuError> {
        Ok(self.read_sums(ctx, 1, reduce_groups(block.len()))?[0])
    }

    /// Records the copy of the staged input and the computed output into the slot whose input
    /// starts at `input_at` and output at `output_at`.
    pub fn record_store(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        (input, output): (&Block, &Block),
        (input_at, output_at): (u64, u64),
    ) {
        for (op, block, at) in [
            (&self.store_in, input, input_at),
            (&self.store_out, output, output_at),
        ] {
            let p = with_sources(
                params(block.view, contiguous(at, block.extents), block),
                &[(block.view.offset, [1.0, 0.0])],
            );
            op.record(ctx, rec, p, block.len().div_ceil(WORKGROUP));
        }
    }

    /// Records `output = sum_i alpha_i (cached output at slab offset o_i)`.
    pub fn record_reuse(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        output: &Block,
        combination: &[(u64, Coefficient)],
    ) {
        let p = with_sources(
            params(contiguous(0, output.extents), output.view, output),
            combination,
        );
        self.reuse
            .record(ctx, rec, p, output.len().div_ceil(WORKGROUP));
    }

    /// Records a copy of the (exactly computed) output block into the audit buffer.
    pub fn record_audit_save(&self, ctx: &GpuContext, rec: &mut Recorder, output: &Block) {
        let p = with_sources(
            params(output.view, contiguous(0, output.extents), output),
            &[(output.view.offset, [1.0, 0.0])],
        );
        self.audit_save
            .record(ctx, rec, p, output.len().div_ceil(WORKGROUP));
    }

    /// Records `|output - audit|^2`: the error of a reuse against the exact output saved before.
    pub fn record_audit_diff(&self, ctx: &GpuContext, rec: &mut Recorder, output: &Block) {
        let p = with_sources(params(output.view, output.view, output), &[(0, [1.0, 0.0])]);
        self.audit_diff
            .record(ctx, rec, p, reduce_groups(output.len()));
    }
}
