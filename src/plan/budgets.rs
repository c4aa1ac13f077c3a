//! The memory a reconstruction may use ([`Budgets`]) and where each budget came from: given by
//! the caller, reported by the backend, or a stated default.

use std::path::PathBuf;

use serde::Serialize;

use crate::gpu::GpuContext;

/// The device budget when neither the caller nor the backend states one: what a laptop GPU of
/// 2024 has to spare. Said so wherever it is used.
pub const DEFAULT_DEVICE_BUDGET: u64 = 2 << 30;

/// The share of installed memory the host budget takes by default.
pub const DEFAULT_HOST_FRACTION: f64 = 0.7;

/// Where budgets come from, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetSource {
    /// Given by the caller (`--max-device-memory`, `--max-host-memory`).
    Given,
    /// The device-local memory the backend reports.
    Reported,
    /// A stated default ([`DEFAULT_DEVICE_BUDGET`], [`DEFAULT_HOST_FRACTION`] of installed memory).
    Default,
}

/// The memory a reconstruction may use.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Budgets {
    pub device_bytes: u64,
    pub device_source: BudgetSource,
    pub host_bytes: u64,
    pub host_source: BudgetSource,
    /// Where arrays that do not fit the host budget go; none: such a plan is refused.
    pub scratch: Option<PathBuf>,
    /// The largest buffer of the device planned for, where that is not this device (plans on
    /// paper for another GPU, `bench scale --target-max-buffer-gib`); none: this device's.
    pub max_buffer_bytes: Option<u64>,
}

impl Budgets {
    /// Budgets stated by the caller.
    pub fn given(device_bytes: u64, host_bytes: u64, scratch: Option<PathBuf>) -> Self {
        Self {
            device_bytes,
            device_source: BudgetSource::Given,
            host_bytes,
            host_source: BudgetSource::Given,
            scratch,
            max_buffer_bytes: None,
        }
    }

    /// These budgets for a device whose largest buffer is `bytes` (plans on paper only: a run
    /// allocates on this device, whose own limit holds).
    pub fn for_max_buffer(mut self, bytes: u64) -> Self {
        self.max_buffer_bytes = Some(bytes);
        self
    }

    /// The defaults on this machine and device, overridden by what the caller gives.
    pub fn new(
        ctx: &GpuContext,
        device_bytes: Option<u64>,
        host_bytes: Option<u64>,
        scratch: Option<PathBuf>,
    ) -> Self {
        let (device_bytes, device_source) = match (device_bytes, ctx.device_local_bytes()) {
            (Some(b), _) => (b, BudgetSource::Given),
            (None, Some(b)) => (b, BudgetSource::Reported),
            (None, None) => (DEFAULT_DEVICE_BUDGET, BudgetSource::Default),
        };
        let (host_bytes, host_source) = match host_bytes {
            Some(b) => (b, BudgetSource::Given),
            None => (
                (crate::memory::HostMemory::now().total as f64 * DEFAULT_HOST_FRACTION) as u64,
                BudgetSource::Default,
            ),
        };
        Self {
            device_bytes,
            device_source,
            host_bytes,
            host_source,
            scratch,
            max_buffer_bytes: None,
        }
    }
}
