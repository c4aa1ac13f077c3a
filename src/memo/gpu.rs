//! The memo layer's device side for one stage: the cache slab, the outbox (everything the host
//! reads back, so that one readback brings all of it), the partial sums, and every kernel bound
//! once.
//!
//! Batch kernels run one job per chunk of a wave in one dispatch (keys, certification sums and
//! their finish, demotion copies). Chunk kernels (block copies and combinations that must sit
//! between the operator's own steps for a chunk, which reuse the operator's chunk buffers) are
//! bound once per wave position `j` and read job `j` of their table, so the dispatches of all of a
//! wave's chunks fit in one submission.

use bytemuck::{Pod, Zeroable};

use crate::gpu::GpuError;
use crate::gpu::{Bound, BufferSlice, GpuBuffer, GpuContext, KernelSpec, Recorder};
use crate::operator::{Block, View};
use crate::shaders;

const WORKGROUP: u64 = shaders::memo::WORKGROUP as u64;
/// Workgroups of a reduction per job: about 64 elements per invocation, at most this many
/// groups. The count is fixed per stage, so a chunk's summation order never changes.
const REDUCE_GROUPS: u64 = 256;
/// Candidates compared in one pass of the `dots` kernel.
pub const MAX_CANDIDATES: usize = shaders::memo::MAX_CANDIDATES as usize;
/// `|x|^2`, `<c_i, x>`, `|c_i|^2`, `<c_i, c_j>` (i < j): see `dots` in memo.wgsl.
pub const DOT_VALUES: usize = shaders::memo::DOT_VALUES as usize;

/// One job of a kernel (see `Job` in memo.wgsl).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default, Debug)]
pub struct Job {
    vx: [u32; 4],
    vo: [u32; 4],
    extents: [u32; 3],
    channel_axis: u32,
    candidates: [u32; 4],
    count: u32,
    out_offset: u32,
    result: u32,
    pad: u32,
    alphas: [[f32; 4]; 2],
}

const JOB_BYTES: u64 = std::mem::size_of::<Job>() as u64;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
struct BatchParams {
    jobs: u32,
    groups_per_job: u32,
    values: u32,
    partials: u32,
    first: u32,
    pad: [u32; 3],
}

/// A complex coefficient as (re, im).
pub type Coefficient = [f32; 2];

/// Stored chunks (entry ids, or slab offsets once placed) with their coefficients.
pub type Combination = Vec<(u64, Coefficient)>;

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

impl Job {
    fn new(x: View, o: View, extents: [u64; 3], channel_axis: usize) -> Self {
        Self {
            vx: gpu_view(&x),
            vo: gpu_view(&o),
            extents: extents.map(|e| e as u32),
            channel_axis: channel_axis as u32,
            ..Default::default()
        }
    }

    fn block(x: View, o: View, block: &Block) -> Self {
        Self::new(x, o, block.extents, block.channel_axis)
    }

    fn with_sources(mut self, sources: &[(u64, Coefficient)]) -> Self {
        self.count = sources.len().min(MAX_CANDIDATES) as u32;
        for (c, &(offset, alpha)) in sources.iter().take(MAX_CANDIDATES).enumerate() {
            self.candidates[c] = offset as u32;
            self.alphas[c / 2][2 * (c % 2)] = alpha[0];
            self.alphas[c / 2][2 * (c % 2) + 1] = alpha[1];
        }
        self
    }
}

fn kernel_spec(entry: &'static str) -> KernelSpec {
    KernelSpec {
        shader: &shaders::MEMO,
        entry,
        overrides: Vec::new(),
    }
}

/// A kernel over a batch of jobs from its own table (or another op's, for `finish_sums`).
struct BatchOp {
    bound: Bound,
    jobs: GpuBuffer,
    params: GpuBuffer,
}

impl BatchOp {
    fn new(
        ctx: &GpuContext,
        entry: &'static str,
        [x, y, out]: [&GpuBuffer; 3],
        table: Table<'_>,
    ) -> Result<Self, GpuError> {
        let jobs = match table {
            Table::Own(capacity) => {
                ctx.storage_buffer("memo jobs", capacity.max(1) as u64 * JOB_BYTES)?
            }
            Table::Shared(jobs) => jobs.clone(),
        };
        let params = ctx.uniform("memo batch", &BatchParams::default())?;
        let slices: [BufferSlice; 5] = [
            x.into(),
            y.into(),
            out.into(),
            (&jobs).into(),
            (&params).into(),
        ];
        Ok(Self {
            bound: ctx.kernel(&kernel_spec(entry))?.bind(ctx, &slices)?,
            jobs,
            params,
        })
    }

    /// Writes `jobs` into the table (unless empty: a shared table is already written) and
    /// dispatches `groups_per_job` workgroups per job. Used at most once per submission.
    fn record(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        (jobs, count): (&[Job], usize),
        groups_per_job: u64,
        (values, partials): (u64, u64),
    ) {
        if count == 0 {
            return;
        }
        ctx.write(&self.jobs, 0, jobs);
        ctx.write(
            &self.params,
            0,
            &[BatchParams {
                jobs: count as u32,
                groups_per_job: groups_per_job as u32,
                values: values as u32,
                partials: partials as u32,
                ..Default::default()
            }],
        );
        rec.dispatch(&self.bound, (count as u64 * groups_per_job) as u32);
    }
}

enum Table<'a> {
    Own(usize),
    Shared(&'a GpuBuffer),
}

/// A kernel bound once per wave position, each reading its own entry of one job table.
struct ChunkOp {
    bounds: Vec<Bound>,
    jobs: GpuBuffer,
    groups_per_job: u64,
}

impl ChunkOp {
    fn new(
        ctx: &GpuContext,
        entry: &'static str,
        [x, y, out]: [&GpuBuffer; 3],
        positions: usize,
        groups_per_job: u64,
    ) -> Result<Self, GpuError> {
        let kernel = ctx.kernel(&kernel_spec(entry))?;
        let jobs = ctx.storage_buffer("memo chunk jobs", positions.max(1) as u64 * JOB_BYTES)?;
        let mut bounds = Vec::with_capacity(positions);
        for j in 0..positions {
            // The bind group keeps its uniform alive.
            let params = ctx.uniform(
                "memo chunk batch",
                &BatchParams {
                    jobs: 1,
                    groups_per_job: groups_per_job as u32,
                    first: j as u32,
                    ..Default::default()
                },
            )?;
            let slices: [BufferSlice; 5] = [
                x.into(),
                y.into(),
                out.into(),
                (&jobs).into(),
                (&params).into(),
            ];
            bounds.push(kernel.bind(ctx, &slices)?);
        }
        Ok(Self {
            bounds,
            jobs,
            groups_per_job,
        })
    }

    /// Writes job `position` and dispatches it; each position at most once per submission.
    fn record(&self, ctx: &GpuContext, rec: &mut Recorder, position: usize, job: Job) {
        ctx.write(&self.jobs, position as u64, &[job]);
        rec.dispatch(&self.bounds[position], self.groups_per_job as u32);
    }
}

/// Elements per invocation of the block copies and combinations: the job's table entry is read
/// once for all of them, and a chunk still spreads over many workgroups.
const COPY_ELEMENTS: u64 = 16;

fn reduce_groups(len: u64) -> u64 {
    len.div_ceil(WORKGROUP * 64).clamp(1, REDUCE_GROUPS)
}

/// Sums of one `dots` job: the normal equations `G alpha = b` of the least-squares combination
/// of the candidates.
#[derive(Debug, Clone)]
pub struct Dots {
    /// `|x|^2`
    pub xx: f64,
    /// `b_i = <c_i, x>`
    pub b: Vec<num_complex::Complex64>,
    /// `G_ij = <c_i, c_j>` (Hermitian).
    pub gram: Vec<Vec<num_complex::Complex64>>,
}

impl Dots {
    /// Parses one job's finished sums (`DOT_VALUES` values) for `count` candidates.
    fn from_sums(s: &[f64], count: usize) -> Self {
        use num_complex::Complex64;
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
        Self {
            xx: s[0],
            b: (0..k)
                .map(|a| Complex64::new(s[1 + 2 * a], s[2 + 2 * a]))
                .collect(),
            gram,
        }
    }
}

/// Sizes of one stage's device side, chosen by [`plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Chunks handled together (one wave: at most three round trips).
    pub wave: usize,
    /// Slots of the slab (each holds one chunk's input and output).
    pub slots: usize,
    /// Slots kept free at the start of a wave for host entries brought back for comparison.
    pub reserve: usize,
    /// Slots' worth of outbox for entries demoted to the host tier during a wave's staging.
    pub demote_slots: usize,
}

/// What [`plan`] needs to know about a stage.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub chunks: usize,
    /// Largest input and output block (complex values) and longest key (f32).
    pub in_max: u64,
    pub out_max: u64,
    pub key_max: u64,
    /// Whether evicted entries go to a host tier by a readback of their slots (during staging).
    pub host_tier: bool,
    pub audit: bool,
}

/// Host entries that may be brought back to the device per wave.
pub const RESERVE: usize = MAX_CANDIDATES;

impl Shape {
    fn slot_bytes(&self) -> u64 {
        (self.in_max + self.out_max) * 8
    }

    fn partial_groups(&self) -> u64 {
        reduce_groups(self.in_max.max(self.out_max))
    }

    /// Device bytes besides the slab for a wave of `wave` chunks.
    fn fixed_bytes(&self, wave: usize, demote_slots: usize) -> u64 {
        let w = wave as u64;
        // The outbox and the context's readback buffer it is read back through (which grows to
        // the largest read).
        let outbox = 2 * self.outbox_words(wave, demote_slots) * 4;
        let partials = w * self.partial_groups() * DOT_VALUES as u64 * 4;
        // Tables: seven chunk ops and five batch ops of at most `wave + RESERVE` jobs.
        let tables = 12 * (w + RESERVE as u64) * JOB_BYTES;
        let audit = if self.audit { self.out_max * 8 } else { 0 };
        outbox + partials + tables + audit
    }

    fn outbox_words(&self, wave: usize, demote_slots: usize) -> u64 {
        let w = wave as u64;
        w * self.key_max
            + demote_slots as u64 * (self.in_max + self.out_max) * 2
            + w * DOT_VALUES as u64 * 2
    }
}

/// Sizes the device side of a stage within `budget` bytes: the largest wave (at most all chunks)
/// whose slab holds the wave's staged inputs, the promotion reserve and at least one more wave of
/// entries, with the outbox for the demotions a wave can cause. `Err` says why no wave fits.
pub fn plan(shape: &Shape, budget: u64, max_binding: u64) -> Result<Plan, String> {
    let slot = shape.slot_bytes();
    for wave in (1..=shape.chunks).rev() {
        let demote_slots = if shape.host_tier { wave + RESERVE } else { 0 };
        let fixed = shape.fixed_bytes(wave, demote_slots);
        if shape.outbox_words(wave, demote_slots) * 4 > max_binding {
            continue;
        }
        let slots = (budget.saturating_sub(fixed) / slot).min(max_binding / slot) as usize;
        if slots >= 2 * wave + RESERVE {
            return Ok(Plan {
                wave,
                slots,
                reserve: RESERVE,
                demote_slots,
            });
        }
    }
    Err(format!(
        "a wave of one chunk needs {} bytes (three slots of {slot} bytes and the promotion reserve), more than this stage's device budget of {budget} bytes",
        shape.fixed_bytes(1, if shape.host_tier { 1 + RESERVE } else { 0 })
            + (2 + RESERVE as u64) * slot
    ))
}

/// Where things live in the outbox (f32 words).
#[derive(Debug, Clone, Copy)]
struct Outbox {
    key_max: u64,
    demote_at: u64,
    slot_words: u64,
    sums_at: u64,
}

/// One stage's slab, outbox and bound kernels.
pub struct StageDevice {
    slab: GpuBuffer,
    outbox: GpuBuffer,
    partials: GpuBuffer,
    audit: Option<GpuBuffer>,
    layout: Outbox,
    partial_groups: u64,
    keys: BatchOp,
    dots: BatchOp,
    dots_finish: BatchOp,
    residual: BatchOp,
    residual_finish: BatchOp,
    demote: BatchOp,
    audit_finish: Option<BatchOp>,
    copy_in: ChunkOp,
    restore: ChunkOp,
    store_out: ChunkOp,
    reuse: ChunkOp,
    audit_ops: Option<(ChunkOp, ChunkOp)>,
    key_groups: u64,
    slot_elems: u64,
    in_slot_elems: u64,
}

impl StageDevice {
    /// Builds everything for `plan`, bound to the stage's chunk-local `input` and `output`
    /// buffers.
    pub fn new(
        ctx: &GpuContext,
        (input, output): (&GpuBuffer, &GpuBuffer),
        shape: &Shape,
        plan: &Plan,
    ) -> Result<Self, GpuError> {
        let w = plan.wave;
        let slot_elems = shape.in_max + shape.out_max;
        let slab = ctx.storage_buffer("memo slab", plan.slots as u64 * slot_elems * 8)?;
        let layout = Outbox {
            key_max: shape.key_max,
            demote_at: w as u64 * shape.key_max,
            slot_words: 2 * slot_elems,
            sums_at: w as u64 * shape.key_max + plan.demote_slots as u64 * 2 * slot_elems,
        };
        let outbox =
            ctx.storage_buffer("memo outbox", shape.outbox_words(w, plan.demote_slots) * 4)?;
        let partial_groups = shape.partial_groups();
        let partials = ctx.storage_buffer(
            "memo partial sums",
            w as u64 * partial_groups * DOT_VALUES as u64 * 4,
        )?;
        let audit = if shape.audit {
            Some(ctx.storage_buffer("memo audit", shape.out_max * 8)?)
        } else {
            None
        };
        let dots = BatchOp::new(ctx, "dots", [&slab, &slab, &partials], Table::Own(w))?;
        let dots_finish = BatchOp::new(
            ctx,
            "finish_sums",
            [&partials, &partials, &outbox],
            Table::Shared(&dots.jobs),
        )?;
        let residual = BatchOp::new(ctx, "residual", [&slab, &slab, &partials], Table::Own(w))?;
        let residual_finish = BatchOp::new(
            ctx,
            "finish_sums",
            [&partials, &partials, &outbox],
            Table::Shared(&residual.jobs),
        )?;
        // Each invocation of a copy or combination handles COPY_ELEMENTS elements.
        let copy_groups = |len: u64| len.div_ceil(WORKGROUP * COPY_ELEMENTS);
        let chunk_op = |entry, buffers, len| ChunkOp::new(ctx, entry, buffers, w, len);
        let audit_ops = match &audit {
            Some(a) => Some((
                chunk_op(
                    "copy_block",
                    [output, output, a],
                    copy_groups(shape.out_max),
                )?,
                chunk_op("residual", [output, a, &partials], partial_groups)?,
            )),
            None => None,
        };
        let audit_finish = match &audit {
            Some(_) => Some(BatchOp::new(
                ctx,
                "finish_sums",
                [&partials, &partials, &outbox],
                Table::Own(w),
            )?),
            None => None,
        };
        Ok(Self {
            keys: BatchOp::new(ctx, "pool_key", [&slab, &slab, &outbox], Table::Own(w))?,
            demote: BatchOp::new(
                ctx,
                "copy_block",
                [&slab, &slab, &outbox],
                Table::Own(plan.demote_slots),
            )?,
            copy_in: chunk_op(
                "copy_block",
                [input, input, &slab],
                copy_groups(shape.in_max),
            )?,
            restore: chunk_op(
                "copy_block",
                [&slab, &slab, input],
                copy_groups(shape.in_max),
            )?,
            store_out: chunk_op(
                "copy_block",
                [output, output, &slab],
                copy_groups(shape.out_max),
            )?,
            reuse: chunk_op(
                "combine",
                [&slab, &slab, output],
                copy_groups(shape.out_max),
            )?,
            dots,
            dots_finish,
            residual,
            residual_finish,
            audit_finish,
            audit_ops,
            key_groups: shape.key_max.div_ceil(WORKGROUP),
            slot_elems,
            in_slot_elems: shape.in_max,
            slab,
            outbox,
            partials,
            audit,
            layout,
            partial_groups,
        })
    }

    /// Device bytes held (slab, outbox, partial sums, audit buffer).
    pub fn device_bytes(&self) -> u64 {
        let audit = self.audit.as_ref().map_or(0, GpuBuffer::bytes);
        self.slab.bytes() + self.outbox.bytes() + self.partials.bytes() + audit
    }

    /// The slab (for uploads of promoted entries).
    pub fn slab(&self) -> &GpuBuffer {
        &self.slab
    }

    /// Slab offsets (complex elements) of a slot's input and output.
    pub fn slot_offsets(&self, slot: usize) -> (u64, u64) {
        let at = slot as u64 * self.slot_elems;
        (at, at + self.in_slot_elems)
    }

    /// Records the copy of the entries in `slots` into the outbox's demotion area, in order.
    pub fn record_demotions(&self, ctx: &GpuContext, rec: &mut Recorder, slots: &[usize]) {
        let extents = [1, 1, self.slot_elems];
        let jobs: Vec<Job> = slots
            .iter()
            .enumerate()
            .map(|(k, &slot)| {
                let from = contiguous(self.slot_offsets(slot).0, extents);
                let to = contiguous(
                    (self.layout.demote_at + k as u64 * self.layout.slot_words) / 2,
                    extents,
                );
                Job::new(from, to, extents, 2)
            })
            .collect();
        self.demote.record(
            ctx,
            rec,
            (&jobs, jobs.len()),
            self.slot_elems.div_ceil(WORKGROUP * COPY_ELEMENTS),
            (0, 0),
        );
    }

    /// Records the copy of wave position `j`'s staged input (in the operator's input block) into
    /// `slot`.
    pub fn record_copy_in(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        j: usize,
        input: &Block,
        slot: usize,
    ) {
        let to = contiguous(self.slot_offsets(slot).0, input.extents);
        self.copy_in
            .record(ctx, rec, j, Job::block(input.view, to, input));
    }

    /// Records the pooled keys of the inputs staged in `slots` (wave positions in order).
    pub fn record_keys(&self, ctx: &GpuContext, rec: &mut Recorder, inputs: &[(&Block, usize)]) {
        let jobs: Vec<Job> = inputs
            .iter()
            .enumerate()
            .map(|(j, &(block, slot))| {
                let at = contiguous(self.slot_offsets(slot).0, block.extents);
                let mut job = Job::block(at, at, block);
                job.out_offset = (j as u64 * self.layout.key_max) as u32;
                job
            })
            .collect();
        self.keys
            .record(ctx, rec, (&jobs, jobs.len()), self.key_groups, (0, 0));
    }

    /// Reads the keys of a wave's first `count` positions (`key_lens` f32 each) and the first
    /// `demoted` entries of the demotion area, in one readback (waits for the device).
    #[allow(clippy::type_complexity)]
    pub fn read_keys(
        &self,
        ctx: &GpuContext,
        key_lens: &[u64],
        demoted: usize,
    ) -> Result<(Vec<Vec<f32>>, Vec<Vec<num_complex::Complex32>>), GpuError> {
        let words = if demoted > 0 {
            self.layout.demote_at + demoted as u64 * self.layout.slot_words
        } else {
            key_lens.len() as u64 * self.layout.key_max
        };
        let all: Vec<f32> = ctx.read(&self.outbox, 0, words as usize)?;
        let keys = key_lens
            .iter()
            .enumerate()
            .map(|(j, &len)| {
                let at = (j as u64 * self.layout.key_max) as usize;
                all[at..at + len as usize].to_vec()
            })
            .collect();
        let entries = (0..demoted)
            .map(|k| {
                let at = (self.layout.demote_at + k as u64 * self.layout.slot_words) as usize;
                bytemuck::cast_slice(&all[at..at + self.layout.slot_words as usize]).to_vec()
            })
            .collect();
        Ok((keys, entries))
    }

    fn sums_job(&self, j: usize, values: u64) -> (u32, u32) {
        (
            (j as u64 * self.partial_groups * values) as u32,
            (self.layout.sums_at + j as u64 * values * 2) as u32,
        )
    }

    /// Records, for each job (input staged in a slot, candidate inputs at slab offsets), `|x|^2`
    /// and the normal equations of the least-squares combination, finished on the GPU.
    pub fn record_dots(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        jobs: &[(&Block, usize, Vec<u64>)],
    ) {
        let values = DOT_VALUES as u64;
        let table: Vec<Job> = jobs
            .iter()
            .enumerate()
            .map(|(j, (block, slot, candidates))| {
                let at = contiguous(self.slot_offsets(*slot).0, block.extents);
                let sources: Combination = candidates.iter().map(|&c| (c, [0.0; 2])).collect();
                let mut job = Job::block(at, at, block).with_sources(&sources);
                (job.out_offset, job.result) = self.sums_job(j, values);
                job
            })
            .collect();
        self.dots.record(
            ctx,
            rec,
            (&table, table.len()),
            self.partial_groups,
            (values, 0),
        );
        self.dots_finish.record(
            ctx,
            rec,
            (&[], table.len()),
            values,
            (values, self.partial_groups),
        );
    }

    /// Reads the finished sums of the first `count` jobs (`values` each), in one readback.
    fn read_sums(
        &self,
        ctx: &GpuContext,
        count: usize,
        values: usize,
    ) -> Result<Vec<Vec<f64>>, GpuError> {
        let words: Vec<f32> = ctx.read(&self.outbox, self.layout.sums_at, count * values * 2)?;
        Ok(words
            .chunks_exact(values * 2)
            .map(|job| {
                job.chunks_exact(2)
                    .map(|d| d[0] as f64 + d[1] as f64)
                    .collect()
            })
            .collect())
    }

    /// How far, relative to `(|x| + sum |alpha_i| |c_i|)^2`, the squared residual estimated from
    /// the normal equations of a block of `len` elements may be off: each invocation adds
    /// `len / (partial_groups WORKGROUP)` f32 terms in turn, the workgroup adds its invocations'
    /// sums in log2(WORKGROUP) levels (the finish in double words adds nothing to count), each
    /// term carries two roundings of its products; `|x|^2`, `2 Re(b^H alpha)` and
    /// `alpha^H G alpha` each err by at most that many units in the last place of their
    /// magnitude sums, all at most the squared scale. Twice that, for safety: one f32::EPSILON
    /// (twice the unit roundoff) per rounding.
    pub fn sum_rounding(&self, len: u64) -> f64 {
        let terms = len.div_ceil(self.partial_groups * WORKGROUP);
        let levels = WORKGROUP.ilog2() as u64;
        (terms + levels + 2) as f64 * f32::EPSILON as f64
    }

    /// Reads the sums of [`record_dots`](Self::record_dots) (waits for the device); `counts` are
    /// the jobs' candidate counts.
    pub fn read_dots(&self, ctx: &GpuContext, counts: &[usize]) -> Result<Vec<Dots>, GpuError> {
        let sums = self.read_sums(ctx, counts.len(), DOT_VALUES)?;
        Ok(sums
            .iter()
            .zip(counts)
            .map(|(s, &k)| Dots::from_sums(s, k))
            .collect())
    }

    /// Records, for each job, `|x - sum_i alpha_i c_i|^2` (candidate inputs at slab offsets),
    /// finished on the GPU.
    pub fn record_residuals(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        jobs: &[(&Block, usize, Combination)],
    ) {
        let table: Vec<Job> = jobs
            .iter()
            .enumerate()
            .map(|(j, (block, slot, combination))| {
                let at = contiguous(self.slot_offsets(*slot).0, block.extents);
                let mut job = Job::block(at, at, block).with_sources(combination);
                (job.out_offset, job.result) = self.sums_job(j, 1);
                job
            })
            .collect();
        self.residual
            .record(ctx, rec, (&table, table.len()), self.partial_groups, (1, 0));
        self.residual_finish
            .record(ctx, rec, (&[], table.len()), 1, (1, self.partial_groups));
    }

    /// Reads the sums of [`record_residuals`](Self::record_residuals) or of the audit (waits for
    /// the device).
    pub fn read_residuals(&self, ctx: &GpuContext, count: usize) -> Result<Vec<f64>, GpuError> {
        Ok(self
            .read_sums(ctx, count, 1)?
            .into_iter()
            .map(|s| s[0])
            .collect())
    }

    /// Records the copy of the input staged in `slot` back into the operator's input block.
    pub fn record_restore(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        j: usize,
        input: &Block,
        slot: usize,
    ) {
        let from = contiguous(self.slot_offsets(slot).0, input.extents);
        self.restore
            .record(ctx, rec, j, Job::block(from, input.view, input));
    }

    /// Records the copy of the computed output block into `slot` (the entry's output).
    pub fn record_store(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        j: usize,
        output: &Block,
        slot: usize,
    ) {
        let to = contiguous(self.slot_offsets(slot).1, output.extents);
        self.store_out
            .record(ctx, rec, j, Job::block(output.view, to, output));
    }

    /// Records `output = sum_i alpha_i (cached output at slab offset o_i)`.
    pub fn record_reuse(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        j: usize,
        output: &Block,
        combination: &[(u64, Coefficient)],
    ) {
        let job = Job::block(contiguous(0, output.extents), output.view, output)
            .with_sources(combination);
        self.reuse.record(ctx, rec, j, job);
    }

    /// Records a copy of the (exactly computed) output block into the audit buffer.
    pub fn record_audit_save(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        j: usize,
        output: &Block,
    ) {
        if let (Some((save, _)), Some(_)) = (&self.audit_ops, &self.audit) {
            let job = Job::block(output.view, contiguous(0, output.extents), output);
            save.record(ctx, rec, j, job);
        }
    }

    /// Records the partial sums of `|output - audit|^2` at wave position `j`: the error of a
    /// reuse against the exact output saved before.
    pub fn record_audit_diff(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        j: usize,
        output: &Block,
    ) {
        if let Some((_, diff)) = &self.audit_ops {
            let mut job =
                Job::block(output.view, output.view, output).with_sources(&[(0, [1.0, 0.0])]);
            job.out_offset = self.sums_job(j, 1).0;
            diff.record(ctx, rec, j, job);
        }
    }

    /// Records the finish of the audit sums of wave positions `positions`, read back with
    /// [`read_residuals`](Self::read_residuals) in that order.
    pub fn record_audit_finish(&self, ctx: &GpuContext, rec: &mut Recorder, positions: &[usize]) {
        if let Some(finish) = &self.audit_finish {
            let table: Vec<Job> = positions
                .iter()
                .enumerate()
                .map(|(k, &j)| Job {
                    out_offset: self.sums_job(j, 1).0,
                    result: self.sums_job(k, 1).1,
                    ..Default::default()
                })
                .collect();
            finish.record(ctx, rec, (&table, table.len()), 1, (1, self.partial_groups));
        }
    }
}
