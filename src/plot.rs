//! Accuracy-vs-time scatter plots as 800 x 600 RGB PNGs, drawn pixel by pixel with a built-in
//! 5 x 7 bitmap font, so that reports need no plotting library or system fonts.

use std::io::Cursor;
use std::path::Path;

use image::{ImageFormat, Rgb, RgbImage};
use thiserror::Error;

use crate::io::{write_atomically, IoError};

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

/// Errors drawing or writing a plot.
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
    /// The image could not be encoded as PNG.
    #[error("cannot encode the plot as PNG: {0}")]
    Encode(#[from] image::ImageError),
    /// The PNG could not be written.
    #[error(transparent)]
    Write(#[from] IoError),
}

const WIDTH: u32 = 800;
const HEIGHT: u32 = 600;
/// The plot area in pixels: the left margin holds the y tick labels and the rotated y label, the
/// bottom margin the x tick labels and the x label, the top margin the title.
const LEFT: i32 = 110;
const RIGHT: i32 = WIDTH as i32 - 30;
const TOP: i32 = 50;
const BOTTOM: i32 = HEIGHT as i32 - 70;
/// Half the width of a marker in pixels.
const MARKER_RADIUS: i32 = 5;
/// The scale of labels and legend text; the title is drawn one step larger.
const TEXT_SCALE: i32 = 2;

const WHITE: Rgb<u8> = Rgb([255, 255, 255]);
const BLACK: Rgb<u8> = Rgb([0, 0, 0]);
const GRID: Rgb<u8> = Rgb([225, 225, 225]);

/// Draws `spec` and writes it to `path` as a PNG, atomically (a temporary file next to `path` is
/// renamed into place), so a reader never sees a half-written plot.
///
/// Points outside the ranges are clamped to the border of the plot area and drawn hollow, so they
/// stay visible but cannot be mistaken for values on the border. The legend sits in the lower right
/// corner of the plot area, where rising accuracy-vs-time curves leave room.
pub fn write_scatter_png(path: &Path, spec: &PlotSpec) -> Result<(), PlotError> {
    for (axis, (low, high)) in [("x", spec.x_range), ("y", spec.y_range)] {
        // `!(low < high)` is also true when either end is NaN.
        if !low.is_finite() || !high.is_finite() || low >= high {
            return Err(PlotError::BadRange { axis, low, high });
        }
    }
    let img = render(spec);
    let mut png = Vec::new();
    img.write_to(&mut Cursor::new(&mut png), ImageFormat::Png)?;
    write_atomically(path, |tmp| {
        std::fs::write(tmp, &png).map_err(|e| e.to_string())
    })?;
    Ok(())
}

/// Maps a data point to canvas pixel coordinates for the given (valid) ranges, clamped to the plot
/// area; the flag says whether the point lay inside the ranges.
pub(crate) fn to_pixel(
    x_range: (f64, f64),
    y_range: (f64, f64),
    (x, y): (f64, f64),
) -> (i32, i32, bool) {
    let fx = (x - x_range.0) / (x_range.1 - x_range.0);
    let fy = (y - y_range.0) / (y_range.1 - y_range.0);
    let inside = (0.0..=1.0).contains(&fx) && (0.0..=1.0).contains(&fy);
    let px = LEFT as f64 + fx.clamp(0.0, 1.0) * (RIGHT - LEFT) as f64;
    let py = BOTTOM as f64 - fy.clamp(0.0, 1.0) * (BOTTOM - TOP) as f64;
    (px.round() as i32, py.round() as i32, inside)
}

fn render(spec: &PlotSpec) -> RgbImage {
    let mut img = RgbImage::from_pixel(WIDTH, HEIGHT, WHITE);
    let s = TEXT_SCALE;
    let x_ticks = ticks(spec.x_range);
    let y_ticks = ticks(spec.y_range);
    // Grid first, so the frame, lines and markers are drawn over it.
    for (v, _) in &x_ticks {
        let (px, _, _) = to_pixel(spec.x_range, spec.y_range, (*v, spec.y_range.0));
        fill_rect(&mut img, px, TOP, px, BOTTOM, GRID);
    }
    for (v, _) in &y_ticks {
        let (_, py, _) = to_pixel(spec.x_range, spec.y_range, (spec.x_range.0, *v));
        fill_rect(&mut img, LEFT, py, RIGHT, py, GRID);
    }
    stroke_rect(&mut img, LEFT, TOP, RIGHT, BOTTOM, BLACK);
    for (v, label) in &x_ticks {
        let (px, _, _) = to_pixel(spec.x_range, spec.y_range, (*v, spec.y_range.0));
        fill_rect(&mut img, px, BOTTOM, px, BOTTOM + 6, BLACK);
        draw_text(
            &mut img,
            label,
            px - text_width(label, s) / 2,
            BOTTOM + 12,
            s,
            BLACK,
        );
    }
    for (v, label) in &y_ticks {
        let (_, py, _) = to_pixel(spec.x_range, spec.y_range, (spec.x_range.0, *v));
        fill_rect(&mut img, LEFT - 6, py, LEFT, py, BLACK);
        let x = LEFT - 10 - text_width(label, s);
        draw_text(&mut img, label, x, py - GLYPH_HEIGHT * s / 2, s, BLACK);
    }
    let mid_x = (LEFT + RIGHT) / 2;
    let title_x = mid_x - text_width(spec.title, s + 1) / 2;
    draw_text(&mut img, spec.title, title_x, 15, s + 1, BLACK);
    let x_label_x = mid_x - text_width(spec.x_label, s) / 2;
    draw_text(&mut img, spec.x_label, x_label_x, BOTTOM + 40, s, BLACK);
    let y_label_y = (TOP + BOTTOM) / 2 + text_width(spec.y_label, s) / 2;
    draw_text_up(&mut img, spec.y_label, 12, y_label_y, s);

    // All lines before any marker, so no line crosses over a marker of another series.
    for series in spec.series.iter().filter(|series| series.connect) {
        let color = Rgb(series.color);
        for pair in series.points.windows(2) {
            let finite = |(x, y): (f64, f64)| x.is_finite() && y.is_finite();
            if finite(pair[0]) && finite(pair[1]) {
                let (x0, y0, _) = to_pixel(spec.x_range, spec.y_range, pair[0]);
                let (x1, y1, _) = to_pixel(spec.x_range, spec.y_range, pair[1]);
                draw_line(&mut img, (x0, y0), (x1, y1), color);
            }
        }
    }
    for series in spec.series {
        for &(x, y) in series.points {
            if x.is_finite() && y.is_finite() {
                let (px, py, inside) = to_pixel(spec.x_range, spec.y_range, (x, y));
                draw_marker(&mut img, series.marker, px, py, Rgb(series.color), !inside);
            }
        }
    }
    draw_legend(&mut img, spec.series);
    img
}

/// Round tick positions covering `range` and their labels: the smallest step of 1, 2 or 5 times a
/// power of ten giving at most 7 ticks, with as many decimals as the step needs.
fn ticks((low, high): (f64, f64)) -> Vec<(f64, String)> {
    // The multiples of `step` inside the range; the slack keeps an end that is itself a multiple
    // (0.3 / 0.1 = 2.9999999999999996) from being dropped.
    let multiples = |step: f64| {
        let first = (low / step - 1e-9).ceil() as i64;
        let last = (high / step + 1e-9).floor() as i64;
        first..=last
    };
    let mut exponent = ((high - low) / 7.0).log10().floor() as i32;
    let step = loop {
        let fits = [1.0, 2.0, 5.0]
            .into_iter()
            .map(|m| m * 10f64.powi(exponent))
            .find(|&step| multiples(step).count() <= 7);
        if let Some(step) = fits {
            break step;
        }
        exponent += 1;
    };
    let decimals = (-exponent).max(0) as usize;
    // Integer multiples of the step, so no rounding error accumulates and zero is never "-0.0".
    multiples(step)
        .map(|k| {
            let v = k as f64 * step;
            (v, format!("{v:.decimals$}"))
        })
        .collect()
}

/// A box in the lower right of the plot area with one row per series: its marker (over a line
/// segment when the series is connected) and its label.
fn draw_legend(img: &mut RgbImage, series: &[Series]) {
    if series.is_empty() {
        return;
    }
    let s = TEXT_SCALE;
    let row = GLYPH_HEIGHT * s + 8;
    let sample = 30;
    let widest = series
        .iter()
        .map(|se| text_width(se.label, s))
        .max()
        .unwrap_or(0);
    let (x1, y1) = (RIGHT - 10, BOTTOM - 10);
    let (x0, y0) = (
        x1 - widest - sample - 24,
        y1 - row * series.len() as i32 - 8,
    );
    fill_rect(img, x0, y0, x1, y1, WHITE);
    stroke_rect(img, x0, y0, x1, y1, BLACK);
    for (i, se) in series.iter().enumerate() {
        let cy = y0 + 4 + row * i as i32 + row / 2;
        let cx = x0 + 8 + sample / 2;
        let color = Rgb(se.color);
        if se.connect {
            draw_line(img, (cx - sample / 2, cy), (cx + sample / 2, cy), color);
        }
        draw_marker(img, se.marker, cx, cy, color, false);
        let tx = x0 + 16 + sample;
        draw_text(img, se.label, tx, cy - GLYPH_HEIGHT * s / 2, s, BLACK);
    }
}

/// Sets one pixel; pixels off the canvas are dropped, so shapes near the edge are clipped.
fn put(img: &mut RgbImage, x: i32, y: i32, color: Rgb<u8>) {
    if (0..WIDTH as i32).contains(&x) && (0..HEIGHT as i32).contains(&y) {
        img.put_pixel(x as u32, y as u32, color);
    }
}

/// Fills the rectangle with corners `(x0, y0)` and `(x1, y1)`, both included.
fn fill_rect(img: &mut RgbImage, x0: i32, y0: i32, x1: i32, y1: i32, color: Rgb<u8>) {
    for y in y0..=y1 {
        for x in x0..=x1 {
            put(img, x, y, color);
        }
    }
}

fn stroke_rect(img: &mut RgbImage, x0: i32, y0: i32, x1: i32, y1: i32, color: Rgb<u8>) {
    fill_rect(img, x0, y0, x1, y0, color);
    fill_rect(img, x0, y1, x1, y1, color);
    fill_rect(img, x0, y0, x0, y1, color);
    fill_rect(img, x1, y0, x1, y1, color);
}

/// A 2-pixel-wide line (Bresenham, each step widened by the pixel below and to the right), which
/// reads better than a 1-pixel one at this size.
fn draw_line(img: &mut RgbImage, (x0, y0): (i32, i32), (x1, y1): (i32, i32), color: Rgb<u8>) {
    let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
    let (sx, sy) = ((x1 - x0).signum(), (y1 - y0).signum());
    let (mut x, mut y, mut err) = (x0, y0, dx + dy);
    loop {
        fill_rect(img, x, y, x + 1, y + 1, color);
        if (x, y) == (x1, y1) {
            break;
        }
        let e2 = 2 * err;
        if e2 >= dy {
            err += dy;
            x += sx;
        }
        if e2 <= dx {
            err += dx;
            y += sy;
        }
    }
}

/// Whether the pixel at offset `(dx, dy)` from a marker's centre belongs to the marker grown by
/// `grow` pixels (negative shrinks it).
fn in_marker(marker: Marker, dx: i32, dy: i32, grow: i32) -> bool {
    let r = MARKER_RADIUS + grow;
    match marker {
        Marker::Circle => dx * dx + dy * dy <= r * r + r,
        Marker::Square => dx.abs().max(dy.abs()) < r,
        // Two diagonal bands, 5 pixels wide at `grow = 0`, 1 pixel wide at `grow = -2`.
        Marker::Cross => (dx.abs() - dy.abs()).abs() <= 2 + grow && dx.abs().max(dy.abs()) <= r,
    }
}

/// A marker centred on `(x, y)`; a hollow one is the same shape with its inside, 2 pixels in from
/// the outline, left white.
fn draw_marker(img: &mut RgbImage, marker: Marker, x: i32, y: i32, color: Rgb<u8>, hollow: bool) {
    let r = MARKER_RADIUS + 1;
    for dy in -r..=r {
        for dx in -r..=r {
            if hollow && in_marker(marker, dx, dy, -2) {
                put(img, x + dx, y + dy, WHITE);
            } else if in_marker(marker, dx, dy, 0) {
                put(img, x + dx, y + dy, color);
            }
        }
    }
}

const GLYPH_WIDTH: i32 = 5;
const GLYPH_HEIGHT: i32 = 7;

/// Rows of each glyph, top to bottom; bit 4 is the leftmost column.
#[rustfmt::skip]
const FONT: &[(char, [u8; 7])] = &[
    (' ', [0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000]),
    ('0', [0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110]),
    ('1', [0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110]),
    ('2', [0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111]),
    ('3', [0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110]),
    ('4', [0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010]),
    ('5', [0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110]),
    ('6', [0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110]),
    ('7', [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000]),
    ('8', [0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110]),
    ('9', [0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100]),
    ('A', [0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001]),
    ('B', [0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110]),
    ('C', [0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110]),
    ('D', [0b11100, 0b10010, 0b10001, 0b10001, 0b10001, 0b10010, 0b11100]),
    ('E', [0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111]),
    ('F', [0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000]),
    ('G', [0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111]),
    ('H', [0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001]),
    ('I', [0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110]),
    ('J', [0b00111, 0b00010, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100]),
    ('K', [0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001]),
    ('L', [0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111]),
    ('M', [0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001]),
    ('N', [0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001]),
    ('O', [0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110]),
    ('P', [0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000]),
    ('Q', [0b01110, 0b10001, 0b10001, 0b10001, 0b10101, 0b10010, 0b01101]),
    ('R', [0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001]),
    ('S', [0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110]),
    ('T', [0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100]),
    ('U', [0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110]),
    ('V', [0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100]),
    ('W', [0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010]),
    ('X', [0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001]),
    ('Y', [0b10001, 0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100]),
    ('Z', [0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111]),
    ('a', [0b00000, 0b00000, 0b01110, 0b00001, 0b01111, 0b10001, 0b01111]),
    ('b', [0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b11110]),
    ('c', [0b00000, 0b00000, 0b01110, 0b10000, 0b10000, 0b10001, 0b01110]),
    ('d', [0b00001, 0b00001, 0b01101, 0b10011, 0b10001, 0b10001, 0b01111]),
    ('e', [0b00000, 0b00000, 0b01110, 0b10001, 0b11111, 0b10000, 0b01110]),
    ('f', [0b00110, 0b01001, 0b01000, 0b11100, 0b01000, 0b01000, 0b01000]),
    ('g', [0b00000, 0b00000, 0b01111, 0b10001, 0b01111, 0b00001, 0b01110]),
    ('h', [0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001]),
    ('i', [0b00100, 0b00000, 0b01100, 0b00100, 0b00100, 0b00100, 0b01110]),
    ('j', [0b00010, 0b00000, 0b00110, 0b00010, 0b00010, 0b10010, 0b01100]),
    ('k', [0b10000, 0b10000, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010]),
    ('l', [0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110]),
    ('m', [0b00000, 0b00000, 0b11010, 0b10101, 0b10101, 0b10001, 0b10001]),
    ('n', [0b00000, 0b00000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001]),
    ('o', [0b00000, 0b00000, 0b01110, 0b10001, 0b10001, 0b10001, 0b01110]),
    ('p', [0b00000, 0b00000, 0b11110, 0b10001, 0b11110, 0b10000, 0b10000]),
    ('q', [0b00000, 0b00000, 0b01101, 0b10011, 0b01111, 0b00001, 0b00001]),
    ('r', [0b00000, 0b00000, 0b10110, 0b11001, 0b10000, 0b10000, 0b10000]),
    ('s', [0b00000, 0b00000, 0b01110, 0b10000, 0b01110, 0b00001, 0b11110]),
    ('t', [0b01000, 0b01000, 0b11100, 0b01000, 0b01000, 0b01001, 0b00110]),
    ('u', [0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b10011, 0b01101]),
    ('v', [0b00000, 0b00000, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100]),
    ('w', [0b00000, 0b00000, 0b10001, 0b10001, 0b10101, 0b10101, 0b01010]),
    ('x', [0b00000, 0b00000, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001]),
    ('y', [0b00000, 0b00000, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110]),
    ('z', [0b00000, 0b00000, 0b11111, 0b00010, 0b00100, 0b01000, 0b11111]),
    ('.', [0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b01100]),
    (',', [0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b00100, 0b01000]),
    (':', [0b00000, 0b01100, 0b01100, 0b00000, 0b01100, 0b01100, 0b00000]),
    ('(', [0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010]),
    (')', [0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000]),
    ('[', [0b01110, 0b01000, 0b01000, 0b01000, 0b01000, 0b01000, 0b01110]),
    (']', [0b01110, 0b00010, 0b00010, 0b00010, 0b00010, 0b00010, 0b01110]),
    ('-', [0b00000, 0b00000, 0b00000, 0b11111, 0b00000, 0b00000, 0b00000]),
    ('+', [0b00000, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0b00000]),
    ('=', [0b00000, 0b00000, 0b11111, 0b00000, 0b11111, 0b00000, 0b00000]),
    ('_', [0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b11111]),
    ('/', [0b00000, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b00000]),
    ('%', [0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011]),
    ('<', [0b00010, 0b00100, 0b01000, 0b10000, 0b01000, 0b00100, 0b00010]),
    ('>', [0b01000, 0b00100, 0b00010, 0b00001, 0b00010, 0b00100, 0b01000]),
    ('\'', [0b00100, 0b00100, 0b01000, 0b00000, 0b00000, 0b00000, 0b00000]),
];

/// The rows of `c`'s glyph; characters the font lacks (`≥`, accents, ...) are drawn as a solid
/// block, which no real glyph resembles, so a stray character shows up in the image instead of
/// vanishing or panicking.
fn glyph(c: char) -> [u8; 7] {
    const MISSING: [u8; 7] = [0b11111; 7];
    FONT.iter()
        .find(|(g, _)| *g == c)
        .map_or(MISSING, |(_, rows)| *rows)
}

/// Width in pixels of `text` at `scale`: glyphs are one column apart.
fn text_width(text: &str, scale: i32) -> i32 {
    let n = text.chars().count() as i32;
    (n * (GLYPH_WIDTH + 1) - 1).max(0) * scale
}

/// Draws `text` left to right with its top left corner at `(x, y)`.
fn draw_text(img: &mut RgbImage, text: &str, x: i32, y: i32, scale: i32, color: Rgb<u8>) {
    draw_glyphs(text, scale, |gx, gy| {
        fill_rect(
            img,
            x + gx,
            y + gy,
            x + gx + scale - 1,
            y + gy + scale - 1,
            color,
        );
    });
}

/// Draws black `text` rotated a quarter turn anticlockwise (reading bottom to top), starting at
/// `(x, y)`, the bottom left corner of its first glyph.
fn draw_text_up(img: &mut RgbImage, text: &str, x: i32, y: i32, scale: i32) {
    draw_glyphs(text, scale, |gx, gy| {
        fill_rect(
            img,
            x + gy,
            y - gx - scale + 1,
            x + gy + scale - 1,
            y - gx,
            BLACK,
        );
    });
}

/// Calls `dot` with the offset from the text's top left corner of every set, `scale`-sized dot.
fn draw_glyphs(text: &str, scale: i32, mut dot: impl FnMut(i32, i32)) {
    for (i, c) in text.chars().enumerate() {
        for (row, bits) in glyph(c).into_iter().enumerate() {
            for col in 0..GLYPH_WIDTH {
                if bits & (1 << (GLYPH_WIDTH - 1 - col)) != 0 {
                    let gx = (i as i32 * (GLYPH_WIDTH + 1) + col) * scale;
                    dot(gx, row as i32 * scale);
                }
            }
        }
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

    #[test]
    fn markers_land_where_to_pixel_says() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        let inside = (0.3, 0.7);
        let outside = (2.0, 0.55);
        let points = [inside, (f64::NAN, 0.5), outside, (0.5, f64::INFINITY)];
        let series = [Series {
            label: "run",
            color: [200, 30, 40],
            marker: Marker::Circle,
            points: &points,
            connect: true,
        }];
        let spec = spec(&series);
        write_scatter_png(&path, &spec).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (WIDTH, HEIGHT));
        let at = |x: i32, y: i32| img.get_pixel(x as u32, y as u32).0;

        let (x, y, within) = to_pixel(spec.x_range, spec.y_range, inside);
        assert!(within);
        assert_eq!(at(x, y), [200, 30, 40]);
        // Clamped to the right border and hollow: white centre, coloured outline.
        let (x, y, within) = to_pixel(spec.x_range, spec.y_range, outside);
        assert!(!within);
        assert_eq!(x, RIGHT);
        assert_eq!(at(x, y), [255, 255, 255]);
        assert_eq!(at(x - MARKER_RADIUS, y), [200, 30, 40]);
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
    fn ticks_are_round_and_few() {
        let labels = |range| ticks(range).into_iter().map(|(_, l)| l).collect::<Vec<_>>();
        assert_eq!(
            labels((0.4, 1.0)),
            ["0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1.0"]
        );
        assert_eq!(
            labels((0.0, 1.0)),
            ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]
        );
        assert_eq!(
            labels((-0.3, 0.3)),
            ["-0.3", "-0.2", "-0.1", "0.0", "0.1", "0.2", "0.3"]
        );
        assert_eq!(labels((0.0, 3600.0)), ["0", "1000", "2000", "3000"]);
        for range in [(0.0, 1e-3), (-7.0, 1e6), (0.123, 0.124), (5.0, 5.5)] {
            let t = ticks(range);
            assert!((2..=7).contains(&t.len()), "{range:?}: {t:?}");
        }
    }

    #[test]
    fn every_character_labels_use_has_a_glyph() {
        let promised = ('0'..='9')
            .chain('A'..='Z')
            .chain('a'..='z')
            .chain(" .,:()[]-+=_/%<>'".chars());
        for c in promised {
            assert!(FONT.iter().any(|(g, _)| *g == c), "no glyph for {c:?}");
        }
        let mut seen = std::collections::HashSet::new();
        assert!(
            FONT.iter().all(|(g, _)| seen.insert(*g)),
            "a glyph is defined twice"
        );
        assert!(FONT
            .iter()
            .all(|(_, rows)| rows.iter().all(|r| *r < 1 << GLYPH_WIDTH)));
    }

    #[test]
    fn unknown_characters_draw_a_block() {
        let mut img = RgbImage::from_pixel(WIDTH, HEIGHT, WHITE);
        // Off-canvas text is clipped rather than panicking.
        draw_text(&mut img, "≥é", -3, HEIGHT as i32 - 4, 1, BLACK);
        draw_text(&mut img, "≥", 10, 10, 1, BLACK);
        let black = |x: u32, y: u32| img.get_pixel(x, y).0 == [0, 0, 0];
        assert!((10..15).all(|x| (10..17).all(|y| black(x, y))));
        assert!(
            !black(15, 10) && !black(10, 17),
            "the block has the glyph's size"
        );
    }
}
