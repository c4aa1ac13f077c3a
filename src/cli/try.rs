//! `lamino try`: reconstruct a thin slab for every candidate rotation axis and tilt, write a
//! preview per candidate and the scores, print the sharpest (tomocupy's `try` / `try_lamino`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use crate::io::{write_atomically, write_tiff_volume, OutputSet, Stack};
use crate::plot::write_preview_png;
use crate::preprocess::{candidate_range, check_grid, AxisGrid, Scored};
use crate::scan::validate_scan_geometry;
use crate::{DetectorColumn, Geometry};

use super::reconstruct::{InputArgs, PreprocessArgs};
use super::{Cli, CliResult};

#[derive(Args)]
pub struct TryArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    preprocess: PreprocessArgs,
    /// Candidate rotation axes A:B:STEP (unbinned detector columns, B included).
    #[arg(long, value_parser = parse_range, allow_hyphen_values = true)]
    rotation_axis_range: Option<[f64; 3]>,
    /// Candidate tilts A:B:STEP (degrees, phi = 90 + T, B included).
    #[arg(long, value_parser = parse_range, allow_hyphen_values = true)]
    tilt_range: Option<[f64; 3]>,
    /// The rotation axis used while only the tilt is searched (unbinned columns; default: the
    /// detector's centre column or the geometry file's `center`). tomopy's `center`.
    #[arg(long, visible_alias = "center")]
    rotation_axis: Option<f64>,
    /// Slices of the reconstructed slab (voxels of the binned volume). Default: chosen from the
    /// geometry, at most 8: the slab whose scored disc holds the most voxels while it stays on
    /// the detector's rows for every candidate, the thicker on a tie (on a CT detector, as many
    /// slices as it has rows, up to 8: two on a 2-row detector).
    #[arg(long)]
    slab_slices: Option<usize>,
    /// The slab's centre, in voxels of the binned volume from the volume's centre along z.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    slab_z: f64,
    /// Output directory: one PNG per candidate (its name carries the value), scores.csv,
    /// slices.tif (every candidate's central slice, in the order of scores.csv) and try.json.
    #[arg(long)]
    out: PathBuf,
}

fn parse_range(s: &str) -> Result<[f64; 3], String> {
    let parts: Vec<&str> = s.split(':').collect();
    let parsed: Vec<f64> = parts.iter().filter_map(|p| p.parse::<f64>().ok()).collect();
    match parsed.as_slice() {
        [a, b, step] if parts.len() == 3 && parsed.iter().all(|v| v.is_finite()) => {
            if *step > 0.0 && b >= a {
                Ok([*a, *b, *step])
            } else {
                Err(format!("{s:?}: needs A <= B and a positive STEP"))
            }
        }
        _ => Err(format!("{s:?}: expected A:B:STEP (three numbers)")),
    }
}

/// The decimals that tell apart values `step` apart: at least 2, one more per power of ten the
/// step is below 0.01, and one more where the step is not a whole number of its last decimal
/// (0.015 apart, rounded to 2 decimals, two values can meet). At most 15: an f64's digits.
fn decimals(step: f64) -> usize {
    (2..15)
        .find(|&d| {
            let units = step * 10f64.powi(d as i32);
            units >= 1.0 && (units - units.round()).abs() <= 1e-6 * units
        })
        .unwrap_or(15)
}

/// Writes `rotation_axis,tilt_deg,score` rows (atomically).
pub fn write_scores<'a>(
    path: &Path,
    rows: impl IntoIterator<Item = &'a Scored>,
) -> Result<(), crate::io::IoError> {
    let mut text = String::from("rotation_axis,tilt_deg,score\n");
    for s in rows {
        text.push_str(&format!(
            "{},{},{:e}\n",
            s.candidate.rotation_axis, s.candidate.tilt_deg, s.score
        ));
    }
    write_atomically(path, |tmp| {
        std::fs::write(tmp, text).map_err(|e| e.to_string())
    })
}

pub fn run(cli: &Cli, args: &TryArgs) -> CliResult {
    if args.rotation_axis_range.is_none() && args.tilt_range.is_none() {
        return Err("give --rotation-axis-range A:B:STEP and/or --tilt-range A:B:STEP".into());
    }
    if args.rotation_axis.is_some() && args.rotation_axis_range.is_some() {
        return Err(
            "--rotation-axis fixes the axis; it cannot go with --rotation-axis-range".into(),
        );
    }
    // The ranges and their grid are checked before the scan is read; a range not given is one
    // value, known once the scan is.
    let range = |r: Option<[f64; 3]>| {
        r.map(|[a, z, step]| candidate_range(a, z, step))
            .transpose()
    };
    let (axis_range, tilt_range) = (range(args.rotation_axis_range)?, range(args.tilt_range)?);
    let count = |r: &Option<Vec<f64>>| r.as_ref().map_or(1, Vec::len);
    check_grid(count(&axis_range), count(&tilt_range))?;
    let (projections, pre) = args.preprocess.load(&args.input, false)?;
    let b = pre.binning;
    let g = projections.geometry();
    let axes = axis_range.unwrap_or_else(|| {
        vec![args
            .rotation_axis
            .unwrap_or_else(|| DetectorColumn::of_binned(g.rotation_axis(), b).in_recorded())]
    });
    // Every candidate axis on the detector, by the check `reconstruct --rotation-axis` meets
    // (Projections::with_rotation_axis): the range's ends hold the others between them.
    for c in [axes[0], axes[axes.len() - 1]] {
        validate_scan_geometry(&Geometry {
            center: Some(DetectorColumn::recorded(c).in_binned(b)),
            ..g.clone()
        })
        .map_err(|e| format!("candidate rotation axis {c} (unbinned columns): {e}"))?;
    }
    let tilts = tilt_range.unwrap_or_else(|| vec![g.tilt.degrees()]);
    let search = AxisGrid::new(
        g,
        b,
        (&axes, args.rotation_axis_range.is_some()),
        &tilts,
        (args.slab_slices, args.slab_z),
    )?;
    let (candidates, slab) = (&search.candidates, &search.slab);
    let ctx = cli.context()?;
    eprintln!(
        "scoring {} candidates ({} axes x {} tilts) on a slab of {} slices of {}x{} from {} \
         projections of {}x{}",
        candidates.len(),
        axes.len(),
        tilts.len(),
        slab.slices,
        g.n1,
        g.n2,
        g.ntheta(),
        g.deth,
        g.detw
    );
    let start = Instant::now();
    // The scores; with the axis searched on plain CT over 180 or 360 degrees, Vo et al.'s
    // Fourier estimate over its range, and the one rule for which is the axis (as
    // `reconstruct --rotation-axis auto` and Python's search decide it).
    let found = search.score(&ctx, &projections)?;
    let elapsed = start.elapsed().as_secs_f64();
    let (result, fourier, decision) = (found.result, found.fourier_axis, found.decision);
    let [n1, n2] = result.preview_shape;
    // Names carry the values to the precision of their steps (at least 2 decimals).
    let (a, t) = (
        args.rotation_axis_range.map_or(2, |r| decimals(r[2])),
        args.tilt_range.map_or(2, |r| decimals(r[2])),
    );
    let name = |s: &Scored| match (args.rotation_axis_range, args.tilt_range) {
        (Some(_), Some(_)) => format!(
            "axis_{:.a$}_tilt_{:.t$}.png",
            s.candidate.rotation_axis, s.candidate.tilt_deg
        ),
        (Some(_), None) => format!("axis_{:.a$}.png", s.candidate.rotation_axis),
        _ => format!("tilt_{:.t$}.png", s.candidate.tilt_deg),
    };
    let previews: Vec<String> = result.scored.iter().map(name).collect();
    let mut set = OutputSet::begin(&args.out, "try")?;
    let outputs: Vec<&str> = previews
        .iter()
        .map(String::as_str)
        .chain(["scores.csv", "slices.tif", "try.json"])
        .collect();
    set.refuse_inputs(&outputs, &args.input.files())?;
    let staged = (|| -> CliResult {
        for (file, preview) in previews.iter().zip(&result.previews) {
            let title = file.trim_end_matches(".png").replace('_', " ");
            write_preview_png(&set.stage(file)?, preview, n1, n2, &title)
                .map_err(|e| e.into_io(&set.final_path(file)))?;
        }
        write_scores(&set.stage("scores.csv")?, &result.scored)?;
        write_tiff_volume(
            &set.stage("slices.tif")?,
            &Stack {
                shape: [result.previews.len(), n1, n2],
                values: result.previews.concat(),
            },
        )?;
        let json = serde_json::json!({
            "lamino_version": env!("CARGO_PKG_VERSION"),
            "metric": "gradient energy: mean |grad_xy f|^2 of the slab over its inscribed disc (larger is sharper)",
            "slab": slab,
            "peak_half_width": result.peak_half_width,
            "fourier_axis": fourier,
            "decision": decision,
            "preprocessing": pre,
            "seconds": elapsed,
            "search": result,
        });
        std::fs::write(set.stage("try.json")?, serde_json::to_vec_pretty(&json)?)
            .map_err(|e| format!("cannot write {}: {e}", set.final_path("try.json").display()))?;
        Ok(())
    })();
    set.complete(staged)?;
    for s in &result.scored {
        println!(
            "axis {:9.3}  tilt {:8.3} deg  score {:.6e}",
            s.candidate.rotation_axis, s.candidate.tilt_deg, s.score
        );
    }
    let (best, refined) = (result.best, result.refined);
    let axis = decision
        .as_ref()
        .map_or(best.rotation_axis, |d| d.rotation_axis);
    println!(
        "best: --rotation-axis {axis:.2} --tilt-deg {:.2} (sharpest slab: axis {:.2}, refined \
         between candidates: axis {:.2}, tilt {:.3} deg; {:.2} s, previews in {})",
        best.tilt_deg,
        best.rotation_axis,
        refined.rotation_axis,
        refined.tilt_deg,
        elapsed,
        args.out.display()
    );
    if let Some(d) = &decision {
        println!("axis: {}", d.reason);
    }
    match result.peak_half_width {
        Some(w) => println!(
            "confidence: the score halves {w:.2} columns from its peak (slab of {} slices)",
            slab.slices
        ),
        None => println!(
            "confidence: none (the best candidate is at the edge of its range or not a strict \
             maximum; slab of {} slices)",
            slab.slices
        ),
    }
    if let Some(f) = fourier {
        println!(
            "Fourier estimate (Vo et al.): --rotation-axis {f:.2} ({:.2} columns from the refined \
             slab search)",
            (f - refined.rotation_axis).abs()
        );
    }
    let edge = |values: &[f64], v: f64| {
        values.len() > 1 && (v == values[0] || v == values[values.len() - 1])
    };
    if edge(&axes, best.rotation_axis) || edge(&tilts, best.tilt_deg) {
        eprintln!("warning: the best candidate is at the edge of its range: widen the range");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::decimals;

    #[test]
    fn preview_names_keep_the_precision_of_the_step() {
        for (step, d) in [
            (1.0, 2),
            (0.5, 2),
            (0.01, 2),
            (0.005, 3),
            (0.015, 3),
            (1e-5, 5),
        ] {
            assert_eq!(decimals(step), d, "{step}");
        }
        // Neighbours 0.005 apart get distinct names.
        let d = decimals(0.005);
        assert_ne!(format!("{:.d$}", 7.0), format!("{:.d$}", 7.005));
    }
}
