//! Bound vector kernels of the solver. Each call site is built once with its fields, its
//! coefficients (`constant * scalar slot`) and, for reductions, its partial sums and the slot of
//! its result, so a step of the solver only records dispatches: the same call site can be
//! recorded any number of times in one submission. This file holds the kernels and the building
//! of a call site; `site` lays out its windows and bindings, `record` records them.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use crate::array::{BlockView, Coef, Field, Role, Scalars, Staging, SumSlot};
use crate::distributed::team::Share;
use crate::gpu::GpuError;
use crate::gpu::{Bound, GpuBuffer, GpuContext, KernelSpec};
use crate::shaders;
use site::Site;

const WORKGROUP: u32 = shaders::SOLVER_VECTOR_WORKGROUP;
/// Units each invocation of a kernel over words covers (`UNITS_PER_INVOCATION` of
/// `shaders/solver/vector.wgsl`): a quarter of the workgroups, and of the barriers of a
/// reduction, of one unit per invocation.
const UNITS_PER_INVOCATION: usize = 4;

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

    /// Units one invocation covers: the linear combinations and the reductions loop over
    /// several, the stencils and shrinkage take one.
    fn units_per_invocation(self) -> usize {
        match self {
            Self::Lincomb | Self::Dot | Self::IsoNorm => UNITS_PER_INVOCATION,
            Self::Gradient | Self::GradientAdjoint | Self::Shrink => 1,
        }
    }

    /// Words of the arrays per element the kernel loads and stores: 4 (`vec4<f32>`) for the
    /// kernels over words when every plane, and the binding offset alignment `align` (words),
    /// is whole `vec4`s, 1 otherwise. It depends on the arrays' plane length and the device
    /// only, never on the windows, so the bits do not either.
    fn word_len(self, plane_words: impl IntoIterator<Item = usize>, align: u64) -> usize {
        let over_words = matches!(self, Self::Lincomb | Self::Dot);
        match over_words
            && align.is_multiple_of(4)
            && plane_words.into_iter().all(|w| w.is_multiple_of(4))
        {
            true => 4,
            false => 1,
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
    /// The planes a team member's share is made of whole chunks of ([`Field::home_chunk`]).
    chunk: usize,
    /// Whether the kernel reads planes beyond the ones it computes (the gradients).
    halo: bool,
}

/// The bit set of the terms a call site reads: bit `i` for coefficient `i` unless it is zero
/// (the `TERMS` override).
fn terms(coefs: &[Coef; 4]) -> u32 {
    coefs
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.is_zero())
        .map(|(i, _)| 1 << i)
        .sum()
}

/// `entry` of the module over words of `word_len` f32s, reading the `terms`.
fn vector_kernel(
    ctx: &GpuContext,
    word_len: usize,
    entry: &'static str,
    terms: u32,
) -> Result<std::sync::Arc<crate::gpu::Kernel>, GpuError> {
    let shader = match word_len {
        4 => &shaders::SOLVER_VECTOR_VEC4,
        _ => &shaders::SOLVER_VECTOR,
    };
    ctx.kernel(&KernelSpec {
        shader,
        entry,
        overrides: vec![
            ("WORKGROUP", WORKGROUP as f64),
            ("UNITS_PER_INVOCATION", UNITS_PER_INVOCATION as f64),
            ("TERMS", terms as f64),
        ],
    })
}

/// A kernel of the f32 module that reads no coefficients (the finish of a reduction).
fn finish_kernel(
    ctx: &GpuContext,
    entry: &'static str,
) -> Result<std::sync::Arc<crate::gpu::Kernel>, GpuError> {
    vector_kernel(ctx, 1, entry, 0)
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
        let align = (ctx.binding_alignment() / 4).max(1);
        let output = match target {
            Target::Field(z) => Some(z),
            Target::Sum(_) => None,
        };
        let word_len = kernel.word_len(
            inputs
                .iter()
                .chain([&output])
                .flatten()
                .map(|f| f.layout().plane_words),
            align,
        );
        let plane_len = layout.plane_words / kernel.words()[0] / word_len;
        let site = Site {
            ctx,
            staging,
            kernel,
            inputs,
            target,
            coefs,
            shape,
            planes: layout.planes,
            plane_len,
            groups_per_plane: plane_len
                .div_ceil(WORKGROUP as usize * kernel.units_per_invocation()),
            word_len,
            align,
        };
        let (planes, groups_per_plane) = (site.planes, site.groups_per_plane);
        let per_window = site.planes_per_window()?;
        let main = vector_kernel(ctx, word_len, kernel.entry(), terms(&coefs))?;
        // A reduction's partial sums hold one window's planes: each window's plane sums are
        // formed right after it, so a streamed array's reduction holds 1/1024 of a window, not
        // of the array (at 2048^3, 0.1 GiB per call site). Whole vec4s: the vec4 module binds
        // them as its output.
        let reduction = match target {
            Target::Sum(_) => Some((
                ctx.storage_buffer(
                    "partial sums",
                    (per_window * groups_per_plane).next_multiple_of(4) as u64 * 4,
                )?,
                ctx.storage_buffer("plane sums", 8 * planes as u64)?,
                finish_kernel(ctx, "plane_sums")?,
            )),
            Target::Field(_) => None,
        };
        let dummy = scalars.coefficients();
        let partials = reduction.as_ref().map(|(partials, ..)| partials);
        let base = site.base_params();
        let mut dispatches = Vec::new();
        // A team member's planes: its share of the chunks its arrays' homes are made of.
        let chunk = first.home_chunk();
        let own = share.map_or(0..planes, |s| s.chunk_range_of(s.index, planes, chunk));
        let mut a = own.start;
        while a < own.end {
            let e = own.end.min(a + per_window);
            dispatches.push(site.window(&main, dummy, partials, base, [a, e])?);
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
            chunk,
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
        let bound = finish_kernel(ctx, "total")?.bind(
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
}

mod record;
mod site;

#[cfg(test)]
mod tests;
