//! The memo layer's device side for one stage: the cache slab, the key and partial-sum buffers,
//! and every kernel bound once to the stage's chunk-local buffers.

use bytemuck::{Pod, Zeroable};

use crate::error::GpuError;
use crate::gpu::{BindingKind, Bound, BufferSlice, GpuBuffer, GpuContext, KernelSpec, Recorder};
use crate::operator::{Block, View};
use crate::shaders;

const WORKGROUP: u64 = 64;
/// Workgroups of the reductions: a fixed count, so the summation order never changes.
const REDUCE_GROUPS: u64 = 256;
/// Candidates compared in one pass of the `dots` kernel.
pub const MAX_CANDIDATES: usize = 4;
const DOT_VALUES: u64 = 1 + 3 * MAX_CANDIDATES as u64;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
struct MemoParams {
    vx: [u32; 4],
    vo: [u32; 4],
    extents: [u32; 3],
    channel_axis: u32,
    candidates: [u32; 4],
    count: u32,
    pad: u32,
    alpha: [f32; 2],
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
        alpha: [1.0, 0.0],
        ..Default::default()
    }
}

fn reduce_groups(len: u64) -> u64 {
    len.div_ceil(WORKGROUP).clamp(1, REDUCE_GROUPS)
}

/// Sums of one `dots` pass.
#[derive(Debug, Clone)]
pub struct Dots {
    /// `|x|^2`
    pub xx: f64,
    /// Per candidate: (`<c, x>` real, imaginary, `|c|^2`).
    pub candidates: Vec<(f64, f64, f64)>,
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
        let partials = ctx.storage_buffer("memo partial sums", REDUCE_GROUPS * DOT_VALUES * 4)?;
        let audit = ctx.storage_buffer("memo audit", output_elems * 8)?;
        Ok(Self {
            pool: Op::new(ctx, "pool_key", [input, input, &keys])?,
            dots: Op::new(ctx, "dots", [input, &slab, &partials])?,
            residual: Op::new(ctx, "residual", [input, &slab, &partials])?,
            store_in: Op::new(ctx, "scaled_copy", [input, input, &slab])?,
            store_out: Op::new(ctx, "scaled_copy", [output, output, &slab])?,
            reuse: Op::new(ctx, "scaled_copy", [&slab, &slab, output])?,
            audit_save: Op::new(ctx, "scaled_copy", [output, output, &audit])?,
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

    /// Records `|x|^2` and, for each candidate input block at slab offset `candidates[i]`,
    /// `<c, x>` and `|c|^2`.
    pub fn record_dots(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        input: &Block,
        candidates: &[u64],
    ) {
        let mut p = params(input.view, input.view, input);
        p.count = candidates.len().min(MAX_CANDIDATES) as u32;
        for (slot, &c) in p.candidates.iter_mut().zip(candidates) {
            *slot = c as u32;
        }
        self.dots.record(ctx, rec, p, reduce_groups(input.len()));
    }

    fn read_sums(&self, ctx: &GpuContext, values: u64, groups: u64) -> Result<Vec<f64>, GpuError> {
        let parts: Vec<f32> = ctx.read(&self.partials, 0, (values * groups) as usize)?;
        let mut sums = vec![0.0; values as usize];
        for group in parts.chunks(values as usize) {
            for (s, &v) in sums.iter_mut().zip(group) {
                *s += v as f64;
            }
        }
        Ok(sums)
    }

    /// Reads the sums of [`record_dots`](Self::record_dots).
    pub fn read_dots(
        &self,
        ctx: &GpuContext,
        input: &Block,
        count: usize,
    ) -> Result<Dots, GpuError> {
        let s = self.read_sums(ctx, DOT_VALUES, reduce_groups(input.len()))?;
        Ok(Dots {
            xx: s[0],
            candidates: (0..count.min(MAX_CANDIDATES))
                .map(|c| (s[1 + 3 * c], s[2 + 3 * c], s[3 + 3 * c]))
                .collect(),
        })
    }

    /// Records `|x - alpha c|^2` for the candidate input at slab offset `candidate`.
    pub fn record_residual(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        input: &Block,
        candidate: u64,
        alpha: [f32; 2],
    ) {
        let mut p = params(input.view, contiguous(candidate, input.extents), input);
        p.alpha = alpha;
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
        let p = params(input.view, contiguous(input_at, input.extents), input);
        self.store_in
            .record(ctx, rec, p, input.len().div_ceil(WORKGROUP));
        let p = params(output.view, contiguous(output_at, output.extents), output);
        self.store_out
            .record(ctx, rec, p, output.len().div_ceil(WORKGROUP));
    }

    /// Records `output = alpha * (the cached output at slab offset output_at)`.
    pub fn record_reuse(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        output: &Block,
        output_at: u64,
        alpha: [f32; 2],
    ) {
        let mut p = params(contiguous(output_at, output.extents), output.view, output);
        p.alpha = alpha;
        self.reuse
            .record(ctx, rec, p, output.len().div_ceil(WORKGROUP));
    }

    /// Records a copy of the (exactly computed) output block into the audit buffer.
    pub fn record_audit_save(&self, ctx: &GpuContext, rec: &mut Recorder, output: &Block) {
        let p = params(output.view, contiguous(0, output.extents), output);
        self.audit_save
            .record(ctx, rec, p, output.len().div_ceil(WORKGROUP));
    }

    /// Records `|output - audit|^2`: the error of a reuse against the exact output saved before.
    pub fn record_audit_diff(&self, ctx: &GpuContext, rec: &mut Recorder, output: &Block) {
        let p = params(output.view, contiguous(0, output.extents), output);
        self.audit_diff
            .record(ctx, rec, p, reduce_groups(output.len()));
    }
}
