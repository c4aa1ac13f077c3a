//! Adapter discovery and the device policy: which adapters exist, which ones a selector names, and
//! the rule that a software adapter runs only when the user opts in. The policy works on lists of
//! [`AdapterSummary`], so it is unit-tested without a GPU; opening devices is
//! [`GpuContext`](super::GpuContext)'s.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use super::error::GpuError;

/// The environment variable that opts in to software adapters (lavapipe, WARP, SwiftShader).
pub const SOFTWARE_OPT_IN_ENV: &str = "LAMINO_ALLOW_SOFTWARE_GPU";

/// The environment variable that chooses the limits devices are opened with ([`DeviceLimits`]):
/// `adapter` (the default) or `portable`.
pub const LIMITS_ENV: &str = "LAMINO_LIMITS";

/// The limits a device is opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceLimits {
    /// Everything the adapter offers (the default): the largest bindings, workgroups and
    /// buffers this GPU allows, which the kernels, the FFT's strategies and the memory planner
    /// read from the device.
    #[default]
    Adapter,
    /// WebGPU's default limits (`wgpu::Limits::default()`: 8 storage buffers per shader stage,
    /// 128 MiB per storage binding, 256 MiB buffers, 16 KiB of workgroup memory, 256 invocations
    /// per workgroup), which every WebGPU-conformant GPU offers: a run under them needs no more
    /// from a laptop's or a Mac's GPU than that. An adapter that offers less in any of them is
    /// refused with the driver's reason.
    Portable,
}

impl DeviceLimits {
    /// The limits [`LIMITS_ENV`] names: [`Adapter`](Self::Adapter) when it is unset or empty; a
    /// value other than `adapter` or `portable` (any case) is refused, naming the variable.
    pub fn from_env() -> Result<Self, GpuError> {
        match std::env::var(LIMITS_ENV) {
            Ok(v) if v.trim().is_empty() => Ok(Self::Adapter),
            Ok(v) => v.parse().map_err(|_| GpuError::BadLimits {
                setting: LIMITS_ENV,
                value: v,
            }),
            Err(std::env::VarError::NotPresent) => Ok(Self::Adapter),
            Err(std::env::VarError::NotUnicode(v)) => Err(GpuError::BadLimits {
                setting: LIMITS_ENV,
                value: v.to_string_lossy().into_owned(),
            }),
        }
    }

    /// The limits to request on `adapter`.
    pub(super) fn wgpu_limits(self, adapter: &wgpu::Adapter) -> wgpu::Limits {
        match self {
            Self::Adapter => adapter.limits(),
            Self::Portable => wgpu::Limits::default(),
        }
    }
}

impl FromStr for DeviceLimits {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        match s.trim().to_ascii_lowercase().as_str() {
            "adapter" => Ok(Self::Adapter),
            "portable" => Ok(Self::Portable),
            _ => Err(()),
        }
    }
}

/// A graphics API wgpu drives an adapter through. Every kernel is written once in WGSL and
/// translated for each (`tests/shaders_translate.rs`); which ones have run lamino is in the
/// README's Devices section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Vulkan,
    /// OpenGL 4.3+ / OpenGL ES 3.1 (EGL on Linux), for GPUs and drivers without Vulkan.
    Gl,
    Metal,
    Dx12,
}

impl Backend {
    /// The backend as wgpu's set of one (for an application that creates its own instance,
    /// as the viewer does through eframe).
    pub fn wgpu_backends(self) -> wgpu::Backends {
        match self {
            Self::Vulkan => wgpu::Backends::VULKAN,
            Self::Gl => wgpu::Backends::GL,
            Self::Metal => wgpu::Backends::METAL,
            Self::Dx12 => wgpu::Backends::DX12,
        }
    }
}

impl FromStr for Backend {
    type Err = GpuError;

    fn from_str(s: &str) -> Result<Self, GpuError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "vulkan" => Ok(Self::Vulkan),
            "gl" => Ok(Self::Gl),
            "metal" => Ok(Self::Metal),
            "dx12" => Ok(Self::Dx12),
            _ => Err(GpuError::BadBackend(s.to_string())),
        }
    }
}

/// True when [`SOFTWARE_OPT_IN_ENV`] is set to `1`, `true` or `yes` (any case).
pub fn software_opt_in_from_env() -> bool {
    std::env::var(SOFTWARE_OPT_IN_ENV)
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
        .unwrap_or(false)
}

/// The per-user runtime directory the Vulkan loader's window-system layers look for: without a
/// usable one (set, absolute, a directory) each instance they load prints "XDG_RUNTIME_DIR is
/// invalid or not set in the environment", four lines per command that buried real messages.
#[cfg(unix)]
const RUNTIME_DIR_ENV: &str = "XDG_RUNTIME_DIR";

/// Gives this process a private runtime directory, `$TMPDIR/lamino-runtime-UID` (mode 0700,
/// made if missing, refused unless it is this user's and private), when `XDG_RUNTIME_DIR` is
/// unset or not a usable directory; a usable one is never replaced. Returns the directory it
/// set, if it set one.
///
/// Call it at the very start of `main`, before any thread exists: setting a variable races
/// with every other thread that reads the environment (which is why Rust 2024 makes
/// `std::env::set_var` unsafe). The library never calls it itself: when a GPU context is opened
/// from Python or from the viewer, threads are already running, and the embedding program
/// (the interpreter, the viewer's `main`) owns its environment.
#[cfg(unix)]
pub fn provide_runtime_dir() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let usable = |d: &std::ffi::OsStr| {
        let d = std::path::Path::new(d);
        d.is_absolute() && d.is_dir()
    };
    if std::env::var_os(RUNTIME_DIR_ENV).is_some_and(|d| usable(&d)) {
        return None;
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("lamino-runtime-{uid}"));
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return None;
        }
    }
    // A directory someone else made first (or a link planted there) is not ours to use.
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return None;
    }
    std::env::set_var(RUNTIME_DIR_ENV, &dir);
    Some(dir)
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
}

/// How to choose the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceOptions {
    /// Which adapter.
    pub selection: DeviceSelection,
    /// Accept a software adapter (`DeviceType::Cpu`). Off by default: interactive use needs a real
    /// GPU; tests, CI and batch runs opt in explicitly.
    pub allow_software: bool,
    /// The limits to open the device with; `None`: as [`LIMITS_ENV`] says (the adapter's when
    /// it is unset).
    pub limits: Option<DeviceLimits>,
    /// The graphics API whose adapters are listed and chosen from; `None`: as wgpu's
    /// `WGPU_BACKEND` says (every backend built in when it is unset).
    pub backend: Option<Backend>,
}

impl DeviceOptions {
    /// Options for `selection`, opting in to software adapters when `allow_software` is set or the
    /// [`SOFTWARE_OPT_IN_ENV`] variable asks for it.
    pub fn new(selection: DeviceSelection, allow_software: bool) -> Self {
        Self {
            selection,
            allow_software: allow_software || software_opt_in_from_env(),
            limits: None,
            backend: None,
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

pub(super) fn summarize(index: usize, adapter: &wgpu::Adapter) -> AdapterSummary {
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

/// The adapters of `backend` (`None`: of the backends `WGPU_BACKEND` names, all when unset).
pub(super) fn adapters(backend: Option<Backend>) -> Vec<wgpu::Adapter> {
    // `_from_env` so that WGPU_BACKEND and friends work (Instance::default ignores them).
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    if let Some(backend) = backend {
        desc.backends = backend.wgpu_backends();
    }
    let backends = desc.backends;
    let instance = wgpu::Instance::new(desc);
    pollster::block_on(instance.enumerate_adapters(backends))
}

/// Every adapter wgpu can see on `backend` (`None`: as `WGPU_BACKEND` says, every backend when
/// it is unset), in a stable order; the index is what `--device` takes with the same backend.
pub fn list_adapters(backend: Option<Backend>) -> Vec<AdapterSummary> {
    adapters(backend)
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

/// The largest device-local memory heap the Vulkan driver reports for `adapter` (`None` on
/// other backends, where wgpu offers no way to ask).
pub(super) fn vulkan_device_local_bytes(adapter: &wgpu::Adapter) -> Option<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
            limits: None,
            backend: None,
        }
    }

    #[test]
    fn backends_are_named_as_the_option_takes_them_and_others_refused() {
        for (name, backend, wgpu) in [
            ("vulkan", Backend::Vulkan, wgpu::Backends::VULKAN),
            ("GL", Backend::Gl, wgpu::Backends::GL),
            ("metal", Backend::Metal, wgpu::Backends::METAL),
            (" dx12", Backend::Dx12, wgpu::Backends::DX12),
        ] {
            let parsed: Backend = name.parse().unwrap();
            assert_eq!(parsed, backend);
            assert_eq!(parsed.wgpu_backends(), wgpu);
        }
        let err = "webgpu".parse::<Backend>().unwrap_err();
        assert!(
            matches!(&err, GpuError::BadBackend(b) if b == "webgpu")
                && err.to_string().contains("gl"),
            "{err}"
        );
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
