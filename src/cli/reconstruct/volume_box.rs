//! The reconstructed volume as a box of the default one: `--slab`, tomocupy's
//! `--lamino-start-row`/`--lamino-end-row` and `--roi`.

use std::ops::Range;

use clap::Args;

use crate::geometry::{Geometry, GeometryError, VolumeBox};

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
    /// Whether the options ask for a box (else the whole default volume: no geometry needed).
    pub(super) fn asks_for_box(&self) -> bool {
        self.slab.is_some() || self.lamino_start_row.is_some() || self.roi.is_some()
    }

    /// The box the options ask for in the default volume of `g` (a detector binned by `b`), or
    /// `None` for the whole default volume.
    pub(super) fn volume_box(&self, g: &Geometry, b: usize) -> Result<Option<VolumeBox>, String> {
        let slab = match (&self.slab, self.lamino_start_row, self.lamino_end_row) {
            (Some(r), ..) => Some(("--slab", r.clone())),
            (None, Some(s), Some(e)) if s < e => Some((LAMINO_ROWS, s..e)),
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
        let full = VolumeBox::full(g);
        let given = |name, r: &Range<usize>| {
            Some(Given {
                name,
                range: r.clone(),
            })
        };
        let (x, y) = match &self.roi {
            Some([x, y]) => (given("--roi x", x), given("--roi y", y)),
            None => (None, None),
        };
        let z = slab.and_then(|(name, r)| given(name, &r));
        // Unbinned voxels to binned ones, each end to the nearest multiple of b (the errors
        // below say when that moved one): what is refused is then the box the run would get.
        let binned = |given: &Option<Given>, whole: Range<usize>| match given {
            Some(Given { range: r, .. }) => {
                let (start, end) = ((r.start + b / 2) / b, (r.end + b / 2) / b);
                start..end.max(start + 1)
            }
            None => whole,
        };
        let volume = VolumeBox {
            z: binned(&z, full.z),
            y: binned(&y, full.y),
            x: binned(&x, full.x),
        };
        let checked = g.with_subvolume(&volume);
        // The axis refused, its reason and the valid range nearest to its box, if any.
        let refused = match &checked {
            Err(GeometryError::BadBox {
                axis,
                reason,
                nearest,
                ..
            }) => Some((*axis, reason, nearest.clone())),
            _ => None,
        };
        for (axis, given, binned) in [
            ("z", &z, &volume.z),
            ("y", &y, &volume.y),
            ("x", &x, &volume.x),
        ] {
            let Some(given) = given else { continue };
            // The valid range nearest to what was given, in the option's units.
            let nearest = match &refused {
                Some((a, _, Some(nearest))) if *a == axis => Some(given.spelled(nearest, b)),
                Some((a, ..)) if *a == axis => None,
                _ => Some(given.spelled(binned, b)),
            };
            if given.range != (binned.start * b..binned.end * b) {
                return Err(format!(
                    "{} with binning {b} x {b}: both ends must be multiples of {b}{}",
                    given.named(),
                    nearest.map_or(String::new(), |n| format!(" (nearest valid: {n})"))
                ));
            }
            if let Some((_, reason, _)) = refused.as_ref().filter(|(a, ..)| *a == axis) {
                let on_binned = match b {
                    1 => String::new(),
                    _ => format!(
                        " with binning {b} x {b} (the binned volume's {axis} {}:{})",
                        binned.start, binned.end
                    ),
                };
                return Err(format!(
                    "{}{on_binned}: {reason}{}",
                    given.named(),
                    nearest.map_or(String::new(), |n| format!(
                        "; the nearest valid range is {n}"
                    ))
                ));
            }
        }
        if let Err(e) = checked {
            let unit = match b {
                1 => String::new(),
                _ => format!(" (ranges in voxels binned by {b})"),
            };
            return Err(format!("--slab/--roi: {e}{unit}"));
        }
        Ok(Some(volume))
    }
}

/// A range of the volume box as an option gave it (unbinned voxels), with the option's name.
struct Given {
    name: &'static str,
    range: Range<usize>,
}

impl Given {
    /// `r` in voxels binned by `b` as the user would give it: `START:END`, or both of tomocupy's
    /// options.
    fn spelled(&self, r: &Range<usize>, b: usize) -> String {
        let (start, end) = (r.start * b, r.end * b);
        match self.name {
            LAMINO_ROWS => format!("--lamino-start-row {start} --lamino-end-row {end}"),
            _ => format!("{start}:{end}"),
        }
    }

    /// The option with the range given.
    fn named(&self) -> String {
        match self.name {
            LAMINO_ROWS => self.spelled(&self.range, 1),
            name => format!("{name} {}", self.spelled(&self.range, 1)),
        }
    }
}

/// tomocupy's two options of the slab, as one name.
const LAMINO_ROWS: &str = "--lamino-start-row/--lamino-end-row";
