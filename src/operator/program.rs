//! The operator's program: what each application computes ([`Apply`]), its stages in order
//! ([`Apply::kinds`], the one table the builders and the recorder follow), the arrays between
//! them ([`Space`]) and the gridding stages the memo layer reuses chunk by chunk ([`Stage`]).
//!
//! | application | stages, in order, and the arrays between them |
//! |---|---|
//! | `L` ([`Apply::Forward`]) | volume `(n0, n1, n2)` → U1 → spectrum `(deth, n1, n2)` → U2 → Fourier data `(ntheta, deth, detw)` → F_adj → data |
//! | `L*` ([`Apply::Adjoint`]) | data → F_fwd → Fourier data → U2* → spectrum → U1* → volume (the data array is the workspace) |
//! | `A`, `A*` (the solver's pair) | as `L`, `L*` without F: volume ↔ Fourier data |
//!
//! Each stage runs chunk by chunk along its own axis (U1 along y, U2 along detector rows, F along
//! the angles): a chunk's input block staged into chunk-local buffers, its computation, its
//! output block staged out (`record` records them; `chunk_program` names their parts). The
//! computations, built once per operator, one file per stage:
//!
//! | stage | file | a chunk's computation (kernels of `shaders/operator/`) |
//! |---|---|---|
//! | U1 | `u1.rs` | `u1_divker` (the kernel's deconvolution, onto the oversampled grid) → 1D FFT along z → `u1_gather` (the values at the detector rows' frequencies) |
//! | U1* | `u1.rs` | `u1_spread` (a gather over each grid cell's rows) → inverse 1D FFT → `u1_divker_adjoint` |
//! | U2 | `u2.rs` | `u2_divker` → 2D FFT of each spectrum plane → `u2_gather` (the values at each angle's and column's (x, y) frequencies) |
//! | U2* | `u2.rs` | `u2_spread` (or `u2_spread_records` then `u2_spread_tabulated`, as the plan chooses) → inverse 2D FFT → `u2_divker_adjoint` |
//! | F_adj | `fft2d.rs` | the rotation axis's and offset's phase (`modulate`) → inverse 2D FFT of each projection → scale |
//! | F_fwd | `fft2d.rs` | forward 2D FFT of each projection → the conjugate phase and the scale |
//!
//! The stage files keep the method's names (docs/operator-method.md, "Operator L"): each builds
//! a stage and its adjoint, which produce different arrays.

use serde::Serialize;

use super::Geometry;
use crate::array::PlaneLayout;

/// What to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    /// `L`: volume -> data.
    Forward,
    /// `L*`: data -> volume (the source array is used as workspace and overwritten).
    Adjoint,
    /// `A = U2 U1`: volume -> data (Fourier domain).
    FourierForward,
    /// `A*`: data (Fourier domain) -> volume.
    FourierAdjoint,
    /// `U1`: volume -> spectrum.
    Usfft1d,
    /// `U1*`: spectrum -> volume.
    Usfft1dAdjoint,
    /// `U2`: spectrum -> data.
    Usfft2d,
    /// `U2*`: data -> spectrum.
    Usfft2dAdjoint,
    /// `F_adj` (the last stage of L).
    Fft2dAdjoint,
    /// `F_fwd = F_adj*` (the first stage of L*).
    Fft2d,
}

/// The arrays an [`Apply`] reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// `(n0, n1, n2)`
    Volume,
    /// `(deth, n1, n2)`, after U1
    Spectrum,
    /// `(ntheta, deth, detw)`, spatial or Fourier-domain data
    Data,
}

impl Space {
    /// The array shape in this geometry.
    pub fn shape(self, g: &Geometry) -> Vec<usize> {
        match self {
            Self::Volume => vec![g.n0, g.n1, g.n2],
            Self::Spectrum => vec![g.deth, g.n1, g.n2],
            Self::Data => vec![g.ntheta(), g.deth, g.detw],
        }
    }

    /// The plane layout of an array of this space with `words` f32 words per element (1 real,
    /// 2 complex).
    pub fn layout(self, g: &Geometry, words: usize) -> PlaneLayout {
        let shape = self.shape(g);
        PlaneLayout {
            planes: shape[0],
            plane_words: words * shape[1] * shape[2],
            axes_swapped: false,
        }
    }

    /// [`layout`](Self::layout) with the first two axes stored swapped: the planes run along
    /// the second axis (of the data, one plane per detector row holding every angle).
    pub fn swapped_layout(self, g: &Geometry, words: usize) -> PlaneLayout {
        let shape = self.shape(g);
        PlaneLayout {
            planes: shape[1],
            plane_words: words * shape[0] * shape[2],
            axes_swapped: true,
        }
    }
}

impl Apply {
    /// (input, output) arrays: the input of its first stage and the output of its last.
    pub fn spaces(self) -> (Space, Space) {
        let kinds = self.kinds();
        (kinds[0].spaces().0, kinds[kinds.len() - 1].spaces().1)
    }

    /// The chunked stages it runs, in order.
    pub(super) fn kinds(self) -> &'static [Kind] {
        const U1: Kind = Kind::Gridding(Stage::Usfft1d);
        const U1_ADJ: Kind = Kind::Gridding(Stage::Usfft1dAdjoint);
        const U2: Kind = Kind::Gridding(Stage::Usfft2d);
        const U2_ADJ: Kind = Kind::Gridding(Stage::Usfft2dAdjoint);
        match self {
            Self::Forward => &[U1, U2, Kind::FAdj],
            Self::Adjoint => &[Kind::FFwd, U2_ADJ, U1_ADJ],
            Self::FourierForward => &[U1, U2],
            Self::FourierAdjoint => &[U2_ADJ, U1_ADJ],
            Self::Usfft1d => &[U1],
            Self::Usfft1dAdjoint => &[U1_ADJ],
            Self::Usfft2d => &[U2],
            Self::Usfft2dAdjoint => &[U2_ADJ],
            Self::Fft2dAdjoint => &[Kind::FAdj],
            Self::Fft2d => &[Kind::FFwd],
        }
    }
}

/// One of the six chunked stages an application runs: a gridding stage, or the per-projection
/// 2D FFT stage in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// U1, U2 or the adjoint of either.
    Gridding(Stage),
    /// `F_adj`, the last stage of L.
    FAdj,
    /// `F_fwd = F_adj*`, the first stage of L*.
    FFwd,
}

impl Kind {
    /// (input, output) arrays.
    pub(super) fn spaces(self) -> (Space, Space) {
        match self {
            Self::Gridding(Stage::Usfft1d) => (Space::Volume, Space::Spectrum),
            Self::Gridding(Stage::Usfft1dAdjoint) => (Space::Spectrum, Space::Volume),
            Self::Gridding(Stage::Usfft2d) => (Space::Spectrum, Space::Data),
            Self::Gridding(Stage::Usfft2dAdjoint) => (Space::Data, Space::Spectrum),
            Self::FAdj | Self::FFwd => (Space::Data, Space::Data),
        }
    }

    /// The gridding stage it is, if it is one.
    pub(super) fn stage(self) -> Option<Stage> {
        match self {
            Self::Gridding(stage) => Some(stage),
            Self::FAdj | Self::FFwd => None,
        }
    }
}

/// A gridding stage that runs chunk by chunk, each chunk an independent linear map from a
/// chunk-local input block to a chunk-local output block (what the memo layer reuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// U1, volume -> spectrum, chunked along y.
    Usfft1d,
    /// U1*, spectrum -> volume, chunked along y.
    Usfft1dAdjoint,
    /// U2, spectrum -> data, chunked along detector rows.
    Usfft2d,
    /// U2*, data -> spectrum, chunked along detector rows.
    Usfft2dAdjoint,
}

impl Stage {
    /// All four, in a fixed order.
    pub const ALL: [Stage; 4] = [
        Stage::Usfft1d,
        Stage::Usfft1dAdjoint,
        Stage::Usfft2d,
        Stage::Usfft2dAdjoint,
    ];

    /// Its name in reports and on the command line (as serialised).
    pub fn name(self) -> &'static str {
        match self {
            Self::Usfft1d => "usfft1d",
            Self::Usfft1dAdjoint => "usfft1d_adjoint",
            Self::Usfft2d => "usfft2d",
            Self::Usfft2dAdjoint => "usfft2d_adjoint",
        }
    }

    /// Whether every chunk of the stage applies the same map (U1 acts on every (y, x) column
    /// alike), so a chunk's result can stand in for another chunk of the same size; U2's map
    /// depends on the detector row.
    pub fn chunks_share_map(self) -> bool {
        matches!(self, Self::Usfft1d | Self::Usfft1dAdjoint)
    }

    /// The whole-array stage this is.
    pub fn apply(self) -> Apply {
        match self {
            Self::Usfft1d => Apply::Usfft1d,
            Self::Usfft1dAdjoint => Apply::Usfft1dAdjoint,
            Self::Usfft2d => Apply::Usfft2d,
            Self::Usfft2dAdjoint => Apply::Usfft2dAdjoint,
        }
    }
}
