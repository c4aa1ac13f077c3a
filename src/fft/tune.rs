//! Plan-time tuning of FFT pass launches, remembered in a cache file.
//!
//! For `Strategy::Auto` plans of at least [`TUNE_MIN_ELEMS`] elements, each pass is timed on the
//! device (GPU timestamps, a sample of the batch in fresh buffers) with a small set of launches:
//! workgroup shapes (invocations per column, columns per workgroup, lane order), workgroup memory
//! or one invocation's private array between register stages, then for the winner radix-8 against
//! radix-16 register stages and computed against tabulated twiddles. The fastest is used and
//! written to the cache, so the next plan of the same problem (in this process or a later one)
//! skips the measurement.
//!
//! The cache is a JSON file: `$LAMINO_FFT_CACHE` if set (`off` or empty disables it), else
//! `$XDG_CACHE_HOME/lamino/fft-tuning.json`, else `~/.cache/lamino/fft-tuning.json`. Entries are
//! keyed by the lamino version, the adapter (name, backend, driver, driver info), a hash of the FFT
//! shader sources and the problem (lengths, direction, strides, batch size class), so a new
//! version, driver or shader simply misses and measures again. An unreadable or corrupt file is
//! ignored with a warning and replaced on the next write; writes go to a temporary file that is
//! renamed over the cache (atomic), merging entries other processes wrote meanwhile.
//! Tuning is opt-in: `LAMINO_FFT_TUNE=on` tunes plans of at least [`TUNE_MIN_ELEMS`] elements,
//! `LAMINO_FFT_TUNE=all` every specialised plan, however small (tests use it). Unset or `off`,
//! every plan uses the default launch: a tuned launch rounds differently, and a result must not
//! depend on timing or on how a run is chunked.
//!
//! Every launch measured is first checked against the default launch's output on the same sample
//! (within twice the accuracy bound); one that disagrees is refused with a warning.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use super::kernel::{Launch, Limits, PassSpec};
use super::layout::Layout;
use super::{Direction, FftError};
use crate::gpu::GpuContext;
use crate::shaders;

/// Environment variable naming the tuning cache file (`off` or empty: no cache).
pub const FFT_CACHE_ENV: &str = "LAMINO_FFT_CACHE";
/// Environment variable that turns tuning on (`on`, `1`, `true` or `yes`: plans of at least
/// `TUNE_MIN_ELEMS` elements) or on for every plan with a specialised kernel (`all`).
pub const FFT_TUNE_ENV: &str = "LAMINO_FFT_TUNE";

/// With `LAMINO_FFT_TUNE=on`, plans with fewer elements than this use the default launch: their
/// run time is too small to repay a measurement.
const TUNE_MIN_ELEMS: u64 = 1 << 22;
/// Elements of the sample a launch is timed on.
const SAMPLE_ELEMS: u64 = 1 << 20;
/// Version of the file layout and of the measurement: 2 since samples with a strided destination
/// no longer run transforms beyond it (entries measured so by format 1 are dropped).
const FORMAT: u32 = 2;

/// Where the launch of a pass came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LaunchSource {
    /// The untuned default (small problems, explicit strategies, tuning off).
    Default,
    /// Measured while planning.
    Measured,
    /// Measured earlier and read from the cache.
    Cache,
}

/// Whether a plan of `elems` elements is tuned (see [`FFT_TUNE_ENV`]).
pub(crate) fn wanted(elems: u64) -> bool {
    let setting = std::env::var(FFT_TUNE_ENV)
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    // Opt-in: a tuned launch (another radix order, computed instead of tabulated twiddles)
    // rounds differently, so results would depend on timing and on chunk sizes (streaming cuts
    // plans below the threshold); the default launch gives the same bits every run.
    match setting.as_str() {
        "on" | "1" | "true" | "yes" => elems >= TUNE_MIN_ELEMS,
        "all" => true,
        _ => false,
    }
}

/// The cache file in use, if any (see the module documentation).
pub fn tuning_cache_path() -> Option<PathBuf> {
    match std::env::var_os(FFT_CACHE_ENV) {
        Some(v) if v.is_empty() || v == "off" || v == "none" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => crate::gpu::lamino_cache_dir().map(|dir| dir.join("fft-tuning.json")),
    }
}

/// One pass to tune, with the layouts it reads and writes.
pub(crate) struct Problem<'a> {
    pub spec: &'a PassSpec,
    pub src: &'a Layout,
    pub dst: &'a Layout,
    pub in_place: bool,
    /// Length of the user's transform (differs from `spec.len` for Bluestein).
    pub n: usize,
    pub batch: u64,
}

impl Problem<'_> {
    /// The cache key of the problem: what the best launch can depend on.
    fn key(&self) -> String {
        let s = self.spec;
        let stride = |l: &Layout| {
            if l.stride == 1 {
                "contiguous".to_string()
            } else {
                // Neighbouring columns one element apart (an axis of an array) or not.
                let adjacent = l.batch.first().is_some_and(|d| d.dist == 1);
                format!("strided{}", if adjacent { "-adjacent" } else { "" })
            }
        };
        format!(
            "len={} sub={} ns={} n={} dir={} in_place={} src={} dst={} columns~2^{} hooks={}{}",
            s.len,
            s.sub,
            s.ns,
            self.n,
            match s.direction {
                Direction::Forward => "forward",
                Direction::Inverse => "inverse",
            },
            self.in_place,
            stride(self.src),
            stride(self.dst),
            (self.batch * s.columns_per_transform())
                .next_power_of_two()
                .trailing_zeros(),
            u32::from(s.load_hook),
            s.store_hook,
        )
    }
}

/// A measured launch.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Measured {
    launch: Launch,
    ms: f64,
}

/// The winner of a tuning and everything measured on the way.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    launch: Launch,
    ms: f64,
    measured: Vec<Measured>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    format: u32,
    entries: BTreeMap<String, Entry>,
}

/// The process-wide view of the cache.
struct Store {
    path: Option<PathBuf>,
    entries: BTreeMap<String, Entry>,
    warned: HashSet<String>,
}

impl Store {
    fn warn(&mut self, message: String) {
        if self.warned.insert(message.clone()) {
            eprintln!("warning: {message}");
        }
    }
}

fn store() -> &'static Mutex<Store> {
    static STORE: OnceLock<Mutex<Store>> = OnceLock::new();
    STORE.get_or_init(|| {
        let path = tuning_cache_path();
        let mut store = Store {
            path: path.clone(),
            entries: BTreeMap::new(),
            warned: HashSet::new(),
        };
        if let Some(path) = path {
            match read_cache(&path) {
                Ok(entries) => store.entries = entries,
                Err(message) => store.warn(message),
            }
        }
        Mutex::new(store)
    })
}

/// The entries of a cache file; a missing file is empty, an unreadable or corrupt one an error
/// message (the caller warns and carries on without it).
fn read_cache(path: &Path) -> Result<BTreeMap<String, Entry>, String> {
    let text = match crate::io::read_text(path) {
        Ok(t) => t,
        Err(crate::io::TextError::Read(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(BTreeMap::new())
        }
        Err(e) => {
            return Err(format!(
                "cannot read the FFT tuning cache {}: {e}; tuning again",
                path.display()
            ))
        }
    };
    match serde_json::from_str::<CacheFile>(&text) {
        Ok(file) if file.format == FORMAT => Ok(file.entries),
        Ok(file) => Err(format!(
            "the FFT tuning cache {} has format {} (expected {FORMAT}); it will be rewritten",
            path.display(),
            file.format
        )),
        Err(e) => Err(format!(
            "the FFT tuning cache {} is corrupt ({e}); it will be rewritten",
            path.display()
        )),
    }
}

/// Writes `entries` merged over what the file holds now, through a temporary file renamed over
/// the cache.
fn write_cache(path: &Path, entries: &BTreeMap<String, Entry>) -> Result<(), String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        format!(
            "cannot {what} the FFT tuning cache {}: {e}; tuning results are kept for this process only",
            path.display()
        )
    };
    let mut merged = read_cache(path).unwrap_or_default();
    merged.extend(entries.iter().map(|(k, v)| (k.clone(), v.clone())));
    let file = CacheFile {
        format: FORMAT,
        entries: merged,
    };
    let text = serde_json::to_string_pretty(&file).map_err(|e| fail("encode", &e))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| fail("create the folder of", &e))?;
    }
    let name = path.file_name().map_or("fft-tuning.json".into(), |n| {
        n.to_string_lossy().into_owned()
    });
    let temporary = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&temporary, text).map_err(|e| fail("write", &e))?;
    std::fs::rename(&temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        fail("replace", &e)
    })
}

/// What identifies the device and the kernels a measurement holds for.
fn fingerprint(ctx: &GpuContext) -> String {
    static SHADERS: OnceLock<u64> = OnceLock::new();
    let shaders = *SHADERS.get_or_init(|| {
        // The crate's FNV-1a over every FFT kernel source, one after the other. One two-level
        // pass stands for the generator and its template.
        std::iter::once(shaders::FFT_PASS_SHARED.source())
            .chain(shaders::FFT_PASS_PRIVATE.iter().map(|(_, s)| s.source()))
            .chain(std::iter::once(
                super::two_level::shader(64, 64, 16).source(),
            ))
            .fold(crate::hash::FNV_OFFSET, |hash, source| {
                crate::hash::fnv1a_continue(hash, source.as_bytes())
            })
    });
    let info = ctx.info();
    format!(
        "lamino {} | {} | {} | {} {} | shaders {shaders:016x}",
        env!("CARGO_PKG_VERSION"),
        info.name,
        info.backend,
        info.driver,
        info.driver_info
    )
}

/// The launch of `problem`: from this process's memory or the cache when measured before, else
/// measured now with `measure(launch, sample elements)` and remembered. `measure` returns the
/// milliseconds of a launch, or `None` when its output disagrees with the first launch measured
/// (the default), which is then never chosen.
pub(crate) fn launch_for(
    ctx: &GpuContext,
    problem: &Problem<'_>,
    mut measure: impl FnMut(&Launch, u64) -> Result<Option<f64>, FftError>,
) -> Result<(Launch, LaunchSource), FftError> {
    let key = format!("{} :: {}", fingerprint(ctx), problem.key());
    let limits = Limits::of(ctx);
    let sub = problem.spec.sub;
    {
        let store = store().lock().expect("tuning store poisoned");
        if let Some(entry) = store.entries.get(&key) {
            if entry.launch.fits(&limits, sub, true) {
                return Ok((entry.launch, LaunchSource::Cache));
            }
        }
    }
    let strided = problem.src.stride != 1 || problem.dst.stride != 1;
    let mut measured: Vec<Measured> = Vec::new();
    let mut refused: Vec<Launch> = Vec::new();
    let mut run = |launch: Launch, measured: &mut Vec<Measured>| -> Result<(), FftError> {
        if !measured.iter().any(|m| m.launch == launch) && !refused.contains(&launch) {
            match measure(&launch, SAMPLE_ELEMS)? {
                Some(ms) => measured.push(Measured { launch, ms }),
                None => refused.push(launch),
            }
        }
        Ok(())
    };
    let best = |measured: &[Measured]| {
        measured
            .iter()
            .min_by(|a, b| a.ms.total_cmp(&b.ms))
            .map(|m| m.launch)
            .expect("at least one launch measured")
    };
    for launch in Launch::candidates(&limits, sub, strided) {
        run(launch, &mut measured)?;
    }
    // Second round: the winner's arithmetic variants, then again around the new winner.
    for _ in 0..2 {
        for launch in best(&measured).refinements(&limits, sub) {
            run(launch, &mut measured)?;
        }
    }
    let launch = best(&measured);
    let ms = measured
        .iter()
        .find(|m| m.launch == launch)
        .map_or(f64::NAN, |m| m.ms);
    let entry = Entry {
        launch,
        ms,
        measured,
    };
    let mut store = store().lock().expect("tuning store poisoned");
    for refused in &refused {
        store.warn(format!(
            "FFT launch {refused} disagrees with the default launch for {}; not used",
            problem.key()
        ));
    }
    store.entries.insert(key.clone(), entry.clone());
    if let Some(path) = store.path.clone() {
        let mut ours = BTreeMap::new();
        ours.insert(key, entry);
        if let Err(message) = write_cache(&path, &ours) {
            store.warn(message);
        }
    }
    Ok((launch, LaunchSource::Measured))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fft::kernel::Exchange;

    fn entry(threads: u32) -> Entry {
        let launch = Launch {
            exchange: Exchange::Shared,
            threads,
            columns: 8,
            columns_fastest: true,
            max_radix: 16,
            twiddle_table: false,
        };
        Entry {
            launch,
            ms: 1.5,
            measured: vec![Measured { launch, ms: 1.5 }],
        }
    }

    #[test]
    fn a_cache_round_trips_and_merges_with_other_writers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("fft-tuning.json");
        assert!(
            read_cache(&path).unwrap().is_empty(),
            "a missing file is empty"
        );
        let mut ours = BTreeMap::new();
        ours.insert("a".to_string(), entry(2));
        write_cache(&path, &ours).unwrap();
        let mut theirs = BTreeMap::new();
        theirs.insert("b".to_string(), entry(4));
        write_cache(&path, &theirs).unwrap();
        let back = read_cache(&path).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back["a"].launch.threads, 2);
        assert_eq!(back["b"].launch.threads, 4);
        // No temporary file is left behind.
        let files: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
    }

    #[test]
    fn a_corrupt_cache_is_reported_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fft-tuning.json");
        std::fs::write(&path, "{ not json").unwrap();
        let message = read_cache(&path).unwrap_err();
        assert!(
            message.contains("corrupt") && message.contains("rewritten"),
            "{message}"
        );
        let mut ours = BTreeMap::new();
        ours.insert("a".to_string(), entry(2));
        write_cache(&path, &ours).unwrap();
        assert_eq!(read_cache(&path).unwrap().len(), 1);
        std::fs::write(&path, r#"{"format": 99, "entries": {}}"#).unwrap();
        assert!(read_cache(&path).unwrap_err().contains("format 99"));
    }

    #[test]
    fn an_unwritable_cache_is_an_error_message_not_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the cache's folder should be.
        let blocker = dir.path().join("blocker");
        std::fs::write(&blocker, "").unwrap();
        let path = blocker.join("fft-tuning.json");
        let message = write_cache(&path, &BTreeMap::new()).unwrap_err();
        assert!(message.contains("this process only"), "{message}");
    }

    #[test]
    fn problem_keys_name_what_the_launch_depends_on() {
        let spec = PassSpec {
            len: 256,
            sub: 256,
            ns: 1,
            direction: Direction::Inverse,
            load_hook: false,
            store_hook: 0,
            scale: 1.0,
        };
        let layout = Layout::axis_of(&[128, 256, 256], 1);
        let problem = Problem {
            spec: &spec,
            src: &layout,
            dst: &layout,
            in_place: true,
            n: 256,
            batch: 128 * 256,
        };
        let key = problem.key();
        assert!(key.contains("len=256 sub=256 ns=1"), "{key}");
        assert!(
            key.contains("dir=inverse") && key.contains("src=strided-adjacent"),
            "{key}"
        );
        assert!(key.contains("columns~2^15"), "{key}");
    }
}
