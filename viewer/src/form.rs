//! The scan form: what to open (a simulated phantom or a file) and how to preprocess it, as the
//! user edits it, and its conversion into the worker's scan source and preprocessing.

use std::path::PathBuf;

use eframe::egui;
use lamino::preprocess::{binning_factor, AxisChoice, MAX_BINNING};
use lamino::recon::input::{ProjectionInput, Shading};
use lamino::simulate::{PhantomKind, ScanSpec};

use crate::worker::{Preprocess, ScanSource};
use crate::{Args, OpenBeam, StripeMethod};

/// The scan form's fields, as the user edits them.
pub struct ScanForm {
    simulate: bool,
    phantom: PhantomKind,
    size: usize,
    angles: usize,
    tilt_deg: f64,
    noisy: bool,
    photons: f64,
    seed: u64,
    path: String,
    /// For a file: the tilt that overrides the file's (empty: the file's); a TIFF stack needs it.
    tilt: String,
    angles_file: String,
    flats: String,
    darks: String,
    /// `--flatfield envelope`: estimate the open beam of a TIFF stack without white fields.
    envelope: bool,
    /// `--binning`'s exponent.
    binning: u32,
    stripes: StripeMethod,
    /// `--rotation-axis`: a column, `auto`, or empty (the detector's centre).
    axis: String,
}

impl ScanForm {
    pub fn new(args: &Args) -> Self {
        let text = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        Self {
            simulate: args.open.is_none(),
            phantom: args.simulate.unwrap_or(PhantomKind::Chip),
            size: args.size,
            angles: args.angle_count.unwrap_or(args.size),
            tilt_deg: args.tilt_deg.unwrap_or(30.0),
            noisy: args.photons.is_some(),
            photons: args.photons.unwrap_or(1e5),
            seed: args.seed,
            path: text(&args.open).unwrap_or_default(),
            tilt: args.tilt_deg.map(|t| t.to_string()).unwrap_or_default(),
            angles_file: match args.open {
                Some(_) => text(&args.angles).unwrap_or_default(),
                None => String::new(),
            },
            flats: text(&args.flats).unwrap_or_default(),
            darks: text(&args.darks).unwrap_or_default(),
            envelope: args.flatfield == Some(OpenBeam::Envelope),
            binning: args.binning,
            stripes: args.remove_stripe,
            axis: match args.rotation_axis {
                None => String::new(),
                Some(AxisChoice::Auto) => "auto".into(),
                Some(AxisChoice::Column(c)) => c.to_string(),
            },
        }
    }

    /// The preprocessing the form describes, or what is wrong with it.
    pub fn preprocess(&self) -> Result<Preprocess, String> {
        let rotation_axis = match self.axis.trim() {
            "" => None,
            axis => Some(
                axis.parse::<AxisChoice>()
                    .map_err(|e| format!("rotation axis {e}"))?,
            ),
        };
        Ok(Preprocess {
            binning: self.binning,
            stripes: self.stripes,
            rotation_axis,
        })
    }

    /// The scan the form describes, or what is missing.
    pub fn source(&self) -> Result<ScanSource, String> {
        if self.simulate {
            return Ok(ScanSource::Simulate(ScanSpec {
                phantom: self.phantom,
                size: self.size,
                angles: self.angles,
                tilt_deg: self.tilt_deg,
                photons: self.noisy.then_some(self.photons),
                seed: self.seed,
                rotation_axis: None,
            }));
        }
        let path = PathBuf::from(self.path.trim());
        let tilt_deg = match self.tilt.trim() {
            "" => None,
            t => Some(
                t.parse::<f64>()
                    .map_err(|_| format!("tilt {t:?}: not a number of degrees"))?,
            ),
        };
        let optional = |s: &str| (!s.trim().is_empty()).then(|| PathBuf::from(s.trim()));
        let ext = lamino::recon::input::extension(&path);
        Ok(ScanSource::File(match ext.as_str() {
            _ if path.as_os_str().is_empty() => return Err("name a scan file to open".into()),
            "h5" | "hdf5" | "nxs" | "nx" => ProjectionInput::DXchange {
                path,
                tilt_deg,
                angles: optional(&self.angles_file),
                theta_units: None,
                tilt_path: None,
                theta_path: None,
            },
            "tif" | "tiff" => ProjectionInput::TiffStack {
                angles: optional(&self.angles_file)
                    .ok_or("a TIFF stack needs its angles file (one angle per projection)")?,
                tilt_deg: tilt_deg.ok_or("a TIFF stack needs its tilt (degrees)")?,
                theta_units: None,
                shading: match (optional(&self.flats), self.envelope) {
                    (Some(flats), _) => Shading::Fields {
                        flats,
                        darks: optional(&self.darks),
                    },
                    (None, true) if optional(&self.darks).is_some() => {
                        return Err("dark fields need white fields: with the open-beam \
                                    estimate (flatfield envelope), subtract the dark field from \
                                    the projections first"
                            .into())
                    }
                    (None, true) => Shading::OpenBeamEnvelope,
                    (None, false) => {
                        return Err(
                            "a TIFF stack needs white fields, or the open-beam estimate \
                                    (flatfield envelope)"
                                .into(),
                        )
                    }
                },
                path,
            },
            other => {
                return Err(format!(
                    "{}: not a scan the viewer opens ({other:?}; expected .h5, .hdf5, .nxs, .nx, \
                     .tif or .tiff)",
                    path.display()
                ))
            }
        }))
    }

    /// Draws the form; true when *Open* was clicked.
    pub fn ui(&mut self, ui: &mut egui::Ui) -> bool {
        let f = self;
        ui.horizontal(|ui| {
            ui.radio_value(&mut f.simulate, true, "Simulate");
            ui.radio_value(&mut f.simulate, false, "File");
        });
        if f.simulate {
            egui::Grid::new("simulate").num_columns(2).show(ui, |ui| {
                ui.label("phantom");
                egui::ComboBox::from_id_salt("phantom")
                    .selected_text(f.phantom.name())
                    .show_ui(ui, |ui| {
                        for kind in PhantomKind::ALL {
                            ui.selectable_value(&mut f.phantom, kind, kind.name());
                        }
                    });
                ui.end_row();
                ui.label("size (n^3)");
                ui.add(egui::DragValue::new(&mut f.size).range(8..=4096));
                ui.end_row();
                ui.label("angles");
                ui.add(egui::DragValue::new(&mut f.angles).range(1..=100_000));
                ui.end_row();
                ui.label("tilt (deg)");
                ui.add(egui::DragValue::new(&mut f.tilt_deg).range(-90.0..=90.0));
                ui.end_row();
                ui.checkbox(&mut f.noisy, "photons");
                ui.add_enabled(
                    f.noisy,
                    egui::DragValue::new(&mut f.photons).range(1.0..=1e12),
                );
                ui.end_row();
                ui.label("seed");
                ui.add(egui::DragValue::new(&mut f.seed));
                ui.end_row();
            });
        } else {
            egui::Grid::new("file").num_columns(2).show(ui, |ui| {
                for (name, value, hint) in [
                    ("scan", &mut f.path, ".h5 (DXchange, NXtomo) or .tif"),
                    ("tilt (deg)", &mut f.tilt, "the file's"),
                    (
                        "angles",
                        &mut f.angles_file,
                        "file (TIFF; replaces an HDF5 scan's)",
                    ),
                    ("flats", &mut f.flats, "TIFF: white fields"),
                    ("darks", &mut f.darks, "TIFF: dark fields"),
                ] {
                    ui.label(name);
                    ui.add(egui::TextEdit::singleline(value).hint_text(hint));
                    ui.end_row();
                }
            });
            ui.checkbox(
                &mut f.envelope,
                "TIFF without flats: estimate the open beam (flatfield envelope)",
            );
        }
        egui::Grid::new("preprocess").num_columns(2).show(ui, |ui| {
            ui.label("rotation axis");
            ui.add(
                egui::TextEdit::singleline(&mut f.axis)
                    .hint_text("unbinned column, auto, or the centre"),
            );
            ui.end_row();
            ui.label("binning");
            egui::ComboBox::from_id_salt("binning")
                .selected_text(binning_name(f.binning))
                .show_ui(ui, |ui| {
                    for b in 0..=MAX_BINNING {
                        ui.selectable_value(&mut f.binning, b, binning_name(b));
                    }
                });
            ui.end_row();
            ui.label("remove stripes");
            egui::ComboBox::from_id_salt("stripes")
                .selected_text(f.stripes.name())
                .show_ui(ui, |ui| {
                    for method in StripeMethod::ALL {
                        ui.selectable_value(&mut f.stripes, method, method.name());
                    }
                });
            ui.end_row();
        });
        ui.button("Open").clicked()
    }
}

/// `--binning b` as the form lists it: the exponent and the block it bins.
fn binning_name(b: u32) -> String {
    match binning_factor(b) {
        1 => "0 (none)".into(),
        f => format!("{b} ({f} x {f})"),
    }
}
