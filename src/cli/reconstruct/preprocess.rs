//! The preprocessing options of `reconstruct` and `try`: binning, the clamping limit, stripe
//! removal and the pixel size, and reading the projections with them.

use clap::{Args, ValueEnum};

use crate::io::{PixelSize, MAX_CLAMPED_FRACTION};
use crate::preprocess::{binning_factor, parse_binning, Preprocessing, StripeRemoval, FW_SIGMA};
use crate::recon::input::{LoadOptions, LoadedProjections};
use crate::recon::{AxisStep, JobEvent, JobInput, Preparation, Prepared};
use crate::scan::Projections;

use super::inputs::{say_read, InputArgs};

/// Preprocessing shared by `reconstruct` and `try`.
#[derive(Args)]
pub struct PreprocessArgs {
    /// Bin the detector by 2^b, as tomocupy's --binning: 0 none, 1 2 x 2, 2 4 x 4, 3 8 x 8
    /// pixels. Counts (and white and dark fields) are summed over the binned pixels before the
    /// -log (line integrals are averaged), and the volume's voxels are 2^b times larger, so its
    /// values (attenuation per voxel) are 2^b times those of an unbinned reconstruction.
    /// --rotation-axis stays in unbinned detector columns.
    #[arg(long, default_value_t = 0, value_parser = parse_binning)]
    binning: u32,
    /// Refuse a scan when flat/dark normalisation clamps more than this fraction of its pixels
    /// (transmission at or below zero: white field zero or below the dark, data at or below the
    /// dark). The clamped count is recorded in report.json either way.
    #[arg(long, default_value_t = MAX_CLAMPED_FRACTION, value_parser = parse_fraction)]
    max_clamped_fraction: f64,
    /// Remove stripes from the sinograms (rings in the volume), after the -log.
    /// tomocupy's --remove-stripe-method; its `vo-all` is Vo et al.'s sorting step and two
    /// more, of which lamino has the sorting step (`sort`).
    #[arg(long, value_enum, visible_alias = "remove-stripe-method")]
    remove_stripe: Option<StripeMethod>,
    /// For `--remove-stripe fw`: wavelet levels (default log2(width) - 5, at least 1: stripes up
    /// to width/32 pixels wide).
    #[arg(long)]
    fw_level: Option<usize>,
    // The default in the help comes from the constant; `None` says it was not given.
    #[arg(long, help = format!(
        "For `--remove-stripe fw`: damping width in angular frequency samples (default {FW_SIGMA})"
    ))]
    fw_sigma: Option<f64>,
    /// For `--remove-stripe sort`: median window across columns (default 21 for detectors wider
    /// than 2000 pixels, else 1 % of the width, at least 5).
    #[arg(long)]
    sort_size: Option<usize>,
    /// The detector's effective pixel size at the sample in micrometres (tomocupy's
    /// --pixel-size), for inputs that do not record it or to override a DXchange file's
    /// metadata. The volume's voxels are this times --binning; the outputs carry it (ImageJ and
    /// OME-Zarr metadata, recon.h5 attributes, report.json). Without it, or the file's, the
    /// voxel size is unknown (unit "pixel").
    #[arg(long, value_parser = parse_pixel_size)]
    pixel_size: Option<PixelSize>,
}

fn parse_pixel_size(s: &str) -> Result<PixelSize, String> {
    let value = s
        .parse::<f64>()
        .map_err(|_| format!("{s:?}: expected a pixel size in micrometres"))?;
    PixelSize::micrometers(value).map_err(|e| format!("{s:?}: {e}"))
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s:?}: expected a fraction from 0 to 1")),
    }
}

/// The stripe-removal methods of the command line, with tomocupy's names of methods lamino does
/// not have (hidden: refused with what lamino offers).
#[derive(Clone, Copy, ValueEnum)]
enum StripeMethod {
    /// No stripe removal (the default).
    None,
    /// The Fourier-wavelet method (Munch et al. 2009).
    Fw,
    /// The sorting method (Vo et al. 2018, algorithm 3).
    Sort,
    #[value(hide = true)]
    VoAll,
    #[value(hide = true)]
    Ti,
}

impl PreprocessArgs {
    /// The binning factor of `--binning` (the library's unit).
    pub(super) fn binning_factor(&self) -> usize {
        binning_factor(self.binning)
    }

    pub(super) fn load_options(&self) -> LoadOptions {
        LoadOptions {
            binning: self.binning_factor(),
            max_clamped_fraction: self.max_clamped_fraction,
        }
    }

    /// The stripe removal the options ask for, or why they contradict each other.
    pub(super) fn stripe_removal(&self) -> Result<Option<StripeRemoval>, String> {
        let fw_options = self.fw_level.is_some() || self.fw_sigma.is_some();
        match self.remove_stripe {
            Some(StripeMethod::VoAll) => {
                Err("--remove-stripe vo-all: lamino has the sorting step \
                 of Vo et al.'s all-stripe removal as `--remove-stripe sort`, not its large- and \
                 dead-stripe steps"
                    .into())
            }
            Some(StripeMethod::Ti) => Err("--remove-stripe ti: lamino does not offer Titarenko's \
                 method; it offers `fw` (Fourier-wavelet) and `sort` (Vo et al.'s sorting)"
                .into()),
            None | Some(StripeMethod::None) if fw_options || self.sort_size.is_some() => {
                Err("--fw-level, --fw-sigma and --sort-size need --remove-stripe".into())
            }
            None | Some(StripeMethod::None) => Ok(None),
            Some(StripeMethod::Fw) if self.sort_size.is_some() => {
                Err("--sort-size applies to --remove-stripe sort".into())
            }
            Some(StripeMethod::Fw) => Ok(Some(StripeRemoval::FourierWavelet {
                level: self.fw_level,
                sigma: self.fw_sigma.unwrap_or(FW_SIGMA),
            })),
            Some(StripeMethod::Sort) if fw_options => {
                Err("--fw-level and --fw-sigma apply to --remove-stripe fw".into())
            }
            Some(StripeMethod::Sort) => Ok(Some(StripeRemoval::Sorting {
                size: self.sort_size,
            })),
        }
    }

    /// Reads the projections binned and with stripes removed (the first step of a
    /// [`Preparation`]); prints what it did unless `quiet`.
    pub fn load(
        &self,
        input: &InputArgs,
        quiet: bool,
    ) -> Result<(Projections, Preprocessing), Box<dyn std::error::Error>> {
        let one = crate::distributed::OneProcess::shared();
        let preparation = self.preparation(None, AxisStep::Geometry, None, None)?;
        let input = self.job_input(input)?;
        input.check(&preparation)?;
        let (projections, mut pre) = input.load(&*one, &mut |event| {
            if let JobEvent::Loaded(loaded) = event {
                self.say_loaded(loaded, &one, quiet);
            }
            Ok(())
        })?;
        let mut say = say_prepared(quiet, quiet, None);
        let shape = projections_shape(&projections);
        let projections =
            preparation
                .remove_stripes(&*one, projections, &mut pre, &mut |step| say(shape, &step))?;
        Ok((projections, pre))
    }

    /// The steps after reading ([`Preparation`]): the stripe removal these options ask for,
    /// the projections' `shifts` (unbinned pixels), then `axis`, projection matching (`align`)
    /// and the box `volume` (binned voxels).
    pub(super) fn preparation(
        &self,
        shifts: Option<Vec<[f64; 2]>>,
        axis: AxisStep,
        volume: Option<crate::geometry::VolumeBox>,
        align: Option<crate::preprocess::AlignOptions>,
    ) -> Result<Preparation, String> {
        Ok(Preparation {
            stripes: self.stripe_removal()?,
            axis,
            volume,
            shifts,
            align,
        })
    }

    /// The projections `input` names, read as these options say (binned, the clamping limit,
    /// the pixel size).
    pub(super) fn job_input(
        &self,
        input: &InputArgs,
    ) -> Result<JobInput, Box<dyn std::error::Error>> {
        Ok(JobInput::File {
            input: input.projection_input()?,
            load: self.load_options(),
            pixel_size: self.pixel_size,
        })
    }

    /// Says what reading the projections `loaded` did, unless `quiet`: under MPI ranks (one of
    /// `processes`) the share this rank read, a pixel size given over the file's, its notes and
    /// warnings ([`say_read`]), the binning.
    pub(super) fn say_loaded(
        &self,
        loaded: &LoadedProjections,
        processes: &super::solve::Processes,
        quiet: bool,
    ) {
        if quiet {
            return;
        }
        let p = &loaded.projections;
        if let Some(r) = super::solve::ranks(processes) {
            let angles = p.angles();
            eprintln!(
                "rank {} of {}: read {} of {} projections (its angles {}..{}), {} projection \
                 values",
                r.rank(),
                r.size(),
                loaded.frames_read,
                p.geometry().ntheta(),
                angles.start,
                angles.end,
                p.values().len()
            );
        }
        if let (Some(given), Some(recorded)) = (self.pixel_size, loaded.pixel_size) {
            eprintln!(
                "--pixel-size {} um overrides the {} um the input records",
                given.value, recorded.value
            );
        }
        say_read(loaded, quiet);
        let b = self.binning_factor();
        if b > 1 {
            let g = p.geometry();
            eprintln!(
                "binning {} = {b} x {b} pixels: {} x {} detector, voxels {b} times larger (values \
                 {b} times those of an unbinned reconstruction)",
                self.binning, g.deth, g.detw,
            );
        }
    }
}

/// `(angles, rows, columns)` of `projections`' whole scan (its geometry's).
pub(super) fn projections_shape(projections: &Projections) -> [usize; 3] {
    let g = projections.geometry();
    [g.ntheta(), g.deth, g.detw]
}

/// Prints what the steps of a [`Preparation`] did on projections of the shape it is given
/// with each (see [`projections_shape`]) unless `quiet`, as rank `rank` of the MPI ranks where `rank` says
/// `(rank, ranks)`; the box's message unless `quiet_box` (every rank says it). The axis
/// search's scores are reported by its caller.
pub(super) fn say_prepared(
    quiet: bool,
    quiet_box: bool,
    rank: Option<(usize, usize)>,
) -> impl FnMut([usize; 3], &Prepared<'_>) {
    let (r, k) = rank.unwrap_or((0, 1));
    move |[ntheta, deth, detw], step| match step {
        Prepared::StripesRemoved {
            method,
            seconds,
            share,
        } if !quiet => {
            if let Some((stripes, held)) = share {
                eprintln!(
                    "rank {r} of {k}: stripes removed from the sinograms of detector rows \
                     {}..{}, holding at most {} projection values at once (its angles {held})",
                    stripes.rows.start, stripes.rows.end, stripes.values_held
                );
            }
            eprintln!(
                "stripes removed ({method:?}) from {deth} sinograms of {ntheta} x {detw} in \
                 {seconds:.2} s"
            );
        }
        // The search takes seconds to minutes: say what runs until its result.
        Prepared::AxisSearchStarted if !quiet => {
            eprintln!("searching for the rotation axis (--rotation-axis auto) ...");
        }
        Prepared::AxisSearched {
            share: Some(share), ..
        } if !quiet => {
            eprintln!(
                "rank {r} of {k}: axis searched on its angles {}..{} (the ranks summing theirs \
                 in turn), holding at most {} projection values and {} slab values at once",
                share.angles.start, share.angles.end, share.values_held, share.slab_values_held
            );
        }
        Prepared::AlignmentRound(round) if !quiet => {
            eprintln!(
                "projection matching, binned {}: shifts moved {:.3} px RMS, {:.3} px at most \
                 ({:.1} s)",
                round.binning, round.rms_update_px, round.max_update_px, round.seconds
            );
        }
        Prepared::Aligned(alignment) if !quiet => {
            eprintln!(
                "projections aligned in {} rounds ({:.1} s){}",
                alignment.rounds.len(),
                alignment.seconds,
                match alignment.rows_estimated {
                    true => "",
                    false => "; the detector's rows are too few to register: dv kept",
                }
            );
        }
        Prepared::Boxed { kept, of } if kept != of && !quiet_box => {
            eprintln!(
                "slab/roi: the operator uses the {} of {} detector rows and {} of {} columns the \
                 box projects onto (its shadow, plus the gridding kernel's reach)",
                kept[0], of[0], kept[1], of[1]
            );
        }
        _ => {}
    }
}
