//! `|U1|` and `|U2|` by power iteration, for the certified policies' error bounds: estimated
//! once per geometry on the operator itself (through the staging buffers for a streaming plan)
//! and remembered in the norm cache ([`super::norm_cache`]).

use std::sync::Arc;

use num_complex::Complex32;

use super::norm_cache::{Lookup, NormCache, NormSource, OperatorNorms, CACHE_DIR_ENV};
use super::MemoError;
use crate::array::{Field, Residency, Scalars, Staging};
use crate::gpu::GpuContext;
use crate::operator::{Apply, LaminoOperator, Sink, Source, Space};
use crate::random::SplitMix64;

/// Power-iteration steps at most for `|F|`, and the relative change that ends it early.
const NORM_STEPS: usize = 30;
const NORM_TOLERANCE: f64 = 1e-3;
/// The power iteration approaches `|F|` from below; the bound uses the estimate times this.
const NORM_SAFETY: f64 = 1.05;

/// `|F|` of a stage pair by power iteration on `F* F` over whole arrays (each chunk's map is a
/// restriction of it, so its norm bounds every chunk's). With `staging` (an operator whose
/// arrays live on the host), the iterates stay in host memory and pass through the staging
/// buffers a chunk at a time, as the solver's do; otherwise they are on the device.
fn operator_norm(
    ctx: &GpuContext,
    op: &LaminoOperator,
    (forward, adjoint): (Apply, Apply),
    staging: Option<&Arc<Staging>>,
) -> Result<f64, MemoError> {
    let g = op.geometry();
    let (from, to) = forward.spaces();
    let residency = match staging {
        Some(_) => Residency::Host,
        None => Residency::Device,
    };
    let field = |label, space: Space| Field::new(ctx, label, space.layout(g, 2), &residency);
    let (x, image) = (field("norm iterate", from)?, field("norm image", to)?);
    let scalars = Scalars::new(ctx, 1, 1)?;
    let forward = op.application(
        ctx,
        &scalars,
        staging,
        forward,
        Source::Complex(&x),
        Sink::Complex(&image),
    )?;
    let adjoint = op.application(
        ctx,
        &scalars,
        staging,
        adjoint,
        Source::Complex(&image),
        Sink::Complex(&x),
    )?;
    let len = from.shape(g).iter().product::<usize>();
    let mut rng = SplitMix64::new(0x6e6f_726d);
    let mut v: Vec<Complex32> = (0..len)
        .map(|_| Complex32::new(rng.next_f64() as f32 - 0.5, rng.next_f64() as f32 - 0.5))
        .collect();
    let norm = |v: &[Complex32]| v.iter().map(|c| c.norm_sqr() as f64).sum::<f64>().sqrt();
    let mut lambda = 0.0;
    for _ in 0..NORM_STEPS {
        let n = norm(&v);
        v.iter_mut().for_each(|c| *c /= n as f32);
        x.write(ctx, bytemuck::cast_slice(&v))?;
        op.run(ctx, &forward)?;
        op.run(ctx, &adjoint)?;
        v = bytemuck::cast_slice(&x.read(ctx)?).to_vec();
        let next = norm(&v);
        let done = (next - lambda).abs() <= NORM_TOLERANCE * next;
        lambda = next;
        if done || next == 0.0 {
            break;
        }
    }
    Ok(lambda.sqrt() * NORM_SAFETY)
}

/// `|U1|` and `|U2|` of `op`'s geometry: from `cache` when it has them, else estimated and
/// stored. Also returns where they came from and the warnings of an unusable cache.
pub(super) fn operator_norms(
    ctx: &GpuContext,
    op: &LaminoOperator,
    cache: &NormCache,
    staging: Option<&Arc<Staging>>,
) -> Result<(OperatorNorms, NormSource, Vec<String>), MemoError> {
    let g = op.geometry();
    let mut warnings = Vec::new();
    match cache.get(g) {
        Lookup::Hit(norms) => {
            let path = cache.path(g).expect("a hit has a file");
            return Ok((norms, NormSource::Cache(path), warnings));
        }
        Lookup::Unusable(why) => warnings.push(format!(
            "ignored the operator-norm cache file {why}; estimating the norms again"
        )),
        Lookup::Miss => {}
    }
    let norms = OperatorNorms {
        u1: operator_norm(ctx, op, (Apply::Usfft1d, Apply::Usfft1dAdjoint), staging)?,
        u2: operator_norm(ctx, op, (Apply::Usfft2d, Apply::Usfft2dAdjoint), staging)?,
    };
    if let Err(why) = cache.put(g, norms) {
        warnings.push(format!(
            "could not store the operator norms ({why}): the next run estimates them again; set {CACHE_DIR_ENV} to a writable directory to keep them"
        ));
    }
    Ok((norms, NormSource::Estimated, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Geometry;
    use crate::geometry::Tilt;
    use crate::operator::OperatorOptions;

    use crate::gpu::test_context as ctx;

    /// The norm estimate of a streaming operator (iterates in host memory, through staging
    /// buffers) is the device estimate's, bit for bit.
    #[test]
    fn the_norm_estimate_through_host_arrays_is_the_device_estimate() {
        let ctx = ctx();
        let g = Geometry::cube(16, 8, Tilt::from_phi(2.0));
        let options = OperatorOptions {
            max_chunk_y: Some(4),
            max_chunk_rows: Some(4),
            ..OperatorOptions::default()
        };
        let op = LaminoOperator::new(&ctx, &g, &options).unwrap();
        let staging = Arc::new(Staging::new(&ctx, Space::Data.layout(&g, 2).words()).unwrap());
        for pair in [
            (Apply::Usfft1d, Apply::Usfft1dAdjoint),
            (Apply::Usfft2d, Apply::Usfft2dAdjoint),
        ] {
            let device = operator_norm(&ctx, &op, pair, None).unwrap();
            let host = operator_norm(&ctx, &op, pair, Some(&staging)).unwrap();
            assert!(device > 0.0, "{pair:?}: {device}");
            assert_eq!(
                device.to_bits(),
                host.to_bits(),
                "{pair:?}: {device} {host}"
            );
        }
    }
}
