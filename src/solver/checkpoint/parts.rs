//! The parts of a checkpoint that several MPI ranks write (see the module's documentation): each
//! rank's part file, the manifest that names them, reading the parts that hold a rank's share,
//! and the removal of the parts a checkpoint replaced.

use std::fs::File;
use std::io::BufReader;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::words::{
    check_trailer, exact, overlap, put, read_error, write_atomically, write_words, Buffers,
};
use super::{Checkpoint, CheckpointError, ARRAYS, ARRAY_COUNT, MAGIC, PART_EXTENSION, PART_MAGIC};
use crate::hash::{fnv1a_continue, FNV_OFFSET};

impl Checkpoint {
    /// The file of rank `rank`'s part of the checkpoint `path` of generation `generation` (a
    /// name no other checkpoint at `path` uses): beside it, named after it.
    pub fn part_path(path: &Path, generation: &str, rank: usize) -> PathBuf {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        path.with_file_name(format!("{name}.{generation}.r{rank}.{PART_EXTENSION}"))
    }

    /// Writes one MPI rank's part of the checkpoint `path` (to [`part_path`](Self::part_path),
    /// atomically): words `words[a]` of each array `a` of [`ARRAYS`], which `block` yields as
    /// for [`write`](Self::write). The checkpoint exists once
    /// [`write_manifest`](Self::write_manifest) names every rank's part; until then the previous
    /// one stays whole.
    pub fn write_part<E>(
        &self,
        path: &Path,
        generation: &str,
        rank: usize,
        words: [Range<usize>; ARRAY_COUNT],
        block: impl FnMut(usize, usize, usize) -> Result<Vec<f32>, E>,
    ) -> Result<Part, E>
    where
        E: From<CheckpointError>,
    {
        self.check_writable(path)?;
        let file = Self::part_path(path, generation, rank);
        if let Some((a, r)) = words
            .iter()
            .enumerate()
            .find(|(a, r)| r.start > r.end || r.end > self.lengths[*a])
        {
            return Err(CheckpointError::Write {
                path: file,
                reason: format!(
                    "words {r:?} of {}: the array has {}",
                    ARRAYS[a], self.lengths[a]
                ),
            }
            .into());
        }
        let mut written = FNV_OFFSET;
        write_atomically(&file, |f, hash| {
            put(f, hash, PART_MAGIC, &file)?;
            write_words(f, hash, &file, &words, block)?;
            written = *hash;
            Ok::<_, E>(())
        })?;
        Ok(Part {
            file: file
                .file_name()
                .expect("a part's path names a file")
                .to_string_lossy()
                .into_owned(),
            words: words.map(|r| [r.start, r.end]),
            hash: written,
        })
    }

    /// Writes the manifest of a checkpoint whose arrays are in `parts` (every rank's, in rank
    /// order, as [`write_part`](Self::write_part) returned them) to `path` atomically: from
    /// then on `path` is this checkpoint, and the parts of the one it replaces are removed.
    pub fn write_manifest(&self, path: &Path, parts: Vec<Part>) -> Result<(), CheckpointError> {
        self.check_writable(path)?;
        if let Some(reason) = parts_inconsistency(&parts, &self.lengths) {
            return Err(CheckpointError::Write {
                path: path.into(),
                reason,
            });
        }
        let names: Vec<String> = parts.iter().map(|p| p.file.clone()).collect();
        let header = self.header(Some(parts));
        write_atomically(path, |f, hash| {
            let header_len = (header.len() as u64).to_le_bytes();
            for part in [&MAGIC[..], &header_len, &header] {
                put(f, hash, part, path)?;
            }
            Ok::<_, CheckpointError>(())
        })?;
        remove_stale_parts(path, &names);
        Ok(())
    }
}

/// Rank `rank`'s part of a checkpoint of several MPI ranks: a file beside the manifest (the
/// file `Checkpoint::write_manifest` writes at the checkpoint's path), named in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// The file's name, in the manifest's directory.
    pub file: String,
    /// Words `[start, end)` of each array of [`ARRAYS`] that the file holds.
    pub words: [[usize; 2]; ARRAY_COUNT],
    /// The FNV-1a hash of the file's bytes before its trailer (which repeats it).
    pub hash: u64,
}

/// Why `parts` do not hold arrays of `lengths` words, each word once and in order, in files
/// beside the manifest; `None` when they do.
pub(super) fn parts_inconsistency(
    parts: &[Part],
    lengths: &[usize; ARRAY_COUNT],
) -> Option<String> {
    if let Some(p) = parts.iter().find(|p| {
        p.file.contains(['/', '\\'])
            || !p.file.ends_with(&format!(".{PART_EXTENSION}"))
            || p.file.starts_with('.')
    }) {
        return Some(format!(
            "part file {:?}: a part is a .{PART_EXTENSION} file beside the manifest",
            p.file
        ));
    }
    for (a, &len) in lengths.iter().enumerate() {
        let mut next = 0;
        for p in parts {
            let [start, end] = p.words[a];
            if start != next || end < start {
                return Some(format!(
                    "part {} holds words {start}..{end} of {}: the parts before it end at {next}",
                    p.file, ARRAYS[a]
                ));
            }
            next = end;
        }
        if next != len {
            return Some(format!(
                "the parts hold {next} words of {}: it has {len}",
                ARRAYS[a]
            ));
        }
    }
    None
}

/// Reads the parts of `parts` that hold words of `share` into `sink`, each verified against
/// its trailer and the hash the manifest `path` gives it.
pub(super) fn read_parts<E: From<CheckpointError>>(
    path: &Path,
    parts: &[Part],
    share: &[Range<usize>; ARRAY_COUNT],
    buffers: &mut Buffers,
    sink: &mut impl FnMut(usize, usize, &[f32]) -> Result<(), E>,
) -> Result<(), E> {
    let range = |p: &Part, a: usize| p.words[a][0]..p.words[a][1];
    let needed: Vec<&Part> = parts
        .iter()
        .filter(|p| (0..ARRAY_COUNT).any(|a| overlap(&range(p, a), &share[a]).is_some()))
        .collect();
    // One open reader per part read, each moving through its file once, array after array.
    let mut readers = Vec::with_capacity(needed.len());
    for p in &needed {
        let file = path.with_file_name(&p.file);
        let f = File::open(&file).map_err(|e| read_error(&file, e))?;
        let len = f.metadata().map_err(|e| read_error(&file, e))?.len();
        let words: u64 = (0..ARRAY_COUNT).map(|a| range(p, a).len() as u64).sum();
        if len != 16 + 4 * words {
            return Err(CheckpointError::Corrupt {
                path: file,
                reason: format!("{len} bytes, but the manifest describes {}", 16 + 4 * words),
            }
            .into());
        }
        let mut f = BufReader::new(f);
        let mut magic = [0u8; 8];
        exact(&mut f, &mut magic, &file, "part header")?;
        if &magic != PART_MAGIC {
            return Err(CheckpointError::Corrupt {
                path: file,
                reason: "missing the LAMINOPT header of a checkpoint part".into(),
            }
            .into());
        }
        readers.push((file, f, fnv1a_continue(FNV_OFFSET, &magic)));
    }
    for (a, share) in share.iter().enumerate() {
        for (p, (file, f, hash)) in needed.iter().zip(&mut readers) {
            buffers.section(f, hash, file, a, range(p, a), Some(share.clone()), sink)?;
        }
    }
    for (p, (file, mut f, hash)) in needed.iter().zip(readers) {
        check_trailer(&mut f, hash, &file, Some(p.hash))?;
    }
    Ok(())
}

/// Removes the part files (and half-written ones) of checkpoints at `path` other than `keep`:
/// those of the checkpoint `path` replaced, and any a killed run left. Best effort: a part that
/// stays only takes room.
pub(super) fn remove_stale_parts(path: &Path, keep: &[String]) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let part = file.ends_with(&format!(".{PART_EXTENSION}")) || file.ends_with(".partial");
        if file.starts_with(&prefix) && part && !keep.contains(&file) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
