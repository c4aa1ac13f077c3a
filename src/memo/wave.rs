//! A wave: a stage's chunks handled together, with at most three round trips to the host (see
//! the module doc of [`super`]). Its steps: claim slots, stage the inputs and read their keys
//! (round trip 1), decide ([`super::mlr`], [`super::certify`]; round trips 2 and 3), record the
//! reuses and the computations in one last submission ([`super::reuse`]), and turn the computed
//! chunks into entries.

use std::sync::Arc;
use std::time::Instant;

use num_complex::Complex32;

use super::chunk::{Outcome, WaveChunk, WaveContext};
use super::gpu::StageDevice;
use super::index::UnitKey;
use super::keys::host_pooled_key;
use super::stage::StageState;
use super::store::HostCopies;
use super::{MemoError, MemoOptions, MemoPolicy};
use crate::gpu::GpuContext;
use crate::operator::{Application, Block, LaminoOperator};

/// Computed entries remembered per chunk position as reuse candidates.
const HISTORY: usize = 3;

/// What round trip 1 reads back: the chunks' keys and the demoted slots' contents.
type KeysRead = (Vec<Vec<f32>>, Vec<Vec<Complex32>>);

impl StageState {
    /// Applies the stage of `application` at `position` through the cache, a wave of the plan's
    /// size at a time, and records the application's round trips, time and bytes.
    pub(super) fn apply(
        &mut self,
        ctx: &GpuContext,
        op: &LaminoOperator,
        device: &StageDevice,
        (application, position): (&Application, usize),
        options: &MemoOptions,
        tol: Option<f64>,
    ) -> Result<(), MemoError> {
        let start = Instant::now();
        let wave = self.plan.expect("active stages have a plan").wave;
        let chunks: Vec<usize> = (0..op.chunk_count(self.stage)).collect();
        let w = WaveContext {
            ctx,
            op,
            device,
            application,
            position,
            options,
        };
        let mut trips = 0;
        for part in chunks.chunks(wave) {
            trips += self.run_wave(&w, part, tol)?;
        }
        self.stats.record_application(trips);
        self.stats.wall_ms += start.elapsed().as_secs_f64() * 1e3;
        let (device_bytes, host_bytes) = self.store.bytes();
        self.stats.record_bytes(device_bytes, host_bytes);
        Ok(())
    }

    /// Handles the chunks `chunks` together; returns the round trips taken.
    pub(super) fn run_wave(
        &mut self,
        w: &WaveContext<'_>,
        chunks: &[usize],
        tol: Option<f64>,
    ) -> Result<u64, MemoError> {
        let plan = self.plan.expect("active stages have a plan");
        let mut trips = 0;
        // Slots for the staged inputs and the promotion reserve, demoting or dropping the least
        // recently used entries; demoted chunks are copied out before staging overwrites them.
        let claim = self
            .store
            .claim(chunks.len() + plan.reserve)
            .expect("the plan leaves room for a wave and the reserve");
        self.forget(&claim.dropped);
        self.stats.dropped += claim.dropped.len() as u64;
        self.stats.demoted += claim.demoted.len() as u64;
        let (staging, reserve) = claim.slots.split_at(chunks.len());
        let mut reserve = reserve.to_vec();
        let mut wave = self.wave_chunks(w, chunks, staging);
        let decide_on_host = self.key_wave(w, &mut wave, &claim.demoted, &mut trips)?;

        match (w.options.policy, tol) {
            (MemoPolicy::Mlr { tau }, _) => self.mlr_decide(&mut wave, tau),
            (_, Some(tol)) if decide_on_host => self.certified_decide_on_host(w, &mut wave, tol),
            (_, Some(tol)) => {
                trips += self.certified_decide(w, &mut wave, tol, &mut reserve)?;
            }
            _ => unreachable!("active policies are mlr or certified"),
        }

        self.reuse_and_compute(w, &mut wave, &mut reserve, &mut trips)?;
        self.record_outcomes(w, wave);
        for slot in reserve {
            self.store.release(slot);
        }
        Ok(trips)
    }

    /// The chunks `chunks` of the wave, their inputs to be staged into the slots `staging`,
    /// nothing decided yet.
    fn wave_chunks(
        &self,
        w: &WaveContext<'_>,
        chunks: &[usize],
        staging: &[usize],
    ) -> Vec<WaveChunk> {
        chunks
            .iter()
            .zip(staging)
            .enumerate()
            .map(|(j, (&chunk, &slot))| {
                let (input, output) = w.op.chunk_io(self.stage, chunk);
                WaveChunk {
                    j,
                    chunk,
                    slot,
                    staged: false,
                    host_input: None,
                    output_on_host: w
                        .op
                        .chunk_download(w.application, w.position, chunk)
                        .is_some(),
                    landing: None,
                    class: self.class(input, chunk),
                    input: input.clone(),
                    output: output.clone(),
                    key: None,
                    outcome: Outcome::Open,
                    stage: self.stage,
                }
            })
            .collect()
    }

    /// Round trip 1: demotions out (the claim's `demoted` entries), inputs in, keys. Chunks
    /// whose inputs live on the host (a streaming plan) are keyed and decided there: a reused
    /// one is never uploaded, and the round trip is left out when nothing is demoted. A chunk
    /// without a key (a zero input) is decided `Compute`. Returns whether the wave is decided
    /// on the host.
    fn key_wave(
        &mut self,
        w: &WaveContext<'_>,
        wave: &mut [WaveChunk],
        demoted: &[(u64, usize)],
        trips: &mut u64,
    ) -> Result<bool, MemoError> {
        let demoted_slots: Vec<usize> = demoted.iter().map(|&(_, slot)| slot).collect();
        let host_inputs = match w.options.policy {
            MemoPolicy::Mlr { .. } => w.host_inputs(wave)?,
            // Certified decisions on the host compare with host copies of the candidates'
            // inputs, which need host memory; without any they are made on the device.
            _ if self.store.keeps_host_copies() => w.host_inputs(wave)?,
            _ => None,
        };
        let (device_keys, demoted_data) = if host_inputs.is_none() || !demoted_slots.is_empty() {
            self.stage_and_read_keys(w, wave, &demoted_slots, host_inputs.is_none(), trips)?
        } else {
            (Vec::new(), Vec::new())
        };
        let keys = match &host_inputs {
            Some(inputs) => wave
                .iter()
                .zip(inputs)
                .map(|(c, x)| host_pooled_key(&c.input, x))
                .collect(),
            None => device_keys,
        };
        let decide_on_host = host_inputs.is_some();
        for (c, x) in wave.iter_mut().zip(host_inputs.into_iter().flatten()) {
            c.host_input = Some(Arc::new(x));
        }
        self.fill_demoted(w.device, demoted, demoted_data);
        for (c, key) in wave.iter_mut().zip(&keys) {
            c.key = UnitKey::new(key);
            if c.key.is_none() {
                // A zero input has no direction to compare: computed, not stored.
                c.outcome = Outcome::Compute { recorded: false };
            }
        }
        Ok(decide_on_host)
    }

    /// The submission of round trip 1 and its readback: copies the chunks in `demoted_slots`
    /// out and, with `stage_inputs`, stages every chunk's input into its slot and pools its key.
    /// Returns the keys (none without `stage_inputs`) and the demoted slots' contents.
    fn stage_and_read_keys(
        &mut self,
        w: &WaveContext<'_>,
        wave: &mut [WaveChunk],
        demoted_slots: &[usize],
        stage_inputs: bool,
        trips: &mut u64,
    ) -> Result<KeysRead, MemoError> {
        let (ctx, dev) = (w.ctx, w.device);
        let key_lens: Vec<u64> = match stage_inputs {
            false => Vec::new(),
            true => wave
                .iter()
                .map(|c| 18 * c.input.extents[c.input.channel_axis])
                .collect(),
        };
        let mut rec = ctx.recorder("memo: stage in, keys");
        dev.record_demotions(ctx, &mut rec, demoted_slots);
        if stage_inputs {
            for c in wave.iter_mut() {
                w.record_stage_in(&mut rec, c)?;
                c.staged = true;
            }
            let inputs: Vec<(&Block, usize)> = wave.iter().map(|c| (&c.input, c.slot)).collect();
            dev.record_keys(ctx, &mut rec, &inputs);
        }
        ctx.submit(rec)?;
        Ok(self.wait(trips, || dev.read_keys(ctx, &key_lens, demoted_slots.len()))?)
    }

    /// Gives the entries `demoted` to the host tier, from their slots' contents `data` read
    /// back in round trip 1 (an entry dropped meanwhile is skipped).
    fn fill_demoted(
        &mut self,
        dev: &StageDevice,
        demoted: &[(u64, usize)],
        data: Vec<Vec<Complex32>>,
    ) {
        let in_slot = dev.slot_offsets(0).1 as usize;
        for (&(id, _), data) in demoted.iter().zip(data) {
            if let Some((li, lo)) = self.store.get(id).map(|e| e.lens) {
                let input = data[..li as usize].to_vec();
                let output = data[in_slot..in_slot + lo as usize].to_vec();
                self.store.fill_host(id, input, output);
            }
        }
    }

    /// The last submission: reused outputs formed on the device, the remaining chunks
    /// computed (an undecided chunk is computed). A reuse whose output goes unchanged into a
    /// host array and whose entries all have host copies is formed on the host instead, after
    /// the submission: no transfer. Under `audit`, waits for the reuses' measured errors.
    fn reuse_and_compute(
        &mut self,
        w: &WaveContext<'_>,
        wave: &mut [WaveChunk],
        reserve: &mut Vec<usize>,
        trips: &mut u64,
    ) -> Result<(), MemoError> {
        let (ctx, dev) = (w.ctx, w.device);
        let mut rec = ctx.recorder("memo: reuse, compute");
        let mut audited = Vec::new();
        let mut formed_on_host = Vec::new();
        for c in wave.iter_mut() {
            let Outcome::Reuse(reuse) = &c.outcome else {
                if let Outcome::Open = c.outcome {
                    c.outcome = Outcome::Compute { recorded: false };
                }
                continue;
            };
            if self.forms_on_host(w, c, reuse) {
                formed_on_host.push(c.j);
                continue;
            }
            if !self.record_device_reuse(w, &mut rec, c, reuse, reserve, &mut audited)? {
                // An entry could not be brought back (no reserve slot left): computed.
                c.outcome = Outcome::Compute { recorded: false };
            }
        }
        w.record_decided_computes(&mut rec, wave)?;
        if audited.is_empty() {
            ctx.submit(rec)?;
        } else {
            let positions: Vec<usize> = audited.iter().map(|a| a.0).collect();
            dev.record_audit_finish(ctx, &mut rec, &positions);
            ctx.submit(rec)?;
            let errors = self.wait(trips, || dev.read_residuals(ctx, audited.len()))?;
            for (error2, (_, bound)) in errors.iter().zip(&audited) {
                self.stats.record_audit(error2.max(0.0).sqrt(), *bound);
            }
        }
        for j in formed_on_host {
            self.form_on_host(w, &wave[j])?;
        }
        Ok(())
    }

    /// Bookkeeping: computed chunks become entries in their slots, reused ones free theirs.
    fn record_outcomes(&mut self, w: &WaveContext<'_>, wave: Vec<WaveChunk>) {
        for c in wave {
            self.stats.chunks += 1;
            match c.outcome {
                Outcome::Reuse(reuse) => {
                    self.store.release(c.slot);
                    for &(id, _) in &reuse.combination {
                        self.store.touch(id);
                    }
                    self.stats.hits += 1;
                    if let Some((r, bound)) = reuse.certificate {
                        self.stats.record_bound(r, bound);
                    }
                }
                _ => {
                    self.stats.misses += 1;
                    self.store_computed(w, c);
                }
            }
        }
    }

    /// A computed chunk becomes an entry (in its slot, or in host memory when both its chunks
    /// have host copies) and the newest of its position's history; one without a key frees its
    /// slot.
    fn store_computed(&mut self, w: &WaveContext<'_>, c: WaveChunk) {
        let Some(key) = c.key else {
            self.store.release(c.slot);
            return;
        };
        // Keyed by position: the chunk's old entry makes way for the new one.
        if let MemoPolicy::Mlr { .. } = w.options.policy {
            for old in std::mem::take(&mut self.history[c.chunk]) {
                self.store.remove(old);
            }
        }
        let lens = (c.input.len(), c.output.len());
        let copies = HostCopies {
            input: c.host_input,
            output: c.landing,
        };
        // With both chunks on the host (a stage whose arrays are all there), the
        // slot was only the chunk's workspace: the entry lives in host memory, so
        // the cache is bounded by the host budget, not by the device's slots.
        let host_only = self
            .store
            .insert_host(c.chunk, c.class, key.clone(), lens, copies.clone());
        let (id, dropped) = match host_only {
            Some(inserted) => {
                self.store.release(c.slot);
                inserted
            }
            None => self
                .store
                .insert(c.chunk, c.class, key.clone(), lens, c.slot, copies),
        };
        self.forget(&dropped);
        self.stats.dropped += dropped.len() as u64;
        if w.options.policy.is_certified() {
            self.indexes.entry(c.class).or_default().insert(id, key);
        }
        let history = &mut self.history[c.chunk];
        history.push_front(id);
        history.truncate(HISTORY);
    }
}
