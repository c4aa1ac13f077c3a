//! `lamino bench scale --distributed` (a lamino built with the `mpi` feature): one simulated scan reconstructed as one
//! process and as K MPI ranks (`mpirun -n K` on this machine, each a `lamino reconstruct`), with
//! the time of an outer iteration, the bytes each rank sent during it (and of which arrays), and
//! the bytes the cost model counts for that run's geometry and parameters.

use super::{print_json, BenchError};
use crate::simulate::PhantomKind;

/// Why `lamino bench scale --distributed` could not measure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DistributedBenchError {
    #[error("cannot create a temporary directory for the ranks' runs: {0}")]
    TempDir(std::io::Error),
    /// This lamino cannot run as MPI ranks.
    #[error(
        "this lamino was built without MPI ranks: build it with `cargo build --features mpi` \
         (Open MPI and libclang needed) to measure them"
    )]
    NoRanks,
    #[error(transparent)]
    Simulate(#[from] crate::simulate::SimulateError),
    #[error(transparent)]
    Io(#[from] crate::io::IoError),
    /// Finding this executable or starting a run (`mpirun` or lamino itself).
    #[error(transparent)]
    Start(std::io::Error),
    /// A run that failed, with its standard error.
    #[error("{ranks} ranks: {stderr}")]
    Run { ranks: usize, stderr: String },
    /// A run's `report.json` that cannot be read or parsed.
    #[error("cannot read {}: {reason}", path.display())]
    Report {
        path: std::path::PathBuf,
        reason: String,
    },
}

/// One reconstruction of `lamino bench scale --distributed`.
#[derive(serde::Serialize)]
struct DistributedRun {
    size: usize,
    ranks: usize,
    iterations: usize,
    /// Wall time of the whole command (setup, iterations, outputs), s.
    wall_s: f64,
    /// Time of one outer iteration (the iterations' time over their number), ms.
    iteration_ms: f64,
    /// Bytes each rank sent to the others per outer iteration.
    bytes_sent_per_iteration: Vec<u64>,
    /// Of those, the blocks of each array, per rank: (array, bytes per outer iteration).
    array_bytes_per_iteration: Vec<Vec<(String, u64)>>,
    /// Host <-> device bytes of each rank's devices per outer iteration.
    bus_bytes_per_iteration: Vec<u64>,
    /// Whether the stages sent their blocks while they computed (else between stages only:
    /// `LAMINO_EXCHANGE_OVERLAP=off`).
    overlap: bool,
    /// Time each rank spent in exchanges per outer iteration (MPI calls and their packing,
    /// waits for the other ranks included), ms.
    exchange_ms_per_iteration: Vec<f64>,
    /// Of those, the exchanges made while the rank's devices computed a stage's later chunks.
    overlapped_exchange_ms_per_iteration: Vec<f64>,
    /// What the cost model counts per rank and outer iteration for this run's geometry,
    /// parameters and iterations ([`crate::plan::cluster_model::network_bytes_per_rank_in`]).
    model_bytes_per_iteration: u64,
}

/// Reconstructs a simulated `size`^3 chip for `iterations` outer iterations on each number of
/// `ranks`, starting this executable with `global_args` (the device flags), and prints each run;
/// several ranks run twice, their stages exchanging while they compute and between stages only.
pub fn print(
    global_args: &[String],
    json: bool,
    size: usize,
    ranks: &[usize],
    iterations: usize,
) -> Result<(), BenchError> {
    use crate::simulate::{simulated_scan, ScanSpec};
    if !crate::distributed::RANKS_BUILT {
        return Err(DistributedBenchError::NoRanks.into());
    }
    let dir = tempfile::tempdir().map_err(DistributedBenchError::TempDir)?;
    let scan = dir.path().join("scan.h5");
    let simulated = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size,
        angles: size,
        tilt_deg: 30.0,
        photons: Some(1e5),
        seed: 0,
        rotation_axis: None,
    })
    .map_err(DistributedBenchError::from)?;
    crate::io::write_dxchange(&scan, &simulated.scan)?;
    let exe = std::env::current_exe().map_err(DistributedBenchError::Start)?;
    // Open MPI refuses root without a flag. Safety: geteuid has no preconditions and cannot
    // fail.
    #[cfg(unix)]
    let root = unsafe { libc::geteuid() } == 0;
    #[cfg(not(unix))]
    let root = false;
    let runs = ranks
        .iter()
        .flat_map(|&k| [(k, true)].into_iter().chain((k > 1).then_some((k, false))));
    for (k, overlap) in runs {
        let out = dir.path().join(format!("ranks-{k}-{overlap}"));
        let mut cmd = match k {
            1 => std::process::Command::new(&exe),
            _ => {
                let mut c = std::process::Command::new("mpirun");
                if root {
                    c.arg("--allow-run-as-root");
                }
                c.args(["--oversubscribe", "-n", &k.to_string()]).arg(&exe);
                c
            }
        };
        if !overlap {
            cmd.env(crate::distributed::EXCHANGE_OVERLAP_ENV, "off");
        }
        cmd.args(global_args)
            .arg("reconstruct")
            .arg(&scan)
            .arg("--out")
            .arg(&out)
            .args(["--iterations", &iterations.to_string(), "--quiet"]);
        let start = std::time::Instant::now();
        let o = cmd.output().map_err(DistributedBenchError::Start)?;
        let wall_s = start.elapsed().as_secs_f64();
        if !o.status.success() {
            return Err(DistributedBenchError::Run {
                ranks: k,
                stderr: String::from_utf8_lossy(&o.stderr).trim_end().to_string(),
            }
            .into());
        }
        let report_path = out.join("report.json");
        let report: serde_json::Value = std::fs::read(&report_path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
            .map_err(|reason| DistributedBenchError::Report {
                path: report_path.clone(),
                reason,
            })?;
        let r = &report["reconstruction"];
        let parsed = |key: &str| {
            r.get(key)
                .cloned()
                .ok_or_else(|| DistributedBenchError::Report {
                    path: report_path.clone(),
                    reason: format!("it has no reconstruction.{key}"),
                })
        };
        let unparsed = |e: serde_json::Error| DistributedBenchError::Report {
            path: report_path.clone(),
            reason: e.to_string(),
        };
        let geometry: crate::geometry::Geometry =
            serde_json::from_value(parsed("geometry")?).map_err(unparsed)?;
        let params: crate::params::AdmmParams =
            serde_json::from_value(parsed("params")?).map_err(unparsed)?;
        let done = r["reports"].as_array().map_or(0, |a| a.len()).max(1);
        let ranks_reports = r["ranks"].as_array().cloned().unwrap_or_default();
        let per_iteration = |v: &serde_json::Value| v.as_u64().unwrap_or(0) / done as u64;
        let run = DistributedRun {
            size,
            ranks: k,
            iterations: done,
            wall_s,
            iteration_ms: r["iterations_s"].as_f64().unwrap_or(f64::NAN) * 1e3 / done as f64,
            bytes_sent_per_iteration: match k {
                1 => vec![0],
                _ => ranks_reports
                    .iter()
                    .map(|e| per_iteration(&e["iteration_bytes_sent"]))
                    .collect(),
            },
            array_bytes_per_iteration: ranks_reports
                .iter()
                .map(|e| {
                    e["iteration_bytes_by_array"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            let name = a["array"].as_str().unwrap_or("?").to_string();
                            (name, per_iteration(&a["bytes"]))
                        })
                        .collect()
                })
                .collect(),
            bus_bytes_per_iteration: match k {
                1 => vec![bus_sum(&r["bus_bytes_per_iteration"])],
                _ => ranks_reports
                    .iter()
                    .map(|e| bus_sum(&e["bus_bytes_per_iteration"]))
                    .collect(),
            },
            overlap,
            exchange_ms_per_iteration: per_rank_ms(&ranks_reports, "iteration_exchange_s", done),
            overlapped_exchange_ms_per_iteration: per_rank_ms(
                &ranks_reports,
                "iteration_overlapped_exchange_s",
                done,
            ),
            model_bytes_per_iteration: crate::plan::cluster_model::network_bytes_per_rank_in(
                &geometry, &params, k, done,
            ),
        };
        if json {
            print_json(&run)?;
        } else if !overlap {
            let exchange: Vec<String> = run
                .exchange_ms_per_iteration
                .iter()
                .map(|ms| format!("{ms:.0}"))
                .collect();
            println!(
                "  exchanging between stages only ({}=off): {:.0} ms per outer iteration, in \
                 exchanges by each rank {} ms",
                crate::distributed::EXCHANGE_OVERLAP_ENV,
                run.iteration_ms,
                exchange.join(", "),
            );
        } else {
            let mb = |b: u64| format!("{:.2}", b as f64 / 1e6);
            let sent = &run.bytes_sent_per_iteration;
            let mean = sent.iter().sum::<u64>() / sent.len().max(1) as u64;
            let ratio = |b: u64| b as f64 / run.model_bytes_per_iteration.max(1) as f64;
            println!(
                "{size}^3, {k} rank(s): {:.0} ms per outer iteration, {:.1} s in all; sent per \
                 iteration by each rank: {} MB, mean {} (the cost model: {} MB; mean/model \
                 {:.2}, most/model {:.2})",
                run.iteration_ms,
                run.wall_s,
                sent.iter().map(|&b| mb(b)).collect::<Vec<_>>().join(", "),
                mb(mean),
                mb(run.model_bytes_per_iteration),
                ratio(mean),
                ratio(sent.iter().copied().max().unwrap_or(0)),
            );
            if let Some(first) = run.array_bytes_per_iteration.first() {
                let arrays: Vec<String> = first
                    .iter()
                    .filter(|(_, b)| *b > 0)
                    .map(|(a, b)| format!("{a} {}", mb(*b)))
                    .collect();
                println!("  rank 0's blocks by array, MB: {}", arrays.join(", "));
            }
            let bus: Vec<String> = run.bus_bytes_per_iteration.iter().map(|&b| mb(b)).collect();
            println!(
                "  over the bus per iteration by each rank's devices, MB: {}",
                bus.join(", ")
            );
            if !run.exchange_ms_per_iteration.is_empty() {
                let exchange: Vec<String> = run
                    .exchange_ms_per_iteration
                    .iter()
                    .zip(&run.overlapped_exchange_ms_per_iteration)
                    .map(|(ms, hidden)| format!("{ms:.0} ({hidden:.0} while computing)"))
                    .collect();
                println!(
                    "  in exchanges per iteration by each rank (waits included), ms: {} of {:.0}",
                    exchange.join(", "),
                    run.iteration_ms
                );
            }
        }
    }
    Ok(())
}

/// Each rank's `key` (seconds in all) per outer iteration of `iterations`, ms.
fn per_rank_ms(ranks_reports: &[serde_json::Value], key: &str, iterations: usize) -> Vec<f64> {
    ranks_reports
        .iter()
        .map(|e| e[key].as_f64().unwrap_or(f64::NAN) * 1e3 / iterations as f64)
        .collect()
}

/// The sum of a report's per-device bytes (a list of numbers).
fn bus_sum(v: &serde_json::Value) -> u64 {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_u64)
        .sum()
}
