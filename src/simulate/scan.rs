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

/// A simulated scan and the exact line integrals it was measured from.
#[derive(Debug, Clone)]
pub struct SimulatedScan {
    pub geometry: Geometry,
    pub scan: Scan,
    /// The noiseless line integrals `(ntheta, deth, detw)`.
    pub line_integrals: Vec<f32>,
}

/// Simulates the scan `spec` describes.
pub fn simulated_scan(spec: &ScanSpec) -> Result<SimulatedScan, SimulateError> {
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
    let line_integrals = project(&phantom, &g);
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
    })
}
