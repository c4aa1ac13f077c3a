//! `lamino bench memo`: the memo policies' accuracy-time frontier ([`frontier`]) and the
//! comparison that decides the default ([`compare`]), printed one line per run (JSON lines with a
//! `section` of `frontier` or `comparison` under `--json`).

pub mod compare;
pub mod frontier;

use std::path::Path;

use compare::{run_comparison, CompareConfig};
use frontier::{run_frontier, write_frontier, FrontierConfig};

use super::BenchError;
use crate::gpu::GpuContext;

/// `value` as one line of JSON with its `section` (`frontier` or `comparison`): both parts
/// print to one stream.
fn json_line(section: &str, value: &impl serde::Serialize) -> String {
    let mut v = serde_json::to_value(value).expect("serialisable");
    v["section"] = section.into();
    v.to_string()
}

/// Runs the frontier of `config`, printing each run, then writes its CSV and plot in `out`.
pub fn print_frontier(
    ctx: &GpuContext,
    config: &FrontierConfig,
    json: bool,
    out: &Path,
) -> Result<(), BenchError> {
    let (size, iterations, params) = (config.size, config.params.outer_iterations, config.params);
    let (chunk, memo_stages) = (config.memo.chunk_rows, config.memo.stages);
    eprintln!(
        "memo frontier: {size}^3 chip, {iterations} outer iterations of {:?} per run, chunks of at most {chunk} rows, memo stages {memo_stages}, {}, on {}",
        params.inner,
        config.device_fraction.map_or("in core".to_string(), |f| format!(
            "streamed through 1/{f} of the in-core device need"
        )),
        ctx.info()
    );
    let points = run_frontier(ctx, config, |p| {
        if json {
            println!("{}", json_line("frontier", p));
        } else {
            println!(
                "{:<14} {:>7} accuracy {:.4}  time {:.3} of exact ({:.1} s, CPU time {})  hits {:.1}%  round trips {:.2}/application  lookup median {:.4} ms p99 {:.4} ms  cache {:.1} MiB  moved {:.1} MB ({})",
                p.policy,
                p.param.map_or(String::from("-"), |v| v.to_string()),
                p.accuracy,
                p.normalized_time,
                p.time_s,
                p.normalized_cpu_time
                    .map_or("n/a".into(), |c| format!("{c:.3} of exact")),
                100.0 * p.hit_rate,
                p.round_trips_per_application,
                p.lookup_ms_median,
                p.lookup_ms_p99,
                p.cache_bytes as f64 / (1 << 20) as f64,
                p.bytes_moved as f64 / 1e6,
                p.mode
            );
        }
    })?;
    for path in write_frontier(out, &points)? {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs the comparison of `config`, printing each run.
pub fn print_comparison(
    ctx: &GpuContext,
    config: &CompareConfig,
    json: bool,
) -> Result<(), BenchError> {
    let (size, target, compare_step) = (config.size, config.target, config.dai_yuan_step);
    eprintln!(
        "time to within {target} of the converged result: {size}^3, exact-step CG, Dai-Yuan (step {compare_step}) without and with {}",
        config
            .certified
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    run_comparison(ctx, config, |r| {
        if json {
            println!("{}", json_line("comparison", r));
        } else {
            println!(
                "{:<6} {:<9} {:<9} {:<24} {} after {:>3} iterations, {:.1} s ({:.3} of CG), distance {:.2e}, hits {:.1}%{}",
                r.phantom,
                r.kind,
                r.solver,
                r.memo,
                if r.reached { "reached" } else { "NOT reached" },
                r.iterations,
                r.time_s,
                r.normalized_time,
                r.distance,
                100.0 * r.hit_rate,
                if r.best_memo { "  [best memo setting]" } else { "" }
            );
        }
    })?;
    Ok(())
}
