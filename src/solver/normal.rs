//! The inner solver's normal operator without gridding (docs/operator-method.md, "Normal
//! operator by Toeplitz embedding"): CG on the volume alone, with `b = (1/N) Re A*D` formed once,
//! the carried data residual `q = b - (1/N) T u` formed once from u, each step's `A p` replaced by
//! `T p = Re A*A p` (one padded FFT convolution, [`ToeplitzNormal`]), its `|A p|^2` by `<p, T p>`,
//! and the data term by `|A u - D|^2 = |D|^2 - N <u, b + q>`. No data-space array is read in the
//! loop.

use std::sync::Arc;

use super::error::SolverError;
use super::fields::Fields;
use super::ops::Wiring;
use super::slots::{slot, sum};
use super::vector::{Kernel, Target, VectorOp};
use crate::array::{Coef, Field, Residency, Scalars, Staging};
use crate::gpu::{GpuContext, Recorder};
use crate::operator::{
    Apply, LaminoOperator, OperatorOptions, Sink, Source, ToeplitzApplication, ToeplitzNormal,
};
use crate::plan::Array;

/// The Toeplitz inner loop's operator, arrays and call sites, built once.
pub(super) struct ToeplitzLoop {
    normal: ToeplitzNormal,
    /// `T u` and `T p` into `tp`.
    t_u: ToeplitzApplication,
    t_p: ToeplitzApplication,
    /// `r_saved = b - (1/N) tp` (after `T u`).
    form_residual: VectorOp,
    /// `<p, T p>` into the slot of `|A p|^2`.
    pub(super) dot_ptp: VectorOp,
    /// `r_saved += (-s/N) T p`.
    pub(super) residual_step: VectorOp,
    /// `<u, b + r_saved>` into the data term's slot.
    pub(super) data_dot: VectorOp,
    /// `|D|^2`, summed once.
    data_norm: f64,
    /// Where u and p live on the host (a streaming plan): their copies into the convolution's
    /// input on the device, recorded before `T u` and `T p`.
    copy_u: Option<VectorOp>,
    copy_p: Option<VectorOp>,
    /// `b`, `T p` and the device copy of u or p (streaming), held for the call sites bound to
    /// them.
    arrays: Vec<Field>,
}

impl ToeplitzLoop {
    /// Records `q = b - (1/N) T u` into `r_saved`.
    pub(super) fn record_residual(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
    ) -> Result<(), SolverError> {
        if let Some(copy) = &self.copy_u {
            copy.record(ctx, rec)?;
        }
        self.normal.record(rec, &self.t_u);
        self.form_residual.record(ctx, rec)?;
        Ok(())
    }

    /// Records `T p` into its array.
    pub(super) fn record_tp(
        &self,
        ctx: &GpuContext,
        rec: &mut Recorder,
    ) -> Result<(), SolverError> {
        if let Some(copy) = &self.copy_p {
            copy.record(ctx, rec)?;
        }
        self.normal.record(rec, &self.t_p);
        Ok(())
    }

    /// Device memory of the convolution and its volumes (b, `T p`, and the input copy when u
    /// or p stream).
    pub(super) fn device_bytes(&self) -> u64 {
        self.normal.device_bytes() + self.arrays.iter().map(|f| f.layout().bytes()).sum::<u64>()
    }

    /// The data term `|A u - D|^2` from the sum `<u, b + q>` in its slot.
    pub(super) fn data_term(&self, sum: f64, n_fourier: f64) -> f64 {
        self.data_norm - n_fourier * sum
    }

    /// Builds the loop for the solver's operator `op`, arrays `f` and `scalars` (`n_fourier`:
    /// N), host arrays passing through `staging`: forms b and sums `|D|^2` (one wait), computes
    /// the kernel. b and `T p` live on the device whatever the plan (the convolution reads and
    /// writes device buffers); so does a copy of u or p when the plan keeps them on the host.
    pub(super) fn new(
        ctx: &GpuContext,
        op: &LaminoOperator,
        (f, scalars): (&Fields, &Scalars),
        n_fourier: f64,
        staging: Option<&Arc<Staging>>,
    ) -> Result<Self, SolverError> {
        let g = op.geometry();
        let layout = Array::U.layout(g);
        let b = Field::new(ctx, "b = (1/N) Re A*D", layout, &Residency::Device)?;
        let tp = Field::new(ctx, "T p", layout, &Residency::Device)?;
        let w = Wiring {
            ctx,
            scalars,
            staging,
            share: None,
            shape: [g.n1, g.n0, g.n2],
        };
        let inv_n = (1.0 / n_fourier) as f32;
        // b, and |D|^2 in the data term's slot, read once.
        let to_b = w.application(
            op,
            Apply::FourierAdjoint,
            Source::Complex(&f.dhat),
            Sink::Real {
                field: &b,
                scale: Coef::fixed(inv_n),
                accumulate: false,
            },
        )?;
        let data_norm_dot = w.op(
            Kernel::Dot,
            [Some(&f.dhat), None, Some(&f.dhat), None],
            Target::Sum(sum::DATA),
            [Coef::ZERO; 4],
        )?;
        let mut rec = ctx.recorder("toeplitz setup");
        op.record(ctx, &mut rec, &to_b)?;
        data_norm_dot.record(ctx, &mut rec)?;
        ctx.submit(rec)?;
        let data_norm = scalars.read_sums(ctx)?[sum::DATA.0 as usize];
        let normal = ToeplitzNormal::new(ctx, g, &OperatorOptions::default(), true)?;
        let tp_buffer = tp.device_buffer().expect("on the device").clone();
        let mut arrays = vec![b, tp];
        // u and p on the host: one device volume the convolution reads, u or p copied into it
        // (a lincomb with coefficient 1: the same bits) through the staging buffers.
        let on_host = [&f.u, &f.p].iter().any(|x| x.device_buffer().is_none());
        let input = match on_host {
            true => Some(Field::new(ctx, "T input", layout, &Residency::Device)?),
            false => None,
        };
        let copy_into = |x: &Field| -> Result<Option<VectorOp>, SolverError> {
            let Some(input) = &input else {
                return Ok(None);
            };
            Ok(Some(w.op(
                Kernel::Lincomb,
                [Some(x), None, None, None],
                Target::Field(input),
                [Coef::ONE, Coef::ZERO, Coef::ZERO, Coef::ZERO],
            )?))
        };
        let (copy_u, copy_p) = (copy_into(&f.u)?, copy_into(&f.p)?);
        let read_by_t = |x: &Field| {
            input
                .as_ref()
                .unwrap_or(x)
                .device_buffer()
                .expect("on the device")
                .clone()
        };
        let (u, p) = (read_by_t(&f.u), read_by_t(&f.p));
        let (b, tp) = (&arrays[0], &arrays[1]);
        let form_residual = w.op(
            Kernel::Lincomb,
            [Some(b), Some(tp), None, None],
            Target::Field(&f.r_saved),
            [Coef::ONE, Coef::fixed(-inv_n), Coef::ZERO, Coef::ZERO],
        )?;
        let dot_ptp = w.op(
            Kernel::Dot,
            [Some(&f.p), None, Some(tp), None],
            Target::Sum(sum::APAP),
            [Coef::ZERO; 4],
        )?;
        let residual_step = w.op(
            Kernel::Lincomb,
            [Some(tp), None, None, None],
            Target::Field(&f.r_saved),
            [
                Coef::times(-inv_n, slot::STEP),
                Coef::ZERO,
                Coef::ZERO,
                Coef::ONE,
            ],
        )?;
        let data_dot = w.op(
            Kernel::Dot,
            [Some(&f.u), None, Some(b), Some(&f.r_saved)],
            Target::Sum(sum::DATA),
            [Coef::ZERO, Coef::ZERO, Coef::ZERO, Coef::ONE],
        )?;
        arrays.extend(input);
        Ok(ToeplitzLoop {
            t_u: normal.application(ctx, &u, &tp_buffer)?,
            t_p: normal.application(ctx, &p, &tp_buffer)?,
            normal,
            form_residual,
            dot_ptp,
            residual_step,
            data_dot,
            data_norm,
            copy_u,
            copy_p,
            arrays,
        })
    }
}
