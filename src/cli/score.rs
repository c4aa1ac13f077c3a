//! `lamino score`: a reconstruction against the truth.

use std::path::PathBuf;

use clap::Args;

use crate::io::OutputSet;
use crate::plot::write_comparison_png;
use crate::recon::input::{check_finite, read_volume};

use super::CliResult;

#[derive(Args)]
pub struct ScoreArgs {
    /// The reconstruction (`.tif`, `.npy`, or `.h5` with /volume as `reconstruct` writes it).
    rec: PathBuf,
    /// The ground truth (`.tif`, `.npy`, or `.h5`: a simulated scan's /truth/volume or a /volume).
    truth: PathBuf,
    /// Where to write the truth | reconstruction | difference panel of the central slices
    /// (default: `comparison.png` next to the reconstruction).
    #[arg(long)]
    panel: Option<PathBuf>,
}

pub fn run(args: &ScoreArgs) -> CliResult {
    let (rec, truth) = (&args.rec, &args.truth);
    let (r, t) = (read_volume(rec)?, read_volume(truth)?);
    check_finite(rec, &r)?;
    check_finite(truth, &t)?;
    if r.shape != t.shape {
        return Err(format!(
            "{} has shape {:?} but {} has {:?}",
            rec.display(),
            r.shape,
            truth.display(),
            t.shape
        )
        .into());
    }
    crate::memory::check_available(
        &format!("scoring {} against {}", rec.display(), truth.display()),
        crate::metrics::score_working_bytes(r.shape),
        "score on a machine with more memory",
    )?;
    let panel = args.panel.clone().unwrap_or_else(|| {
        rec.parent()
            .unwrap_or(std::path::Path::new("."))
            .join("comparison.png")
    });
    let (set, staged) = OutputSet::file(&panel)?;
    let name = panel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    set.refuse_inputs(&[name], &[rec, truth])?;
    let written = write_comparison_png(&staged, &t, &r).map_err(|e| e.into_io(&panel));
    set.complete(written)?;
    eprintln!("comparison panel: {}", panel.display());
    println!(
        "{}",
        serde_json::to_string(&crate::metrics::score(&r.values, &t.values, r.shape))?
    );
    Ok(())
}
