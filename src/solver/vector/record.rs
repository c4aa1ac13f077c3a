//! Recording call sites: their dispatches with the transfers of host-array blocks around
//! each, and, in a multi-device team, the exchange that combines every member's plane sums
//! of the reductions before the same fixed-order finish as on one device.

use std::sync::Arc;

use super::VectorOp;
use crate::array::Role;
use crate::distributed::team::{Reads, Share};
use crate::gpu::GpuError;
use crate::gpu::{GpuContext, Recorder};

/// A member's plane sums of one reduction, as its download lands.
type PlaneSums = Arc<std::sync::Mutex<Vec<f32>>>;

impl VectorOp {
    /// Records the call site's dispatches (and a reduction's finish), with the transfers of the
    /// blocks of host arrays around each.
    pub fn record(&self, ctx: &GpuContext, rec: &mut Recorder) -> Result<(), GpuError> {
        Self::record_all(ctx, rec, &[self])
    }

    /// Records call sites in order. In a team, the reductions among them combine their members'
    /// plane sums in one exchange after all of them computed theirs.
    pub fn record_all(
        ctx: &GpuContext,
        rec: &mut Recorder,
        ops: &[&VectorOp],
    ) -> Result<(), GpuError> {
        let Some(share) = ops.first().and_then(|op| op.share.clone()) else {
            for op in ops {
                op.record_planes(ctx, rec)?;
                if let Some((_, total)) = &op.finish {
                    rec.dispatch(&total.bound, total.groups);
                }
            }
            return Ok(());
        };
        // This member's plane sums of each reduction, in op order, filled by their downloads.
        let mut parts: Vec<PlaneSums> = Vec::new();
        for op in ops {
            if op.halo {
                // The halo planes come from the neighbours' shares: they must have landed, and
                // the neighbours must not overwrite them before this member read them.
                share.sync(ctx, rec, || op.reads())?;
                op.record_planes(ctx, rec)?;
                share.meet()?;
            } else {
                op.record_planes(ctx, rec)?;
            }
            if let Some((plane_sums, _)) = &op.finish {
                let own = share.chunk_range_of(share.index, op.planes, op.chunk);
                let part = PlaneSums::default();
                parts.push(part.clone());
                let done: crate::gpu::Completion = Box::new(move |bytes: &[u8]| {
                    if let Ok(mut p) = part.lock() {
                        p.extend(
                            bytes
                                .chunks_exact(4)
                                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                        );
                    }
                });
                if own.is_empty() {
                    done(&[]);
                } else {
                    rec.download(
                        ctx,
                        plane_sums,
                        8 * own.start as u64,
                        8 * own.len() as u64,
                        done,
                    )?;
                }
            }
        }
        if parts.is_empty() {
            return Ok(());
        }
        Share::land(ctx, rec)?;
        let mine = parts
            .iter()
            .flat_map(|p| std::mem::take(&mut *p.lock().expect("plane sums poisoned")))
            .collect();
        let all = share.all_gather(mine)?;
        // Member m's part holds its planes of each reduction, in op order.
        let mut at = vec![0usize; share.members];
        for op in ops {
            let Some((plane_sums, total)) = &op.finish else {
                continue;
            };
            let mut sums = Vec::with_capacity(2 * op.planes);
            for (m, part) in all.iter().enumerate() {
                let len = 2 * share.chunk_range_of(m, op.planes, op.chunk).len();
                sums.extend_from_slice(&part[at[m]..at[m] + len]);
                at[m] += len;
            }
            rec.upload(ctx, plane_sums, 0, &sums)?;
            rec.dispatch(&total.bound, total.groups);
        }
        Ok(())
    }

    /// The blocks of host arrays this member's dispatches upload.
    fn reads(&self) -> Reads {
        self.dispatches
            .iter()
            .flat_map(|d| d.uploads.iter().map(|(f, _, view)| (f.clone(), *view)))
            .collect()
    }

    /// Records the dispatches of this member's planes, with the transfers of the blocks of host
    /// arrays around each.
    fn record_planes(&self, ctx: &GpuContext, rec: &mut Recorder) -> Result<(), GpuError> {
        let staging = self.staging.as_deref();
        for d in &self.dispatches {
            for (field, role, view) in &d.uploads {
                let staging = staging.expect("host arrays have staging");
                field.record_in(ctx, rec, staging.buffer(*role), view)?;
            }
            rec.dispatch(&d.bound, d.groups);
            if let Some((field, view)) = &d.download {
                let staging = staging.expect("host arrays have staging");
                field.record_out(ctx, rec, staging.buffer(Role::Out), view, None)?;
            }
        }
        Ok(())
    }
}
