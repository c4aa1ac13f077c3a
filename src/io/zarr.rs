//! OME-Zarr volumes (`recon.zarr`, what napari opens natively and what volumes too large for one
//! TIFF need): a Zarr v3 group with the OME-NGFF 0.5 `multiscales` metadata and one float32
//! array per resolution level, chunked and gzip-compressed, written through `zarrs`.
//!
//! Level `k` (array `k`) is the volume binned `2^k` times along z, y and x (the mean of each
//! `2 x 2 x 2` block; a block cut by an odd edge averages the voxels it has, so a level's side is
//! `ceil(n / 2^k)`). Levels are added while the smallest side of the last is above
//! [`ZarrOptions::min_side`]. Each level's coordinate transformations are its voxel size (a scale
//! `2^k` times the volume's) and the shift of a binned voxel's centre (a translation of
//! `(2^k - 1) / 2` voxels of level 0), so every level lies on the same physical grid.
//!
//! The volume arrives a z slice at a time, in order ([`ZarrWriter::write_image`]); each level
//! holds one row of chunks (`chunk[0]` slices) and stores it once complete, so the host holds a
//! few chunk rows, never the volume.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use zarrs::array::codec::GzipCodec;
use zarrs::array::{data_type, Array, ArrayBuilder};
use zarrs::filesystem::FilesystemStore;
use zarrs::group::GroupBuilder;

use super::IoError;
use super::PixelSize;

/// The shape of a volume's chunks and pyramid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZarrOptions {
    /// Chunk shape `(z, y, x)` of level 0 (clamped to each level's shape).
    pub chunk: [usize; 3],
    /// Levels are added while the smallest side of the last is above this.
    pub min_side: usize,
    /// gzip level, 0 to 9.
    pub gzip_level: u32,
}

/// Bytes one row of chunks of level 0 holds at most by default: 64 slices of 1024², and fewer
/// slices for wider volumes.
const CHUNK_ROW_BYTES: usize = 256 << 20;

impl ZarrOptions {
    /// Chunks of up to `64 x 256 x 256` (fewer slices where a row of chunks would exceed 256
    /// MiB), levels down to a smallest side of 64, gzip level 4 (most of level 9's ratio on
    /// noisy float data at a fraction of its time).
    pub fn for_shape([n0, n1, n2]: [usize; 3]) -> Self {
        let plane = (n1 * n2 * 4).max(1);
        let slices = (CHUNK_ROW_BYTES / plane).clamp(1, 64);
        Self {
            chunk: [slices.min(n0), n1.min(256), n2.min(256)],
            min_side: 64,
            gzip_level: 4,
        }
    }
}

/// The shapes of the levels of a volume of `shape`: level 0 is `shape`, each next one half of
/// the last (rounded up), while the last's smallest side is above `min_side`.
pub fn pyramid_shapes(shape: [usize; 3], min_side: usize) -> Vec<[usize; 3]> {
    let mut shapes = vec![shape];
    while let Some(&last) = shapes.last() {
        if last.iter().min().is_none_or(|&m| m <= min_side.max(1)) {
            break;
        }
        shapes.push(last.map(|n| n.div_ceil(2)));
    }
    shapes
}

/// The OME-NGFF 0.5 `ome` attributes of a volume with `levels` levels and voxels of
/// `voxel_size` (`None`: uncalibrated, scale 1 and no unit).
pub fn ome_metadata(name: &str, levels: usize, voxel_size: Option<PixelSize>) -> serde_json::Value {
    let size = voxel_size.map_or(1.0, |v| v.value);
    let axes: Vec<serde_json::Value> = ["z", "y", "x"]
        .iter()
        .map(|axis| match voxel_size {
            Some(v) => json!({ "name": axis, "type": "space", "unit": v.unit.name() }),
            None => json!({ "name": axis, "type": "space" }),
        })
        .collect();
    let datasets: Vec<serde_json::Value> = (0..levels)
        .map(|k| {
            let factor = (1u64 << k) as f64;
            let (scale, shift) = ([size * factor; 3], [(factor - 1.0) / 2.0 * size; 3]);
            json!({
                "path": k.to_string(),
                "coordinateTransformations": [
                    { "type": "scale", "scale": scale },
                    { "type": "translation", "translation": shift },
                ],
            })
        })
        .collect();
    json!({
        "version": "0.5",
        "multiscales": [{
            "name": name,
            "axes": axes,
            "datasets": datasets,
            "type": "mean",
            "metadata": { "description": "2 x 2 x 2 block means", "method": "lamino" },
        }],
    })
}

/// One resolution level being written: its array and the row of chunks being filled.
struct Level {
    array: Array<FilesystemStore>,
    shape: [usize; 3],
    rows: usize,
    /// Slices `z0..` of the row being filled.
    row: Vec<f32>,
    z0: usize,
    /// The y/x-binned even slice of a pair, waiting for its odd partner (next level's input).
    pending: Option<Vec<f32>>,
}

/// Writes a volume to an OME-Zarr directory a z slice at a time (see the module docs).
pub struct ZarrWriter {
    path: PathBuf,
    levels: Vec<Level>,
    written: usize,
}

impl std::fmt::Debug for ZarrWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZarrWriter")
            .field("path", &self.path)
            .finish()
    }
}

fn error(path: &Path, doing: &str, e: impl std::fmt::Display) -> IoError {
    IoError::Write {
        path: path.into(),
        reason: format!("{doing}: {e}"),
    }
}

/// `plane` (`n1 x n2`) binned 2 x 2 in y and x: the mean of each block's voxels (fewer at an
/// odd edge).
fn bin_plane(plane: &[f32], n1: usize, n2: usize) -> Vec<f32> {
    let (m1, m2) = (n1.div_ceil(2), n2.div_ceil(2));
    let mut out = vec![0.0; m1 * m2];
    for (y, row) in out.chunks_mut(m2).enumerate() {
        let ys = 2 * y..(2 * y + 2).min(n1);
        for (x, value) in row.iter_mut().enumerate() {
            let xs = 2 * x..(2 * x + 2).min(n2);
            let count = (ys.len() * xs.len()) as f64;
            let sum: f64 = ys
                .clone()
                .flat_map(|yy| plane[yy * n2 + xs.start..yy * n2 + xs.end].iter())
                .map(|&v| f64::from(v))
                .sum();
            *value = (sum / count) as f32;
        }
    }
    out
}

impl ZarrWriter {
    /// Creates the OME-Zarr directory `path` (which must not exist) for a volume of `shape`
    /// with voxels of `voxel_size`, and writes its metadata.
    pub fn create(
        path: &Path,
        shape: [usize; 3],
        voxel_size: Option<PixelSize>,
        options: ZarrOptions,
    ) -> Result<Self, IoError> {
        if path.exists() {
            return Err(error(path, "creating the OME-Zarr directory", "it exists"));
        }
        std::fs::create_dir(path).map_err(|e| error(path, "creating the OME-Zarr directory", e))?;
        let store = Arc::new(
            FilesystemStore::new(path).map_err(|e| error(path, "opening the Zarr store", e))?,
        );
        let shapes = pyramid_shapes(shape, options.min_side);
        let name = path
            .file_stem()
            .and_then(|n| n.to_str())
            .unwrap_or("volume");
        let mut group = GroupBuilder::new()
            .build(store.clone(), "/")
            .map_err(|e| error(path, "creating the Zarr group", e))?;
        group
            .attributes_mut()
            .insert("ome".into(), ome_metadata(name, shapes.len(), voxel_size));
        group
            .store_metadata()
            .map_err(|e| error(path, "writing the group's metadata", e))?;
        let codec = GzipCodec::new(options.gzip_level)
            .map_err(|e| error(path, "choosing the gzip level", e))?;
        let codec = Arc::new(codec);
        let mut levels = Vec::with_capacity(shapes.len());
        for (k, level_shape) in shapes.into_iter().enumerate() {
            let chunk: Vec<u64> = (0..3)
                .map(|a| options.chunk[a].clamp(1, level_shape[a]) as u64)
                .collect();
            let array = ArrayBuilder::new(
                level_shape.map(|n| n as u64).to_vec(),
                chunk.clone(),
                data_type::float32(),
                0.0f32,
            )
            .bytes_to_bytes_codecs(vec![codec.clone()])
            .dimension_names(["z", "y", "x"].into())
            .build(store.clone(), &format!("/{k}"))
            .map_err(|e| error(path, &format!("creating level {k}"), e))?;
            array
                .store_metadata()
                .map_err(|e| error(path, &format!("writing level {k}'s metadata"), e))?;
            levels.push(Level {
                array,
                shape: level_shape,
                rows: chunk[0] as usize,
                row: Vec::new(),
                z0: 0,
                pending: None,
            });
        }
        Ok(Self {
            path: path.into(),
            levels,
            written: 0,
        })
    }

    /// Appends the next z slice (`n1 x n2`, row-major) of level 0.
    pub fn write_image(&mut self, image: &[f32]) -> Result<(), IoError> {
        let [n0, n1, n2] = self.levels[0].shape;
        if image.len() != n1 * n2 || self.written == n0 {
            return Err(error(
                &self.path,
                "writing a slice",
                format!(
                    "slice {} of {} values for a volume of {n0} slices of {n1} x {n2}",
                    self.written,
                    image.len()
                ),
            ));
        }
        self.written += 1;
        self.push(0, image.to_vec())
    }

    /// Adds the next slice of level `k` and what it completes of the levels below.
    fn push(&mut self, k: usize, plane: Vec<f32>) -> Result<(), IoError> {
        let [n0, n1, n2] = self.levels[k].shape;
        if k + 1 < self.levels.len() {
            let binned = bin_plane(&plane, n1, n2);
            let level = &mut self.levels[k];
            let z = level.z0 + level.row.len() / (n1 * n2);
            match level.pending.take() {
                None if z + 1 == n0 => self.push(k + 1, binned)?,
                None => self.levels[k].pending = Some(binned),
                Some(even) => {
                    let pair = even.iter().zip(&binned).map(|(a, b)| (a + b) / 2.0);
                    self.push(k + 1, pair.collect())?;
                }
            }
        }
        let level = &mut self.levels[k];
        level.row.extend_from_slice(&plane);
        let held = level.row.len() / (n1 * n2);
        if held == level.rows || level.z0 + held == n0 {
            let z1 = level.z0 + held;
            let subset = [level.z0 as u64..z1 as u64, 0..n1 as u64, 0..n2 as u64];
            level
                .array
                .store_array_subset(&subset, &level.row[..])
                .map_err(|e| {
                    error(
                        &self.path,
                        &format!("writing slices {}..{z1} of level {k}", level.z0),
                        e,
                    )
                })?;
            level.row.clear();
            level.z0 = z1;
        }
        Ok(())
    }

    /// Checks that every slice came (each level's last row is stored with its last slice).
    pub fn finish(self) -> Result<(), IoError> {
        let n0 = self.levels[0].shape[0];
        if self.written != n0 {
            return Err(error(
                &self.path,
                "finishing the volume",
                format!("{} of the {n0} slices announced", self.written),
            ));
        }
        Ok(())
    }
}
