//! The projections' shifts as a CSV file (`SCAN.shifts.csv` beside a simulated scan, read by
//! `reconstruct --shifts`): a header line `angle_deg,du,dv`, then one line per projection in
//! the scan's order, its angle in degrees and its detector shift in pixels (columns, rows), as
//! [`crate::geometry::Geometry::shifts`] holds it.

use std::path::Path;

use super::{read_text, write_atomically, IoError};

/// The header line of a shifts file.
pub const SHIFTS_HEADER: &str = "angle_deg,du,dv";

/// Angles in a shifts file may differ from the scan's by this much (degrees), as a list rounded
/// to a few decimals does; more is another scan's file or another order.
const ANGLE_TOLERANCE_DEG: f64 = 1e-3;

/// Writes `shifts` of the projections at `theta` (radians) to `path`, atomically.
pub fn write_shifts(path: &Path, theta: &[f64], shifts: &[[f64; 2]]) -> Result<(), IoError> {
    debug_assert_eq!(theta.len(), shifts.len());
    let mut text = format!("{SHIFTS_HEADER}\n");
    for (t, [du, dv]) in theta.iter().zip(shifts) {
        text.push_str(&format!("{},{du},{dv}\n", t.to_degrees()));
    }
    write_atomically(path, |staged| {
        std::fs::write(staged, &text).map_err(|e| e.to_string())
    })
}

/// The shifts `path` holds for the projections at `theta` (radians): one line per projection,
/// its angle within 1e-3 degrees of the scan's, every value finite; the error names the line.
pub fn read_shifts(path: &Path, theta: &[f64]) -> Result<Vec<[f64; 2]>, IoError> {
    let fail = |reason: String| IoError::Shifts {
        path: path.into(),
        reason,
    };
    let text = read_text(path).map_err(|e| fail(e.to_string()))?;
    let rows = parse_shifts(&text).map_err(fail)?;
    if rows.len() != theta.len() {
        return Err(fail(format!(
            "{} projections' shifts for a scan of {} projections",
            rows.len(),
            theta.len()
        )));
    }
    rows.iter()
        .zip(theta)
        .enumerate()
        .map(|(i, ((line, angle, shift), t))| {
            match (angle - t.to_degrees()).abs() <= ANGLE_TOLERANCE_DEG {
                true => Ok(*shift),
                false => Err(fail(format!(
                    "line {line} is at {angle} degrees, but the scan's projection {i} is at {} \
                     degrees: the file is another scan's or in another order",
                    t.to_degrees()
                ))),
            }
        })
        .collect()
}

/// The rows of a shifts file: (line number, angle in degrees, `[du, dv]`).
fn parse_shifts(text: &str) -> Result<Vec<(usize, f64, [f64; 2])>, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty());
    let header = lines.next().map(|(_, line)| line.replace(' ', ""));
    if header.as_deref() != Some(SHIFTS_HEADER) {
        return Err(format!(
            "the first line must be the header {SHIFTS_HEADER:?}, found {:?}",
            header.unwrap_or_default()
        ));
    }
    lines
        .map(|(line, text)| {
            let values: Vec<&str> = text.split(',').map(str::trim).collect();
            let numbers: Vec<f64> = values.iter().filter_map(|v| v.parse().ok()).collect();
            match (values.len(), numbers.len()) {
                (3, 3) if numbers.iter().all(|v| v.is_finite()) => {
                    Ok((line, numbers[0], [numbers[1], numbers[2]]))
                }
                _ => Err(format!(
                    "line {line}: {text:?} is not three finite numbers (angle_deg, du, dv)"
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_round_trip_and_bad_files_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scan.shifts.csv");
        let theta = [0.0, 0.1, 0.2];
        let shifts = [[1.5, -0.25], [0.0, 2.0], [-3.125, 1e-3]];
        write_shifts(&path, &theta, &shifts).unwrap();
        assert_eq!(read_shifts(&path, &theta).unwrap(), shifts);
        let fails = |text: &str, theta: &[f64]| {
            std::fs::write(&path, text).unwrap();
            read_shifts(&path, theta).unwrap_err().to_string()
        };
        let err = fails("angle_deg,du,dv\n0,1,NaN\n", &[0.0]);
        assert!(err.contains("line 2") && err.contains("finite"), "{err}");
        let err = fails("angle_deg,du,dv\n0,1,2\n", &theta);
        assert!(
            err.contains("1 projections' shifts for a scan of 3"),
            "{err}"
        );
        let err = fails("0,1,2\n", &[0.0]);
        assert!(err.contains("header"), "{err}");
        let err = fails("angle_deg,du,dv\n5,1,2\n", &[0.0]);
        assert!(err.contains("line 2 is at 5 degrees"), "{err}");
    }
}
