//! Building an operator: checking the geometry against the gridding kernel, the spectrum, the
//! shared FFT workspace, then each stage's buffers, tables, kernels and chunks (U1 in `u1.rs`, U2
//! in `u2.rs`, the 2D FFT stage in `fft2d.rs`), with the helpers those builders share.

use super::block_copies::WORKGROUP;
use super::sizing::{f_chunk, fft_workspace, u1_chunk, u2_adjoint_gridding, u2_chunk};
use super::{Geometry, LaminoOperator, OperatorError, OperatorOptions, Space};
use crate::array::{Field, Residency, Scalars};
use crate::distributed::team::Share;
use crate::gpu::{GpuBuffer, GpuContext, KernelSpec};
use crate::shaders;

/// A storage buffer of `elems` complex values, refused by name when it exceeds the device's
/// largest buffer.
pub(super) fn complex_buffer(
    ctx: &GpuContext,
    label: &str,
    elems: usize,
) -> Result<GpuBuffer, OperatorError> {
    let bytes = elems as u64 * 8;
    if bytes > ctx.max_buffer_bytes() {
        return Err(OperatorError::TooLarge {
            what: label.to_string(),
            bytes,
            limit: ctx.max_buffer_bytes(),
        });
    }
    Ok(ctx.storage_buffer(label, bytes)?)
}

/// The binding layout shared by both gridding stages' kernels: three chunk-local arrays (read and
/// written), four read-only tables, the parameters (and for U2, its adjoint's records).
pub(super) fn gridding_kernel(shader: &'static shaders::Shader, entry: &'static str) -> KernelSpec {
    KernelSpec {
        shader,
        entry,
        overrides: vec![("WORKGROUP", WORKGROUP as f64)],
    }
}

impl LaminoOperator {
    /// Validates the geometry and builds everything: the spectrum, chunk buffers, host tables,
    /// kernels, FFT plans and the bind groups of every chunk's computation.
    pub fn new(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
    ) -> Result<Self, OperatorError> {
        Self::with_residency(
            ctx,
            geometry,
            options,
            &Residency::Device,
            &Residency::Device,
        )
    }

    /// As [`new`](Self::new), with the spectrum and the U2 tables where the residencies say (a
    /// memory plan's streaming mode keeps the tables, and may keep the spectrum, on the host or
    /// in scratch files; a chunk then receives its rows' slice of the tables before it computes,
    /// so the kernels read the same values and give the same bits).
    pub fn with_residency(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
        spectrum: &Residency,
        u2_tables: &Residency,
    ) -> Result<Self, OperatorError> {
        Self::build(ctx, geometry, options, (spectrum, u2_tables), None)
    }

    /// As [`with_residency`](Self::with_residency) for member `share` of a multi-device team
    /// (see [`into_member`](Self::into_member)): of U2, it builds the member's share of the
    /// chunks only and holds the tables of their detector rows only.
    pub(crate) fn for_member(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
        (spectrum, u2_tables): (&Residency, &Residency),
        share: &Share,
    ) -> Result<Self, OperatorError> {
        Self::build(ctx, geometry, options, (spectrum, u2_tables), Some(share))
    }

    fn build(
        ctx: &GpuContext,
        geometry: &Geometry,
        options: &OperatorOptions,
        (spectrum, u2_tables): (&Residency, &Residency),
        share: Option<&Share>,
    ) -> Result<Self, OperatorError> {
        geometry.validate()?;
        let g = geometry;
        for (name, value) in [("n0", g.n0), ("n1", g.n1), ("n2", g.n2)] {
            if let Some(min) = crate::geometry::gridding_minimum(value, g.eps) {
                return Err(OperatorError::TooSmall {
                    name,
                    value,
                    eps: g.eps,
                    min,
                });
            }
        }
        let spectrum = Field::new(
            ctx,
            "spectrum (deth, n1, n2)",
            Space::Spectrum.layout(g, 2),
            spectrum,
        )?;
        let chunk_rows = u2_chunk(ctx, g, options)?;
        let u2_count = g.deth.div_ceil(chunk_rows);
        let mut op = Self {
            geometry: g.clone(),
            spectrum,
            stages: Default::default(),
            ffts: Default::default(),
            chunk_y: u1_chunk(ctx, g, options)?,
            chunk_rows,
            chunk_angles: f_chunk(ctx, g, options)?,
            adjoint_gridding: u2_adjoint_gridding(ctx, g, options),
            fft_workspace: [0, 0],
            buffers: Vec::new(),
            own_scalars: Scalars::new(ctx, 1, 1)?,
            share: None,
            u2_chunks: share.map_or(0..u2_count, |s| s.range(u2_count)),
        };
        // Every FFT plan binds the same workspace buffers when the pool is sized for the largest
        // before the first plan is built.
        let chunks = (
            op.chunk_y as u64,
            op.chunk_rows as u64,
            op.chunk_angles as u64,
        );
        op.fft_workspace = fft_workspace(ctx, g, chunks);
        crate::fft::reserve_workspace(ctx, op.fft_workspace)?;
        op.build_u1(ctx)?;
        op.build_u2(ctx, u2_tables)?;
        op.build_f(ctx)?;
        Ok(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Tilt;

    /// Chunks far below the size at which a one-off FFT gets specialised kernels (2^16 elements)
    /// still get them: the operator runs its plans at every application.
    #[test]
    fn every_fft_pass_of_a_chunked_operator_is_specialised() {
        let ctx = crate::gpu::test_context();
        let g = Geometry::cube(16, 8, Tilt::from_phi(1.0));
        let options = OperatorOptions {
            max_chunk_y: Some(2),
            max_chunk_rows: Some(2),
            max_chunk_angles: Some(2),
            ..OperatorOptions::default()
        };
        let op = LaminoOperator::new(&ctx, &g, &options).unwrap();
        let passes: Vec<&crate::fft::PassInfo> = op.ffts.iter().flat_map(|p| p.passes()).collect();
        assert!(!passes.is_empty());
        assert!(
            passes.iter().all(|p| p.specialized),
            "{:?}",
            passes
                .iter()
                .map(|p| (p.sub, p.specialized))
                .collect::<Vec<_>>()
        );
    }
}

#[cfg(test)]
mod member_tests {
    use super::*;
    use crate::distributed::team::TeamSync;

    /// A team member's operator builds its share of U2's chunks and holds the tables of their
    /// detector rows only: the tables' part of its device bytes (resident tables against one
    /// chunk's slices of streamed ones) is the whole operator's less the other rows' tables.
    #[test]
    fn a_members_operator_holds_the_u2_tables_of_its_rows_only() {
        let ctx = crate::gpu::test_context();
        let g = Geometry::cube(16, 8, crate::geometry::Tilt::from_phi(1.0));
        let options = OperatorOptions {
            max_chunk_rows: Some(3),
            ..OperatorOptions::default()
        };
        let row = LaminoOperator::u2_table_bytes(&g) / g.deth as u64;
        // Device bytes with resident tables beyond those with streamed ones.
        let tables_part = |build: &dyn Fn(&Residency) -> LaminoOperator| {
            build(&Residency::Device).device_bytes() - build(&Residency::Host).device_bytes()
        };
        let whole = tables_part(&|tables| {
            LaminoOperator::with_residency(&ctx, &g, &options, &Residency::Device, tables).unwrap()
        });
        let sync = TeamSync::new(3);
        let mut rows = 0;
        for index in 0..3 {
            let share = Share::new(index, &sync);
            let build = |tables: &Residency| {
                LaminoOperator::for_member(&ctx, &g, &options, (&Residency::Device, tables), &share)
                    .unwrap()
            };
            // 16 rows in 6 chunks of 3: two chunks each.
            let member = build(&Residency::Device);
            assert_eq!(member.u2_chunks, 2 * index..2 * index + 2);
            assert_eq!(member.chunk_count(crate::operator::Stage::Usfft2d), 2);
            let held_rows = (6 * index + 6).min(g.deth) - 6 * index;
            rows += held_rows;
            assert_eq!(
                tables_part(&build),
                whole - (g.deth - held_rows) as u64 * row
            );
        }
        assert_eq!(rows, g.deth);
    }
}
