//! A context's device and queue with what every layer above them needs: the adapter's limits,
//! buffer allocation against the memory ledger, the traffic counters, and the capture of errors
//! and device loss that turns them into typed errors at the next wait or check.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::adapter::{AdapterSummary, DeviceLimits};
use super::error::{convert_error, GpuError};
use super::memory::{Allocation, GpuBuffer, Ledger};
use super::traffic::Counters;

type ErrorSlot = Arc<Mutex<Vec<wgpu::Error>>>;

/// A device and queue created with the adapter's real limits, with error capture.
pub(crate) struct Device {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(super) limits: wgpu::Limits,
    /// Whether GPU timestamps are available for timing.
    pub(super) timestamps: bool,
    pub(super) ledger: Arc<Ledger>,
    pub(super) counters: Counters,
    uncaptured: ErrorSlot,
    lost: Arc<Mutex<Option<String>>>,
}

impl Device {
    /// Creates a device on `adapter` (described by `info`) with `limits`.
    pub(super) fn open(
        adapter: &wgpu::Adapter,
        info: &AdapterSummary,
        limits: DeviceLimits,
    ) -> Result<Self, GpuError> {
        let desc = Self::descriptor(adapter, limits);
        let (device, queue) = pollster::block_on(adapter.request_device(&desc)).map_err(|e| {
            GpuError::DeviceCreation {
                adapter: info.to_string(),
                reason: e.to_string(),
            }
        })?;
        Ok(Self::adopt(device, queue))
    }

    /// What lamino asks of a device on `adapter`: `limits` (wgpu's default limits are far below
    /// what devices offer, 16 KiB workgroup memory, 256 invocations, 256 MiB buffers, so the
    /// adapter's own unless the portable ones are asked for), with GPU timestamps and pipeline
    /// caches where it has them.
    pub(super) fn descriptor(
        adapter: &wgpu::Adapter,
        limits: DeviceLimits,
    ) -> wgpu::DeviceDescriptor<'static> {
        let wanted = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::PIPELINE_CACHE;
        wgpu::DeviceDescriptor {
            label: Some("lamino"),
            required_features: adapter.features() & wanted,
            required_limits: limits.wgpu_limits(adapter),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }
    }

    /// Works on a device and queue created elsewhere (an application's renderer), with the
    /// limits and features it was created with. Installs lamino's error capture and device-loss
    /// callback on it: they replace the application's, and errors its own work causes surface
    /// at lamino's next wait or check.
    pub(super) fn adopt(device: wgpu::Device, queue: wgpu::Queue) -> Self {
        let limits = device.limits();
        let features = device.features();
        let uncaptured: ErrorSlot = Arc::default();
        let slot = uncaptured.clone();
        // Errors outside a scope would panic by default; keep them and raise them as typed errors
        // at the next synchronisation point instead.
        device.on_uncaptured_error(Arc::new(move |e| {
            if let Ok(mut v) = slot.lock() {
                v.push(e);
            }
        }));
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let lost_slot = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            if let Ok(mut l) = lost_slot.lock() {
                *l = Some(format!("{reason:?}: {message}"));
            }
        });
        Self {
            device,
            queue,
            limits,
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            ledger: Arc::default(),
            counters: Counters::default(),
            uncaptured,
            lost,
        }
    }

    /// Largest buffer in bytes.
    pub(super) fn max_buffer_bytes(&self) -> u64 {
        self.limits.max_buffer_size
    }

    /// A buffer of `bytes` (in whole 4-byte words) with `usage`, counted in the ledger; refused
    /// beyond the device's buffer limit or the budget.
    pub(super) fn create_raw(
        &self,
        label: &str,
        bytes: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<GpuBuffer, GpuError> {
        if bytes > self.max_buffer_bytes() {
            return Err(GpuError::BufferTooLarge {
                label: label.to_string(),
                bytes,
                limit: self.max_buffer_bytes(),
            });
        }
        // Buffers are sized in whole 4-byte words; zero-sized buffers are not bindable.
        let padded = bytes.max(4).div_ceil(4) * 4;
        self.ledger
            .reserve(padded)
            .map_err(|held| GpuError::OverBudget {
                label: label.to_string(),
                bytes: padded,
                held,
                budget: self.ledger.budget.load(Ordering::SeqCst),
            })?;
        let allocation = Arc::new(Allocation {
            bytes: padded,
            ledger: self.ledger.clone(),
        });
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: padded,
            usage,
            mapped_at_creation: false,
        });
        if let Some(e) = pollster::block_on(oom.pop()) {
            return Err(GpuError::OutOfMemory {
                context: format!("allocating {label:?} ({bytes} bytes): {e}"),
            });
        }
        Ok(GpuBuffer {
            buffer,
            bytes,
            label: label.to_string(),
            allocation: Some(allocation),
        })
    }

    pub(super) fn count_upload(&self, bytes: u64) {
        self.counters
            .bytes_uploaded
            .fetch_add(bytes, Ordering::Relaxed);
    }

    pub(super) fn count_submission(&self) {
        self.counters.submissions.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits until the device is idle, then turns captured errors and device loss into errors.
    pub(super) fn wait(&self) -> Result<(), GpuError> {
        self.counters.waits.fetch_add(1, Ordering::Relaxed);
        let polled = self.device.poll(wgpu::PollType::wait_indefinitely());
        self.check()?;
        polled
            .map(|_| ())
            .map_err(|e| GpuError::DeviceLost(e.to_string()))
    }

    /// Raises the first error the device reported since the last check.
    pub(super) fn check(&self) -> Result<(), GpuError> {
        if let Some(reason) = self.lost.lock().expect("device-lost slot poisoned").clone() {
            return Err(GpuError::DeviceLost(reason));
        }
        let mut errors = self.uncaptured.lock().expect("error slot poisoned");
        if errors.is_empty() {
            return Ok(());
        }
        let first = errors.remove(0);
        errors.clear();
        Err(convert_error(first, "running GPU work"))
    }
}
