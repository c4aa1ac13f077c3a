//! Solver checkpoints: the complete state, written atomically (temporary file, flush, rename), so
//! a killed process leaves either the previous checkpoint or the new one, never a torn file; and
//! read back with a checksum over the whole file and a check of the header's values against each
//! other, so a damaged or edited file is refused rather than resumed from.
//!
//! The arrays are written and read a block at a time, never whole: a checkpoint of a volume
//! larger than host memory (streaming mode, arrays in scratch files) passes through a buffer of
//! [`BLOCK_WORDS`]. The file does not record where the arrays lived, so a checkpoint of an
//! in-core run resumes in streaming mode and the other way round.
//!
//! Layout: the 8-byte magic `LAMINOCK`, a little-endian u64 header length, a JSON header, the
//! arrays u, psi, lambda, grad u, A u and the carried data residual (empty unless the parameters
//! carry it) as little-endian f32 in that order, and last the u64 FNV-1a hash of every byte
//! before it (a trailer: it is known only once the arrays are written).
//!
//! MPI ranks write one checkpoint in parts, each rank the planes it keeps, so that no rank ever
//! holds more than its share: each rank writes its part file (the magic `LAMINOPT`, its words of
//! each array in array order, the FNV-1a trailer) atomically under a name of this checkpoint's
//! own, and once every part is on disk the first rank writes the **manifest** at the checkpoint's
//! path: the same magic and header, whose `parts` name each part file with the words of each
//! array it holds and its hash, and the trailer, with no arrays. Renaming the manifest into place
//! is the one step that replaces the previous checkpoint, so a rank killed while writing its part
//! leaves the previous manifest and its parts whole; their parts are removed only after. The
//! manifest's checksum covers its header (the part list and hashes with it), and each part's
//! hash is checked against the manifest's, so an edited header, a damaged part or a part of
//! another checkpoint is refused. Any number of ranks, or one process, reads either kind of
//! checkpoint: the parts are words of the arrays, not ranks' planes. Why parts rather than one
//! file written at offsets with MPI-IO: each part is written and renamed by plain file I/O, so
//! atomicity needs no collective file system semantics, a single process reads the checkpoint
//! without MPI, and each rank reads back only the parts that hold its share.
//!
//! What the checksum is for: FNV-1a is unkeyed, so it detects corruption (a bit flip, a torn or
//! truncated copy) and edits made without recomputing it, not someone who edits the file and
//! recomputes the hash. The consistency checks on the header narrow what such an edit can do
//! (an iteration count beyond the parameters' maximum, a penalty that is not positive, a report
//! of another iteration, arrays of another size), but a checkpoint is trusted as far as the
//! place it is kept is trusted.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::report::{report_values, IterationReport};
use crate::geometry::Geometry;
use crate::hash::{fnv1a_continue, FNV_OFFSET};
use crate::params::AdmmParams;
use crate::plan::Array;

const MAGIC: &[u8; 8] = b"LAMINOCK";
/// The magic of a rank's part of a checkpoint of several MPI ranks.
const PART_MAGIC: &[u8; 8] = b"LAMINOPT";
/// The extension of a part's file.
const PART_EXTENSION: &str = "part";
/// Version 7: the same layout as version 6 (six arrays, the sixth the carried data residual; a
/// checkpoint may be a manifest of parts written by MPI ranks), written by a lamino whose gridding
/// kernel is the exponential of semicircle. Versions 4 to 6 were written with the Gaussian
/// kernel: their carried `A u` and residual belong to another operator, and a resumed run would
/// carry that difference to its end, so they are refused with what to do. From version 4 on the
/// checksum covers the whole file (magic, header length, header, arrays); up to version 3 it
/// covered the arrays only, so their headers cannot be trusted.
/// Version 8: as version 7, with `A u` stored by detector row (`(deth, ntheta, detw)`, as the
/// solver keeps it), where version 7 stored it by angle; version 7 is refused with what to do.
/// Version 9: as version 8, with the volume side (u, psi, lambda, grad u, the data residual)
/// stored by y row (`(n1, n0, n2)`, grad u's components (x, z, y)), as the solver keeps it,
/// where version 8 stored it by z slice; version 8 is refused with what to do.
/// Version 10: as version 9, written by a lamino whose `alpha` is relative to the data's scale
/// ([`crate::params::DataScale`]); version 9's `alpha` was the absolute TV weight, so the same
/// parameters would continue another objective: refused with what to do.
const VERSION: u32 = 10;
/// The oldest version read.
const OLDEST_VERSION: u32 = 10;
/// The last version whose `alpha` was the absolute TV weight.
const LAST_ABSOLUTE_ALPHA_VERSION: u32 = 9;
/// The last version that stored `A u` by angle.
const LAST_ANGLE_MAJOR_VERSION: u32 = 7;
/// The last version that stored the volume side by z slice.
const LAST_Z_MAJOR_VERSION: u32 = 8;
/// The oldest version whose checksum covers its header.
const OLDEST_CHECKED_VERSION: u32 = 4;
/// The number of arrays of a checkpoint.
pub const ARRAY_COUNT: usize = 6;
/// The arrays of a checkpoint, in file order.
pub const ARRAYS: [&str; ARRAY_COUNT] = ["u", "psi", "lambda", "grad u", "A u", "data residual"];
/// The solver's arrays of [`ARRAYS`], whose layouts in the geometry give a checkpoint's lengths
/// (the data residual's only when the parameters carry it: see [`Checkpoint::array_lengths`]).
const ARRAY_LAYOUTS: [Array; ARRAY_COUNT] = [
    Array::U,
    Array::Psi,
    Array::Lambda,
    Array::GradU,
    Array::Au,
    Array::RSaved,
];
/// Words per block moved between an array and the file (64 MiB).
pub const BLOCK_WORDS: usize = 16 << 20;
/// A JSON header longer than this is not one lamino wrote.
const MAX_HEADER_BYTES: u64 = 64 << 20;

/// Errors writing or reading a checkpoint file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CheckpointError {
    #[error("cannot write checkpoint {path}: {reason}")]
    Write { path: PathBuf, reason: String },
    #[error("cannot read checkpoint {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path} is not a usable lamino checkpoint: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

/// What a checkpoint says of the ADMM state after `iteration` outer iterations; the arrays
/// themselves stay in the file until they are streamed into a solver.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub iteration: usize,
    pub rho: f64,
    pub geometry: Geometry,
    pub params: AdmmParams,
    /// FNV-1a hash of the data the reconstruction runs on.
    pub data_hash: u64,
    /// The report of iteration `iteration - 1` (the convergence test of a resumed run needs it).
    pub last_report: Option<IterationReport>,
    /// Words of each array of [`ARRAYS`].
    pub lengths: [usize; ARRAY_COUNT],
}

#[derive(Serialize, Deserialize)]
struct Header {
    version: u32,
    iteration: usize,
    /// The penalty's exact bits: a resumed run must continue with the same rho, not its decimal.
    rho_bits: u64,
    /// For people reading the file; resume compares `geometry_fingerprint`.
    geometry: Geometry,
    geometry_fingerprint: u64,
    params: AdmmParams,
    data_hash: u64,
    last_report: Option<IterationReport>,
    lengths: [usize; ARRAY_COUNT],
    /// A manifest's parts (see the module's documentation); absent in a single file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parts: Option<Vec<Part>>,
}

/// The version alone, read before the rest of the header: an older header may not parse as this
/// version's, and its reader deserves to hear why it is refused.
#[derive(Deserialize)]
struct HeaderVersion {
    version: u32,
}

impl Checkpoint {
    /// Why this state is not one the solver can be in, naming the field and its value; `None`
    /// when it is. Written and read checkpoints both pass it, so a file that lamino wrote always
    /// reads back.
    fn inconsistency(&self) -> Option<String> {
        if let Err(e) = self.geometry.validate() {
            return Some(format!("geometry: {e}"));
        }
        if let Err(e) = self.params.validate() {
            return Some(format!("params: {e}"));
        }
        let max = self.params.outer_iterations;
        if self.iteration > max {
            return Some(format!(
                "iteration = {}: more than the parameters' outer_iterations = {max}",
                self.iteration
            ));
        }
        if !(self.rho.is_finite() && self.rho > 0.0) {
            return Some(format!("rho = {}: it must be finite and > 0", self.rho));
        }
        match (self.iteration, &self.last_report) {
            (0, None) => {
                // No iteration has adapted the penalty yet.
                if self.rho != self.params.rho0 {
                    return Some(format!(
                        "rho = {} after 0 iterations: it must be the parameters' rho0 = {}",
                        self.rho, self.params.rho0
                    ));
                }
            }
            (0, Some(r)) => {
                return Some(format!(
                    "last_report of iteration {} after 0 iterations: there is none yet",
                    r.iteration
                ))
            }
            (n, None) => {
                return Some(format!(
                    "last_report missing after {n} iterations (the convergence test needs it)"
                ))
            }
            (n, Some(r)) => {
                if r.iteration != n - 1 {
                    return Some(format!(
                        "last_report.iteration = {}: after {n} iterations it must be {}",
                        r.iteration,
                        n - 1
                    ));
                }
                if let Some((name, value)) = report_values(r).find(|(_, v)| !v.is_finite()) {
                    return Some(format!("last_report.{name} = {value}: it must be finite"));
                }
                // The adaptive rule doubles, halves or keeps the penalty of the last iteration.
                if ![r.rho, 2.0 * r.rho, 0.5 * r.rho].contains(&self.rho) {
                    return Some(format!(
                        "rho = {}: the last iteration used {}, and the penalty only doubles, \
                         halves or stays",
                        self.rho, r.rho
                    ));
                }
            }
        }
        // Geometry::validate bounds every size product, so these do not overflow.
        let expected = Self::array_lengths(&self.geometry, &self.params);
        if self.lengths != expected {
            return Some(format!(
                "lengths = {:?}: the geometry's arrays {ARRAYS:?} have {expected:?} words",
                self.lengths
            ));
        }
        None
    }

    /// Words of each array of [`ARRAYS`] in a checkpoint of `geometry` under `params`: the data
    /// residual is empty unless `params` carry it.
    pub fn array_lengths(geometry: &Geometry, params: &AdmmParams) -> [usize; ARRAY_COUNT] {
        let mut lengths = ARRAY_LAYOUTS.map(|a| a.layout(geometry).words());
        if !params.carries_residual() {
            lengths[ARRAY_COUNT - 1] = 0;
        }
        lengths
    }

    /// The header of this state, with `parts` for a manifest.
    fn header(&self, parts: Option<Vec<Part>>) -> Vec<u8> {
        let header = Header {
            version: VERSION,
            iteration: self.iteration,
            rho_bits: self.rho.to_bits(),
            geometry: self.geometry.clone(),
            geometry_fingerprint: self.geometry.fingerprint(),
            params: self.params,
            data_hash: self.data_hash,
            last_report: self.last_report,
            lengths: self.lengths,
            parts,
        };
        serde_json::to_vec(&header).expect("the header serialises")
    }

    /// Refuses (before anything is written to `path`) a state that would not read back.
    fn check_writable(&self, path: &Path) -> Result<(), CheckpointError> {
        match self.inconsistency() {
            Some(reason) => Err(CheckpointError::Write {
                path: path.into(),
                reason: format!("the solver state is inconsistent: {reason}"),
            }),
            None => Ok(()),
        }
    }

    /// Writes the checkpoint to `path` atomically. `block(array, start, len)` yields words
    /// `[start, start + len)` of array `array` (an index into [`ARRAYS`]); it is asked for each
    /// array in order, [`BLOCK_WORDS`] at a time. A state that would not read back (see the
    /// module's consistency checks) is refused before anything is written. The parts of an
    /// earlier checkpoint of several ranks at `path` are removed once this one is in place.
    pub fn write<E>(
        &self,
        path: &Path,
        block: impl FnMut(usize, usize, usize) -> Result<Vec<f32>, E>,
    ) -> Result<(), E>
    where
        E: From<CheckpointError>,
    {
        self.check_writable(path)?;
        let header = self.header(None);
        let whole = self.lengths.map(|l| 0..l);
        write_atomically(path, |f, hash| {
            let header_len = (header.len() as u64).to_le_bytes();
            for part in [&MAGIC[..], &header_len, &header] {
                put(f, hash, part, path)?;
            }
            write_words(f, hash, path, &whole, block)
        })?;
        remove_stale_parts(path, &[]);
        Ok(())
    }

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

    /// Reads and verifies a checkpoint (the header's consistency, the checksum over the whole
    /// file, and over every part of a checkpoint of several ranks) without keeping the arrays.
    pub fn read(path: &Path) -> Result<Self, CheckpointError> {
        Self::read_arrays(path, |_| Ok(()), |_, _, _| Ok(()))
    }

    /// Reads a checkpoint: `accept` sees the header once its values are consistent (and may
    /// refuse it), then `sink(array, start, words)` receives every array in order,
    /// [`BLOCK_WORDS`] at a time at most. The checksum is known only at the end: on a mismatch the
    /// words already handed to `sink` are not a state to continue from, and the error says the
    /// file is corrupt. When `accept` refuses, the rest of the file is still checked (without
    /// `sink`), so that a damaged header is reported as damage rather than as the refusal it
    /// caused.
    pub fn read_arrays<E>(
        path: &Path,
        accept: impl FnOnce(&Checkpoint) -> Result<(), E>,
        sink: impl FnMut(usize, usize, &[f32]) -> Result<(), E>,
    ) -> Result<Self, E>
    where
        E: From<CheckpointError>,
    {
        Self::read_share(path, None, accept, sink)
    }

    /// [`read_arrays`](Self::read_arrays) of the words `share[a]` of each array `a` only (all
    /// with `None`): what one MPI rank keeps. `sink` sees only words of the share. Of a
    /// checkpoint of several ranks, only the parts that hold words of the share are read (and
    /// verified); of a single file, all of it is read, for its one checksum.
    pub fn read_share<E>(
        path: &Path,
        share: Option<&[Range<usize>; ARRAY_COUNT]>,
        accept: impl FnOnce(&Checkpoint) -> Result<(), E>,
        mut sink: impl FnMut(usize, usize, &[f32]) -> Result<(), E>,
    ) -> Result<Self, E>
    where
        E: From<CheckpointError>,
    {
        let corrupt = |reason: String| CheckpointError::Corrupt {
            path: path.into(),
            reason,
        };
        let file = File::open(path).map_err(|e| read_error(path, e))?;
        let file_len = file.metadata().map_err(|e| read_error(path, e))?.len();
        let mut f = BufReader::new(file);
        let mut start = [0u8; 16];
        exact(&mut f, &mut start, path, "header")?;
        if &start[..8] != MAGIC {
            return Err(corrupt("missing the LAMINOCK header".into()).into());
        }
        let header_len = u64::from_le_bytes(start[8..16].try_into().expect("8 bytes"));
        if header_len > MAX_HEADER_BYTES || 16 + header_len > file_len {
            return Err(corrupt(format!(
                "a header of {header_len} bytes in a file of {file_len}"
            ))
            .into());
        }
        let mut header = vec![0u8; header_len as usize];
        exact(&mut f, &mut header, path, "header")?;
        let mut hash = fnv1a_continue(fnv1a_continue(FNV_OFFSET, &start), &header);
        let version = serde_json::from_slice::<HeaderVersion>(&header)
            .map_err(|e| corrupt(format!("header: {e}")))?
            .version;
        if version < OLDEST_CHECKED_VERSION {
            return Err(corrupt(format!(
                "format version {version}, written by an older lamino whose checksum did not \
                 cover the header, so its iteration count, penalty and sizes cannot be trusted; \
                 start the reconstruction again without resuming (without --resume)"
            ))
            .into());
        }
        if version == LAST_ANGLE_MAJOR_VERSION {
            return Err(corrupt(format!(
                "format version {version}, written by an older lamino that stored A u by angle, \
                 where this one keeps it by detector row; finish the run with the lamino that \
                 wrote it, or start the reconstruction again without resuming (without --resume)"
            ))
            .into());
        }
        if version == LAST_Z_MAJOR_VERSION {
            return Err(corrupt(format!(
                "format version {version}, written by an older lamino that stored the volume by \
                 z slice, where this one keeps it by y row; finish the run with the lamino that \
                 wrote it, or start the reconstruction again without resuming (without --resume)"
            ))
            .into());
        }
        if version == LAST_ABSOLUTE_ALPHA_VERSION {
            return Err(corrupt(format!(
                "format version {version}, written by an older lamino whose alpha was the \
                 absolute TV weight, where this one's is relative to the data's scale; finish the \
                 run with the lamino that wrote it, or start the reconstruction again without \
                 resuming (without --resume)"
            ))
            .into());
        }
        if version < OLDEST_VERSION {
            return Err(corrupt(format!(
                "format version {version}, written by an older lamino whose operator gridded \
                 with a Gaussian kernel: the checkpoint's A u and residual belong to that \
                 operator, not to this one's; start the reconstruction again without resuming \
                 (without --resume)"
            ))
            .into());
        }
        if version > VERSION {
            return Err(corrupt(format!(
                "format version {version}, written by a newer lamino (this one reads {VERSION})"
            ))
            .into());
        }
        let header: Header =
            serde_json::from_slice(&header).map_err(|e| corrupt(format!("header: {e}")))?;
        if header.parts.is_some() {
            // A manifest is its header and checksum: verified before any value is trusted.
            if file_len != 16 + header_len + 8 {
                return Err(corrupt(format!(
                    "{file_len} bytes, but a manifest of a {header_len}-byte header has {}",
                    16 + header_len + 8
                ))
                .into());
            }
            check_trailer(&mut f, hash, path, None)?;
        }
        if header.geometry.fingerprint() != header.geometry_fingerprint {
            return Err(corrupt(format!(
                "geometry_fingerprint = {}: the geometry's is {}",
                header.geometry_fingerprint,
                header.geometry.fingerprint()
            ))
            .into());
        }
        let checkpoint = Checkpoint {
            iteration: header.iteration,
            rho: f64::from_bits(header.rho_bits),
            geometry: header.geometry,
            params: header.params,
            data_hash: header.data_hash,
            last_report: header.last_report,
            lengths: header.lengths,
        };
        if let Some(reason) = checkpoint.inconsistency() {
            return Err(corrupt(reason).into());
        }
        // The lengths now match a valid geometry; the sum is still formed with checks.
        let payload = checkpoint
            .lengths
            .iter()
            .try_fold(0u64, |sum, &l| (l as u64).checked_mul(4)?.checked_add(sum))
            .ok_or_else(|| corrupt("array lengths overflow".into()))?;
        let whole = checkpoint.lengths.map(|l| 0..l);
        let share = share.unwrap_or(&whole);
        let mut buffers = Buffers::new(&checkpoint.lengths);
        if let Some(parts) = header.parts {
            if let Some(reason) = parts_inconsistency(&parts, &checkpoint.lengths) {
                return Err(corrupt(reason).into());
            }
            accept(&checkpoint)?;
            read_parts(path, &parts, share, &mut buffers, &mut sink)?;
            return Ok(checkpoint);
        }
        let expected = payload
            .checked_add(16 + header_len + 8)
            .ok_or_else(|| corrupt("array lengths overflow".into()))?;
        if file_len != expected {
            return Err(corrupt(format!(
                "{file_len} bytes, but its header describes {expected}"
            ))
            .into());
        }
        let refused = accept(&checkpoint).err();
        for (array, &len) in checkpoint.lengths.iter().enumerate() {
            let wanted = (refused.is_none()).then(|| share[array].clone());
            buffers.section(&mut f, &mut hash, path, array, 0..len, wanted, &mut sink)?;
        }
        check_trailer(&mut f, hash, path, None)?;
        match refused {
            Some(e) => Err(e),
            None => Ok(checkpoint),
        }
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
fn parts_inconsistency(parts: &[Part], lengths: &[usize; ARRAY_COUNT]) -> Option<String> {
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
fn read_parts<E: From<CheckpointError>>(
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

/// The words two ranges share, if any.
fn overlap(a: &Range<usize>, b: &Range<usize>) -> Option<Range<usize>> {
    let r = a.start.max(b.start)..a.end.min(b.end);
    (r.start < r.end).then_some(r)
}

/// The buffers a reader moves blocks through.
struct Buffers {
    bytes: Vec<u8>,
    words: Vec<f32>,
}

impl Buffers {
    fn new(lengths: &[usize; ARRAY_COUNT]) -> Self {
        let most = BLOCK_WORDS.min(lengths.iter().copied().max().unwrap_or(0));
        Self {
            bytes: vec![0u8; 4 * most],
            words: Vec::with_capacity(most),
        }
    }

    /// Reads words `words` of array `array` from `f` (the file `path`), [`BLOCK_WORDS`] at a
    /// time, into `hash`; hands the words of `wanted` to `sink` (none without it).
    #[allow(clippy::too_many_arguments)]
    fn section<E: From<CheckpointError>>(
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

fn read_error(path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError::Read {
        path: path.into(),
        reason: e.to_string(),
    }
}

/// Fills `buf` from `f` (the file `path`): a short read means a truncated file, not an I/O
/// failure.
fn exact(
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
fn check_trailer(
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
fn put(
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
fn write_words<E: From<CheckpointError>>(
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
fn write_atomically<E: From<CheckpointError>>(
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

/// Removes the part files (and half-written ones) of checkpoints at `path` other than `keep`:
/// those of the checkpoint `path` replaced, and any a killed run left. Best effort: a part that
/// stays only takes room.
fn remove_stale_parts(path: &Path, keep: &[String]) {
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

#[cfg(test)]
mod tests;
