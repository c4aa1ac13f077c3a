//! Blocks of an array: the strided views of its elements that a kernel reads or writes at a
//! time, and the runs of words they are made of.

/// A strided block of an array's elements: element (i0, i1, i2) at
/// `offset + i0 s0 + i1 s1 + i2 s2` (the innermost stride is 1), `words` f32 words each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockView {
    pub offset: u64,
    pub strides: [u64; 3],
    pub extents: [u64; 3],
    pub words: u64,
}

impl BlockView {
    /// The block's words in order: (start word, length) of each contiguous run.
    pub(crate) fn runs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let [e0, e1, e2] = self.extents;
        let w = self.words;
        debug_assert!(self.strides[2] == 1 || e2 == 1);
        (0..e0).flat_map(move |i0| {
            (0..e1).map(move |i1| {
                let start = (self.offset + i0 * self.strides[0] + i1 * self.strides[1]) * w;
                (start as usize, (e2 * w) as usize)
            })
        })
    }

    /// Whether the two blocks share a word: disjoint spans say no at once; otherwise their runs,
    /// in order, are swept for an intersection.
    pub(super) fn overlaps(&self, other: &BlockView) -> bool {
        let span = |b: &BlockView| {
            let lo = b.runs().map(|(s, _)| s).min()?;
            let hi = b.runs().map(|(s, l)| s + l).max()?;
            Some((lo, hi))
        };
        let (Some((a0, a1)), Some((b0, b1))) = (span(self), span(other)) else {
            return false;
        };
        if a1 <= b0 || b1 <= a0 {
            return false;
        }
        let sorted = |b: &BlockView| {
            let mut r: Vec<(usize, usize)> = b.runs().filter(|r| r.1 > 0).collect();
            r.sort_unstable();
            r
        };
        let (a, b) = (sorted(self), sorted(other));
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let (x, y) = (a[i], b[j]);
            if x.0 < y.0 + y.1 && y.0 < x.0 + x.1 {
                return true;
            }
            if x.0 + x.1 <= y.0 + y.1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        false
    }

    /// Words `[start, start + len)` of an array, as a block.
    pub(super) fn words_range(start: usize, len: usize) -> Self {
        Self {
            offset: start as u64,
            strides: [0, 0, 1],
            extents: [1, 1, len as u64],
            words: 1,
        }
    }

    /// Words of the block.
    pub fn len_words(&self) -> usize {
        (self.extents.iter().product::<u64>() * self.words) as usize
    }

    /// A view of planes `[lo, hi)` of an array of `plane_words` words per plane, as words.
    pub fn planes(lo: usize, hi: usize, plane_words: usize) -> Self {
        Self {
            offset: (lo * plane_words) as u64,
            strides: [plane_words as u64, 0, 1],
            extents: [(hi - lo) as u64, 1, plane_words as u64],
            words: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BlockView;
    use std::collections::HashSet;

    fn words(b: &BlockView) -> HashSet<usize> {
        b.runs().flat_map(|(s, l)| s..s + l).collect()
    }

    /// Two blocks overlap exactly when they share a word: strided blocks of one array (rows of
    /// every plane, planes, single words) against each other, by brute force.
    #[test]
    fn blocks_overlap_exactly_when_they_share_a_word() {
        // An array of 6 planes of 5 rows of 4 elements, 2 words each.
        let block = |offset, strides, extents| BlockView {
            offset,
            strides,
            extents,
            words: 2,
        };
        let mut blocks = Vec::new();
        for lo in 0..5u64 {
            for len in 1..=5 - lo {
                // Rows [lo, lo + len) of every plane (a U2 block), and planes (an F block).
                blocks.push(block(lo * 4, [20, 4, 1], [6, len, 4]));
                blocks.push(block(lo * 20, [20, 4, 1], [len, 5, 4]));
            }
        }
        blocks.push(BlockView::words_range(37, 3));
        blocks.push(BlockView::words_range(0, 240));
        blocks.push(BlockView::words_range(239, 1));
        for a in &blocks {
            for b in &blocks {
                let shared = !words(a).is_disjoint(&words(b));
                assert_eq!(a.overlaps(b), shared, "{a:?} {b:?}");
            }
        }
    }
}
