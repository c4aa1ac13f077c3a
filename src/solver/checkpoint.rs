//! Solver checkpoints: the complete state, written atomically (temporary file, flush, rename), so
//! a killed process leaves either the previous checkpoint or the new one, never a torn file; and
//! read back with a checksum, so a damaged file is refused rather than resumed from.
//!
//! Layout: the 8-byte magic `LAMINOCK`, a little-endian u64 header length, a JSON header, then the
//! arrays u, psi, lambda, grad u, A u as little-endian f32 in that order.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::admm::IterationReport;
use super::params::AdmmParams;
use crate::hash::fnv1a;
use crate::operator::Geometry;

const MAGIC: &[u8; 8] = b"LAMINOCK";
const VERSION: u32 = 2;

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

/// The state of an ADMM reconstruction after `iteration` outer iterations.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub iteration: usize,
    pub rho: f64,
    pub geometry: Geometry,
    pub params: AdmmParams,
    /// FNV-1a hash of the data the reconstruction runs on.
    pub data_hash: u64,
    pub u: Vec<f32>,
    pub psi: Vec<f32>,
    pub lambda: Vec<f32>,
    pub grad_u: Vec<f32>,
    pub au: Vec<f32>,
    /// The report of iteration `iteration - 1` (the convergence test of a resumed run needs it).
    pub last_report: Option<IterationReport>,
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
    payload_hash: u64,
}

impl Checkpoint {
    fn arrays(&self) -> [&Vec<f32>; 5] {
        [&self.u, &self.psi, &self.lambda, &self.grad_u, &self.au]
    }

    /// Writes the checkpoint to `path` atomically.
    pub fn write(&self, path: &Path) -> Result<(), CheckpointError> {
        let err = |e: std::io::Error| CheckpointError::Write {
            path: path.into(),
            reason: e.to_string(),
        };
        let mut payload = Vec::with_capacity(self.arrays().iter().map(|a| a.len() * 4).sum());
        for a in self.arrays() {
            payload.extend_from_slice(bytemuck::cast_slice(a));
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
            lengths: self.arrays().map(Vec::len),
            payload_hash: fnv1a(&payload),
        };
        let header = serde_json::to_vec(&header).expect("the header serialises");
        let tmp = path.with_extension("partial");
        {
            let mut f = File::create(&tmp).map_err(err)?;
            f.write_all(MAGIC).map_err(err)?;
            f.write_all(&(header.len() as u64).to_le_bytes())
                .map_err(err)?;
            f.write_all(&header).map_err(err)?;
            let (first, second) = payload.split_at(payload.len() / 2);
            f.write_all(first).map_err(err)?;
            fault::abort_if_asked();
            f.write_all(second).map_err(err)?;
            f.sync_all().map_err(err)?;
        }
        std::fs::rename(&tmp, path).map_err(err)
    }

    /// Reads and verifies a checkpoint.
    pub fn read(path: &Path) -> Result<Self, CheckpointError> {
        let corrupt = |reason: &str| CheckpointError::Corrupt {
            path: path.into(),
            reason: reason.into(),
        };
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| CheckpointError::Read {
                path: path.into(),
                reason: e.to_string(),
            })?;
        if bytes.len() < 16 || &bytes[..8] != MAGIC {
            return Err(corrupt("missing the LAMINOCK header"));
        }
        let header_len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")) as usize;
        let header_end = 16usize
            .checked_add(header_len)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| corrupt("truncated header"))?;
        let header: Header =
            serde_json::from_slice(&bytes[16..header_end]).map_err(|e| corrupt(&e.to_string()))?;
        if header.version != VERSION {
            return Err(corrupt(&format!(
                "format version {} (this lamino reads {VERSION})",
                header.version
            )));
        }
        if header.geometry.fingerprint() != header.geometry_fingerprint {
            return Err(corrupt("the geometry does not match its fingerprint"));
        }
        let payload = &bytes[header_end..];
        // Lengths come from the file: add them up with checks before trusting them.
        let expected = header
            .lengths
            .iter()
            .try_fold(0usize, |sum, &l| l.checked_mul(4)?.checked_add(sum))
            .ok_or_else(|| corrupt("array lengths overflow"))?;
        if payload.len() != expected {
            return Err(corrupt(&format!(
                "{} payload bytes, expected {expected}",
                payload.len()
            )));
        }
        if fnv1a(payload) != header.payload_hash {
            return Err(corrupt("checksum mismatch"));
        }
        let mut arrays = Vec::new();
        let mut at = 0;
        for len in header.lengths {
            let chunk = &payload[at..at + 4 * len];
            arrays.push(
                chunk
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect::<Vec<f32>>(),
            );
            at += 4 * len;
        }
        let [u, psi, lambda, grad_u, au]: [Vec<f32>; 5] = arrays.try_into().expect("five arrays");
        Ok(Self {
            iteration: header.iteration,
            rho: f64::from_bits(header.rho_bits),
            geometry: header.geometry,
            params: header.params,
            data_hash: header.data_hash,
            u,
            psi,
            lambda,
            grad_u,
            au,
            last_report: header.last_report,
        })
    }
}

/// A fault-injection point for the crash-safety tests: with `LAMINO_FAULT_ABORT_CHECKPOINT=N`
/// in the environment, the process aborts (as a SIGKILL would stop it: no destructors, no
/// cleanup) in the middle of its N-th checkpoint write, half of the payload on disk.
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

    fn sample() -> Checkpoint {
        Checkpoint {
            iteration: 3,
            rho: 0.25,
            geometry: Geometry::cube(4, 2, 1.2),
            params: AdmmParams::default(),
            data_hash: 99,
            u: vec![1.0; 4],
            psi: vec![2.0; 12],
            lambda: vec![-3.5; 12],
            grad_u: vec![0.5; 12],
            au: vec![7.0; 6],
            last_report: None,
        }
    }

    #[test]
    fn round_trip_and_damage_detection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.ckpt");
        let c = sample();
        c.write(&path).unwrap();
        assert_eq!(Checkpoint::read(&path).unwrap(), c);
        assert!(!path.with_extension("partial").exists());
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            Checkpoint::read(&path),
            Err(CheckpointError::Corrupt { .. })
        ));
        std::fs::write(&path, &bytes[..bytes.len() - 8]).unwrap();
        assert!(matches!(
            Checkpoint::read(&path),
            Err(CheckpointError::Corrupt { .. })
        ));
        std::fs::write(&path, b"junk").unwrap();
        assert!(matches!(
            Checkpoint::read(&path),
            Err(CheckpointError::Corrupt { .. })
        ));
    }
}
