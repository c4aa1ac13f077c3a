//! How work is divided among the members of a team (the devices of one process, or every device
//! of every MPI rank): each takes one contiguous share of a stage's chunks or of an array's planes,
//! in order, so that the shares and hence the bits do not depend on how many members there are.

use std::ops::Range;

/// The share of member `index` of `members` in `count` items (planes or chunks), in item order:
/// the first `count % members` members take one more.
pub fn share_range(index: usize, members: usize, count: usize) -> Range<usize> {
    let (base, extra) = (count / members, count % members);
    let start = index * base + index.min(extra);
    start..start + base + usize::from(index < extra)
}
