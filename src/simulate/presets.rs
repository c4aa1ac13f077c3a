//! The built-in phantoms, each a function of the volume side `n` (cube `n^3`, detector `n x n`).
//!
//! Each preset is a fixed physical object that fills the volume: its table is written in unit
//! coordinates (the volume spans [-1, 1] on each axis, i.e. one unit is `n/2` voxels) with
//! attenuation per unit length, and both are converted to voxels here. Projections therefore
//! take the same values at every `n`, only sampled more finely.

use std::f64::consts::PI;
use std::fmt;
use std::str::FromStr;

use super::{Cuboid, Ellipsoid, Gaussian, Phantom, Primitive};

/// The preset phantoms by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhantomKind {
    Shepp,
    Chip,
    Blobs,
}

impl PhantomKind {
    pub const ALL: [PhantomKind; 3] = [PhantomKind::Shepp, PhantomKind::Chip, PhantomKind::Blobs];

    /// The preset for a volume of side `n`.
    pub fn build(self, n: usize) -> Phantom {
        match self {
            PhantomKind::Shepp => shepp(n),
            PhantomKind::Chip => chip(n),
            PhantomKind::Blobs => blobs(n),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PhantomKind::Shepp => "shepp",
            PhantomKind::Chip => "chip",
            PhantomKind::Blobs => "blobs",
        }
    }
}

impl fmt::Display for PhantomKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PhantomKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PhantomKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown phantom '{s}': expected shepp, chip or blobs"))
    }
}

/// Voxels per unit length for a volume of side `n`.
fn scale(n: usize) -> f64 {
    n as f64 / 2.0
}

/// The 3D modified Shepp–Logan phantom (Toft's contrast-enhanced amplitudes, the table of
/// Schabel's `phantom3d`): ten additive ellipsoids. In that table only ellipsoids 3 and 4 are
/// rotated, by Euler angles with theta = 0, which is a rotation about z alone; we use the 2D
/// phantom's -18 and +18 degrees so that the slice z = 0 is the familiar 2D modified Shepp–Logan.
pub fn shepp(n: usize) -> Phantom {
    // value, semi-axes (a, b, c), centre (x0, y0, z0), rotation about z in degrees.
    const TABLE: [(f64, [f64; 3], [f64; 3], f64); 10] = [
        (1.0, [0.69, 0.92, 0.81], [0.0, 0.0, 0.0], 0.0),
        (-0.8, [0.6624, 0.874, 0.78], [0.0, -0.0184, 0.0], 0.0),
        (-0.2, [0.11, 0.31, 0.22], [0.22, 0.0, 0.0], -18.0),
        (-0.2, [0.16, 0.41, 0.28], [-0.22, 0.0, 0.0], 18.0),
        (0.1, [0.21, 0.25, 0.41], [0.0, 0.35, -0.15], 0.0),
        (0.1, [0.046, 0.046, 0.05], [0.0, 0.1, 0.25], 0.0),
        (0.1, [0.046, 0.046, 0.05], [0.0, -0.1, 0.25], 0.0),
        (0.1, [0.046, 0.023, 0.05], [-0.08, -0.605, 0.0], 0.0),
        (0.1, [0.023, 0.023, 0.02], [0.0, -0.606, 0.0], 0.0),
        (0.1, [0.023, 0.046, 0.02], [0.06, -0.605, 0.0], 0.0),
    ];
    let s = scale(n);
    Phantom {
        primitives: TABLE
            .iter()
            .map(|&(value, axes, centre, degrees)| {
                Primitive::Ellipsoid(Ellipsoid {
                    centre: centre.map(|c| c * s),
                    semi_axes: axes.map(|a| a * s),
                    angle: degrees * PI / 180.0,
                    value: value / s,
                })
            })
            .collect(),
    }
}

/// A box from unit-coordinate bounds, its faces moved to the nearest half-integer voxel
/// coordinate (at least one voxel thick). Voxel centres then never lie on a face, so the
/// rasterised box is exactly its voxel-averaged indicator.
fn snapped_box(lo: [f64; 3], hi: [f64; 3], value: f64, s: f64) -> Primitive {
    let snap = |v: f64| (v * s - 0.5).round() + 0.5;
    let mut centre = [0.0; 3];
    let mut half_size = [0.0; 3];
    for i in 0..3 {
        let a = snap(lo[i]);
        let b = snap(hi[i]).max(a + 1.0);
        centre[i] = (a + b) / 2.0;
        half_size[i] = (b - a) / 2.0;
    }
    Primitive::Cuboid(Cuboid {
        centre,
        half_size,
        value: value / s,
    })
}

/// A flat integrated-circuit sample, the typical laminography object: a thin slab perpendicular
/// to the rotation axis (z) made of a silicon substrate, an oxide layer, two metal layers of wires
/// (along x in the lower, along y in the upper) and vias joining them at some crossings.
/// Values per unit length are roughly proportional to hard X-ray attenuation (oxide < silicon <
/// copper); boxes add, so a wire's value is its excess over the oxide it is embedded in.
pub fn chip(n: usize) -> Phantom {
    const SILICON: f64 = 0.6;
    const OXIDE: f64 = 0.3;
    const METAL: f64 = 4.0;
    const WIRES: [f64; 6] = [-0.6, -0.36, -0.12, 0.12, 0.36, 0.6];
    const HALF_WIDTH: f64 = 0.03;
    const LENGTH: f64 = 0.7;
    let s = scale(n);
    let mut p = vec![
        snapped_box([-0.8, -0.8, -0.3], [0.8, 0.8, -0.1], SILICON, s),
        snapped_box([-0.8, -0.8, -0.1], [0.8, 0.8, 0.2], OXIDE, s),
    ];
    for &y in &WIRES {
        p.push(snapped_box(
            [-LENGTH, y - HALF_WIDTH, 0.0],
            [LENGTH, y + HALF_WIDTH, 0.05],
            METAL,
            s,
        ));
    }
    for &x in &WIRES {
        p.push(snapped_box(
            [x - HALF_WIDTH, -LENGTH, 0.1],
            [x + HALF_WIDTH, LENGTH, 0.15],
            METAL,
            s,
        ));
    }
    for (i, &y) in WIRES.iter().enumerate() {
        for (j, &x) in WIRES.iter().enumerate() {
            if (i + j) % 3 == 0 {
                p.push(snapped_box(
                    [x - HALF_WIDTH, y - HALF_WIDTH, 0.05],
                    [x + HALF_WIDTH, y + HALF_WIDTH, 0.1],
                    METAL,
                    s,
                ));
            }
        }
    }
    Phantom { primitives: p }
}

/// Eight smooth Gaussian blobs. Centres lie within 0.4 units of the middle and sigma is at most
/// 0.12, so each blob is below 3e-4 of its peak at the volume's faces and on the detector's
/// edges at any angle and tilt; sigma is at least 0.1 units (1.6 voxels at n = 32), wide enough
/// that sampling at voxel centres represents the blob to the operator's accuracy.
pub fn blobs(n: usize) -> Phantom {
    // centre (x, y, z), sigma, amplitude per unit length.
    const TABLE: [([f64; 3], f64, f64); 8] = [
        ([0.0, 0.0, 0.0], 0.12, 1.0),
        ([0.25, 0.1, -0.15], 0.1, 2.0),
        ([-0.2, 0.25, 0.1], 0.11, 1.5),
        ([-0.1, -0.3, -0.05], 0.1, 2.5),
        ([0.3, -0.15, 0.12], 0.1, 1.2),
        ([-0.28, -0.05, -0.2], 0.12, 0.8),
        ([0.05, 0.3, 0.2], 0.1, 1.8),
        ([0.12, -0.12, 0.28], 0.11, 1.0),
    ];
    let s = scale(n);
    Phantom {
        primitives: TABLE
            .iter()
            .map(|&(centre, sigma, amplitude)| {
                Primitive::Gaussian(Gaussian {
                    centre: centre.map(|c| c * s),
                    sigma: sigma * s,
                    amplitude: amplitude / s,
                })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_rejected() {
        for k in PhantomKind::ALL {
            assert_eq!(k.name().parse::<PhantomKind>().unwrap(), k);
        }
        let err = "sheep".parse::<PhantomKind>().unwrap_err();
        assert!(err.contains("sheep") && err.contains("blobs"), "{err}");
    }

    #[test]
    fn chip_boxes_have_half_integer_faces_and_fit_the_volume() {
        for n in [16usize, 32, 64] {
            for p in chip(n).primitives {
                let Primitive::Cuboid(b) = p else {
                    panic!("chip holds only boxes")
                };
                for i in 0..3 {
                    for face in [b.centre[i] - b.half_size[i], b.centre[i] + b.half_size[i]] {
                        assert_eq!((face - 0.5).fract(), 0.0, "n {n}: face {face}");
                        assert!(face.abs() <= n as f64 / 2.0, "n {n}: face {face}");
                    }
                    assert!(b.half_size[i] >= 0.5);
                }
            }
        }
    }

    #[test]
    fn blobs_stay_well_inside_the_volume_and_are_wide_enough_to_sample() {
        let n = 32;
        let s = scale(n);
        for p in blobs(n).primitives {
            let Primitive::Gaussian(g) = p else {
                panic!("blobs holds only Gaussians")
            };
            let r = g.centre.iter().map(|c| c * c).sum::<f64>().sqrt();
            assert!(r + 4.0 * g.sigma <= 0.9 * s, "{g:?}");
            assert!(g.sigma >= 1.6, "{g:?}");
        }
    }
}
