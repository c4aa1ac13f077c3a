//! What projection matching ([`crate::recon::align`]) is asked and what it found: its options,
//! its rounds and each projection's shift, as the report records them.

use serde::Serialize;

/// How projection matching runs (`--align`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AlignOptions {
    /// A level is done when a round moves the shifts by less than this, RMS over the projections,
    /// in the scan's pixels (times the binning on a coarse level).
    pub tolerance_px: f64,
    /// The outer iterations of each round's reconstruction.
    pub iterations_per_round: usize,
    /// The most rounds on one level.
    pub max_rounds: usize,
    /// Registration to `1 / upsample` of a pixel.
    pub upsample: usize,
}

impl AlignOptions {
    /// The defaults: rounds of 10 outer iterations, at most 20 rounds on a level, done below
    /// 0.02 pixels RMS, registration to 1/20 pixel.
    pub const DEFAULT: Self = Self {
        tolerance_px: 0.02,
        iterations_per_round: 10,
        max_rounds: 20,
        upsample: 20,
    };
}

impl Default for AlignOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One round of projection matching.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AlignmentRound {
    /// The detector's binning on this round's level.
    pub binning: usize,
    /// How far the round moved the shifts, RMS over the projections (scan pixels).
    pub rms_update_px: f64,
    /// The most it moved one projection (scan pixels).
    pub max_update_px: f64,
    pub seconds: f64,
}

/// What projection matching found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alignment {
    pub options: AlignOptions,
    /// Each projection's shift `[du, dv]`, pixels of the projections aligned.
    pub shifts: Vec<[f64; 2]>,
    /// Whether the rows' shifts were estimated (a detector of at least [`FEWEST_PIXELS`](super::FEWEST_PIXELS) rows).
    pub rows_estimated: bool,
    pub rounds: Vec<AlignmentRound>,
    pub seconds: f64,
}

impl Alignment {
    /// The same alignment in the pixels of a detector `binning` times finer (the scan as
    /// recorded, for the report and shifts.csv).
    pub fn in_pixels_of(&self, binning: usize) -> Self {
        let b = binning as f64;
        Self {
            shifts: self.shifts.iter().map(|s| s.map(|v| v * b)).collect(),
            rounds: self
                .rounds
                .iter()
                .map(|r| AlignmentRound {
                    binning: r.binning * binning,
                    rms_update_px: r.rms_update_px * b,
                    max_update_px: r.max_update_px * b,
                    ..*r
                })
                .collect(),
            ..self.clone()
        }
    }
}
