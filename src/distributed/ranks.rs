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
//! instead ([`ask`](Ranks::ask), then [`finish`](Ranks::finish), all-to-all rounds,
//! `MPI_Alltoallv`): every block a rank downloaded outside its home goes home, then every rank
//! receives, from their homes, the blocks its next stage reads beyond its own planes. Within an
//! application of the operator, the ranks ask for the next stage's blocks when a stage starts,
//! and [`push`](Ranks::push) what each group of the stage's chunks wrote while the next group
//! computes; the rest goes at the finish. Reductions gather every rank's plane sums (combined
//! in plane order by each rank alike). The exchanges are collective, so every rank passes the
//! same sequence of them; a rank that fails calls `MPI_Abort`, which stops every rank.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::collective::{
    words_of, ClusterError, Collective, ScratchLedger, Traffic, EXCHANGE_OVERLAP_ENV,
};
use crate::array::{BlockView, Field};
use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use mpi::Count;

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
    /// Of those, the nanoseconds of the exchanges a stage made while its later chunks computed
    /// ([`push_while_computing`](Self::push_while_computing)).
    overlapped_ns: AtomicU64,
    /// Of those, the bytes of each registered array's words sent by the exchanges, in
    /// registration order.
    array_bytes_sent: Mutex<Vec<u64>>,
    /// Devices of each rank (the same on every rank).
    devices: AtomicUsize,
    /// Whether stages send their blocks while they compute (every rank agrees; see
    /// [`EXCHANGE_OVERLAP_ENV`]).
    overlaps: AtomicBool,
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
    pub(super) fn from_launcher() -> Result<Option<Arc<Self>>, ClusterError> {
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
        let ranks = Self {
            mpi: Mutex::new(Mpi {
                world,
                _universe: universe,
            }),
            rank,
            size,
            fields: Mutex::default(),
            bytes_sent: AtomicU64::new(0),
            exchange_ns: AtomicU64::new(0),
            overlapped_ns: AtomicU64::new(0),
            array_bytes_sent: Mutex::default(),
            devices: AtomicUsize::new(1),
            overlaps: AtomicBool::new(true),
        };
        // Every rank must pass the same exchanges: one rank's `off` turns the overlap off on all.
        let off = std::env::var(EXCHANGE_OVERLAP_ENV).is_ok_and(|v| v.trim() == "off");
        let all = ranks.all_gather_words(&[u64::from(off)]);
        ranks
            .overlaps
            .store(all.iter().all(|w| w[0] == 0), Ordering::Relaxed);
        Ok(Some(Arc::new(ranks)))
    }

    /// Whether a stage sends its blocks to other ranks while it computes, rather than only
    /// once it is done ([`EXCHANGE_OVERLAP_ENV`]).
    pub fn overlaps_exchanges(&self) -> bool {
        self.overlaps.load(Ordering::Relaxed)
    }

    /// The MPI handles, held while the returned guard lives; the time it is held counts as
    /// exchange time ([`Traffic::exchange_s`]).
    fn lock_mpi(&self) -> HeldMpi<'_> {
        HeldMpi {
            mpi: self.mpi.lock().expect("MPI poisoned"),
            since: std::time::Instant::now(),
            total: &self.exchange_ns,
        }
    }

    /// Counts `words` words of registered array number `index` as sent.
    fn count_array_words(&self, index: usize, words: usize) {
        self.array_bytes_sent.lock().expect("bytes poisoned")[index] += 4 * words as u64;
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

    /// For each rank, the parts of `runs` of field number `index` in its home (none for this
    /// rank's own).
    fn by_home(&self, owned: &Owned, index: usize, runs: &[(usize, usize)]) -> Vec<HomeParts> {
        (0..self.size)
            .map(|r| {
                let mut parts = HomeParts::default();
                if r != self.rank {
                    let home = owned.home_words(r);
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

    /// Asks the homes for the parts of `reads` (the blocks the next stage reads) beyond this
    /// rank's home, and learns what the other ranks ask of its home: an [`Exchange`] that
    /// [`push`](Self::push) and [`finish`](Self::finish) carry out. Collective.
    pub(crate) fn ask(&self, reads: &[(Field, BlockView)]) -> Exchange {
        let fields = self.fields.lock().expect("fields poisoned").clone();
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
        let owed = self
            .all_to_all(requests.clone())
            .iter()
            .map(|t| runs_of(t).collect())
            .collect();
        Exchange {
            fetched: vec![false; fields.len()],
            fields: fields.into_iter().map(|o| o.field).collect(),
            owed,
            awaited: requests.iter().map(|t| runs_of(t).collect()).collect(),
        }
    }

    /// Sends the blocks this rank downloaded outside its home (and that landed) to their
    /// homes, with `parts` of what the other ranks asked of its home (see
    /// [`Exchange::owed_within`]), which it owes them no more; receives the same from the
    /// others. Collective.
    pub(crate) fn push(&self, exchange: &mut Exchange, parts: Vec<Owed>) {
        let owned = self.fields.lock().expect("fields poisoned").clone();
        let mut triples: Vec<Vec<u64>> = vec![Vec::new(); self.size];
        let mut words: Vec<Vec<f32>> = vec![Vec::new(); self.size];
        for (i, o) in owned.iter().enumerate() {
            let away = o.field.take_away_runs();
            for (r, home_parts) in self.by_home(o, i, &away).into_iter().enumerate() {
                triples[r].extend(home_parts.triples);
                let sent = o.field.copy_runs(&home_parts.runs);
                self.count_array_words(i, sent.len());
                words[r].extend(sent);
            }
        }
        for p in &parts {
            triples[p.rank].extend([p.field as u64, p.start as u64, p.len as u64]);
            self.count_array_words(p.field, p.len);
            words[p.rank].extend(owned[p.field].field.copy_runs(&[(p.start, p.len)]));
        }
        exchange.settle(parts);
        let (triples, words) = (self.all_to_all(triples), self.all_to_all(words));
        let mut answered = Vec::new();
        for (rank, (t, w)) in triples.iter().zip(&words).enumerate() {
            for ((field, start, len), w) in runs_of(t).zip(split_runs(t, w)) {
                let o = &owned[field];
                if !o.home_words(self.rank).contains(&start) {
                    exchange.fetched[field] = true;
                    answered.push(Owed {
                        rank,
                        field,
                        start,
                        len,
                    });
                }
                o.field.fill_runs(&[(start, len)], w);
            }
        }
        exchange.awaited = owed_after(&exchange.awaited, answered);
    }

    /// [`push`](Self::push), while the rank's devices compute a stage's later chunks: its
    /// time counts as overlapped ([`Traffic::overlapped_s`]).
    pub(crate) fn push_while_computing(&self, exchange: &mut Exchange, parts: Vec<Owed>) {
        let before = self.exchange_ns.load(Ordering::Relaxed);
        self.push(exchange, parts);
        let spent = self.exchange_ns.load(Ordering::Relaxed) - before;
        self.overlapped_ns.fetch_add(spent, Ordering::Relaxed);
    }

    /// Completes `exchange` once this rank's downloads have landed: sends the blocks
    /// downloaded outside its home to their homes, lets go of the blocks fetched for the last
    /// stage (of the arrays that received none of the next stage's yet), then sends every
    /// rank what it still owes it of what it asked, and receives the same. Collective.
    pub(crate) fn finish(&self, exchange: &mut Exchange) {
        self.push(exchange, Vec::new());
        for (field, fetched) in exchange.fields.iter().zip(&exchange.fetched) {
            if !fetched {
                field.release_away();
            }
        }
        // What is left of what each rank asked, in the order of its requests, which it knows
        // as well (`awaited`): the words alone.
        let words: Vec<Vec<f32>> = exchange
            .owed
            .iter()
            .map(|runs| {
                runs.iter()
                    .flat_map(|&(field, start, len)| {
                        self.count_array_words(field, len);
                        exchange.fields[field].copy_runs(&[(start, len)])
                    })
                    .collect()
            })
            .collect();
        let received = self.all_to_all(words);
        for (runs, words) in exchange.awaited.iter().zip(&received) {
            let mut at = 0;
            for &(field, start, len) in runs {
                exchange.fields[field].fill_runs(&[(start, len)], &words[at..at + len]);
                at += len;
            }
        }
        exchange.owed.iter_mut().for_each(Vec::clear);
        exchange.awaited.iter_mut().for_each(Vec::clear);
    }
}

/// The ranks as the processes of one reconstruction (see [`Collective`]).
impl Collective for Ranks {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn local_rank(&self) -> usize {
        LOCAL_RANK_ENV
            .into_iter()
            .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
            .unwrap_or(self.rank)
    }

    fn set_devices(&self, devices: usize) -> Result<(), ClusterError> {
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

    fn devices(&self) -> usize {
        self.devices.load(Ordering::Relaxed)
    }

    fn all_gather(&self, part: Vec<f32>) -> Vec<Vec<f32>> {
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

    /// Exact: each word as two f32 bit patterns.
    fn all_gather_words(&self, part: &[u64]) -> Vec<Vec<u64>> {
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

    fn all_to_all_values(&self, send: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        self.all_to_all(send)
    }

    fn send_values(&self, to: usize, values: &[f32]) {
        self.send_to(to, values);
    }

    fn receive_values(&self, from: usize) -> Vec<f32> {
        self.receive_from(from)
    }

    fn send_words(&self, to: usize, words: &[u64]) {
        self.send_to(to, words);
    }

    fn receive_words(&self, from: usize) -> Vec<u64> {
        self.receive_from(from)
    }

    fn home_words(&self, field: &Field, rank: usize) -> Range<usize> {
        let layout = field.layout();
        let planes = self
            .fields
            .lock()
            .expect("fields poisoned")
            .iter()
            .find(|o| o.field.same(field))
            .map_or_else(|| self.home(rank, layout.planes), |o| o.homes[rank].clone());
        words_of(&planes, layout.plane_words)
    }

    fn register(&self, field: &Field, homes: Vec<Range<usize>>) {
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

    /// See [`Field::release_away`].
    fn release_fetched(&self) {
        for o in self.fields.lock().expect("fields poisoned").iter() {
            o.field.release_away();
        }
    }

    fn ledger_bytes(&self, field: &Field) -> u64 {
        field.resident_bytes()
    }

    fn traffic(&self) -> Traffic {
        let fields = self.fields.lock().expect("fields poisoned");
        let sent = self.array_bytes_sent.lock().expect("bytes poisoned");
        Traffic {
            bytes: self.bytes_sent.load(Ordering::Relaxed),
            by_array: fields
                .iter()
                .zip(sent.iter())
                .map(|(o, &b)| (o.field.label().to_string(), b))
                .collect(),
            exchange_s: self.exchange_ns.load(Ordering::Relaxed) as f64 * 1e-9,
            overlapped_s: self.overlapped_ns.load(Ordering::Relaxed) as f64 * 1e-9,
        }
    }

    /// See [`Field::scratch_bytes`].
    fn scratch_ledger(&self) -> ScratchLedger {
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

    /// `MPI_Abort`.
    fn abort(&self, code: i32) -> ! {
        let mpi = self.mpi.lock().unwrap_or_else(|e| e.into_inner());
        mpi.world.abort(code)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// An array with a home on every rank.
#[derive(Clone)]
struct Owned {
    field: Field,
    /// The planes each rank keeps, in rank order.
    homes: Vec<Range<usize>>,
}

impl Owned {
    /// The words of the array rank `rank` keeps.
    fn home_words(&self, rank: usize) -> Range<usize> {
        words_of(&self.homes[rank], self.field.layout().plane_words)
    }
}

/// Runs of a field in one rank's home: as (field, start, length) triples to send, and as runs.
#[derive(Default)]
struct HomeParts {
    triples: Vec<u64>,
    runs: Vec<(usize, usize)>,
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

/// A part of this rank's home that another rank asked for ([`Ranks::ask`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owed {
    pub rank: usize,
    /// The registered array's number.
    pub field: usize,
    pub start: usize,
    pub len: usize,
}

/// The blocks of the next stage that ranks ask each other for ([`Ranks::ask`]), sent as they
/// become ready ([`Ranks::push`]) and the rest at the end ([`Ranks::finish`]).
pub(crate) struct Exchange {
    /// The registered arrays, in order.
    fields: Vec<Field>,
    /// For each rank, the (field, start, length) runs of this rank's home it asked for and
    /// has not been sent yet.
    owed: Vec<Vec<(usize, usize, usize)>>,
    /// For each rank, the (field, start, length) runs of its home this rank asked for and has
    /// not received yet: what it owes this rank, in the same order.
    awaited: Vec<Vec<(usize, usize, usize)>>,
    /// For each array, whether blocks beyond this rank's home arrived for the next stage
    /// before [`Ranks::finish`]: those stay when the last stage's fetched blocks are let go.
    fetched: Vec<bool>,
}

impl Exchange {
    /// The runs of each array still owed to other ranks: (array, (start, length) runs).
    pub fn owed_runs(&self) -> Vec<(Field, Vec<(usize, usize)>)> {
        let mut by_field: Vec<Vec<(usize, usize)>> = vec![Vec::new(); self.fields.len()];
        for (f, start, len) in self.owed.iter().flatten() {
            by_field[*f].push((*start, *len));
        }
        self.fields
            .iter()
            .cloned()
            .zip(by_field)
            .filter(|(_, runs)| !runs.is_empty())
            .collect()
    }

    /// The parts still owed that lie within `ready` (blocks of arrays, written and final for
    /// this exchange), in rank, then request order.
    pub fn owed_within(&self, ready: &[(Field, BlockView)]) -> Vec<Owed> {
        // Each array's ready runs, sorted by start (the blocks of different chunks do not
        // overlap).
        let mut by_field: Vec<Vec<(usize, usize)>> = vec![Vec::new(); self.fields.len()];
        for (field, view) in ready {
            if let Some(i) = self.fields.iter().position(|f| f.same(field)) {
                by_field[i].extend(view.runs());
            }
        }
        for runs in &mut by_field {
            runs.sort_unstable();
        }
        parts_within(&self.owed, &by_field)
    }

    /// The array of each of `parts`.
    pub fn fields_of(&self, parts: &[Owed]) -> Vec<Field> {
        parts.iter().map(|p| self.fields[p.field].clone()).collect()
    }

    /// Owes `sent` (parts of what is owed) no more.
    fn settle(&mut self, sent: Vec<Owed>) {
        self.owed = owed_after(&self.owed, sent);
    }
}

/// The parts of `owed` (for each rank, (field, start, length) runs) within `ready` (for each
/// field, (start, length) runs sorted by start, not overlapping), in rank, then run order.
fn parts_within(owed: &[Vec<(usize, usize, usize)>], ready: &[Vec<(usize, usize)>]) -> Vec<Owed> {
    let mut parts = Vec::new();
    for (rank, runs) in owed.iter().enumerate() {
        for &(field, start, len) in runs {
            let ready = &ready[field];
            let first = ready.partition_point(|&(s, l)| s + l <= start);
            for &(s, l) in ready[first..].iter().take_while(|&&(s, _)| s < start + len) {
                let (a, b) = (s.max(start), (s + l).min(start + len));
                if a < b {
                    parts.push(Owed {
                        rank,
                        field,
                        start: a,
                        len: b - a,
                    });
                }
            }
        }
    }
    parts
}

/// What is left of `owed` (for each rank, (field, start, length) runs) once `sent` (parts of
/// those runs) are sent: the gaps they leave, in order.
fn owed_after(
    owed: &[Vec<(usize, usize, usize)>],
    mut sent: Vec<Owed>,
) -> Vec<Vec<(usize, usize, usize)>> {
    sent.sort_unstable_by_key(|p| (p.rank, p.field, p.start));
    owed.iter()
        .enumerate()
        .map(|(rank, runs)| {
            let of_rank = {
                let lo = sent.partition_point(|p| p.rank < rank);
                let hi = sent.partition_point(|p| p.rank <= rank);
                &sent[lo..hi]
            };
            let mut left = Vec::new();
            for &(field, start, len) in runs {
                let mut at = start;
                let first = of_rank.partition_point(|p| (p.field, p.start) < (field, start));
                for p in of_rank[first..]
                    .iter()
                    .take_while(|p| p.field == field && p.start < start + len)
                {
                    if p.start > at {
                        left.push((field, at, p.start - at));
                    }
                    at = at.max(p.start + p.len);
                }
                if at < start + len {
                    left.push((field, at, start + len - at));
                }
            }
            left
        })
        .collect()
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
    fn send_to<T: Equivalence>(&self, to: usize, values: &[T]) {
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
    fn receive_from<T: Equivalence + Copy + Default>(&self, from: usize) -> Vec<T> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Owed runs: rank 0 nothing, rank 1 two runs of field 0 and one of field 1.
    fn owed() -> Vec<Vec<(usize, usize, usize)>> {
        vec![vec![], vec![(0, 10, 10), (0, 40, 5), (1, 0, 8)]]
    }

    #[test]
    fn parts_owed_within_ready_blocks_are_their_overlaps_and_what_is_left_the_gaps() {
        // Field 0 ready at [5, 12) and [15, 42); field 1 not at all.
        let ready = vec![vec![(5, 7), (15, 27)], vec![]];
        let parts = parts_within(&owed(), &ready);
        let runs: Vec<_> = parts
            .iter()
            .map(|p| (p.rank, p.field, p.start, p.len))
            .collect();
        assert_eq!(runs, [(1, 0, 10, 2), (1, 0, 15, 5), (1, 0, 40, 2)]);
        let left = owed_after(&owed(), parts);
        assert_eq!(left, [vec![], vec![(0, 12, 3), (0, 42, 3), (1, 0, 8)]]);
        // Sending all that is left owes nothing.
        let all: Vec<Owed> = left[1]
            .iter()
            .map(|&(field, start, len)| Owed {
                rank: 1,
                field,
                start,
                len,
            })
            .collect();
        assert!(owed_after(&left, all).iter().all(Vec::is_empty));
    }

    #[test]
    fn nothing_ready_sends_nothing_and_owes_everything() {
        let parts = parts_within(&owed(), &[vec![], vec![]]);
        assert!(parts.is_empty());
        assert_eq!(owed_after(&owed(), parts), owed());
    }
}
