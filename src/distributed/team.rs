//! Several devices working on one reconstruction in one process: one host thread per device,
//! the arrays in host memory shared by all, and each stage's chunks (or each vector kernel's
//! planes) split into contiguous shares, one per device.
//!
//! A member works on its share without waiting for the others until the next value it needs may
//! come from another device: before a stage whose chunks cross the shares of the previous one
//! (the operator's stages run along other axes than the vector kernels' planes), before a
//! gradient reads its neighbours' halo planes, and when a reduction's plane sums are combined.
//! There it [`sync`](Share::sync)s: submits what it recorded, waits until its downloads into the
//! host arrays have landed, and meets the others. Every member records the same sequence of
//! synchronisation points; a member that fails [`abort`](TeamSync::abort)s the team, so the
//! others return an error at their next meeting instead of waiting for it forever.
//!
//! A member whose memory plan is in-core keeps its planes of every array on its device
//! ([`Field::keep_on_device`]); the host arrays stay the medium of the exchanges. At a sync the
//! members tell each other the blocks their next stage reads: each downloads the words of them
//! it holds newer than the host, and after the meeting writes into its device the words of its
//! planes that others wrote on the host. So only the blocks it exchanges cross its bus.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};

use super::shares::{chunk_planes, exchange_groups, share_range};
use crate::array::{BlockView, Field};
use crate::gpu::GpuError;
use crate::gpu::{GpuContext, Recorder};

#[derive(Default)]
struct State {
    /// Members at the current meeting.
    arrived: usize,
    /// Meetings completed.
    generation: u64,
    /// Set when a member failed: (member, cause).
    stopped: Option<(usize, String)>,
    /// One slot per member for [`TeamSync::with_first`], and its result.
    items: Vec<Option<Box<dyn Any + Send>>>,
    result: Option<Box<dyn Any + Send>>,
}

/// The team's arrays some members keep planes of on their devices.
type Homed = Mutex<Vec<Field>>;

/// The meeting point of a team's members: a barrier that a failing member can break.
pub(crate) struct TeamSync {
    members: usize,
    state: Mutex<State>,
    met: Condvar,
    /// The arrays of which members keep planes on their devices.
    homed: Homed,
}

impl TeamSync {
    pub fn new(members: usize) -> Arc<Self> {
        Arc::new(Self {
            members,
            state: Mutex::new(State {
                items: (0..members).map(|_| None).collect(),
                ..State::default()
            }),
            met: Condvar::new(),
            homed: Mutex::default(),
        })
    }

    /// Adds `fields` to the arrays whose planes members may keep on their devices (every
    /// array the members share).
    pub fn add_homed(&self, fields: &[Field]) {
        self.homed
            .lock()
            .expect("homed arrays poisoned")
            .extend(fields.iter().cloned());
    }

    /// The arrays whose planes members may keep on their devices.
    fn homed(&self) -> Vec<Field> {
        self.homed.lock().expect("homed arrays poisoned").clone()
    }

    /// Writes into `ctx`'s device the words of its planes that are newer on the host.
    pub fn host_to_device(&self, ctx: &GpuContext) -> Result<(), GpuError> {
        for f in self.homed() {
            f.host_to_device(ctx)?;
        }
        Ok(())
    }

    /// Brings every word `ctx`'s device holds newer than the host to the host, and waits for
    /// it: before the host arrays are read whole (checkpoints, outputs).
    pub fn device_to_host(&self, ctx: &GpuContext) -> Result<(), GpuError> {
        let mut rec = ctx.recorder("planes to the host");
        for f in self.homed() {
            f.record_home_to_host(ctx, &mut rec)?;
        }
        Share::land(ctx, &mut rec)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A member that panicked while holding the lock left nothing half-written that matters:
        // the team is stopped anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stopped_error(stopped: &(usize, String)) -> GpuError {
        GpuError::TeamStopped {
            member: stopped.0,
            cause: stopped.1.clone(),
        }
    }

    /// Waits until every member arrived (or one stopped the team).
    fn meet(&self) -> Result<(), GpuError> {
        let mut s = self.lock();
        if let Some(stopped) = &s.stopped {
            return Err(Self::stopped_error(stopped));
        }
        let generation = s.generation;
        s.arrived += 1;
        if s.arrived == self.members {
            s.arrived = 0;
            s.generation += 1;
            self.met.notify_all();
            return Ok(());
        }
        while s.generation == generation && s.stopped.is_none() {
            s = self.met.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        match &s.stopped {
            Some(stopped) if s.generation == generation => Err(Self::stopped_error(stopped)),
            _ => Ok(()),
        }
    }

    /// Gives `item` (member `index`'s) to the first member, which runs `act` on every member's
    /// item in member order while the others wait; returns its result to every member.
    fn with_first<T: Send + 'static, R: Clone + Send + 'static>(
        &self,
        index: usize,
        item: T,
        act: impl FnOnce(Vec<T>) -> R,
    ) -> Result<R, GpuError> {
        self.lock().items[index] = Some(Box::new(item));
        self.meet()?;
        if index == 0 {
            let items: Vec<T> = self
                .lock()
                .items
                .iter_mut()
                .map(|i| {
                    *i.take()
                        .expect("every member gave its item before the meeting")
                        .downcast::<T>()
                        .expect("every member gives the same kind of item")
                })
                .collect();
            let result = act(items);
            self.lock().result = Some(Box::new(result));
        }
        self.meet()?;
        let result = self
            .lock()
            .result
            .as_ref()
            .and_then(|r| r.downcast_ref::<R>())
            .expect("the first member left its result")
            .clone();
        // Nobody starts the next exchange before everybody took this result.
        self.meet()?;
        Ok(result)
    }

    /// Stops the team: every member waiting now or later returns an error naming `member` and
    /// `cause`. The first cause stays.
    pub fn abort(&self, member: usize, cause: String) {
        let mut s = self.lock();
        if s.stopped.is_none() {
            s.stopped = Some((member, cause));
        }
        self.met.notify_all();
    }
}

/// How the members of a team meet.
enum Meeting {
    /// Threads of one process, sharing the arrays.
    Threads(Arc<TeamSync>),
    /// MPI ranks, each keeping its home of the arrays (see [`super::ranks`]), each with one
    /// or more devices: `local` is the meeting of the rank's threads, `device` this one's index.
    #[cfg(feature = "mpi")]
    Ranks {
        ranks: Arc<dyn super::Collective>,
        local: Arc<TeamSync>,
        device: usize,
    },
}

/// Blocks of arrays that the next stage of a member reads.
pub(crate) type Reads = Vec<(Field, BlockView)>;

/// What one member of a team does: its index, the team's size and the meeting point.
pub(crate) struct Share {
    pub index: usize,
    pub members: usize,
    meeting: Meeting,
}

impl Share {
    pub fn new(index: usize, sync: &Arc<TeamSync>) -> Arc<Self> {
        Arc::new(Self {
            index,
            members: sync.members,
            meeting: Meeting::Threads(sync.clone()),
        })
    }

    /// The share of device `device` of this process's devices (met at `local`) in the team of
    /// every process's devices: under MPI ranks members are numbered rank by rank, so a rank's
    /// devices hold one contiguous share, its home; alone, the team of its devices.
    pub fn of_process_device(
        processes: &Arc<dyn super::Collective>,
        local: &Arc<TeamSync>,
        device: usize,
    ) -> Arc<Self> {
        #[cfg(feature = "mpi")]
        if processes.as_any().is::<super::ranks::Ranks>() {
            return Self::rank_device(processes, local, device);
        }
        // Only MPI ranks are several processes.
        debug_assert_eq!(processes.size(), 1, "several processes without MPI");
        Self::new(device, local)
    }

    /// [`of_process_device`](Self::of_process_device) under MPI ranks.
    #[cfg(feature = "mpi")]
    fn rank_device(
        ranks: &Arc<dyn super::Collective>,
        local: &Arc<TeamSync>,
        device: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            index: ranks.rank() * local.members + device,
            members: ranks.size() * local.members,
            meeting: Meeting::Ranks {
                ranks: ranks.clone(),
                local: local.clone(),
                device,
            },
        })
    }

    /// This member's contiguous share of `count` items (planes or chunks), in item order: the
    /// first `count % members` members take one more.
    pub fn range(&self, count: usize) -> Range<usize> {
        share_range(self.index, self.members, count)
    }

    /// Member `member`'s planes of `planes` shared in whole chunks of `chunk` planes
    /// ([`chunk_planes`]; chunks of one plane are [`range`](Self::range)'s shares).
    pub fn chunk_range_of(&self, member: usize, planes: usize, chunk: usize) -> Range<usize> {
        chunk_planes(member..member + 1, self.members, planes, chunk)
    }

    /// Submits what `rec` holds, waits until this member's downloads have landed in the host
    /// arrays, and meets the others: after it, every block any member wrote is readable where
    /// the reader reads it (the host array, or the reader's device for its own planes), and the
    /// blocks `reads` names (this member's next stage's) are here. Members that keep planes on
    /// their devices first download the words of the others' `reads` they hold newer than the
    /// host, and after the meeting write into their devices the words of their planes others
    /// wrote on the host.
    pub fn sync(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        reads: impl FnOnce() -> Reads,
    ) -> Result<(), GpuError> {
        Self::land(ctx, rec)?;
        match &self.meeting {
            Meeting::Threads(sync) => {
                let all = sync.with_first(self.index, reads(), |all| all)?;
                let others = all
                    .iter()
                    .enumerate()
                    .filter(|(m, _)| *m != self.index)
                    .flat_map(|(_, r)| r);
                Self::to_host(ctx, rec, others)?;
                sync.meet()?;
                sync.host_to_device(ctx)
            }
            #[cfg(feature = "mpi")]
            Meeting::Ranks { .. } => {
                let ahead = self.ask(reads)?;
                self.finish_ahead(ctx, rec, ahead)
            }
        }
    }

    /// With MPI ranks whose exchanges overlap computation, asks the other ranks now for the
    /// blocks the stage after the next one reads (`reads`), so that the next stage can send
    /// them as it writes them ([`record_ready`](Self::record_ready),
    /// [`push_ready`](Self::push_ready)); [`finish_ahead`](Self::finish_ahead) then replaces
    /// the [`sync`](Self::sync) before that stage. `None` otherwise. Collective.
    pub fn ask_ahead(
        &self,
        #[cfg_attr(not(feature = "mpi"), allow(unused_variables))] reads: impl FnOnce() -> Reads,
    ) -> Result<Option<Ahead>, GpuError> {
        match &self.meeting {
            #[cfg(feature = "mpi")]
            Meeting::Ranks { .. } if self.rank_meeting().0.overlaps_exchanges() => {
                self.ask(reads).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The groups this member records its share of a stage of `chunks` chunks in: with an
    /// exchange asked ahead, each group's blocks go out while the next group computes. Every
    /// member records as many (the exchanges between them are collective).
    pub fn groups(&self, ahead: Option<&Ahead>, chunks: usize) -> usize {
        match ahead {
            Some(_) => exchange_groups(chunks, self.members),
            None => 1,
        }
    }
}

/// The blocks of the next stage but one that ranks asked each other for ahead
/// ([`Share::ask_ahead`]).
#[cfg(feature = "mpi")]
pub(crate) struct Ahead {
    exchange: Arc<Mutex<super::ranks::Exchange>>,
    /// The blocks the rank's other devices read then (of the planes this device keeps).
    others: Reads,
}

/// Without MPI, nothing is asked ahead.
#[cfg(not(feature = "mpi"))]
pub(crate) enum Ahead {}

/// The parts a group of chunks wrote of what other ranks asked ahead, on their way to the
/// host ([`Share::record_ready`]).
#[cfg(feature = "mpi")]
pub(crate) struct Ready {
    /// Downloads submitted before this mark carry them.
    mark: u64,
    parts: Vec<super::ranks::Owed>,
}

/// Without MPI, nothing is ready.
#[cfg(not(feature = "mpi"))]
pub(crate) enum Ready {}

#[cfg(feature = "mpi")]
impl Share {
    /// The MPI meeting's parts: the ranks, the rank's devices' meeting and this device's index.
    fn rank_meeting(&self) -> (&super::ranks::Ranks, &Arc<TeamSync>, usize) {
        match &self.meeting {
            Meeting::Ranks {
                ranks,
                local,
                device,
            } => {
                let ranks = ranks.as_any().downcast_ref::<super::ranks::Ranks>();
                let ranks = ranks.expect("a meeting of ranks holds MPI ranks");
                (ranks, local, *device)
            }
            Meeting::Threads(_) => unreachable!("only ranks exchange ahead"),
        }
    }

    /// Asks the other ranks for the parts of `reads` (every device's of this rank) beyond the
    /// rank's home. Collective.
    fn ask(&self, reads: impl FnOnce() -> Reads) -> Result<Ahead, GpuError> {
        let (ranks, local, device) = self.rank_meeting();
        let (exchange, all) = local.with_first(device, reads(), |all| {
            (Arc::new(Mutex::new(ranks.ask(&all.concat()))), all)
        })?;
        let others = all
            .into_iter()
            .enumerate()
            .filter(|(d, _)| *d != device)
            .flat_map(|(_, r)| r)
            .collect();
        Ok(Ahead { exchange, others })
    }

    /// After a group of chunks that writes `written` is recorded: records the downloads of the
    /// parts of it that other ranks asked ahead and that this device keeps, and submits the
    /// group so that it computes while the previous group's blocks go out.
    pub fn record_ready(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        ahead: &Ahead,
        written: &[(Field, BlockView)],
    ) -> Result<Ready, GpuError> {
        let (parts, fields) = {
            let exchange = lock_exchange(&ahead.exchange);
            let parts = exchange.owed_within(written);
            let fields = exchange.fields_of(&parts);
            (parts, fields)
        };
        for (field, part) in fields.iter().zip(&parts) {
            field.record_to_host(ctx, rec, [(part.start, part.len)])?;
        }
        rec.flush(ctx)?;
        Ok(Ready {
            mark: ctx.download_mark(),
            parts,
        })
    }

    /// Once `ready`'s downloads have landed (waiting only for them: later groups keep the
    /// device computing), sends its parts and the blocks downloaded outside the rank's home.
    /// Collective.
    pub fn push_ready(
        &self,
        ctx: &GpuContext,
        ahead: &Ahead,
        ready: Ready,
    ) -> Result<(), GpuError> {
        ctx.wait_for_downloads_before(ready.mark)?;
        let (ranks, local, device) = self.rank_meeting();
        local.with_first(device, ready.parts, |all| {
            ranks.push_while_computing(&mut lock_exchange(&ahead.exchange), all.concat());
        })
    }

    /// The [`sync`](Self::sync) before the stage whose reads `ahead` asked for: once this
    /// member's downloads have landed, the rest of the exchange.
    pub fn finish_ahead(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        ahead: Ahead,
    ) -> Result<(), GpuError> {
        Self::land(ctx, rec)?;
        let (ranks, local, device) = self.rank_meeting();
        for (field, runs) in lock_exchange(&ahead.exchange).owed_runs() {
            field.record_to_host(ctx, rec, runs)?;
        }
        Self::to_host(ctx, rec, ahead.others.iter())?;
        local.with_first(device, (), |_| {
            ranks.finish(&mut lock_exchange(&ahead.exchange))
        })?;
        local.host_to_device(ctx)
    }
}

#[cfg(not(feature = "mpi"))]
impl Share {
    pub fn record_ready(
        &self,
        _: &GpuContext,
        _: &mut Recorder,
        ahead: &Ahead,
        _: &[(Field, BlockView)],
    ) -> Result<Ready, GpuError> {
        match *ahead {}
    }

    pub fn push_ready(&self, _: &GpuContext, ahead: &Ahead, _: Ready) -> Result<(), GpuError> {
        match *ahead {}
    }

    pub fn finish_ahead(
        &self,
        _: &GpuContext,
        _: &mut Recorder,
        ahead: Ahead,
    ) -> Result<(), GpuError> {
        match ahead {}
    }
}

/// The exchange asked ahead, locked (a device thread that panicked left it whole: the team is
/// stopped anyway).
#[cfg(feature = "mpi")]
fn lock_exchange(
    exchange: &Mutex<super::ranks::Exchange>,
) -> std::sync::MutexGuard<'_, super::ranks::Exchange> {
    exchange.lock().unwrap_or_else(|e| e.into_inner())
}

impl Share {
    /// Downloads the words of `reads` this member holds newer on its device than the host, and
    /// waits until they landed.
    fn to_host<'a>(
        ctx: &GpuContext,
        rec: &mut Recorder,
        reads: impl Iterator<Item = &'a (Field, BlockView)>,
    ) -> Result<(), GpuError> {
        for (field, view) in reads.filter(|(f, _)| f.has_homes()) {
            field.record_to_host(ctx, rec, view.runs())?;
        }
        Self::land(ctx, rec)
    }

    /// Submits what `rec` holds and waits until this member's downloads have landed.
    pub fn land(ctx: &GpuContext, rec: &mut Recorder) -> Result<(), GpuError> {
        ctx.submit(std::mem::replace(rec, ctx.recorder("team")))?;
        ctx.complete_downloads()
    }

    /// Meets the others without touching the device: after it, every member has recorded (and
    /// so read from the host) what it recorded before.
    pub fn meet(&self) -> Result<(), GpuError> {
        match &self.meeting {
            Meeting::Threads(sync) => sync.meet(),
            // A rank reads other ranks' planes from its own copies: only its threads share them.
            #[cfg(feature = "mpi")]
            Meeting::Ranks { local, .. } => local.meet(),
        }
    }

    /// Every member's `part`, in member order.
    pub fn all_gather(&self, part: Vec<f32>) -> Result<Vec<Vec<f32>>, GpuError> {
        match &self.meeting {
            Meeting::Threads(sync) => sync.with_first(self.index, part, |all| all),
            #[cfg(feature = "mpi")]
            Meeting::Ranks {
                ranks,
                local,
                device,
            } => local.with_first(*device, part, |mine| {
                // Each rank's devices' parts, flattened, with their lengths to split them.
                let lengths: Vec<u64> = mine.iter().map(|p| p.len() as u64).collect();
                let all_lengths = ranks.all_gather_words(&lengths);
                let all = ranks.all_gather(mine.concat());
                all.iter()
                    .zip(&all_lengths)
                    .flat_map(|(flat, lengths)| {
                        let mut at = 0;
                        lengths.iter().map(move |&l| {
                            let part = flat[at..at + l as usize].to_vec();
                            at += l as usize;
                            part
                        })
                    })
                    .collect()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_items_in_order_once() {
        for members in 1..6 {
            let sync = TeamSync::new(members);
            for count in 0..20 {
                let mut next = 0;
                for index in 0..members {
                    let r = Share::new(index, &sync).range(count);
                    assert_eq!(r.start, next);
                    assert!(r.len() == count / members || r.len() == count / members + 1);
                    next = r.end;
                }
                assert_eq!(next, count);
            }
        }
    }

    #[test]
    fn members_gather_in_member_order_and_a_failing_member_stops_the_others() {
        let sync = TeamSync::new(3);
        let gathered: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|i| {
                    let share = Share::new(i, &sync);
                    s.spawn(move || share.all_gather(vec![i as f32; i + 1]).unwrap())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in &gathered {
            assert_eq!(g, &vec![vec![0.0], vec![1.0, 1.0], vec![2.0, 2.0, 2.0]]);
        }
        let results: Vec<Result<(), GpuError>> = std::thread::scope(|s| {
            let waiting: Vec<_> = (0..2)
                .map(|i| {
                    let share = Share::new(i, &sync);
                    s.spawn(move || share.meet())
                })
                .collect();
            sync.abort(2, "out of memory".into());
            waiting.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in results {
            let message = r.unwrap_err().to_string();
            assert!(message.contains("device 2") && message.contains("out of memory"));
        }
    }
}
