//! Calibration: the physical size of a detector pixel or a voxel, which every output records.

/// A length unit of a calibrated pixel or voxel size. Micrometres only: what DXchange files
/// record and tomocupy's `--pixel-size` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LengthUnit {
    #[serde(rename = "micrometer")]
    Micrometer,
}

impl LengthUnit {
    /// The name OME-NGFF (a UDUNITS-2 name) and HDF5 attributes use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Micrometer => "micrometer",
        }
    }

    /// The name ImageJ's TIFF metadata uses (`unit=micron`, which Fiji shows as µm).
    pub fn imagej_name(self) -> &'static str {
        match self {
            Self::Micrometer => "micron",
        }
    }
}

/// The edge of a detector pixel or a (cubic) voxel in physical units.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PixelSize {
    /// Positive and finite.
    pub value: f64,
    pub unit: LengthUnit,
}

impl PixelSize {
    /// `value` micrometres, when positive and finite.
    pub fn micrometers(value: f64) -> Option<Self> {
        (value.is_finite() && value > 0.0).then_some(Self {
            value,
            unit: LengthUnit::Micrometer,
        })
    }

    /// The size of `factor` pixels side by side: a voxel of a volume reconstructed from
    /// projections binned `factor` times.
    pub fn binned(self, factor: usize) -> Self {
        Self {
            value: self.value * factor as f64,
            ..self
        }
    }
}
