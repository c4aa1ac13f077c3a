//! Solver checkpoints: the complete state, written atomically (temporary file, flush, rename), so
//! a killed process leaves either the previous checkpoint or the new one, never a torn file; and
//! read back with a checksum, so a damaged file is refused rather than resumed from.
//!
//! The arrays are written and read a block at a time, never whole: a checkpoint of a volume
//! larger than host memory (streaming mode, arrays in scratch files) passes through a buffer of
//! [`BLOCK_WORDS`]. The file does not record where the arrays lived, so a checkpoint of an
//! in-core run resumes in streaming mode and the other way round.
//!
//! Layout: the 8-byte magic `LAMINOCK`, a little-endian u64 header length, a JSON header, the
//! arrays u, psi, lambda, grad u, A u as little-endian f32 in that order, and last the u64
//! FNV-1a hash of those array bytes (a trailer: it is known only once the arrays are written).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::admm::IterationReport;
use super::params::AdmmParams;
use crate::hash::{fnv1a_continue, FNV_OFFSET};
use crate::operator::Geometry;

const MAGIC: &[u8; 8] = b"LAMINOCK";
const VERSION: u32 = 3;
/// The arrays of a checkpoint, in file order.
pub const ARRAYS: [&str; 5] = ["u", "psi", "lambda", "grad u", "A u"];
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

impl Checkpoint {
    /// Writes the checkpoint to `path` atomically. `block(array, start, len)` yields words
    /// `[start, start + len)` of array `array` (an index into [`ARRAYS`]); it is asked for each
    /// array in order, [`BLOCK_WORDS`] at a time.
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
            f.write_all(MAGIC).map_err(err)?;
            f.write_all(&(header.len() as u64).to_le_bytes())
                .map_err(err)?;
            f.write_all(&header).map_err(err)?;
            let mut hash = FNV_OFFSET;
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

    /// Reads and verifies a checkpoint (the checksum over all its arrays) without keeping the
    /// arrays.
    pub fn read(path: &Path) -> Result<Self, CheckpointError> {
        Self::read_arrays(path, |_| Ok(()), |_, _, _| Ok(()))
    }

    /// Reads a checkpoint: `accept` sees the header first (and may refuse it), then `sink(array,
    /// start, words)` receives every array in order, [`BLOCK_WORDS`] at a time. The checksum is
    /// known only at the end: on a mismatch the words already handed to `sink` are not a state
    /// to continue from, and the error says the file is corrupt.
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
        let header: Header = serde_json::from_slice(&header).map_err(|e| corrupt(e.to_string()))?;
        if header.version != VERSION {
            return Err(corrupt(format!(
                "format version {} (this lamino reads {VERSION})",
                header.version
            ))
            .into());
        }
        if header.geometry.fingerprint() != header.geometry_fingerprint {
            return Err(corrupt("the geometry does not match its fingerprint".into()).into());
        }
        // Lengths come from the file: add them up with checks before trusting them.
        let expected = header
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
        let checkpoint = Checkpoint {
            iteration: header.iteration,
            rho: f64::from_bits(header.rho_bits),
            geometry: header.geometry,
            params: header.params,
            data_hash: header.data_hash,
            last_report: header.last_report,
            lengths: header.lengths,
        };
        accept(&checkpoint)?;
        let mut hash = FNV_OFFSET;
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
                words.clear();
                words.extend(
                    block
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
                sink(array, start, &words)?;
                start += n;
            }
        }
        let mut trailer = [0u8; 8];
        exact(&mut trailer, "checksum")?;
        if u64::from_le_bytes(trailer) != hash {
            return Err(corrupt("checksum mismatch".into()).into());
        }
        Ok(checkpoint)
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
mod tests {
    use super::*;

    fn sample() -> (Checkpoint, [Vec<f32>; 5]) {
        let arrays = [
            vec![1.0; 4],
            (0..12).map(|i| i as f32).collect(),
            vec![-3.5; 12],
            vec![0.5; 12],
            vec![7.0; 6],
        ];
        let c = Checkpoint {
            iteration: 3,
            rho: 0.25,
            geometry: Geometry::cube(4, 2, 1.2),
            params: AdmmParams::default(),
            data_hash: 99,
            last_report: None,
            lengths: arrays.each_ref().map(Vec::len),
        };
        (c, arrays)
    }

    fn write(path: &Path, c: &Checkpoint, arrays: &[Vec<f32>; 5]) {
        c.write(path, |a, start, len| {
            Ok::<_, CheckpointError>(arrays[a][start..start + len].to_vec())
        })
        .unwrap();
    }

    #[test]
    fn round_trip_and_damage_detection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.ckpt");
        let (c, arrays) = sample();
        write(&path, &c, &arrays);
        let mut back: [Vec<f32>; 5] = c.lengths.map(|l| vec![f32::NAN; l]);
        let read = Checkpoint::read_arrays(
            &path,
            |_| Ok::<_, CheckpointError>(()),
            |a, start, words| {
                back[a][start..start + words.len()].copy_from_slice(words);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(read, c);
        assert_eq!(back, arrays);
        assert!(!path.with_extension("partial").exists());
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 9;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let damaged = Checkpoint::read(&path).unwrap_err();
        assert!(
            matches!(damaged, CheckpointError::Corrupt { ref reason, .. } if reason.contains("checksum")),
            "{damaged}"
        );
        for cut in [bytes.len() - 8, bytes.len() / 2, 20, 3] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            assert!(
                matches!(
                    Checkpoint::read(&path),
                    Err(CheckpointError::Corrupt { .. })
                ),
                "cut at {cut}"
            );
        }
        std::fs::write(&path, b"junk").unwrap();
        assert!(matches!(
            Checkpoint::read(&path),
            Err(CheckpointError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_failed_write_leaves_the_previous_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.ckpt");
        let (c, arrays) = sample();
        write(&path, &c, &arrays);
        let before = std::fs::read(&path).unwrap();
        let mut later = c.clone();
        later.iteration = 4;
        let err = later
            .write(&path, |a, start, len| {
                if a == 3 {
                    Err(CheckpointError::Write {
                        path: "device".into(),
                        reason: "lost".into(),
                    })
                } else {
                    Ok(arrays[a][start..start + len].to_vec())
                }
            })
            .unwrap_err();
        assert!(err.to_string().contains("lost"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert!(!path.with_extension("partial").exists());
    }
}
