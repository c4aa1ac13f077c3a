//! A finished run's volume where the solver keeps it ([`Solved`], read a slab at a time) and
//! the reconstruction's output set: the volume files, report, previews and convergence plot.

use std::path::PathBuf;

use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::io::{
    create_store, OutputSet, SlabVisitor, StackFormat, VolumeSlabs, ZarrOptions, ZarrPart,
};
use crate::solver::AdmmTeam;

use super::{Padding, ReconError, Reconstruction};

/// The most volume one slab of [`Solved`] holds in host memory (unless the host budget leaves
/// less beside the plan's host arrays; always at least one z slice).
pub const SLAB_BYTES: u64 = 64 << 20;

/// A finished reconstruction whose volume is still where the solver keeps it (on the device, in
/// host memory or in a scratch file). It is read a slab of whole z slices at a time
/// ([`VolumeSlabs`]): [`write_outputs`](Self::write_outputs) and
/// [`crate::io::write_volume`] write it, in any format, holding one slab of host memory; a
/// caller can visit the slabs itself, or take the whole volume with
/// [`into_reconstruction`](Self::into_reconstruction).
pub struct Solved<'a> {
    pub(super) ctx: &'a GpuContext,
    pub(super) team: AdmmTeam,
    /// Whether the volume array is the one device's own (one device, no MPI ranks).
    pub(super) single: bool,
    /// The geometry the solver ran on (padded).
    pub(super) padded: Geometry,
    pub(super) padding: Padding,
    pub(super) slab_planes: usize,
    /// The run's report: a [`Reconstruction`] whose `volume` is empty (the volume is read
    /// through this `Solved`).
    pub report: Reconstruction,
}

impl Solved<'_> {
    /// Z slices per slab.
    pub fn slab_planes(&self) -> usize {
        self.slab_planes
    }

    /// The slab planes every MPI rank reads with (the fewest any rank asked for): the ranks
    /// read their slabs together. Collective.
    fn agreed_slab_planes(&self) -> usize {
        (self.team.least(self.slab_planes as u64) as usize).max(1)
    }

    /// Bytes per slab: [`slab_planes`](Self::slab_planes) z slices of the volume the solver
    /// holds (padded, when it is).
    pub fn slab_bytes(&self) -> u64 {
        (self.slab_planes * self.padded.n1 * self.padded.n2 * 4) as u64
    }

    /// Reads `planes` z slices per slab (at least one, at most all).
    pub fn with_slab_planes(mut self, planes: usize) -> Self {
        self.slab_planes = planes.clamp(1, self.padded.n0);
        self
    }

    /// The report with the whole volume in host memory.
    pub fn into_reconstruction(self) -> Result<Reconstruction, ReconError> {
        let [n0, n1, n2] = self.shape();
        let mut volume = Vec::with_capacity(n0 * n1 * n2);
        self.visit_slabs(&mut |_, slab| {
            volume.extend_from_slice(slab);
            Ok(())
        })
        .map_err(ReconError::Read)?;
        Ok(Reconstruction {
            volume,
            ..self.report
        })
    }

    /// Writes the outputs of [`write_outputs`] to `dir`, reading the volume a slab at a time.
    pub fn write_outputs(&self, dir: &std::path::Path) -> Result<Vec<PathBuf>, crate::io::IoError> {
        let mut set = OutputSet::begin(dir, OUTPUT_KIND)?;
        let staged = self.stage_outputs(&mut set);
        Ok(set.complete(staged)?.1)
    }

    /// The part of an MPI rank that writes nothing in the outputs' pass over the volume: it sends
    /// the first rank, which writes them, the slices it keeps, one slab at a time (see
    /// [`VolumeSlabs::visit_slabs`]). Collective; without MPI ranks it reads the volume once.
    pub fn serve_volume(&self) -> Result<(), ReconError> {
        self.visit_slabs(&mut |_, _| Ok(()))
            .map_err(ReconError::Read)
    }

    /// Writes the volume as OME-Zarr to `path` with `options` (the default of the volume's shape
    /// when `None`): the first MPI rank (the only process without ranks) writes the metadata into
    /// `path`, the directory it staged; the other ranks pass `None` and learn the path from it.
    /// Then every rank writes the chunks of its own z slices, a slab at a time, which the ranks
    /// send each other from their y rows (where the solver keeps them), and the ranks exchange
    /// the slices at the boundaries of their parts ([`ZarrPart`]): the files are those one
    /// process writes, byte for byte. Collective.
    pub fn write_zarr(
        &self,
        path: Option<&std::path::Path>,
        options: Option<ZarrOptions>,
    ) -> Result<(), ReconError> {
        let shape = self.shape();
        let options = options.unwrap_or_else(|| ZarrOptions::for_shape(shape));
        let created = path.map(|p| create_store(p, shape, self.report.voxel_size(), options));
        let ready = match &created {
            Some(Ok(())) => path,
            _ => None,
        };
        // Every rank takes part in the exchange, the first also when it failed.
        let shared = self.team.first_rank_path(ready);
        if let Some(Err(e)) = created {
            return Err(e.into());
        }
        let path = shared.ok_or_else(|| {
            ReconError::Read("the first MPI rank could not create the OME-Zarr directory".into())
        })?;
        let z0 = self.padding.volume[0][0];
        let bounds = self.team.volume_part_bounds(z0..z0 + shape[0]);
        let rank = self.team.rank();
        let mut part = ZarrPart::open(&path, shape, options, &bounds, rank)?;
        let g = &self.padded;
        let mine = z0 + bounds[rank]..z0 + bounds[rank + 1];
        // Every rank reads as many slabs of the same size (the ranks send each other their rows
        // of them); those beyond a rank's part are empty.
        let slab_planes = self.agreed_slab_planes();
        let slabs = bounds
            .windows(2)
            .map(|w| (w[1] - w[0]).div_ceil(slab_planes))
            .max()
            .unwrap_or(0);
        let mut cropped = Vec::new();
        for i in 0..slabs {
            let start = (mine.start + i * slab_planes).min(mine.end);
            let end = (start + slab_planes).min(mine.end);
            let slab = self
                .team
                .own_volume_slab(self.ctx, start..end)
                .map_err(|e| {
                    ReconError::Read(format!("reading slices {start}..{end} of the volume: {e}"))
                })?;
            let images = match [g.n1, g.n2] == [shape[1], shape[2]] {
                true => &slab[..],
                false => {
                    cropped.clear();
                    self.padding
                        .crop_into(&slab, end - start, g, shape, &mut cropped);
                    &cropped[..]
                }
            };
            for image in images.chunks(shape[1] * shape[2]) {
                part.push_image(image)?;
            }
            // The slab and, at most, everything the part held while taking it.
            self.team
                .note_held(4 * (slab.len() + cropped.len()) as u64 + part.held_bytes());
        }
        let held = part.finish(&mut |message| Ok(self.team.send_to_one(message)))?;
        self.team.note_held(held);
        Ok(())
    }

    /// Writes the outputs of [`stage_outputs_as`] with the volume in `formats` on every MPI rank
    /// at once (collective; without ranks, this process alone): the first rank stages them in
    /// `set` (the others pass `None`). `recon.zarr` is written by every rank in parallel
    /// ([`write_zarr`](Self::write_zarr), with `zarr` its options) into the first rank's staged
    /// directory, which appears with the rest of the set at its commit; the other files by the
    /// first rank from every rank's slices, a slab at a time.
    pub fn stage_outputs_on_ranks(
        &self,
        mut set: Option<&mut OutputSet>,
        formats: &[StackFormat],
        zarr: Option<ZarrOptions>,
    ) -> Result<(), ReconError> {
        if formats.contains(&StackFormat::Zarr) {
            let staged = match set.as_deref_mut() {
                Some(set) => Some(set.stage(volume_file_name(StackFormat::Zarr))?),
                None => None,
            };
            self.write_zarr(staged.as_deref(), zarr)?;
        }
        let rest: Vec<StackFormat> = formats
            .iter()
            .copied()
            .filter(|f| *f != StackFormat::Zarr)
            .collect();
        match set {
            Some(set) => Ok(stage_outputs_as(set, &self.report, self, &rest)?),
            None => self.serve_volume(),
        }
    }

    /// The most bytes of the volume each MPI rank held while its slabs were read, in rank order
    /// (see [`AdmmTeam::slab_ledger`]), with the bytes of its share; one entry without ranks.
    /// Collective.
    pub fn slab_ledger(&self) -> Vec<(u64, u64)> {
        self.team
            .slab_ledger()
            .into_iter()
            .enumerate()
            .map(|(rank, held)| (held, self.team.volume_share_bytes(rank)))
            .collect()
    }

    /// Stages the outputs of [`write_outputs`] in `set` (which may hold other files of the run).
    pub fn stage_outputs(&self, set: &mut OutputSet) -> Result<(), crate::io::IoError> {
        stage_outputs(set, &self.report, self)
    }

    /// [`stage_outputs`](Self::stage_outputs) with the volume in `formats`
    /// ([`stage_outputs_as`]).
    pub fn stage_outputs_as(
        &self,
        set: &mut OutputSet,
        formats: &[StackFormat],
    ) -> Result<(), crate::io::IoError> {
        stage_outputs_as(set, &self.report, self, formats)
    }
}

impl VolumeSlabs for Solved<'_> {
    fn shape(&self) -> [usize; 3] {
        let g = &self.report.geometry;
        [g.n0, g.n1, g.n2]
    }

    /// Under MPI collective: every rank calls it (the ranks that write nothing through
    /// [`Solved::serve_volume`]), and only the first rank's `visit` sees the slabs.
    fn visit_slabs(&self, visit: &mut SlabVisitor<'_>) -> Result<(), String> {
        let g = &self.padded;
        let shape = self.shape();
        // The slices of the unpadded volume, [z0, z0 + n0) of the padded one.
        let z0 = self.padding.volume[0][0];
        // Every rank reads the same slabs.
        let slab_planes = self.agreed_slab_planes();
        let mut cropped = Vec::new();
        for start in (z0..z0 + shape[0]).step_by(slab_planes) {
            let end = (start + slab_planes).min(z0 + shape[0]);
            let runs = self
                .team
                .volume_slab(self.ctx, start..end)
                .map_err(|e| format!("reading slices {start}..{end} of the volume: {e}"))?;
            for (first, slab) in runs {
                if [g.n1, g.n2] == [shape[1], shape[2]] {
                    visit(first - z0, &slab)?;
                } else {
                    cropped.clear();
                    let planes = slab.len() / (g.n1 * g.n2);
                    self.padding
                        .crop_into(&slab, planes, g, shape, &mut cropped);
                    visit(first - z0, &cropped)?;
                }
            }
        }
        Ok(())
    }
}

impl VolumeSlabs for Reconstruction {
    fn shape(&self) -> [usize; 3] {
        let g = &self.geometry;
        [g.n0, g.n1, g.n2]
    }

    fn visit_slabs(&self, visit: &mut SlabVisitor<'_>) -> Result<(), String> {
        visit(0, &self.volume)
    }
}

/// The kind of the [`OutputSet`] of a reconstruction ([`write_outputs`]).
pub const OUTPUT_KIND: &str = "reconstruct";

/// Every file [`stage_outputs_as`] may write (`convergence.png` only for a run with reports).
pub const OUTPUT_NAMES: [&str; 8] = [
    "recon.tif",
    "recon.h5",
    "recon.zarr",
    "report.json",
    "preview_xy.png",
    "preview_xz.png",
    "preview_yz.png",
    "convergence.png",
];

/// Writes `DIR/recon.tif` (float32, one page per z slice), `DIR/recon.h5` (`/volume`), `DIR/report.json` (geometry,
/// parameters, device, per-iteration Lagrangian terms, times, memory), `DIR/preview_{xy,xz,yz}.png`
/// and `DIR/convergence.png` (the per-iteration reports, see [`crate::plot::write_convergence_png`])
/// as one [`OutputSet`] of kind [`OUTPUT_KIND`]: they appear together once all are complete, or
/// the previous ones stay. Returns the paths written.
pub fn write_outputs(
    dir: &std::path::Path,
    rec: &Reconstruction,
) -> Result<Vec<PathBuf>, crate::io::IoError> {
    let mut set = OutputSet::begin(dir, OUTPUT_KIND)?;
    let staged = stage_outputs(&mut set, rec, rec);
    Ok(set.complete(staged)?.1)
}

/// Stages the files of [`write_outputs`] of the report `rec` and a volume read a slab at a time
/// in `set`.
pub fn stage_outputs(
    set: &mut OutputSet,
    rec: &Reconstruction,
    volume: &dyn VolumeSlabs,
) -> Result<(), crate::io::IoError> {
    stage_outputs_as(set, rec, volume, &DEFAULT_FORMATS)
}

/// The formats [`stage_outputs`] writes the volume in: `recon.tif` and `recon.h5`.
pub const DEFAULT_FORMATS: [StackFormat; 2] = [StackFormat::Tiff, StackFormat::Hdf5];

/// The name of the volume's file in `format`: `recon.tif`, `recon.h5`, `recon.zarr` or
/// `recon.npy`.
pub fn volume_file_name(format: StackFormat) -> &'static str {
    match format {
        StackFormat::Tiff => "recon.tif",
        StackFormat::Hdf5 => "recon.h5",
        StackFormat::Zarr => "recon.zarr",
        StackFormat::Npy => "recon.npy",
    }
}

/// [`stage_outputs`] with the volume in each of `formats` (named by [`volume_file_name`]),
/// calibrated with the report's [`Reconstruction::voxel_size`].
pub fn stage_outputs_as(
    set: &mut OutputSet,
    rec: &Reconstruction,
    volume: &dyn VolumeSlabs,
    formats: &[StackFormat],
) -> Result<(), crate::io::IoError> {
    use crate::io::{write_calibrated_volume_files, IoError};
    use crate::plot::{write_convergence_png, write_slice_previews};
    // One pass over the volume writes every file and gathers the previews' slices.
    let mut files = Vec::with_capacity(formats.len());
    for &format in formats {
        files.push((set.stage(volume_file_name(format))?, format));
    }
    let files: Vec<(&std::path::Path, StackFormat)> =
        files.iter().map(|(p, f)| (p.as_path(), *f)).collect();
    let voxel_size = rec.voxel_size();
    let slices = write_calibrated_volume_files(&files, volume, voxel_size)?;
    let report = set.stage("report.json")?;
    let provenance = rec.provenance.as_ref();
    let json = serde_json::json!({
        "lamino_version": env!("CARGO_PKG_VERSION"),
        "input": provenance.map(|p| &p.input),
        "command_line": provenance.map(|p| &p.command_line),
        "started": provenance.map(|p| &p.started),
        // null: unknown, the volume is in voxel units.
        "voxel_size": voxel_size,
        "reconstruction": rec,
    });
    let text = serde_json::to_vec_pretty(&json).map_err(|e| IoError::Write {
        path: set.final_path("report.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(&report, text).map_err(|e| IoError::Write {
        path: set.final_path("report.json"),
        reason: e.to_string(),
    })?;
    let previews = write_slice_previews(set.staging_dir(), "preview", volume.shape(), slices)
        .map_err(|e| e.into_io(set.dir()))?;
    for path in previews {
        if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            set.stage(name)?;
        }
    }
    if !rec.reports.is_empty() {
        let png = set.stage("convergence.png")?;
        write_convergence_png(&png, &rec.reports, rec.params.convergence.as_ref())
            .map_err(|e| e.into_io(&set.final_path("convergence.png")))?;
    }
    Ok(())
}
