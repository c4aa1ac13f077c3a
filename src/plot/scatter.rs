//! Scatter plots of series of points ([`write_scatter_png`]): accuracy against time, one series per
//! solver setting, points outside the visible ranges clamped to the border and drawn hollow.

use std::path::Path;

use plotters::prelude::*;

use super::canvas::{drawn, finite_runs, font, render_png, rgb, PlotError};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::canvas::tests::{count, inked};

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
}
