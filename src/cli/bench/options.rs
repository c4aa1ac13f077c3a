//! The bounds of `lamino bench`'s numeric options, checked before a benchmark opens a device or
//! allocates anything (issue 59): a typo such as `--repeats 18446744073709551615` or
//! `--size 4294967296` ends at once in an error naming the option and its bound, never in a
//! benchmark that runs for ever or an allocation the machine cannot hold. The benchmarks size
//! their work on purpose, so the bounds are what a machine can hold and what a measurement can
//! mean, not what is quick.

use crate::io::number_as_typed;
use crate::memory::check_available;
use crate::params::AdmmParams;
use crate::preprocess::MAX_CANDIDATES;

use super::{BenchWhat, MemoArgs, ScaleArgs};

/// Timed repeats of one measurement: the median (or the fastest) of more than this many says
/// nothing new, and a run a thousand times longer than needed is a typo.
const MAX_REPEATS: usize = 1000;

/// The largest volume side a benchmark plans or models (`bench scale`): four times the
/// largest the scale design considers (2048), and small enough that every plan's byte counts
/// fit 64 bits.
const MAX_PLANNED_SIDE: usize = 1 << 16;

/// The most ranks (GPUs) `bench scale --model` models, and GPUs per node.
const MAX_MODEL_RANKS: usize = 1 << 16;
const MAX_GPUS_PER_NODE: usize = 1024;

/// Bandwidths of the cost model, GB/s: from a kilobyte per millisecond to a petabyte per
/// second, beyond any device, bus or network.
const BANDWIDTH_GBPS: (f64, f64) = (1e-3, 1e6);

/// The bytes one FFT shape is batched up to: at least one 4 KiB page, at most 1 TiB (beyond
/// any device's memory).
const FFT_BYTES: (u64, u64) = (4096, 1 << 40);

/// The longest a step of `bench suite` may run, seconds.
const MAX_STEP_TIMEOUT_S: u64 = 86_400;

/// Why `option`'s `value` is refused, with the bound.
fn refuse(option: &str, value: impl std::fmt::Display, bound: &str) -> Result<(), String> {
    Err(format!("--{option} {value}: expected {bound}"))
}

/// A count within `min..=max`.
fn count(option: &str, value: usize, min: usize, max: usize, why: &str) -> Result<(), String> {
    match (min..=max).contains(&value) {
        true => Ok(()),
        false => refuse(option, value, &format!("{min} to {max} ({why})")),
    }
}

fn repeats(value: usize) -> Result<(), String> {
    count(
        "repeats",
        value,
        1,
        MAX_REPEATS,
        "more repeats measure nothing new",
    )
}

fn outer_iterations(option: &str, value: usize) -> Result<(), String> {
    count(
        option,
        value,
        1,
        AdmmParams::MAX_OUTER_ITERATIONS,
        "a run that converges takes hundreds",
    )
}

/// A finite number within `[min, max]`.
fn number(option: &str, value: f64, (min, max): (f64, f64), unit: &str) -> Result<(), String> {
    match value.is_finite() && (min..=max).contains(&value) {
        true => Ok(()),
        false => refuse(
            option,
            value,
            &format!(
                "a number from {} to {} {unit}",
                number_as_typed(min),
                number_as_typed(max)
            ),
        ),
    }
}

/// A benchmark run on a simulated `side`^3 volume (the size `option`) with `angles`
/// projections: the volume and its projections (f32) must fit in the memory available now, the
/// least any such run holds.
fn simulated_run(option: &str, side: usize, angles: usize) -> Result<(), String> {
    if side == 0 {
        return refuse(option, 0, "at least 1");
    }
    if angles == 0 {
        return refuse("angles", 0, "at least 1");
    }
    let (n, a) = (side as u64, angles as u64);
    let needed = n
        .checked_pow(3)
        .zip(n.checked_pow(2).and_then(|p| p.checked_mul(a)))
        .and_then(|(volume, data)| volume.checked_add(data)?.checked_mul(4));
    let what = format!("a benchmark on a {side}^3 volume with {angles} angles");
    match needed {
        Some(bytes) => check_available(&what, bytes, "choose a smaller --size or fewer --angles")
            .map_err(|e| format!("--{option} {side}: {e}")),
        None => refuse(
            option,
            format!("{side} with {angles} angles"),
            "a volume and projections whose sizes fit 64 bits",
        ),
    }
}

/// A volume side that is only planned or modelled, never allocated.
fn planned_side(option: &str, side: usize) -> Result<(), String> {
    count(
        option,
        side,
        1,
        MAX_PLANNED_SIDE,
        "plans stay within 64-bit byte counts",
    )
}

/// A simulated scan's tilt (strictly within +-90 degrees) and photon count.
fn simulated_noise(tilt_deg: f64, photons: f64) -> Result<(), String> {
    if !(tilt_deg.is_finite() && tilt_deg.abs() < 90.0) {
        return refuse(
            "tilt-deg",
            number_as_typed(tilt_deg),
            "an angle strictly between -90 and 90 degrees (0: plain tomography)",
        );
    }
    crate::simulate::check_photons(photons).map_err(|e| format!("--photons: {e}"))
}

/// Checks every numeric option of `what` against its bound.
pub(super) fn check(what: &BenchWhat) -> Result<(), String> {
    match what {
        BenchWhat::Fft {
            repeats: r, bytes, ..
        } => {
            repeats(*r)?;
            if !(FFT_BYTES.0..=FFT_BYTES.1).contains(bytes) {
                return refuse(
                    "bytes",
                    bytes,
                    &format!("{} to {} (one page to 1 TiB)", FFT_BYTES.0, FFT_BYTES.1),
                );
            }
            Ok(())
        }
        BenchWhat::Admm {
            size,
            angles,
            iterations,
            ..
        } => {
            simulated_run("size", *size, angles.unwrap_or(*size))?;
            outer_iterations("iterations", *iterations)
        }
        BenchWhat::Convergence {
            size,
            angles,
            tilt_deg,
            photons,
            reference_iterations,
            ..
        } => {
            simulated_run("size", *size, angles.unwrap_or(*size))?;
            simulated_noise(*tilt_deg, *photons)?;
            outer_iterations("reference-iterations", *reference_iterations)
        }
        BenchWhat::Align {
            sizes,
            tilt_deg,
            photons,
            jitter,
            drift,
            ..
        } => {
            simulated_noise(*tilt_deg, *photons)?;
            for &n in sizes {
                simulated_run("sizes", n, n.saturating_mul(3) / 2)?;
                // The correlation searches a quarter of the detector: a motion beyond it cannot
                // be matched, and a value that large is a typo.
                let reach = n as f64 / 4.0;
                for (name, value) in [("jitter", *jitter), ("drift", *drift)] {
                    if !(0.0..=reach).contains(&value) {
                        return refuse(
                            name,
                            number_as_typed(value),
                            &format!("0 to a quarter of the detector ({reach} pixels at {n})"),
                        );
                    }
                }
            }
            Ok(())
        }
        BenchWhat::Memo(args) => memo(args),
        BenchWhat::Operator {
            size,
            angles,
            repeats: r,
            ..
        } => {
            simulated_run("size", *size, angles.unwrap_or(*size))?;
            repeats(*r)
        }
        BenchWhat::Normal {
            sizes, repeats: r, ..
        } => {
            for &n in sizes {
                // The doubled volume's operator builds the kernel: 8 times the voxels.
                simulated_run("size", n.saturating_mul(2), n)?;
            }
            repeats(*r)
        }
        BenchWhat::Search {
            sizes,
            candidates,
            repeats: r,
            ..
        } => {
            for &n in sizes {
                simulated_run("sizes", n, n.saturating_add(n / 2))?;
            }
            count(
                "candidates",
                *candidates,
                1,
                MAX_CANDIDATES,
                "the axis search's own bound",
            )?;
            repeats(*r)
        }
        BenchWhat::Stripes {
            angles,
            width,
            rows,
            ..
        } => {
            let bytes = angles
                .checked_mul(*width)
                .and_then(|p| p.checked_mul(*rows)?.checked_mul(4));
            match (angles.min(width).min(rows), bytes) {
                (0, _) => refuse("angles, --width and --rows", 0, "at least 1 each"),
                (_, None) => refuse("angles x --width x --rows", "overflow", "fit 64 bits"),
                (_, Some(b)) => check_available(
                    &format!("{rows} sinograms of {angles} x {width}"),
                    b as u64,
                    "choose fewer --angles, --width or --rows",
                )
                .map_err(|e| e.to_string()),
            }
        }
        BenchWhat::Scale(args) => scale(args),
        BenchWhat::Suite { step_timeout_s, .. } => {
            match (1..=MAX_STEP_TIMEOUT_S).contains(step_timeout_s) {
                true => Ok(()),
                false => refuse(
                    "step-timeout-s",
                    step_timeout_s,
                    &format!("1 to {MAX_STEP_TIMEOUT_S} (a day)"),
                ),
            }
        }
        BenchWhat::Flatfield { .. } | BenchWhat::Demo { .. } => Ok(()),
    }
}

fn memo(args: &MemoArgs) -> Result<(), String> {
    simulated_run("size", args.size, args.size)?;
    outer_iterations("iterations", args.iterations)?;
    outer_iterations("reference-iterations", args.reference_iterations)?;
    outer_iterations("max-iterations", args.max_iterations)?;
    count(
        "chunk",
        args.chunk,
        1,
        args.size,
        "rows per chunk, at most the volume's side",
    )?;
    repeats(args.repeats)?;
    // Dai-Yuan's fixed step: a positive multiple of the exact step, which diverges far
    // beyond 2.
    for (option, step) in [
        ("dai-yuan-step", args.dai_yuan_step),
        ("compare-step", Some(args.compare_step)),
    ] {
        if let Some(step) = step {
            number(option, step, (1e-6, 1e3), "(times the exact step)")?;
        }
    }
    if let Some(f) = args.device_fraction {
        // A budget of 1/F of the in-core need: beyond one byte of it, nothing streams.
        if f > 1 << 40 {
            return refuse("device-fraction", f, "1 to 2^40");
        }
    }
    Ok(())
}

fn scale(args: &ScaleArgs) -> Result<(), String> {
    simulated_run("size", args.size, args.size)?;
    outer_iterations("iterations", args.iterations)?;
    if args.large > 0 {
        planned_side("large", args.large)?;
    }
    for &n in &args.plan_sizes {
        planned_side("plan-sizes", n)?;
    }
    let m = &args.model;
    simulated_run(
        "model-measure-size",
        m.model_measure_size,
        m.model_measure_size,
    )?;
    for &n in &m.model_sizes {
        planned_side("model-sizes", n)?;
    }
    for &k in &m.model_ranks {
        count("model-ranks", k, 1, MAX_MODEL_RANKS, "GPUs of a cluster")?;
    }
    count(
        "model-gpus-per-node",
        m.model_gpus_per_node,
        1,
        MAX_GPUS_PER_NODE,
        "GPUs of one node",
    )?;
    // 0: this device's figure, measured.
    for (option, value) in [
        ("model-device-gbps", m.model_device_gbps),
        ("model-copy-equivalents", m.model_copy_equivalents),
    ] {
        if value != 0.0 {
            number(option, value, BANDWIDTH_GBPS, "(or 0: measured here)")?;
        }
    }
    for (option, value) in [
        ("model-bus-gbps", m.model_bus_gbps),
        ("model-network-gbps", m.model_network_gbps),
    ] {
        number(option, value, BANDWIDTH_GBPS, "GB/s")?;
    }
    number(
        "model-latency-us",
        m.model_latency_us,
        (0.0, 1e9),
        "microseconds",
    )?;
    let d = &args.distributed;
    simulated_run("distributed-size", d.distributed_size, d.distributed_size)?;
    for &k in &d.distributed_ranks {
        count(
            "distributed-ranks",
            k,
            1,
            MAX_MODEL_RANKS,
            "processes on this machine",
        )?;
    }
    outer_iterations("distributed-iterations", d.distributed_iterations)?;
    Ok(())
}
