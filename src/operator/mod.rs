//! The laminography operator on the GPU: `L = F_adj . U2 . U1` and its exact adjoint, plus the
//! Fourier-domain pair `A = U2 . U1`, `A*` that the solver uses (docs/operator-method.md,
//! "Operator L", "Fourier-domain pair", "Adjoints and determinism").
//!
//! - U1: 1D USFFT along z for every (y, x) column, onto the frequencies `z_k` of the detector rows.
//!   Volume `(n0, n1, n2)` -> spectrum `(deth, n1, n2)`.
//! - U2: 2D USFFT of every spectrum plane `k` onto the (x, y) frequencies of each angle and column.
//!   Spectrum -> Fourier-domain data `(ntheta, deth, detw)`.
//! - F_adj: the centred inverse 2D FFT of each projection, scaled by `1/(deth detw)`, with the
//!   reference's sign `(-1)^((deth+detw)/2)` corrected so that L is the true projector for every
//!   even size: `L u (theta) ~ P_theta u / sqrt(n2 ntheta)`.
//!
//! Every adjoint is a gather (no float atomics), so the same input gives the same bits. Each stage
//! runs chunk by chunk along its own axis (U1 along y, U2 along detector rows, F along angles), a
//! chunk an independent computation on chunk-local buffers, so results do not depend on the chunk
//! sizes. The operator owns only its intermediate, the spectrum; an [`Application`] binds a stage
//! sequence to the caller's arrays once ([`Source`] in, [`Sink`] out: complex, real, the
//! difference of two arrays, a scaled real part added to an array), so the solver's vector
//! updates around an operator application happen while a chunk is on its way in or out.
//!
//! Here: the errors, the options and the operator itself. The operator's program (every
//! application's stages in order, the arrays between them, each stage's kernels) is in `program`,
//! what a chunk's program is made of in `chunk_program`, chunk sizing and the memory estimate in `sizing`, building in
//! `build` (with one file per stage: `u1`, `u2`, `fft2d`), binding an application in
//! `application` and recording it in `record`; `block_copies` moves blocks between whole arrays and
//! chunks, `tables` computes the gridding tables, `sampling` gives what the operator samples of the scan's
//! geometry (`crate::geometry`): its detector phases and frequencies.

mod application;
mod block_copies;
mod build;
mod chunk_program;
mod fft2d;
mod gridding;
mod program;
mod record;
mod sampling;
mod sizing;
pub(crate) mod tables;
mod toeplitz;
mod u1;
mod u2;

pub use application::Application;
pub use block_copies::{Sink, Source};
pub(crate) use chunk_program::Block;
pub(crate) use chunk_program::View;
pub use gridding::GriddingAxis;
pub use program::{Apply, Space, Stage};
pub use sampling::DetectorPhases;
pub use toeplitz::{
    doubled_volume, toeplitz_binding, toeplitz_device_bytes, toeplitz_setup_bytes,
    ToeplitzApplication, ToeplitzNormal,
};

use thiserror::Error;

use std::sync::Arc;

use crate::array::{Field, Residency, Scalars};
use crate::distributed::team::Share;
use crate::fft::FftError;
use crate::gpu::GpuBuffer;
use crate::gpu::GpuError;
// For the stage files (`super::Geometry`): the geometry is the scan's, a module below.
use crate::geometry::Geometry;
use chunk_program::{FftPlans, StageChunks};

/// Errors of operator construction and application.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OperatorError {
    #[error(transparent)]
    Geometry(#[from] crate::geometry::GeometryError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Fft(#[from] FftError),
    /// A buffer the operator needs cannot exist on this device.
    #[error("{what} needs {bytes} bytes, but this device allows {limit} bytes")]
    TooLarge {
        what: String,
        bytes: u64,
        limit: u64,
    },
    /// An axis is shorter than the gridding kernel.
    #[error("{name} = {value} is too small for the gridding kernel at eps = {eps}: it needs at least {min}")]
    TooSmall {
        name: &'static str,
        value: usize,
        eps: f64,
        min: usize,
    },
    /// An array does not have the shape the geometry implies.
    #[error("{what} has shape {got:?}, but the geometry needs {expected:?}")]
    ShapeMismatch {
        what: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    /// An application asks for something the stages cannot do.
    #[error("{0}")]
    Unsupported(&'static str),
    #[error(transparent)]
    Storage(crate::array::StorageError),
}

impl From<crate::array::StorageError> for OperatorError {
    fn from(e: crate::array::StorageError) -> Self {
        match e {
            crate::array::StorageError::Gpu(g) => Self::Gpu(g),
            other => Self::Storage(other),
        }
    }
}

/// Each stage runs in at least this many chunks by default (fewer only where the axis is
/// shorter): devices and MPI ranks share a stage's chunks, so a stage of one chunk would run
/// on one of them; the chunking does not depend on how many share it, so neither do the bits.
pub const MIN_STAGE_CHUNKS: usize = 8;

/// Chunking limits; by default chunks are as large as the device's binding limit allows, and
/// each stage has at least [`MIN_STAGE_CHUNKS`] chunks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperatorOptions {
    /// At most this many y rows per U1 chunk.
    pub max_chunk_y: Option<usize>,
    /// At most this many detector rows per U2 chunk.
    pub max_chunk_rows: Option<usize>,
    /// At most this many projections per chunk of the 2D FFT stage.
    pub max_chunk_angles: Option<usize>,
    /// How U2* weighs the points at the blocks of grid cells their footprints reach.
    pub adjoint_gridding: AdjointGridding,
}

/// How U2* (the adjoint's 2D gridding) finds each point's kernel weights at the blocks of grid
/// cells it sums over. Both read the same points in the same order and add the same products,
/// so both give the same values (`bench operator` reports their largest difference); one saves
/// time, the other memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AdjointGridding {
    /// [`Tabulated`](Self::Tabulated) where one detector row's records fit a storage binding,
    /// else [`Evaluated`](Self::Evaluated).
    #[default]
    Auto,
    /// A pass before the blocks evaluates each point's weights once and writes them, with its
    /// value, as a record on the cells of the blocks it reaches; the blocks read the records.
    /// Each chunk holds its points' records (80 bytes per point at eps 1e-3, 112 at 1e-4 to
    /// 1e-6).
    Tabulated,
    /// Each block evaluates the weights of every point that reaches it (2 x 2 blocks per point at
    /// eps 1e-3, 3 x 3 at 1e-4 to 1e-6): no memory beyond the tables.
    Evaluated,
}

impl AdjointGridding {
    /// Every way, with its name (`bench operator --adjoint-gridding`, the benchmarks' records).
    pub const ALL: [(&'static str, Self); 3] = [
        ("auto", Self::Auto),
        ("tabulated", Self::Tabulated),
        ("evaluated", Self::Evaluated),
    ];

    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|e| e.1 == self).map_or("", |e| e.0)
    }
}

/// The laminography operator for one geometry, with its spectrum, chunk buffers, tables, kernels
/// and FFT plans built once.
pub struct LaminoOperator {
    geometry: Geometry,
    spectrum: Field,
    stages: StageChunks,
    ffts: FftPlans,
    chunk_y: usize,
    chunk_rows: usize,
    chunk_angles: usize,
    /// How U2* weighs its points: `Tabulated` or `Evaluated`, as the options resolved here.
    adjoint_gridding: AdjointGridding,
    /// Bytes of each slot of the context's shared FFT workspace the plans need together.
    fft_workspace: [u64; 2],
    buffers: Vec<GpuBuffer>,
    /// The coefficients of applications the operator runs for itself (no scaled sinks).
    own_scalars: Scalars,
    /// As a member of a multi-device team: which chunks of each stage it computes.
    share: Option<Arc<Share>>,
    /// The U2 chunks built (with the tables of their rows): every one, or a team member's.
    u2_chunks: std::ops::Range<usize>,
}

impl std::fmt::Debug for LaminoOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaminoOperator")
            .field("geometry", &self.geometry)
            .field("chunk_y", &self.chunk_y)
            .field("chunk_rows", &self.chunk_rows)
            .field("chunk_angles", &self.chunk_angles)
            .finish_non_exhaustive()
    }
}

impl LaminoOperator {
    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The operator as member `share` of a multi-device team: its applications compute the
    /// member's share of each stage's chunks, with the team's `spectrum` (a host array) between
    /// the stages, and meet the other members before each stage and after the last.
    pub(crate) fn into_member(mut self, spectrum: Field, share: Arc<Share>) -> Self {
        assert_eq!(
            spectrum.layout(),
            self.spectrum.layout(),
            "a spectrum of the geometry"
        );
        let u2_count = self.geometry.deth.div_ceil(self.chunk_rows);
        assert!(
            self.u2_chunks == (0..u2_count) || self.u2_chunks == share.range(u2_count),
            "an operator built for another member"
        );
        self.spectrum = spectrum;
        self.share = Some(share);
        self
    }

    /// The spectrum after U1, `(deth, n1, n2)` complex64.
    pub fn spectrum(&self) -> &Field {
        &self.spectrum
    }

    /// Chunk sizes in use: (y rows per U1 chunk, detector rows per U2 chunk, projections per F
    /// chunk).
    pub fn chunks(&self) -> (usize, usize, usize) {
        (self.chunk_y, self.chunk_rows, self.chunk_angles)
    }

    /// How U2* weighs its points here (never `Auto`: what the options resolved to).
    pub fn adjoint_gridding(&self) -> AdjointGridding {
        self.adjoint_gridding
    }

    /// Bytes of device memory the operator holds (spectrum when on the device, chunk buffers,
    /// tables, FFT plans and the FFT workspace they share).
    pub fn device_bytes(&self) -> u64 {
        let spectrum = match self.spectrum.residency() {
            Residency::Device => self.spectrum.layout().bytes(),
            _ => 0,
        };
        spectrum
            + self.buffers.iter().map(GpuBuffer::bytes).sum::<u64>()
            + self.ffts.iter().map(|p| p.device_bytes()).sum::<u64>()
            + self.fft_workspace.iter().sum::<u64>()
    }

    /// Bytes of FFT workspace: what the operator's plans bind of the context's shared pool, and
    /// what they would hold with workspace of their own (the sum of their needs). The difference is
    /// the memory the shared pool saves.
    pub fn fft_workspace_bytes(&self) -> (u64, u64) {
        let own = self
            .ffts
            .iter()
            .flat_map(|p| p.workspace_slot_bytes())
            .sum();
        (self.fft_workspace.iter().sum(), own)
    }
}
