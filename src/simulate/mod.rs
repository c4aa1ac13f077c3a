//! Simulated laminography scans: phantoms described as plain lists of primitives, their ground-truth
//! volumes and their exact (analytic) projections, and Poisson-noisy intensities.
//!
//! Projections are computed from the primitives themselves (exact chord lengths through ellipsoids
//! and boxes, the closed form for Gaussians), never by applying the operator to the sampled
//! volume, so that reconstructions of simulated data are not an inverse crime.
//!
//! Coordinates: a point is `[x, y, z]` in voxel units relative to the volume centre, so the voxel
//! with indices `(z, y, x)` of the `(n0, n1, n2)` volume has its centre at
//! `r = (x - n2/2, y - n1/2, z - n0/2)`. Values are attenuation per voxel length, so a line
//! integral `P = sum value * chord length (voxels)` is what `-ln(I/I0)` measures. The detector
//! follows the operator's convention (see [`project`]).

mod noise;
mod presets;
mod scan;

pub use noise::{check_photons, measure, poisson, Measurement, Noise, SimulateError};
pub use presets::{blobs, chip, shepp, PhantomKind};
pub use scan::{simulated_moving_scan, simulated_scan, Motion, ScanSpec, SimulatedScan};

use crate::geometry::Geometry;

/// An ellipsoid rotated by `angle` (radians, counter-clockwise) about the z axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ellipsoid {
    pub centre: [f64; 3],
    /// Semi-axes along the ellipsoid's own x, y, z before rotation.
    pub semi_axes: [f64; 3],
    pub angle: f64,
    pub value: f64,
}

/// An axis-aligned box (named `Cuboid` because `Box` is taken).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cuboid {
    pub centre: [f64; 3],
    pub half_size: [f64; 3],
    pub value: f64,
}

/// An isotropic Gaussian `amplitude * exp(-|r - centre|^2 / (2 sigma^2))`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gaussian {
    pub centre: [f64; 3],
    pub sigma: f64,
    pub amplitude: f64,
}

/// One building block of a phantom; values of overlapping primitives add (as in Shepp–Logan).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Primitive {
    Ellipsoid(Ellipsoid),
    Cuboid(Cuboid),
    Gaussian(Gaussian),
}

/// A phantom: the sum of its primitives.
#[derive(Debug, Clone, PartialEq)]
pub struct Phantom {
    pub primitives: Vec<Primitive>,
}

/// Gaussians are evaluated out to this many sigmas: beyond it `exp(-r^2/2) < 1.3e-14`, far below
/// f32 resolution, so the cut-off changes no stored value.
const GAUSSIAN_REACH: f64 = 8.0;

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

impl Ellipsoid {
    /// A vector (a point relative to the centre, or a direction) in the ellipsoid's own frame:
    /// rotated by `-angle` about z, then scaled so that the ellipsoid becomes the unit sphere.
    fn in_unit_frame(&self, v: [f64; 3]) -> [f64; 3] {
        let (s, c) = self.angle.sin_cos();
        [
            (c * v[0] + s * v[1]) / self.semi_axes[0],
            (-s * v[0] + c * v[1]) / self.semi_axes[1],
            v[2] / self.semi_axes[2],
        ]
    }
}

impl Primitive {
    /// The value at point `p`. A point exactly on a boundary counts as inside.
    pub fn value_at(&self, p: [f64; 3]) -> f64 {
        match self {
            Primitive::Ellipsoid(e) => {
                let q = e.in_unit_frame(sub(p, e.centre));
                if dot(q, q) <= 1.0 {
                    e.value
                } else {
                    0.0
                }
            }
            Primitive::Cuboid(b) => {
                let inside = (0..3).all(|i| (p[i] - b.centre[i]).abs() <= b.half_size[i]);
                if inside {
                    b.value
                } else {
                    0.0
                }
            }
            Primitive::Gaussian(g) => {
                let d = sub(p, g.centre);
                g.amplitude * (-dot(d, d) / (2.0 * g.sigma * g.sigma)).exp()
            }
        }
    }

    /// The integral of the value along the line `origin + s * dir`, s over all reals; `dir` must be
    /// a unit vector (then the parameter length is the geometric length).
    pub fn line_integral(&self, origin: [f64; 3], dir: [f64; 3]) -> f64 {
        match self {
            Primitive::Ellipsoid(e) => {
                // In the unit-sphere frame the line is o + s d (d no longer unit); it meets the
                // sphere where |d|^2 s^2 + 2 (o.d) s + |o|^2 - 1 = 0, and the chord's parameter
                // length 2 sqrt(disc) / |d|^2 is its length in the original frame because the
                // parameter s is shared by both frames.
                let o = e.in_unit_frame(sub(origin, e.centre));
                let d = e.in_unit_frame(dir);
                let a = dot(d, d);
                let b = dot(o, d);
                let disc = b * b - a * (dot(o, o) - 1.0);
                if disc > 0.0 {
                    e.value * 2.0 * disc.sqrt() / a
                } else {
                    0.0
                }
            }
            Primitive::Cuboid(b) => {
                // Slab method: intersect the parameter intervals of the three axis slabs.
                let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
                for i in 0..3 {
                    let (near, far) = (
                        b.centre[i] - b.half_size[i] - origin[i],
                        b.centre[i] + b.half_size[i] - origin[i],
                    );
                    if dir[i] == 0.0 {
                        // Parallel to the slab: inside it everywhere or nowhere.
                        if near > 0.0 || far < 0.0 {
                            return 0.0;
                        }
                    } else {
                        let (t0, t1) = (near / dir[i], far / dir[i]);
                        lo = lo.max(t0.min(t1));
                        hi = hi.min(t0.max(t1));
                    }
                }
                if hi > lo {
                    b.value * (hi - lo)
                } else {
                    0.0
                }
            }
            Primitive::Gaussian(g) => {
                // Distance from the centre to the line is |(c - o) x dir| (no cancellation).
                let q = cross(sub(g.centre, origin), dir);
                let d2 = dot(q, q);
                g.amplitude
                    * (2.0 * std::f64::consts::PI).sqrt()
                    * g.sigma
                    * (-d2 / (2.0 * g.sigma * g.sigma)).exp()
            }
        }
    }

    /// Centre and radius of a sphere outside which the primitive is zero (Gaussians: negligible).
    fn bounding_sphere(&self) -> ([f64; 3], f64) {
        match self {
            Primitive::Ellipsoid(e) => (e.centre, e.semi_axes.iter().cloned().fold(0.0, f64::max)),
            Primitive::Cuboid(b) => (b.centre, dot(b.half_size, b.half_size).sqrt()),
            Primitive::Gaussian(g) => (g.centre, GAUSSIAN_REACH * g.sigma),
        }
    }
}

/// Index range `[lo, hi)` of samples at `i - n/2` (i = 0..n) that lie within `[c - r, c + r]`.
fn index_range(c: f64, r: f64, n: usize) -> std::ops::Range<usize> {
    index_range_from(c, r, n, (n / 2) as f64)
}

/// Index range `[lo, hi)` of samples at `i - origin` (i = 0..n) that lie within `[c - r, c + r]`.
fn index_range_from(c: f64, r: f64, n: usize, origin: f64) -> std::ops::Range<usize> {
    let lo = (c - r + origin).ceil().max(0.0);
    let hi = (c + r + origin).floor() + 1.0;
    let clamp = |v: f64| v.clamp(0.0, n as f64) as usize;
    clamp(lo)..clamp(hi)
}

/// Work split for `std::thread::scope`: one contiguous block of `items` per available core.
fn block_size(items: usize) -> usize {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    items.div_ceil(threads).max(1)
}

/// The phantom sampled at voxel centres: the ground truth, `(n0, n1, n2)` row-major.
pub fn rasterize(phantom: &Phantom, g: &Geometry) -> Vec<f32> {
    let slice = g.n1 * g.n2;
    let mut volume = vec![0.0f32; g.volume_len()];
    if slice == 0 {
        return volume;
    }
    let zs_per_block = block_size(g.n0);
    std::thread::scope(|scope| {
        for (block, out) in volume.chunks_mut(zs_per_block * slice).enumerate() {
            scope.spawn(move || {
                let z0 = block * zs_per_block;
                // Sums in f64 per slice so that many overlapping primitives lose nothing.
                let mut acc = vec![0.0f64; slice];
                for (dz, out_slice) in out.chunks_mut(slice).enumerate() {
                    let z = z0 + dz;
                    let rz = z as f64 - (g.n0 / 2) as f64;
                    acc.fill(0.0);
                    for p in &phantom.primitives {
                        let (c, r) = p.bounding_sphere();
                        if (rz - c[2]).abs() > r {
                            continue;
                        }
                        for y in index_range(c[1], r, g.n1) {
                            let ry = y as f64 - (g.n1 / 2) as f64;
                            for x in index_range(c[0], r, g.n2) {
                                let rx = x as f64 - (g.n2 / 2) as f64;
                                acc[y * g.n2 + x] += p.value_at([rx, ry, rz]);
                            }
                        }
                    }
                    for (o, a) in out_slice.iter_mut().zip(&acc) {
                        *o = *a as f32;
                    }
                }
            });
        }
    });
    volume
}

/// Detector frame at angle `theta` and tilt `phi`: `(e1, e2, ray)` with e1 along detector columns
/// (u), e2 along rows (v) and `ray = e1 x e2`, the operator's convention
/// (`tests/operator.rs::projection_of_a_gaussian_blob_matches_the_analytic_line_integral`).
pub fn detector_frame(theta: f64, phi: f64) -> ([f64; 3], [f64; 3], [f64; 3]) {
    let (st, ct) = theta.sin_cos();
    let (sp, cp) = phi.sin_cos();
    let e1 = [ct, st, 0.0];
    let e2 = [st * cp, -ct * cp, sp];
    (e1, e2, cross(e1, e2))
}

/// Exact line integrals `P_theta u(s_u, s_v) = integral of u(s_u e1 + s_v e2 + t ray) dt`, data
/// layout `(ntheta, deth, detw)`, pixel `(v, w)` at `s_u = w - c - du`, `s_v = v - deth/2 - dv`,
/// with `c` the rotation axis's column ([`Geometry::rotation_axis`], `detw/2` by default) and
/// `(du, dv)` the projection's shift ([`Geometry::shifts`], none by default).
///
/// The operator approximates `P / sqrt(n2 * ntheta)`; rays run through all of space, so parts
/// of the phantom outside the volume are projected too.
pub fn project(phantom: &Phantom, g: &Geometry) -> Vec<f32> {
    let per_angle = g.deth * g.detw;
    let mut data = vec![0.0f32; g.data_len()];
    if per_angle == 0 {
        return data;
    }
    let angles_per_block = block_size(g.ntheta());
    let axis = g.rotation_axis();
    std::thread::scope(|scope| {
        for (block, out) in data.chunks_mut(angles_per_block * per_angle).enumerate() {
            scope.spawn(move || {
                let mut acc = vec![0.0f64; per_angle];
                for (dt, out_angle) in out.chunks_mut(per_angle).enumerate() {
                    let t = block * angles_per_block + dt;
                    let (e1, e2, ray) = detector_frame(g.theta[t], g.tilt.phi());
                    // The projection's own shift moves where the volume's origin lands.
                    let [du, dv] = g.shifts.get(t).copied().unwrap_or([0.0; 2]);
                    let (row_origin, column_origin) = ((g.deth / 2) as f64 + dv, axis + du);
                    acc.fill(0.0);
                    for p in &phantom.primitives {
                        // Only pixels within the projected bounding sphere can see the primitive.
                        let (c, r) = p.bounding_sphere();
                        for v in index_range_from(dot(e2, c), r, g.deth, row_origin) {
                            let sv = v as f64 - row_origin;
                            for w in index_range_from(dot(e1, c), r, g.detw, column_origin) {
                                let su = w as f64 - column_origin;
                                let origin = [
                                    su * e1[0] + sv * e2[0],
                                    su * e1[1] + sv * e2[1],
                                    su * e1[2] + sv * e2[2],
                                ];
                                acc[v * g.detw + w] += p.line_integral(origin, ray);
                            }
                        }
                    }
                    for (o, a) in out_angle.iter_mut().zip(&acc) {
                        *o = *a as f32;
                    }
                }
            });
        }
    });
    data
}
