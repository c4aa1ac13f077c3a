//! Projection angles and their units: the unit a file states or the user gives, the rule for
//! angles without one (degrees unless implausible: never a silent guess), and the check that
//! radians can be radians. Every reader of angles (DXchange, NXtomo, angle lists, Python's
//! `theta`) takes them through here.

use std::path::Path;

use super::IoError;

/// The unit of projection angles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AngleUnit {
    Degrees,
    Radians,
}

impl std::fmt::Display for AngleUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Degrees => "degrees",
            Self::Radians => "radians",
        })
    }
}

impl AngleUnit {
    /// The unit a `units` attribute names (`deg`, `degree`, `degrees`, `rad`, `radian`,
    /// `radians`, any case), or `None`.
    pub fn parse(units: &str) -> Option<Self> {
        match units.trim().to_ascii_lowercase().as_str() {
            "deg" | "degree" | "degrees" => Some(Self::Degrees),
            "rad" | "radian" | "radians" => Some(Self::Radians),
            _ => None,
        }
    }
}

/// The smallest span, in degrees, of angles without a stated unit that are taken as degrees: a
/// laminography or tomography scan covers far more, while radians of a half or full turn span
/// 3.1 or 6.3.
pub const MIN_UNITLESS_SPAN_DEG: f64 = 7.0;

/// Projection angles `values` (of `dataset` in `path`, for errors) in radians. Their unit is the
/// one `stated` by the source (a `units` attribute), else `option` (`--theta-units`); the two
/// must agree. Without either, they are degrees unless that is implausible: all within
/// [-2 pi, 2 pi] (radians?) or spanning less than [`MIN_UNITLESS_SPAN_DEG`], which is refused
/// with an error naming `--theta-units`. Radians that cannot be radians are refused
/// ([`check_radians`]); angles past float32's range in radians, or two or more all equal (no
/// rotation), are refused in any unit.
pub fn angles_in_radians(
    path: &Path,
    dataset: &str,
    values: Vec<f64>,
    stated: Option<&str>,
    option: Option<AngleUnit>,
) -> Result<Vec<f64>, IoError> {
    finite(path, dataset, &values)?;
    let stated = stated
        .map(|units| {
            AngleUnit::parse(units).ok_or_else(|| IoError::ThetaUnits {
                path: path.to_path_buf(),
                dataset: dataset.to_string(),
                units: units.to_string(),
            })
        })
        .transpose()?;
    let unit = match (stated, option) {
        (Some(stated), Some(option)) if stated != option => {
            return Err(IoError::AngleUnitConflict {
                path: path.to_path_buf(),
                dataset: dataset.to_string(),
                stated,
                option,
            })
        }
        (Some(unit), _) | (None, Some(unit)) => unit,
        (None, None) => {
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let turn = 2.0 * std::f64::consts::PI * (1.0 + 1e-9);
            // Written so that a NaN (excluded above) could not pass as degrees.
            let degrees = max - min >= MIN_UNITLESS_SPAN_DEG && min.abs().max(max.abs()) > turn;
            if !degrees {
                return Err(IoError::AmbiguousAngles {
                    path: path.to_path_buf(),
                    dataset: dataset.to_string(),
                    min,
                    max,
                });
            }
            AngleUnit::Degrees
        }
    };
    if unit == AngleUnit::Radians {
        check_radians(&values).map_err(|source| IoError::NotRadians {
            path: path.to_path_buf(),
            dataset: dataset.to_string(),
            source,
        })?;
    }
    let radians: Vec<f64> = match unit {
        AngleUnit::Degrees => values.iter().map(|v| v.to_radians()).collect(),
        AngleUnit::Radians => values.clone(),
    };
    // The operator turns the angles into float32 on the device: one past its range is no angle.
    if let Some(index) = radians.iter().position(|r| !(*r as f32).is_finite()) {
        return Err(IoError::AngleOutOfRange {
            path: path.to_path_buf(),
            dataset: dataset.to_string(),
            index,
            value: values[index],
            unit,
        });
    }
    // Projections all at one angle are one view repeated, whatever its unit: no rotation to
    // reconstruct from.
    if radians.len() > 1 && radians.iter().all(|r| *r == radians[0]) {
        return Err(IoError::NoRotation {
            path: path.to_path_buf(),
            dataset: dataset.to_string(),
            count: radians.len(),
            value: values[0],
            unit,
        });
    }
    Ok(radians)
}

/// Angles given as radians that cannot be: they span more than a turn and a step.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "the angles run from {min} to {max}, more than a turn (2 pi) and a step ({step:.4}) apart, \
     which radians of a scan never are: degrees?"
)]
pub struct NotRadians {
    pub min: f64,
    pub max: f64,
    /// The angles' mean spacing.
    pub step: f64,
}

/// Refuses finite projection angles `values` said to be radians that span more than a turn
/// (2 pi) and one step (their mean spacing): a scan in radians never does, while one in
/// degrees does unless it covers less than about 6 degrees. The check of every caller that
/// takes radians (a file's stated unit, the library's and Python's `theta`).
pub fn check_radians(values: &[f64]) -> Result<(), NotRadians> {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let step = (max - min) / values.len().saturating_sub(1).max(1) as f64;
    // Written so that a NaN could not pass as radians.
    if max - min <= 2.0 * std::f64::consts::PI + step {
        Ok(())
    } else {
        Err(NotRadians { min, max, step })
    }
}

/// Refuses a non-finite value of `dataset` in `path`, naming its index.
pub(super) fn finite(path: &Path, dataset: &str, values: &[f64]) -> Result<(), IoError> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(index) => Err(IoError::NonFinite {
            path: path.to_path_buf(),
            dataset: dataset.to_string(),
            index,
            value: values[index],
        }),
    }
}
