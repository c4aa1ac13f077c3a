//! Which estimate of the rotation axis a search reports, and why ([`AxisDecision`]): the one
//! rule of `lamino try`, `reconstruct --rotation-axis auto`, Python's `find_rotation_axis` and
//! the viewer.

use serde::Serialize;

use super::search::{refine, Scored, SearchResult};

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
