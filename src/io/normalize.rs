//! Flat/dark normalisation: intensities to line integrals `P = -ln((I - D) / (F - D))`.

use serde::Serialize;
use thiserror::Error;

use super::Stack;

/// Ratios `(I - D) / (F - D)` below this (including all with `F <= D`) are raised to it before the
/// logarithm, capping a line integral at `-ln(1e-6) ≈ 13.8` instead of infinity or NaN.
pub const RATIO_FLOOR: f64 = 1e-6;

/// The largest fraction of a scan's pixels whose ratio may be raised to [`RATIO_FLOOR`] before
/// the scan is refused: a few dead pixels or opaque features clamp far less; a white field of
/// zeros, darks above the whites, or data at or below the dark clamp most of the detector, and
/// the volume reconstructed from such line integrals means nothing.
pub const MAX_CLAMPED_FRACTION: f64 = 0.01;

/// How many of a scan's pixels normalisation raised to [`RATIO_FLOOR`], recorded in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClampCount {
    /// Pixels whose ratio was raised to [`RATIO_FLOOR`].
    pub clamped: u64,
    /// Pixels normalised.
    pub pixels: u64,
}

impl ClampCount {
    /// `clamped / pixels` (0 for no pixels).
    pub fn fraction(&self) -> f64 {
        if self.pixels == 0 {
            0.0
        } else {
            self.clamped as f64 / self.pixels as f64
        }
    }

    /// Whether more than `limit` of the pixels were clamped: such a scan is refused. A NaN
    /// limit refuses rather than accepts.
    pub fn exceeds(&self, limit: f64) -> bool {
        limit.is_nan() || self.fraction() > limit
    }
}

/// `-ln(ratio)` of a transmission ratio raised to [`RATIO_FLOOR`] first (counted in `clamped`),
/// so that dead pixels and noise give a large finite attenuation instead of infinity or NaN.
pub(crate) fn attenuation(ratio: f64, clamped: &mut usize) -> f32 {
    let ratio = if ratio < RATIO_FLOOR {
        *clamped += 1;
        RATIO_FLOOR
    } else {
        ratio
    };
    -ratio.ln() as f32
}

/// Errors of [`normalize`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum NormalizeError {
    /// An input holds NaN or infinity.
    #[error("{what} value {index} is {value}: normalisation needs finite input")]
    NonFinite {
        what: &'static str,
        index: usize,
        value: f32,
    },
    /// Frames of different sizes, or values that do not fill the shape.
    #[error("{what} has shape {shape:?} ({len} values); expected {expected}")]
    Shape {
        what: &'static str,
        shape: [usize; 3],
        len: usize,
        expected: String,
    },
    /// No frames or empty frames.
    #[error("{what} has shape {shape:?}: it needs at least one non-empty frame")]
    Empty {
        what: &'static str,
        shape: [usize; 3],
    },
}

/// Line integrals and the number of pixels whose ratio was raised to [`RATIO_FLOOR`].
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    /// `(ntheta, deth, detw)`, the shape of the data.
    pub projections: Stack,
    /// Pixels clamped; callers should report a large count (dead pixels, wrong flats).
    pub clamped: usize,
}

fn check(what: &'static str, s: &Stack, frame: Option<[usize; 2]>) -> Result<(), NormalizeError> {
    if s.shape.contains(&0) {
        return Err(NormalizeError::Empty {
            what,
            shape: s.shape,
        });
    }
    let len = s.values.len();
    let shape_ok = len == s.shape.iter().product::<usize>();
    let frame_ok = frame.is_none_or(|f| f == [s.shape[1], s.shape[2]]);
    if !(shape_ok && frame_ok) {
        let expected = match frame {
            Some([h, w]) => format!("(frames, {h}, {w}) like the data, filled"),
            None => "as many values as the shape holds".into(),
        };
        return Err(NormalizeError::Shape {
            what,
            shape: s.shape,
            len,
            expected,
        });
    }
    match s.values.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(NormalizeError::NonFinite {
            what,
            index,
            value: s.values[index],
        }),
        None => Ok(()),
    }
}

/// Mean frame over the first axis, in f64.
fn mean_frame(s: &Stack) -> Vec<f64> {
    let len = s.frame_len();
    let mut mean = vec![0.0f64; len];
    for frame in s.values.chunks(len) {
        for (m, v) in mean.iter_mut().zip(frame) {
            *m += *v as f64;
        }
    }
    mean.iter_mut().for_each(|m| *m /= s.shape[0] as f64);
    mean
}

/// `P = -ln((I - D) / (F - D))` with `F`, `D` the mean flat and dark frames; ratios below
/// [`RATIO_FLOOR`] (or with `F - D <= 0`) are raised to it and counted.
pub fn normalize(data: &Stack, flats: &Stack, darks: &Stack) -> Result<Normalized, NormalizeError> {
    check("data", data, None)?;
    let mut normalized = Vec::new();
    let clamped = FieldMeans::new(flats, darks, [data.shape[1], data.shape[2]])?
        .append(data, &mut normalized)?;
    Ok(Normalized {
        projections: Stack {
            shape: data.shape,
            values: normalized,
        },
        clamped,
    })
}

/// The mean flat and dark frames of a scan, for normalising its projections a block at a time
/// (a scan larger than memory is never held twice, raw and normalised).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldMeans {
    frame: [usize; 2],
    flat: Vec<f64>,
    dark: Vec<f64>,
}

impl FieldMeans {
    /// The means of `flats` and `darks`, whose frames must be `frame` = `(height, width)`.
    pub fn new(flats: &Stack, darks: &Stack, frame: [usize; 2]) -> Result<Self, NormalizeError> {
        check("flats", flats, Some(frame))?;
        check("darks", darks, Some(frame))?;
        Ok(Self {
            frame,
            flat: mean_frame(flats),
            dark: mean_frame(darks),
        })
    }

    /// Appends the line integrals of the projections `block` to `out`; returns how many ratios
    /// were raised to [`RATIO_FLOOR`].
    pub fn append(&self, block: &Stack, out: &mut Vec<f32>) -> Result<usize, NormalizeError> {
        check("data", block, Some(self.frame))?;
        let mut clamped = 0;
        out.extend(
            self.ratios_f64(block)
                .map(|ratio| attenuation(ratio, &mut clamped)),
        );
        Ok(clamped)
    }

    /// tomopy's `normalize` of the projections `block` alone: the transmission ratios
    /// `(I - D) / (F - D)`, computed in f64 and rounded once to f32, 0 where `F <= D` (tomopy
    /// divides by 1e-6 there instead). [`minus_log`] of them is what [`append`](Self::append)
    /// gives, up to the rounding of each ratio to f32 (at most one f32 step of the logarithm).
    pub fn ratios(&self, block: &Stack) -> Result<Vec<f32>, NormalizeError> {
        check("data", block, Some(self.frame))?;
        Ok(self.ratios_f64(block).map(|ratio| ratio as f32).collect())
    }

    /// The ratios of [`ratios`](Self::ratios) in f64, of a checked block.
    fn ratios_f64<'a>(&'a self, block: &'a Stack) -> impl Iterator<Item = f64> + 'a {
        block
            .values
            .chunks(block.frame_len())
            .flat_map(|f| f.iter().zip(self.flat.iter().zip(&self.dark)))
            .map(|(&i, (&f, &d))| {
                let den = f - d;
                if den > 0.0 {
                    (i as f64 - d) / den
                } else {
                    0.0
                }
            })
    }
}

/// tomopy's `minus_log` in place: `-ln(x)` of every value, with values below [`RATIO_FLOOR`]
/// (zero and negative ones included) raised to it first, where tomopy gives infinity or NaN;
/// returns how many were raised. `what` names the array in the error for a NaN or infinity.
pub fn minus_log(what: &'static str, values: &mut [f32]) -> Result<usize, NormalizeError> {
    if let Some(index) = values.iter().position(|v| !v.is_finite()) {
        return Err(NormalizeError::NonFinite {
            what,
            index,
            value: values[index],
        });
    }
    let mut clamped = 0;
    for v in values.iter_mut() {
        *v = attenuation(*v as f64, &mut clamped);
    }
    Ok(clamped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(shape: [usize; 3], values: Vec<f32>) -> Stack {
        Stack { shape, values }
    }

    #[test]
    fn averages_flats_and_darks_and_counts_clamped_pixels() {
        // Two flats average to 110, two darks to 10: denominator 100.
        let flats = stack([2, 1, 3], vec![100.0, 100.0, 100.0, 120.0, 120.0, 120.0]);
        let darks = stack([2, 1, 3], vec![5.0, 5.0, 5.0, 15.0, 15.0, 15.0]);
        // Pixel 2 of frame 0 equals the dark (ratio 0), pixel 2 of frame 1 is below it.
        let data = stack([2, 1, 3], vec![110.0, 60.0, 10.0, 20.0, 46.78794, 3.0]);
        let n = normalize(&data, &flats, &darks).unwrap();
        let expect = [
            0.0,
            -(0.5f64).ln(),
            -RATIO_FLOOR.ln(),
            -(0.1f64).ln(),
            1.0,
            -RATIO_FLOOR.ln(),
        ];
        for (g, e) in n.projections.values.iter().zip(expect) {
            assert!((*g as f64 - e).abs() < 1e-5, "{g} vs {e}");
        }
        assert_eq!(n.clamped, 2);
        assert_eq!(n.projections.shape, [2, 1, 3]);
    }

    /// The two halves of tomopy's normalisation, `ratios` then `minus_log`, give the line
    /// integrals of the one-step normalisation to one f32 step, clamping the same pixels.
    #[test]
    fn ratios_then_minus_log_is_the_normalisation() {
        let flats = stack(
            [2, 1, 4],
            vec![100.0, 100.0, 100.0, 0.0, 120.0, 120.0, 120.0, 0.0],
        );
        let darks = stack([1, 1, 4], vec![10.0, 10.0, 10.0, 5.0]);
        let data = stack(
            [2, 1, 4],
            vec![110.0, 60.0, 10.0, 7.0, 20.0, 46.78794, 3.0, 1.0],
        );
        let means = FieldMeans::new(&flats, &darks, [1, 4]).unwrap();
        let mut ratios = means.ratios(&data).unwrap();
        let expect_ratios = [1.0, 0.5, 0.0, 0.0, 0.1, 36.78794 / 100.0, -0.07, 0.0];
        for (r, e) in ratios.iter().zip(expect_ratios) {
            assert!((*r as f64 - e).abs() <= 1e-7, "{r} vs {e}");
        }
        let clamped = minus_log("ratios", &mut ratios).unwrap();
        let one_step = normalize(&data, &flats, &darks).unwrap();
        assert_eq!(clamped, one_step.clamped);
        assert_eq!(clamped, 4);
        for (a, b) in ratios.iter().zip(&one_step.projections.values) {
            assert!(
                (a - b).abs() <= f32::EPSILON * b.abs().max(1.0),
                "{a} vs {b}"
            );
        }
        let mut nan = vec![1.0, f32::NAN];
        assert!(matches!(
            minus_log("proj", &mut nan),
            Err(NormalizeError::NonFinite {
                what: "proj",
                index: 1,
                ..
            })
        ));
    }

    #[test]
    fn dead_flat_pixels_are_clamped_not_nan() {
        let flats = stack([1, 1, 2], vec![0.0, 50.0]);
        let darks = stack([1, 1, 2], vec![0.0, 60.0]);
        let data = stack([1, 1, 2], vec![5.0, 55.0]);
        let n = normalize(&data, &flats, &darks).unwrap();
        assert_eq!(n.clamped, 2);
        assert!(n.projections.values.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let ok = stack([1, 2, 2], vec![1.0; 4]);
        let nan = stack([1, 2, 2], vec![1.0, f32::NAN, 1.0, 1.0]);
        assert!(matches!(
            normalize(&nan, &ok, &ok),
            Err(NormalizeError::NonFinite {
                what: "data",
                index: 1,
                ..
            })
        ));
        let inf = stack([1, 2, 2], vec![1.0, 1.0, 1.0, f32::INFINITY]);
        assert!(matches!(
            normalize(&ok, &ok, &inf),
            Err(NormalizeError::NonFinite {
                what: "darks",
                index: 3,
                ..
            })
        ));
        let wide = stack([1, 2, 3], vec![1.0; 6]);
        assert!(matches!(
            normalize(&ok, &wide, &ok),
            Err(NormalizeError::Shape { what: "flats", .. })
        ));
        let short = stack([1, 2, 2], vec![1.0; 3]);
        assert!(matches!(
            normalize(&short, &ok, &ok),
            Err(NormalizeError::Shape { what: "data", .. })
        ));
        let empty = stack([0, 2, 2], vec![]);
        assert!(matches!(
            normalize(&ok, &ok, &empty),
            Err(NormalizeError::Empty { what: "darks", .. })
        ));
    }
}
