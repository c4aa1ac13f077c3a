//! What differs between the geometry a checkpoint was written for and a run's, field by field
//! with both values, so that a refused resume says what changed.

use std::fmt;

use crate::geometry::Geometry;
use crate::geometry::Tilt;

/// A field in which the geometry a checkpoint was written for and a run's differ, with both
/// values (exact: the shortest decimals that read back as the same bits), so that a refused
/// resume says what changed.
#[derive(Debug, Clone, PartialEq)]
pub struct GeometryDifference {
    /// The field, as [`Geometry`] names it (`rotation_axis` for `center`, `theta[i]` for an
    /// angle), with its unit.
    pub field: String,
    pub checkpoint: String,
    pub this_run: String,
}

impl fmt::Display for GeometryDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            field,
            checkpoint,
            this_run,
        } = self;
        write!(f, "{field}: checkpoint {checkpoint}, this run {this_run}")
    }
}

impl GeometryDifference {
    fn new(field: impl Into<String>, checkpoint: impl ToString, this_run: impl ToString) -> Self {
        Self {
            field: field.into(),
            checkpoint: checkpoint.to_string(),
            this_run: this_run.to_string(),
        }
    }

    /// Every field in which `checkpoint` and `run` differ (bit for bit, as the fingerprint
    /// compares them), in [`Geometry`]'s order; of the angles, their number or the first one
    /// that differs with how many do.
    pub fn list(checkpoint: &Geometry, run: &Geometry) -> Vec<Self> {
        // Destructured so that a new field cannot be forgotten here.
        let Geometry {
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
        } = checkpoint;
        let mut found = Vec::new();
        for (field, c, r) in [
            ("n0", n0, &run.n0),
            ("n1", n1, &run.n1),
            ("n2", n2, &run.n2),
            ("deth", deth, &run.deth),
            ("detw", detw, &run.detw),
        ] {
            if c != r {
                found.push(Self::new(field, c, r));
            }
        }
        let same = |a: &f64, b: &f64| a.to_bits() == b.to_bits();
        if theta.len() != run.theta.len() {
            let angles = |n: usize| format!("{n} angles");
            found.push(Self::new(
                "theta",
                angles(theta.len()),
                angles(run.theta.len()),
            ));
        } else if let Some(i) = theta.iter().zip(&run.theta).position(|(c, r)| !same(c, r)) {
            let count = theta
                .iter()
                .zip(&run.theta)
                .filter(|(c, r)| !same(c, r))
                .count();
            found.push(Self::new(
                format!(
                    "theta[{i}] (radians; {count} of {} angles differ)",
                    theta.len()
                ),
                theta[i],
                run.theta[i],
            ));
        }
        if !same(&tilt.phi(), &run.tilt.phi()) {
            let shown = |t: Tilt| format!("{:.6} deg (phi {} rad)", t.degrees(), t.phi());
            found.push(Self::new("tilt", shown(*tilt), shown(run.tilt)));
        }
        if !same(eps, &run.eps) {
            found.push(Self::new("eps", eps, run.eps));
        }
        // The axis as a column, and whether it was the default centre column: a default and an
        // explicit axis on the same column are different geometries to the fingerprint.
        let axis = |c: &Option<f64>, g: &Geometry| match c {
            Some(c) => c.to_string(),
            None => format!("{} (the centre column)", g.rotation_axis()),
        };
        if center.map(f64::to_bits) != run.center.map(f64::to_bits) {
            found.push(Self::new(
                "rotation_axis (the operator's detector columns)",
                axis(center, checkpoint),
                axis(&run.center, run),
            ));
        }
        if offset.iter().zip(&run.offset).any(|(c, r)| !same(c, r)) {
            found.push(Self::new(
                "offset (z, y, x voxels)",
                format!("{offset:?}"),
                format!("{:?}", run.offset),
            ));
        }
        // The projections' shifts: none on one side, or the first that differs.
        let shown = |s: &[[f64; 2]]| match s.len() {
            0 => "none".to_string(),
            n => format!("{n} projections'"),
        };
        if shifts.len() != run.shifts.len() {
            found.push(Self::new(
                "shifts (du, dv pixels)",
                shown(shifts),
                shown(&run.shifts),
            ));
        } else if let Some(i) = shifts
            .iter()
            .zip(&run.shifts)
            .position(|(c, r)| !same(&c[0], &r[0]) || !same(&c[1], &r[1]))
        {
            found.push(Self::new(
                format!("shifts[{i}] (du, dv pixels)"),
                format!("{:?}", shifts[i]),
                format!("{:?}", run.shifts[i]),
            ));
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_field_with_both_values() {
        let g = Geometry::cube(16, 8, Tilt::from_phi(2.0));
        assert!(GeometryDifference::list(&g, &g).is_empty());
        // The projections' shifts: none against some, then the first that differs.
        let moved = Geometry {
            shifts: vec![[0.5, -1.0]; 8],
            ..g.clone()
        };
        let shifts = |a: &Geometry, b: &Geometry| -> Vec<String> {
            let list = GeometryDifference::list(a, b);
            list.iter().map(ToString::to_string).collect()
        };
        assert_eq!(
            shifts(&g, &moved),
            ["shifts (du, dv pixels): checkpoint none, this run 8 projections'"]
        );
        let mut other = moved.clone();
        other.shifts[2] = [0.5, 1.0];
        assert_eq!(
            shifts(&moved, &other),
            ["shifts[2] (du, dv pixels): checkpoint [0.5, -1.0], this run [0.5, 1.0]"]
        );
        let mut run = g.clone();
        run.detw = 18;
        run.theta[3] += 0.5;
        run.center = Some(8.25);
        let named: Vec<String> = GeometryDifference::list(&g, &run)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            named,
            [
                "detw: checkpoint 16, this run 18".to_string(),
                format!(
                    "theta[3] (radians; 1 of 8 angles differ): checkpoint {}, this run {}",
                    g.theta[3], run.theta[3]
                ),
                "rotation_axis (the operator's detector columns): checkpoint 8 (the centre \
                 column), this run 8.25"
                    .to_string(),
            ]
        );
        run.tilt = Tilt::from_degrees(30.0);
        let tilt = GeometryDifference::list(
            &Geometry {
                tilt: Tilt::from_degrees(20.0),
                ..g.clone()
            },
            &run,
        )
        .iter()
        .map(ToString::to_string)
        .find(|d| d.starts_with("tilt"))
        .unwrap();
        assert_eq!(
            tilt,
            format!(
                "tilt: checkpoint 20.000000 deg (phi {} rad), this run 30.000000 deg (phi {} rad)",
                Tilt::from_degrees(20.0).phi(),
                Tilt::from_degrees(30.0).phi()
            )
        );
        run.theta.pop();
        let theta = &GeometryDifference::list(&g, &run)[1];
        assert_eq!(
            theta.to_string(),
            "theta: checkpoint 8 angles, this run 7 angles"
        );
    }
}
