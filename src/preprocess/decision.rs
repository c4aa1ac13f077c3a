//! A search's scores ([`SearchResult`]), their refinement by the parabola, and which estimate
//! of the rotation axis a search reports, and why ([`AxisDecision`]): the one rule of
//! `lamino try`, `reconstruct --rotation-axis auto`, Python's `find_rotation_axis` and the
//! viewer.

use serde::Serialize;

use super::slab::{Candidate, Slab};

/// For a plain CT scan the slab search refines the Fourier estimate within this many unbinned
/// columns either side of it: the two methods agree to a column or two where both are sure
/// (`tests/realscan.rs`), and further out a flat score's noise would only pick an axis off
/// (docs/preprocess.md, "The search").
pub const AXIS_NEAR_FOURIER: f64 = 6.0;

/// The slab score refines the Fourier estimate only where its peak stands out of the window
/// [`AXIS_NEAR_FOURIER`] columns either side: the best score at least this fraction above the
/// window's lowest. A sharp peak drops far more within six columns (an axis six columns off
/// doubles every edge); a noise-dominated score (a thin, weakly attenuating sample) varies by
/// a per cent or four across the whole window (1.6 % and 4.3 % on the measured-like CT
/// fixtures of 640 and 128 columns), and its local curvature, which the peak's half width
/// measures, is the noise's (0.83 columns on the 640-column fixture's finest pass, for a peak
/// 4.3 columns off the true axis).
pub const SHARP_PEAK_CONTRAST: f64 = 0.1;

/// Which estimate of the rotation axis a search reports, and why: one rule for every entry point
/// (`try`, `reconstruct --rotation-axis auto`, Python's `find_rotation_axis`, the viewer).
///
/// Without a Fourier estimate (laminography, or CT not over 180 or 360 degrees) the slab search
/// decides. For plain CT the Fourier estimate (Vo et al.) comes first, and the slab score refines
/// it only where it has an interior peak within [`AXIS_NEAR_FOURIER`] columns of it that stands
/// [`SHARP_PEAK_CONTRAST`] above the window's lowest score: a flat score does not overrule it,
/// and the reason says so.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AxisDecision {
    /// The axis (unbinned detector columns).
    pub rotation_axis: f64,
    /// `"slab"` (no Fourier estimate), `"fourier"` (the Fourier estimate, the slab score too
    /// flat or its peak outside the window around it) or `"fourier+slab"` (the Fourier estimate
    /// refined by the slab score's peak near it).
    pub method: &'static str,
    /// Why, in words: how much the slab score varies near the Fourier estimate.
    pub reason: String,
}

impl AxisDecision {
    /// The decision from the slab scores of `window` (a pass over the Fourier estimate's
    /// window, or `try`'s grid: candidates at the best tilt), the slab search's axis `slab_axis`
    /// (`None`: `window`'s own, refined by the parabola) and the Fourier estimate `fourier`
    /// (unbinned columns) where there is one.
    pub fn of(window: &SearchResult, slab_axis: Option<f64>, fourier: Option<f64>) -> Self {
        let Some(f) = fourier else {
            return Self {
                rotation_axis: slab_axis.unwrap_or(window.refined.rotation_axis),
                method: "slab",
                reason: match window.peak_half_width {
                    Some(w) => format!("the slab score's peak ({w:.2} columns half width)"),
                    None => {
                        "the best slab score, at the edge of the range (no interior peak)".into()
                    }
                },
            };
        };
        let mut near: Vec<Scored> = window
            .scored
            .iter()
            .filter(|s| {
                s.candidate.tilt_deg == window.best.tilt_deg
                    && (s.candidate.rotation_axis - f).abs() <= AXIS_NEAR_FOURIER
            })
            .copied()
            .collect();
        near.sort_by(|a, b| {
            a.candidate
                .rotation_axis
                .total_cmp(&b.candidate.rotation_axis)
        });
        let kept = |why: String| Self {
            rotation_axis: f,
            method: "fourier",
            reason: format!("the Fourier estimate (Vo et al.): {why}"),
        };
        let best = (0..near.len()).max_by(|&a, &b| near[a].score.total_cmp(&near[b].score));
        let best = match best {
            Some(i) if i > 0 && i + 1 < near.len() => i,
            _ => {
                return kept(format!(
                    "the slab score has no interior peak within {AXIS_NEAR_FOURIER} columns of it"
                ))
            }
        };
        let low = near.iter().map(|s| s.score).fold(f64::INFINITY, f64::min);
        let contrast = (near[best].score - low) / near[best].score;
        if contrast.is_nan() || contrast < SHARP_PEAK_CONTRAST {
            return kept(format!(
                "the slab score is too flat to overrule it (it varies by {:.1} % within \
                 {AXIS_NEAR_FOURIER} columns of it, a sharp peak by {:.0} % or more)",
                100.0 * contrast,
                100.0 * SHARP_PEAK_CONTRAST
            ));
        }
        let axis = slab_axis.unwrap_or_else(|| refine(&near, best).0.rotation_axis);
        Self {
            rotation_axis: axis,
            method: "fourier+slab",
            reason: format!(
                "the Fourier estimate {f:.2} refined by the slab score's peak near it (the score \
                 varies by {:.1} % within {AXIS_NEAR_FOURIER} columns; {:.2} columns from it)",
                100.0 * contrast,
                (axis - f).abs()
            ),
        }
    }
}

/// A candidate and its score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Scored {
    pub candidate: Candidate,
    /// Gradient energy of the slab (mean `|grad_xy f|^2` over its inscribed disc; larger is
    /// sharper).
    pub score: f64,
}

/// The scores of all candidates, the winner, and the central slice of every candidate's slab.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResult {
    pub scored: Vec<Scored>,
    /// The highest score.
    pub best: Candidate,
    /// The winner refined along each searched axis by the vertex of the parabola through it and
    /// its two neighbours (when it is not at the edge of its range); the best candidate otherwise.
    pub refined: Candidate,
    /// The confidence of the axis: how far (unbinned columns) from the peak the parabola the
    /// refinement fits through the winner and its neighbours falls to half the best score, i.e.
    /// `sqrt(score / -score'')` (`None` when the winner is at the edge of its range or not a
    /// strict maximum). A peak a column or less wide pins the axis down; a wide one (the
    /// score of neighbours differing by a fraction of a per cent) does not.
    pub peak_half_width: Option<f64>,
    /// The slab that was scored.
    pub slab: Slab,
    /// The detector binning the slabs were reconstructed at.
    pub binning: usize,
    /// Radius (voxels of the searched volume) of the disc the score is taken over.
    pub score_radius: f64,
    /// `(n1, n2)` of the preview slices.
    pub preview_shape: [usize; 2],
    /// The central slice of every candidate's slab, in the order of `scored`.
    #[serde(skip)]
    pub previews: Vec<Vec<f32>>,
}

/// The vertex offset (in steps, within +-1/2) of the parabola through `(-1, a), (0, b), (1, c)`
/// when b is a strict maximum; 0 otherwise.
pub(super) fn parabola_vertex(a: f64, b: f64, c: f64) -> f64 {
    let curvature = a - 2.0 * b + c;
    if curvature < 0.0 && b >= a && b >= c {
        (0.5 * (a - c) / curvature).clamp(-0.5, 0.5)
    } else {
        0.0
    }
}

/// The winner moved along each searched axis to the parabola's vertex through its neighbours
/// on that axis (equally spaced, same value on the other axis), and the half width of the peak
/// along the rotation axis (see [`SearchResult::peak_half_width`]).
pub(super) fn refine(scored: &[Scored], best: usize) -> (Candidate, Option<f64>) {
    let b = scored[best].candidate;
    let mut out = b;
    let mut half_width = None;
    for along_axis in [true, false] {
        let coordinate = |c: &Candidate| {
            if along_axis {
                c.rotation_axis
            } else {
                c.tilt_deg
            }
        };
        let same_line = |c: &Candidate| {
            if along_axis {
                c.tilt_deg == b.tilt_deg
            } else {
                c.rotation_axis == b.rotation_axis
            }
        };
        let mut line: Vec<&Scored> = scored.iter().filter(|s| same_line(&s.candidate)).collect();
        line.sort_by(|x, y| coordinate(&x.candidate).total_cmp(&coordinate(&y.candidate)));
        let Some(i) = line.iter().position(|s| s.candidate == b) else {
            continue;
        };
        if i == 0 || i + 1 == line.len() {
            continue;
        }
        let (lo, hi) = (
            coordinate(&line[i - 1].candidate),
            coordinate(&line[i + 1].candidate),
        );
        let step = (hi - lo) / 2.0;
        if ((coordinate(&b) - lo) - step).abs() > 1e-9 * step.abs().max(1.0) {
            continue; // unequal spacing: no parabola
        }
        let (a, peak, c) = (line[i - 1].score, line[i].score, line[i + 1].score);
        let shift = step * parabola_vertex(a, peak, c);
        if along_axis {
            let curvature = (a - 2.0 * peak + c) / (step * step);
            if curvature < 0.0 && peak > 0.0 && peak >= a && peak >= c {
                half_width = Some((peak / -curvature).sqrt());
            }
            out.rotation_axis += shift;
        } else {
            out.tilt_deg += shift;
        }
    }
    (out, half_width)
}
