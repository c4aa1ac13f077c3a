//! Device homes: the planes of a team's shared host array that one member keeps on its device
//! for the whole run (where its memory plan is in-core), and where the newest values of their
//! words are: on the device only (the member computed them there and nobody asked for them
//! yet), on the host only (another member or rank wrote them there), or in both.
//!
//! The host array stays the medium of the exchanges: a member reads and writes its home on its
//! device, and only the words other members read or write cross the bus (see
//! [`crate::distributed::team`], which brings them across where the members meet).

use std::ops::Range;

use crate::gpu::GpuBuffer;

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

#[cfg(test)]
mod tests {
    use super::Runs;
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
}
