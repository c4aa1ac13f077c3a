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
//! One writer, [`ZarrPart`], writes a run of z slices of the volume: all of them in one process
//! ([`ZarrPart::create_whole`]), or each MPI rank its own ([`ZarrPart::open`]), the files the
//! same byte for byte. The slices arrive one at a time, in order ([`ZarrPart::push_image`]);
//! each level holds one row of chunks (`chunk[0]` slices) and stores it once complete, so the
//! host holds a few chunk rows, never the volume.

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

fn error(path: &Path, doing: &str, e: impl std::fmt::Display) -> IoError {
    IoError::Write {
        path: path.into(),
        reason: format!("{doing}: {e}"),
    }
}

/// Stores the whole `n1 x n2` slices `z` of level `k` (`row`, in z order) in its `array`.
fn store_slices(
    array: &Array<FilesystemStore>,
    path: &Path,
    k: usize,
    z: std::ops::Range<usize>,
    [n1, n2]: [usize; 2],
    row: &[f32],
) -> Result<(), IoError> {
    let subset = [z.start as u64..z.end as u64, 0..n1 as u64, 0..n2 as u64];
    array.store_array_subset(&subset, row).map_err(|e| {
        error(
            path,
            &format!("writing slices {}..{} of level {k}", z.start, z.end),
            e,
        )
    })
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

/// Writes the metadata of an OME-Zarr directory `path` (which must not exist) for a volume of
/// `shape` with voxels of `voxel_size`: the group with its `multiscales` and each level's array.
pub fn create_store(
    path: &Path,
    shape: [usize; 3],
    voxel_size: Option<PixelSize>,
    options: ZarrOptions,
) -> Result<(), IoError> {
    if path.exists() {
        return Err(error(path, "creating the OME-Zarr directory", "it exists"));
    }
    std::fs::create_dir(path).map_err(|e| error(path, "creating the OME-Zarr directory", e))?;
    let store =
        Arc::new(FilesystemStore::new(path).map_err(|e| error(path, "opening the Zarr store", e))?);
    let levels = pyramid_shapes(shape, options.min_side).len();
    let name = path
        .file_stem()
        .and_then(|n| n.to_str())
        .unwrap_or("volume");
    let mut group = GroupBuilder::new()
        .build(store, "/")
        .map_err(|e| error(path, "creating the Zarr group", e))?;
    group
        .attributes_mut()
        .insert("ome".into(), ome_metadata(name, levels, voxel_size));
    group
        .store_metadata()
        .map_err(|e| error(path, "writing the group's metadata", e))?;
    for (k, array) in level_arrays(path, shape, options)?.into_iter().enumerate() {
        array
            .0
            .store_metadata()
            .map_err(|e| error(path, &format!("writing level {k}'s metadata"), e))?;
    }
    Ok(())
}

/// A level's array with its shape and chunk height.
type LevelArray = (Array<FilesystemStore>, [usize; 3], usize);

/// The arrays of the levels of the store `path` ([`create_store`]), with each level's shape and
/// chunk height, to write chunks into (building them writes nothing).
fn level_arrays(
    path: &Path,
    shape: [usize; 3],
    options: ZarrOptions,
) -> Result<Vec<LevelArray>, IoError> {
    let store =
        Arc::new(FilesystemStore::new(path).map_err(|e| error(path, "opening the Zarr store", e))?);
    let codec = Arc::new(
        GzipCodec::new(options.gzip_level)
            .map_err(|e| error(path, "choosing the gzip level", e))?,
    );
    let mut levels = Vec::new();
    for (k, level_shape) in pyramid_shapes(shape, options.min_side)
        .into_iter()
        .enumerate()
    {
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
        levels.push((array, level_shape, chunk[0] as usize));
    }
    Ok(levels)
}

/// What [`ZarrPart::finish`] exchanges through: sends this part's message (to a part, values)
/// if any and returns what every part sent this one, concatenated in part order.
pub type PartExchange<'a> = dyn FnMut(Option<(usize, Vec<f32>)>) -> Result<Vec<f32>, String> + 'a;

/// One level of a [`ZarrPart`].
struct PartLevel {
    array: Array<FilesystemStore>,
    shape: [usize; 3],
    /// Chunk height.
    rows: usize,
    /// Part `r` computes planes `bounds[r]..bounds[r + 1]` of this level.
    bounds: Vec<usize>,
    /// The row of chunks being filled, from plane `z0`.
    row: Vec<f32>,
    z0: usize,
    /// This part's planes before its first row start: they complete an earlier part's row.
    heads: Vec<f32>,
    /// The y/x-binned even plane waiting for its odd partner.
    pending: Option<Vec<f32>>,
    /// The y/x-binned first plane when it is odd: the part of its even partner needs it.
    first_odd: Option<Vec<f32>>,
}

impl PartLevel {
    fn held(&self) -> usize {
        let side = |p: &Option<Vec<f32>>| p.as_ref().map_or(0, Vec::len);
        self.row.len() + self.heads.len() + side(&self.pending) + side(&self.first_odd)
    }
}

/// The part of the parts `bounds` (`bounds[r]..bounds[r + 1]`, some maybe empty) holding `p`.
fn part_of(bounds: &[usize], p: usize) -> usize {
    bounds.partition_point(|&b| b <= p).saturating_sub(1)
}

/// Writes the chunks of one of several parts of an OME-Zarr volume whose metadata exists
/// ([`create_store`]), each part (an MPI rank) holding a run of z slices of level 0, or of the
/// one part that is the whole volume ([`create_whole`](Self::create_whole)): the files are byte
/// for byte the same however the volume is divided, and no chunk is written by two parts.
///
/// Part `r` pushes its slices `bounds[r]..bounds[r + 1]` in order ([`push_image`]
/// (Self::push_image)); it computes the slice `p / 2` of the next level when it holds slice `p`
/// (even) of a level, so level `k + 1`'s runs are `ceil(bounds[r] / 2)..` of level `k`'s. A row
/// of chunks belongs to the part holding its first slice: the part stores its rows as they
/// complete, holding one row per level, and keeps aside the slices before its first row start
/// (its *heads*, of a row an earlier part owns) and the binned odd first slice whose even
/// partner an earlier part holds. Then ([`finish`](Self::finish)) the parts exchange, level by
/// level, first the odd partners (which complete the last slice of the next level on the part
/// that receives one), then the heads (which complete the last row of the part that owns it):
/// only the planes at the parts' boundaries move.
pub struct ZarrPart {
    path: PathBuf,
    part: usize,
    levels: Vec<PartLevel>,
    /// Level 0's next slice.
    next: usize,
    /// The most values the part held at once (rows, heads, pending planes).
    most_held: usize,
}

impl std::fmt::Debug for ZarrPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZarrPart")
            .field("path", &self.path)
            .field("part", &self.part)
            .finish()
    }
}

impl ZarrPart {
    /// Creates the OME-Zarr directory `path` (which must not exist) for a volume of `shape` with
    /// voxels of `voxel_size`, writes its metadata and returns the one part that is the whole
    /// volume (what one process writes alone; [`finish_alone`](Self::finish_alone) ends it).
    pub fn create_whole(
        path: &Path,
        shape: [usize; 3],
        voxel_size: Option<PixelSize>,
        options: ZarrOptions,
    ) -> Result<Self, IoError> {
        create_store(path, shape, voxel_size, options)?;
        Self::open(path, shape, options, &[0, shape[0]], 0)
    }

    /// The part `part` of the parts `bounds` (`bounds[0] = 0 <= bounds[1] <= ... = n0`, the
    /// slices of level 0 each part holds) of the store `path` of a volume of `shape`, written
    /// with `options` (those the store was created with).
    pub fn open(
        path: &Path,
        shape: [usize; 3],
        options: ZarrOptions,
        bounds: &[usize],
        part: usize,
    ) -> Result<Self, IoError> {
        let ordered = bounds.windows(2).all(|w| w[0] <= w[1]);
        if bounds.first() != Some(&0) || bounds.last() != Some(&shape[0]) || !ordered {
            return Err(error(
                path,
                "dividing the volume among the writers",
                format!(
                    "parts {bounds:?} do not cover the {} slices in order",
                    shape[0]
                ),
            ));
        }
        if part + 1 >= bounds.len() {
            return Err(error(
                path,
                "dividing the volume among the writers",
                format!("part {part} of {}", bounds.len() - 1),
            ));
        }
        let mut bounds = bounds.to_vec();
        let mut levels = Vec::new();
        for (array, shape, rows) in level_arrays(path, shape, options)? {
            let next = bounds.iter().map(|b| b.div_ceil(2)).collect();
            levels.push(PartLevel {
                array,
                shape,
                rows,
                bounds: std::mem::replace(&mut bounds, next),
                row: Vec::new(),
                z0: 0,
                heads: Vec::new(),
                pending: None,
                first_odd: None,
            });
        }
        let next = levels[0].bounds[part];
        Ok(Self {
            path: path.into(),
            part,
            levels,
            next,
            most_held: 0,
        })
    }

    /// Appends this part's next z slice (`n1 x n2`, row-major) of level 0.
    pub fn push_image(&mut self, image: &[f32]) -> Result<(), IoError> {
        let level = &self.levels[0];
        let [_, n1, n2] = level.shape;
        let end = level.bounds[self.part + 1];
        if image.len() != n1 * n2 || self.next == end {
            return Err(error(
                &self.path,
                "writing a slice",
                format!(
                    "slice {} of {} values for part {} (slices {}..{end}) of slices of {n1} x \
                     {n2}",
                    self.next,
                    image.len(),
                    self.part,
                    level.bounds[self.part]
                ),
            ));
        }
        self.next += 1;
        self.push(0, self.next - 1, image.to_vec())
    }

    /// Adds slice `p` of level `k`, computed here: to the next level's slices and to the rows.
    fn push(&mut self, k: usize, p: usize, plane: Vec<f32>) -> Result<(), IoError> {
        let [n0, n1, n2] = self.levels[k].shape;
        if k + 1 < self.levels.len() {
            let binned = bin_plane(&plane, n1, n2);
            if p % 2 == 1 {
                match self.levels[k].pending.take() {
                    Some(even) => self.push(k + 1, p / 2, pair_mean(&even, &binned))?,
                    // The first slice of this part: its partner is on an earlier part.
                    None => self.levels[k].first_odd = Some(binned),
                }
            } else if p + 1 == n0 {
                self.push(k + 1, p / 2, binned)?;
            } else {
                self.levels[k].pending = Some(binned);
            }
        }
        let level = &mut self.levels[k];
        let row_start = p / level.rows * level.rows;
        if row_start < level.bounds[self.part] {
            level.heads.extend_from_slice(&plane);
        } else {
            if level.row.is_empty() {
                level.z0 = row_start;
            }
            level.row.extend_from_slice(&plane);
        }
        self.note_held();
        self.store_if_complete(k)
    }

    fn note_held(&mut self) {
        let held = self.levels.iter().map(PartLevel::held).sum();
        self.most_held = self.most_held.max(held);
    }

    /// Stores level `k`'s row once it holds every slice of it.
    fn store_if_complete(&mut self, k: usize) -> Result<(), IoError> {
        let level = &mut self.levels[k];
        let [n0, n1, n2] = level.shape;
        let held = level.row.len() / (n1 * n2);
        let z1 = (level.z0 + level.rows).min(n0);
        if held == 0 || level.z0 + held < z1 {
            return Ok(());
        }
        store_slices(
            &level.array,
            &self.path,
            k,
            level.z0..z1,
            [n1, n2],
            &level.row,
        )?;
        level.row.clear();
        Ok(())
    }

    /// The most bytes this part held at once so far (rows, heads, slices waiting for partners).
    pub fn held_bytes(&self) -> u64 {
        4 * self.most_held as u64
    }

    /// How many exchanges [`finish`](Self::finish) makes (the same on every part).
    pub fn steps(&self) -> usize {
        2 * self.levels.len()
    }

    /// What this part sends in exchange `step` (the part it goes to and its values), if any:
    /// step `2k` the binned odd first slice of level `k`, step `2k + 1` its heads of level `k`.
    pub fn outgoing(&mut self, step: usize) -> Option<(usize, Vec<f32>)> {
        let level = self.levels.get_mut(step / 2)?;
        let first = level.bounds[self.part];
        match step % 2 {
            0 => {
                let plane = level.first_odd.take()?;
                Some((part_of(&level.bounds, first - 1), plane))
            }
            _ if level.heads.is_empty() => None,
            _ => {
                let row_start = first / level.rows * level.rows;
                let heads = std::mem::take(&mut level.heads);
                Some((part_of(&level.bounds, row_start), heads))
            }
        }
    }

    /// Takes what the other parts sent this one in exchange `step`, in part order.
    pub fn incoming(&mut self, step: usize, values: Vec<f32>) -> Result<(), IoError> {
        let k = step / 2;
        if values.is_empty() || k >= self.levels.len() {
            return Ok(());
        }
        if step % 2 == 1 {
            self.levels[k].row.extend_from_slice(&values);
            self.note_held();
            return self.store_if_complete(k);
        }
        let has_next = k + 1 < self.levels.len();
        let level = &mut self.levels[k];
        let last = level.bounds[self.part + 1].wrapping_sub(1);
        match level.pending.take() {
            Some(even) if even.len() == values.len() && has_next => {
                self.push(k + 1, last / 2, pair_mean(&even, &values))
            }
            _ => Err(error(
                &self.path,
                &format!("completing slice {} of level {}", last / 2, k + 1),
                "a partner slice came that no slice here waits for",
            )),
        }
    }

    /// Runs the exchanges ([`outgoing`](Self::outgoing), [`incoming`](Self::incoming)) through
    /// `exchange`, which sends one part's message and returns what every part sent this one,
    /// concatenated in part order (collective: every part calls it as often), and checks that
    /// every row this part owns was stored. Returns the most bytes the part held at once.
    pub fn finish(mut self, exchange: &mut PartExchange<'_>) -> Result<u64, IoError> {
        for step in 0..self.steps() {
            let message = self.outgoing(step);
            let values = exchange(message)
                .map_err(|e| error(&self.path, "exchanging slices with the other writers", e))?;
            self.incoming(step, values)?;
        }
        let bounds = &self.levels[0].bounds;
        let (start, end) = (bounds[self.part], bounds[self.part + 1]);
        if self.next != end {
            return Err(error(
                &self.path,
                "finishing the volume",
                format!(
                    "part {} (slices {start}..{end} of level 0): {} of the {} slices announced",
                    self.part,
                    self.next - start,
                    end - start
                ),
            ));
        }
        for (k, level) in self.levels.iter().enumerate() {
            if !level.row.is_empty() || level.pending.is_some() {
                return Err(error(
                    &self.path,
                    "finishing the volume",
                    format!(
                        "part {} of level {k}: a row or a slice of the pyramid is incomplete",
                        self.part
                    ),
                ));
            }
        }
        Ok(self.held_bytes())
    }

    /// Finishes the part that is the whole volume ([`create_whole`](Self::create_whole)): it has
    /// no other part to exchange slices with (one of several parts finishes through theirs,
    /// [`finish`](Self::finish)). Returns the most bytes it held at once.
    pub fn finish_alone(self) -> Result<u64, IoError> {
        self.finish(&mut |_| Ok(Vec::new()))
    }
}

/// The mean of two y/x-binned slices: the next level's slice.
fn pair_mean(even: &[f32], odd: &[f32]) -> Vec<f32> {
    even.iter().zip(odd).map(|(a, b)| (a + b) / 2.0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under `dir` by relative path, with its bytes.
    fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                match path.is_dir() {
                    true => stack.push(path),
                    false => {
                        let bytes = std::fs::read(&path).unwrap();
                        files.push((path.strip_prefix(dir).unwrap().into(), bytes));
                    }
                }
            }
        }
        files.sort();
        files
    }

    /// `parts` writing a volume of `shape` divided at `bounds` (each part's exchanges routed
    /// here, as MPI ranks route theirs) write the files one writer writes; returns the most
    /// bytes a part held.
    fn parts_write_the_whole(shape: [usize; 3], options: ZarrOptions, bounds: &[usize]) -> u64 {
        let [n0, n1, n2] = shape;
        let volume: Vec<f32> = (0..n0 * n1 * n2)
            .map(|i| ((i * 7919) % 1013) as f32 / 37.0 - 11.0)
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let whole = dir.path().join("whole.zarr");
        let mut writer = ZarrPart::create_whole(&whole, shape, None, options).unwrap();
        for image in volume.chunks(n1 * n2) {
            writer.push_image(image).unwrap();
        }
        let mut most = writer.finish_alone().unwrap();
        let split = dir.path().join("split").join("whole.zarr");
        std::fs::create_dir(split.parent().unwrap()).unwrap();
        create_store(&split, shape, None, options).unwrap();
        let count = bounds.len() - 1;
        let mut parts: Vec<ZarrPart> = (0..count)
            .map(|r| ZarrPart::open(&split, shape, options, bounds, r).unwrap())
            .collect();
        for (r, part) in parts.iter_mut().enumerate() {
            for z in bounds[r]..bounds[r + 1] {
                part.push_image(&volume[z * n1 * n2..(z + 1) * n1 * n2])
                    .unwrap();
            }
        }
        for step in 0..parts[0].steps() {
            let mut inbox = vec![Vec::new(); count];
            for part in parts.iter_mut() {
                if let Some((to, values)) = part.outgoing(step) {
                    inbox[to].extend(values);
                }
            }
            for (part, values) in parts.iter_mut().zip(inbox) {
                part.incoming(step, values).unwrap();
            }
        }
        for part in parts {
            most = most.max(part.finish(&mut |_| Ok(Vec::new())).unwrap());
        }
        let (a, b) = (tree(&whole), tree(&split));
        assert!(
            a.len() > 3,
            "{:?}",
            a.iter().map(|f| &f.0).collect::<Vec<_>>()
        );
        assert!(
            a.iter().map(|f| &f.0).eq(b.iter().map(|f| &f.0)),
            "{bounds:?}: files {:?} vs {:?}",
            a.iter().map(|f| &f.0).collect::<Vec<_>>(),
            b.iter().map(|f| &f.0).collect::<Vec<_>>()
        );
        for ((name, x), (_, y)) in a.iter().zip(&b) {
            assert!(x == y, "{bounds:?}: {} differs", name.display());
        }
        most
    }

    #[test]
    fn parts_of_any_division_write_the_files_of_one_writer() {
        // Three levels (27, 14, 7 slices), rows of 4 slices: parts that start on odd slices,
        // inside a row, empty parts, one part holding all, and parts within one row.
        let options = ZarrOptions {
            chunk: [4, 8, 8],
            min_side: 3,
            gzip_level: 4,
        };
        let shape = [27, 13, 12];
        for bounds in [
            vec![0, 27],
            vec![0, 14, 27],
            vec![0, 9, 18, 27],
            vec![0, 5, 5, 11, 27],
            vec![0, 1, 2, 3, 27],
            vec![0, 27, 27],
            vec![0, 0, 13, 26, 27],
        ] {
            let most = parts_write_the_whole(shape, options, &bounds);
            // A part holds at most, per level, its last row and its heads (a row each) and the
            // binned planes waiting for their partners.
            let bound: usize = pyramid_shapes(shape, options.min_side)
                .iter()
                .map(|[n0, n1, n2]| (2 * options.chunk[0].min(*n0) + 2) * n1 * n2 * 4)
                .sum();
            assert!(most as usize <= bound, "{bounds:?}: {most} > {bound}");
        }
    }

    #[test]
    fn a_division_that_misses_slices_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.zarr");
        let options = ZarrOptions::for_shape([8, 4, 4]);
        create_store(&path, [8, 4, 4], None, options).unwrap();
        for (bounds, part) in [(vec![0, 4], 0), (vec![0, 6, 4, 8], 0), (vec![0, 8], 1)] {
            let e = ZarrPart::open(&path, [8, 4, 4], options, &bounds, part).unwrap_err();
            assert!(e.to_string().contains("dividing the volume"), "{e}");
        }
        let mut part = ZarrPart::open(&path, [8, 4, 4], options, &[0, 4, 8], 1).unwrap();
        part.push_image(&[0.0; 16]).unwrap();
        let e = part
            .finish(&mut |_| Ok(Vec::new()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("5 came") || e.contains("announced"), "{e}");
    }
}
