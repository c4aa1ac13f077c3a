//! The reconstruction `reconstruct` and `demo` share: this process's devices (or an MPI rank's),
//! the one reconstructor of the command (budgets, parameters, memo, padding; for a solve also
//! the checkpoint, the stop signals and progress), what it says before the iterations, and the
//! staged outputs after them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::distributed::Collective;
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::io::{OutputSet, StackFormat};
use crate::memo::{MemoOptions, MemoPolicy};
use crate::params::{AdmmParams, GradientPenalty, InnerSolver};
use crate::plan::MemoryPlan;
use crate::recon::{
    CheckpointInterval, Heard, JobError, JobEvent, LateralPadding, Padding, Provenance,
    Reconstructor, Solved,
};

use super::super::progress::IterationProgress;
use super::super::signals::{Interrupted, StopSignals};
use super::super::Cli;

/// The processes of the run ([`crate::distributed::launch`]): this one alone, or the MPI
/// ranks it is one of.
pub(in crate::cli) type Processes = Arc<dyn Collective>;

/// The MPI ranks this process is one of: the processes when there are several.
pub(super) fn ranks(processes: &Processes) -> Option<&Processes> {
    (processes.size() > 1).then_some(processes)
}

/// The devices of this process: the global options' devices, or under MPI this rank's (see
/// [`crate::gpu::DeviceSet::open_for_rank`]), of which every rank is told the number. Devices
/// only `planning` (`--dry-run`) run nothing: a software adapter needs no opt-in for them.
pub(super) fn open_devices(
    cli: &Cli,
    processes: &Processes,
    planning: bool,
) -> Result<Vec<GpuContext>, Box<dyn std::error::Error>> {
    if let Some(r) = ranks(processes) {
        let devices = cli.rank_contexts(r.local_rank(), r.rank() == 0, planning)?;
        r.set_devices(devices.len())?;
        return Ok(devices);
    }
    match planning {
        true => Ok(cli.planning_contexts()?),
        false => Ok(cli.contexts()?),
    }
}

/// The reconstructor of a command on `devices`, as one of its processes (under MPI, a rank):
/// within the budgets, with the parameters, the memo options and the padding. A planning command
/// (`--dry-run`) uses it as it is; a solve adds to it ([`solving`]).
pub(in crate::cli) fn reconstructor<'a>(
    devices: &'a [GpuContext],
    params: AdmmParams,
    o: &RunOptions,
) -> Reconstructor<'a> {
    let builder = Reconstructor::on_devices(devices).processes(o.processes.clone());
    o.budgets
        .apply(builder)
        .params(params)
        .memo(o.memo)
        .normal_operator(o.normal_operator)
        .lateral_padding(match o.pad {
            true => LateralPadding::QuarterWidth,
            false => LateralPadding::None,
        })
}

/// The solver parameters as the command line names them, one per line, with the default of
/// each one that differs from it, for an operator `width` voxels wide (the CG steps' default
/// follows it).
fn parameter_table(p: &AdmmParams, width: usize) -> String {
    let d = AdmmParams::default();
    let inner = |p: &AdmmParams| match p.inner_iterations {
        Some(k) => k.to_string(),
        None => format!(
            "{} (by the width, {width} voxels: {} from {}, else {})",
            p.inner_steps(width),
            AdmmParams::WIDE_INNER_ITERATIONS,
            AdmmParams::WIDE_FROM,
            AdmmParams::INNER_ITERATIONS
        ),
    };
    let solver = |s: InnerSolver| match s {
        InnerSolver::ConjugateGradient => "conjugate gradient (exact step)".to_string(),
        InnerSolver::DaiYuan { step } => format!("Dai-Yuan, step {step} (--dai-yuan-step)"),
    };
    let penalty_rule = |r: Option<GradientPenalty>| match r {
        Some(r) => format!(
            "residual balancing; after {} iterations {} sqrt(w / rms |grad u|)",
            r.after_iterations, r.scale
        ),
        None => "residual balancing alone (--no-penalty-from-gradient)".to_string(),
    };
    let stop = |p: &AdmmParams| match p.convergence {
        Some(c) => format!(
            "on convergence (change {:e}, primal {:e}, dual {:e}), at most {} iterations",
            c.change, c.primal, c.dual, p.outer_iterations
        ),
        None => format!(
            "after exactly {} iterations (--iterations)",
            p.outer_iterations
        ),
    };
    let rows = [
        ("stop", stop(p), stop(&d)),
        ("--inner", inner(p), inner(&d)),
        ("--alpha", p.alpha.to_string(), d.alpha.to_string()),
        ("--rho0", p.rho0.to_string(), d.rho0.to_string()),
        (
            "--relaxation",
            p.relaxation.to_string(),
            d.relaxation.to_string(),
        ),
        (
            "penalty rule",
            penalty_rule(p.penalty_from_gradient),
            penalty_rule(d.penalty_from_gradient),
        ),
        ("inner solver", solver(p.inner), solver(d.inner)),
    ];
    let mut table = String::from("solver parameters:\n");
    for (name, value, default) in rows {
        let note = match value == default {
            true => String::new(),
            false => format!("   (default: {default})"),
        };
        table += &format!("  {name:<14}{value}{note}\n");
    }
    table
}

/// The memory budgets of the command line (bytes).
#[derive(Default)]
pub(in crate::cli) struct MemoryBudgets {
    pub device_bytes: Option<u64>,
    pub host_bytes: Option<u64>,
    pub scratch: Option<PathBuf>,
}

impl MemoryBudgets {
    fn apply<'a>(&self, mut builder: Reconstructor<'a>) -> Reconstructor<'a> {
        if let Some(bytes) = self.device_bytes {
            builder = builder.device_memory_budget(bytes);
        }
        if let Some(bytes) = self.host_bytes {
            builder = builder.host_memory_budget(bytes);
        }
        if let Some(dir) = &self.scratch {
            builder = builder.scratch_dir(dir.clone());
        }
        builder
    }
}

/// The run settings of the command line.
pub(in crate::cli) struct RunOptions {
    pub memo: MemoOptions,
    pub normal_operator: crate::params::NormalOperator,
    pub budgets: MemoryBudgets,
    pub pad: bool,
    /// `None`: only when a signal stops the run.
    pub checkpoint_every: Option<CheckpointInterval>,
    pub resume: bool,
    pub quiet: bool,
    pub processes: Processes,
    /// The formats the volume is written in.
    pub formats: Vec<StackFormat>,
    /// recon.zarr's chunks and pyramid (`None`: the default for the volume's shape).
    pub zarr: Option<crate::io::ZarrOptions>,
    /// The run, for the report.
    pub provenance: Option<Provenance>,
}

/// Where a reconstruction into the output directory `out` keeps its checkpoint.
pub(super) fn checkpoint_path(out: &Path) -> PathBuf {
    out.join("checkpoint.ckpt")
}

/// What a solving run of the command line holds beside its reconstructor.
pub(in crate::cli) struct Run {
    progress: IterationProgress,
    signals: &'static StopSignals,
    checkpoint: PathBuf,
    params: AdmmParams,
}

/// [`reconstructor`]'s, for a solve: the checkpoint in `out` (written on a stop signal, and as
/// `o` says; read from there when `o` resumes), stopped by the signals, with progress.
pub(in crate::cli) fn solving<'a>(
    devices: &'a [GpuContext],
    params: AdmmParams,
    out: &Path,
    o: &RunOptions,
) -> Result<(Reconstructor<'a>, Run), Box<dyn std::error::Error>> {
    // The checkpoint's directory (the output set's has made it on the first rank).
    std::fs::create_dir_all(out)
        .map_err(|e| format!("cannot create the output directory {}: {e}", out.display()))?;
    let checkpoint = checkpoint_path(out);
    // A stop signal from here on ends the command cleanly (its staging removed), whatever step
    // it comes in; the reconstruction stops on the same flag after its current iteration.
    let signals = StopSignals::install()?;
    let progress = IterationProgress::new(
        params.outer_iterations,
        o.quiet,
        params.convergence.is_some(),
    );
    let mut builder = reconstructor(devices, params, o)
        .checkpoint_every(
            checkpoint.clone(),
            o.checkpoint_every.unwrap_or(CheckpointInterval::Never),
        )
        .cancel_flag(signals.flag())
        .on_progress({
            let progress = progress.clone();
            move |p| progress.update(p)
        });
    if o.resume {
        builder = builder.resume_from(checkpoint.clone());
    }
    let run = Run {
        progress,
        signals,
        checkpoint,
        params,
    };
    Ok((builder, run))
}

/// What every command says of a job's plan on `devices` unless `o` is quiet: before the
/// iterations, the volume, the parameters, the padding and a streaming plan. `plan_only`: the plan of `--dry-run`, whatever its mode, and nothing of a
/// solve.
pub(in crate::cli) fn say_job(
    event: &JobEvent<'_>,
    devices: &[GpuContext],
    params: &AdmmParams,
    o: &RunOptions,
    plan_only: bool,
) {
    let JobEvent::Planned {
        plan,
        geometry,
        padding,
    } = event
    else {
        return;
    };
    match plan_only {
        true if !o.quiet => {
            if let Some(padding) = padding.describe(geometry) {
                eprintln!("{padding}");
            }
            eprintln!("{plan}");
        }
        true => {}
        false => say_solving(plan, geometry, padding, devices, params, o),
    }
}

/// What the solve of projections of `g` will do (`plan`, `padding`), unless `o` is quiet.
fn say_solving(
    plan: &MemoryPlan,
    g: &Geometry,
    padding: &Padding,
    devices: &[GpuContext],
    params: &AdmmParams,
    o: &RunOptions,
) {
    if !o.quiet {
        if g.offset != [0.0; 3] {
            eprintln!(
                "volume: a box of the default volume, its centre offset (z, y, x) = {:?} voxels \
                 from the plane and axis that project onto the detector's centre",
                g.offset
            );
        }
        eprintln!(
            "reconstructing {}x{}x{} from {} projections of {}x{} (tilt {:.2} deg, rotation axis \
             at column {:.2}) on {}",
            g.n0,
            g.n1,
            g.n2,
            g.ntheta(),
            g.deth,
            g.detw,
            g.tilt.degrees(),
            g.rotation_axis(),
            devices
                .iter()
                .map(|d| d.info().to_string())
                .collect::<Vec<_>>()
                .join(" + ")
        );
        if o.memo.policy != MemoPolicy::DEFAULT {
            eprintln!(
                "memo policy {} (default {}), chunks of {} rows",
                o.memo.policy,
                MemoPolicy::DEFAULT,
                o.memo.chunk_rows
            );
        }
    }
    if o.memo.policy.trades_accuracy() {
        eprintln!(
            "warning: --memo {} reuses results without an error bound: it trades accuracy for time (`lamino bench memo` measures how much)",
            o.memo.policy
        );
    }
    if !o.quiet {
        eprint!("{}", parameter_table(params, padding.apply(g).n2));
        if let Some(padding) = padding.describe(g) {
            eprintln!("{padding}");
        }
        if plan.mode == crate::plan::Mode::Streaming {
            eprintln!("{plan}");
        }
    }
}

impl Run {
    /// Says `event` as [`say_job`] does, without the progress bar drawing over it.
    pub(in crate::cli) fn say(
        &self,
        event: &JobEvent<'_>,
        devices: &[GpuContext],
        o: &RunOptions,
    ) -> Heard {
        self.progress
            .suspend(|| say_job(event, devices, &self.params, o, false));
        Ok(())
    }

    /// The error that ends a job: the stop signal's where one stopped it before the solve.
    pub(in crate::cli) fn job_error(&self, e: JobError) -> Box<dyn std::error::Error> {
        if let JobError::Cancelled { during } = &e {
            if let Err(stopped) = self.signals.stop_before_solving(during) {
                return stopped.into();
            }
        }
        e.into()
    }

    /// The end of a solve: the outputs staged in `set` (absent on the ranks that write nothing,
    /// which send the writing rank their slices), a slab at a time from where the solver keeps
    /// the volume, so it never has to fit in host memory; the returned [`Solved`] still holds
    /// it. A run a stop signal cut short is an [`Interrupted`] error, its checkpoint written.
    pub(in crate::cli) fn finish<'a>(
        &self,
        mut solved: Solved<'a>,
        set: Option<&mut OutputSet>,
        o: &RunOptions,
    ) -> Result<Solved<'a>, Box<dyn std::error::Error>> {
        if let (Some(ranks), false) = (ranks(&o.processes), o.quiet) {
            let s = ranks.scratch_ledger();
            if s.arrays > 0 {
                eprintln!(
                    "rank {} of {}: scratch files of {} bytes for its planes of {} bytes of {} \
                     arrays ({} bytes whole)",
                    ranks.rank(),
                    ranks.size(),
                    s.file_bytes,
                    s.share_bytes,
                    s.arrays,
                    s.whole_bytes
                );
            }
        }
        let Some(set) = set else {
            if solved.report.completed {
                solved.stage_outputs_on_ranks(None, &o.formats, o.zarr)?;
                solved.slab_ledger();
            }
            return Ok(solved);
        };
        let result = &solved.report;
        self.progress.finish();
        if !result.completed {
            let iteration = result.reports.last().map_or(0, |r| r.iteration + 1);
            // The cancel flag is set by the stop signals only.
            let (signal, number) = self.signals.received().unwrap_or(("a signal", 0));
            return Err(Interrupted::new(signal, number, iteration, &self.checkpoint).into());
        }
        if !o.quiet {
            let iterations = result.reports.last().map_or(0, |r| r.iteration + 1);
            eprintln!(
                "stopped after {iterations} outer iterations: {}",
                result.stop.describe()
            );
            let r = &result.regularisation;
            eprintln!(
                "regularisation: TV weight {:.3e} = alpha {} x {:.3e} (the data's mean \
                 attenuation per voxel {:.3e} / the volume's width {})",
                r.tv_weight,
                r.alpha,
                r.data_scale.tv_unit(),
                r.data_scale.attenuation_per_voxel,
                r.data_scale.width
            );
        }
        solved.report.provenance = o.provenance.clone();
        solved.stage_outputs_on_ranks(Some(set), &o.formats, o.zarr)?;
        let ledger = solved.slab_ledger();
        if !o.quiet && ledger.len() > 1 {
            let slab = solved.slab_bytes();
            for (rank, (held, share)) in ledger.iter().enumerate() {
                eprintln!(
                    "writing the volume, rank {rank} held at most {held} bytes of it: its share \
                     {share} bytes and slabs of at most {slab} bytes"
                );
            }
        }
        Ok(solved)
    }
}
