//! Bound vector kernels of the solver: each call site owns its uniform (and, for reductions, its
//! partial-sum buffer), created once, so a step of the solver only writes a few scalars and records
//! dispatches.

use bytemuck::{Pod, Zeroable};

use crate::error::GpuError;
use crate::gpu::{BindingKind, Bound, BufferSlice, GpuBuffer, GpuContext, KernelSpec, Recorder};
use crate::shaders;

const WORKGROUP: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Default)]
struct VectorParams {
    count: u32,
    first: u32,
    n0: u32,
    n1: u32,
    n2: u32,
    ox: u32,
    oy: u32,
    oz: u32,
    a: f32,
    b: f32,
    c: f32,
    pad: u32,
}

/// The vector kernels' entry points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// z = a x + b y + c z
    Axpby,
    /// complex z = (a x, 0)
    ToComplex,
    /// z = a Re(x) + c z
    RealPart,
    /// z = grad x (interleaved 3-vectors)
    Gradient,
    /// z = a grad*(x) + c z
    GradientAdjoint,
    /// z = shrink_a(x + b y)
    Shrink,
    /// partial sums of x y
    Dot,
    /// partial sums of |x| (3-vectors)
    IsoNorm,
}

impl Kernel {
    fn entry(self) -> &'static str {
        match self {
            Self::Axpby => "axpby",
            Self::ToComplex => "to_complex",
            Self::RealPart => "real_part",
            Self::Gradient => "gradient",
            Self::GradientAdjoint => "gradient_adjoint",
            Self::Shrink => "shrink",
            Self::Dot => "dot",
            Self::IsoNorm => "iso_norm",
        }
    }

    /// f32 elements per unit of `count` in (x, y, z).
    fn elems(self) -> [u64; 3] {
        match self {
            Self::Axpby | Self::Dot => [1, 1, 1],
            Self::ToComplex => [1, 1, 2],
            Self::RealPart => [2, 2, 1],
            Self::Gradient => [1, 1, 3],
            Self::GradientAdjoint => [3, 3, 1],
            Self::Shrink => [3, 3, 3],
            Self::IsoNorm => [3, 3, 1],
        }
    }
}

/// The aligned window of `buf` (`e` f32 per unit) holding units `[first - before, first + n +
/// after)`, and the position of unit `first` in it.
fn window(
    buf: &GpuBuffer,
    e: u64,
    [first, n, before, after]: [u64; 4],
    align: u64,
) -> (BufferSlice<'_>, u32) {
    let len = buf.bytes() / 4;
    let lo = (e * first).saturating_sub(e * before) / align * align;
    let hi = (e * (first + n + after)).min(len);
    (
        BufferSlice {
            buffer: buf,
            offset: lo * 4,
            size: (hi - lo) * 4,
        },
        (e * first - lo) as u32,
    )
}

struct Window {
    bound: Bound,
    params: GpuBuffer,
    base: VectorParams,
    groups: u32,
}

/// One call site: a kernel bound to its buffers, split into windows that each fit one storage
/// binding, with its own parameters.
pub(crate) struct VectorOp {
    windows: Vec<Window>,
    partials: Option<(GpuBuffer, usize)>,
}

impl VectorOp {
    /// Binds `kernel` to x, y (read) and z (written) for `count` units (scalars, or voxels for the
    /// volume kernels) of a volume of `shape`. Reductions write partial sums to a buffer of their own.
    pub fn new(
        ctx: &GpuContext,
        kernel: Kernel,
        x: &GpuBuffer,
        y: &GpuBuffer,
        z: Option<&GpuBuffer>,
        count: usize,
        shape: [usize; 3],
    ) -> Result<Self, GpuError> {
        let k = ctx.kernel(&KernelSpec {
            shader: &shaders::SOLVER_VECTOR,
            entry: kernel.entry(),
            bindings: &[
                BindingKind::StorageRead,
                BindingKind::StorageRead,
                BindingKind::StorageReadWrite,
                BindingKind::Uniform,
            ],
            overrides: vec![("WORKGROUP", WORKGROUP as f64)],
        })?;
        let elems = kernel.elems();
        // The gradient reads one z plane beyond its voxels, its adjoint one plane before.
        let plane = (shape[1] * shape[2]) as u64;
        let (before, after) = match kernel {
            Kernel::Gradient => (0, plane),
            Kernel::GradientAdjoint => (plane, 0),
            _ => (0, 0),
        };
        let limit = ctx.max_binding_bytes() / 4;
        let align = (ctx.binding_alignment() / 4).max(1);
        // Units per window: the largest multiple of the workgroup size whose windows (with halo
        // and alignment slack) fit every binding.
        let widest = *elems.iter().max().expect("three bindings");
        let room = limit.saturating_sub(align + widest * (before + after));
        let per = (room / widest / WORKGROUP as u64 * WORKGROUP as u64)
            .min(count as u64)
            .max(1);
        if per * widest + widest * (before + after) + align > limit {
            return Err(GpuError::KernelLimit {
                kernel: kernel.entry().to_string(),
                what: "storage binding bytes for one window",
                requested: (per * widest + widest * (before + after) + align) * 4,
                limit: limit * 4,
            });
        }
        let total_groups = (count as u64).div_ceil(WORKGROUP as u64) as usize;
        let partials = match kernel {
            Kernel::Dot | Kernel::IsoNorm => Some((
                ctx.storage_buffer("partial sums", total_groups as u64 * 4)?,
                total_groups,
            )),
            _ => None,
        };
        let mut windows = Vec::new();
        let mut first = 0u64;
        while first < count as u64 {
            let n = per.min(count as u64 - first);
            // Window of one array: elements [e (first - before), e (first + n + after)), clamped
            // to the array, started at an aligned element.
            let window = |buf, e| window(buf, e, [first, n, before, after], align);
            let (sx, ox) = window(x, elems[0]);
            let (sy, oy) = window(y, elems[1]);
            let (sz, oz) = match &partials {
                Some((buf, _)) => (BufferSlice::whole(buf), (first / WORKGROUP as u64) as u32),
                None => window(z.expect("a vector op writes somewhere"), elems[2]),
            };
            let base = VectorParams {
                count: n as u32,
                first: first as u32,
                n0: shape[0] as u32,
                n1: shape[1] as u32,
                n2: shape[2] as u32,
                ox,
                oy,
                oz,
                ..Default::default()
            };
            let params = ctx.uniform("vector params", &base)?;
            let bound = k.bind(ctx, &[sx, sy, sz, (&params).into()])?;
            let groups = n.div_ceil(WORKGROUP as u64) as u32;
            windows.push(Window {
                bound,
                params,
                base,
                groups,
            });
            first += n;
        }
        Ok(Self { windows, partials })
    }

    /// Sets the coefficients and records the dispatches. Each op is recorded at most once per
    /// submission (its uniforms hold one set of coefficients).
    pub fn record(&self, ctx: &GpuContext, rec: &mut Recorder, a: f32, b: f32, c: f32) {
        for w in &self.windows {
            ctx.write(&w.params, 0, &[VectorParams { a, b, c, ..w.base }]);
            rec.dispatch(&w.bound, w.groups);
        }
    }

    /// The reduction's result after the submission that recorded it: partial sums added in f64.
    pub fn sum(&self, ctx: &GpuContext) -> Result<f64, GpuError> {
        let (buf, groups) = self.partials.as_ref().expect("sum() of a reduction");
        let parts: Vec<f32> = ctx.read(buf, 0, *groups)?;
        Ok(parts.iter().map(|&v| v as f64).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::SplitMix64;

    use crate::gpu::test_context as ctx;

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        (0..len).map(|_| rng.next_f64() as f32 - 0.5).collect()
    }

    /// Forward differences / sqrt(3) in f64, interleaved (x, y, z) per voxel.
    fn gradient_f64(u: &[f32], [n0, n1, n2]: [usize; 3]) -> Vec<f64> {
        let mut g = vec![0.0; 3 * n0 * n1 * n2];
        let s = 1.0 / 3f64.sqrt();
        for z in 0..n0 {
            for y in 0..n1 {
                for x in 0..n2 {
                    let i = (z * n1 + y) * n2 + x;
                    if x + 1 < n2 {
                        g[3 * i] = (u[i + 1] as f64 - u[i] as f64) * s;
                    }
                    if y + 1 < n1 {
                        g[3 * i + 1] = (u[i + n2] as f64 - u[i] as f64) * s;
                    }
                    if z + 1 < n0 {
                        g[3 * i + 2] = (u[i + n1 * n2] as f64 - u[i] as f64) * s;
                    }
                }
            }
        }
        g
    }

    fn run(ctx: &GpuContext, op: &VectorOp, a: f32, b: f32, c: f32) {
        let mut rec = ctx.recorder("test");
        op.record(ctx, &mut rec, a, b, c);
        ctx.submit(rec).unwrap();
    }

    #[test]
    fn gradient_matches_f64_and_its_adjoint_is_exact_for_every_field() {
        let ctx = ctx();
        let shape = [5, 6, 7];
        let v = 210;
        let u = random(v, 1);
        let q = random(3 * v, 2);
        let (ub, qb) = (ctx.upload("u", &u).unwrap(), ctx.upload("q", &q).unwrap());
        let (gb, db) = (
            ctx.storage_buffer("g", 12 * v as u64).unwrap(),
            ctx.storage_buffer("d", 4 * v as u64).unwrap(),
        );
        run(
            &ctx,
            &VectorOp::new(&ctx, Kernel::Gradient, &ub, &ub, Some(&gb), v, shape).unwrap(),
            0.0,
            0.0,
            0.0,
        );
        run(
            &ctx,
            &VectorOp::new(&ctx, Kernel::GradientAdjoint, &qb, &qb, Some(&db), v, shape).unwrap(),
            1.0,
            0.0,
            0.0,
        );
        let g: Vec<f32> = ctx.read(&gb, 0, 3 * v).unwrap();
        let d: Vec<f32> = ctx.read(&db, 0, v).unwrap();
        let reference = gradient_f64(&u, shape);
        let err = g
            .iter()
            .zip(&reference)
            .map(|(a, b)| (*a as f64 - b).abs())
            .fold(0.0, f64::max);
        assert!(err < 1e-6, "gradient error {err:e}");
        // <grad u, q> = <u, grad* q> for arbitrary q (q need not vanish at the last index).
        let lhs: f64 = reference.iter().zip(&q).map(|(a, b)| a * *b as f64).sum();
        let rhs: f64 = u.iter().zip(&d).map(|(a, b)| *a as f64 * *b as f64).sum();
        assert!(
            (lhs - rhs).abs() < 1e-5 * lhs.abs().max(1.0),
            "{lhs} vs {rhs}"
        );
    }

    #[test]
    fn shrinkage_zeroes_small_vectors_and_shortens_large_ones() {
        let ctx = ctx();
        // Voxel 0: |v| = 0.5 <= tau = 1 -> 0. Voxel 1: |v| = 5 (3, 4, 0) -> (1 - 1/5) v.
        // Voxel 2: exactly tau -> 0.
        let x = [0.3f32, 0.4, 0.0, 3.0, 4.0, 0.0, 1.0, 0.0, 0.0];
        let y = [0.0f32; 9];
        let (xb, yb) = (ctx.upload("x", &x).unwrap(), ctx.upload("y", &y).unwrap());
        let zb = ctx.storage_buffer("z", 36).unwrap();
        run(
            &ctx,
            &VectorOp::new(&ctx, Kernel::Shrink, &xb, &yb, Some(&zb), 3, [1, 1, 3]).unwrap(),
            1.0,
            1.0,
            0.0,
        );
        let z: Vec<f32> = ctx.read(&zb, 0, 9).unwrap();
        assert_eq!([z[0], z[1], z[2]], [0.0; 3]);
        assert!(
            (z[3] - 2.4).abs() < 1e-6 && (z[4] - 3.2).abs() < 1e-6 && z[5] == 0.0,
            "{z:?}"
        );
        assert_eq!([z[6], z[7], z[8]], [0.0; 3]);
    }

    #[test]
    fn reductions_match_f64_sums_and_repeat_bit_for_bit() {
        let ctx = ctx();
        let n = 3 * 1000 + 17;
        let x = random(n, 3);
        let y = random(n, 4);
        let (xb, yb) = (ctx.upload("x", &x).unwrap(), ctx.upload("y", &y).unwrap());
        let dot = VectorOp::new(&ctx, Kernel::Dot, &xb, &yb, None, n, [1, 1, n]).unwrap();
        let iso =
            VectorOp::new(&ctx, Kernel::IsoNorm, &xb, &xb, None, n / 3, [1, 1, n / 3]).unwrap();
        run(&ctx, &dot, 0.0, 0.0, 0.0);
        run(&ctx, &iso, 0.0, 0.0, 0.0);
        let expect: f64 = x.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
        let v = n / 3;
        let expect_iso: f64 = (0..v)
            .map(|i| {
                ((x[3 * i] as f64).powi(2)
                    + (x[3 * i + 1] as f64).powi(2)
                    + (x[3 * i + 2] as f64).powi(2))
                .sqrt()
            })
            .sum();
        let (got, got_iso) = (dot.sum(&ctx).unwrap(), iso.sum(&ctx).unwrap());
        assert!(
            (got - expect).abs() < 1e-5 * expect.abs().max(1.0),
            "{got} vs {expect}"
        );
        assert!(
            (got_iso - expect_iso).abs() < 1e-5 * expect_iso,
            "{got_iso} vs {expect_iso}"
        );
        run(&ctx, &dot, 0.0, 0.0, 0.0);
        assert_eq!(dot.sum(&ctx).unwrap().to_bits(), got.to_bits());
    }

    #[test]
    fn two_dimensional_dispatches_give_the_same_bits_and_stay_inside_their_windows() {
        // 7 workgroups per dimension: the 100 workgroups of a reduction become 7 x 15 = 105.
        let n = 100 * WORKGROUP as usize - 3;
        let x = random(n, 7);
        let results = |ctx: &GpuContext| {
            let xb = ctx.upload("x", &x).unwrap();
            let yb = ctx.storage_buffer("y", 4 * n as u64).unwrap();
            let dot = VectorOp::new(ctx, Kernel::Dot, &xb, &xb, None, n, [1, 1, n]).unwrap();
            let scaled =
                VectorOp::new(ctx, Kernel::Axpby, &xb, &xb, Some(&yb), n, [1, 1, n]).unwrap();
            run(ctx, &dot, 0.0, 0.0, 0.0);
            run(ctx, &scaled, 0.5, 0.25, 0.0);
            let y: Vec<u32> = ctx.read(&yb, 0, n).unwrap();
            (dot.sum(ctx).unwrap().to_bits(), y)
        };
        let folded_ctx = ctx().with_max_workgroups_per_dimension(7);
        assert!(results(&ctx()) == results(&folded_ctx));

        // The surplus workgroups of the folded dispatch must not write: bind the partial sums
        // to a larger buffer filled with a sentinel and check its tail.
        let ctx = folded_ctx;
        let kernel = ctx
            .kernel(&KernelSpec {
                shader: &shaders::SOLVER_VECTOR,
                entry: Kernel::Dot.entry(),
                bindings: &[
                    BindingKind::StorageRead,
                    BindingKind::StorageRead,
                    BindingKind::StorageReadWrite,
                    BindingKind::Uniform,
                ],
                overrides: vec![("WORKGROUP", WORKGROUP as f64)],
            })
            .unwrap();
        let xb = ctx.upload("x", &x).unwrap();
        let partials = ctx.upload("partials", &[7.0f32; 112]).unwrap();
        let params = ctx
            .uniform(
                "params",
                &VectorParams {
                    count: n as u32,
                    n0: 1,
                    n1: 1,
                    n2: n as u32,
                    ..Default::default()
                },
            )
            .unwrap();
        let bound = kernel
            .bind(
                &ctx,
                &[
                    (&xb).into(),
                    (&xb).into(),
                    (&partials).into(),
                    (&params).into(),
                ],
            )
            .unwrap();
        let mut rec = ctx.recorder("folded dot");
        rec.dispatch(&bound, 100);
        ctx.submit(rec).unwrap();
        let tail: Vec<f32> = ctx.read(&partials, 100, 12).unwrap();
        assert_eq!(
            tail,
            vec![7.0; 12],
            "surplus workgroups wrote past the partial sums"
        );
    }

    #[test]
    fn arrays_beyond_one_binding_are_processed_in_windows_with_the_same_bits() {
        let shape = [9, 10, 11];
        let v = 990;
        let u = random(v, 5);
        let q = random(3 * v, 6);
        let results = |ctx: &GpuContext| {
            let (ub, qb) = (ctx.upload("u", &u).unwrap(), ctx.upload("q", &q).unwrap());
            let gb = ctx.storage_buffer("g", 12 * v as u64).unwrap();
            let db = ctx.upload("d", &u).unwrap();
            let grad = VectorOp::new(ctx, Kernel::Gradient, &ub, &ub, Some(&gb), v, shape).unwrap();
            let adj =
                VectorOp::new(ctx, Kernel::GradientAdjoint, &qb, &qb, Some(&db), v, shape).unwrap();
            let dot = VectorOp::new(ctx, Kernel::Dot, &qb, &qb, None, 3 * v, shape).unwrap();
            let windows = grad.windows.len() + adj.windows.len() + dot.windows.len();
            run(ctx, &grad, 0.0, 0.0, 0.0);
            run(ctx, &adj, 0.5, 0.0, 2.0);
            run(ctx, &dot, 0.0, 0.0, 0.0);
            let g: Vec<u32> = ctx.read(&gb, 0, 3 * v).unwrap();
            let d: Vec<u32> = ctx.read(&db, 0, v).unwrap();
            (g, d, dot.sum(ctx).unwrap().to_bits(), windows)
        };
        let whole = results(&ctx());
        // 2 KiB bindings: 512 floats, against 990 voxels (3960 bytes of u, 11880 of q).
        let split = results(&ctx().with_max_binding_bytes(2048));
        assert_eq!(whole.3, 3, "one window each without a cap");
        assert!(
            split.3 > 6,
            "the cap must split every array: {} windows",
            split.3
        );
        assert!(whole.0 == split.0 && whole.1 == split.1 && whole.2 == split.2);
    }
}
