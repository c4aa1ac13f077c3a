//! Forming a reused chunk's output from stored entries: on the device from their slots (an
//! entry of the host tier is promoted into a reserve slot first), or, where the output goes
//! unchanged into a host array and every entry has a host copy of its output, on the host with
//! the device's arithmetic, so that the reuse moves nothing between host and device.

use num_complex::Complex32;

use super::chunk::{Outcome, Reuse, WaveChunk, WaveContext};
use super::gpu::{Combination, StageDevice};
use super::stage::StageState;
use super::store::{Landing, Tier};
use super::MemoError;
use crate::gpu::GpuError;
use crate::gpu::{GpuContext, Recorder};

/// `sum_i alpha_i o_i` in f32, term by term in order (what the device's `reuse` pass forms).
fn host_combine(outputs: &[(&[Complex32], [f32; 2])]) -> Vec<Complex32> {
    let ((first, a), rest) = outputs.split_first().expect("a combination has a term");
    let a = Complex32::new(a[0], a[1]);
    let mut out: Vec<Complex32> = first.iter().map(|&o| a * o).collect();
    for (o, a) in rest {
        let a = Complex32::new(a[0], a[1]);
        out.iter_mut().zip(o.iter()).for_each(|(v, &o)| *v += a * o);
    }
    out
}

/// The output block of an entry once its download has landed: waits for the downloads in flight
/// (oldest first) until it has.
fn landed<'a>(ctx: &GpuContext, landing: &'a Landing) -> Result<&'a [Complex32], GpuError> {
    ctx.wait_for_downloads_until(
        || landing.get().is_some(),
        || "a stored chunk output's download was recorded but never submitted".into(),
    )?;
    Ok(landing.get().expect("landed"))
}

impl StageState {
    /// Whether reuse `reuse` of chunk `c` is formed on the host: its output goes unchanged into
    /// a host array, it is not audited, and every entry has a host copy of its output.
    pub(super) fn forms_on_host(&self, w: &WaveContext<'_>, c: &WaveChunk, reuse: &Reuse) -> bool {
        c.output_on_host
            && !w.options.audit
            && reuse
                .combination
                .iter()
                .all(|&(id, _)| self.store.get(id).is_some_and(|e| e.host.output.is_some()))
    }

    /// Records reuse `reuse` of chunk `c` formed on the device from its entries' slots (and,
    /// under `audit`, the chunk's exact computation and its error, its position and bound
    /// added to `audited`) and its stage out. False, with nothing recorded, if an entry could
    /// not be brought to the device.
    pub(super) fn record_device_reuse(
        &mut self,
        w: &WaveContext<'_>,
        rec: &mut Recorder,
        c: &WaveChunk,
        reuse: &Reuse,
        reserve: &mut Vec<usize>,
        audited: &mut Vec<(usize, Option<f64>)>,
    ) -> Result<bool, MemoError> {
        let (ctx, dev) = (w.ctx, w.device);
        let mut combination: Combination = Vec::new();
        for &(id, alpha) in &reuse.combination {
            if !self.ensure_on_device(dev, ctx, id, reserve)? {
                break;
            }
            let slot = self.store.slot(id).expect("on the device");
            combination.push((dev.slot_offsets(slot).1, alpha));
        }
        if combination.len() < reuse.combination.len() {
            return Ok(false);
        }
        if w.options.audit {
            w.record_stage_in(rec, c)?;
            dev.record_restore(ctx, rec, c.j, &c.input, c.slot);
            w.op.record_chunk_compute(ctx, rec, self.stage, c.chunk)?;
            dev.record_audit_save(ctx, rec, c.j, &c.output);
        }
        dev.record_reuse(ctx, rec, c.j, &c.output, &combination);
        if w.options.audit {
            dev.record_audit_diff(ctx, rec, c.j, &c.output);
            audited.push((c.j, reuse.certificate.map(|(_, bound)| bound)));
        }
        w.op.record_chunk_out(ctx, rec, w.application, w.position, c.chunk, None)?;
        Ok(true)
    }

    /// Forms reused chunk `c`'s output on the host from its entries' host copies and writes it
    /// into the host array its stage-out downloads into.
    pub(super) fn form_on_host(
        &mut self,
        w: &WaveContext<'_>,
        c: &WaveChunk,
    ) -> Result<(), MemoError> {
        let Outcome::Reuse(reuse) = &c.outcome else {
            unreachable!("only reuses are formed")
        };
        let mut terms = Vec::with_capacity(reuse.combination.len());
        for &(id, alpha) in &reuse.combination {
            let e = self.store.get(id).expect("a reused entry is live");
            let landing = e.host.output.as_ref().expect("checked before");
            terms.push((landed(w.ctx, landing)?, alpha));
        }
        let output = host_combine(&terms);
        let (field, view) =
            w.op.chunk_download(w.application, w.position, c.chunk)
                .expect("checked before");
        field.put(w.ctx, view, bytemuck::cast_slice(&output))?;
        self.stats.formed_on_host += 1;
        Ok(())
    }

    /// Makes sure entry `id` is in a device slot, promoting it from the host tier into a reserve
    /// slot if needed (the upload lands before the next submission). False if it cannot be had.
    pub(super) fn ensure_on_device(
        &mut self,
        dev: &StageDevice,
        ctx: &GpuContext,
        id: u64,
        reserve: &mut Vec<usize>,
    ) -> Result<bool, GpuError> {
        let Some(e) = self.store.get(id) else {
            return Ok(false);
        };
        if let Tier::Device { .. } = e.tier {
            return Ok(true);
        }
        let (Some(input), Some(output), Some(&slot)) =
            (e.host.input.clone(), e.host.output.clone(), reserve.last())
        else {
            return Ok(false);
        };
        let output = landed(ctx, &output)?;
        if !self.store.promote(id, slot) {
            return Ok(false);
        }
        reserve.pop();
        let (input_at, output_at) = dev.slot_offsets(slot);
        ctx.write(dev.slab(), input_at, &input[..]);
        ctx.write(dev.slab(), output_at, output);
        self.stats.promotions += 1;
        Ok(true)
    }
}
