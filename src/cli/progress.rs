//! The one progress-bar style of the command line (hidden with `--quiet`), and the progress of
//! a reconstruction's iterations: the bar on a terminal, log lines elsewhere.

use std::cell::RefCell;
use std::io::IsTerminal;
use std::rc::Rc;
use std::time::Duration;

use crate::recon::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

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

/// How often a line reports the iterations when stderr is not a terminal (logs, pipes, batch
/// jobs), besides the first iteration and the last.
pub const LOG_INTERVAL: Duration = Duration::from_secs(30);

/// The progress of a reconstruction's iterations: the bar on a terminal; elsewhere, where a bar
/// draws nothing, a line at the first iteration, then every [`LOG_INTERVAL`], and at the end
/// ([`finish`](Self::finish)), as tomocupy's logs do. Nothing when `quiet`. Clones share the
/// state (one goes into the run's progress callback, one finishes).
#[derive(Clone)]
pub struct IterationProgress {
    bar: ProgressBar,
    /// Without a terminal: when the last line was printed and the latest iteration not printed.
    log: Option<Rc<RefCell<LineLog>>>,
    /// Whether the bar is drawn (on a terminal, unless quiet), from the first iteration.
    shown: bool,
}

struct LineLog {
    /// Whether the run may stop before `total` iterations (the remaining time is then a bound).
    converges: bool,
    /// `elapsed_s` of the last line printed.
    last_line_s: Option<f64>,
    /// The latest iteration's line, if it was not printed.
    pending: Option<String>,
}

impl LineLog {
    /// Whether an iteration `elapsed_s` into the run gets its line.
    fn due(&self, elapsed_s: f64) -> bool {
        self.last_line_s
            .is_none_or(|last| elapsed_s - last >= LOG_INTERVAL.as_secs_f64())
    }
}

impl IterationProgress {
    /// Progress of at most `total` iterations; `converges`: the run may stop earlier. On a
    /// terminal the bar appears with the first iteration: the steps before it (reading, the
    /// axis search) say what they do in lines of their own.
    pub fn new(total: usize, quiet: bool, converges: bool) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = bar(total as u64, "iterations", true);
        bar.set_length(total as u64);
        let log = (!quiet && !terminal).then(|| {
            Rc::new(RefCell::new(LineLog {
                converges,
                last_line_s: None,
                pending: None,
            }))
        });
        Self {
            bar,
            log,
            shown: !quiet && terminal,
        }
    }

    /// Shows iteration `p`.
    pub fn update(&self, p: &Progress) {
        if self.shown && self.bar.is_hidden() {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.reset_elapsed();
        }
        self.bar.set_position(p.iteration as u64 + 1);
        self.bar.set_message(format!(
            "|Lu-d|^2 {:.4e}, rho {}, change {:.1e}",
            p.report.data_term, p.report.rho, p.report.change
        ));
        if let Some(log) = &self.log {
            let mut log = log.borrow_mut();
            let line = log_line(p, log.converges);
            if log.due(p.elapsed_s) {
                eprintln!("{line}");
                log.last_line_s = Some(p.elapsed_s);
                log.pending = None;
            } else {
                log.pending = Some(line);
            }
        }
    }

    /// Runs `f` (which prints) without the bar drawing over it.
    pub fn suspend(&self, f: impl FnOnce()) {
        self.bar.suspend(f)
    }

    /// Clears the bar, or prints the last iteration's line if it was not printed.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
        if let Some(line) = self
            .log
            .as_ref()
            .and_then(|l| l.borrow_mut().pending.take())
        {
            eprintln!("{line}");
        }
    }
}

/// One log line: iteration, the Lagrangian's data term, the relative residuals of the
/// convergence test, the penalty, the change, the time so far and the estimated remaining.
fn log_line(p: &Progress, converges: bool) -> String {
    let r = &p.report;
    format!(
        "iteration {}/{}: |Lu-d|^2 {:.4e}, primal {:.2e}, dual {:.2e}, change {:.2e}, rho {}; \
         elapsed {:.0} s, remaining {}{:.0} s",
        p.iteration + 1,
        p.total,
        r.data_term,
        r.primal_relative,
        r.dual_relative,
        r.change,
        r.rho,
        p.elapsed_s,
        if converges { "at most " } else { "" },
        p.eta_s
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_first_then_every_interval() {
        let mut log = LineLog {
            converges: true,
            last_line_s: None,
            pending: None,
        };
        let interval = LOG_INTERVAL.as_secs_f64();
        assert!(log.due(0.5));
        log.last_line_s = Some(0.5);
        assert!(!log.due(0.5 + interval - 0.01));
        assert!(log.due(0.5 + interval));
        assert!(!log.due(f64::NAN));
    }

    #[test]
    fn a_line_says_iteration_residuals_and_times() {
        let report = crate::solver::IterationReport {
            iteration: 4,
            data_term: 2.5e-3,
            primal_relative: 1e-2,
            dual_relative: 2e-3,
            change: 3e-4,
            rho: 0.5,
            tv_term: 1.0,
            dual_term: 1.0,
            penalty_term: 1.0,
            lagrangian: 1.0,
            primal_residual: 1.0,
            dual_residual: 1.0,
        };
        let p = Progress {
            iteration: 4,
            total: 300,
            report,
            elapsed_s: 12.4,
            eta_s: 731.6,
        };
        let line = log_line(&p, true);
        assert!(
            line == "iteration 5/300: |Lu-d|^2 2.5000e-3, primal 1.00e-2, dual 2.00e-3, change \
                     3.00e-4, rho 0.5; elapsed 12 s, remaining at most 732 s",
            "{line}"
        );
        assert!(log_line(&p, false).ends_with("remaining 732 s"));
    }
}
