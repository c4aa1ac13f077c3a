//! Small text inputs a user names (angle lists, geometry JSON), read with a bound: a path to
//! `/dev/zero`, a FIFO or a multi-gigabyte file by mistake must end in an error naming the limit,
//! not in an allocation that grows until the process is killed; the angle lists' syntax
//! ([`parse_angle_list`]); and a user's number written back in a message ([`number_as_typed`]).

use std::io::Read;
use std::path::Path;

use thiserror::Error;

/// The largest text input read, 64 MiB. A geometry JSON file of a million angles takes about
/// 25 MB, an angle list of a million angles about 20 MB; no real text input comes near this.
pub const MAX_TEXT_BYTES: u64 = 64 << 20;

/// Why a text input could not be read; the caller's error names the file.
#[derive(Debug, Error)]
pub enum TextError {
    #[error("{0}")]
    Read(std::io::Error),
    #[error(
        "longer than {MAX_TEXT_BYTES} bytes (64 MiB), the most lamino reads from a text input; \
         is it the right file?"
    )]
    TooLarge,
    #[error("not UTF-8 text: {0}")]
    NotUtf8(std::string::FromUtf8Error),
}

/// `value` as a user would type it, for messages that quote it: in exponent form when far from
/// 1 (`1e300`, not 301 digits).
pub fn number_as_typed(value: f64) -> String {
    match value == 0.0 || (1e-4..1e6).contains(&value.abs()) {
        true => value.to_string(),
        false => format!("{value:e}"),
    }
}

/// The whole of the text file `path`, reading at most [`MAX_TEXT_BYTES`] + 1 bytes so that an
/// endless or huge file is refused after a bounded read.
pub fn read_text(path: &Path) -> Result<String, TextError> {
    let file = std::fs::File::open(path).map_err(TextError::Read)?;
    let mut bytes = Vec::new();
    file.take(MAX_TEXT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(TextError::Read)?;
    if bytes.len() as u64 > MAX_TEXT_BYTES {
        return Err(TextError::TooLarge);
    }
    String::from_utf8(bytes).map_err(TextError::NotUtf8)
}

/// The angles of an angle list, as written, with the unit its CSV header names.
#[derive(Debug, Clone, PartialEq)]
pub struct AngleList {
    pub values: Vec<f64>,
    /// The CSV column the angles were read from (`None`: a plain list).
    pub column: Option<String>,
    /// `deg` or `rad` when the column's name says so (`theta_deg`, `angle (rad)`), for
    /// [`super::angles_in_radians`] to check.
    pub units: Option<&'static str>,
}

/// Parses an angle list: numbers separated by white space (any number per line), or CSV (a line
/// with a comma, or a first line starting with a letter or a quote, a header): one column, or a
/// header line and a column named like an angle (`angle`, `theta`, `rotation_angle`, ...; the
/// only column otherwise). `#` starts a comment to the end of
/// the line; blank lines are skipped. The error says which line and why.
pub fn parse_angle_list(text: &str) -> Result<AngleList, String> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.split('#').next().unwrap_or("").trim()))
        .filter(|(_, line)| !line.is_empty())
        .collect();
    let number = |line: usize, t: &str| match t.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("line {line}: {:?} is not a finite angle", t.trim())),
    };
    // A header line starts with a letter or a quote; a list with one is CSV even without commas.
    let header_first = lines.first().is_some_and(|(_, line)| {
        line.starts_with(|c: char| c.is_alphabetic() || c == '"' || c == '\'')
    });
    if !header_first && !lines.iter().any(|(_, line)| line.contains(',')) {
        let values = lines
            .iter()
            .flat_map(|&(i, line)| line.split_whitespace().map(move |t| (i, t)))
            .map(|(i, t)| number(i, t))
            .collect::<Result<_, _>>()?;
        return Ok(AngleList {
            values,
            column: None,
            units: None,
        });
    }
    let fields = |line: &str| -> Vec<String> {
        line.split(',')
            .map(|f| f.trim().trim_matches('"').trim().to_string())
            .collect()
    };
    // Not reached without a line (one holds a comma or a header); an empty list either way.
    let Some(&(first_line, first)) = lines.first() else {
        return Ok(AngleList {
            values: Vec::new(),
            column: None,
            units: None,
        });
    };
    let header = fields(first);
    let has_header = header.iter().any(|f| f.parse::<f64>().is_err());
    let (column, name) = if has_header {
        let lower: Vec<String> = header.iter().map(|f| f.to_ascii_lowercase()).collect();
        let found = lower
            .iter()
            .position(|f| f.contains("angle") || f.contains("theta"));
        match (found, header.len()) {
            (Some(c), _) => (c, Some(header[c].clone())),
            (None, 1) => (0, Some(header[0].clone())),
            (None, _) => {
                return Err(format!(
                    "line {first_line}: no column of the header {header:?} is named like an \
                     angle (angle, theta, rotation_angle)"
                ))
            }
        }
    } else if header.len() == 1 {
        (0, None)
    } else {
        return Err(format!(
            "line {first_line}: {} columns and no header naming the angle column",
            header.len()
        ));
    };
    let body = if has_header { &lines[1..] } else { &lines[..] };
    let values = body
        .iter()
        .map(|&(i, line)| {
            let f = fields(line);
            let cell = f.get(column).ok_or_else(|| {
                format!(
                    "line {i}: {} columns; the angles are column {}",
                    f.len(),
                    column + 1
                )
            })?;
            number(i, cell)
        })
        .collect::<Result<_, _>>()?;
    let units = name.as_deref().and_then(|n| {
        let n = n.to_ascii_lowercase();
        if n.contains("rad") {
            Some("rad")
        } else if n.contains("deg") {
            Some("deg")
        } else {
            None
        }
    });
    Ok(AngleList {
        values,
        column: name,
        units,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn angle_lists_take_comments_blank_lines_and_csv() {
        let plain = parse_angle_list("# scan 12\n\n0 1.5\n 3 # last\n").unwrap();
        assert!(plain.values == [0.0, 1.5, 3.0] && plain.column.is_none());
        let one = parse_angle_list("0,\n1.5,\n").unwrap_err();
        assert!(one.contains("line 1"), "{one}");
        let single = parse_angle_list("0\n1.5\n").unwrap();
        assert!(single.values == [0.0, 1.5]);
        let csv =
            parse_angle_list("# from the stage\nframe,theta_deg,time\n0,0.0,1\n1,0.5,2\n").unwrap();
        assert!(csv.values == [0.0, 0.5] && csv.units == Some("deg"));
        assert!(csv.column.as_deref() == Some("theta_deg"));
        let rad = parse_angle_list("\"Angle (rad)\"\n0.1\n0.2\n");
        assert!(rad.as_ref().unwrap().values == [0.1, 0.2], "{rad:?}");
        assert!(rad.unwrap().units == Some("rad"));
        let no_header = parse_angle_list("0,1\n2,3\n").unwrap_err();
        assert!(no_header.contains("no header"), "{no_header}");
        let unnamed = parse_angle_list("a,b\n0,1\n").unwrap_err();
        assert!(unnamed.contains("named like an angle"), "{unnamed}");
        let bad = parse_angle_list("theta\n0\nx\n").unwrap_err();
        assert!(bad.contains("line 3") && bad.contains("\"x\""), "{bad}");
        let short = parse_angle_list("i,theta\n0,1\n2\n").unwrap_err();
        assert!(short.contains("line 3"), "{short}");
        let nan = parse_angle_list("0 NaN").unwrap_err();
        assert!(nan.contains("NaN"), "{nan}");
    }

    #[test]
    fn text_up_to_the_limit_is_read_and_longer_text_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("angles.txt");
        std::fs::write(&path, "0 1.5\n").unwrap();
        assert!(read_text(&path).unwrap() == "0 1.5\n");
        let file = std::fs::File::create(&path).unwrap();
        // Sparse: the length without writing the bytes.
        file.set_len(MAX_TEXT_BYTES + 1).unwrap();
        assert!(matches!(read_text(&path), Err(TextError::TooLarge)));
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_text(&path), Err(TextError::NotUtf8(_))));
        assert!(matches!(
            read_text(&dir.path().join("missing")),
            Err(TextError::Read(_))
        ));
    }
}
