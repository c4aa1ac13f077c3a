//! `progress=` and Ctrl-C during a reconstruction. The solver runs without the GIL; after every
//! outer iteration its progress callback takes the GIL back for a moment to call the user's
//! callable (or draw the bar) and to run Python's signal handlers: a `KeyboardInterrupt` (or an
//! exception from the callable) sets the cancel flag, so the solver stops at the end of the
//! iteration it is in, and the exception is raised once the device work has wound down.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use lamino_core::Progress;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::input_error;

/// What `progress=` asked for.
pub(crate) enum Reporter {
    None,
    /// `True`: a tqdm-style bar on `sys.stderr`.
    Bar,
    Callable(Py<PyAny>),
}

impl Reporter {
    /// `None`/`False`, `True` or a callable.
    pub(crate) fn from_arg(progress: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let Some(p) = progress.filter(|p| !p.is_none()) else {
            return Ok(Self::None);
        };
        if let Ok(flag) = p.cast::<pyo3::types::PyBool>() {
            return Ok(if flag.is_true() {
                Self::Bar
            } else {
                Self::None
            });
        }
        if p.is_callable() {
            return Ok(Self::Callable(p.clone().unbind()));
        }
        Err(input_error(
            "progress",
            format!("{}: expected None, True or a callable", p.repr()?),
        ))
    }
}

/// The per-iteration hook of one run: reports, checks for signals, remembers the first
/// exception and sets `cancel` on it.
pub(crate) struct Watch {
    reporter: Reporter,
    pub(crate) cancel: Arc<AtomicBool>,
    raised: Mutex<Option<PyErr>>,
}

impl Watch {
    pub(crate) fn new(reporter: Reporter) -> Self {
        Self {
            reporter,
            cancel: Arc::new(AtomicBool::new(false)),
            raised: Mutex::new(None),
        }
    }

    /// Called by the solver (without the GIL) after each outer iteration.
    pub(crate) fn iteration(&self, p: &Progress) {
        // The solver reads the flag before it reports, so one more iteration runs after the
        // one that raised: it is neither reported nor checked again.
        if self.cancel.load(Ordering::SeqCst) {
            return;
        }
        let result = Python::attach(|py| {
            py.check_signals()?;
            match &self.reporter {
                Reporter::None => Ok(()),
                Reporter::Bar => draw_bar(py, p),
                Reporter::Callable(f) => f.call1(py, (progress_dict(py, p)?,)).map(drop),
            }
        });
        if let Err(e) = result {
            let mut raised = self.raised.lock().unwrap_or_else(|e| e.into_inner());
            raised.get_or_insert(e);
            self.cancel.store(true, Ordering::SeqCst);
        }
    }

    /// The exception that stopped the run, if one did; ends the bar's line either way.
    pub(crate) fn finish(self, py: Python<'_>) -> PyResult<()> {
        if matches!(self.reporter, Reporter::Bar) {
            stderr_write(py, "\n")?;
        }
        match self.raised.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The report terms of one outer iteration, as the callable receives them.
fn progress_dict<'py>(py: Python<'py>, p: &Progress) -> PyResult<Bound<'py, PyDict>> {
    let r = &p.report;
    let d = PyDict::new(py);
    // Counted from 1, as the command line's progress and report count them.
    d.set_item("iteration", p.iteration + 1)?;
    d.set_item("total", p.total)?;
    d.set_item("elapsed_s", p.elapsed_s)?;
    d.set_item("eta_s", p.eta_s)?;
    for (name, value) in [
        ("data_term", r.data_term),
        ("tv_term", r.tv_term),
        ("dual_term", r.dual_term),
        ("penalty_term", r.penalty_term),
        ("lagrangian", r.lagrangian),
        ("primal_residual", r.primal_residual),
        ("dual_residual", r.dual_residual),
        ("rho", r.rho),
        ("change", r.change),
        ("primal_relative", r.primal_relative),
        ("dual_relative", r.dual_relative),
    ] {
        d.set_item(name, value)?;
    }
    Ok(d)
}

/// `reconstruct: 40%|########            | 12/30 [00:03<00:05, lagrangian 1.2e+01]` on one line.
fn draw_bar(py: Python<'_>, p: &Progress) -> PyResult<()> {
    const WIDTH: usize = 20;
    let done = p.iteration + 1;
    let fraction = (done as f64 / p.total.max(1) as f64).min(1.0);
    let filled = (fraction * WIDTH as f64).round() as usize;
    let clock = |s: f64| {
        let s = s.max(0.0).round() as u64;
        format!("{:02}:{:02}", s / 60, s % 60)
    };
    let line = format!(
        "\rreconstruct: {:3.0}%|{}{}| {done}/{} [{}<{}, lagrangian {:.3e}]",
        100.0 * fraction,
        "#".repeat(filled),
        " ".repeat(WIDTH - filled),
        p.total,
        clock(p.elapsed_s),
        clock(p.eta_s),
        p.report.lagrangian
    );
    stderr_write(py, &line)
}

/// Writes to Python's `sys.stderr` (what a notebook shows), else to the process's.
fn stderr_write(py: Python<'_>, text: &str) -> PyResult<()> {
    match py.import("sys")?.getattr("stderr") {
        Ok(stderr) if !stderr.is_none() => {
            stderr.call_method1("write", (text,))?;
            stderr.call_method0("flush").map(drop)
        }
        _ => {
            let mut err = std::io::stderr();
            // A closed stderr is no reason to stop a reconstruction.
            let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
            Ok(())
        }
    }
}
