//! The tilt of the rotation axis, with its units at its boundaries: users give degrees from
//! plain tomography (`--tilt-deg`, Python's `tilt`), the operator and its files take the angle
//! `phi` between the rotation axis and the beam in radians. The one place the two meet.

use std::f64::consts::FRAC_PI_2;

use serde::{Deserialize, Serialize};

/// The tilt of the rotation axis. Stored as the operator's angle `phi` (radians, pi/2 is plain
/// tomography), which is what geometry JSON files and checkpoints hold (`"phi"`), so the
/// serialised form is that number.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Tilt {
    phi: f64,
}

impl Tilt {
    /// Plain tomography: the rotation axis perpendicular to the beam (tilt 0 degrees).
    pub const CT: Tilt = Tilt { phi: FRAC_PI_2 };

    /// The tilt a user states, in degrees away from plain tomography (lamino's `--tilt-deg`,
    /// Python's `tilt`): 0 is CT, laminography is typically 20 to 70 either way.
    pub const fn from_degrees(degrees: f64) -> Self {
        Self {
            phi: (90.0 + degrees).to_radians(),
        }
    }

    /// The operator's angle `phi` between the rotation axis and the beam, in radians (pi/2 is
    /// plain tomography): what geometry files and DXchange's laminography angle record.
    pub const fn from_phi(phi: f64) -> Self {
        Self { phi }
    }

    /// The operator's angle `phi` in radians.
    pub const fn phi(self) -> f64 {
        self.phi
    }

    /// Degrees away from plain tomography, signed as the user gave them: what messages,
    /// reports and `--tilt-deg` show.
    pub const fn degrees(self) -> f64 {
        self.phi.to_degrees() - 90.0
    }
}

#[cfg(test)]
mod tests {
    use super::Tilt;

    #[test]
    fn degrees_and_the_operators_angle_are_one_tilt() {
        assert_eq!(Tilt::from_degrees(0.0), Tilt::CT);
        assert!((Tilt::from_degrees(30.0).phi() - 120f64.to_radians()).abs() < 1e-15);
        for degrees in [-61.0, -20.0, 0.0, 0.25, 30.0, 89.0] {
            let back = Tilt::from_phi(Tilt::from_degrees(degrees).phi()).degrees();
            assert!((back - degrees).abs() < 1e-12, "{degrees} -> {back}");
        }
        let json = serde_json::to_string(&Tilt::from_phi(1.25)).unwrap();
        assert_eq!(
            json, "1.25",
            "files hold phi in radians, as before the type"
        );
    }
}
