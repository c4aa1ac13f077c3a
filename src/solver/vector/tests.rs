//! Tests of the vector kernels against f64 references on the host: the gradient and its
//! adjoint, shrinkage, reductions across windows and host arrays streamed through staging.

use super::*;
use crate::array::{PlaneLayout, Slot};
use crate::random::SplitMix64;

use crate::gpu::test_context as ctx;

fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..len).map(|_| rng.next_f64() as f32 - 0.5).collect()
}

fn field(ctx: &GpuContext, values: &[f32], planes: usize) -> Field {
    let f = Field::zeros(
        ctx,
        "test field",
        PlaneLayout {
            planes,
            plane_words: values.len() / planes,
            axes_swapped: false,
        },
    )
    .unwrap();
    f.write(ctx, values).unwrap();
    f
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

fn run(ctx: &GpuContext, op: &VectorOp) {
    let mut rec = ctx.recorder("test");
    op.record(ctx, &mut rec).unwrap();
    ctx.submit_and_wait(rec).unwrap();
}

fn sum(ctx: &GpuContext, scalars: &Scalars, slot: SumSlot) -> f64 {
    scalars.read_sums(ctx).unwrap()[slot.0 as usize]
}

#[test]
fn gradient_matches_f64_and_its_adjoint_is_exact_for_every_field() {
    let ctx = ctx();
    let scalars = Scalars::new(&ctx, 1, 1).unwrap();
    let shape = [5, 6, 7];
    let v = 210;
    let u = random(v, 1);
    let q = random(3 * v, 2);
    let (ub, qb) = (field(&ctx, &u, 5), field(&ctx, &q, 5));
    let layout = |w: usize| PlaneLayout {
        planes: 5,
        plane_words: w * 42,
        axes_swapped: false,
    };
    let gb = Field::zeros(&ctx, "g", layout(3)).unwrap();
    let db = Field::zeros(&ctx, "d", layout(1)).unwrap();
    let one = [Coef::ONE, Coef::ZERO, Coef::ZERO, Coef::ZERO];
    let grad = VectorOp::new(
        &ctx,
        &scalars,
        None,
        None,
        Kernel::Gradient,
        [Some(&ub), None, None, None],
        Target::Field(&gb),
        one,
        shape,
    )
    .unwrap();
    let adj = VectorOp::new(
        &ctx,
        &scalars,
        None,
        None,
        Kernel::GradientAdjoint,
        [Some(&qb), None, None, None],
        Target::Field(&db),
        one,
        shape,
    )
    .unwrap();
    run(&ctx, &grad);
    run(&ctx, &adj);
    let g = gb.read(&ctx).unwrap();
    let d = db.read(&ctx).unwrap();
    let reference = gradient_f64(&u, shape);
    let err = g
        .iter()
        .zip(&reference)
        .map(|(a, b)| (*a as f64 - b).abs())
        .fold(
            0.0,
            |m: f64, e| if e.is_nan() { f64::NAN } else { m.max(e) },
        );
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
fn combined_adjoint_input_and_gpu_coefficients() {
    // z = a grad*(x + b y + c w) + d z with a, b from coefficient slots.
    let ctx = ctx();
    let scalars = Scalars::new(&ctx, 3, 1).unwrap();
    scalars.set(&ctx, Slot(1), 0.5);
    scalars.set(&ctx, Slot(2), -2.0);
    let shape = [4, 3, 5];
    let v = 60;
    let (x, y, w, z0) = (
        random(3 * v, 3),
        random(3 * v, 4),
        random(3 * v, 5),
        random(v, 6),
    );
    let fields = [&x, &y, &w].map(|a| field(&ctx, a, 4));
    let zb = field(&ctx, &z0, 4);
    let op = VectorOp::new(
        &ctx,
        &scalars,
        None,
        None,
        Kernel::GradientAdjoint,
        [Some(&fields[0]), Some(&fields[1]), Some(&fields[2]), None],
        Target::Field(&zb),
        [
            Coef::times(3.0, Slot(1)),
            Coef::times(1.0, Slot(2)),
            Coef::fixed(0.25),
            Coef::fixed(1.0),
        ],
        shape,
    )
    .unwrap();
    run(&ctx, &op);
    let got = zb.read(&ctx).unwrap();
    // Reference: grad* q = -div q, via <grad e_i, q>.
    let q: Vec<f32> = (0..3 * v)
        .map(|i| x[i] - 2.0 * y[i] + 0.25 * w[i])
        .collect();
    for i in 0..v {
        let mut e = vec![0.0f32; v];
        e[i] = 1.0;
        let ge = gradient_f64(&e, shape);
        let adj: f64 = ge.iter().zip(&q).map(|(a, b)| a * *b as f64).sum();
        let expect = 1.5 * adj + z0[i] as f64;
        assert!(
            (got[i] as f64 - expect).abs() <= 1e-5,
            "voxel {i}: {} vs {expect}",
            got[i]
        );
    }
}

#[test]
fn shrinkage_zeroes_small_vectors_and_shortens_large_ones() {
    let ctx = ctx();
    let scalars = Scalars::new(&ctx, 1, 1).unwrap();
    // Voxel 0: |v| = 0.5 <= tau = 1 -> 0. Voxel 1: |v| = 5 (3, 4, 0) -> (1 - 1/5) v.
    // Voxel 2: exactly tau -> 0.
    let x = [0.3f32, 0.4, 0.0, 3.0, 4.0, 0.0, 1.0, 0.0, 0.0];
    let y = [0.0f32; 9];
    let (xb, yb) = (field(&ctx, &x, 1), field(&ctx, &y, 1));
    let zb = Field::zeros(&ctx, "z", xb.layout()).unwrap();
    run(
        &ctx,
        &VectorOp::new(
            &ctx,
            &scalars,
            None,
            None,
            Kernel::Shrink,
            [Some(&xb), Some(&yb), None, None],
            Target::Field(&zb),
            [Coef::ONE, Coef::ONE, Coef::ZERO, Coef::ZERO],
            [1, 1, 3],
        )
        .unwrap(),
    );
    let z = zb.read(&ctx).unwrap();
    assert_eq!([z[0], z[1], z[2]], [0.0; 3]);
    assert!(
        (z[3] - 2.4).abs() < 1e-6 && (z[4] - 3.2).abs() < 1e-6 && z[5] == 0.0,
        "{z:?}"
    );
    assert_eq!([z[6], z[7], z[8]], [0.0; 3]);
}

#[test]
fn reductions_match_f64_sums_and_do_not_depend_on_windows() {
    // Planes of whole vec4s (the vec4 module's dot) and not (the f32 module's).
    for plane in [3 * 1006, 3 * 1008] {
        reductions_at(plane);
    }
}

fn reductions_at(plane: usize) {
    let n0 = 7;
    let n = n0 * plane;
    let x = random(n, 3);
    let y = random(n, 4);
    let expect: f64 = x
        .iter()
        .zip(&y)
        .map(|(a, b)| (*a as f64 + 0.5 * *b as f64) * *b as f64)
        .sum();
    let v = n / 3;
    let expect_iso: f64 = (0..v)
        .map(|i| {
            ((x[3 * i] as f64).powi(2)
                + (x[3 * i + 1] as f64).powi(2)
                + (x[3 * i + 2] as f64).powi(2))
            .sqrt()
        })
        .sum();
    let results = |ctx: &GpuContext| {
        let scalars = Scalars::new(ctx, 1, 2).unwrap();
        let (xb, yb) = (field(ctx, &x, n0), field(ctx, &y, n0));
        let dot = VectorOp::new(
            ctx,
            &scalars,
            None,
            None,
            Kernel::Dot,
            [Some(&xb), Some(&yb), Some(&yb), None],
            Target::Sum(SumSlot(0)),
            [Coef::ZERO, Coef::fixed(0.5), Coef::ZERO, Coef::ZERO],
            [n0, 1, plane],
        )
        .unwrap();
        let iso = VectorOp::new(
            ctx,
            &scalars,
            None,
            None,
            Kernel::IsoNorm,
            [Some(&xb), None, None, None],
            Target::Sum(SumSlot(1)),
            [Coef::ZERO; 4],
            [n0, 1, plane / 3],
        )
        .unwrap();
        let windows = dot.dispatches.len();
        run(ctx, &dot);
        run(ctx, &iso);
        let sums = scalars.read_sums(ctx).unwrap();
        (sums[0], sums[1], windows)
    };
    let whole = results(&ctx());
    // 16 KiB bindings: one plane (12 KiB) per window.
    let split = results(&ctx().with_max_binding_bytes(16384));
    assert!(
        split.2 > whole.2,
        "the cap must split the planes into windows"
    );
    assert!(
        (whole.0 - expect).abs() < 1e-6 * expect.abs().max(1.0),
        "plane {plane}: {} vs {expect}",
        whole.0
    );
    assert!(
        (whole.1 - expect_iso).abs() < 1e-6 * expect_iso,
        "{} vs {expect_iso}",
        whole.1
    );
    assert_eq!(whole.0.to_bits(), split.0.to_bits(), "plane {plane}");
    assert_eq!(whole.1.to_bits(), split.1.to_bits(), "plane {plane}");
}

#[test]
fn words_are_vec4_where_every_plane_and_the_binding_alignment_are_whole_vec4s() {
    assert_eq!(Kernel::Lincomb.word_len([1024, 4096], 64), 4);
    assert_eq!(Kernel::Dot.word_len([1024], 64), 4);
    assert_eq!(Kernel::Lincomb.word_len([1024, 1022], 64), 1);
    assert_eq!(Kernel::Dot.word_len([1024], 2), 1);
    assert_eq!(Kernel::Gradient.word_len([1024], 64), 1);
    assert_eq!(Kernel::IsoNorm.word_len([3072], 64), 1);
}

#[test]
fn linear_combinations_and_dots_match_f64_and_never_read_unused_terms() {
    // Both modules (planes of 1024 words: vec4; of 1022: f32); an unused term's array is all
    // NaN, which a read would spread to every result.
    let ctx = ctx();
    for plane in [1024, 1022] {
        let n0 = 5;
        let n = n0 * plane;
        let (x, y, z0) = (random(n, 21), random(n, 22), random(n, 23));
        let nan = vec![f32::NAN; n];
        let scalars = Scalars::new(&ctx, 1, 1).unwrap();
        let (xb, yb, nb, zb) = (
            field(&ctx, &x, n0),
            field(&ctx, &y, n0),
            field(&ctx, &nan, n0),
            field(&ctx, &z0, n0),
        );
        let op = |kernel, inputs, target, coefs| {
            VectorOp::new(
                &ctx,
                &scalars,
                None,
                None,
                kernel,
                inputs,
                target,
                coefs,
                [n0, 1, plane],
            )
            .unwrap()
        };
        // z = 0.5 x - 2 y + 0 nan + z
        let lincomb = op(
            Kernel::Lincomb,
            [Some(&xb), Some(&yb), Some(&nb), None],
            Target::Field(&zb),
            [Coef::fixed(0.5), Coef::fixed(-2.0), Coef::ZERO, Coef::ONE],
        );
        // sum (x + 0.5 y)(y + 0 nan)
        let dot = op(
            Kernel::Dot,
            [Some(&xb), Some(&yb), Some(&yb), Some(&nb)],
            Target::Sum(SumSlot(0)),
            [Coef::ZERO, Coef::fixed(0.5), Coef::ZERO, Coef::ZERO],
        );
        run(&ctx, &lincomb);
        run(&ctx, &dot);
        let got = zb.read(&ctx).unwrap();
        for i in 0..n {
            let expect = 0.5 * x[i] as f64 - 2.0 * y[i] as f64 + z0[i] as f64;
            assert!(
                (got[i] as f64 - expect).abs() <= 1e-6,
                "plane {plane}, word {i}: {} vs {expect}",
                got[i]
            );
        }
        let expect: f64 = (0..n)
            .map(|i| (x[i] as f64 + 0.5 * y[i] as f64) * y[i] as f64)
            .sum();
        let dot = sum(&ctx, &scalars, SumSlot(0));
        assert!(
            (dot - expect).abs() < 1e-6 * expect.abs().max(1.0),
            "plane {plane}: {dot} vs {expect}"
        );
    }
}

#[test]
fn double_word_finish_is_more_accurate_than_f32_and_two_dimensional_dispatches_agree() {
    // 1 + many tiny values: an f32 running sum loses them all; the finish keeps them.
    let n0 = 3;
    let plane = 256 * 300;
    let mut x = vec![1e-4f32; n0 * plane];
    x[0] = 1000.0;
    let ones = vec![1.0f32; n0 * plane];
    let expect: f64 = x.iter().map(|&a| a as f64).sum();
    let results = |ctx: &GpuContext| {
        let scalars = Scalars::new(ctx, 1, 1).unwrap();
        let (xb, ob) = (field(ctx, &x, n0), field(ctx, &ones, n0));
        let dot = VectorOp::new(
            ctx,
            &scalars,
            None,
            None,
            Kernel::Dot,
            [Some(&xb), None, Some(&ob), None],
            Target::Sum(SumSlot(0)),
            [Coef::ZERO; 4],
            [n0, 1, plane],
        )
        .unwrap();
        run(ctx, &dot);
        sum(ctx, &scalars, SumSlot(0))
    };
    let flat = results(&ctx());
    // 7 workgroups per dimension: 300 workgroups per plane become 7 x 43 = 301 (one
    // surplus per window), which must not write.
    let folded = results(&ctx().with_max_workgroups_per_dimension(7));
    assert!((flat - expect).abs() < 1e-7 * expect, "{flat} vs {expect}");
    assert_eq!(flat.to_bits(), folded.to_bits());
}

#[test]
fn host_arrays_streamed_through_staging_give_the_bits_of_device_arrays() {
    use crate::array::Residency;
    let ctx = ctx();
    let shape = [6, 5, 7];
    let v = 210;
    let (u, q, q2, z0) = (
        random(v, 8),
        random(3 * v, 9),
        random(3 * v, 10),
        random(v, 11),
    );
    let results = |residency: Residency| {
        let scalars = Scalars::new(&ctx, 1, 3).unwrap();
        // Room for two planes of a 3-vector field: every window holds one plane and its halo.
        let staging = Arc::new(Staging::new(&ctx, 2 * 3 * 35).unwrap());
        let make = |values: &[f32], words: usize| {
            let layout = PlaneLayout {
                planes: 6,
                plane_words: words * 35,
                axes_swapped: false,
            };
            let f = Field::new(&ctx, "test", layout, &residency).unwrap();
            f.write(&ctx, values).unwrap();
            f
        };
        let (uf, qf, q2f, zf) = (make(&u, 1), make(&q, 3), make(&q2, 3), make(&z0, 1));
        let gf = make(&vec![0.0; 3 * v], 3);
        let sf = make(&vec![0.0; 3 * v], 3);
        let op = |kernel, inputs, target, coefs| {
            VectorOp::new(
                &ctx,
                &scalars,
                Some(&staging),
                None,
                kernel,
                inputs,
                target,
                coefs,
                shape,
            )
            .unwrap()
        };
        let ops = [
            op(
                Kernel::Gradient,
                [Some(&uf), None, None, None],
                Target::Field(&gf),
                [Coef::ONE, Coef::ZERO, Coef::ZERO, Coef::ZERO],
            ),
            op(
                Kernel::GradientAdjoint,
                [Some(&qf), Some(&q2f), Some(&gf), None],
                Target::Field(&zf),
                [
                    Coef::fixed(0.7),
                    Coef::fixed(0.5),
                    Coef::fixed(-1.0),
                    Coef::ONE,
                ],
            ),
            op(
                Kernel::Shrink,
                [Some(&qf), Some(&gf), None, None],
                Target::Field(&sf),
                [Coef::fixed(0.3), Coef::fixed(2.0), Coef::ZERO, Coef::ZERO],
            ),
            op(
                Kernel::Lincomb,
                [Some(&zf), Some(&uf), None, None],
                Target::Field(&uf.clone()),
                [Coef::ZERO; 4],
            ),
            op(
                Kernel::Dot,
                [Some(&zf), None, Some(&zf), None],
                Target::Sum(SumSlot(0)),
                [Coef::ZERO; 4],
            ),
            op(
                Kernel::IsoNorm,
                [Some(&sf), None, None, None],
                Target::Sum(SumSlot(1)),
                [Coef::ZERO; 4],
            ),
        ];
        let mut rec = ctx.recorder("test");
        // The lincomb aliases its input u with its output: skip it (wgpu refuses the
        // aliasing on the device); it only checks that the builder accepts host arrays.
        for (i, o) in ops.iter().enumerate() {
            if i != 3 {
                o.record(&ctx, &mut rec).unwrap();
            }
        }
        ctx.submit(rec).unwrap();
        ctx.complete_downloads().unwrap();
        let sums = scalars.read_sums(&ctx).unwrap();
        (
            gf.read(&ctx).unwrap(),
            zf.read(&ctx).unwrap(),
            sf.read(&ctx).unwrap(),
            sums[0].to_bits(),
            sums[1].to_bits(),
        )
    };
    let device = results(Residency::Device);
    let host = results(Residency::Host);
    let bits = |v: &Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&device.0), bits(&host.0), "gradient");
    assert_eq!(bits(&device.1), bits(&host.1), "gradient adjoint");
    assert_eq!(bits(&device.2), bits(&host.2), "shrink");
    assert_eq!((device.3, device.4), (host.3, host.4), "reductions");
    assert!(
        device.1.iter().zip(&z0).any(|(a, b)| a != b),
        "the adjoint ran"
    );
}
