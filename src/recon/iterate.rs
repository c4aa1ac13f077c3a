//! The current iterate as an application sees it after each outer iteration
//! ([`super::Reconstructor::on_iterate`]): on the device, or a host copy where it streams.

use crate::gpu::GpuContext;
use crate::operator::Geometry;
use crate::solver::AdmmTeam;

use super::{Padding, ReconError};

/// The current iterate after an outer iteration, where the solver keeps it: what
/// [`Reconstructor::on_iterate`] hands its callback. An application draws it without a host
/// round trip when it is on the device ([`on_device`](Self::on_device), with
/// [`crate::gpu::SlicePass`]), or reads a host copy ([`read_volume`](Self::read_volume)) when
/// the volume streams.
pub struct IterateView<'v> {
    /// The outer iteration just done (0 first).
    pub iteration: usize,
    pub(super) ctx: &'v GpuContext,
    /// Whether the volume array is the one device's own (one device, no MPI ranks).
    pub(super) single: bool,
    pub(super) team: &'v AdmmTeam,
    pub(super) padded: &'v Geometry,
    pub(super) padding: &'v Padding,
}

impl IterateView<'_> {
    /// The device the run's first solver works on (the one [`on_device`](Self::on_device)'s
    /// buffer lives on).
    pub fn ctx(&self) -> &GpuContext {
        self.ctx
    }

    /// Where the shown volume `(n0, n1, n2)` of the input geometry lies in the solver's padded
    /// array.
    pub fn layout(&self) -> crate::gpu::VolumeLayout {
        let g = &self.padded;
        let v = &self.padding.volume;
        crate::gpu::VolumeLayout {
            padded: [g.n0, g.n1, g.n2],
            origin: [v[0][0], v[1][0], v[2][0]],
            shape: [
                g.n0 - v[0][0] - v[0][1],
                g.n1 - v[1][0] - v[1][1],
                g.n2 - v[2][0] - v[2][1],
            ],
        }
    }

    /// The volume's device buffer on [`ctx`](Self::ctx), when the whole volume lives there (it
    /// is valid until the callback returns; work recorded on it queues behind the iteration's);
    /// `None` when it streams from host memory or scratch files, or the run shares its arrays
    /// among several devices or MPI ranks.
    pub fn on_device(&self) -> Option<crate::gpu::DeviceVolume<'_>> {
        let buffer = self.team.solver().volume_field().device_buffer()?;
        self.single.then(|| crate::gpu::DeviceVolume {
            buffer,
            layout: self.layout(),
        })
    }

    /// A host copy of the solver's whole (padded) array, laid out as [`layout`](Self::layout)
    /// says: read from the device, host memory or scratch files. Collective under MPI ranks
    /// (every rank's callback must call it; only the first rank's copy holds the volume).
    pub fn read_volume(&self) -> Result<Vec<f32>, ReconError> {
        let slab = self
            .team
            .volume_slab(self.ctx, 0..self.padded.n0)
            .map_err(|e| ReconError::Read(format!("reading the current iterate: {e}")))?;
        Ok(slab.into_iter().flat_map(|(_, values)| values).collect())
    }
}
