//! How stages reach whole arrays: block copies between a whole array (read or written through
//! windows that each fit one storage binding) and a stage's chunk-local buffer, and the centring
//! modulation of the per-projection 2D FFT.

use bytemuck::{Pod, Zeroable};

use super::chunk_program::{Step, View};
use super::OperatorError;
use crate::array::{BlockView, Coef, Field, Role, Scalars, Staging};
use crate::gpu::{Bound, BufferSlice, GpuBuffer, GpuContext, KernelSpec};
use crate::shaders;

pub(crate) const WORKGROUP: u32 = 64;

pub(crate) fn groups(threads: u64) -> u32 {
    threads.div_ceil(WORKGROUP as u64) as u32
}

/// The aligned binding that holds elements `[start, start + count)` of `buffer` (elements of
/// `elem_bytes` bytes), and the index of element `start` inside that binding.
pub(crate) fn window<'a>(
    ctx: &GpuContext,
    buffer: &'a GpuBuffer,
    elem_bytes: u64,
    start: u64,
    count: u64,
) -> (BufferSlice<'a>, u32) {
    let align = ctx.binding_alignment();
    let first = start * elem_bytes;
    let aligned = first / align * align;
    let size = (first + count * elem_bytes - aligned).min(buffer.bytes() - aligned);
    (
        BufferSlice {
            buffer,
            offset: aligned,
            size,
        },
        ((first - aligned) / elem_bytes) as u32,
    )
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct GpuView {
    offset: u32,
    s0: u32,
    s1: u32,
    s2: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct StageParams {
    whole: GpuView,
    local: GpuView,
    e0: u32,
    e1: u32,
    e2: u32,
    mode: u32,
    c: f32,
    slot: u32,
    accumulate: u32,
    pad: u32,
}

/// Where a stage reads its input from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// A complex array.
    Complex(&'a Field),
    /// A real array (imaginary parts 0).
    Real(&'a Field),
    /// The difference `a - b` of two complex arrays, formed on the fly.
    Difference(&'a Field, &'a Field),
}

/// Where a stage writes its output to.
#[derive(Debug, Clone, Copy)]
pub enum Sink<'a> {
    /// A complex array.
    Complex(&'a Field),
    /// A real array: `field = scale Re(output)`, plus the array's own values when `accumulate`.
    Real {
        field: &'a Field,
        scale: Coef,
        accumulate: bool,
    },
}

impl Source<'_> {
    /// Words per element of the whole array(s) read.
    pub(crate) fn words(&self) -> u64 {
        match self {
            Self::Real(_) => 1,
            _ => 2,
        }
    }

    pub(crate) fn field(&self) -> &Field {
        match self {
            Self::Complex(f) | Self::Real(f) | Self::Difference(f, _) => f,
        }
    }
}

impl Sink<'_> {
    /// Words per element of the whole array written.
    pub(crate) fn words(&self) -> u64 {
        match self {
            Self::Real { .. } => 1,
            Self::Complex(_) => 2,
        }
    }

    pub(crate) fn field(&self) -> &Field {
        match self {
            Self::Complex(f) | Self::Real { field: f, .. } => f,
        }
    }
}

/// The pieces of a block copy: ranges `[a, b)` of axis 0 whose span of the whole array fits one
/// binding, each with the span's first element and length.
fn pieces(
    ctx: &GpuContext,
    label: &str,
    words: u64,
    whole: View,
    extents: [u64; 3],
) -> Result<Vec<(u64, u64, u64, u64)>, OperatorError> {
    let limit = ctx.max_binding_bytes() / 4 / words;
    let align = (ctx.binding_alignment() / 4 / words).max(1);
    let inner = (extents[1] - 1) * whole.strides[1] + (extents[2] - 1) * whole.strides[2];
    let span = |a: u64, b: u64| {
        let lo = whole.offset + a * whole.strides[0];
        let hi = whole.offset + (b - 1) * whole.strides[0] + inner;
        (lo / align * align, hi + 1 - lo / align * align)
    };
    let mut out = Vec::new();
    let mut a = 0;
    while a < extents[0] {
        let mut b = a + 1;
        if span(a, b).1 > limit {
            return Err(OperatorError::TooLarge {
                what: format!("one slice of {label:?} in a block copy"),
                bytes: span(a, b).1 * 4 * words,
                limit: limit * 4 * words,
            });
        }
        while b < extents[0] && span(a, b + 1).1 <= limit {
            b += 1;
        }
        let (start, len) = span(a, b);
        out.push((a, b, start, len));
        a = b;
    }
    Ok(out)
}

fn gpu_view(v: &View, base: u64, first: u64) -> GpuView {
    GpuView {
        offset: (v.offset + first * v.strides[0]).wrapping_sub(base) as u32,
        s0: v.strides[0] as u32,
        s1: v.strides[1] as u32,
        s2: v.strides[2] as u32,
    }
}

fn slice(field: &Field, words: u64, start: u64, len: u64) -> BufferSlice<'_> {
    BufferSlice {
        buffer: field.buffer(),
        offset: start * words * 4,
        size: len * words * 4,
    }
}

/// The block `whole` of a host array as a contiguous upload, with the view kernels use on the
/// staging buffer it lands in.
fn staged(whole: View, extents: [u64; 3], words: u64) -> (BlockView, View) {
    (
        BlockView {
            offset: whole.offset,
            strides: whole.strides,
            extents,
            words,
        },
        View {
            offset: 0,
            strides: [extents[1] * extents[2], extents[2], 1],
        },
    )
}

/// Steps copying a block of `extents` from `source` (viewed through `whole`, in elements) into
/// the chunk-local complex buffer `local` (viewed through `local_view`): bound dispatches over
/// windows of device arrays, or uploads of host arrays' blocks into staging buffers first.
#[allow(clippy::too_many_arguments)]
pub(crate) fn stage_in(
    ctx: &GpuContext,
    staging: Option<&Staging>,
    source: Source<'_>,
    whole: View,
    local: &GpuBuffer,
    local_view: View,
    extents: [u64; 3],
    keep: &mut Vec<GpuBuffer>,
) -> Result<Vec<Step>, OperatorError> {
    let kernel = ctx.kernel(&KernelSpec {
        shader: &shaders::STAGE_IN,
        entry: "stage_in",
        overrides: vec![("WORKGROUP", WORKGROUP as f64)],
    })?;
    let words = source.words();
    let mode = match source {
        Source::Complex(_) => 0,
        Source::Real(_) => 1,
        Source::Difference(..) => 2,
    };
    let (first, second) = match source {
        Source::Difference(x, y) => (x, y),
        Source::Complex(x) | Source::Real(x) => (x, x),
    };
    let params = |whole: GpuView, local: GpuView, e0: u64| StageParams {
        whole,
        local,
        e0: e0 as u32,
        e1: extents[1] as u32,
        e2: extents[2] as u32,
        mode,
        c: 0.0,
        slot: 0,
        accumulate: 0,
        pad: 0,
    };
    let mut out = Vec::new();
    if first.device_buffer().is_none() || second.device_buffer().is_none() {
        if first.device_buffer().is_some() || second.device_buffer().is_some() {
            return Err(OperatorError::Unsupported(
                "the two arrays of a difference must both be on the device or both on the host",
            ));
        }
        let staging = staging.ok_or(OperatorError::Unsupported(
            "an array held on the host needs staging buffers",
        ))?;
        let (block, view) = staged(whole, extents, words);
        let need = block.len_words() as u64;
        if need > staging.words() as u64 {
            return Err(OperatorError::TooLarge {
                what: format!("a block of {:?} for a staging buffer", first.label()),
                bytes: need * 4,
                limit: staging.words() as u64 * 4,
            });
        }
        out.push(Step::Upload {
            field: first.clone(),
            role: Role::X,
            view: block,
        });
        let second_role = if second.same(first) { Role::X } else { Role::Y };
        if second_role == Role::Y {
            out.push(Step::Upload {
                field: second.clone(),
                role: Role::Y,
                view: block,
            });
        }
        let uniform = ctx.uniform(
            "stage in params",
            &params(
                gpu_view(&view, 0, 0),
                gpu_view(&local_view, 0, 0),
                extents[0],
            ),
        )?;
        let bound = kernel.bind(
            ctx,
            &[
                staging.buffer(Role::X).into(),
                staging.buffer(second_role).into(),
                local.into(),
                (&uniform).into(),
            ],
        )?;
        out.push(Step::Dispatch(
            bound,
            groups(extents.iter().product::<u64>()),
        ));
        keep.push(uniform);
        return Ok(out);
    }
    for (a, b, start, len) in pieces(ctx, first.label(), words, whole, extents)? {
        let uniform = ctx.uniform(
            "stage in params",
            &params(
                gpu_view(&whole, start, a),
                gpu_view(&local_view, 0, a),
                b - a,
            ),
        )?;
        let bound = kernel.bind(
            ctx,
            &[
                slice(first, words, start, len),
                slice(second, words, start, len),
                local.into(),
                (&uniform).into(),
            ],
        )?;
        out.push(Step::Dispatch(
            bound,
            groups((b - a) * extents[1] * extents[2]),
        ));
        keep.push(uniform);
    }
    Ok(out)
}

/// Steps copying the chunk-local complex result in `local` into a block of `sink`: bound
/// dispatches over windows of a device array, or, for a host array, into a staging buffer
/// (after uploading the block's current values when they are added to) and a download.
#[allow(clippy::too_many_arguments)]
pub(crate) fn stage_out(
    ctx: &GpuContext,
    scalars: &Scalars,
    staging: Option<&Staging>,
    local: &GpuBuffer,
    local_view: View,
    sink: Sink<'_>,
    whole: View,
    extents: [u64; 3],
    keep: &mut Vec<GpuBuffer>,
) -> Result<Vec<Step>, OperatorError> {
    let kernel = ctx.kernel(&KernelSpec {
        shader: &shaders::STAGE_OUT,
        entry: "stage_out",
        overrides: vec![("WORKGROUP", WORKGROUP as f64)],
    })?;
    let words = sink.words();
    let (mode, coef, accumulate) = match sink {
        Sink::Complex(_) => (0, Coef::ZERO, false),
        Sink::Real {
            scale, accumulate, ..
        } => (1, scale, accumulate),
    };
    let params = |whole: GpuView, local: GpuView, e0: u64| StageParams {
        whole,
        local,
        e0: e0 as u32,
        e1: extents[1] as u32,
        e2: extents[2] as u32,
        mode,
        c: coef.constant,
        slot: coef.slot.0,
        accumulate: accumulate as u32,
        pad: 0,
    };
    let field = sink.field();
    let mut out = Vec::new();
    if field.device_buffer().is_none() {
        let staging = staging.ok_or(OperatorError::Unsupported(
            "an array held on the host needs staging buffers",
        ))?;
        let (block, view) = staged(whole, extents, words);
        let need = block.len_words() as u64;
        if need > staging.words() as u64 {
            return Err(OperatorError::TooLarge {
                what: format!("a block of {:?} for a staging buffer", field.label()),
                bytes: need * 4,
                limit: staging.words() as u64 * 4,
            });
        }
        if accumulate {
            out.push(Step::Upload {
                field: field.clone(),
                role: Role::Out,
                view: block,
            });
        }
        let uniform = ctx.uniform(
            "stage out params",
            &params(
                gpu_view(&view, 0, 0),
                gpu_view(&local_view, 0, 0),
                extents[0],
            ),
        )?;
        let bound = kernel.bind(
            ctx,
            &[
                local.into(),
                staging.buffer(Role::Out).into(),
                scalars.coefficients().into(),
                (&uniform).into(),
            ],
        )?;
        out.push(Step::Dispatch(
            bound,
            groups(extents.iter().product::<u64>()),
        ));
        out.push(Step::Download {
            field: field.clone(),
            view: block,
        });
        keep.push(uniform);
        return Ok(out);
    }
    for (a, b, start, len) in pieces(ctx, field.label(), words, whole, extents)? {
        let uniform = ctx.uniform(
            "stage out params",
            &params(
                gpu_view(&whole, start, a),
                gpu_view(&local_view, 0, a),
                b - a,
            ),
        )?;
        let bound = kernel.bind(
            ctx,
            &[
                local.into(),
                slice(field, words, start, len),
                scalars.coefficients().into(),
                (&uniform).into(),
            ],
        )?;
        out.push(Step::Dispatch(
            bound,
            groups((b - a) * extents[1] * extents[2]),
        ));
        keep.push(uniform);
    }
    Ok(out)
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ModulateParams {
    first: u32,
    count: u32,
    offset: u32,
    height: u32,
    width: u32,
    scale: f32,
    angle0: u32,
    angles_vary: u32,
    conjugate: u32,
    pad: [u32; 3],
}

/// The per-projection phase a [`modulate`] dispatch applies: `columns[t][w] * rows[t][v]` (one
/// complex value per column and per row of each of `angles` projections, or of one that serves
/// them all when `angles` is 1), for the projections from `angle0` on, conjugated or not.
pub(crate) struct PhaseTables<'a> {
    pub columns: &'a GpuBuffer,
    pub rows: &'a GpuBuffer,
    pub angles: usize,
    pub angle0: usize,
    pub conjugate: bool,
}

/// A bound dispatch multiplying the whole chunk buffer `data` of `count` elements of
/// (height, width) projections by `scale * (-1)^(v + w) * phase(t, v, w)`.
pub(crate) fn modulate(
    ctx: &GpuContext,
    data: &GpuBuffer,
    [count, height, width]: [u64; 3],
    scale: f32,
    phase: &PhaseTables,
    keep: &mut Vec<GpuBuffer>,
) -> Result<(Bound, u32), OperatorError> {
    let kernel = ctx.kernel(&KernelSpec {
        shader: &shaders::MODULATE,
        entry: "modulate",
        overrides: vec![("WORKGROUP", WORKGROUP as f64)],
    })?;
    let params = ctx.uniform(
        "modulate params",
        &ModulateParams {
            first: 0,
            count: count as u32,
            offset: 0,
            height: height as u32,
            width: width as u32,
            scale,
            angle0: phase.angle0 as u32,
            angles_vary: u32::from(phase.angles > 1),
            conjugate: u32::from(phase.conjugate),
            pad: [0; 3],
        },
    )?;
    let bound = kernel.bind(
        ctx,
        &[
            data.into(),
            phase.columns.into(),
            phase.rows.into(),
            (&params).into(),
        ],
    )?;
    keep.push(params);
    Ok((bound, groups(count)))
}
