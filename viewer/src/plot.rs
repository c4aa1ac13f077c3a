//! The live convergence plot: the convergence test's three measures per outer iteration (the
//! iterate's relative change, the primal and dual relative residuals) on a log scale, with the
//! test's tolerances, drawn with the painter (no plotting crate).

use eframe::egui::{self, Align2, Color32, FontId, Pos2, Rect, Sense, Shape, Stroke, Vec2};
use lamino::params::Convergence;
use lamino::solver::IterationReport;

/// The measures plotted: name, colour, value.
type Measure = (
    &'static str,
    Color32,
    fn(&IterationReport) -> f64,
    fn(&Convergence) -> f64,
);

const MEASURES: [Measure; 3] = [
    (
        "change",
        Color32::from_rgb(80, 160, 255),
        |r| r.change,
        |c| c.change,
    ),
    (
        "primal",
        Color32::from_rgb(255, 150, 60),
        |r| r.primal_relative,
        |c| c.primal,
    ),
    (
        "dual",
        Color32::from_rgb(120, 210, 120),
        |r| r.dual_relative,
        |c| c.dual,
    ),
];

/// Draws the plot of `reports` in a `size` area; `tolerance`: the run's convergence test (none
/// for a run of exactly N iterations).
pub fn convergence(
    ui: &mut egui::Ui,
    size: Vec2,
    reports: &[IterationReport],
    tolerance: Option<Convergence>,
) {
    let (response, painter) = ui.allocate_painter(size, Sense::hover());
    let frame = response.rect;
    let text = ui.visuals().text_color();
    painter.rect_stroke(
        frame,
        0.0,
        Stroke::new(1.0, ui.visuals().weak_text_color()),
        egui::StrokeKind::Inside,
    );
    let plot = Rect::from_min_max(
        frame.min + Vec2::new(48.0, 8.0),
        frame.max - Vec2::new(8.0, 20.0),
    );
    // The decades the finite, positive values and the tolerances span.
    let logs: Vec<f64> = reports
        .iter()
        .flat_map(|r| MEASURES.map(|(_, _, value, _)| value(r)))
        .chain(
            tolerance
                .iter()
                .flat_map(|c| MEASURES.map(|(_, _, _, tol)| tol(c))),
        )
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(f64::log10)
        .collect();
    if logs.is_empty() {
        painter.text(
            frame.center(),
            Align2::CENTER_CENTER,
            "convergence: no iteration yet",
            FontId::proportional(12.0),
            text,
        );
        return;
    }
    let lo = logs.iter().copied().fold(f64::INFINITY, f64::min).floor();
    let hi = logs
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        .max(lo + 1.0);
    let last = reports.last().map_or(1, |r| r.iteration + 1).max(2);
    let x = |i: usize| plot.left() + plot.width() * i as f32 / (last - 1) as f32;
    let y = |v: f64| plot.bottom() - plot.height() * ((v.log10() - lo) / (hi - lo)) as f32;
    for decade in lo as i32..=hi as i32 {
        let at = y(10f64.powi(decade));
        painter.line_segment(
            [Pos2::new(plot.left(), at), Pos2::new(plot.right(), at)],
            Stroke::new(0.5, ui.visuals().faint_bg_color),
        );
        painter.text(
            Pos2::new(plot.left() - 4.0, at),
            Align2::RIGHT_CENTER,
            format!("1e{decade}"),
            FontId::monospace(10.0),
            text,
        );
    }
    painter.text(
        Pos2::new(plot.center().x, frame.bottom() - 2.0),
        Align2::CENTER_BOTTOM,
        format!("outer iteration (1..{last})"),
        FontId::proportional(11.0),
        text,
    );
    for (k, (name, colour, value, tol)) in MEASURES.into_iter().enumerate() {
        if let Some(c) = &tolerance {
            let at = y(tol(c));
            painter.add(Shape::dashed_line(
                &[Pos2::new(plot.left(), at), Pos2::new(plot.right(), at)],
                Stroke::new(1.0, colour.gamma_multiply(0.6)),
                6.0,
                4.0,
            ));
        }
        let points: Vec<Pos2> = reports
            .iter()
            .filter(|r| value(r).is_finite() && value(r) > 0.0)
            .map(|r| Pos2::new(x(r.iteration), y(value(r))))
            .collect();
        painter.add(Shape::line(points, Stroke::new(1.5, colour)));
        painter.text(
            Pos2::new(plot.right() - 4.0, plot.top() + 4.0 + 14.0 * k as f32),
            Align2::RIGHT_TOP,
            name,
            FontId::proportional(12.0),
            colour,
        );
    }
}
