//! Building the 2D FFT stage: the centred 2D FFT of each projection (with the rotation axis's
//! phase and the operator's scale), chunk by chunk along the angles, in both directions.

use super::build::complex_buffer;
use super::stages::Kind;
use super::staging::modulate;
use super::steps::{Block, Chunk, Step};
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
        // The rotation axis: F_adj moves the centred projection to the axis with the phase R
        // before its inverse FFT (L = R-shifted projector); F_fwd undoes it with conj(R) after its
        // forward FFT. R is diagonal and unitary, so the pair stays exactly adjoint, and the
        // solver (which applies F once to the data) needs nothing else.
        let phase = g.axis_phase();
        let conjugate: Vec<[f32; 2]> = phase.iter().map(|&[c, s]| [c, -s]).collect();
        let ones = vec![[1.0f32, 0.0]; g.detw];
        let [phase, conjugate, ones] = [
            ("axis phase", &phase),
            ("conjugate axis phase", &conjugate),
            ("unit phase", &ones),
        ]
        .map(|(label, values)| ctx.upload(label, values));
        let (phase, conjugate, ones) = (phase?, conjugate?, ones?);
        let mut keep = Vec::new();
        let shape = [ca, deth, detw];
        let mut programs = Vec::new();
        for (direction, pre_phase, post_phase) in [
            (Direction::Inverse, &phase, &ones),
            (Direction::Forward, &ones, &conjugate),
        ] {
            let chunk = [ca * deth * detw, deth, detw];
            let pre = modulate(ctx, &local, chunk, 1.0, pre_phase, &mut keep)?;
            let post = modulate(ctx, &local, chunk, scale, post_phase, &mut keep)?;
            let plan = FftPlan::specialized(
                ctx,
                &shape.map(|s| s as usize),
                2,
                direction,
                Normalization::None,
                &local,
            )?;
            let ffts = self.ffts.add(plan.into_axis_plans());
            let mut compute = vec![Step::Dispatch(pre.0.clone(), pre.1)];
            compute.extend(ffts.into_iter().map(Step::Fft));
            compute.push(Step::Dispatch(post.0.clone(), post.1));
            programs.push(compute);
        }
        let view = |t0: u64| View {
            offset: t0 * deth * detw,
            strides: [deth * detw, detw, 1],
        };
        for t0 in (0..nt).step_by(ca as usize) {
            let c = (nt - t0).min(ca);
            let block = Block {
                buffer: local.clone(),
                view: view(0),
                extents: [c, deth, detw],
                channel_axis: 0,
            };
            for (kind, compute) in [(Kind::FAdj, &programs[0]), (Kind::FFwd, &programs[1])] {
                self.stages.of_mut(kind).push(Chunk {
                    tables: Vec::new(),
                    input: block.clone(),
                    whole_in: view(t0),
                    compute: compute.clone(),
                    output: block.clone(),
                    whole_out: view(t0),
                });
            }
        }
        self.buffers.extend(keep);
        self.buffers.push(local);
        self.buffers.extend([phase, conjugate, ones]);
        Ok(())
    }
}
