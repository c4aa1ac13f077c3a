//! The file's words: block-wise writing and reading of the arrays with the running FNV-1a hash,
//! exact reads, the trailer's check, atomic writes, and the crash-safety tests' fault point.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::{CheckpointError, ARRAYS, ARRAY_COUNT, BLOCK_WORDS};
use crate::hash::{fnv1a_continue, FNV_OFFSET};

/// The buffers a reader moves blocks through.
pub(super) struct Buffers {
    bytes: Vec<u8>,
    words: Vec<f32>,
}

impl Buffers {
    pub(super) fn new(lengths: &[usize; ARRAY_COUNT]) -> Self {
        let most = BLOCK_WORDS.min(lengths.iter().copied().max().unwrap_or(0));
        Self {
            bytes: vec![0u8; 4 * most],
            words: Vec::with_capacity(most),
        }
    }

    /// Reads words `words` of array `array` from `f` (the file `path`), [`BLOCK_WORDS`] at a
    /// time, into `hash`; hands the words of `wanted` to `sink` (none without it).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn section<E: From<CheckpointError>>(
        &mut self,
        f: &mut impl Read,
        hash: &mut u64,
        path: &Path,
        array: usize,
        words: Range<usize>,
        wanted: Option<Range<usize>>,
        sink: &mut impl FnMut(usize, usize, &[f32]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut start = words.start;
        while start < words.end {
            let n = BLOCK_WORDS.min(words.end - start);
            let block = &mut self.bytes[..4 * n];
            exact(f, block, path, ARRAYS[array])?;
            *hash = fnv1a_continue(*hash, block);
            if let Some(keep) = wanted
                .as_ref()
                .and_then(|w| overlap(w, &(start..start + n)))
            {
                self.words.clear();
                self.words.extend(
                    block[4 * (keep.start - start)..4 * (keep.end - start)]
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
                sink(array, keep.start, &self.words)?;
            }
            start += n;
        }
        Ok(())
    }
}

pub(super) fn read_error(path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError::Read {
        path: path.into(),
        reason: e.to_string(),
    }
}

/// Fills `buf` from `f` (the file `path`): a short read means a truncated file, not an I/O
/// failure.
pub(super) fn exact(
    f: &mut impl Read,
    buf: &mut [u8],
    path: &Path,
    what: &str,
) -> Result<(), CheckpointError> {
    f.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => CheckpointError::Corrupt {
            path: path.into(),
            reason: format!("truncated {what}"),
        },
        _ => read_error(path, e),
    })
}

/// Reads the trailer of `f` (the file `path`) and compares it with `hash`, the hash of what came
/// before, and with `named`, the hash a manifest gives the file.
pub(super) fn check_trailer(
    f: &mut impl Read,
    hash: u64,
    path: &Path,
    named: Option<u64>,
) -> Result<(), CheckpointError> {
    let corrupt = |reason: &str| CheckpointError::Corrupt {
        path: path.into(),
        reason: reason.into(),
    };
    let mut trailer = [0u8; 8];
    exact(f, &mut trailer, path, "checksum")?;
    if u64::from_le_bytes(trailer) != hash {
        return Err(corrupt(
            "checksum mismatch: the file was damaged or edited after it was written",
        ));
    }
    if named.is_some_and(|named| named != hash) {
        return Err(corrupt(
            "not the part its checkpoint's manifest names (its checksum differs): a part of \
             another checkpoint",
        ));
    }
    Ok(())
}

/// Writes `bytes` to `f` and into `hash`.
pub(super) fn put(
    f: &mut impl Write,
    hash: &mut u64,
    bytes: &[u8],
    path: &Path,
) -> Result<(), CheckpointError> {
    *hash = fnv1a_continue(*hash, bytes);
    f.write_all(bytes).map_err(|e| CheckpointError::Write {
        path: path.into(),
        reason: e.to_string(),
    })
}

/// Writes the words `words[a]` of each array `a`, in order, that `block(array, start, len)`
/// yields [`BLOCK_WORDS`] at a time, to `f` (the file `path`) and into `hash`. Half-way it
/// passes the crash-safety tests' fault-injection point.
pub(super) fn write_words<E: From<CheckpointError>>(
    f: &mut BufWriter<File>,
    hash: &mut u64,
    path: &Path,
    words: &[Range<usize>; ARRAY_COUNT],
    mut block: impl FnMut(usize, usize, usize) -> Result<Vec<f32>, E>,
) -> Result<(), E> {
    let total: usize = words.iter().map(|r| r.len()).sum();
    let mut written = 0;
    let mut halfway = false;
    for (array, range) in words.iter().enumerate() {
        let mut start = range.start;
        while start < range.end {
            let n = BLOCK_WORDS.min(range.end - start);
            let values = block(array, start, n)?;
            if values.len() != n {
                return Err(CheckpointError::Write {
                    path: path.into(),
                    reason: format!(
                        "{} words of {} from {start} came back as {}",
                        n,
                        ARRAYS[array],
                        values.len()
                    ),
                }
                .into());
            }
            put(f, hash, bytemuck::cast_slice(&values), path)?;
            start += n;
            written += n;
            if !halfway && 2 * written >= total {
                halfway = true;
                f.flush().map_err(|e| CheckpointError::Write {
                    path: path.into(),
                    reason: e.to_string(),
                })?;
                fault::abort_if_asked();
            }
        }
    }
    Ok(())
}

/// Writes `path` atomically: `contents` writes everything but the trailer (keeping the hash of
/// what it wrote) to a temporary file beside it, then the trailer goes after it, the file is
/// flushed to disk and renamed to `path`. On a failure the temporary file is removed and `path`
/// is untouched.
pub(super) fn write_atomically<E: From<CheckpointError>>(
    path: &Path,
    contents: impl FnOnce(&mut BufWriter<File>, &mut u64) -> Result<(), E>,
) -> Result<(), E> {
    let err = |e: std::io::Error| CheckpointError::Write {
        path: path.into(),
        reason: e.to_string(),
    };
    // Named after the whole file name (`checkpoint.ckpt.partial`), so that the clean-up of
    // [`remove_stale_parts`], which looks for names starting with it, finds one a kill left.
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let result = (|| -> Result<(), E> {
        let mut f = BufWriter::new(File::create(&tmp).map_err(err)?);
        let mut hash = FNV_OFFSET;
        contents(&mut f, &mut hash)?;
        f.write_all(&hash.to_le_bytes()).map_err(err)?;
        let f = f.into_inner().map_err(|e| err(e.into_error()))?;
        f.sync_all().map_err(err)?;
        Ok(())
    })();
    match result {
        Ok(()) => std::fs::rename(&tmp, path).map_err(|e| err(e).into()),
        Err(e) => {
            // Never leave a half-written file behind; the previous checkpoint stays.
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// A fault-injection point for the crash-safety tests: with `LAMINO_FAULT_ABORT_CHECKPOINT=N`
/// in the environment, the process aborts (as a SIGKILL would stop it: no destructors, no
/// cleanup) in the middle of its N-th checkpoint write, half of the arrays on disk.
mod fault {
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub const ENV: &str = "LAMINO_FAULT_ABORT_CHECKPOINT";
    static WRITES: AtomicUsize = AtomicUsize::new(0);

    pub fn abort_if_asked() {
        let n = WRITES.fetch_add(1, Ordering::SeqCst) + 1;
        if std::env::var(ENV)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            == Some(n)
        {
            std::process::abort();
        }
    }
}

/// The words two ranges share, if any.
pub(super) fn overlap(a: &Range<usize>, b: &Range<usize>) -> Option<Range<usize>> {
    let r = a.start.max(b.start)..a.end.min(b.end);
    (r.start < r.end).then_some(r)
}
