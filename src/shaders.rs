//! The WGSL sources, composed from the files in `shaders/`, and the binding layout each declares.
//! Composition is plain concatenation of shared snippets ahead of a kernel file.
//!
//! Every entry point of a shader binds the same layout (group 0, bindings 0, 1, ... in order),
//! declared here once. The test `shaders_validate` runs every composed shader through naga's
//! parser and validator without a GPU and checks each `@group(0) @binding(i)` variable against
//! the declaration (storage read, storage read_write or uniform); [`crate::gpu::Kernel`] refuses
//! a kernel whose Rust-side bindings differ from it. Shaders whose layout is not declared yet
//! (`layout: None`, the FFT shaders) are listed by that test and are checked as soon as they
//! declare one.

use crate::gpu::BindingKind::{self, StorageRead as R, StorageReadWrite as RW, Uniform as U};

/// A composed WGSL module.
#[derive(Debug)]
pub struct Shader {
    /// Stable name, also the cache key of its pipelines.
    pub name: &'static str,
    parts: &'static [&'static str],
    /// The bindings of group 0 that every entry point of this shader is built with.
    pub layout: Option<&'static [BindingKind]>,
}

impl Shader {
    /// The full WGSL text.
    pub fn source(&self) -> String {
        self.parts.join("\n")
    }
}

const COMPLEX: &str = include_str!("../shaders/shared/complex.wgsl");
const RADIX: &str = include_str!("../shaders/fft/radix.wgsl");

/// One global-memory Stockham pass.
pub static FFT_STOCKHAM_PASS: Shader = Shader {
    name: "fft/stockham_pass",
    parts: &[
        COMPLEX,
        RADIX,
        include_str!("../shaders/fft/stockham_pass.wgsl"),
    ],
    layout: None,
};

/// A whole FFT in workgroup memory.
pub static FFT_STOCKHAM_FUSED: Shader = Shader {
    name: "fft/stockham_fused",
    parts: &[
        COMPLEX,
        RADIX,
        include_str!("../shaders/fft/stockham_fused.wgsl"),
    ],
    layout: None,
};

/// Bluestein chirp multiplications.
pub static FFT_BLUESTEIN: Shader = Shader {
    name: "fft/bluestein",
    parts: &[COMPLEX, include_str!("../shaders/fft/bluestein.wgsl")],
    layout: None,
};

/// The bandwidth yardstick.
pub static COPY: Shader = Shader {
    name: "util/copy",
    parts: &[include_str!("../shaders/util/copy.wgsl")],
    layout: Some(&[R, RW, U]),
};

/// Pooled keys, certification sums and scaled block copies of the memo layer.
pub static MEMO: Shader = Shader {
    name: "memo/memo",
    parts: &[include_str!("../shaders/memo/memo.wgsl")],
    layout: Some(&[R, R, RW, U]),
};

/// Stage in: whole arrays (complex, real, or a difference) into a stage's chunk-local buffer.
pub static STAGE_IN: Shader = Shader {
    name: "operator/stage_in",
    parts: &[include_str!("../shaders/operator/stage_in.wgsl")],
    layout: Some(&[R, R, RW, U]),
};

/// Stage out: a stage's chunk-local result into a whole array (complex, or a scaled real part).
pub static STAGE_OUT: Shader = Shader {
    name: "operator/stage_out",
    parts: &[include_str!("../shaders/operator/stage_out.wgsl")],
    layout: Some(&[R, RW, R, U]),
};

/// Centring signs and scale of the per-projection 2D FFT.
pub static MODULATE: Shader = Shader {
    name: "util/modulate",
    parts: &[include_str!("../shaders/util/modulate.wgsl")],
    layout: Some(&[RW, U]),
};

/// Both gridding stages: three chunk-local arrays (read and written), four read-only tables, the
/// parameters.
const GRIDDING: &[BindingKind] = &[RW, RW, RW, R, R, R, R, U];

/// Stage U1 of the laminography operator.
pub static USFFT1D: Shader = Shader {
    name: "operator/usfft1d",
    parts: &[include_str!("../shaders/operator/usfft1d.wgsl")],
    layout: Some(GRIDDING),
};

/// Stage U2 of the laminography operator.
pub static USFFT2D: Shader = Shader {
    name: "operator/usfft2d",
    parts: &[include_str!("../shaders/operator/usfft2d.wgsl")],
    layout: Some(GRIDDING),
};

/// Vector kernels of the ADMM-TV solver (linear combinations, gradient, shrinkage, reductions).
pub static SOLVER_VECTOR: Shader = Shader {
    name: "solver/vector",
    parts: &[include_str!("../shaders/solver/vector.wgsl")],
    layout: Some(&[R, R, R, R, RW, R, U]),
};

/// The solver's scalar steps (CG step length and direction coefficients) on the GPU.
pub static SOLVER_SCALARS: Shader = Shader {
    name: "solver/scalars",
    parts: &[include_str!("../shaders/solver/scalars.wgsl")],
    layout: Some(&[RW, RW, U]),
};

/// The BaSiC flat-field fit: every kernel of one ALM iteration (spec §8.2).
pub static FLATFIELD_BASIC: Shader = Shader {
    name: "flatfield/basic",
    parts: &[include_str!("../shaders/flatfield/basic.wgsl")],
    layout: Some(&[R, RW, RW, RW, RW, R, U, U]),
};

/// The BaSiC correction `(I − D) / max(S, flat_min)`.
pub static FLATFIELD_TRANSFORM: Shader = Shader {
    name: "flatfield/transform",
    parts: &[include_str!("../shaders/flatfield/transform.wgsl")],
    layout: Some(&[RW, R, R, U]),
};

/// Edge-padded complex rows from real detector rows (the slab backprojection's staging).
pub static PREPROCESS_PAD_ROWS: Shader = Shader {
    name: "preprocess/pad_rows",
    parts: &[include_str!("../shaders/preprocess/pad_rows.wgsl")],
};

/// The ramp filter of the slab backprojection (`lamino try`, the rotation-axis and tilt search).
pub static PREPROCESS_RAMP: Shader = Shader {
    name: "preprocess/ramp",
    parts: &[include_str!("../shaders/preprocess/ramp.wgsl")],
};

/// The slab backprojection of the rotation-axis and tilt search.
pub static PREPROCESS_BACKPROJECT: Shader = Shader {
    name: "preprocess/backproject",
    parts: &[include_str!("../shaders/preprocess/backproject.wgsl")],
};

/// Every shader, for validation.
pub static ALL: &[&Shader] = &[
    &FFT_STOCKHAM_PASS,
    &FFT_STOCKHAM_FUSED,
    &FFT_BLUESTEIN,
    &COPY,
    &STAGE_IN,
    &STAGE_OUT,
    &MEMO,
    &MODULATE,
    &USFFT1D,
    &USFFT2D,
    &SOLVER_VECTOR,
    &SOLVER_SCALARS,
    &FLATFIELD_BASIC,
    &FLATFIELD_TRANSFORM,
    &PREPROCESS_PAD_ROWS,
    &PREPROCESS_RAMP,
    &PREPROCESS_BACKPROJECT,
];
