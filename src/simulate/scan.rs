//! A whole simulated scan: a preset phantom, its exact projections at equispaced angles and the
//! measured intensities with flat and dark fields, as a DXchange [`Scan`] with the ground truth.

use super::{measure, project, rasterize, Noise, PhantomKind, SimulateError};
use crate::geometry::Geometry;
use crate::geometry::Tilt;
use crate::io::{Scan, Stack};
use crate::memory::check_available;

/// What to simulate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScanSpec {
    pub phantom: PhantomKind,
    /// Volume side n (n^3 voxels, n x n detector); even.
    pub size: usize,
    /// Projection angles, equispaced over [0, 360) degrees.
    pub angles: usize,
    /// Laminographic tilt T in degrees: phi = 90 + T, so 0 is plain tomography.
    pub tilt_deg: f64,
    /// Incident photons per pixel: Poisson-noisy counts with flats = I0; `None`: noiseless
    /// intensities exp(-P) with flats = 1.
    pub photons: Option<f64>,
    /// Seed of the Poisson noise.
    pub seed: u64,
    /// The detector column the rotation axis projects onto (pixels, sub-pixel); `None`: the
    /// centre column `size / 2`.
    pub rotation_axis: Option<f64>,
}

/// How the sample moved during a simulated scan: each projection shifted on the detector by a
/// random jitter and a slow drift (`lamino simulate --jitter --drift`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Motion {
    /// RMS of the random shift in each direction (columns and rows), pixels: independent
    /// normal draws per projection, seeded.
    pub jitter_px: f64,
    /// The drift in each direction over the scan, pixels: a shift growing linearly from 0 at
    /// the first projection to this at the last.
    pub drift_px: f64,
    /// Seed of the jitter.
    pub seed: u64,
}

impl Motion {
    /// A sample that did not move.
    pub const STILL: Motion = Motion {
        jitter_px: 0.0,
        drift_px: 0.0,
        seed: 0,
    };

    /// The shift `[du, dv]` of each of `angles` projections, pixels; none for a still sample.
    pub fn shifts(&self, angles: usize) -> Vec<[f64; 2]> {
        if self.jitter_px == 0.0 && self.drift_px == 0.0 {
            return Vec::new();
        }
        let mut rng = crate::random::SplitMix64::new(self.seed);
        let last = angles.saturating_sub(1).max(1) as f64;
        (0..angles)
            .map(|t| {
                let drift = self.drift_px * t as f64 / last;
                let du = self.jitter_px * rng.next_normal() + drift;
                let dv = self.jitter_px * rng.next_normal() + drift;
                [du, dv]
            })
            .collect()
    }
}

/// A simulated scan and the exact line integrals it was measured from.
#[derive(Debug, Clone)]
pub struct SimulatedScan {
    /// The scan's geometry as a reconstruction is told it: without the projections' shifts.
    pub geometry: Geometry,
    pub scan: Scan,
    /// The noiseless line integrals `(ntheta, deth, detw)`, of the moved projections.
    pub line_integrals: Vec<f32>,
    /// The true shift `[du, dv]` of each projection, pixels (empty when the sample was still).
    pub shifts: Vec<[f64; 2]>,
}

/// Simulates the scan `spec` describes, of a still sample.
pub fn simulated_scan(spec: &ScanSpec) -> Result<SimulatedScan, SimulateError> {
    simulated_moving_scan(spec, Motion::STILL)
}

/// Simulates the scan `spec` describes with the sample moving as `motion` says: each projection
/// is the still one shifted by its shift, projected exactly (no interpolation).
pub fn simulated_moving_scan(
    spec: &ScanSpec,
    motion: Motion,
) -> Result<SimulatedScan, SimulateError> {
    // The ground truth, the line integrals and the intensities in f32, and the angles in f64,
    // from the sizes alone: checked before the angle list (or anything else) is allocated.
    let (n, angles) = (spec.size as u64, spec.angles as u64);
    let needed = n
        .checked_pow(3)
        .and_then(|v| v.checked_mul(4))
        .zip(
            n.checked_pow(2)
                .and_then(|p| p.checked_mul(angles)?.checked_mul(4 * 2)),
        )
        .and_then(|(volume, data)| {
            volume
                .checked_add(data)?
                .checked_add(angles.checked_mul(8)?)
        })
        .ok_or(SimulateError::TooLarge {
            size: spec.size,
            angles: spec.angles,
        })?;
    check_available(
        &format!(
            "simulating a {}^3 scan at {} angles",
            spec.size, spec.angles
        ),
        needed,
        "choose a smaller --size or fewer --angles",
    )?;
    let tilt = Tilt::from_degrees(spec.tilt_deg);
    let g = Geometry {
        center: spec.rotation_axis,
        ..Geometry::cube(spec.size, spec.angles, tilt)
    };
    g.validate()?;
    let phantom = spec.phantom.build(spec.size);
    let moved = Geometry {
        shifts: motion.shifts(g.ntheta()),
        ..g.clone()
    };
    moved.validate()?;
    let line_integrals = project(&phantom, &moved);
    let noise = match spec.photons {
        Some(_) => Noise::Poisson { seed: spec.seed },
        None => Noise::None,
    };
    let frame = [1, g.deth, g.detw];
    let m = measure(
        &line_integrals,
        g.deth * g.detw,
        spec.photons.unwrap_or(1.0),
        noise,
    )?;
    let scan = Scan {
        data: Stack {
            shape: [g.ntheta(), g.deth, g.detw],
            values: m.data,
        },
        flats: Stack {
            shape: frame,
            values: m.flat,
        },
        darks: Stack {
            shape: frame,
            values: m.dark,
        },
        theta: g.theta.clone(),
        tilt: Some(tilt),
        truth: Some(Stack {
            shape: [g.n0, g.n1, g.n2],
            values: rasterize(&phantom, &g),
        }),
    };
    Ok(SimulatedScan {
        geometry: g,
        scan,
        line_integrals,
        shifts: moved.shifts,
    })
}
