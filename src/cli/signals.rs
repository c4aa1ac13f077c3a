//! The signals that stop a reconstruction with a checkpoint, as Ctrl-C does: SIGINT (Ctrl-C),
//! SIGTERM (`kill`, `timeout`, SLURM at a job's time limit) and, on Unix, SIGUSR1 (what SLURM
//! sends ahead of the limit with `--signal=USR1@SECONDS`). The first one sets the run's cancel
//! flag: the run stops after its current iteration, writes its checkpoint and exits with
//! 128 + the signal's number, as a process killed by it would report ([`Interrupted`]). A second
//! SIGINT or SIGTERM ends the process at once with that status: checkpoints are written
//! atomically, so the last complete one stays. Handled through `signal-hook` (its `flag`
//! module: no thread, and it tells which signal arrived, which `ctrlc` does not).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;
use thiserror::Error;

/// The signals that stop a run, with their names; SIGINT and SIGTERM end it at once when they
/// come a second time.
#[cfg(unix)]
const STOP_SIGNALS: [(i32, &str, bool); 3] = [
    (SIGINT, "SIGINT", true),
    (SIGTERM, "SIGTERM", true),
    (signal_hook::consts::SIGUSR1, "SIGUSR1", false),
];
#[cfg(not(unix))]
const STOP_SIGNALS: [(i32, &str, bool); 2] = [(SIGINT, "SIGINT", true), (SIGTERM, "SIGTERM", true)];

/// A run stopped by a signal after writing its checkpoint: the process exits with
/// [`exit_status`](Self::exit_status).
#[derive(Debug, Clone, Error)]
#[error("{message}")]
pub struct Interrupted {
    status: u8,
    message: String,
}

impl Interrupted {
    /// Stopped by the signal `name` (number `number`) after `iteration` outer iterations (resumed
    /// ones included), the state in `checkpoint`.
    pub fn new(name: &str, number: i32, iteration: usize, checkpoint: &Path) -> Self {
        Self {
            status: u8::try_from(128 + number).unwrap_or(1),
            message: format!(
                "interrupted by {name} after iteration {iteration}: the state is in {}; rerun \
                 with --resume to continue",
                checkpoint.display()
            ),
        }
    }

    /// 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM, 138 for SIGUSR1 (Linux).
    pub fn exit_status(&self) -> u8 {
        self.status
    }

    /// Stopped by the signal `name` (number `number`) during `step`, before the reconstruction
    /// began: nothing was written, there is no checkpoint.
    pub fn before_solving(name: &str, number: i32, step: &str) -> Self {
        Self {
            status: u8::try_from(128 + number).unwrap_or(1),
            message: format!("stopped by {name} during {step}; nothing written"),
        }
    }

    /// The same stop told by `message` (what the abandoned output set says of it).
    pub fn retold(self, message: String) -> Self {
        Self { message, ..self }
    }
}

/// The stop signals, once installed: the cancel flag they set and which of them came last.
pub struct StopSignals {
    cancel: Arc<AtomicBool>,
    /// The number of the latest stop signal (0 before any).
    received: Arc<AtomicUsize>,
}

impl StopSignals {
    /// The stop signals' handlers, installed by the first call for the rest of the process
    /// (every later call gets the same: a command that watches them before its reconstruction,
    /// through its axis search, keeps one flag for both).
    pub fn install() -> Result<&'static Self, String> {
        static INSTALLED: OnceLock<StopSignals> = OnceLock::new();
        if let Some(signals) = INSTALLED.get() {
            return Ok(signals);
        }
        // The command line runs on one thread here: no other call can install them meanwhile.
        let signals = Self::register().map_err(|e| {
            format!("cannot install the handlers of SIGINT, SIGTERM and SIGUSR1: {e}")
        })?;
        Ok(INSTALLED.get_or_init(|| signals))
    }

    fn register() -> Result<Self, std::io::Error> {
        let cancel = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicUsize::new(0));
        for (number, _, twice_ends) in STOP_SIGNALS {
            // The shutdown goes first: it sees the flag the first signal set, not its own.
            if twice_ends {
                flag::register_conditional_shutdown(number, 128 + number, cancel.clone())?;
            }
            flag::register_usize(number, received.clone(), number as usize)?;
            flag::register(number, cancel.clone())?;
        }
        Ok(Self { cancel, received })
    }

    /// The flag the signals set, for [`crate::recon::Reconstructor::cancel_flag`].
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// The stop signal received, if one came, as the error that ends the command when it came
    /// during `step`, before the reconstruction (see [`Interrupted::before_solving`]).
    pub fn stop_before_solving(&self, step: &str) -> Result<(), Interrupted> {
        match self.received() {
            Some((name, number)) => Err(Interrupted::before_solving(name, number, step)),
            None => Ok(()),
        }
    }

    /// The latest stop signal received, by name and number.
    pub fn received(&self) -> Option<(&'static str, i32)> {
        let number = self.received.load(Ordering::SeqCst);
        STOP_SIGNALS
            .iter()
            .find(|(n, _, _)| *n as usize == number)
            .map(|&(n, name, _)| (name, n))
    }
}
