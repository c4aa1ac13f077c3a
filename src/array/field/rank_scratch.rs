//! An MPI rank's scratch array, of which only the rank's own planes are a scratch file (on Unix,
//! where MPI ranks run: Open MPI is Unix's; elsewhere the whole array is one scratch file, so that
//! the crate builds and behaves the same on every platform).

use std::ops::Range;
use std::path::Path;

use super::StorageError;
#[cfg(unix)]
use super::PAGE;

/// An MPI rank's scratch array: one contiguous range of addresses for the whole array, of which
/// only the pages holding the rank's planes (its home, rounded out to whole pages) are a scratch
/// file; the other pages are anonymous memory that takes room only while it holds blocks fetched
/// for a stage (and is let go after it,
/// [`Field::release_away`](super::Field::release_away)). So the rank's scratch file is its
/// share of the array, not the whole of it, while every word keeps its place in the array and
/// the code that reads and writes words stays the same.
#[cfg(unix)]
pub(super) struct ShareMap {
    base: *mut f32,
    /// Words of the array.
    len: usize,
    /// Bytes of the address range (the array's, rounded up to whole pages).
    mapped: usize,
    /// Bytes of the scratch file mapped over the home's pages.
    pub file_bytes: u64,
}

// Safety: the map is owned by one HostArray, whose RwLock orders every access to its words;
// the pointer is not shared otherwise.
#[cfg(unix)]
unsafe impl Send for ShareMap {}
#[cfg(unix)]
unsafe impl Sync for ShareMap {}

#[cfg(unix)]
impl ShareMap {
    /// Words `home` of an array of `len` words in a scratch file in `dir`, the rest in
    /// anonymous memory, all zero.
    pub fn new(dir: &Path, len: usize, home: Range<usize>) -> Result<Self, StorageError> {
        use fs4::FileExt;
        let err = |reason: String| StorageError::Scratch {
            dir: dir.into(),
            reason,
        };
        let mapped = (4 * len).div_ceil(PAGE).max(1) * PAGE;
        // Safety: a fresh private anonymous mapping (no address asked for); checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(err(format!(
                "cannot reserve {mapped} bytes of addresses: {}",
                std::io::Error::last_os_error()
            )));
        }
        // From here on, dropping `map` unmaps the whole range, also on the errors below.
        let mut map = Self {
            base: base.cast(),
            len,
            mapped,
            file_bytes: 0,
        };
        let lo = 4 * home.start / PAGE * PAGE;
        let hi = (4 * home.end).div_ceil(PAGE) * PAGE;
        let hi = hi.min(mapped);
        if home.is_empty() || hi <= lo {
            return Ok(map);
        }
        let file = tempfile::tempfile_in(dir).map_err(|e| err(e.to_string()))?;
        let bytes = (hi - lo) as u64;
        file.allocate(bytes)
            .map_err(|e| err(format!("cannot reserve {bytes} bytes: {e}")))?;
        use std::os::fd::AsRawFd;
        // Safety: [base + lo, base + hi) lies in the range reserved above, page-aligned;
        // MAP_FIXED replaces those anonymous pages by the file's (unnamed, private to this
        // process, so nothing else maps or resizes it while the map lives). The mapping keeps
        // the file open after `file` is dropped.
        let at = unsafe {
            libc::mmap(
                base.cast::<u8>().add(lo).cast(),
                hi - lo,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(err(format!(
                "cannot map {bytes} bytes of scratch file: {}",
                std::io::Error::last_os_error()
            )));
        }
        map.file_bytes = bytes;
        Ok(map)
    }

    pub fn words(&self) -> &[f32] {
        // Safety: `len` words from `base` lie within the mapping, readable and zero-initialised
        // (anonymous or file pages), alive while `self` is.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    pub fn words_mut(&mut self) -> &mut [f32] {
        // Safety: as in `words`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }
}

#[cfg(unix)]
impl Drop for ShareMap {
    fn drop(&mut self) {
        // Safety: the range is the one mapped in `new`, unmapped once.
        unsafe {
            libc::munmap(self.base.cast(), self.mapped);
        }
    }
}

/// Elsewhere than Unix: the whole array in one scratch file (the rank's share of it is not
/// apart), with the same words.
#[cfg(not(unix))]
pub(super) struct ShareMap {
    map: memmap2::MmapMut,
    len: usize,
    /// Bytes of the scratch file: the whole array's.
    pub file_bytes: u64,
}

#[cfg(not(unix))]
impl ShareMap {
    /// An array of `len` words, all zero, in a scratch file in `dir`.
    pub fn new(dir: &Path, len: usize, _home: Range<usize>) -> Result<Self, StorageError> {
        let bytes = 4 * len as u64;
        let map = super::scratch_map(dir, bytes)?;
        Ok(Self {
            map,
            len,
            file_bytes: bytes,
        })
    }

    pub fn words(&self) -> &[f32] {
        &bytemuck::cast_slice(&self.map[..])[..self.len]
    }

    pub fn words_mut(&mut self) -> &mut [f32] {
        &mut bytemuck::cast_slice_mut(&mut self.map[..])[..self.len]
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::{ShareMap, PAGE};

    /// A rank's scratch array: its file holds the pages of its home words only, every word of
    /// the array reads back what was written, and the file has no name.
    #[test]
    fn a_share_map_backs_only_the_home_pages_with_its_file() {
        let dir = tempfile::tempdir().unwrap();
        // 5000 words (20000 bytes); home 1500..3100 is bytes 6000..12400: pages 1, 2 and 3.
        // At the array's end, 4000..5000 is bytes 16000..20000: pages 3 and 4.
        for (home, pages) in [(1500..3100, 3), (4000..5000, 2), (0..0, 0), (0..5000, 5)] {
            let mut m = ShareMap::new(dir.path(), 5000, home.clone()).unwrap();
            assert!(m.file_bytes == (pages * PAGE) as u64, "{home:?}");
            assert!(m.words().iter().all(|&w| w == 0.0), "{home:?}");
            for (i, w) in m.words_mut().iter_mut().enumerate() {
                *w = i as f32;
            }
            let same = m.words().iter().enumerate().all(|(i, &w)| w == i as f32);
            assert!(same, "{home:?}");
        }
        assert!(std::fs::read_dir(dir.path()).unwrap().count() == 0);
    }
}
