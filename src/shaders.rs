//! The WGSL sources, composed from the files in `shaders/`, and the binding layout each declares.
//! Composition is plain concatenation of shared snippets ahead of a kernel file.
//!
//! Every entry point of a shader binds the same layout (group 0, bindings 0, 1, ... in order),
//! declared here once. The test `shaders_validate` runs every composed shader through naga's
//! parser and validator without a GPU and checks each `@group(0) @binding(i)` variable against
//! the declaration (storage read, storage read_write or uniform); [`crate::gpu::Kernel`] builds
//! its bind group layout from it, and refuses a bind call with another number of buffers.

use BindingKind::{StorageRead as R, StorageReadWrite as RW, Uniform as U};

/// What a binding of a kernel is. Layouts are explicit (never derived from the shader) so that
/// one layout serves every bind group of a kernel and mismatches are caught on the Rust side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindingKind {
    /// `var<storage, read>`
    StorageRead,
    /// `var<storage, read_write>`
    StorageReadWrite,
    /// `var<uniform>`
    Uniform,
}

/// A composed WGSL module.
#[derive(Debug)]
pub struct Shader {
    /// Stable name, also the cache key of its pipelines.
    pub name: &'static str,
    parts: &'static [&'static str],
    /// The bindings of group 0 that every entry point of this shader is built with.
    pub layout: &'static [BindingKind],
}

impl Shader {
    /// The full WGSL text.
    pub fn source(&self) -> String {
        self.parts.join("\n")
    }
}

/// Constants shared by Rust and a shader, written once: each is a Rust `pub const` of the module
/// and a WGSL `const` line in the module's `WGSL`, composed ahead of the shader's file.
macro_rules! shared_constants {
    ($(#[$doc:meta])* $module:ident { $($(#[$cdoc:meta])* $name:ident = $value:literal;)* }) => {
        $(#[$doc])*
        pub mod $module {
            $($(#[$cdoc])* pub const $name: u32 = $value;)*
            /// The same constants as WGSL declarations.
            pub(super) const WGSL: &str =
                concat!($("const ", stringify!($name), ": u32 = ", $value, "u;\n"),*);
        }
    };
}

shared_constants!(
    /// The memo kernels' constants (`shaders/memo/memo.wgsl`).
    memo {
        WORKGROUP = 64;
        /// Candidates compared in one pass of the `dots` kernel.
        MAX_CANDIDATES = 4;
        /// `|x|^2`, `<c_i, x>` (2 each), `|c_i|^2` (1 each), `<c_i, c_j>` for i < j (2 each).
        DOT_VALUES = 25;
    }
);
// `dots` in shaders/memo/memo.wgsl names its accumulators for four candidates.
const _: () = assert!(memo::MAX_CANDIDATES == 4);
const _: () = assert!(
    memo::DOT_VALUES
        == 1 + 3 * memo::MAX_CANDIDATES + memo::MAX_CANDIDATES * (memo::MAX_CANDIDATES - 1)
);

shared_constants!(
    /// The BaSiC kernels' constants (`shaders/flatfield/basic.wgsl`).
    basic {
        WORKGROUP = 256;
        /// Side of the output block one invocation of a DCT pass computes.
        BLOCK = 4;
    }
);

shared_constants!(
    /// Stage U2's constants (`shaders/operator/usfft2d.wgsl`).
    usfft2d {
        /// Rows and columns of the block of grid cells an invocation of the adjoint
        /// (`u2_spread`) owns, one invocation per block of every row's grid. Both divide 4, so
        /// blocks tile every grid (its sides are twice even sizes). 4 x 4: fewer sums than 8 x 4
        /// and fewer visits per point than smaller blocks (docs/operator.md, issue #30).
        U2_BLOCK_ROWS = 4;
        U2_BLOCK_COLUMNS = 4;
        /// The most taps per axis: the width at the finest accuracy, MIN_EPS.
        MAX_TAPS = 9;
        /// Four-coefficient vectors of the tap polynomials in the uniforms: MAX_TAPS of
        /// MAX_TAPS + 2 coefficients (GriddingAxis::tap_polynomials).
        KERNEL_VECTORS = 25;
    }
);
const _: () = assert!(usfft2d::MAX_TAPS * (usfft2d::MAX_TAPS + 2) <= 4 * usfft2d::KERNEL_VECTORS);
// The tabulated U2*'s records hold a point's weights on a block's rows, and on its columns, in one
// vec4 each.
const _: () = assert!(usfft2d::U2_BLOCK_ROWS == 4 && usfft2d::U2_BLOCK_COLUMNS == 4);

const COMPLEX: &str = include_str!("../shaders/shared/complex.wgsl");
const FFT_RADIX: &str = include_str!("../shaders/fft/radix.wgsl");
const FFT_PASS: &str = include_str!("../shaders/fft/pass.wgsl");
const FFT_EXCHANGE_SHARED: &str = include_str!("../shaders/fft/exchange_shared.wgsl");
const FFT_EXCHANGE_PRIVATE: &str = include_str!("../shaders/fft/exchange_private.wgsl");

/// Every FFT pass: source, destination, twiddle or chirp table, parameters.
const FFT_PASS_LAYOUT: &[BindingKind] = &[R, RW, R, U];

/// One FFT pass, exchanging between register stages through workgroup memory.
pub static FFT_PASS_SHARED: Shader = Shader {
    name: "fft/pass_shared",
    // The exchange snippet after the radix file: naga's override processing needs the element
    // type declared before the override-sized workgroup array.
    parts: &[COMPLEX, FFT_RADIX, FFT_EXCHANGE_SHARED, FFT_PASS],
    layout: FFT_PASS_LAYOUT,
};

macro_rules! fft_pass_private {
    ($name:ident, $len:literal) => {
        #[doc = concat!("One FFT pass of sub-length at most ", $len, ", one invocation per column.")]
        pub static $name: Shader = Shader {
            name: concat!("fft/pass_private_", $len),
            parts: &[
                COMPLEX,
                concat!("const PRIVATE_LEN: u32 = ", $len, "u;"),
                FFT_RADIX,
                FFT_EXCHANGE_PRIVATE,
                FFT_PASS,
            ],
            layout: FFT_PASS_LAYOUT,
        };
    };
}

fft_pass_private!(FFT_PASS_PRIVATE_16, 16);
fft_pass_private!(FFT_PASS_PRIVATE_32, 32);
fft_pass_private!(FFT_PASS_PRIVATE_64, 64);
fft_pass_private!(FFT_PASS_PRIVATE_128, 128);
fft_pass_private!(FFT_PASS_PRIVATE_256, 256);
fft_pass_private!(FFT_PASS_PRIVATE_512, 512);
fft_pass_private!(FFT_PASS_PRIVATE_1024, 1024);

/// The private-exchange permutations by the largest sub-length they hold.
pub static FFT_PASS_PRIVATE: [(usize, &Shader); 7] = [
    (16, &FFT_PASS_PRIVATE_16),
    (32, &FFT_PASS_PRIVATE_32),
    (64, &FFT_PASS_PRIVATE_64),
    (128, &FFT_PASS_PRIVATE_128),
    (256, &FFT_PASS_PRIVATE_256),
    (512, &FFT_PASS_PRIVATE_512),
    (1024, &FFT_PASS_PRIVATE_1024),
];

const FFT_TWO_LEVEL: &str = include_str!("../shaders/fft/two_level.wgsl");

/// One FFT pass in two levels of private rows (`shaders/fft/two_level.wgsl`) with the row helpers
/// `generated` for its split (`crate::fft::two_level`). Composed at run time, so the module lives
/// for the rest of the process (each split once; `fft::two_level` keeps them).
pub(crate) fn fft_pass_two_level(name: String, generated: String) -> &'static Shader {
    let parts: Vec<&'static str> = vec![
        COMPLEX,
        FFT_RADIX,
        FFT_EXCHANGE_SHARED,
        FFT_PASS,
        Box::leak(generated.into_boxed_str()),
        FFT_TWO_LEVEL,
    ];
    Box::leak(Box::new(Shader {
        name: Box::leak(name.into_boxed_str()),
        parts: Box::leak(parts.into_boxed_slice()),
        layout: FFT_PASS_LAYOUT,
    }))
}

/// The bandwidth yardstick.
pub static COPY: Shader = Shader {
    name: "util/copy",
    parts: &[include_str!("../shaders/util/copy.wgsl")],
    layout: &[R, RW, U],
};

/// Pooled keys, certification sums and scaled block copies of the memo layer.
pub static MEMO: Shader = Shader {
    name: "memo/memo",
    parts: &[
        memo::WGSL,
        include_str!("../shaders/util/double_word.wgsl"),
        include_str!("../shaders/memo/memo.wgsl"),
    ],
    layout: &[R, R, RW, R, U],
};

/// Stage in: whole arrays (complex, real, or a difference) into a stage's chunk-local buffer.
pub static STAGE_IN: Shader = Shader {
    name: "operator/stage_in",
    parts: &[include_str!("../shaders/operator/stage_in.wgsl")],
    layout: &[R, R, RW, U],
};

/// Stage out: a stage's chunk-local result into a whole array (complex, or a scaled real part).
pub static STAGE_OUT: Shader = Shader {
    name: "operator/stage_out",
    parts: &[include_str!("../shaders/operator/stage_out.wgsl")],
    layout: &[R, RW, R, U],
};

/// Centring signs, scale and per-projection shift (column and row phases) of the
/// per-projection 2D FFT.
pub static MODULATE: Shader = Shader {
    name: "util/modulate",
    parts: &[include_str!("../shaders/util/modulate.wgsl")],
    layout: &[RW, R, R, U],
};

/// The normal operator's steps between its FFTs (`crate::operator::ToeplitzNormal`): the real
/// volume, the doubled grid (complex, half its last axis), the kernel's real spectrum, the real
/// result, the twiddles between a line's halves, parameters.
pub static TOEPLITZ: Shader = Shader {
    name: "operator/toeplitz",
    parts: &[include_str!("../shaders/operator/toeplitz.wgsl")],
    layout: &[R, RW, R, RW, R, U],
};

/// Both gridding stages: three chunk-local arrays (read and written), four read-only tables, the
/// parameters.
const GRIDDING: &[BindingKind] = &[RW, RW, RW, R, R, R, R, U];

/// Stage U1 of the laminography operator.
pub static USFFT1D: Shader = Shader {
    name: "operator/usfft1d",
    parts: &[include_str!("../shaders/operator/usfft1d.wgsl")],
    layout: GRIDDING,
};

/// Stage U2 of the laminography operator.
pub static USFFT2D: Shader = Shader {
    name: "operator/usfft2d",
    parts: &[
        usfft2d::WGSL,
        include_str!("../shaders/operator/usfft2d.wgsl"),
    ],
    // GRIDDING and the tabulated adjoint's records.
    layout: &[RW, RW, RW, R, R, R, R, U, RW],
};

/// Invocations per workgroup of the vector kernels (the `WORKGROUP` override of
/// `shaders/solver/vector.wgsl`); a reduction writes one partial sum per workgroup, which the
/// memory planner counts before the solver exists.
pub const SOLVER_VECTOR_WORKGROUP: u32 = 256;

/// Vector kernels of the ADMM-TV solver over f32 words (linear combinations, gradient,
/// shrinkage, reductions), for any plane length.
pub static SOLVER_VECTOR: Shader = Shader {
    name: "solver/vector",
    parts: &[
        include_str!("../shaders/solver/vector_f32.wgsl"),
        include_str!("../shaders/solver/vector.wgsl"),
        include_str!("../shaders/util/double_word.wgsl"),
        include_str!("../shaders/solver/vector_voxels.wgsl"),
    ],
    layout: SOLVER_VECTOR_LAYOUT,
};

/// The linear combinations and dot products of [`SOLVER_VECTOR`] over `vec4<f32>` words, for
/// arrays whose planes are whole `vec4`s.
pub static SOLVER_VECTOR_VEC4: Shader = Shader {
    name: "solver/vector_vec4",
    parts: &[
        include_str!("../shaders/solver/vector_vec4.wgsl"),
        include_str!("../shaders/solver/vector.wgsl"),
    ],
    layout: SOLVER_VECTOR_LAYOUT,
};

/// Both vector modules: four inputs, the output, the scalars, the parameters.
const SOLVER_VECTOR_LAYOUT: &[BindingKind] = &[R, R, R, R, RW, R, U];

/// The solver's scalar steps (CG step length and direction coefficients) on the GPU.
pub static SOLVER_SCALARS: Shader = Shader {
    name: "solver/scalars",
    parts: &[include_str!("../shaders/solver/scalars.wgsl")],
    layout: &[RW, RW, U],
};

/// The BaSiC flat-field fit: every kernel of one ALM iteration (docs/flatfield-method.md,
/// "Fused GPU kernels").
pub static FLATFIELD_BASIC: Shader = Shader {
    name: "flatfield/basic",
    parts: &[basic::WGSL, include_str!("../shaders/flatfield/basic.wgsl")],
    layout: &[R, RW, RW, RW, RW, R, U, U],
};

/// The BaSiC correction `(I − D) / max(S, flat_min)`.
pub static FLATFIELD_TRANSFORM: Shader = Shader {
    name: "flatfield/transform",
    parts: &[include_str!("../shaders/flatfield/transform.wgsl")],
    layout: &[RW, R, R, U],
};

/// Edge-padded complex rows from real detector rows (the slab backprojection's staging).
pub static PREPROCESS_PAD_ROWS: Shader = Shader {
    name: "preprocess/pad_rows",
    parts: &[include_str!("../shaders/preprocess/pad_rows.wgsl")],
    layout: &[R, RW, U],
};

/// The ramp filter of the slab backprojection (`lamino try`, the rotation-axis and tilt search).
pub static PREPROCESS_RAMP: Shader = Shader {
    name: "preprocess/ramp",
    parts: &[include_str!("../shaders/preprocess/ramp.wgsl")],
    layout: &[RW, R, U],
};

/// The slab backprojection of the rotation-axis and tilt search.
pub static PREPROCESS_BACKPROJECT: Shader = Shader {
    name: "preprocess/backproject",
    parts: &[include_str!("../shaders/preprocess/backproject.wgsl")],
    layout: &[R, R, RW, U],
};

/// The three orthogonal slices of a volume as grey RGBA8 or values, for an application's
/// textures (`crate::gpu::SlicePass`): volume, output words, parameters.
pub static VIEWER_SLICES: Shader = Shader {
    name: "viewer/slices",
    parts: &[include_str!("../shaders/viewer/slices.wgsl")],
    layout: &[R, RW, U],
};

/// Every shader, for validation.
pub static ALL: &[&Shader] = &[
    &FFT_PASS_SHARED,
    &FFT_PASS_PRIVATE_16,
    &FFT_PASS_PRIVATE_32,
    &FFT_PASS_PRIVATE_64,
    &FFT_PASS_PRIVATE_128,
    &FFT_PASS_PRIVATE_256,
    &FFT_PASS_PRIVATE_512,
    &FFT_PASS_PRIVATE_1024,
    &COPY,
    &STAGE_IN,
    &STAGE_OUT,
    &MEMO,
    &MODULATE,
    &TOEPLITZ,
    &USFFT1D,
    &USFFT2D,
    &SOLVER_VECTOR,
    &SOLVER_VECTOR_VEC4,
    &SOLVER_SCALARS,
    &FLATFIELD_BASIC,
    &FLATFIELD_TRANSFORM,
    &PREPROCESS_PAD_ROWS,
    &PREPROCESS_RAMP,
    &PREPROCESS_BACKPROJECT,
    &VIEWER_SLICES,
];
