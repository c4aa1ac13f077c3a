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
//! arrays u, psi, lambda, grad u, A u as little-endian f32 in that order, and last the u64
//! FNV-1a hash of every byte before it (a trailer: it is known only once the arrays are written).
//!
//! What the checksum is for: FNV-1a is unkeyed, so it detects corruption (a bit flip, a torn or
//! truncated copy) and edits made without recomputing it, not someone who edits the file and
//! recomputes the hash. The consistency checks on the header narrow what such an edit can do
//! (an iteration count beyond the parameters' maximum, a penalty that is not positive, a report
//! of another iteration, arrays of another size), but a checkpoint is trusted as far as the
//! place it is kept is trusted.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::report::{report_values, IterationReport};
use crate::hash::{fnv1a_continue, FNV_OFFSET};
use crate::operator::Geometry;
use crate::params::AdmmParams;
use crate::plan::Array;

const MAGIC: &[u8; 8] = b"LAMINOCK";
/// Version 4: the checksum covers the whole file (magic, header length, header, arrays); up to
/// version 3 it covered the arrays only, so their headers cannot be trusted.
const VERSION: u32 = 4;
/// The arrays of a checkpoint, in file order.
pub const ARRAYS: [&str; 5] = ["u", "psi", "lambda", "grad u", "A u"];
/// The solver's arrays of [`ARRAYS`], whose layouts in the geometry give a checkpoint's lengths.
const ARRAY_LAYOUTS: [Array; 5] = [Array::U, Array::Psi, Array::Lambda, Array::GradU, Array::Au];
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
    pub lengths: [usize; 5],
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
    lengths: [usize; 5],
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
        let expected = ARRAY_LAYOUTS.map(|a| a.layout(&self.geometry).words());
        if self.lengths != expected {
            return Some(format!(
                "lengths = {:?}: the geometry's arrays {ARRAYS:?} have {expected:?} words",
                self.lengths
            ));
        }
        None
    }

    /// Writes the checkpoint to `path` atomically. `block(array, start, len)` yields words
    /// `[start, start + len)` of array `array` (an index into [`ARRAYS`]); it is asked for each
    /// array in order, [`BLOCK_WORDS`] at a time. A state that would not read back (see the
    /// module's consistency checks) is refused before anything is written.
    pub fn write<E>(
        &self,
        path: &Path,
        mut block: impl FnMut(usize, usize, usize) -> Result<Vec<f32>, E>,
    ) -> Result<(), E>
    where
        E: From<CheckpointError>,
    {
        let err = |e: std::io::Error| CheckpointError::Write {
            path: path.into(),
            reason: e.to_string(),
        };
        if let Some(reason) = self.inconsistency() {
            return Err(CheckpointError::Write {
                path: path.into(),
                reason: format!("the solver state is inconsistent: {reason}"),
            }
            .into());
        }
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
        };
        let header = serde_json::to_vec(&header).expect("the header serialises");
        let total: usize = self.lengths.iter().sum();
        let tmp = path.with_extension("partial");
        let result = (|| -> Result<(), E> {
            let mut f = BufWriter::new(File::create(&tmp).map_err(err)?);
            let header_len = (header.len() as u64).to_le_bytes();
            let mut hash = FNV_OFFSET;
            for part in [&MAGIC[..], &header_len, &header] {
                hash = fnv1a_continue(hash, part);
                f.write_all(part).map_err(err)?;
            }
            let mut written = 0;
            let mut halfway = false;
            for (array, &len) in self.lengths.iter().enumerate() {
                let mut start = 0;
                while start < len {
                    let n = BLOCK_WORDS.min(len - start);
                    let words = block(array, start, n)?;
                    if words.len() != n {
                        return Err(CheckpointError::Write {
                            path: path.into(),
                            reason: format!(
                                "{} words of {} from {start} came back as {}",
                                n,
                                ARRAYS[array],
                                words.len()
                            ),
                        }
                        .into());
                    }
                    let bytes: &[u8] = bytemuck::cast_slice(&words);
                    hash = fnv1a_continue(hash, bytes);
                    f.write_all(bytes).map_err(err)?;
                    start += n;
                    written += n;
                    if !halfway && 2 * written >= total {
                        halfway = true;
                        f.flush().map_err(err)?;
                        fault::abort_if_asked();
                    }
                }
            }
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

    /// Reads and verifies a checkpoint (the header's consistency, the checksum over the whole
    /// file) without keeping the arrays.
    pub fn read(path: &Path) -> Result<Self, CheckpointError> {
        Self::read_arrays(path, |_| Ok(()), |_, _, _| Ok(()))
    }

    /// Reads a checkpoint: `accept` sees the header once its values are consistent (and may
    /// refuse it), then `sink(array, start, words)` receives every array in order,
    /// [`BLOCK_WORDS`] at a time. The checksum is known only at the end: on a mismatch the words
    /// already handed to `sink` are not a state to continue from, and the error says the file is
    /// corrupt. When `accept` refuses, the rest of the file is still checked (without `sink`), so
    /// that a damaged header is reported as damage rather than as the refusal it caused.
    pub fn read_arrays<E>(
        path: &Path,
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
        let read_err = |e: std::io::Error| CheckpointError::Read {
            path: path.into(),
            reason: e.to_string(),
        };
        let file = File::open(path).map_err(read_err)?;
        let file_len = file.metadata().map_err(read_err)?.len();
        let mut f = BufReader::new(file);
        // Short reads of the fixed parts mean a truncated file, not an I/O failure.
        let mut exact = |buf: &mut [u8], what: &str| {
            f.read_exact(buf).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => corrupt(format!("truncated {what}")),
                _ => read_err(e),
            })
        };
        let mut start = [0u8; 16];
        exact(&mut start, "header")?;
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
        exact(&mut header, "header")?;
        let mut hash = fnv1a_continue(fnv1a_continue(FNV_OFFSET, &start), &header);
        let version = serde_json::from_slice::<HeaderVersion>(&header)
            .map_err(|e| corrupt(format!("header: {e}")))?
            .version;
        if version < VERSION {
            return Err(corrupt(format!(
                "format version {version}, written by an older lamino whose checksum did not \
                 cover the header, so its iteration count, penalty and sizes cannot be trusted; \
                 start the reconstruction again without resuming (without --resume)"
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
        let expected = checkpoint
            .lengths
            .iter()
            .try_fold(0u64, |sum, &l| (l as u64).checked_mul(4)?.checked_add(sum))
            .and_then(|payload| payload.checked_add(16 + header_len + 8))
            .ok_or_else(|| corrupt("array lengths overflow".into()))?;
        if file_len != expected {
            return Err(corrupt(format!(
                "{file_len} bytes, but its header describes {expected}"
            ))
            .into());
        }
        let refused = accept(&checkpoint).err();
        let mut bytes =
            vec![0u8; 4 * BLOCK_WORDS.min(checkpoint.lengths.iter().copied().max().unwrap_or(0))];
        let mut words: Vec<f32> = Vec::with_capacity(bytes.len() / 4);
        for (array, &len) in checkpoint.lengths.iter().enumerate() {
            let mut start = 0;
            while start < len {
                let n = BLOCK_WORDS.min(len - start);
                let block = &mut bytes[..4 * n];
                exact(block, ARRAYS[array])?;
                hash = fnv1a_continue(hash, block);
                if refused.is_none() {
                    words.clear();
                    words.extend(
                        block
                            .chunks_exact(4)
                            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                    );
                    sink(array, start, &words)?;
                }
                start += n;
            }
        }
        let mut trailer = [0u8; 8];
        exact(&mut trailer, "checksum")?;
        if u64::from_le_bytes(trailer) != hash {
            return Err(corrupt(
                "checksum mismatch: the file was damaged or edited after it was written".into(),
            )
            .into());
        }
        match refused {
            Some(e) => Err(e),
            None => Ok(checkpoint),
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
