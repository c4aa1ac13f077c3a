//! Pictures written next to results: slice previews, truth | reconstruction | difference panels,
//! the solver's convergence history, the fitted flat-field, dark-field and baseline, and
//! accuracy-vs-time scatter plots.
//!
//! Everything is drawn with `plotters`' bitmap backend into an RGB buffer and written as PNG
//! atomically (a temporary file renamed into place). Text is drawn with DejaVu Sans, embedded in
//! the binary from `assets/fonts`, so no system font is needed or consulted.
//!
//! Grey levels: a slice is shown between its 0.5 and 99.5 percentiles (of its finite values), so
//! a few hot or dead voxels do not wash the picture out; the window is written on the picture.
//! Small slices are enlarged by an integer factor with nearest-neighbour sampling (each voxel a
//! square block, no smoothing that could pass for structure) until the long side is at least
//! [`PREVIEW_MIN_SIDE`] pixels.

use std::io::Cursor;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use image::{ImageFormat, RgbImage};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use thiserror::Error;

use crate::io::{
    central_slices, central_slices_of, write_atomically, CentralSlice, IoError, Stack, VolumeSlabs,
};
use crate::params::Convergence;
use crate::solver::IterationReport;

/// The shortest long side, in pixels, of a slice preview.
pub const PREVIEW_MIN_SIDE: usize = 512;
/// The shortest long side, in pixels, of one cell of a comparison panel.
pub const PANEL_CELL_MIN_SIDE: usize = 320;
/// The grey window of previews and panels: these percentiles of the finite values.
pub const GREY_WINDOW_PERCENTILES: (f64, f64) = (0.5, 99.5);

/// One series of points drawn in one colour and marker.
pub struct Series<'a> {
    /// The text shown next to the series' marker in the legend.
    pub label: &'a str,
    pub color: [u8; 3],
    pub marker: Marker,
    /// `(x, y)` in data units. Non-finite points are skipped, and break the connecting line.
    pub points: &'a [(f64, f64)],
    /// Draw line segments between consecutive points.
    pub connect: bool,
}

/// The shape drawn at each point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    /// A diagonal cross (x).
    Cross,
}

/// What to draw: titles, the visible data ranges and the series.
pub struct PlotSpec<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// `(low, high)` of the x axis; must be finite with `low < high`.
    pub x_range: (f64, f64),
    /// `(low, high)` of the y axis; must be finite with `low < high`.
    pub y_range: (f64, f64),
    pub series: &'a [Series<'a>],
}

/// Errors drawing or writing a picture.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PlotError {
    /// An axis range is not a finite interval with `low < high`.
    #[error("the {axis} range ({low}, {high}) must be finite with low < high")]
    BadRange {
        axis: &'static str,
        low: f64,
        high: f64,
    },
    /// An image's pixel count does not match its stated size, or it has no pixels.
    #[error("{what}: {len} values cannot be a {height} x {width} image")]
    BadImage {
        what: &'static str,
        len: usize,
        height: usize,
        width: usize,
    },
    /// Two volumes to compare differ in shape.
    #[error("the reconstruction has shape {rec:?} but the truth has {truth:?}")]
    ShapeMismatch { rec: [usize; 3], truth: [usize; 3] },
    /// There is nothing to plot (a convergence history without iterations).
    #[error("nothing to plot: {0}")]
    Empty(&'static str),
    /// The picture would exceed what a PNG (or memory) can reasonably hold.
    #[error("a {width} x {height} picture is too large")]
    TooLarge { width: usize, height: usize },
    /// The volume to preview could not be read (a slab of a reconstruction's result).
    #[error("cannot read the volume: {0}")]
    Volume(String),
    /// plotters failed to draw (it reports its errors as text).
    #[error("cannot draw the plot: {0}")]
    Draw(String),
    /// The image could not be encoded as PNG.
    #[error("cannot encode the plot as PNG: {0}")]
    Encode(#[from] image::ImageError),
    /// The PNG could not be written.
    #[error(transparent)]
    Write(#[from] IoError),
}

impl PlotError {
    /// As an [`IoError`] naming `path` (for callers that report file errors), keeping an
    /// [`IoError`] from the write itself as it is.
    pub fn into_io(self, path: &Path) -> IoError {
        match self {
            PlotError::Write(e) => e,
            other => IoError::Write {
                path: path.into(),
                reason: other.to_string(),
            },
        }
    }
}

/// The family name under which the embedded font is registered: the name plotters' own defaults
/// (axis labels, legends) ask for, so every piece of text finds it.
const FONT_FAMILY: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");

/// Registers the embedded font with plotters, once per process.
fn register_embedded_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| register_font(FONT_FAMILY, FontStyle::Normal, FONT_BYTES).is_ok());
    if ok {
        Ok(())
    } else {
        Err(PlotError::Draw(
            "the embedded font (assets/fonts/DejaVuSans.ttf) cannot be parsed".into(),
        ))
    }
}

fn font(size: u32) -> TextStyle<'static> {
    (FONT_FAMILY, size).into_font().color(&BLACK)
}

/// Turns plotters' errors (generic over the backend) into [`PlotError::Draw`].
fn drawn<T, E: std::fmt::Display>(result: Result<T, E>) -> Result<T, PlotError> {
    result.map_err(|e| PlotError::Draw(e.to_string()))
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// The largest picture side drawn; beyond it a PNG is impractical to open anyway.
const MAX_SIDE: usize = 1 << 15;

/// Draws a `width x height` picture on a white background with `draw` and writes it to `path`.
fn render_png(
    path: &Path,
    (width, height): (usize, usize),
    draw: impl FnOnce(&Area) -> Result<(), PlotError>,
) -> Result<(), PlotError> {
    if width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE {
        return Err(PlotError::TooLarge { width, height });
    }
    register_embedded_font()?;
    let mut buffer = vec![0u8; width * height * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buffer, (width as u32, height as u32))
            .into_drawing_area();
        drawn(root.fill(&WHITE))?;
        draw(&root)?;
        drawn(root.present())?;
    }
    let img = RgbImage::from_raw(width as u32, height as u32, buffer)
        .expect("the buffer holds width x height RGB pixels");
    let mut png = Vec::new();
    img.write_to(&mut Cursor::new(&mut png), ImageFormat::Png)?;
    write_atomically(path, |tmp| {
        std::fs::write(tmp, &png).map_err(|e| e.to_string())
    })?;
    Ok(())
}

fn rgb([r, g, b]: [u8; 3]) -> RGBColor {
    RGBColor(r, g, b)
}

fn check_range(axis: &'static str, (low, high): (f64, f64)) -> Result<(), PlotError> {
    // `!(low < high)` is also true when either end is NaN.
    if !low.is_finite() || !high.is_finite() || low >= high {
        return Err(PlotError::BadRange { axis, low, high });
    }
    Ok(())
}

/// Draws `spec` as an 800 x 600 scatter plot and writes it to `path` as a PNG.
///
/// Points outside the ranges are clamped to the border of the plot area and drawn hollow, so they
/// stay visible but cannot be mistaken for values on the border. The legend sits in the lower right
/// corner of the plot area, where rising accuracy-vs-time curves leave room.
pub fn write_scatter_png(path: &Path, spec: &PlotSpec) -> Result<(), PlotError> {
    check_range("x", spec.x_range)?;
    check_range("y", spec.y_range)?;
    render_png(path, (800, 600), |root| {
        let (x0, x1) = spec.x_range;
        let (y0, y1) = spec.y_range;
        let mut chart = drawn(
            ChartBuilder::on(root)
                .caption(spec.title, font(24))
                .margin(16)
                .x_label_area_size(50)
                .y_label_area_size(70)
                .build_cartesian_2d(x0..x1, y0..y1),
        )?;
        drawn(
            chart
                .configure_mesh()
                .x_desc(spec.x_label)
                .y_desc(spec.y_label)
                .label_style(font(15))
                .axis_desc_style(font(17))
                .light_line_style(WHITE)
                .bold_line_style(RGBColor(225, 225, 225))
                .draw(),
        )?;
        let clamp = |(x, y): (f64, f64)| {
            let inside = (x0..=x1).contains(&x) && (y0..=y1).contains(&y);
            ((x.clamp(x0, x1), y.clamp(y0, y1)), inside)
        };
        // All lines before any marker, so no line crosses over a marker of another series.
        for series in spec.series.iter().filter(|s| s.connect) {
            let color = rgb(series.color);
            for run in finite_runs(series.points) {
                let line = run.iter().map(|&p| clamp(p).0);
                drawn(chart.draw_series(LineSeries::new(line, color.stroke_width(2))))?;
            }
        }
        for series in spec.series {
            let color = rgb(series.color);
            // Each marker shape is its own element type, hence one branch per shape.
            const R: i32 = 5;
            let placed = series
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&p| {
                    let (at, inside) = clamp(p);
                    let style = if inside {
                        color.filled()
                    } else {
                        color.stroke_width(2)
                    };
                    (EmptyElement::at(at), style)
                });
            let segment = if series.connect {
                vec![(-2 * R, 0), (2 * R, 0)]
            } else {
                vec![]
            };
            let line = move |(x, y): (i32, i32)| {
                EmptyElement::at((x + 2 * R, y))
                    + PathElement::new(segment.clone(), color.stroke_width(2))
            };
            let cross = color.stroke_width(3);
            match series.marker {
                Marker::Circle => drawn(
                    chart.draw_series(placed.map(|(at, style)| at + Circle::new((0, 0), R, style))),
                )?
                .label(series.label)
                .legend(move |at| line(at) + Circle::new((0, 0), R, color.filled())),
                Marker::Square => drawn(chart.draw_series(
                    placed.map(|(at, style)| at + Rectangle::new([(-R, -R), (R, R)], style)),
                ))?
                .label(series.label)
                .legend(move |at| line(at) + Rectangle::new([(-R, -R), (R, R)], color.filled())),
                // A cross has no inside to leave hollow; a clamped one is drawn thinner.
                Marker::Cross => drawn(chart.draw_series(placed.map(|(at, style)| {
                    let width = if style.filled { 3 } else { 1 };
                    at + Cross::new((0, 0), R, color.stroke_width(width))
                })))?
                .label(series.label)
                .legend(move |at| line(at) + Cross::new((0, 0), R, cross)),
            };
        }
        if !spec.series.is_empty() {
            drawn(
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::LowerRight)
                    .label_font(font(15))
                    .background_style(WHITE)
                    .border_style(BLACK)
                    .draw(),
            )?;
        }
        Ok(())
    })
}

/// The maximal runs of consecutive finite points: a non-finite point breaks a connecting line.
fn finite_runs(points: &[(f64, f64)]) -> impl Iterator<Item = &[(f64, f64)]> {
    points
        .split(|(x, y)| !(x.is_finite() && y.is_finite()))
        .filter(|run| run.len() > 1)
}

/// The value at percentile `p` (0 to 100) of `sorted`, by the nearest-rank-below rule.
fn percentile(sorted: &[f32], p: f64) -> f32 {
    let last = sorted.len().saturating_sub(1);
    sorted
        .get((last as f64 * p / 100.0) as usize)
        .copied()
        .unwrap_or(0.0)
}

/// The grey window of `values`: their [`GREY_WINDOW_PERCENTILES`], widened to a unit interval
/// around a constant image so that it still maps to one grey level instead of dividing by zero.
pub fn grey_window(values: &[f32]) -> (f32, f32) {
    let mut sorted: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f32::total_cmp);
    let (lo, hi) = GREY_WINDOW_PERCENTILES;
    let (lo, hi) = (percentile(&sorted, lo), percentile(&sorted, hi));
    if hi > lo {
        (lo, hi)
    } else {
        (lo - 0.5, lo + 0.5)
    }
}

/// A colour for each value of an image.
type ColorMap<'a> = &'a dyn Fn(f32) -> [u8; 3];

/// Grey levels from black at `lo` to white at `hi`; non-finite values are drawn magenta, a colour
/// no grey level resembles.
fn grey((lo, hi): (f32, f32)) -> impl Fn(f32) -> [u8; 3] {
    move |v| {
        if !v.is_finite() {
            return [255, 0, 255];
        }
        let g = ((v - lo) / (hi - lo) * 255.0).round().clamp(0.0, 255.0) as u8;
        [g, g, g]
    }
}

/// Blue (negative) through white (zero) to red (positive), saturated at `±limit`; non-finite
/// values are drawn black.
fn diverging(limit: f32) -> impl Fn(f32) -> [u8; 3] {
    move |v| {
        if !v.is_finite() {
            return [0, 0, 0];
        }
        let t = (v / limit).clamp(-1.0, 1.0);
        let fade = (255.0 * (1.0 - t.abs())).round() as u8;
        if t >= 0.0 {
            [255, fade, fade]
        } else {
            [fade, fade, 255]
        }
    }
}

/// A `height x width` image of values, row-major.
struct Image<'a> {
    values: &'a [f32],
    height: usize,
    width: usize,
}

impl<'a> Image<'a> {
    fn new(
        what: &'static str,
        values: &'a [f32],
        height: usize,
        width: usize,
    ) -> Result<Self, PlotError> {
        if height == 0 || width == 0 || height.checked_mul(width) != Some(values.len()) {
            return Err(PlotError::BadImage {
                what,
                len: values.len(),
                height,
                width,
            });
        }
        Ok(Self {
            values,
            height,
            width,
        })
    }

    /// The smallest integer enlargement that makes the long side at least `min_side` pixels.
    fn scale_for(&self, min_side: usize) -> usize {
        min_side.div_ceil(self.height.max(self.width)).max(1)
    }

    /// Draws the image enlarged `scale` times (nearest neighbour) with its top left corner at
    /// `(x, y)` of `area`.
    fn draw(
        &self,
        area: &Area,
        (x, y): (i32, i32),
        scale: usize,
        color: ColorMap,
    ) -> Result<(), PlotError> {
        let (w, h) = (self.width * scale, self.height * scale);
        let mut rgb = Vec::with_capacity(w * h * 3);
        for row in 0..h {
            let source = &self.values[(row / scale) * self.width..][..self.width];
            for col in 0..w {
                rgb.extend_from_slice(&color(source[col / scale]));
            }
        }
        let element =
            BitMapElement::<(i32, i32)>::with_owned_buffer((x, y), (w as u32, h as u32), rgb)
                .expect("the buffer holds w x h RGB pixels");
        drawn(area.draw(&element))
    }
}

/// Formats a value for a caption with four significant digits.
fn short(v: f32) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if (1e-3..1e4).contains(&a) {
        let decimals = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
        format!("{v:.decimals$}")
    } else {
        format!("{v:.3e}")
    }
}

/// The height of the caption strip under a preview.
const CAPTION_HEIGHT: usize = 48;

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
    let window = grey_window(data);
    let scale = image.scale_for(PREVIEW_MIN_SIDE);
    let (w, h) = (width * scale, height * scale);
    // At least 512 wide, so the caption fits under a tall, narrow slice.
    let canvas_w = w.max(PREVIEW_MIN_SIDE);
    let (lo_p, hi_p) = GREY_WINDOW_PERCENTILES;
    render_png(path, (canvas_w, h + CAPTION_HEIGHT), |root| {
        image.draw(root, (((canvas_w - w) / 2) as i32, 0), scale, &grey(window))?;
        let line1 =
            format!("{title}: {height} x {width} voxels, each drawn as {scale} x {scale} px");
        let line2 = format!(
            "grey window {lo_p}-{hi_p} percentile: black = {}, white = {}",
            short(window.0),
            short(window.1)
        );
        drawn(root.draw_text(&line1, &font(15), (8, h as i32 + 6)))?;
        drawn(root.draw_text(&line2, &font(15), (8, h as i32 + 26)))?;
        Ok(())
    })
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
/// of `shape` ([`crate::io::central_slices`]) and returns their paths.
pub fn write_slice_previews(
    dir: &Path,
    prefix: &str,
    [n0, n1, n2]: [usize; 3],
    slices: [CentralSlice; 3],
) -> Result<Vec<std::path::PathBuf>, PlotError> {
    let mut written = Vec::new();
    for (name, pixels, h, w) in slices {
        let at = match name {
            "xy" => format!("z = {}", n0 / 2),
            "xz" => format!("y = {}", n1 / 2),
            _ => format!("x = {}", n2 / 2),
        };
        let path = dir.join(format!("{prefix}_{name}.png"));
        write_preview_png(&path, &pixels, h, w, &format!("{name} slice at {at}"))?;
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

/// Colours of the convergence curves, readable on white and distinct for colour-blind readers
/// (Okabe-Ito).
const BLUE: RGBColor = RGBColor(0, 114, 178);
const ORANGE: RGBColor = RGBColor(230, 159, 0);
const GREEN: RGBColor = RGBColor(0, 158, 115);
const VERMILION: RGBColor = RGBColor(213, 94, 0);
const PURPLE: RGBColor = RGBColor(204, 121, 167);

/// The positive, finite values of `series` (what a log axis can show) as `(iteration, value)`
/// runs: a value that is not shown breaks the line.
fn log_runs(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    points
        .split(|(_, v)| !(v.is_finite() && *v > 0.0))
        .filter(|run| !run.is_empty())
        .map(<[_]>::to_vec)
        .collect()
}

/// A log axis range covering the positive, finite `values`, widened to whole decades.
fn log_range(values: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if hi > 0.0 {
        let lo = 10f64.powf(lo.log10().floor());
        let hi = 10f64.powf(hi.log10().ceil());
        lo..if hi > lo { hi } else { lo * 10.0 }
    } else {
        0.1..10.0
    }
}

/// A labelled, coloured curve of `(iteration, value)` points.
type Curve<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// One log-scale panel of per-iteration curves; `thresholds` are drawn as dashed lines in the
/// colour of their curve.
fn draw_log_panel(
    area: &Area,
    title: &str,
    iterations: Range<f64>,
    curves: &[Curve],
    thresholds: &[(RGBColor, f64)],
) -> Result<(), PlotError> {
    let (_, height) = area.dim_in_pixel();
    let (chart_area, legend_area) = area.split_vertically(height as i32 - 84);
    let y = log_range(
        curves
            .iter()
            .flat_map(|(_, _, points)| points.iter().map(|p| p.1))
            .chain(thresholds.iter().map(|t| t.1)),
    );
    let mut chart = drawn(
        ChartBuilder::on(&chart_area)
            .caption(title, font(19))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(72)
            .build_cartesian_2d(iterations.clone(), y.log_scale()),
    )?;
    drawn(
        chart
            .configure_mesh()
            .x_desc("iteration")
            .label_style(font(14))
            .axis_desc_style(font(16))
            .y_label_formatter(&|v| format!("{v:.0e}"))
            .x_label_formatter(&|v| format!("{v:.0}"))
            .light_line_style(RGBColor(240, 240, 240))
            .bold_line_style(RGBColor(215, 215, 215))
            .draw(),
    )?;
    for &(color, level) in thresholds {
        let line = [(iterations.start, level), (iterations.end, level)];
        drawn(chart.draw_series(DashedLineSeries::new(line, 8, 6, color.stroke_width(2))))?;
    }
    for (_, color, points) in curves {
        let color = *color;
        let runs = log_runs(points);
        for run in &runs {
            drawn(chart.draw_series(LineSeries::new(run.iter().copied(), color.stroke_width(2))))?;
        }
        // Markers make a single iteration, or an isolated value between gaps, visible.
        let markers = runs
            .iter()
            .flatten()
            .map(|&p| Circle::new(p, 3, color.filled()));
        drawn(chart.draw_series(markers))?;
    }
    // The legend goes under the chart, in two columns, where it can hide no curve.
    let (width, _) = legend_area.dim_in_pixel();
    let column = width as i32 / 2;
    for (i, (label, color, _)) in curves.iter().enumerate() {
        let x = 20 + column * (i % 2) as i32;
        let y = 10 + 22 * (i / 2) as i32;
        drawn(legend_area.draw(&PathElement::new(
            vec![(x, y + 8), (x + 28, y + 8)],
            color.stroke_width(3),
        )))?;
        drawn(legend_area.draw_text(label, &font(14), (x + 36, y)))?;
    }
    Ok(())
}

/// Writes the convergence history of a reconstruction to `path` as two log-scale panels against
/// the iteration: on the left the data term `|L u - d|^2`, the TV term, the primal and dual
/// residuals and the penalty ρ; on the right the three relative measures of the stopping test
/// with their thresholds dashed (when the run stops on `convergence`), so a reader sees at a
/// glance whether, and on which measure, it converged. Values a log axis cannot show (zero,
/// negative, NaN) break their curve.
pub fn write_convergence_png(
    path: &Path,
    reports: &[IterationReport],
    convergence: Option<&Convergence>,
) -> Result<(), PlotError> {
    if reports.is_empty() {
        return Err(PlotError::Empty("the reconstruction ran no iteration"));
    }
    let series = |f: fn(&IterationReport) -> f64| -> Vec<(f64, f64)> {
        reports.iter().map(|r| (r.iteration as f64, f(r))).collect()
    };
    let first = reports.iter().map(|r| r.iteration).min().unwrap_or(0) as f64;
    let last = reports.iter().map(|r| r.iteration).max().unwrap_or(0) as f64;
    // Half an iteration of room on both sides keeps the first and last markers off the frame.
    let iterations = first - 0.5..last + 0.5;
    let terms = [
        ("data term |Lu - d|²", BLUE, series(|r| r.data_term)),
        ("TV term α Σ|ψ|", ORANGE, series(|r| r.tv_term)),
        (
            "primal residual |ψ - ∇u|²",
            GREEN,
            series(|r| r.primal_residual),
        ),
        (
            "dual residual |ρ ∇(u - u_prev)|²",
            VERMILION,
            series(|r| r.dual_residual),
        ),
        ("penalty ρ", PURPLE, series(|r| r.rho)),
    ];
    let measures = [
        ("volume change", BLUE, series(|r| r.change)),
        ("primal (relative)", GREEN, series(|r| r.primal_relative)),
        ("dual (relative)", VERMILION, series(|r| r.dual_relative)),
    ];
    let (thresholds, right_title) = match convergence {
        Some(c) => (
            vec![(BLUE, c.change), (GREEN, c.primal), (VERMILION, c.dual)],
            "stopping test: converged when all three are under their dashed lines",
        ),
        None => (vec![], "stopping test measures (fixed iteration count)"),
    };
    render_png(path, (1400, 700), |root| {
        let (left, right) = root.split_horizontally(700);
        draw_log_panel(
            &left,
            "ADMM-TV: objective terms, residuals, penalty",
            iterations.clone(),
            &terms,
            &[],
        )?;
        draw_log_panel(&right, right_title, iterations, &measures, &thresholds)
    })
}

/// Writes the fitted flat-field and dark-field (`height x width`, row-major) as images with
/// their value ranges, and the per-frame baseline as a curve, to `path`. An empty `baseline` (a
/// fit without one) is said so on the plot.
pub fn write_fields_png(
    path: &Path,
    flatfield: &[f32],
    darkfield: &[f32],
    (height, width): (usize, usize),
    baseline: &[f32],
) -> Result<(), PlotError> {
    let flat = Image::new("flat-field", flatfield, height, width)?;
    let dark = Image::new("dark-field", darkfield, height, width)?;
    let scale = flat.scale_for(PREVIEW_MIN_SIDE);
    // Large fields are shown at 1:1 or larger: no downsampling that could hide a defect.
    let (w, h) = (width * scale, height * scale);
    const PAD: usize = 24;
    const TITLE: usize = 36;
    const BAR: usize = 64;
    const CURVE: usize = 340;
    let canvas_w = (2 * w + 3 * PAD).max(1000);
    let canvas_h = TITLE + h + BAR + CURVE;
    render_png(path, (canvas_w, canvas_h), |root| {
        let images = [("flat-field", &flat, 0usize), ("dark-field", &dark, 1)];
        for (name, image, col) in images {
            let x = PAD + col * (w + PAD);
            let window = min_max(image.values);
            drawn(root.draw_text(name, &font(20), (x as i32, 8)))?;
            image.draw(root, (x as i32, TITLE as i32), scale, &grey(window))?;
            // A grey bar from black to white under the image, with the values at its ends.
            let bar_y = (TITLE + h + 8) as i32;
            const BAR_ROWS: usize = 14;
            let ramp: Vec<f32> = (0..BAR_ROWS * w)
                .map(|i| (i % w) as f32 / (w.max(2) - 1) as f32)
                .collect();
            let bar = Image::new("colour bar", &ramp, BAR_ROWS, w)?;
            bar.draw(root, (x as i32, bar_y), 1, &grey((0.0, 1.0)))?;
            let labels = format!(
                "{} (min)  …  {} (max), grey scale linear; {} x {} px, each drawn as {scale} x {scale}",
                short(window.0),
                short(window.1),
                height,
                width
            );
            drawn(root.draw_text(&labels, &font(13), (x as i32, bar_y + 20)))?;
        }
        let curve_area = root.clone().shrink(
            (0, (TITLE + h + BAR) as i32),
            (canvas_w as i32, CURVE as i32),
        );
        if baseline.is_empty() {
            drawn(curve_area.draw_text(
                "baseline: none fitted (a fit without a per-frame baseline)",
                &font(16),
                (PAD as i32, 40),
            ))?;
            return Ok(());
        }
        let points: Vec<(f64, f64)> = baseline
            .iter()
            .enumerate()
            .map(|(i, &b)| (i as f64, b as f64))
            .collect();
        let (lo, hi) = min_max(baseline);
        let span = f64::from(hi - lo)
            .max(f64::from(hi.abs().max(lo.abs())) * 1e-3)
            .max(1e-12);
        let y = f64::from(lo) - 0.05 * span..f64::from(hi) + 0.05 * span;
        let x = -0.5..(baseline.len() as f64 - 0.5).max(0.5);
        let mut chart = drawn(
            ChartBuilder::on(&curve_area)
                .caption("baseline (per-frame offset)", font(18))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(80)
                .build_cartesian_2d(x, y),
        )?;
        drawn(
            chart
                .configure_mesh()
                .x_desc("frame")
                .y_desc("baseline")
                .x_label_formatter(&|v| format!("{v:.0}"))
                .label_style(font(13))
                .axis_desc_style(font(15))
                .light_line_style(RGBColor(240, 240, 240))
                .draw(),
        )?;
        for run in finite_runs(&points) {
            drawn(chart.draw_series(LineSeries::new(run.iter().copied(), BLUE.stroke_width(2))))?;
        }
        if points.len() <= 200 {
            let markers = points
                .iter()
                .filter(|p| p.1.is_finite())
                .map(|&p| Circle::new(p, 2, BLUE.filled()));
            drawn(chart.draw_series(markers))?;
        }
        Ok(())
    })
}

/// The smallest and largest finite values, widened to a unit interval when they coincide (or
/// there are none).
fn min_max(values: &[f32]) -> (f32, f32) {
    let (lo, hi) = values
        .iter()
        .filter(|v| v.is_finite())
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    if hi > lo {
        (lo, hi)
    } else if hi == lo {
        (lo - 0.5, lo + 0.5)
    } else {
        (0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(series: &'a [Series<'a>]) -> PlotSpec<'a> {
        PlotSpec {
            title: "Accuracy vs time",
            x_label: "time (s)",
            y_label: "SSIM",
            x_range: (0.0, 1.0),
            y_range: (0.4, 1.0),
            series,
        }
    }

    /// How many pixels of `img` have exactly `color`.
    fn count(img: &RgbImage, color: [u8; 3]) -> usize {
        img.pixels().filter(|p| p.0 == color).count()
    }

    /// How many pixels are neither white nor near-white: drawn content.
    fn inked(img: &RgbImage) -> usize {
        img.pixels()
            .filter(|p| p.0.iter().any(|&c| c < 200))
            .count()
    }

    #[test]
    fn scatter_plots_draw_series_text_and_nothing_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        let points = [
            (0.3, 0.7),
            (f64::NAN, 0.5),
            (2.0, 0.55),
            (0.5, f64::INFINITY),
        ];
        let series = [Series {
            label: "run",
            color: [200, 30, 40],
            marker: Marker::Circle,
            points: &points,
            connect: true,
        }];
        write_scatter_png(&path, &spec(&series)).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (800, 600));
        // The filled marker (inside) and the hollow one (clamped to the border) are drawn.
        assert!(
            count(&img, [200, 30, 40]) >= 60,
            "{}",
            count(&img, [200, 30, 40])
        );
        // Text, axes and grid: far more than the markers alone.
        assert!(inked(&img) >= 2000, "{}", inked(&img));
        // No temporary file is left next to the plot.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn bad_ranges_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        for (x_range, y_range) in [
            ((0.0, f64::NAN), (0.0, 1.0)),
            ((0.0, 1.0), (f64::NEG_INFINITY, 1.0)),
            ((1.0, 1.0), (0.0, 1.0)),
            ((0.0, 1.0), (1.0, 0.0)),
        ] {
            let spec = PlotSpec {
                x_range,
                y_range,
                ..spec(&[])
            };
            let err = write_scatter_png(&path, &spec).unwrap_err();
            assert!(matches!(err, PlotError::BadRange { .. }), "{err}");
        }
        assert!(!path.exists());
    }

    #[test]
    fn the_embedded_font_draws_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.png");
        render_png(&path, (300, 60), |root| {
            drawn(root.draw_text("ρ ≥ 0.5 Å", &font(30), (5, 10)))
        })
        .unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        assert!(inked(&img) >= 200, "{}", inked(&img));
    }

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

    fn report(iteration: usize, scale: f64) -> IterationReport {
        IterationReport {
            iteration,
            data_term: 100.0 * scale,
            tv_term: 10.0 * scale,
            dual_term: 0.0,
            penalty_term: 0.0,
            lagrangian: 0.0,
            primal_residual: scale * 1e-2,
            dual_residual: scale * 1e-3,
            rho: 0.5,
            change: scale * 1e-2,
            primal_relative: scale * 1e-2,
            dual_relative: scale * 1e-1,
        }
    }

    #[test]
    fn convergence_plots_draw_every_curve_and_refuse_an_empty_history() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("convergence.png");
        let mut reports: Vec<_> = (0..30).map(|i| report(i, 0.8f64.powi(i as i32))).collect();
        // A NaN and a zero break their curves instead of failing the plot.
        reports[4].data_term = f64::NAN;
        reports[5].dual_residual = 0.0;
        write_convergence_png(&path, &reports, Some(&Convergence::DEFAULT)).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (1400, 700));
        for color in [BLUE, ORANGE, GREEN, VERMILION, PURPLE] {
            let n = count(&img, [color.0, color.1, color.2]);
            assert!(n >= 100, "{color:?}: {n} pixels");
        }
        write_convergence_png(&path, &reports[..1], None).unwrap();
        let err = write_convergence_png(&path, &[], None).unwrap_err();
        assert!(matches!(err, PlotError::Empty(_)), "{err}");
    }

    #[test]
    fn field_plots_show_both_fields_and_the_baseline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fields.png");
        let (h, w) = (24, 32);
        let flat: Vec<f32> = (0..h * w)
            .map(|i| 1.0 + 0.2 * ((i % w) as f32 / w as f32 - 0.5))
            .collect();
        let dark: Vec<f32> = (0..h * w).map(|i| (i / w) as f32).collect();
        let baseline: Vec<f32> = (0..50).map(|i| (i as f32 * 0.2).sin()).collect();
        write_fields_png(&path, &flat, &dark, (h, w), &baseline).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        let scale = 512usize.div_ceil(w);
        assert!(img.width() as usize >= 2 * w * scale);
        assert!(count(&img, [BLUE.0, BLUE.1, BLUE.2]) >= 200);
        // Both fields span black to white.
        assert!(count(&img, [0, 0, 0]) >= scale * scale * h);
        assert!(count(&img, [255, 255, 255]) >= scale * scale);
        write_fields_png(&path, &flat, &dark, (h, w), &[]).unwrap();
        let err = write_fields_png(&path, &flat, &dark[1..], (h, w), &[]).unwrap_err();
        assert!(matches!(err, PlotError::BadImage { .. }), "{err}");
    }
}
