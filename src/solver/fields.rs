//! The solver's arrays: [`Fields`], the iterates and work arrays of one reconstruction wherever
//! the memory plan puts them, and [`TeamArrays`], the ones the members of a multi-device team
//! share.

use super::error::SolverError;
use super::projections::projections_layout;
use crate::array::{Field, PlaneLayout, Residency, StorageError};
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::plan::{Array, MemoryPlan, Portion};

/// The arrays of the solver. Persistent across outer iterations: u, psi, lambda, grad u, A u, and
/// with a carried residual `r_saved` (a checkpoint holds them), and the data D; the rest is
/// rebuilt every outer iteration.
#[derive(Clone)]
pub(crate) struct Fields {
    pub(super) u: Field,
    pub(super) u_prev: Field,
    pub(super) psi: Field,
    pub(super) lambda: Field,
    pub(super) grad_u: Field,
    pub(super) h0: Field,
    pub(super) r: Field,
    pub(super) p: Field,
    pub(super) grad_p: Field,
    /// A second residual the inner solver keeps: Dai-Yuan's previous one; CG's data part
    /// `(1/N) Re A*(D - A u)` when it carries it across outer iterations.
    pub(super) r_saved: Field,
    pub(super) dhat: Field,
    pub(super) au: Field,
    pub(super) ap: Field,
}

impl Fields {
    /// Every array where `plan` puts it, made by `field` (label, layout, residency, the planes
    /// a team's homes of it are made of whole chunks of: [`Array::home_chunk`]).
    pub(super) fn new(
        g: &Geometry,
        plan: &MemoryPlan,
        field: impl Fn(&str, PlaneLayout, &Residency, usize) -> Result<Field, StorageError>,
    ) -> Result<Self, StorageError> {
        let array = |array: Array, label: &str| {
            field(
                label,
                array.layout(g),
                plan.residency(array),
                array.home_chunk(plan.chunks),
            )
        };
        Ok(Self {
            u: array(Array::U, "u")?,
            u_prev: array(Array::UPrev, "u previous")?,
            psi: array(Array::Psi, "psi")?,
            lambda: array(Array::Lambda, "lambda")?,
            grad_u: array(Array::GradU, "grad u")?,
            h0: array(Array::GradUPrev, "grad u previous")?,
            r: array(Array::R, "r")?,
            p: array(Array::P, "p")?,
            grad_p: array(Array::GradP, "grad p")?,
            r_saved: array(Array::RSaved, "r saved")?,
            dhat: array(Array::DHat, "D hat")?,
            au: array(Array::Au, "A u")?,
            ap: array(Array::Ap, "A p")?,
        })
    }
}

impl Fields {
    /// Every array with what the planner calls it.
    pub(super) fn planned(&self) -> [(Array, &Field); 13] {
        [
            (Array::U, &self.u),
            (Array::UPrev, &self.u_prev),
            (Array::Psi, &self.psi),
            (Array::Lambda, &self.lambda),
            (Array::GradU, &self.grad_u),
            (Array::GradUPrev, &self.h0),
            (Array::R, &self.r),
            (Array::P, &self.p),
            (Array::GradP, &self.grad_p),
            (Array::RSaved, &self.r_saved),
            (Array::DHat, &self.dhat),
            (Array::Au, &self.au),
            (Array::Ap, &self.ap),
        ]
    }
}

/// The arrays the members of a multi-device team share, all in host memory (or scratch); a
/// member whose plan is in-core keeps its planes of them on its device
/// ([`keep_on_device`](TeamArrays::keep_on_device)).
pub(crate) struct TeamArrays {
    pub(super) fields: Fields,
    pub(super) spectrum: Field,
    pub(super) spatial: Field,
}

impl TeamArrays {
    /// The arrays of `plan`, which holds none on the device, made by `field` (label, layout,
    /// residency, the planes their homes are made of whole chunks of).
    fn with(
        g: &Geometry,
        plan: &MemoryPlan,
        field: impl Fn(&str, PlaneLayout, &Residency, usize) -> Result<Field, StorageError>,
    ) -> Result<Self, SolverError> {
        Ok(Self {
            fields: Fields::new(g, plan, &field)?,
            spectrum: field(
                "spectrum (deth, n1, n2)",
                Array::Spectrum.layout(g),
                plan.residency(Array::Spectrum),
                Array::Spectrum.home_chunk(plan.chunks),
            )?,
            spatial: field(
                "projections",
                projections_layout(g),
                &plan.projections_residency(g),
                1,
            )?,
        })
    }

    /// The arrays the members share through the iterations, each with what the planner calls
    /// it (every one but the spatial projections, which only the setup reads).
    fn planned(&self) -> Vec<(Array, &Field)> {
        let mut all = self.fields.planned().to_vec();
        all.push((Array::Spectrum, &self.spectrum));
        all
    }

    /// The arrays whose planes members may keep on their devices.
    pub fn homed(&self) -> Vec<Field> {
        self.planned().into_iter().map(|(_, f)| f.clone()).collect()
    }

    /// Keeps member `portion`'s homes of every array ([`Portion::home`], with the chunks of
    /// `plan`) on `ctx`'s device for the whole run: the member's plan is in-core.
    pub fn keep_on_device(
        &self,
        ctx: &GpuContext,
        g: &Geometry,
        plan: &MemoryPlan,
        portion: Portion,
    ) -> Result<(), SolverError> {
        for (array, field) in self.planned() {
            field.keep_on_device(ctx, portion.home(array, g, plan.chunks))?;
        }
        Ok(())
    }

    /// The arrays of a team of threads, shared.
    pub fn new(ctx: &GpuContext, g: &Geometry, plan: &MemoryPlan) -> Result<Self, SolverError> {
        Self::with(g, plan, |label, layout, residency, chunk| {
            Field::with_home(ctx, label, layout, residency, (None, chunk))
        })
    }

    /// This MPI rank's arrays: its home planes of each (registered with `ranks` for the
    /// exchanges, in the same order on every rank). The homes of the spectrum and the data side
    /// are the detector rows of the rank's share of U2's chunks, which U2 and U2* then read and
    /// write at home; the volume side's the y rows of its share of U1's chunks, which U1 and U1*
    /// read and write at home. The vector passes run over the homes.
    pub fn of_processes(
        ctx: &GpuContext,
        g: &Geometry,
        plan: &MemoryPlan,
        ranks: &dyn crate::distributed::Collective,
    ) -> Result<Self, SolverError> {
        Self::with(g, plan, |label, layout, residency, chunk| {
            let homes = ranks.chunk_homes(layout.planes, chunk);
            let home = Some(homes[ranks.rank()].clone());
            let field = Field::with_home(ctx, label, layout, residency, (home, chunk))?;
            ranks.register(&field, homes);
            Ok(field)
        })
    }
}
