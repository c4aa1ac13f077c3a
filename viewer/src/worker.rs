//! The worker thread: it opens a scan, plans and runs the reconstruction on the UI's device, draws
//! the slices of every iterate into the UI's textures ([`crate::slices`]) and saves the volume.
//! The UI sends it [`Command`]s; it answers with [`Event`]s and a repaint request. While a run
//! goes on it hears nothing but the cancel flag: the commands wait for the run's end.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use eframe::wgpu;
use lamino::io::write_dxchange;
use lamino::preprocess::{binning_factor, describe_axis_search, AxisChoice, AxisSource};
use lamino::recon::input::{LoadOptions, ProjectionInput};
use lamino::recon::{AxisStep, Job, JobEvent, JobInput, Preparation, Prepared};
use lamino::simulate::{simulated_scan, ScanSpec};
use lamino::solver::IterationReport;
use lamino::{
    write_volume, AdmmParams, CheckpointInterval, GpuContext, Projections, Reconstructor, Solved,
};

use crate::slices::{Display, Drawn, SliceTargets, Window};
use crate::StripeMethod;

/// Where a scan comes from.
#[derive(Debug, Clone)]
pub enum ScanSource {
    /// A simulated scan, written as DXchange in the work directory (as `lamino simulate` writes
    /// it) and opened from there like any scan: `lamino reconstruct` of that file reads the same
    /// projections.
    Simulate(ScanSpec),
    /// A file the library's readers open (DXchange/NXtomo HDF5, a TIFF stack with its options).
    File(ProjectionInput),
}

/// What is done to a scan's projections between reading and reconstructing them: the options of
/// `lamino reconstruct` of the same names, binning on the way in, then the library's
/// [`Preparation`] (stripes, the axis), as the command line runs them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preprocess {
    /// `--binning`: tomocupy's exponent (the detector binned by 2^b).
    pub binning: u32,
    pub stripes: StripeMethod,
    /// Unbinned detector column, or searched; `None`: the detector's centre column.
    pub rotation_axis: Option<AxisChoice>,
}

/// What the UI asks of the worker.
pub enum Command {
    Open(ScanSource, Preprocess),
    /// The textures the slices of the opened scan's volume are drawn into.
    Targets(Box<[wgpu::Texture; 3]>),
    /// Runs `params` from the start, or from the checkpoint of the last cancelled run.
    Start {
        params: AdmmParams,
        resume: bool,
    },
    /// Draws the slices of the last iterate again (the display settings changed).
    Redraw,
    Save(PathBuf),
}

/// What the worker tells the UI.
pub enum Event {
    Opened {
        /// `(n0, n1, n2)` of the volume.
        shape: [usize; 3],
        /// The scan's file (the simulated one for a simulation) and what loading it said.
        summary: String,
        /// The memory plan, as `lamino reconstruct --dry-run` prints it.
        plan: String,
        /// Whether the plan streams the volume through the device (slices from a host copy).
        streams: bool,
    },
    Progress {
        report: IterationReport,
        total: usize,
        elapsed_s: f64,
        eta_s: f64,
    },
    Slices(Drawn),
    Finished {
        stop: String,
        completed: bool,
        /// Seconds each outer iteration took (from the progress callbacks, slice updates
        /// included).
        iteration_s: Vec<f64>,
    },
    Saved(PathBuf),
    Failed(String),
}

/// The worker's ends of the channels, the display settings the UI changes, and the cancel flag.
pub struct Link {
    pub commands: Receiver<Command>,
    pub events: Sender<Event>,
    pub repaint: eframe::egui::Context,
    pub display: Arc<Mutex<Display>>,
    pub cancel: Arc<AtomicBool>,
    /// Where simulated scans and the checkpoint go.
    pub work_dir: PathBuf,
    /// The device memory the reconstruction may hold (default: the library's).
    pub device_budget: Option<u64>,
    /// Whether the slices are drawn after every outer iteration (else once at the end).
    pub live: bool,
}

impl Link {
    fn send(&self, event: Event) {
        // The UI has gone when this fails: the worker ends with the next command it fails to read.
        let _ = self.events.send(event);
        self.repaint.request_repaint();
    }
}

/// The worker's loop, until the UI drops its end of the commands.
pub fn run(ctx: GpuContext, link: Link) {
    let checkpoint = link.work_dir.join("checkpoint.ckpt");
    let mut projections: Option<Projections> = None;
    let mut targets: Option<Rc<SliceTargets>> = None;
    let mut solved: Option<Solved<'_>> = None;
    while let Ok(command) = link.commands.recv() {
        let result = match command {
            Command::Open(source, preprocess) => {
                solved = None;
                targets = None;
                projections = None;
                open(&ctx, &link, &source, preprocess).map(|(p, event)| {
                    projections = Some(p);
                    link.send(event);
                })
            }
            Command::Targets(textures) => match &projections {
                Some(p) => SliceTargets::new(&ctx, p.geometry(), *textures).map(|t| {
                    targets = Some(Rc::new(t));
                }),
                None => Err("no scan is open".into()),
            },
            Command::Start { params, resume } => match &projections {
                Some(p) => {
                    solved = None;
                    reconstruct(&ctx, &link, p, params, targets.clone(), &checkpoint, resume).map(
                        |(s, event)| {
                            solved = Some(s);
                            link.send(event);
                        },
                    )
                }
                None => Err("no scan is open".into()),
            },
            Command::Redraw => match (&solved, &targets) {
                (Some(s), Some(t)) => redraw(&link, s, t),
                _ => Ok(()),
            },
            Command::Save(path) => match &solved {
                Some(s) => write_volume(&path, s)
                    .map(|()| link.send(Event::Saved(path)))
                    .map_err(|e| e.to_string()),
                None => Err("nothing to save: no reconstruction has run".into()),
            },
        };
        if let Err(e) = result {
            link.send(Event::Failed(e));
        }
    }
}

/// Loads `source`, preprocesses it as `lamino reconstruct` does with the same options, and plans
/// its reconstruction.
fn open(
    ctx: &GpuContext,
    link: &Link,
    source: &ScanSource,
    preprocess: Preprocess,
) -> Result<(Projections, Event), String> {
    let input = match source {
        ScanSource::File(input) => input.clone(),
        ScanSource::Simulate(spec) => {
            let path = link.work_dir.join(format!(
                "simulated-{}-{}.h5",
                spec.phantom.name(),
                spec.size
            ));
            let simulated = simulated_scan(spec).map_err(|e| e.to_string())?;
            write_dxchange(&path, &simulated.scan).map_err(|e| e.to_string())?;
            ProjectionInput::DXchange {
                path,
                tilt_deg: None,
                angles: None,
                theta_units: None,
                tilt_path: None,
                theta_path: None,
            }
        }
    };
    let b = binning_factor(preprocess.binning);
    let job = Job {
        input: JobInput::File {
            input: input.clone(),
            load: LoadOptions {
                binning: b,
                ..LoadOptions::default()
            },
            pixel_size: None,
        },
        preparation: Preparation {
            stripes: preprocess.stripes.removal(),
            axis: match preprocess.rotation_axis {
                None => AxisStep::Geometry,
                Some(AxisChoice::Column(c)) => AxisStep::Column(c),
                Some(AxisChoice::Auto) => AxisStep::Search,
            },
            volume: None,
            shifts: None,
            align: None,
        },
    };
    // Cancel stops the axis search before its next pass.
    link.cancel.store(false, Ordering::SeqCst);
    let mut notes: Vec<String> = Vec::new();
    let mut searched = None;
    // Within the device budget from here on, as the reconstruction.
    let preparing = with_budget(Reconstructor::new(ctx), link).cancel_flag(link.cancel.clone());
    let opened = preparing
        .open(job, &mut |event| {
            match event {
                JobEvent::Loaded(loaded) => {
                    notes.extend(loaded.notes.iter().chain(&loaded.warnings).cloned());
                    if b > 1 {
                        notes.push(format!(
                            "binning {} = {b} x {b} pixels: voxels {b} times larger (values {b} \
                             times those of an unbinned reconstruction)",
                            preprocess.binning
                        ));
                    }
                }
                JobEvent::Prepared(Prepared::StripesRemoved {
                    method, seconds, ..
                }) => notes.push(format!("stripes removed ({method:?}) in {seconds:.2} s")),
                JobEvent::Prepared(Prepared::AxisSearched {
                    axis: column,
                    search: Some(search),
                    seconds,
                    ..
                }) => {
                    searched = Some(format!(
                        "rotation axis at column {column:.2} (searched over [{:.1}, {:.1}] in \
                         {seconds:.1} s; {})",
                        search.range[0],
                        search.range[1],
                        describe_axis_search(search)
                    ))
                }
                _ => {}
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    let pre = &opened.preprocessing;
    let axis = match (searched, pre.rotation_axis_source) {
        (Some(searched), _) => searched,
        (None, AxisSource::Given) => {
            format!("rotation axis at column {:.2} (given)", pre.rotation_axis)
        }
        (None, _) => format!(
            "rotation axis at column {:.2} (the detector's centre; set it with --rotation-axis)",
            pre.rotation_axis
        ),
    };
    let tilt_source = pre.tilt_source.clone().unwrap_or_default();
    let (projections, plan) = (opened.projections, opened.plan);
    let g = projections.geometry();
    let mut summary = format!(
        "{}: {} projections of {} x {}, tilt {:.2} deg ({}), volume {} x {} x {}\n{axis}",
        input_path(&input).display(),
        g.ntheta(),
        g.deth,
        g.detw,
        g.tilt.degrees(),
        tilt_source,
        g.n0,
        g.n1,
        g.n2
    );
    for note in notes {
        summary += &format!("\n{note}");
    }
    let event = Event::Opened {
        shape: [g.n0, g.n1, g.n2],
        summary,
        plan: plan.to_string(),
        streams: plan.mode == lamino::plan::Mode::Streaming,
    };
    Ok((projections, event))
}

fn input_path(input: &ProjectionInput) -> &Path {
    match input {
        ProjectionInput::LineIntegrals { path, .. }
        | ProjectionInput::DXchange { path, .. }
        | ProjectionInput::TiffStack { path, .. } => path,
    }
}

fn with_budget<'a>(builder: Reconstructor<'a>, link: &Link) -> Reconstructor<'a> {
    match link.device_budget {
        Some(bytes) => builder.device_memory_budget(bytes),
        None => builder,
    }
}

/// Runs the reconstruction, drawing the slices after every outer iteration when the display is
/// live (each through the previous iterate's window: no draw waits for the device), and once at
/// the end through the last iterate's own window; a cancelled run leaves its state in
/// `checkpoint`.
fn reconstruct<'a>(
    ctx: &'a GpuContext,
    link: &Link,
    projections: &Projections,
    params: AdmmParams,
    targets: Option<Rc<SliceTargets>>,
    checkpoint: &Path,
    resume: bool,
) -> Result<(Solved<'a>, Event), String> {
    link.cancel.store(false, Ordering::SeqCst);
    let events = link.events.clone();
    let repaint = link.repaint.clone();
    let mut last = 0.0;
    let times = Rc::new(RefCell::new(Vec::new()));
    // Live slices follow each progress report at once and repaint the UI: one frame shows both
    // (on a software adapter every frame takes CPU and queue time from the run).
    let live = link.live && targets.is_some();
    let mut builder = with_budget(Reconstructor::new(ctx), link)
        .params(params)
        .checkpoint_every(checkpoint.to_path_buf(), CheckpointInterval::Never)
        .cancel_flag(link.cancel.clone())
        .on_progress({
            let times = times.clone();
            move |p| {
                times.borrow_mut().push(p.elapsed_s - last);
                last = p.elapsed_s;
                let _ = events.send(Event::Progress {
                    report: p.report,
                    total: p.total,
                    elapsed_s: p.elapsed_s,
                    eta_s: p.eta_s,
                });
                if !live {
                    repaint.request_repaint();
                }
            }
        });
    if let (true, Some(targets)) = (live, targets.clone()) {
        let events = link.events.clone();
        let repaint = link.repaint.clone();
        let display = link.display.clone();
        targets.start_run();
        builder = builder.on_iterate(move |view| {
            let settings = *display.lock().unwrap();
            let event = match targets.draw(view, settings, Window::Previous) {
                Ok(drawn) => Event::Slices(drawn),
                Err(e) => Event::Failed(e),
            };
            let _ = events.send(event);
            repaint.request_repaint();
        });
    }
    if resume {
        if !checkpoint.exists() {
            return Err(format!(
                "no checkpoint to resume from ({}): cancel a run first",
                checkpoint.display()
            ));
        }
        builder = builder.resume_from(checkpoint.to_path_buf());
    }
    let started = Instant::now();
    let solved = builder.solve(projections).map_err(|e| e.to_string())?;
    if let Some(targets) = &targets {
        redraw(link, &solved, targets)?;
    }
    let report = &solved.report;
    let all_s = started.elapsed().as_secs_f64();
    // The progress bar shows the iterations' time (the solver's clock, from the first
    // iteration); the run's own time adds the setup (plan, buffers, kernels) and the last draw.
    let event = Event::Finished {
        stop: format!(
            "{} after {} outer iterations: {:.1} s iterating, {:.1} s in all (with {:.1} s of \
             setup and the last draw)",
            report.stop.describe(),
            report.reports.last().map_or(0, |r| r.iteration + 1),
            report.iterations_s,
            all_s,
            all_s - report.iterations_s
        ),
        completed: report.completed,
        iteration_s: times.take(),
    };
    Ok((solved, event))
}

/// Draws the slices of the finished run's volume with the display settings now, through their
/// own window.
fn redraw(link: &Link, solved: &Solved<'_>, targets: &SliceTargets) -> Result<(), String> {
    let settings = *link.display.lock().unwrap();
    let drawn = targets.draw(&solved.iterate_view(), settings, Window::Own)?;
    link.send(Event::Slices(drawn));
    Ok(())
}
