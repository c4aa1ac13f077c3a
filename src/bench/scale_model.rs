//! `lamino bench scale --model`: the cost of an outer iteration measured on this device, then
//! the cluster cost model (`plan::cluster_model`) of every size on each number of GPUs.

use serde::Serialize;

use super::scale::{scale_scan, timed_iterations, ScaleBenchError, SCALE_TILT_DEGREES};
use super::{copy_gbps, print_json, BenchError};
use crate::gpu::GpuContext;

/// small scan against a plain copy of the bytes its passes touch.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleModelMeasurement {
    pub kind: &'static str,
    pub size: usize,
    pub angles: usize,
    /// Median wall time of one in-core outer iteration, ms.
    pub ms_per_iteration: f64,
    /// Bytes its passes read and write (`plan::cluster_model::touched_bytes`).
    pub touched_bytes: u64,
    /// A plain copy on the device (bytes read + written per second), GB/s.
    pub copy_gbps: f64,
    /// `ms_per_iteration` over the time a copy of `touched_bytes` takes.
    pub copy_equivalents: f64,
    pub device: String,
    /// The largest binding the model's plans were made with: the target's
    /// (`--target-max-binding`), whatever this device's is.
    pub model_max_binding_bytes: u64,
}

/// `lamino bench scale --model`: measures the cost of an iteration on this device at side
/// `measure_size`, then models every size of `sizes` on each of `ranks`, with the measured copy
/// equivalents and copy bandwidth wherever `inputs` leaves them 0, the plans' bindings at most
/// `max_binding_bytes`.
pub fn bench_scale_model(
    options: &crate::gpu::DeviceOptions,
    (measure_size, max_binding_bytes): (usize, u64),
    mut inputs: crate::plan::cluster_model::ClusterInputs,
    sizes: &[usize],
    ranks: &[usize],
) -> Result<
    (
        ScaleModelMeasurement,
        Vec<crate::plan::cluster_model::ClusterPoint>,
    ),
    ScaleBenchError,
> {
    use crate::operator::OperatorOptions;
    use crate::params::AdmmParams;
    use crate::plan::cluster_model::{model, touched_bytes};
    use crate::plan::MemoryPlan;
    let (g, data) = scale_scan(measure_size, measure_size);
    let params = AdmmParams::exactly(2);
    let ctx = GpuContext::new(options)?;
    let in_core = MemoryPlan::in_core(&ctx, &g, &params, &OperatorOptions::default())?;
    let copy = copy_gbps(&ctx, 64 << 20, 5)?;
    let device = ctx.info().name.clone();
    let (ms, _, _) = timed_iterations(options, &g, &data, &in_core, 1, true)?;
    let touched = touched_bytes(&g, &params);
    let copy_equivalents = ms / 1e3 * copy * 1e9 / touched as f64;
    if inputs.copy_equivalents <= 0.0 {
        inputs.copy_equivalents = copy_equivalents;
    }
    if inputs.device_gbps <= 0.0 {
        inputs.device_gbps = copy;
    }
    // The plans of the target: this device's context reporting the target's binding limit.
    let modelled = GpuContext::new(options)?.modelling_max_binding_bytes(max_binding_bytes);
    let mut points = Vec::new();
    for &n in sizes {
        let target = crate::geometry::Geometry::cube(
            n,
            n,
            crate::geometry::Tilt::from_degrees(SCALE_TILT_DEGREES),
        );
        points.extend(model(&modelled, &target, &params, &inputs, ranks)?);
    }
    Ok((
        ScaleModelMeasurement {
            kind: "model-measurement",
            size: measure_size,
            angles: measure_size,
            ms_per_iteration: ms,
            touched_bytes: touched,
            copy_gbps: copy,
            copy_equivalents,
            device,
            model_max_binding_bytes: modelled.max_binding_bytes(),
        },
        points,
    ))
}

/// Prints [`bench_scale_model`]'s measurement, the modelled GPU, each point of the model and
/// from how many GPUs communication dominates each size.
pub fn print(
    options: &crate::gpu::DeviceOptions,
    json: bool,
    (measure_size, max_binding_bytes): (usize, u64),
    inputs: crate::plan::cluster_model::ClusterInputs,
    (sizes, ranks): (&[usize], &[usize]),
) -> Result<(), BenchError> {
    use crate::plan::cluster_model::communication_dominates_from;
    let (measured, points) = bench_scale_model(
        options,
        (measure_size, max_binding_bytes),
        inputs,
        sizes,
        ranks,
    )?;
    if json {
        print_json(&measured)?;
        for p in &points {
            print_json(p)?;
        }
        return Ok(());
    }
    println!(
        "measured on {}: one in-core outer iteration of {}^3 x {} angles in {:.0} ms, {:.2} GB touched, \
         copy {:.2} GB/s: {:.1} copy-equivalents per byte",
        measured.device,
        measured.size,
        measured.angles,
        measured.ms_per_iteration,
        measured.touched_bytes as f64 / 1e9,
        measured.copy_gbps,
        measured.copy_equivalents
    );
    let gbps = if inputs.device_gbps > 0.0 {
        inputs.device_gbps
    } else {
        measured.copy_gbps
    };
    let equivalents = if inputs.copy_equivalents > 0.0 {
        inputs.copy_equivalents
    } else {
        measured.copy_equivalents
    };
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    println!(
        "modelled GPU: {} GiB, largest buffer {:.0} MiB, largest binding {:.0} MiB, copy {gbps:.1} \
         GB/s, {equivalents:.1} copy-equivalents per byte, bus {} GB/s; node network {} GB/s shared \
         by {} GPUs, {} us per message; host {} GiB per rank",
        inputs.device_bytes >> 30,
        mib(inputs.max_buffer_bytes),
        mib(measured.model_max_binding_bytes),
        inputs.bus_gbps,
        inputs.network_gbps,
        inputs.gpus_per_node,
        inputs.latency_us,
        inputs.host_bytes >> 30
    );
    println!(
        "{:>5} {:>5} {:>12} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>6} {:>10} {:>9} {:>6} {:>13} {:>7} {:>9} {:>9}",
        "size",
        "GPUs",
        "each rank",
        "device s",
        "bus s",
        "net s",
        "lat s",
        "iter s",
        "speedup",
        "eff",
        "overlap s",
        "exposed s",
        "eff",
        "bound",
        "device",
        "net GB",
        "host GiB"
    );
    for p in &points {
        println!(
            "{:>5} {:>5} {:>12} {:>9.3} {:>9.3} {:>9.3} {:>9.4} {:>10.3} {:>8.2} {:>6.2} {:>10.3} {:>9.3} {:>6.2} {:>13} {:>7.2} {:>9.2} {:>9.1}",
            p.size,
            p.ranks,
            each_rank(p),
            p.device_s,
            p.bus_s,
            p.network_s,
            p.latency_s,
            p.iteration_s,
            p.speedup,
            p.efficiency,
            p.overlapped_s,
            p.exposed_communication_s,
            p.overlapped_efficiency,
            p.bound,
            p.device_share,
            p.network_bytes_per_rank as f64 / 1e9,
            (p.host_bytes_per_rank + p.scratch_bytes_per_rank) as f64 / (1u64 << 30) as f64
        );
    }
    for &n in sizes {
        let of_size: Vec<_> = points.iter().filter(|p| p.size == n).cloned().collect();
        match communication_dominates_from(&of_size) {
            Some(k) => println!("{n}^3: communication takes over half the iteration from {k} GPUs"),
            None => println!(
                "{n}^3: communication stays under half the iteration up to {} GPUs",
                of_size.iter().map(|p| p.ranks).max().unwrap_or(1)
            ),
        }
    }
    Ok(())
}

/// The `each rank` column: "in-core" or "streaming" where every rank's own plan is, else how
/// many of the ranks stream (the first ones, which hold a plane more of some arrays).
fn each_rank(p: &crate::plan::cluster_model::ClusterPoint) -> String {
    match p.streaming_ranks {
        0 => "in-core".into(),
        s if s == p.ranks => "streaming".into(),
        s => format!("{s}/{} stream", p.ranks),
    }
}
