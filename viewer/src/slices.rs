//! The xy, xz and yz slices of the current iterate in textures the UI draws. Where the volume is
//! on the device, the core crate's [`SlicePass`] writes them there and copies them into the
//! textures: the images never leave the device. Where it streams, they are made on the host from
//! [`IterateView::read_volume`] and uploaded. Either way the grey window comes from percentiles of
//! the three slices' values (for a volume on the device, downloaded: three slices of `f32`, not
//! the images). During a run a draw waits for nothing: it takes the values of the previous
//! iterate's slices, which the solver's wait of this iteration brought to the host, for the
//! window, and sends this iterate's on their way ([`SlicePass::download_values`]).

use std::cell::RefCell;
use std::time::Instant;

use eframe::egui;
use eframe::egui_wgpu::RenderState;
use eframe::wgpu;
use lamino::gpu::{host_slice_words, PendingValues, SliceLayout, VolumeLayout};
use lamino::{Geometry, GpuContext, IterateView, SliceAxis, SliceMode, SlicePass};

/// What the UI chose to see: the slices' indices and the grey window's percentiles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Display {
    /// `(z, y, x)` of the xy, xz and yz slices.
    pub at: [usize; 3],
    /// The values at these percentiles of the three slices are black and white.
    pub percentiles: [f32; 2],
}

impl Display {
    /// The central slices with a window over the 1st to 99th percentiles.
    pub fn centred(shape: [usize; 3]) -> Self {
        Self {
            at: shape.map(|n| n / 2),
            percentiles: [1.0, 99.0],
        }
    }
}

/// What a draw did.
#[derive(Debug, Clone, Copy)]
pub struct Drawn {
    /// The outer iteration drawn (0 first).
    pub iteration: usize,
    /// The values drawn black and white.
    pub window: [f32; 2],
    /// The outer iteration whose slices' values gave the window: the previous one while a run
    /// goes on (the first iterate's own), else the one drawn.
    pub window_of: usize,
    /// Whether the images were made on the device (else from a host copy: the volume streams).
    pub on_device: bool,
    /// Whether it was drawn during the run ([`Window::Previous`]).
    pub live: bool,
    /// Seconds the draw took (passes, the values read back or the host copy, the copies).
    pub seconds: f64,
}

/// How a draw gets its grey window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// During a run: from the values of the slices the last live draw showed, so that nothing
    /// waits for the device (the first draw of a run waits once, for its own values).
    Previous,
    /// From the values of the slices drawn (waits for them): after a run, or when the settings
    /// change.
    Own,
}

/// The slices' values a live draw sent to the host, for the next draw's window.
struct Sent {
    iteration: usize,
    values: Values,
}

enum Values {
    OnTheirWay(PendingValues),
    Landed(Vec<u32>),
}

/// The slice pass of one volume shape and the textures it draws into.
pub struct SliceTargets {
    pass: SlicePass,
    textures: [wgpu::Texture; 3],
    /// What the last live draw of this run sent (none before the run's first).
    sent: RefCell<Option<Sent>>,
}

impl SliceTargets {
    /// Targets for the volume of `geometry` in `textures` (made by [`create_textures`]).
    pub fn new(
        ctx: &GpuContext,
        geometry: &Geometry,
        textures: [wgpu::Texture; 3],
    ) -> Result<Self, String> {
        let shape = [geometry.n0, geometry.n1, geometry.n2];
        let pass = SlicePass::new(ctx, shape).map_err(|e| e.to_string())?;
        Ok(Self {
            pass,
            textures,
            sent: RefCell::new(None),
        })
    }

    /// Forgets the values of the last run: the next live draw takes its window from its own.
    pub fn start_run(&self) {
        self.sent.replace(None);
    }

    /// Draws the slices of `view` as `display` says into the textures, through a window taken
    /// as `window_from` says (where the volume streams, always its own: the host copy is read anyway).
    pub fn draw(
        &self,
        view: &IterateView<'_>,
        display: Display,
        window_from: Window,
    ) -> Result<Drawn, String> {
        let started = Instant::now();
        let ctx = view.ctx();
        let layout = view.layout();
        let at = [0, 1, 2].map(|axis| display.at[axis].min(layout.shape[axis] - 1));
        let e = |e: lamino::GpuError| e.to_string();
        let drawn = match view.on_device() {
            Some(volume) => {
                let pending = self.pass.download_values(ctx, volume, at).map_err(e)?;
                let (values, window_of) = match window_from {
                    Window::Own => (pending.wait(ctx).map_err(e)?, view.iteration),
                    Window::Previous => self.previous_values(ctx, view.iteration, pending)?,
                };
                let [lo, hi] = grey_window(self.pass.layout(), &values, display.percentiles);
                self.pass
                    .record(ctx, volume, at, SliceMode::Grey { lo, hi })
                    .map_err(e)?;
                Some(([lo, hi], window_of))
            }
            None => None,
        };
        let (window, window_of) = match drawn {
            Some(drawn) => drawn,
            None => {
                let host = view.read_volume().map_err(|e| e.to_string())?;
                let window = self.upload_from_host(ctx, &host, layout, at, display)?;
                (window, view.iteration)
            }
        };
        let [xy, xz, yz] = &self.textures;
        self.pass.copy_to_textures(ctx, [xy, xz, yz]).map_err(e)?;
        Ok(Drawn {
            iteration: view.iteration,
            window,
            window_of,
            on_device: drawn.is_some(),
            live: window_from == Window::Previous,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// The values the last live draw sent (landed by now: the solver waited for its iteration
    /// since), and the iteration they are of; this draw's `pending` ones are kept for the next.
    /// The run's first draw has none: it waits for its own.
    fn previous_values(
        &self,
        ctx: &GpuContext,
        iteration: usize,
        pending: PendingValues,
    ) -> Result<(Vec<u32>, usize), String> {
        let e = |e: lamino::GpuError| e.to_string();
        let mut sent = self.sent.borrow_mut();
        let previous = match sent.take() {
            Some(Sent {
                iteration,
                values: Values::OnTheirWay(p),
            }) => Some((p.wait(ctx).map_err(e)?, iteration)),
            Some(Sent {
                iteration,
                values: Values::Landed(v),
            }) => Some((v, iteration)),
            None => None,
        };
        match previous {
            Some(previous) => {
                *sent = Some(Sent {
                    iteration,
                    values: Values::OnTheirWay(pending),
                });
                Ok(previous)
            }
            None => {
                let own = pending.wait(ctx).map_err(e)?;
                *sent = Some(Sent {
                    iteration,
                    values: Values::Landed(own.clone()),
                });
                Ok((own, iteration))
            }
        }
    }

    /// Makes the grey slices of a host copy of the volume and puts them in the pass's output.
    fn upload_from_host(
        &self,
        ctx: &GpuContext,
        host: &[f32],
        layout: VolumeLayout,
        at: [usize; 3],
        display: Display,
    ) -> Result<[f32; 2], String> {
        let e = |e: lamino::GpuError| e.to_string();
        let values = host_slice_words(host, layout, at, SliceMode::Values).map_err(e)?;
        let [lo, hi] = grey_window(self.pass.layout(), &values, display.percentiles);
        let grey = host_slice_words(host, layout, at, SliceMode::Grey { lo, hi }).map_err(e)?;
        self.pass.upload_words(ctx, &grey).map_err(e)?;
        Ok([lo, hi])
    }
}

/// The values at `percentiles` of the finite values of the three slices in `words` (as
/// [`SliceMode::Values`] writes them); a window one unit wide around them when they are equal
/// (an all-zero first iterate), so that every window drawn is valid.
fn grey_window(layout: SliceLayout, words: &[u32], percentiles: [f32; 2]) -> [f32; 2] {
    let mut values: Vec<f32> = SliceAxis::ALL
        .into_iter()
        .flat_map(|axis| layout.slice(words, axis))
        .map(f32::from_bits)
        .filter(|v| v.is_finite())
        .collect();
    if values.is_empty() {
        return [0.0, 1.0];
    }
    values.sort_unstable_by(f32::total_cmp);
    let at = |p: f32| {
        let rank = (p.clamp(0.0, 100.0) / 100.0 * (values.len() - 1) as f32).round();
        values[rank as usize]
    };
    let (lo, hi) = (
        at(percentiles[0].min(percentiles[1])),
        at(percentiles[0].max(percentiles[1])),
    );
    if lo < hi {
        [lo, hi]
    } else {
        [lo - 0.5, lo + 0.5]
    }
}

/// `(width, height)` of each slice of a volume of `shape`, in the order xy, xz, yz.
pub fn slice_sizes(shape: [usize; 3]) -> [[usize; 2]; 3] {
    let layout = SliceLayout::new(shape);
    SliceAxis::ALL.map(|axis| {
        let (_, width, height) = layout.image(axis);
        [width, height]
    })
}

/// The least size (points) a slice is drawn with along either of its axes: a thin volume's slices
/// (a 2-row scan's xz and yz slices are 2 voxels tall) are stretched to it rather than drawn a
/// pixel or two thick.
pub const MIN_SLICE_POINTS: f32 = 64.0;

/// The volume axes along each slice's width and height, in the order xy, xz, yz.
const SLICE_AXES: [[&str; 2]; 3] = [["x", "y"], ["x", "z"], ["y", "z"]];

/// Where one slice goes on the screen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SliceBox {
    /// Width and height in points.
    pub size: [f32; 2],
    /// How much more a voxel is drawn along the width and the height than the common scale
    /// draws it (1: the voxel aspect kept).
    pub stretch: [f32; 2],
    /// The volume axes along the width and the height.
    pub axes: [&'static str; 2],
}

impl SliceBox {
    /// What the stretch is, for the slice's label (empty when the voxels are drawn square).
    pub fn stretched(&self) -> String {
        let said: Vec<String> = (0..2)
            .filter(|&k| self.stretch[k] > 1.0)
            .map(|k| format!("{} stretched {:.1}x", self.axes[k], self.stretch[k]))
            .collect();
        said.join(", ")
    }
}

/// The sizes of the xy, xz and yz slices of a volume of `shape` in a row `available` points wide
/// and tall with `spacing` between them: one scale for the three, voxels square (the volume's
/// voxels are cubes), the row as wide as the space allows; a slice side below
/// [`MIN_SLICE_POINTS`] (or the height available, where that is less) stretched to it.
pub fn slice_boxes(shape: [usize; 3], available: [f32; 2], spacing: f32) -> [SliceBox; 3] {
    let sizes = slice_sizes(shape);
    let width: usize = sizes.iter().map(|s| s[0]).sum();
    let height = sizes.iter().map(|s| s[1]).max().unwrap_or(1);
    let scale = ((available[0] - 2.0 * spacing) / width as f32)
        .min(available[1] / height as f32)
        .max(0.1);
    let least = MIN_SLICE_POINTS.min(available[1]).max(1.0);
    [0, 1, 2].map(|k| {
        let drawn = sizes[k].map(|n| n as f32 * scale);
        SliceBox {
            size: drawn.map(|d| d.max(least)),
            stretch: drawn.map(|d| (least / d).max(1.0)),
            axes: SLICE_AXES[k],
        }
    })
}

/// The xy, xz and yz textures of a volume of `shape` on the UI's device, registered with its
/// renderer: sRGB grey (what the pass writes is what the screen shows), copied into, sampled.
pub fn create_textures(
    render: &RenderState,
    shape: [usize; 3],
) -> ([wgpu::Texture; 3], [egui::TextureId; 3]) {
    let textures = slice_sizes(shape).map(|[width, height]| {
        render.device.create_texture(&wgpu::TextureDescriptor {
            label: Some("lamino-viewer slice"),
            size: wgpu::Extent3d {
                width: width as u32,
                height: height as u32,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::Rgba8UnormSrgb,
            usage: wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::TEXTURE_BINDING,
            view_formats: &[],
        })
    });
    let mut renderer = render.renderer.write();
    let ids = [0, 1, 2].map(|i| {
        let view = textures[i].create_view(&wgpu::TextureViewDescriptor::default());
        // Voxels as squares, not blurred.
        renderer.register_native_texture(&render.device, &view, wgpu::FilterMode::Nearest)
    });
    (textures, ids)
}

/// Frees the textures [`create_textures`] registered.
pub fn free_textures(render: &RenderState, ids: [egui::TextureId; 3]) {
    let mut renderer = render.renderer.write();
    for id in &ids {
        renderer.free_texture(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_takes_percentiles_of_the_three_slices_finite_values() {
        let shape = [2, 3, 4];
        let layout = SliceLayout::new(shape);
        // Values 0..n of every slice pixel, one NaN among them; the pitch's padding words are 0
        // and must not count.
        let mut words = vec![0u32; layout.words()];
        let mut next = 0.0f32;
        for axis in SliceAxis::ALL {
            let (first, width, height) = layout.image(axis);
            for r in 0..height {
                for c in 0..width {
                    words[first + r * layout.pitch + c] = next.to_bits();
                    next += 1.0;
                }
            }
        }
        let pixels = next as usize;
        words[layout.image(SliceAxis::Xz).0] = f32::NAN.to_bits();
        // 0 and 100: the smallest and largest finite values.
        let [lo, hi] = grey_window(layout, &words, [0.0, 100.0]);
        assert_eq!([lo, hi], [0.0, (pixels - 1) as f32]);
        // The median of the finite values, whichever way round the percentiles are given.
        let finite = pixels - 1;
        let [lo, _] = grey_window(layout, &words, [50.0, 100.0]);
        let median_rank = ((finite - 1) as f32 * 0.5).round() as usize;
        let mut sorted: Vec<f32> = (0..pixels).map(|v| v as f32).collect();
        sorted.remove(layout.image(SliceAxis::Xy).1 * layout.image(SliceAxis::Xy).2);
        assert_eq!(lo, sorted[median_rank]);
        assert_eq!(
            grey_window(layout, &words, [90.0, 10.0]),
            grey_window(layout, &words, [10.0, 90.0])
        );
        // Equal values (the all-zero first iterate): a valid window around them.
        let zeros = vec![0u32; layout.words()];
        assert_eq!(grey_window(layout, &zeros, [1.0, 99.0]), [-0.5, 0.5]);
    }

    #[test]
    fn slice_sizes_are_width_by_height_of_xy_xz_yz() {
        assert_eq!(slice_sizes([2, 3, 4]), [[4, 3], [4, 2], [3, 2]]);
    }

    #[test]
    fn thin_slices_are_stretched_to_a_least_size_and_cubes_keep_their_aspect() {
        // A cube: three squares of one size, nothing stretched.
        let cube = slice_boxes([32, 32, 32], [1000.0, 400.0], 8.0);
        for b in cube {
            assert_eq!(b.size[0], b.size[1]);
            assert_eq!(b.size, cube[0].size);
            assert_eq!(b.stretch, [1.0, 1.0]);
            assert_eq!(b.stretched(), "");
        }
        // A 2-row scan's volume, 2 x 64 x 64: the xy slice is square; the xz and yz slices keep
        // their width and are drawn MIN_SLICE_POINTS tall, z stretched.
        let [xy, xz, yz] = slice_boxes([2, 64, 64], [1000.0, 400.0], 8.0);
        let scale = (1000.0 - 16.0) / 192.0;
        assert_eq!(xy.size, [64.0 * scale; 2]);
        for b in [xz, yz] {
            assert_eq!(b.size, [64.0 * scale, MIN_SLICE_POINTS]);
            assert_eq!(b.stretch, [1.0, MIN_SLICE_POINTS / (2.0 * scale)]);
            assert_eq!(b.stretched(), format!("z stretched {:.1}x", b.stretch[1]));
        }
        // A row too low for the least size: the slices fill its height.
        let [_, low, _] = slice_boxes([2, 64, 64], [1000.0, 30.0], 8.0);
        assert_eq!(low.size[1], 30.0);
    }
}
