//! What a context counts about its work: submissions, waits and bytes moved ([`Traffic`]), and
//! how busy the device was, from the timestamps of its passes ([`DeviceBusy`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// Pass spans in device nanoseconds, filled by downloads as they land.
pub(crate) type Timeline = Arc<Mutex<Vec<(f64, f64)>>>;

/// How busy the device was over a stretch of work, from the timestamps of its passes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DeviceBusy {
    /// Passes timed.
    pub passes: usize,
    /// From the first pass's start to the last pass's end, ms.
    pub span_ms: f64,
    /// Time within the span during which at least one pass ran, ms.
    pub busy_ms: f64,
}

impl DeviceBusy {
    /// The share of the span in which no pass ran (transfers, submission gaps, host waits).
    pub fn idle_share(&self) -> f64 {
        if self.span_ms > 0.0 {
            1.0 - self.busy_ms / self.span_ms
        } else {
            0.0
        }
    }

    pub(super) fn of(mut spans: Vec<(f64, f64)>) -> Self {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (mut busy, mut cursor) = (0.0, f64::NEG_INFINITY);
        for &(start, end) in &spans {
            let start = start.max(cursor);
            if end > start {
                busy += end - start;
                cursor = end;
            }
        }
        let first = spans.first().map_or(0.0, |s| s.0);
        let last = spans.iter().map(|s| s.1).fold(first, f64::max);
        Self {
            passes: spans.len(),
            span_ms: (last - first) / 1e6,
            busy_ms: busy / 1e6,
        }
    }
}

/// What the context has done since it was created: the figures `bench admm` reports.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) submissions: AtomicU64,
    pub(super) waits: AtomicU64,
    pub(super) bytes_uploaded: AtomicU64,
    pub(super) bytes_downloaded: AtomicU64,
}

impl Counters {
    /// The counts so far.
    pub(super) fn snapshot(&self) -> Traffic {
        Traffic {
            submissions: self.submissions.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            bytes_uploaded: self.bytes_uploaded.load(Ordering::Relaxed),
            bytes_downloaded: self.bytes_downloaded.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of a context's traffic counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Traffic {
    /// Command submissions.
    pub submissions: u64,
    /// Times the host waited for the device.
    pub waits: u64,
    /// Bytes written from the host to the device.
    pub bytes_uploaded: u64,
    /// Bytes read back from the device to the host.
    pub bytes_downloaded: u64,
}

impl std::ops::Sub for Traffic {
    type Output = Traffic;
    fn sub(self, earlier: Traffic) -> Traffic {
        Traffic {
            submissions: self.submissions - earlier.submissions,
            waits: self.waits - earlier.waits,
            bytes_uploaded: self.bytes_uploaded - earlier.bytes_uploaded,
            bytes_downloaded: self.bytes_downloaded - earlier.bytes_downloaded,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_busy_merges_overlapping_passes_and_counts_gaps_as_idle() {
        // Passes (ns): [0, 2] ms and [1, 3] ms overlap, then a gap of 1 ms, then [4, 5] ms.
        let ms = 1e6;
        let b = DeviceBusy::of(vec![(4.0 * ms, 5.0 * ms), (0.0, 2.0 * ms), (ms, 3.0 * ms)]);
        assert_eq!(b.passes, 3);
        assert!(
            (b.span_ms - 5.0).abs() < 1e-9 && (b.busy_ms - 4.0).abs() < 1e-9,
            "{b:?}"
        );
        assert!((b.idle_share() - 0.2).abs() < 1e-9, "{b:?}");
        let none = DeviceBusy::of(Vec::new());
        assert_eq!((none.passes, none.idle_share()), (0, 0.0));
    }
}
