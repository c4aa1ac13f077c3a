//! The WGSL sources, composed from the files in `shaders/`. Composition is plain concatenation of
//! shared snippets ahead of a kernel file; the test `shaders_validate` runs every composed shader
//! through naga's parser and validator without a GPU.

/// A composed WGSL module.
#[derive(Debug)]
pub struct Shader {
    /// Stable name, also the cache key of its pipelines.
    pub name: &'static str,
    parts: &'static [&'static str],
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
};

/// A whole FFT in workgroup memory.
pub static FFT_STOCKHAM_FUSED: Shader = Shader {
    name: "fft/stockham_fused",
    parts: &[
        COMPLEX,
        RADIX,
        include_str!("../shaders/fft/stockham_fused.wgsl"),
    ],
};

/// Bluestein chirp multiplications.
pub static FFT_BLUESTEIN: Shader = Shader {
    name: "fft/bluestein",
    parts: &[COMPLEX, include_str!("../shaders/fft/bluestein.wgsl")],
};

/// The bandwidth yardstick.
pub static COPY: Shader = Shader {
    name: "util/copy",
    parts: &[include_str!("../shaders/util/copy.wgsl")],
};

/// The BaSiC flat-field fit: every kernel of one ALM iteration (spec §8.2).
pub static FLATFIELD_BASIC: Shader = Shader {
    name: "flatfield/basic",
    parts: &[include_str!("../shaders/flatfield/basic.wgsl")],
};

/// The BaSiC correction `(I − D) / max(S, flat_min)`.
pub static FLATFIELD_TRANSFORM: Shader = Shader {
    name: "flatfield/transform",
    parts: &[include_str!("../shaders/flatfield/transform.wgsl")],
};

/// Every shader, for validation.
pub static ALL: &[&Shader] = &[
    &FFT_STOCKHAM_PASS,
    &FFT_STOCKHAM_FUSED,
    &FFT_BLUESTEIN,
    &COPY,
    &FLATFIELD_BASIC,
    &FLATFIELD_TRANSFORM,
];
