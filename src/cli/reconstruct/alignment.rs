//! The outputs of projection matching (`reconstruct --align`, `lamino align`): shifts.csv (the
//! format `--shifts` reads), shifts.png (each projection's shift against its angle) and
//! alignment.png (how far each round moved the shifts).

use crate::io::{write_shifts, OutputSet};
use crate::plot::{write_scatter_png, Marker, PlotSpec, Series};
use crate::preprocess::Alignment;

/// What projection matching writes.
pub const ALIGNMENT_OUTPUTS: [&str; 3] = ["shifts.csv", "shifts.png", "alignment.png"];

/// Stages `alignment`'s outputs in `set`, for projections at `theta` (radians).
pub fn stage_alignment(
    set: &mut OutputSet,
    theta: &[f64],
    alignment: &Alignment,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let [csv, shifts_png, rounds_png] = ALIGNMENT_OUTPUTS;
    write_shifts(&set.stage(csv)?, theta, &alignment.shifts)?;
    let degrees: Vec<f64> = theta.iter().map(|t| t.to_degrees()).collect();
    let series = |axis: usize| -> Vec<(f64, f64)> {
        degrees
            .iter()
            .zip(&alignment.shifts)
            .map(|(&a, s)| (a, s[axis]))
            .collect()
    };
    let (du, dv) = (series(0), series(1));
    let reach = alignment
        .shifts
        .iter()
        .flatten()
        .fold(0.5f64, |m, v| m.max(v.abs() * 1.1));
    let (first, last) = (degrees[0], degrees[degrees.len() - 1]);
    let path = set.stage(shifts_png)?;
    write_scatter_png(
        &path,
        &PlotSpec {
            title: "Projection shifts (projection matching)",
            x_label: "angle (degrees)",
            y_label: "shift (pixels of the recorded detector)",
            x_range: (first.min(last) - 1.0, first.max(last) + 1.0),
            y_range: (-reach, reach),
            series: &[
                Series {
                    label: "du (columns)",
                    color: [31, 119, 180],
                    marker: Marker::Circle,
                    points: &du,
                    connect: true,
                },
                Series {
                    label: "dv (rows)",
                    color: [214, 39, 40],
                    marker: Marker::Square,
                    points: &dv,
                    connect: true,
                },
            ],
        },
    )
    .map_err(|e| e.into_io(&path))?;
    // log10 of each round's RMS update, against the round.
    let rounds: Vec<(f64, f64)> = alignment
        .rounds
        .iter()
        .enumerate()
        .map(|(i, r)| ((i + 1) as f64, r.rms_update_px.max(1e-6).log10()))
        .collect();
    // The tolerance as a line across the rounds; a decade below the lowest point leaves the
    // lower right corner, where the legend sits, to it.
    let tolerance_log = alignment.options.tolerance_px.max(1e-6).log10();
    let last = rounds.len() as f64 + 0.5;
    let tolerance = [(0.5, tolerance_log), (last, tolerance_log)];
    let top = rounds.iter().fold(0.0f64, |m, p| m.max(p.1)).ceil();
    let lowest = rounds.iter().fold(tolerance_log, |m, p| m.min(p.1));
    let bottom = (lowest - 1.0).floor();
    let path = set.stage(rounds_png)?;
    write_scatter_png(
        &path,
        &PlotSpec {
            title: "Projection matching: how far each round moved the shifts",
            x_label: "round (coarse levels first)",
            y_label: "log10 RMS update (pixels)",
            x_range: (0.5, last),
            y_range: (bottom, top + 0.1),
            series: &[
                Series {
                    label: "RMS update",
                    color: [31, 119, 180],
                    marker: Marker::Circle,
                    points: &rounds,
                    connect: true,
                },
                Series {
                    label: "tolerance",
                    color: [44, 160, 44],
                    marker: Marker::Cross,
                    points: &tolerance,
                    connect: true,
                },
            ],
        },
    )
    .map_err(|e| e.into_io(&path))?;
    Ok(())
}
