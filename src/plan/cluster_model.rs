//! A cost model of one outer iteration spread over K GPUs, one rank each (`lamino bench scale
//! --model`): where the time goes, and from which K communication dominates.
//!
//! The decomposition modelled, chosen for the distributed mode:
//! - volume-side arrays (u, p, r, the gradient fields, psi, lambda) are owned by **y-slabs**:
//!   U1 transforms whole z columns, so its chunks are already y-slabs and need nothing from other
//!   ranks (owning z-slabs would add an all-to-all of the volume per application); the gradient
//!   and divergence passes need one y-plane of each input from each neighbour (halos);
//! - the spectrum and the data-side arrays (D^, A u, A p) are owned by **detector-row slabs**:
//!   U2 works per detector row, and the data is in the Fourier domain during the iterations (F
//!   runs once at setup), so angle blocks would add an all-to-all of the data per application;
//! - so each application of A or A* changes the owner of the spectrum once (an all-to-all in
//!   which every rank sends and receives `S (K - 1) / K^2` bytes, S the spectrum's size);
//! - the scalars of one CG step are combined in one reduction, plus one per outer iteration.
//!
//! Per rank and outer iteration:
//! - device time: the bytes the iteration's passes touch (`Array::accesses`, the operator's
//!   internal work folded in) over K, times a measured number of copy-equivalents per byte,
//!   over the device's copy bandwidth;
//! - bus time: the host <-> device bytes of the memory plan for K times the device and host
//!   memory (the planner sees the K ranks' memory as one), over K, over the bus bandwidth;
//!   transfers overlap computation, so the two count as their maximum;
//! - network time: the all-to-all and halo bytes over the rank's share of its node's network
//!   bandwidth (ranks of one node share it; traffic inside a node is counted at network speed),
//!   plus a latency per message: (K - 1) per all-to-all and ceil(log2 K) per reduction. It is
//!   not overlapped (an all-to-all sits between two stages).
//!
//! What the model leaves out, and which way it errs: the copy-equivalents per byte are measured
//! at a small size and taken as size-independent (the FFTs' work per byte grows with the log of
//! the length: optimistic for the device at 2048^3); each rank's operator buffers are counted
//! once, not K times (optimistic for residency); overlap of the exchanges with the stages
//! (pessimistic).

use serde::Serialize;

use super::arrays::halo_passes;
use super::{operator_applications, plan_on_paper, Array, Budgets, Mode, PlanError};
use crate::gpu::GpuContext;
use crate::operator::{Geometry, OperatorOptions};
use crate::params::AdmmParams;

/// What the model is told about the machine, and the measured cost of the computation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClusterInputs {
    /// Memory of one GPU, bytes.
    pub device_bytes: u64,
    /// Host memory of one rank, bytes (beyond it, arrays go to node-local scratch).
    pub host_bytes: u64,
    /// Copy bandwidth of one GPU (bytes read + written per second), GB/s.
    pub device_gbps: f64,
    /// Host <-> device bandwidth of one GPU, GB/s.
    pub bus_gbps: f64,
    /// Network bandwidth of one node, GB/s, shared by its `gpus_per_node` ranks.
    pub network_gbps: f64,
    pub gpus_per_node: usize,
    /// Latency of one message, microseconds.
    pub latency_us: f64,
    /// Device time of an iteration over the time of a plain copy of the bytes its passes touch.
    pub copy_equivalents: f64,
}

/// The modelled outer iteration of one size on `ranks` GPUs.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterPoint {
    pub size: usize,
    pub angles: usize,
    pub ranks: usize,
    /// In-core or streaming, for the ranks' memory together.
    pub mode: Mode,
    pub device_s: f64,
    pub bus_s: f64,
    pub network_s: f64,
    pub latency_s: f64,
    /// `max(device, bus) + network + latency`.
    pub iteration_s: f64,
    /// Iteration time on one GPU over this one.
    pub speedup: f64,
    /// `speedup / ranks`.
    pub efficiency: f64,
    /// `(network + latency) / iteration`.
    pub communication_share: f64,
    pub bus_bytes_per_rank: u64,
    pub network_bytes_per_rank: u64,
    /// Host state of one rank (its share of the arrays not on the devices), bytes.
    pub host_bytes_per_rank: u64,
    pub scratch_bytes_per_rank: u64,
}

/// Bytes the passes of one outer iteration read and write (a read-modify-write counts two).
pub fn touched_bytes(g: &Geometry, params: &AdmmParams) -> u64 {
    Array::BY_TRAFFIC
        .iter()
        .map(|a| a.layout(g).bytes() * a.accesses(params))
        .sum()
}

/// Bytes one of `ranks` ranks sends (and receives) per outer iteration: the all-to-all of the
/// spectrum in every application of A and A*, and one y-plane of each input of every gradient and
/// divergence pass to each of its two neighbours.
pub fn network_bytes_per_rank(g: &Geometry, params: &AdmmParams, ranks: usize) -> u64 {
    if ranks <= 1 {
        return 0;
    }
    let k = ranks as u64;
    let (forward, adjoint) = operator_applications(params);
    let spectrum = Array::Spectrum.layout(g).bytes();
    let exchange = (forward + adjoint) * spectrum * (k - 1) / (k * k);
    let y_plane_words = (g.n0 * g.n2) as u64;
    let halos: u64 = halo_passes(params)
        .iter()
        .map(|(inputs, _, runs)| {
            let words: u64 = inputs
                .iter()
                .map(|a| a.layout(g).plane_words as u64 / (g.n1 * g.n2) as u64)
                .sum();
            runs * 2 * words * y_plane_words * 4
        })
        .sum();
    exchange + halos
}

/// Messages' latency per outer iteration on `ranks` ranks, seconds: `ranks - 1` per all-to-all
/// and `ceil(log2 ranks)` per reduction (one per CG step and one per outer iteration).
fn latency_s(params: &AdmmParams, ranks: usize, latency_us: f64) -> f64 {
    if ranks <= 1 {
        return 0.0;
    }
    let (forward, adjoint) = operator_applications(params);
    let reductions = params.inner_iterations as f64 + 1.0;
    let depth = (ranks as f64).log2().ceil();
    let messages = (forward + adjoint) as f64 * (ranks - 1) as f64 + reductions * depth;
    messages * latency_us * 1e-6
}

/// The model of `g` under `params` on each of `ranks`, with the arrays planned on this device's
/// limits (nothing is allocated); speed-ups are against the modelled one-rank iteration.
pub fn model(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    inputs: &ClusterInputs,
    ranks: &[usize],
) -> Result<Vec<ClusterPoint>, PlanError> {
    let single_s = point(ctx, g, params, inputs, 1)?.iteration_s;
    ranks
        .iter()
        .map(|&k| {
            let mut p = point(ctx, g, params, inputs, k.max(1))?;
            p.speedup = single_s / p.iteration_s;
            p.efficiency = p.speedup / p.ranks as f64;
            Ok(p)
        })
        .collect()
}

/// One point of the model, its speed-up and efficiency left at 1.
fn point(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    inputs: &ClusterInputs,
    k: usize,
) -> Result<ClusterPoint, PlanError> {
    let budgets = Budgets::given(
        inputs.device_bytes.saturating_mul(k as u64),
        inputs.host_bytes.saturating_mul(k as u64),
        Some("scratch".into()),
    );
    let plan = plan_on_paper(ctx, g, params, &OperatorOptions::default(), &budgets)?;
    let touched = touched_bytes(g, params) as f64;
    let device_s = inputs.copy_equivalents * touched / k as f64 / (inputs.device_gbps * 1e9);
    let bus_bytes = plan.bytes_moved_per_iteration / k as u64;
    let bus_s = bus_bytes as f64 / (inputs.bus_gbps * 1e9);
    let network_bytes = network_bytes_per_rank(g, params, k);
    let per_rank_network = inputs.network_gbps / inputs.gpus_per_node.max(1) as f64;
    let network_s = network_bytes as f64 / (per_rank_network * 1e9);
    let latency_s = latency_s(params, k, inputs.latency_us);
    let iteration_s = device_s.max(bus_s) + network_s + latency_s;
    Ok(ClusterPoint {
        size: g.n0,
        angles: g.ntheta(),
        ranks: k,
        mode: plan.mode,
        device_s,
        bus_s,
        network_s,
        latency_s,
        iteration_s,
        speedup: 1.0,
        efficiency: 1.0,
        communication_share: (network_s + latency_s) / iteration_s,
        bus_bytes_per_rank: bus_bytes,
        network_bytes_per_rank: network_bytes,
        host_bytes_per_rank: plan.host_bytes / k as u64,
        scratch_bytes_per_rank: plan.scratch_bytes / k as u64,
    })
}

/// The fewest ranks at which communication takes more than half of the iteration, if any.
pub fn communication_dominates_from(points: &[ClusterPoint]) -> Option<usize> {
    points
        .iter()
        .filter(|p| p.communication_share > 0.5)
        .map(|p| p.ranks)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(n: usize) -> Geometry {
        Geometry::cube(
            n,
            n,
            std::f64::consts::FRAC_PI_2 + std::f64::consts::FRAC_PI_6,
        )
    }

    #[test]
    fn one_rank_exchanges_nothing_and_the_exchange_follows_the_spectrum() {
        let g = geometry(64);
        let params = AdmmParams::default();
        assert_eq!(network_bytes_per_rank(&g, &params, 1), 0);
        assert_eq!(latency_s(&params, 1, 10.0), 0.0);
        let (forward, adjoint) = operator_applications(&params);
        let spectrum = (g.deth * g.n1 * g.n2 * 8) as u64;
        let halo_only = |k: usize| {
            let kk = k as u64;
            network_bytes_per_rank(&g, &params, k)
                - (forward + adjoint) * spectrum * (kk - 1) / (kk * kk)
        };
        // The halos do not depend on the number of ranks (two neighbours each) ...
        assert_eq!(halo_only(2), halo_only(16));
        assert!(halo_only(2) > 0);
        // ... and are the gradient and divergence passes' inputs, one y-plane each way.
        let plane = (g.n0 * g.n2 * 4) as u64;
        let expected: u64 = halo_passes(&params)
            .iter()
            .map(|(inputs, _, runs)| {
                let words: u64 = inputs
                    .iter()
                    .map(|a| match a {
                        Array::Psi | Array::Lambda | Array::GradU | Array::GradP => 3,
                        _ => 1,
                    })
                    .sum();
                runs * 2 * words * plane
            })
            .sum();
        assert_eq!(halo_only(4), expected);
    }

    #[test]
    fn more_ranks_share_the_work_and_communicate_a_larger_part_of_it() {
        let ctx = crate::gpu::test_context();
        let g = geometry(256);
        let params = AdmmParams::default();
        let inputs = ClusterInputs {
            device_bytes: 1 << 30,
            host_bytes: 64 << 30,
            device_gbps: 1000.0,
            bus_gbps: 25.0,
            network_gbps: 25.0,
            gpus_per_node: 4,
            latency_us: 5.0,
            copy_equivalents: 4.0,
        };
        let points = model(&ctx, &g, &params, &inputs, &[1, 2, 4, 8, 16, 32, 64]).unwrap();
        assert_eq!(points[0].network_s, 0.0);
        assert!((points[0].speedup - 1.0).abs() < 1e-12);
        for p in &points {
            let whole = p.device_s * p.ranks as f64;
            assert!((whole - points[0].device_s).abs() <= 1e-9 * whole, "{p:?}");
        }
        for w in points.windows(2) {
            assert!(w[1].communication_share > w[0].communication_share, "{w:?}");
            // More GPUs hold more of the arrays, so the bus traffic of a rank falls at least as
            // fast as its share (so the speed-up may exceed K).
            assert!(
                w[1].bus_s * w[1].ranks as f64 <= w[0].bus_s * w[0].ranks as f64 * (1.0 + 1e-9)
            );
        }
        for w in points[1..].windows(2) {
            assert!(
                w[1].network_bytes_per_rank < w[0].network_bytes_per_rank,
                "{w:?}"
            );
        }
        // Every part is counted: the iteration is what the parts make.
        for p in &points {
            let sum = p.device_s.max(p.bus_s) + p.network_s + p.latency_s;
            assert!((p.iteration_s - sum).abs() <= 1e-12 * sum, "{p:?}");
        }
        // The speed-up does not depend on which other points are modelled.
        let later = model(&ctx, &g, &params, &inputs, &[8]).unwrap();
        assert!((later[0].speedup - points[3].speedup).abs() < 1e-9);
        let from = communication_dominates_from(&points);
        assert_eq!(
            from,
            points
                .iter()
                .find(|p| p.communication_share > 0.5)
                .map(|p| p.ranks)
        );
    }
}
