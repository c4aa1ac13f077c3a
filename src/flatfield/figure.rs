//! The figure of a flat-field fit ([`write_fields_png`]): the fitted flat-field and dark-field
//! with their value ranges, and the per-frame baseline as a curve. It sits beside the fit it
//! draws and uses the shared drawing machinery of [`crate::plot`].

use std::path::Path;

use plotters::prelude::*;

use crate::plot::canvas::{
    drawn, finite_runs, font, grey, render_png, short, Image, PlotError, BLUE, PREVIEW_MIN_SIDE,
};

/// Writes the fitted flat-field and dark-field (`height x width`, row-major) as images with
/// their value ranges, and the per-frame baseline as a curve, to `path`. An empty `baseline` (a
/// fit without one) is said so on the plot.
pub(super) fn write_fields_png(
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
    use crate::plot::canvas::tests::count;

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
