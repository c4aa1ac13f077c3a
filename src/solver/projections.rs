//! How the projections reach the solver: the [`ProjectionBlocks`] a caller hands over a block
//! of angles at a time, the layout of the solver's array of spatial projections, the copy into
//! it, the hash of the projections that names the data in a checkpoint, and the sums that give
//! the data's scale ([`crate::params::DataScale`]).

use std::ops::Range;

use crate::array::{Field, PlaneLayout};
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::gpu::GpuError;
use crate::hash::{fnv1a, fnv1a_continue, FNV_OFFSET};

/// Spatial projections `(ntheta, deth, detw)` in the operator's normalisation, read a block of
/// whole projections at a time.
pub trait ProjectionBlocks {
    /// Fills `out` with the projection words from word `start` on (`start` and `out.len()` are
    /// whole projections).
    fn fill(&self, start: usize, out: &mut [f32]);
}

impl ProjectionBlocks for [f32] {
    fn fill(&self, start: usize, out: &mut [f32]) {
        out.copy_from_slice(&self[start..start + out.len()]);
    }
}

/// Bytes of projections moved to the solver's array at a time.
const PROJECTION_BLOCK_BYTES: usize = 8 << 20;

/// The layout of the spatial projections `(ntheta, deth, detw)`.
pub(super) fn projections_layout(g: &Geometry) -> PlaneLayout {
    PlaneLayout {
        planes: g.ntheta(),
        plane_words: g.deth * g.detw,
        axes_swapped: false,
    }
}

/// What the solver keeps of each projection it read, in angle order: its hash and the sum of its
/// absolute values (f64, summed in pixel order, so the same whoever reads it).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProjectionDigests {
    pub hashes: Vec<u64>,
    pub abs_sums: Vec<f64>,
}

/// Writes projections `keep` of `data` (which needs to hold only those) into `spatial`, and
/// returns the digest of each.
pub(super) fn fill_projections(
    ctx: &GpuContext,
    spatial: &Field,
    data: &(impl ProjectionBlocks + ?Sized),
    keep: Range<usize>,
) -> Result<ProjectionDigests, GpuError> {
    let layout = spatial.layout();
    let planes = (PROJECTION_BLOCK_BYTES / (4 * layout.plane_words)).clamp(1, layout.planes);
    let mut block = vec![0f32; planes * layout.plane_words];
    let mut digests = ProjectionDigests::default();
    for first in keep.clone().step_by(planes) {
        let count = planes.min(keep.end - first);
        let words = &mut block[..count * layout.plane_words];
        let start = first * layout.plane_words;
        data.fill(start, words);
        for plane in words.chunks(layout.plane_words) {
            digests.hashes.push(fnv1a(bytemuck::cast_slice(plane)));
            digests
                .abs_sums
                .push(plane.iter().map(|&v| f64::from(v).abs()).sum());
        }
        spatial.write_words(ctx, start, words)?;
    }
    Ok(digests)
}

/// The hash of the projections from the hash of each (in order): whoever read which.
pub(crate) fn projections_hash(hashes: &[u64]) -> u64 {
    hashes
        .iter()
        .fold(FNV_OFFSET, |h, p| fnv1a_continue(h, &p.to_le_bytes()))
}
