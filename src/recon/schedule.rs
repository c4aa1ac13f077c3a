//! When a run writes its checkpoint: every N iterations, every so much time, `auto` (on time once
//! the run is expected to be long), or only when it is stopped. A checkpoint is written at the
//! end of an iteration (the only point where the solver's state is complete), so a time interval
//! is a lower bound: the write waits for the iteration in progress.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

/// With [`CheckpointInterval::Auto`], a run expected to take longer than this (the time its
/// iterations took so far plus the rest at the mean time per iteration, up to the most
/// iterations it may take) checkpoints every [`AUTO_CHECKPOINT_INTERVAL`]: long enough that a
/// batch job killed at its limit loses little, short runs pay no checkpoint writes.
pub const AUTO_LONG_RUN: Duration = Duration::from_secs(30 * 60);

/// The time between the checkpoints of a long run with [`CheckpointInterval::Auto`].
pub const AUTO_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10 * 60);

/// How often a run writes its checkpoint (it is always written when the run is cancelled).
///
/// Parsed from and shown as the command line's `--checkpoint-every` values: `N` (iterations),
/// `90s`, `10m`, `1h` (time), `auto` or `never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointInterval {
    /// Every N outer iterations (N at least 1).
    Iterations(usize),
    /// At the end of the first iteration that ends this long after the last checkpoint (or the
    /// first iteration of the run).
    Time(Duration),
    /// [`AUTO_CHECKPOINT_INTERVAL`] once the run is expected to take longer than
    /// [`AUTO_LONG_RUN`]; otherwise only when cancelled.
    Auto,
    /// Only when cancelled.
    Never,
}

impl From<usize> for CheckpointInterval {
    /// Every `every` iterations (0 counts as 1).
    fn from(every: usize) -> Self {
        Self::Iterations(every.max(1))
    }
}

impl From<Duration> for CheckpointInterval {
    fn from(every: Duration) -> Self {
        Self::Time(every)
    }
}

impl fmt::Display for CheckpointInterval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Iterations(n) => write!(f, "{n}"),
            Self::Time(d) => {
                let s = d.as_secs();
                match (s % 3600, s % 60) {
                    _ if d.subsec_nanos() != 0 => write!(f, "{}s", d.as_secs_f64()),
                    (0, _) if s > 0 => write!(f, "{}h", s / 3600),
                    (_, 0) if s > 0 => write!(f, "{}m", s / 60),
                    _ => write!(f, "{s}s"),
                }
            }
            Self::Auto => f.write_str("auto"),
            Self::Never => f.write_str("never"),
        }
    }
}

impl FromStr for CheckpointInterval {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let expected = "expected iterations (e.g. 10), a time (90s, 10m, 1h), `auto` or `never`";
        match s {
            "auto" => return Ok(Self::Auto),
            "never" => return Ok(Self::Never),
            _ => {}
        }
        if let Ok(n) = s.parse::<usize>() {
            return match n {
                0 => Err(format!("{s:?}: at least 1 iteration ({expected})")),
                n => Ok(Self::Iterations(n)),
            };
        }
        let (number, seconds) = match s.char_indices().last() {
            Some((i, 's')) => (&s[..i], 1.0),
            Some((i, 'm')) => (&s[..i], 60.0),
            Some((i, 'h')) => (&s[..i], 3600.0),
            _ => return Err(format!("{s:?}: {expected}")),
        };
        match number.parse::<f64>() {
            Ok(v) if v > 0.0 && (v * seconds).is_finite() => {
                Duration::try_from_secs_f64(v * seconds)
                    .map(Self::Time)
                    .map_err(|e| format!("{s:?}: {e}"))
            }
            _ => Err(format!(
                "{s:?}: a time must be a positive number of s, m or h ({expected})"
            )),
        }
    }
}

/// Decides after each iteration whether the checkpoint is due.
#[derive(Debug, Clone)]
pub(crate) struct CheckpointSchedule {
    interval: CheckpointInterval,
    /// Time into the run's iterations of the last checkpoint (zero before the first).
    last: Duration,
}

impl CheckpointSchedule {
    pub(crate) fn new(interval: CheckpointInterval) -> Self {
        Self {
            interval,
            last: Duration::ZERO,
        }
    }

    /// Whether a checkpoint is due after `done` iterations (counted from the start, resumed ones
    /// included), `elapsed` into this run's iterations, with the run `expected` to take as long
    /// in all.
    pub(crate) fn due(&self, done: usize, elapsed: Duration, expected: Duration) -> bool {
        let since = elapsed.saturating_sub(self.last);
        match self.interval {
            CheckpointInterval::Iterations(n) => done.is_multiple_of(n.max(1)),
            CheckpointInterval::Time(every) => since >= every,
            CheckpointInterval::Auto => {
                expected > AUTO_LONG_RUN && since >= AUTO_CHECKPOINT_INTERVAL
            }
            CheckpointInterval::Never => false,
        }
    }

    /// A checkpoint was written `elapsed` into the run's iterations.
    pub(crate) fn written(&mut self, elapsed: Duration) {
        self.last = elapsed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn parses_iterations_times_and_words_and_shows_them_back() {
        for (text, interval) in [
            ("10", CheckpointInterval::Iterations(10)),
            ("90s", CheckpointInterval::Time(secs(90))),
            ("10m", CheckpointInterval::Time(secs(600))),
            ("1h", CheckpointInterval::Time(secs(3600))),
            ("auto", CheckpointInterval::Auto),
            ("never", CheckpointInterval::Never),
        ] {
            assert!(text.parse::<CheckpointInterval>() == Ok(interval), "{text}");
            assert!(interval.to_string() == text, "{text}");
        }
        assert!("1.5m".parse::<CheckpointInterval>() == Ok(CheckpointInterval::Time(secs(90))));
        assert!("0.5s".parse::<CheckpointInterval>().map(|i| i.to_string()) == Ok("0.5s".into()));
        for bad in [
            "0", "0s", "-1m", "10x", "m", "", "nans", "infh", "1e30h", "-3",
        ] {
            let e = bad.parse::<CheckpointInterval>().unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn iteration_intervals_count_iterations_and_time_intervals_count_time() {
        let every3 = CheckpointSchedule::new(CheckpointInterval::Iterations(3));
        let due: Vec<usize> = (1..=9)
            .filter(|&i| every3.due(i, secs(i as u64 * 1000), secs(0)))
            .collect();
        assert!(due == [3, 6, 9]);

        let mut timed = CheckpointSchedule::new(CheckpointInterval::Time(secs(10)));
        assert!(!timed.due(1, secs(9), secs(10_000)));
        assert!(timed.due(2, secs(10), secs(0)));
        timed.written(secs(12));
        assert!(!timed.due(3, secs(21), secs(0)));
        assert!(timed.due(4, secs(22), secs(0)));

        let never = CheckpointSchedule::new(CheckpointInterval::Never);
        assert!(!never.due(1000, secs(1 << 20), secs(1 << 30)));
    }

    #[test]
    fn auto_checkpoints_on_time_only_runs_expected_to_be_long() {
        let mut auto = CheckpointSchedule::new(CheckpointInterval::Auto);
        let long = AUTO_LONG_RUN + secs(1);
        let interval = AUTO_CHECKPOINT_INTERVAL;
        // A short run never checkpoints on its own.
        assert!(!auto.due(5, interval * 2, AUTO_LONG_RUN));
        // A long one does, every AUTO_CHECKPOINT_INTERVAL.
        assert!(!auto.due(5, interval - secs(1), long));
        assert!(auto.due(6, interval, long));
        auto.written(interval);
        assert!(!auto.due(7, interval * 2 - secs(1), long));
        assert!(auto.due(8, interval * 2, long));
    }
}
