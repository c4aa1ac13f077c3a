//! ADMM on several devices in one process: one [`AdmmSolver`] per device, one host thread each,
//! the arrays shared in host memory, every stage's chunks and every vector kernel's planes split
//! into one contiguous share per device (see [`crate::distributed::team`]). A chunk's result does not
//! depend on the device that computes it, and a reduction combines the plane sums of all shares
//! in plane order before the same finish as on one device, so identical devices give the bits of
//! one device. Each member follows its own memory plan ([`crate::plan::member_plans`]): where its
//! homes of the arrays fit its device it keeps them there, so that only the blocks it exchanges
//! with the others cross its bus; else it streams its share through its staging buffers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::admm::AdmmSolver;
use super::checkpoint::Checkpoint;
use super::error::SolverError;
use super::fields::TeamArrays;
use super::projections::ProjectionBlocks;
use super::report::IterationReport;
use crate::array::Residency;
use crate::distributed::team::{Share, TeamSync};
use crate::distributed::{Collective, Traffic};
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::memo::MemoOptions;
use crate::params::AdmmParams;
use crate::plan::{member_plans, MemoryPlan, Mode, Portion};
use serde::Serialize;

/// What one MPI rank of a reconstruction did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankReport {
    pub rank: usize,
    pub setup_s: f64,
    pub iterations_s: f64,
    /// Bytes the rank sent to other ranks (blocks and reductions), in all.
    pub bytes_sent: u64,
    /// Of those, the bytes sent during the outer iterations.
    pub iteration_bytes_sent: u64,
    /// Of those, the blocks of each array (the rest are reductions and agreements), in the
    /// order the arrays are registered.
    pub iteration_bytes_by_array: Vec<ArrayBytes>,
    /// Host <-> device bytes each of the rank's devices moved per outer iteration
    /// ([`crate::recon::Reconstruction::bus_bytes_per_iteration`]).
    pub bus_bytes_per_iteration: Vec<u64>,
    /// Seconds of `iterations_s` the rank spent in exchanges: the MPI calls and the packing
    /// they do, waits for the other ranks included.
    pub iteration_exchange_s: f64,
    /// Of those, the seconds of the exchanges made while the rank's devices computed a
    /// stage's later chunks (hidden where the devices compute apart from the host).
    pub iteration_overlapped_exchange_s: f64,
}

/// Bytes of one array's blocks that an MPI rank sent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArrayBytes {
    /// The array's label (`u`, `spectrum (deth, n1, n2)`, `A u`, ...).
    pub array: String,
    pub bytes: u64,
}

/// A solver on one or more devices, or one MPI rank's part of a solver on every rank; with one
/// device it is that device's [`AdmmSolver`].
pub struct AdmmTeam {
    /// This process's members: one per device, or this MPI rank's one.
    members: Vec<AdmmSolver>,
    sync: Arc<TeamSync>,
    /// The processes of the run: this one alone, or MPI ranks of which this is one.
    processes: Arc<dyn Collective>,
    /// The most volume bytes held while reading it a slab at a time (see
    /// [`AdmmTeam::slab_ledger`]).
    slab_ledger: AtomicU64,
    /// What this MPI rank had sent when the first outer iteration began (see
    /// [`AdmmTeam::rank_reports`]).
    setup_sent: Option<Traffic>,
}

/// Stops the team when its member ends without finishing its part (an error or a panic), so
/// that no other member waits for it.
struct StopOnFailure<'a> {
    sync: &'a TeamSync,
    member: usize,
    finished: bool,
}

impl Drop for StopOnFailure<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.sync.abort(self.member, "it panicked".into());
        }
    }
}

/// Runs `work` as member `index` on `ctx`, stopping the team if it fails.
fn guarded<T>(
    sync: &TeamSync,
    index: usize,
    ctx: &GpuContext,
    work: impl FnOnce() -> Result<T, SolverError>,
) -> Result<T, SolverError> {
    let mut guard = StopOnFailure {
        sync,
        member: index,
        finished: false,
    };
    let result = work();
    if let Err(e) = &result {
        sync.abort(index, format!("{}: {e}", ctx.info().name));
    }
    guard.finished = true;
    result
}

/// Runs `first` for the first member on this thread and `others` for the others on one thread
/// each, and returns their results in member order, or the first failure that is not another
/// member's.
fn on_members<M: Send, T: Send>(
    sync: &TeamSync,
    devices: &[GpuContext],
    members: Vec<M>,
    first: impl FnOnce(M, &GpuContext) -> Result<T, SolverError>,
    others: impl Fn(usize, M, &GpuContext) -> Result<T, SolverError> + Sync,
) -> Result<Vec<T>, SolverError> {
    let mut members = members.into_iter();
    let leader = members.next().expect("a team has a member");
    let results: Vec<std::thread::Result<Result<T, SolverError>>> = std::thread::scope(|s| {
        let others = &others;
        let handles: Vec<_> = members
            .zip(&devices[1..])
            .enumerate()
            .map(|(i, (member, ctx))| {
                s.spawn(move || guarded(sync, i + 1, ctx, || others(i + 1, member, ctx)))
            })
            .collect();
        let mut results = vec![Ok(guarded(sync, 0, &devices[0], || {
            first(leader, &devices[0])
        }))];
        results.extend(handles.into_iter().map(|h| h.join()));
        results
    });
    let mut out = Vec::with_capacity(results.len());
    let mut failure = None;
    for r in results {
        match r {
            Ok(Ok(t)) => out.push(t),
            Ok(Err(e)) => {
                let secondary = matches!(
                    e,
                    SolverError::Gpu(crate::gpu::GpuError::TeamStopped { .. })
                );
                if failure.as_ref().is_none_or(|(s, _)| *s && !secondary) {
                    failure = Some((secondary, e));
                }
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    match failure {
        Some((_, e)) => Err(e),
        None => Ok(out),
    }
}

/// Whether each member of `(ranks, devices)` is in-core under the team's `plan` (keeps its homes
/// on its device), members numbered rank by rank.
fn in_core_members(
    ctx: &GpuContext,
    geometry: &Geometry,
    params: &AdmmParams,
    plan: &MemoryPlan,
    team: (usize, usize),
) -> Result<Vec<bool>, SolverError> {
    let plans = member_plans(ctx, geometry, params, plan, team)?;
    Ok(plans.iter().map(|m| m.mode == Mode::InCore).collect())
}

/// A team's plan keeps every array in host memory.
fn check_shared(plan: &MemoryPlan) -> Result<(), SolverError> {
    if plan.resident_arrays() > 0
        || *plan.residency(crate::plan::Array::Spectrum) == Residency::Device
    {
        return Err(SolverError::TeamPlan);
    }
    Ok(())
}

impl AdmmTeam {
    /// This process's members of a team of every process's devices, one per device of
    /// `devices`, each an [`AdmmSolver`] as [`AdmmSolver::with_plan_from`] builds it (with one
    /// process and one device, that solver alone). With several devices or processes the plan
    /// must hold every array in host memory (or scratch), as [`crate::plan::plan_shared`]
    /// makes it, and every device must chunk the stages alike. Under MPI ranks each keeps its
    /// home of the arrays (see [`crate::distributed::ranks`]) and reads its share of the
    /// projections (`data` holds them, the angles of
    /// [`home`](crate::distributed::Collective::home)); every rank was told how many devices
    /// the others use ([`Collective::set_devices`]). Collective.
    pub fn new(
        processes: &Arc<dyn Collective>,
        devices: &[GpuContext],
        geometry: &Geometry,
        data: &(impl ProjectionBlocks + ?Sized),
        params: AdmmParams,
        plan: &MemoryPlan,
    ) -> Result<Self, SolverError> {
        let ranks = processes.size();
        let [first, ..] = devices else {
            return Err(SolverError::NoDevices);
        };
        if ranks == 1 && devices.len() == 1 {
            let solver = AdmmSolver::with_plan_from(first, geometry, data, params, plan)?;
            return Ok(Self::of(vec![solver], TeamSync::new(1), processes));
        }
        check_shared(plan)?;
        let arrays = match ranks {
            1 => TeamArrays::new(first, geometry, plan)?,
            _ => {
                assert_eq!(
                    devices.len(),
                    processes.devices(),
                    "the devices the ranks were told of"
                );
                TeamArrays::of_processes(first, geometry, plan, &**processes)?
            }
        };
        let local = TeamSync::new(devices.len());
        local.add_homed(&arrays.homed());
        let in_core = in_core_members(first, geometry, &params, plan, (ranks, devices.len()))?;
        // A member whose plan is in-core keeps its homes on its device from the start.
        let share = |device: usize, ctx: &GpuContext| {
            let share = Share::of_process_device(processes, &local, device);
            if in_core[share.index] {
                let portion = Portion {
                    member: share.index,
                    members: share.members,
                };
                arrays.keep_on_device(ctx, geometry, plan, portion)?;
            }
            Ok::<_, SolverError>(share)
        };
        // The process's first device reads the process's projections.
        let home = processes.home(processes.rank(), geometry.ntheta());
        let mut members = on_members(
            &local,
            devices,
            vec![(); devices.len()],
            |(), ctx| {
                let member = Some((&arrays, &share(0, ctx)?));
                AdmmSolver::build(ctx, geometry, Some((data, home)), params, plan, member)
            },
            |d, (), ctx| {
                let member = Some((&arrays, &share(d, ctx)?));
                AdmmSolver::build(ctx, geometry, None::<(&[f32], _)>, params, plan, member)
            },
        )?;
        // Every device of every process must chunk the stages alike.
        let chunks: Vec<u64> = members
            .iter()
            .flat_map(|m| {
                let c = m.operator().chunks();
                [c.0 as u64, c.1 as u64, c.2 as u64]
            })
            .collect();
        let all = processes.all_gather_words(&chunks).concat();
        let triple = |v: &[u64]| (v[0] as usize, v[1] as usize, v[2] as usize);
        if let Some((i, other)) = all.chunks(3).enumerate().find(|(_, c)| *c != &all[..3]) {
            let d = devices.len();
            return Err(SolverError::TeamChunks {
                device: match ranks {
                    1 => devices[i].info().to_string(),
                    _ => format!("{} of rank {}", i % d, i / d),
                },
                chunks: triple(other),
                first: triple(&all[..3]),
            });
        }
        // The data's hash and scale from every process's projections, in order.
        let digests = members[0].projection_digests();
        let hashes = processes.all_gather_words(&digests.hashes).concat();
        let sums: Vec<u64> = digests.abs_sums.iter().map(|s| s.to_bits()).collect();
        let sums: Vec<f64> = processes
            .all_gather_words(&sums)
            .concat()
            .into_iter()
            .map(f64::from_bits)
            .collect();
        let hash = super::projections::projections_hash(&hashes);
        let scale =
            crate::params::DataScale::of_operator_data(&sums, geometry.n2, geometry.volume_len());
        for m in &mut members {
            m.adopt_data(hash, scale);
        }
        Ok(Self::of(members, local, processes))
    }

    /// Takes `scale` as the data's scale on every member: the scan's, estimated from its line
    /// integrals before padding, and the whole scan's when a box of its volume is reconstructed.
    pub(crate) fn adopt_data_scale(&mut self, scale: crate::params::DataScale) {
        for m in &mut self.members {
            let hash = m.data_hash();
            m.adopt_data(hash, scale);
        }
    }

    fn of(members: Vec<AdmmSolver>, sync: Arc<TeamSync>, processes: &Arc<dyn Collective>) -> Self {
        Self {
            members,
            sync,
            processes: processes.clone(),
            slab_ledger: AtomicU64::new(0),
            setup_sent: None,
        }
    }

    /// Whether this team is one MPI rank's part.
    fn is_ranks(&self) -> bool {
        self.processes.size() > 1
    }

    /// Whether this process writes the outputs and checkpoints' manifests (the first MPI rank,
    /// or the only process).
    pub fn writes(&self) -> bool {
        self.processes.rank() == 0
    }

    /// Writes a checkpoint of the state after the iterations done (see
    /// [`AdmmSolver::write_checkpoint`]); with MPI ranks each rank writes the planes it keeps
    /// as its part, and the first rank the manifest once every part is on disk (see
    /// [`super::checkpoint`]). Collective.
    pub fn write_checkpoint(
        &self,
        devices: &[GpuContext],
        path: &std::path::Path,
    ) -> Result<(), SolverError> {
        self.bring_to_host(devices)?;
        if self.is_ranks() {
            return self.write_checkpoint_parts(&devices[0], path);
        }
        self.members[0].write_checkpoint(&devices[0], path)
    }

    /// The words of each checkpointed array that MPI rank `rank` keeps (none of an array the
    /// checkpoint leaves empty).
    fn home_words(&self, rank: usize) -> [std::ops::Range<usize>; super::checkpoint::ARRAY_COUNT] {
        let solver = &self.members[0];
        let lengths = Checkpoint::array_lengths(solver.op.geometry(), &solver.params);
        let arrays = solver.checkpointed();
        std::array::from_fn(|a| match lengths[a] {
            0 => 0..0,
            _ => self.processes.home_words(arrays[a], rank),
        })
    }

    /// [`write_checkpoint`](Self::write_checkpoint) on MPI ranks. Collective: every rank learns
    /// whether every part and the manifest were written, and returns an error naming the rank
    /// that failed if one did (the previous checkpoint stays).
    fn write_checkpoint_parts(
        &self,
        ctx: &GpuContext,
        path: &std::path::Path,
    ) -> Result<(), SolverError> {
        use super::checkpoint::{CheckpointError, Part};
        let ranks = &self.processes;
        let solver = &self.members[0];
        // A name of this checkpoint's own: the iteration and the first rank's clock.
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let clock = ranks.all_gather_words(&[clock])[0][0];
        let generation = format!("{}-{clock:x}", solver.iterations_done());
        let rank = ranks.rank();
        let written =
            solver.write_checkpoint_part(ctx, path, &generation, rank, self.home_words(rank));
        let mine = match &written {
            Ok(part) => [1, part.hash],
            Err(_) => [0, 0],
        };
        let all = ranks.all_gather_words(&mine);
        let failed = |rank: usize, what: &str| {
            SolverError::Checkpoint(CheckpointError::Write {
                path: path.into(),
                reason: format!(
                    "rank {rank} could not write {what}; the previous checkpoint stays"
                ),
            })
        };
        if let Some(other) = all.iter().position(|w| w[0] == 0) {
            if let Ok(part) = &written {
                // Best effort: a part no manifest names is removed by the next checkpoint.
                let _ = std::fs::remove_file(path.with_file_name(&part.file));
            }
            written?;
            return Err(failed(other, "its part"));
        }
        let parts: Vec<Part> = all
            .iter()
            .enumerate()
            .map(|(r, w)| Part {
                file: Checkpoint::part_path(path, &generation, r)
                    .file_name()
                    .expect("a part's path names a file")
                    .to_string_lossy()
                    .into_owned(),
                words: self.home_words(r).map(|h| [h.start, h.end]),
                hash: w[1],
            })
            .collect();
        let manifest = match rank {
            0 => solver.write_checkpoint_manifest(path, parts),
            _ => Ok(()),
        };
        let done = ranks.all_gather_words(&[u64::from(manifest.is_ok())]);
        manifest?;
        match done[0][0] {
            0 => Err(failed(0, "the manifest")),
            _ => Ok(()),
        }
    }

    /// Z slices `planes` of the volume, on the process that writes the outputs, as runs of
    /// whole slices `(first slice, values)` in order (none on the other MPI ranks, which send
    /// their y rows of each slice): no rank holds more than its planes, one slab and one slice.
    /// Records the most volume bytes this process held ([`slab_ledger`](Self::slab_ledger)).
    /// Collective.
    pub fn volume_slab(
        &self,
        ctx: &GpuContext,
        planes: std::ops::Range<usize>,
    ) -> Result<Vec<(usize, Vec<f32>)>, SolverError> {
        let solver = &self.members[0];
        if self.is_ranks() {
            // The first rank takes every slice; the others take none and send their rows.
            let wanted = match self.processes.rank() {
                0 => planes.clone(),
                _ => planes.start..planes.start,
            };
            let slab = self.slices_from_rows(ctx, wanted)?;
            return Ok(match slab.is_empty() {
                true => Vec::new(),
                false => vec![(planes.start, slab)],
            });
        }
        let slab = solver.volume_planes(ctx, planes.clone())?;
        self.slab_ledger
            .fetch_max(4 * slab.len() as u64, Ordering::Relaxed);
        Ok(vec![(planes.start, slab)])
    }

    /// Z slices `planes` of the volume (this rank's; others want theirs, or none), put together
    /// from every rank's y rows of them, which the ranks send each other a slice at a time
    /// (one all-to-all a slice, as many as the most slices a rank wants): no rank holds more
    /// than its planes, its slices and one slice's rows. A rank that cannot read its rows goes
    /// on taking part with none, so that no rank waits forever for it, and then every rank
    /// returns an error. Records what this rank held in the ledger. Collective.
    fn slices_from_rows(
        &self,
        ctx: &GpuContext,
        planes: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, SolverError> {
        let (solver, ranks) = (&self.members[0], &self.processes);
        // What the last stage fetched from other ranks is not kept while writing.
        ranks.release_fetched();
        let rows = self.volume_rows(ranks.rank());
        let wanted = ranks.all_gather_words(&[planes.start as u64, planes.end as u64]);
        let most = wanted.iter().map(|w| w[1] - w[0]).max().unwrap_or(0) as usize;
        let g = solver.op.geometry();
        // The ranks' rows follow each other in rank order, as the slices' rows do.
        let mut slab = Vec::with_capacity(planes.len() * g.n1 * g.n2);
        let mut failed = None;
        for j in 0..most {
            let mut rows_of = |z: usize| {
                if failed.is_some() {
                    return Vec::new();
                }
                solver
                    .volume_box(ctx, z..z + 1, rows.clone())
                    .unwrap_or_else(|e| {
                        failed = Some(e);
                        Vec::new()
                    })
            };
            let send: Vec<Vec<f32>> = wanted
                .iter()
                .map(|w| {
                    let z = w[0] as usize + j;
                    match z < w[1] as usize {
                        true => rows_of(z),
                        false => Vec::new(),
                    }
                })
                .collect();
            let sent: usize = send.iter().map(Vec::len).sum();
            let got = ranks.all_to_all_values(send);
            let received: usize = got.iter().map(Vec::len).sum();
            self.note_held(4 * (slab.capacity() + sent + received) as u64);
            got.into_iter().for_each(|rows| slab.extend(rows));
        }
        crate::distributed::agree(&**ranks, failed, |rank| SolverError::RankRead { rank })?;
        Ok(slab)
    }

    /// The y rows of the volume MPI rank `rank` keeps (its home of the volume's planes).
    fn volume_rows(&self, rank: usize) -> std::ops::Range<usize> {
        let u = self.members[0].volume_field();
        let words = self.processes.home_words(u, rank);
        let plane = u.layout().plane_words;
        words.start / plane..words.end / plane
    }

    /// The z slices of `planes` each MPI rank writes of the volume, as the bounds of their runs
    /// relative to `planes.start`, in rank order (`[0, len]` without ranks): how the ranks
    /// divide the volume when each writes its own part of it ([`crate::io::ZarrPart`]), each
    /// its share of the z slices.
    pub fn volume_part_bounds(&self, planes: std::ops::Range<usize>) -> Vec<usize> {
        let (total, ranks) = (self.members[0].op.geometry().n0, &self.processes);
        let mut bounds: Vec<usize> = (0..ranks.size())
            .map(|r| ranks.home(r, total).start.clamp(planes.start, planes.end))
            .collect();
        bounds.push(planes.end);
        bounds.into_iter().map(|b| b - planes.start).collect()
    }

    /// This process's index among the MPI ranks (0 without ranks).
    pub fn rank(&self) -> usize {
        self.processes.rank()
    }

    /// Z slices `planes` of the volume, which this process writes (an MPI rank's part of
    /// [`volume_part_bounds`](Self::volume_part_bounds); any without ranks): each rank writes
    /// its own part. Collective under MPI ranks, where every rank calls it as often as the
    /// others, with its own slices (none once its part is written): the ranks send each other
    /// their y rows of those slices, a slice at a time. Records what this process holds with
    /// them in the ledger ([`slab_ledger`](Self::slab_ledger)); the caller adds what it holds
    /// besides ([`note_held`](Self::note_held)).
    pub fn own_volume_slab(
        &self,
        ctx: &GpuContext,
        planes: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, SolverError> {
        if self.is_ranks() {
            return self.slices_from_rows(ctx, planes);
        }
        let slab = self.members[0].volume_planes(ctx, planes)?;
        self.note_held(4 * slab.len() as u64);
        Ok(slab)
    }

    /// Records in the ledger that this process holds `bytes` of the volume besides its volume
    /// array's resident pages (MPI ranks) or beside nothing (one process, whose array the
    /// ledger does not count, as in [`volume_slab`](Self::volume_slab); see
    /// [`Collective::ledger_bytes`]).
    pub fn note_held(&self, bytes: u64) {
        let array = self.processes.ledger_bytes(self.members[0].volume_field());
        self.slab_ledger.fetch_max(array + bytes, Ordering::Relaxed);
    }

    /// What every MPI rank sent this one in an exchange where each sends at most one message
    /// `(rank, values)`, in rank order (alone, what it sent itself). Collective.
    pub fn send_to_one(&self, message: Option<(usize, Vec<f32>)>) -> Vec<f32> {
        self.processes.send_to_one(message)
    }

    /// `path` of the first MPI rank on every rank (`path` without ranks): where the first rank
    /// staged a directory the others write into; `None` when the first rank has none. Collective.
    pub fn first_rank_path(&self, path: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
        if !self.is_ranks() {
            return path.map(std::path::Path::to_path_buf);
        }
        // A leading word says whether there is a path; then one byte a word.
        let mine: Vec<u64> = match path {
            Some(p) => std::iter::once(1)
                .chain(
                    p.as_os_str()
                        .as_encoded_bytes()
                        .iter()
                        .map(|&b| u64::from(b)),
                )
                .collect(),
            None => vec![0],
        };
        let first = self.processes.all_gather_words(&mine).swap_remove(0);
        match first.split_first() {
            Some((1, bytes)) => {
                let bytes: Vec<u8> = bytes.iter().map(|&b| b as u8).collect();
                // SAFETY: the bytes are `as_encoded_bytes` of the first rank's path, made by
                // the same lamino binary on the same platform, whole.
                let path = unsafe { std::ffi::OsString::from_encoded_bytes_unchecked(bytes) };
                Some(std::path::PathBuf::from(path))
            }
            _ => None,
        }
    }

    /// The most bytes of the volume each process held while [`volume_slab`](Self::volume_slab)
    /// read it, in rank order (one entry without MPI ranks): on an MPI rank, the resident pages
    /// of its volume array (its planes, and fetched ones it had not let go) and the slab's
    /// slices it held. Collective.
    pub fn slab_ledger(&self) -> Vec<u64> {
        let mine = self.slab_ledger.load(Ordering::Relaxed);
        self.processes.all_gather_words(&[mine]).concat()
    }

    /// The least of `value` over the MPI ranks (`value` without ranks): what every rank agrees
    /// on where their values may differ. Collective.
    pub fn least(&self, value: u64) -> u64 {
        self.processes
            .all_gather_words(&[value])
            .concat()
            .into_iter()
            .min()
            .unwrap_or(value)
    }

    /// The bytes of the volume MPI rank `rank` keeps (the whole volume without ranks).
    pub fn volume_share_bytes(&self, rank: usize) -> u64 {
        let u = self.members[0].volume_field();
        4 * self.processes.home_words(u, rank).len() as u64
    }

    /// Whether `flag` is set on any MPI rank (on this process otherwise). Collective.
    pub fn any(&self, flag: bool) -> bool {
        self.processes
            .all_gather(vec![f32::from(u8::from(flag))])
            .iter()
            .any(|v| v[0] != 0.0)
    }

    /// Every MPI rank's setup and iteration times, bytes sent, those before the first outer
    /// iteration counted as setup, and `bus` (its devices' bytes over the bus per iteration)
    /// (empty without ranks). Collective.
    pub fn rank_reports(&self, setup_s: f64, iterations_s: f64, bus: &[u64]) -> Vec<RankReport> {
        if !self.is_ranks() {
            return Vec::new();
        }
        let ranks = &self.processes;
        let now = ranks.traffic();
        let setup = self.setup_sent.clone().unwrap_or_else(|| now.clone());
        let (sent, by_array) = (now.bytes, now.by_array);
        let mut mine = vec![
            setup_s.to_bits(),
            iterations_s.to_bits(),
            sent,
            sent - setup.bytes,
            (now.exchange_s - setup.exchange_s).to_bits(),
            (now.overlapped_s - setup.overlapped_s).to_bits(),
        ];
        mine.extend(by_array.iter().zip(&setup.by_array).map(|(a, s)| a.1 - s.1));
        // Every rank has as many devices.
        mine.extend(bus);
        let arrays = by_array.len();
        ranks
            .all_gather_words(&mine)
            .iter()
            .enumerate()
            .map(|(rank, w)| RankReport {
                rank,
                setup_s: f64::from_bits(w[0]),
                iterations_s: f64::from_bits(w[1]),
                bytes_sent: w[2],
                iteration_bytes_sent: w[3],
                iteration_exchange_s: f64::from_bits(w[4]),
                iteration_overlapped_exchange_s: f64::from_bits(w[5]),
                iteration_bytes_by_array: by_array
                    .iter()
                    .zip(&w[6..6 + arrays])
                    .map(|((array, _), &bytes)| ArrayBytes {
                        array: array.clone(),
                        bytes,
                    })
                    .collect(),
                bus_bytes_per_iteration: w[6 + arrays..].to_vec(),
            })
            .collect()
    }

    /// Memoizes the operator's gridding stages (one device only: the memo layer decides per
    /// chunk with the whole cache in view).
    pub fn set_memo(
        &mut self,
        devices: &[GpuContext],
        options: MemoOptions,
    ) -> Result<(), SolverError> {
        match (&mut self.members[..], options.policy.is_active()) {
            ([solver], _) => solver.set_memo(&devices[0], options),
            (_, false) => Ok(()),
            (_, true) => Err(SolverError::TeamMemo),
        }
    }

    /// Applies the inner loop's normal operator as `asked` says (after [`set_memo`]
    /// (Self::set_memo)): the Toeplitz loop runs on one device of one process; a team runs
    /// gridding (`auto`) or refuses `toeplitz` naming why.
    pub fn set_normal_operator(
        &mut self,
        devices: &[GpuContext],
        asked: crate::params::NormalOperator,
    ) -> Result<crate::plan::NormalOperatorChoice, SolverError> {
        let shared = self.members.len() > 1 || self.processes.size() > 1;
        self.members[0].set_normal_operator(&devices[0], asked, shared)
    }

    /// Runs one outer iteration on every device and reports its terms (the same on each).
    pub fn step(&mut self, devices: &[GpuContext]) -> Result<IterationReport, SolverError> {
        assert_eq!(devices.len(), self.members.len(), "one context per member");
        if self.setup_sent.is_none() {
            self.setup_sent = Some(self.processes.traffic());
        }
        if let [solver] = &mut self.members[..] {
            return solver.step(&devices[0]);
        }
        let members: Vec<&mut AdmmSolver> = self.members.iter_mut().collect();
        let reports = on_members(
            &self.sync,
            devices,
            members,
            |m, ctx| m.step(ctx),
            |_, m, ctx| m.step(ctx),
        )?;
        Ok(reports[0])
    }

    /// Continues from the checkpoint at `path` (see [`AdmmSolver::resume`]): the first member
    /// reads the shared arrays, the others take its iteration count and penalty.
    pub fn resume(
        &mut self,
        devices: &[GpuContext],
        path: &std::path::Path,
    ) -> Result<Checkpoint, SolverError> {
        let share = self
            .is_ranks()
            .then(|| self.home_words(self.processes.rank()));
        let (first, others) = self.members.split_first_mut().expect("a team has a member");
        let checkpoint = first.resume_share(&devices[0], path, share.as_ref())?;
        for m in others {
            m.adopt_state(first);
        }
        // Members that keep planes on their devices take them from the host arrays.
        for ctx in devices {
            self.sync.host_to_device(ctx)?;
        }
        Ok(checkpoint)
    }

    /// Brings the planes members keep on their devices to the host arrays (where they are
    /// newer there), so that the host arrays hold the current state: before the volume or a
    /// checkpoint is read from them. A reading of words a device holds newer is refused
    /// otherwise. This process's devices only: each MPI rank brings its own.
    pub fn bring_to_host(&self, devices: &[GpuContext]) -> Result<(), SolverError> {
        if self.members.len() > 1 || self.is_ranks() {
            for ctx in devices {
                self.sync.device_to_host(ctx)?;
            }
        }
        Ok(())
    }

    /// The first device's solver: the shared arrays (volume, checkpoints) and the reports.
    pub fn solver(&self) -> &AdmmSolver {
        &self.members[0]
    }

    /// How many devices work together.
    pub fn devices(&self) -> usize {
        self.members.len()
    }
}
