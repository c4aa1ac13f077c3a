//! Laying out one call site of a vector kernel: how many planes a window holds (storage
//! binding and staging limits), and the bindings, offsets and host transfers of each window.

use std::sync::Arc;

use super::{Dispatch, Kernel, Target, VectorParams};
use crate::array::{BlockView, Coef, Field, Role, Staging};
use crate::gpu::GpuError;
use crate::gpu::{BufferSlice, GpuBuffer, GpuContext};

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

/// What one call site binds in every window of its planes (the arguments of [`VectorOp::new`]
/// and what follows from them).
pub(super) struct Site<'a> {
    pub(super) ctx: &'a GpuContext,
    pub(super) staging: Option<&'a Arc<Staging>>,
    pub(super) kernel: Kernel,
    pub(super) inputs: [Option<&'a Field>; 4],
    pub(super) target: Target<'a>,
    pub(super) coefs: [Coef; 4],
    pub(super) shape: [usize; 3],
    /// Planes of every array.
    pub(super) planes: usize,
    /// Units (words, `vec4` words or 3-vectors) of x per plane.
    pub(super) plane_len: usize,
    pub(super) groups_per_plane: usize,
    /// f32 words per element of the kernel's arrays (4 in the vec4 module): offsets in
    /// `VectorParams` count elements.
    pub(super) word_len: usize,
    /// The storage binding offset alignment, in words.
    pub(super) align: u64,
}

impl Site<'_> {
    /// Planes per window: every binding (inputs with halo, the output or the partial sums) must
    /// fit one storage binding with room for alignment, and every block of a host array (with
    /// its halo) one staging buffer.
    pub(super) fn planes_per_window(&self) -> Result<usize, GpuError> {
        let (kernel, align) = (self.kernel, self.align);
        let (before, after) = kernel.halo();
        let limit = self.ctx.max_binding_bytes() / 4;
        let mut per_window = self.planes;
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
        for field in self.inputs.iter().flatten() {
            fit(field.layout().plane_words, before + after)?;
        }
        match self.target {
            Target::Field(z) => fit(z.layout().plane_words, 0)?,
            Target::Sum(_) => fit(self.groups_per_plane, 0)?,
        }
        // Blocks of host arrays (with their halos) must fit a staging buffer.
        let mut host_fields: Vec<&Field> = self
            .inputs
            .iter()
            .flatten()
            .filter(|f| f.device_buffer().is_none())
            .copied()
            .collect();
        if let Target::Field(z) = self.target {
            if z.device_buffer().is_none() {
                host_fields.push(z);
            }
        }
        if let Some(host) = host_fields.first() {
            let staging = self.staging.ok_or_else(|| GpuError::KernelLimit {
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
        Ok(per_window)
    }

    /// The parameters every window shares: sizes, shape and coefficients.
    pub(super) fn base_params(&self) -> VectorParams {
        let mut c = [0f32; 4];
        let mut s = [0u32; 4];
        for (i, coef) in self.coefs.iter().enumerate() {
            c[i] = coef.constant;
            s[i] = coef.slot.0;
        }
        VectorParams {
            plane_len: self.plane_len as u32,
            groups_per_plane: self.groups_per_plane as u32,
            n0: self.shape[0] as u32,
            n1: self.shape[1] as u32,
            n2: self.shape[2] as u32,
            c,
            s,
            ..Default::default()
        }
    }

    /// The dispatch of `main` over planes `[a, e)`, with `dummy` bound where nothing is read and
    /// a reduction's `partials` as its output.
    pub(super) fn window(
        &self,
        main: &Arc<crate::gpu::Kernel>,
        dummy: &GpuBuffer,
        partials: Option<&GpuBuffer>,
        base: VectorParams,
        [a, e]: [usize; 2],
    ) -> Result<Dispatch, GpuError> {
        let mut params = VectorParams {
            planes: (e - a) as u32,
            first_plane: a as u32,
            ..base
        };
        let (mut slices, mut uploads) = self.input_slices(dummy, [a, e], &mut params);
        let (output, download) = self.output_slice(partials, [a, e], &mut params, &mut uploads);
        slices.push(output);
        slices.push(dummy.into());
        let uniform = self.ctx.uniform("vector params", &params)?;
        slices.push((&uniform).into());
        let bound = main.bind(self.ctx, &slices)?;
        Ok(Dispatch {
            bound,
            groups: ((e - a) * self.groups_per_plane) as u32,
            uploads,
            download,
        })
    }

    /// The bindings of x, y, w, v for planes `[a, e)` and their halos (`dummy` for absent
    /// ones), with their word offsets written to `params`; and the blocks of host arrays to
    /// upload into staging buffers first.
    fn input_slices<'b>(
        &'b self,
        dummy: &'b GpuBuffer,
        [a, e]: [usize; 2],
        params: &mut VectorParams,
    ) -> (Vec<BufferSlice<'b>>, Vec<(Field, Role, BlockView)>) {
        let (before, after) = self.kernel.halo();
        let planes = self.planes;
        let mut slices = Vec::with_capacity(7);
        let mut offsets = [0u32; 4];
        let mut uploads: Vec<(Field, Role, BlockView)> = Vec::new();
        for (i, field) in self.inputs.iter().enumerate() {
            match field {
                Some(f) => {
                    assert_eq!(f.layout().planes, planes, "{} has other planes", f.label());
                    let lo = a.saturating_sub(before);
                    let hi = (e + after).min(planes);
                    let plane_words = f.layout().plane_words;
                    match (f.device_buffer(), self.staging) {
                        (Some(buffer), _) => {
                            let (slice, offset) =
                                planes_window(buffer, plane_words, [lo, hi, a], self.align);
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
        [params.ox, params.oy, params.ow, params.ov] = offsets.map(|o| o / self.word_len as u32);
        (slices, uploads)
    }

    /// The binding of the output for planes `[a, e)`: the kernel's z (its word offset written to
    /// `params`) or a reduction's `partials`. A block of a host z is downloaded after the
    /// dispatch (returned), and uploaded before it (into `uploads`) when the kernel reads it.
    fn output_slice<'b>(
        &'b self,
        partials: Option<&'b GpuBuffer>,
        [a, e]: [usize; 2],
        params: &mut VectorParams,
        uploads: &mut Vec<(Field, Role, BlockView)>,
    ) -> (BufferSlice<'b>, Option<(Field, BlockView)>) {
        match (self.target, partials) {
            (Target::Field(z), _) => match (z.device_buffer(), self.staging) {
                (Some(buffer), _) => {
                    let (slice, offset) =
                        planes_window(buffer, z.layout().plane_words, [a, e, a], self.align);
                    params.oz = offset / self.word_len as u32;
                    (slice, None)
                }
                (None, Some(staging)) => {
                    let view = BlockView::planes(a, e, z.layout().plane_words);
                    let out = staging.buffer(Role::Out);
                    if self.kernel.reads_output() && !self.coefs[3].is_zero() {
                        uploads.push((z.clone(), Role::Out, view));
                    }
                    params.oz = 0;
                    (out.into(), Some((z.clone(), view)))
                }
                (None, None) => unreachable!("checked above"),
            },
            (Target::Sum(_), Some(partials)) => (partials.into(), None),
            (Target::Sum(_), None) => unreachable!("reductions have partial sums"),
        }
    }
}
