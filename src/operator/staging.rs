//! Binding windows and block copies: how stages reach whole arrays (volume, spectrum, data) that
//! may be larger than one storage binding.

use bytemuck::{Pod, Zeroable};

use super::OperatorError;
use crate::gpu::{BindingKind, Bound, BufferSlice, GpuBuffer, GpuContext, KernelSpec};
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

/// A strided 3D view of a complex array: element (i0, i1, i2) at offset + i0 s0 + i1 s1 + i2 s2.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    pub offset: u64,
    pub strides: [u64; 3],
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
struct BlockParams {
    src: GpuView,
    dst: GpuView,
    e0: u32,
    e1: u32,
    e2: u32,
    pad: u32,
}

/// Which side of a block copy is the whole array (windowed); the other side is a chunk-local
/// buffer that always fits one binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whole {
    Source,
    Destination,
}

/// Bound dispatches that copy a block of `extents` between `whole` (the large array, axis 0 its
/// slowest axis) and the chunk-local `local`. The block is split along axis 0 so that each piece
/// of the whole array fits one binding.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_copy(
    ctx: &GpuContext,
    whole: &GpuBuffer,
    whole_view: View,
    local: &GpuBuffer,
    local_view: View,
    extents: [u64; 3],
    direction: Whole,
    keep: &mut Vec<GpuBuffer>,
) -> Result<Vec<(Bound, u32)>, OperatorError> {
    let kernel = ctx.kernel(&KernelSpec {
        shader: &shaders::COPY_BLOCK,
        entry: "copy_block",
        bindings: &[
            BindingKind::StorageRead,
            BindingKind::StorageReadWrite,
            BindingKind::Uniform,
        ],
        overrides: vec![("WORKGROUP", WORKGROUP as f64)],
    })?;
    let limit = ctx.max_binding_bytes() / 8;
    let align = (ctx.binding_alignment() / 8).max(1);
    let inner = (extents[1] - 1) * whole_view.strides[1] + (extents[2] - 1) * whole_view.strides[2];
    let span = |a: u64, b: u64| {
        let lo = whole_view.offset + a * whole_view.strides[0];
        let hi = whole_view.offset + (b - 1) * whole_view.strides[0] + inner;
        (lo / align * align, hi + 1 - lo / align * align)
    };
    let mut out = Vec::new();
    let mut a = 0;
    while a < extents[0] {
        let mut b = a + 1;
        if span(a, b).1 > limit {
            return Err(OperatorError::TooLarge {
                what: format!("one slice of {:?} in a block copy", whole.label()),
                bytes: span(a, b).1 * 8,
                limit: limit * 8,
            });
        }
        while b < extents[0] && span(a, b + 1).1 <= limit {
            b += 1;
        }
        let (start, len) = span(a, b);
        let gpu_view = |v: &View, base: u64, first: u64| GpuView {
            offset: (v.offset + first * v.strides[0]).wrapping_sub(base) as u32,
            s0: v.strides[0] as u32,
            s1: v.strides[1] as u32,
            s2: v.strides[2] as u32,
        };
        let whole_gpu = gpu_view(&whole_view, start, a);
        let local_gpu = gpu_view(&local_view, 0, a);
        let (src, dst) = match direction {
            Whole::Source => (whole_gpu, local_gpu),
            Whole::Destination => (local_gpu, whole_gpu),
        };
        let params = ctx.uniform(
            "block copy params",
            &BlockParams {
                src,
                dst,
                e0: (b - a) as u32,
                e1: extents[1] as u32,
                e2: extents[2] as u32,
                pad: 0,
            },
        )?;
        let whole_slice = BufferSlice {
            buffer: whole,
            offset: start * 8,
            size: len * 8,
        };
        let slices = match direction {
            Whole::Source => [whole_slice, local.into(), (&params).into()],
            Whole::Destination => [local.into(), whole_slice, (&params).into()],
        };
        let bound = kernel.bind(ctx, &slices)?;
        out.push((bound, groups((b - a) * extents[1] * extents[2])));
        keep.push(params);
        a = b;
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
    pad: [u32; 2],
}

/// Bound dispatches multiplying a (batch, height, width) array by `scale * (-1)^(v + w)`, in
/// windows that each fit one binding.
pub(crate) fn modulate(
    ctx: &GpuContext,
    data: &GpuBuffer,
    shape: [u64; 3],
    scale: f32,
    keep: &mut Vec<GpuBuffer>,
) -> Result<Vec<(Bound, u32)>, OperatorError> {
    let kernel = ctx.kernel(&KernelSpec {
        shader: &shaders::MODULATE,
        entry: "modulate",
        bindings: &[BindingKind::StorageReadWrite, BindingKind::Uniform],
        overrides: vec![("WORKGROUP", WORKGROUP as f64)],
    })?;
    let total = shape.iter().product::<u64>();
    let step = (ctx.max_binding_bytes() - ctx.binding_alignment()) / 8;
    let mut out = Vec::new();
    let mut first = 0;
    while first < total {
        let count = step.min(total - first);
        let (slice, offset) = window(ctx, data, 8, first, count);
        let params = ctx.uniform(
            "modulate params",
            &ModulateParams {
                first: (first % (shape[1] * shape[2])) as u32,
                count: count as u32,
                offset,
                height: shape[1] as u32,
                width: shape[2] as u32,
                scale,
                pad: [0; 2],
            },
        )?;
        out.push((kernel.bind(ctx, &[slice, (&params).into()])?, groups(count)));
        keep.push(params);
        first += count;
    }
    Ok(out)
}
