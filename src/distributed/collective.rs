//! The processes of one reconstruction and what they tell each other, passed as a value: this
//! process alone ([`OneProcess`]) or MPI ranks ([`Ranks`](super::ranks::Ranks), feature `mpi`),
//! so that the solver, the preprocessing and the outputs are written once for both. A call
//! documented as collective is made by every process, in the same order; alone it returns at
//! once with what one process of a run of one would get.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use thiserror::Error;

use super::shares::chunk_planes;
use crate::array::Field;

/// Errors of starting the processes of a run.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// MPI could not be initialised although a launcher started this process.
    #[error(
        "this process was started by an MPI launcher ({0} is set), but MPI failed to initialise"
    )]
    Init(&'static str),
    /// The ranks use different numbers of devices.
    #[error("rank {rank} uses {devices} device(s), this rank {here}: every rank must use as many")]
    Devices {
        rank: usize,
        devices: usize,
        here: usize,
    },
}

/// What a process has sent to the others so far: bytes in all and of each registered array's
/// blocks, and the seconds spent in exchanges.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Traffic {
    pub bytes: u64,
    /// The bytes of each registered array's blocks, by its label, in registration order.
    pub by_array: Vec<(String, u64)>,
    /// Seconds in exchanges: packing, the MPI calls and the waits in them for the others.
    pub exchange_s: f64,
    /// Of those, the seconds of exchanges made while the devices computed a stage's later
    /// chunks.
    pub overlapped_s: f64,
}

/// A process's scratch files: what its arrays hold in them against the planes they keep there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScratchLedger {
    /// Arrays in scratch files.
    pub arrays: usize,
    /// Bytes of their scratch files on this process: the planes it keeps, each array's rounded
    /// out to whole pages (at most two more pages an array).
    pub file_bytes: u64,
    /// Bytes of the planes those arrays keep on this process.
    pub share_bytes: u64,
    /// Bytes of those arrays whole.
    pub whole_bytes: u64,
}

/// The processes of one reconstruction: their number, this one's index, the collective calls
/// between them and the homes of the arrays they share. Every process makes the collective
/// calls in the same order.
pub trait Collective: Send + Sync + std::fmt::Debug {
    /// This process's index (0 alone).
    fn rank(&self) -> usize;

    /// The number of processes (1 alone).
    fn size(&self) -> usize;

    /// This process's index among the processes on its node, as the launcher says (its rank
    /// where the launcher does not say).
    fn local_rank(&self) -> usize;

    /// Sets how many devices each process uses, `devices` this one's: every process must use
    /// as many (their devices share the process's planes). Collective.
    fn set_devices(&self, devices: usize) -> Result<(), ClusterError>;

    /// How many devices each process uses (1 until [`set_devices`](Self::set_devices)).
    fn devices(&self) -> usize;

    /// Every process's `part` of values, in rank order. Collective.
    fn all_gather(&self, part: Vec<f32>) -> Vec<Vec<f32>>;

    /// Every process's `part` of 64-bit words, in rank order. Collective.
    fn all_gather_words(&self, part: &[u64]) -> Vec<Vec<u64>>;

    /// `send[r]` to process r, for every r; returns what each process sent here, in rank
    /// order: for exchanges outside the arrays' homes (the sinograms of stripe removal, the
    /// volume's slices for the outputs). Collective.
    fn all_to_all_values(&self, send: Vec<Vec<f32>>) -> Vec<Vec<f32>>;

    /// Sends `values` to process `to` alone, which takes them with
    /// [`receive_values`](Self::receive_values): processes passing sums along, one after the
    /// other. May block until `to` takes them.
    fn send_values(&self, to: usize, values: &[f32]);

    /// What process `from` sent this one with [`send_values`](Self::send_values).
    fn receive_values(&self, from: usize) -> Vec<f32>;

    /// [`send_values`](Self::send_values) of 64-bit words (doubles as their bits).
    fn send_words(&self, to: usize, words: &[u64]);

    /// What process `from` sent this one with [`send_words`](Self::send_words).
    fn receive_words(&self, from: usize) -> Vec<u64>;

    /// The word range of `field` that process `rank` keeps: its registered home, or (an array
    /// not registered) the process's share of its planes.
    fn home_words(&self, field: &Field, rank: usize) -> Range<usize>;

    /// Adds an array with a home to the exchanges: `homes[r]` the planes process r keeps
    /// (every process registers the same arrays, with the same homes, in the same order).
    fn register(&self, field: &Field, homes: Vec<Range<usize>>);

    /// Lets go of the blocks every registered array fetched from other processes.
    fn release_fetched(&self);

    /// The bytes of `field` that a process's ledger of what it holds counts: under MPI ranks
    /// the array's resident pages (its planes and fetched ones not let go); alone none (its
    /// arrays are whole, as planned).
    fn ledger_bytes(&self, field: &Field) -> u64;

    /// What this process has sent to the others so far.
    fn traffic(&self) -> Traffic;

    /// This process's scratch files against the planes they keep.
    fn scratch_ledger(&self) -> ScratchLedger;

    /// Stops every process of the run with exit code `code`.
    fn abort(&self, code: i32) -> !;

    /// The value itself, through which the meetings of a team of MPI ranks find the ranks'
    /// exchanges (see `super::team`).
    #[doc(hidden)]
    fn as_any(&self) -> &dyn std::any::Any;

    /// The planes of `planes` that process `rank` keeps when a stage reads the array in chunks
    /// of `chunk` planes: those of its devices' shares of the chunks, so that the stage reads
    /// its chunks at home.
    fn chunk_home(&self, rank: usize, planes: usize, chunk: usize) -> Range<usize> {
        let d = self.devices();
        chunk_planes(rank * d..(rank + 1) * d, self.size() * d, planes, chunk)
    }

    /// The planes of `planes` that process `rank` keeps: the shares of its devices, together.
    fn home(&self, rank: usize, planes: usize) -> Range<usize> {
        self.chunk_home(rank, planes, 1)
    }

    /// Every process's [`chunk_home`](Self::chunk_home), in rank order.
    fn chunk_homes(&self, planes: usize, chunk: usize) -> Vec<Range<usize>> {
        (0..self.size())
            .map(|r| self.chunk_home(r, planes, chunk))
            .collect()
    }

    /// What every process sent this one, concatenated in rank order, where each sends at most
    /// one message `(rank, values)`: the slices at the boundaries of the processes' parts of an
    /// OME-Zarr volume that each writes in parallel (see [`crate::io::ZarrPart`]). Collective.
    fn send_to_one(&self, message: Option<(usize, Vec<f32>)>) -> Vec<f32> {
        let mut send = vec![Vec::new(); self.size()];
        if let Some((to, values)) = message {
            send[to] = values;
        }
        self.all_to_all_values(send).concat()
    }
}

/// After a collective step in which this process went on with nothing where it failed
/// (`failed`), so that no process waits forever for it: every process's verdict, this
/// process's own error, else `other(rank)` for the first process that failed. Collective.
pub fn agree<E>(
    collective: &dyn Collective,
    failed: Option<E>,
    other: impl FnOnce(usize) -> E,
) -> Result<(), E> {
    let all = collective.all_gather_words(&[u64::from(failed.is_some())]);
    if let Some(e) = failed {
        return Err(e);
    }
    match all.iter().position(|w| w[0] != 0) {
        Some(rank) => Err(other(rank)),
        None => Ok(()),
    }
}

/// The word range of the planes `planes` of planes of `plane_words` words.
pub(crate) fn words_of(planes: &Range<usize>, plane_words: usize) -> Range<usize> {
    planes.start * plane_words..planes.end * plane_words
}

/// This process alone: it keeps every plane, gathers only its own parts, and what it sends to
/// itself point to point it receives in order (nothing when nothing was sent).
#[derive(Debug)]
pub struct OneProcess {
    devices: AtomicUsize,
    values: Mutex<VecDeque<Vec<f32>>>,
    words: Mutex<VecDeque<Vec<u64>>>,
}

impl Default for OneProcess {
    fn default() -> Self {
        Self {
            devices: AtomicUsize::new(1),
            values: Mutex::default(),
            words: Mutex::default(),
        }
    }
}

impl OneProcess {
    /// This process alone, as a value to pass where a [`Collective`] is taken.
    pub fn shared() -> Arc<dyn Collective> {
        Arc::new(Self::default())
    }
}

impl Collective for OneProcess {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn local_rank(&self) -> usize {
        0
    }

    fn set_devices(&self, devices: usize) -> Result<(), ClusterError> {
        self.devices.store(devices, Ordering::Relaxed);
        Ok(())
    }

    fn devices(&self) -> usize {
        self.devices.load(Ordering::Relaxed)
    }

    fn all_gather(&self, part: Vec<f32>) -> Vec<Vec<f32>> {
        vec![part]
    }

    fn all_gather_words(&self, part: &[u64]) -> Vec<Vec<u64>> {
        vec![part.to_vec()]
    }

    fn all_to_all_values(&self, send: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        send
    }

    fn send_values(&self, _to: usize, values: &[f32]) {
        let mut sent = self.values.lock().unwrap_or_else(|e| e.into_inner());
        sent.push_back(values.to_vec());
    }

    fn receive_values(&self, _from: usize) -> Vec<f32> {
        let mut sent = self.values.lock().unwrap_or_else(|e| e.into_inner());
        sent.pop_front().unwrap_or_default()
    }

    fn send_words(&self, _to: usize, words: &[u64]) {
        let mut sent = self.words.lock().unwrap_or_else(|e| e.into_inner());
        sent.push_back(words.to_vec());
    }

    fn receive_words(&self, _from: usize) -> Vec<u64> {
        let mut sent = self.words.lock().unwrap_or_else(|e| e.into_inner());
        sent.pop_front().unwrap_or_default()
    }

    fn home_words(&self, field: &Field, rank: usize) -> Range<usize> {
        let layout = field.layout();
        words_of(&self.home(rank, layout.planes), layout.plane_words)
    }

    fn register(&self, _field: &Field, _homes: Vec<Range<usize>>) {}

    fn release_fetched(&self) {}

    fn ledger_bytes(&self, _field: &Field) -> u64 {
        0
    }

    fn traffic(&self) -> Traffic {
        Traffic::default()
    }

    fn scratch_ledger(&self) -> ScratchLedger {
        ScratchLedger::default()
    }

    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Environment variable that, set to `off` on any rank, makes every rank exchange between
/// stages only instead of sending a stage's blocks while it computes: to measure what the
/// overlap hides (`lamino bench scale --distributed`). The bits are the same either way.
pub const EXCHANGE_OVERLAP_ENV: &str = "LAMINO_EXCHANGE_OVERLAP";

/// Whether this lamino can run as MPI ranks (built with the `mpi` feature).
pub const RANKS_BUILT: bool = cfg!(feature = "mpi");

#[cfg(test)]
mod tests {
    use super::*;

    /// Alone, a process keeps every plane, gathers its own parts and receives what it sent
    /// itself, in order; a send to one comes back.
    #[test]
    fn one_process_is_a_run_of_one() {
        let one = OneProcess::default();
        assert_eq!((one.rank(), one.size()), (0, 1));
        assert_eq!(one.home(0, 10), 0..10);
        assert_eq!(one.chunk_homes(10, 4), vec![0..10]);
        assert_eq!(one.all_gather_words(&[3, 4]), vec![vec![3, 4]]);
        one.send_values(0, &[1.0, 2.0]);
        one.send_values(0, &[3.0]);
        assert_eq!(one.receive_values(0), vec![1.0, 2.0]);
        assert_eq!(one.receive_values(0), vec![3.0]);
        assert!(one.receive_values(0).is_empty());
        assert_eq!(one.send_to_one(Some((0, vec![5.0]))), vec![5.0]);
        let failed: Result<(), String> = agree(&one, Some("here".to_string()), |r| r.to_string());
        assert_eq!(failed, Err("here".to_string()));
        assert_eq!(agree::<String>(&one, None, |r| r.to_string()), Ok(()));
    }
}
