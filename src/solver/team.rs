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
use crate::gpu::GpuContext;
use crate::memo::MemoOptions;
use crate::operator::Geometry;
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

/// What an MPI rank has sent so far: bytes in all and of each array, and the seconds spent in
/// exchanges.
#[cfg(feature = "mpi")]
#[derive(Debug, Clone)]
struct SentSoFar {
    bytes: u64,
    by_array: Vec<(String, u64)>,
    exchange_s: f64,
    overlapped_s: f64,
}

#[cfg(feature = "mpi")]
impl SentSoFar {
    fn of(ranks: &crate::distributed::ranks::Ranks) -> Self {
        Self {
            bytes: ranks.bytes_sent(),
            by_array: ranks.array_bytes_sent(),
            exchange_s: ranks.exchange_s(),
            overlapped_s: ranks.overlapped_exchange_s(),
        }
    }
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
    #[cfg(feature = "mpi")]
    ranks: Option<Arc<crate::distributed::ranks::Ranks>>,
    /// The most volume bytes held while reading it a slab at a time (see
    /// [`AdmmTeam::slab_ledger`]).
    slab_ledger: AtomicU64,
    /// What this MPI rank had sent when the first outer iteration began (see
    /// [`AdmmTeam::rank_reports`]).
    #[cfg(feature = "mpi")]
    setup_sent: Option<SentSoFar>,
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
    /// One solver per device of `devices`, as [`AdmmSolver::with_plan_from`] builds it. With
    /// several devices the plan must hold every array in host memory (or scratch), as
    /// [`crate::plan::plan_shared`] makes it, and every device must chunk the stages alike.
    pub fn with_plan_from(
        devices: &[GpuContext],
        geometry: &Geometry,
        data: &(impl ProjectionBlocks + ?Sized),
        params: AdmmParams,
        plan: &MemoryPlan,
    ) -> Result<Self, SolverError> {
        match devices {
            [] => Err(SolverError::NoDevices),
            [ctx] => Ok(Self::of(
                vec![AdmmSolver::with_plan_from(
                    ctx, geometry, data, params, plan,
                )?],
                TeamSync::new(1),
            )),
            [first, ..] => {
                check_shared(plan)?;
                let arrays = TeamArrays::new(first, geometry, plan)?;
                let sync = TeamSync::new(devices.len());
                sync.add_homed(&arrays.homed());
                let in_core = in_core_members(first, geometry, &params, plan, (1, devices.len()))?;
                // A member whose plan is in-core keeps its homes on its device from the start.
                let member = |index: usize, ctx: &GpuContext| {
                    if in_core[index] {
                        let portion = Portion {
                            member: index,
                            members: devices.len(),
                        };
                        arrays.keep_on_device(ctx, geometry, plan, portion)?;
                    }
                    Ok::<_, SolverError>((&arrays, Share::new(index, &sync)))
                };
                let mut members = on_members(
                    &sync,
                    devices,
                    vec![(); devices.len()],
                    |(), ctx| {
                        let (arrays, share) = member(0, ctx)?;
                        AdmmSolver::build(
                            ctx,
                            geometry,
                            Some((data, 0..geometry.ntheta())),
                            params,
                            plan,
                            Some((arrays, &share)),
                        )
                    },
                    // The first member alone reads the projections.
                    |i, (), ctx| {
                        let (arrays, share) = member(i, ctx)?;
                        AdmmSolver::build(
                            ctx,
                            geometry,
                            None::<(&[f32], _)>,
                            params,
                            plan,
                            Some((arrays, &share)),
                        )
                    },
                )?;
                let (hash, scale) = (members[0].data_hash(), members[0].data_scale());
                let chunks = members[0].operator().chunks();
                for (m, ctx) in members.iter_mut().zip(devices) {
                    if m.operator().chunks() != chunks {
                        return Err(SolverError::TeamChunks {
                            device: ctx.info().to_string(),
                            chunks: m.operator().chunks(),
                            first: chunks,
                        });
                    }
                    m.adopt_data(hash, scale);
                }
                Ok(Self::of(members, sync))
            }
        }
    }

    /// Takes `scale` as the data's scale on every member: the scan's, estimated from its line
    /// integrals before padding, and the whole scan's when a box of its volume is reconstructed.
    pub(crate) fn adopt_data_scale(&mut self, scale: crate::params::DataScale) {
        for m in &mut self.members {
            let hash = m.data_hash();
            m.adopt_data(hash, scale);
        }
    }

    fn of(members: Vec<AdmmSolver>, sync: Arc<TeamSync>) -> Self {
        Self {
            members,
            sync,
            #[cfg(feature = "mpi")]
            ranks: None,
            slab_ledger: AtomicU64::new(0),
            #[cfg(feature = "mpi")]
            setup_sent: None,
        }
    }

    /// This MPI rank's members of a team of every rank's devices, one per device of `devices`
    /// (see [`crate::distributed::ranks`]; [`crate::distributed::ranks::Ranks::set_devices`] told every rank how many);
    /// the plan as for several devices ([`crate::plan::plan_shared`]). Collective.
    #[cfg(feature = "mpi")]
    pub fn on_ranks(
        ranks: &Arc<crate::distributed::ranks::Ranks>,
        devices: &[GpuContext],
        geometry: &Geometry,
        data: &(impl ProjectionBlocks + ?Sized),
        params: AdmmParams,
        plan: &MemoryPlan,
    ) -> Result<Self, SolverError> {
        check_shared(plan)?;
        assert_eq!(
            devices.len(),
            ranks.devices(),
            "the devices the ranks were told of"
        );
        let arrays = TeamArrays::on_ranks(&devices[0], geometry, plan, ranks)?;
        let local = TeamSync::new(devices.len());
        local.add_homed(&arrays.homed());
        let team = (ranks.size(), devices.len());
        let in_core = in_core_members(&devices[0], geometry, &params, plan, team)?;
        // A member whose plan is in-core keeps its homes on its device from the start.
        let share = |device: usize, ctx: &GpuContext| {
            let share = Share::rank_device(ranks, &local, device);
            if in_core[share.index] {
                let portion = Portion {
                    member: share.index,
                    members: share.members,
                };
                arrays.keep_on_device(ctx, geometry, plan, portion)?;
            }
            Ok::<_, SolverError>(share)
        };
        // The rank's first device reads the rank's projections.
        let home = ranks.home(ranks.rank(), geometry.ntheta());
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
        // Every device of every rank must chunk the stages alike.
        let chunks: Vec<u64> = members
            .iter()
            .flat_map(|m| {
                let c = m.operator().chunks();
                [c.0 as u64, c.1 as u64, c.2 as u64]
            })
            .collect();
        let all = ranks.all_gather_words(&chunks).concat();
        let triple = |v: &[u64]| (v[0] as usize, v[1] as usize, v[2] as usize);
        if let Some((i, other)) = all.chunks(3).enumerate().find(|(_, c)| *c != &all[..3]) {
            return Err(SolverError::TeamChunks {
                device: format!("{} of rank {}", i % devices.len(), i / devices.len()),
                chunks: triple(other),
                first: triple(&all[..3]),
            });
        }
        // The data's hash and scale from every rank's projections, in order.
        let digests = members[0].projection_digests();
        let hashes = ranks.all_gather_words(&digests.hashes).concat();
        let sums: Vec<u64> = digests.abs_sums.iter().map(|s| s.to_bits()).collect();
        let sums: Vec<f64> = ranks
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
        let mut team = Self::of(members, local);
        team.ranks = Some(ranks.clone());
        Ok(team)
    }

    /// Whether this process writes the outputs and checkpoints' manifests (the first MPI rank,
    /// or the only process).
    pub fn writes(&self) -> bool {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return ranks.rank() == 0;
        }
        true
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
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return self.write_checkpoint_parts(ranks, &devices[0], path);
        }
        self.members[0].write_checkpoint(&devices[0], path)
    }

    /// The words of each checkpointed array that MPI rank `rank` keeps (none of an array the
    /// checkpoint leaves empty).
    #[cfg(feature = "mpi")]
    fn home_words(
        &self,
        ranks: &crate::distributed::ranks::Ranks,
        rank: usize,
    ) -> [std::ops::Range<usize>; super::checkpoint::ARRAY_COUNT] {
        let solver = &self.members[0];
        let lengths = Checkpoint::array_lengths(solver.op.geometry(), &solver.params);
        let arrays = solver.checkpointed();
        std::array::from_fn(|a| match lengths[a] {
            0 => 0..0,
            _ => ranks.home_words(arrays[a], rank),
        })
    }

    /// [`write_checkpoint`](Self::write_checkpoint) on MPI ranks. Collective: every rank learns
    /// whether every part and the manifest were written, and returns an error naming the rank
    /// that failed if one did (the previous checkpoint stays).
    #[cfg(feature = "mpi")]
    fn write_checkpoint_parts(
        &self,
        ranks: &crate::distributed::ranks::Ranks,
        ctx: &GpuContext,
        path: &std::path::Path,
    ) -> Result<(), SolverError> {
        use super::checkpoint::{Checkpoint, CheckpointError, Part};
        let solver = &self.members[0];
        // A name of this checkpoint's own: the iteration and the first rank's clock.
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let clock = ranks.all_gather_words(&[clock])[0][0];
        let generation = format!("{}-{clock:x}", solver.iterations_done());
        let rank = ranks.rank();
        let written = solver.write_checkpoint_part(
            ctx,
            path,
            &generation,
            rank,
            self.home_words(ranks, rank),
        );
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
                words: self.home_words(ranks, r).map(|h| [h.start, h.end]),
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
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            // The first rank takes every slice; the others take none and send their rows.
            let wanted = match ranks.rank() {
                0 => planes.clone(),
                _ => planes.start..planes.start,
            };
            let slab = self.slices_from_rows(ctx, ranks, wanted)?;
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
    #[cfg(feature = "mpi")]
    fn slices_from_rows(
        &self,
        ctx: &GpuContext,
        ranks: &crate::distributed::ranks::Ranks,
        planes: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, SolverError> {
        let solver = &self.members[0];
        // What the last stage fetched from other ranks is not kept while writing.
        ranks.release_fetched();
        let rows = self.volume_rows(ranks, ranks.rank());
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
        ranks.agree(failed, |rank| SolverError::RankRead { rank })?;
        Ok(slab)
    }

    /// The y rows of the volume MPI rank `rank` keeps (its home of the volume's planes).
    #[cfg(feature = "mpi")]
    fn volume_rows(
        &self,
        ranks: &crate::distributed::ranks::Ranks,
        rank: usize,
    ) -> std::ops::Range<usize> {
        let u = self.members[0].volume_field();
        let words = ranks.home_words(u, rank);
        let plane = u.layout().plane_words;
        words.start / plane..words.end / plane
    }

    /// The z slices of `planes` each MPI rank writes of the volume, as the bounds of their runs
    /// relative to `planes.start`, in rank order (`[0, len]` without ranks): how the ranks
    /// divide the volume when each writes its own part of it ([`crate::io::ZarrPart`]), each
    /// its share of the z slices.
    pub fn volume_part_bounds(&self, planes: std::ops::Range<usize>) -> Vec<usize> {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            let total = self.members[0].op.geometry().n0;
            let mut bounds: Vec<usize> = (0..ranks.size())
                .map(|r| ranks.home(r, total).start.clamp(planes.start, planes.end))
                .collect();
            bounds.push(planes.end);
            return bounds.into_iter().map(|b| b - planes.start).collect();
        }
        vec![0, planes.len()]
    }

    /// This process's index among the MPI ranks (0 without ranks).
    pub fn rank(&self) -> usize {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return ranks.rank();
        }
        0
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
        let solver = &self.members[0];
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return self.slices_from_rows(ctx, ranks, planes);
        }
        let slab = solver.volume_planes(ctx, planes)?;
        self.note_held(4 * slab.len() as u64);
        Ok(slab)
    }

    /// Records in the ledger that this process holds `bytes` of the volume besides its volume
    /// array's resident pages (MPI ranks) or beside nothing (one process, whose array the
    /// ledger does not count, as in [`volume_slab`](Self::volume_slab)).
    pub fn note_held(&self, bytes: u64) {
        #[cfg(feature = "mpi")]
        if self.ranks.is_some() {
            let resident = self.members[0].volume_field().resident_bytes();
            self.slab_ledger
                .fetch_max(resident + bytes, Ordering::Relaxed);
            return;
        }
        self.slab_ledger.fetch_max(bytes, Ordering::Relaxed);
    }

    /// What every MPI rank sent this one in an exchange where each sends at most one message
    /// `(rank, values)`, in rank order (nothing without ranks, where there is no one to send
    /// to). Collective.
    pub fn send_to_one(&self, message: Option<(usize, Vec<f32>)>) -> Vec<f32> {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return ranks.send_to_one(message);
        }
        let _ = message;
        Vec::new()
    }

    /// `path` of the first MPI rank on every rank (`path` without ranks): where the first rank
    /// staged a directory the others write into; `None` when the first rank has none. Collective.
    pub fn first_rank_path(&self, path: Option<&std::path::Path>) -> Option<std::path::PathBuf> {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            use std::os::unix::ffi::{OsStrExt, OsStringExt};
            // A leading word says whether there is a path; then one byte a word.
            let mine: Vec<u64> = match path {
                Some(p) => std::iter::once(1)
                    .chain(p.as_os_str().as_bytes().iter().map(|&b| u64::from(b)))
                    .collect(),
                None => vec![0],
            };
            let first = ranks.all_gather_words(&mine).swap_remove(0);
            return match first.split_first() {
                Some((1, bytes)) => Some(std::path::PathBuf::from(std::ffi::OsString::from_vec(
                    bytes.iter().map(|&b| b as u8).collect(),
                ))),
                _ => None,
            };
        }
        path.map(std::path::Path::to_path_buf)
    }

    /// The most bytes of the volume each process held while [`volume_slab`](Self::volume_slab)
    /// read it, in rank order (one entry without MPI ranks): on an MPI rank, the resident pages
    /// of its volume array (its planes, and fetched ones it had not let go) and the slab's
    /// slices it held. Collective.
    pub fn slab_ledger(&self) -> Vec<u64> {
        let mine = self.slab_ledger.load(Ordering::Relaxed);
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return ranks.all_gather_words(&[mine]).concat();
        }
        vec![mine]
    }

    /// The least of `value` over the MPI ranks (`value` without ranks): what every rank agrees
    /// on where their values may differ. Collective.
    pub fn least(&self, value: u64) -> u64 {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return ranks
                .all_gather_words(&[value])
                .concat()
                .into_iter()
                .min()
                .unwrap_or(value);
        }
        value
    }

    /// The bytes of the volume MPI rank `rank` keeps (the whole volume without ranks).
    pub fn volume_share_bytes(&self, rank: usize) -> u64 {
        let u = self.members[0].volume_field();
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return 4 * ranks.home_words(u, rank).len() as u64;
        }
        let _ = rank;
        u.layout().bytes()
    }

    /// Whether `flag` is set on any MPI rank (on this process otherwise). Collective.
    pub fn any(&self, flag: bool) -> bool {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            return ranks
                .all_gather(vec![f32::from(u8::from(flag))])
                .iter()
                .any(|v| v[0] != 0.0);
        }
        flag
    }

    /// Every MPI rank's setup and iteration times, bytes sent, those before the first outer
    /// iteration counted as setup, and `bus` (its devices' bytes over the bus per iteration)
    /// (empty without ranks). Collective.
    pub fn rank_reports(&self, setup_s: f64, iterations_s: f64, bus: &[u64]) -> Vec<RankReport> {
        #[cfg(feature = "mpi")]
        if let Some(ranks) = &self.ranks {
            let now = SentSoFar::of(ranks);
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
            return ranks
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
                .collect();
        }
        let _ = (setup_s, iterations_s, bus);
        Vec::new()
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

    /// Runs one outer iteration on every device and reports its terms (the same on each).
    pub fn step(&mut self, devices: &[GpuContext]) -> Result<IterationReport, SolverError> {
        assert_eq!(devices.len(), self.members.len(), "one context per member");
        #[cfg(feature = "mpi")]
        if let (Some(ranks), None) = (&self.ranks, &self.setup_sent) {
            self.setup_sent = Some(SentSoFar::of(ranks));
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
        #[cfg(feature = "mpi")]
        let share = self.ranks.as_ref().map(|r| self.home_words(r, r.rank()));
        #[cfg(not(feature = "mpi"))]
        let share = None;
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

    /// Whether this team is one MPI rank's part.
    fn is_ranks(&self) -> bool {
        #[cfg(feature = "mpi")]
        if self.ranks.is_some() {
            return true;
        }
        false
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
