//! `lamino bench suite`: every speed figure the project states, in one command for a GPU lent
//! for a few minutes. Each step is one of the other benchmarks (`lamino bench WHAT --json`) run
//! as a child of this executable with the same device flags, so that a step that fails, runs
//! out of memory or over its time loses only itself: its records land in `DIR/STEP.jsonl` as
//! they are printed, its messages in `DIR/STEP.log`, and `DIR/suite.json` is rewritten after
//! every step with what is known so far.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::gpu::{AdapterSummary, GpuContext};

/// The sizes the suite runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuiteSizes {
    /// The sizes the project's figures are stated at (128^3 and 256^3 operators, ADMM at
    /// 128^3, streaming of 512^3 and 1024^3): about eight minutes on an A100/H100-class GPU.
    Gpu,
    /// 16^3 to 32^3: every step once on a software adapter in about a minute (the test).
    Small,
}

/// One step: a benchmark and its arguments.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteStep {
    pub name: &'static str,
    /// What it measures, for the table and the dry run.
    pub measures: &'static str,
    /// The arguments after `lamino [device flags] bench`.
    pub args: Vec<String>,
}

fn step(name: &'static str, measures: &'static str, args: &[&str]) -> SuiteStep {
    SuiteStep {
        name,
        measures,
        args: args.iter().map(|a| a.to_string()).collect(),
    }
}

/// The directory in the suite's output where the streaming step's large run puts its scratch
/// files and the memo step its frontier's plot.
const SCRATCH: &str = "scratch";

/// The steps at `sizes` writing into `out`, in the order they run.
pub fn suite_steps(sizes: SuiteSizes, out: &Path) -> Vec<SuiteStep> {
    let scratch = out.join(SCRATCH).display().to_string();
    let small = sizes == SuiteSizes::Small;
    let pick = |gpu: &'static str, small_value: &'static str| if small { small_value } else { gpu };
    let operator = |n: &'static str, name: &'static str| {
        step(
            name,
            "L and L* per stage against the f32 CPU implementation on all cores",
            &["operator", "--size", n, "--repeats", pick("5", "1")],
        )
    };
    vec![
        step(
            "fft",
            "batched FFTs of every shape and strategy against a plain copy (the bandwidth \
             bound) and rustfft, with the planning time",
            &[
                "fft",
                "--repeats",
                pick("5", "1"),
                "--bytes",
                pick("67108864", "65536"),
            ],
        ),
        operator(pick("128", "16"), pick("operator-128", "operator-16")),
        operator(pick("256", "32"), pick("operator-256", "operator-32")),
        step(
            pick("admm-128", "admm-16"),
            "outer ADMM-TV iterations: time per iteration, operator share, device memory",
            &[
                "admm",
                "--size",
                pick("128", "16"),
                "--iterations",
                pick("5", "1"),
            ],
        ),
        step(
            pick("normal-64-256", "normal-16"),
            "the inner loop's normal operator by Toeplitz embedding against A then A* \
             (alternated pairs: the median ratio, the relative difference)",
            &[
                "normal",
                "--size",
                pick("64,128,256", "16"),
                "--repeats",
                pick("5", "1"),
            ],
        ),
        step(
            pick("convergence-128", "convergence-16"),
            "time to solution: the default solver until its convergence test passes, against \
             a long run of plain ADMM (the chip, Poisson noise)",
            &[
                "convergence",
                "--size",
                pick("128", "16"),
                "--phantoms",
                "chip",
                "--reference-iterations",
                pick("300", "20"),
            ],
        ),
        step(
            pick("streaming-512-1024", "streaming-32"),
            "streaming at 1/8 of the in-core device need against in-core, one iteration of \
             the large volume within a capped device budget with scratch files, and the plans \
             of 512^3-2048^3 at 8, 24 and 80 GiB",
            &[
                "scale",
                "--size",
                pick("512", "32"),
                "--iterations",
                pick("2", "1"),
                "--large",
                pick("1024", "32"),
                "--large-device-mib",
                pick("16384", "1"),
                "--scratch",
                &scratch,
                "--plan-sizes",
                pick("512,1024,2048", "64"),
            ],
        ),
        step(
            pick("memo-64", "memo-16"),
            "the memo policies' accuracy-time frontier (mLR's and the certified memo)",
            &[
                "memo",
                "--size",
                pick("64", "16"),
                "--only",
                "frontier",
                "--iterations",
                "10",
                "--repeats",
                "1",
                "--out",
                &scratch,
            ],
        ),
    ]
}

/// How a step ended.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Passed,
    /// The benchmark exited with an error; its message ends `STEP.log`.
    Failed {
        exit_code: Option<i32>,
    },
    /// Stopped after the suite's time per step.
    TimedOut,
}

/// A step's outcome, as `suite.json` records it.
#[derive(Debug, Clone, Serialize)]
pub struct StepRecord {
    #[serde(flatten)]
    pub step: SuiteStep,
    pub status: StepStatus,
    pub wall_s: f64,
    /// Every record the benchmark printed (`STEP.jsonl`).
    pub records: Vec<serde_json::Value>,
}

/// What `suite.json` holds.
#[derive(Debug, Serialize)]
pub struct SuiteRecord {
    /// The adapter the steps run on, as `lamino devices` describes it.
    pub adapter: AdapterSummary,
    /// The limits the device was opened with (the adapter's, or the portable ones).
    pub opened_limits: OpenedLimits,
    pub lamino_version: &'static str,
    pub steps: Vec<StepRecord>,
}

/// The limits of the opened device that the kernels and the planner read.
#[derive(Debug, Serialize)]
pub struct OpenedLimits {
    pub max_buffer_bytes: u64,
    pub max_storage_binding_bytes: u64,
    pub max_workgroup_storage_bytes: u32,
    pub max_invocations_per_workgroup: u32,
    /// The device-local memory the backend reports (`None` where wgpu cannot say).
    pub device_local_bytes: Option<u64>,
}

/// Why the suite could not run (a step's own failure is recorded, not an error).
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("cannot write the suite's results in {}: {source}", dir.display())]
    Output {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {what} of the suite: {source}")]
    Start {
        what: String,
        source: std::io::Error,
    },
    #[error("{failed} of the suite's {total} steps did not pass: {names} (see their .log in {})", dir.display())]
    StepsFailed {
        failed: usize,
        total: usize,
        names: String,
        dir: PathBuf,
    },
    #[error(transparent)]
    Write(#[from] crate::io::IoError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Runs `steps` one after the other on the device of `ctx` (the children get `global_args`,
/// the device flags that opened it; `ctx` itself is closed first, so that every step has the
/// whole device), writing into `out`, each stopped after `step_timeout`; prints the table (or,
/// with `json`, `suite.json`'s content) and returns an error naming the steps that did not pass.
pub fn run_suite(
    ctx: GpuContext,
    global_args: &[String],
    steps: Vec<SuiteStep>,
    out: &Path,
    step_timeout: Duration,
    json: bool,
) -> Result<(), SuiteError> {
    let output = |source| SuiteError::Output {
        dir: out.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(out.join(SCRATCH)).map_err(output)?;
    let mut suite = SuiteRecord {
        adapter: ctx.info().clone(),
        opened_limits: OpenedLimits {
            max_buffer_bytes: ctx.max_buffer_bytes(),
            max_storage_binding_bytes: ctx.max_binding_bytes(),
            max_workgroup_storage_bytes: ctx.max_workgroup_storage_bytes(),
            max_invocations_per_workgroup: ctx.max_invocations_per_workgroup(),
            device_local_bytes: ctx.device_local_bytes(),
        },
        lamino_version: env!("CARGO_PKG_VERSION"),
        steps: Vec::new(),
    };
    drop(ctx);
    let exe = std::env::current_exe().map_err(|source| SuiteError::Start {
        what: "this executable".into(),
        source,
    })?;
    if !json {
        println!("{}", suite.adapter);
        println!("{:<22} {:>9} {:>8}  status", "step", "wall s", "records");
    }
    for step in steps {
        let record = run_step(&exe, global_args, step, out, step_timeout)?;
        if !json {
            println!(
                "{:<22} {:>9.1} {:>8}  {}",
                record.step.name,
                record.wall_s,
                record.records.len(),
                match &record.status {
                    StepStatus::Passed => "passed".to_string(),
                    StepStatus::Failed { exit_code } =>
                        format!("failed (exit {exit_code:?}; {}.log)", record.step.name),
                    StepStatus::TimedOut => format!("timed out after {step_timeout:?}"),
                }
            );
        }
        suite.steps.push(record);
        let bytes = serde_json::to_vec_pretty(&suite)?;
        crate::io::write_atomically(&out.join("suite.json"), |staged| {
            std::fs::write(staged, &bytes).map_err(|e| e.to_string())
        })?;
    }
    if json {
        println!("{}", serde_json::to_string(&suite)?);
    } else {
        println!("records: {}", out.join("suite.json").display());
    }
    let failed: Vec<&str> = suite
        .steps
        .iter()
        .filter(|s| !matches!(s.status, StepStatus::Passed))
        .map(|s| s.step.name)
        .collect();
    match failed.is_empty() {
        true => Ok(()),
        false => Err(SuiteError::StepsFailed {
            failed: failed.len(),
            total: suite.steps.len(),
            names: failed.join(", "),
            dir: out.to_path_buf(),
        }),
    }
}

/// Runs one step, its output into `out/NAME.jsonl` and `out/NAME.log`.
fn run_step(
    exe: &Path,
    global_args: &[String],
    step: SuiteStep,
    out: &Path,
    timeout: Duration,
) -> Result<StepRecord, SuiteError> {
    let output = |source| SuiteError::Output {
        dir: out.to_path_buf(),
        source,
    };
    let records_path = out.join(format!("{}.jsonl", step.name));
    let stdout = std::fs::File::create(&records_path).map_err(output)?;
    let stderr = std::fs::File::create(out.join(format!("{}.log", step.name))).map_err(output)?;
    let start = Instant::now();
    let mut child = Command::new(exe)
        .args(global_args)
        .arg("bench")
        .args(&step.args)
        .arg("--json")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|source| SuiteError::Start {
            what: format!("the step {}", step.name),
            source,
        })?;
    let status = loop {
        match child.try_wait().map_err(output)? {
            Some(exit) if exit.success() => break StepStatus::Passed,
            Some(exit) => {
                break StepStatus::Failed {
                    exit_code: exit.code(),
                }
            }
            None if start.elapsed() > timeout => {
                // Killed and reaped: a step over its time must not hold the device for the next.
                let _ = child.kill();
                child.wait().map_err(output)?;
                break StepStatus::TimedOut;
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let wall_s = start.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&records_path).map_err(output)?;
    let records = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Ok(StepRecord {
        step,
        status,
        wall_s,
        records,
    })
}
