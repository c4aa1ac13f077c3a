//! The normal operator `Re A*A` without gridding: a Toeplitz convolution applied as one
//! zero-padded FFT convolution on the doubled grid (Fessler et al., "Toeplitz-based iterative
//! image reconstruction", IEEE TSP 2005; docs/operator-method.md, "Normal operator by Toeplitz
//! embedding").
//!
//! `A u[k] = c Σ_y u[y] e^{-2πi k·y}` over the sample frequencies k of the scan (no phase: the
//! rotation axis and the volume's offset act in stage F), so
//! `A*A u[x] = Σ_y h(x - y) u[y]` with `h(d) = c² Σ_k e^{2πi k·d}`, `d ∈ [-(n-1), n-1]` per axis,
//! fixed by the frequencies alone. For a real u, `Re A*A u = (Re h) * u`, and `Re h` is real and
//! even, so its spectrum on the doubled grid is real. The kernel is computed once per geometry by
//! lamino's own adjoint gridding of unit weights onto the doubled volume (`A*` of a geometry
//! whose volume is `(2n0, 2n1, 2n2)`, the same detector and angles, so the same frequencies,
//! clamped as A clamps them), then its FFT. An application pads the volume into the corner of
//! the doubled grid, transforms it, multiplies by the spectrum, transforms back and crops. The
//! grid is real, so the last axis is transformed as complex lines of half the length (two reals
//! per element) and split into the real line's `a2 + 1` frequencies (`shaders/operator/
//! toeplitz.wgsl`): the complex grid is `(2 a0, 2 a1, a2 + 1)`, 32 bytes per voxel, and the
//! spectrum (real) 16. The transforms skip the lines that are zero on the way in and not needed
//! on the way out (forward along the last axis only the volume's lines, along the middle axis
//! only its planes; the inverse in the reverse order).
//!
//! The kernel, the pads and the multiplication have no sums across elements, and the FFTs have a
//! fixed order: the same input gives the same bits.

use std::sync::Arc;

use num_complex::Complex32;

use super::{Apply, LaminoOperator, OperatorError, OperatorOptions};
use crate::fft::{
    reserve_workspace, workspace_slot_bytes, BatchDim, Direction, FftDescriptor, FftPlan,
    FftPlan1d, Layout, Normalization, Strategy,
};
use crate::geometry::Geometry;
use crate::gpu::{Bound, GpuBuffer, GpuContext, Kernel, KernelSpec, Recorder};
use crate::shaders;

/// Invocations per workgroup of the element-wise kernels (256: a quarter less time than 64 for
/// the multiplication at 128^3 on lavapipe) and of the pad's, one workgroup per grid line (64:
/// a line holds about half the volume's width).
const WORKGROUP: u32 = 256;
const PAD_WORKGROUP: u32 = 64;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ToeplitzParams {
    a0: u32,
    a1: u32,
    a2: u32,
    count: u32,
    pitch: u32,
    pad: [u32; 3],
}

/// `Re A*A` of one geometry as a convolution on the doubled grid, for volumes stored in one
/// order of their axes; built once, bound to input and output arrays by
/// [`application`](Self::application).
pub struct ToeplitzNormal {
    /// The volume's axes as stored: `(n0, n1, n2)`, or `(n1, n0, n2)` for arrays stored with
    /// their first two axes swapped (the solver's).
    shape: [usize; 3],
    /// The kernel's real spectrum on the grid, scaled by the inverse FFT's `1/(8 n³)`.
    spectrum: GpuBuffer,
    /// The doubled grid the convolution runs on: `(2 a0, 2 a1, a2 + 1)` complex.
    grid: GpuBuffer,
    /// `e^{-i pi k / a2}`, `k = 0 ..= a2/2`.
    twiddles: GpuBuffer,
    /// A binding for the kernels' unused read-write slot.
    placeholder: GpuBuffer,
    /// The pad's count: the volume's lines, a workgroup each.
    line_params: GpuBuffer,
    volume_params: GpuBuffer,
    split: Bound,
    multiply: Bound,
    merge: Bound,
    forward: Vec<FftPlan1d>,
    inverse: Vec<FftPlan1d>,
}

/// [`ToeplitzNormal`] bound to one input and one output array.
pub struct ToeplitzApplication {
    pad: Bound,
    crop: Bound,
}

/// Complex elements of the grid of a volume of stored axes `a`: `(2 a0, 2 a1, a2 + 1)`.
fn grid_len(a: [usize; 3]) -> u64 {
    4 * a[0] as u64 * a[1] as u64 * (a[2] as u64 + 1)
}

/// Bytes of device memory the normal operator of a volume of stored axes `a` holds: the
/// complex grid (about 32 bytes per voxel) and the real spectrum (16).
pub fn toeplitz_device_bytes(a: [usize; 3]) -> u64 {
    grid_len(a) * (8 + 4)
}

/// Bytes of the doubled grid the kernel's transform binds whole (complex, 64 bytes per voxel of
/// `g`; the convolution's own grid is half of it), and the largest binding it may take on
/// `ctx`: the device's, at most `u32::MAX` bytes. A binding of `max_binding` bytes (the planned
/// GPU's for a plan on paper) is what [`ToeplitzNormal::new`] checks too.
pub fn toeplitz_binding(g: &Geometry, max_binding: u64) -> (u64, u64) {
    (g.volume_len() as u64 * 64, max_binding.min(u32::MAX as u64))
}

/// The volume's axes of `g` as its arrays store them: `(n1, n0, n2)` with the first two swapped
/// (the solver's), else `(n0, n1, n2)`.
fn stored_axes(g: &Geometry, axes_swapped: bool) -> [usize; 3] {
    if axes_swapped {
        [g.n1, g.n0, g.n2]
    } else {
        [g.n0, g.n1, g.n2]
    }
}

/// The FFT workspace slots the pruned transforms of a volume of stored axes `a` need.
fn pruned_workspace(ctx: &GpuContext, a: [usize; 3]) -> [u64; 2] {
    crate::fft::max_slots(
        pruned_axes(a).iter().map(|(len, layout)| {
            workspace_slot_bytes(ctx, *len, layout.batch_count(), Strategy::Auto)
        }),
    )
}

/// The FFT workspace slots the kernel's transform of the whole doubled grid `b` needs.
fn kernel_workspace(ctx: &GpuContext, b: [usize; 3]) -> [u64; 2] {
    let len: usize = b.iter().product();
    crate::fft::max_slots(b.map(|n| workspace_slot_bytes(ctx, n, (len / n) as u64, Strategy::Auto)))
}

/// Device bytes building the normal operator of `g` (its arrays stored with the first two axes
/// swapped when `axes_swapped`) holds beyond its grid and spectrum: the FFT workspace of its
/// transforms (a pool the context keeps and shares with other plans, counted whole here) and
/// the staging buffer the kernel's sums and spectrum are read back through (the context keeps
/// it for later reads).
pub fn toeplitz_setup_bytes(ctx: &GpuContext, g: &Geometry, axes_swapped: bool) -> u64 {
    let shape = stored_axes(g, axes_swapped);
    let b = shape.map(|n| 2 * n);
    let slots = crate::fft::max_slots([pruned_workspace(ctx, shape), kernel_workspace(ctx, b)]);
    let doubled_bytes = 8 * b.iter().map(|&n| n as u64).product::<u64>();
    slots[0] + slots[1] + crate::gpu::read_staging_bytes(doubled_bytes)
}

fn kernel(ctx: &GpuContext, entry: &'static str) -> Result<Arc<Kernel>, OperatorError> {
    let workgroup = match entry {
        "toeplitz_pad" => PAD_WORKGROUP,
        _ => WORKGROUP,
    };
    Ok(ctx.kernel(&KernelSpec {
        shader: &shaders::TOEPLITZ,
        entry,
        overrides: vec![("WORKGROUP", workgroup as f64)],
    })?)
}

/// The grid's transforms of one direction, in order, the pruned lines left out: along the last
/// axis (half length, complex) the volume's lines, along the first axis the lines of the
/// volume's rows, along the middle axis every line; the inverse runs them in the reverse order.
fn pruned_axes(a: [usize; 3]) -> [(usize, Layout); 3] {
    let pitch = a[2] as u64 + 1;
    let plane = 2 * a[1] as u64 * pitch;
    let along_last = Layout {
        offset: 0,
        stride: 1,
        batch: vec![
            BatchDim {
                count: a[1] as u64,
                dist: pitch,
            },
            BatchDim {
                count: a[0] as u64,
                dist: plane,
            },
        ],
    };
    // The first axis, strided by a plane, is the costly one to cache: it runs second, on the
    // lines of the volume's rows of the middle axis only (half of them).
    let along_first = Layout {
        offset: 0,
        stride: plane,
        batch: vec![
            BatchDim {
                count: pitch,
                dist: 1,
            },
            BatchDim {
                count: a[1] as u64,
                dist: pitch,
            },
        ],
    };
    let along_middle = Layout {
        offset: 0,
        stride: pitch,
        batch: vec![
            BatchDim {
                count: pitch,
                dist: 1,
            },
            BatchDim {
                count: 2 * a[0] as u64,
                dist: plane,
            },
        ],
    };
    [
        (a[2], along_last),
        (2 * a[0], along_first),
        (2 * a[1], along_middle),
    ]
}

impl ToeplitzNormal {
    /// Computes the kernel of `geometry` (on an operator of the doubled volume, built with
    /// `options` and dropped again) and builds the convolution for volumes stored with their
    /// first two axes swapped or not.
    pub fn new(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
        axes_swapped: bool,
    ) -> Result<Self, OperatorError> {
        geometry.validate()?;
        let g = geometry;
        let shape = stored_axes(g, axes_swapped);
        let voxels = g.volume_len() as u64;
        let (full_bytes, limit) = toeplitz_binding(g, ctx.device_max_binding_bytes());
        if full_bytes > limit {
            return Err(OperatorError::TooLarge {
                what: format!(
                    "the normal operator's doubled grid ({}, {}, {}) complex64",
                    2 * shape[0],
                    2 * shape[1],
                    2 * shape[2]
                ),
                bytes: full_bytes,
                limit,
            });
        }
        let spectrum_values = kernel_spectrum(ctx, g, options, shape, axes_swapped)?;
        let spectrum = ctx.upload("toeplitz spectrum", &spectrum_values)?;
        let grid = ctx.storage_buffer("toeplitz grid", grid_len(shape) * 8)?;
        let half = shape[2] / 2;
        let twiddles: Vec<[f32; 2]> = (0..=half)
            .map(|k| {
                let angle = -std::f64::consts::PI * k as f64 / shape[2] as f64;
                [angle.cos() as f32, angle.sin() as f32]
            })
            .collect();
        let twiddles = ctx.upload("toeplitz twiddles", &twiddles)?;
        let placeholder = ctx.storage_buffer("toeplitz placeholder", 4)?;
        let params = |count: u64| ToeplitzParams {
            a0: shape[0] as u32,
            a1: shape[1] as u32,
            a2: shape[2] as u32,
            count: count as u32,
            pitch: shape[2] as u32 + 1,
            pad: [0; 3],
        };
        let lines = (shape[0] * shape[1]) as u64;
        let grid_params = &ctx.uniform("toeplitz grid params", &params(grid_len(shape)))?;
        let line_params = ctx.uniform("toeplitz line params", &params(lines))?;
        let pair_params =
            &ctx.uniform("toeplitz pair params", &params(lines * (half as u64 + 1)))?;
        let volume_params = ctx.uniform("toeplitz volume params", &params(voxels))?;
        let on_grid = |entry, params: &GpuBuffer| -> Result<Bound, OperatorError> {
            Ok(kernel(ctx, entry)?.bind(
                ctx,
                &[
                    (&spectrum).into(),
                    (&grid).into(),
                    (&spectrum).into(),
                    (&placeholder).into(),
                    (&twiddles).into(),
                    params.into(),
                ],
            )?)
        };
        let split = on_grid("toeplitz_split", pair_params)?;
        let multiply = on_grid("toeplitz_multiply", grid_params)?;
        let merge = on_grid("toeplitz_merge", pair_params)?;
        let axes = pruned_axes(shape);
        reserve_workspace(ctx, pruned_workspace(ctx, shape))?;
        let plan = |(len, layout): &(usize, Layout), direction| {
            let desc = FftDescriptor {
                len: *len,
                layout: layout.clone(),
                direction,
                normalization: Normalization::None,
            };
            FftPlan1d::specialized(ctx, desc, &grid)
        };
        let forward = axes
            .iter()
            .map(|a| plan(a, Direction::Forward))
            .collect::<Result<Vec<_>, _>>()?;
        let inverse = axes
            .iter()
            .rev()
            .map(|a| plan(a, Direction::Inverse))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            shape,
            spectrum,
            grid,
            twiddles,
            placeholder,
            line_params,
            volume_params,
            split,
            multiply,
            merge,
            forward,
            inverse,
        })
    }

    /// The volume's axes as the bound arrays store them.
    pub fn shape(&self) -> [usize; 3] {
        self.shape
    }

    /// Bytes of device memory held: the grid, the spectrum and the FFT plans' tables.
    pub fn device_bytes(&self) -> u64 {
        self.grid.bytes()
            + self.spectrum.bytes()
            + self
                .forward
                .iter()
                .chain(&self.inverse)
                .map(FftPlan1d::device_bytes)
                .sum::<u64>()
    }

    /// Binds the convolution to read the real volume in `input` and write `Re A*A` of it into
    /// `output` (both `shape()` f32, distinct buffers).
    pub fn application(
        &self,
        ctx: &GpuContext,
        input: &GpuBuffer,
        output: &GpuBuffer,
    ) -> Result<ToeplitzApplication, OperatorError> {
        let bytes = self.shape.iter().product::<usize>() as u64 * 4;
        for (what, b) in [("input", input), ("output", output)] {
            if b.bytes() < bytes {
                return Err(OperatorError::ShapeMismatch {
                    what: format!("the normal operator's {what} {:?}", b.label()),
                    expected: self.shape.to_vec(),
                    got: vec![b.bytes() as usize / 4],
                });
            }
        }
        let bind = |entry, volume: &GpuBuffer, result: &GpuBuffer, params: &GpuBuffer| {
            Ok::<_, OperatorError>(kernel(ctx, entry)?.bind(
                ctx,
                &[
                    volume.into(),
                    (&self.grid).into(),
                    (&self.spectrum).into(),
                    result.into(),
                    (&self.twiddles).into(),
                    params.into(),
                ],
            )?)
        };
        Ok(ToeplitzApplication {
            pad: bind("toeplitz_pad", input, &self.placeholder, &self.line_params)?,
            crop: bind("toeplitz_crop", &self.spectrum, output, &self.volume_params)?,
        })
    }

    /// Records `output = Re A*A input` for `application`'s arrays.
    pub fn record(&self, rec: &mut Recorder, application: &ToeplitzApplication) {
        let a = self.shape;
        let groups = |count: u64| count.div_ceil(WORKGROUP as u64) as u32;
        let grid = groups(grid_len(a));
        let pairs = groups((a[0] * a[1]) as u64 * (a[2] as u64 / 2 + 1));
        let [last, forward @ ..] = &self.forward[..] else {
            unreachable!("three axes")
        };
        // Zero where the transforms read and the volume is not: of every first-axis plane
        // within the volume its second half of rows, and every plane beyond the volume whole.
        // The inverse leaves them written, so every application clears them again.
        let line_bytes = (a[2] as u64 + 1) * 8;
        let half_plane = a[1] as u64 * line_bytes;
        for i0 in 0..a[0] as u64 {
            rec.clear(&self.grid, (2 * i0 + 1) * half_plane, half_plane);
        }
        let beyond = 2 * a[0] as u64 * half_plane;
        rec.clear(&self.grid, beyond, self.grid.bytes() - beyond);
        rec.dispatch(&application.pad, (a[0] * a[1]) as u32);
        last.record(rec);
        rec.dispatch(&self.split, pairs);
        forward.iter().for_each(|plan| plan.record(rec));
        rec.dispatch(&self.multiply, grid);
        let [inverse @ .., last] = &self.inverse[..] else {
            unreachable!("three axes")
        };
        inverse.iter().for_each(|plan| plan.record(rec));
        rec.dispatch(&self.merge, pairs);
        last.record(rec);
        rec.dispatch(
            &application.crop,
            groups(a.iter().product::<usize>() as u64),
        );
    }

    /// `Re A*A` of a real volume stored in `shape()` order, through the device (tests, benchmarks).
    pub fn apply_host(&self, ctx: &GpuContext, volume: &[f32]) -> Result<Vec<f32>, OperatorError> {
        let expected = self.shape.iter().product::<usize>();
        if volume.len() != expected {
            return Err(OperatorError::ShapeMismatch {
                what: "the normal operator's input".into(),
                expected: self.shape.to_vec(),
                got: vec![volume.len()],
            });
        }
        let input = ctx.upload("toeplitz input", volume)?;
        let output = ctx.storage_buffer("toeplitz output", expected as u64 * 4)?;
        let application = self.application(ctx, &input, &output)?;
        let mut rec = ctx.recorder("toeplitz");
        self.record(&mut rec, &application);
        ctx.submit_and_wait(rec)?;
        Ok(ctx.read(&output, 0, expected)?)
    }
}

/// `g` with a volume twice as large along every axis: the same detector, angles and tilt, so
/// the same sample frequencies. `A*` of unit weights on it is the kernel.
pub fn doubled_volume(g: &Geometry) -> Geometry {
    Geometry {
        n0: 2 * g.n0,
        n1: 2 * g.n1,
        n2: 2 * g.n2,
        ..g.clone()
    }
}

/// The kernel's real spectrum on the grid of the stored axes `shape` (the `a2 + 1` non-negative
/// frequencies of the last axis), divided by the inverse FFT's length: `A*` of unit weights on
/// the doubled volume is `c Σ_k e^{2πi k·j'}` at its centred index `j'`, so the kernel at
/// difference d is its real part at `j' = d`, scaled from the doubled operator's
/// `1/sqrt(2 n2 ntheta)` to this one's `1/(n2 ntheta)`; rolled so that difference 0 is element
/// 0; transformed on the device.
fn kernel_spectrum(
    ctx: &GpuContext,
    g: &Geometry,
    options: &OperatorOptions,
    shape: [usize; 3],
    axes_swapped: bool,
) -> Result<Vec<f32>, OperatorError> {
    let doubled = doubled_volume(g);
    let sums = {
        let op = LaminoOperator::new(ctx, &doubled, options)?;
        let data_shape = Apply::FourierAdjoint.spaces().0.shape(&doubled);
        let ones = vec![Complex32::new(1.0, 0.0); data_shape.iter().product()];
        op.apply_host(ctx, Apply::FourierAdjoint, &data_shape, &ones)?
    };
    let scale = (2.0 / (g.n2 * g.ntheta()) as f64).sqrt();
    let b = shape.map(|n| 2 * n);
    // Stored axis i of the doubled grid is volume axis `volume_axis[i]` (z, y, x = 0, 1, 2).
    let volume_axis = if axes_swapped { [1, 0, 2] } else { [0, 1, 2] };
    let d = [doubled.n0, doubled.n1, doubled.n2];
    let mut rolled = vec![Complex32::new(0.0, 0.0); b.iter().product()];
    for (e, value) in rolled.iter_mut().enumerate() {
        let stored = [e / (b[1] * b[2]), e / b[2] % b[1], e % b[2]];
        let mut j = [0usize; 3];
        for (i, &axis) in volume_axis.iter().enumerate() {
            // Difference `stored[i]` (mod 2n) is the centred index j' = it, at j' + n.
            j[axis] = (stored[i] + d[axis] / 2) % d[axis];
        }
        let h = sums[(j[0] * d[1] + j[1]) * d[2] + j[2]].re as f64 * scale;
        *value = Complex32::new(h as f32, 0.0);
    }
    let full = ctx.upload("toeplitz kernel", &rolled)?;
    reserve_workspace(ctx, kernel_workspace(ctx, b))?;
    FftPlan::new(ctx, &b, 3, Direction::Forward, Normalization::None, &full)?.execute(ctx)?;
    let spectrum: Vec<Complex32> = ctx.read(&full, 0, rolled.len())?;
    let inverse_length = 1.0 / rolled.len() as f64;
    let kept = shape[2] + 1;
    Ok((0..b[0] * b[1] * kept)
        .map(|e| {
            let (line, k) = (e / kept, e % kept);
            (spectrum[line * b[2] + k].re as f64 * inverse_length) as f32
        })
        .collect())
}
