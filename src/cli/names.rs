//! tomocupy's names on lamino's command line: the tomocupy options lamino has no equivalent for,
//! refused with what lamino offers instead of clap's "unexpected argument"
//! (docs/field-conventions.md). `--binning` as tomocupy's exponent is the library's
//! ([`crate::preprocess::parse_binning`]), which the viewer's command line shares.

use clap::{Arg, ArgAction, Command};

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
