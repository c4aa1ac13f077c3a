//! MPI ranks sharing one reconstruction (feature `mpi`): `mpirun -n K lamino reconstruct ...`.
//!
//! Every rank runs the solver of [`crate::solver::AdmmTeam`] with its devices as members of one
//! team of every rank's devices: each computes its share of each stage's chunks and of each
//! vector kernel's planes, exactly as a device of a multi-device run does, so the bits do not
//! depend on K. What differs is memory: a rank keeps only its **home**, 1/K of the planes of
//! every array (its devices' shares together); the other planes of its arrays take memory only
//! while they hold what a stage needs.
//!
//! At each point where a device of an in-process team meets the others, the ranks exchange
//! instead, in two all-to-all rounds (`MPI_Alltoallv`): first every block a rank downloaded
//! outside its home goes home, then every rank receives, from their homes, the blocks its next
//! stage reads beyond its own planes. Reductions gather every rank's plane sums (combined in
//! plane order by each rank alike). The exchanges are collective, so every rank passes the same
//! sequence of them; a rank that fails calls `MPI_Abort`, which stops every rank.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use mpi::Count;
use thiserror::Error;

use super::shares::chunk_planes;
use crate::array::{BlockView, Field};

/// Environment variables that MPI launchers set (Open MPI's mpirun, PMI and PMIx, as srun uses):
/// with none of them, lamino runs as one process without initialising MPI.
pub const LAUNCHER_ENV: [&str; 3] = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"];

/// Environment variables that give a rank's index among the ranks on its node.
const LOCAL_RANK_ENV: [&str; 3] = [
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
];

/// Elements one all-to-all round sends to one rank at most (MPI counts are 32-bit).
const ROUND_ELEMENTS: u64 = 1 << 26;

/// Errors of starting MPI.
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

/// The MPI library's handles, used from one thread at a time (MPI is initialised for that).
struct Mpi {
    world: SimpleCommunicator,
    _universe: mpi::environment::Universe,
}

// Safety: MPI is initialised with at least `Threading::Serialized` where the library allows
// it, and every call goes through the mutex that holds these handles, so no two threads call
// MPI at once; the handles themselves are plain identifiers.
unsafe impl Send for Mpi {}

/// This process's place among the ranks of one reconstruction.
pub struct Ranks {
    mpi: Mutex<Mpi>,
    rank: usize,
    size: usize,
    /// The arrays with a home, in the order every rank registers them.
    fields: Mutex<Vec<Owned>>,
    bytes_sent: AtomicU64,
    /// Nanoseconds spent holding MPI: packing and unpacking the exchanged words and the MPI
    /// calls, waits for the other ranks included.
    exchange_ns: AtomicU64,
    /// Of those, the bytes of each registered array's words sent by the exchanges, in
    /// registration order.
    array_bytes_sent: Mutex<Vec<u64>>,
    /// Devices of each rank (the same on every rank).
    devices: AtomicUsize,
}

/// The MPI handles while a call holds them, timing how long (see [`Ranks::lock_mpi`]).
struct HeldMpi<'a> {
    mpi: std::sync::MutexGuard<'a, Mpi>,
    since: std::time::Instant,
    total: &'a AtomicU64,
}

impl std::ops::Deref for HeldMpi<'_> {
    type Target = Mpi;

    fn deref(&self) -> &Mpi {
        &self.mpi
    }
}

impl Drop for HeldMpi<'_> {
    fn drop(&mut self) {
        let ns = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.total.fetch_add(ns, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Ranks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} of {}", self.rank, self.size)
    }
}

impl Ranks {
    /// The ranks of this run when an MPI launcher started more than one; `None` when no
    /// launcher did (or it started one process).
    pub fn from_launcher() -> Result<Option<Arc<Self>>, ClusterError> {
        let Some(var) = LAUNCHER_ENV
            .into_iter()
            .find(|v| std::env::var_os(v).is_some())
        else {
            return Ok(None);
        };
        let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .ok_or(ClusterError::Init(var))?;
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        if size == 1 {
            return Ok(None);
        }
        Ok(Some(Arc::new(Self {
            mpi: Mutex::new(Mpi {
                world,
                _universe: universe,
            }),
            rank,
            size,
            fields: Mutex::default(),
            bytes_sent: AtomicU64::new(0),
            exchange_ns: AtomicU64::new(0),
            array_bytes_sent: Mutex::default(),
            devices: AtomicUsize::new(1),
        })))
    }

    /// This rank's index.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// This rank's index among the ranks on its node, as the launcher says.
    pub fn local_rank() -> Option<usize> {
        LOCAL_RANK_ENV
            .into_iter()
            .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
    }

    /// Bytes this rank sent to other ranks so far.
    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::Relaxed)
    }

    /// Seconds this rank has spent in exchanges (and other calls that involve other ranks):
    /// packing, the MPI calls and the waits in them for the other ranks. Nothing overlaps them
    /// with computation.
    pub fn exchange_s(&self) -> f64 {
        self.exchange_ns.load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// The MPI handles, held while the returned guard lives; the time it is held counts as
    /// exchange time ([`exchange_s`](Self::exchange_s)).
    fn lock_mpi(&self) -> HeldMpi<'_> {
        HeldMpi {
            mpi: self.mpi.lock().expect("MPI poisoned"),
            since: std::time::Instant::now(),
            total: &self.exchange_ns,
        }
    }

    /// Stops every rank of the run (`MPI_Abort`).
    pub fn abort(&self, code: i32) -> ! {
        let mpi = self.mpi.lock().unwrap_or_else(|e| e.into_inner());
        mpi.world.abort(code)
    }

    /// Sets how many devices each rank uses, `devices` this rank's: every rank must use as many
    /// (their devices share the rank's planes). Collective.
    pub fn set_devices(&self, devices: usize) -> Result<(), ClusterError> {
        let all = self.all_gather_words(&[devices as u64]);
        if let Some((rank, d)) = all.iter().enumerate().find(|(_, d)| d[0] != devices as u64) {
            return Err(ClusterError::Devices {
                rank,
                devices: d[0] as usize,
                here: devices,
            });
        }
        self.devices.store(devices, Ordering::Relaxed);
        Ok(())
    }

    /// How many devices each rank uses.
    pub fn devices(&self) -> usize {
        self.devices.load(Ordering::Relaxed)
    }

    /// The planes of `planes` that rank `rank` keeps: the shares of its devices, together.
    pub fn home(&self, rank: usize, planes: usize) -> Range<usize> {
        self.chunk_home(rank, planes, 1)
    }

    /// The planes of `planes` that rank `rank` keeps when a stage reads the array in chunks of
    /// `chunk` planes: those of its devices' shares of the chunks, so that the stage reads its
    /// chunks at home.
    pub fn chunk_home(&self, rank: usize, planes: usize, chunk: usize) -> Range<usize> {
        let d = self.devices();
        chunk_planes(rank * d..(rank + 1) * d, self.size * d, planes, chunk)
    }

    /// Every rank's [`chunk_home`](Self::chunk_home), in rank order.
    pub(crate) fn chunk_homes(&self, planes: usize, chunk: usize) -> Vec<Range<usize>> {
        (0..self.size)
            .map(|r| self.chunk_home(r, planes, chunk))
            .collect()
    }

    /// Adds an array with a home to the exchanges: `homes[r]` the planes rank r keeps (every
    /// rank registers the same arrays, with the same homes, in the same order).
    pub(crate) fn register(&self, field: &Field, homes: Vec<Range<usize>>) {
        assert_eq!(homes.len(), self.size, "a home for every rank");
        self.fields.lock().expect("fields poisoned").push(Owned {
            field: field.clone(),
            homes,
        });
        self.array_bytes_sent
            .lock()
            .expect("bytes poisoned")
            .push(0);
    }

    /// Bytes of each registered array's words this rank sent so far, by the array's label, in
    /// registration order.
    pub fn array_bytes_sent(&self) -> Vec<(String, u64)> {
        let fields = self.fields.lock().expect("fields poisoned");
        let sent = self.array_bytes_sent.lock().expect("bytes poisoned");
        fields
            .iter()
            .zip(sent.iter())
            .map(|(o, &b)| (o.field.label().to_string(), b))
            .collect()
    }

    /// Counts `words` words of registered array number `index` as sent.
    fn count_array_words(&self, index: usize, words: usize) {
        self.array_bytes_sent.lock().expect("bytes poisoned")[index] += 4 * words as u64;
    }

    /// Every rank's `part`, in rank order.
    pub(crate) fn all_gather(&self, part: Vec<f32>) -> Vec<Vec<f32>> {
        let mpi = self.lock_mpi();
        let mut lengths = vec![0 as Count; self.size];
        mpi.world
            .all_gather_into(&(part.len() as Count), &mut lengths[..]);
        let displs = offsets(&lengths);
        let mut all = vec![0f32; lengths.iter().sum::<Count>() as usize];
        mpi.world.all_gather_varcount_into(
            &part[..],
            &mut PartitionMut::new(&mut all[..], &lengths[..], &displs[..]),
        );
        lengths
            .iter()
            .zip(&displs)
            .map(|(&l, &d)| all[d as usize..(d + l) as usize].to_vec())
            .collect()
    }

    /// Every rank's `part` of 64-bit words, in rank order (exact: each word as two f32 bit
    /// patterns).
    pub(crate) fn all_gather_words(&self, part: &[u64]) -> Vec<Vec<u64>> {
        let halves = |w: &u64| [f32::from_bits(*w as u32), f32::from_bits((*w >> 32) as u32)];
        self.all_gather(part.iter().flat_map(halves).collect())
            .iter()
            .map(|p| {
                p.chunks_exact(2)
                    .map(|h| u64::from(h[0].to_bits()) | (u64::from(h[1].to_bits()) << 32))
                    .collect()
            })
            .collect()
    }

    /// `send[r]` to rank r, for every r; returns what each rank sent here. Collective.
    fn all_to_all<T: Equivalence + Copy + Default>(&self, send: Vec<Vec<T>>) -> Vec<Vec<T>> {
        let mpi = self.lock_mpi();
        let counts: Vec<u64> = send.iter().map(|v| v.len() as u64).collect();
        let mut incoming = vec![0u64; self.size];
        mpi.world.all_to_all_into(&counts[..], &mut incoming[..]);
        let largest = counts.iter().chain(&incoming).copied().max().unwrap_or(0);
        let mut rounds = 0u64;
        mpi.world.all_reduce_into(
            &largest.div_ceil(ROUND_ELEMENTS),
            &mut rounds,
            SystemOperation::max(),
        );
        let mut received: Vec<Vec<T>> = incoming
            .iter()
            .map(|&c| Vec::with_capacity(c as usize))
            .collect();
        for round in 0..rounds {
            let lo = round * ROUND_ELEMENTS;
            let part = |c: u64| c.saturating_sub(lo).min(ROUND_ELEMENTS) as Count;
            let send_counts: Vec<Count> = counts.iter().map(|&c| part(c)).collect();
            let receive_counts: Vec<Count> = incoming.iter().map(|&c| part(c)).collect();
            let buffer: Vec<T> = send
                .iter()
                .zip(&send_counts)
                .flat_map(|(v, &n)| v[lo as usize..lo as usize + n as usize].iter().copied())
                .collect();
            let mut into = vec![T::default(); receive_counts.iter().sum::<Count>() as usize];
            let (send_displs, receive_displs) = (offsets(&send_counts), offsets(&receive_counts));
            mpi.world.all_to_all_varcount_into(
                &Partition::new(&buffer[..], &send_counts[..], &send_displs[..]),
                &mut PartitionMut::new(&mut into[..], &receive_counts[..], &receive_displs[..]),
            );
            for (r, (&d, &n)) in receive_displs.iter().zip(&receive_counts).enumerate() {
                received[r].extend_from_slice(&into[d as usize..(d + n) as usize]);
            }
        }
        let sent: u64 = counts.iter().sum();
        self.bytes_sent
            .fetch_add(sent * std::mem::size_of::<T>() as u64, Ordering::Relaxed);
        received
    }

    /// `send[r]` to rank r, for every r; returns what each rank sent here, in rank order: for
    /// exchanges outside the arrays' homes (the sinograms of stripe removal, the volume's slices
    /// for the outputs). Collective.
    pub(crate) fn all_to_all_values(&self, send: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        self.all_to_all(send)
    }

    /// The word ranges of `field` that rank `rank` keeps: its registered home, or (an array
    /// not registered) the rank's share of its planes.
    pub(crate) fn home_words(&self, field: &Field, rank: usize) -> Range<usize> {
        let layout = field.layout();
        let planes = self
            .fields
            .lock()
            .expect("fields poisoned")
            .iter()
            .find(|o| o.field.same(field))
            .map_or_else(|| self.home(rank, layout.planes), |o| o.homes[rank].clone());
        planes.start * layout.plane_words..planes.end * layout.plane_words
    }

    /// For each rank, the parts of `runs` of field number `index` in its home (none for this
    /// rank's own).
    fn by_home(&self, owned: &Owned, index: usize, runs: &[(usize, usize)]) -> Vec<HomeParts> {
        let plane_words = owned.field.layout().plane_words;
        (0..self.size)
            .map(|r| {
                let mut parts = HomeParts::default();
                if r != self.rank {
                    let planes = &owned.homes[r];
                    let home = planes.start * plane_words..planes.end * plane_words;
                    for &(s, l) in runs {
                        let (a, b) = (s.max(home.start), (s + l).min(home.end));
                        if a < b {
                            parts
                                .triples
                                .extend([index as u64, a as u64, (b - a) as u64]);
                            parts.runs.push((a, b - a));
                        }
                    }
                }
                parts
            })
            .collect()
    }

    /// Sends the blocks this rank downloaded outside its home to their homes, lets go of the
    /// blocks fetched for the last stage, then asks the homes for the parts of `reads` (the
    /// blocks the next stage reads) beyond this rank's home, and learns what the other ranks ask
    /// of its home ([`Asked`]; [`answer`](Self::answer) sends and receives them). Collective.
    pub(crate) fn send_home_and_ask(&self, reads: &[(Field, BlockView)]) -> Asked {
        let fields = self.fields.lock().expect("fields poisoned").clone();
        let mut triples: Vec<Vec<u64>> = vec![Vec::new(); self.size];
        let mut words: Vec<Vec<f32>> = vec![Vec::new(); self.size];
        for (i, o) in fields.iter().enumerate() {
            let away = o.field.take_away_runs();
            for (r, parts) in self.by_home(o, i, &away).into_iter().enumerate() {
                triples[r].extend(parts.triples);
                let sent = o.field.copy_runs(&parts.runs);
                self.count_array_words(i, sent.len());
                words[r].extend(sent);
            }
        }
        let (triples, words) = (self.all_to_all(triples), self.all_to_all(words));
        for (t, w) in triples.iter().zip(&words) {
            fill_triples(&fields, t, w);
        }
        for o in &fields {
            o.field.release_away();
        }
        let mut requests: Vec<Vec<u64>> = vec![Vec::new(); self.size];
        for (field, view) in reads {
            let Some(i) = fields.iter().position(|o| o.field.same(field)) else {
                continue;
            };
            let runs: Vec<(usize, usize)> = view.runs().collect();
            for (r, parts) in self.by_home(&fields[i], i, &runs).into_iter().enumerate() {
                requests[r].extend(parts.triples);
            }
        }
        let asked = self.all_to_all(requests.clone());
        Asked {
            fields: fields.into_iter().map(|o| o.field).collect(),
            requests,
            asked,
        }
    }

    /// Sends every rank the parts of this rank's home it asked for, and receives those this
    /// rank asked for ([`send_home_and_ask`](Self::send_home_and_ask)). Collective.
    pub(crate) fn answer(&self, asked: &Asked) {
        let fields = &asked.fields;
        let replies: Vec<Vec<f32>> = asked
            .asked
            .iter()
            .map(|t| {
                t.chunks_exact(3)
                    .flat_map(|t| {
                        self.count_array_words(t[0] as usize, t[2] as usize);
                        fields[t[0] as usize].copy_runs(&[(t[1] as usize, t[2] as usize)])
                    })
                    .collect()
            })
            .collect();
        let replies = self.all_to_all(replies);
        for (t, w) in asked.requests.iter().zip(&replies) {
            for (t, w) in runs_of(t).zip(split_runs(t, w)) {
                fields[t.0].fill_runs(&[(t.1, t.2)], w);
            }
        }
    }

    /// After a collective step in which this rank went on with nothing where it failed
    /// (`failed`), so that no rank waits forever for it: every rank's verdict, this rank's own
    /// error, else `other(rank)` for the first rank that failed. Collective.
    pub(crate) fn agree<E>(
        &self,
        failed: Option<E>,
        other: impl FnOnce(usize) -> E,
    ) -> Result<(), E> {
        let all = self.all_gather_words(&[u64::from(failed.is_some())]);
        if let Some(e) = failed {
            return Err(e);
        }
        match all.iter().position(|w| w[0] != 0) {
            Some(rank) => Err(other(rank)),
            None => Ok(()),
        }
    }

    /// What every rank sent this one, concatenated in rank order, where each rank sends at most
    /// one message `(rank, values)`: the slices at the boundaries of the ranks' parts of an
    /// OME-Zarr volume that each writes in parallel (see [`crate::io::ZarrPart`]). Collective.
    pub(crate) fn send_to_one(&self, message: Option<(usize, Vec<f32>)>) -> Vec<f32> {
        let mut send = vec![Vec::new(); self.size];
        if let Some((to, values)) = message {
            send[to] = values;
        }
        self.all_to_all(send).concat()
    }

    /// This rank's scratch files: what its arrays hold in them against the planes they keep
    /// there (see [`Field::scratch_bytes`]).
    pub fn scratch_ledger(&self) -> ScratchLedger {
        let fields = self.fields.lock().expect("fields poisoned");
        let mut ledger = ScratchLedger::default();
        for f in fields
            .iter()
            .map(|o| &o.field)
            .filter(|f| f.scratch_bytes() > 0)
        {
            ledger.arrays += 1;
            ledger.file_bytes += f.scratch_bytes();
            ledger.share_bytes += f.home_bytes();
            ledger.whole_bytes += f.layout().bytes();
        }
        ledger
    }

    /// Lets go of the blocks every array fetched from other ranks (see [`Field::release_away`]).
    pub(crate) fn release_fetched(&self) {
        for o in self.fields.lock().expect("fields poisoned").iter() {
            o.field.release_away();
        }
    }
}

/// A rank's scratch files ([`Ranks::scratch_ledger`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScratchLedger {
    /// Arrays in scratch files.
    pub arrays: usize,
    /// Bytes of their scratch files on this rank: the planes it keeps, each array's rounded out
    /// to whole pages (at most two more pages an array).
    pub file_bytes: u64,
    /// Bytes of the planes this rank keeps of them.
    pub share_bytes: u64,
    /// Bytes of the whole arrays, every rank's planes together.
    pub whole_bytes: u64,
}

/// An array with a home on every rank.
#[derive(Clone)]
struct Owned {
    field: Field,
    /// The planes each rank keeps, in rank order.
    homes: Vec<Range<usize>>,
}

/// Runs of a field in one rank's home: as (field, start, length) triples to send, and as runs.
#[derive(Default)]
struct HomeParts {
    triples: Vec<u64>,
    runs: Vec<(usize, usize)>,
}

/// Writes `words` into the (field, start, length) runs of `triples`, one after the other.
fn fill_triples(fields: &[Owned], triples: &[u64], words: &[f32]) {
    for (t, w) in runs_of(triples).zip(split_runs(triples, words)) {
        fields[t.0].field.fill_runs(&[(t.1, t.2)], w);
    }
}

/// The (field, start, length) runs of `triples`.
fn runs_of(triples: &[u64]) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    triples
        .chunks_exact(3)
        .map(|t| (t[0] as usize, t[1] as usize, t[2] as usize))
}

/// `words` cut into the runs of `triples`, in order.
fn split_runs<'a>(triples: &'a [u64], words: &'a [f32]) -> impl Iterator<Item = &'a [f32]> + 'a {
    let mut at = 0;
    runs_of(triples).map(move |(_, _, len)| {
        let part = &words[at..at + len];
        at += len;
        part
    })
}

/// What the ranks asked each other for in an exchange ([`Ranks::send_home_and_ask`]).
#[derive(Clone)]
pub(crate) struct Asked {
    /// The registered arrays, in order.
    fields: Vec<Field>,
    /// (field, start, length) triples this rank asked each rank for.
    requests: Vec<Vec<u64>>,
    /// The triples each rank asked this one for.
    asked: Vec<Vec<u64>>,
}

impl Asked {
    /// The runs of each array the other ranks asked this rank for: (array, (start, length)
    /// runs).
    pub fn runs(&self) -> Vec<(Field, Vec<(usize, usize)>)> {
        let mut by_field: Vec<Vec<(usize, usize)>> = vec![Vec::new(); self.fields.len()];
        for t in &self.asked {
            for (f, start, len) in runs_of(t) {
                by_field[f].push((start, len));
            }
        }
        self.fields
            .iter()
            .cloned()
            .zip(by_field)
            .filter(|(_, runs)| !runs.is_empty())
            .collect()
    }
}

/// Exclusive prefix sums of `counts`.
fn offsets(counts: &[Count]) -> Vec<Count> {
    counts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect()
}

/// Point to point: the ranks of the axis search passing their slab sums along.
impl Ranks {
    /// Sends `values` to rank `to` alone (its length, then the values in pieces an MPI count
    /// holds), which takes them with [`receive_from`](Self::receive_from): the ranks of the
    /// axis search passing their slab sums along, one after the other. Blocks until `to` takes
    /// them where MPI does not buffer them.
    pub(crate) fn send_to<T: Equivalence>(&self, to: usize, values: &[T]) {
        let mpi = self.lock_mpi();
        let destination = mpi.world.process_at_rank(to as i32);
        destination.send(&(values.len() as u64));
        for piece in values.chunks(ROUND_ELEMENTS as usize) {
            destination.send(piece);
        }
        self.bytes_sent
            .fetch_add(std::mem::size_of_val(values) as u64, Ordering::Relaxed);
    }

    /// What rank `from` sends this one with [`send_to`](Self::send_to).
    pub(crate) fn receive_from<T: Equivalence + Copy + Default>(&self, from: usize) -> Vec<T> {
        let mpi = self.lock_mpi();
        let source = mpi.world.process_at_rank(from as i32);
        let (len, _) = source.receive::<u64>();
        let mut values = vec![T::default(); len as usize];
        for piece in values.chunks_mut(ROUND_ELEMENTS as usize) {
            source.receive_into(piece);
        }
        values
    }
}
