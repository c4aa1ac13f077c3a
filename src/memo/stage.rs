//! One stage's memo: its cache, indexes, histories and statistics ([`StageState`]) beside its
//! device side ([`StageDevice`]), set up from the operator's chunking and the budgets, and the
//! application of the stage as waves of chunks ([`super::wave`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::gpu::{self, Plan, Shape, StageDevice};
use super::index::KeyIndex;
use super::norm_cache::OperatorNorms;
use super::store::Store;
use super::{MemoError, MemoOptions, StageStats};
use crate::array::Staging;
use crate::gpu::GpuContext;
use crate::gpu::GpuError;
use crate::operator::{Block, LaminoOperator, Stage};

/// One stage's cache, index and statistics (everything but its device side).
pub(super) struct StageState {
    pub(super) stage: Stage,
    pub(super) plan: Option<Plan>,
    pub(super) store: Store,
    /// One index per map: all full-size chunks of U1 share one, every U2 chunk has its own.
    pub(super) indexes: HashMap<usize, KeyIndex>,
    /// The entries last computed for each chunk position, newest first.
    pub(super) history: Vec<VecDeque<u64>>,
    pub(super) norm: f64,
    pub(super) stats: StageStats,
}

pub(super) struct StageMemo {
    pub(super) device: Option<StageDevice>,
    pub(super) state: StageState,
}

impl StageMemo {
    /// The cache of `stage` of `op` under `options` (`norms`: the certified policies' operator
    /// norms, NaN otherwise): a device side when the stage is memoized and its plan fits the
    /// device budget, else the reason it is not in its statistics. `staging`: the operator's
    /// arrays are on the host (a streaming plan).
    pub(super) fn new(
        ctx: &GpuContext,
        op: &LaminoOperator,
        stage: Stage,
        options: &MemoOptions,
        norms: &OperatorNorms,
        staging: Option<&Arc<Staging>>,
    ) -> Result<Self, MemoError> {
        let host_budget = options.host_bytes / 4;
        let chunks = op.chunk_count(stage);
        // Streaming plans demote only entries with host copies, without a readback.
        let host_tier = host_budget > 0 && staging.is_none();
        let shape = chunk_shape(op, stage, host_tier, options.audit);
        let mut stats = StageStats::new(stage);
        let (device, plan) = device_side(ctx, op, stage, &shape, options, &mut stats)?;
        stats.slots = plan.map_or(0, |p| p.slots);
        stats.wave = plan.map_or(0, |p| p.wave);
        let norm = if stage.chunks_share_map() {
            norms.u1
        } else {
            norms.u2
        };
        Ok(StageMemo {
            device,
            state: StageState {
                stage,
                plan,
                store: Store::new(plan.map_or(0, |p| p.slots), host_budget, staging.is_none()),
                indexes: HashMap::new(),
                history: vec![VecDeque::new(); chunks],
                norm,
                stats,
            },
        })
    }
}

/// The largest input, output and key of `stage`'s chunks, which its slots are sized for.
fn chunk_shape(op: &LaminoOperator, stage: Stage, host_tier: bool, audit: bool) -> Shape {
    let chunks = op.chunk_count(stage);
    let ios: Vec<(&Block, &Block)> = (0..chunks).map(|j| op.chunk_io(stage, j)).collect();
    Shape {
        chunks,
        in_max: ios.iter().map(|(i, _)| i.len()).max().unwrap_or(0),
        out_max: ios.iter().map(|(_, o)| o.len()).max().unwrap_or(0),
        key_max: ios
            .iter()
            .map(|(i, _)| 18 * i.extents[i.channel_axis])
            .max()
            .unwrap_or(0),
        host_tier,
        audit,
    }
}

/// The device side and plan of `stage` when the policy memoizes it and a plan fits the device
/// budget; otherwise none, with the reason recorded in `stats`.
fn device_side(
    ctx: &GpuContext,
    op: &LaminoOperator,
    stage: Stage,
    shape: &Shape,
    options: &MemoOptions,
    stats: &mut StageStats,
) -> Result<(Option<StageDevice>, Option<Plan>), MemoError> {
    let max_binding = ctx.max_binding_bytes().min(ctx.max_buffer_bytes());
    Ok(match options.policy.is_active() {
        true if !options.stages.contains(stage) => {
            stats.disabled = Some(format!("not in --memo-stages {}", options.stages));
            (None, None)
        }
        false => (None, None),
        true => match gpu::plan(shape, options.device_bytes / 4, max_binding) {
            Ok(plan) => {
                let (input, output) = op.chunk_io(stage, 0);
                let buffers = (&input.buffer, &output.buffer);
                let device = StageDevice::new(ctx, buffers, shape, &plan)?;
                (Some(device), Some(plan))
            }
            Err(why) => {
                stats.disabled = Some(why);
                (None, None)
            }
        },
    })
}

impl StageState {
    /// The map class of a chunk: chunks of U1 with the same extents share one map.
    pub(super) fn class(&self, input: &Block, chunk: usize) -> usize {
        if self.stage.chunks_share_map() {
            input.extents[input.channel_axis] as usize
        } else {
            chunk
        }
    }

    /// Waits for `read` and counts it.
    pub(super) fn wait<T>(
        &mut self,
        trips: &mut u64,
        read: impl FnOnce() -> Result<T, GpuError>,
    ) -> Result<T, GpuError> {
        let t = Instant::now();
        let r = read();
        self.stats.wait_ms += t.elapsed().as_secs_f64() * 1e3;
        *trips += 1;
        r
    }

    /// Forgets dropped entries in the indexes and histories.
    pub(super) fn forget(&mut self, dropped: &[u64]) {
        for &id in dropped {
            for index in self.indexes.values_mut() {
                index.remove(id);
            }
            for history in &mut self.history {
                history.retain(|&e| e != id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_fits_the_budget_and_shrinks_the_wave_before_giving_up() {
        let shape = Shape {
            chunks: 8,
            in_max: 1000,
            out_max: 1000,
            key_max: 144,
            host_tier: true,
            audit: false,
        };
        let slot = 16_000;
        let plan = gpu::plan(&shape, 1 << 30, 1 << 30).unwrap();
        assert_eq!(plan.wave, 8);
        assert_eq!(plan.demote_slots, 8 + gpu::RESERVE);
        // 30 slots' worth cannot hold a wave of 8 (its staging, the reserve, one more wave and
        // the outbox for the demotions): the wave shrinks.
        let small = gpu::plan(&shape, 30 * slot, 1 << 30).unwrap();
        assert!(small.wave < 8 && small.wave >= 1, "{small:?}");
        assert!(small.slots >= 2 * small.wave + small.reserve, "{small:?}");
        let none = gpu::plan(&shape, 5 * slot, 1 << 30).unwrap_err();
        assert!(none.contains("device budget"), "{none}");
        // Without a host tier the outbox needs no room for demotions.
        let plan = gpu::plan(
            &Shape {
                host_tier: false,
                ..shape
            },
            1 << 30,
            1 << 30,
        )
        .unwrap();
        assert_eq!(plan.demote_slots, 0);
    }
}
