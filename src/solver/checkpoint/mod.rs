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
//!
//! Here: the format (magic, versions, header), the single file and reading either kind; `parts`
//! the MPI ranks' parts and the manifest that names them; `words` the arrays' words moved block
//! by block through the running hash, atomic writes, and the crash-safety tests' fault point.

use std::fs::File;
use std::io::BufReader;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

mod parts;
mod words;

pub use parts::Part;
use parts::{parts_inconsistency, read_parts, remove_stale_parts};
use words::{check_trailer, exact, put, read_error, write_atomically, write_words, Buffers};

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

#[cfg(test)]
mod tests;
