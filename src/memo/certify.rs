//! The certified decisions (`certified:TOL`, `certified:auto`): each chunk's candidates (its
//! recent history and the nearest keys of its map), the least-squares combination of their
//! inputs, and the stage's error budget, smallest residuals first. On the device the normal
//! equations come back in one round trip and the residuals they cannot settle are measured in
//! a second; for chunks whose inputs are on the host everything is done there in f64.

use std::time::Instant;

use num_complex::Complex32;
use rayon::prelude::*;

use super::chunk::{Outcome, Reuse, WaveChunk, WaveContext};
use super::fit::{host_dots, host_residual2, least_squares, rounding_scale, within_budget};
use super::gpu::{Combination, Dots, StageDevice, MAX_CANDIDATES};
use super::stage::StageState;
use super::store::{Store, Tier};
use super::MemoError;
use crate::operator::Block;

/// Relative f32 rounding of a chunk's computed output (well above the operator's measured
/// rounding error): added to the residual in the error bound, since the stored output and the
/// exact one each carry it.
const F32_ROUNDING: f64 = 2e-6;

/// Host-tier candidates are brought back to the device for comparison only above this cosine
/// similarity of their keys.
const PROMOTE_COSINE: f64 = 0.9;

/// The certified reuse of `combination`, whose input residual is (at most) `residual`: its
/// relative residual and the bound `|F| (residual + F32_ROUNDING rounding)` on its output error.
fn certified_reuse(
    combination: Combination,
    residual: f64,
    xx: f64,
    rounding: f64,
    norm: f64,
) -> Reuse {
    Reuse {
        combination,
        certificate: Some((
            residual / xx.sqrt(),
            norm * (residual + F32_ROUNDING * rounding),
        )),
    }
}

/// A chunk's least-squares combination on the device path, before its residual is settled.
struct Fitted {
    /// Wave position.
    j: usize,
    used: Combination,
    /// `|x|^2`
    xx: f64,
    /// `|x| + sum |alpha_i| |c_i|`: the scale of the combination's f32 rounding.
    rounding: f64,
    /// `|x - sum alpha_i c_i|^2` from the normal equations, and how far that may be off.
    estimate: f64,
    margin: f64,
}

impl Fitted {
    /// The reuse of this combination, whose residual is (at most) `residual`.
    fn reuse(self, residual: f64, norm: f64) -> Outcome {
        Outcome::Reuse(certified_reuse(
            self.used,
            residual,
            self.xx,
            self.rounding,
            norm,
        ))
    }
}

/// A chunk compared on the host: `|x|^2`, and the reuse with its squared residual if it has a
/// combination.
type Compared = (f64, Option<(Reuse, f64)>);

/// The comparison of chunk `c` (keyed, its input on the host) with those of its `candidates`
/// whose input has a host copy in `store`: the normal equations and the combination's residual
/// in f64. `None` for a chunk without a key or a host input.
fn compare_on_host(
    store: &Store,
    c: &WaveChunk,
    candidates: &[(u64, f64)],
    tol: f64,
    norm: f64,
) -> Option<Compared> {
    let x = c.host_input.as_ref()?;
    c.key.as_ref()?;
    let kept: Vec<(u64, &[Complex32])> = candidates
        .iter()
        .filter_map(|&(id, _)| {
            let input = store.get(id)?.host.input.as_ref()?;
            Some((id, &input[..]))
        })
        .collect();
    let inputs: Vec<&[Complex32]> = kept.iter().map(|k| k.1).collect();
    let d = host_dots(x, &inputs);
    let fit = || {
        let (alphas, _) = least_squares(&d).filter(|_| tol > 0.0)?;
        let used: Vec<(u64, &[Complex32], [f32; 2])> = kept
            .iter()
            .zip(&alphas)
            .filter(|(_, a)| a.norm() > 0.0)
            .map(|(&(id, input), a)| (id, input, [a.re as f32, a.im as f32]))
            .collect();
        if used.is_empty() {
            return None;
        }
        let fit: Vec<(&[Complex32], [f32; 2])> =
            used.iter().map(|&(_, input, a)| (input, a)).collect();
        let residual2 = host_residual2(x, &fit);
        let reuse = certified_reuse(
            used.iter().map(|&(id, _, a)| (id, a)).collect(),
            residual2.sqrt(),
            d.xx,
            rounding_scale(&d, &alphas),
            norm,
        );
        Some((reuse, residual2))
    };
    Some((d.xx, fit()))
}

/// The wave positions of the chunks compared on the device and their normal equations.
type NormalEquations = (Vec<usize>, Vec<Dots>);

/// The offset in the slab of entry `id`'s input (the candidates are on the device by now).
fn input_offset(dev: &StageDevice, store: &Store, id: u64) -> u64 {
    dev.slot_offsets(store.slot(id).expect("candidates are on the device"))
        .0
}

/// The least-squares combinations of the `compared` chunks of `wave` (candidates
/// `on_device[j]`, normal equations `dots`), with the scale of their rounding and how far the
/// f32 estimate of their residual may be off; a chunk without one (or with `tol` 0) is decided
/// `Compute`.
fn fit_combinations(
    dev: &StageDevice,
    wave: &mut [WaveChunk],
    (compared, on_device): (&[usize], &[Vec<u64>]),
    dots: &[Dots],
    tol: f64,
) -> Vec<Fitted> {
    let mut fitted: Vec<Fitted> = Vec::new();
    for (&j, d) in compared.iter().zip(dots) {
        let Some((alphas, estimate)) = least_squares(d).filter(|_| tol > 0.0) else {
            wave[j].outcome = Outcome::Compute { recorded: false };
            continue;
        };
        let used: Combination = on_device[j]
            .iter()
            .zip(&alphas)
            .filter(|(_, a)| a.norm() > 0.0)
            .map(|(&id, a)| (id, [a.re as f32, a.im as f32]))
            .collect();
        let rounding = rounding_scale(d, &alphas);
        fitted.push(Fitted {
            j,
            used,
            xx: d.xx,
            rounding,
            estimate: estimate * d.xx,
            margin: dev.sum_rounding(wave[j].input.len()) * rounding * rounding,
        });
    }
    fitted
}

impl StageState {
    /// map, with their key cosines, at most [`MAX_CANDIDATES`]. The searches only read the
    /// indexes, so they run in parallel, each answer deterministic.
    fn candidates(&mut self, wave: &[WaveChunk], neighbours: usize) -> Vec<Vec<(u64, f64)>> {
        let searched: Vec<(Vec<(u64, f64)>, f64)> = wave
            .par_iter()
            .map(|c| {
                let Some(key) = &c.key else {
                    return (Vec::new(), 0.0);
                };
                let mut candidates: Vec<(u64, f64)> = self.history[c.chunk]
                    .iter()
                    .filter_map(|&id| {
                        let e = self.store.get(id).filter(|e| e.class == c.class)?;
                        Some((id, key.cosine(&e.key)))
                    })
                    .collect();
                let t = Instant::now();
                if let Some(index) = self.indexes.get(&c.class) {
                    let known: Vec<u64> = candidates.iter().map(|c| c.0).collect();
                    candidates.extend(index.nearest(key, neighbours, |id| !known.contains(&id)));
                }
                candidates.truncate(MAX_CANDIDATES);
                (candidates, t.elapsed().as_secs_f64() * 1e3)
            })
            .collect();
        searched
            .into_iter()
            .map(|(candidates, ms)| {
                if ms > 0.0 {
                    self.stats.lookup_ms.push(ms);
                }
                candidates
            })
            .collect()
    }

    /// The certified policies for chunks whose inputs are on the host: the normal equations and
    /// the residual of every candidate combination in f64 against the entries' host input
    /// copies (candidates without one are left out), no transfer and no round trip.
    pub(super) fn certified_decide_on_host(
        &mut self,
        w: &WaveContext<'_>,
        wave: &mut [WaveChunk],
        tol: f64,
    ) {
        let candidates = self.candidates(wave, w.options.neighbours);
        let (store, norm) = (&self.store, self.norm);
        let compared: Vec<Option<Compared>> = wave
            .par_iter()
            .zip(&candidates)
            .map(|(c, candidates)| compare_on_host(store, c, candidates, tol, norm))
            .collect();
        // The stage's budget (see `certified_decide`), over the chunks compared here.
        let budget = tol * tol * compared.iter().flatten().map(|c| c.0).sum::<f64>();
        let residuals2: Vec<f64> = compared
            .iter()
            .flatten()
            .filter_map(|c| c.1.as_ref().map(|fit| fit.1))
            .collect();
        let mut accepted = within_budget(&residuals2, budget).into_iter();
        let decided: Vec<Option<Reuse>> = compared
            .into_iter()
            .map(|c| {
                let (reuse, _) = c?.1?;
                accepted.next().expect("one per fit").then_some(reuse)
            })
            .collect();
        for (c, reuse) in wave.iter_mut().zip(decided) {
            if c.key.is_some() {
                c.outcome = match reuse {
                    Some(reuse) => Outcome::Reuse(reuse),
                    None => Outcome::Compute { recorded: false },
                };
            }
        }
    }

    /// The certified policies: candidates, normal equations, residuals; returns the round trips
    /// taken (at most two).
    pub(super) fn certified_decide(
        &mut self,
        w: &WaveContext<'_>,
        wave: &mut [WaveChunk],
        tol: f64,
        reserve: &mut Vec<usize>,
    ) -> Result<u64, MemoError> {
        let mut trips = 0;
        let on_device = self.candidates_on_device(w, wave, reserve)?;
        let Some((compared, dots)) = self.normal_equations(w, wave, &on_device, &mut trips)? else {
            return Ok(trips);
        };

        // The least-squares combinations. The stage's budget is tol^2 of the compared chunks'
        // |x|^2: the reused chunks' squared residuals together stay within it. The estimate from
        // the normal equations is off by at most `margin` (f32 sums): a combination whose
        // estimate plus margin fits is accepted as it stands; those that might fit in what is
        // left are measured elementwise.
        let budget = tol * tol * dots.iter().map(|d| d.xx).sum::<f64>();
        let fitted = fit_combinations(w.device, wave, (&compared, &on_device), &dots, tol);
        let (measured, left) = self.settle_estimates(wave, fitted, budget);
        self.measure_residuals(w, wave, measured, left, &mut trips)?;
        Ok(trips)
    }

    /// The candidates of every chunk of `wave` that are on the device, host entries promoted
    /// into `reserve` slots when their keys are close enough; a keyed chunk without any is
    /// decided `Compute`.
    fn candidates_on_device(
        &mut self,
        w: &WaveContext<'_>,
        wave: &mut [WaveChunk],
        reserve: &mut Vec<usize>,
    ) -> Result<Vec<Vec<u64>>, MemoError> {
        let (ctx, dev) = (w.ctx, w.device);
        let candidates = self.candidates(wave, w.options.neighbours);
        let mut on_device: Vec<Vec<u64>> = Vec::with_capacity(wave.len());
        for candidates in candidates {
            // In priority order (the chunk's history first). Bringing a host entry back costs an
            // upload: only for keys that point the same way (a small residual needs nearly
            // proportional keys).
            let mut kept = Vec::new();
            for (id, cosine) in candidates {
                let on_host = self.store.get(id).map(|e| e.tier) == Some(Tier::Host);
                if on_host && cosine < PROMOTE_COSINE {
                    continue;
                }
                if self.ensure_on_device(dev, ctx, id, reserve)? {
                    kept.push(id);
                }
            }
            on_device.push(kept);
        }
        for (c, kept) in wave.iter_mut().zip(&on_device) {
            if c.key.is_some() && kept.is_empty() {
                c.outcome = Outcome::Compute { recorded: false };
            }
        }
        Ok(on_device)
    }

    /// Round trip 2: the normal equations of every chunk with candidates (`on_device`); the
    /// chunks without are computed meanwhile. Returns the chunks compared and their normal
    /// equations, `None` when no chunk is (no round trip then).
    fn normal_equations(
        &mut self,
        w: &WaveContext<'_>,
        wave: &mut [WaveChunk],
        on_device: &[Vec<u64>],
        trips: &mut u64,
    ) -> Result<Option<NormalEquations>, MemoError> {
        let (ctx, dev) = (w.ctx, w.device);
        let compared: Vec<usize> = (0..wave.len())
            .filter(|&j| matches!(wave[j].outcome, Outcome::Open))
            .collect();
        let mut rec = ctx.recorder("memo: normal equations");
        let jobs: Vec<(&Block, usize, Vec<u64>)> = compared
            .iter()
            .map(|&j| {
                let offsets = on_device[j]
                    .iter()
                    .map(|&id| input_offset(dev, &self.store, id))
                    .collect();
                (&wave[j].input, wave[j].slot, offsets)
            })
            .collect();
        dev.record_dots(ctx, &mut rec, &jobs);
        drop(jobs);
        w.record_decided_computes(&mut rec, wave)?;
        ctx.submit(rec)?;
        if compared.is_empty() {
            return Ok(None);
        }
        let counts: Vec<usize> = compared.iter().map(|&j| on_device[j].len()).collect();
        let dots = self.wait(trips, || dev.read_dots(ctx, &counts))?;
        Ok(Some((compared, dots)))
    }

    /// Settles the combinations `fitted` whose residual estimate plus margin fits the stage's
    /// `budget` (reused) and those whose estimate less margin cannot fit what is left (computed).
    /// Returns the others, to be measured, and the budget left for them.
    fn settle_estimates(
        &self,
        wave: &mut [WaveChunk],
        fitted: Vec<Fitted>,
        budget: f64,
    ) -> (Vec<Fitted>, f64) {
        let upper: Vec<f64> = fitted.iter().map(|f| f.estimate + f.margin).collect();
        let sure = within_budget(&upper, budget);
        let spent: f64 = upper.iter().zip(&sure).filter(|s| *s.1).map(|s| s.0).sum();
        let left = budget - spent;
        let (sure, unsure): (Vec<_>, Vec<_>) = fitted.into_iter().zip(sure).partition(|f| f.1);
        for (f, _) in sure {
            let (j, residual) = (f.j, (f.estimate + f.margin).sqrt());
            wave[j].outcome = f.reuse(residual, self.norm);
        }
        let lower: Vec<f64> = unsure
            .iter()
            .map(|(f, _)| (f.estimate - f.margin).max(0.0))
            .collect();
        let mut measured = Vec::new();
        for ((f, _), promising) in unsure.into_iter().zip(within_budget(&lower, left)) {
            if promising {
                measured.push(f);
            } else {
                wave[f.j].outcome = Outcome::Compute { recorded: false };
            }
        }
        (measured, left)
    }

    /// Round trip 3, when some combination needs measuring: the residuals of `measured`,
    /// measured elementwise and accepted within the budget `left`; the chunks the estimates
    /// rejected are computed meanwhile.
    fn measure_residuals(
        &mut self,
        w: &WaveContext<'_>,
        wave: &mut [WaveChunk],
        measured: Vec<Fitted>,
        left: f64,
        trips: &mut u64,
    ) -> Result<(), MemoError> {
        let (ctx, dev) = (w.ctx, w.device);
        let mut rec = ctx.recorder("memo: residuals");
        let jobs: Vec<(&Block, usize, Combination)> = measured
            .iter()
            .map(|f| {
                let sources = f
                    .used
                    .iter()
                    .map(|&(id, a)| (input_offset(dev, &self.store, id), a))
                    .collect();
                (&wave[f.j].input, wave[f.j].slot, sources)
            })
            .collect();
        dev.record_residuals(ctx, &mut rec, &jobs);
        drop(jobs);
        w.record_decided_computes(&mut rec, wave)?;
        ctx.submit(rec)?;
        if measured.is_empty() {
            return Ok(());
        }
        let residuals = self.wait(trips, || dev.read_residuals(ctx, measured.len()))?;
        let accepted = within_budget(&residuals, left);
        for ((f, residual2), accepted) in measured.into_iter().zip(residuals).zip(accepted) {
            let j = f.j;
            wave[j].outcome = if accepted {
                f.reuse(residual2.max(0.0).sqrt(), self.norm)
            } else {
                Outcome::Compute { recorded: false }
            };
        }
        Ok(())
    }
}
