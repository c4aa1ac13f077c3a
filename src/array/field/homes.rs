//! Device homes: the planes of a team's shared host array that one member keeps on its device
//! for the whole run (where its memory plan is in-core), and where the newest values of their
//! words are: on the device only (the member computed them there and nobody asked for them
//! yet), on the host only (another member or rank wrote them there), or in both.
//!
//! The host array stays the medium of the exchanges: a member reads and writes its home on its
//! device, and only the words other members read or write cross the bus (see
//! [`crate::distributed::team`], which brings them across where the members meet).
//!
//! Here are the homes' bookkeeping ([`Runs`], [`DeviceHome`]), the split of a block at a
//! home's edges, and the [`Field`] methods that keep planes on a device and record a block's
//! copies between the kernels' buffers, a home and the host array.

use std::ops::Range;
use std::sync::atomic::Ordering;

use super::{BlockView, Field, HostArray, Pending};
use crate::gpu::GpuError;
use crate::gpu::{Completion, GpuBuffer, GpuContext, Recorder};

/// Disjoint word ranges, in order.
#[derive(Debug, Default, Clone)]
pub(super) struct Runs(Vec<Range<usize>>);

impl Runs {
    /// Adds `r` (merged with its neighbours).
    pub fn insert(&mut self, r: Range<usize>) {
        if r.is_empty() {
            return;
        }
        let first = self.0.partition_point(|x| x.end < r.start);
        let last = self.0.partition_point(|x| x.start <= r.end);
        let merged = if first < last {
            self.0[first].start.min(r.start)..self.0[last - 1].end.max(r.end)
        } else {
            r
        };
        self.0.splice(first..last, [merged]);
    }

    /// Takes `r` out.
    pub fn remove(&mut self, r: Range<usize>) {
        if r.is_empty() {
            return;
        }
        let first = self.0.partition_point(|x| x.end <= r.start);
        let last = self.0.partition_point(|x| x.start < r.end);
        let kept: Vec<Range<usize>> = self.0[first..last]
            .iter()
            .flat_map(|x| [x.start..r.start.min(x.end), r.end.max(x.start)..x.end])
            .filter(|x| !x.is_empty())
            .collect();
        self.0.splice(first..last, kept);
    }

    /// The parts of `r` in the runs, in order.
    pub fn within(&self, r: Range<usize>) -> Vec<Range<usize>> {
        let first = self.0.partition_point(|x| x.end <= r.start);
        self.0[first..]
            .iter()
            .take_while(|x| x.start < r.end)
            .map(|x| x.start.max(r.start)..x.end.min(r.end))
            .collect()
    }

    /// Every run, taken out.
    pub fn take(&mut self) -> Vec<Range<usize>> {
        std::mem::take(&mut self.0)
    }
}

/// The words of a host array that one device keeps (see the module documentation).
pub(super) struct DeviceHome {
    /// The device ([`crate::gpu::GpuContext::id`]).
    pub device: usize,
    /// The words it keeps, `buffer` holding word `words.start` first.
    pub words: Range<usize>,
    pub buffer: GpuBuffer,
    /// Words whose newest values are on the device only.
    pub device_only: Runs,
    /// Words whose newest values are on the host only.
    pub host_only: Runs,
}

impl DeviceHome {
    /// Records that the host's words `r` are newer than the device's (those of the home).
    pub fn written_on_host(&mut self, r: Range<usize>) {
        let r = r.start.max(self.words.start)..r.end.min(self.words.end);
        if r.start < r.end {
            self.device_only.remove(r.clone());
            self.host_only.insert(r);
        }
    }

    /// Records that the device's words `r` (of the home) are newer than the host's.
    pub fn written_on_device(&mut self, r: Range<usize>) {
        self.host_only.remove(r.clone());
        self.device_only.insert(r);
    }
}

impl HostArray {
    /// The homes on the team members' devices.
    fn homes(&self) -> std::sync::MutexGuard<'_, Vec<DeviceHome>> {
        self.homes.lock().expect("device homes poisoned")
    }

    /// Records that the host's words `runs` are newer than any device's copy of them.
    pub(super) fn written_on_host(&self, runs: impl IntoIterator<Item = (usize, usize)>) {
        let mut homes = self.homes();
        if homes.is_empty() {
            return;
        }
        for (start, len) in runs {
            for home in homes.iter_mut() {
                home.written_on_host(start..start + len);
            }
        }
    }

    /// An error if a device holds newer values of some of the words `r` than the host: a read
    /// of them before they were brought to the host would see older values.
    pub(super) fn check_current(&self, label: &str, r: Range<usize>) -> Result<(), GpuError> {
        for home in self.homes().iter() {
            if let Some(newer) = home.device_only.within(r.clone()).first() {
                return Err(GpuError::Readback(format!(
                    "words {newer:?} of {label:?} are newer on a team member's device than on \
                     the host: the team must bring them to the host before they are read there"
                )));
            }
        }
        Ok(())
    }
}

/// One run of a block split at the edges of a device home: its position in the contiguous
/// block, its first word in the array, its length, and whether it lies in the home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    at: usize,
    start: usize,
    len: usize,
    home: bool,
}

/// The runs of `block` split at the edges of `home`, in the order they lie in the contiguous
/// block.
fn pieces(block: &BlockView, home: &Range<usize>) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut at = 0;
    for (start, len) in block.runs() {
        let end = start + len;
        let before = (start, end.min(home.start), false);
        let inside = (start.max(home.start), end.min(home.end), true);
        let after = (start.max(home.end), end, false);
        for (lo, hi, inside) in [before, inside, after] {
            if lo < hi {
                out.push(Piece {
                    at: at + lo - start,
                    start: lo,
                    len: hi - lo,
                    home: inside,
                });
            }
        }
        at += len;
    }
    out
}

/// Pieces of a block contiguous in it: (position in the block, words, their (start, length)
/// runs in the array).
type HostGroup = (usize, usize, Vec<(usize, usize)>);

/// The pieces outside the home grouped into runs contiguous in the block.
fn host_groups(pieces: &[Piece]) -> Vec<HostGroup> {
    let mut groups: Vec<HostGroup> = Vec::new();
    for p in pieces.iter().filter(|p| !p.home) {
        match groups.last_mut() {
            Some((at, len, runs)) if *at + *len == p.at => {
                *len += p.len;
                runs.push((p.start, p.len));
            }
            _ => groups.push((p.at, p.len, vec![(p.start, p.len)])),
        }
    }
    groups
}

/// The parts of `run` outside `home` (a device's, or an MPI rank's planes), as (start, length).
pub(super) fn outside(
    run: Range<usize>,
    home: &Range<usize>,
) -> impl Iterator<Item = (usize, usize)> {
    let before = run.start..run.end.min(home.start);
    let after = run.start.max(home.end)..run.end;
    [before, after]
        .into_iter()
        .filter(|r| r.start < r.end)
        .map(|r| (r.start, r.len()))
}

impl Field {
    /// Keeps planes `planes` of this host array on `ctx`'s device from now on (a member of a
    /// team whose memory plan is in-core): the member's kernels read and write them there
    /// ([`record_in`](Self::record_in), [`record_out`](Self::record_out)), and only the words
    /// other members read or write cross the bus, where the team meets
    /// ([`record_to_host`](Self::record_to_host), [`host_to_device`](Self::host_to_device)).
    /// The array must still hold what it was made with (zeros), as the new buffer does.
    pub(crate) fn keep_on_device(
        &self,
        ctx: &GpuContext,
        planes: Range<usize>,
    ) -> Result<(), GpuError> {
        let h = self
            .host()
            .expect("only host arrays keep planes on a device");
        let words =
            planes.start * self.layout().plane_words..planes.end * self.layout().plane_words;
        let buffer = ctx.storage_buffer(
            &format!("{} (planes {planes:?})", self.label()),
            4 * words.len() as u64,
        )?;
        h.homes().push(DeviceHome {
            device: ctx.id(),
            words,
            buffer,
            device_only: Default::default(),
            host_only: Default::default(),
        });
        Ok(())
    }

    /// The words `ctx`'s device keeps of this array, and its buffer of them.
    fn home_on(&self, ctx: &GpuContext) -> Option<(Range<usize>, GpuBuffer)> {
        let h = self.host()?;
        let homes = h.homes();
        let home = homes.iter().find(|d| d.device == ctx.id())?;
        Some((home.words.clone(), home.buffer.clone()))
    }

    /// Whether some device keeps planes of this array.
    pub(crate) fn has_homes(&self) -> bool {
        self.host().is_some_and(|h| !h.homes().is_empty())
    }

    /// Records the copy of `block` of this host array into `target` (contiguous): the words
    /// `ctx`'s device keeps copied there on the device, the others uploaded from the host
    /// (after the downloads into them landed).
    pub(crate) fn record_in(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        target: &GpuBuffer,
        block: &BlockView,
    ) -> Result<(), GpuError> {
        let Some((home, buffer)) = self.home_on(ctx) else {
            return rec.upload_with(ctx, target, 0, || self.gather(ctx, block));
        };
        let h = self.host().expect("a host array");
        let pieces = pieces(block, &home);
        // The uploads first: they land at the start of their segment, before the copies.
        for (at, _, runs) in host_groups(&pieces) {
            rec.upload_with(ctx, target, at as u64, || {
                let mut out = Vec::new();
                for &(start, len) in &runs {
                    self.settle(ctx, &BlockView::words_range(start, len))?;
                    h.check_current(self.label(), start..start + len)?;
                    let w = h.words.read().expect("host array poisoned");
                    out.extend_from_slice(&w.words()[start..start + len]);
                }
                Ok(out)
            })?;
        }
        for p in pieces.iter().filter(|p| p.home) {
            let from = 4 * (p.start - home.start) as u64;
            rec.copy((&buffer, from), (target, 4 * p.at as u64), 4 * p.len as u64);
        }
        Ok(())
    }

    /// Records the copy of `source` (contiguous) into `block` of this host array: the words
    /// `ctx`'s device keeps copied there on the device, the others downloaded into the host
    /// array. `tap`, if any, receives the bytes of the whole block (`ctx` must keep none of
    /// them then).
    pub(crate) fn record_out(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        source: &GpuBuffer,
        block: &BlockView,
        tap: Option<Completion>,
    ) -> Result<(), GpuError> {
        let bytes = block.len_words() as u64 * 4;
        let home = self.home_on(ctx);
        let (home, buffer) = match (home, tap) {
            (Some(home), None) => home,
            (home, tap) => {
                assert!(
                    home.is_none(),
                    "a tapped download writes the host array only"
                );
                let scatter = self.scatter(*block);
                let done: Completion = match tap {
                    Some(tap) => Box::new(move |bytes: &[u8]| {
                        tap(bytes);
                        scatter(bytes);
                    }),
                    None => scatter,
                };
                return rec.download(ctx, source, 0, bytes, done);
            }
        };
        let h = self.host().expect("a host array");
        let pieces = pieces(block, &home);
        for p in pieces.iter().filter(|p| p.home) {
            let to = 4 * (p.start - home.start) as u64;
            rec.copy((source, 4 * p.at as u64), (&buffer, to), 4 * p.len as u64);
            let mut homes = h.homes();
            let mine = homes.iter_mut().find(|d| d.device == ctx.id());
            mine.expect("the home found above")
                .written_on_device(p.start..p.start + p.len);
        }
        for (at, len, runs) in host_groups(&pieces) {
            let done = self.scatter_runs(runs);
            rec.download(ctx, source, 4 * at as u64, 4 * len as u64, done)?;
        }
        Ok(())
    }

    /// Records the downloads of the words of `runs` that `ctx`'s device keeps newer than the
    /// host into the host array (what other members read of them); the host array holds them
    /// once the downloads landed.
    pub(crate) fn record_to_host(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
        runs: impl IntoIterator<Item = (usize, usize)>,
    ) -> Result<(), GpuError> {
        let Some(h) = self.host() else { return Ok(()) };
        let (buffer, newer, base) = {
            let mut homes = h.homes();
            let Some(home) = homes.iter_mut().find(|d| d.device == ctx.id()) else {
                return Ok(());
            };
            let mut newer = Vec::new();
            for (start, len) in runs {
                for r in home.device_only.within(start..start + len) {
                    home.device_only.remove(r.clone());
                    newer.push(r);
                }
            }
            (home.buffer.clone(), newer, home.words.start)
        };
        for r in newer {
            let done = self.scatter_home(r.clone());
            let (from, bytes) = (4 * (r.start - base) as u64, 4 * r.len() as u64);
            rec.download(ctx, &buffer, from, bytes, done)?;
        }
        Ok(())
    }

    /// The completion of a download of a device's words `r` of its own home into the host
    /// array: the host is then as new as the device (nothing is marked).
    fn scatter_home(&self, r: Range<usize>) -> Completion {
        let h = self.host().expect("a host array");
        let id = h.next.fetch_add(1, Ordering::Relaxed);
        let view = BlockView::words_range(r.start, r.len());
        h.pending
            .lock()
            .expect("pending downloads poisoned")
            .push((id, view));
        let pending = Pending(self.clone(), id);
        Box::new(move |bytes: &[u8]| {
            let h = pending.0.host().expect("a host array");
            let mut w = h.words.write().expect("host array poisoned");
            for (word, c) in w.words_mut()[r.clone()]
                .iter_mut()
                .zip(bytes.chunks_exact(4))
            {
                *word = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        })
    }

    /// Records the downloads of every word `ctx`'s device keeps newer than the host (before
    /// the host array is read whole: checkpoints, outputs).
    pub(crate) fn record_home_to_host(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
    ) -> Result<(), GpuError> {
        let words = self.layout().words();
        self.record_to_host(ctx, rec, [(0, words)])
    }

    /// Writes into `ctx`'s device the words of its home that are newer on the host (written
    /// there by other members, ranks, or a checkpoint being resumed); they land before the
    /// next submission.
    pub(crate) fn host_to_device(&self, ctx: &GpuContext) -> Result<(), GpuError> {
        let Some(h) = self.host() else { return Ok(()) };
        let (buffer, runs, base) = {
            let mut homes = h.homes();
            let Some(home) = homes.iter_mut().find(|d| d.device == ctx.id()) else {
                return Ok(());
            };
            (home.buffer.clone(), home.host_only.take(), home.words.start)
        };
        for r in runs {
            self.settle(ctx, &BlockView::words_range(r.start, r.len()))?;
            let w = h.words.read().expect("host array poisoned");
            ctx.write(&buffer, (r.start - base) as u64, &w.words()[r]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{BlockView, Runs};
    use std::collections::BTreeSet;

    /// Inserting and removing ranges keeps exactly the words a set of words would, and `within`
    /// returns them in order.
    #[test]
    fn runs_hold_the_words_a_set_would() {
        let mut runs = Runs::default();
        let mut words = BTreeSet::new();
        let ops: [(bool, usize, usize); 12] = [
            (true, 10, 20),
            (true, 30, 40),
            (true, 20, 25),
            (false, 15, 32),
            (true, 0, 3),
            (true, 50, 60),
            (false, 55, 56),
            (true, 3, 10),
            (false, 0, 1),
            (true, 38, 51),
            (false, 70, 80),
            (true, 56, 58),
        ];
        for (add, a, b) in ops {
            if add {
                runs.insert(a..b);
                words.extend(a..b);
            } else {
                runs.remove(a..b);
                words.retain(|w| !(a..b).contains(w));
            }
            let held: Vec<usize> = runs.within(0..100).into_iter().flatten().collect();
            assert_eq!(held, words.iter().copied().collect::<Vec<_>>());
            let part: Vec<usize> = runs.within(12..54).into_iter().flatten().collect();
            let expected: Vec<usize> = words.range(12..54).copied().collect();
            assert_eq!(part, expected);
            // Runs stay disjoint and apart (merged).
            let all = runs.within(0..100);
            assert!(all.windows(2).all(|w| w[0].end < w[1].start), "{all:?}");
        }
    }

    /// A block's runs split at a home's edges: every word once, in block order, each piece
    /// wholly in or out of the home, whatever side of it the runs lie on.
    #[test]
    fn pieces_split_a_block_at_the_edges_of_a_home() {
        // 6 planes of 20 words; the block takes words 4..12 of every plane.
        let block = BlockView {
            offset: 4,
            strides: [20, 20, 1],
            extents: [6, 1, 8],
            words: 1,
        };
        for home in [0..0, 30..70, 0..120, 45..47, 100..130, 8..9] {
            let p = super::pieces(&block, &home);
            let mut at = 0;
            let mut all = Vec::new();
            for piece in &p {
                assert_eq!(piece.at, at, "{home:?} {p:?}");
                at += piece.len;
                let words = piece.start..piece.start + piece.len;
                assert!(
                    words.clone().all(|w| home.contains(&w) == piece.home),
                    "{home:?}"
                );
                all.extend(words);
            }
            let expected: Vec<usize> = block.runs().flat_map(|(s, l)| s..s + l).collect();
            assert_eq!(all, expected, "{home:?}");
        }
    }

    /// A block read from the device (its runs next to each other downloaded as one) and from a
    /// host array gives the block's words in block order: z slices of a volume stored by y row
    /// (runs out of storage order) and whole planes.
    #[test]
    fn a_block_reads_its_words_in_block_order_from_the_device_and_the_host() {
        use crate::array::{Field, PlaneLayout, Residency};
        let ctx = crate::gpu::test_context();
        // A volume (n0, n1, n2) = (5, 4, 3) stored by y row: planes of 5 x 3 words.
        let (n0, n1, n2) = (5u64, 4u64, 3u64);
        let layout = PlaneLayout {
            planes: n1 as usize,
            plane_words: (n0 * n2) as usize,
            axes_swapped: true,
        };
        let values: Vec<f32> = (0..layout.words()).map(|i| i as f32).collect();
        // Z slices 1..4 of y rows 1..4 (runs out of storage order, three to a download), and
        // whole planes 2..4 (every run next to the last: one download).
        let slices = BlockView {
            offset: (n0 + 1) * n2,
            strides: [n2, n0 * n2, 1],
            extents: [3, 3, n2],
            words: 1,
        };
        let whole_rows = BlockView {
            offset: 2 * n0 * n2,
            strides: [n0 * n2, n2, 1],
            extents: [2, n0, n2],
            words: 1,
        };
        for residency in [Residency::Device, Residency::Host] {
            let f = Field::new(&ctx, "block", layout, &residency).unwrap();
            f.write(&ctx, &values).unwrap();
            for block in [slices, whole_rows] {
                let expected: Vec<f32> = block
                    .runs()
                    .flat_map(|(s, l)| values[s..s + l].to_vec())
                    .collect();
                let got = f.read_block(&ctx, &block).unwrap();
                assert!(
                    got.len() == expected.len()
                        && got
                            .iter()
                            .zip(&expected)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{residency:?} {block:?}"
                );
            }
        }
        // The slices' words, by hand: slice z, row y, column x of the volume.
        let f = Field::new(&ctx, "block", layout, &Residency::Device).unwrap();
        f.write(&ctx, &values).unwrap();
        let got = f.read_block(&ctx, &slices).unwrap();
        let (z, y, x) = (2u64, 3u64, 1u64);
        let at = (((z - 1) * 3 + (y - 1)) * n2 + x) as usize;
        assert!(got[at] == values[((y * n0 + z) * n2 + x) as usize]);
    }
}
