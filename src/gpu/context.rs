//! Adapter discovery, the device policy (hardware first, software only on request), device
//! creation with the adapter's real limits, buffers, readback and error capture.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytemuck::Pod;
use serde::Serialize;

use super::kernel::{Kernel, KernelKey, KernelSpec};
use super::recorder::{Download, Recorder};
use crate::error::GpuError;

/// The environment variable that opts in to software adapters (lavapipe, WARP, SwiftShader).
pub const SOFTWARE_OPT_IN_ENV: &str = "LAMINO_ALLOW_SOFTWARE_GPU";

/// True when [`SOFTWARE_OPT_IN_ENV`] is set to `1`, `true` or `yes` (any case).
pub fn software_opt_in_from_env() -> bool {
    std::env::var(SOFTWARE_OPT_IN_ENV)
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
        .unwrap_or(false)
}

/// Which adapter to run on. There is deliberately no "CPU" choice: lamino runs on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSelection {
    /// The best hardware GPU: discrete before integrated before virtual, then the lowest index.
    #[default]
    Best,
    /// The adapter with this index in the order `lamino devices` lists them.
    Index(usize),
}

impl FromStr for DeviceSelection {
    type Err = GpuError;
    fn from_str(s: &str) -> Result<Self, GpuError> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("best") {
            return Ok(Self::Best);
        }
        s.parse::<usize>()
            .map(Self::Index)
            .map_err(|_| GpuError::BadSelector(s.to_string()))
    }
}

impl fmt::Display for DeviceSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Best => write!(f, "best"),
            Self::Index(i) => write!(f, "{i}"),
        }
    }
}

/// The adapters of a run: one, a list (`0,2`; an index twice opens its adapter twice), or
/// `all` (every hardware GPU; with software adapters allowed and no hardware GPU, the one
/// [`DeviceSelection::Best`] picks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSet {
    One(DeviceSelection),
    List(Vec<usize>),
    All,
}

impl Default for DeviceSet {
    fn default() -> Self {
        Self::One(DeviceSelection::Best)
    }
}

impl FromStr for DeviceSet {
    type Err = GpuError;
    fn from_str(s: &str) -> Result<Self, GpuError> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("all") {
            return Ok(Self::All);
        }
        if !s.contains(',') {
            return s.parse().map(Self::One);
        }
        s.split(',')
            .map(|i| i.trim().parse::<usize>())
            .collect::<Result<Vec<_>, _>>()
            .map(Self::List)
            .map_err(|_| GpuError::BadSelector(s.to_string()))
    }
}

impl fmt::Display for DeviceSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::One(s) => write!(f, "{s}"),
            Self::List(l) => {
                let l: Vec<String> = l.iter().map(|i| i.to_string()).collect();
                write!(f, "{}", l.join(","))
            }
            Self::All => write!(f, "all"),
        }
    }
}

impl DeviceSet {
    /// Whether the set may name more than one adapter.
    pub fn is_several(&self) -> bool {
        !matches!(self, Self::One(_))
    }

    /// The selection of each device of the set, by the device policy.
    pub(crate) fn selections(
        &self,
        found: &[AdapterSummary],
        allow_software: bool,
    ) -> Result<Vec<DeviceSelection>, GpuError> {
        match self {
            Self::One(s) => Ok(vec![*s]),
            Self::List(l) => Ok(l.iter().map(|&i| DeviceSelection::Index(i)).collect()),
            Self::All => {
                let hardware: Vec<DeviceSelection> = found
                    .iter()
                    .filter(|a| !a.software)
                    .map(|a| DeviceSelection::Index(a.index))
                    .collect();
                match (hardware.is_empty(), found.is_empty(), allow_software) {
                    (false, ..) => Ok(hardware),
                    (true, true, _) => Err(GpuError::NoAdapter),
                    (true, false, true) => Ok(vec![DeviceSelection::Best]),
                    (true, false, false) => Err(GpuError::NoHardwareGpu {
                        found: found
                            .iter()
                            .map(|a| a.to_string())
                            .collect::<Vec<_>>()
                            .join("; "),
                    }),
                }
            }
        }
    }

    /// The devices of an MPI rank that is number `local` among the ranks of its node: with
    /// `best` one hardware GPU, the node's GPUs taken in turn by its ranks (one rank per GPU);
    /// with an index, that device; with a list or `all`, every device of it (one rank per node).
    pub(crate) fn selections_for_rank(
        &self,
        found: &[AdapterSummary],
        allow_software: bool,
        local: usize,
    ) -> Result<Vec<DeviceSelection>, GpuError> {
        match self {
            Self::One(DeviceSelection::Best) => {
                let all = Self::All.selections(found, allow_software)?;
                Ok(vec![all[local % all.len()]])
            }
            _ => self.selections(found, allow_software),
        }
    }

    /// The contexts of the MPI rank that is number `local` among its node's ranks (see
    /// [`selections_for_rank`](Self::selections_for_rank)).
    pub fn open_for_rank(
        &self,
        allow_software: bool,
        local: usize,
    ) -> Result<Vec<GpuContext>, GpuError> {
        let allow_software =
            DeviceOptions::new(DeviceSelection::Best, allow_software).allow_software;
        open_each(
            self.selections_for_rank(&list_adapters(), allow_software, local)?,
            allow_software,
        )
    }

    /// A context on every device of the set (see [`GpuContext::new`] for the policy).
    pub fn open(&self, allow_software: bool) -> Result<Vec<GpuContext>, GpuError> {
        let allow_software =
            DeviceOptions::new(DeviceSelection::Best, allow_software).allow_software;
        open_each(
            self.selections(&list_adapters(), allow_software)?,
            allow_software,
        )
    }
}

/// A context on each adapter of `selections`.
fn open_each(
    selections: Vec<DeviceSelection>,
    allow_software: bool,
) -> Result<Vec<GpuContext>, GpuError> {
    selections
        .into_iter()
        .map(|selection| {
            GpuContext::new(&DeviceOptions {
                selection,
                allow_software,
            })
        })
        .collect()
}

/// How to choose the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceOptions {
    /// Which adapter.
    pub selection: DeviceSelection,
    /// Accept a software adapter (`DeviceType::Cpu`). Off by default: interactive use needs a real
    /// GPU; tests, CI and batch runs opt in explicitly.
    pub allow_software: bool,
}

impl DeviceOptions {
    /// Options for `selection`, opting in to software adapters when `allow_software` is set or the
    /// [`SOFTWARE_OPT_IN_ENV`] variable asks for it.
    pub fn new(selection: DeviceSelection, allow_software: bool) -> Self {
        Self {
            selection,
            allow_software: allow_software || software_opt_in_from_env(),
        }
    }
}

/// What `lamino devices` prints about one adapter.
#[derive(Debug, Clone, Serialize)]
pub struct AdapterSummary {
    pub index: usize,
    pub name: String,
    pub backend: String,
    pub device_type: String,
    /// A CPU rasteriser such as lavapipe: correct but one to two orders of magnitude slower.
    pub software: bool,
    pub driver: String,
    pub driver_info: String,
    pub max_buffer_bytes: u64,
    pub max_storage_binding_bytes: u64,
    pub max_workgroup_storage_bytes: u32,
    pub max_invocations_per_workgroup: u32,
    pub timestamps: bool,
}

impl fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({}, {})",
            self.index, self.name, self.backend, self.device_type
        )
    }
}

fn summarize(index: usize, adapter: &wgpu::Adapter) -> AdapterSummary {
    let info = adapter.get_info();
    let limits = adapter.limits();
    AdapterSummary {
        index,
        name: info.name,
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        software: info.device_type == wgpu::DeviceType::Cpu,
        driver: info.driver,
        driver_info: info.driver_info,
        max_buffer_bytes: limits.max_buffer_size,
        max_storage_binding_bytes: limits.max_storage_buffer_binding_size,
        max_workgroup_storage_bytes: limits.max_compute_workgroup_storage_size,
        max_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
        timestamps: adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY),
    }
}

fn adapters() -> Vec<wgpu::Adapter> {
    // `_from_env` so that WGPU_BACKEND and friends work for debugging (Instance::default ignores them).
    let desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    let backends = desc.backends;
    let instance = wgpu::Instance::new(desc);
    pollster::block_on(instance.enumerate_adapters(backends))
}

/// Every adapter wgpu can see, in a stable order; the index is what `--device` takes.
pub fn list_adapters() -> Vec<AdapterSummary> {
    adapters()
        .iter()
        .enumerate()
        .map(|(i, a)| summarize(i, a))
        .collect()
}

fn hardware_rank(device_type: &str) -> u8 {
    match device_type {
        "DiscreteGpu" => 0,
        "IntegratedGpu" => 1,
        "VirtualGpu" => 2,
        _ => 3,
    }
}

/// Applies the device policy to a list of adapters; pure, so it is unit-tested without a GPU.
pub(crate) fn choose_adapter(
    found: &[AdapterSummary],
    options: &DeviceOptions,
) -> Result<usize, GpuError> {
    match options.selection {
        DeviceSelection::Index(index) => {
            let a = found.get(index).ok_or(GpuError::NoSuchAdapter {
                index,
                count: found.len(),
            })?;
            if a.software && !options.allow_software {
                return Err(GpuError::SoftwareAdapterRefused {
                    index,
                    name: a.name.clone(),
                });
            }
            Ok(index)
        }
        DeviceSelection::Best => {
            if found.is_empty() {
                return Err(GpuError::NoAdapter);
            }
            let best_hardware = found
                .iter()
                .filter(|a| !a.software)
                .min_by_key(|a| (hardware_rank(&a.device_type), a.index));
            if let Some(a) = best_hardware {
                return Ok(a.index);
            }
            if options.allow_software {
                return Ok(found[0].index);
            }
            let listed: Vec<String> = found.iter().map(|a| a.to_string()).collect();
            Err(GpuError::NoHardwareGpu {
                found: listed.join("; "),
            })
        }
    }
}

/// Device memory held by lamino's buffers on one context: now, at the peak, and the budget that
/// no allocation may cross.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    held: AtomicU64,
    peak: AtomicU64,
    budget: AtomicU64,
}

impl Ledger {
    /// Records `bytes` more, or refuses them (and records nothing) beyond the budget.
    fn reserve(&self, bytes: u64) -> Result<(), u64> {
        let budget = self.budget.load(Ordering::SeqCst);
        let mut held = self.held.load(Ordering::SeqCst);
        loop {
            let next = held.saturating_add(bytes);
            if budget != 0 && next > budget {
                return Err(held);
            }
            match self
                .held
                .compare_exchange(held, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::SeqCst);
                    return Ok(());
                }
                Err(now) => held = now,
            }
        }
    }
}

/// One allocation's entry in the ledger, released when the last handle to the buffer (its
/// `GpuBuffer` clones and the bind groups over it) is dropped.
#[derive(Debug)]
pub(crate) struct Allocation {
    bytes: u64,
    ledger: Arc<Ledger>,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.ledger.held.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// A buffer on the device with its size and label (labels show up in validation messages).
#[derive(Debug, Clone)]
pub struct GpuBuffer {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) bytes: u64,
    pub(crate) label: String,
    pub(crate) allocation: Option<Arc<Allocation>>,
}

impl GpuBuffer {
    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// The label given at creation.
    pub fn label(&self) -> &str {
        &self.label
    }
}

type ErrorSlot = Arc<Mutex<Vec<wgpu::Error>>>;

/// A device and queue with the adapter's real limits, a kernel cache and error capture.
///
/// Library code takes a `&GpuContext`; only the CLI and test harnesses create one.
pub struct GpuContext {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    info: AdapterSummary,
    limits: wgpu::Limits,
    binding_limit_override: Option<u64>,
    workgroups_per_dimension_override: Option<u32>,
    timestamps: bool,
    ledger: Arc<Ledger>,
    uncaptured: ErrorSlot,
    lost: Arc<Mutex<Option<String>>>,
    kernels: Mutex<HashMap<KernelKey, Arc<Kernel>>>,
    staging: Mutex<Option<GpuBuffer>>,
    scratch: Mutex<Vec<Option<GpuBuffer>>>,
    downloads: Mutex<Downloads>,
    counters: Counters,
    /// GPU time spans (ns) of every pass recorded while the timeline is on.
    timeline: Mutex<Option<Timeline>>,
    device_local: Option<u64>,
}

/// Pass spans in device nanoseconds, filled by downloads as they land.
type Timeline = Arc<Mutex<Vec<(f64, f64)>>>;

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

    fn of(mut spans: Vec<(f64, f64)>) -> Self {
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

/// The largest device-local memory heap the Vulkan driver reports for `adapter` (`None` on
/// other backends, where wgpu offers no way to ask).
fn vulkan_device_local_bytes(adapter: &wgpu::Adapter) -> Option<u64> {
    // Safety: the HAL adapter is only used to read properties while `adapter` is alive.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let instance = hal.shared_instance().raw_instance();
    // Safety: the physical device belongs to this instance.
    let properties =
        unsafe { instance.get_physical_device_memory_properties(hal.raw_physical_device()) };
    properties
        .memory_heaps_as_slice()
        .iter()
        .filter(|h| h.flags.contains(ash::vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .max()
}

/// Readback buffers: free ones, and those holding a download not yet on the host.
#[derive(Default)]
struct Downloads {
    free: Vec<GpuBuffer>,
    in_flight: Vec<InFlight>,
    pooled_bytes: u64,
    /// The pool's limit when set (`set_readback_pool_bytes`), else `READBACK_POOL_BYTES`.
    cap: Option<u64>,
}

type MapState = Arc<Mutex<Option<Result<(), wgpu::BufferAsyncError>>>>;

struct InFlight {
    download: Download,
    mapped: MapState,
    /// The submission that copies into the readback buffer: waiting for it (not for the whole
    /// queue) is enough for the download to land.
    submission: Option<wgpu::SubmissionIndex>,
}

/// Readback buffers may hold this much before a new download waits for an earlier one.
const READBACK_POOL_BYTES: u64 = 64 << 20;

/// What the context has done since it was created: the figures `bench admm` reports.
#[derive(Debug, Default)]
struct Counters {
    submissions: AtomicU64,
    waits: AtomicU64,
    bytes_uploaded: AtomicU64,
    bytes_downloaded: AtomicU64,
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

impl fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuContext")
            .field("adapter", &self.info)
            .finish_non_exhaustive()
    }
}

impl GpuContext {
    /// Chooses an adapter by the device policy and creates a device with its full limits.
    pub fn new(options: &DeviceOptions) -> Result<Self, GpuError> {
        let found = adapters();
        let summaries: Vec<AdapterSummary> = found
            .iter()
            .enumerate()
            .map(|(i, a)| summarize(i, a))
            .collect();
        let index = choose_adapter(&summaries, options)?;
        let adapter = &found[index];
        let info = summaries[index].clone();
        // wgpu's default limits are far below what devices offer (16 KiB workgroup memory, 256
        // invocations, 256 MiB buffers): request the adapter's own.
        let limits = adapter.limits();
        let wanted = wgpu::Features::TIMESTAMP_QUERY;
        let features = adapter.features() & wanted;
        let desc = wgpu::DeviceDescriptor {
            label: Some("lamino"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc)).map_err(|e| {
            GpuError::DeviceCreation {
                adapter: info.to_string(),
                reason: e.to_string(),
            }
        })?;
        let uncaptured: ErrorSlot = Arc::default();
        let slot = uncaptured.clone();
        // Errors outside a scope would panic by default; keep them and raise them as typed errors
        // at the next synchronisation point instead.
        device.on_uncaptured_error(Arc::new(move |e| {
            if let Ok(mut v) = slot.lock() {
                v.push(e);
            }
        }));
        let device_local = vulkan_device_local_bytes(adapter);
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let lost_slot = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            if let Ok(mut l) = lost_slot.lock() {
                *l = Some(format!("{reason:?}: {message}"));
            }
        });
        Ok(Self {
            device,
            queue,
            info,
            limits,
            binding_limit_override: None,
            workgroups_per_dimension_override: None,
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            ledger: Arc::default(),
            uncaptured,
            lost,
            kernels: Mutex::default(),
            staging: Mutex::default(),
            scratch: Mutex::default(),
            downloads: Mutex::default(),
            counters: Counters::default(),
            timeline: Mutex::default(),
            device_local,
        })
    }

    /// Caps the bytes of one storage binding below the device limit. Tests use this to exercise
    /// the paths that split data across bindings at sizes lavapipe runs quickly.
    pub fn with_max_binding_bytes(mut self, bytes: u64) -> Self {
        self.binding_limit_override = Some(bytes.max(self.binding_alignment()));
        self
    }

    /// Caps the workgroups of one dispatch dimension below the device limit. Tests use this to
    /// exercise the two-dimensional dispatch of large arrays at sizes lavapipe runs quickly.
    pub fn with_max_workgroups_per_dimension(mut self, groups: u32) -> Self {
        self.workgroups_per_dimension_override = Some(groups.max(1));
        self
    }

    /// Refuses every allocation that would make lamino's buffers on this context hold more than
    /// `bytes` of device memory (`GpuError::OverBudget`); 0 removes the limit.
    pub fn set_device_budget(&self, bytes: u64) {
        self.ledger.budget.store(bytes, Ordering::SeqCst);
    }

    /// The device-local memory the backend reports (Vulkan: the largest `DEVICE_LOCAL` memory
    /// heap), `None` where wgpu offers no way to read it.
    pub fn device_local_bytes(&self) -> Option<u64> {
        self.device_local
    }

    /// The device budget set with [`set_device_budget`](Self::set_device_budget), if any.
    pub fn device_budget(&self) -> Option<u64> {
        Some(self.ledger.budget.load(Ordering::SeqCst)).filter(|&b| b != 0)
    }

    /// Bytes of device memory lamino's buffers hold now.
    pub fn device_bytes_held(&self) -> u64 {
        self.ledger.held.load(Ordering::SeqCst)
    }

    /// The most device memory lamino's buffers held at once since the context was created (or
    /// since [`reset_peak_device_bytes`](Self::reset_peak_device_bytes)).
    pub fn peak_device_bytes(&self) -> u64 {
        self.ledger.peak.load(Ordering::SeqCst)
    }

    /// Starts a new peak measurement from what is held now.
    pub fn reset_peak_device_bytes(&self) {
        self.ledger
            .peak
            .store(self.device_bytes_held(), Ordering::SeqCst);
    }

    /// The adapter this context runs on.
    pub fn info(&self) -> &AdapterSummary {
        &self.info
    }

    /// Whether GPU timestamps are available for timing.
    pub fn has_timestamps(&self) -> bool {
        self.timestamps
    }

    /// Largest storage binding in bytes, a multiple of the binding alignment.
    pub fn max_binding_bytes(&self) -> u64 {
        let device = self.limits.max_storage_buffer_binding_size;
        let cap = self
            .binding_limit_override
            .map_or(device, |o| o.min(device));
        cap / self.binding_alignment() * self.binding_alignment()
    }

    /// Required alignment of a storage binding's offset in bytes.
    pub fn binding_alignment(&self) -> u64 {
        self.limits.min_storage_buffer_offset_alignment as u64
    }

    /// Largest buffer in bytes.
    pub fn max_buffer_bytes(&self) -> u64 {
        self.limits.max_buffer_size
    }

    /// Workgroup (shared) memory per workgroup in bytes.
    pub fn max_workgroup_storage_bytes(&self) -> u32 {
        self.limits.max_compute_workgroup_storage_size
    }

    /// Invocations per workgroup.
    pub fn max_invocations_per_workgroup(&self) -> u32 {
        self.limits.max_compute_invocations_per_workgroup
    }

    /// Workgroups per dispatch dimension.
    pub fn max_workgroups_per_dimension(&self) -> u32 {
        let device = self.limits.max_compute_workgroups_per_dimension;
        self.workgroups_per_dimension_override
            .map_or(device, |o| o.min(device))
    }

    fn create_raw(
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

    /// A zero-filled storage buffer that can be copied from and to.
    pub fn storage_buffer(&self, label: &str, bytes: u64) -> Result<GpuBuffer, GpuError> {
        self.create_raw(
            label,
            bytes,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
        )
    }

    /// A storage buffer holding `data`.
    pub fn upload<T: Pod>(&self, label: &str, data: &[T]) -> Result<GpuBuffer, GpuError> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let buf = self.storage_buffer(label, bytes.len() as u64)?;
        self.write(&buf, 0, data);
        Ok(buf)
    }

    /// A uniform buffer holding `value`.
    pub fn uniform<T: Pod>(&self, label: &str, value: &T) -> Result<GpuBuffer, GpuError> {
        let bytes = bytemuck::bytes_of(value);
        let buf = self.create_raw(
            label,
            bytes.len() as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        )?;
        self.queue.write_buffer(&buf.buffer, 0, bytes);
        Ok(buf)
    }

    /// Writes `data` into `buffer` starting at element `offset` (whole 4-byte words); lands
    /// before the next submission.
    pub fn write<T: Pod>(&self, buffer: &GpuBuffer, offset: u64, data: &[T]) {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if !bytes.is_empty() {
            let at = offset * std::mem::size_of::<T>() as u64;
            self.queue.write_buffer(&buffer.buffer, at, bytes);
            self.count_upload(bytes.len() as u64);
        }
    }

    pub(crate) fn count_upload(&self, bytes: u64) {
        self.counters
            .bytes_uploaded
            .fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn count_submission(&self) {
        self.counters.submissions.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts timing every compute pass recorded from now on with GPU timestamps (for
    /// benchmarks: one query set per pass). False, and nothing started, without timestamps.
    pub fn start_timeline(&self) -> bool {
        if !self.timestamps {
            return false;
        }
        *self.timeline.lock().expect("timeline poisoned") = Some(Timeline::default());
        true
    }

    /// Stops the timeline once every pass's timestamps have landed and says how busy the
    /// device was; `None` if it was not started.
    pub fn stop_timeline(&self) -> Result<Option<DeviceBusy>, GpuError> {
        self.complete_downloads()?;
        let timeline = self.timeline.lock().expect("timeline poisoned").take();
        Ok(timeline.map(|t| {
            let spans = std::mem::take(&mut *t.lock().expect("timeline poisoned"));
            DeviceBusy::of(spans)
        }))
    }

    pub(crate) fn timeline_on(&self) -> bool {
        self.timeline.lock().expect("timeline poisoned").is_some()
    }

    /// Where the timeline's spans go (a recorder is made only while it is on).
    pub(crate) fn timeline_spans(&self) -> Timeline {
        self.timeline
            .lock()
            .expect("timeline poisoned")
            .clone()
            .unwrap_or_default()
    }

    /// Submissions, waits and bytes moved since the context was created.
    pub fn traffic(&self) -> Traffic {
        let c = &self.counters;
        Traffic {
            submissions: c.submissions.load(Ordering::Relaxed),
            waits: c.waits.load(Ordering::Relaxed),
            bytes_uploaded: c.bytes_uploaded.load(Ordering::Relaxed),
            bytes_downloaded: c.bytes_downloaded.load(Ordering::Relaxed),
        }
    }

    /// A readback buffer of at least `bytes` from the pool; waits for an earlier download when
    /// the pool is full. With `may_defer`, `None` when the pool is full and no download is in
    /// flight: unsubmitted downloads (the caller's own, usually) hold it, and submitting them
    /// lets one land. Without, such a buffer is made beyond the pool's limit.
    pub(crate) fn readback_buffer(
        &self,
        bytes: u64,
        may_defer: bool,
    ) -> Result<Option<GpuBuffer>, GpuError> {
        loop {
            {
                let mut d = self.downloads.lock().expect("download pool poisoned");
                let best = d
                    .free
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.bytes >= bytes)
                    .min_by_key(|(_, b)| b.bytes)
                    .map(|(i, _)| i);
                if let Some(i) = best {
                    return Ok(Some(d.free.swap_remove(i)));
                }
                let cap = d.cap.unwrap_or(READBACK_POOL_BYTES).max(bytes);
                // Free buffers (all too small to serve) give their memory back for a new one,
                // so a change of block size does not wait for downloads in flight.
                let free: u64 = d.free.iter().map(|b| b.bytes).sum();
                let fits = d.pooled_bytes - free + bytes <= cap;
                if may_defer && !fits && d.in_flight.is_empty() {
                    return Ok(None);
                }
                if fits || d.in_flight.is_empty() {
                    let released: u64 = d.free.drain(..).map(|b| b.bytes).sum();
                    d.pooled_bytes = d.pooled_bytes - released + bytes;
                    drop(d);
                    return self
                        .create_raw(
                            "readback",
                            bytes,
                            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                        )
                        .map(Some);
                }
            }
            // The pool is full: a buffer whose download has landed is reused without a wait;
            // only when none has does the host wait, for the oldest.
            if self.take_arrived_downloads()? == 0 {
                self.wait_for_oldest_download()?;
            }
        }
    }

    /// Limits the readback buffers to `bytes` in all (a memory plan counts them in its budget);
    /// a download that needs more waits for earlier ones to land.
    pub fn set_readback_pool_bytes(&self, bytes: u64) {
        self.downloads.lock().expect("download pool poisoned").cap = Some(bytes);
    }

    /// Waits until the oldest download in flight has landed (only for the submission that
    /// copies it: later work stays queued, so the device keeps computing), and hands every
    /// download that has arrived to its completion.
    pub(crate) fn wait_for_oldest_download(&self) -> Result<(), GpuError> {
        let oldest = {
            let d = self.downloads.lock().expect("download pool poisoned");
            match d.in_flight.first() {
                Some(f) => f.submission.clone(),
                None => return Ok(()),
            }
        };
        let Some(index) = oldest else {
            return self.poll_downloads(true);
        };
        self.counters.waits.fetch_add(1, Ordering::Relaxed);
        let polled = self.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        });
        self.check()?;
        polled.map_err(|e| GpuError::DeviceLost(e.to_string()))?;
        self.poll_downloads(false)
    }

    pub(crate) fn register_download(
        &self,
        download: Download,
        submission: Option<wgpu::SubmissionIndex>,
    ) {
        let mapped: MapState = Arc::default();
        let state = mapped.clone();
        download.readback.buffer.slice(0..download.bytes).map_async(
            wgpu::MapMode::Read,
            move |r| {
                if let Ok(mut s) = state.lock() {
                    *s = Some(r);
                }
            },
        );
        if download.counted {
            self.counters
                .bytes_downloaded
                .fetch_add(download.bytes, Ordering::Relaxed);
        }
        self.downloads
            .lock()
            .expect("download pool poisoned")
            .in_flight
            .push(InFlight {
                download,
                mapped,
                submission,
            });
    }

    /// Hands every download that has arrived to its completion; with `wait`, first waits for
    /// the device to finish what was submitted.
    pub fn poll_downloads(&self, wait: bool) -> Result<(), GpuError> {
        if wait {
            self.wait()?;
            self.hand_over_arrived().map(|_| ())
        } else {
            self.take_arrived_downloads().map(|_| ())
        }
    }

    /// Hands the downloads that have arrived to their completions without waiting; returns how
    /// many did.
    fn take_arrived_downloads(&self) -> Result<usize, GpuError> {
        self.device
            .poll(wgpu::PollType::Poll)
            .map_err(|e| GpuError::DeviceLost(e.to_string()))?;
        self.hand_over_arrived()
    }

    /// Hands the downloads whose buffers are mapped to their completions and returns their
    /// buffers to the pool; returns how many.
    fn hand_over_arrived(&self) -> Result<usize, GpuError> {
        let arrived: Vec<InFlight> = {
            let mut d = self.downloads.lock().expect("download pool poisoned");
            let (ready, pending) = std::mem::take(&mut d.in_flight)
                .into_iter()
                .partition(|f| f.mapped.lock().map(|m| m.is_some()).unwrap_or(true));
            d.in_flight = pending;
            ready
        };
        let count = arrived.len();
        let mut first_error = None;
        for f in arrived {
            let result = f.mapped.lock().ok().and_then(|mut m| m.take());
            let Download {
                readback,
                bytes,
                done,
                ..
            } = f.download;
            match result {
                Some(Ok(())) => {
                    {
                        let view = readback
                            .buffer
                            .slice(0..bytes)
                            .get_mapped_range()
                            .map_err(|e| GpuError::Readback(e.to_string()))?;
                        done(&view);
                    }
                    readback.buffer.unmap();
                }
                Some(Err(e)) => {
                    first_error.get_or_insert(GpuError::Readback(e.to_string()));
                }
                None => {
                    first_error.get_or_insert(GpuError::Readback("a map callback vanished".into()));
                }
            }
            self.downloads
                .lock()
                .expect("download pool poisoned")
                .free
                .push(readback);
        }
        first_error.map_or(Ok(count), Err)
    }

    /// Whether downloads were submitted that have not been handed to their completions.
    pub fn has_downloads_in_flight(&self) -> bool {
        !self
            .downloads
            .lock()
            .expect("download pool poisoned")
            .in_flight
            .is_empty()
    }

    /// Waits until every download is on the host.
    pub fn complete_downloads(&self) -> Result<(), GpuError> {
        while !self
            .downloads
            .lock()
            .expect("download pool poisoned")
            .in_flight
            .is_empty()
        {
            self.poll_downloads(true)?;
        }
        Ok(())
    }

    /// Copies `count` elements of `buffer` from element `offset` back to the host.
    pub fn read<T: Pod>(
        &self,
        buffer: &GpuBuffer,
        offset: u64,
        count: usize,
    ) -> Result<Vec<T>, GpuError> {
        let size = std::mem::size_of::<T>() as u64;
        let bytes = count as u64 * size;
        if bytes == 0 {
            return Ok(Vec::new());
        }
        // Reads go through one staging buffer of at most 64 MiB at a time so that a readback
        // never needs a second copy of a large array on the device.
        const STAGING: u64 = 64 << 20;
        let chunk = (STAGING / size).max(1) * size;
        // One staging buffer per context, grown on demand and reused: solvers read a few scalars
        // back every iteration and must not allocate each time. The lock also serialises
        // readbacks from several threads, which would otherwise map the same buffer twice.
        let mut slot = self.staging.lock().expect("staging slot poisoned");
        let need = chunk.min(bytes);
        if slot.as_ref().is_none_or(|b| b.bytes < need) {
            // Round up so that slightly larger reads later reuse it too.
            let grown = need.next_power_of_two().min(STAGING.max(need));
            *slot = Some(self.create_raw(
                "readback staging",
                grown,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            )?);
        }
        let staging = slot.as_ref().expect("just ensured");
        self.counters
            .bytes_downloaded
            .fetch_add(bytes, Ordering::Relaxed);
        let mut out: Vec<T> = Vec::with_capacity(count);
        let mut done = 0u64;
        while done < bytes {
            let n = chunk.min(bytes - done);
            let mut enc = self.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&buffer.buffer, offset * size + done, &staging.buffer, 0, n);
            self.queue.submit([enc.finish()]);
            let slice = staging.buffer.slice(0..n);
            let (tx, rx) = std::sync::mpsc::channel();
            slice.map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
            self.wait()?;
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(GpuError::Readback(e.to_string())),
                Err(_) => return Err(GpuError::Readback("the map callback never ran".into())),
            }
            {
                let view = slice
                    .get_mapped_range()
                    .map_err(|e| GpuError::Readback(e.to_string()))?;
                out.extend_from_slice(bytemuck::cast_slice(&view));
            }
            staging.buffer.unmap();
            done += n;
        }
        Ok(out)
    }

    /// A storage buffer of at least `bytes` bytes shared by every caller of workspace slot `slot`
    /// (FFT plans use it for the data between passes). Work recorded into one queue runs in order,
    /// so plans that never run at the same time can share their workspace. A request larger than
    /// the slot's buffer replaces it with one of that size; plans keep the buffer they bound, so an
    /// outgrown buffer lives until its last plan is dropped.
    pub fn shared_scratch(&self, slot: usize, bytes: u64) -> Result<GpuBuffer, GpuError> {
        let mut pool = self.scratch.lock().expect("scratch pool poisoned");
        if pool.len() <= slot {
            pool.resize(slot + 1, None);
        }
        if let Some(buffer) = pool[slot].as_ref().filter(|b| b.bytes >= bytes) {
            return Ok(buffer.clone());
        }
        let buffer = self.storage_buffer(&format!("shared scratch {slot}"), bytes.max(16))?;
        pool[slot] = Some(buffer.clone());
        Ok(buffer)
    }

    /// Lets go of what the context keeps between uses: the free readback buffers, the staging
    /// buffer of [`read`](Self::read) (grown to the largest read so far) and the shared workspace
    /// buffers (plans keep the ones they bound). A run that sets a device budget calls this
    /// first, so that what an earlier run on the context left pooled does not count against it.
    pub fn release_idle_pools(&self) {
        {
            let mut d = self.downloads.lock().expect("download pool poisoned");
            let released: u64 = d.free.drain(..).map(|b| b.bytes).sum();
            d.pooled_bytes -= released;
        }
        *self.staging.lock().expect("staging slot poisoned") = None;
        self.scratch.lock().expect("scratch pool poisoned").clear();
    }

    /// Bytes of the current shared workspace buffers (see [`shared_scratch`](Self::shared_scratch)).
    pub fn shared_scratch_bytes(&self) -> u64 {
        let pool = self.scratch.lock().expect("scratch pool poisoned");
        pool.iter().flatten().map(|b| b.bytes).sum()
    }

    /// Returns (and caches) the compiled pipeline for `spec`.
    pub fn kernel(&self, spec: &KernelSpec) -> Result<Arc<Kernel>, GpuError> {
        let key = spec.key();
        if let Some(k) = self
            .kernels
            .lock()
            .expect("kernel cache poisoned")
            .get(&key)
        {
            return Ok(k.clone());
        }
        let kernel = Arc::new(Kernel::build(self, spec)?);
        self.kernels
            .lock()
            .expect("kernel cache poisoned")
            .insert(key, kernel.clone());
        Ok(kernel)
    }

    /// Starts recording dispatches into one compute pass.
    pub fn recorder(&self, label: &str) -> Recorder {
        Recorder::new(self, label, false)
    }

    /// Like [`recorder`](Self::recorder), with GPU timestamps around the pass when the device has
    /// them ([`Recorder::finish_timed`] then reports the GPU time).
    pub fn timed_recorder(&self, label: &str) -> Recorder {
        Recorder::new(self, label, self.timestamps)
    }

    /// Submits the recorded work without waiting for it: the ordinary way to run work. Errors
    /// the device reported so far are raised here; later ones at the next wait.
    pub fn submit(&self, recorder: Recorder) -> Result<(), GpuError> {
        recorder.finish(self)
    }

    /// Submits the recorded work and waits until the device is idle: for timing and for the
    /// places that need a result before they can go on (the name says that it blocks).
    pub fn submit_and_wait(&self, recorder: Recorder) -> Result<(), GpuError> {
        recorder.finish_timed(self).map(|_| ())
    }

    /// Waits until the device is idle, then turns captured errors and device loss into errors.
    pub fn wait(&self) -> Result<(), GpuError> {
        self.counters.waits.fetch_add(1, Ordering::Relaxed);
        let polled = self.device.poll(wgpu::PollType::wait_indefinitely());
        self.check()?;
        polled
            .map(|_| ())
            .map_err(|e| GpuError::DeviceLost(e.to_string()))
    }

    /// Raises the first error the device reported since the last check.
    pub fn check(&self) -> Result<(), GpuError> {
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

pub(crate) fn convert_error(e: wgpu::Error, context: &str) -> GpuError {
    match e {
        wgpu::Error::OutOfMemory { .. } => GpuError::OutOfMemory {
            context: context.to_string(),
        },
        other => GpuError::Validation {
            context: context.to_string(),
            message: other.to_string(),
        },
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

    fn adapter(index: usize, name: &str, device_type: &str) -> AdapterSummary {
        AdapterSummary {
            index,
            name: name.into(),
            backend: "Vulkan".into(),
            device_type: device_type.into(),
            software: device_type == "Cpu",
            driver: String::new(),
            driver_info: String::new(),
            max_buffer_bytes: 1 << 30,
            max_storage_binding_bytes: 1 << 27,
            max_workgroup_storage_bytes: 32768,
            max_invocations_per_workgroup: 1024,
            timestamps: true,
        }
    }

    fn opts(selection: DeviceSelection, allow_software: bool) -> DeviceOptions {
        DeviceOptions {
            selection,
            allow_software,
        }
    }

    #[test]
    fn best_prefers_discrete_over_integrated_and_software() {
        let found = [
            adapter(0, "llvmpipe", "Cpu"),
            adapter(1, "iGPU", "IntegratedGpu"),
            adapter(2, "dGPU", "DiscreteGpu"),
        ];
        assert_eq!(
            choose_adapter(&found, &opts(DeviceSelection::Best, true)).unwrap(),
            2
        );
        assert_eq!(
            choose_adapter(&found[..2], &opts(DeviceSelection::Best, true)).unwrap(),
            1
        );
    }

    #[test]
    fn software_only_is_refused_with_a_message_that_says_how_to_opt_in() {
        let found = [adapter(0, "llvmpipe", "Cpu")];
        let err = choose_adapter(&found, &opts(DeviceSelection::Best, false)).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, GpuError::NoHardwareGpu { .. }), "{msg}");
        assert!(
            msg.contains("llvmpipe") && msg.contains("lamino devices"),
            "{msg}"
        );
        assert!(
            msg.contains("--allow-software-gpu") && msg.contains(SOFTWARE_OPT_IN_ENV),
            "{msg}"
        );
        assert_eq!(
            choose_adapter(&found, &opts(DeviceSelection::Best, true)).unwrap(),
            0
        );
    }

    #[test]
    fn an_index_selects_that_adapter_but_never_silently_a_software_one() {
        let found = [
            adapter(0, "llvmpipe", "Cpu"),
            adapter(1, "dGPU", "DiscreteGpu"),
        ];
        assert_eq!(
            choose_adapter(&found, &opts(DeviceSelection::Index(1), false)).unwrap(),
            1
        );
        let err = choose_adapter(&found, &opts(DeviceSelection::Index(0), false)).unwrap_err();
        assert!(matches!(
            err,
            GpuError::SoftwareAdapterRefused { index: 0, .. }
        ));
        assert_eq!(
            choose_adapter(&found, &opts(DeviceSelection::Index(0), true)).unwrap(),
            0
        );
        let err = choose_adapter(&found, &opts(DeviceSelection::Index(5), true)).unwrap_err();
        assert!(matches!(
            err,
            GpuError::NoSuchAdapter { index: 5, count: 2 }
        ));
    }

    #[test]
    fn device_sets_parse_lists_and_all_takes_every_hardware_gpu() {
        let parse = |s: &str| s.parse::<DeviceSet>();
        assert_eq!(
            parse("best").unwrap(),
            DeviceSet::One(DeviceSelection::Best)
        );
        assert_eq!(
            parse("1").unwrap(),
            DeviceSet::One(DeviceSelection::Index(1))
        );
        assert_eq!(parse("0, 2").unwrap(), DeviceSet::List(vec![0, 2]));
        assert_eq!(parse("ALL").unwrap(), DeviceSet::All);
        assert_eq!(parse("0,2").unwrap().to_string(), "0,2");
        for bad in ["0,", "a,b", "-1", "twice"] {
            assert!(matches!(parse(bad), Err(GpuError::BadSelector(_))), "{bad}");
        }
        let found = [
            adapter(0, "llvmpipe", "Cpu"),
            adapter(1, "iGPU", "IntegratedGpu"),
            adapter(2, "dGPU", "DiscreteGpu"),
        ];
        let index = DeviceSelection::Index;
        assert_eq!(
            DeviceSet::All.selections(&found, true).unwrap(),
            vec![index(1), index(2)]
        );
        // No hardware GPU: all is the software adapter when allowed, an error otherwise.
        assert_eq!(
            DeviceSet::All.selections(&found[..1], true).unwrap(),
            vec![DeviceSelection::Best]
        );
        assert!(matches!(
            DeviceSet::All.selections(&found[..1], false),
            Err(GpuError::NoHardwareGpu { .. })
        ));
        assert!(matches!(
            DeviceSet::All.selections(&[], true),
            Err(GpuError::NoAdapter)
        ));
        // MPI ranks of a node take its GPUs in turn, or each takes all it is given.
        let rank = |set: &DeviceSet, local| set.selections_for_rank(&found, true, local).unwrap();
        let best = DeviceSet::One(DeviceSelection::Best);
        assert_eq!(
            (0..3).map(|l| rank(&best, l)).collect::<Vec<_>>(),
            vec![vec![index(1)], vec![index(2)], vec![index(1)]]
        );
        assert_eq!(
            rank(&DeviceSet::List(vec![2, 0]), 3),
            vec![index(2), index(0)]
        );
        assert_eq!(rank(&DeviceSet::All, 1), vec![index(1), index(2)]);
        assert_eq!(rank(&DeviceSet::One(index(0)), 5), vec![index(0)]);
    }

    #[test]
    fn no_adapter_at_all_is_a_typed_error() {
        let err = choose_adapter(&[], &opts(DeviceSelection::Best, true)).unwrap_err();
        assert!(matches!(err, GpuError::NoAdapter));
    }

    #[test]
    fn buffers_beyond_the_device_and_a_lost_device_are_typed_errors() {
        let ctx = super::super::test_context();
        let too_big = ctx.max_buffer_bytes() + 4;
        assert!(matches!(
            ctx.storage_buffer("huge", too_big),
            Err(GpuError::BufferTooLarge { bytes, .. }) if bytes == too_big
        ));
        let held = ctx.device_bytes_held();
        ctx.set_device_budget(held + 1024);
        assert!(matches!(
            ctx.storage_buffer("over budget", 2048),
            Err(GpuError::OverBudget { .. })
        ));
        let within = ctx.storage_buffer("within budget", 1024).unwrap();
        assert_eq!(ctx.device_bytes_held(), held + 1024);
        drop(within);
        assert_eq!(ctx.device_bytes_held(), held);
        ctx.set_device_budget(0);
        // Losing the device (destroy is the one loss wgpu lets a program cause) surfaces as a
        // typed error at the next synchronisation, not as a panic or a hang.
        let buffer = ctx.upload("data", &[1.0f32; 16]).unwrap();
        ctx.device.destroy();
        let read = ctx.read::<f32>(&buffer, 0, 16);
        assert!(
            matches!(
                read,
                Err(GpuError::DeviceLost(_)) | Err(GpuError::Readback(_))
            ),
            "{read:?}"
        );
        assert!(matches!(ctx.wait(), Err(GpuError::DeviceLost(_))));
    }

    #[test]
    fn selectors_parse() {
        assert_eq!(
            "best".parse::<DeviceSelection>().unwrap(),
            DeviceSelection::Best
        );
        assert_eq!(
            " 3 ".parse::<DeviceSelection>().unwrap(),
            DeviceSelection::Index(3)
        );
        assert!(matches!(
            "gpu".parse::<DeviceSelection>(),
            Err(GpuError::BadSelector(_))
        ));
    }
}
