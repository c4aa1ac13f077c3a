//! The three orthogonal slices of a volume on the device, drawn into an application's textures
//! without a host round trip: a compute pass (`shaders/viewer/slices.wgsl`) writes the xy, xz
//! and yz slices at given indices into one buffer of 32-bit words (grey RGBA8 through a window,
//! or the values' bits), and copies of that buffer land in textures on the same device (see
//! [`GpuContext::from_wgpu`]). [`host_slice_words`] makes the same words on the host, for a
//! volume that is not on the device (and as the reference the pass is tested against).

use std::sync::{Arc, Mutex};

use bytemuck::{Pod, Zeroable};

use super::context::GpuContext;
use super::error::GpuError;
use super::kernel::{Kernel, KernelSpec};
use super::memory::GpuBuffer;
use super::readback::Completion;
use super::recorder::Recorder;
use crate::shaders;

/// Invocations per workgroup of the slice kernel.
const WORKGROUP: u32 = 256;

/// Words per output row are a multiple of this: wgpu copies a buffer into a texture in rows of
/// a multiple of 256 bytes.
const PITCH_WORDS: usize = 256 / 4;

/// Where a shown volume `(n0, n1, n2)` lies in the array that holds it: the solver's volume is
/// padded for the operator, and the shown part starts at `origin` inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeLayout {
    /// `(n0, n1, n2)` of the array that holds the volume.
    pub padded: [usize; 3],
    /// The first `(z, y, x)` of the shown volume in that array.
    pub origin: [usize; 3],
    /// `(n0, n1, n2)` of the shown volume.
    pub shape: [usize; 3],
    /// The array stores its first two axes swapped, `(n1, n0, n2)` (y slowest), as the solver
    /// keeps its volume; `padded` and `origin` still name `(z, y, x)`.
    pub axes_swapped: bool,
}

impl VolumeLayout {
    /// A volume that fills its array.
    pub fn whole(shape: [usize; 3]) -> Self {
        Self {
            padded: shape,
            origin: [0; 3],
            shape,
            axes_swapped: false,
        }
    }

    /// Where voxel `(z, y, x)` of the shown volume lies in the array.
    fn index(&self, z: usize, y: usize, x: usize) -> usize {
        let [p0, p1, p2] = self.padded;
        let [z, y, x] = [self.origin[0] + z, self.origin[1] + y, self.origin[2] + x];
        match self.axes_swapped {
            false => (z * p1 + y) * p2 + x,
            true => (y * p0 + z) * p2 + x,
        }
    }

    fn check(&self, at: [usize; 3]) -> Result<(), GpuError> {
        for axis in 0..3 {
            if self.origin[axis] + self.shape[axis] > self.padded[axis] || self.shape[axis] == 0 {
                return Err(GpuError::Slices(format!(
                    "a volume of {:?} at {:?} does not fit in an array of {:?}",
                    self.shape, self.origin, self.padded
                )));
            }
            if at[axis] >= self.shape[axis] {
                return Err(GpuError::Slices(format!(
                    "slice (z, y, x) = {at:?} is outside a volume of {:?}",
                    self.shape
                )));
            }
        }
        Ok(())
    }
}

/// A volume held in a device buffer (`f32`, z slowest, or y slowest where its layout says its
/// axes are swapped), as [`SlicePass::record`] reads it.
#[derive(Debug, Clone, Copy)]
pub struct DeviceVolume<'v> {
    pub buffer: &'v GpuBuffer,
    pub layout: VolumeLayout,
}

/// One of the three orthogonal slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceAxis {
    /// At a z index: rows y, columns x.
    Xy,
    /// At a y index: rows z, columns x.
    Xz,
    /// At an x index: rows z, columns y.
    Yz,
}

impl SliceAxis {
    pub const ALL: [SliceAxis; 3] = [SliceAxis::Xy, SliceAxis::Xz, SliceAxis::Yz];
}

/// What the pass writes for each voxel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SliceMode {
    /// Grey RGBA8 (one word, red in the low byte): `round((v - lo) * (255 / (hi - lo)))`, ties
    /// to even, clamped to 0..=255, in `f32`; non-finite values magenta, as the CLI's previews.
    Grey { lo: f32, hi: f32 },
    /// The values' bits (`f32::to_bits`).
    Values,
}

impl SliceMode {
    /// The window's `(lo, 255 / (hi - lo))`; refused unless `lo < hi`, both finite.
    fn window(&self) -> Result<[f32; 2], GpuError> {
        match *self {
            SliceMode::Values => Ok([0.0, 0.0]),
            SliceMode::Grey { lo, hi } => {
                let scale = 255.0 / (hi - lo);
                if lo < hi && scale.is_finite() {
                    Ok([lo, scale])
                } else {
                    Err(GpuError::Slices(format!(
                        "the grey window [{lo}, {hi}] is empty or not finite"
                    )))
                }
            }
        }
    }

    /// The word of value `v`.
    fn word(&self, [lo, scale]: [f32; 2], v: f32) -> u32 {
        match self {
            SliceMode::Values => v.to_bits(),
            SliceMode::Grey { .. } if !v.is_finite() => 0xffff_00ff,
            SliceMode::Grey { .. } => {
                let level = ((v - lo) * scale).round_ties_even().clamp(0.0, 255.0) as u32;
                level | (level << 8) | (level << 16) | (255 << 24)
            }
        }
    }
}

/// Where each slice lies in the output words: xy (n1 rows), then xz and yz (n0 rows each), every
/// row [`pitch`](Self::pitch) words, so that each slice can be copied into a texture as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceLayout {
    /// `(n0, n1, n2)` of the shown volume.
    pub shape: [usize; 3],
    /// Words per row: the widest slice's, rounded up to a multiple of 64 (256 bytes).
    pub pitch: usize,
}

impl SliceLayout {
    pub fn new(shape: [usize; 3]) -> Self {
        Self {
            shape,
            pitch: shape[1].max(shape[2]).max(1).div_ceil(PITCH_WORDS) * PITCH_WORDS,
        }
    }

    /// `(first word, width, height)` of `axis`'s slice.
    pub fn image(&self, axis: SliceAxis) -> (usize, usize, usize) {
        let [n0, n1, n2] = self.shape;
        match axis {
            SliceAxis::Xy => (0, n2, n1),
            SliceAxis::Xz => (n1 * self.pitch, n2, n0),
            SliceAxis::Yz => ((n1 + n0) * self.pitch, n1, n0),
        }
    }

    /// Words of all three slices.
    pub fn words(&self) -> usize {
        (self.shape[1] + 2 * self.shape[0]) * self.pitch
    }

    /// The `width x height` words of `axis`'s slice in `words` (row-major, pitch removed).
    pub fn slice(&self, words: &[u32], axis: SliceAxis) -> Vec<u32> {
        let (first, width, height) = self.image(axis);
        (0..height)
            .flat_map(|r| &words[first + r * self.pitch..first + r * self.pitch + width])
            .copied()
            .collect()
    }
}

/// The words [`SlicePass::record`] writes for the slices at `at` (z, y, x) of a volume held on
/// the host in `volume` (laid out as `layout` says): the same bits, computed on the host.
pub fn host_slice_words(
    volume: &[f32],
    layout: VolumeLayout,
    at: [usize; 3],
    mode: SliceMode,
) -> Result<Vec<u32>, GpuError> {
    layout.check(at)?;
    let window = mode.window()?;
    let [p0, p1, p2] = layout.padded;
    if volume.len() != p0 * p1 * p2 {
        return Err(GpuError::Slices(format!(
            "{} values given for an array of {:?}",
            volume.len(),
            layout.padded
        )));
    }
    let out = SliceLayout::new(layout.shape);
    let value = |z: usize, y: usize, x: usize| volume[layout.index(z, y, x)];
    let mut words = vec![0u32; out.words()];
    for axis in SliceAxis::ALL {
        let (first, width, height) = out.image(axis);
        for r in 0..height {
            for c in 0..width {
                let v = match axis {
                    SliceAxis::Xy => value(at[0], r, c),
                    SliceAxis::Xz => value(r, at[1], c),
                    SliceAxis::Yz => value(r, c, at[2]),
                };
                words[first + r * out.pitch + c] = mode.word(window, v);
            }
        }
    }
    Ok(words)
}

#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct SliceParams {
    padded: [u32; 4],
    origin: [u32; 4],
    shape: [u32; 4],
    at: [u32; 4],
    window: [f32; 4],
}

/// The values of three slices on their way to the host ([`SlicePass::download_values`]).
#[derive(Debug)]
pub struct PendingValues {
    slot: Arc<Mutex<Option<Vec<u32>>>>,
}

impl PendingValues {
    /// The words [`SliceMode::Values`] wrote (laid out as [`SlicePass::layout`] says). When a
    /// poll of the context's downloads has handed them over already, nothing waits; else the
    /// host waits for the submission that copies them (only for it: later work stays queued).
    pub fn wait(self, ctx: &GpuContext) -> Result<Vec<u32>, GpuError> {
        let landed = || self.slot.lock().is_ok_and(|s| s.is_some());
        ctx.wait_for_downloads_until(landed, || {
            "the slices' values were not handed over by their download".into()
        })?;
        let words = self.slot.lock().ok().and_then(|mut s| s.take());
        words.ok_or_else(|| {
            GpuError::Readback("the slices' values were lost: their lock was poisoned".into())
        })
    }
}

/// The slice pass of one shown volume shape, with its output buffer: record it after each outer
/// iteration (it queues behind the iteration's work, nothing waits), then copy the output into
/// the application's textures ([`copy_to_textures`](Self::copy_to_textures)) or read it
/// ([`read_words`](Self::read_words), which waits; [`download_values`](Self::download_values)
/// does not).
#[derive(Debug)]
pub struct SlicePass {
    kernel: Arc<Kernel>,
    layout: SliceLayout,
    out: GpuBuffer,
    params: GpuBuffer,
}

impl SlicePass {
    /// A pass for volumes of `shape` `(n0, n1, n2)`.
    pub fn new(ctx: &GpuContext, shape: [usize; 3]) -> Result<Self, GpuError> {
        let kernel = ctx.kernel(&KernelSpec {
            shader: &shaders::VIEWER_SLICES,
            entry: "slices",
            overrides: vec![("WORKGROUP", WORKGROUP as f64)],
        })?;
        let layout = SliceLayout::new(shape);
        Ok(Self {
            kernel,
            layout,
            out: ctx.storage_buffer("viewer slices", 4 * layout.words() as u64)?,
            params: ctx.uniform("viewer slice params", &SliceParams::zeroed())?,
        })
    }

    /// Where each slice lies in the output.
    pub fn layout(&self) -> SliceLayout {
        self.layout
    }

    /// Device bytes of the output and its parameters.
    pub fn device_bytes(&self) -> u64 {
        self.out.bytes() + self.params.bytes()
    }

    /// Queues the pass over `volume` for the slices at `at` (z, y, x of the shown volume).
    pub fn record(
        &self,
        ctx: &GpuContext,
        volume: DeviceVolume<'_>,
        at: [usize; 3],
        mode: SliceMode,
    ) -> Result<(), GpuError> {
        let mut rec = ctx.recorder("viewer slices");
        self.dispatch(ctx, &mut rec, volume, at, mode)?;
        ctx.submit(rec)
    }

    /// Queues the pass over `volume` for the values of the slices at `at`
    /// ([`SliceMode::Values`]) and their download to the host through the context's readback
    /// pool: nothing waits here. The words are handed over when the context next polls its
    /// downloads (a reconstruction does once per outer iteration); [`PendingValues::wait`] takes
    /// them. An application that must not stall its device's queue draws an iterate through a
    /// grey window made from the previous iterate's values and sends this one's on their way.
    pub fn download_values(
        &self,
        ctx: &GpuContext,
        volume: DeviceVolume<'_>,
        at: [usize; 3],
    ) -> Result<PendingValues, GpuError> {
        let mut rec = ctx.recorder("viewer slice values");
        self.dispatch(ctx, &mut rec, volume, at, SliceMode::Values)?;
        let slot: Arc<Mutex<Option<Vec<u32>>>> = Arc::default();
        let landed = Arc::clone(&slot);
        let done: Completion = Box::new(move |bytes: &[u8]| {
            let words = bytes
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            if let Ok(mut landed) = landed.lock() {
                *landed = Some(words);
            }
        });
        // The copy follows the dispatch in this submission: a pass recorded next (the grey
        // one) may overwrite the output without touching the values on their way.
        rec.download(ctx, &self.out, 0, 4 * self.layout.words() as u64, done)?;
        ctx.submit(rec)?;
        Ok(PendingValues { slot })
    }

    /// Checks the volume and the slices' position, writes the parameters (they land before the
    /// recording is submitted) and records the dispatch.
    fn dispatch(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        volume: DeviceVolume<'_>,
        at: [usize; 3],
        mode: SliceMode,
    ) -> Result<(), GpuError> {
        let layout = volume.layout;
        if layout.shape != self.layout.shape {
            return Err(GpuError::Slices(format!(
                "a pass for volumes of {:?} was given one of {:?}",
                self.layout.shape, layout.shape
            )));
        }
        layout.check(at)?;
        let needed = 4 * layout.padded.iter().product::<usize>() as u64;
        if volume.buffer.bytes() < needed {
            return Err(GpuError::Slices(format!(
                "buffer {:?} holds {} bytes, an array of {:?} needs {needed}",
                volume.buffer.label(),
                volume.buffer.bytes(),
                layout.padded
            )));
        }
        let [lo, scale] = mode.window()?;
        let u = |v: [usize; 3], w: usize| [v[0] as u32, v[1] as u32, v[2] as u32, w as u32];
        let params = SliceParams {
            padded: u(layout.padded, self.layout.pitch),
            origin: u(layout.origin, usize::from(layout.axes_swapped)),
            shape: u(layout.shape, self.layout.words()),
            at: u(at, usize::from(mode == SliceMode::Values)),
            window: [lo, scale, 0.0, 0.0],
        };
        ctx.write(&self.params, 0, &[params]);
        let bound = self.kernel.bind(
            ctx,
            &[
                volume.buffer.into(),
                (&self.out).into(),
                (&self.params).into(),
            ],
        )?;
        rec.dispatch(&bound, (self.layout.words() as u32).div_ceil(WORKGROUP));
        Ok(())
    }

    /// Puts words made on the host ([`host_slice_words`]) in the output, for a volume that is
    /// not on the device; they land before the next submission.
    pub fn upload_words(&self, ctx: &GpuContext, words: &[u32]) -> Result<(), GpuError> {
        if words.len() != self.layout.words() {
            return Err(GpuError::Slices(format!(
                "{} words given for an output of {}",
                words.len(),
                self.layout.words()
            )));
        }
        ctx.write(&self.out, 0, words);
        Ok(())
    }

    /// The output, read back to the host (waits for the pass).
    pub fn read_words(&self, ctx: &GpuContext) -> Result<Vec<u32>, GpuError> {
        ctx.read(&self.out, 0, self.layout.words())
    }

    /// Queues copies of the xy, xz and yz slices into `textures` (in that order): 2D textures of
    /// the slices' sizes with 4-byte texels (`Rgba8Unorm` or `Rgba8UnormSrgb` for grey, `R32Float`
    /// for values) and `COPY_DST` usage, on this context's device.
    pub fn copy_to_textures(
        &self,
        ctx: &GpuContext,
        textures: [&wgpu::Texture; 3],
    ) -> Result<(), GpuError> {
        let mut encoder = ctx
            .core
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("viewer slices to textures"),
            });
        for (axis, texture) in SliceAxis::ALL.into_iter().zip(textures) {
            let (first, width, height) = self.layout.image(axis);
            let size = texture.size();
            let texel = texture.format().block_copy_size(None);
            if [size.width, size.height, size.depth_or_array_layers]
                != [width as u32, height as u32, 1]
                || texel != Some(4)
                || !texture.usage().contains(wgpu::TextureUsages::COPY_DST)
            {
                return Err(GpuError::Slices(format!(
                    "the {axis:?} slice is {width} x {height} and needs a 2D texture of that \
                     size with 4-byte texels and COPY_DST usage; got {} x {} x {} {:?} ({:?})",
                    size.width,
                    size.height,
                    size.depth_or_array_layers,
                    texture.format(),
                    texture.usage()
                )));
            }
            encoder.copy_buffer_to_texture(
                wgpu::TexelCopyBufferInfo {
                    buffer: &self.out.buffer,
                    layout: wgpu::TexelCopyBufferLayout {
                        offset: 4 * first as u64,
                        bytes_per_row: Some(4 * self.layout.pitch as u32),
                        rows_per_image: Some(height as u32),
                    },
                },
                texture.as_image_copy(),
                size,
            );
        }
        ctx.core.queue.submit([encoder.finish()]);
        ctx.core.count_submission();
        ctx.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A texture the UI would draw a slice of `width` x `height` from.
    fn slice_texture(ctx: &GpuContext, width: u32, height: u32) -> wgpu::Texture {
        ctx.core.device.create_texture(&wgpu::TextureDescriptor {
            label: Some("slice"),
            size: wgpu::Extent3d {
                width,
                height,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::Rgba8Unorm,
            usage: wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::TEXTURE_BINDING,
            view_formats: &[],
        })
    }

    /// A padded array with distinct values, non-finite ones among them, and the layout of a
    /// shown volume inside it.
    fn volume() -> (Vec<f32>, VolumeLayout) {
        let layout = VolumeLayout {
            padded: [7, 9, 11],
            origin: [1, 2, 3],
            shape: [5, 6, 7],
            axes_swapped: false,
        };
        let n = layout.padded.iter().product::<usize>();
        let mut v: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.0173)
            .collect();
        v[((2 * 9) + 3) * 11 + 5] = f32::NAN;
        v[((3 * 9) + 4) * 11 + 4] = f32::INFINITY;
        (v, layout)
    }

    /// A context, [`volume`] on the host and on the device, and a pass for its shape.
    fn uploaded() -> (GpuContext, Vec<f32>, VolumeLayout, GpuBuffer, SlicePass) {
        let ctx = super::super::test_context();
        let (host, layout) = volume();
        let buffer = ctx.upload("volume", &host).unwrap();
        let pass = SlicePass::new(&ctx, layout.shape).unwrap();
        (ctx, host, layout, buffer, pass)
    }

    #[test]
    fn the_pass_copies_values_bit_for_bit_and_maps_the_window_as_the_host_does() {
        let (ctx, host, layout, buffer, pass) = uploaded();
        let device = DeviceVolume {
            buffer: &buffer,
            layout,
        };
        // Every slice index along each axis, so each voxel of the shown volume is drawn.
        for k in 0..7 {
            let at = [k.min(4), k.min(5), k];
            let values = SliceMode::Values;
            pass.record(&ctx, device, at, values).unwrap();
            let got = pass.read_words(&ctx).unwrap();
            let want = host_slice_words(&host, layout, at, values).unwrap();
            assert!(got == want, "values at {at:?}");
            // The window's edges fall on values of the volume: ties and clamping are exercised.
            let grey = SliceMode::Grey {
                lo: host[200],
                hi: host[100],
            };
            pass.record(&ctx, device, at, grey).unwrap();
            let got = pass.read_words(&ctx).unwrap();
            let want = host_slice_words(&host, layout, at, grey).unwrap();
            assert!(got == want, "grey at {at:?}");
        }
        // The same array stored by y row draws the same slices, on the device and the host.
        let [p0, p1, p2] = layout.padded;
        let mut by_row = vec![0.0; host.len()];
        for (i, v) in host.iter().enumerate() {
            let (z, y, x) = (i / (p1 * p2), i / p2 % p1, i % p2);
            by_row[(y * p0 + z) * p2 + x] = *v;
        }
        let swapped = VolumeLayout {
            axes_swapped: true,
            ..layout
        };
        let buffer = ctx.upload("volume by y row", &by_row).unwrap();
        let device = DeviceVolume {
            buffer: &buffer,
            layout: swapped,
        };
        for k in 0..7 {
            let at = [k.min(4), k.min(5), k];
            pass.record(&ctx, device, at, SliceMode::Values).unwrap();
            let got = pass.read_words(&ctx).unwrap();
            let want = host_slice_words(&host, layout, at, SliceMode::Values).unwrap();
            let host_swapped = host_slice_words(&by_row, swapped, at, SliceMode::Values).unwrap();
            assert!(got == want && host_swapped == want, "by y row at {at:?}");
        }
        // The host reference itself: the xz slice at y = 2 holds the voxels of its rows.
        let at = [0, 2, 0];
        let words = host_slice_words(&host, layout, at, SliceMode::Values).unwrap();
        let xz = SliceLayout::new(layout.shape).slice(&words, SliceAxis::Xz);
        let expect: Vec<u32> = (0..5)
            .flat_map(|z| (0..7).map(move |x| (z, x)))
            .map(|(z, x)| host[((1 + z) * 9 + 2 + 2) * 11 + 3 + x].to_bits())
            .collect();
        assert!(xz == expect);
        // Grey levels: the window's ends are black and white, a non-finite value magenta.
        let grey = SliceMode::Grey { lo: 1.0, hi: 2.0 };
        let w = grey.window().unwrap();
        assert_eq!(grey.word(w, 1.0), 0xff00_0000);
        assert_eq!(grey.word(w, 2.0), 0xffff_ffff);
        assert_eq!(grey.word(w, 1.5), 0xff80_8080);
        assert_eq!(grey.word(w, f32::NAN), 0xffff_00ff);
    }

    #[test]
    fn downloaded_values_equal_the_read_ones_and_the_draw_waits_for_nothing() {
        let (ctx, host, layout, buffer, pass) = uploaded();
        let device = DeviceVolume {
            buffer: &buffer,
            layout,
        };
        let grey = SliceMode::Grey {
            lo: host[200],
            hi: host[100],
        };
        ctx.wait().unwrap();
        let before = ctx.traffic();
        // A live draw: this iterate's values sent on their way, the grey slices drawn through
        // another window over the same output, copied into textures.
        let at = [1, 4, 2];
        let pending = pass.download_values(&ctx, device, at).unwrap();
        pass.record(&ctx, device, at, grey).unwrap();
        let texture = |width, height| slice_texture(&ctx, width, height);
        let [xy, xz, yz] = [texture(7, 6), texture(7, 5), texture(6, 5)];
        pass.copy_to_textures(&ctx, [&xy, &xz, &yz]).unwrap();
        let drawn = ctx.traffic() - before;
        assert_eq!(drawn.waits, 0, "a live draw waited for the device");
        // The reconstruction's wait of its next iteration hands the values over; taking them
        // then waits for nothing more. They are the values, not the grey pass's words written
        // over the output after them.
        ctx.complete_downloads().unwrap();
        let waited = ctx.traffic().waits;
        let values = pending.wait(&ctx).unwrap();
        assert_eq!(ctx.traffic().waits, waited, "landed values waited");
        let want = host_slice_words(&host, layout, at, SliceMode::Values).unwrap();
        assert!(values == want, "downloaded values");
        assert!(
            pass.read_words(&ctx).unwrap() == host_slice_words(&host, layout, at, grey).unwrap()
        );
        // Not handed over yet: the wait takes them (the blocking read's words, bit for bit).
        for at in [[0, 0, 0], [4, 5, 6]] {
            let pending = pass.download_values(&ctx, device, at).unwrap();
            let values = pending.wait(&ctx).unwrap();
            pass.record(&ctx, device, at, SliceMode::Values).unwrap();
            assert!(values == pass.read_words(&ctx).unwrap(), "values at {at:?}");
        }
    }

    #[test]
    fn slices_outside_the_volume_and_empty_windows_are_refused() {
        let (ctx, host, layout, buffer, pass) = uploaded();
        let device = DeviceVolume {
            buffer: &buffer,
            layout,
        };
        let cases = [
            ([5, 0, 0], SliceMode::Values),
            ([0, 6, 0], SliceMode::Values),
            ([0, 0, 0], SliceMode::Grey { lo: 1.0, hi: 1.0 }),
            (
                [0, 0, 0],
                SliceMode::Grey {
                    lo: 0.0,
                    hi: f32::NAN,
                },
            ),
        ];
        for (at, mode) in cases {
            let err = pass.record(&ctx, device, at, mode).unwrap_err();
            assert!(matches!(err, GpuError::Slices(_)), "{err}");
            assert!(host_slice_words(&host, layout, at, mode).is_err());
        }
        let small = ctx.upload("small", &[0.0f32; 8]).unwrap();
        let err = pass
            .record(
                &ctx,
                DeviceVolume {
                    buffer: &small,
                    layout,
                },
                [0; 3],
                SliceMode::Values,
            )
            .unwrap_err();
        assert!(err.to_string().contains("small"), "{err}");
        assert!(pass.upload_words(&ctx, &[0; 3]).is_err());
        // A texture of another size than its slice is refused before anything is copied.
        let texture = |width, height| slice_texture(&ctx, width, height);
        let [xy, xz, yz] = [texture(7, 6), texture(7, 5), texture(6, 5)];
        pass.copy_to_textures(&ctx, [&xy, &xz, &yz]).unwrap();
        let err = pass.copy_to_textures(&ctx, [&xy, &yz, &xz]).unwrap_err();
        assert!(err.to_string().contains("Xz slice is 7 x 5"), "{err}");
    }
}
