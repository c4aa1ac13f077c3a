//! Thin slabs and x/y regions of interest (issue 28): a volume that is a box of the detector's
//! default volume, reconstructed alone, against the same box of the full reconstruction, on
//! flat phantoms whose material lies inside the box; a slab cut to its detector rows and a
//! region of interest cut to its detector columns against the same box on the whole detector;
//! and the command line's `--slab`,
//! `--lamino-start-row`/`--lamino-end-row` and `--roi`.

mod common;

use lamino::Tilt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use common::ctx;
use lamino::geometry::{Geometry, VolumeBox};
use lamino::params::AdmmParams;
use lamino::recon::{Reconstruction, Reconstructor};
use lamino::scan::Projections;
use lamino::simulate::{project, rasterize, Cuboid, Phantom, PhantomKind, Primitive};

const N: usize = 16;

/// A 30 degree laminographic scan of `phantom` in the default `N`^3 volume, `N` angles, with
/// analytic line integrals.
fn scan(phantom: &Phantom) -> Projections {
    let g = Geometry::cube(N, N, Tilt::from_phi(120f64.to_radians()));
    let data = project(phantom, &g);
    Projections::new(g, data).unwrap()
}

/// The box `b` of a volume of geometry `g`.
fn crop(volume: &[f32], g: &Geometry, b: &VolumeBox) -> Vec<f32> {
    let mut out = Vec::new();
    for z in b.z.clone() {
        for y in b.y.clone() {
            let row = (z * g.n1 + y) * g.n2;
            out.extend_from_slice(&volume[row + b.x.start..row + b.x.end]);
        }
    }
    out
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y) as f64 * (x - y) as f64)
        .sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// The truth of `phantom` in the box `b` of a volume of geometry `g`, which holds all the
/// material: the truth is zero outside it.
fn truth_in_box(phantom: &Phantom, g: &Geometry, b: &VolumeBox) -> Vec<f32> {
    let truth = rasterize(phantom, g);
    let inside = crop(&truth, g, b);
    let mass = |v: &[f32]| v.iter().map(|x| x.abs() as f64).sum::<f64>();
    let outside = mass(&truth) - mass(&inside);
    assert!(outside == 0.0, "the phantom has {outside} outside the box");
    inside
}

/// `p` reconstructed with `params`, and the seconds it took.
fn reconstruct(p: &Projections, params: AdmmParams) -> (Reconstruction, f64) {
    let start = Instant::now();
    let r = Reconstructor::new(ctx()).params(params).run(p).unwrap();
    (r, start.elapsed().as_secs_f64())
}

/// A box reconstructed alone against the same box of the full volume.
struct BoxVsFull {
    /// Relative L2 distance of the box alone from the full volume's box.
    agree: f64,
    /// What the full volume holds outside the box (where the truth is zero), relative to its
    /// norm inside: the freedom the box alone does not have.
    outside: f64,
    /// Relative L2 distances to the truth of the box alone and of the full volume's box.
    alone_err: f64,
    full_err: f64,
    /// The TV weights of the box alone and of the full volume.
    weights: [f64; 2],
}

/// The boxes `boxes` (each holding all the material) of the `N`^3 scan of `phantom`, each
/// reconstructed alone, against the same box of the full volume (reconstructed once); `what`
/// names the boxes in the printout.
fn boxes_alone_and_in_full(what: &str, phantom: &Phantom, boxes: &[VolumeBox]) -> Vec<BoxVsFull> {
    let p = scan(phantom);
    let g = p.geometry().clone();
    let (full, full_s) = reconstruct(&p, AdmmParams::default());
    eprintln!(
        "full {N}^3: {} iterations ({:?}) in {full_s:.2} s, TV weight {:.4e}, plan device bytes \
         {}",
        full.reports.len(),
        full.stop,
        full.regularisation.tv_weight,
        full.plan.device_bytes
    );
    let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>();
    boxes
        .iter()
        .map(|b| {
            let truth = truth_in_box(phantom, &g, b);
            let (alone, alone_s) =
                reconstruct(&p.clone().with_volume(b).unwrap(), AdmmParams::default());
            assert_eq!(
                [alone.geometry.n0, alone.geometry.n1, alone.geometry.n2],
                [b.z.len(), b.y.len(), b.x.len()]
            );
            let inside = crop(&full.volume, &g, b);
            let r = BoxVsFull {
                agree: rel_l2(&alone.volume, &inside),
                outside: ((norm(&full.volume) - norm(&inside)) / norm(&inside)).sqrt(),
                alone_err: rel_l2(&alone.volume, &truth),
                full_err: rel_l2(&inside, &truth),
                weights: [
                    alone.regularisation.tv_weight,
                    full.regularisation.tv_weight,
                ],
            };
            eprintln!(
                "{what} {b:?}: {} iterations ({:?}) in {alone_s:.2} s, TV weight {:.4e}, plan \
                 device bytes {}; alone vs the full volume's: rel. L2 {:.3e}; vs the truth: \
                 alone {:.3e}, full {:.3e}; the full volume outside: {:.3e} of its norm inside",
                alone.reports.len(),
                alone.stop,
                alone.regularisation.tv_weight,
                alone.plan.device_bytes,
                r.agree,
                r.alone_err,
                r.full_err,
                r.outside
            );
            r
        })
        .collect()
}

/// A box of the phantom.
fn cuboid(centre: [f64; 3], half_size: [f64; 3], value: f64) -> Primitive {
    Primitive::Cuboid(Cuboid {
        centre,
        half_size,
        value,
    })
}

/// The chip (a flat sample, z within [-0.3, 0.2] of the half side: planes 5 to 9 of 16)
/// reconstructed in the slabs of planes 4:12 and 2:14 alone and as part of the full cube. A
/// slab alone solves the full volume's problem restricted to it (the same data and TV weight)
/// but for two freedoms: the full volume's, to put values outside the slab (laminography's
/// missing cone smears the chip along z); and the slab's, whose face planes are free where the
/// full volume's TV sees their jump to the planes beyond. Both fade as the faces move away from
/// the sample, so the slab with the wider margin is the closer to the full volume's, and each is
/// as close to the truth as the full volume's slab.
#[test]
fn a_slab_reconstructed_alone_matches_the_same_slab_of_the_full_volume() {
    let slabs = [4..12, 2..14].map(|z| VolumeBox {
        z,
        y: 0..N,
        x: 0..N,
    });
    let r = boxes_alone_and_in_full("slab", &PhantomKind::Chip.build(N), &slabs);
    // Measured at 16^3 (stopping on convergence): 0.165 apart for planes 4:12 and 0.056 for
    // 2:14, the full volume holding 1.6e-2 and 1.1e-2 of its norm outside; the slabs alone
    // 0.666 and 0.645 from the truth, the full volume's 0.647.
    assert!(
        r[1].agree <= 0.5 * r[0].agree,
        "wide margin {:.3e} vs narrow {:.3e}",
        r[1].agree,
        r[0].agree
    );
    assert!(r[1].agree <= 0.1, "{:.3e}", r[1].agree);
    for s in &r {
        assert!(s.weights[0] == s.weights[1], "{:?}", s.weights);
        assert!(
            s.alone_err <= 1.05 * s.full_err,
            "slab {:.3e} vs full {:.3e}",
            s.alone_err,
            s.full_err
        );
    }
}

/// An x/y region of interest (columns 3:11, rows 6:14 of 16) holding a small flat sample, zero
/// elsewhere: reconstructed alone and as part of the full cube. The region is narrower than the
/// detector, so its operator's normalisation weighs the data term twice as much, and its TV
/// weight follows (the weight's width is the operator's): it solves the full volume's problem
/// restricted to it, and the two differ by about what the full volume puts outside the region
/// (at most 2.5 times its norm there relative to inside), the region as close to the truth as
/// the full volume's within 5 %.
#[test]
fn an_xy_region_of_interest_matches_the_same_box_of_the_full_volume() {
    let b = VolumeBox {
        z: 0..N,
        y: 6..14,
        x: 3..11,
    };
    // Boxes inside the region of interest (centred coordinates x -5..3, y -2..6, whole planes
    // 0..16 in z), with half-integer faces so that rasterising them is exact.
    let phantom = Phantom {
        primitives: vec![
            cuboid([-1.5, 1.5, -0.5], [2.0, 2.0, 1.0], 0.5),
            cuboid([0.5, 2.5, 0.5], [1.0, 1.0, 1.0], 2.0),
        ],
    };
    let r = &boxes_alone_and_in_full("region", &phantom, std::slice::from_ref(&b))[0];
    // Measured at 16^3 (stopping on convergence): 6.2e-3 apart, the full volume holding
    // 2.65e-3 of its norm outside the region, the region alone 0.1293 from the truth and the
    // full volume's 0.1289 (3.0e-2 apart when the box took the full volume's weight).
    let [alone, full] = r.weights;
    assert!(
        (alone * b.x.len() as f64 - full * N as f64).abs() <= 1e-12 * full * N as f64,
        "TV weights {alone:e} (region) and {full:e} (full)"
    );
    assert!(
        r.agree <= 2.5 * r.outside,
        "region vs full: {:.3e} (outside {:.3e})",
        r.agree,
        r.outside
    );
    assert!(
        r.alone_err <= 1.05 * r.full_err,
        "roi {:.3e} vs full {:.3e}",
        r.alone_err,
        r.full_err
    );
}

/// The operator applied to `volume` in geometry `g` (the CPU reference), as real and imaginary
/// parts.
fn project_cpu(g: &Geometry, volume: &[num_complex::Complex32]) -> Vec<num_complex::Complex32> {
    lamino::reference::CpuOperator::new(g, 2).forward(volume)
}

/// A random volume of `g`'s shape smoothed along y and x by the binomial filter [1 4 6 4 1] / 16
/// (cyclically): a sample's features, every frequency present but the highest damped, as a
/// detector's point spread damps them (the operator clamps the (x, y) frequencies it samples
/// beyond Nyquist, 0.5 cycles per voxel, so a volume made of them has no sharp shadow).
fn smooth_random(g: &Geometry) -> Vec<num_complex::Complex32> {
    let noise = lamino::random::SplitMix64::new(7).complex_uniform(g.volume_len());
    let mut v: Vec<f32> = noise.iter().map(|c| c.re).collect();
    let taps = [1.0, 4.0, 6.0, 4.0, 1.0].map(|t: f32| t / 16.0);
    for (stride, n) in [(g.n2, g.n1), (1, g.n2)] {
        let before = v.clone();
        for (i, out) in v.iter_mut().enumerate() {
            let j = i / stride % n;
            *out = taps
                .iter()
                .enumerate()
                .map(|(k, t)| {
                    let jj = (j + n + k - 2) % n;
                    t * before[i - j * stride + jj * stride]
                })
                .sum();
        }
    }
    // Tapered to zero at the volume's faces: a sample inside the box, not cut by it.
    let taper = |j: usize, n: usize| (std::f32::consts::PI * (j as f32 + 0.5) / n as f32).sin();
    v.iter()
        .enumerate()
        .map(|(i, &x)| {
            let (z, y, w) = (i / (g.n1 * g.n2), i / g.n2 % g.n1, i % g.n2);
            let t = taper(z, g.n0) * taper(y, g.n1) * taper(w, g.n2);
            num_complex::Complex32::new(x * t * t, 0.0)
        })
        .collect()
}

/// A slab's projections lie on the detector rows it is cut to ([`Geometry::shadow_rows`]: the
/// rows its voxels project onto at any angle, plus the gridding kernel's reach): the operator
/// applied to a smooth random slab on the cut detector equals the same rows of its projections
/// on the whole detector but for what the cut drops, which wraps around onto the rows kept. In
/// plain CT that is nothing (every voxel lands on a row); tilted, the operator's projection
/// (each voxel a point, band-limited to the detector's sampling, so landing between rows with
/// `1/distance` tails) spreads a few percent of a slab's energy over every row, which the cut
/// loses: the reconstructions barely differ for it
/// (`a_slab_cut_to_its_rows_reconstructs_as_on_the_whole_detector`). The cut detector is as small as the geometry says: the slab of 8 planes in a
/// 32 x 32 x-y extent spreads over `8 sin(phi) + 32 sqrt(2) |cos(phi)|` rows (at theta = 45
/// degrees), plus the reach (2) and a row each side: 14 of 64 rows at 0 degrees (CT), 30 at 20
/// and 36 at 30 degrees.
#[test]
fn a_slab_is_projected_onto_the_rows_it_is_cut_to() {
    let theta: Vec<f64> = (0..24).map(|i| (i as f64 * 15.0).to_radians()).collect();
    for (tilt, want_rows) in [(0.0, 14), (20.0, 30), (30.0, 36)] {
        let g = Geometry::for_detector(64, 32, theta.clone(), Tilt::from_degrees(tilt));
        let slab = g
            .with_subvolume(&VolumeBox {
                z: 28..36,
                ..VolumeBox::full(&g)
            })
            .unwrap();
        let rows = slab.shadow_rows();
        let cut = slab.with_detector_rows(rows.clone()).unwrap();
        let volume = smooth_random(&slab);
        let whole = project_cpu(&slab, &volume);
        let part = project_cpu(&cut, &volume);
        let (mut diff, mut kept, mut away) = (0.0f64, 0.0f64, 0.0f64);
        for (t, frame) in whole.chunks(slab.deth * slab.detw).enumerate() {
            for (r, row) in frame.chunks(slab.detw).enumerate() {
                let energy: f64 = row.iter().map(|c| c.norm_sqr() as f64).sum();
                if !rows.contains(&r) {
                    away += energy;
                    continue;
                }
                kept += energy;
                let at = (t * cut.deth + r - rows.start) * cut.detw;
                diff += row
                    .iter()
                    .zip(&part[at..at + cut.detw])
                    .map(|(a, b)| (a - b).norm_sqr() as f64)
                    .sum::<f64>();
            }
        }
        let (diff, away) = ((diff / kept).sqrt(), (away / kept).sqrt());
        eprintln!(
            "tilt {tilt}: rows {rows:?} ({} of {}), cut vs whole detector rel. L2 {diff:.2e}, \
             energy cut away {away:.2e}",
            rows.len(),
            slab.deth
        );
        assert!(rows.len() == want_rows, "tilt {tilt}: {rows:?}");
        // What is cut away wraps around onto the rows kept, and no more differs.
        assert!(
            diff <= 1.1 * away + 1e-6,
            "tilt {tilt}: {diff:.3e} ({away:.3e} cut)"
        );
        // Measured: 3.4e-5 at 0 degrees, 5.7e-2 at 20 and 2.5e-2 at 30.
        let limit = if tilt == 0.0 { 1e-4 } else { 0.1 };
        assert!(away <= limit, "tilt {tilt}: {away:.3e}");
    }
}

/// The box `b` of a scan of `phantom` (24 angles 15 degrees apart at a 20 degree tilt on a
/// `deth x detw` detector; the box holds all the material) on the detector cut to the box's
/// shadow, which must be `cut_detector` (`deth x detw`) as `--slab` and `--roi` cut it, against
/// the same box on the whole detector, 20 iterations each: the two reconstructions differ by
/// the part of the projections the cut drops (5 % at most), and the cut one is as close to the
/// truth (within 5 %). Returns the cut geometry.
fn cut_reconstructs_as_the_whole_detector(
    [deth, detw]: [usize; 2],
    phantom: &Phantom,
    b: &VolumeBox,
    cut_detector: [usize; 2],
) -> Geometry {
    const ITERATIONS: usize = 20;
    let theta: Vec<f64> = (0..24).map(|i| (i as f64 * 15.0).to_radians()).collect();
    let g = Geometry::for_detector(deth, detw, theta, Tilt::from_phi(110f64.to_radians()));
    let p = Projections::new(g.clone(), project(phantom, &g)).unwrap();
    let truth = truth_in_box(phantom, &g, b);
    let cut = p.clone().with_volume(b).unwrap();
    let cg = cut.geometry().clone();
    assert!(
        [cg.deth, cg.detw] == cut_detector,
        "{} x {} for {cut_detector:?}",
        cg.deth,
        cg.detw
    );
    let whole = Projections::new(g.with_subvolume(b).unwrap(), p.values().to_vec()).unwrap();
    let ((on_cut, cut_s), (on_whole, whole_s)) = (
        reconstruct(&cut, AdmmParams::exactly(ITERATIONS)),
        reconstruct(&whole, AdmmParams::exactly(ITERATIONS)),
    );
    let (agree, cut_err, whole_err) = (
        rel_l2(&on_cut.volume, &on_whole.volume),
        rel_l2(&on_cut.volume, &truth),
        rel_l2(&on_whole.volume, &truth),
    );
    eprintln!(
        "{ITERATIONS} iterations: box {b:?} on the cut {} x {} detector {cut_s:.2} s, on all \
         {deth} x {detw} {whole_s:.2} s; apart {agree:.3e}; vs the truth: cut {cut_err:.3e}, \
         whole {whole_err:.3e}",
        cg.deth, cg.detw
    );
    assert!(agree <= 5e-2, "{agree:.3e}");
    assert!(
        cut_err <= 1.05 * whole_err,
        "{cut_err:.3e} vs {whole_err:.3e}"
    );
    cg
}

/// A slab cut to its detector rows (what `--slab` does) against the same slab on the whole
/// detector (what it did before): a flat sample (two boxes, planes 21 to 26 of 48, inside the
/// field of view laterally) in the slab of planes 20:28, whose shadow is 26 of the 48 rows. The
/// two reconstructions differ by the part of the projections the cut drops (the operator's
/// band-limited projection of the tilted slab spreads a little over every row, see
/// `a_slab_is_projected_onto_the_rows_it_is_cut_to`).
#[test]
fn a_slab_cut_to_its_rows_reconstructs_as_on_the_whole_detector() {
    let phantom = Phantom {
        primitives: vec![
            cuboid([0.5, 0.5, -0.5], [8.0, 6.0, 2.0], 1.0),
            cuboid([-3.5, 2.5, 0.5], [2.0, 2.0, 1.0], 2.0),
        ],
    };
    let b = VolumeBox {
        z: 20..28,
        y: 0..24,
        x: 0..24,
    };
    cut_reconstructs_as_the_whole_detector([48, 24], &phantom, &b, [26, 24]);
}

/// An x/y region of interest cut to its detector columns (what `--roi` does) against the same
/// region on the whole detector: a small sample (two boxes inside columns and rows 16:32 of the
/// default 48 x 48 plane) in the region 16:32 x 16:32. Over every angle the region's shadow is
/// its diagonal around the axis, 16 sqrt(2) columns, plus the kernel's reach (2) and a column
/// each side: 30 of the 48 columns, the axis moving with the cut.
#[test]
fn a_region_of_interest_cut_to_its_columns_reconstructs_as_on_the_whole_detector() {
    let phantom = Phantom {
        primitives: vec![
            cuboid([0.5, 0.5, -0.5], [2.0, 5.0, 4.0], 1.0),
            cuboid([-1.5, -3.5, 2.5], [1.0, 2.0, 2.0], 2.0),
        ],
    };
    let b = VolumeBox {
        z: 0..16,
        y: 16..32,
        x: 16..32,
    };
    let cg = cut_reconstructs_as_the_whole_detector([16, 48], &phantom, &b, [16, 30]);
    assert!(
        cg.rotation_axis() == 24.0 - 9.0,
        "axis {}",
        cg.rotation_axis()
    );
}

fn lamino(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lamino"))
        .args(args)
        .arg("--allow-software-gpu")
        .output()
        .expect("run lamino")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `--slab`, its tomocupy aliases and `--roi` on the command line: the dry run's plan shows the
/// smaller volume and its offset, a run records them in report.json and writes a volume of that
/// shape, and boxes the kernels cannot take are refused naming the nearest valid one.
#[test]
fn the_command_line_reconstructs_the_box_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.h5");
    common::simulate_scan(&scan, "chip", 16);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let out = dir.path().join("rec");
    let run = |extra: &[&str]| {
        let mut args = vec!["reconstruct".to_string(), s(&scan), "--out".into(), s(&out)];
        args.extend(extra.iter().map(|a| a.to_string()));
        lamino(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let plan = |extra: &[&str]| {
        let o = run(&[extra, &["--dry-run"]].concat());
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (
            plan["volume"].clone(),
            plan["volume_offset"].clone(),
            plan["device_bytes"].as_u64().unwrap(),
        )
    };
    let (volume, offset, full_bytes) = plan(&[]);
    assert_eq!(volume, serde_json::json!([16, 16, 16]));
    assert_eq!(offset, serde_json::json!([0.0, 0.0, 0.0]));
    let (volume, offset, slab_bytes) = plan(&["--slab", "4:10"]);
    assert_eq!(volume, serde_json::json!([6, 16, 16]));
    assert_eq!(offset, serde_json::json!([-1.0, 0.0, 0.0]));
    assert!(slab_bytes < full_bytes, "{slab_bytes} vs {full_bytes}");
    let aliases = plan(&["--lamino-start-row", "4", "--lamino-end-row", "10"]);
    assert_eq!((aliases.0, aliases.1), (volume, offset));
    let (volume, offset, _) = plan(&["--roi", "2:14,6:16"]);
    assert_eq!(volume, serde_json::json!([16, 10, 12]));
    assert_eq!(offset, serde_json::json!([0.0, 3.0, 0.0]));
    // Refusals name the option and the nearest valid box.
    for (extra, expect) in [
        (vec!["--slab", "4:9"], "nearest valid range is 4:10"),
        (vec!["--slab", "4:6"], "minimum 4"),
        (vec!["--slab", "4:20"], "0:16"),
        (vec!["--roi", "2:14"], "X0:X1,Y0:Y1"),
        (vec!["--slab", "3:9", "--binning", "1"], "multiples of 2"),
        (vec!["--lamino-start-row", "4"], "--lamino-end-row"),
    ] {
        let o = run(&[&extra[..], &["--dry-run"]].concat());
        assert!(!o.status.success(), "{extra:?} was accepted");
        assert!(stderr(&o).contains(expect), "{extra:?}: {}", stderr(&o));
    }
    // A run: the volume has the slab's shape, the report its geometry and offset.
    let o = run(&["--slab", "4:10", "--iterations", "2", "--quiet"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let g = &report["reconstruction"]["geometry"];
    assert_eq!(
        [&g["n0"], &g["n1"], &g["n2"]],
        [6, 16, 16].map(serde_json::Value::from).each_ref()
    );
    assert_eq!(g["offset"], serde_json::json!([-1.0, 0.0, 0.0]));
    let volume = lamino::io::read_tiff_volume(&out.join("recon.tif")).unwrap();
    assert_eq!(volume.shape, [6, 16, 16]);
    // A region whose shadow is 14 of the 16 columns: the report's axis is the detector's column
    // as given; the geometry's own (the cut's columns) is named as such and is its `center`.
    let o = run(&[
        "--roi",
        "6:10,6:10",
        "--rotation-axis",
        "8.25",
        "--iterations",
        "2",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let rec = &report["reconstruction"];
    assert_eq!(rec["rotation_axis"], 8.25, "{rec}");
    assert_eq!(rec["geometry"]["detw"], 14, "{rec}");
    assert_eq!(rec["rotation_axis_in_geometry"], 6.25, "{rec}");
    assert_eq!(rec["geometry"]["center"], 6.25, "{rec}");
}
