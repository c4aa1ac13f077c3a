//! The application's state and its window: the scan form (`form`), the memory plan, the run's
//! controls and progress on the left; the three slices with their sliders and grey window, and
//! the convergence plot in the middle. What takes time happens on the worker thread (`worker`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eframe::egui::{self, load::SizedTexture, Color32, ColorImage, Rect, RichText, Vec2};
use eframe::egui_wgpu::RenderState;
use lamino::params::{AdmmParams, Convergence};
use lamino::preprocess::AxisChoice;
use lamino::solver::IterationReport;
use lamino::GpuContext;

use crate::form::ScanForm;
use crate::slices::{create_textures, free_textures, slice_boxes, Display, Drawn};
use crate::worker::{self, Command, Event, Link};
use crate::{plot, Args};

/// How the program ends: `None` while it runs (and when the window is closed without --exit).
pub type Outcome = Arc<Mutex<Option<Result<(), String>>>>;

/// The scan that is open.
struct OpenScan {
    shape: [usize; 3],
    summary: String,
    plan: String,
    streams: bool,
    textures: [egui::TextureId; 3],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunState {
    Idle,
    Running,
    /// Finished or cancelled: the volume can be saved; a cancelled run resumed.
    Done {
        cancelled: bool,
    },
}

/// Where `--exit` is on its way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExitStep {
    /// Waiting for the run to finish.
    Running,
    /// The run has finished: the next frame shows its last slices and is captured.
    Capture,
    /// Waiting for the screenshot, then for the volume to be saved.
    Screenshot,
    Saving,
}

/// UI frames while a run goes on: the time between frames and each frame's CPU time.
#[derive(Default)]
struct FrameTimes {
    last: Option<Instant>,
    intervals_ms: Vec<f64>,
    cpu_ms: Vec<f64>,
}

pub struct App {
    render: RenderState,
    args: Args,
    commands: Sender<Command>,
    /// The worker thread, joined when the app ends: it holds the device's last buffers, and
    /// dropping them after the window's surface is gone fails on GL (EGL's BadAccess, a panic).
    worker: Option<std::thread::JoinHandle<()>>,
    events: Receiver<Event>,
    display: Arc<Mutex<Display>>,
    cancel: Arc<AtomicBool>,
    /// The temporary work directory, removed when the app ends (none when --work-dir is given).
    _work_dir: Option<tempfile::TempDir>,
    outcome: Outcome,
    form: ScanForm,
    scan: Option<OpenScan>,
    /// Start the run as soon as the scan is open (--start, --exit).
    auto_start: bool,
    run: RunState,
    exact: bool,
    iterations: usize,
    max_iterations: usize,
    /// The TV weight (`--alpha`).
    alpha: f64,
    reports: Vec<IterationReport>,
    tolerance: Option<Convergence>,
    progress: Option<(usize, usize, f64, f64)>,
    drawn: Option<Drawn>,
    /// The draws during the run: seconds each, how many on the device, how many through the
    /// previous iterate's window; and the seconds of the draw after it.
    live_draw_s: Vec<f64>,
    device_draws: usize,
    previous_window_draws: usize,
    final_draw_s: Option<f64>,
    iteration_s: Vec<f64>,
    status: String,
    save_path: String,
    screenshot_path: String,
    screenshots: (Sender<Arc<ColorImage>>, Receiver<Arc<ColorImage>>),
    exit: Option<ExitStep>,
    frames: FrameTimes,
    /// Whether the device is a software adapter: its CPU cores render the UI's frames and run the
    /// reconstruction, so while a run goes on the UI draws only when something changed.
    software_adapter: bool,
    /// Where the slices were drawn last (points), and the points' size in pixels.
    slice_rects: [Rect; 3],
    pixels_per_point: f32,
    /// Close the window at the next frame.
    close: bool,
}

impl App {
    pub fn new(
        egui_ctx: &egui::Context,
        render: RenderState,
        ctx: GpuContext,
        args: Args,
        outcome: Outcome,
    ) -> Result<Self, String> {
        let (work_dir, temporary) = match &args.work_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                (dir.clone(), None)
            }
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("lamino-viewer")
                    .tempdir()
                    .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
                (dir.path().to_path_buf(), Some(dir))
            }
        };
        let (commands, worker_commands) = mpsc::channel();
        let (worker_events, events) = mpsc::channel();
        let display = Arc::new(Mutex::new(Display::centred([1, 1, 1])));
        let cancel = Arc::new(AtomicBool::new(false));
        let software_adapter = ctx.info().software;
        let link = Link {
            commands: worker_commands,
            events: worker_events,
            repaint: egui_ctx.clone(),
            display: display.clone(),
            cancel: cancel.clone(),
            work_dir,
            device_budget: args.max_device_mib.map(|mib| mib << 20),
            live: !args.no_live_slices,
        };
        let worker = std::thread::Builder::new()
            .name("lamino-worker".into())
            .spawn(move || worker::run(ctx, link))
            .map_err(|e| format!("cannot start the worker thread: {e}"))?;
        let scan_given = args.simulate.is_some() || args.open.is_some();
        if args.exit {
            if !scan_given {
                return Err("--exit needs a scan: --simulate PHANTOM or --open FILE".into());
            }
            *outcome.lock().unwrap() =
                Some(Err("the window closed before the run finished".into()));
        }
        let params = AdmmParams::default();
        let mut app = Self {
            render,
            commands,
            worker: Some(worker),
            events,
            display,
            cancel,
            _work_dir: temporary,
            outcome,
            form: ScanForm::new(&args),
            scan: None,
            auto_start: args.start || args.exit,
            run: RunState::Idle,
            exact: args.iterations.is_some(),
            iterations: args.iterations.unwrap_or(10),
            max_iterations: params.outer_iterations,
            alpha: args.alpha,
            reports: Vec::new(),
            tolerance: None,
            progress: None,
            drawn: None,
            live_draw_s: Vec::new(),
            device_draws: 0,
            previous_window_draws: 0,
            final_draw_s: None,
            iteration_s: Vec::new(),
            status: String::new(),
            save_path: args
                .save
                .as_ref()
                .map_or("recon.tif".into(), |p| p.display().to_string()),
            screenshot_path: args
                .screenshot
                .as_ref()
                .map_or("lamino-viewer.png".into(), |p| p.display().to_string()),
            screenshots: mpsc::channel(),
            exit: args.exit.then_some(ExitStep::Running),
            frames: FrameTimes::default(),
            software_adapter,
            slice_rects: [Rect::NOTHING; 3],
            pixels_per_point: egui_ctx.pixels_per_point(),
            close: false,
            args,
        };
        if scan_given {
            app.open();
        }
        Ok(app)
    }

    fn send(&mut self, command: Command) {
        if self.commands.send(command).is_err() {
            self.fail("the worker thread has stopped".into());
        }
    }

    fn fail(&mut self, message: String) {
        self.status = format!("error: {message}");
        if self.exit.is_some() {
            eprintln!("lamino-viewer: {message}");
            *self.outcome.lock().unwrap() = Some(Err(message));
            self.exit = None;
            self.close = true;
        }
    }

    fn open(&mut self) {
        match self
            .form
            .source()
            .and_then(|s| Ok((s, self.form.preprocess()?)))
        {
            Ok((source, preprocess)) => {
                self.status = match preprocess.rotation_axis {
                    Some(AxisChoice::Auto) => "opening the scan, searching the rotation axis...",
                    _ => "opening the scan...",
                }
                .into();
                self.send(Command::Open(source, preprocess));
            }
            Err(e) => self.fail(e),
        }
    }

    fn params(&self) -> AdmmParams {
        let params = match self.exact {
            true => AdmmParams::exactly(self.iterations),
            false => AdmmParams {
                outer_iterations: self.max_iterations,
                ..AdmmParams::default()
            },
        };
        AdmmParams {
            alpha: self.alpha,
            ..params
        }
    }

    fn start(&mut self, resume: bool) {
        let params = self.params();
        self.tolerance = params.convergence;
        if !resume {
            self.reports.clear();
            self.iteration_s.clear();
            self.live_draw_s.clear();
            self.device_draws = 0;
            self.previous_window_draws = 0;
        }
        self.progress = None;
        self.run = RunState::Running;
        self.status = match resume {
            true => "resuming from the checkpoint...".into(),
            false => "reconstructing...".into(),
        };
        self.send(Command::Start { params, resume });
    }

    /// Takes the worker's events.
    fn handle_events(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            match event {
                Event::Opened {
                    shape,
                    summary,
                    plan,
                    streams,
                } => {
                    if let Some(old) = self.scan.take() {
                        free_textures(&self.render, old.textures);
                    }
                    let (textures, ids) = create_textures(&self.render, shape);
                    *self.display.lock().unwrap() = Display::centred(shape);
                    self.scan = Some(OpenScan {
                        shape,
                        summary,
                        plan,
                        streams,
                        textures: ids,
                    });
                    if self.exit.is_some() {
                        // What --exit ran on (its test reads the rotation axis).
                        println!("{}", self.scan.as_ref().map_or("", |s| &s.summary));
                    }
                    self.run = RunState::Idle;
                    self.reports.clear();
                    self.drawn = None;
                    self.status = "scan open".into();
                    self.send(Command::Targets(Box::new(textures)));
                    if std::mem::take(&mut self.auto_start) {
                        self.start(false);
                    }
                }
                Event::Progress {
                    report,
                    total,
                    elapsed_s,
                    eta_s,
                } => {
                    self.progress = Some((report.iteration + 1, total, elapsed_s, eta_s));
                    self.reports.push(report);
                }
                Event::Slices(drawn) => {
                    if drawn.live {
                        self.live_draw_s.push(drawn.seconds);
                        self.device_draws += usize::from(drawn.on_device);
                        self.previous_window_draws +=
                            usize::from(drawn.window_of < drawn.iteration);
                    } else {
                        self.final_draw_s = Some(drawn.seconds);
                    }
                    self.drawn = Some(drawn);
                }
                Event::Finished {
                    stop,
                    completed,
                    iteration_s,
                } => {
                    self.iteration_s.extend(iteration_s);
                    self.run = RunState::Done {
                        cancelled: !completed,
                    };
                    if self.exit.is_some() {
                        println!("{stop}");
                    }
                    self.status = stop;
                    if self.exit == Some(ExitStep::Running) {
                        match completed {
                            true => self.exit = Some(ExitStep::Capture),
                            false => self.fail("the run was cancelled".into()),
                        }
                    }
                }
                Event::Saved(path) => {
                    self.status = format!("saved {}", path.display());
                    if self.exit == Some(ExitStep::Saving) {
                        self.finish_exit();
                    }
                }
                Event::Failed(e) => {
                    if self.run == RunState::Running {
                        self.run = RunState::Idle;
                    }
                    self.fail(e);
                }
            }
        }
        while let Ok(image) = self.screenshots.1.try_recv() {
            let path = PathBuf::from(self.screenshot_path.trim());
            match save_png(&image, &path) {
                Ok(()) => self.status = format!("screenshot {}", path.display()),
                Err(e) => self.fail(e),
            }
            if self.exit == Some(ExitStep::Screenshot) {
                self.print_slice_rects(&image);
                self.save_and_exit();
            }
        }
    }

    /// --exit after the screenshot: saves the volume when asked to, then ends.
    fn save_and_exit(&mut self) {
        match self.args.save.clone() {
            Some(path) => {
                self.exit = Some(ExitStep::Saving);
                self.send(Command::Save(path));
            }
            None => self.finish_exit(),
        }
    }

    /// Where each slice lies in the screenshot (physical pixels), for the test that checks it.
    fn print_slice_rects(&self, image: &ColorImage) {
        let ppp = self.pixels_per_point;
        for (name, rect) in ["xy", "xz", "yz"].iter().zip(&self.slice_rects) {
            println!(
                "{name}-slice-px {} {} {} {} of {} {}",
                (rect.min.x * ppp).round(),
                (rect.min.y * ppp).round(),
                (rect.max.x * ppp).round(),
                (rect.max.y * ppp).round(),
                image.size[0],
                image.size[1]
            );
        }
    }

    /// Prints the run's timings and ends --exit with success.
    fn finish_exit(&mut self) {
        let stats = |v: &[f64]| {
            let mut s = v.to_vec();
            s.sort_by(f64::total_cmp);
            let q = |p: f64| s.get(((s.len() - 1) as f64 * p).round() as usize).copied();
            match s.is_empty() {
                true => "none".to_string(),
                false => format!(
                    "{} values, median {:.2}, p95 {:.2}, max {:.2}",
                    s.len(),
                    q(0.5).unwrap_or(0.0),
                    q(0.95).unwrap_or(0.0),
                    s[s.len() - 1]
                ),
            }
        };
        let later = self.iteration_s.get(1..).unwrap_or(&[]);
        let mean = later.iter().sum::<f64>() / later.len().max(1) as f64;
        println!(
            "outer iterations (s): {:?}; mean of the 2nd on {mean:.3} s",
            self.iteration_s
        );
        let ms: Vec<f64> = self.live_draw_s.iter().map(|s| s * 1e3).collect();
        // The first live draw waits for its own values; the others wait for nothing.
        let (first, rest) = ms
            .split_first()
            .map_or((None, &[][..]), |(f, r)| (Some(*f), r));
        println!(
            "slices drawn live {} times, on the device {} of them, {} through the previous \
             iterate's window; time per live draw (ms): the first {}, the others {}; the draw \
             after the run: {}",
            ms.len(),
            self.device_draws,
            self.previous_window_draws,
            first.map_or("none".into(), |f| format!("{f:.2}")),
            stats(rest),
            self.final_draw_s
                .map_or("none".into(), |s| format!("{:.2} ms", s * 1e3))
        );
        println!(
            "UI frames while reconstructing: interval (ms) {}; CPU per frame (ms) {}",
            stats(&self.frames.intervals_ms),
            stats(&self.frames.cpu_ms)
        );
        *self.outcome.lock().unwrap() = Some(Ok(()));
        self.exit = None;
        self.close = true;
    }
}

impl eframe::App for App {
    fn ui(&mut self, ui: &mut egui::Ui, frame: &mut eframe::Frame) {
        self.handle_events();
        let ctx = ui.ctx().clone();
        self.pixels_per_point = ctx.pixels_per_point();
        if self.run == RunState::Running {
            let now = Instant::now();
            if let Some(last) = self.frames.last.replace(now) {
                self.frames
                    .intervals_ms
                    .push((now - last).as_secs_f64() * 1e3);
            }
            if let Some(cpu) = frame.info().cpu_usage {
                self.frames.cpu_ms.push(f64::from(cpu) * 1e3);
            }
            // The elapsed time moves on: about 30 frames a second while a run goes on on a
            // hardware adapter. On a software one each frame takes the CPU the reconstruction
            // runs on (and its queue): the worker's events (progress, slices) repaint it, about
            // twice an outer iteration.
            if !self.software_adapter {
                ctx.request_repaint_after(Duration::from_millis(33));
            }
        } else {
            self.frames.last = None;
        }
        egui::Panel::left("controls")
            .default_size(360.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| self.controls(ui));
            });
        egui::CentralPanel::default().show(ui, |ui| self.view(ui));
        match self.exit {
            Some(ExitStep::Capture) if self.args.screenshot.is_none() => self.save_and_exit(),
            Some(ExitStep::Capture) => {
                // This frame shows the last slices: capture it.
                let sender = self.screenshots.0.clone();
                let repaint = ctx.clone();
                ctx.request_screenshot(move |image| {
                    let _ = sender.send(image);
                    repaint.request_repaint();
                });
                self.exit = Some(ExitStep::Screenshot);
            }
            Some(ExitStep::Screenshot | ExitStep::Saving) => {
                ctx.request_repaint_after(Duration::from_millis(50));
            }
            _ => {}
        }
        if std::mem::take(&mut self.close) {
            ctx.send_viewport_cmd(egui::ViewportCommand::Close);
        }
    }

    fn on_exit(&mut self) {
        // A run still going stops after its iteration (and leaves its checkpoint); with its
        // commands' channel closed the worker ends, and its device objects go while the
        // window's surface still exists.
        self.cancel.store(true, Ordering::SeqCst);
        drop(std::mem::replace(&mut self.commands, mpsc::channel().0));
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl App {
    /// The left panel: scan, plan, run, save.
    fn controls(&mut self, ui: &mut egui::Ui) {
        let running = self.run == RunState::Running;
        ui.heading("Scan");
        ui.add_enabled_ui(!running, |ui| self.scan_form(ui));
        if let Some(scan) = &self.scan {
            ui.label(RichText::new(&scan.summary).small());
            egui::CollapsingHeader::new("Memory plan")
                .default_open(false)
                .show(ui, |ui| {
                    ui.label(RichText::new(&scan.plan).monospace().small())
                });
            if scan.streams {
                ui.colored_label(
                    Color32::YELLOW,
                    "The volume streams through the device: the slices come from a host copy.",
                );
            }
        }
        ui.separator();
        ui.heading("Reconstruction");
        ui.add_enabled_ui(!running, |ui| {
            ui.horizontal(|ui| {
                ui.radio_value(&mut self.exact, false, "until converged, at most");
                ui.add(egui::DragValue::new(&mut self.max_iterations).range(1..=100_000));
            });
            ui.horizontal(|ui| {
                ui.radio_value(&mut self.exact, true, "exactly");
                ui.add(egui::DragValue::new(&mut self.iterations).range(1..=100_000));
                ui.label("outer iterations");
            });
            ui.horizontal(|ui| {
                ui.label("TV weight alpha");
                ui.add(
                    egui::DragValue::new(&mut self.alpha)
                        .range(0.0..=f64::MAX)
                        .speed(1e-5)
                        .min_decimals(4),
                );
            });
        });
        let open = self.scan.is_some();
        let cancelled = self.run == RunState::Done { cancelled: true };
        ui.horizontal(|ui| {
            if ui
                .add_enabled(open && !running, egui::Button::new("Start"))
                .clicked()
            {
                self.start(false);
            }
            if ui
                .add_enabled(running, egui::Button::new("Cancel"))
                .clicked()
            {
                self.cancel.store(true, Ordering::SeqCst);
                self.status = "cancelling after this iteration (writing the checkpoint)...".into();
            }
            if ui
                .add_enabled(cancelled, egui::Button::new("Resume"))
                .on_hover_text("from the checkpoint the cancelled run wrote")
                .clicked()
            {
                self.start(true);
            }
        });
        if let Some((done, total, elapsed, eta)) = self.progress {
            let text = match running {
                true => format!(
                    "{done} / {total} outer iterations, {elapsed:.1} s iterating, at most \
                     {eta:.0} s left"
                ),
                false => format!("{done} / {total} outer iterations, {elapsed:.1} s iterating"),
            };
            ui.add(egui::ProgressBar::new(done as f32 / total.max(1) as f32).text(text));
        }
        if let Some(r) = self.reports.last() {
            egui::Grid::new("residuals").num_columns(2).show(ui, |ui| {
                for (name, value) in [
                    ("|Lu - d|^2", r.data_term),
                    ("change", r.change),
                    ("primal residual", r.primal_relative),
                    ("dual residual", r.dual_relative),
                    ("rho", r.rho),
                ] {
                    ui.label(name);
                    ui.monospace(format!("{value:.4e}"));
                    ui.end_row();
                }
            });
        }
        ui.label(&self.status);
        ui.separator();
        ui.heading("Save");
        let saved = matches!(self.run, RunState::Done { .. });
        ui.horizontal(|ui| {
            ui.text_edit_singleline(&mut self.save_path);
            if ui
                .add_enabled(saved, egui::Button::new("Save volume"))
                .clicked()
            {
                let path = PathBuf::from(self.save_path.trim());
                self.send(Command::Save(path));
            }
        });
        ui.horizontal(|ui| {
            ui.text_edit_singleline(&mut self.screenshot_path);
            if ui.button("Screenshot").clicked() {
                let sender = self.screenshots.0.clone();
                let repaint = ui.ctx().clone();
                ui.ctx().request_screenshot(move |image| {
                    let _ = sender.send(image);
                    repaint.request_repaint();
                });
            }
        });
    }

    fn scan_form(&mut self, ui: &mut egui::Ui) {
        if self.form.ui(ui) {
            self.open();
        }
    }

    /// The middle: the three slices, their sliders and window, the convergence plot.
    fn view(&mut self, ui: &mut egui::Ui) {
        let Some(scan) = &self.scan else {
            ui.centered_and_justified(|ui| ui.label("Simulate or open a scan."));
            return;
        };
        let shape = scan.shape;
        let available = ui.available_size();
        let boxes = slice_boxes(
            shape,
            [available.x, available.y * 0.55],
            ui.spacing().item_spacing.x,
        );
        let textures = scan.textures;
        ui.horizontal_top(|ui| {
            for (k, name) in ["xy (at z)", "xz (at y)", "yz (at x)"]
                .into_iter()
                .enumerate()
            {
                ui.vertical(|ui| {
                    match boxes[k].stretched() {
                        s if s.is_empty() => ui.label(name),
                        s => ui.label(format!("{name}, {s}")),
                    };
                    let size = Vec2::from(boxes[k].size);
                    let response = ui.add(egui::Image::new(SizedTexture::new(textures[k], size)));
                    self.slice_rects[k] = response.rect;
                });
            }
        });
        let mut display = *self.display.lock().unwrap();
        ui.horizontal(|ui| {
            for (axis, name) in ["z", "y", "x"].into_iter().enumerate() {
                ui.add(egui::Slider::new(&mut display.at[axis], 0..=shape[axis] - 1).text(name));
            }
        });
        ui.horizontal(|ui| {
            ui.label("grey window, percentiles of the slices:");
            ui.add(egui::Slider::new(&mut display.percentiles[0], 0.0..=50.0).text("black"));
            ui.add(egui::Slider::new(&mut display.percentiles[1], 50.0..=100.0).text("white"));
        });
        if let Some(d) = &self.drawn {
            let source = match d.on_device {
                true => "drawn on the device",
                false => "drawn from a host copy (the volume streams)",
            };
            let of = match d.window_of == d.iteration {
                true => String::new(),
                false => format!(" (iteration {}'s)", d.window_of + 1),
            };
            ui.label(format!(
                "iteration {}: window [{:.4e}, {:.4e}]{of}, {source}",
                d.iteration + 1,
                d.window[0],
                d.window[1]
            ));
        }
        if display != *self.display.lock().unwrap() {
            *self.display.lock().unwrap() = display;
            // A run draws the new slices after its next iteration; a finished one now.
            if matches!(self.run, RunState::Done { .. }) {
                self.send(Command::Redraw);
            }
        }
        ui.separator();
        let size = Vec2::new(ui.available_width(), ui.available_height().max(120.0));
        plot::convergence(ui, size, &self.reports, self.tolerance);
    }
}

/// Writes a screenshot as an RGB PNG (the window is opaque), compressed hard: screenshots go
/// into documentation.
fn save_png(image: &ColorImage, path: &Path) -> Result<(), String> {
    use image::ImageEncoder;
    let [w, h] = image.size;
    let rgb: Vec<u8> = image
        .pixels
        .iter()
        .flat_map(|c| {
            let [r, g, b, _] = c.to_array();
            [r, g, b]
        })
        .collect();
    let write = |e: String| format!("cannot write {}: {e}", path.display());
    let file = std::fs::File::create(path).map_err(|e| write(e.to_string()))?;
    image::codecs::png::PngEncoder::new_with_quality(
        std::io::BufWriter::new(file),
        image::codecs::png::CompressionType::Best,
        image::codecs::png::FilterType::Adaptive,
    )
    .write_image(&rgb, w as u32, h as u32, image::ExtendedColorType::Rgb8)
    .map_err(|e| write(e.to_string()))
}
