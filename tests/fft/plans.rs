//! FFT plans beyond contiguous batches: strided and pitched layouts, data split across bindings,
//! normalisation, determinism, and typed errors for bad plans.

use crate::common;

use crate::common::{ctx, new_context, to_f64};
use lamino::fft::{
    Algorithm, BatchDim, Direction, FftDescriptor, FftError, FftPlan, FftPlan1d, Layout,
    Normalization, Strategy,
};
use lamino::random::SplitMix64;
use lamino::reference::{fft_last_axes, max_relative_error};
use num_complex::Complex;

const SENTINEL: Complex<f32> = Complex::new(-7.25, 3.5);

/// Applies `desc` to `buffer_len` elements (random where the layout addresses them, a sentinel
/// elsewhere) and checks every transform against rustfft f64 and every other element unchanged.
fn check_layout(ctx: &lamino::gpu::GpuContext, desc: FftDescriptor, buffer_len: usize) -> f64 {
    let mut host = vec![SENTINEL; buffer_len];
    let mut rng = SplitMix64::new(99);
    let batch = desc.layout.batch_count();
    let index = |b: u64, k: usize| {
        let mut base = desc.layout.offset;
        let mut rest = b;
        for d in &desc.layout.batch {
            base += (rest % d.count) * d.dist;
            rest /= d.count;
        }
        (base + k as u64 * desc.layout.stride) as usize
    };
    for b in 0..batch {
        let line = rng.complex_uniform(desc.len);
        for (k, v) in line.into_iter().enumerate() {
            host[index(b, k)] = v;
        }
    }
    let data = ctx.upload("layout test", &host).unwrap();
    let plan = FftPlan1d::new(ctx, desc.clone(), &data).unwrap();
    plan.execute(ctx).unwrap();
    let out = ctx.read(&data, 0, buffer_len).unwrap();
    let mut touched = vec![false; buffer_len];
    let mut worst = 0.0f64;
    for b in 0..batch {
        let mut line: Vec<Complex<f64>> = (0..desc.len)
            .map(|k| to_f64(&[host[index(b, k)]])[0])
            .collect();
        fft_last_axes(&mut line, &[desc.len], 1, desc.direction, 1);
        let got: Vec<Complex<f32>> = (0..desc.len).map(|k| out[index(b, k)]).collect();
        worst = worst.max(max_relative_error(&got, &line));
        (0..desc.len).for_each(|k| touched[index(b, k)] = true);
    }
    for (i, t) in touched.iter().enumerate() {
        if !t {
            assert_eq!(
                out[i], SENTINEL,
                "element {i} outside the layout was written"
            );
        }
    }
    let bound = lamino::fft::recipe::accuracy_bound(&[desc.len]);
    assert!(
        worst <= bound,
        "error {worst:.2e} above bound {bound:.2e} for {desc:?}"
    );
    worst
}

#[test]
fn strided_transform_along_a_slow_axis() {
    // The U1 stage: length 2n along the slowest axis of a (2n, n1c*n2) block, stride n1c*n2, with
    // the transforms one element apart.
    let (len, cols) = (48, 40);
    let desc = FftDescriptor {
        len,
        layout: Layout {
            offset: 0,
            stride: cols,
            batch: vec![BatchDim {
                count: cols,
                dist: 1,
            }],
        },
        direction: Direction::Forward,
        normalization: Normalization::None,
    };
    check_layout(ctx(), desc, len * cols as usize);
}

#[test]
fn transforms_inside_a_padded_pitch_leave_the_padding_alone() {
    // The U2 stage's layout: a 2Ny x 2Nx window at offset (m, m) inside rows of pitch 2Nx + 2m,
    // `batch` planes. Rows, then columns, each with three batch dimensions.
    let (ny, nx, m, planes) = (12usize, 20usize, 4usize, 3usize);
    let (rows, pitch) = (ny + 2 * m, nx + 2 * m);
    let plane = (rows * pitch) as u64;
    let offset = (m * pitch + m) as u64;
    let along_x = Layout {
        offset,
        stride: 1,
        batch: vec![
            BatchDim {
                count: ny as u64,
                dist: pitch as u64,
            },
            BatchDim {
                count: planes as u64,
                dist: plane,
            },
        ],
    };
    let along_y = Layout {
        offset,
        stride: pitch as u64,
        batch: vec![
            BatchDim {
                count: nx as u64,
                dist: 1,
            },
            BatchDim {
                count: planes as u64,
                dist: plane,
            },
            BatchDim { count: 1, dist: 0 },
        ],
    };
    for (len, layout) in [(nx, along_x), (ny, along_y)] {
        for direction in [Direction::Forward, Direction::Inverse] {
            let desc = FftDescriptor {
                len,
                layout: layout.clone(),
                direction,
                normalization: Normalization::None,
            };
            check_layout(ctx(), desc, planes * plane as usize);
        }
    }
}

/// Checks batches of each `(length, batch)` under a 96 KiB binding cap, against rustfft f64:
/// every algorithm must split its batch into several bindings.
fn check_split_batches(small: &lamino::gpu::GpuContext, lengths: &[(usize, u64)]) {
    for &(len, batch) in lengths {
        let desc = FftDescriptor {
            len,
            layout: Layout {
                offset: 5,
                stride: 1,
                batch: vec![BatchDim {
                    count: batch,
                    dist: len as u64 + 3,
                }],
            },
            direction: Direction::Forward,
            normalization: Normalization::None,
        };
        let buffer_len = 5 + batch as usize * (len + 3);
        assert!(
            buffer_len * 8 > 96 << 10,
            "the test must exceed the binding cap"
        );
        check_layout(small, desc, buffer_len);
    }
}

#[test]
fn data_larger_than_one_binding_is_split_not_refused() {
    // A fused pass and Bluestein's three passes.
    let small = new_context().with_max_binding_bytes(96 << 10);
    check_split_batches(&small, &[(64, 300), (1021, 40)]);
    // A single transform wider than a binding cannot be split: a typed error, not a wrong result.
    let data = small.storage_buffer("wide", 16384 * 8).unwrap();
    let err = FftPlan1d::new(
        &small,
        FftDescriptor::contiguous(16384, 1, Direction::Forward),
        &data,
    )
    .unwrap_err();
    assert!(matches!(err, FftError::TransformTooLarge { .. }), "{err}");
}

/// The long multi-pass transform and Bluestein beyond one pass's length split too. Their
/// kernels take llvmpipe's GL minutes to compile on a context of their own (this cap's), so the
/// GL run of CI leaves them to the Vulkan runs (.ci/run); `the_same_input_gives_the_same_bits`
/// runs the 8192-point passes on GL.
#[test]
fn long_transforms_larger_than_one_binding_are_split() {
    let small = new_context().with_max_binding_bytes(96 << 10);
    check_split_batches(&small, &[(8192, 3), (2053, 9)]);
}

#[test]
fn algorithms_are_chosen_by_the_prime_factors() {
    let data = ctx().storage_buffer("algo", 1 << 20).unwrap();
    let plan = |n| {
        FftPlan1d::new(
            ctx(),
            FftDescriptor::contiguous(n, 1, Direction::Forward),
            &data,
        )
        .unwrap()
    };
    assert_eq!(plan(1).algorithm(), &Algorithm::Identity);
    assert!(matches!(plan(2000).algorithm(), Algorithm::Stockham { .. }));
    assert!(matches!(
        plan(1021).algorithm(),
        Algorithm::Bluestein { inner: 2048 }
    ));
    // Each strategy is honoured where it applies; one pass always runs fused, and lengths beyond
    // workgroup memory always run multi-pass.
    let with = |n, s| {
        let desc = FftDescriptor::contiguous(n, 1, Direction::Forward);
        FftPlan1d::with_strategy(ctx(), desc, &data, s)
            .unwrap()
            .strategy()
    };
    assert_eq!(with(64, Strategy::Fused), Strategy::Fused);
    assert_eq!(with(64, Strategy::MultiPass), Strategy::MultiPass);
    assert_eq!(with(8, Strategy::MultiPass), Strategy::Fused);
    assert_eq!(with(1 << 16, Strategy::Fused), Strategy::MultiPass);
}

#[test]
fn normalised_inverse_undoes_forward_and_length_one_is_the_identity() {
    for shape in [vec![1usize], vec![4, 1, 3], vec![2, 30, 17]] {
        let n: usize = shape.iter().product();
        let input = SplitMix64::new(3).complex_uniform(n);
        let data = ctx().upload("roundtrip", &input).unwrap();
        let axes = shape.len();
        FftPlan::new(
            ctx(),
            &shape,
            axes,
            Direction::Forward,
            Normalization::None,
            &data,
        )
        .unwrap()
        .execute(ctx())
        .unwrap();
        FftPlan::new(
            ctx(),
            &shape,
            axes,
            Direction::Inverse,
            Normalization::ByLength,
            &data,
        )
        .unwrap()
        .execute(ctx())
        .unwrap();
        let back = ctx().read(&data, 0, n).unwrap();
        let err = max_relative_error(&back, &to_f64(&input));
        assert!(err < 2e-6, "{shape:?}: round trip error {err:.2e}");
    }
}

#[test]
fn the_same_input_gives_the_same_bits() {
    for n in [1000usize, 1021, 8192] {
        let input = SplitMix64::new(5).complex_uniform(4 * n);
        let data = ctx().upload("repeat", &input).unwrap();
        let plan = FftPlan1d::new(
            ctx(),
            FftDescriptor::contiguous(n, 4, Direction::Forward),
            &data,
        )
        .unwrap();
        let mut results = Vec::new();
        for _ in 0..2 {
            ctx().write(&data, 0, &input);
            plan.execute(ctx()).unwrap();
            let out: Vec<[u32; 2]> = ctx().read(&data, 0, 4 * n).unwrap();
            results.push(out);
        }
        assert!(results[0] == results[1], "N={n}: two runs differ");
    }
}

#[test]
fn bad_plans_are_typed_errors() {
    let data = ctx().storage_buffer("small", 64 * 8).unwrap();
    let plan = |desc| FftPlan1d::new(ctx(), desc, &data).unwrap_err();
    assert!(matches!(
        plan(FftDescriptor::contiguous(0, 1, Direction::Forward)),
        FftError::ZeroLength
    ));
    assert!(matches!(
        plan(FftDescriptor::contiguous(64, 2, Direction::Forward)),
        FftError::BufferTooSmall {
            needed: 1024,
            actual: 512,
            ..
        }
    ));
    let mut strided = FftDescriptor::contiguous(8, 1, Direction::Forward);
    strided.layout.stride = u64::MAX / 4;
    assert!(matches!(plan(strided), FftError::IndexOverflow(_)));
    let err = FftPlan::new(
        ctx(),
        &[4, 0],
        1,
        Direction::Forward,
        Normalization::None,
        &data,
    )
    .unwrap_err();
    assert!(matches!(err, FftError::ZeroLength));
    let err = FftPlan::new(
        ctx(),
        &[4, 4],
        3,
        Direction::Forward,
        Normalization::None,
        &data,
    )
    .unwrap_err();
    assert!(
        matches!(err, FftError::BadAxes { axes: 3, ndim: 2 }),
        "{err}"
    );
}

#[test]
fn plans_of_one_context_share_their_workspace() {
    // A context of its own, so that the pool starts empty. Lengths beyond workgroup memory run two
    // or three out-of-place passes through the pool; the second plan outgrows the first's
    // workspace, the third fits in it.
    let ctx = new_context();
    let shapes: [&[usize]; 3] = [&[2, 1 << 14], &[4, 1 << 16], &[1, 1 << 15]];
    let inputs: Vec<Vec<Complex<f32>>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| SplitMix64::new(40 + i as u64).complex_uniform(s.iter().product()))
        .collect();
    let buffers: Vec<_> = inputs
        .iter()
        .map(|x| ctx.upload("shared workspace test", x).unwrap())
        .collect();
    let plans: Vec<FftPlan> = shapes
        .iter()
        .zip(&buffers)
        .map(|(s, b)| FftPlan::new(&ctx, s, 1, Direction::Forward, Normalization::None, b).unwrap())
        .collect();
    let needs: Vec<[u64; 2]> = plans.iter().map(FftPlan::workspace_slot_bytes).collect();
    assert!(needs.iter().all(|n| n[0] > 0), "{needs:?}");
    let own: u64 = needs.iter().flatten().sum();
    let shared: u64 = lamino::fft::max_slots(needs.iter().copied()).iter().sum();
    // The pool holds the largest need per slot (plus a 16-byte placeholder binding), not the sum.
    let pool = ctx.shared_scratch_bytes();
    assert!(
        pool <= shared + 16 && shared < own,
        "pool {pool}, shared {shared}, own {own}"
    );
    // Plans run one after another through the same workspace, in any order, and stay exact.
    for &i in &[2usize, 0, 1, 2] {
        ctx.write(&buffers[i], 0, &inputs[i]);
        plans[i].execute(&ctx).unwrap();
        let got = ctx.read(&buffers[i], 0, inputs[i].len()).unwrap();
        let mut expect = to_f64(&inputs[i]);
        fft_last_axes(&mut expect, shapes[i], 1, Direction::Forward, 1);
        let err = max_relative_error(&got, &expect);
        let bound = lamino::fft::recipe::accuracy_bound(&shapes[i][1..]);
        assert!(
            err <= bound,
            "{:?}: error {err:.2e} above {bound:.2e}",
            shapes[i]
        );
    }
}

/// Specialised passes longer than the private kernels run in two levels of rows in registers on
/// CPU rasterisers; they meet the accuracy bound forward and inverse, along a strided axis, as
/// Bluestein's inner transform and as the passes of a four-step chain.
#[test]
fn two_level_passes_meet_the_accuracy_bound() {
    use lamino::fft::Exchange;
    let ctx = ctx();
    let cases: [(&[usize], usize, Direction); 6] = [
        (&[16, 4096], 1, Direction::Forward),
        (&[40, 2000], 1, Direction::Inverse),
        (&[1152, 64], 2, Direction::Forward),
        (&[32, 1021], 1, Direction::Forward),
        (&[1 << 22], 1, Direction::Inverse),
        (&[24, 3025], 1, Direction::Forward),
    ];
    for (shape, axes, direction) in cases {
        let n: usize = shape.iter().product();
        let data = ctx.storage_buffer("two-level", n as u64 * 8).unwrap();
        let plan = FftPlan::new(ctx, shape, axes, direction, Normalization::None, &data).unwrap();
        let two_level = plan
            .axis_plans()
            .iter()
            .flat_map(|p| p.passes())
            .filter(|p| p.launch.exchange == Exchange::TwoLevel)
            .count();
        // Where workgroup memory holds the longest row (4096 complex values, 32 KiB): under the
        // portable limits' 16 KiB the planner takes more passes instead, as accurate.
        if ctx.info().software && ctx.max_workgroup_storage_bytes() >= 32 * 1024 {
            assert!(two_level > 0, "{shape:?}: {:?}", plan.axis_plans());
        }
        let ratio = common::fft_error_ratio(ctx, shape, axes, direction, 41);
        assert!(ratio <= 1.0, "{shape:?} {direction:?}: {ratio}");
    }
}
