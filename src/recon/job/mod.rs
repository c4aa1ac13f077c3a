//! The reconstruction job: what to reconstruct (where the projections come from, how they are
//! read, the steps of the [`Preparation`]) as one value, which a [`Reconstructor`] (devices,
//! processes, budgets, parameters, checkpoints, cancellation, progress) runs in one order for
//! every front end:
//!
//! 1. a resumed run's checkpoint header, and the stripe parameters against the detector, before
//!    any projection is read;
//! 2. the projections read and binned (under MPI ranks, this rank's share of the angles);
//! 3. the preparation: stripes, the rotation axis (a resumed search takes the checkpoint's),
//!    the volume's box, within the run's device budget and stopped by its cancel flag;
//! 4. a resumed run's geometry against its checkpoint's, then the memory plan;
//! 5. the solve, whose [`Solved`] writes the volume (files a slab at a time, or one host array).
//!
//! The command line, Python and the viewer only map their arguments onto a [`Job`] and say what
//! its [`JobEvent`]s tell; the iterations report through the reconstructor's own callbacks.

mod resume;

use thiserror::Error;

use crate::distributed::Collective;
use crate::geometry::DetectorColumn;
use crate::geometry::Geometry;
use crate::io::PixelSize;
use crate::plan::MemoryPlan;
use crate::preprocess::{
    bin_geometry, bin_projections, AxisSource, PreprocessError, Preprocessing,
};
use crate::scan::{boxed_geometry, Projections};
use crate::solver::{Checkpoint, CheckpointError};

use super::input::{
    input_geometry, load_projection_share, InputError, LoadOptions, LoadedProjections,
    ProjectionInput,
};
use super::{
    AxisStep, Padding, Preparation, PrepareError, Prepared, ReconError, Reconstructor, Solved,
};

/// Where a job's projections come from.
#[derive(Debug)]
pub enum JobInput {
    /// A file the readers open, read with `load` (binning, the clamping limit); `pixel_size`
    /// replaces the one the file records (`None`: the file's).
    File {
        input: ProjectionInput,
        load: LoadOptions,
        pixel_size: Option<PixelSize>,
    },
    /// Line integrals already read (in memory, with what reading them said), binned by
    /// `binning` (1: none) as a file's would be.
    Loaded {
        loaded: LoadedProjections,
        binning: usize,
    },
}

/// What to reconstruct: the projections and the steps between reading and solving them.
#[derive(Debug)]
pub struct Job {
    pub input: JobInput,
    pub preparation: Preparation,
}

/// What a job tells as it goes, before the iterations.
#[derive(Debug)]
pub enum JobEvent<'a> {
    /// The projections read and binned (under MPI ranks this rank's share of the angles:
    /// `frames_read` of them) and what reading them said.
    Loaded(&'a LoadedProjections),
    /// A step of the preparation done.
    Prepared(Prepared<'a>),
    /// The memory plan of the solve, for the projections of `geometry` padded by `padding`.
    Planned {
        plan: &'a MemoryPlan,
        geometry: &'a Geometry,
        padding: Padding,
    },
}

/// What a [`JobEvent`]'s listener answers: an error stops the job before its solve
/// ([`JobError::Listener`]).
pub type Heard = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A job's projections ready to solve: prepared, with what was done to them and the plan.
#[derive(Debug)]
pub struct Opened {
    pub projections: Projections,
    pub preprocessing: Preprocessing,
    pub plan: MemoryPlan,
}

/// Why a job stopped before its solve, or the solve's error.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum JobError {
    #[error(transparent)]
    Input(#[from] InputError),
    /// Binning projections in memory, or stripe parameters the detector cannot take.
    #[error(transparent)]
    Preprocess(#[from] PreprocessError),
    #[error(transparent)]
    Prepare(PrepareError),
    /// The checkpoint a resumed run reads.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Recon(#[from] ReconError),
    /// The listener of the job's events stopped it (what it could not do with one).
    #[error(transparent)]
    Listener(Box<dyn std::error::Error + Send + Sync>),
    /// The cancel flag was set before the solve, during `during` (the step it stopped).
    #[error("stopped during {during}")]
    Cancelled { during: &'static str },
}

/// The step a stop during the preparation of `preparation` interrupts.
fn preparing(preparation: &Preparation) -> &'static str {
    match (preparation.axis, &preparation.align) {
        (AxisStep::Search, _) => "the rotation-axis search",
        (_, Some(_)) => "the projections' alignment",
        _ => "preparing the projections",
    }
}

impl JobInput {
    /// The binning factor the projections are read or binned with.
    fn binning(&self) -> usize {
        match self {
            Self::File { load, .. } => load.binning,
            Self::Loaded { binning, .. } => *binning,
        }
    }

    /// The geometry of the projections as read and binned, from a file's headers, metadata and
    /// side files only (no projection is read).
    pub fn geometry(&self) -> Result<Geometry, JobError> {
        match self {
            Self::File { input, load, .. } => Ok(input_geometry(input, load)?),
            Self::Loaded { loaded, binning } => {
                Ok(bin_geometry(loaded.projections.geometry(), *binning)?)
            }
        }
    }

    /// What `preparation` asks of these projections that their headers can refuse before any
    /// projection is read: stripe parameters the detector cannot take.
    pub fn check(&self, preparation: &Preparation) -> Result<(), JobError> {
        if let Some(method) = preparation.stripes {
            method.check(self.geometry()?.detw)?;
        }
        Ok(())
    }

    /// Reads the projections binned (under MPI ranks only this rank's share of the angles, see
    /// [`load_projection_share`]) and what was done to them so far; `events` hears of them once
    /// read ([`JobEvent::Loaded`]).
    pub fn load(
        self,
        processes: &dyn Collective,
        events: &mut dyn FnMut(JobEvent<'_>) -> Heard,
    ) -> Result<(Projections, Preprocessing), JobError> {
        let b = self.binning();
        let (mut loaded, given_pixel_size) = match self {
            Self::File {
                input,
                load,
                pixel_size,
            } => {
                let share = |n| processes.home(processes.rank(), n);
                (load_projection_share(&input, &load, &share)?, pixel_size)
            }
            Self::Loaded {
                mut loaded,
                binning,
            } => {
                if binning != 1 {
                    loaded.projections = bin_projections(&loaded.projections, binning)?;
                }
                (loaded, None)
            }
        };
        events(JobEvent::Loaded(&loaded)).map_err(JobError::Listener)?;
        let g = loaded.projections.geometry();
        let pre = Preprocessing {
            binning: b,
            stripe_removal: None,
            rotation_axis_source: AxisSource::Geometry,
            rotation_axis: DetectorColumn::of_binned(g.rotation_axis(), b),
            axis_search: None,
            clamps: loaded.clamps,
            input_warnings: std::mem::take(&mut loaded.warnings),
            pixel_size: given_pixel_size.or(loaded.pixel_size),
            tilt_source: Some(loaded.tilt_source),
            angles_source: Some(loaded.angles_source),
            alignment: None,
        };
        Ok((loaded.projections, pre))
    }
}

impl<'a> Reconstructor<'a> {
    /// The memory plan `job` would run with (`lamino reconstruct --dry-run`), from its input's
    /// geometry and the preparation's box alone: no projection is read, nothing is allocated;
    /// `events` hears of it ([`JobEvent::Planned`]).
    pub fn plan_job(
        &self,
        job: &Job,
        events: &mut dyn FnMut(JobEvent<'_>) -> Heard,
    ) -> Result<MemoryPlan, JobError> {
        let g = job.input.geometry()?;
        let g = match &job.preparation.volume {
            Some(b) => boxed_geometry(&g, b).map_err(ReconError::from)?.0,
            None => g,
        };
        let plan = self.plan(&g)?;
        self.say_planned(&plan, &g, events)?;
        Ok(plan)
    }

    /// Runs `job` up to its solve (the module's steps 1 to 4): its projections prepared, what
    /// was done to them, and the plan. `events` hears of each step as it is done.
    pub fn open(
        &self,
        job: Job,
        events: &mut dyn FnMut(JobEvent<'_>) -> Heard,
    ) -> Result<Opened, JobError> {
        let Job {
            input,
            mut preparation,
        } = job;
        // A run that cannot resume from its checkpoint stops before any work.
        let checkpoint = self.resume.as_deref().map(Checkpoint::read).transpose()?;
        input.check(&preparation)?;
        let input_binning = input.binning();
        let (projections, mut pre) = input.load(&*self.processes, events)?;
        self.stop_if_cancelled("reading the projections")?;
        if let (Some(c), AxisStep::Search) = (&checkpoint, preparation.axis) {
            preparation.axis = AxisStep::Checkpoint(resume::checkpoint_axis(
                &c.geometry,
                projections.geometry(),
                preparation.volume.as_ref(),
                self.pad,
            ));
        }
        // A resumed alignment takes the checkpoint's shifts (in the binned pixels it ran on).
        if let (Some(c), Some(_)) = (&checkpoint, &preparation.align) {
            let b = input_binning as f64;
            preparation.align = None;
            preparation.shifts = (!c.geometry.shifts.is_empty())
                .then(|| c.geometry.shifts.iter().map(|s| s.map(|v| v * b)).collect());
        }
        let during = preparing(&preparation);
        // The first error the listener answers stops the job once the preparation returns.
        let mut refused = Ok(());
        let prepared = self.prepare(&preparation, projections, &mut pre, &mut |step| {
            if refused.is_ok() {
                refused = events(JobEvent::Prepared(step));
            }
        });
        refused.map_err(JobError::Listener)?;
        let projections = match prepared {
            Err(
                PrepareError::Preprocess(PreprocessError::Cancelled)
                | PrepareError::Align(super::AlignError::Cancelled),
            ) => return Err(JobError::Cancelled { during }),
            prepared => prepared.map_err(JobError::Prepare)?,
        };
        self.stop_if_cancelled(during)?;
        let g = projections.geometry();
        if let Some(c) = &checkpoint {
            resume::check_geometry(c, g, &pre, self.pad).map_err(ReconError::from)?;
        }
        let plan = self.plan(g)?;
        self.say_planned(&plan, g, events)?;
        Ok(Opened {
            projections,
            preprocessing: pre,
            plan,
        })
    }

    /// Runs `job` to the end: [`open`](Self::open), then the solve; the report states what was
    /// done to the projections. The volume stays where the solver keeps it ([`Solved`]).
    pub fn run_job(
        self,
        job: Job,
        events: &mut dyn FnMut(JobEvent<'_>) -> Heard,
    ) -> Result<Solved<'a>, JobError> {
        let opened = self.open(job, events)?;
        let mut solved = self.solve(&opened.projections)?;
        solved.report.state_preprocessing(opened.preprocessing);
        Ok(solved)
    }

    /// Tells `events` of `plan`, for projections of `geometry`.
    fn say_planned(
        &self,
        plan: &MemoryPlan,
        geometry: &Geometry,
        events: &mut dyn FnMut(JobEvent<'_>) -> Heard,
    ) -> Result<(), JobError> {
        events(JobEvent::Planned {
            plan,
            geometry,
            padding: self.padding(geometry),
        })
        .map_err(JobError::Listener)
    }

    /// [`JobError::Cancelled`] during `during` once the cancel flag is set.
    fn stop_if_cancelled(&self, during: &'static str) -> Result<(), JobError> {
        match &self.cancel {
            Some(flag) if flag.load(std::sync::atomic::Ordering::SeqCst) => {
                Err(JobError::Cancelled { during })
            }
            _ => Ok(()),
        }
    }
}
