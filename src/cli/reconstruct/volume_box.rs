//! The reconstructed volume as a box of the default one: `--slab`, tomocupy's
//! `--lamino-start-row`/`--lamino-end-row` and `--roi`.

use std::ops::Range;

use clap::Args;

use lamino::operator::{Geometry, VolumeBox};

/// The reconstructed volume as a box of the default volume: the `deth` z planes the detector's
/// rows see and `detw x detw` in x/y centred on the rotation axis, in unbinned voxels.
#[derive(Args)]
pub(super) struct VolumeArgs {
    /// Reconstruct only z planes START:END (half-open, unbinned voxels) of the default volume,
    /// whose z planes are the detector's rows: for a flat sample, the thin slab holding it
    /// (costs proportionally less). The length must be even and at least the gridding kernel's
    /// minimum (4 at the default accuracy); the error names the nearest valid range.
    #[arg(long, value_parser = parse_span, conflicts_with_all = ["lamino_start_row", "lamino_end_row"])]
    slab: Option<Range<usize>>,
    /// tomocupy's name for the slab's first z plane (with --lamino-end-row; the same as --slab).
    #[arg(long, requires = "lamino_end_row")]
    lamino_start_row: Option<usize>,
    /// tomocupy's name for the slab's end z plane, exclusive (with --lamino-start-row).
    #[arg(long, requires = "lamino_start_row")]
    lamino_end_row: Option<usize>,
    /// Reconstruct only x columns X0:X1 and y rows Y0:Y1 (half-open, unbinned voxels) of the
    /// default volume's detw x detw plane, centred on the rotation axis: an x/y region of
    /// interest (the operator then uses only the detector columns it projects onto). Lengths as
    /// for --slab.
    #[arg(long, value_parser = parse_roi)]
    roi: Option<[Range<usize>; 2]>,
}

/// `START:END` with START < END.
pub(in crate::cli) fn parse_span(s: &str) -> Result<Range<usize>, String> {
    let bad = || format!("{s:?}: expected START:END (voxels, START < END)");
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    let (a, b) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if a >= b {
        return Err(bad());
    }
    Ok(a..b)
}

/// `X0:X1,Y0:Y1`.
fn parse_roi(s: &str) -> Result<[Range<usize>; 2], String> {
    let (x, y) = s
        .split_once(',')
        .ok_or_else(|| format!("{s:?}: expected X0:X1,Y0:Y1 (voxels)"))?;
    Ok([parse_span(x)?, parse_span(y)?])
}

impl VolumeArgs {
    /// The box the options ask for in the default volume of `g` (a detector binned by `b`), or
    /// `None` for the whole default volume.
    pub(super) fn volume_box(&self, g: &Geometry, b: usize) -> Result<Option<VolumeBox>, String> {
        let slab = match (&self.slab, self.lamino_start_row, self.lamino_end_row) {
            (Some(r), ..) => Some(("--slab", r.clone())),
            (None, Some(s), Some(e)) if s < e => {
                Some(("--lamino-start-row/--lamino-end-row", s..e))
            }
            (None, Some(s), Some(e)) => {
                return Err(format!(
                    "--lamino-start-row {s} --lamino-end-row {e}: the start must be below the end"
                ))
            }
            _ => None,
        };
        if slab.is_none() && self.roi.is_none() {
            return Ok(None);
        }
        // Unbinned voxels to binned ones: both ends on the binned grid.
        let binned = |name: &str, r: Range<usize>| {
            if r.start.is_multiple_of(b) && r.end.is_multiple_of(b) {
                return Ok(r.start / b..r.end / b);
            }
            let near = |v: usize| (v + b / 2) / b * b;
            Err(format!(
                "{name} {}:{} with binning {b} x {b}: both ends must be multiples of {b} (nearest \
                 {}:{})",
                r.start,
                r.end,
                near(r.start),
                near(r.end).max(near(r.start) + b)
            ))
        };
        let full = VolumeBox::full(g);
        let z = match slab {
            Some((name, r)) => binned(name, r)?,
            None => full.z,
        };
        let (x, y) = match &self.roi {
            Some([x, y]) => (binned("--roi x", x.clone())?, binned("--roi y", y.clone())?),
            None => (full.x, full.y),
        };
        let volume = VolumeBox { z, y, x };
        g.with_subvolume(&volume).map_err(|e| {
            let unit = match b {
                1 => String::new(),
                _ => format!(" (ranges in voxels binned by {b})"),
            };
            format!("--slab/--roi: {e}{unit}")
        })?;
        Ok(Some(volume))
    }
}
