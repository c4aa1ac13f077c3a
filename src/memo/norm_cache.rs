//! `|U1|` and `|U2|` remembered per geometry: the power iteration that estimates them costs
//! seconds per plan (5-6 s at 64^3 on a software adapter), and the certified policy's error bound
//! needs them before the first reuse.
//!
//! One small JSON file per geometry, `DIR/operator-norms/<fingerprint>-v<version>.json`, keyed by
//! [`Geometry::fingerprint`] (sizes, every angle, the tilt and the accuracy, bit for bit) and
//! the estimator's version. The operator's chunking is not part of the key: chunks are an exact
//! decomposition of the whole-array maps, whose norms the file holds. `DIR` is
//! `$LAMINO_CACHE_DIR` if set, else `$XDG_CACHE_HOME/lamino`, else `$HOME/.cache/lamino`. Files
//! are written atomically; a file that cannot be read or does not belong to the geometry is
//! ignored with a warning and replaced; a cache that cannot be written costs a warning, never the
//! reconstruction.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::geometry::Geometry;
use crate::io::write_atomically;

/// The environment variable that names the cache directory.
pub const CACHE_DIR_ENV: &str = "LAMINO_CACHE_DIR";

/// Changes whenever the estimate would (steps, stopping rule, safety factor, start vector, the
/// operator's gridding kernel). Version 2: the exponential-of-semicircle kernel.
pub const ESTIMATOR_VERSION: u32 = 2;

/// The norms of one geometry.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OperatorNorms {
    /// `|U1|` (`|U1*|`), safety factor included.
    pub u1: f64,
    /// `|U2|` (`|U2*|`), safety factor included.
    pub u2: f64,
}

#[derive(Debug, Serialize, Deserialize)]
struct NormFile {
    version: u32,
    /// Hexadecimal, so that the 64 bits survive JSON.
    fingerprint: String,
    geometry: Geometry,
    norms: OperatorNorms,
}

/// Where the norms came from, for the statistics.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormSource {
    /// Read from this file.
    Cache(PathBuf),
    /// Estimated by power iteration (and stored, unless a warning says otherwise).
    Estimated,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    Hit(OperatorNorms),
    Miss,
    /// A file that is there but unusable, and why.
    Unusable(String),
}

/// The directory of the norm files (or none: every plan estimates its norms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormCache {
    dir: Option<PathBuf>,
}

impl NormCache {
    /// The cache in `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: Some(dir.into()),
        }
    }

    /// No cache.
    pub fn disabled() -> Self {
        Self { dir: None }
    }

    /// The cache named by the environment (see the module documentation).
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let dir = var(CACHE_DIR_ENV)
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("lamino")))
            .or_else(|| var("HOME").map(|d| PathBuf::from(d).join(".cache").join("lamino")));
        Self { dir }
    }

    /// The file for `geometry`, if there is a cache.
    pub fn path(&self, geometry: &Geometry) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| {
            d.join("operator-norms").join(format!(
                "{:016x}-v{ESTIMATOR_VERSION}.json",
                geometry.fingerprint()
            ))
        })
    }

    /// The stored norms of `geometry`.
    pub fn get(&self, geometry: &Geometry) -> Lookup {
        let Some(path) = self.path(geometry) else {
            return Lookup::Miss;
        };
        let text = match crate::io::read_text(&path) {
            Ok(t) => t,
            Err(crate::io::TextError::Read(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Lookup::Miss
            }
            Err(e) => return Lookup::Unusable(format!("{}: {e}", path.display())),
        };
        let unusable = |why: String| Lookup::Unusable(format!("{}: {why}", path.display()));
        match serde_json::from_str::<NormFile>(&text) {
            Err(e) => unusable(format!("not a norm file ({e})")),
            Ok(f) if f.version != ESTIMATOR_VERSION => {
                unusable(format!("estimator version {}", f.version))
            }
            Ok(f)
                if f.fingerprint != format!("{:016x}", geometry.fingerprint())
                    || f.geometry.fingerprint() != geometry.fingerprint() =>
            {
                unusable("written for a different geometry".into())
            }
            Ok(f) if !(usable(f.norms.u1) && usable(f.norms.u2)) => {
                unusable(format!("norms {:?} are not positive and finite", f.norms))
            }
            Ok(f) => Lookup::Hit(f.norms),
        }
    }

    /// Stores the norms of `geometry` (atomically); `Err` says why it could not.
    pub fn put(&self, geometry: &Geometry, norms: OperatorNorms) -> Result<(), String> {
        let Some(path) = self.path(geometry) else {
            return Ok(());
        };
        let dir = path.parent().expect("a file in a directory");
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let file = NormFile {
            version: ESTIMATOR_VERSION,
            fingerprint: format!("{:016x}", geometry.fingerprint()),
            geometry: geometry.clone(),
            norms,
        };
        let text = serde_json::to_vec_pretty(&file).map_err(|e| e.to_string())?;
        write_atomically(&path, |tmp| {
            std::fs::write(tmp, &text).map_err(|e| e.to_string())
        })
        .map_err(|e| e.to_string())
    }

    /// The directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
}

fn usable(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Tilt;

    #[test]
    fn stores_reads_back_and_refuses_what_does_not_belong() {
        let dir = tempfile::tempdir().unwrap();
        let cache = NormCache::at(dir.path());
        let g = Geometry::cube(16, 8, Tilt::from_phi(1.2));
        assert_eq!(cache.get(&g), Lookup::Miss);
        let norms = OperatorNorms { u1: 1.25, u2: 0.75 };
        cache.put(&g, norms).unwrap();
        assert_eq!(cache.get(&g), Lookup::Hit(norms));
        // Another geometry (one angle one bit off) has its own file.
        let mut h = g.clone();
        h.theta[3] = f64::from_bits(h.theta[3].to_bits() + 1);
        assert_eq!(cache.get(&h), Lookup::Miss);
        // A file copied to the wrong name is refused.
        std::fs::copy(cache.path(&g).unwrap(), cache.path(&h).unwrap()).unwrap();
        assert!(
            matches!(cache.get(&h), Lookup::Unusable(why) if why.contains("different geometry"))
        );
        // Truncated and non-finite files are refused, then replaced.
        let path = cache.path(&g).unwrap();
        std::fs::write(&path, b"{\"version\": 1, \"finger").unwrap();
        assert!(matches!(cache.get(&g), Lookup::Unusable(why) if why.contains("not a norm file")));
        let text = std::fs::read_to_string(cache.path(&h).unwrap()).unwrap();
        cache.put(&g, norms).unwrap();
        let bad = std::fs::read_to_string(&path)
            .unwrap()
            .replace("1.25", "-1.25");
        std::fs::write(&path, bad).unwrap();
        assert!(matches!(cache.get(&g), Lookup::Unusable(why) if why.contains("positive")));
        cache.put(&g, norms).unwrap();
        assert_eq!(cache.get(&g), Lookup::Hit(norms));
        assert!(text.contains(&format!("\"version\": {ESTIMATOR_VERSION}")));
        // No cache: nothing stored, nothing found.
        let none = NormCache::disabled();
        none.put(&g, norms).unwrap();
        assert_eq!(none.get(&g), Lookup::Miss);
    }

    #[test]
    fn an_unwritable_cache_is_an_error_to_report_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a file");
        std::fs::write(&file, b"").unwrap();
        // The cache directory would have to be inside a regular file.
        let cache = NormCache::at(&file);
        let g = Geometry::cube(16, 8, Tilt::from_phi(1.2));
        assert!(cache.put(&g, OperatorNorms { u1: 1.0, u2: 1.0 }).is_err());
        assert!(matches!(cache.get(&g), Lookup::Miss | Lookup::Unusable(_)));
    }
}
