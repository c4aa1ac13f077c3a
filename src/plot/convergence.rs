//! The solver's convergence history ([`write_convergence_png`]): objective terms, residuals and
//! the penalty, and the measures of the stopping test against their thresholds, on log axes.

use std::ops::Range;
use std::path::Path;

use plotters::prelude::*;

use super::canvas::{
    drawn, font, render_png, Area, PlotError, BLUE, GREEN, ORANGE, PURPLE, VERMILION,
};
use crate::params::Convergence;
use crate::solver::IterationReport;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::canvas::tests::count;

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
}
