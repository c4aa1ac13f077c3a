//! The current iterate as an application sees it after each outer iteration
//! ([`super::Reconstructor::on_iterate`]), and the last one once the run is over
//! ([`Solved::iterate_view`]): on the device, or a host copy where it streams.

use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::solver::AdmmTeam;

use super::{Padding, ReconError, Solved};

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
    /// array, as [`read_volume`](Self::read_volume) gives it (by z slice; the device buffer of
    /// [`on_device`](Self::on_device) holds it by y row, as its layout says).
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
            axes_swapped: false,
        }
    }

    /// The volume's device buffer on [`ctx`](Self::ctx), when the whole volume lives there (it
    /// is valid until the callback returns; work recorded on it queues behind the iteration's);
    /// `None` when it streams from host memory or scratch files, or the run shares its arrays
    /// among several devices or MPI ranks.
    pub fn on_device(&self) -> Option<crate::gpu::DeviceVolume<'_>> {
        let buffer = self.team.solver().volume_field().device_buffer()?;
        // The solver keeps the volume by y row.
        self.single.then(|| crate::gpu::DeviceVolume {
            buffer,
            layout: crate::gpu::VolumeLayout {
                axes_swapped: true,
                ..self.layout()
            },
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

impl Solved<'_> {
    /// The finished run's volume as [`Reconstructor::on_iterate`] showed each iterate, so that
    /// an application keeps drawing slices of it (from the device where it is resident) after
    /// the run, for as long as it keeps the `Solved`. Its `iteration` is the last one done (0
    /// when none was).
    ///
    /// [`Reconstructor::on_iterate`]: super::Reconstructor::on_iterate
    pub fn iterate_view(&self) -> IterateView<'_> {
        IterateView {
            iteration: self.report.reports.last().map_or(0, |r| r.iteration),
            ctx: self.ctx,
            single: self.single,
            team: &self.team,
            padded: &self.padded,
            padding: &self.padding,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::geometry::Tilt;
    use std::cell::RefCell;

    use super::super::Reconstructor;
    use crate::geometry::Geometry;
    use crate::gpu::{host_slice_words, test_context, SliceMode, SlicePass, VolumeLayout};
    use crate::params::AdmmParams;
    use crate::plan::Mode;
    use crate::scan::Projections;

    /// The slices (z, y, x) = `AT` as values, from the device where the view has the volume
    /// there, else from its host copy; and always from the host copy.
    const AT: [usize; 3] = [9, 5, 11];

    fn slices(pass: &SlicePass, view: &super::IterateView<'_>) -> (Option<Vec<u32>>, Vec<u32>) {
        let ctx = view.ctx();
        let device = view.on_device().map(|volume| {
            pass.record(ctx, volume, AT, SliceMode::Values).unwrap();
            pass.read_words(ctx).unwrap()
        });
        let host = view.read_volume().unwrap();
        let from_host = host_slice_words(&host, view.layout(), AT, SliceMode::Values).unwrap();
        (device, from_host)
    }

    /// Every iterate on_iterate shows, and the finished run's iterate_view, give the same slices
    /// from the device and from the host copy, and the last of them are the returned volume's:
    /// in core (the volume on the device, padded laterally so that the shown part starts inside
    /// the solver's array) and streaming (no device buffer to show).
    #[test]
    fn the_iterate_views_show_the_volume_the_run_returns() {
        let ctx = test_context();
        let n = 16;
        let g = Geometry::cube(n, 8, Tilt::from_phi(1.92));
        let values = (0..g.ntheta() * g.deth * g.detw)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.01)
            .collect();
        let p = Projections::new(g.clone(), values).unwrap();
        let params = AdmmParams::exactly(2);
        let pass = SlicePass::new(&ctx, [n, n, n]).unwrap();
        let in_core = Reconstructor::new(&ctx)
            .lateral_padding(4)
            .plan(&g)
            .unwrap();
        assert_eq!(in_core.mode, Mode::InCore);
        // The test's slice pass is beside the plan on the same device: its output and parameters,
        // and a readback buffer per read of the output, count against the budget too.
        let beside = 2 * pass.device_bytes();
        for budget in [None, Some(in_core.device_bytes / 4 + beside)] {
            let shown = RefCell::new(Vec::new());
            let mut builder = Reconstructor::new(&ctx)
                .params(params)
                .lateral_padding(4)
                .on_iterate(|view| {
                    let layout = view.layout();
                    assert_eq!(layout.shape, [n, n, n]);
                    assert!(layout.origin[2] > 0, "{layout:?}");
                    let (device, host) = slices(&pass, view);
                    assert_eq!(device.is_some(), budget.is_none(), "{budget:?}");
                    if let Some(device) = device {
                        assert!(device == host, "iteration {}", view.iteration);
                    }
                    shown.borrow_mut().push((view.iteration, host));
                });
            if let Some(bytes) = budget {
                builder = builder.device_memory_budget(bytes);
            }
            let solved = builder.solve(&p).unwrap();
            let streams = solved.report.plan.mode == Mode::Streaming;
            assert_eq!(streams, budget.is_some());
            let last = solved.iterate_view();
            assert_eq!(last.iteration, 1);
            let (device, host) = slices(&pass, &last);
            assert_eq!(device.is_some(), !streams);
            assert!(device.is_none_or(|d| d == host));
            let shown = shown.borrow();
            assert_eq!(shown.iter().map(|s| s.0).collect::<Vec<_>>(), [0, 1]);
            assert!(
                shown[1].1 == host,
                "on_iterate's last iterate is the final one"
            );
            let volume = solved.into_reconstruction().unwrap().volume;
            let whole = VolumeLayout::whole([n, n, n]);
            let returned = host_slice_words(&volume, whole, AT, SliceMode::Values).unwrap();
            assert!(returned == host, "the slices are the returned volume's");
        }
    }
}
