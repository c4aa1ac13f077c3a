//! What the memo layer did: hits, misses, bytes, time, evictions and the error it may have
//! introduced.

use serde::Serialize;

use super::norm_cache::NormSource;
use super::MemoPolicy;
use crate::operator::Stage;

/// Statistics of one stage. Times are wall-clock milliseconds: `wall_ms` is everything the memo
/// layer spent on the stage (recording, waiting, deciding; the GPU work of the chunks it computed
/// included, since it waits for them with the certification), `wait_ms` the part spent blocked
/// on readbacks.
#[derive(Debug, Clone, Serialize)]
pub struct StageStats {
    pub stage: Stage,
    /// Why the stage runs without memoization, if it does.
    pub disabled: Option<String>,
    /// Device slots of the stage's slab.
    pub slots: usize,
    /// Chunks handled together: at most three round trips per wave.
    pub wave: usize,
    pub chunks: u64,
    pub hits: u64,
    pub misses: u64,
    /// Applications of the stage, host round trips (waits for a readback) in all, and the most in
    /// one application.
    pub applications: u64,
    pub round_trips: u64,
    pub max_round_trips: u64,
    pub wall_ms: f64,
    pub wait_ms: f64,
    #[serde(skip)]
    pub lookup_ms: Vec<f64>,
    /// Entries moved from the device tier to the host tier, and dropped.
    pub demoted: u64,
    pub dropped: u64,
    /// Host entries brought back to the device to be compared or reused.
    pub promotions: u64,
    /// Reuses formed on the host from the entries' host copies, straight into the host array
    /// the stage writes (streaming mode): neither their input nor their output crossed to or
    /// from the device.
    pub formed_on_host: u64,
    pub device_bytes: u64,
    pub host_bytes: u64,
    pub peak_device_bytes: u64,
    pub peak_host_bytes: u64,
    /// Largest relative residual `|x - alpha c| / |x|` of a certified reuse.
    pub max_relative_residual: f64,
    /// Sum and largest of the bounds `|F| |x - alpha c|` on the output error of certified reuses.
    pub error_bound_sum: f64,
    pub max_error_bound: f64,
    /// Reuses whose exact output was also computed (audit), the largest error measured, and the
    /// largest ratio of measured error to bound.
    pub audited: u64,
    pub max_audit_error: f64,
    pub max_audit_error_over_bound: f64,
}

impl StageStats {
    pub fn new(stage: Stage) -> Self {
        Self {
            stage,
            disabled: None,
            slots: 0,
            wave: 0,
            chunks: 0,
            hits: 0,
            misses: 0,
            applications: 0,
            round_trips: 0,
            max_round_trips: 0,
            wall_ms: 0.0,
            wait_ms: 0.0,
            lookup_ms: Vec::new(),
            demoted: 0,
            dropped: 0,
            promotions: 0,
            formed_on_host: 0,
            device_bytes: 0,
            host_bytes: 0,
            peak_device_bytes: 0,
            peak_host_bytes: 0,
            max_relative_residual: 0.0,
            error_bound_sum: 0.0,
            max_error_bound: 0.0,
            audited: 0,
            max_audit_error: 0.0,
            max_audit_error_over_bound: 0.0,
        }
    }

    pub(crate) fn record_bytes(&mut self, device: u64, host: u64) {
        self.device_bytes = device;
        self.host_bytes = host;
        self.peak_device_bytes = self.peak_device_bytes.max(device);
        self.peak_host_bytes = self.peak_host_bytes.max(host);
    }

    pub(crate) fn record_bound(&mut self, relative_residual: f64, bound: f64) {
        self.max_relative_residual = self.max_relative_residual.max(relative_residual);
        self.error_bound_sum += bound;
        self.max_error_bound = self.max_error_bound.max(bound);
    }

    pub(crate) fn record_audit(&mut self, error: f64, bound: Option<f64>) {
        self.audited += 1;
        self.max_audit_error = self.max_audit_error.max(error);
        if let Some(bound) = bound {
            let ratio = if bound > 0.0 {
                error / bound
            } else if error > 0.0 {
                f64::INFINITY
            } else {
                0.0
            };
            self.max_audit_error_over_bound = self.max_audit_error_over_bound.max(ratio);
        }
    }

    /// Counts one application that took `round_trips` waits.
    pub(crate) fn record_application(&mut self, round_trips: u64) {
        self.applications += 1;
        self.round_trips += round_trips;
        self.max_round_trips = self.max_round_trips.max(round_trips);
    }
}

/// Statistics of all stages with their totals.
#[derive(Debug, Clone, Serialize)]
pub struct MemoStats {
    pub policy: MemoPolicy,
    /// The certified tolerance in use at the end (it follows the solver under `certified:auto`).
    pub tolerance: Option<f64>,
    /// Where `|U1|` and `|U2|` came from (certified policies).
    pub norms: Option<NormSource>,
    /// Problems that did not stop the run (an unusable or unwritable norm cache).
    pub warnings: Vec<String>,
    pub chunks: u64,
    pub hits: u64,
    pub misses: u64,
    pub hit_rate: f64,
    /// Stage applications through the memo layer, their round trips to the host, and the most
    /// round trips of one stage application.
    pub applications: u64,
    pub round_trips: u64,
    pub max_round_trips_per_application: u64,
    pub wall_ms: f64,
    pub wait_ms: f64,
    pub lookups: usize,
    pub lookup_ms_median: f64,
    pub lookup_ms_p99: f64,
    /// Bytes held by the caches now (device and host tiers), and the peak.
    pub cache_bytes: u64,
    pub peak_cache_bytes: u64,
    pub demoted: u64,
    pub dropped: u64,
    pub promotions: u64,
    /// Reuses formed on the host without a transfer (see [`StageStats::formed_on_host`]).
    pub formed_on_host: u64,
    pub max_relative_residual: f64,
    pub error_bound_sum: f64,
    pub audited: u64,
    pub max_audit_error_over_bound: f64,
    pub stages: Vec<StageStats>,
}

/// The `q`-quantile (nearest rank) of `values`; 0 for none.
fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

impl MemoStats {
    pub fn summarise(policy: MemoPolicy, stages: Vec<StageStats>) -> Self {
        let sum = |f: fn(&StageStats) -> u64| stages.iter().map(f).sum::<u64>();
        let (chunks, hits, misses) = (sum(|s| s.chunks), sum(|s| s.hits), sum(|s| s.misses));
        let lookups: Vec<f64> = stages
            .iter()
            .flat_map(|s| s.lookup_ms.iter().copied())
            .collect();
        let max = |f: fn(&StageStats) -> f64| stages.iter().map(f).fold(0.0, f64::max);
        Self {
            policy,
            tolerance: None,
            norms: None,
            warnings: Vec::new(),
            chunks,
            hits,
            misses,
            hit_rate: if chunks == 0 {
                0.0
            } else {
                hits as f64 / chunks as f64
            },
            applications: sum(|s| s.applications),
            round_trips: sum(|s| s.round_trips),
            max_round_trips_per_application: stages
                .iter()
                .map(|s| s.max_round_trips)
                .max()
                .unwrap_or(0),
            wall_ms: stages.iter().map(|s| s.wall_ms).sum(),
            wait_ms: stages.iter().map(|s| s.wait_ms).sum(),
            lookups: lookups.len(),
            lookup_ms_median: quantile(&lookups, 0.5),
            lookup_ms_p99: quantile(&lookups, 0.99),
            cache_bytes: sum(|s| s.device_bytes + s.host_bytes),
            peak_cache_bytes: sum(|s| s.peak_device_bytes + s.peak_host_bytes),
            demoted: sum(|s| s.demoted),
            dropped: sum(|s| s.dropped),
            promotions: sum(|s| s.promotions),
            formed_on_host: sum(|s| s.formed_on_host),
            max_relative_residual: max(|s| s.max_relative_residual),
            error_bound_sum: stages.iter().map(|s| s.error_bound_sum).sum(),
            audited: sum(|s| s.audited),
            max_audit_error_over_bound: max(|s| s.max_audit_error_over_bound),
            stages,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up() {
        let mut a = StageStats::new(Stage::Usfft1d);
        (a.chunks, a.hits, a.misses) = (10, 4, 6);
        a.record_application(3);
        a.record_application(1);
        (a.wall_ms, a.wait_ms) = (60.0, 8.0);
        a.lookup_ms = vec![1.0, 2.0, 3.0];
        a.record_bytes(100, 50);
        a.record_bytes(10, 5);
        let mut b = StageStats::new(Stage::Usfft2d);
        (b.chunks, b.hits, b.misses) = (5, 0, 5);
        b.lookup_ms = vec![4.0];
        b.record_application(2);
        let s = MemoStats::summarise(MemoPolicy::Certified { tol: 0.01 }, vec![a, b]);
        assert_eq!((s.chunks, s.hits, s.misses), (15, 4, 11));
        assert_eq!(s.chunks, s.hits + s.misses);
        assert!((s.hit_rate - 4.0 / 15.0).abs() < 1e-12);
        assert_eq!(
            (
                s.applications,
                s.round_trips,
                s.max_round_trips_per_application
            ),
            (3, 6, 3)
        );
        assert_eq!((s.wall_ms, s.wait_ms), (60.0, 8.0));
        assert_eq!((s.cache_bytes, s.peak_cache_bytes), (15, 150));
        assert_eq!(
            (s.lookups, s.lookup_ms_median, s.lookup_ms_p99),
            (4, 2.0, 4.0)
        );
    }

    #[test]
    fn audit_ratio_is_error_over_bound() {
        let mut a = StageStats::new(Stage::Usfft1d);
        a.record_audit(0.5, Some(1.0));
        a.record_audit(0.1, Some(1.0));
        a.record_audit(0.0, Some(0.0));
        assert_eq!(
            (a.audited, a.max_audit_error_over_bound, a.max_audit_error),
            (3, 0.5, 0.5)
        );
        a.record_audit(1e-9, Some(0.0));
        assert!(a.max_audit_error_over_bound.is_infinite());
    }
}
