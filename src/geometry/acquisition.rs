//! The scan's geometry: volume and detector sizes, projection angles, the tilt, the rotation
//! axis, the volume's offset and the gridding accuracy, with validation and the fingerprint that
//! checkpoints compare. Where a volume falls on the detector is in `region`; the operator's own
//! quantities (detector phases, sample frequencies) are the operator's (`operator::sampling`);
//! the JSON file is io's (`io::geometry_file`).

use std::f64::consts::PI;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::accuracy::{default_eps, DEFAULT_EPS, MIN_EPS};
use super::{GeometryError, Tilt};

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
    /// Each projection's detector shift `[du, dv]` in pixels (columns, rows), one per angle, or
    /// none: where the projection landed relative to where the rest of the geometry puts it
    /// (a stage that wobbled or drifted), `d_t(w, v) = d_t,still(w - du, v - dv)`. Applied as
    /// the Fourier phases of the axis and the offset are ([`Geometry::projection_shift`]), so
    /// exact, adjoint and free per point. Files without `shifts` read as none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shifts: Vec<[f64; 2]>,
}

/// Whether a volume's offset is none: the default volume's place (see [`Geometry::offset`]).
pub(crate) fn is_zero_offset(offset: &[f64; 3]) -> bool {
    *offset == [0.0; 3]
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
            shifts: Vec::new(),
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
            shifts: Vec::new(),
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
    /// rotation axis's shift in columns, plus the projection's own shift ([`Geometry::shifts`]).
    pub fn projection_shift(&self, t: usize) -> [f64; 2] {
        let [z0, y0, x0] = self.offset;
        let (sin_t, cos_t) = self.theta[t].sin_cos();
        let (sin_p, cos_p) = self.tilt.phi().sin_cos();
        let [du, dv] = self.shifts.get(t).copied().unwrap_or([0.0; 2]);
        [
            x0 * sin_t * cos_p - y0 * cos_t * cos_p + z0 * sin_p + dv,
            x0 * cos_t + y0 * sin_t + self.axis_shift() + du,
        ]
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
            shifts,
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
        // And the projections' shifts: none adds nothing, any adds a third marker and their bits.
        if !shifts.is_empty() {
            bytes.push(3);
            for value in shifts.iter().flatten() {
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
        if !self.shifts.is_empty() && self.shifts.len() != self.ntheta() {
            return Err(GeometryError::ShiftCount {
                shifts: self.shifts.len(),
                angles: self.ntheta(),
            });
        }
        if let Some((index, &[du, dv])) = self
            .shifts
            .iter()
            .enumerate()
            .find(|(_, s)| !s.iter().all(|v| v.is_finite()))
        {
            return Err(GeometryError::NonFiniteShift { index, du, dv });
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
}
