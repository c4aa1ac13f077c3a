//! The correction `(I − D) / max(S, flat_min)`, clipped at 0 by default (docs/flatfield-method.md,
//! "Correction"): purely per
//! pixel, on the GPU in batches so that stacks of any length stream through a fixed amount of
//! device memory.

use bytemuck::{Pod, Zeroable};

use super::io::{StackReader, StackWriter};
use super::params::TransformParams;
use super::{Fields, FlatfieldError, Pixels, Stack};
use crate::gpu::{Bound, GpuBuffer, GpuContext, KernelSpec};
use crate::shaders;

const WORKGROUP: u32 = 256;
/// Device memory for one batch of images: large enough to keep the GPU busy, small enough for
/// any adapter's storage-binding limit.
const BATCH_BYTES: usize = 64 << 20;

/// Mirrors `TransformParams` in transform.wgsl.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Uniforms {
    count: u32,
    pixels: u32,
    flat_min: f32,
    clip: u32,
}

/// A transform plan: fields on the device and one batch buffer, built once per stack.
#[derive(Debug)]
pub struct TransformPlan<'a> {
    ctx: &'a GpuContext,
    params: TransformParams,
    height: usize,
    width: usize,
    pixels: usize,
    batch: usize,
    data: GpuBuffer,
    uniforms: GpuBuffer,
    bound: Bound,
    _fields: [GpuBuffer; 2],
}

impl<'a> TransformPlan<'a> {
    pub fn new(
        ctx: &'a GpuContext,
        fields: &Fields,
        params: &TransformParams,
    ) -> Result<Self, FlatfieldError> {
        params.validate()?;
        let pixels = fields.height * fields.width;
        let limit = (ctx.max_binding_bytes().min(ctx.max_buffer_bytes()) as usize).min(BATCH_BYTES);
        let batch = (limit / (pixels * 4)).max(1);
        let data = ctx.storage_buffer("transform batch", (batch * pixels * 4) as u64)?;
        let flat = ctx.upload("transform flat-field", &fields.flatfield)?;
        let dark = ctx.upload("transform dark-field", &fields.darkfield)?;
        let uniforms = ctx.uniform(
            "transform params",
            &Uniforms {
                count: 0,
                pixels: pixels as u32,
                flat_min: params.flat_min,
                clip: params.clip_negative as u32,
            },
        )?;
        let kernel = ctx.kernel(&KernelSpec {
            shader: &shaders::FLATFIELD_TRANSFORM,
            entry: "correct",
            overrides: vec![("WORKGROUP", WORKGROUP as f64)],
        })?;
        let bound = kernel.bind(
            ctx,
            &[
                (&data).into(),
                (&flat).into(),
                (&dark).into(),
                (&uniforms).into(),
            ],
        )?;
        Ok(Self {
            ctx,
            params: *params,
            height: fields.height,
            width: fields.width,
            pixels,
            batch,
            data,
            uniforms,
            bound,
            _fields: [flat, dark],
        })
    }

    /// Images per device batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Corrects up to [`batch`](Self::batch) images (concatenated) and returns them; more, or a
    /// partial image, is an error.
    pub fn apply(&self, images: &[f32]) -> Result<Vec<f32>, FlatfieldError> {
        if !images.len().is_multiple_of(self.pixels) || images.len() > self.batch * self.pixels {
            return Err(FlatfieldError::BufferSize {
                count: self.batch,
                height: self.height,
                width: self.width,
                expected: self.batch * self.pixels,
                found: images.len(),
            });
        }
        let count = images.len() as u32;
        self.ctx.write(&self.data, 0, images);
        self.ctx.write(
            &self.uniforms,
            0,
            &[Uniforms {
                count,
                pixels: self.pixels as u32,
                flat_min: self.params.flat_min,
                clip: self.params.clip_negative as u32,
            }],
        );
        let mut rec = self.ctx.recorder("flatfield transform");
        rec.dispatch(&self.bound, count.div_ceil(WORKGROUP));
        self.ctx.submit_and_wait(rec)?;
        Ok(self.ctx.read(&self.data, 0, images.len())?)
    }
}

fn check_sizes(fields: &Fields, height: usize, width: usize) -> Result<(), FlatfieldError> {
    if fields.height != height || fields.width != width {
        return Err(FlatfieldError::FieldsMismatch {
            fields_h: fields.height,
            fields_w: fields.width,
            height,
            width,
        });
    }
    Ok(())
}

/// Corrects an in-memory stack on the GPU; returns `N × H × W` f32 values.
pub fn transform(
    ctx: &GpuContext,
    stack: &Stack,
    fields: &Fields,
    params: &TransformParams,
) -> Result<Vec<f32>, FlatfieldError> {
    check_sizes(fields, stack.height(), stack.width())?;
    let plan = TransformPlan::new(ctx, fields, params)?;
    let mut out = Vec::with_capacity(stack.count() * stack.height() * stack.width());
    let mut batch = Vec::new();
    for i in 0..stack.count() {
        batch.extend(stack.image_f32(i));
        if (i + 1) % plan.batch() == 0 || i + 1 == stack.count() {
            out.extend(plan.apply(&batch)?);
            batch.clear();
        }
    }
    Ok(out)
}

/// The f64 CPU reference of [`transform`].
pub fn transform_cpu(stack: &Stack, fields: &Fields, params: &TransformParams) -> Vec<f32> {
    let mut out = Vec::with_capacity(stack.count() * stack.height() * stack.width());
    for i in 0..stack.count() {
        for (j, v) in stack.image_f32(i).into_iter().enumerate() {
            let s = (fields.flatfield[j] as f64).max(params.flat_min as f64);
            let mut c = (v as f64 - fields.darkfield[j] as f64) / s;
            if params.clip_negative {
                c = c.max(0.0);
            }
            out.push(c as f32);
        }
    }
    out
}

/// Fraction of pixels where the flat-field is below `flat_min` (the clamp is active there).
pub fn clamped_fraction(fields: &Fields, params: &TransformParams) -> f64 {
    let n = fields
        .flatfield
        .iter()
        .filter(|&&s| s < params.flat_min)
        .count();
    n as f64 / fields.flatfield.len().max(1) as f64
}

/// Streams a stack file through the transform into `output` (`.npy` or `.tif`), one device batch
/// at a time; `progress` gets the number of images done. `output` is written in place: give a
/// path staged in an [`crate::io::OutputSet`] (as `flatfield apply` does) for it to appear only
/// when complete.
pub fn transform_stream(
    ctx: &GpuContext,
    reader: &mut StackReader,
    fields: &Fields,
    params: &TransformParams,
    output: &std::path::Path,
    mut progress: impl FnMut(usize),
) -> Result<(), FlatfieldError> {
    let (n, h, w) = (reader.count(), reader.height(), reader.width());
    check_sizes(fields, h, w)?;
    let plan = TransformPlan::new(ctx, fields, params)?;
    let mut writer = StackWriter::create(output, n, h, w)?;
    let mut batch: Vec<f32> = Vec::with_capacity(plan.batch() * h * w);
    let mut done = 0;
    while let Some(image) = reader.next_image() {
        match image? {
            Pixels::U8(v) => batch.extend(v.iter().map(|&x| x as f32)),
            Pixels::U16(v) => batch.extend(v.iter().map(|&x| x as f32)),
            Pixels::F32(v) => batch.extend(v),
        }
        done += 1;
        if done % plan.batch() == 0 || done == n {
            let out = plan.apply(&batch)?;
            for img in out.chunks_exact(h * w) {
                writer.write_image(img)?;
            }
            batch.clear();
            progress(done);
        }
    }
    Ok(writer.finish()?)
}
