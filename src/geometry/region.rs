//! Where a volume lies: a box of the default volume, the geometry of such a box, and the detector
//! rows and columns a volume projects onto (with the gridding kernel's reach).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::accuracy::{gridding_minimum, kernel_half_width};
use super::{Geometry, GeometryError};

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

impl Geometry {
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
        self.shadow_on(self.deth, [lo, hi])
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
        self.shadow_on(self.detw, [lo, hi])
    }

    /// The detector pixels `[start, end)` of an axis of `len` pixels that a shadow spanning
    /// `[lo, hi]` pixels from the operator's origin `len / 2` covers, with the gridding kernel's
    /// reach and a pixel more on each side (voxel `j` of an axis of `n` sits at `j - n/2`, up to
    /// `n/2 - 1`, but covers a pixel either side of its centre); even in length, at least the
    /// kernel's minimum, within `0..len`; the whole axis when the shadow covers it or nearly
    /// does, or misses it.
    fn shadow_on(&self, len: usize, [lo, hi]: [f64; 2]) -> Range<usize> {
        let reach = kernel_half_width(self.eps) as f64;
        let origin = (len / 2) as f64;
        // A millionth of a pixel of slack: cos(pi/2) is 6e-17 and sin(pi) 1e-16, not 0, and
        // must not add pixels.
        let start = (origin + lo - reach - 1.0 + 1e-6).floor().max(0.0);
        let end = (origin + hi + reach + 1.0 - 1e-6).ceil().min(len as f64);
        if start.partial_cmp(&end) != Some(std::cmp::Ordering::Less) {
            // The volume projects off the detector (or the angles are empty): nothing to cut.
            return 0..len;
        }
        let (start, end) = (start as usize, end as usize);
        let want = (end - start).next_multiple_of(2);
        let want = gridding_minimum(want, self.eps)
            .map_or(want, |m| m.next_multiple_of(2))
            .max(want);
        if want + 2 > len {
            return 0..len;
        }
        let end = (start + want).min(len - len % 2);
        end - want..end
    }
}

/// The range of `want` (even) elements nearest to `range` within `0..full`: grown or shrunk at
/// its end, moved back when it would pass `full`.
fn nearest_range(range: &Range<usize>, want: usize, full: usize) -> (usize, usize) {
    let want = want.min(full - full % 2);
    let end = (range.start + want).min(full);
    (end - want, end)
}
