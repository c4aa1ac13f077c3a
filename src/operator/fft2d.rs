//! Building the 2D FFT stage: the centred 2D FFT of each projection (with the rotation axis's
//! phase and the operator's scale), chunk by chunk along the angles, in both directions.

use super::block_copies::{modulate, PhaseTables};
use super::build::complex_buffer;
use super::chunk_program::{Block, Chunk, Step};
use super::program::Kind;
use super::{LaminoOperator, OperatorError, View};
use crate::fft::{Direction, FftPlan, Normalization};
use crate::gpu::GpuContext;

impl LaminoOperator {
    /// The centred 2D FFT of each projection, chunk by chunk along the angles.
    pub(super) fn build_f(&mut self, ctx: &GpuContext) -> Result<(), OperatorError> {
        let g = self.geometry.clone();
        let (deth, detw) = (g.deth as u64, g.detw as u64);
        let nt = g.ntheta() as u64;
        let ca = self.chunk_angles as u64;
        let local = complex_buffer(ctx, "projection chunk", (ca * deth * detw) as usize)?;
        // The centred DFT of even length n equals (-1)^(n/2) (-1)^v DFT((-1)^a x_a): the factor
        // (-1)^((deth+detw)/2) is kept (the reference drops it), so L is the projector itself.
        let sign = if (g.deth / 2 + g.detw / 2).is_multiple_of(2) {
            1.0
        } else {
            -1.0
        };
        let scale = (sign / (g.deth as f64 * g.detw as f64)) as f32;
        // The rotation axis and the volume's offset: F_adj moves the centred projection to where
        // they put it with the per-angle phase R before its inverse FFT (L = R-shifted
        // projector); F_fwd undoes it with conj(R) after its forward FFT. R is diagonal and
        // unitary, so the pair stays exactly adjoint, and the solver (which applies F once to the
        // data) needs nothing else: the offset costs nothing inside its loop, which a phase in U2
        // (per gridding point, every iteration) would.
        let phases = g.detector_phases();
        let (columns, rows) = (
            ctx.upload("projection column phases", &phases.columns)?,
            ctx.upload("projection row phases", &phases.rows)?,
        );
        let ones = ctx.upload("unit phase", &vec![[1.0f32, 0.0]; g.deth.max(g.detw)])?;
        let mut keep = Vec::new();
        let shape = [ca, deth, detw];
        let mut ffts = Vec::new();
        for direction in [Direction::Inverse, Direction::Forward] {
            let plan = FftPlan::specialized(
                ctx,
                &shape.map(|s| s as usize),
                2,
                direction,
                Normalization::None,
                &local,
            )?;
            ffts.push(self.ffts.add(plan.into_axis_plans()));
        }
        let view = |t0: u64| View {
            offset: t0 * deth * detw,
            strides: [deth * detw, detw, 1],
        };
        let chunk = [ca * deth * detw, deth, detw];
        for t0 in (0..nt).step_by(ca as usize) {
            let c = (nt - t0).min(ca);
            let block = Block {
                buffer: local.clone(),
                view: view(0),
                extents: [c, deth, detw],
                channel_axis: 0,
            };
            let shift = |conjugate| PhaseTables {
                columns: &columns,
                rows: &rows,
                angles: phases.angles,
                angle0: t0 as usize,
                conjugate,
            };
            let none = || PhaseTables {
                columns: &ones,
                rows: &ones,
                angles: 1,
                angle0: 0,
                conjugate: false,
            };
            for (kind, plans, pre_phase, post_phase) in [
                (Kind::FAdj, &ffts[0], shift(false), none()),
                (Kind::FFwd, &ffts[1], none(), shift(true)),
            ] {
                let pre = modulate(ctx, &local, chunk, 1.0, &pre_phase, &mut keep)?;
                let post = modulate(ctx, &local, chunk, scale, &post_phase, &mut keep)?;
                let mut compute = vec![Step::Dispatch(pre.0, pre.1)];
                compute.extend(plans.iter().cloned().map(Step::Fft));
                compute.push(Step::Dispatch(post.0, post.1));
                self.stages.of_mut(kind).push(Chunk {
                    tables: Vec::new(),
                    input: block.clone(),
                    whole_in: view(t0),
                    compute,
                    output: block.clone(),
                    whole_out: view(t0),
                });
            }
        }
        self.buffers.extend(keep);
        self.buffers.push(local);
        self.buffers.extend([columns, rows, ones]);
        Ok(())
    }
}
