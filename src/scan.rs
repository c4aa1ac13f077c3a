//! The scan as the solver takes it: line integrals with their geometry ([`Projections`]),
//! validated once (shape, finite values), below both the preprocessing that transforms them and
//! the reconstruction pipeline that solves for them.

use std::ops::Range;

use thiserror::Error;

use crate::geometry::{Geometry, GeometryError, VolumeBox};
use crate::io::{normalize, ClampCount, NormalizeError, Stack, MAX_CLAMPED_FRACTION};
use crate::params::DataScale;
use crate::solver::ProjectionBlocks;

/// Projections that cannot be reconstructed; each names what is wrong.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ScanError {
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// The projections hold a NaN or an infinity.
    #[error("projection value {index} (angle {angle}, row {row}, column {column}) is {value}: the input must be finite")]
    NonFinite {
        index: usize,
        angle: usize,
        row: usize,
        column: usize,
        value: f32,
    },
    /// The projections do not have the geometry's shape.
    #[error("{got} projection values for a geometry of {expected} (ntheta x deth x detw)")]
    Shape { expected: usize, got: usize },
    /// A volume or detector size is zero (any other size is padded for the operator by the
    /// reconstruction, see `recon::padding`).
    #[error("{name} = 0: every volume and detector size must be at least 1")]
    EmptyAxis { name: &'static str },
    /// Intensities whose shape is not the geometry's `(ntheta, deth, detw)`.
    #[error("intensities of shape {got:?} for a geometry of {expected:?} (ntheta, deth, detw)")]
    IntensityShape {
        expected: [usize; 3],
        got: [usize; 3],
    },
    /// Flat/dark normalisation of intensities failed (shapes, non-finite values).
    #[error(transparent)]
    Normalize(#[from] NormalizeError),
    /// Too many pixels had no transmission left to take the logarithm of.
    #[error(
        "flat/dark normalisation clamped {} of {} pixels ({:.3} %), more than {:.3} %: are the \
         flats, darks and projections in the right order and intensities?",
        counts.clamped,
        counts.pixels,
        100.0 * counts.fraction(),
        100.0 * limit
    )]
    Clamped { counts: ClampCount, limit: f64 },
}

/// Line integrals `-ln(I / I0)` in units of the voxel size, `(ntheta, deth, detw)` row-major,
/// with their geometry.
#[derive(Debug, Clone)]
pub struct Projections {
    geometry: Geometry,
    values: Vec<f32>,
    /// The first angle `values` holds (0 unless an MPI rank holds only its share).
    first: usize,
    /// The scale of the whole scan's data, kept when a box of its volume is cut out
    /// ([`with_volume`](Self::with_volume)): the TV weight is the scan's, not the box's, so a
    /// slab or region reconstructed alone matches the same box of the full volume.
    scan_scale: Option<DataScale>,
}

impl Projections {
    /// Validates the geometry ([`validate_scan_geometry`]), the shape and that every value is
    /// finite.
    pub fn new(geometry: Geometry, values: Vec<f32>) -> Result<Self, ScanError> {
        let all = 0..geometry.ntheta();
        Self::part(geometry, all, values)
    }

    /// Line integrals from intensities, as tomopy's `normalize` and `minus_log` make them:
    /// `P = -ln((I - D) / (F - D))` with `F` and `D` the mean of the `flats` and of the `darks`
    /// (any number of frames each; one frame of zeros where no darks were taken). `data` is
    /// `(ntheta, deth, detw)` of `geometry`, every frame `(deth, detw)`. The normalisation is
    /// the one every intensity file route of [`crate::recon::input`] runs
    /// ([`crate::io::normalize`]). Ratios below [`crate::io::RATIO_FLOOR`]
    /// are raised to it and counted (returned); more than [`MAX_CLAMPED_FRACTION`] of the
    /// pixels clamped is refused.
    pub fn from_intensities(
        geometry: Geometry,
        data: &Stack,
        flats: &Stack,
        darks: &Stack,
    ) -> Result<(Self, ClampCount), ScanError> {
        let expected = [geometry.ntheta(), geometry.deth, geometry.detw];
        if data.shape != expected {
            return Err(ScanError::IntensityShape {
                expected,
                got: data.shape,
            });
        }
        let normalized = normalize(data, flats, darks)?;
        let counts = ClampCount {
            clamped: normalized.clamped as u64,
            pixels: normalized.projections.values.len() as u64,
        };
        if counts.exceeds(MAX_CLAMPED_FRACTION) {
            return Err(ScanError::Clamped {
                counts,
                limit: MAX_CLAMPED_FRACTION,
            });
        }
        Ok((Self::new(geometry, normalized.projections.values)?, counts))
    }

    /// The projections of `angles` only (an MPI rank's share: it reads and solves with no
    /// others), validated as [`new`](Self::new) validates all of them.
    pub fn part(
        geometry: Geometry,
        angles: Range<usize>,
        values: Vec<f32>,
    ) -> Result<Self, ScanError> {
        validate_scan_geometry(&geometry)?;
        let frame = geometry.deth * geometry.detw;
        if values.len() != angles.len() * frame || angles.end > geometry.ntheta() {
            return Err(ScanError::Shape {
                expected: angles.len().min(geometry.ntheta()) * frame,
                got: values.len(),
            });
        }
        if let Some(index) = values.iter().position(|v| !v.is_finite()) {
            let (h, w) = (geometry.deth, geometry.detw);
            return Err(ScanError::NonFinite {
                index: index + angles.start * frame,
                angle: angles.start + index / (h * w),
                row: (index / w) % h,
                column: index % w,
                value: values[index],
            });
        }
        Ok(Self {
            geometry,
            values,
            first: angles.start,
            scan_scale: None,
        })
    }

    /// The angles these projections hold (all but for an MPI rank's share).
    pub fn angles(&self) -> Range<usize> {
        let frame = self.geometry.deth * self.geometry.detw;
        self.first..self.first + self.values.len() / frame
    }

    /// The projections of `angles` only, the others dropped (they must be held).
    pub fn keep(self, angles: Range<usize>) -> Result<Self, ScanError> {
        let held = self.angles();
        let frame = self.geometry.deth * self.geometry.detw;
        if angles.start < held.start || angles.end > held.end {
            return Err(ScanError::Shape {
                expected: angles.len() * frame,
                got: 0,
            });
        }
        let at = (angles.start - held.start) * frame;
        let values = self.values[at..at + angles.len() * frame].to_vec();
        Self::part(self.geometry, angles, values)
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The values of the angles held ([`angles`](Self::angles)).
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The data in the operator's normalisation, what [`AdmmSolver::new`] takes: since
    /// `L u ~ P u / sqrt(n2 ntheta)`, the line integrals divided by `sqrt(n2 ntheta)`. Every
    /// angle must be held, and the geometry must be one the operator takes (even sizes; the
    /// reconstruction pads others, see `recon::padding`).
    pub fn operator_data(&self) -> Vec<f32> {
        assert_eq!(
            self.angles(),
            0..self.geometry.ntheta(),
            "every angle is held"
        );
        let mut data = vec![0.0; self.geometry.data_len()];
        self.operator_blocks(DetectorPadding::default(), &self.geometry)
            .fill(0, &mut data);
        data
    }

    /// The data in the operator's normalisation for the geometry `padded`, the detector padded by
    /// `pad` (edge values: a sample does not end in a cliff at the detector's edge, and objects
    /// wider than the field of view do not wrap around): formed a block at a time as the solver
    /// reads them, never as a copy.
    pub(crate) fn operator_blocks(
        &self,
        pad: DetectorPadding,
        padded: &Geometry,
    ) -> OperatorBlocks<'_> {
        OperatorBlocks {
            values: &self.values,
            first_angle: self.first,
            deth: self.geometry.deth,
            detw: self.geometry.detw,
            pad,
            scale: 1.0 / ((padded.n2 * padded.ntheta()) as f64).sqrt(),
        }
    }

    /// The same line integrals with the rotation axis at detector column `center` (validated).
    pub fn with_rotation_axis(self, center: f64) -> Result<Self, ScanError> {
        let geometry = Geometry {
            center: Some(center),
            ..self.geometry
        };
        validate_scan_geometry(&geometry)?;
        Ok(Self { geometry, ..self })
    }

    /// The same line integrals with each projection shifted by `shifts` (`[du, dv]` pixels of
    /// this detector, one per angle of the scan; validated), as [`Geometry::shifts`] says.
    pub fn with_shifts(self, shifts: Vec<[f64; 2]>) -> Result<Self, ScanError> {
        let geometry = Geometry {
            shifts,
            ..self.geometry
        };
        validate_scan_geometry(&geometry)?;
        Ok(Self { geometry, ..self })
    }

    /// The scale of these projections' data ([`DataScale`]), when every angle is held: the
    /// mean attenuation per voxel of the detector's default volume (`deth x detw x detw`,
    /// whatever box of it is reconstructed), from the line integrals' absolute sums; its width
    /// the detector's (a reconstruction takes its operator's, padding included).
    pub(crate) fn data_scale(&self) -> Option<DataScale> {
        let g = &self.geometry;
        if self.angles() != (0..g.ntheta()) || g.ntheta() == 0 {
            return None;
        }
        let total: f64 = self.values.iter().map(|&v| f64::from(v).abs()).sum();
        let voxels = (g.deth * g.detw * g.detw) as f64;
        Some(DataScale {
            attenuation_per_voxel: total / (g.ntheta() as f64 * voxels),
            width: g.detw,
        })
    }

    /// The scale of the whole scan a box was cut from ([`with_volume`](Self::with_volume)),
    /// which its reconstruction's TV weight takes; `None` for a scan not cut (its solver
    /// estimates the scale from the data it reads).
    pub fn scan_scale(&self) -> Option<DataScale> {
        self.scan_scale
    }

    /// The same line integrals, reconstructed into the box `b` of the detector's default volume
    /// only (a thin slab, an x/y region of interest: [`Geometry::with_subvolume`]), and cut to
    /// the detector rows and columns the box projects onto ([`boxed_geometry`]): the rest of the
    /// detector carries nothing the box's voxels explain, and the operator's data side (its 2D
    /// transforms and gridding) then follows the box's size rather than the detector's.
    pub fn with_volume(self, b: &VolumeBox) -> Result<Self, ScanError> {
        let scan_scale = self.scan_scale.or_else(|| self.data_scale());
        let this = Self { scan_scale, ..self };
        let (deth, detw) = (this.geometry.deth, this.geometry.detw);
        let (geometry, [rows, columns]) = boxed_geometry(&this.geometry, b)?;
        if [&rows, &columns] == [&(0..deth), &(0..detw)] {
            return Ok(Self { geometry, ..this });
        }
        let values = this
            .values
            .chunks(deth * detw)
            .flat_map(|frame| frame[rows.start * detw..rows.end * detw].chunks(detw))
            .flat_map(|row| &row[columns.clone()])
            .copied()
            .collect();
        Ok(Self {
            geometry,
            values,
            ..this
        })
    }
}

/// The geometry of the box `b` of `g`'s default volume ([`Geometry::with_subvolume`]) on the
/// detector rows and columns it projects onto ([`Geometry::shadow_rows`],
/// [`Geometry::shadow_columns`]), and those `[rows, columns]` of `g`'s detector. The columns
/// keep the rotation axis where it was on the detector (`center` moves with the cut's first
/// column), so every voxel still projects onto the pixel it did.
pub fn boxed_geometry(
    g: &Geometry,
    b: &VolumeBox,
) -> Result<(Geometry, [Range<usize>; 2]), GeometryError> {
    let boxed = g.with_subvolume(b)?;
    let rows = boxed.shadow_rows();
    let boxed = match rows == (0..boxed.deth) {
        true => boxed,
        false => boxed.with_detector_rows(rows.clone())?,
    };
    let columns = boxed.shadow_columns();
    if columns == (0..boxed.detw) {
        return Ok((boxed, [rows, columns]));
    }
    let cut = Geometry {
        detw: columns.len(),
        center: Some(boxed.rotation_axis() - columns.start as f64),
        ..boxed
    };
    cut.validate()?;
    Ok((cut, [rows, columns]))
}

/// How many rows and columns `[before, after]` a detector is padded by (edge values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DetectorPadding {
    pub rows: [usize; 2],
    pub columns: [usize; 2],
}

/// Projections in the operator's normalisation with padding, read by the solver a block of
/// whole projections at a time (see [`Projections::operator_blocks`]).
pub(crate) struct OperatorBlocks<'a> {
    values: &'a [f32],
    /// The angle `values` starts at.
    first_angle: usize,
    deth: usize,
    detw: usize,
    pad: DetectorPadding,
    scale: f64,
}

impl ProjectionBlocks for OperatorBlocks<'_> {
    fn fill(&self, start: usize, out: &mut [f32]) {
        let (h, w) = (self.deth, self.detw);
        let ([top, bottom], [left, right]) = (self.pad.rows, self.pad.columns);
        let padded_w = left + w + right;
        let padded_frame = (top + h + bottom) * padded_w;
        let scaled = |v: f32| (v as f64 * self.scale) as f32;
        let first = start / padded_frame - self.first_angle;
        for (frame, padded) in self.values[first * h * w..]
            .chunks(h * w)
            .zip(out.chunks_mut(padded_frame))
        {
            for (r, out_row) in padded.chunks_mut(padded_w).enumerate() {
                // Rows beyond the detector repeat its first or last row.
                let source = r.saturating_sub(top).min(h - 1);
                let row = &frame[source * w..(source + 1) * w];
                let (before, rest) = out_row.split_at_mut(left);
                let (middle, after) = rest.split_at_mut(w);
                before.fill(scaled(row[0]));
                for (o, &v) in middle.iter_mut().zip(row) {
                    *o = scaled(v);
                }
                after.fill(scaled(row[w - 1]));
            }
        }
    }
}

/// Checks a scan's geometry: every size at least 1 (the reconstruction pads sizes the operator
/// does not take, see `recon::padding`), and every other requirement of the operator (angles,
/// tilt, accuracy, the rotation axis, sizes that overflow) on the geometry with each size rounded
/// up to even, the size its padding has at least.
pub fn validate_scan_geometry(g: &Geometry) -> Result<(), ScanError> {
    let sizes = [
        ("n0", g.n0),
        ("n1", g.n1),
        ("n2", g.n2),
        ("deth", g.deth),
        ("detw", g.detw),
    ];
    if let Some(&(name, _)) = sizes.iter().find(|(_, n)| *n == 0) {
        return Err(ScanError::EmptyAxis { name });
    }
    // The largest odd size has no even size above it: an overflow, not a panic.
    let even = |n: usize| n.checked_add(n % 2).ok_or(GeometryError::Overflow);
    Geometry {
        n0: even(g.n0)?,
        n1: even(g.n1)?,
        n2: even(g.n2)?,
        deth: even(g.deth)?,
        detw: even(g.detw)?,
        ..g.clone()
    }
    .validate()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Tilt;

    /// In-memory intensities become `-ln((I - D) / (F - D))` of the mean flat and dark, clamped
    /// pixels counted; a shape that is not the geometry's and a scan of mostly clamped pixels
    /// are refused.
    #[test]
    fn intensities_with_flats_and_darks_become_line_integrals() {
        let g = Geometry::cube(4, 3, Tilt::from_degrees(30.0));
        let n = g.data_len();
        let frame = g.deth * g.detw;
        let data = Stack {
            shape: [g.ntheta(), g.deth, g.detw],
            values: (0..n).map(|i| 20.0 + 10.0 * (i % 5) as f32).collect(),
        };
        // Flats 100 and 120 average to 110, darks 5 and 15 to 10: the open beam is 100.
        let flats = Stack {
            shape: [2, g.deth, g.detw],
            values: [vec![100.0; frame], vec![120.0; frame]].concat(),
        };
        let darks = Stack {
            shape: [2, g.deth, g.detw],
            values: [vec![5.0; frame], vec![15.0; frame]].concat(),
        };
        let (p, counts) = Projections::from_intensities(g.clone(), &data, &flats, &darks).unwrap();
        assert!(counts.clamped == 0 && counts.pixels == n as u64);
        for (v, i) in p.values().iter().zip(&data.values) {
            let expected = -((*i as f64 - 10.0) / 100.0).ln();
            assert!((*v as f64 - expected).abs() <= 1e-6, "{v} {expected}");
        }

        let transposed = Stack {
            shape: [g.deth, g.ntheta(), g.detw],
            values: data.values.clone(),
        };
        let e = Projections::from_intensities(g.clone(), &transposed, &flats, &darks).unwrap_err();
        assert!(matches!(e, ScanError::IntensityShape { .. }), "{e}");

        let dead = Stack {
            shape: flats.shape,
            values: vec![0.0; 2 * frame],
        };
        let e = Projections::from_intensities(g, &data, &dead, &darks).unwrap_err();
        assert!(
            matches!(e, ScanError::Clamped { counts, .. } if counts.clamped == n as u64),
            "{e}"
        );
    }

    /// The padded, scaled data the solver reads block by block are the projections with their
    /// edge rows and columns repeated, scaled by `1 / sqrt(n2 ntheta)` of the padded geometry,
    /// whatever the blocks and however uneven the padding.
    #[test]
    fn operator_blocks_pad_and_scale_any_block_of_projections() {
        let g = Geometry::cube(6, 5, Tilt::from_degrees(30.0));
        let values: Vec<f32> = (0..g.data_len()).map(|i| (i as f32).sin() + 1.5).collect();
        let p = Projections::new(g.clone(), values.clone()).unwrap();
        for (rows, columns) in [
            ([0, 0], [0, 0]),
            ([0, 0], [1, 1]),
            ([2, 1], [1, 0]),
            ([0, 3], [3, 2]),
        ] {
            let pad = DetectorPadding { rows, columns };
            let (h, w) = (g.deth + rows[0] + rows[1], g.detw + columns[0] + columns[1]);
            let padded = Geometry {
                deth: h,
                detw: w,
                n2: g.n2 + columns[0] + columns[1],
                ..g.clone()
            };
            let scale = 1.0 / ((padded.n2 * padded.ntheta()) as f64).sqrt();
            let mut expected = Vec::new();
            for frame in values.chunks(g.deth * g.detw) {
                for r in 0..h {
                    let row =
                        (r as isize - rows[0] as isize).clamp(0, g.deth as isize - 1) as usize;
                    for c in 0..w {
                        let col = (c as isize - columns[0] as isize).clamp(0, g.detw as isize - 1)
                            as usize;
                        expected.push((frame[row * g.detw + col] as f64 * scale) as f32);
                    }
                }
            }
            let plane = h * w;
            for planes_per_block in [1, 2, 5] {
                let mut got = vec![f32::NAN; plane * g.ntheta()];
                for (k, out) in got.chunks_mut(planes_per_block * plane).enumerate() {
                    p.operator_blocks(pad, &padded)
                        .fill(k * planes_per_block * plane, out);
                }
                assert!(got == expected, "{pad:?}, {planes_per_block} per block");
            }
        }
        assert!(p.operator_data() == expected_unpadded(&p));
    }

    /// A scan of any size at least 1 is valid (odd and 1-pixel sizes are padded later); a zero
    /// size and the operator's other requirements are refused with the axis named.
    #[test]
    fn scan_geometry_takes_any_size_but_zero() {
        let g = Geometry {
            n0: 1,
            n1: 31,
            n2: 31,
            deth: 1,
            detw: 31,
            ..Geometry::cube(4, 3, Tilt::CT)
        };
        validate_scan_geometry(&g).unwrap();
        let empty = Geometry {
            detw: 0,
            ..g.clone()
        };
        let err = validate_scan_geometry(&empty).unwrap_err();
        assert!(
            matches!(err, ScanError::EmptyAxis { name: "detw" }),
            "{err}"
        );
        let huge = Geometry {
            n0: usize::MAX,
            ..g.clone()
        };
        assert!(matches!(
            validate_scan_geometry(&huge),
            Err(ScanError::Geometry(GeometryError::Overflow))
        ));
        let tilt = Geometry {
            tilt: Tilt::from_phi(0.0),
            ..g
        };
        assert!(matches!(
            validate_scan_geometry(&tilt),
            Err(ScanError::Geometry(GeometryError::PhiOutOfRange { .. }))
        ));
    }

    fn expected_unpadded(p: &Projections) -> Vec<f32> {
        let g = p.geometry();
        let scale = 1.0 / ((g.n2 * g.ntheta()) as f64).sqrt();
        p.values()
            .iter()
            .map(|&v| (v as f64 * scale) as f32)
            .collect()
    }
}
