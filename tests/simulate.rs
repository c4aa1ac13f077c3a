//! Phantom simulation against independent references: closed forms and fine numerical
//! integration for the analytic projections, the GPU operator for the detector and angle
//! conventions, the Poisson sampler's moments and probabilities, and `lamino simulate`.

mod common;

use lamino::Tilt;
use std::f64::consts::PI;

use common::ctx;
use lamino::geometry::Geometry;
use lamino::io::{normalize, read_dxchange};
use lamino::metrics::nan_max;
use lamino::operator::{Apply, LaminoOperator, OperatorOptions};
use lamino::random::SplitMix64;
use lamino::simulate::{
    blobs, chip, detector_frame, poisson, project, rasterize, shepp, Cuboid, Ellipsoid, Gaussian,
    Phantom, Primitive,
};
use num_complex::Complex32;

const TILT: Tilt = Tilt::from_degrees(20.0);

fn uniform(rng: &mut SplitMix64, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.next_f64()
}

fn unit_vector(rng: &mut SplitMix64) -> [f64; 3] {
    loop {
        let v = [0; 3].map(|_| uniform(rng, -1.0, 1.0));
        let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        if n > 0.1 && n <= 1.0 {
            return v.map(|c| c / n);
        }
    }
}

/// Midpoint rule of the primitive's value along `origin + s dir`, s in [-reach, reach]. For an
/// indicator function the error is at most one step per boundary crossing times the value.
fn numeric_line_integral(
    p: &Primitive,
    origin: [f64; 3],
    dir: [f64; 3],
    reach: f64,
    step: f64,
) -> f64 {
    let n = (2.0 * reach / step).ceil() as usize;
    (0..n)
        .map(|i| {
            let s = -reach + (i as f64 + 0.5) * step;
            p.value_at([0, 1, 2].map(|k| origin[k] + s * dir[k]))
        })
        .sum::<f64>()
        * step
}

#[test]
fn gaussian_blob_projection_equals_the_closed_form() {
    let mut rng = SplitMix64::new(11);
    let theta: Vec<f64> = (0..5).map(|_| 2.0 * PI * rng.next_f64()).collect();
    let g = Geometry {
        deth: 14,
        theta,
        ..Geometry::cube(16, 5, TILT)
    };
    let (sigma, r0, amp) = (1.7, [2.0, -1.5, 1.0], 0.3);
    let phantom = Phantom {
        primitives: vec![Primitive::Gaussian(Gaussian {
            centre: r0,
            sigma,
            amplitude: amp,
        })],
    };
    let got = project(&phantom, &g);
    let mut worst = 0.0f64;
    for (t, &theta) in g.theta.iter().enumerate() {
        // Written out again rather than calling detector_frame: this pins the convention.
        let (ct, st, cp, sp) = (
            theta.cos(),
            theta.sin(),
            g.tilt.phi().cos(),
            g.tilt.phi().sin(),
        );
        let e1 = [ct, st, 0.0];
        let e2 = [st * cp, -ct * cp, sp];
        let c1: f64 = (0..3).map(|k| e1[k] * r0[k]).sum();
        let c2: f64 = (0..3).map(|k| e2[k] * r0[k]).sum();
        for v in 0..g.deth {
            for w in 0..g.detw {
                let (su, sv) = (w as f64 - 8.0, v as f64 - 7.0);
                let expect = amp
                    * (2.0 * PI).sqrt()
                    * sigma
                    * (-((su - c1).powi(2) + (sv - c2).powi(2)) / (2.0 * sigma * sigma)).exp();
                let p = got[(t * g.deth + v) * g.detw + w] as f64;
                worst = worst.max((p - expect).abs());
            }
        }
    }
    let peak = amp * (2.0 * PI).sqrt() * sigma;
    eprintln!("Gaussian closed form: max abs error {worst:.2e} (peak {peak:.3})");
    assert!(worst < 1e-6 * peak, "max error {worst:.2e}");
}

#[test]
fn ellipsoid_chords_match_numerical_integration() {
    let mut rng = SplitMix64::new(12);
    let (mut worst, mut hits) = (0.0f64, 0);
    for _ in 0..60 {
        let axes = [0; 3].map(|_| uniform(&mut rng, 0.5, 3.0));
        let e = Primitive::Ellipsoid(Ellipsoid {
            centre: [0; 3].map(|_| uniform(&mut rng, -5.0, 5.0)),
            semi_axes: axes,
            angle: uniform(&mut rng, -PI, PI),
            value: uniform(&mut rng, -2.0, 2.0),
        });
        let Primitive::Ellipsoid(ell) = e else {
            unreachable!()
        };
        let big = axes.iter().cloned().fold(0.0, nan_max);
        // Rays through points of the ellipsoid's bounding box (in its own rotated frame): some
        // miss, some graze, most cross.
        let q = [0, 1, 2].map(|k| uniform(&mut rng, -1.1, 1.1) * axes[k]);
        let (sa, ca) = ell.angle.sin_cos();
        let origin = [
            ell.centre[0] + ca * q[0] - sa * q[1],
            ell.centre[1] + sa * q[0] + ca * q[1],
            ell.centre[2] + q[2],
        ];
        let dir = unit_vector(&mut rng);
        let step = 1e-4 * big;
        let analytic = e.line_integral(origin, dir);
        let numeric = numeric_line_integral(&e, origin, dir, 4.0 * big, step);
        let err = (analytic - numeric).abs();
        assert!(
            err <= 2.0 * step * ell.value.abs() + 1e-12,
            "{ell:?} ray {origin:?} + s {dir:?}: analytic {analytic} numeric {numeric}"
        );
        worst = worst.max(err / (2.0 * big * ell.value.abs()));
        hits += usize::from(analytic != 0.0);
    }
    eprintln!("ellipsoid chords: {hits}/60 rays hit, max error {worst:.2e} of the longest chord");
    assert!(
        hits > 20 && hits < 60,
        "{hits} of 60 rays hit: the test rays are not varied enough"
    );
}

#[test]
fn box_chords_match_numerical_integration_including_axis_parallel_rays() {
    let mut rng = SplitMix64::new(13);
    let mut hits = 0;
    for i in 0..60 {
        let half_size = [0; 3].map(|_| uniform(&mut rng, 0.5, 3.0));
        let b = Cuboid {
            centre: [0; 3].map(|_| uniform(&mut rng, -5.0, 5.0)),
            half_size,
            value: uniform(&mut rng, 0.1, 2.0),
        };
        let p = Primitive::Cuboid(b);
        let big = half_size.iter().cloned().fold(0.0, nan_max);
        let origin: [f64; 3] = [0, 1, 2].map(|k| b.centre[k] + uniform(&mut rng, -1.2, 1.2) * big);
        // Every fourth ray runs along an axis, exercising the parallel-slab branch.
        let dir = if i % 4 == 0 {
            let mut d = [0.0; 3];
            d[i / 4 % 3] = 1.0;
            d
        } else {
            unit_vector(&mut rng)
        };
        let step = 1e-4 * big;
        let analytic = p.line_integral(origin, dir);
        let numeric = numeric_line_integral(&p, origin, dir, 6.0 * big, step);
        assert!(
            (analytic - numeric).abs() <= 2.0 * step * b.value + 1e-12,
            "{b:?} ray {origin:?} + s {dir:?}: analytic {analytic} numeric {numeric}"
        );
        hits += usize::from(analytic != 0.0);
    }
    assert!(hits > 15 && hits < 60, "{hits} of 60 rays hit");
}

#[test]
fn volumes_sample_the_primitives_at_voxel_centres() {
    let n = 32;
    let g = Geometry::cube(n, 1, TILT);
    let s = n as f64 / 2.0;
    // Shepp–Logan: the centre voxel lies in the outer two ellipsoids only (1 - 0.8).
    let sl = rasterize(&shepp(n), &g);
    let centre = (n / 2 * n + n / 2) * n + n / 2;
    assert!((sl[centre] as f64 - 0.2 / s).abs() < 1e-7, "{}", sl[centre]);
    assert_eq!(sl[0], 0.0);
    // Chip: faces on half-integers, so the voxel sum is exactly the sum of box volumes.
    let phantom = chip(n);
    let expect: f64 = phantom
        .primitives
        .iter()
        .map(|p| match p {
            Primitive::Cuboid(b) => b.value * b.half_size.iter().map(|h| 2.0 * h).product::<f64>(),
            _ => unreachable!("chip holds only boxes"),
        })
        .sum();
    let got: f64 = rasterize(&phantom, &g).iter().map(|&v| v as f64).sum();
    assert!((got - expect).abs() < 1e-5 * expect, "{got} vs {expect}");
}

#[test]
fn each_projection_conserves_the_mass_of_smooth_phantoms() {
    // Summed over the detector plane, a projection is the phantom's integral; for Gaussians
    // of sigma >= 1.6 voxels the pixel sum is that integral to ~1e-6.
    let n = 32;
    let phantom = blobs(n);
    let mass: f64 = phantom
        .primitives
        .iter()
        .map(|p| match p {
            Primitive::Gaussian(b) => b.amplitude * (2.0 * PI).powf(1.5) * b.sigma.powi(3),
            _ => unreachable!("blobs holds only Gaussians"),
        })
        .sum();
    let g = Geometry::cube(n, 6, TILT);
    let p = project(&phantom, &g);
    for frame in p.chunks(n * n) {
        let sum: f64 = frame.iter().map(|&v| v as f64).sum();
        assert!((sum - mass).abs() < 1e-5 * mass, "{sum} vs {mass}");
    }
}

/// The pinning test: the operator applied to the sampled blobs equals the analytic projection
/// divided by sqrt(n2 ntheta), per angle.
#[test]
fn the_operator_on_rasterised_blobs_matches_the_analytic_projection() {
    let n = 32;
    let phantom = blobs(n);
    for g in [Geometry::cube(n, 12, TILT), Geometry::cube(n, 6, Tilt::CT)] {
        let volume: Vec<Complex32> = rasterize(&phantom, &g)
            .into_iter()
            .map(|v| Complex32::new(v, 0.0))
            .collect();
        let op = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap();
        let lu = op
            .apply_host(ctx(), Apply::Forward, &[g.n0, g.n1, g.n2], &volume)
            .unwrap();
        let p = project(&phantom, &g);
        let scale = 1.0 / ((g.n2 * g.ntheta()) as f64).sqrt();
        let per_angle = g.deth * g.detw;
        let mut worst = 0.0f64;
        for t in 0..g.ntheta() {
            let (mut num, mut den) = (0.0f64, 0.0f64);
            for i in t * per_angle..(t + 1) * per_angle {
                let expect = p[i] as f64 * scale;
                num += (lu[i].re as f64 - expect).powi(2) + (lu[i].im as f64).powi(2);
                den += expect * expect;
            }
            let err = (num / den).sqrt();
            worst = worst.max(err);
            assert!(
                err < 1e-3,
                "phi {:.3} angle {t}: relative L2 {err:.2e}",
                g.tilt.phi()
            );
        }
        eprintln!(
            "blobs, phi {:.3}: worst per-angle relative L2 {worst:.2e}",
            g.tilt.phi()
        );
    }
}

#[test]
fn detector_frame_is_orthonormal_and_right_handed() {
    let (e1, e2, b) = detector_frame(0.7, TILT.phi());
    let dot = |a: [f64; 3], c: [f64; 3]| a[0] * c[0] + a[1] * c[1] + a[2] * c[2];
    for (a, c, expect) in [
        (e1, e1, 1.0),
        (e2, e2, 1.0),
        (b, b, 1.0),
        (e1, e2, 0.0),
        (e1, b, 0.0),
        (e2, b, 0.0),
    ] {
        assert!((dot(a, c) - expect).abs() < 1e-15);
    }
    // At phi = pi/2 (tomography) rays are horizontal and detector rows run along z.
    let (_, e2, b) = detector_frame(0.3, Tilt::CT.phi());
    assert!(b[2].abs() < 1e-15 && (e2[2] - 1.0).abs() < 1e-15);
}

#[test]
fn poisson_draws_have_the_right_mean_variance_and_probabilities() {
    const N: usize = 100_000;
    let mut rng = SplitMix64::new(14);
    for mean in [0.5, 3.0, 9.99, 10.0, 25.0, 1000.0, 1e6] {
        let draws: Vec<f64> = (0..N).map(|_| poisson(&mut rng, mean)).collect();
        let m = draws.iter().sum::<f64>() / N as f64;
        let var = draws.iter().map(|k| (k - m) * (k - m)).sum::<f64>() / (N - 1) as f64;
        // Five standard errors: Var(mean) = mean/N, Var(sample variance) ~ (mean + 2 mean^2)/N.
        let (tol_m, tol_v) = (
            5.0 * (mean / N as f64).sqrt(),
            5.0 * ((mean + 2.0 * mean * mean) / N as f64).sqrt(),
        );
        eprintln!("Poisson({mean}): mean {m:.4} variance {var:.4}");
        assert!((m - mean).abs() < tol_m, "mean {mean}: sample mean {m}");
        assert!(
            (var - mean).abs() < tol_v,
            "mean {mean}: sample variance {var}"
        );
        if mean <= 25.0 {
            // Frequencies of single values against the pmf (both samplers: inversion and PTRS).
            let mut pk = (-mean).exp();
            for k in 0..(2.0 * mean) as usize + 3 {
                if k > 0 {
                    pk *= mean / k as f64;
                }
                let freq = draws.iter().filter(|&&d| d == k as f64).count() as f64 / N as f64;
                let tol = 5.0 * (pk * (1.0 - pk) / N as f64).sqrt() + 1e-4;
                assert!(
                    (freq - pk).abs() < tol,
                    "mean {mean}, k {k}: {freq} vs {pk}"
                );
            }
        }
    }
}

#[test]
fn lamino_simulate_writes_a_scan_that_normalises_back_to_the_projections() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("chip.h5");
    let run = |args: &[&str]| {
        common::process::lamino_command()
            .arg("simulate")
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&[
        "--phantom",
        "chip",
        "--size",
        "16",
        "--angles",
        "8",
        "--tilt-deg",
        "20",
        "--photons",
        "1e5",
        "--seed",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = read_dxchange(&out).unwrap();
    let g = Geometry::cube(16, 8, TILT);
    assert_eq!(s.data.shape, [8, 16, 16]);
    assert!((s.tilt.unwrap().phi() - TILT.phi()).abs() < 1e-12);
    for (a, b) in s.theta.iter().zip(&g.theta) {
        assert!((a - b).abs() < 1e-12);
    }
    assert_eq!(s.truth.unwrap().values, rasterize(&chip(16), &g));
    let n = normalize(&s.data, &s.flats, &s.darks).unwrap();
    assert_eq!(n.clamped, 0);
    // Poisson noise: -ln(I/I0) - P has standard deviation 1/sqrt(I0 e^-P) (delta method), so the
    // standardised residuals should have RMS near 1 and no outlier beyond 5.5.
    let p = project(&chip(16), &g);
    let z: Vec<f64> = n
        .projections
        .values
        .iter()
        .zip(&p)
        .map(|(&a, &b)| (a as f64 - b as f64) * (1e5 * (-(b as f64)).exp()).sqrt())
        .collect();
    let rms = (z.iter().map(|v| v * v).sum::<f64>() / z.len() as f64).sqrt();
    let worst = z.iter().fold(0.0f64, |m, v| nan_max(m, v.abs()));
    eprintln!("simulate chip: standardised residual RMS {rms:.3}, max {worst:.2}");
    assert!(
        (0.93..1.07).contains(&rms) && worst < 5.5,
        "RMS {rms}, max {worst}"
    );

    let o = run(&[
        "--phantom",
        "chip",
        "--size",
        "15",
        "--angles",
        "8",
        "--tilt-deg",
        "20",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("n0 = 15"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A sample that moved: the shifts are the jitter's normal draws (their RMS) plus the drift's
/// ramp (exact), and a projection shifted by whole pixels is the still one moved by them,
/// bit for bit where both see the detector.
#[test]
fn a_moving_sample_projects_each_projection_where_it_landed() {
    use lamino::simulate::Motion;
    let jitter = Motion {
        jitter_px: 2.0,
        drift_px: 0.0,
        seed: 5,
    }
    .shifts(400);
    for axis in 0..2 {
        let rms = (jitter.iter().map(|s| s[axis] * s[axis]).sum::<f64>() / 400.0).sqrt();
        assert!(
            (1.8..2.2).contains(&rms),
            "jitter RMS {rms} along axis {axis}"
        );
    }
    let drift = Motion {
        jitter_px: 0.0,
        drift_px: 3.0,
        seed: 5,
    }
    .shifts(4);
    assert_eq!(drift, [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]);
    assert!(Motion::STILL.shifts(4).is_empty());
    let g = Geometry::cube(16, 3, TILT);
    let (du, dv) = (2usize, 3usize);
    let moved = Geometry {
        shifts: vec![[0.0, 0.0], [du as f64, dv as f64], [0.0, 0.0]],
        ..g.clone()
    };
    let (still, shifted) = (project(&chip(16), &g), project(&chip(16), &moved));
    let n = 16;
    for t in 0..3 {
        for v in 0..n {
            for w in 0..n {
                let got = shifted[(t * n + v) * n + w];
                let want = match t {
                    1 if v < dv || w < du => continue,
                    1 => still[(t * n + v - dv) * n + w - du],
                    _ => still[(t * n + v) * n + w],
                };
                assert_eq!(got.to_bits(), want.to_bits(), "t {t}, row {v}, column {w}");
            }
        }
    }
}
