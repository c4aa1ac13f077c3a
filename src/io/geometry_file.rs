//! The geometry's JSON file (`n0, n1, n2, deth, detw, theta, phi`, optional `eps`, `center` and
//! `offset`), read through the bounded text reader like every text input.

use std::path::Path;

use crate::geometry::{Geometry, GeometryError};

impl Geometry {
    /// Reads a geometry JSON file (`n0, n1, n2, deth, detw, theta, phi`, optional `eps`,
    /// `center` and `offset`).
    pub fn read_json(path: &Path) -> Result<Self, GeometryError> {
        let g = Self::parse_json(path)?;
        g.validate()?;
        Ok(g)
    }

    /// Reads a geometry JSON file without [`validate`](Self::validate): for a scan's geometry,
    /// whose sizes may be any (the reconstruction pads them, see `recon::padding`) and which
    /// the scan's own check (`scan::validate_scan_geometry`) validates.
    pub fn parse_json(path: &Path) -> Result<Self, GeometryError> {
        let err = |reason: String| GeometryError::File {
            path: path.display().to_string(),
            reason,
        };
        let text = super::read_text(path).map_err(|e| err(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| err(e.to_string()))
    }

    /// Writes the geometry as JSON.
    pub fn write_json(&self, path: &Path) -> Result<(), GeometryError> {
        let err = |reason: String| GeometryError::File {
            path: path.display().to_string(),
            reason,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| err(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| err(e.to_string()))
    }
}
