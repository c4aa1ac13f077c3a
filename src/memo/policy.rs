//! The memo policies and their settings, with the defaults in one place.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::operator::Stage;

/// When a chunk's stored result may stand in for a new computation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoPolicy {
    /// Every chunk is computed.
    Off,
    /// The reference's intended policy (mLR): keyed by chunk position, reuse the stored output iff
    /// the cosine similarity of the 3x3-pooled keys is at least `tau`. It trades accuracy for
    /// time with no bound on the error it introduces.
    Mlr { tau: f64 },
    /// Reuse `sum alpha_i F(c_i)` for stored inputs `c_i` (least-squares `alpha`) in place of a
    /// chunk's `F(x)`, within a budget per stage application: the reused chunks' residuals
    /// `|x - sum alpha_i c_i|` together are at most `tol` times the compared chunks' `|x|`
    /// (squared sums), smallest residuals first, so the stage output's error is at most
    /// `|F| tol |x|`. `tol = 0` never reuses.
    Certified { tol: f64 },
    /// `Certified` with a tolerance that follows the solver: in outer iteration `k`,
    /// `TOL_k = clamp(scale * primal_k-1, floor, AUTO_CAP)`, `primal_k-1` the relative primal
    /// residual `|grad u - psi| / max(|grad u|, |psi|)` of the previous outer iteration (`AUTO_CAP`
    /// before the first). Reuse is loose while the iterates are far from the solution and tightens
    /// as the split converges, down to `floor`.
    CertifiedAuto { scale: f64, floor: f64 },
}

/// The tolerance of `certified:auto` before the solver has reported a residual, and its largest.
pub const AUTO_CAP: f64 = 0.1;
/// `certified:auto`'s default `scale` and `floor`.
pub const AUTO_SCALE: f64 = 0.3;
pub const AUTO_FLOOR: f64 = 1e-3;

impl MemoPolicy {
    /// The default: `off`. The default solver, exact-step CG, applies the operator to conjugate
    /// search directions, which few stored chunks combine into (`lamino bench memo` measured 2-6 %
    /// reused, no time saved); memoization pays with the reference's Dai–Yuan iteration, which
    /// it measured never coming within 1e-3 of the converged result where CG does (docs/benchmarks.md,
    /// "Time to within 1e-3 of the converged result").
    pub const DEFAULT: MemoPolicy = MemoPolicy::Off;

    /// Whether the policy ever runs the memo layer.
    pub fn is_active(self) -> bool {
        !matches!(self, Self::Off)
    }

    /// Whether reuse under this policy comes without an error bound.
    pub fn trades_accuracy(self) -> bool {
        matches!(self, Self::Mlr { .. })
    }

    /// Whether reuse is certified by a residual (and needs `|F|`).
    pub fn is_certified(self) -> bool {
        matches!(self, Self::Certified { .. } | Self::CertifiedAuto { .. })
    }

    /// The certified tolerance to use after an outer iteration whose relative primal residual was
    /// `primal` (`None` before the first); `None` for the other policies.
    pub fn tolerance(self, primal: Option<f64>) -> Option<f64> {
        match self {
            Self::Certified { tol } => Some(tol),
            Self::CertifiedAuto { scale, floor } => Some(match primal {
                // NaN residuals (a diverging run) take the floor.
                Some(p) if p.is_finite() => (scale * p).clamp(floor, AUTO_CAP.max(floor)),
                Some(_) => floor,
                None => AUTO_CAP.max(floor),
            }),
            Self::Off | Self::Mlr { .. } => None,
        }
    }
}

impl Default for MemoPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for MemoPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Off => write!(f, "off"),
            Self::Mlr { tau } => write!(f, "mlr:{tau}"),
            Self::Certified { tol } => write!(f, "certified:{tol}"),
            Self::CertifiedAuto { scale, floor } => {
                if (*scale, *floor) == (AUTO_SCALE, AUTO_FLOOR) {
                    write!(f, "certified:auto")
                } else {
                    write!(f, "certified:auto:{scale}:{floor}")
                }
            }
        }
    }
}

/// Serialised as its command-line spelling (`off`, `mlr:0.9`, `certified:0.001`,
/// `certified:auto`).
impl Serialize for MemoPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Why a policy string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad memo policy {given:?}: {why} (expected off, mlr:TAU with 0 < TAU <= 1, certified:TOL with 0 <= TOL < 1, or certified:auto[:SCALE[:FLOOR]] with SCALE > 0 and 0 < FLOOR < 1)")]
pub struct PolicyParseError {
    given: String,
    why: &'static str,
}

impl FromStr for MemoPolicy {
    type Err = PolicyParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| PolicyParseError {
            given: s.to_string(),
            why,
        };
        if s == "off" {
            return Ok(Self::Off);
        }
        if let Some(rest) = s.strip_prefix("certified:auto") {
            let mut parts = rest.split(':').skip(1);
            let mut next = |default: f64| -> Result<f64, PolicyParseError> {
                parts.next().map_or(Ok(default), |v| {
                    v.parse().map_err(|_| err("the parameter is not a number"))
                })
            };
            let (scale, floor) = (next(AUTO_SCALE)?, next(AUTO_FLOOR)?);
            if !(rest.is_empty() || rest.starts_with(':')) || parts.next().is_some() {
                return Err(err("certified:auto takes at most SCALE and FLOOR"));
            }
            if !(scale.is_finite() && scale > 0.0) {
                return Err(err("scale out of range"));
            }
            if !(floor > 0.0 && floor < 1.0) {
                return Err(err("floor out of range"));
            }
            return Ok(Self::CertifiedAuto { scale, floor });
        }
        let (name, value) = s.split_once(':').ok_or_else(|| err("no parameter"))?;
        let value: f64 = value
            .parse()
            .map_err(|_| err("the parameter is not a number"))?;
        match name {
            "mlr" if value > 0.0 && value <= 1.0 => Ok(Self::Mlr { tau: value }),
            "mlr" => Err(err("tau out of range")),
            "certified" if (0.0..1.0).contains(&value) => Ok(Self::Certified { tol: value }),
            "certified" => Err(err("tol out of range")),
            _ => Err(err("unknown policy")),
        }
    }
}

/// The gridding stages the memo layer handles; the others always compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoStages(u8);

impl MemoStages {
    pub const ALL: MemoStages = MemoStages(0b1111);
    /// The default: the 2D gridding stages U2 and U2*. They are most of the operator's work on
    /// every device (each sample spreads over a 2D kernel footprint, U1's over a 1D one), so a
    /// reuse there saves what the memo's own passes cost and more; U1 and U1* cost about as much
    /// as those passes. And the reconstruction is less sensitive to reuse in U2 and U2*:
    /// `lamino bench memo --memo-stages` measured both (docs/benchmarks.md, "Memoization").
    pub const DEFAULT: MemoStages = MemoStages::of(&[Stage::Usfft2d, Stage::Usfft2dAdjoint]);

    pub const fn of(stages: &[Stage]) -> Self {
        let mut bits = 0;
        let mut i = 0;
        while i < stages.len() {
            bits |= 1 << stages[i] as u8;
            i += 1;
        }
        Self(bits)
    }

    pub fn contains(self, stage: Stage) -> bool {
        self.0 & (1 << stage as u8) != 0
    }
}

impl Default for MemoStages {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// `all`, or the stages' names separated by commas (`usfft2d,usfft2d_adjoint`).
impl fmt::Display for MemoStages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Self::ALL {
            return f.write_str("all");
        }
        let names: Vec<&str> = Stage::ALL
            .into_iter()
            .filter(|&s| self.contains(s))
            .map(Stage::name)
            .collect();
        f.write_str(&names.join(","))
    }
}

impl Serialize for MemoStages {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Why a stage list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad memo stage list {given:?}: expected all, or one or more of usfft1d, usfft1d_adjoint, usfft2d, usfft2d_adjoint separated by commas")]
pub struct StagesParseError {
    given: String,
}

impl FromStr for MemoStages {
    type Err = StagesParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "all" {
            return Ok(Self::ALL);
        }
        let mut stages = Vec::new();
        for name in s.split(',') {
            let stage = Stage::ALL.into_iter().find(|st| st.name() == name.trim());
            stages.push(stage.ok_or_else(|| StagesParseError {
                given: s.to_string(),
            })?);
        }
        Ok(Self::of(&stages))
    }
}

/// Everything the memo layer needs besides the operator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemoOptions {
    pub policy: MemoPolicy,
    /// The stages memoized (default [`MemoStages::DEFAULT`]: U2 and U2*).
    pub stages: MemoStages,
    /// Byte budget of the device-resident tier (inputs and outputs of cached chunks).
    pub device_bytes: u64,
    /// Byte budget of the host tier, where entries evicted from the device go.
    pub host_bytes: u64,
    /// Rows per chunk (y rows for U1, detector rows for U2): the reuse granularity. The
    /// reference uses 8.
    pub chunk_rows: usize,
    /// Nearest stored keys searched per chunk under `certified`, besides the chunk's last entry.
    pub neighbours: usize,
    /// Also compute every reused chunk exactly and record the error the reuse made (costs the
    /// time the reuse saved; for tests and benchmarks).
    pub audit: bool,
}

impl MemoOptions {
    /// Defaults: U2 and U2*, 256 MiB on the device, 1 GiB on the host, chunks of 8 rows, 3
    /// neighbours.
    pub const DEFAULT: MemoOptions = MemoOptions {
        policy: MemoPolicy::DEFAULT,
        stages: MemoStages::DEFAULT,
        device_bytes: 256 << 20,
        host_bytes: 1 << 30,
        chunk_rows: 8,
        neighbours: 3,
        audit: false,
    };
}

impl Default for MemoOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_lists_parse_print_and_refuse_unknown_names() {
        assert_eq!("all".parse::<MemoStages>(), Ok(MemoStages::ALL));
        let two: MemoStages = "usfft2d,usfft2d_adjoint".parse().unwrap();
        assert_eq!(two, MemoStages::DEFAULT);
        assert!(two.contains(Stage::Usfft2dAdjoint) && !two.contains(Stage::Usfft1d));
        assert_eq!(two.to_string(), "usfft2d,usfft2d_adjoint");
        assert_eq!(MemoStages::ALL.to_string(), "all");
        let one: MemoStages = "usfft1d_adjoint".parse().unwrap();
        assert_eq!(one, MemoStages::of(&[Stage::Usfft1dAdjoint]));
        for bad in ["", "u2", "usfft2d,", "usfft2d;usfft1d"] {
            assert!(bad.parse::<MemoStages>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_schedule_follows_the_primal_residual_between_floor_and_cap() {
        let auto = MemoPolicy::CertifiedAuto {
            scale: 0.5,
            floor: 1e-3,
        };
        assert_eq!(auto.tolerance(None), Some(AUTO_CAP));
        assert_eq!(auto.tolerance(Some(1.0)), Some(AUTO_CAP));
        assert_eq!(auto.tolerance(Some(0.01)), Some(0.005));
        assert_eq!(auto.tolerance(Some(1e-5)), Some(1e-3));
        assert_eq!(auto.tolerance(Some(f64::NAN)), Some(1e-3));
        assert_eq!(
            MemoPolicy::Certified { tol: 0.02 }.tolerance(Some(0.5)),
            Some(0.02)
        );
        assert_eq!(MemoPolicy::Mlr { tau: 0.9 }.tolerance(Some(0.5)), None);
        assert!(auto.is_certified() && !auto.trades_accuracy() && auto.is_active());
    }

    #[test]
    fn defaults_are_guarded() {
        assert_eq!(MemoPolicy::default(), MemoPolicy::Off);
        let o = MemoOptions::default();
        assert_eq!(o.chunk_rows, 8);
        assert_eq!(
            o.stages,
            MemoStages::of(&[Stage::Usfft2d, Stage::Usfft2dAdjoint])
        );
        assert_eq!(o.neighbours, 3);
        assert!(!o.audit);
        assert_eq!((o.device_bytes, o.host_bytes), (256 << 20, 1 << 30));
    }

    #[test]
    fn parses_and_prints() {
        for s in [
            "off",
            "mlr:0.9",
            "certified:0.001",
            "certified:0",
            "mlr:1",
            "certified:auto",
            "certified:auto:0.5",
            "certified:auto:0.5:0.002",
        ] {
            let p: MemoPolicy = s.parse().unwrap();
            assert_eq!(p.to_string().parse::<MemoPolicy>().unwrap(), p, "{s}");
        }
        assert_eq!(
            "mlr:0.9".parse::<MemoPolicy>().unwrap(),
            MemoPolicy::Mlr { tau: 0.9 }
        );
        assert_eq!(
            "certified:auto".parse::<MemoPolicy>().unwrap(),
            MemoPolicy::CertifiedAuto {
                scale: AUTO_SCALE,
                floor: AUTO_FLOOR
            }
        );
        assert_eq!(
            "certified:auto:0.5".parse::<MemoPolicy>().unwrap(),
            MemoPolicy::CertifiedAuto {
                scale: 0.5,
                floor: AUTO_FLOOR
            }
        );
        for bad in [
            "on",
            "mlr",
            "mlr:x",
            "mlr:0",
            "mlr:1.5",
            "certified:1",
            "certified:-1",
            "lru:0.5",
            "certified:auto:0",
            "certified:auto:0.1:0",
            "certified:auto:0.1:0.01:3",
            "certified:autox",
        ] {
            let e = bad.parse::<MemoPolicy>().unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }
}
