//! The memo policies and their settings, with the defaults in one place.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// When a chunk's stored result may stand in for a new computation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoPolicy {
    /// Every chunk is computed.
    Off,
    /// The reference's intended policy (mLR): keyed by chunk position, reuse the stored output iff
    /// the cosine similarity of the 3x3-pooled keys is at least `tau`. It trades accuracy for
    /// time with no bound on the error it introduces.
    Mlr { tau: f64 },
    /// Reuse `alpha F(x_c)` for a stored input `x_c` only when the relative residual
    /// `|x - alpha x_c| / |x|` (least-squares `alpha`, measured on the GPU) is below `tol`, so the
    /// output error is at most `|F| tol |x|`. `tol = 0` never reuses.
    Certified { tol: f64 },
}

impl MemoPolicy {
    /// The default: `off`. `lamino bench memo` measured no certified setting that saves time at
    /// an effect of at most 1e-3 on the final reconstruction (README, "Memoization").
    pub const DEFAULT: MemoPolicy = MemoPolicy::Off;

    /// Whether the policy ever runs the memo layer.
    pub fn is_active(self) -> bool {
        !matches!(self, Self::Off)
    }

    /// Whether reuse under this policy comes without an error bound.
    pub fn trades_accuracy(self) -> bool {
        matches!(self, Self::Mlr { .. })
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
        }
    }
}

/// Serialised as its command-line spelling (`off`, `mlr:0.9`, `certified:0.001`).
impl Serialize for MemoPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Why a policy string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad memo policy {given:?}: {why} (expected off, mlr:TAU with 0 < TAU <= 1, or certified:TOL with 0 <= TOL < 1)")]
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

/// Everything the memo layer needs besides the operator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemoOptions {
    pub policy: MemoPolicy,
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
    /// Defaults: 256 MiB on the device, 1 GiB on the host, chunks of 8 rows, 3 neighbours.
    pub const DEFAULT: MemoOptions = MemoOptions {
        policy: MemoPolicy::DEFAULT,
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
    fn defaults_are_guarded() {
        assert_eq!(MemoPolicy::default(), MemoPolicy::Off);
        let o = MemoOptions::default();
        assert_eq!(o.chunk_rows, 8);
        assert_eq!(o.neighbours, 3);
        assert!(!o.audit);
        assert_eq!((o.device_bytes, o.host_bytes), (256 << 20, 1 << 30));
    }

    #[test]
    fn parses_and_prints() {
        for s in ["off", "mlr:0.9", "certified:0.001", "certified:0", "mlr:1"] {
            let p: MemoPolicy = s.parse().unwrap();
            assert_eq!(p.to_string().parse::<MemoPolicy>().unwrap(), p, "{s}");
        }
        assert_eq!(
            "mlr:0.9".parse::<MemoPolicy>().unwrap(),
            MemoPolicy::Mlr { tau: 0.9 }
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
        ] {
            let e = bad.parse::<MemoPolicy>().unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }
}
