//! The drawing machinery every figure shares: [`PlotError`], the embedded font, drawing into
//! an RGB buffer and writing it as PNG ([`render_png`]), value images drawn through colour maps
//! ([`Image`], [`grey`], [`diverging`]), the robust grey window, caption numbers and the curve
//! colours.
//!
//! Everything is drawn with `plotters`' bitmap backend into an RGB buffer and written as PNG
//! atomically (a temporary file renamed into place). Text is drawn with DejaVu Sans, embedded in
//! the binary from `assets/fonts`, so no system font is needed or consulted.

use std::io::Cursor;
use std::path::Path;
use std::sync::OnceLock;

use image::{ImageFormat, RgbImage};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use thiserror::Error;

use crate::io::{write_atomically, IoError};

/// The shortest long side, in pixels, of a slice preview.
pub const PREVIEW_MIN_SIDE: usize = 512;
/// The grey window of previews and panels: these percentiles of the finite values.
pub const GREY_WINDOW_PERCENTILES: (f64, f64) = (0.5, 99.5);

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
static FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

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

pub(crate) fn font(size: u32) -> TextStyle<'static> {
    (FONT_FAMILY, size).into_font().color(&BLACK)
}

/// Turns plotters' errors (generic over the backend) into [`PlotError::Draw`].
pub(crate) fn drawn<T, E: std::fmt::Display>(result: Result<T, E>) -> Result<T, PlotError> {
    result.map_err(|e| PlotError::Draw(e.to_string()))
}

pub(crate) type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// The largest picture side drawn; beyond it a PNG is impractical to open anyway.
const MAX_SIDE: usize = 1 << 15;

/// Draws a `width x height` picture on a white background with `draw` and writes it to `path`.
pub(crate) fn render_png(
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

pub(super) fn rgb([r, g, b]: [u8; 3]) -> RGBColor {
    RGBColor(r, g, b)
}

/// The maximal runs of consecutive finite points: a non-finite point breaks a connecting line.
pub(crate) fn finite_runs(points: &[(f64, f64)]) -> impl Iterator<Item = &[(f64, f64)]> {
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
pub(crate) type ColorMap<'a> = &'a dyn Fn(f32) -> [u8; 3];

/// Grey levels from black at `lo` to white at `hi`; non-finite values are drawn magenta, a colour
/// no grey level resembles.
pub(crate) fn grey((lo, hi): (f32, f32)) -> impl Fn(f32) -> [u8; 3] {
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
pub(super) fn diverging(limit: f32) -> impl Fn(f32) -> [u8; 3] {
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
pub(crate) struct Image<'a> {
    pub(crate) values: &'a [f32],
    height: usize,
    width: usize,
}

impl<'a> Image<'a> {
    pub(crate) fn new(
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

    pub(crate) fn height(&self) -> usize {
        self.height
    }
    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// The smallest integer enlargement that makes the long side at least `min_side` pixels.
    pub(crate) fn scale_for(&self, min_side: usize) -> usize {
        min_side.div_ceil(self.height.max(self.width)).max(1)
    }

    /// Draws the image enlarged `scale` times (nearest neighbour) with its top left corner at
    /// `(x, y)` of `area`.
    pub(crate) fn draw(
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
pub(crate) fn short(v: f32) -> String {
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

/// Colours of curves (the convergence history, the flat-field baseline), readable on white and
/// distinct for colour-blind readers (Okabe-Ito).
pub(crate) const BLUE: RGBColor = RGBColor(0, 114, 178);
pub(super) const ORANGE: RGBColor = RGBColor(230, 159, 0);
pub(super) const GREEN: RGBColor = RGBColor(0, 158, 115);
pub(super) const VERMILION: RGBColor = RGBColor(213, 94, 0);
pub(super) const PURPLE: RGBColor = RGBColor(204, 121, 167);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// How many pixels of `img` have exactly `color`.
    pub(crate) fn count(img: &RgbImage, color: [u8; 3]) -> usize {
        img.pixels().filter(|p| p.0 == color).count()
    }

    /// How many pixels are neither white nor near-white: drawn content.
    pub(crate) fn inked(img: &RgbImage) -> usize {
        img.pixels()
            .filter(|p| p.0.iter().any(|&c| c < 200))
            .count()
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
}
