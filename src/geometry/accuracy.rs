//! The gridding accuracy a geometry asks for and the reach it implies: the kernel's half-width in
//! grid cells at an accuracy `eps`, and the shortest axis that kernel accepts. A geometry's valid
//! sizes and the detector rows a volume reaches follow from them, so they live with the geometry;
//! the kernel's shape is the operator's (`operator::GriddingAxis`, which takes its half-width here).

/// Default gridding accuracy: the reference's `EPS = 1e-3` (lamino's kernel takes 5 taps per axis at it,
/// the reference's Gaussian 9: docs/operator-method.md, "Gridding kernel").
pub const DEFAULT_EPS: f64 = 1e-3;
/// Smallest supported gridding accuracy: below this f32 arithmetic, not the kernel, limits accuracy.
pub const MIN_EPS: f64 = 1e-6;

pub(super) fn default_eps() -> f64 {
    DEFAULT_EPS
}

/// The gridding kernel's half-width `m` (grid cells) at accuracy `eps`: the kernel spans `2m + 1`
/// cells of the twice-oversampled grid, `m = ceil((-log10(eps) + 0.9) / 2)`, at least 1.
pub fn kernel_half_width(eps: f64) -> usize {
    ((-eps.log10() + 0.9) / 2.0).ceil().max(1.0) as usize
}

/// The shortest axis the gridding kernel accepts at `eps` when an axis of length `n` is too short
/// for it (`None` when `n` is long enough): the grid of `2n` cells must be wider than the `2m + 1`
/// taps, and the kernels hold at most 15 taps per axis.
pub(crate) fn gridding_minimum(n: usize, eps: f64) -> Option<usize> {
    let m = kernel_half_width(eps);
    (2 * n <= 2 * m + 1 || m > 7).then_some(m + 1)
}
