//! Building FFT plans on the GPU: kernels, tables, scratch and bind groups, created once.

use bytemuck::{Pod, Zeroable};

use super::layout::{Chunk, Layout};
use super::recipe::{design, Algorithm};
use super::twiddles::{bluestein_tables, stockham_tables};
use super::{Direction, FftError, Normalization};
use crate::gpu::{BindingKind, Bound, BufferSlice, GpuBuffer, GpuContext, KernelSpec, Recorder};
use crate::shaders;

/// Threads per workgroup of the element-wise kernels.
const WORKGROUP: u32 = 64;
/// Threads per transform are chosen so that each handles about this many elements.
const FUSED_ELEMS_PER_THREAD: u64 = 16;
/// Fewer threads than this per workgroup waste most of a SIMD unit: pack several transforms.
const FUSED_MIN_WORKGROUP: u64 = 64;
/// More threads per transform than this buys nothing at the lengths that fit workgroup memory.
const FUSED_MAX_THREADS: u64 = 256;

/// Where the passes of a Stockham transform run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// The fused kernel where the length fits workgroup memory (on software adapters only above
    /// three passes), global-memory passes otherwise.
    #[default]
    Auto,
    /// All passes in workgroup memory, one read and one write per element (where the length fits).
    Fused,
    /// One dispatch per radix pass through global memory (lengths with at least two passes).
    MultiPass,
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

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct GpuLayout {
    offset: u32,
    stride: u32,
    count0: u32,
    dist0: u32,
    count1: u32,
    dist1: u32,
    dist2: u32,
    batch_base: u32,
}

impl GpuLayout {
    /// The layout relative to a binding that starts at element `window_start`, for transforms
    /// numbered from `batch_base`. Offsets and distances are reduced modulo 2^32: the kernels use
    /// wrapping u32 arithmetic and every index they form lies inside the binding.
    fn of(layout: &Layout, window_start: u64, batch_base: u64) -> Self {
        let dim = |i: usize| layout.batch.get(i).map_or((1, 0), |d| (d.count, d.dist));
        let (c0, d0) = dim(0);
        let (c1, d1) = dim(1);
        let (_, d2) = dim(2);
        Self {
            offset: layout.offset.wrapping_sub(window_start) as u32,
            stride: layout.stride as u32,
            count0: c0 as u32,
            dist0: d0 as u32,
            count1: c1 as u32,
            dist1: d1 as u32,
            dist2: d2 as u32,
            batch_base: batch_base as u32,
        }
    }

    /// `count` contiguous transforms of `len` elements at the start of a scratch buffer.
    fn scratch(len: usize, count: u64) -> Self {
        Self::of(&Layout::contiguous(len, count as usize), 0, 0)
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct PassParams {
    src: GpuLayout,
    dst: GpuLayout,
    n: u32,
    radix: u32,
    ns: u32,
    twiddle_offset: u32,
    root_offset: u32,
    batch_count: u32,
    dir: f32,
    scale: f32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct FusedParams {
    data: GpuLayout,
    n: u32,
    passes: u32,
    batch_count: u32,
    dir: f32,
    scale: f32,
    threads_per_transform: u32,
    transforms_per_group: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct BluesteinParams {
    data: GpuLayout,
    n: u32,
    m: u32,
    batch_count: u32,
    scale: f32,
}

/// How the fused kernel is launched for one length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FusedShape {
    threads_per_transform: u64,
    transforms_per_group: u64,
    shared_elems: u64,
}

impl FusedShape {
    /// The launch shape when a transform of length `n` fits workgroup memory and registers.
    fn for_len(ctx: &GpuContext, n: u64, radices: &[u32]) -> Option<Self> {
        // Two halves (ping-pong) of per_group * n complex elements each.
        let max_shared = ctx.max_workgroup_storage_bytes() as u64 / 16;
        let max_threads = (ctx.max_invocations_per_workgroup() as u64).min(FUSED_MAX_THREADS);
        if n > max_shared || radices.is_empty() {
            return None;
        }
        let threads = n
            .div_ceil(FUSED_ELEMS_PER_THREAD)
            .next_power_of_two()
            .clamp(1, max_threads);
        let per_group = (FUSED_MIN_WORKGROUP / threads).max(1).min(max_shared / n);
        let shared_elems = (2 * per_group * n).next_power_of_two().min(2 * max_shared);
        Some(Self {
            threads_per_transform: threads,
            transforms_per_group: per_group,
            shared_elems,
        })
    }
}

/// The fused launch shape (where the length fits) and whether the passes run through global memory.
fn stockham_path(
    ctx: &GpuContext,
    n: u64,
    radices: &[u32],
    strategy: Strategy,
) -> (Option<FusedShape>, bool) {
    let fused = FusedShape::for_len(ctx, n, radices);
    // A single pass cannot run out of place over the data, so it always runs fused (every length
    // with one radix fits workgroup memory).
    let multipass = radices.len() >= 2
        && match strategy {
            Strategy::MultiPass => true,
            Strategy::Fused => fused.is_none(),
            // Software rasterisers emulate workgroup barriers, which makes up to three
            // global-memory passes faster there than the fused kernel (measured on lavapipe with
            // `lamino bench fft`); GPUs favour the fused kernel.
            Strategy::Auto => fused.is_none() || (ctx.info().software && radices.len() <= 3),
        };
    (fused, multipass)
}

/// Scratch bytes a plan of `batch` transforms of length `n` allocates, without allocating it
/// (tables excluded: they are about 16 n bytes).
pub(crate) fn scratch_bytes(ctx: &GpuContext, n: usize, batch: u64, strategy: Strategy) -> u64 {
    let window = ctx.max_binding_bytes() / 8;
    match design(n) {
        Algorithm::Identity => 0,
        Algorithm::Stockham { radices } => match stockham_path(ctx, n as u64, &radices, strategy) {
            (_, true) => 2 * batch.min(window / n as u64).max(1) * n as u64 * 8,
            _ => 0,
        },
        Algorithm::Bluestein { inner } => {
            let cap = batch.min(window / inner as u64).max(1);
            cap * inner as u64 * 8 + 2 * scratch_bytes(ctx, inner, cap, strategy)
        }
    }
}

enum Step {
    Dispatch(Bound, u32),
    /// Run `inner[i]` (Bluestein's inner FFTs).
    Inner(usize),
}

/// A planned batch of 1D transforms, in place on one buffer.
pub struct FftPlan1d {
    desc: FftDescriptor,
    algorithm: Algorithm,
    strategy: Strategy,
    steps: Vec<Step>,
    inner: Vec<FftPlan1d>,
    /// Tables, scratch and uniforms the bind groups refer to.
    buffers: Vec<GpuBuffer>,
}

impl std::fmt::Debug for FftPlan1d {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FftPlan1d")
            .field("desc", &self.desc)
            .field("algorithm", &self.algorithm)
            .field("dispatches", &self.steps.len())
            .finish()
    }
}

fn groups(threads: u64) -> u32 {
    threads.div_ceil(WORKGROUP as u64) as u32
}

impl FftPlan1d {
    /// Plans `desc` on `data`. Validates the layout against the buffer, picks the algorithm and
    /// builds everything execution needs.
    pub fn new(ctx: &GpuContext, desc: FftDescriptor, data: &GpuBuffer) -> Result<Self, FftError> {
        Self::with_strategy(ctx, desc, data, Strategy::Auto)
    }

    /// Like [`new`](Self::new), with an explicit choice between the workgroup-memory kernel and
    /// global-memory passes (tests exercise both; benchmarks compare them).
    pub fn with_strategy(
        ctx: &GpuContext,
        desc: FftDescriptor,
        data: &GpuBuffer,
        strategy: Strategy,
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
            steps: vec![],
            inner: vec![],
            buffers: vec![],
        };
        match &algorithm {
            Algorithm::Identity => {}
            Algorithm::Stockham { radices } => {
                let (fused, multipass) =
                    stockham_path(ctx, plan.desc.len as u64, radices, strategy);
                match fused {
                    Some(shape) if !multipass => {
                        plan.strategy = Strategy::Fused;
                        plan.build_fused(ctx, data, radices, shape)?
                    }
                    _ => {
                        plan.strategy = Strategy::MultiPass;
                        plan.build_multipass(ctx, data, radices)?
                    }
                }
            }
            Algorithm::Bluestein { inner } => plan.build_bluestein(ctx, data, *inner, strategy)?,
        }
        Ok(plan)
    }

    /// How the Stockham passes run (`Auto` for lengths without Stockham passes of their own).
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

    /// Bytes of device memory the plan holds (tables, scratch, parameters).
    pub fn device_bytes(&self) -> u64 {
        self.buffers.iter().map(GpuBuffer::bytes).sum::<u64>()
            + self.inner.iter().map(FftPlan1d::device_bytes).sum::<u64>()
    }

    fn scale(&self) -> f32 {
        match self.desc.normalization {
            Normalization::None => 1.0,
            Normalization::ByLength => (1.0 / self.desc.len as f64) as f32,
        }
    }

    fn window_elems(ctx: &GpuContext) -> (u64, u64) {
        (
            ctx.max_binding_bytes() / 8,
            (ctx.binding_alignment() / 8).max(1),
        )
    }

    fn data_slice<'a>(data: &'a GpuBuffer, chunk: &Chunk) -> BufferSlice<'a> {
        BufferSlice {
            buffer: data,
            offset: chunk.window_start * 8,
            size: chunk.window_len * 8,
        }
    }

    fn keep(&mut self, buffer: GpuBuffer) -> &GpuBuffer {
        self.buffers.push(buffer);
        self.buffers.last().expect("just pushed")
    }

    fn build_fused(
        &mut self,
        ctx: &GpuContext,
        data: &GpuBuffer,
        radices: &[u32],
        shape: FusedShape,
    ) -> Result<(), FftError> {
        let n = self.desc.len as u64;
        let kernel = ctx.kernel(&KernelSpec {
            shader: &shaders::FFT_STOCKHAM_FUSED,
            entry: "stockham_fused",
            bindings: &[
                BindingKind::StorageReadWrite,
                BindingKind::StorageRead,
                BindingKind::StorageRead,
                BindingKind::Uniform,
            ],
            overrides: vec![
                (
                    "WORKGROUP",
                    (shape.threads_per_transform * shape.transforms_per_group) as f64,
                ),
                ("SHARED_ELEMS", shape.shared_elems as f64),
            ],
        })?;
        let tables = stockham_tables(radices);
        let twiddles = ctx.upload("fft twiddles", &tables.values)?;
        let passes = ctx.upload("fft passes", &tables.passes)?;
        let (window, align) = Self::window_elems(ctx);
        let chunks = self
            .desc
            .layout
            .chunks(self.desc.len, window, align, u32::MAX as u64 / n)?;
        for chunk in &chunks {
            let params = ctx.uniform(
                "fft fused params",
                &FusedParams {
                    data: GpuLayout::of(&self.desc.layout, chunk.window_start, chunk.start),
                    n: n as u32,
                    passes: radices.len() as u32,
                    batch_count: chunk.count as u32,
                    dir: self.desc.direction.sign(),
                    scale: self.scale(),
                    threads_per_transform: shape.threads_per_transform as u32,
                    transforms_per_group: shape.transforms_per_group as u32,
                    pad: 0,
                },
            )?;
            let bound = kernel.bind(
                ctx,
                &[
                    Self::data_slice(data, chunk),
                    (&twiddles).into(),
                    (&passes).into(),
                    (&params).into(),
                ],
            )?;
            let groups = chunk.count.div_ceil(shape.transforms_per_group) as u32;
            self.steps.push(Step::Dispatch(bound, groups));
            self.keep(params);
        }
        self.keep(twiddles);
        self.keep(passes);
        Ok(())
    }

    fn build_multipass(
        &mut self,
        ctx: &GpuContext,
        data: &GpuBuffer,
        radices: &[u32],
    ) -> Result<(), FftError> {
        // At least two passes, so data is never both read and written by one dispatch.
        debug_assert!(radices.len() >= 2);
        let n = self.desc.len as u64;
        let (window, align) = Self::window_elems(ctx);
        if n > window {
            return Err(FftError::TransformTooLarge {
                bytes: n * 8,
                limit: window * 8,
            });
        }
        let cap = self
            .desc
            .layout
            .batch_count()
            .min(window / n)
            .min(u32::MAX as u64 / n);
        let kernel = ctx.kernel(&KernelSpec {
            shader: &shaders::FFT_STOCKHAM_PASS,
            entry: "stockham_pass",
            bindings: &[
                BindingKind::StorageRead,
                BindingKind::StorageReadWrite,
                BindingKind::StorageRead,
                BindingKind::Uniform,
            ],
            overrides: vec![("WORKGROUP", WORKGROUP as f64)],
        })?;
        let tables = stockham_tables(radices);
        let twiddles = ctx.upload("fft twiddles", &tables.values)?;
        let scratch = [
            ctx.storage_buffer("fft scratch A", cap * n * 8)?,
            ctx.storage_buffer("fft scratch B", cap * n * 8)?,
        ];
        let chunks = self.desc.layout.chunks(self.desc.len, window, align, cap)?;
        let last = radices.len() - 1;
        for chunk in &chunks {
            let data_layout = GpuLayout::of(&self.desc.layout, chunk.window_start, chunk.start);
            for (s, pass) in tables.passes.iter().enumerate() {
                let (src, src_layout) = if s == 0 {
                    (Self::data_slice(data, chunk), data_layout)
                } else {
                    (
                        BufferSlice::whole(&scratch[(s - 1) % 2]),
                        GpuLayout::scratch(self.desc.len, chunk.count),
                    )
                };
                let (dst, dst_layout) = if s == last {
                    (Self::data_slice(data, chunk), data_layout)
                } else {
                    (
                        BufferSlice::whole(&scratch[s % 2]),
                        GpuLayout::scratch(self.desc.len, chunk.count),
                    )
                };
                let params = ctx.uniform(
                    "fft pass params",
                    &PassParams {
                        src: src_layout,
                        dst: dst_layout,
                        n: n as u32,
                        radix: pass[0],
                        ns: pass[1],
                        twiddle_offset: pass[2],
                        root_offset: pass[3],
                        batch_count: chunk.count as u32,
                        dir: self.desc.direction.sign(),
                        scale: if s == last { self.scale() } else { 1.0 },
                    },
                )?;
                let bound = kernel.bind(ctx, &[src, dst, (&twiddles).into(), (&params).into()])?;
                let threads = n / pass[0] as u64 * chunk.count;
                self.steps.push(Step::Dispatch(bound, groups(threads)));
                self.keep(params);
            }
        }
        self.keep(twiddles);
        let [a, b] = scratch;
        self.keep(a);
        self.keep(b);
        Ok(())
    }

    fn build_bluestein(
        &mut self,
        ctx: &GpuContext,
        data: &GpuBuffer,
        m: usize,
        strategy: Strategy,
    ) -> Result<(), FftError> {
        let n = self.desc.len as u64;
        let m64 = m as u64;
        let (window, align) = Self::window_elems(ctx);
        if m64 > window {
            return Err(FftError::TransformTooLarge {
                bytes: m64 * 8,
                limit: window * 8,
            });
        }
        let cap = self
            .desc
            .layout
            .batch_count()
            .min(window / m64)
            .min(u32::MAX as u64 / m64);
        let scratch = ctx.storage_buffer("bluestein scratch", cap * m64 * 8)?;
        let (chirp, spectrum) = bluestein_tables(self.desc.len, m, self.desc.direction);
        let chirp = ctx.upload("bluestein chirp", &chirp)?;
        let spectrum = ctx.upload("bluestein kernel spectrum", &spectrum)?;
        for direction in [Direction::Forward, Direction::Inverse] {
            let desc = FftDescriptor::contiguous(m, cap as usize, direction);
            self.inner
                .push(FftPlan1d::with_strategy(ctx, desc, &scratch, strategy)?);
        }
        let spec = |entry| KernelSpec {
            shader: &shaders::FFT_BLUESTEIN,
            entry,
            bindings: &[
                BindingKind::StorageReadWrite,
                BindingKind::StorageReadWrite,
                BindingKind::StorageRead,
                BindingKind::Uniform,
            ],
            overrides: vec![("WORKGROUP", WORKGROUP as f64)],
        };
        let premul = ctx.kernel(&spec("premul"))?;
        let pointwise = ctx.kernel(&spec("pointwise"))?;
        let postmul = ctx.kernel(&spec("postmul"))?;
        let chunks = self.desc.layout.chunks(self.desc.len, window, align, cap)?;
        for chunk in &chunks {
            let params = ctx.uniform(
                "bluestein params",
                &BluesteinParams {
                    data: GpuLayout::of(&self.desc.layout, chunk.window_start, chunk.start),
                    n: n as u32,
                    m: m as u32,
                    batch_count: chunk.count as u32,
                    scale: self.scale(),
                },
            )?;
            let window = Self::data_slice(data, chunk);
            let bind = |kernel: &std::sync::Arc<crate::gpu::Kernel>, table: &GpuBuffer| {
                kernel.bind(
                    ctx,
                    &[window, (&scratch).into(), table.into(), (&params).into()],
                )
            };
            let mul_in = bind(&premul, &chirp)?;
            let mul_kernel = bind(&pointwise, &spectrum)?;
            let mul_out = bind(&postmul, &chirp)?;
            self.steps
                .push(Step::Dispatch(mul_in, groups(m64 * chunk.count)));
            self.steps.push(Step::Inner(0));
            self.steps
                .push(Step::Dispatch(mul_kernel, groups(m64 * chunk.count)));
            self.steps.push(Step::Inner(1));
            self.steps
                .push(Step::Dispatch(mul_out, groups(n * chunk.count)));
            self.keep(params);
        }
        self.keep(scratch);
        self.keep(chirp);
        self.keep(spectrum);
        Ok(())
    }

    /// Records the transform into `rec`.
    pub fn record(&self, rec: &mut Recorder) {
        for step in &self.steps {
            match step {
                Step::Dispatch(bound, groups) => rec.dispatch(bound, *groups),
                Step::Inner(i) => self.inner[*i].record(rec),
            }
        }
    }

    /// Runs the transform and waits for it.
    pub fn execute(&self, ctx: &GpuContext) -> Result<(), FftError> {
        let mut rec = ctx.recorder("fft");
        self.record(&mut rec);
        Ok(ctx.submit_and_wait(rec)?)
    }
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
                FftPlan1d::with_strategy(ctx, desc, data, strategy)
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

    /// Bytes of device memory the plan holds besides the data.
    pub fn device_bytes(&self) -> u64 {
        self.axes.iter().map(FftPlan1d::device_bytes).sum()
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
