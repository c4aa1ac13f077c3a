//! Building FFT plans on the GPU: passes, kernels, tables, workspace and bind groups, created once.
//!
//! A transform runs as a chain of passes ([`super::kernel`]): one in-place pass when the length
//! fits a workgroup's memory, else a few out-of-place Stockham passes with large radices (the
//! four-step method) through workspace shared by every plan of the context. Bluestein lengths run
//! the chain of their inner length twice (forward, then inverse), with the chirp multiplications
//! and the kernel spectrum fused into the first, middle and last passes.

use super::kernel::{
    pass_kernel, workgroups, GpuLayout, Launch, Limits, PassParams, PassSpec, TableOffsets,
    SPECIALIZE_MIN_ELEMS,
};
use super::layout::Layout;
use super::recipe::{accuracy_bound, design, split_passes, stockham_radices, Algorithm};
use super::tune::{self, LaunchSource};
use super::twiddles::{bluestein_tables, root_table};
use super::{Direction, FftError, Normalization};
use crate::gpu::{Bound, BufferSlice, GpuBuffer, GpuContext, Recorder};
use crate::random::SplitMix64;

/// Workspace slots of the context's shared pool: a placeholder for unused bindings, then the two
/// ping-pong buffers between passes.
const PLACEHOLDER_SLOT: usize = 0;
const WORKSPACE_SLOTS: [usize; 2] = [1, 2];

/// Bluestein's tables: the chirp and the kernel spectrum.
type BluesteinTables = (Vec<[f32; 2]>, Vec<[f32; 2]>);

/// Which passes a transform runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// One pass where the length fits workgroup memory, the fewest passes otherwise, each launched
    /// as measured fastest on this device (for large batches; see [`super::tune`]).
    #[default]
    Auto,
    /// One pass in workgroup memory, one read and one write per element (where the length fits;
    /// the fewest passes otherwise), launched with the untuned default.
    Fused,
    /// At least two passes through global memory (lengths with two or more radix factors; others
    /// run fused), launched with the untuned default.
    MultiPass,
}

/// Whether a plan's kernels are specialised to its sizes (lengths, radices and strides as
/// pipeline constants, and on CPU rasterisers one column per lane without barriers), which runs
/// faster but compiles a pipeline per problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Specialize {
    /// Problems of at least 2^16 elements; smaller ones share one pipeline per size class
    /// (a one-off small transform would spend more on compiling than on running).
    #[default]
    BySize,
    /// Always: for plans built once and run many times (the operator's, whose chunks may be
    /// small; at 32^3 a U1 chunk of 16 rows ran 4.5x slower with the shared pipelines).
    Always,
}

/// A batched 1D transform: length, where its elements are, direction and scaling.
#[derive(Debug, Clone, PartialEq)]
pub struct FftDescriptor {
    pub len: usize,
    pub layout: Layout,
    pub direction: Direction,
    pub normalization: Normalization,
}

impl FftDescriptor {
    /// `batch` contiguous transforms of length `len`.
    pub fn contiguous(len: usize, batch: usize, direction: Direction) -> Self {
        Self {
            len,
            layout: Layout::contiguous(len, batch),
            direction,
            normalization: Normalization::None,
        }
    }
}

/// How one pass of a plan is launched and where that launch came from.
#[derive(Debug, Clone, PartialEq)]
pub struct PassInfo {
    /// Sub-length the pass transforms.
    pub sub: usize,
    pub launch: Launch,
    pub source: LaunchSource,
    /// Whether the kernel is specialised to the sizes (large batches, or [`Specialize::Always`]).
    pub specialized: bool,
}

/// The passes of a chain and how each is launched.
struct Chain {
    specs: Vec<PassSpec>,
    launches: Vec<PassInfo>,
}

/// A planned batch of 1D transforms, in place on one buffer.
pub struct FftPlan1d {
    desc: FftDescriptor,
    algorithm: Algorithm,
    strategy: Strategy,
    dispatches: Vec<(Bound, u32)>,
    passes: Vec<PassInfo>,
    /// Tables and uniforms the bind groups refer to.
    buffers: Vec<GpuBuffer>,
    /// Bytes of each shared workspace slot the plan needs (the buffers themselves belong to the
    /// context's pool, shared with its other plans).
    workspace: [u64; 2],
}

impl std::fmt::Debug for FftPlan1d {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FftPlan1d")
            .field("desc", &self.desc)
            .field("algorithm", &self.algorithm)
            .field("passes", &self.passes)
            .field("dispatches", &self.dispatches.len())
            .finish()
    }
}

/// The sub-lengths of the passes of a length-`n` transform.
fn pass_lengths(limits: &Limits, n: usize, strategy: Strategy) -> Result<Vec<usize>, FftError> {
    let multi =
        strategy == Strategy::MultiPass && stockham_radices(n).is_some_and(|r| r.len() >= 2);
    split_passes(n, limits.max_sub(), if multi { 2 } else { 1 })
        .ok_or_else(|| FftError::IndexOverflow(format!("length {n} has no split into passes")))
}

/// Bytes of each shared workspace slot (ping, pong) a chain of `passes` passes over transforms of
/// length `chain_len` binds: none for one in-place pass, the ping buffer for two passes, both for
/// more; each holds as many transforms as one binding window does (at most the batch).
fn slot_bytes(passes: usize, chain_len: usize, batch: u64, window: u64) -> [u64; 2] {
    let transforms = batch
        .min(window / chain_len as u64)
        .min(u32::MAX as u64 / chain_len as u64)
        .max(1);
    let bytes = transforms * chain_len as u64 * 8;
    match passes {
        0 | 1 => [0, 0],
        2 => [bytes, 0],
        _ => [bytes, bytes],
    }
}

/// Bytes of each slot of the context's shared workspace that a plan of `batch` transforms of length
/// `n` binds, without allocating anything (the operator sizes the pool with it before planning).
pub fn workspace_slot_bytes(
    ctx: &GpuContext,
    n: usize,
    batch: u64,
    strategy: Strategy,
) -> [u64; 2] {
    let limits = Limits::of(ctx);
    let window = ctx.max_binding_bytes() / 8;
    let (chain, chains) = match design(n) {
        Algorithm::Identity => return [0, 0],
        Algorithm::Stockham { .. } => (n, 1),
        Algorithm::Bluestein { inner } => (inner, 2),
    };
    let passes = pass_lengths(&limits, chain, strategy).map_or(2, |p| p.len());
    slot_bytes(chains * passes, chain, batch, window)
}

/// Makes each slot of the context's shared FFT workspace at least `bytes[slot]` long, so that plans
/// built afterwards all bind the same buffers (a plan binds the buffer a slot holds when it is
/// built; a slot that grows later leaves earlier plans on the old buffer).
pub fn reserve_workspace(ctx: &GpuContext, bytes: [u64; 2]) -> Result<(), FftError> {
    for (slot, bytes) in WORKSPACE_SLOTS.into_iter().zip(bytes) {
        if bytes > 0 {
            ctx.shared_scratch(slot, bytes)?;
        }
    }
    Ok(())
}

/// The per-slot maximum of workspace needs: what plans sharing the pool hold together.
pub fn max_slots(needs: impl IntoIterator<Item = [u64; 2]>) -> [u64; 2] {
    needs
        .into_iter()
        .fold([0, 0], |acc, n| [acc[0].max(n[0]), acc[1].max(n[1])])
}

/// A copy of `layout` with its batch cut (outermost dimensions first) to about `max_elems`
/// elements, starting at element 0: the same access pattern on a smaller problem, for tuning.
fn sample_layout(layout: &Layout, len: usize, max_elems: u64) -> Layout {
    let mut sample = layout.clone();
    sample.offset = 0;
    let mut transforms = (max_elems / len as u64).max(1);
    let inner: Vec<u64> = layout
        .batch
        .iter()
        .scan(1u64, |acc, d| {
            let before = *acc;
            *acc *= d.count;
            Some(before)
        })
        .collect();
    for (i, d) in sample.batch.iter_mut().enumerate().rev() {
        let keep = (transforms / inner[i]).clamp(1, d.count);
        transforms = transforms.min(keep * inner[i]);
        d.count = keep;
    }
    sample
}

impl FftPlan1d {
    /// Plans `desc` on `data`. Validates the layout against the buffer, picks the algorithm and
    /// builds everything execution needs.
    pub fn new(ctx: &GpuContext, desc: FftDescriptor, data: &GpuBuffer) -> Result<Self, FftError> {
        Self::with_strategy(ctx, desc, data, Strategy::Auto)
    }

    /// Like [`new`](Self::new), with an explicit choice of passes (tests exercise both; benchmarks
    /// compare them with the tuned `Auto`).
    pub fn with_strategy(
        ctx: &GpuContext,
        desc: FftDescriptor,
        data: &GpuBuffer,
        strategy: Strategy,
    ) -> Result<Self, FftError> {
        Self::with_options(ctx, desc, data, strategy, Specialize::BySize)
    }

    /// Like [`new`](Self::new), with kernels specialised to the problem whatever its size: for
    /// plans run many times.
    pub fn specialized(
        ctx: &GpuContext,
        desc: FftDescriptor,
        data: &GpuBuffer,
    ) -> Result<Self, FftError> {
        Self::with_options(ctx, desc, data, Strategy::Auto, Specialize::Always)
    }

    fn with_options(
        ctx: &GpuContext,
        desc: FftDescriptor,
        data: &GpuBuffer,
        strategy: Strategy,
        specialize: Specialize,
    ) -> Result<Self, FftError> {
        desc.layout.validate(desc.len)?;
        let needed = (desc.layout.max_index(desc.len)? + 1) * 8;
        if needed > data.bytes() {
            return Err(FftError::BufferTooSmall {
                label: data.label().to_string(),
                needed,
                actual: data.bytes(),
            });
        }
        let algorithm = design(desc.len);
        let mut plan = Self {
            desc,
            algorithm: algorithm.clone(),
            strategy: Strategy::Auto,
            dispatches: vec![],
            passes: vec![],
            buffers: vec![],
            workspace: [0, 0],
        };
        let limits = Limits::of(ctx);
        let n = plan.desc.len;
        match algorithm {
            Algorithm::Identity => {}
            Algorithm::Stockham { .. } => {
                let subs = pass_lengths(&limits, n, strategy)?;
                plan.strategy = if subs.len() == 1 {
                    Strategy::Fused
                } else {
                    Strategy::MultiPass
                };
                let specs = chain_specs(n, &subs, plan.desc.direction, plan.scale());
                plan.build(ctx, data, n, specs, (strategy, specialize), None)?;
            }
            Algorithm::Bluestein { inner } => {
                let subs = pass_lengths(&limits, inner, strategy)?;
                let mut specs = chain_specs(inner, &subs, Direction::Forward, 1.0);
                specs[0].load_hook = true;
                specs.last_mut().expect("one pass at least").store_hook = 1;
                let mut inverse = chain_specs(inner, &subs, Direction::Inverse, plan.scale());
                inverse.last_mut().expect("one pass at least").store_hook = 2;
                specs.extend(inverse);
                let (chirp, spectrum) = bluestein_tables(n, inner, plan.desc.direction);
                let tables = Some((chirp, spectrum));
                plan.build(ctx, data, inner, specs, (strategy, specialize), tables)?;
            }
        }
        Ok(plan)
    }

    /// Which passes run: `Fused` (one), `MultiPass` (several), or `Auto` for lengths without
    /// Stockham passes of their own (length 1 and Bluestein lengths).
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The algorithm chosen for this length.
    pub fn algorithm(&self) -> &Algorithm {
        &self.algorithm
    }

    /// The transform this plan computes.
    pub fn descriptor(&self) -> &FftDescriptor {
        &self.desc
    }

    /// How each pass is launched, in execution order.
    pub fn passes(&self) -> &[PassInfo] {
        &self.passes
    }

    /// Bytes of device memory the plan holds itself (tables and parameters).
    pub fn device_bytes(&self) -> u64 {
        self.buffers.iter().map(GpuBuffer::bytes).sum()
    }

    /// Bytes of workspace the plan needs between passes, per slot of the context's shared pool. A
    /// plan with buffers of its own would hold their sum; plans of one context share the pool, so
    /// together they hold the per-slot maximum ([`max_slots`]).
    pub fn workspace_slot_bytes(&self) -> [u64; 2] {
        self.workspace
    }

    fn scale(&self) -> f32 {
        match self.desc.normalization {
            Normalization::None => 1.0,
            Normalization::ByLength => (1.0 / self.desc.len as f64) as f32,
        }
    }

    /// Builds the dispatches of the chain `specs` (transforms of length `chain_len`) for every
    /// chunk of the batch. `bluestein` holds the chirp and kernel-spectrum tables.
    fn build(
        &mut self,
        ctx: &GpuContext,
        data: &GpuBuffer,
        chain_len: usize,
        specs: Vec<PassSpec>,
        (strategy, specialize): (Strategy, Specialize),
        bluestein: Option<BluesteinTables>,
    ) -> Result<(), FftError> {
        let n = self.desc.len;
        let layout = self.desc.layout.clone();
        let batch = layout.batch_count();
        let in_place = specs.len() == 1;
        let window = ctx.max_binding_bytes() / 8;
        let align = (ctx.binding_alignment() / 8).max(1);
        if !in_place && chain_len as u64 > window {
            return Err(FftError::TransformTooLarge {
                bytes: chain_len as u64 * 8,
                limit: window * 8,
            });
        }
        let workspace_bytes = slot_bytes(specs.len(), chain_len, batch, window);
        let cap = if in_place {
            u32::MAX as u64 / chain_len as u64
        } else {
            workspace_bytes[0] / (chain_len as u64 * 8)
        };
        let chunks = layout.chunks(n, window, align, cap)?;
        let specialized = match specialize {
            Specialize::BySize => chain_len as u64 * batch >= SPECIALIZE_MIN_ELEMS,
            Specialize::Always => true,
        };
        let chain = self.launches(ctx, &layout, chain_len, specs, strategy, specialized)?;

        // Tables: the Bluestein chirp and spectrum, then one root table per tabulated pass.
        let mut table: Vec<[f32; 2]> = Vec::new();
        let mut offsets = vec![TableOffsets::default(); chain.specs.len()];
        if let Some((chirp, spectrum)) = bluestein {
            let spectrum_at = chirp.len() as u32;
            table.extend(chirp);
            table.extend(spectrum);
            for (o, spec) in offsets.iter_mut().zip(&chain.specs) {
                o.hook_len = n as u32;
                o.store = if spec.store_hook == 1 { spectrum_at } else { 0 };
            }
        }
        for (o, (spec, info)) in offsets
            .iter_mut()
            .zip(chain.specs.iter().zip(&chain.launches))
        {
            if info.launch.twiddle_table {
                o.twiddle = table.len() as u32;
                table.extend(root_table(spec.sub));
            }
        }
        let placeholder = ctx.shared_scratch(PLACEHOLDER_SLOT, 16)?;
        let table = if table.is_empty() {
            None
        } else {
            Some(ctx.upload("fft tables", &table)?)
        };
        let table_slice = BufferSlice::whole(table.as_ref().unwrap_or(&placeholder));
        let workspace = WORKSPACE_SLOTS
            .into_iter()
            .zip(workspace_bytes)
            .filter(|&(_, bytes)| bytes > 0)
            .map(|(slot, bytes)| ctx.shared_scratch(slot, bytes))
            .collect::<Result<Vec<_>, _>>()?;

        let last = chain.specs.len() - 1;
        for chunk in &chunks {
            let data_slice = BufferSlice {
                buffer: data,
                offset: chunk.window_start * 8,
                size: chunk.window_len * 8,
            };
            let data_layout = GpuLayout::of(&layout, chunk.window_start, chunk.start);
            let work_layout =
                GpuLayout::of(&Layout::contiguous(chain_len, chunk.count as usize), 0, 0);
            for (i, (spec, info)) in chain.specs.iter().zip(&chain.launches).enumerate() {
                let (src, src_layout) = match i {
                    0 if in_place => (BufferSlice::whole(&placeholder), data_layout),
                    0 => (data_slice, data_layout),
                    _ => (BufferSlice::whole(&workspace[(i - 1) % 2]), work_layout),
                };
                let (dst, dst_layout) = if i == last {
                    (data_slice, data_layout)
                } else {
                    (BufferSlice::whole(&workspace[i % 2]), work_layout)
                };
                let unit_strides = [i > 0 || layout.stride == 1, i < last || layout.stride == 1];
                let kernel = pass_kernel(
                    ctx,
                    spec,
                    &info.launch,
                    in_place,
                    info.specialized,
                    unit_strides,
                )?;
                let params = PassParams::new(
                    spec,
                    &info.launch,
                    src_layout,
                    dst_layout,
                    chunk.count,
                    offsets[i],
                )?;
                let params = ctx.uniform("fft pass params", &params)?;
                let bound = kernel.bind(ctx, &[src, dst, table_slice, (&params).into()])?;
                self.dispatches
                    .push((bound, workgroups(spec, &info.launch, chunk.count)));
                self.buffers.push(params);
            }
        }
        self.buffers.extend(table);
        self.workspace = workspace_bytes;
        self.passes = chain.launches;
        Ok(())
    }

    /// Chooses how each pass of the chain is launched: tuned for `Auto` on large batches (from the
    /// cache when measured before), the default otherwise.
    fn launches(
        &self,
        ctx: &GpuContext,
        layout: &Layout,
        chain_len: usize,
        specs: Vec<PassSpec>,
        strategy: Strategy,
        specialized: bool,
    ) -> Result<Chain, FftError> {
        let limits = Limits::of(ctx);
        let batch = layout.batch_count();
        let last = specs.len() - 1;
        let work = Layout::contiguous(chain_len, batch as usize);
        let mut launches = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let src = if i == 0 { layout } else { &work };
            let dst = if i == last { layout } else { &work };
            let strided = src.stride != 1 || dst.stride != 1;
            let tuned =
                strategy == Strategy::Auto && specialized && tune::wanted(chain_len as u64 * batch);
            let (launch, source) = if tuned {
                let problem = tune::Problem {
                    spec,
                    src,
                    dst,
                    in_place: specs.len() == 1,
                    n: self.desc.len,
                    batch,
                };
                let mut reference = None;
                tune::launch_for(ctx, &problem, |launch, sample_elems| {
                    time_pass(ctx, &problem, launch, sample_elems, &mut reference)
                })?
            } else {
                (
                    Launch::default_for(&limits, spec.sub, specialized, strided),
                    LaunchSource::Default,
                )
            };
            launches.push(PassInfo {
                sub: spec.sub,
                launch,
                source,
                specialized,
            });
        }
        Ok(Chain { specs, launches })
    }

    /// Records the transform into `rec`.
    pub fn record(&self, rec: &mut Recorder) {
        for (bound, groups) in &self.dispatches {
            rec.dispatch(bound, *groups);
        }
    }

    /// Runs the transform and waits for it.
    pub fn execute(&self, ctx: &GpuContext) -> Result<(), FftError> {
        let mut rec = ctx.recorder("fft");
        self.record(&mut rec);
        Ok(ctx.submit_and_wait(rec)?)
    }
}

/// The passes of a transform of length `len` with sub-lengths `subs`.
fn chain_specs(len: usize, subs: &[usize], direction: Direction, scale: f32) -> Vec<PassSpec> {
    let mut ns = 1;
    let last = subs.len() - 1;
    subs.iter()
        .enumerate()
        .map(|(i, &sub)| {
            let spec = PassSpec {
                len,
                sub,
                ns,
                direction,
                load_hook: false,
                store_hook: 0,
                scale: if i == last { scale } else { 1.0 },
            };
            ns *= sub;
            spec
        })
        .collect()
}

/// The tuning sample of a pass reading `src` and writing `dst`: both layouts cut to about
/// `max_elems` elements, and the number of transforms to run. The layouts are cut along their own
/// batch dimensions, so one may keep fewer transforms than the other (a strided destination keeps
/// whole planes); the sample runs the transforms both hold, never writing beyond its buffers.
fn sample_layouts(src: &Layout, dst: &Layout, len: usize, max_elems: u64) -> (Layout, Layout, u64) {
    let src = sample_layout(src, len, max_elems);
    let dst = sample_layout(dst, len, src.batch_count() * len as u64);
    let transforms = src.batch_count().min(dst.batch_count());
    (src, dst, transforms)
}

/// The output of a pass on the tuning sample, to check launches against each other.
pub(crate) type SampleOutput = Vec<[f32; 2]>;

/// GPU time of one pass of `problem` launched as `launch`, on a sample of about `sample_elems`
/// elements of seeded random data in fresh buffers (never the caller's data): the fastest of three
/// runs after a checked one, in milliseconds. `reference` is the output of the first launch
/// measured (the default); a launch whose output differs from it by more than twice the accuracy
/// bound is refused (`None`), so that a tuned plan never computes something else.
fn time_pass(
    ctx: &GpuContext,
    problem: &tune::Problem<'_>,
    launch: &Launch,
    sample_elems: u64,
    reference: &mut Option<SampleOutput>,
) -> Result<Option<f64>, FftError> {
    let spec = problem.spec;
    let (src, dst, transforms) = sample_layouts(problem.src, problem.dst, spec.len, sample_elems);
    let elems = |layout: &Layout| -> Result<u64, FftError> { Ok(layout.max_index(spec.len)? + 1) };
    let input = SplitMix64::new(7).complex_uniform(elems(&src)? as usize);
    let dst_buffer = ctx.storage_buffer("fft tuning dst", elems(&dst)? * 8)?;
    let src_buffer = if problem.in_place {
        ctx.shared_scratch(PLACEHOLDER_SLOT, 16)?
    } else {
        ctx.upload("fft tuning src", &input)?
    };
    let mut offsets = TableOffsets {
        hook_len: problem.n as u32,
        ..Default::default()
    };
    // Hook tables of ones: the sample checks the transform, not the Bluestein tables.
    let mut table = vec![[1.0f32, 0.0]; (spec.len.max(problem.n) + spec.len).max(2)];
    if launch.twiddle_table {
        offsets.twiddle = table.len() as u32;
        table.extend(root_table(spec.sub));
    }
    let table = ctx.upload("fft tuning table", &table)?;
    let unit_strides = [src.stride == 1, dst.stride == 1];
    let kernel = pass_kernel(ctx, spec, launch, problem.in_place, true, unit_strides)?;
    let params = PassParams::new(
        spec,
        launch,
        GpuLayout::of(&src, 0, 0),
        GpuLayout::of(&dst, 0, 0),
        transforms,
        offsets,
    )?;
    let params = ctx.uniform("fft tuning params", &params)?;
    let bound = kernel.bind(
        ctx,
        &[
            (&src_buffer).into(),
            (&dst_buffer).into(),
            (&table).into(),
            (&params).into(),
        ],
    )?;
    let groups = workgroups(spec, launch, transforms);
    let run = || -> Result<f64, FftError> {
        let mut rec = ctx.timed_recorder("fft tuning");
        rec.dispatch(&bound, groups);
        let start = std::time::Instant::now();
        let gpu = rec.finish_timed(ctx)?;
        Ok(gpu
            .filter(|&ms| ms > 0.0)
            .unwrap_or_else(|| start.elapsed().as_secs_f64() * 1e3))
    };
    if problem.in_place {
        ctx.write(&dst_buffer, 0, &input);
    }
    run()?;
    let output: SampleOutput = ctx.read(&dst_buffer, 0, elems(&dst)? as usize)?;
    match reference {
        None => *reference = Some(output),
        Some(expected) => {
            // Largest magnitude and largest difference, NaN-sticky (a NaN refuses the launch).
            let (mut scale, mut worst) = (0.0f64, 0.0f64);
            for (e, o) in expected.iter().zip(&output) {
                for k in 0..2 {
                    let (e, d) = (e[k].abs() as f64, (e[k] - o[k]).abs() as f64);
                    scale = if e > scale || e.is_nan() { e } else { scale };
                    worst = if d > worst || d.is_nan() { d } else { worst };
                }
            }
            // NaN fails the comparison and refuses the launch.
            let agrees = worst <= 2.0 * accuracy_bound(&[spec.sub]) * scale;
            if !agrees {
                return Ok(None);
            }
        }
    }
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        best = best.min(run()?);
    }
    Ok(Some(best))
}

/// A transform over the last `axes` axes of a row-major complex array at the start of a buffer
/// (the leading axes are batch): 1D, 2D, 3D or more, one batched 1D plan per axis.
#[derive(Debug)]
pub struct FftPlan {
    shape: Vec<usize>,
    axes: Vec<FftPlan1d>,
}

impl FftPlan {
    /// Plans the transform of the last `axes` axes of an array of `shape` held in `data`.
    pub fn new(
        ctx: &GpuContext,
        shape: &[usize],
        axes: usize,
        direction: Direction,
        normalization: Normalization,
        data: &GpuBuffer,
    ) -> Result<Self, FftError> {
        Self::with_strategy(
            ctx,
            shape,
            axes,
            direction,
            normalization,
            data,
            Strategy::Auto,
        )
    }

    /// Like [`new`](Self::new) with an explicit [`Strategy`] for every axis.
    pub fn with_strategy(
        ctx: &GpuContext,
        shape: &[usize],
        axes: usize,
        direction: Direction,
        normalization: Normalization,
        data: &GpuBuffer,
        strategy: Strategy,
    ) -> Result<Self, FftError> {
        let transform = (axes, direction, normalization);
        Self::with_options(ctx, shape, transform, data, strategy, Specialize::BySize)
    }

    /// Like [`new`](Self::new), with kernels specialised to the problem whatever its size: for
    /// plans run many times.
    pub fn specialized(
        ctx: &GpuContext,
        shape: &[usize],
        axes: usize,
        direction: Direction,
        normalization: Normalization,
        data: &GpuBuffer,
    ) -> Result<Self, FftError> {
        let transform = (axes, direction, normalization);
        Self::with_options(
            ctx,
            shape,
            transform,
            data,
            Strategy::Auto,
            Specialize::Always,
        )
    }

    fn with_options(
        ctx: &GpuContext,
        shape: &[usize],
        (axes, direction, normalization): (usize, Direction, Normalization),
        data: &GpuBuffer,
        strategy: Strategy,
        specialize: Specialize,
    ) -> Result<Self, FftError> {
        if shape.is_empty() || shape.contains(&0) {
            return Err(FftError::ZeroLength);
        }
        if axes == 0 || axes > shape.len() {
            return Err(FftError::BadAxes {
                axes,
                ndim: shape.len(),
            });
        }
        let plans = (shape.len() - axes..shape.len())
            .rev()
            .map(|axis| {
                let desc = FftDescriptor {
                    len: shape[axis],
                    layout: Layout::axis_of(shape, axis),
                    direction,
                    normalization,
                };
                FftPlan1d::with_options(ctx, desc, data, strategy, specialize)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            shape: shape.to_vec(),
            axes: plans,
        })
    }

    /// The array shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The per-axis plans, last axis first.
    pub fn axis_plans(&self) -> &[FftPlan1d] {
        &self.axes
    }

    /// The per-axis plans, last axis first, for callers that schedule them with other work.
    pub fn into_axis_plans(self) -> Vec<FftPlan1d> {
        self.axes
    }

    /// Bytes of device memory the plan holds itself besides the data (the shared workspace is
    /// counted by [`workspace_slot_bytes`](Self::workspace_slot_bytes)).
    pub fn device_bytes(&self) -> u64 {
        self.axes.iter().map(FftPlan1d::device_bytes).sum()
    }

    /// Bytes of workspace the plan needs per slot of the context's shared pool: the largest of
    /// its axes in each slot (they share it).
    pub fn workspace_slot_bytes(&self) -> [u64; 2] {
        max_slots(self.axes.iter().map(FftPlan1d::workspace_slot_bytes))
    }

    /// Records the transform into `rec`.
    pub fn record(&self, rec: &mut Recorder) {
        for plan in &self.axes {
            plan.record(rec);
        }
    }

    /// Runs the transform and waits for it.
    pub fn execute(&self, ctx: &GpuContext) -> Result<(), FftError> {
        let mut rec = ctx.recorder("fft");
        self.record(&mut rec);
        Ok(ctx.submit_and_wait(rec)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fft::BatchDim;

    #[test]
    fn samples_keep_the_access_pattern_and_cut_the_outer_batch() {
        let l = Layout::axis_of(&[100, 256, 512], 1);
        let s = sample_layout(&l, 256, 256 * 1024);
        assert_eq!(s.stride, 512);
        assert_eq!(
            s.batch[0],
            BatchDim {
                count: 512,
                dist: 1
            }
        );
        assert_eq!(s.batch[1].count, 2);
        assert!(s.batch_count() * 256 <= 256 * 1024);
        let c = sample_layout(&Layout::contiguous(64, 1000), 64, 64 * 10);
        assert_eq!(c.batch_count(), 10);
        // Never below one transform.
        assert_eq!(
            sample_layout(&Layout::contiguous(1 << 20, 8), 1 << 20, 16).batch_count(),
            1
        );
    }

    #[test]
    fn a_pass_sample_runs_only_transforms_both_layouts_hold() {
        // The last pass of a strided axis: contiguous workspace in, the strided axis out (whose
        // sample keeps fewer transforms than the workspace's).
        let src = Layout::contiguous(768, 14 * 768);
        let dst = Layout::axis_of(&[14, 768, 768], 1);
        let (s, d, transforms) = sample_layouts(&src, &dst, 768, 1 << 20);
        assert!(d.batch_count() < s.batch_count());
        assert_eq!(transforms, d.batch_count());
        for (a, b) in [(&src, &dst), (&dst, &src), (&src, &src)] {
            let (s, d, t) = sample_layouts(a, b, 768, 1 << 20);
            assert!(t >= 1 && t <= s.batch_count() && t <= d.batch_count());
        }
    }

    #[test]
    fn chains_multiply_to_the_length_and_scale_once() {
        let specs = chain_specs(1 << 20, &[1024, 1024], Direction::Inverse, 0.5);
        assert_eq!(
            specs.iter().map(|s| s.ns).collect::<Vec<_>>(),
            vec![1, 1024]
        );
        assert_eq!(
            specs.iter().map(|s| s.scale).collect::<Vec<_>>(),
            vec![1.0, 0.5]
        );
    }
}
