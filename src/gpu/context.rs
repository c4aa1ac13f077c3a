//! The GPU context: a device on the adapter the device policy chose, with what a context keeps
//! for its users (the kernel cache, shared workspace buffers, the readback pool, the timeline of
//! pass timestamps) and the public face of the layers below it (limits, memory budget, buffers,
//! readback, waits and checks). Recording work into it is `recorder.rs`'s.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytemuck::Pod;

use super::adapter::{
    adapters, choose_adapter, list_adapters, summarize, vulkan_device_local_bytes, AdapterSummary,
    Backend, DeviceLimits, DeviceOptions, DeviceSelection, DeviceSet,
};
use super::device::Device;
use super::error::GpuError;
use super::kernel::{Kernel, KernelKey, KernelSpec};
use super::memory::GpuBuffer;
use super::pipeline_cache::PipelineStore;
use super::readback::Readback;
use super::traffic::{DeviceBusy, Timeline, Traffic};

/// The largest storage binding a context reports, where it is not the device's.
#[derive(Debug, Clone, Copy)]
enum BindingLimit {
    Device,
    /// Below the device's, for tests of the paths that split data across bindings.
    Capped(u64),
    /// Another GPU's, for plans on paper (`bench scale --target-max-binding`).
    Modelled(u64),
}

/// A device and queue with the adapter's real limits, a kernel cache and error capture.
///
/// Library code takes a `&GpuContext`; only the CLI and test harnesses create one.
pub struct GpuContext {
    /// The device and queue the layers below work on (allocation, counters, error capture).
    pub(crate) core: Device,
    info: AdapterSummary,
    binding_limit: BindingLimit,
    workgroups_per_dimension_override: Option<u32>,
    kernels: Mutex<HashMap<KernelKey, Arc<Kernel>>>,
    pub(super) readback: Readback,
    scratch: Mutex<Vec<Option<GpuBuffer>>>,
    /// GPU time spans (ns) of every pass recorded while the timeline is on.
    timeline: Mutex<Option<Timeline>>,
    device_local: Option<u64>,
    /// Compiled pipelines kept across runs, where the device has a pipeline cache.
    pipelines: Option<PipelineStore>,
}

impl Drop for GpuContext {
    fn drop(&mut self) {
        self.keep_compiled_pipelines();
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
        let found = adapters(options.backend);
        let summaries: Vec<AdapterSummary> = found
            .iter()
            .enumerate()
            .map(|(i, a)| summarize(i, a))
            .collect();
        let index = choose_adapter(&summaries, options)?;
        let adapter = &found[index];
        let info = summaries[index].clone();
        let limits = match options.limits {
            Some(limits) => limits,
            None => DeviceLimits::from_env()?,
        };
        let core = Device::open(adapter, &info, limits)?;
        Ok(Self::on_device(core, adapter, info))
    }

    /// A context on `core`, a device of `adapter`, with no kernel compiled yet (the pipeline
    /// cache read from its file).
    fn on_device(core: Device, adapter: &wgpu::Adapter, info: AdapterSummary) -> Self {
        let pipelines = PipelineStore::open(&core.device, &adapter.get_info());
        Self {
            core,
            info,
            binding_limit: BindingLimit::Device,
            workgroups_per_dimension_override: None,
            kernels: Mutex::default(),
            readback: Readback::default(),
            scratch: Mutex::default(),
            timeline: Mutex::default(),
            device_local: vulkan_device_local_bytes(adapter),
            pipelines,
        }
    }

    /// A context on a device an application created itself (its renderer's), so that lamino's
    /// buffers live on the device the application draws with and can be copied into its textures
    /// without a host round trip ([`crate::gpu::SlicePass`]). `adapter` is the one the device was
    /// requested from; ask for [`device_descriptor`](Self::device_descriptor) (the adapter's
    /// limits) or the kernels are limited to what the application requested. The device policy
    /// is the CLI's: a software adapter (lavapipe, WARP) only with `allow_software` or
    /// [`SOFTWARE_OPT_IN_ENV`](super::SOFTWARE_OPT_IN_ENV) set, else
    /// [`GpuError::SoftwareAdapterRefused`]. The context installs its error capture and
    /// device-loss callback on the device (replacing the application's): errors the
    /// application's own work causes surface at lamino's next wait or check.
    pub fn from_wgpu(
        adapter: &wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        allow_software: bool,
    ) -> Result<Self, GpuError> {
        let allow_software =
            DeviceOptions::new(DeviceSelection::Best, allow_software).allow_software;
        // The index `lamino devices` would list it under (0 if this process's enumeration does
        // not see it, as with an adapter of a surface-only backend).
        let wanted = adapter.get_info();
        let index = adapters(None)
            .iter()
            .position(|a| a.get_info() == wanted)
            .unwrap_or(0);
        let info = summarize(index, adapter);
        if info.software && !allow_software {
            return Err(GpuError::SoftwareAdapterRefused {
                index,
                name: info.name,
            });
        }
        Ok(Self::on_device(Device::adopt(device, queue), adapter, info))
    }

    /// The device descriptor lamino asks for on `adapter` with `limits` (the adapter's own,
    /// or the portable ones; GPU timestamps where available): what an application that shares
    /// its device with lamino ([`from_wgpu`](Self::from_wgpu)) requests its device with.
    pub fn device_descriptor(
        adapter: &wgpu::Adapter,
        limits: DeviceLimits,
    ) -> wgpu::DeviceDescriptor<'static> {
        Device::descriptor(adapter, limits)
    }

    /// Caps the bytes of one storage binding below the device limit. Tests use this to exercise
    /// the paths that split data across bindings at sizes lavapipe runs quickly.
    pub fn with_max_binding_bytes(mut self, bytes: u64) -> Self {
        self.binding_limit = BindingLimit::Capped(bytes.max(self.binding_alignment()));
        self
    }

    /// A context for plans on paper of another GPU, whose largest storage binding is `bytes`:
    /// [`max_binding_bytes`](Self::max_binding_bytes), through which planners size their chunk
    /// buffers, reports it even above this device's limit. What is bound on this device is
    /// still checked against the device's own limit.
    pub fn modelling_max_binding_bytes(mut self, bytes: u64) -> Self {
        self.binding_limit = BindingLimit::Modelled(bytes.max(self.binding_alignment()));
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
        self.core.ledger.budget.store(bytes, Ordering::SeqCst);
    }

    /// The device-local memory the backend reports (Vulkan: the largest `DEVICE_LOCAL` memory
    /// heap), `None` where wgpu offers no way to read it.
    pub fn device_local_bytes(&self) -> Option<u64> {
        self.device_local
    }

    /// The device budget set with [`set_device_budget`](Self::set_device_budget), if any.
    pub fn device_budget(&self) -> Option<u64> {
        Some(self.core.ledger.budget.load(Ordering::SeqCst)).filter(|&b| b != 0)
    }

    /// Bytes of device memory lamino's buffers hold now.
    pub fn device_bytes_held(&self) -> u64 {
        self.core.ledger.held.load(Ordering::SeqCst)
    }

    /// The most device memory lamino's buffers held at once since the context was created (or
    /// since [`reset_peak_device_bytes`](Self::reset_peak_device_bytes)).
    pub fn peak_device_bytes(&self) -> u64 {
        self.core.ledger.peak.load(Ordering::SeqCst)
    }

    /// Starts a new peak measurement from what is held now.
    pub fn reset_peak_device_bytes(&self) {
        self.core
            .ledger
            .peak
            .store(self.device_bytes_held(), Ordering::SeqCst);
    }

    /// The adapter this context runs on.
    pub fn info(&self) -> &AdapterSummary {
        &self.info
    }

    /// Whether GPU timestamps are available for timing.
    pub fn has_timestamps(&self) -> bool {
        self.core.timestamps
    }

    /// Largest storage binding in bytes, a multiple of the binding alignment: what planners size
    /// their buffers by. A modelling context reports the modelled GPU's.
    pub fn max_binding_bytes(&self) -> u64 {
        match self.binding_limit {
            BindingLimit::Modelled(bytes) => {
                bytes / self.binding_alignment() * self.binding_alignment()
            }
            BindingLimit::Device | BindingLimit::Capped(_) => self.device_max_binding_bytes(),
        }
    }

    /// Largest storage binding this device takes (capped for tests), a multiple of the binding
    /// alignment: what a binding is checked against.
    pub fn device_max_binding_bytes(&self) -> u64 {
        let device = self.core.limits.max_storage_buffer_binding_size;
        let cap = match self.binding_limit {
            BindingLimit::Capped(bytes) => bytes.min(device),
            BindingLimit::Device | BindingLimit::Modelled(_) => device,
        };
        cap / self.binding_alignment() * self.binding_alignment()
    }

    /// Required alignment of a storage binding's offset in bytes.
    pub fn binding_alignment(&self) -> u64 {
        self.core.limits.min_storage_buffer_offset_alignment as u64
    }

    /// Largest buffer in bytes.
    pub fn max_buffer_bytes(&self) -> u64 {
        self.core.max_buffer_bytes()
    }

    /// Workgroup (shared) memory per workgroup in bytes.
    pub fn max_workgroup_storage_bytes(&self) -> u32 {
        self.core.limits.max_compute_workgroup_storage_size
    }

    /// Invocations per workgroup.
    pub fn max_invocations_per_workgroup(&self) -> u32 {
        self.core.limits.max_compute_invocations_per_workgroup
    }

    /// Workgroups per dispatch dimension.
    pub fn max_workgroups_per_dimension(&self) -> u32 {
        let device = self.core.limits.max_compute_workgroups_per_dimension;
        self.workgroups_per_dimension_override
            .map_or(device, |o| o.min(device))
    }

    /// A zero-filled storage buffer that can be copied from and to.
    pub fn storage_buffer(&self, label: &str, bytes: u64) -> Result<GpuBuffer, GpuError> {
        self.core.create_raw(
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
        let buf = self.core.create_raw(
            label,
            bytes.len() as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        )?;
        self.core.queue.write_buffer(&buf.buffer, 0, bytes);
        Ok(buf)
    }

    /// Writes `data` into `buffer` starting at element `offset` (whole 4-byte words); lands
    /// before the next submission.
    pub fn write<T: Pod>(&self, buffer: &GpuBuffer, offset: u64, data: &[T]) {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if !bytes.is_empty() {
            let at = offset * std::mem::size_of::<T>() as u64;
            self.core.queue.write_buffer(&buffer.buffer, at, bytes);
            self.core.count_upload(bytes.len() as u64);
        }
    }

    /// Starts timing every compute pass recorded from now on with GPU timestamps (for
    /// benchmarks: one query set per pass). False, and nothing started, without timestamps.
    pub fn start_timeline(&self) -> bool {
        if !self.core.timestamps {
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

    /// This device's identity among the contexts alive now (two contexts on one adapter are
    /// two devices): what a team's arrays key the planes each device keeps by.
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.core.ledger) as usize
    }

    /// Submissions, waits and bytes moved since the context was created.
    pub fn traffic(&self) -> Traffic {
        self.core.counters.snapshot()
    }

    /// Limits the readback buffers to `bytes` in all (a memory plan counts them in its budget);
    /// a download that needs more waits for earlier ones to land.
    pub fn set_readback_pool_bytes(&self, bytes: u64) {
        self.readback.set_readback_pool_bytes(bytes);
    }

    /// Returns once `landed()` holds: first hands over the downloads that have arrived, then
    /// waits for the downloads in flight, oldest first (each only for the submission that copies
    /// it: later work stays queued, so the device keeps computing), and for completions another
    /// thread is running. A typed error naming `missing()` when none is left in flight or being
    /// handed over and `landed()` still does not hold.
    pub(crate) fn wait_for_downloads_until(
        &self,
        mut landed: impl FnMut() -> bool,
        missing: impl FnOnce() -> String,
    ) -> Result<(), GpuError> {
        if landed() {
            return Ok(());
        }
        self.poll_downloads(false)?;
        while !landed() {
            if self.has_downloads_in_flight() {
                self.readback.wait_for_oldest_download(&self.core)?;
            } else if self.readback.is_handing_over() {
                // Another thread took it out of those in flight and is running its completion.
                std::thread::yield_now();
            } else {
                return Err(GpuError::Readback(missing()));
            }
        }
        Ok(())
    }

    /// Hands every download that has arrived to its completion; with `wait`, first waits for
    /// the device to finish what was submitted.
    pub fn poll_downloads(&self, wait: bool) -> Result<(), GpuError> {
        self.readback.poll_downloads(&self.core, wait)
    }

    /// Whether downloads were submitted that have not been handed to their completions.
    pub fn has_downloads_in_flight(&self) -> bool {
        self.readback.has_downloads_in_flight()
    }

    /// Waits until every download is on the host.
    pub fn complete_downloads(&self) -> Result<(), GpuError> {
        self.readback.complete_downloads(&self.core)
    }

    /// Copies `count` elements of `buffer` from element `offset` back to the host.
    pub fn read<T: Pod>(
        &self,
        buffer: &GpuBuffer,
        offset: u64,
        count: usize,
    ) -> Result<Vec<T>, GpuError> {
        self.readback.read(&self.core, buffer, offset, count)
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
        self.readback.release_idle();
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
        let cache = self.pipelines.as_ref().map(PipelineStore::for_compile);
        let kernel = Arc::new(Kernel::build(&self.core.device, spec, cache)?);
        self.kernels
            .lock()
            .expect("kernel cache poisoned")
            .insert(key, kernel.clone());
        Ok(kernel)
    }

    /// Writes the pipelines compiled since the cache file was read (or last written) to it, for
    /// the next run; a context does so when it is dropped, and a program that keeps its
    /// contexts for its whole life (the Python package's idle devices) after its work.
    pub fn keep_compiled_pipelines(&self) {
        if let Some(pipelines) = &self.pipelines {
            pipelines.save();
        }
    }

    /// The file compiled pipelines are kept in across runs and the bytes read from it when this
    /// context opened (0: a cold start); `None` where the device or backend has no pipeline
    /// cache (the driver's own shader cache is then what a second run gets) or
    /// [`PIPELINE_CACHE_ENV`](super::PIPELINE_CACHE_ENV) turns it off.
    pub fn pipeline_cache(&self) -> Option<(&std::path::Path, usize)> {
        self.pipelines.as_ref().map(PipelineStore::file)
    }

    /// What every kernel this context has compiled was built from (shader, entry point,
    /// pipeline constants), by label: the pipelines a run of lamino asks a driver for, which
    /// tests/shaders_translate.rs translates for every backend.
    pub fn compiled_kernels(&self) -> Vec<KernelSpec> {
        let kernels = self.kernels.lock().expect("kernel cache poisoned");
        let mut specs: Vec<KernelSpec> = kernels.values().map(|k| k.spec.clone()).collect();
        specs.sort_by_cached_key(|s| (s.shader.name, s.entry, format!("{:?}", s.overrides)));
        specs
    }

    /// Waits until the device is idle, then turns captured errors and device loss into errors.
    pub fn wait(&self) -> Result<(), GpuError> {
        self.core.wait()
    }

    /// Raises the first error the device reported since the last check.
    pub fn check(&self) -> Result<(), GpuError> {
        self.core.check()
    }
}

/// Waiting for some downloads while later work computes: what MPI ranks' exchanges do
/// (see [`crate::distributed::ranks`]).
#[cfg(feature = "mpi")]
impl GpuContext {
    /// A mark of the downloads submitted so far, for
    /// [`wait_for_downloads_before`](Self::wait_for_downloads_before).
    pub(crate) fn download_mark(&self) -> u64 {
        self.readback.download_mark()
    }

    /// Waits until every download submitted before `mark` ([`download_mark`](Self::download_mark))
    /// has landed, each only for the submission that copies it: work submitted since keeps the
    /// device computing.
    pub(crate) fn wait_for_downloads_before(&self, mark: u64) -> Result<(), GpuError> {
        self.wait_for_downloads_until(
            || self.readback.landed_before(mark),
            || format!("downloads submitted before mark {mark} vanished"),
        )
    }
}

impl DeviceSet {
    /// The contexts of the MPI rank that is number `local` among its node's ranks (see
    /// [`selections_for_rank`](Self::selections_for_rank)).
    pub fn open_for_rank(
        &self,
        allow_software: bool,
        limits: Option<DeviceLimits>,
        backend: Option<Backend>,
        local: usize,
    ) -> Result<Vec<GpuContext>, GpuError> {
        let allow_software =
            DeviceOptions::new(DeviceSelection::Best, allow_software).allow_software;
        open_each(
            self.selections_for_rank(&list_adapters(backend), allow_software, local)?,
            allow_software,
            limits,
            backend,
        )
    }

    /// A context on every device of the set (see [`GpuContext::new`] for the policy), with
    /// `limits` (`None`: as [`LIMITS_ENV`](super::LIMITS_ENV) says), among the adapters of
    /// `backend` (`None`: as `WGPU_BACKEND` says).
    pub fn open(
        &self,
        allow_software: bool,
        limits: Option<DeviceLimits>,
        backend: Option<Backend>,
    ) -> Result<Vec<GpuContext>, GpuError> {
        self.open_with_policy(
            DeviceOptions::new(DeviceSelection::Best, allow_software).allow_software,
            limits,
            backend,
        )
    }

    /// Like [`open`](Self::open), with software adapters allowed exactly when `allow_software`
    /// says so, whatever [`SOFTWARE_OPT_IN_ENV`](super::SOFTWARE_OPT_IN_ENV) says: for callers
    /// whose own argument overrides the environment (the Python package's
    /// `allow_software_gpu=False`).
    pub fn open_with_policy(
        &self,
        allow_software: bool,
        limits: Option<DeviceLimits>,
        backend: Option<Backend>,
    ) -> Result<Vec<GpuContext>, GpuError> {
        open_each(
            self.selections(&list_adapters(backend), allow_software)?,
            allow_software,
            limits,
            backend,
        )
    }
}

/// A context on each adapter of `selections`.
fn open_each(
    selections: Vec<DeviceSelection>,
    allow_software: bool,
    limits: Option<DeviceLimits>,
    backend: Option<Backend>,
) -> Result<Vec<GpuContext>, GpuError> {
    selections
        .into_iter()
        .map(|selection| {
            GpuContext::new(&DeviceOptions {
                selection,
                allow_software,
                limits,
                backend,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ctx.core.device.destroy();
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
    fn the_portable_limits_are_webgpus_defaults_and_a_bad_setting_is_refused() {
        let portable = GpuContext::new(&DeviceOptions {
            selection: DeviceSelection::Best,
            allow_software: true,
            limits: Some(DeviceLimits::Portable),
            backend: None,
        })
        .unwrap();
        let webgpu = wgpu::Limits::default();
        assert_eq!(
            portable.max_workgroup_storage_bytes(),
            webgpu.max_compute_workgroup_storage_size
        );
        assert_eq!(
            portable.max_invocations_per_workgroup(),
            webgpu.max_compute_invocations_per_workgroup
        );
        assert_eq!(portable.max_buffer_bytes(), webgpu.max_buffer_size);
        assert!(portable.device_max_binding_bytes() <= webgpu.max_storage_buffer_binding_size);
        assert_eq!("Portable".parse(), Ok(DeviceLimits::Portable));
        assert_eq!(" adapter ".parse(), Ok(DeviceLimits::Adapter));
        assert_eq!("large".parse::<DeviceLimits>(), Err(()));
    }
}
