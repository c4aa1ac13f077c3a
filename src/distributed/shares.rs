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

/// Groups a stage's share of chunks is recorded in when its blocks go out while it computes:
/// each group's blocks travel while the next group computes, so all but the last group's
/// exchange is hidden. Every member of `members` takes as many of a stage of `chunks` chunks
/// (the exchanges between them are collective): up to four, and no more than the largest share
/// holds chunks (one when every member has one chunk at most: nothing to pipeline).
pub fn exchange_groups(chunks: usize, members: usize) -> usize {
    const MOST: usize = 4;
    MOST.min(chunks.div_ceil(members.max(1))).max(1)
}

/// The planes of `planes` that members `group` of `members` compute together when a stage
/// takes the planes in chunks of `chunk` (the last one shorter), each member its
/// [`share_range`] of the chunks: what a rank of those members keeps for that stage to read and
/// write at home.
pub fn chunk_planes(
    group: Range<usize>,
    members: usize,
    planes: usize,
    chunk: usize,
) -> Range<usize> {
    let chunk = chunk.max(1);
    let count = planes.div_ceil(chunk);
    let first = share_range(group.start, members, count).start;
    let end = share_range(group.end - 1, members, count).end;
    (first * chunk).min(planes)..(end * chunk).min(planes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_planes_tile_the_planes_along_the_chunks_of_each_group() {
        for (planes, chunk, ranks, devices) in [(64, 8, 3, 1), (37, 4, 4, 2), (10, 3, 5, 1)] {
            let members = ranks * devices;
            let mut next = 0;
            for r in 0..ranks {
                let group = r * devices..(r + 1) * devices;
                let home = chunk_planes(group.clone(), members, planes, chunk);
                assert_eq!(home.start, next);
                // The home starts where the group's first chunk does and holds exactly the
                // planes of its chunks.
                let count = planes.div_ceil(chunk);
                let chunks = share_range(group.start, members, count).start
                    ..share_range(group.end - 1, members, count).end;
                let held: usize = chunks.map(|c| chunk.min(planes - c * chunk)).sum();
                assert_eq!(home.len(), held);
                next = home.end;
            }
            assert_eq!(next, planes);
        }
        // Chunks of one plane are the planes' shares.
        assert_eq!(chunk_planes(1..2, 3, 10, 1), share_range(1, 3, 10));
    }

    #[test]
    fn exchange_groups_are_at_most_four_and_no_more_than_the_largest_share_of_chunks() {
        for (chunks, members, groups) in [(8, 2, 4), (8, 3, 3), (9, 8, 2), (8, 8, 1), (32, 64, 1)] {
            assert_eq!(
                exchange_groups(chunks, members),
                groups,
                "{chunks} chunks, {members}"
            );
        }
    }
}
