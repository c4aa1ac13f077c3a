//! Compiled pipelines kept across runs: wgpu's `PipelineCache` (a Vulkan `VkPipelineCache`)
//! where the device has one, read when a context opens and written back when it closes having
//! compiled pipelines the file did not hold. Elsewhere (GL, Metal, DX12) wgpu offers none, and
//! the driver's own shader cache (Mesa's, NVIDIA's, Apple's) is what a second run gets.
//!
//! The file sits beside the FFT tuning cache, in [`lamino_cache_dir`] (or the directory
//! `LAMINO_PIPELINE_CACHE` names; `off` turns the cache off): one per adapter and driver,
//! `wgpu_pipeline_cache_vulkan_<vendor>_<device>-<driver hash>.bin`, so another GPU or another
//! driver version has a file of its own (and the driver checks the header again: data it
//! cannot use is ignored, the cache starts empty). A file that
//! cannot be read is ignored; one that cannot be written is a warning, never a failure. A cache
//! changes how long a pipeline takes to create, not what it computes: the same kernels run.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// The environment variable that names the pipeline cache's directory, or turns the cache off
/// (`off`, `0`, `no` or `false`); unset or empty: [`lamino_cache_dir`].
pub const PIPELINE_CACHE_ENV: &str = "LAMINO_PIPELINE_CACHE";

/// The largest cache file read: drivers' pipeline caches of every kernel lamino compiles are
/// megabytes.
const MAX_CACHE_BYTES: u64 = 256 << 20;

/// lamino's per-user cache directory: `$XDG_CACHE_HOME/lamino`, else `~/.cache/lamino`.
pub fn lamino_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .map(|dir| dir.join("lamino"))
}

/// The directory the pipeline caches are kept in, `None` when turned off or unknown.
fn pipeline_cache_dir() -> Option<PathBuf> {
    match std::env::var_os(PIPELINE_CACHE_ENV) {
        Some(v) if v.is_empty() => lamino_cache_dir(),
        Some(v) => match v.to_string_lossy().trim().to_ascii_lowercase().as_str() {
            "off" | "0" | "no" | "false" => None,
            _ => Some(PathBuf::from(v)),
        },
        None => lamino_cache_dir(),
    }
}

/// The cache file of `info`'s adapter and driver, where the backend has pipeline caches.
pub fn pipeline_cache_path(info: &wgpu::AdapterInfo) -> Option<PathBuf> {
    // wgpu's key: the backends that have caches, named by vendor and device.
    let key = wgpu::util::pipeline_cache_key(info)?;
    // FNV-1a of the driver's name and version: a driver update starts a new file rather than
    // handing the new driver the old one's data.
    let driver = crate::hash::fnv1a(info.driver.as_bytes());
    let hash = crate::hash::fnv1a_continue(driver, &[0]);
    let hash = crate::hash::fnv1a_continue(hash, info.driver_info.as_bytes());
    Some(pipeline_cache_dir()?.join(format!("{key}-{hash:016x}.bin")))
}

/// A device's pipeline cache and the file it came from.
pub(crate) struct PipelineStore {
    cache: wgpu::PipelineCache,
    path: PathBuf,
    /// Whether a pipeline was created through the cache since it was read: only then is the
    /// file written back.
    compiled: AtomicBool,
    /// The bytes read from the file (0: none), for the figures of a cold and a warm start.
    read_bytes: usize,
}

impl PipelineStore {
    /// The cache of `device` on the adapter `info` describes, from its file if there is one;
    /// `None` where the device has no pipeline caches, the backend none, or the cache is off.
    pub(super) fn open(device: &wgpu::Device, info: &wgpu::AdapterInfo) -> Option<Self> {
        if !device.features().contains(wgpu::Features::PIPELINE_CACHE) {
            return None;
        }
        let path = pipeline_cache_path(info)?;
        // A file beyond any driver's cache (a stray or damaged one) is not read into memory.
        let data = std::fs::metadata(&path)
            .is_ok_and(|m| m.len() <= MAX_CACHE_BYTES)
            .then(|| std::fs::read(&path).ok())
            .flatten();
        // Safety: the data is what `get_data` of a device of this adapter and driver wrote (the
        // file's name says which), or garbage the driver refuses: with `fallback` an unusable
        // cache is replaced by an empty one, as wgpu and Vulkan check the header themselves.
        let cache = unsafe {
            device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
                label: Some("lamino pipelines"),
                data: data.as_deref(),
                fallback: true,
            })
        };
        Some(Self {
            cache,
            path,
            compiled: AtomicBool::new(false),
            read_bytes: data.map_or(0, |d| d.len()),
        })
    }

    /// The cache to create a pipeline through; notes that one was.
    pub(super) fn for_compile(&self) -> &wgpu::PipelineCache {
        self.compiled.store(true, Ordering::Relaxed);
        &self.cache
    }

    /// The file and the bytes read from it when the context opened.
    pub(super) fn file(&self) -> (&std::path::Path, usize) {
        (&self.path, self.read_bytes)
    }

    /// Writes the cache back when pipelines were created since it was read: staged and moved
    /// over the file, so a reader never sees half of it. A failure is a warning.
    pub(super) fn save(&self) {
        if !self.compiled.swap(false, Ordering::Relaxed) {
            return;
        }
        let Some(data) = self.cache.get_data() else {
            return;
        };
        let written = crate::io::write_atomically(&self.path, |staged| {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            }
            std::fs::write(staged, &data).map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            eprintln!("warning: the pipeline cache was not kept for the next run: {e}");
        }
    }
}
