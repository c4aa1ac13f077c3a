//! The scan as the solver takes it: line integrals with their geometry ([`Projections`]),
//! validated once (shape, finite values), below both the preprocessing that transforms them and
//! the reconstruction pipeline that solves for them.

use std::ops::Range;

use thiserror::Error;

use crate::operator::{Geometry, GeometryError};
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
}

/// Line integrals `-ln(I / I0)` in units of the voxel size, `(ntheta, deth, detw)` row-major,
/// with their geometry.
#[derive(Debug, Clone)]
pub struct Projections {
    geometry: Geometry,
    values: Vec<f32>,
    /// The first angle `values` holds (0 unless an MPI rank holds only its share).
    first: usize,
}

impl Projections {
    /// Validates the geometry, the shape and that every value is finite.
    pub fn new(geometry: Geometry, values: Vec<f32>) -> Result<Self, ScanError> {
        let all = 0..geometry.ntheta();
        Self::part(geometry, all, values)
    }

    /// The projections of `angles` only (an MPI rank's share: it reads and solves with no
    /// others), validated as [`new`](Self::new) validates all of them.
    pub fn part(
        geometry: Geometry,
        angles: Range<usize>,
        values: Vec<f32>,
    ) -> Result<Self, ScanError> {
        geometry.validate()?;
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
    /// angle must be held.
    pub fn operator_data(&self) -> Vec<f32> {
        assert_eq!(
            self.angles(),
            0..self.geometry.ntheta(),
            "every angle is held"
        );
        let mut data = vec![0.0; self.geometry.data_len()];
        self.operator_blocks(0).fill(0, &mut data);
        data
    }

    /// The data in the operator's normalisation, padded laterally by `pad` columns on each side
    /// (edge values) as the reference does to keep objects wider than the field of view from
    /// wrapping around: formed a block at a time as the solver reads them, never as a copy.
    pub(crate) fn operator_blocks(&self, pad: usize) -> OperatorBlocks<'_> {
        let g = padded_geometry(&self.geometry, pad);
        OperatorBlocks {
            values: &self.values,
            first_row: self.first * self.geometry.deth,
            detw: self.geometry.detw,
            pad,
            scale: 1.0 / ((g.n2 * g.ntheta()) as f64).sqrt(),
        }
    }

    /// The same line integrals with the rotation axis at detector column `center` (validated).
    pub fn with_rotation_axis(self, center: f64) -> Result<Self, ScanError> {
        let geometry = Geometry {
            center: Some(center),
            ..self.geometry
        };
        geometry.validate()?;
        Ok(Self { geometry, ..self })
    }
}

/// Projections in the operator's normalisation with lateral padding, read by the solver a block
/// of rows at a time (see [`Projections::operator_blocks`]).
pub(crate) struct OperatorBlocks<'a> {
    values: &'a [f32],
    /// The detector row of the whole data `values` starts at.
    first_row: usize,
    detw: usize,
    pad: usize,
    scale: f64,
}

impl ProjectionBlocks for OperatorBlocks<'_> {
    fn fill(&self, start: usize, out: &mut [f32]) {
        let (w, pad) = (self.detw, self.pad);
        let scaled = |v: f32| (v as f64 * self.scale) as f32;
        let first_row = start / (w + 2 * pad) - self.first_row;
        for (row, padded) in self.values[first_row * w..]
            .chunks(w)
            .zip(out.chunks_mut(w + 2 * pad))
        {
            let (left, rest) = padded.split_at_mut(pad);
            let (middle, right) = rest.split_at_mut(w);
            left.fill(scaled(row[0]));
            for (o, &v) in middle.iter_mut().zip(row) {
                *o = scaled(v);
            }
            right.fill(scaled(row[w - 1]));
        }
    }
}

/// The geometry of projections padded laterally by `pad` columns on each side. An explicit
/// rotation axis moves with the padding; the default (detw/2) follows it.
pub(crate) fn padded_geometry(g: &Geometry, pad: usize) -> Geometry {
    Geometry {
        detw: g.detw + 2 * pad,
        n1: g.n1 + 2 * pad,
        n2: g.n2 + 2 * pad,
        center: g.center.map(|c| c + pad as f64),
        ..g.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The padded, scaled data the solver reads block by block are the edge-padded projections
    /// scaled by `1 / sqrt(n2 ntheta)` of the padded geometry, whatever the blocks.
    #[test]
    fn operator_blocks_pad_and_scale_any_block_of_projections() {
        let g = Geometry::cube(6, 5, std::f64::consts::FRAC_PI_2 + 0.5);
        let values: Vec<f32> = (0..g.data_len()).map(|i| (i as f32).sin() + 1.5).collect();
        let p = Projections::new(g.clone(), values.clone()).unwrap();
        for pad in [0, 1, 3] {
            let padded = padded_geometry(&g, pad);
            let scale = 1.0 / ((padded.n2 * padded.ntheta()) as f64).sqrt();
            let expected: Vec<f32> = values
                .chunks(g.detw)
                .flat_map(|row| {
                    let edge = |v: f32| std::iter::repeat_n(v, pad);
                    edge(row[0])
                        .chain(row.iter().copied())
                        .chain(edge(row[g.detw - 1]))
                        .map(|v| (v as f64 * scale) as f32)
                        .collect::<Vec<_>>()
                })
                .collect();
            let plane = padded.deth * padded.detw;
            for planes_per_block in [1, 2, 5] {
                let mut got = vec![f32::NAN; padded.data_len()];
                for (k, out) in got.chunks_mut(planes_per_block * plane).enumerate() {
                    p.operator_blocks(pad)
                        .fill(k * planes_per_block * plane, out);
                }
                assert!(got == expected, "pad {pad}, {planes_per_block} per block");
            }
        }
        assert!(p.operator_data() == expected_unpadded(&p));
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
