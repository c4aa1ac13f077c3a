//! The one progress-bar style of the command line (hidden with `--quiet`).

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps labelled `what`; hidden when `quiet`.
pub fn bar(len: u64, what: &str, quiet: bool) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(len)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>12} [{bar:40}] {pos}/{len} {elapsed} (ETA {eta}) {msg}",
        )
        .expect("the template is valid")
        .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar
}
