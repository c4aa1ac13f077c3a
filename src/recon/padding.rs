//! Any detector size: the operator's centred transforms need every volume and detector size even,
//! and its gridding kernel needs each volume axis longer than its half-width (`m + 1` voxels, 5 at
//! the default `eps = 1e-3`). A scan of any size (a 2-row CT scan, a 31-column detector) is padded
//! to the smallest sizes the kernels accept, with the lateral padding a caller asks for
//! ([`crate::recon::Reconstructor::lateral_padding`]) on top, and the volume is cropped back to
//! the one the scan's geometry defines.
//!
//! - **Values**: the projections are padded with their edge rows and columns, as tomopy
//!   (`tomopy.misc.morph.pad`, `mode='edge'`) and tomocupy pad sinograms: a sample that reaches
//!   the detector's edge does not end in a cliff, whose step the solver would fit with ringing,
//!   and the padded rows of a CT scan repeat its edge slices.
//! - **Where**: an axis of `n` padded to `N` gets `N/2 - n/2` before and the rest after, so the
//!   operator's origin (row `deth/2`, column `detw/2`, voxel `n/2`) stays on the same pixel: the
//!   rotation axis stays where it was (an explicit `center` moves with the columns added before
//!   it), and so does the volume's centre.

use serde::Serialize;

use crate::geometry::Geometry;
use crate::operator::GriddingAxis;
use crate::scan::DetectorPadding;

/// The most taps per axis the gridding kernels hold is 15 (`m <= 7`): an axis of 16 fits every
/// kernel the operator accepts, so padding never goes beyond it.
const LONGEST_KERNEL_AXIS: usize = 16;

/// The smallest size at least `n` that the operator's kernels take along an axis at gridding
/// accuracy `eps`: even, and longer than the gridding kernel's half-width (`2n > 2m + 1`).
pub fn kernel_size(n: usize, eps: f64) -> usize {
    let mut size = n.max(2).next_multiple_of(2);
    while size < LONGEST_KERNEL_AXIS {
        let m = GriddingAxis::new(size, eps).half_width;
        if 2 * size > m.saturating_mul(2).saturating_add(1) {
            break;
        }
        size += 2;
    }
    size
}

/// The columns a run pads the detector by on each side beyond what its kernels need (the volume's
/// y and x by as many voxels), cropped off the volume afterwards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LateralPadding {
    /// None (the default).
    #[default]
    None,
    /// This many columns.
    Columns(usize),
    /// A quarter of the detector's width, as the reference pads samples wider than the field
    /// of view (`lamino reconstruct --pad`): the width is the one the operator gets, after a
    /// volume box has cut the detector to its shadow.
    QuarterWidth,
}

impl LateralPadding {
    /// The columns on each side for the detector of `g`.
    pub fn columns(self, g: &Geometry) -> usize {
        match self {
            Self::None => 0,
            Self::Columns(n) => n,
            Self::QuarterWidth => g.detw / 4,
        }
    }
}

impl From<usize> for LateralPadding {
    fn from(columns: usize) -> Self {
        Self::Columns(columns)
    }
}

/// How a scan's detector and volume are padded for the operator, `[before, after]` per axis: to
/// the sizes the kernels take ([`kernel_size`]), plus a lateral padding of the columns and of the
/// volume's y and x.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Padding {
    pub detector: DetectorPadding,
    /// `(z, y, x)`.
    pub volume: [[usize; 2]; 3],
    /// Columns (and y, x voxels) of the lateral padding on each side, included in the others.
    pub lateral: usize,
}

impl Padding {
    /// The padding of `g`'s scan: each size to [`kernel_size`] at `g.eps`, then `lateral` more
    /// columns, y and x voxels on each side.
    pub fn new(g: &Geometry, lateral: usize) -> Self {
        let axis = |n: usize, extra: usize| {
            let size = kernel_size(n, g.eps);
            let before = size / 2 - n / 2;
            [before + extra, size - n - before + extra]
        };
        Self {
            detector: DetectorPadding {
                rows: axis(g.deth, 0),
                columns: axis(g.detw, lateral),
            },
            volume: [axis(g.n0, 0), axis(g.n1, lateral), axis(g.n2, lateral)],
            lateral,
        }
    }

    /// The geometry the operator runs on: `g` padded. An explicit rotation axis moves by the
    /// columns added before it; the default (`detw / 2`) lands on the same pixel by construction.
    pub fn apply(&self, g: &Geometry) -> Geometry {
        let total = |n: usize, [before, after]: [usize; 2]| n + before + after;
        Geometry {
            n0: total(g.n0, self.volume[0]),
            n1: total(g.n1, self.volume[1]),
            n2: total(g.n2, self.volume[2]),
            deth: total(g.deth, self.detector.rows),
            detw: total(g.detw, self.detector.columns),
            center: g.center.map(|c| c + self.detector.columns[0] as f64),
            ..g.clone()
        }
    }

    /// Whether the kernels needed padding beyond the lateral padding a caller asked for.
    pub fn for_kernels(&self) -> bool {
        *self != Self::new_lateral_only(self.lateral)
    }

    fn new_lateral_only(lateral: usize) -> Self {
        Self {
            detector: DetectorPadding {
                rows: [0, 0],
                columns: [lateral; 2],
            },
            volume: [[0, 0], [lateral; 2], [lateral; 2]],
            lateral,
        }
    }

    /// What the padding of `g` does, in words for a user (`None` when the kernels needed none).
    pub fn describe(&self, g: &Geometry) -> Option<String> {
        if !self.for_kernels() {
            return None;
        }
        let p = self.apply(g);
        Some(format!(
            "the detector ({} x {} pixels) is padded to {} x {} with its edge rows and columns \
             ({:?} rows and {:?} columns before and after), the volume ({} x {} x {}) to {} x {} \
             x {} for the operator's kernels (even sizes, at least {} along each volume axis at \
             eps = {}); the volume is cropped back to {} x {} x {}",
            g.deth,
            g.detw,
            p.deth,
            p.detw,
            self.detector.rows,
            self.detector.columns,
            g.n0,
            g.n1,
            g.n2,
            p.n0,
            p.n1,
            p.n2,
            kernel_size(1, g.eps),
            g.eps,
            g.n0,
            g.n1,
            g.n2
        ))
    }

    /// Appends the voxels of the unpadded volume (`shape`) that `planes` z slices of the padded
    /// volume `padded` (`planes x n1 x n2` of `padded_g`) hold, cropped laterally, to `out`.
    pub(crate) fn crop_into(
        &self,
        padded: &[f32],
        planes: usize,
        padded_g: &Geometry,
        shape: [usize; 3],
        out: &mut Vec<f32>,
    ) {
        let ([y0, _], [x0, _]) = (self.volume[1], self.volume[2]);
        for z in 0..planes {
            for y in y0..y0 + shape[1] {
                let row = (z * padded_g.n1 + y) * padded_g.n2;
                out.extend_from_slice(&padded[row + x0..row + x0 + shape[2]]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Tilt;
    use crate::geometry::DEFAULT_EPS;

    /// At the default accuracy the kernels take even sizes of at least 4 (m = 2 needs 3); sizes
    /// they take already are kept.
    #[test]
    fn kernel_sizes_are_the_smallest_the_operator_takes() {
        let got: Vec<usize> = [1, 2, 5, 6, 7, 31, 32, 2048]
            .iter()
            .map(|&n| kernel_size(n, DEFAULT_EPS))
            .collect();
        assert!(got == [4, 4, 6, 6, 8, 32, 32, 2048], "{got:?}");
        // At the finest accuracy the half-width is 4: 6 voxels.
        assert!(kernel_size(2, 1e-6) == 6, "{}", kernel_size(2, 1e-6));
    }

    /// A 2 x 31 detector pads to 4 x 32 with the axis column and the centre row on the same
    /// pixel, and the volume is cropped from where it was put.
    #[test]
    fn padding_keeps_the_axis_and_centre_on_their_pixels() {
        let g = Geometry::for_detector(2, 31, vec![0.0, 1.0], Tilt::CT);
        let pad = Padding::new(&g, 0);
        assert!(
            pad.detector.rows == [1, 1] && pad.detector.columns == [1, 0],
            "{pad:?}"
        );
        let p = pad.apply(&g);
        assert!(
            [p.n0, p.n1, p.n2, p.deth, p.detw] == [4, 32, 32, 4, 32],
            "{p:?}"
        );
        assert!(p.rotation_axis() == g.rotation_axis() + 1.0);
        assert!(p.center.is_none());
        let explicit = Geometry {
            center: Some(13.25),
            ..g.clone()
        };
        assert!(pad.apply(&explicit).center == Some(14.25));
        assert!(pad.for_kernels());
        assert!(pad.describe(&g).is_some_and(|d| d.contains("4 x 32")));
        // The lateral padding adds to both sides; sizes the kernels take need nothing more.
        let even = Geometry::for_detector(8, 32, vec![0.0], Tilt::CT);
        let lateral = Padding::new(&even, 8);
        assert!(!lateral.for_kernels() && lateral.describe(&even).is_none());
        assert!(lateral.apply(&even).detw == 48 && lateral.detector.columns == [8, 8]);
        // Cropping picks the unpadded voxels (y and x from 1): value = 100 y + x of the padded
        // volume.
        let padded: Vec<f32> = (0..p.n0 * p.n1 * p.n2)
            .map(|i| (100 * (i / p.n2 % p.n1) + i % p.n2) as f32)
            .collect();
        let mut out = Vec::new();
        pad.crop_into(&padded, 1, &p, [g.n0, g.n1, g.n2], &mut out);
        assert!(out.len() == 31 * 31);
        assert!(out[0] == 101.0 && out[31 * 31 - 1] == 3131.0, "{out:?}");
    }
}
