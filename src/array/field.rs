//! Arrays made of planes, resident on the device or held on the host (in memory, or in a
//! memory-mapped scratch file) and streamed through the device a block at a time.
//!
//! Kernels never see where an array lives: a device array is bound directly, a host array's
//! block is uploaded into a staging buffer that the same kernel reads (and a result block is
//! downloaded from one), so the arithmetic, and the bits, are the same either way.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use thiserror::Error;

use super::BlockView;
use crate::gpu::GpuError;
use crate::gpu::{Completion, GpuBuffer, GpuContext};
use homes::{outside, DeviceHome};
use rank_scratch::ShareMap;

mod homes;
mod rank_scratch;

/// Errors of host storage.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StorageError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// A scratch file could not be created, sized or mapped.
    #[error("scratch space in {dir}: {reason}")]
    Scratch { dir: PathBuf, reason: String },
    /// Host memory for an array could not be had.
    #[error("cannot allocate {bytes} bytes of host memory for {label:?}")]
    HostMemory { label: String, bytes: u64 },
}

/// The shape of an array as the kernels see it: `planes` planes of `plane_words` f32 words (a
/// complex element is two words, a 3-vector three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneLayout {
    pub planes: usize,
    pub plane_words: usize,
    /// The planes run along the second axis of the array's shape, not the first: its first two
    /// axes are stored swapped. The solver keeps its arrays so: the data side one plane per
    /// detector row holding every angle, the volume side one plane per y row holding every z
    /// slice, so that the rows U2 and U1 read and write are contiguous (a team member's home);
    /// the operator maps its block copies accordingly.
    pub axes_swapped: bool,
}

impl PlaneLayout {
    /// Words of the whole array.
    pub fn words(&self) -> usize {
        self.planes * self.plane_words
    }

    /// Bytes of the whole array.
    pub fn bytes(&self) -> u64 {
        self.words() as u64 * 4
    }
}

/// Where an array lives.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Residency {
    /// In device memory, bound directly.
    Device,
    /// In host memory.
    Host,
    /// In a memory-mapped scratch file in this directory.
    Scratch(PathBuf),
}

enum HostWords {
    Ram(Vec<f32>),
    Mapped(memmap2::MmapMut),
    Share(ShareMap),
}

impl HostWords {
    fn words(&self) -> &[f32] {
        match self {
            Self::Ram(v) => v,
            Self::Mapped(m) => bytemuck::cast_slice(&m[..]),
            Self::Share(m) => m.words(),
        }
    }

    fn words_mut(&mut self) -> &mut [f32] {
        match self {
            Self::Ram(v) => v,
            Self::Mapped(m) => bytemuck::cast_slice_mut(&mut m[..]),
            Self::Share(m) => m.words_mut(),
        }
    }

    /// Bytes of scratch file behind the words (0 in memory).
    fn scratch_bytes(&self) -> u64 {
        match self {
            Self::Ram(_) => 0,
            Self::Mapped(m) => m.len() as u64,
            Self::Share(m) => m.file_bytes,
        }
    }
}

/// The page size `madvise`, `mincore` and `mmap` work in: 4 KiB on the systems lamino runs on
/// (x86-64 and arm64 Linux with 4 KiB pages). Unix's alone: elsewhere no memory is mapped by
/// hand.
#[cfg(unix)]
const PAGE: usize = 4096;

struct HostArray {
    words: RwLock<HostWords>,
    /// Downloads into the array that have not landed yet: their blocks, by number.
    pending: Mutex<Vec<(u64, BlockView)>>,
    /// The number the next download gets.
    next: AtomicU64,
    /// An MPI rank's array: the words `home` of it are this rank's to keep; the others hold
    /// blocks fetched for the stage at hand. Runs downloaded outside `home` are listed in
    /// `away` until they are sent to their home.
    home: Option<Range<usize>>,
    away: Mutex<Vec<(usize, usize)>>,
    /// The words team members keep on their devices ([`Field::keep_on_device`]).
    homes: Mutex<Vec<DeviceHome>>,
}

enum Store {
    Device(GpuBuffer),
    Host(HostArray),
}

struct Inner {
    label: String,
    layout: PlaneLayout,
    /// The planes a team member's share of the array is made of whole chunks of (see
    /// [`Field::home_chunk`]).
    home_chunk: usize,
    residency: Residency,
    store: Store,
}

/// One array of a reconstruction; clones share the array.
#[derive(Clone)]
pub struct Field(Arc<Inner>);

impl std::fmt::Debug for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Field")
            .field("label", &self.0.label)
            .field("layout", &self.0.layout)
            .field("residency", &self.0.residency)
            .finish()
    }
}

/// `len` zero words, or `None` when the memory cannot be had. The allocation is zeroed by the
/// allocator, so pages never written take no memory (what an MPI rank's planes beyond its own
/// rely on).
fn zeroed_words(len: usize) -> Option<Vec<f32>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<f32>(len).ok()?;
    // Safety: the layout is non-zero and an f32 array's; the pointer comes from the global
    // allocator with exactly that layout, which is what Vec expects, and zero bits are 0.0.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut f32;
        (!ptr.is_null()).then(|| Vec::from_raw_parts(ptr, len, len))
    }
}

/// A zero-filled scratch file of `bytes`, mapped: unnamed (the system removes it when the
/// process ends, however it ends) and preallocated (a full disk is an error now, not later).
fn scratch_map(dir: &Path, bytes: u64) -> Result<memmap2::MmapMut, StorageError> {
    use fs4::FileExt;
    let err = |reason: String| StorageError::Scratch {
        dir: dir.into(),
        reason,
    };
    let file = tempfile::tempfile_in(dir).map_err(|e| err(e.to_string()))?;
    file.allocate(bytes.max(4))
        .map_err(|e| err(format!("cannot reserve {bytes} bytes: {e}")))?;
    // Safety: the file is unnamed and private to this process, so nothing else maps or resizes
    // it while the map lives.
    unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| err(e.to_string()))
}

impl Field {
    /// A zero-filled array of `layout` on the device.
    pub fn zeros(ctx: &GpuContext, label: &str, layout: PlaneLayout) -> Result<Self, GpuError> {
        Ok(Self(Arc::new(Inner {
            label: label.to_string(),
            layout,
            home_chunk: 1,
            residency: Residency::Device,
            store: Store::Device(ctx.storage_buffer(label, layout.bytes())?),
        })))
    }

    /// A zero-filled array of `layout` where `residency` says.
    pub fn new(
        ctx: &GpuContext,
        label: &str,
        layout: PlaneLayout,
        residency: &Residency,
    ) -> Result<Self, StorageError> {
        Self::with_home(ctx, label, layout, residency, (None, 1))
    }

    /// As [`new`](Self::new), for a team whose members share the array's planes in whole chunks
    /// of `home_chunk` planes, and for an MPI rank that keeps planes `home` of a host array (see
    /// [`crate::distributed::ranks`]): the other planes take memory only while they hold
    /// fetched blocks.
    pub(crate) fn with_home(
        ctx: &GpuContext,
        label: &str,
        layout: PlaneLayout,
        residency: &Residency,
        (home, home_chunk): (Option<Range<usize>>, usize),
    ) -> Result<Self, StorageError> {
        let host = |words| {
            Store::Host(HostArray {
                words: RwLock::new(words),
                pending: Mutex::default(),
                next: AtomicU64::new(0),
                home: home
                    .clone()
                    .map(|p| p.start * layout.plane_words..p.end * layout.plane_words),
                away: Mutex::default(),
                homes: Mutex::default(),
            })
        };
        let store = match residency {
            Residency::Device => Store::Device(ctx.storage_buffer(label, layout.bytes())?),
            Residency::Host => host(HostWords::Ram(zeroed_words(layout.words()).ok_or_else(
                || StorageError::HostMemory {
                    label: label.to_string(),
                    bytes: layout.bytes(),
                },
            )?)),
            // An MPI rank's scratch file holds its planes only.
            Residency::Scratch(dir) => match &home {
                Some(p) => host(HostWords::Share(ShareMap::new(
                    dir,
                    layout.words(),
                    p.start * layout.plane_words..p.end * layout.plane_words,
                )?)),
                None => host(HostWords::Mapped(scratch_map(dir, layout.bytes())?)),
            },
        };
        Ok(Self(Arc::new(Inner {
            label: label.to_string(),
            layout,
            home_chunk: home_chunk.max(1),
            residency: residency.clone(),
            store,
        })))
    }

    /// The array's layout.
    pub fn layout(&self) -> PlaneLayout {
        self.0.layout
    }

    /// The planes a team member's share of the array is made of whole chunks of: 1, or for an
    /// array a stage reads in chunks of planes (the spectrum and the data side, by U2's
    /// chunks of detector rows), those chunks, so that each member's vector passes run over
    /// the planes it keeps (see [`crate::distributed::shares::chunk_planes`]).
    pub fn home_chunk(&self) -> usize {
        self.0.home_chunk
    }

    /// Bytes of scratch file this array holds: the whole array's in one process, an MPI rank's
    /// planes (rounded out to whole pages) on a rank; 0 for an array in memory or on the device.
    pub fn scratch_bytes(&self) -> u64 {
        self.host().map_or(0, |h| {
            h.words.read().expect("host array poisoned").scratch_bytes()
        })
    }

    /// Bytes of the planes this process keeps: an MPI rank's home, else the whole array.
    pub fn home_bytes(&self) -> u64 {
        match self.host().and_then(|h| h.home.as_ref()) {
            Some(home) => 4 * home.len() as u64,
            None => self.layout().bytes(),
        }
    }

    /// Where the array lives.
    pub fn residency(&self) -> &Residency {
        &self.0.residency
    }

    /// The device buffer of a device-resident array (`None` for a host array).
    pub fn device_buffer(&self) -> Option<&GpuBuffer> {
        match &self.0.store {
            Store::Device(b) => Some(b),
            Store::Host(_) => None,
        }
    }

    /// The device buffer of an array known to be device-resident.
    pub fn buffer(&self) -> &GpuBuffer {
        self.device_buffer()
            .unwrap_or_else(|| panic!("{} is not on the device", self.0.label))
    }

    /// The label given at creation.
    pub fn label(&self) -> &str {
        &self.0.label
    }

    /// Whether two handles are the same array.
    pub fn same(&self, other: &Field) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    fn host(&self) -> Option<&HostArray> {
        match &self.0.store {
            Store::Host(h) => Some(h),
            Store::Device(_) => None,
        }
    }

    /// Waits until the downloads into this (host) array that overlap `block` have landed (those
    /// into other blocks stay in flight): first takes what has already arrived, then waits, each
    /// time for the oldest download's submission only.
    fn settle(&self, ctx: &GpuContext, block: &BlockView) -> Result<(), GpuError> {
        let Some(h) = self.host() else {
            return Ok(());
        };
        let overlapping = || {
            h.pending
                .lock()
                .expect("pending downloads poisoned")
                .iter()
                .any(|(_, p)| p.overlaps(block))
        };
        ctx.wait_for_downloads_until(
            || !overlapping(),
            || {
                format!(
                    "a download into {:?} was recorded but never submitted",
                    self.label()
                )
            },
        )
    }

    /// Writes words `[start, start + words.len())` from the host.
    pub fn write_words(
        &self,
        ctx: &GpuContext,
        start: usize,
        words: &[f32],
    ) -> Result<(), GpuError> {
        match &self.0.store {
            Store::Device(b) => ctx.write(b, start as u64, words),
            Store::Host(h) => {
                self.settle(ctx, &BlockView::words_range(start, words.len()))?;
                let mut w = h.words.write().expect("host array poisoned");
                w.words_mut()[start..start + words.len()].copy_from_slice(words);
                h.written_on_host([(start, words.len())]);
            }
        }
        Ok(())
    }

    /// Writes the whole array from the host.
    pub fn write(&self, ctx: &GpuContext, words: &[f32]) -> Result<(), GpuError> {
        debug_assert_eq!(words.len(), self.layout().words());
        self.write_words(ctx, 0, words)
    }

    /// Reads words `[start, start + len)` back (waits for the device).
    pub fn read_words(
        &self,
        ctx: &GpuContext,
        start: usize,
        len: usize,
    ) -> Result<Vec<f32>, GpuError> {
        match &self.0.store {
            Store::Device(b) => ctx.read(b, start as u64, len),
            Store::Host(h) => {
                self.settle(ctx, &BlockView::words_range(start, len))?;
                h.check_current(self.label(), start..start + len)?;
                let w = h.words.read().expect("host array poisoned");
                Ok(w.words()[start..start + len].to_vec())
            }
        }
    }

    /// Reads the words of `block` back in the block's order (waits for the device): a strided
    /// view of the array, such as z slices of a volume stored by y row. From the device, the
    /// block's runs that lie next to each other in the array are downloaded as one.
    pub fn read_block(&self, ctx: &GpuContext, block: &BlockView) -> Result<Vec<f32>, GpuError> {
        let Store::Device(buffer) = &self.0.store else {
            return self.gather(ctx, block);
        };
        // The block's runs, and where each lands in the block.
        let runs: Vec<(usize, usize)> = block.runs().filter(|r| r.1 > 0).collect();
        let places: Vec<usize> = runs
            .iter()
            .scan(0, |at, r| {
                *at += r.1;
                Some(*at - r.1)
            })
            .collect();
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_unstable_by_key(|&i| runs[i].0);
        let mut pieces: Vec<Piece> = Vec::new();
        for i in order {
            let (start, len) = runs[i];
            match pieces.last_mut() {
                Some(p) if p.0 + p.1 == start => {
                    p.1 += len;
                    p.2.push((places[i], len));
                }
                _ => pieces.push((start, len, vec![(places[i], len)])),
            }
        }
        let out = Arc::new(Mutex::new(vec![0.0f32; block.len_words()]));
        // Pieces not yet handed over (counted down when their completion is dropped, run or not)
        // and those filled.
        let waiting = Arc::new(AtomicU64::new(pieces.len() as u64));
        let filled = Arc::new(AtomicU64::new(0));
        let count = pieces.len() as u64;
        let mut rec = ctx.recorder("read a block");
        for (start, len, places) in pieces {
            let (out, filled) = (Arc::clone(&out), Arc::clone(&filled));
            let handed = HandedOver(Arc::clone(&waiting));
            let done: Completion = Box::new(move |bytes: &[u8]| {
                let _handed = handed;
                let mut out = out.lock().expect("block read poisoned");
                let mut words = bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                for (place, len) in places {
                    for (o, w) in out[place..place + len].iter_mut().zip(&mut words) {
                        *o = w;
                    }
                }
                filled.fetch_add(1, Ordering::Relaxed);
            });
            rec.download(ctx, buffer, 4 * start as u64, 4 * len as u64, done)?;
        }
        ctx.submit(rec)?;
        ctx.wait_for_downloads_until(
            || waiting.load(Ordering::Acquire) == 0,
            || format!("a download of a block of {:?} never landed", self.label()),
        )?;
        if filled.load(Ordering::Relaxed) != count {
            return Err(GpuError::Readback(format!(
                "a download of a block of {:?} was dropped unread",
                self.label()
            )));
        }
        let out = std::mem::take(&mut *out.lock().expect("block read poisoned"));
        Ok(out)
    }

    /// Reads the whole array back (waits for the device).
    pub fn read(&self, ctx: &GpuContext) -> Result<Vec<f32>, GpuError> {
        self.read_words(ctx, 0, self.layout().words())
    }

    /// The words of `block` of a host array, contiguous (after the downloads into the block
    /// landed).
    pub(crate) fn gather(&self, ctx: &GpuContext, block: &BlockView) -> Result<Vec<f32>, GpuError> {
        let h = self.host().expect("only host arrays are gathered");
        self.settle(ctx, block)?;
        for (start, len) in block.runs() {
            h.check_current(self.label(), start..start + len)?;
        }
        let w = h.words.read().expect("host array poisoned");
        let words = w.words();
        let mut out = Vec::with_capacity(block.len_words());
        for (start, len) in block.runs() {
            out.extend_from_slice(&words[start..start + len]);
        }
        Ok(out)
    }

    /// Writes `words` (contiguous) into `block` of a host array, after the downloads into the
    /// block landed: the inverse of [`gather`](Self::gather).
    pub(crate) fn put(
        &self,
        ctx: &GpuContext,
        block: &BlockView,
        words: &[f32],
    ) -> Result<(), GpuError> {
        let h = self.host().expect("only host arrays are put into");
        debug_assert_eq!(words.len(), block.len_words());
        self.settle(ctx, block)?;
        let mut w = h.words.write().expect("host array poisoned");
        let all = w.words_mut();
        let mut at = 0;
        for (start, len) in block.runs() {
            all[start..start + len].copy_from_slice(&words[at..at + len]);
            at += len;
        }
        Ok(())
    }

    /// The completion of a download of `block` (contiguous) into this host array. Until it
    /// runs (or is dropped unrun, with its recording), readers and writers of words of the
    /// block wait for it.
    pub(crate) fn scatter(&self, block: BlockView) -> Completion {
        self.scatter_runs(block.runs().collect())
    }

    /// The completion of a download of the words of `runs`, one after the other, into this
    /// host array (as [`scatter`](Self::scatter) for a block).
    fn scatter_runs(&self, runs: Vec<(usize, usize)>) -> Completion {
        let h = self.host().expect("only host arrays are scattered into");
        let id = h.next.fetch_add(1, Ordering::Relaxed);
        h.pending
            .lock()
            .expect("pending downloads poisoned")
            .extend(
                runs.iter()
                    .map(|&(s, l)| (id, BlockView::words_range(s, l))),
            );
        let pending = Pending(self.clone(), id);
        Box::new(move |bytes: &[u8]| {
            let field = &pending.0;
            let h = field.host().expect("a host array");
            {
                let mut w = h.words.write().expect("host array poisoned");
                let words = w.words_mut();
                let mut at = 0;
                for &(start, len) in &runs {
                    for (word, c) in words[start..start + len]
                        .iter_mut()
                        .zip(bytes[4 * at..4 * (at + len)].chunks_exact(4))
                    {
                        *word = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    }
                    at += len;
                }
            }
            h.written_on_host(runs.iter().copied());
            if let Some(home) = &h.home {
                let mut away = h.away.lock().expect("runs away poisoned");
                for &(start, len) in &runs {
                    away.extend(outside(start..start + len, home));
                }
            }
        })
    }
}

/// What MPI ranks' exchanges do with a host array (see [`crate::distributed::ranks`]).
#[cfg(feature = "mpi")]
impl Field {
    /// The runs downloaded outside this rank's planes since the last call.
    pub(crate) fn take_away_runs(&self) -> Vec<(usize, usize)> {
        self.host().map_or_else(Vec::new, |h| {
            std::mem::take(&mut *h.away.lock().expect("runs away poisoned"))
        })
    }

    /// The words of `runs`, one after the other.
    pub(crate) fn copy_runs(&self, runs: &[(usize, usize)]) -> Vec<f32> {
        let h = self.host().expect("a host array");
        debug_assert!(runs
            .iter()
            .all(|&(s, l)| h.check_current(self.label(), s..s + l).is_ok()));
        let w = h.words.read().expect("host array poisoned");
        let words = w.words();
        runs.iter()
            .flat_map(|&(s, l)| words[s..s + l].iter().copied())
            .collect()
    }

    /// Writes `values` into `runs`, one after the other.
    pub(crate) fn fill_runs(&self, runs: &[(usize, usize)], values: &[f32]) {
        let h = self.host().expect("a host array");
        let mut w = h.words.write().expect("host array poisoned");
        let words = w.words_mut();
        let mut at = 0;
        for &(s, l) in runs {
            words[s..s + l].copy_from_slice(&values[at..at + l]);
            at += l;
        }
        drop(w);
        h.written_on_host(runs.iter().copied());
    }

    /// Bytes of this host array resident in memory now (pages the system backs, as `mincore`
    /// reports them; 0 for an array on the device): what an MPI rank's array really holds,
    /// its planes and the fetched ones not yet let go.
    pub(crate) fn resident_bytes(&self) -> u64 {
        let Some(h) = self.host() else { return 0 };
        let w = h.words.read().expect("host array poisoned");
        let words = w.words();
        let (start, len) = (words.as_ptr() as usize, std::mem::size_of_val(words));
        if len == 0 {
            return 0;
        }
        let first = start / PAGE * PAGE;
        let pages = (start + len - first).div_ceil(PAGE);
        let mut resident = vec![0u8; pages];
        // Safety: [first, first + pages * PAGE) covers the array's memory from its page start;
        // mincore only reports on the pages, one byte each into `resident`.
        let r = unsafe {
            libc::mincore(
                first as *mut libc::c_void,
                pages * PAGE,
                resident.as_mut_ptr().cast(),
            )
        };
        if r != 0 {
            return len as u64;
        }
        resident.iter().filter(|&&b| b & 1 == 1).count() as u64 * PAGE as u64
    }

    /// Returns the memory of the words outside this rank's planes to the system (they read as
    /// zero afterwards): the blocks fetched for a stage are not kept beyond it.
    pub(crate) fn release_away(&self) {
        let Some(h) = self.host() else { return };
        let Some(home) = &h.home else { return };
        let mut w = h.words.write().expect("host array poisoned");
        // A one-process scratch file has no home; a rank's scratch share keeps its planes in the
        // file, whose pages the whole pages outside the home never touch.
        let words = match &mut *w {
            HostWords::Ram(v) => &mut v[..],
            HostWords::Share(m) => m.words_mut(),
            HostWords::Mapped(_) => return,
        };
        let (base, len) = (words.as_mut_ptr() as usize, words.len());
        let address = |word: usize| base + 4 * word;
        // Whole pages only: a page that also holds words of this rank's planes stays.
        for (lo, hi) in [(0, home.start), (home.end, len)] {
            let (lo, hi) = (address(lo).div_ceil(PAGE) * PAGE, address(hi) / PAGE * PAGE);
            if hi > lo {
                // Safety: [lo, hi) lies within the array's memory and is page-aligned; its
                // contents are dropped on purpose and read back as zeros, a valid f32.
                unsafe {
                    libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED);
                }
            }
        }
    }
}

/// Words of an array downloaded as one by [`Field::read_block`]: (start in the array, length,
/// (place in the block, length) of each of the block's runs it holds, in order).
type Piece = (usize, usize, Vec<(usize, usize)>);

/// Counts down a block read's pieces not yet handed over when its completion is dropped
/// ([`Field::read_block`]).
struct HandedOver(Arc<AtomicU64>);

impl Drop for HandedOver {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// A download (by number) into a host array that has not landed: released when its completion
/// ends.
struct Pending(Field, u64);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(h) = self.0.host() {
            if let Ok(mut p) = h.pending.lock() {
                p.retain(|(id, _)| *id != self.1);
            }
        }
    }
}
