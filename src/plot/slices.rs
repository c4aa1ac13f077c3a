//! Pictures of volume slices: grey previews of one slice ([`write_preview_png`]), of a volume's
//! three central slices ([`write_slice_previews`], [`write_volume_previews`]), and truth |
//! reconstruction | difference panels ([`write_comparison_png`]).
//!
//! Grey levels: a slice is shown between the 0.5 and 99.5 percentiles of its finite values, so a
//! few hot or dead voxels do not wash the picture out; the three views of a volume share one
//! window, the percentiles of the three slices together, so that one material has one grey in
//! all of them. The window is written on the picture. Small slices are enlarged by an integer
//! factor with nearest-neighbour sampling (each voxel a square block, no smoothing that could
//! pass for structure) until the long side is at least [`PREVIEW_MIN_SIDE`] pixels. A volume's
//! views name their axes with the direction in which the index grows (right and down) and mark
//! where the other two views cut them.

use std::path::Path;

use plotters::prelude::*;

use super::canvas::{
    diverging, drawn, font, grey, grey_window, render_png, short, ColorMap, Image, PlotError,
    GREY_WINDOW_PERCENTILES, PREVIEW_MIN_SIDE,
};
use crate::io::{central_slices, central_slices_of, CentralSlice, Stack, VolumeSlabs};

/// The shortest long side, in pixels, of one cell of a comparison panel.
pub const PANEL_CELL_MIN_SIDE: usize = 320;

/// The height of the caption strip under a preview.
const CAPTION_HEIGHT: usize = 48;
/// The margin left of a volume view, for its vertical axis.
const AXIS_LEFT: usize = 48;
/// The strip under a volume view, for its horizontal axis.
const AXIS_BELOW: usize = 24;
/// The length of the ticks that mark where the other views cut a view.
const TICK: i32 = 6;
/// The narrowest volume view, so that its longer caption (the shared window) fits.
const AXES_MIN_WIDTH: usize = 720;

/// What a volume view marks: its axes (rows drawn downwards, columns rightwards, as the index
/// grows) and where the other two central slices cut it.
struct SliceAxes {
    /// The axis along the rows and the row the view's other cut lies at.
    down: (&'static str, usize),
    /// The axis along the columns and the column the other cut lies at.
    right: (&'static str, usize),
}

/// A preview's grey window and, for the caption, of what values it is the percentiles ("" for
/// the image's own).
struct Window {
    range: (f32, f32),
    of: &'static str,
}

/// Writes an 8-bit grey preview of `data` (`height x width`, row-major) to `path`: enlarged by an
/// integer factor (nearest neighbour) until the long side is at least [`PREVIEW_MIN_SIDE`] pixels,
/// grey levels between the [`GREY_WINDOW_PERCENTILES`] of the finite values, and under it a
/// caption strip with `title`, the enlargement and the grey window in data units.
pub fn write_preview_png(
    path: &Path,
    data: &[f32],
    height: usize,
    width: usize,
    title: &str,
) -> Result<(), PlotError> {
    let image = Image::new("preview", data, height, width)?;
    let window = Window {
        range: grey_window(data),
        of: "",
    };
    render_preview(path, &image, title, &window, None)
}

/// Draws `image` as a preview: without `axes` centred above the caption, with them after a left
/// margin and above a strip that name the axes and mark the other views' cuts.
fn render_preview(
    path: &Path,
    image: &Image,
    title: &str,
    window: &Window,
    axes: Option<&SliceAxes>,
) -> Result<(), PlotError> {
    let (height, width) = (image.height(), image.width());
    let scale = image.scale_for(PREVIEW_MIN_SIDE);
    let (w, h) = (width * scale, height * scale);
    let (left, below) = match axes {
        Some(_) => (AXIS_LEFT, AXIS_BELOW),
        None => (0, 0),
    };
    // At least 512 wide (720 with axes), so the caption fits under a tall, narrow slice.
    let min_width = match axes {
        Some(_) => AXES_MIN_WIDTH,
        None => PREVIEW_MIN_SIDE,
    };
    let canvas_w = (left + w).max(min_width);
    let x0 = match axes {
        Some(_) => left,
        None => (canvas_w - w) / 2,
    };
    let (lo_p, hi_p) = GREY_WINDOW_PERCENTILES;
    render_png(path, (canvas_w, h + below + CAPTION_HEIGHT), |root| {
        image.draw(root, (x0 as i32, 0), scale, &grey(window.range))?;
        if let Some(axes) = axes {
            draw_axes(root, axes, (x0 as i32, h as i32), scale)?;
        }
        let y = (h + below) as i32;
        let line1 =
            format!("{title}: {height} x {width} voxels, each drawn as {scale} x {scale} px");
        let line2 = format!(
            "grey window {lo_p}-{hi_p} percentile{}: black = {}, white = {}",
            window.of,
            short(window.range.0),
            short(window.range.1)
        );
        drawn(root.draw_text(&line1, &font(15), (8, y + 6)))?;
        drawn(root.draw_text(&line2, &font(15), (8, y + 26)))?;
        Ok(())
    })
}

/// The axis names with arrows in the direction their index grows (the column axis under the
/// image, the row axis left of it), and ticks with the index where the other views cut. The image
/// is drawn at `(x0, 0)`, `h` pixels high, enlarged `scale` times.
fn draw_axes(
    root: &super::canvas::Area,
    axes: &SliceAxes,
    (x0, h): (i32, i32),
    scale: usize,
) -> Result<(), PlotError> {
    let ink = RGBColor(60, 60, 60);
    let centre = |index: usize| ((2 * index + 1) * scale / 2) as i32;
    let (right, col) = axes.right;
    let tx = x0 + centre(col);
    drawn(root.draw(&PathElement::new([(tx, h), (tx, h + TICK)], ink)))?;
    drawn(root.draw_text(&format!("{right} \u{2192}"), &font(15), (x0, h + 4)))?;
    let tick_label = format!("{right}={col}");
    drawn(root.draw_text(&tick_label, &font(13), (tx + 3, h + TICK)))?;
    let (down, row) = axes.down;
    let ty = centre(row);
    drawn(root.draw(&PathElement::new([(x0 - TICK, ty), (x0 - 1, ty)], ink)))?;
    drawn(root.draw_text(&format!("{down} \u{2193}"), &font(15), (4, 2)))?;
    // Below the axis name, unless the image is too short for both.
    if ty >= 30 && ty + 16 <= h.max(46) {
        drawn(root.draw_text(&format!("{down}={row}"), &font(13), (4, ty - 6)))?;
    }
    Ok(())
}

/// Writes the previews `DIR/{prefix}_{xy,xz,yz}.png` of `volume`'s three central slices (read a
/// slab at a time) and returns their paths.
pub fn write_volume_previews(
    dir: &Path,
    prefix: &str,
    volume: &dyn VolumeSlabs,
) -> Result<Vec<std::path::PathBuf>, PlotError> {
    let slices = central_slices_of(volume).map_err(PlotError::Volume)?;
    write_slice_previews(dir, prefix, volume.shape(), slices)
}

/// Writes the previews `DIR/{prefix}_{xy,xz,yz}.png` of the central slices `slices` of a volume
/// of `shape` ([`crate::io::central_slices`]) and returns their paths. The three share one grey
/// window, the [`GREY_WINDOW_PERCENTILES`] of the three slices together (what is at hand without
/// a second pass over the volume), and each names its axes and marks the other two cuts.
pub fn write_slice_previews(
    dir: &Path,
    prefix: &str,
    [n0, n1, n2]: [usize; 3],
    slices: [CentralSlice; 3],
) -> Result<Vec<std::path::PathBuf>, PlotError> {
    let all: Vec<f32> = slices.iter().flat_map(|s| s.1.iter().copied()).collect();
    let window = Window {
        range: grey_window(&all),
        of: " of the three views together",
    };
    let (z, y, x) = (("z", n0 / 2), ("y", n1 / 2), ("x", n2 / 2));
    let mut written = Vec::new();
    for (name, pixels, h, w) in &slices {
        let (at, axes) = match *name {
            "xy" => (z, SliceAxes { down: y, right: x }),
            "xz" => (y, SliceAxes { down: z, right: x }),
            _ => (x, SliceAxes { down: z, right: y }),
        };
        let image = Image::new("preview", pixels, *h, *w)?;
        let path = dir.join(format!("{prefix}_{name}.png"));
        let title = format!("{name} slice at {} = {}", at.0, at.1);
        render_preview(&path, &image, &title, &window, Some(&axes))?;
        written.push(path);
    }
    Ok(written)
}

/// Writes a comparison panel to `path`: one row per central slice (xy, xz, yz) with the truth,
/// the reconstruction and their difference (reconstruction - truth).
///
/// Truth and reconstruction share one grey window, the truth's robust percentiles, so equal grey
/// means equal value. The difference is drawn blue (reconstruction too low) through white to red
/// (too high), saturated at the 99.5th percentile of its magnitude over the three slices; the
/// windows are written under the panel.
pub fn write_comparison_png(path: &Path, truth: &Stack, rec: &Stack) -> Result<(), PlotError> {
    if truth.shape != rec.shape {
        return Err(PlotError::ShapeMismatch {
            rec: rec.shape,
            truth: truth.shape,
        });
    }
    let [n0, n1, n2] = truth.shape;
    if n0 * n1 * n2 == 0 || truth.values.len() != n0 * n1 * n2 || rec.values.len() != n0 * n1 * n2 {
        return Err(PlotError::BadImage {
            what: "comparison volume",
            len: truth.values.len().min(rec.values.len()),
            height: n0 * n1,
            width: n2,
        });
    }
    let truth_slices = central_slices(truth);
    let rec_slices = central_slices(rec);
    let diffs: Vec<Vec<f32>> = truth_slices
        .iter()
        .zip(&rec_slices)
        .map(|(t, r)| r.1.iter().zip(&t.1).map(|(r, t)| r - t).collect())
        .collect();
    let truth_all: Vec<f32> = truth_slices.iter().flat_map(|s| s.1.clone()).collect();
    let window = grey_window(&truth_all);
    let magnitudes: Vec<f32> = diffs.iter().flatten().map(|d| d.abs()).collect();
    let limit = match grey_window(&magnitudes).1 {
        l if l > 0.0 => l,
        _ => 1.0,
    };

    const GAP: usize = 12;
    const LEFT: usize = 60;
    const HEADER: usize = 40;
    const FOOTER: usize = 56;
    let scales: Vec<usize> = truth_slices
        .iter()
        .map(|(_, _, h, w)| PANEL_CELL_MIN_SIDE.div_ceil(*h.max(w)).max(1))
        .collect();
    let row_heights: Vec<usize> = truth_slices
        .iter()
        .zip(&scales)
        .map(|((_, _, h, _), s)| h * s)
        .collect();
    let row_widths: Vec<usize> = truth_slices
        .iter()
        .zip(&scales)
        .map(|((_, _, _, w), s)| w * s)
        .collect();
    let cell_w = *row_widths.iter().max().expect("three rows");
    let width = LEFT + 3 * cell_w + 3 * GAP;
    let height = HEADER + row_heights.iter().sum::<usize>() + 3 * GAP + FOOTER;
    render_png(path, (width.max(720), height), |root| {
        for (col, name) in ["truth", "reconstruction", "difference (rec - truth)"]
            .iter()
            .enumerate()
        {
            let x = LEFT + col * (cell_w + GAP);
            drawn(root.draw_text(name, &font(18), (x as i32, 12)))?;
        }
        let mut y = HEADER;
        let names = ["xy", "xz", "yz"];
        let at = [
            format!("z={}", n0 / 2),
            format!("y={}", n1 / 2),
            format!("x={}", n2 / 2),
        ];
        for row in 0..3 {
            let (_, t, h, w) = &truth_slices[row];
            let r = &rec_slices[row].1;
            let scale = scales[row];
            let cells: [(&[f32], ColorMap); 3] = [
                (t, &grey(window)),
                (r, &grey(window)),
                (&diffs[row], &diverging(limit)),
            ];
            for (col, (values, color)) in cells.into_iter().enumerate() {
                let image = Image::new("comparison slice", values, *h, *w)?;
                let x = LEFT + col * (cell_w + GAP);
                image.draw(root, (x as i32, y as i32), scale, color)?;
                // A frame, so that a difference that is white (zero) at the edges still shows
                // where the slice ends.
                let (x1, y1) = ((x + w * scale) as i32, (y + h * scale) as i32);
                drawn(root.draw(&Rectangle::new(
                    [(x as i32 - 1, y as i32 - 1), (x1, y1)],
                    RGBColor(150, 150, 150).stroke_width(1),
                )))?;
            }
            let mid = (y + row_heights[row] / 2) as i32;
            drawn(root.draw_text(names[row], &font(18), (8, mid - 18)))?;
            drawn(root.draw_text(&at[row], &font(13), (8, mid + 4)))?;
            y += row_heights[row] + GAP;
        }
        let (lo_p, hi_p) = GREY_WINDOW_PERCENTILES;
        let line1 = format!(
            "truth and reconstruction: grey window {lo_p}-{hi_p} percentile of the truth, black = {}, white = {}",
            short(window.0),
            short(window.1)
        );
        let line2 = format!(
            "difference: blue = -{0} (too low), white = 0, red = +{0} (too high): {hi_p} percentile of |difference|",
            short(limit)
        );
        drawn(root.draw_text(&line1, &font(14), (8, y as i32 + 4)))?;
        drawn(root.draw_text(&line2, &font(14), (8, y as i32 + 26)))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::canvas::tests::{count, inked};

    #[test]
    fn previews_are_enlarged_blockwise_and_windowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        let (h, w) = (40, 64);
        // A ramp along x with one hot pixel that the percentile window must ignore.
        let mut data: Vec<f32> = (0..h * w).map(|i| (i % w) as f32).collect();
        data[5] = 1e9;
        write_preview_png(&path, &data, h, w, "xy slice").unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        let scale = 512usize.div_ceil(64);
        assert_eq!(
            img.dimensions(),
            ((w * scale) as u32, (h * scale + CAPTION_HEIGHT) as u32)
        );
        let at = |x: usize, y: usize| img.get_pixel(x as u32, y as u32).0;
        // Nearest neighbour: every pixel of a voxel's block has the voxel's grey.
        for (x, y) in [(10, 3), (33, 20), (63, 39)] {
            let block = at(x * scale, y * scale);
            assert_eq!(at(x * scale + scale - 1, y * scale + scale - 1), block);
        }
        // The window is the ramp's, not the hot pixel's: the ramp spans black to white.
        assert_eq!(at(0, 100), [0, 0, 0]);
        assert_eq!(at(63 * scale, 100), [255, 255, 255]);
        assert!(at(32 * scale, 100)[0] > 100 && at(32 * scale, 100)[0] < 155);
        // The caption strip holds text.
        let caption = image::imageops::crop_imm(&img, 0, (h * scale) as u32, img.width(), 48);
        assert!(inked(&caption.to_image()) >= 300);

        let err = write_preview_png(&path, &data, h, w + 1, "bad").unwrap_err();
        assert!(matches!(err, PlotError::BadImage { .. }), "{err}");
    }

    /// A volume whose voxel (z, y, x) holds z + y + x: each central slice spans another range,
    /// so windows of their own would draw one value in three greys.
    fn ramp_volume() -> Stack {
        let [n0, n1, n2] = [16, 20, 24];
        Stack {
            shape: [n0, n1, n2],
            values: (0..n0 * n1 * n2)
                .map(|i| (i / (n1 * n2) + i / n2 % n1 + i % n2) as f32)
                .collect(),
        }
    }

    #[test]
    fn the_three_views_share_one_grey_window() {
        let dir = tempfile::tempdir().unwrap();
        let volume = ramp_volume();
        let slices = central_slices(&volume);
        let paths = write_slice_previews(dir.path(), "p", volume.shape, slices.clone()).unwrap();
        // The voxel of value 30 in each view, (row, column): xy at z = 8 has y + x = 22, xz at
        // y = 10 has z + x = 20, yz at x = 12 has z + y = 18.
        let at = [(11, 11), (8, 12), (8, 10)];
        let all: Vec<f32> = slices.iter().flat_map(|s| s.1.clone()).collect();
        let shared = grey(grey_window(&all))(30.0);
        let mut own = Vec::new();
        for ((path, (_, values, h, w)), (row, col)) in paths.iter().zip(&slices).zip(at) {
            assert!(values[row * w + col] == 30.0);
            let img = image::open(path).unwrap().to_rgb8();
            let scale = PREVIEW_MIN_SIDE.div_ceil(*h.max(w));
            let (x, y) = (AXIS_LEFT + col * scale + scale / 2, row * scale + scale / 2);
            assert_eq!(img.get_pixel(x as u32, y as u32).0, shared, "{path:?}");
            own.push(grey(grey_window(values))(30.0));
        }
        // Mid-grey, and windows of each slice's own would not have agreed.
        assert!(shared[0] > 40 && shared[0] < 215, "{shared:?}");
        assert!(!(own[0] == own[1] && own[1] == own[2]), "{own:?}");
    }

    #[test]
    fn volume_views_name_their_axes_and_mark_the_other_cuts() {
        let dir = tempfile::tempdir().unwrap();
        let (labelled, plain) = (dir.path().join("l.png"), dir.path().join("p.png"));
        let volume = ramp_volume();
        let (_, values, h, w) = &central_slices(&volume)[0];
        let image = Image::new("xy", values, *h, *w).unwrap();
        let window = Window {
            range: grey_window(values),
            of: "",
        };
        let axes = SliceAxes {
            down: ("y", 10),
            right: ("x", 12),
        };
        render_preview(&labelled, &image, "xy", &window, Some(&axes)).unwrap();
        render_preview(&plain, &image, "xy", &window, None).unwrap();
        let (l, p) = (
            image::open(&labelled).unwrap().to_rgb8(),
            image::open(&plain).unwrap().to_rgb8(),
        );
        let scale = PREVIEW_MIN_SIDE.div_ceil(*h.max(w));
        let (iw, ih) = ((w * scale) as u32, (h * scale) as u32);
        // The image itself is the unlabelled render's, pixel for pixel.
        let plain_x0 = (p.width() - iw) / 2;
        let crop = |img: &image::RgbImage, x, y, w, h| {
            image::imageops::crop_imm(img, x, y, w, h).to_image()
        };
        assert!(crop(&l, AXIS_LEFT as u32, 0, iw, ih) == crop(&p, plain_x0, 0, iw, ih));
        // Text left of it (the row axis) and under it (the column axis): the unlabelled render
        // has neither strip.
        let left = crop(&l, 0, 0, AXIS_LEFT as u32, ih);
        let below = crop(&l, 0, ih, l.width(), AXIS_BELOW as u32);
        assert!(inked(&left) >= 60 && inked(&below) >= 100);
        assert!(l.height() == p.height() + AXIS_BELOW as u32);
        // The ticks at x = 12 (under the image) and y = 10 (left of it).
        let dark = |x: usize, y: usize| l.get_pixel(x as u32, y as u32).0[0] < 100;
        let centre = |i: usize| (2 * i + 1) * scale / 2;
        assert!(dark(AXIS_LEFT + centre(12), ih as usize + 2));
        assert!(dark(AXIS_LEFT - 2, centre(10)));
    }

    #[test]
    fn comparison_panels_show_truth_reconstruction_and_difference() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.png");
        let n = 16;
        let truth: Stack = Stack {
            shape: [n, n, n],
            values: (0..n * n * n).map(|i| (i % n) as f32 / n as f32).collect(),
        };
        let mut rec = truth.clone();
        for v in rec.values.iter_mut().step_by(7) {
            *v += 0.3;
        }
        write_comparison_png(&path, &truth, &rec).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        let scale = PANEL_CELL_MIN_SIDE.div_ceil(n);
        assert!(img.width() as usize >= 3 * n * scale);
        assert!(img.height() as usize >= 3 * n * scale);
        // The difference column has saturated red where the reconstruction is too high.
        assert!(count(&img, [255, 0, 0]) >= scale * scale);
        let other = Stack {
            shape: [n, n, n + 1],
            values: vec![0.0; n * n * (n + 1)],
        };
        let err = write_comparison_png(&path, &truth, &other).unwrap_err();
        assert!(matches!(err, PlotError::ShapeMismatch { .. }), "{err}");
    }
}
