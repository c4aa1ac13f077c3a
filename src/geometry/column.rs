//! A detector column with its frame. The rotation axis crosses frames on its way from the user
//! to the operator: users give it, and report.json states it, in the columns of the detector as
//! recorded; binning by `b` maps recorded coordinate `x` to `(x - (b - 1)/2) / b` (binned pixel
//! `j` is centred on the recorded coordinate `b j + (b - 1)/2`), and a geometry's own `center`
//! is in its own (binned, cut) columns. A [`DetectorColumn`] is always held in the recorded
//! frame and converts on the way in and out, here and nowhere else.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A detector column (pixels, sub-pixel; pixel `w` is centred at `w`) of the detector as
/// recorded: unbinned and uncut. Serialised as that number.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DetectorColumn {
    recorded: f64,
}

impl DetectorColumn {
    /// Column `column` of the detector as recorded (`--rotation-axis`, Python's `center`).
    pub fn recorded(column: f64) -> Self {
        Self { recorded: column }
    }

    /// Column `column` of the detector binned by `b` (1: not binned).
    pub fn of_binned(column: f64, b: usize) -> Self {
        Self::recorded(column * b as f64 + (b as f64 - 1.0) / 2.0)
    }

    /// The column in the recorded detector's columns.
    pub fn in_recorded(self) -> f64 {
        self.recorded
    }

    /// The column on the detector binned by `b`.
    pub fn in_binned(self, b: usize) -> f64 {
        (self.recorded - (b as f64 - 1.0) / 2.0) / b as f64
    }
}

impl fmt::Display for DetectorColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.recorded.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binned_columns_are_centred_on_their_recorded_blocks() {
        // Binned pixel 3 of 4 x 4 blocks covers recorded columns 12..=15, centred on 13.5.
        assert_eq!(DetectorColumn::of_binned(3.0, 4).in_recorded(), 13.5);
        assert_eq!(DetectorColumn::recorded(13.5).in_binned(4), 3.0);
        for (c, b) in [(17.25, 1), (17.25, 2), (1023.5, 8)] {
            let binned = DetectorColumn::recorded(c).in_binned(b);
            assert_eq!(DetectorColumn::of_binned(binned, b).in_recorded(), c);
        }
    }
}
