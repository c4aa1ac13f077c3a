//! Pictures written next to results: slice previews, truth | reconstruction | difference panels,
//! the solver's convergence history and accuracy-vs-time scatter plots. (The figure of a fitted
//! flat-field, dark-field and baseline sits beside the fit, in `crate::flatfield`, and draws
//! with the same machinery.)
//!
//! - `canvas`: what every figure shares: [`PlotError`], the embedded font, PNG rendering, value
//!   images and colour maps, the [`grey_window`], the curve colours.
//! - `slices`: [`write_preview_png`], [`write_slice_previews`], [`write_volume_previews`] and
//!   [`write_comparison_png`].
//! - `convergence`: [`write_convergence_png`].
//! - `scatter`: [`write_scatter_png`] with its [`PlotSpec`], [`Series`] and [`Marker`].

pub(crate) mod canvas;
mod convergence;
mod scatter;
mod slices;

pub use canvas::{grey_window, PlotError, GREY_WINDOW_PERCENTILES, PREVIEW_MIN_SIDE};
pub use convergence::write_convergence_png;
pub use scatter::{write_scatter_png, Marker, PlotSpec, Series};
pub use slices::{
    write_comparison_png, write_preview_png, write_slice_previews, write_volume_previews,
    PANEL_CELL_MIN_SIDE,
};
