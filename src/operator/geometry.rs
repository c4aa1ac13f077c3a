//! The laminography geometry: volume and detector sizes, projection angles, tilt and the gridding
//! accuracy, with validation and a small JSON file format.

use std::f64::consts::PI;
use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::gridding::GriddingAxis;
use crate::geometry::Tilt;

/// Default gridding accuracy: the reference's `EPS = 1e-3` (lamino's kernel takes 5 taps per axis at it,
/// the reference's Gaussian 9: docs/operator-method.md, "Gridding kernel").
pub const DEFAULT_EPS: f64 = 1e-3;
/// Smallest supported gridding accuracy: below this f32 arithmetic, not the kernel, limits accuracy.
pub const MIN_EPS: f64 = 1e-6;

fn default_eps() -> f64 {
    DEFAULT_EPS
}

/// Errors of geometry validation and geometry files.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GeometryError {
    /// A size is odd or zero; the centred transforms need even sizes.
    #[error("{name} = {value}: every volume and detector size must be even and at least 2")]
    BadSize { name: &'static str, value: usize },
    /// No projection angles.
    #[error("the geometry has no projection angles")]
    NoAngles,
    /// An angle is NaN or infinite.
    #[error("projection angle {index} is {value}: angles must be finite (radians)")]
    NonFiniteAngle { index: usize, value: f64 },
    /// The tilt is outside (0, pi).
    #[error("phi = {phi} rad: must lie strictly between 0 and pi (pi/2 is plain tomography)")]
    PhiOutOfRange { phi: f64 },
    /// The gridding accuracy is outside the supported range.
    #[error("eps = {eps}: the gridding accuracy must lie in [{MIN_EPS}, 0.1]")]
    BadEps { eps: f64 },
    /// A size product overflows.
    #[error("the geometry's array sizes overflow 64 bits")]
    Overflow,
    /// The rotation axis does not project onto the detector.
    #[error(
        "rotation axis at column {center}: must be finite and within the detector [0, {detw}]"
    )]
    BadCenter { center: f64, detw: usize },
    /// The volume's offset is not finite.
    #[error("volume offset (z, y, x) = {offset:?} voxels: every component must be finite")]
    BadOffset { offset: [f64; 3] },
    /// A sub-volume box does not fit the default volume or the kernels.
    #[error("sub-volume {axis} {start}:{end}: {reason}{}", nearest.as_ref().map_or(String::new(),
        |r| format!("; the nearest valid range is {}:{}", r.start, r.end)))]
    BadBox {
        axis: &'static str,
        start: usize,
        end: usize,
        reason: String,
        /// The valid range nearest to the box's, where there is one (for callers that give
        /// ranges in other units, as the command line's unbinned voxels).
        nearest: Option<Range<usize>>,
    },
    /// The JSON file could not be read or written.
    #[error("geometry file {path}: {reason}")]
    File { path: String, reason: String },
}

/// Volume `(n0, n1, n2) = (z, y, x)` with z the rotation axis, detector `(deth, detw)`, angles
/// `theta` (radians, any list), the rotation axis's [`Tilt`], the column the
/// rotation axis projects onto and the gridding accuracy.
///
/// Public array layouts (row-major): volume `(n0, n1, n2)`, data `(ntheta, deth, detw)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Geometry {
    pub n0: usize,
    pub n1: usize,
    pub n2: usize,
    pub deth: usize,
    pub detw: usize,
    pub theta: Vec<f64>,
    /// Held in files and checkpoints as `phi`, the operator's angle in radians.
    #[serde(rename = "phi")]
    pub tilt: Tilt,
    #[serde(default = "default_eps")]
    pub eps: f64,
    /// The detector column (pixels, sub-pixel; pixel `w` is centred at `w`) the rotation axis
    /// projects onto. `None` is the detector's centre column `detw / 2`, the operator's origin:
    /// it follows `detw` when a geometry is padded or rebuilt with another width, whereas an
    /// explicit value stays where it is. Files without `center` read as `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub center: Option<f64>,
    /// Where the volume's centre lies relative to the default volume's centre, in voxels
    /// `(z, y, x)`: the default volume (`for_detector`) is centred on the rotation axis in x/y and
    /// on the plane that projects onto detector row `deth / 2` in z. A volume's voxel `j` along an
    /// axis of length `n` sits at `j - n/2 + offset` (centred units of the default volume), so a
    /// thin slab or an x/y region of interest is a smaller volume with an offset
    /// ([`Geometry::with_subvolume`]). Files without `offset` read as zero.
    #[serde(default, skip_serializing_if = "is_zero_offset")]
    pub offset: [f64; 3],
}

fn is_zero_offset(offset: &[f64; 3]) -> bool {
    *offset == [0.0; 3]
}

/// A box of the default volume `(deth, detw, detw)` of a detector: half-open ranges of z planes,
/// y rows and x columns, each even in length and at least the gridding kernel's minimum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeBox {
    pub z: Range<usize>,
    pub y: Range<usize>,
    pub x: Range<usize>,
}

impl VolumeBox {
    /// The whole default volume of `g`'s detector.
    pub fn full(g: &Geometry) -> Self {
        Self {
            z: 0..g.deth,
            y: 0..g.detw,
            x: 0..g.detw,
        }
    }
}

/// The shortest axis the gridding kernel accepts at `eps` when an axis of length `n` is too short
/// for it (`None` when `n` is long enough): the grid of `2n` cells must be wider than the `2m + 1`
/// taps, and the kernels hold at most 15 taps per axis.
pub(crate) fn gridding_minimum(n: usize, eps: f64) -> Option<usize> {
    let m = GriddingAxis::new(n, eps).half_width;
    (2 * n <= 2 * m + 1 || m > 7).then_some(m + 1)
}

/// `exp(-2 pi i (b - n/2) shift / n)` for every frequency index `b` of an axis of length `n`: the
/// Fourier shift theorem moving a centred signal by `shift` samples, in f64 with the integer and
/// fractional parts of the shift reduced separately modulo `n` (large shifts lose no digits), then
/// rounded once to f32 `[cos, sin]` pairs.
fn fourier_shift(n: usize, shift: f64) -> impl Iterator<Item = [f32; 2]> {
    let (whole, frac, len) = (shift.trunc(), shift.fract(), n as f64);
    (0..n).map(move |b| {
        let k = b as f64 - (n / 2) as f64;
        let turns = ((k * whole).rem_euclid(len) + k * frac) / len;
        let angle = -2.0 * PI * turns;
        [angle.cos() as f32, angle.sin() as f32]
    })
}

/// The per-angle Fourier shifts of the projections (stage F): `columns[t * detw + b]` and
/// `rows[t * deth + a]` with `t` in `0..angles`; `angles` is 1 when no shift depends on the angle
/// (a volume without offset), the one row then serving every projection.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectorPhases {
    pub angles: usize,
    pub columns: Vec<[f32; 2]>,
    pub rows: Vec<[f32; 2]>,
}

impl DetectorPhases {
    /// The phase of projection `t` at frequency row `a`, column `b`: the column and the row phase
    /// multiplied in f32, in this order (the GPU stage's order).
    pub fn at(&self, t: usize, a: usize, b: usize) -> [f32; 2] {
        let t = if self.angles == 1 { 0 } else { t };
        let detw = self.columns.len() / self.angles;
        let deth = self.rows.len() / self.angles;
        let [cx, cy] = self.columns[t * detw + b];
        let [rx, ry] = self.rows[t * deth + a];
        [cx * rx - cy * ry, cx * ry + cy * rx]
    }
}

impl Geometry {
    /// A cube of side `n` seen by an `n x n` detector at `ntheta` equispaced angles over [0, 2 pi)
    /// with tilt `tilt`.
    pub fn cube(n: usize, ntheta: usize, tilt: Tilt) -> Self {
        Self {
            n0: n,
            n1: n,
            n2: n,
            deth: n,
            detw: n,
            theta: (0..ntheta)
                .map(|i| 2.0 * PI * i as f64 / ntheta as f64)
                .collect(),
            tilt,
            eps: DEFAULT_EPS,
            center: None,
            offset: [0.0; 3],
        }
    }

    /// The reference's volume for a `deth x detw` detector: `(deth, detw, detw)`, at the angles
    /// `theta` (radians) and tilt `tilt`, with the default gridding accuracy.
    pub fn for_detector(deth: usize, detw: usize, theta: Vec<f64>, tilt: Tilt) -> Self {
        Self {
            n0: deth,
            n1: detw,
            n2: detw,
            deth,
            detw,
            theta,
            tilt,
            eps: DEFAULT_EPS,
            center: None,
            offset: [0.0; 3],
        }
    }

    /// The detector column the rotation axis projects onto: `center`, or `detw / 2` without it.
    pub fn rotation_axis(&self) -> f64 {
        self.center.unwrap_or((self.detw / 2) as f64)
    }

    /// How far (pixels) the rotation axis lies right of the operator's origin column `detw / 2`:
    /// a projection of this geometry is the centred projection moved by this many columns,
    /// `d(w) = d_centred(w - shift)`.
    pub fn axis_shift(&self) -> f64 {
        self.rotation_axis() - (self.detw / 2) as f64
    }

    /// Where the volume's centre projects at angle `t`, relative to the operator's origin (row
    /// `deth / 2`, column `detw / 2`), in detector pixels `[rows, columns]`: the offset's
    /// projection `s_v = x0 sin(theta) cos(phi) - y0 cos(theta) cos(phi) + z0 sin(phi)`,
    /// `s_u = x0 cos(theta) + y0 sin(theta)` (docs/operator-method.md, "Geometry"), plus the
    /// rotation axis's shift in columns.
    pub fn projection_shift(&self, t: usize) -> [f64; 2] {
        let [z0, y0, x0] = self.offset;
        let (sin_t, cos_t) = self.theta[t].sin_cos();
        let (sin_p, cos_p) = self.tilt.phi().sin_cos();
        [
            x0 * sin_t * cos_p - y0 * cos_t * cos_p + z0 * sin_p,
            x0 * cos_t + y0 * sin_t + self.axis_shift(),
        ]
    }

    /// The phases that move each centred projection's spectrum to where the rotation axis and
    /// the volume's offset put it (the Fourier shift theorem per angle, rows and columns
    /// separately): `exp(-2 pi i ((a - deth/2) s_v / deth + (b - detw/2) s_u / detw))` with
    /// `[s_v, s_u]` = [`projection_shift`](Self::projection_shift), each factor in f64 and rounded
    /// once to f32. Unitary and diagonal, so applying the conjugate is the adjoint and inverse.
    /// Without an offset the shift is the same at every angle and one row of phases is returned.
    pub fn detector_phases(&self) -> DetectorPhases {
        let angles = self.detector_phase_angles();
        let shifts: Vec<[f64; 2]> = (0..angles).map(|t| self.projection_shift(t)).collect();
        DetectorPhases {
            angles,
            columns: shifts
                .iter()
                .flat_map(|s| fourier_shift(self.detw, s[1]))
                .collect(),
            rows: shifts
                .iter()
                .flat_map(|s| fourier_shift(self.deth, s[0]))
                .collect(),
        }
    }

    /// How many projections' phases [`detector_phases`](Self::detector_phases) holds: every
    /// angle's with an offset, else one.
    pub fn detector_phase_angles(&self) -> usize {
        if is_zero_offset(&self.offset) {
            1
        } else {
            self.ntheta()
        }
    }

    /// This detector's geometry with the volume `b`, a box of the default volume
    /// `(deth, detw, detw)` (whatever this geometry's volume is): its sizes and the offset of its
    /// centre. Each range must lie within the default volume, be even in length (the centred
    /// transforms) and at least the gridding kernel's minimum; an error names the axis and the
    /// nearest valid range.
    pub fn with_subvolume(&self, b: &VolumeBox) -> Result<Self, GeometryError> {
        let mut centre = [0.0; 3];
        let mut sizes = [0; 3];
        for (i, (axis, range, full)) in [
            ("z", &b.z, self.deth),
            ("y", &b.y, self.detw),
            ("x", &b.x, self.detw),
        ]
        .into_iter()
        .enumerate()
        {
            let bad = |reason: String, nearest| GeometryError::BadBox {
                axis,
                start: range.start,
                end: range.end,
                reason,
                nearest,
            };
            if range.start >= range.end || range.end > full {
                return Err(bad(
                    format!("must be a non-empty range within the default volume's 0:{full}"),
                    None,
                ));
            }
            let len = range.end - range.start;
            let min = gridding_minimum(len, self.eps).map(|m| m + m % 2);
            if len % 2 == 1 || min.is_some() {
                let want = min.unwrap_or(len + 1).max(len + len % 2);
                let (s, e) = nearest_range(range, want, full);
                let why = match min {
                    Some(m) => format!("shorter than the gridding kernel's minimum {m}"),
                    None => "its length must be even".into(),
                };
                return Err(bad(why, Some(s..e)));
            }
            sizes[i] = len;
            centre[i] = range.start as f64 + (len / 2) as f64 - (full / 2) as f64;
        }
        let g = Self {
            n0: sizes[0],
            n1: sizes[1],
            n2: sizes[2],
            offset: centre,
            ..self.clone()
        };
        g.validate()?;
        Ok(g)
    }

    /// The detector rows `[start, end)` this geometry's volume projects onto at any of its
    /// angles, with `m` rows more on each side (`m` the gridding kernel's half-width along the
    /// rows, 4 at the default `eps`): the operator's projection of a voxel is band-limited, not
    /// compactly supported, and its tails within that reach are kept; the rest is cut, as it
    /// would wrap around the cropped detector's periodic transform. The range is even in length,
    /// at least the kernel's minimum, and within `0..deth`; the whole detector when the volume's
    /// shadow covers it (a cube) or nearly does.
    ///
    /// Voxel `(z, y, x)` (centred, with the offset) lands on row
    /// `deth/2 + x sin(theta) cos(phi) - y cos(theta) cos(phi) + z sin(phi)`
    /// ([`projection_shift`](Self::projection_shift)), so a box of `n0 x n1 x n2` voxels spans
    /// `(n2 |sin(theta) cos(phi)| + n1 |cos(theta) cos(phi)| + n0 sin(phi)) / 2` rows either side of
    /// its centre's row at angle `theta`.
    pub fn shadow_rows(&self) -> Range<usize> {
        let (sin_p, cos_p) = self.tilt.phi().sin_cos();
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for (t, theta) in self.theta.iter().enumerate() {
            let (sin_t, cos_t) = theta.sin_cos();
            let centre = self.projection_shift(t)[0];
            let half = (self.n2 as f64 * (sin_t * cos_p).abs()
                + self.n1 as f64 * (cos_t * cos_p).abs()
                + self.n0 as f64 * sin_p)
                / 2.0;
            lo = lo.min(centre - half);
            hi = hi.max(centre + half);
        }
        let reach = GriddingAxis::new(self.deth, self.eps).half_width as f64;
        let origin = (self.deth / 2) as f64;
        // One row more at the top: voxel j of an axis of n sits at j - n/2, up to n/2 - 1, but
        // a voxel covers a row either side of its centre.
        // A millionth of a row of slack: cos(pi/2) is 6e-17, not 0, and must not add rows.
        let start = (origin + lo - reach - 1.0 + 1e-6).floor().max(0.0);
        let end = (origin + hi + reach + 1.0 - 1e-6)
            .ceil()
            .min(self.deth as f64);
        if start.partial_cmp(&end) != Some(std::cmp::Ordering::Less) {
            // The volume projects off the detector (or the angles are empty): nothing to cut.
            return 0..self.deth;
        }
        let (start, end) = (start as usize, end as usize);
        let want = (end - start).next_multiple_of(2);
        let want = gridding_minimum(want, self.eps)
            .map_or(want, |m| m.next_multiple_of(2))
            .max(want);
        if want + 2 > self.deth {
            return 0..self.deth;
        }
        let end = (start + want).min(self.deth - self.deth % 2);
        end - want..end
    }

    /// The detector columns `[start, end)` this geometry's volume projects onto at any of its
    /// angles, with the gridding kernel's reach and a column more on each side, as
    /// [`shadow_rows`](Self::shadow_rows) for the rows: voxel `(z, y, x)` (centred, with the
    /// offset) lands on column `rotation_axis + x cos(theta) + y sin(theta)` whatever its `z`, so
    /// a box of `n1 x n2` voxels spans `(n2 |cos(theta)| + n1 |sin(theta)|) / 2` columns either
    /// side of its centre's column. The range also holds the rotation axis (a cut detector keeps
    /// the axis on it, see [`validate`](Self::validate)). Even in length, at least the kernel's
    /// minimum, within `0..detw`; the whole detector when the shadow covers it or nearly does.
    pub fn shadow_columns(&self) -> Range<usize> {
        let origin = (self.detw / 2) as f64;
        let axis = self.rotation_axis() - origin;
        let (mut lo, mut hi) = (axis, axis);
        for (t, theta) in self.theta.iter().enumerate() {
            let (sin_t, cos_t) = theta.sin_cos();
            let centre = self.projection_shift(t)[1];
            let half = (self.n2 as f64 * cos_t.abs() + self.n1 as f64 * sin_t.abs()) / 2.0;
            lo = lo.min(centre - half);
            hi = hi.max(centre + half);
        }
        let reach = GriddingAxis::new(self.detw, self.eps).half_width as f64;
        // As for the rows: a voxel covers a column either side of its centre, and a millionth
        // of slack keeps sin(pi) = 1e-16 from adding a column.
        let start = (origin + lo - reach - 1.0 + 1e-6).floor().max(0.0);
        let end = (origin + hi + reach + 1.0 - 1e-6)
            .ceil()
            .min(self.detw as f64);
        if start.partial_cmp(&end) != Some(std::cmp::Ordering::Less) {
            return 0..self.detw;
        }
        let (start, end) = (start as usize, end as usize);
        let want = (end - start).next_multiple_of(2);
        let want = gridding_minimum(want, self.eps)
            .map_or(want, |m| m.next_multiple_of(2))
            .max(want);
        if want + 2 > self.detw {
            return 0..self.detw;
        }
        let end = (start + want).min(self.detw - self.detw % 2);
        end - want..end
    }

    /// This geometry with its detector cut to the rows `rows` (of `0..deth`, even in length): the
    /// projections of the same volume, on a detector whose operator origin is row
    /// `rows.start + len/2`. The volume's offset in z moves by the origin's move over
    /// `sin(phi)`, so every voxel still projects onto the row it did (see
    /// [`shadow_rows`](Self::shadow_rows), which gives the rows a volume needs).
    pub fn with_detector_rows(&self, rows: Range<usize>) -> Result<Self, GeometryError> {
        if rows.start >= rows.end || rows.end > self.deth {
            return Err(GeometryError::BadBox {
                axis: "detector rows",
                start: rows.start,
                end: rows.end,
                reason: format!("must be a non-empty range within 0:{}", self.deth),
                nearest: None,
            });
        }
        let len = rows.end - rows.start;
        let moved = (rows.start + len / 2) as f64 - (self.deth / 2) as f64;
        let [z0, y0, x0] = self.offset;
        let g = Self {
            deth: len,
            offset: [z0 - moved / self.tilt.phi().sin(), y0, x0],
            ..self.clone()
        };
        g.validate()?;
        Ok(g)
    }

    /// Number of projection angles.
    pub fn ntheta(&self) -> usize {
        self.theta.len()
    }

    /// Elements of the volume.
    pub fn volume_len(&self) -> usize {
        self.n0 * self.n1 * self.n2
    }

    /// Elements of the data (and of the Fourier-domain data).
    pub fn data_len(&self) -> usize {
        self.ntheta() * self.deth * self.detw
    }

    /// Elements of the intermediate spectrum after the first stage, `(deth, n1, n2)`.
    pub fn spectrum_len(&self) -> usize {
        self.deth * self.n1 * self.n2
    }

    /// Frequencies along z sampled by detector row k, `z_k = (k - deth/2)/deth * sin(phi)` in
    /// cycles per voxel, computed in f32 as the reference's `take_x` does.
    pub fn z_frequencies(&self) -> Vec<f32> {
        let sin_phi = self.tilt.phi().sin() as f32;
        (0..self.deth)
            .map(|k| (k as f32 - (self.deth / 2) as f32) / self.deth as f32 * sin_phi)
            .collect()
    }

    /// The (x, y) frequency sampled at angle `t`, detector row `k`, column `w`, in f32 and clamped
    /// to [-0.5 + 1e-5, 0.5 - 1e-5] as the reference's `take_x` does:
    /// `x = ku cos(theta) + kv sin(theta) cos(phi)`, `y = ku sin(theta) - kv cos(theta) cos(phi)`.
    pub fn xy_frequency(&self, t: usize, k: usize, w: usize) -> [f32; 2] {
        let (cos_t, sin_t) = (self.theta[t].cos() as f32, self.theta[t].sin() as f32);
        let cos_phi = self.tilt.phi().cos() as f32;
        let ku = (w as f32 - (self.detw / 2) as f32) / self.detw as f32;
        let kv = (k as f32 - (self.deth / 2) as f32) / self.deth as f32;
        let clamp = |a: f32| a.clamp(-0.5 + 1e-5, 0.5 - 1e-5);
        [
            clamp(ku * cos_t + kv * sin_t * cos_phi),
            clamp(ku * sin_t - kv * cos_t * cos_phi),
        ]
    }

    /// A 64-bit hash of everything that defines the operator, over the exact bits of every number
    /// (sizes, each angle, the tilt, the accuracy): two geometries with the same fingerprint give
    /// the same operator bit for bit. Checkpoints compare this, never decimal text.
    pub fn fingerprint(&self) -> u64 {
        // Destructured so that a new field cannot be forgotten here.
        let Self {
            n0,
            n1,
            n2,
            deth,
            detw,
            theta,
            tilt,
            eps,
            center,
            offset,
        } = self;
        let mut bytes = Vec::with_capacity(8 * (theta.len() + 10));
        for size in [n0, n1, n2, deth, detw] {
            bytes.extend_from_slice(&(*size as u64).to_le_bytes());
        }
        bytes.extend_from_slice(&(theta.len() as u64).to_le_bytes());
        for value in theta.iter().chain([&tilt.phi(), eps]) {
            bytes.extend_from_slice(&value.to_bits().to_le_bytes());
        }
        // The axis: absent (the centre column, whatever detw is) adds nothing, so a centred
        // geometry keeps the fingerprint it had before the axis existed (its checkpoints still
        // resume); an explicit axis adds a marker and its exact bits (the layout before it is
        // fixed by theta's length, so the two cannot collide).
        if let Some(c) = center {
            bytes.push(1);
            bytes.extend_from_slice(&c.to_bits().to_le_bytes());
        }
        // The volume's offset likewise: zero adds nothing (old fingerprints stand), any other
        // adds a different marker and its exact bits.
        if !is_zero_offset(offset) {
            bytes.push(2);
            for value in offset {
                bytes.extend_from_slice(&value.to_bits().to_le_bytes());
            }
        }
        crate::hash::fnv1a(&bytes)
    }

    /// Checks sizes, angles, tilt, accuracy and the rotation axis (finite, within the detector's
    /// columns `[0, detw]`: outside it the axis would not project onto the detector).
    pub fn validate(&self) -> Result<(), GeometryError> {
        for (name, value) in [
            ("n0", self.n0),
            ("n1", self.n1),
            ("n2", self.n2),
            ("deth", self.deth),
            ("detw", self.detw),
        ] {
            if value < 2 || value % 2 == 1 {
                return Err(GeometryError::BadSize { name, value });
            }
        }
        if self.theta.is_empty() {
            return Err(GeometryError::NoAngles);
        }
        if let Some((index, &value)) = self.theta.iter().enumerate().find(|(_, t)| !t.is_finite()) {
            return Err(GeometryError::NonFiniteAngle { index, value });
        }
        let phi = self.tilt.phi();
        if !(phi > 0.0 && phi < PI) {
            return Err(GeometryError::PhiOutOfRange { phi });
        }
        if !(MIN_EPS..=0.1).contains(&self.eps) {
            return Err(GeometryError::BadEps { eps: self.eps });
        }
        if let Some(center) = self.center {
            if !(center.is_finite() && (0.0..=self.detw as f64).contains(&center)) {
                return Err(GeometryError::BadCenter {
                    center,
                    detw: self.detw,
                });
            }
        }
        if !self.offset.iter().all(|o| o.is_finite()) {
            return Err(GeometryError::BadOffset {
                offset: self.offset,
            });
        }
        // Bytes of the oversampled complex volume and of the complex data; every product is
        // checked, since the sizes may come from a file (2^40 per axis must be an error, not an
        // overflow panic).
        let bytes = |factors: &[usize]| {
            factors
                .iter()
                .try_fold(1u64, |acc, &f| acc.checked_mul(f as u64))
        };
        bytes(&[self.n0, self.n1, self.n2, 2, 8])
            .and(bytes(&[self.deth, self.detw, self.ntheta(), 8]))
            .ok_or(GeometryError::Overflow)?;
        Ok(())
    }

    /// Reads a geometry JSON file (`n0, n1, n2, deth, detw, theta, phi`, optional `eps`,
    /// `center` and `offset`).
    pub fn read_json(path: &Path) -> Result<Self, GeometryError> {
        let g = Self::parse_json(path)?;
        g.validate()?;
        Ok(g)
    }

    /// Reads a geometry JSON file without [`validate`](Self::validate): for a scan's geometry,
    /// whose sizes may be any (the reconstruction pads them, see `recon::padding`) and which
    /// the scan's own check (`scan::validate_scan_geometry`) validates.
    pub fn parse_json(path: &Path) -> Result<Self, GeometryError> {
        let err = |reason: String| GeometryError::File {
            path: path.display().to_string(),
            reason,
        };
        let text = crate::io::read_text(path).map_err(|e| err(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| err(e.to_string()))
    }

    /// Writes the geometry as JSON.
    pub fn write_json(&self, path: &Path) -> Result<(), GeometryError> {
        let err = |reason: String| GeometryError::File {
            path: path.display().to_string(),
            reason,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| err(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| err(e.to_string()))
    }
}

/// The range of `want` (even) elements nearest to `range` within `0..full`: grown or shrunk at
/// its end, moved back when it would pass `full`.
fn nearest_range(range: &Range<usize>, want: usize, full: usize) -> (usize, usize) {
    let want = want.min(full - full % 2);
    let end = (range.start + want).min(full);
    (end - want, end)
}

#[cfg(test)]
mod tests;
