//! Bound vector kernels of the solver. Each call site is built once with its fields, its
//! coefficients (`constant * scalar slot`) and, for reductions, its partial sums and the slot of
//! its result, so a step of the solver only records dispatches: the same call site can be
//! recorded any number of times in one submission.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use crate::array::{BlockView, Coef, Field, Role, Scalars, Staging, SumSlot};
use crate::distributed::shares::share_range;
use crate::distributed::team::{Reads, Share};
use crate::gpu::GpuError;
use crate::gpu::{Bound, BufferSlice, GpuBuffer, GpuContext, KernelSpec, Recorder};
use crate::shaders;

/// Invocations per workgroup of the vector kernels; a reduction writes one partial sum per
/// workgroup.
pub(crate) const WORKGROUP: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
struct VectorParams {
    planes: u32,
    plane_len: u32,
    first_plane: u32,
    groups_per_plane: u32,
    n0: u32,
    n1: u32,
    n2: u32,
    ox: u32,
    oy: u32,
    ow: u32,
    ov: u32,
    oz: u32,
    sum_slot: u32,
    pad: [u32; 3],
    c: [f32; 4],
    s: [u32; 4],
}

/// The vector kernels. Inputs are x, y, w, v; coefficients a, b, c, d (see each kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// z = a x + b y + c w + d z, over words
    Lincomb,
    /// z = a grad(x) + d z (interleaved 3-vectors), over voxels
    Gradient,
    /// z = a grad*(x + b y + c w) + d z, over voxels
    GradientAdjoint,
    /// z = shrink_a(x + b y), over voxels
    Shrink,
    /// sum (x + b y)(w + d v), over words
    Dot,
    /// sum |x| of the 3-vectors, over voxels
    IsoNorm,
}

impl Kernel {
    fn entry(self) -> &'static str {
        match self {
            Self::Lincomb => "lincomb",
            Self::Gradient => "gradient",
            Self::GradientAdjoint => "gradient_adjoint",
            Self::Shrink => "shrink",
            Self::Dot => "dot",
            Self::IsoNorm => "iso_norm",
        }
    }

    /// f32 words per unit in x, y, w, v and z.
    fn words(self) -> [usize; 5] {
        match self {
            Self::Lincomb | Self::Dot => [1; 5],
            Self::Gradient => [1, 1, 1, 1, 3],
            Self::GradientAdjoint => [3, 3, 3, 3, 1],
            Self::Shrink => [3, 3, 3, 3, 3],
            Self::IsoNorm => [3, 3, 3, 3, 1],
        }
    }

    /// Planes the inputs' windows reach before and after the planes a window computes.
    fn halo(self) -> (usize, usize) {
        match self {
            Self::Gradient => (0, 1),
            Self::GradientAdjoint => (1, 0),
            _ => (0, 0),
        }
    }

    fn reduces(self) -> bool {
        matches!(self, Self::Dot | Self::IsoNorm)
    }

    /// Whether the kernel reads its output array (the `d z` term).
    fn reads_output(self) -> bool {
        matches!(self, Self::Lincomb | Self::Gradient | Self::GradientAdjoint)
    }
}

/// Where a call site's result goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// An array (the kernel's z).
    Field(&'a Field),
    /// A reduction result.
    Sum(SumSlot),
}

/// A member's plane sums of one reduction, as its download lands.
type PlaneSums = Arc<std::sync::Mutex<Vec<f32>>>;

struct Dispatch {
    bound: Bound,
    groups: u32,
    /// Blocks of host arrays uploaded into staging buffers before the dispatch.
    uploads: Vec<(Field, Role, BlockView)>,
    /// The block of a host output downloaded after it.
    download: Option<(Field, BlockView)>,
}

impl Dispatch {
    fn device(bound: Bound, groups: u32) -> Self {
        Self {
            bound,
            groups,
            uploads: Vec::new(),
            download: None,
        }
    }
}

/// One call site: a kernel bound to its arrays in windows of whole planes that each fit one
/// storage binding (or, for arrays held on the host, one staging buffer), plus, for reductions,
/// the fixed-order finish into its sum slot. A member of a multi-device team computes its share
/// of the planes; a reduction then combines every member's plane sums before the same finish.
pub(crate) struct VectorOp {
    dispatches: Vec<Dispatch>,
    staging: Option<Arc<Staging>>,
    /// A reduction's plane sums (two words per plane, every plane) and its finish.
    finish: Option<(GpuBuffer, Dispatch)>,
    share: Option<Arc<Share>>,
    planes: usize,
    /// Whether the kernel reads planes beyond the ones it computes (the gradients).
    halo: bool,
}

/// The binding that holds planes `[lo, hi)` of an array of `plane_words` words per plane and
/// `len` words, started at an aligned word, and the word offset of plane `first` in it.
fn planes_window(
    buffer: &GpuBuffer,
    plane_words: usize,
    [lo, hi, first]: [usize; 3],
    align: u64,
) -> (BufferSlice<'_>, u32) {
    let start = (lo * plane_words) as u64 / align * align;
    let end = ((hi * plane_words) as u64).min(buffer.bytes() / 4);
    (
        BufferSlice {
            buffer,
            offset: start * 4,
            size: (end - start).max(1) * 4,
        },
        ((first * plane_words) as u64 - start) as u32,
    )
}

fn vector_kernel(
    ctx: &GpuContext,
    entry: &'static str,
) -> Result<std::sync::Arc<crate::gpu::Kernel>, GpuError> {
    ctx.kernel(&KernelSpec {
        shader: &shaders::SOLVER_VECTOR,
        entry,
        overrides: vec![("WORKGROUP", WORKGROUP as f64)],
    })
}

impl VectorOp {
    /// Binds `kernel` to its inputs (x, y, w, v; absent ones are not read) and its target, with
    /// coefficients `[a, b, c, d]`, for a volume of `shape` (used by the gradients). Every array
    /// must have the same number of planes. With a `share`, only the member's planes are
    /// computed.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: &GpuContext,
        scalars: &Scalars,
        staging: Option<&Arc<Staging>>,
        share: Option<&Arc<Share>>,
        kernel: Kernel,
        inputs: [Option<&Field>; 4],
        target: Target<'_>,
        coefs: [Coef; 4],
        shape: [usize; 3],
    ) -> Result<Self, GpuError> {
        let first = inputs[0].expect("every kernel reads x");
        let layout = first.layout();
        let words = kernel.words();
        let plane_len = layout.plane_words / words[0];
        let planes = layout.planes;
        let groups_per_plane = plane_len.div_ceil(WORKGROUP as usize);
        let (before, after) = kernel.halo();
        let limit = ctx.max_binding_bytes() / 4;
        let align = (ctx.binding_alignment() / 4).max(1);
        // Planes per window: every binding (inputs with halo, the output or the partial sums)
        // must fit one storage binding with room for alignment.
        let mut per_window = planes;
        let mut fit = |plane_words: usize, halo: usize| -> Result<(), GpuError> {
            let room = limit.saturating_sub(align) / plane_words.max(1) as u64;
            if room < (1 + halo) as u64 {
                return Err(GpuError::KernelLimit {
                    kernel: kernel.entry().to_string(),
                    what: "storage binding bytes for one plane",
                    requested: ((1 + halo) * plane_words) as u64 * 4,
                    limit: limit * 4,
                });
            }
            per_window = per_window.min(room as usize - halo);
            Ok(())
        };
        for field in inputs.iter().flatten() {
            fit(field.layout().plane_words, before + after)?;
        }
        match target {
            Target::Field(z) => fit(z.layout().plane_words, 0)?,
            Target::Sum(_) => fit(groups_per_plane, 0)?,
        }
        // Blocks of host arrays (with their halos) must fit a staging buffer.
        let mut host_fields: Vec<&Field> = inputs
            .iter()
            .flatten()
            .filter(|f| f.device_buffer().is_none())
            .copied()
            .collect();
        if let Target::Field(z) = target {
            if z.device_buffer().is_none() {
                host_fields.push(z);
            }
        }
        if let Some(host) = host_fields.first() {
            let staging = staging.ok_or_else(|| GpuError::KernelLimit {
                kernel: kernel.entry().to_string(),
                what: "staging buffer words (the array is held on the host)",
                requested: host.layout().plane_words as u64,
                limit: 0,
            })?;
            for field in &host_fields {
                let plane_words = field.layout().plane_words;
                let room = staging.words() / plane_words.max(1);
                if room < 1 + before + after {
                    return Err(GpuError::KernelLimit {
                        kernel: kernel.entry().to_string(),
                        what: "staging buffer words for one plane and its halo",
                        requested: ((1 + before + after) * plane_words) as u64,
                        limit: staging.words() as u64,
                    });
                }
                per_window = per_window.min(room - before - after);
            }
        }
        let main = vector_kernel(ctx, kernel.entry())?;
        // A reduction's partial sums hold one window's planes: each window's plane sums are
        // formed right after it, so a streamed array's reduction holds 1/256 of a window, not of
        // the array (at 2048^3, 0.4 GiB per call site).
        let reduction = match target {
            Target::Sum(_) => Some((
                ctx.storage_buffer("partial sums", (per_window * groups_per_plane) as u64 * 4)?,
                ctx.storage_buffer("plane sums", 8 * planes as u64)?,
                vector_kernel(ctx, "plane_sums")?,
            )),
            Target::Field(_) => None,
        };
        let dummy = scalars.coefficients();
        let mut c = [0f32; 4];
        let mut s = [0u32; 4];
        for (i, coef) in coefs.iter().enumerate() {
            c[i] = coef.constant;
            s[i] = coef.slot.0;
        }
        let base = VectorParams {
            plane_len: plane_len as u32,
            groups_per_plane: groups_per_plane as u32,
            n0: shape[0] as u32,
            n1: shape[1] as u32,
            n2: shape[2] as u32,
            c,
            s,
            ..Default::default()
        };
        let mut dispatches = Vec::new();
        let own = share.map_or(0..planes, |s| s.range(planes));
        let mut a = own.start;
        while a < own.end {
            let e = own.end.min(a + per_window);
            let mut params = VectorParams {
                planes: (e - a) as u32,
                first_plane: a as u32,
                ..base
            };
            let mut slices = Vec::with_capacity(7);
            let mut offsets = [0u32; 4];
            let mut uploads: Vec<(Field, Role, BlockView)> = Vec::new();
            for (i, field) in inputs.iter().enumerate() {
                match field {
                    Some(f) => {
                        assert_eq!(f.layout().planes, planes, "{} has other planes", f.label());
                        let lo = a.saturating_sub(before);
                        let hi = (e + after).min(planes);
                        let plane_words = f.layout().plane_words;
                        match (f.device_buffer(), staging) {
                            (Some(buffer), _) => {
                                let (slice, offset) =
                                    planes_window(buffer, plane_words, [lo, hi, a], align);
                                slices.push(slice);
                                offsets[i] = offset;
                            }
                            (None, Some(staging)) => {
                                // One upload per host array, whichever roles read it.
                                let role = match uploads.iter().find(|(g, ..)| g.same(f)) {
                                    Some((_, role, _)) => *role,
                                    None => {
                                        let role = Role::INPUTS[i];
                                        let view = BlockView::planes(lo, hi, plane_words);
                                        uploads.push(((*f).clone(), role, view));
                                        role
                                    }
                                };
                                slices.push(staging.buffer(role).into());
                                offsets[i] = ((a - lo) * plane_words) as u32;
                            }
                            (None, None) => unreachable!("checked above"),
                        }
                    }
                    None => slices.push(dummy.into()),
                }
            }
            [params.ox, params.oy, params.ow, params.ov] = offsets;
            let mut download = None;
            match (target, &reduction) {
                (Target::Field(z), _) => match (z.device_buffer(), staging) {
                    (Some(buffer), _) => {
                        let (slice, offset) =
                            planes_window(buffer, z.layout().plane_words, [a, e, a], align);
                        slices.push(slice);
                        params.oz = offset;
                    }
                    (None, Some(staging)) => {
                        let view = BlockView::planes(a, e, z.layout().plane_words);
                        let out = staging.buffer(Role::Out);
                        if kernel.reads_output() && coefs[3] != Coef::ZERO {
                            uploads.push((z.clone(), Role::Out, view));
                        }
                        slices.push(out.into());
                        params.oz = 0;
                        download = Some((z.clone(), view));
                    }
                    (None, None) => unreachable!("checked above"),
                },
                (Target::Sum(_), Some((partials, ..))) => slices.push(partials.into()),
                (Target::Sum(_), None) => unreachable!("reductions have partial sums"),
            }
            slices.push(dummy.into());
            let uniform = ctx.uniform("vector params", &params)?;
            slices.push((&uniform).into());
            let bound = main.bind(ctx, &slices)?;
            dispatches.push(Dispatch {
                bound,
                groups: ((e - a) * groups_per_plane) as u32,
                uploads,
                download,
            });
            if let Some((partials, plane_sums, per_plane)) = &reduction {
                dispatches.push(Self::plane_sums(
                    ctx,
                    scalars,
                    per_plane,
                    (partials, plane_sums),
                    [a, e, groups_per_plane],
                )?);
            }
            a = e;
        }
        let finish = match (target, reduction) {
            (Target::Sum(slot), Some((_, plane_sums, _))) => {
                let total = Self::total(ctx, scalars, &plane_sums, planes, slot)?;
                Some((plane_sums, total))
            }
            _ => None,
        };
        debug_assert!(kernel.reduces() == finish.is_some());
        Ok(Self {
            dispatches,
            staging: staging.cloned(),
            finish,
            share: share.cloned(),
            planes,
            halo: kernel.halo() != (0, 0),
        })
    }

    /// The fixed-order finish of a reduction, step 1: the double-word sums of planes `[a, e)`
    /// from their partial sums (the window's, at the start of `partials`).
    fn plane_sums(
        ctx: &GpuContext,
        scalars: &Scalars,
        per_plane: &Arc<crate::gpu::Kernel>,
        (partials, plane_sums): (&GpuBuffer, &GpuBuffer),
        [a, e, groups_per_plane]: [usize; 3],
    ) -> Result<Dispatch, GpuError> {
        let dummy = scalars.coefficients();
        let uniform = ctx.uniform(
            "plane sums params",
            &VectorParams {
                planes: (e - a) as u32,
                first_plane: a as u32,
                groups_per_plane: groups_per_plane as u32,
                ..Default::default()
            },
        )?;
        let bound = per_plane.bind(
            ctx,
            &[
                partials.into(),
                dummy.into(),
                dummy.into(),
                dummy.into(),
                plane_sums.into(),
                dummy.into(),
                (&uniform).into(),
            ],
        )?;
        Ok(Dispatch::device(bound, (e - a) as u32))
    }

    /// The fixed-order finish of a reduction, step 2: the total of the plane sums into `slot`.
    fn total(
        ctx: &GpuContext,
        scalars: &Scalars,
        plane_sums: &GpuBuffer,
        planes: usize,
        slot: SumSlot,
    ) -> Result<Dispatch, GpuError> {
        let dummy = scalars.coefficients();
        let uniform = ctx.uniform(
            "total params",
            &VectorParams {
                planes: planes as u32,
                sum_slot: slot.0,
                ..Default::default()
            },
        )?;
        let bound = vector_kernel(ctx, "total")?.bind(
            ctx,
            &[
                plane_sums.into(),
                dummy.into(),
                dummy.into(),
                dummy.into(),
                scalars.sums().into(),
                dummy.into(),
                (&uniform).into(),
            ],
        )?;
        Ok(Dispatch::device(bound, 1))
    }

    /// Records the call site's dispatches (and a reduction's finish), with the transfers of the
    /// blocks of host arrays around each.
    pub fn record(&self, ctx: &GpuContext, rec: &mut Recorder) -> Result<(), GpuError> {
        Self::record_all(ctx, rec, &[self])
    }

    /// Records call sites in order. In a team, the reductions among them combine their members'
    /// plane sums in one exchange after all of them computed theirs.
    pub fn record_all(
        ctx: &GpuContext,
        rec: &mut Recorder,
        ops: &[&VectorOp],
    ) -> Result<(), GpuError> {
        let Some(share) = ops.first().and_then(|op| op.share.clone()) else {
            for op in ops {
                op.record_planes(ctx, rec)?;
                if let Some((_, total)) = &op.finish {
                    rec.dispatch(&total.bound, total.groups);
                }
            }
            return Ok(());
        };
        // This member's plane sums of each reduction, in op order, filled by their downloads.
        let mut parts: Vec<PlaneSums> = Vec::new();
        for op in ops {
            if op.halo {
                // The halo planes come from the neighbours' shares: they must have landed, and
                // the neighbours must not overwrite them before this member read them.
                share.sync(ctx, rec, || op.reads())?;
                op.record_planes(ctx, rec)?;
                share.meet()?;
            } else {
                op.record_planes(ctx, rec)?;
            }
            if let Some((plane_sums, _)) = &op.finish {
                let own = share.range(op.planes);
                let part = PlaneSums::default();
                parts.push(part.clone());
                let done: crate::gpu::Completion = Box::new(move |bytes: &[u8]| {
                    if let Ok(mut p) = part.lock() {
                        p.extend(
                            bytes
                                .chunks_exact(4)
                                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                        );
                    }
                });
                if own.is_empty() {
                    done(&[]);
                } else {
                    rec.download(
                        ctx,
                        plane_sums,
                        8 * own.start as u64,
                        8 * own.len() as u64,
                        done,
                    )?;
                }
            }
        }
        if parts.is_empty() {
            return Ok(());
        }
        Share::land(ctx, rec)?;
        let mine = parts
            .iter()
            .flat_map(|p| std::mem::take(&mut *p.lock().expect("plane sums poisoned")))
            .collect();
        let all = share.all_gather(mine)?;
        // Member m's part holds its planes of each reduction, in op order.
        let mut at = vec![0usize; share.members];
        for op in ops {
            let Some((plane_sums, total)) = &op.finish else {
                continue;
            };
            let mut sums = Vec::with_capacity(2 * op.planes);
            for (m, part) in all.iter().enumerate() {
                let len = 2 * share_range(m, share.members, op.planes).len();
                sums.extend_from_slice(&part[at[m]..at[m] + len]);
                at[m] += len;
            }
            rec.upload(ctx, plane_sums, 0, &sums)?;
            rec.dispatch(&total.bound, total.groups);
        }
        Ok(())
    }

    /// The blocks of host arrays this member's dispatches upload.
    fn reads(&self) -> Reads {
        self.dispatches
            .iter()
            .flat_map(|d| d.uploads.iter().map(|(f, _, view)| (f.clone(), *view)))
            .collect()
    }

    /// Records the dispatches of this member's planes, with the transfers of the blocks of host
    /// arrays around each.
    fn record_planes(&self, ctx: &GpuContext, rec: &mut Recorder) -> Result<(), GpuError> {
        let staging = self.staging.as_deref();
        for d in &self.dispatches {
            for (field, role, view) in &d.uploads {
                let staging = staging.expect("host arrays have staging");
                rec.upload_with(ctx, staging.buffer(*role), 0, || field.gather(ctx, view))?;
            }
            rec.dispatch(&d.bound, d.groups);
            if let Some((field, view)) = &d.download {
                let staging = staging.expect("host arrays have staging");
                let bytes = view.len_words() as u64 * 4;
                rec.download(
                    ctx,
                    staging.buffer(Role::Out),
                    0,
                    bytes,
                    field.scatter(*view),
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::{PlaneLayout, Slot};
    use crate::random::SplitMix64;

    use crate::gpu::test_context as ctx;

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        (0..len).map(|_| rng.next_f64() as f32 - 0.5).collect()
    }

    fn field(ctx: &GpuContext, values: &[f32], planes: usize) -> Field {
        let f = Field::zeros(
            ctx,
            "test field",
            PlaneLayout {
                planes,
                plane_words: values.len() / planes,
            },
        )
        .unwrap();
        f.write(ctx, values).unwrap();
        f
    }

    /// Forward differences / sqrt(3) in f64, interleaved (x, y, z) per voxel.
    fn gradient_f64(u: &[f32], [n0, n1, n2]: [usize; 3]) -> Vec<f64> {
        let mut g = vec![0.0; 3 * n0 * n1 * n2];
        let s = 1.0 / 3f64.sqrt();
        for z in 0..n0 {
            for y in 0..n1 {
                for x in 0..n2 {
                    let i = (z * n1 + y) * n2 + x;
                    if x + 1 < n2 {
                        g[3 * i] = (u[i + 1] as f64 - u[i] as f64) * s;
                    }
                    if y + 1 < n1 {
                        g[3 * i + 1] = (u[i + n2] as f64 - u[i] as f64) * s;
                    }
                    if z + 1 < n0 {
                        g[3 * i + 2] = (u[i + n1 * n2] as f64 - u[i] as f64) * s;
                    }
                }
            }
        }
        g
    }

    fn run(ctx: &GpuContext, op: &VectorOp) {
        let mut rec = ctx.recorder("test");
        op.record(ctx, &mut rec).unwrap();
        ctx.submit_and_wait(rec).unwrap();
    }

    fn sum(ctx: &GpuContext, scalars: &Scalars, slot: SumSlot) -> f64 {
        scalars.read_sums(ctx).unwrap()[slot.0 as usize]
    }

    #[test]
    fn gradient_matches_f64_and_its_adjoint_is_exact_for_every_field() {
        let ctx = ctx();
        let scalars = Scalars::new(&ctx, 1, 1).unwrap();
        let shape = [5, 6, 7];
        let v = 210;
        let u = random(v, 1);
        let q = random(3 * v, 2);
        let (ub, qb) = (field(&ctx, &u, 5), field(&ctx, &q, 5));
        let layout = |w: usize| PlaneLayout {
            planes: 5,
            plane_words: w * 42,
        };
        let gb = Field::zeros(&ctx, "g", layout(3)).unwrap();
        let db = Field::zeros(&ctx, "d", layout(1)).unwrap();
        let one = [Coef::ONE, Coef::ZERO, Coef::ZERO, Coef::ZERO];
        let grad = VectorOp::new(
            &ctx,
            &scalars,
            None,
            None,
            Kernel::Gradient,
            [Some(&ub), None, None, None],
            Target::Field(&gb),
            one,
            shape,
        )
        .unwrap();
        let adj = VectorOp::new(
            &ctx,
            &scalars,
            None,
            None,
            Kernel::GradientAdjoint,
            [Some(&qb), None, None, None],
            Target::Field(&db),
            one,
            shape,
        )
        .unwrap();
        run(&ctx, &grad);
        run(&ctx, &adj);
        let g = gb.read(&ctx).unwrap();
        let d = db.read(&ctx).unwrap();
        let reference = gradient_f64(&u, shape);
        let err = g
            .iter()
            .zip(&reference)
            .map(|(a, b)| (*a as f64 - b).abs())
            .fold(
                0.0,
                |m: f64, e| if e.is_nan() { f64::NAN } else { m.max(e) },
            );
        assert!(err < 1e-6, "gradient error {err:e}");
        // <grad u, q> = <u, grad* q> for arbitrary q (q need not vanish at the last index).
        let lhs: f64 = reference.iter().zip(&q).map(|(a, b)| a * *b as f64).sum();
        let rhs: f64 = u.iter().zip(&d).map(|(a, b)| *a as f64 * *b as f64).sum();
        assert!(
            (lhs - rhs).abs() < 1e-5 * lhs.abs().max(1.0),
            "{lhs} vs {rhs}"
        );
    }

    #[test]
    fn combined_adjoint_input_and_gpu_coefficients() {
        // z = a grad*(x + b y + c w) + d z with a, b from coefficient slots.
        let ctx = ctx();
        let scalars = Scalars::new(&ctx, 3, 1).unwrap();
        scalars.set(&ctx, Slot(1), 0.5);
        scalars.set(&ctx, Slot(2), -2.0);
        let shape = [4, 3, 5];
        let v = 60;
        let (x, y, w, z0) = (
            random(3 * v, 3),
            random(3 * v, 4),
            random(3 * v, 5),
            random(v, 6),
        );
        let fields = [&x, &y, &w].map(|a| field(&ctx, a, 4));
        let zb = field(&ctx, &z0, 4);
        let op = VectorOp::new(
            &ctx,
            &scalars,
            None,
            None,
            Kernel::GradientAdjoint,
            [Some(&fields[0]), Some(&fields[1]), Some(&fields[2]), None],
            Target::Field(&zb),
            [
                Coef::times(3.0, Slot(1)),
                Coef::times(1.0, Slot(2)),
                Coef::fixed(0.25),
                Coef::fixed(1.0),
            ],
            shape,
        )
        .unwrap();
        run(&ctx, &op);
        let got = zb.read(&ctx).unwrap();
        // Reference: grad* q = -div q, via <grad e_i, q>.
        let q: Vec<f32> = (0..3 * v)
            .map(|i| x[i] - 2.0 * y[i] + 0.25 * w[i])
            .collect();
        for i in 0..v {
            let mut e = vec![0.0f32; v];
            e[i] = 1.0;
            let ge = gradient_f64(&e, shape);
            let adj: f64 = ge.iter().zip(&q).map(|(a, b)| a * *b as f64).sum();
            let expect = 1.5 * adj + z0[i] as f64;
            assert!(
                (got[i] as f64 - expect).abs() <= 1e-5,
                "voxel {i}: {} vs {expect}",
                got[i]
            );
        }
    }

    #[test]
    fn shrinkage_zeroes_small_vectors_and_shortens_large_ones() {
        let ctx = ctx();
        let scalars = Scalars::new(&ctx, 1, 1).unwrap();
        // Voxel 0: |v| = 0.5 <= tau = 1 -> 0. Voxel 1: |v| = 5 (3, 4, 0) -> (1 - 1/5) v.
        // Voxel 2: exactly tau -> 0.
        let x = [0.3f32, 0.4, 0.0, 3.0, 4.0, 0.0, 1.0, 0.0, 0.0];
        let y = [0.0f32; 9];
        let (xb, yb) = (field(&ctx, &x, 1), field(&ctx, &y, 1));
        let zb = Field::zeros(&ctx, "z", xb.layout()).unwrap();
        run(
            &ctx,
            &VectorOp::new(
                &ctx,
                &scalars,
                None,
                None,
                Kernel::Shrink,
                [Some(&xb), Some(&yb), None, None],
                Target::Field(&zb),
                [Coef::ONE, Coef::ONE, Coef::ZERO, Coef::ZERO],
                [1, 1, 3],
            )
            .unwrap(),
        );
        let z = zb.read(&ctx).unwrap();
        assert_eq!([z[0], z[1], z[2]], [0.0; 3]);
        assert!(
            (z[3] - 2.4).abs() < 1e-6 && (z[4] - 3.2).abs() < 1e-6 && z[5] == 0.0,
            "{z:?}"
        );
        assert_eq!([z[6], z[7], z[8]], [0.0; 3]);
    }

    #[test]
    fn reductions_match_f64_sums_and_do_not_depend_on_windows() {
        let n0 = 7;
        let plane = 3 * 1006;
        let n = n0 * plane;
        let x = random(n, 3);
        let y = random(n, 4);
        let expect: f64 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (*a as f64 + 0.5 * *b as f64) * *b as f64)
            .sum();
        let v = n / 3;
        let expect_iso: f64 = (0..v)
            .map(|i| {
                ((x[3 * i] as f64).powi(2)
                    + (x[3 * i + 1] as f64).powi(2)
                    + (x[3 * i + 2] as f64).powi(2))
                .sqrt()
            })
            .sum();
        let results = |ctx: &GpuContext| {
            let scalars = Scalars::new(ctx, 1, 2).unwrap();
            let (xb, yb) = (field(ctx, &x, n0), field(ctx, &y, n0));
            let dot = VectorOp::new(
                ctx,
                &scalars,
                None,
                None,
                Kernel::Dot,
                [Some(&xb), Some(&yb), Some(&yb), None],
                Target::Sum(SumSlot(0)),
                [Coef::ZERO, Coef::fixed(0.5), Coef::ZERO, Coef::ZERO],
                [n0, 1, plane],
            )
            .unwrap();
            let iso = VectorOp::new(
                ctx,
                &scalars,
                None,
                None,
                Kernel::IsoNorm,
                [Some(&xb), None, None, None],
                Target::Sum(SumSlot(1)),
                [Coef::ZERO; 4],
                [n0, 1, plane / 3],
            )
            .unwrap();
            let windows = dot.dispatches.len();
            run(ctx, &dot);
            run(ctx, &iso);
            let sums = scalars.read_sums(ctx).unwrap();
            (sums[0], sums[1], windows)
        };
        let whole = results(&ctx());
        // 16 KiB bindings: one plane (12 KiB) per window.
        let split = results(&ctx().with_max_binding_bytes(16384));
        assert!(
            split.2 > whole.2,
            "the cap must split the planes into windows"
        );
        assert!(
            (whole.0 - expect).abs() < 1e-6 * expect.abs().max(1.0),
            "{} vs {expect}",
            whole.0
        );
        assert!(
            (whole.1 - expect_iso).abs() < 1e-6 * expect_iso,
            "{} vs {expect_iso}",
            whole.1
        );
        assert_eq!(whole.0.to_bits(), split.0.to_bits());
        assert_eq!(whole.1.to_bits(), split.1.to_bits());
        let _ = sum;
    }

    #[test]
    fn double_word_finish_is_more_accurate_than_f32_and_two_dimensional_dispatches_agree() {
        // 1 + many tiny values: an f32 running sum loses them all; the finish keeps them.
        let n0 = 3;
        let plane = 256 * 300;
        let mut x = vec![1e-4f32; n0 * plane];
        x[0] = 1000.0;
        let ones = vec![1.0f32; n0 * plane];
        let expect: f64 = x.iter().map(|&a| a as f64).sum();
        let results = |ctx: &GpuContext| {
            let scalars = Scalars::new(ctx, 1, 1).unwrap();
            let (xb, ob) = (field(ctx, &x, n0), field(ctx, &ones, n0));
            let dot = VectorOp::new(
                ctx,
                &scalars,
                None,
                None,
                Kernel::Dot,
                [Some(&xb), None, Some(&ob), None],
                Target::Sum(SumSlot(0)),
                [Coef::ZERO; 4],
                [n0, 1, plane],
            )
            .unwrap();
            run(ctx, &dot);
            sum(ctx, &scalars, SumSlot(0))
        };
        let flat = results(&ctx());
        // 7 workgroups per dimension: 300 workgroups per plane become 7 x 43 = 301 (one
        // surplus per window), which must not write.
        let folded = results(&ctx().with_max_workgroups_per_dimension(7));
        assert!((flat - expect).abs() < 1e-7 * expect, "{flat} vs {expect}");
        assert_eq!(flat.to_bits(), folded.to_bits());
    }

    #[test]
    fn host_arrays_streamed_through_staging_give_the_bits_of_device_arrays() {
        use crate::array::Residency;
        let ctx = ctx();
        let shape = [6, 5, 7];
        let v = 210;
        let (u, q, q2, z0) = (
            random(v, 8),
            random(3 * v, 9),
            random(3 * v, 10),
            random(v, 11),
        );
        let results = |residency: Residency| {
            let scalars = Scalars::new(&ctx, 1, 3).unwrap();
            // Room for two planes of a 3-vector field: every window holds one plane and its halo.
            let staging = Arc::new(Staging::new(&ctx, 2 * 3 * 35).unwrap());
            let make = |values: &[f32], words: usize| {
                let layout = PlaneLayout {
                    planes: 6,
                    plane_words: words * 35,
                };
                let f = Field::new(&ctx, "test", layout, &residency).unwrap();
                f.write(&ctx, values).unwrap();
                f
            };
            let (uf, qf, q2f, zf) = (make(&u, 1), make(&q, 3), make(&q2, 3), make(&z0, 1));
            let gf = make(&vec![0.0; 3 * v], 3);
            let sf = make(&vec![0.0; 3 * v], 3);
            let op = |kernel, inputs, target, coefs| {
                VectorOp::new(
                    &ctx,
                    &scalars,
                    Some(&staging),
                    None,
                    kernel,
                    inputs,
                    target,
                    coefs,
                    shape,
                )
                .unwrap()
            };
            let ops = [
                op(
                    Kernel::Gradient,
                    [Some(&uf), None, None, None],
                    Target::Field(&gf),
                    [Coef::ONE, Coef::ZERO, Coef::ZERO, Coef::ZERO],
                ),
                op(
                    Kernel::GradientAdjoint,
                    [Some(&qf), Some(&q2f), Some(&gf), None],
                    Target::Field(&zf),
                    [
                        Coef::fixed(0.7),
                        Coef::fixed(0.5),
                        Coef::fixed(-1.0),
                        Coef::ONE,
                    ],
                ),
                op(
                    Kernel::Shrink,
                    [Some(&qf), Some(&gf), None, None],
                    Target::Field(&sf),
                    [Coef::fixed(0.3), Coef::fixed(2.0), Coef::ZERO, Coef::ZERO],
                ),
                op(
                    Kernel::Lincomb,
                    [Some(&zf), Some(&uf), None, None],
                    Target::Field(&uf.clone()),
                    [Coef::ZERO; 4],
                ),
                op(
                    Kernel::Dot,
                    [Some(&zf), None, Some(&zf), None],
                    Target::Sum(SumSlot(0)),
                    [Coef::ZERO; 4],
                ),
                op(
                    Kernel::IsoNorm,
                    [Some(&sf), None, None, None],
                    Target::Sum(SumSlot(1)),
                    [Coef::ZERO; 4],
                ),
            ];
            let mut rec = ctx.recorder("test");
            // The lincomb aliases its input u with its output: skip it (wgpu refuses the
            // aliasing on the device); it only checks that the builder accepts host arrays.
            for (i, o) in ops.iter().enumerate() {
                if i != 3 {
                    o.record(&ctx, &mut rec).unwrap();
                }
            }
            ctx.submit(rec).unwrap();
            ctx.complete_downloads().unwrap();
            let sums = scalars.read_sums(&ctx).unwrap();
            (
                gf.read(&ctx).unwrap(),
                zf.read(&ctx).unwrap(),
                sf.read(&ctx).unwrap(),
                sums[0].to_bits(),
                sums[1].to_bits(),
            )
        };
        let device = results(Residency::Device);
        let host = results(Residency::Host);
        let bits = |v: &Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&device.0), bits(&host.0), "gradient");
        assert_eq!(bits(&device.1), bits(&host.1), "gradient adjoint");
        assert_eq!(bits(&device.2), bits(&host.2), "shrink");
        assert_eq!((device.3, device.4), (host.3, host.4), "reductions");
        assert!(
            device.1.iter().zip(&z0).any(|(a, b)| a != b),
            "the adjoint ran"
        );
    }
}
