//! The BaSiC parameters and their scientific defaults: the one place they are defined.
//!
//! Every default below is a quality decision (see docs/flatfield-method.md, "Parameters")
//! and is guarded by the test `defaults_are_the_quality_first_values`; none may be lowered for
//! speed. Callers that change a value see it listed by [`BasicParams::changes_from_default`], which
//! the fit report and the CLI echo.

use super::FlatfieldError;

/// How the flat-field smoothness weight λ_F is chosen when none is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Smoothness {
    /// `Σ |DCT2(mean image)| / 800`, the rule of BaSiC, BaSiCPy and MATLAB.
    Standard,
    /// Cross-validation over images: the multiple of the standard λ_F whose fields best
    /// explain held-out images (see `smoothness.rs`); falls back to the standard rule below
    /// 8 images.
    AutoData,
}

impl std::fmt::Display for Smoothness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Standard => "standard",
            Self::AutoData => "auto-data",
        })
    }
}

impl std::str::FromStr for Smoothness {
    type Err = FlatfieldError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "standard" => Ok(Self::Standard),
            "auto-data" => Ok(Self::AutoData),
            _ => Err(FlatfieldError::BadParameter {
                name: "smoothness",
                value: s.to_string(),
                need: "standard or auto-data",
            }),
        }
    }
}

/// The largest working grid: every implementation fits on 128²; 1024² already holds 4 MiB per
/// image and array (16 MiB of solver state per image), and a larger value is a typo, not a fit.
pub const MAX_WORKING_SIZE: usize = 1024;

/// Parameters of the BaSiC fit (docs/flatfield-method.md, "Parameters").
#[derive(Debug, Clone, PartialEq)]
pub struct BasicParams {
    /// Estimate the dark-field (additive offset) as well as the flat-field.
    pub get_darkfield: bool,
    /// Upper bound on the inner ALM iterations of one solve.
    pub max_iterations: usize,
    /// Inner stop: `‖Z‖_F / ‖D‖_F` below this value.
    pub optimization_tolerance: f64,
    /// Upper bound on the outer (reweighting) solves.
    pub max_reweight_iterations: usize,
    /// Outer stop: relative L1 change of the fields between solves.
    pub reweighting_tolerance: f64,
    /// Side of the square working grid the images are resampled to.
    pub working_size: usize,
    /// ε of the reweighting `Ω = 1 / (|E / ℓ| + ε)`.
    pub epsilon: f64,
    /// λ_F; `None`: chosen by `smoothness`.
    pub lambda_flatfield: Option<f64>,
    /// How λ_F (and λ_D with it) is chosen when `lambda_flatfield` is `None`.
    pub smoothness: Smoothness,
    /// λ_D / λ_F; used when `lambda_darkfield` is `None`.
    pub darkfield_ratio: f64,
    /// λ_D; `None`: `darkfield_ratio · λ_F`.
    pub lambda_darkfield: Option<f64>,
    /// Sort each working pixel's values along the image axis before fitting (MATLAB/KINTSUGI).
    pub sort_intensity: bool,
}

impl Default for BasicParams {
    fn default() -> Self {
        Self {
            // The user's mandate: BaSiC without dark-field estimation leaves the offset in the
            // flat-field (flat RMSE 0.028 instead of 0.009 on the synthetic set S1,
            // docs/flatfield-method.md, "Test metrics and thresholds").
            get_darkfield: true,
            // A safety net, not a working regime: measured solves stop after 33-38 iterations.
            max_iterations: 500,
            // The MATLAB/KINTSUGI value; reachable in f32 (floor ~1e-7,
            // docs/flatfield-method.md, "f32 numerics", item 4).
            optimization_tolerance: 1e-6,
            // KINTSUGI KCorrectGPU's value; measured fits need 2-14 solves.
            max_reweight_iterations: 25,
            // MATLAB/pybasic/KINTSUGI; BaSiCPy's 1e-2 stops before the fields settle.
            reweighting_tolerance: 1e-3,
            // Every implementation fits on 128x128; λ_F scales with it.
            working_size: 128,
            // The published reweighting constant of every implementation.
            epsilon: 0.1,
            // Automatic: Σ|DCT2(m̄)|/800 makes the fit independent of the intensity scale.
            lambda_flatfield: None,
            smoothness: Smoothness::Standard,
            // KINTSUGI's ratio, the measured middle ground between sparse foreground (0.1 better)
            // and dense texture (0.4 better), docs/flatfield-method.md, "Parameters".
            darkfield_ratio: 0.2,
            lambda_darkfield: None,
            // Sorting made flat-field RMSE 1.2-10x worse on every synthetic set
            // (docs/flatfield-method.md, "Parameters").
            sort_intensity: false,
        }
    }
}

impl BasicParams {
    /// KINTSUGI's configuration (`KCorrectGPU.fit`): the defaults with per-pixel sorting on, to
    /// reproduce that pipeline's results for A/B comparison. Not a quality recommendation.
    pub fn kintsugi_compat() -> Self {
        Self {
            sort_intensity: true,
            ..Self::default()
        }
    }

    /// Rejects values the algorithm cannot run with; every message names the parameter.
    pub fn validate(&self) -> Result<(), FlatfieldError> {
        let bad = |name: &'static str, value: String, need: &'static str| {
            Err(FlatfieldError::BadParameter { name, value, need })
        };
        if self.max_iterations == 0 {
            return bad("max_iterations", "0".into(), "at least 1");
        }
        if self.max_reweight_iterations == 0 {
            return bad("max_reweight_iterations", "0".into(), "at least 1");
        }
        if !(2..=MAX_WORKING_SIZE).contains(&self.working_size) {
            return bad(
                "working_size",
                self.working_size.to_string(),
                "2 to 1024 pixels",
            );
        }
        let positive = [
            ("optimization_tolerance", self.optimization_tolerance),
            ("reweighting_tolerance", self.reweighting_tolerance),
            ("epsilon", self.epsilon),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return bad(name, v.to_string(), "a finite value above 0");
            }
        }
        let non_negative = [
            ("darkfield_ratio", Some(self.darkfield_ratio)),
            ("lambda_flatfield", self.lambda_flatfield),
            ("lambda_darkfield", self.lambda_darkfield),
        ];
        for (name, v) in non_negative {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    return bad(name, v.to_string(), "a finite value of at least 0");
                }
            }
        }
        Ok(())
    }

    /// `name = value (default D)` for every parameter that differs from [`Default`], so that no
    /// change of a scientific default goes unreported.
    pub fn changes_from_default(&self) -> Vec<String> {
        let d = Self::default();
        let mut out = Vec::new();
        let mut note = |name: &str, now: String, default: String| {
            if now != default {
                out.push(format!("{name} = {now} (default {default})"));
            }
        };
        let opt = |v: Option<f64>| v.map_or("auto".to_string(), |v| v.to_string());
        note(
            "get_darkfield",
            self.get_darkfield.to_string(),
            d.get_darkfield.to_string(),
        );
        note(
            "max_iterations",
            self.max_iterations.to_string(),
            d.max_iterations.to_string(),
        );
        note(
            "optimization_tolerance",
            self.optimization_tolerance.to_string(),
            d.optimization_tolerance.to_string(),
        );
        note(
            "max_reweight_iterations",
            self.max_reweight_iterations.to_string(),
            d.max_reweight_iterations.to_string(),
        );
        note(
            "reweighting_tolerance",
            self.reweighting_tolerance.to_string(),
            d.reweighting_tolerance.to_string(),
        );
        note(
            "working_size",
            self.working_size.to_string(),
            d.working_size.to_string(),
        );
        note("epsilon", self.epsilon.to_string(), d.epsilon.to_string());
        note(
            "lambda_flatfield",
            opt(self.lambda_flatfield),
            opt(d.lambda_flatfield),
        );
        note(
            "smoothness",
            self.smoothness.to_string(),
            d.smoothness.to_string(),
        );
        note(
            "darkfield_ratio",
            self.darkfield_ratio.to_string(),
            d.darkfield_ratio.to_string(),
        );
        note(
            "lambda_darkfield",
            opt(self.lambda_darkfield),
            opt(d.lambda_darkfield),
        );
        note(
            "sort_intensity",
            self.sort_intensity.to_string(),
            d.sort_intensity.to_string(),
        );
        out
    }
}

/// Parameters of the correction `(I − D) / max(S, flat_min)` (docs/flatfield-method.md,
/// "Correction").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransformParams {
    /// Lower clamp of the flat-field divisor.
    pub flat_min: f32,
    /// Clip corrected values below zero to zero.
    pub clip_negative: bool,
}

impl TransformParams {
    /// Rejects a divisor clamp the correction cannot use; the message names the bound.
    pub fn validate(&self) -> Result<(), FlatfieldError> {
        if !(self.flat_min.is_finite() && self.flat_min > 0.0) {
            return Err(FlatfieldError::BadParameter {
                name: "flat_min",
                value: self.flat_min.to_string(),
                need: "a finite value above 0 (the smallest flat-field divisor)",
            });
        }
        Ok(())
    }
}

impl Default for TransformParams {
    fn default() -> Self {
        Self {
            // Limits amplification to 10x (KINTSUGI); the lowest value in BaSiCPy's reference fits
            // is 0.125, so real fields normally never reach it.
            flat_min: 0.1,
            // KINTSUGI clips; quantitative users may switch it off.
            clip_negative: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_quality_first_values() {
        let p = BasicParams::default();
        assert!(p.get_darkfield);
        assert_eq!(p.max_iterations, 500);
        assert_eq!(p.optimization_tolerance, 1e-6);
        assert_eq!(p.max_reweight_iterations, 25);
        assert_eq!(p.reweighting_tolerance, 1e-3);
        assert_eq!(p.working_size, 128);
        assert_eq!(p.epsilon, 0.1);
        assert_eq!(p.lambda_flatfield, None);
        assert_eq!(p.smoothness, Smoothness::Standard);
        assert_eq!(p.darkfield_ratio, 0.2);
        assert_eq!(p.lambda_darkfield, None);
        assert!(!p.sort_intensity);
        assert!(p.changes_from_default().is_empty());
        let t = TransformParams::default();
        assert_eq!((t.flat_min, t.clip_negative), (0.1, true));
    }

    #[test]
    fn kintsugi_compat_only_turns_sorting_on() {
        let k = BasicParams::kintsugi_compat();
        assert_eq!(
            k.changes_from_default(),
            vec!["sort_intensity = true (default false)".to_string()]
        );
    }

    #[test]
    fn every_bound_is_checked_and_named() {
        let d = BasicParams::default;
        let cases: Vec<(BasicParams, &str, &str)> = vec![
            (
                BasicParams {
                    max_iterations: 0,
                    ..d()
                },
                "max_iterations",
                "at least 1",
            ),
            (
                BasicParams {
                    max_reweight_iterations: 0,
                    ..d()
                },
                "max_reweight_iterations",
                "at least 1",
            ),
            (
                BasicParams {
                    working_size: 1,
                    ..d()
                },
                "working_size",
                "2 to 1024",
            ),
            (
                BasicParams {
                    working_size: 1025,
                    ..d()
                },
                "working_size",
                "2 to 1024",
            ),
            (
                BasicParams {
                    optimization_tolerance: 0.0,
                    ..d()
                },
                "optimization_tolerance",
                "above 0",
            ),
            (
                BasicParams {
                    optimization_tolerance: f64::NAN,
                    ..d()
                },
                "optimization_tolerance",
                "above 0",
            ),
            (
                BasicParams {
                    reweighting_tolerance: -1e-3,
                    ..d()
                },
                "reweighting_tolerance",
                "above 0",
            ),
            (
                BasicParams {
                    reweighting_tolerance: f64::INFINITY,
                    ..d()
                },
                "reweighting_tolerance",
                "above 0",
            ),
            (
                BasicParams {
                    epsilon: f64::NAN,
                    ..d()
                },
                "epsilon",
                "above 0",
            ),
            (
                BasicParams {
                    epsilon: 0.0,
                    ..d()
                },
                "epsilon",
                "above 0",
            ),
            (
                BasicParams {
                    darkfield_ratio: -0.2,
                    ..d()
                },
                "darkfield_ratio",
                "at least 0",
            ),
            (
                BasicParams {
                    darkfield_ratio: f64::NAN,
                    ..d()
                },
                "darkfield_ratio",
                "at least 0",
            ),
            (
                BasicParams {
                    lambda_flatfield: Some(-1.0),
                    ..d()
                },
                "lambda_flatfield",
                "at least 0",
            ),
            (
                BasicParams {
                    lambda_flatfield: Some(f64::NAN),
                    ..d()
                },
                "lambda_flatfield",
                "at least 0",
            ),
            (
                BasicParams {
                    lambda_darkfield: Some(f64::NEG_INFINITY),
                    ..d()
                },
                "lambda_darkfield",
                "at least 0",
            ),
        ];
        for (p, name, bound) in cases {
            let msg = p.validate().unwrap_err().to_string();
            assert!(msg.contains(name) && msg.contains(bound), "{msg}");
        }
        assert!(BasicParams {
            working_size: 1024,
            ..d()
        }
        .validate()
        .is_ok());
        assert!(BasicParams {
            lambda_flatfield: Some(0.0),
            ..d()
        }
        .validate()
        .is_ok());
        for flat_min in [0.0, -0.1, f32::NAN, f32::INFINITY] {
            let t = TransformParams {
                flat_min,
                ..TransformParams::default()
            };
            let msg = t.validate().unwrap_err().to_string();
            assert!(msg.contains("flat_min") && msg.contains("above 0"), "{msg}");
        }
        assert!(TransformParams::default().validate().is_ok());
        let msg = "sharp".parse::<Smoothness>().unwrap_err().to_string();
        assert!(
            msg.contains("smoothness") && msg.contains("standard or auto-data"),
            "{msg}"
        );
        for s in [Smoothness::Standard, Smoothness::AutoData] {
            assert_eq!(s.to_string().parse::<Smoothness>().unwrap(), s);
        }
    }
}
