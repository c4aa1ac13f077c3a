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
    /// From [`PixelSize::MIN_MICROMETERS`] to [`PixelSize::MAX_MICROMETERS`] (binned: times the
    /// binning).
    pub value: f64,
    pub unit: LengthUnit,
}

impl PixelSize {
    /// The sizes lamino takes, 0.1 nm to 1 cm: every output records one of them the same way,
    /// the TIFF resolution (pixels per unit as a ratio of two 32-bit integers) within 2e-6 of the
    /// decimal value of the ImageJ, HDF5 and OME-Zarr metadata. Far beyond them (`1e300`,
    /// `1e-300`) the resolution saturates, and no detector has such pixels.
    pub const MIN_MICROMETERS: f64 = 1e-4;
    pub const MAX_MICROMETERS: f64 = 1e4;

    /// `value` micrometres, or why it is no pixel size: not from
    /// [`MIN_MICROMETERS`](Self::MIN_MICROMETERS) to [`MAX_MICROMETERS`](Self::MAX_MICROMETERS)
    /// (zero, negative, NaN and infinite values included).
    pub fn micrometers(value: f64) -> Result<Self, String> {
        if (Self::MIN_MICROMETERS..=Self::MAX_MICROMETERS).contains(&value) {
            Ok(Self {
                value,
                unit: LengthUnit::Micrometer,
            })
        } else {
            Err(format!(
                "a pixel size of {} micrometres; expected {} to {} micrometres (0.1 nm to 1 cm)",
                super::number_as_typed(value),
                Self::MIN_MICROMETERS,
                Self::MAX_MICROMETERS
            ))
        }
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

#[cfg(test)]
mod tests {
    use super::PixelSize;

    #[test]
    fn sizes_outside_the_range_are_refused_naming_it() {
        for v in [
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            1e300,
            1e-300,
            9.9e-5,
            1.01e4,
        ] {
            let e = PixelSize::micrometers(v).unwrap_err();
            assert!(
                e.len() < 120,
                "{v}: the message quotes the value as typed: {e}"
            );
            assert!(
                e.contains("expected 0.0001 to 10000 micrometres"),
                "{v}: {e}"
            );
        }
        for v in [1e-4, 0.65, 1e4] {
            assert!(PixelSize::micrometers(v).unwrap().value == v);
        }
    }
}
