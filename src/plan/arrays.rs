//! The solver's arrays as the planner counts them ([`Array`]): their layouts, how often one outer
//! iteration of the solver reads and writes each (from its order of operations), and the halo
//! traffic of streamed arrays, which decide what stays on the device.

use serde::Serialize;

use crate::array::PlaneLayout;
use crate::distributed::shares::{chunk_planes, share_range};
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::operator::{LaminoOperator, Space};
use crate::params::{AdmmParams, InnerSolver};

/// The normal operator of the inner loop a plan is made for: it decides which arrays an outer
/// iteration reads and how often ([`Array::accesses`]), so what the plan keeps on the device and
/// moves, and what device memory is set aside beside the arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormalLoop {
    /// A then A* per CG step: the data-space arrays, the spectrum and the U2 tables are read.
    Gridding,
    /// `T p` per CG step ([`crate::operator::ToeplitzNormal`]): with the carried CG an outer
    /// iteration reads no data-space array, spectrum or U2 table; the loop's own memory
    /// ([`super::toeplitz_need_bytes`]) is set aside before the arrays are placed.
    Toeplitz,
}

/// The solver's arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Array {
    U,
    UPrev,
    Psi,
    Lambda,
    GradU,
    GradUPrev,
    R,
    P,
    GradP,
    RSaved,
    DHat,
    Au,
    Ap,
    Spectrum,
}

impl Array {
    /// Every array, most accesses per byte first: the order in which they are made resident.
    /// (D and A u are read together as the residual `D - A u`, so they share residency.)
    pub const BY_TRAFFIC: [Array; 14] = [
        Array::R,
        Array::P,
        Array::Spectrum,
        Array::GradP,
        Array::Ap,
        Array::GradU,
        Array::U,
        Array::Au,
        Array::DHat,
        Array::Psi,
        Array::Lambda,
        Array::RSaved,
        Array::GradUPrev,
        Array::UPrev,
    ];

    /// [`BY_TRAFFIC`](Self::BY_TRAFFIC) for the inner loop `normal`: the Toeplitz loop reads
    /// neither the data-space arrays nor the spectrum in an outer iteration, so they go last (in
    /// the same order, A u still before D).
    pub fn by_traffic(normal: NormalLoop) -> [Array; 14] {
        let mut order = Self::BY_TRAFFIC;
        if normal == NormalLoop::Toeplitz {
            // A stable sort: the others keep their order.
            order.sort_by_key(|a| a.toeplitz_skips());
        }
        order
    }

    /// Whether the Toeplitz loop leaves the array unread in an outer iteration.
    fn toeplitz_skips(self) -> bool {
        matches!(self, Self::Spectrum | Self::Ap | Self::Au | Self::DHat)
    }

    /// The array's layout in `g`.
    pub fn layout(self, g: &Geometry) -> PlaneLayout {
        match self {
            // By y row: U1 reads and writes them a chunk of y rows at a time.
            Self::U | Self::UPrev | Self::R | Self::P | Self::RSaved => {
                Space::Volume.swapped_layout(g, 1)
            }
            Self::Psi | Self::Lambda | Self::GradU | Self::GradUPrev | Self::GradP => {
                Space::Volume.swapped_layout(g, 3)
            }
            // By detector row: U2 reads and writes them a chunk of rows at a time.
            Self::DHat | Self::Au | Self::Ap => Space::Data.swapped_layout(g, 2),
            Self::Spectrum => Space::Spectrum.layout(g, 2),
        }
    }

    /// The planes a team member's home of the array is made of whole chunks of, with the
    /// operator's `chunks` (U1's y rows, U2's detector rows, F's projections): U2's chunks for
    /// the spectrum and the data side (their planes are detector rows), U1's for the volume side
    /// (its planes are y rows), which the stages then read and write at home.
    pub fn home_chunk(self, chunks: (usize, usize, usize)) -> usize {
        match self {
            Self::Spectrum | Self::DHat | Self::Au | Self::Ap => chunks.1,
            _ => chunks.0,
        }
    }

    /// Whole-array reads and writes in one outer iteration of `params` with the inner loop
    /// `normal` (a read-modify-write counts two), from the order of operations in
    /// `solver::admm` and `solver::normal`. `width` is the operator's (voxels along x), which
    /// the CG steps per outer iteration may follow ([`AdmmParams::inner_steps`]).
    pub fn accesses(self, params: &AdmmParams, width: usize, normal: NormalLoop) -> u64 {
        let k = params.inner_steps(width) as u64;
        let (relax_added, relax_saved) = self.relaxation_accesses(params);
        let (carry_added, carry_saved) = self.carried_residual_accesses(params, k);
        let gridding = self.accesses_plain(params, width, k) + relax_added + carry_added
            - relax_saved
            - carry_saved;
        match normal == NormalLoop::Toeplitz && params.carries_residual() {
            true => self.in_toeplitz_loop(gridding, k),
            false => gridding,
        }
    }

    /// What the Toeplitz loop changes in the carried CG's `gridding` accesses (`solver::normal`):
    /// each step's `T p` reads p where `A p` did, and `<p, T p>` reads p again where `|A p|^2`
    /// read A p; the data term `<u, b + q>` reads u and r saved where `|A u - D|^2` read A u
    /// and D; A u does not move, and neither A nor A* runs (b and `T p` stay on the device,
    /// beside the plan's arrays).
    fn in_toeplitz_loop(self, gridding: u64, k: u64) -> u64 {
        match self {
            _ if self.toeplitz_skips() => 0,
            Self::P => gridding + k,
            Self::U | Self::RSaved => gridding + 1,
            _ => gridding,
        }
    }

    /// What carrying the data residual changes (from the second outer iteration on): no A* of
    /// `D - A u` (D and A u read once less); the residual starts from a copy of r saved; each
    /// inner step moves r saved with `A*(A p)` instead of r, and forms r from it afresh (a copy,
    /// then the divergence of psi, lambda and grad u instead of that of grad p): (accesses
    /// added, accesses saved).
    fn carried_residual_accesses(self, params: &AdmmParams, k: u64) -> (u64, u64) {
        if !params.carries_residual() {
            return (0, 0);
        }
        match self {
            Self::RSaved => (1 + 3 * k, 0),
            Self::R | Self::GradP => (0, k),
            Self::GradU | Self::Psi | Self::Lambda => (k, 0),
            Self::Au | Self::DHat => (0, 1),
            _ => (0, 0),
        }
    }

    /// What over-relaxation changes: one pass writes `grad p = a grad u + (1 - a) psi` (reading
    /// grad u and psi; grad p is written, not read: its coefficient is zero), which the shrinkage
    /// and the multiplier update then read instead of grad u: (accesses added, accesses saved).
    /// The streaming traffic test checks the count (tests/streaming.rs).
    fn relaxation_accesses(self, params: &AdmmParams) -> (u64, u64) {
        match (params.relaxation != 1.0, self) {
            (true, Self::GradP) => (3, 0),
            (true, Self::Psi) => (1, 0),
            (true, Self::GradU) => (1, 2),
            _ => (0, 0),
        }
    }

    /// The accesses of plain ADMM (relaxation 1, the residual recomputed every outer iteration).
    fn accesses_plain(self, params: &AdmmParams, width: usize, k: u64) -> u64 {
        // The spectrum is written and read once by every application of A or A*.
        let (forward, adjoint) = operator_applications(params, width);
        let spectrum = 2 * (forward + adjoint);
        match params.inner {
            InnerSolver::ConjugateGradient => match self {
                Self::Spectrum => spectrum,
                Self::R => 4 + 6 * k,
                Self::P => 5 * k,
                Self::GradP => 4 * k,
                Self::Ap => 4 * k,
                Self::U => 3 + 2 * k,
                Self::GradU => 8 + 2 * k,
                Self::Au => 2 + 2 * k,
                Self::Psi => 7,
                Self::Lambda => 6,
                Self::DHat | Self::GradUPrev | Self::UPrev => 2,
                Self::RSaved => 0,
            },
            // Per inner step: A u and the residual again, the direction, and fixed-step moves.
            InnerSolver::DaiYuan { .. } => match self {
                Self::Spectrum => spectrum,
                Self::R => 7 * k - 1,
                Self::P => 6 * k - 2,
                Self::GradP => 2 * k,
                Self::U => 3 + 3 * k,
                Self::GradU => 7 + 3 * k,
                Self::Au => 1 + 2 * k,
                Self::DHat => 1 + k,
                Self::RSaved => 2 * k - 1,
                Self::Psi => 6 + k,
                Self::Lambda => 5 + k,
                Self::Ap => 0,
                Self::GradUPrev | Self::UPrev => 2,
            },
        }
    }
}

/// Applications of `A` (forward) and `A*` (adjoint) in one outer iteration of `params`, from
/// `solver::admm`: CG applies A* to the residual once (only in the first outer iteration when
/// it carries the residual), then A to p and A* to A p per inner step; Dai-Yuan forms the
/// residual (A u, then A*) per inner step and A u once more at the end.
/// `width` is the operator's (voxels along x), which the CG steps may follow.
pub fn operator_applications(params: &AdmmParams, width: usize) -> (u64, u64) {
    let k = params.inner_steps(width) as u64;
    match params.inner {
        InnerSolver::ConjugateGradient if params.carries_residual() => (k, k),
        InnerSolver::ConjugateGradient => (k, 1 + k),
        InnerSolver::DaiYuan { .. } => (k, k),
    }
}

/// Applications of `A` and `A*` in all over the first `outer` outer iterations of `params`: as
/// many times [`operator_applications`], plus the carried residual's first `A*`.
pub fn operator_applications_in(params: &AdmmParams, width: usize, outer: usize) -> (u64, u64) {
    let (forward, adjoint) = operator_applications(params, width);
    let first = u64::from(params.carries_residual() && outer > 0);
    (outer as u64 * forward, outer as u64 * adjoint + first)
}

/// The vector passes that read their inputs with a one-plane halo (the gradient reads the plane
/// after its window, the divergence the plane before), as (inputs, output, runs per outer
/// iteration), from `solver::admm`: the divergence of (psi, lambda, grad u) in every residual,
/// the gradient of p and, with CG, the divergence of grad p in every inner step.
pub(super) fn halo_passes(
    params: &AdmmParams,
    width: usize,
) -> Vec<(&'static [Array], Array, u64)> {
    let k = params.inner_steps(width) as u64;
    let state: &[Array] = &[Array::Psi, Array::Lambda, Array::GradU];
    match params.inner {
        InnerSolver::ConjugateGradient if params.carries_residual() => {
            vec![(state, Array::R, 1 + k), (&[Array::P], Array::GradP, k)]
        }
        InnerSolver::ConjugateGradient => vec![
            (state, Array::R, 1),
            (&[Array::P], Array::GradP, k),
            (&[Array::GradP], Array::R, k),
        ],
        InnerSolver::DaiYuan { .. } => vec![(state, Array::R, k), (&[Array::P], Array::GradP, k)],
    }
}

/// Bytes the halos of the vector passes add to the host arrays' traffic per outer iteration, over
/// `portion`'s planes:
/// a pass runs over windows of whole planes (as `solver::vector` sizes them: every binding, and
/// every host array's block with room for the halo in a staging buffer), and each window after
/// the first uploads one plane of each host input beyond the planes it computes.
pub(super) fn halo_bytes(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    (staging_words, portion): (usize, Portion),
    on_host: impl Fn(Array) -> bool,
) -> u64 {
    let binding_words =
        (ctx.max_binding_bytes() / 4).saturating_sub((ctx.binding_alignment() / 4).max(1));
    halo_passes(params, g.n2)
        .into_iter()
        .map(|(inputs, output, runs)| {
            let layout = |a: Array| a.layout(g);
            let planes = portion.planes(layout(output).planes);
            let mut per_window = planes;
            // A binding holds an input's window with its halo, the output's without; a staging
            // buffer keeps room for the halo whichever host array it carries.
            let mut fit = |a: Array, binding_halo: usize| {
                let words = layout(a).plane_words.max(1);
                let bindable = (binding_words / words as u64) as usize;
                per_window = per_window.min(bindable.saturating_sub(binding_halo));
                if on_host(a) {
                    per_window = per_window.min((staging_words / words).saturating_sub(1));
                }
            };
            inputs.iter().for_each(|&a| fit(a, 1));
            fit(output, 0);
            let windows = planes.div_ceil(per_window.max(1)) as u64;
            let host_plane_bytes: u64 = inputs
                .iter()
                .filter(|&&a| on_host(a))
                .map(|&a| layout(a).plane_words as u64 * 4)
                .sum();
            runs * (windows - 1) * host_plane_bytes
        })
        .sum()
}

/// The part of every array a plan is for: member `member` of `members` holds one contiguous
/// share of each array's planes (z slices of the volume side, detector rows of the spectrum and
/// the U2 tables, angles of the data side), as the distributed mode's homes are cut. The whole
/// arrays are the portion of the only member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Portion {
    pub member: usize,
    pub members: usize,
}

impl Portion {
    /// Every array whole: one process on one device.
    pub const WHOLE: Portion = Portion {
        member: 0,
        members: 1,
    };

    /// The member's planes of `planes`.
    pub fn planes(self, planes: usize) -> usize {
        share_range(self.member, self.members.max(1), planes).len()
    }

    /// The planes of `array` the member keeps as its home in a team run: its share of the
    /// chunks of [`Array::home_chunk`] planes, so that the stage reading them reads them at
    /// home. (An MPI rank's home is its members' homes together.)
    pub fn home(
        self,
        array: Array,
        g: &Geometry,
        chunks: (usize, usize, usize),
    ) -> std::ops::Range<usize> {
        let planes = array.layout(g).planes;
        let members = self.members.max(1);
        chunk_planes(
            self.member..self.member + 1,
            members,
            planes,
            array.home_chunk(chunks),
        )
    }

    /// Bytes of the member's home of `array` ([`home`](Self::home)).
    pub fn home_bytes(self, array: Array, g: &Geometry, chunks: (usize, usize, usize)) -> u64 {
        let layout = array.layout(g);
        self.home(array, g, chunks).len() as u64 * layout.plane_words as u64 * 4
    }

    /// Bytes of the member's share of `array`: what it reads and writes of it per access.
    pub fn share_bytes(self, array: Array, g: &Geometry) -> u64 {
        let layout = array.layout(g);
        self.planes(layout.planes) as u64 * layout.plane_words as u64 * 4
    }

    /// Bytes the member holds of `array`: its share, and of the spectrum a second share when
    /// there are several members, since each application of A or A* changes the spectrum's
    /// owner (an all-to-all from the blocks U1 writes to the rows U2 reads) and the received
    /// blocks need room beside the sent ones.
    pub fn held_bytes(self, array: Array, g: &Geometry) -> u64 {
        let share = self.share_bytes(array, g);
        if array == Array::Spectrum && self.members > 1 {
            2 * share
        } else {
            share
        }
    }

    /// Bytes of the member's rows of the U2 tables.
    pub fn u2_table_bytes(self, g: &Geometry) -> u64 {
        self.planes(g.deth) as u64 * (LaminoOperator::u2_table_bytes(g) / g.deth as u64)
    }

    /// Bytes of the member's rows of the U2 coordinates (one (x, y) pair of f32 per data point),
    /// the table a forward U2 chunk reads.
    pub fn u2_coordinates_bytes(self, g: &Geometry) -> u64 {
        8 * (self.planes(g.deth) * g.ntheta() * g.detw) as u64
    }

    /// Bytes of the member's rows of the largest U2 table, which must fit one buffer to stay on
    /// the device.
    pub fn u2_largest_table_bytes(self, g: &Geometry) -> u64 {
        self.planes(g.deth) as u64 * LaminoOperator::u2_largest_table_row_bytes(g)
    }

    /// Bytes of the member's angles of the spatial projections (held during setup).
    pub fn projection_bytes(self, g: &Geometry) -> u64 {
        4 * (self.planes(g.ntheta()) * g.deth * g.detw) as u64
    }
}
