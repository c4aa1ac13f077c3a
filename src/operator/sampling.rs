//! What the operator samples of a geometry: the detector phases that place each projection
//! (rotation axis, volume offset) and the Fourier frequencies each detector row and column
//! samples, in the f32 arithmetic of the reference.

use std::f64::consts::PI;

use crate::geometry::{is_zero_offset, Geometry};

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
    /// angle's with an offset or the projections' own shifts, else one.
    pub fn detector_phase_angles(&self) -> usize {
        if is_zero_offset(&self.offset) && self.shifts.is_empty() {
            1
        } else {
            self.ntheta()
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Tilt;

    #[test]
    fn the_axis_phase_is_the_fourier_shift_in_f64() {
        let g = Geometry {
            center: Some(15.37),
            ..Geometry::for_detector(8, 26, vec![0.0], Tilt::from_phi(1.9))
        };
        assert_eq!(g.rotation_axis(), 15.37);
        assert!((g.axis_shift() - 2.37).abs() < 1e-12);
        for (b, p) in g.detector_phases().columns.iter().enumerate() {
            let angle = -2.0 * PI * (b as f64 - 13.0) * 2.37 / 26.0;
            assert!((p[0] as f64 - angle.cos()).abs() < 1e-7, "{b}");
            assert!((p[1] as f64 - angle.sin()).abs() < 1e-7, "{b}");
        }
        // The default axis: no phase at all.
        let centred = Geometry::cube(16, 2, Tilt::from_phi(1.9));
        assert!(centred
            .detector_phases()
            .columns
            .iter()
            .all(|&p| p == [1.0, 0.0]));
        // A large shift keeps its digits (reduced modulo detw before the angle).
        let far = Geometry {
            center: Some(1000.25),
            ..Geometry::for_detector(8, 2048, vec![0.0], Tilt::from_phi(1.9))
        };
        let b = 2047;
        let turns = ((b as f64 - 1024.0) * (1000.25 - 1024.0) / 2048.0).rem_euclid(1.0);
        let p = far.detector_phases().columns[b];
        let expect = -2.0 * PI * turns;
        assert!((p[0] as f64 - expect.cos()).abs() < 1e-7);
        assert!((p[1] as f64 - expect.sin()).abs() < 1e-7);
    }

    #[test]
    fn the_offset_projects_as_a_per_angle_detector_shift() {
        let g = Geometry {
            offset: [3.0, -2.5, 4.25],
            center: Some(13.5),
            ..Geometry::for_detector(8, 26, vec![0.0, 0.7, 2.1], Tilt::from_phi(1.9))
        };
        g.validate().unwrap();
        let phases = g.detector_phases();
        assert_eq!(phases.angles, 3);
        let (sp, cp) = g.tilt.phi().sin_cos();
        for (t, &theta) in g.theta.iter().enumerate() {
            let (st, ct) = theta.sin_cos();
            let sv = 4.25 * st * cp + 2.5 * ct * cp + 3.0 * sp;
            let su = 4.25 * ct - 2.5 * st + 0.5;
            let [rv, ru] = g.projection_shift(t);
            assert!((rv - sv).abs() < 1e-12 && (ru - su).abs() < 1e-12, "{t}");
            for a in 0..g.deth {
                for b in 0..g.detw {
                    let turns = (a as f64 - 4.0) * sv / 8.0 + (b as f64 - 13.0) * su / 26.0;
                    let angle = -2.0 * PI * turns;
                    let p = phases.at(t, a, b);
                    assert!((p[0] as f64 - angle.cos()).abs() < 1e-6, "{t} {a} {b}");
                    assert!((p[1] as f64 - angle.sin()).abs() < 1e-6, "{t} {a} {b}");
                }
            }
        }
    }
}
