//! The laminography operator on the GPU against f64 CPU references
//! (docs/operator-method.md, "Exactness tests"): adjoint
//! identities, direct nonuniform DFT sums, the analytic projection of a Gaussian blob, the norm of
//! L*L, chunk invariance, determinism, parity guards.

mod common;

use lamino::Tilt;
use std::f64::consts::PI;

use common::{ctx, new_context, to_f64};
use lamino::array::Residency;
use lamino::geometry::{Geometry, GeometryError, VolumeBox};
use lamino::gpu::GpuContext;
use lamino::metrics::nan_max;
use lamino::operator::{AdjointGridding, Apply, LaminoOperator, OperatorError, OperatorOptions};
use lamino::random::SplitMix64;
use lamino::reference::{fft2d_adjoint_direct, usfft1d_direct, usfft2d_direct};
use num_complex::{Complex, Complex32};

type C64 = Complex<f64>;

const TILT: Tilt = Tilt::from_degrees(20.0);

fn small() -> Geometry {
    // The direct-sum test's shape (docs/operator-method.md, "Exactness tests"): every size
    // different, so no axis can be confused with another.
    Geometry {
        n0: 16,
        n1: 12,
        n2: 20,
        deth: 14,
        detw: 18,
        ..Geometry::cube(16, 6, TILT)
    }
}

fn uneven_angles(g: Geometry) -> Geometry {
    let mut rng = SplitMix64::new(4);
    let theta = (0..g.ntheta()).map(|_| 2.0 * PI * rng.next_f64()).collect();
    Geometry { theta, ..g }
}

fn random(len: usize, seed: u64) -> Vec<Complex32> {
    SplitMix64::new(seed).complex_uniform(len)
}

fn dot(a: &[Complex32], b: &[Complex32]) -> C64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| C64::new(x.re as f64, x.im as f64) * C64::new(y.re as f64, -y.im as f64))
        .sum()
}

fn rel_l2(a: &[Complex32], b: &[C64]) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (C64::new(x.re as f64, x.im as f64) - y).norm_sqr())
        .sum();
    let den: f64 = b.iter().map(|y| y.norm_sqr()).sum();
    (num / den).sqrt()
}

/// Applies `what` to `input` through the operator's own buffers.
fn run(ctx: &GpuContext, op: &LaminoOperator, what: Apply, input: &[Complex32]) -> Vec<Complex32> {
    let shape = what.spaces().0.shape(op.geometry());
    op.apply_host(ctx, what, &shape, input).unwrap()
}

fn adjoint_mismatch(
    op: &LaminoOperator,
    fwd: Apply,
    adj: Apply,
    x_len: usize,
    y_len: usize,
) -> f64 {
    let x = random(x_len, 1);
    let y = random(y_len, 2);
    let ax = run(ctx(), op, fwd, &x);
    let aty = run(ctx(), op, adj, &y);
    let lhs = dot(&ax, &y);
    let rhs = dot(&x, &aty);
    (lhs - rhs).norm() / lhs.norm()
}

#[test]
fn every_stage_and_the_whole_operator_have_exact_adjoints() {
    for g in [small(), uneven_angles(Geometry::cube(32, 16, TILT))] {
        let op = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap();
        let (v, s, d) = (g.volume_len(), g.spectrum_len(), g.data_len());
        for (fwd, adj, x, y) in [
            (Apply::Usfft1d, Apply::Usfft1dAdjoint, v, s),
            (Apply::Usfft2d, Apply::Usfft2dAdjoint, s, d),
            (Apply::Fft2dAdjoint, Apply::Fft2d, d, d),
            (Apply::FourierForward, Apply::FourierAdjoint, v, d),
            (Apply::Forward, Apply::Adjoint, v, d),
        ] {
            let mismatch = adjoint_mismatch(&op, fwd, adj, x, y);
            assert!(
                mismatch < 1e-5,
                "{fwd:?}/{adj:?} on {}^3: |<Ax,y> - <x,A*y>|/|<Ax,y>| = {mismatch:.2e}",
                g.n0
            );
        }
    }
}

#[test]
fn stages_match_direct_nonuniform_sums() {
    let g = uneven_angles(small());
    let op = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap();
    let u = random(g.volume_len(), 3);
    let s = random(g.spectrum_len(), 4);
    let u1 = rel_l2(
        &run(ctx(), &op, Apply::Usfft1d, &u),
        &usfft1d_direct(&g, &to_f64(&u)),
    );
    let u2 = rel_l2(
        &run(ctx(), &op, Apply::Usfft2d, &s),
        &usfft2d_direct(&g, &to_f64(&s)),
    );
    let a_ref = usfft2d_direct(&g, &usfft1d_direct(&g, &to_f64(&u)));
    let a = rel_l2(&run(ctx(), &op, Apply::FourierForward, &u), &a_ref);
    let d = random(g.data_len(), 5);
    let f = rel_l2(
        &run(ctx(), &op, Apply::Fft2dAdjoint, &d),
        &fft2d_adjoint_direct(&g, &to_f64(&d)),
    );
    eprintln!("rel. L2 errors at eps 1e-3: U1 {u1:.2e}, U2 {u2:.2e}, A {a:.2e}, F_adj {f:.2e}");
    assert!(
        u1 < 1e-3 && u2 < 1e-3 && a < 1.5e-3,
        "U1 {u1:.2e}, U2 {u2:.2e}, A {a:.2e}"
    );
    assert!(f < 1e-6, "F_adj {f:.2e}");
}

#[test]
fn smaller_eps_reaches_its_accuracy() {
    for eps in [1e-4, 1e-5, 1e-6] {
        let g = Geometry { eps, ..small() };
        let op = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap();
        let u = random(g.volume_len(), 6);
        let s = random(g.spectrum_len(), 7);
        let u1 = rel_l2(
            &run(ctx(), &op, Apply::Usfft1d, &u),
            &usfft1d_direct(&g, &to_f64(&u)),
        );
        let u2 = rel_l2(
            &run(ctx(), &op, Apply::Usfft2d, &s),
            &usfft2d_direct(&g, &to_f64(&s)),
        );
        eprintln!("eps {eps:e}: U1 {u1:.2e}, U2 {u2:.2e}");
        // f32 rounding adds about 1e-7 per stage on top of the gridding error.
        let bound = eps + 3e-7;
        assert!(
            u1 < bound && u2 < bound,
            "eps {eps:e}: U1 {u1:.2e}, U2 {u2:.2e}"
        );
    }
}

/// L of a Gaussian blob against its analytic line integrals, for a tilt and for plain tomography,
/// with a detector whose (deth + detw)/2 is odd (the reference's sign defect).
#[test]
fn projection_of_a_gaussian_blob_matches_the_analytic_line_integral() {
    let tilted = Geometry::cube(32, 8, TILT);
    let tomo = Geometry::cube(32, 8, Tilt::CT);
    let odd = Geometry {
        deth: 30,
        ..uneven_angles(Geometry::cube(32, 8, TILT))
    };
    // The rotation axis 3.37 pixels right of the centre column.
    let off_centre = Geometry {
        center: Some(16.0 + 3.37),
        ..Geometry::cube(32, 8, TILT)
    };
    for g in [tilted, tomo, odd, off_centre] {
        let (sigma, r0) = (1.5, [4.0, -3.0, 2.0]);
        let mut u = vec![Complex32::new(0.0, 0.0); g.volume_len()];
        for z in 0..g.n0 {
            for y in 0..g.n1 {
                for x in 0..g.n2 {
                    let r = [
                        x as f64 - (g.n2 / 2) as f64,
                        y as f64 - (g.n1 / 2) as f64,
                        z as f64 - (g.n0 / 2) as f64,
                    ];
                    let d2: f64 = r.iter().zip(&r0).map(|(a, b)| (a - b) * (a - b)).sum();
                    u[(z * g.n1 + y) * g.n2 + x] =
                        Complex32::new((-d2 / (2.0 * sigma * sigma)).exp() as f32, 0.0);
                }
            }
        }
        let op = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap();
        let lu = run(ctx(), &op, Apply::Forward, &u);
        let scale = 1.0 / ((g.n2 * g.ntheta()) as f64).sqrt();
        let per_angle = g.deth * g.detw;
        for (t, &theta) in g.theta.iter().enumerate() {
            let (ct, st, cp, sp) = (
                theta.cos(),
                theta.sin(),
                g.tilt.phi().cos(),
                g.tilt.phi().sin(),
            );
            let e1 = [ct, st, 0.0];
            let e2 = [st * cp, -ct * cp, sp];
            let c1: f64 = e1.iter().zip(&r0).map(|(a, b)| a * b).sum();
            let c2: f64 = e2.iter().zip(&r0).map(|(a, b)| a * b).sum();
            let mut expect = Vec::with_capacity(per_angle);
            for v in 0..g.deth {
                for w in 0..g.detw {
                    let (su, sv) = (w as f64 - g.rotation_axis(), v as f64 - (g.deth / 2) as f64);
                    let p = (2.0 * PI).sqrt()
                        * sigma
                        * (-((su - c1).powi(2) + (sv - c2).powi(2)) / (2.0 * sigma * sigma)).exp();
                    expect.push(C64::new(p * scale, 0.0));
                }
            }
            let got = &lu[t * per_angle..(t + 1) * per_angle];
            let err = rel_l2(got, &expect);
            let imag = got.iter().map(|c| c.im.abs() as f64).fold(0.0, nan_max);
            let peak = expect.iter().map(|c| c.re).fold(0.0, nan_max);
            assert!(
                err < 1e-3,
                "deth {} phi {:.3} angle {t}: rel. error {err:.2e}",
                g.deth,
                g.tilt.phi()
            );
            assert!(
                imag < 1e-3 * peak,
                "angle {t}: imaginary part {imag:.2e} vs peak {peak:.2e}"
            );
        }
    }
}

/// The rotation axis off the centre column: a phase ramp in the F stage, so L and L* stay exact
/// adjoints, F_adj matches the f64 direct sum with the offset, an integer offset is exactly a
/// column shift of the centred projections, and the CPU operator agrees.
#[test]
fn an_off_centre_rotation_axis_is_an_exact_shift_of_the_projections() {
    let centred = uneven_angles(small());
    let shifted = Geometry {
        center: Some(centred.rotation_axis() - 2.63),
        ..centred.clone()
    };
    check_shifted_operator(&shifted, "the axis 2.63 px off", 13);
    let u = random(shifted.volume_len(), 14);
    // Three columns to the right: the centred projections rolled by three columns (the DFT's
    // shift is circular), to f32 rounding.
    let three = Geometry {
        center: Some(centred.rotation_axis() + 3.0),
        ..centred.clone()
    };
    let lu = run(
        ctx(),
        &LaminoOperator::new(ctx(), &three, &OperatorOptions::default()).unwrap(),
        Apply::Forward,
        &u,
    );
    let reference = run(
        ctx(),
        &LaminoOperator::new(ctx(), &centred, &OperatorOptions::default()).unwrap(),
        Apply::Forward,
        &u,
    );
    let w = centred.detw;
    let rolled: Vec<C64> = (0..reference.len())
        .map(|i| {
            let c = reference[i - i % w + (i % w + w - 3) % w];
            C64::new(c.re as f64, c.im as f64)
        })
        .collect();
    let err = rel_l2(&lu, &rolled);
    eprintln!("axis 3 px off vs the centred projections rolled by 3 columns: rel. L2 {err:.2e}");
    assert!(
        err < 1e-6,
        "integer offset vs rolled projections: {err:.2e}"
    );
}

#[test]
fn the_norm_of_l_star_l_is_about_one() {
    let g = Geometry::cube(32, 16, TILT);
    let op = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap();
    let mut x = random(g.volume_len(), 8);
    let mut norm = 0.0;
    for _ in 0..12 {
        let lx = run(ctx(), &op, Apply::Forward, &x);
        let y = run(ctx(), &op, Apply::Adjoint, &lx);
        let ny = dot(&y, &y).re.sqrt();
        norm = ny / dot(&x, &x).re.sqrt();
        x = y.iter().map(|c| c / ny as f32).collect();
    }
    eprintln!("|L*L| = {norm:.4}");
    assert!((0.95..=1.15).contains(&norm), "|L*L| = {norm}");
}

#[test]
fn results_do_not_depend_on_chunks_or_binding_size_and_repeat_bit_for_bit() {
    let g = small();
    let u = random(g.volume_len(), 9);
    let d = random(g.data_len(), 10);
    let reference = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap();
    let (fwd, adj) = (
        run(ctx(), &reference, Apply::Forward, &u),
        run(ctx(), &reference, Apply::Adjoint, &d),
    );
    assert_eq!(
        run(ctx(), &reference, Apply::Forward, &u),
        fwd,
        "a repeat run differs"
    );
    assert_eq!(
        run(ctx(), &reference, Apply::Adjoint, &d),
        adj,
        "a repeat run differs"
    );
    // Non-dividing chunks, and a binding cap far below every whole array (volume 30 KiB, data
    // 24 KiB, U2 grids 15 KiB per row), so every block copy and table is split into windows.
    let tiny = new_context().with_max_binding_bytes(16 << 10);
    // A binding exactly one detector row's U2 grid (2 n1 x 2 n2 complex, bound whole): one row
    // per chunk, as a 2048^2 row's 128 MiB grid on lavapipe (it used to be refused for want of
    // room for an alignment the whole-bound grid does not need).
    let row_grid = (4 * g.n1 * g.n2 * 8) as u64;
    let exact = new_context().with_max_binding_bytes(row_grid);
    assert_eq!(
        exact.max_binding_bytes(),
        row_grid,
        "the grid is a multiple of the alignment"
    );
    for (c, options) in [
        (
            ctx(),
            OperatorOptions {
                max_chunk_y: Some(5),
                max_chunk_rows: Some(3),
                max_chunk_angles: Some(4),
                ..OperatorOptions::default()
            },
        ),
        (&tiny, OperatorOptions::default()),
        (&exact, OperatorOptions::default()),
    ] {
        let op = LaminoOperator::new(c, &g, &options).unwrap();
        if c.max_binding_bytes() == row_grid {
            assert_eq!(op.chunks().1, 1, "one row's grid fills the binding");
        }
        assert!(
            op.chunks().0 < g.n1 && op.chunks().1 < g.deth,
            "{:?}",
            op.chunks()
        );
        if options.max_chunk_angles.is_some() {
            assert!(op.chunks().2 < g.ntheta(), "{:?}", op.chunks());
        }
        assert_eq!(
            run(c, &op, Apply::Forward, &u),
            fwd,
            "chunks {:?} change L",
            op.chunks()
        );
        assert_eq!(
            run(c, &op, Apply::Adjoint, &d),
            adj,
            "chunks {:?} change L*",
            op.chunks()
        );
    }
}

/// The U2 tables off the device (host memory, a scratch file), a chunk's slice uploaded before
/// it computes: the same bits as resident tables with the same chunks, and exact adjoints.
#[test]
fn u2_tables_streamed_a_chunk_at_a_time_give_the_resident_bits() {
    let scratch = tempfile::tempdir().unwrap();
    for g in [small(), uneven_angles(Geometry::cube(32, 16, TILT))] {
        // Non-dividing chunks of detector rows, so the last chunk's slice is short.
        let options = OperatorOptions {
            max_chunk_rows: Some(3),
            ..OperatorOptions::default()
        };
        let resident = LaminoOperator::new(ctx(), &g, &options).unwrap();
        let (v, s, d) = (g.volume_len(), g.spectrum_len(), g.data_len());
        let cases = [
            (Apply::Usfft2d, random(s, 11)),
            (Apply::Usfft2dAdjoint, random(d, 12)),
            (Apply::Forward, random(v, 13)),
            (Apply::Adjoint, random(d, 14)),
        ];
        let expected: Vec<_> = cases
            .iter()
            .map(|(what, x)| run(ctx(), &resident, *what, x))
            .collect();
        for tables in [Residency::Host, Residency::Scratch(scratch.path().into())] {
            let streamed =
                LaminoOperator::with_residency(ctx(), &g, &options, &Residency::Device, &tables)
                    .unwrap();
            assert!(streamed.device_bytes() < resident.device_bytes());
            for ((what, x), want) in cases.iter().zip(&expected) {
                let got = run(ctx(), &streamed, *what, x);
                assert!(
                    got.len() == want.len()
                        && got.iter().zip(want).all(|(a, b)| {
                            a.re.to_bits() == b.re.to_bits() && a.im.to_bits() == b.im.to_bits()
                        }),
                    "{what:?} with {tables:?} tables on {}^3 differs from resident tables",
                    g.n0
                );
            }
            let mismatch = adjoint_mismatch(&streamed, Apply::Usfft2d, Apply::Usfft2dAdjoint, s, d);
            assert!(mismatch < 1e-5, "U2 adjoint mismatch {mismatch:.2e}");
        }
    }
}

#[test]
fn bad_geometries_are_refused_with_the_reason() {
    let g = Geometry { n1: 13, ..small() };
    assert!(matches!(
        LaminoOperator::new(ctx(), &g, &OperatorOptions::default()),
        Err(OperatorError::Geometry(GeometryError::BadSize {
            name: "n1",
            ..
        }))
    ));
    // 2 n2 = 4 grid cells, fewer than the 5 taps of the kernel at eps 1e-3.
    let g = Geometry { n2: 2, ..small() };
    let err = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap_err();
    assert!(
        matches!(err, OperatorError::TooSmall { name: "n2", .. }),
        "{err}"
    );
    let g = Geometry {
        tilt: Tilt::from_phi(0.0),
        ..small()
    };
    assert!(LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).is_err());
    let op = LaminoOperator::new(ctx(), &small(), &OperatorOptions::default()).unwrap();
    let err = op
        .apply_host(
            ctx(),
            Apply::Forward,
            &[16, 20, 12],
            &random(16 * 20 * 12, 1),
        )
        .unwrap_err();
    assert!(matches!(err, OperatorError::ShapeMismatch { .. }), "{err}");
    let huge = Geometry::cube(4096, 4, TILT);
    let err = LaminoOperator::new(ctx(), &huge, &OperatorOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            OperatorError::TooLarge { .. }
                | OperatorError::Gpu(lamino::GpuError::BufferTooLarge { .. })
        ),
        "{err}"
    );
}

#[test]
fn gpu_and_cpu_implementations_agree() {
    let g = uneven_angles(small());
    let op = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap();
    let cpu = lamino::reference::CpuOperator::new(&g, 2);
    let u = random(g.volume_len(), 11);
    let d = random(g.data_len(), 12);
    let pairs = [
        (run(ctx(), &op, Apply::Forward, &u), cpu.forward(&u)),
        (run(ctx(), &op, Apply::Adjoint, &d), cpu.adjoint(&d)),
    ];
    for (i, (gpu, cpu)) in pairs.iter().enumerate() {
        let err = rel_l2(gpu, &to_f64(cpu));
        assert!(
            err < 1e-5,
            "{}: GPU vs CPU rel. L2 {err:.2e}",
            ["L", "L*"][i]
        );
    }
}

#[test]
fn the_memory_estimate_made_before_allocation_matches_what_the_operator_holds() {
    for (g, options) in [
        (small(), OperatorOptions::default()),
        (Geometry::cube(32, 16, TILT), OperatorOptions::default()),
        (
            Geometry::cube(32, 16, TILT),
            OperatorOptions {
                adjoint_gridding: AdjointGridding::Evaluated,
                ..OperatorOptions::default()
            },
        ),
        (
            Geometry::cube(32, 16, TILT),
            OperatorOptions {
                max_chunk_y: Some(5),
                max_chunk_rows: Some(3),
                max_chunk_angles: Some(5),
                ..OperatorOptions::default()
            },
        ),
    ] {
        // Tables resident, and streamed a chunk's slice at a time.
        for tables in [Residency::Device, Residency::Host] {
            let estimate =
                LaminoOperator::estimate_device_bytes(ctx(), &g, &options, &tables).unwrap();
            let actual =
                LaminoOperator::with_residency(ctx(), &g, &options, &Residency::Device, &tables)
                    .unwrap()
                    .device_bytes();
            let ratio = estimate as f64 / actual as f64;
            eprintln!(
                "{tables:?} tables: estimate {estimate} vs actual {actual} bytes: {ratio:.3}"
            );
            assert!(
                (0.9..=1.1).contains(&ratio),
                "estimate {estimate}, actual {actual}"
            );
        }
    }
}

/// A volume off the default centre (a slab or an x/y region of interest): a per-angle shift of
/// the projections in the F stage, so the operator stays exactly adjoint with the offset, F_adj
/// matches the f64 direct sum with it, the GPU and CPU operators agree, and a sub-volume's
/// projections are those of the full volume holding it (zero elsewhere) up to the gridding
/// accuracy.
#[test]
fn a_volume_offset_is_a_per_angle_shift_of_the_projections() {
    let shifted = Geometry {
        offset: [2.0, -1.5, 3.25],
        center: Some(9.4),
        ..uneven_angles(small())
    };
    check_shifted_operator(&shifted, &format!("offset {:?}", shifted.offset), 23);
    // A sub-box of the default volume against the full volume holding it, zero elsewhere, in
    // the Fourier domain: A_sub u times the sub-volume's phases R is A_full of the embedded
    // volume at every frequency the operator does not clamp (to the gridding error of each,
    // about 1.5e-4 at eps 1e-3). At the clamped corner frequencies (|x| or |y| beyond 0.5 - 1e-5,
    // past Nyquist) the full volume's phase is taken at the clamped point and R at the true one,
    // so they differ there by construction; those are counted apart.
    let full = uneven_angles(Geometry::cube(24, 8, TILT));
    let b = VolumeBox {
        z: 14..22,
        y: 4..16,
        x: 10..24,
    };
    let sub = full.with_subvolume(&b).unwrap();
    let inner = random(sub.volume_len(), 25);
    let mut embedded = vec![Complex32::new(0.0, 0.0); full.volume_len()];
    for (z, planes) in inner.chunks(sub.n1 * sub.n2).enumerate() {
        for (y, row) in planes.chunks(sub.n2).enumerate() {
            let at = ((b.z.start + z) * full.n1 + b.y.start + y) * full.n2 + b.x.start;
            embedded[at..at + sub.n2].copy_from_slice(row);
        }
    }
    let fourier = |g: &Geometry, u: &[Complex32]| {
        let op = LaminoOperator::new(ctx(), g, &OperatorOptions::default()).unwrap();
        run(ctx(), &op, Apply::FourierForward, u)
    };
    let (a_full, a_sub) = (fourier(&full, &embedded), fourier(&sub, &inner));
    // The operator's scale 1/sqrt(n2) differs between the two volumes.
    let scale = (sub.n2 as f64 / full.n2 as f64).sqrt();
    let phases = sub.detector_phases();
    let (mut got, mut want, mut clamped) = (Vec::new(), Vec::new(), 0);
    for t in 0..full.ntheta() {
        let (ct, st, cp) = (
            full.theta[t].cos(),
            full.theta[t].sin(),
            full.tilt.phi().cos(),
        );
        for a in 0..full.deth {
            for w in 0..full.detw {
                let ku = (w as f64 - 12.0) / 24.0;
                let kv = (a as f64 - 12.0) / 24.0;
                let (x, y) = (ku * ct + kv * st * cp, ku * st - kv * ct * cp);
                if x.abs().max(y.abs()) > 0.5 - 2e-5 {
                    clamped += 1;
                    continue;
                }
                let i = (t * full.deth + a) * full.detw + w;
                let [c, s] = phases.at(t, a, w);
                got.push(a_sub[i] * Complex32::new(c, s) * scale as f32);
                want.push(C64::new(a_full[i].re as f64, a_full[i].im as f64));
            }
        }
    }
    let err = rel_l2(&got, &want);
    eprintln!(
        "A of the sub-box {b:?} times its phases vs A of the full volume holding it: rel. L2 \
         {err:.2e} over the {} unclamped frequencies ({clamped} clamped left out)",
        got.len()
    );
    assert!(err < 1e-3, "sub-box vs full volume: {err:.2e}");
}

/// Each projection's own shift (a stage that moved) is exact: the operator with shifts meets the
/// shifted geometry's checks (adjoints, the f64 direct sum, the CPU operator), beside an
/// off-centre axis and a volume offset; and a whole-pixel shift of one projection is that
/// projection rolled (the DFT's shift is circular), the others untouched, to f32 rounding.
#[test]
fn each_projections_shift_is_an_exact_shift_of_that_projection() {
    let g = uneven_angles(small());
    let mut rng = lamino::random::SplitMix64::new(31);
    let shifts: Vec<[f64; 2]> = (0..g.ntheta())
        .map(|_| [4.0 * rng.next_f64() - 2.0, 4.0 * rng.next_f64() - 2.0])
        .collect();
    let moved = Geometry {
        shifts,
        offset: [1.0, -0.5, 0.75],
        center: Some(g.rotation_axis() + 0.4),
        ..g.clone()
    };
    check_shifted_operator(&moved, "random shifts of each projection", 33);
    let (t, du, dv) = (1, 2usize, 3usize);
    let mut whole = vec![[0.0; 2]; g.ntheta()];
    whole[t] = [du as f64, dv as f64];
    let one = Geometry {
        shifts: whole,
        ..g.clone()
    };
    let u = random(g.volume_len(), 34);
    let forward = |g: &Geometry| {
        let op = LaminoOperator::new(ctx(), g, &OperatorOptions::default()).unwrap();
        run(ctx(), &op, Apply::Forward, &u)
    };
    let (got, still) = (forward(&one), forward(&g));
    let (h, w) = (g.deth, g.detw);
    let rolled: Vec<C64> = (0..still.len())
        .map(|i| {
            let (angle, a, b) = (i / (h * w), i / w % h, i % w);
            let j = match angle == t {
                true => (angle * h + (a + h - dv) % h) * w + (b + w - du) % w,
                false => i,
            };
            C64::new(still[j].re as f64, still[j].im as f64)
        })
        .collect();
    let err = rel_l2(&got, &rolled);
    eprintln!("projection {t} shifted by ({du}, {dv}) px vs rolled: rel. L2 {err:.2e}");
    assert!(
        err < 1e-6,
        "a whole-pixel shift vs the rolled projection: {err:.2e}"
    );
}

/// The checks every shifted geometry meets (`what` names the shift, `seed` the random inputs):
/// L and L* (and F, F_adj) exact adjoints, F_adj equal to the f64 direct sum, and the GPU
/// operator equal to the CPU one.
fn check_shifted_operator(shifted: &Geometry, what: &str, seed: u64) {
    let op = LaminoOperator::new(ctx(), shifted, &OperatorOptions::default()).unwrap();
    let (v, d) = (shifted.volume_len(), shifted.data_len());
    for (fwd, adj, x, y) in [
        (Apply::Fft2dAdjoint, Apply::Fft2d, d, d),
        (Apply::Forward, Apply::Adjoint, v, d),
    ] {
        let mismatch = adjoint_mismatch(&op, fwd, adj, x, y);
        eprintln!("{what}, {fwd:?}/{adj:?}: adjoint mismatch {mismatch:.2e}");
        assert!(mismatch < 1e-5, "{what}, {fwd:?}/{adj:?}: {mismatch:.2e}");
    }
    let data = random(d, seed);
    let f = rel_l2(
        &run(ctx(), &op, Apply::Fft2dAdjoint, &data),
        &fft2d_adjoint_direct(shifted, &to_f64(&data)),
    );
    eprintln!("F_adj with {what} vs the f64 direct sum: rel. L2 {f:.2e}");
    assert!(f < 1e-6, "F_adj with {what} vs the f64 direct sum: {f:.2e}");
    let u = random(v, seed + 1);
    let cpu = lamino::reference::CpuOperator::new(shifted, 2);
    for (name, gpu, reference) in [
        ("L", run(ctx(), &op, Apply::Forward, &u), cpu.forward(&u)),
        (
            "L*",
            run(ctx(), &op, Apply::Adjoint, &data),
            cpu.adjoint(&data),
        ),
    ] {
        let err = rel_l2(&gpu, &to_f64(&reference));
        eprintln!("{name} with {what}, GPU vs CPU: rel. L2 {err:.2e}");
        assert!(err < 1e-5, "{name} with {what}, GPU vs CPU: {err:.2e}");
    }
}

#[test]
fn the_u2_adjoint_handles_footprints_that_wrap_or_cover_the_grid() {
    // The adjoint's invocations own blocks of 4 x 4 cells of each row's 2 n1 x 2 n2 grid (sizes
    // are even, so blocks tile the grid) and read the points whose footprint's corner lies in
    // the 2 x 2 blocks up and left of theirs (5 taps, eps 1e-3), or 3 x 3 (7 taps, eps 1e-5),
    // wrapped. n1 = 6, n2 = 14: 12 x 28 cells, footprints wrapping around both ends. n1 = 4: 8
    // grid rows, two block rows, each footprint reaching both, some through the wrap as well
    // (each point must be read once); with 7 taps a footprint's reach of 3 blocks meets its own
    // corner block again. Both ways of weighing the points (AdjointGridding).
    for (n1, n2, eps) in [(6, 14, 1e-3), (4, 6, 1e-3), (6, 14, 1e-5), (4, 6, 1e-5)] {
        let g = uneven_angles(Geometry {
            n0: 8,
            n1,
            n2,
            deth: 8,
            detw: n2,
            eps,
            ..Geometry::cube(8, 5, TILT)
        });
        let cpu = lamino::reference::CpuOperator::new(&g, 2);
        let d = random(g.data_len(), 21);
        for adjoint_gridding in [AdjointGridding::Tabulated, AdjointGridding::Evaluated] {
            let options = OperatorOptions {
                adjoint_gridding,
                ..OperatorOptions::default()
            };
            let op = LaminoOperator::new(ctx(), &g, &options).unwrap();
            let what = format!("{n1} x {n2}, eps {eps:e}, {adjoint_gridding:?}");
            let gpu = run(ctx(), &op, Apply::Usfft2dAdjoint, &d);
            let err = rel_l2(&gpu, &to_f64(&cpu.usfft2d_adjoint(&d)));
            assert!(err < 1e-5, "{what}: U2*, GPU vs CPU: {err:.2e}");
            let (s, d) = (g.spectrum_len(), g.data_len());
            let mismatch = adjoint_mismatch(&op, Apply::Usfft2d, Apply::Usfft2dAdjoint, s, d);
            assert!(mismatch < 1e-5, "{what}: U2/U2*: {mismatch:.2e}");
        }
    }
}

/// U2*'s two ways of weighing its points read the same points in the same order and add the
/// same products: the same values (to the last bits a compiler's fused multiply-adds may
/// change) at every accuracy; `Auto` tabulates unless one detector row's records (80 bytes per
/// point at eps 1e-3) exceed a storage binding.
#[test]
fn the_u2_adjoint_gives_the_same_values_tabulated_or_evaluated() {
    for eps in [1e-3, 1e-4, 1e-6] {
        let g = uneven_angles(Geometry { eps, ..small() });
        let d = random(g.data_len(), 22);
        let adjoint = |c: &GpuContext, adjoint_gridding| {
            let options = OperatorOptions {
                adjoint_gridding,
                ..OperatorOptions::default()
            };
            let op = LaminoOperator::new(c, &g, &options).unwrap();
            (
                op.adjoint_gridding(),
                run(c, &op, Apply::Usfft2dAdjoint, &d),
            )
        };
        let (how, tabulated) = adjoint(ctx(), AdjointGridding::Tabulated);
        assert_eq!(how, AdjointGridding::Tabulated);
        let (how, evaluated) = adjoint(ctx(), AdjointGridding::Evaluated);
        assert_eq!(how, AdjointGridding::Evaluated);
        let err = rel_l2(&tabulated, &to_f64(&evaluated));
        eprintln!("eps {eps:e}: U2* tabulated vs evaluated, rel. L2 {err:.2e}");
        assert!(err < 1e-6, "eps {eps:e}: tabulated vs evaluated {err:.2e}");
        if eps == 1e-3 {
            let (how, auto) = adjoint(ctx(), AdjointGridding::Auto);
            assert_eq!((how, &auto), (AdjointGridding::Tabulated, &tabulated));
            // One row's records (6 x 18 points of 80 bytes) beyond a binding that holds its
            // grid (2 x 12 x 2 x 20 cells of 8 bytes).
            let binding = (4 * g.n1 * g.n2 * 8) as u64;
            assert!(binding < (g.ntheta() * g.detw * 80) as u64);
            let narrow = new_context().with_max_binding_bytes(binding);
            let (how, auto) = adjoint(&narrow, AdjointGridding::Auto);
            assert_eq!((how, &auto), (AdjointGridding::Evaluated, &evaluated));
            let options = OperatorOptions {
                adjoint_gridding: AdjointGridding::Tabulated,
                ..OperatorOptions::default()
            };
            let err = LaminoOperator::new(&narrow, &g, &options).unwrap_err();
            assert!(
                matches!(err, OperatorError::TooLarge { .. }),
                "records beyond the binding: {err}"
            );
        }
    }
}

/// `Re A*A u` of a real volume by gridding: A then A* on the device.
fn normal_by_gridding(op: &LaminoOperator, u: &[f32]) -> Vec<f32> {
    let complex: Vec<Complex32> = u.iter().map(|&x| Complex32::new(x, 0.0)).collect();
    let au = run(ctx(), op, Apply::FourierForward, &complex);
    run(ctx(), op, Apply::FourierAdjoint, &au)
        .iter()
        .map(|c| c.re)
        .collect()
}

/// `values` of a `(n0, n1, n2)` volume stored with its first two axes swapped, or back.
fn swap_volume_axes(shape: [usize; 3], values: &[f32]) -> Vec<f32> {
    let [a, b, c] = shape;
    let mut out = vec![0.0; values.len()];
    for (i, v) in values.iter().enumerate() {
        let (i0, i1, i2) = (i / (b * c), i / c % b, i % c);
        out[(i1 * a + i0) * c + i2] = *v;
    }
    out
}

fn real_random(len: usize, seed: u64) -> Vec<f32> {
    random(len, seed).iter().map(|c| c.re).collect()
}

#[test]
fn the_toeplitz_normal_operator_is_a_star_a_by_gridding_and_by_direct_sums() {
    use lamino::operator::ToeplitzNormal;
    let options = OperatorOptions::default();
    let mut slab = Geometry::cube(16, 7, Tilt::from_degrees(60.0));
    slab.center = Some(slab.detw as f64 / 2.0 + 1.3);
    slab.offset = [1.5, -2.0, 0.7];
    slab.n0 = 8;
    let cases = [
        ("20 degrees, every size different", uneven_angles(small())),
        (
            "tomography (0 degrees)",
            Geometry::cube(16, 8, Tilt::from_degrees(0.0)),
        ),
        (
            "60 degrees, 7 angles, an off-centre axis, a slab with an offset",
            slab,
        ),
    ];
    for (what, g) in cases {
        let op = LaminoOperator::new(ctx(), &g, &options).unwrap();
        let u = real_random(g.volume_len(), 11);
        let gridded = normal_by_gridding(&op, &u);
        let shape = [g.n0, g.n1, g.n2];
        for swapped in [false, true] {
            let t = ToeplitzNormal::new(ctx(), &g, &options, swapped).unwrap();
            let input = if swapped {
                swap_volume_axes(shape, &u)
            } else {
                u.clone()
            };
            let out = t.apply_host(ctx(), &input).unwrap();
            assert_eq!(
                out,
                t.apply_host(ctx(), &input).unwrap(),
                "{what}: bits repeat"
            );
            let out = if swapped {
                swap_volume_axes([g.n1, g.n0, g.n2], &out)
            } else {
                out
            };
            let error = lamino::metrics::rel_l2(&out, &gridded);
            eprintln!("{what} (axes swapped {swapped}): T against A*A by gridding {error:.2e}");
            assert!(error <= 2e-3, "{what}: {error:.2e}");
            if swapped {
                continue;
            }
            // f64: <v, T u> = Re <A v, A u> with A by direct sums.
            let v = real_random(g.volume_len(), 12);
            let direct = |x: &[f32]| {
                let c: Vec<C64> = x.iter().map(|&r| C64::new(r as f64, 0.0)).collect();
                usfft2d_direct(&g, &usfft1d_direct(&g, &c))
            };
            let (av, au) = (direct(&v), direct(&u));
            let exact: f64 = av.iter().zip(&au).map(|(a, b)| (a.conj() * b).re).sum();
            let by_t: f64 = v.iter().zip(&out).map(|(a, b)| *a as f64 * *b as f64).sum();
            let error = (by_t - exact).abs() / exact.abs();
            eprintln!("{what}: <v, T u> against direct sums {error:.2e}");
            assert!(error <= 2e-3, "{what}: <v, T u> {error:.2e}");
        }
    }
}
