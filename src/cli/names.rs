//! tomocupy's names on lamino's command line: `--binning` as tomocupy's exponent, and the
//! tomocupy options lamino has no equivalent for, refused with what lamino offers instead of
//! clap's "unexpected argument" (docs/field-conventions.md).

use clap::{Arg, ArgAction, Command};

/// The largest `--binning` exponent, as tomocupy's (`--binning 3`: 8 x 8 pixels).
pub const MAX_BINNING: u32 = 3;

/// `--binning b`: tomocupy's exponent, the detector binned by 2^b.
pub fn parse_binning(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(b) if b <= MAX_BINNING => Ok(b),
        _ => Err(format!(
            "expected an exponent 0 to {MAX_BINNING}, as tomocupy's: the detector is binned by \
             2^b (0 none, 1 2 x 2, 2 4 x 4, 3 8 x 8 pixels)"
        )),
    }
}

/// The binning factor of the exponent `b` (the library's unit).
pub fn binning_factor(b: u32) -> usize {
    1 << b
}

/// The tomocupy options lamino has no equivalent for, with what to do instead.
const REFUSED: [(&str, &str); 3] = [
    (
        "save-format",
        "`lamino reconstruct` chooses the volume's files with --format (tiff: DIR/recon.tif, \
         float32 multi-page; h5: DIR/recon.h5, /volume; zarr: DIR/recon.zarr; default \
         tiff,h5): use --format instead of --save-format",
    ),
    (
        "start-row",
        "lamino does not reconstruct a band of detector rows: the volume's z planes are chosen \
         with --slab START:END (tomocupy's --lamino-start-row/--lamino-end-row), its x/y region \
         with --roi",
    ),
    (
        "end-row",
        "lamino does not reconstruct a band of detector rows: the volume's z planes are chosen \
         with --slab START:END (tomocupy's --lamino-start-row/--lamino-end-row), its x/y region \
         with --roi",
    ),
];

/// `command` with the tomocupy options of [`REFUSED`] as hidden options whose every value is
/// refused with the reason, so that a tomocupy habit gets an answer instead of clap's
/// "unexpected argument".
pub fn refuse_tomocupy_options(mut command: Command) -> Command {
    for (name, reason) in REFUSED {
        command = command.arg(
            Arg::new(name)
                .long(name)
                .hide(true)
                .action(ArgAction::Set)
                .allow_hyphen_values(true)
                .value_parser(move |_: &str| Err::<String, String>(reason.to_string())),
        );
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binning_is_tomocupys_exponent() {
        let factors: Vec<usize> = ["0", "1", "2", "3"]
            .iter()
            .map(|s| binning_factor(parse_binning(s).unwrap()))
            .collect();
        assert_eq!(factors, [1, 2, 4, 8]);
        for bad in ["4", "-1", "2.0", "x"] {
            let e = parse_binning(bad).unwrap_err();
            assert!(e.contains("2^b"), "{bad}: {e}");
        }
    }

    #[test]
    fn refused_options_say_why_for_every_value() {
        let command = refuse_tomocupy_options(Command::new("t"));
        for (name, reason) in REFUSED {
            let e = command
                .clone()
                .try_get_matches_from(["t", &format!("--{name}"), "tiff"])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("--{name}")) && e.contains(reason),
                "{e}"
            );
        }
    }
}
