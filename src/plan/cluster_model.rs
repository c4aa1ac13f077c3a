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
//! - bus time: the host <-> device bytes of the rank's own memory plan ([`plan_member`]: its
//!   share of every array against one GPU's memory and largest buffer, so a rank whose shares
//!   fit is in-core and moves nothing), over the bus bandwidth; transfers overlap computation,
//!   so the two count as their maximum;
//! - network time: the all-to-all and halo bytes over the rank's share of its node's network
//!   bandwidth (ranks of one node share it; traffic inside a node is counted at network speed),
//!   plus a latency per message: (K - 1) per all-to-all and ceil(log2 K) per reduction.
//!
//! Two iteration times: `iteration_s` with nothing overlapped (an all-to-all sits between two
//! stages), and `overlapped_s` with the exchanges pipelined as the ranks run them: the blocks
//! of group i of a stage's chunks travel (one all-to-all per group, K - 1 messages each) while
//! group i + 1 computes, so an application's exchange is hidden behind its own compute except
//! for the last group's part (1/g of it) and whatever it takes beyond that compute. g is the
//! ranks' group count ([`crate::distributed::shares::exchange_groups`]): at most 4, and 1
//! (nothing overlapped) once every rank has one chunk of a stage at most. The compute an application can
//! hide behind is the iteration's compute (device or bus time) times the operator stages' part
//! of the bytes the iteration touches, over the applications (pessimistic: the stages' FFTs cost
//! more per byte than the vector passes). Not hidden: the halos of the gradient and divergence
//! passes, and the one reduction per CG step (and per outer iteration), whose latency counts.
//!
//! What the model leaves out, and which way it errs: the copy-equivalents per byte are measured
//! at a small size and taken as size-independent (the FFTs' work per byte grows with the log of
//! the length: optimistic for the device at 2048^3). The plans are made on paper with the
//! target's largest buffer and binding (`bench scale --target-max-buffer-gib`,
//! `--target-max-binding`, through a modelling context), whatever this device's are.

use serde::Serialize;

use super::arrays::halo_passes;
use super::{operator_applications, plan_member, Array, Budgets, Mode, PlanError, Portion};
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::operator::OperatorOptions;
use crate::params::AdmmParams;

/// What the model is told about the machine, and the measured cost of the computation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClusterInputs {
    /// Memory of one GPU, bytes.
    pub device_bytes: u64,
    /// Host memory of one rank, bytes (beyond it, arrays go to node-local scratch).
    pub host_bytes: u64,
    /// The largest buffer of one GPU, bytes: a share beyond it cannot be resident.
    pub max_buffer_bytes: u64,
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
    /// In-core or streaming: rank 0's plan, which holds the largest shares.
    pub mode: Mode,
    /// How many ranks stream, each under its own plan: the first ones (where K does not divide an
    /// array's planes, the first ranks hold one plane more of it); the others are in-core.
    pub streaming_ranks: usize,
    pub device_s: f64,
    pub bus_s: f64,
    pub network_s: f64,
    pub latency_s: f64,
    /// `max(device, bus) + network + latency`: nothing overlapped.
    pub iteration_s: f64,
    /// Iteration time on one GPU over this one.
    pub speedup: f64,
    /// `speedup / ranks`.
    pub efficiency: f64,
    /// `(network + latency) / iteration`.
    pub communication_share: f64,
    /// The iteration with the exchanges pipelined behind the stages' compute (see the module).
    pub overlapped_s: f64,
    /// Network and latency time left exposed in it.
    pub exposed_communication_s: f64,
    /// One GPU's iteration over `overlapped_s`.
    pub overlapped_speedup: f64,
    /// `overlapped_speedup / ranks`: the parallel efficiency.
    pub overlapped_efficiency: f64,
    /// The largest term of the overlapped iteration: "device", "bus" or "communication".
    pub bound: &'static str,
    /// `device / overlapped`: the part of the overlapped iteration the GPU computes, the
    /// efficiency against K GPUs that never wait (for the bus or the network).
    pub device_share: f64,
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
        .map(|a| a.layout(g).bytes() * a.accesses(params, g.n2, super::NormalLoop::Gridding))
        .sum()
}

/// Bytes one of `ranks` ranks sends (and receives) per outer iteration: the all-to-all of the
/// spectrum in every application of A and A*, and one y-plane of each input of every gradient and
/// divergence pass to one neighbour (the gradient reads the plane after a rank's rows, the
/// divergence the plane before: a rank inside the team sends both kinds, the first rank only the
/// divergence's, the last only the gradient's; this counts a rank inside).
pub fn network_bytes_per_rank(g: &Geometry, params: &AdmmParams, ranks: usize) -> u64 {
    if ranks <= 1 {
        return 0;
    }
    let (forward, adjoint) = operator_applications(params, g.n2);
    spectrum_exchange_bytes(g, forward + adjoint, ranks) + halo_bytes_per_rank(g, params)
}

/// [`network_bytes_per_rank`] per iteration of a run of `outer` outer iterations: its first
/// applies A* once more where the residual is carried (what a measured run of a few
/// iterations sends).
pub fn network_bytes_per_rank_in(
    g: &Geometry,
    params: &AdmmParams,
    ranks: usize,
    outer: usize,
) -> u64 {
    if ranks <= 1 || outer == 0 {
        return 0;
    }
    let (forward, adjoint) = super::arrays::operator_applications_in(params, g.n2, outer);
    let exchange = spectrum_exchange_bytes(g, forward + adjoint, ranks);
    (exchange + outer as u64 * halo_bytes_per_rank(g, params)) / outer as u64
}

/// Bytes a rank sends of the spectrum's all-to-all in `applications` applications of A or A*
/// on `ranks` ranks: `S (K - 1) / K^2` each.
fn spectrum_exchange_bytes(g: &Geometry, applications: u64, ranks: usize) -> u64 {
    let k = ranks as u64;
    applications * Array::Spectrum.layout(g).bytes() * (k - 1) / (k * k)
}

/// Bytes of the halos a rank inside the team sends per outer iteration (see
/// [`network_bytes_per_rank`]).
fn halo_bytes_per_rank(g: &Geometry, params: &AdmmParams) -> u64 {
    let y_plane_words = (g.n0 * g.n2) as u64;
    halo_passes(params, g.n2)
        .iter()
        .map(|(inputs, _, runs)| {
            let words: u64 = inputs
                .iter()
                .map(|a| (a.layout(g).words() / g.volume_len()) as u64)
                .sum();
            runs * words * y_plane_words * 4
        })
        .sum()
}

/// Messages' latency per outer iteration on `ranks` ranks, seconds: `ranks - 1` per all-to-all
/// and `ceil(log2 ranks)` per reduction (one per CG step and one per outer iteration).
fn latency_s(params: &AdmmParams, width: usize, ranks: usize, latency_us: f64) -> f64 {
    if ranks <= 1 {
        return 0.0;
    }
    let (forward, adjoint) = operator_applications(params, width);
    let reductions = params.inner_steps(width) as f64 + 1.0;
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
            // One GPU exchanges nothing: its overlapped iteration is its iteration.
            p.overlapped_speedup = single_s / p.overlapped_s;
            p.overlapped_efficiency = p.overlapped_speedup / p.ranks as f64;
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
        inputs.device_bytes,
        inputs.host_bytes,
        Some("scratch".into()),
    )
    .for_max_buffer(inputs.max_buffer_bytes);
    let plan_of = |member| {
        plan_member(
            ctx,
            g,
            params,
            &OperatorOptions::default(),
            &budgets,
            Portion { member, members: k },
        )
    };
    // Rank 0 holds the largest share of every array (the first ranks take the extra planes): the
    // slowest rank, whose plan the iteration waits for.
    let plan = plan_of(0)?;
    let streaming_ranks = streaming_prefix(k, plan.mode == Mode::Streaming, |member| {
        Ok(plan_of(member)?.mode == Mode::Streaming)
    })?;
    let touched = touched_bytes(g, params) as f64;
    let device_s = inputs.copy_equivalents * touched / k as f64 / (inputs.device_gbps * 1e9);
    let bus_bytes = plan.bytes_moved_per_iteration;
    let bus_s = bus_bytes as f64 / (inputs.bus_gbps * 1e9);
    let network_bytes = network_bytes_per_rank(g, params, k);
    let per_rank_network = inputs.network_gbps / inputs.gpus_per_node.max(1) as f64;
    let network_s = network_bytes as f64 / (per_rank_network * 1e9);
    let latency_s = latency_s(params, g.n2, k, inputs.latency_us);
    let iteration_s = device_s.max(bus_s) + network_s + latency_s;
    let compute_s = device_s.max(bus_s);
    let exposed = exposed_communication_s(g, params, inputs, k, (compute_s, plan.chunks));
    let overlapped_s = compute_s + exposed;
    let bound = if exposed > compute_s {
        "communication"
    } else if bus_s > device_s {
        "bus"
    } else {
        "device"
    };
    Ok(ClusterPoint {
        size: g.n0,
        angles: g.ntheta(),
        ranks: k,
        mode: plan.mode,
        streaming_ranks,
        device_s,
        bus_s,
        network_s,
        latency_s,
        iteration_s,
        speedup: 1.0,
        efficiency: 1.0,
        communication_share: (network_s + latency_s) / iteration_s,
        overlapped_s,
        exposed_communication_s: exposed,
        overlapped_speedup: 1.0,
        overlapped_efficiency: 1.0,
        bound,
        device_share: device_s / overlapped_s,
        bus_bytes_per_rank: bus_bytes,
        network_bytes_per_rank: network_bytes,
        host_bytes_per_rank: plan.host_bytes,
        scratch_bytes_per_rank: plan.scratch_bytes,
    })
}

/// How many of `k` ranks stream, rank 0 among them where `first_streams`: a prefix, since a
/// rank's shares are no larger than those of the ranks before it, found by bisection over
/// `streams(rank)`.
fn streaming_prefix(
    k: usize,
    first_streams: bool,
    streams: impl Fn(usize) -> Result<bool, PlanError>,
) -> Result<usize, PlanError> {
    if !first_streams {
        return Ok(0);
    }
    // Ranks below `low` stream; ranks from `high` on are in-core.
    let (mut low, mut high) = (1, k);
    while low < high {
        let middle = (low + high) / 2;
        if streams(middle)? {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    Ok(low)
}

/// Bytes the operator's stages read and write of the iteration's [`touched_bytes`]: every
/// application reads its input (a volume or the data), writes and reads the spectrum and writes
/// its output.
fn operator_touched_bytes(g: &Geometry, params: &AdmmParams) -> u64 {
    let (forward, adjoint) = operator_applications(params, g.n2);
    let volume = Array::P.layout(g).bytes();
    let data = Array::Ap.layout(g).bytes();
    let spectrum = Array::Spectrum.layout(g).bytes();
    (forward + adjoint) * (volume + 2 * spectrum + data)
}

/// The network and latency time an iteration on `k` ranks leaves exposed when each
/// application's all-to-all is pipelined behind its stages' `compute_s` share (see the module):
/// per application, the least over group counts `g` (powers of two up to the fewer of the U1 and
/// U2 chunks) of `max(0, e - c) + min(e, c) / g` for an exchange of `e` seconds (its bytes and
/// one all-to-all's latency per group) beside `c` seconds of compute; plus the halos and the
/// reductions' latency, not hidden. With `g = 1` it is the iteration's communication with nothing
/// overlapped, so overlap never costs.
fn exposed_communication_s(
    g: &Geometry,
    params: &AdmmParams,
    inputs: &ClusterInputs,
    k: usize,
    (compute_s, (cy, ck, _)): (f64, (usize, usize, usize)),
) -> f64 {
    if k <= 1 {
        return 0.0;
    }
    let (forward, adjoint) = operator_applications(params, g.n2);
    let applications = (forward + adjoint) as f64;
    let exchange_bytes = spectrum_exchange_bytes(g, forward + adjoint, k);
    let halo_bytes = halo_bytes_per_rank(g, params);
    let per_rank_network = inputs.network_gbps / inputs.gpus_per_node.max(1) as f64 * 1e9;
    let chunks =
        g.n1.div_ceil(cy.max(1))
            .min(g.deth.div_ceil(ck.max(1)))
            .max(1);
    let operator_share = operator_touched_bytes(g, params) as f64 / touched_bytes(g, params) as f64;
    let compute = compute_s * operator_share.min(1.0) / applications;
    let exposed = |groups: usize| {
        let exchange = exchange_bytes as f64 / per_rank_network / applications
            + (groups * (k - 1)) as f64 * inputs.latency_us * 1e-6;
        (exchange - compute).max(0.0) + exchange.min(compute) / groups as f64
    };
    let per_application = exposed(crate::distributed::shares::exchange_groups(chunks, k));
    let reductions = (params.inner_steps(g.n2) as f64 + 1.0) * (k as f64).log2().ceil();
    applications * per_application
        + halo_bytes as f64 / per_rank_network
        + reductions * inputs.latency_us * 1e-6
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
    use crate::plan::test_geometry as geometry;

    /// A GPU of `device_bytes` whose largest buffer is `max_buffer_bytes`, with `host_bytes` per
    /// rank, on a network and bus of round figures.
    fn machine(device_bytes: u64, host_bytes: u64, max_buffer_bytes: u64) -> ClusterInputs {
        ClusterInputs {
            device_bytes,
            host_bytes,
            max_buffer_bytes,
            device_gbps: 1000.0,
            bus_gbps: 25.0,
            network_gbps: 25.0,
            gpus_per_node: 4,
            latency_us: 5.0,
            copy_equivalents: 4.0,
        }
    }

    #[test]
    fn one_rank_exchanges_nothing_and_the_exchange_follows_the_spectrum() {
        let g = geometry(64);
        let params = AdmmParams::default();
        assert_eq!(network_bytes_per_rank(&g, &params, 1), 0);
        assert_eq!(latency_s(&params, g.n2, 1, 10.0), 0.0);
        let (forward, adjoint) = operator_applications(&params, g.n2);
        let spectrum = (g.deth * g.n1 * g.n2 * 8) as u64;
        let halo_only = |k: usize| {
            let kk = k as u64;
            network_bytes_per_rank(&g, &params, k)
                - (forward + adjoint) * spectrum * (kk - 1) / (kk * kk)
        };
        // The halos do not depend on the number of ranks ...
        assert_eq!(halo_only(2), halo_only(16));
        assert!(halo_only(2) > 0);
        // ... and are the gradient and divergence passes' inputs, one y-plane each, to one
        // neighbour.
        let plane = (g.n0 * g.n2 * 4) as u64;
        let expected: u64 = halo_passes(&params, g.n2)
            .iter()
            .map(|(inputs, _, runs)| {
                let words: u64 = inputs
                    .iter()
                    .map(|a| match a {
                        Array::Psi | Array::Lambda | Array::GradU | Array::GradP => 3,
                        _ => 1,
                    })
                    .sum();
                runs * words * plane
            })
            .sum();
        assert_eq!(halo_only(4), expected);
    }

    #[test]
    fn more_ranks_share_the_work_and_communicate_a_larger_part_of_it() {
        let ctx = crate::gpu::test_context();
        let g = geometry(256);
        let params = AdmmParams::default();
        let inputs = machine(1 << 30, 64 << 30, 1 << 30);
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
        // Overlap hides part of the communication, never adds to it, and hides nothing of the
        // compute; one GPU exchanges nothing.
        assert!(points[0].exposed_communication_s == 0.0);
        assert!((points[0].overlapped_s - points[0].iteration_s).abs() <= 1e-12);
        for p in &points {
            let compute = p.device_s.max(p.bus_s);
            assert!(p.overlapped_s <= p.iteration_s * (1.0 + 1e-12), "{p:?}");
            assert!(p.overlapped_s >= compute, "{p:?}");
            assert!((p.overlapped_s - compute - p.exposed_communication_s).abs() <= 1e-12);
            let expected = if p.exposed_communication_s > compute {
                "communication"
            } else if p.bus_s > p.device_s {
                "bus"
            } else {
                "device"
            };
            assert_eq!(p.bound, expected, "{p:?}");
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

    /// The model plans the target GPU's chunks: a modelling context reports the target's largest
    /// binding, above this device's too, so the operator's chunks follow it; what it binds on
    /// this device is still checked against the device's own limit.
    #[test]
    fn a_modelling_context_sizes_chunks_by_the_target_binding() {
        use crate::operator::LaminoOperator;
        let device = crate::gpu::test_context().max_binding_bytes();
        let small = crate::gpu::test_context().with_max_binding_bytes(64 << 20);
        let modelled = crate::gpu::test_context().modelling_max_binding_bytes(2047 << 20);
        assert_eq!(modelled.max_binding_bytes(), 2047 << 20);
        assert_eq!(modelled.device_max_binding_bytes(), device);
        let g = geometry(1024);
        let chunks =
            |ctx| LaminoOperator::chunk_sizes(ctx, &g, &OperatorOptions::default()).unwrap();
        let (capped, target) = (chunks(&small), chunks(&modelled));
        // A y row of U1's grid is 16 MiB at 1024^3: 4 rows per 64 MiB binding, 127 per 2047 MiB.
        assert_eq!(capped.0, 4);
        assert_eq!(target.0, 127);
    }

    /// Where K does not divide the planes, the first ranks hold one plane more of every array:
    /// on a GPU between what the two shares need, those ranks stream and the others are
    /// in-core, and the model counts them.
    #[test]
    fn ranks_holding_a_plane_more_can_stream_where_the_others_are_in_core() {
        let ctx = crate::gpu::test_context();
        // 64 planes of every array on 3 ranks: 22, 21 and 21.
        let (g, k) = (geometry(64), 3);
        let params = AdmmParams::default();
        let plan = |device_bytes, member| {
            let budgets = Budgets::given(device_bytes, 1 << 40, None).for_max_buffer(1 << 40);
            let portion = Portion { member, members: k };
            plan_member(
                &ctx,
                &g,
                &params,
                &OperatorOptions::default(),
                &budgets,
                portion,
            )
            .unwrap()
        };
        // The least device memory on which a rank is in-core.
        let least_in_core =
            |member| crate::plan::least_in_core_bytes(|d| plan(d, member).mode == Mode::InCore);
        let (first, last) = (least_in_core(0), least_in_core(k - 1));
        assert!(first > last, "{first} {last}");
        let device_bytes = (first + last) / 2;
        assert_eq!(plan(device_bytes, 0).mode, Mode::Streaming);
        assert_eq!(plan(device_bytes, 1).mode, Mode::InCore);
        let inputs = machine(device_bytes, 1 << 40, 1 << 40);
        let points = model(&ctx, &g, &params, &inputs, &[1, 2, 3, 4]).unwrap();
        let streaming: Vec<_> = points.iter().map(|p| p.streaming_ranks).collect();
        // One GPU and 2 ranks (32 planes each, more than rank 0's 22) stream whole; of 3, the
        // first; of 4 (16 each), none.
        assert_eq!(streaming, [1, 2, 1, 0], "{points:?}");
        assert_eq!(points[2].mode, Mode::Streaming);
        assert!(points[2].bus_bytes_per_rank > 0);
    }

    /// Each rank plans its own memory: with a GPU of a quarter of what one in-core iteration
    /// needs, one GPU streams, and from the K whose shares fit every rank is in-core and moves
    /// nothing over the bus.
    #[test]
    fn ranks_whose_shares_fit_are_in_core_and_move_nothing_over_the_bus() {
        let ctx = crate::gpu::test_context();
        let g = geometry(128);
        let params = AdmmParams::default();
        let need = crate::plan::MemoryPlan::in_core(&ctx, &g, &params, &OperatorOptions::default())
            .unwrap()
            .device_bytes;
        let inputs = machine(need / 4, 64 << 30, need);
        let points = model(&ctx, &g, &params, &inputs, &[1, 2, 8, 16]).unwrap();
        assert_eq!(points[0].mode, Mode::Streaming);
        assert!(points[0].bus_bytes_per_rank > 0);
        for p in &points[2..] {
            assert_eq!(p.mode, Mode::InCore, "{p:?}");
            assert_eq!(p.bus_bytes_per_rank, 0, "{p:?}");
            assert!(p.bus_s == 0.0, "{p:?}");
            // In-core, the rank's host memory holds nothing of the iteration.
            assert_eq!(p.host_bytes_per_rank + p.scratch_bytes_per_rank, 0, "{p:?}");
        }
    }
}
