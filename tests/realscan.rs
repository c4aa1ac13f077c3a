//! Scans as real instruments make them: the slab backprojection of the axis and tilt search
//! against its f64 reference, the search recovering a simulated scan's axis and tilt, the
//! reconstruction of a scan whose rotation axis is off centre, binning, and stripe removal.

mod common;

use std::path::Path;

use common::{ctx, new_context};
use lamino::metrics::rel_l2;
use lamino::params::Convergence;
use lamino::preprocess::{
    bin_projections, candidate_range, find_rotation_axis, grid, remove_stripes, score_candidates,
    slab_reference, Candidate, Slab, StripeRemoval,
};
use lamino::recon::input::projections_from_scan;
use lamino::recon::{Reconstruction, Reconstructor};
use lamino::scan::Projections;
use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};

/// The slab of 8 slices around the volume's centre (what the search chooses on these cube scans).
const CENTRAL: Slab = Slab {
    slices: 8,
    z_offset: 0.0,
};

/// A simulated scan's line integrals (flat/dark normalised, -log) with the rotation axis at
/// column `axis`; as read from the file, the geometry does not know it (DXchange records no axis).
fn scan(
    phantom: PhantomKind,
    size: usize,
    angles: usize,
    tilt_deg: f64,
    photons: Option<f64>,
    axis: Option<f64>,
) -> Projections {
    let s = simulated_scan(&ScanSpec {
        phantom,
        size,
        angles,
        tilt_deg,
        photons,
        seed: 3,
        rotation_axis: axis,
    })
    .unwrap();
    projections_from_scan(Path::new("simulated"), s.scan, None)
        .unwrap()
        .projections
}

#[test]
fn the_slab_backprojection_matches_its_f64_reference() {
    let p = scan(PhantomKind::Blobs, 24, 12, 30.0, None, Some(13.6));
    let slab = Slab {
        slices: 4,
        z_offset: 2.0,
    };
    // A candidate off the truth (so the slab is not just the truth), once at the scan's own
    // resolution and once binned by 2 (the candidate in unbinned columns); a second context whose
    // binding limit forces the angles into chunks of 5.
    let binned = bin_projections(&p, 2).unwrap();
    let chunked = new_context().with_max_binding_bytes(64 << 10);
    for (c, proj, binning) in [(ctx(), &p, 1), (ctx(), &binned, 2), (&chunked, &p, 1)] {
        let candidate = Candidate {
            rotation_axis: 12.9,
            tilt_deg: 31.5,
        };
        let gpu = score_candidates(c, proj, binning, &[candidate], &slab).unwrap();
        let reference = slab_reference(proj, binning, &candidate, &slab);
        let g = proj.geometry();
        let middle = slab.slices / 2 * g.n1 * g.n2;
        let reference_slice: Vec<f32> = reference[middle..middle + g.n1 * g.n2]
            .iter()
            .map(|&v| v as f32)
            .collect();
        let err = rel_l2(&gpu.previews[0], &reference_slice);
        eprintln!("binning {binning}: GPU slab vs f64 reference, rel. L2 {err:.2e}");
        assert!(err < 1e-4, "binning {binning}: rel. L2 {err:.2e}");
    }
}

/// Searches the axis (at a nominal tilt 0.7 degrees off) and then the tilt (at the axis found),
/// as a user would; returns (axis, tilt).
fn search(p: &Projections, true_axis: f64, nominal_tilt: f64, tilt_slab: Slab) -> (f64, f64) {
    let axes = candidate_range(true_axis.round() - 5.0, true_axis.round() + 5.0, 0.5).unwrap();
    let found = score_candidates(
        ctx(),
        p,
        1,
        &grid(&axes, &[nominal_tilt]).unwrap(),
        &CENTRAL,
    )
    .unwrap();
    let axis = found.refined.rotation_axis;
    let tilts = candidate_range(nominal_tilt - 2.5, nominal_tilt + 2.5, 0.25).unwrap();
    let found = score_candidates(ctx(), p, 1, &grid(&[axis], &tilts).unwrap(), &tilt_slab).unwrap();
    (axis, found.refined.tilt_deg)
}

#[test]
fn the_search_recovers_the_axis_and_tilt_of_a_noisy_chip() {
    let (axis, tilt) = (34.3, 25.3);
    let p = scan(PhantomKind::Chip, 64, 90, tilt, Some(1e4), Some(axis));
    let (a, t) = search(&p, axis, tilt + 0.7, CENTRAL);
    eprintln!("chip: axis {a:.3} (true {axis}), tilt {t:.3} deg (true {tilt})");
    assert!((a - axis).abs() < 0.5, "axis {a}");
    assert!((t - tilt).abs() < 0.5, "tilt {t}");
    let auto = find_rotation_axis(ctx(), &p, 1, tilt + 0.7, None, 0.0, None).unwrap();
    eprintln!(
        "chip: --rotation-axis auto {:.3} over {:?}",
        auto.rotation_axis, auto.range
    );
    assert!(
        (auto.rotation_axis - axis).abs() < 0.5,
        "{}",
        auto.rotation_axis
    );
}

#[test]
fn the_search_recovers_the_axis_and_tilt_of_a_noisy_shepp_logan() {
    // Shepp-Logan is symmetric about z = 0, where its ellipsoids' walls are vertical: a tilt
    // error (which smears along z) changes the central slab only to second order. Its tilt is
    // searched on a slab a quarter of the height up, and at 96^3: at 64^3 the tilt found on
    // different slabs scattered over 24.1-25.7 degrees (true 25.3), at 96^3 and 128^3 it is
    // within 0.15.
    let (axis, tilt) = (50.7, 25.3);
    let p = scan(PhantomKind::Shepp, 96, 128, tilt, Some(1e4), Some(axis));
    let quarter = Slab {
        slices: 8,
        z_offset: 24.0,
    };
    let (a, t) = search(&p, axis, tilt + 0.7, quarter);
    eprintln!("shepp: axis {a:.3} (true {axis}), tilt {t:.3} deg (true {tilt})");
    assert!((a - axis).abs() < 0.5, "axis {a}");
    assert!((t - tilt).abs() < 0.5, "tilt {t}");
    let small = scan(PhantomKind::Shepp, 64, 90, tilt, Some(1e4), Some(34.3));
    let auto = find_rotation_axis(ctx(), &small, 1, tilt, None, 0.0, None).unwrap();
    eprintln!("shepp 64^3: --rotation-axis auto {:.3}", auto.rotation_axis);
    assert!(
        (auto.rotation_axis - 34.3).abs() < 0.5,
        "{}",
        auto.rotation_axis
    );
}

/// The default reconstruction of `p`, with its iteration reports.
fn reconstruction(p: &Projections) -> Reconstruction {
    Reconstructor::new(ctx()).run(p).unwrap()
}

/// The default reconstruction's volume.
fn reconstruct(p: &Projections) -> Vec<f32> {
    reconstruction(p).volume
}

#[test]
fn an_off_centre_axis_reconstructs_like_a_centred_scan_when_given() {
    // The same blobs scanned with the axis on the centre column and 3.5 pixels to the right.
    // They stay inside both fields of view, so the two scans hold the same information and the
    // phase ramp makes the reconstructions agree to f32 rounding when the stopping rule fires at
    // the same iteration; a run that stops k iterations later moves by less than k times the
    // change tolerance (measured: 1.3e-6 at the same iteration, 1.6e-4 one apart, when the
    // residual was recomputed every outer iteration; 3.1e-5 at the same iteration with the
    // carried residual, which carries each run's rounding along: the bound is 1e-4). Smaller
    // scans of the blobs agree less well under a sub-pixel shift: the phase ramp shifts sampled
    // projections exactly only where they are band-limited, and at 16^3 the blobs reach the
    // detector's Nyquist frequency (axis 0.25 / 0.5 px off: 1.85e-2 / 3.1e-2; 1 / 2 px off:
    // 2.6e-7 / 8.1e-6; docs/benchmarks.md), so this test keeps 32^3 and a half-pixel part. A
    // chip wider than the narrower half of the shifted field of view differs where one scan sees
    // it and the other does not (measured 0.205 with the axis given, 0.663 ignored, at 32^3).
    let (n, shift) = (32usize, 3.5);
    let centred = scan(PhantomKind::Blobs, n, n, 30.0, None, None);
    let off = scan(
        PhantomKind::Blobs,
        n,
        n,
        30.0,
        None,
        Some(n as f64 / 2.0 + shift),
    );
    // The scans themselves are far apart (measured 0.791), so a reconstruction that ignored the
    // axis would be too (measured 0.781 when this test also reconstructed the shifted scan
    // ignoring it: 128 iterations, half the test's time).
    let scans_apart = rel_l2(off.values(), centred.values());
    let reference = reconstruction(&centred);
    let given = reconstruction(&off.with_rotation_axis(n as f64 / 2.0 + shift).unwrap());
    let iterations_apart = given.reports.len().abs_diff(reference.reports.len());
    let with_axis = rel_l2(&given.volume, &reference.volume);
    eprintln!(
        "axis {shift} px off: rel. L2 to the centred scan's reconstruction {with_axis:.2e} with \
         the axis given ({} and {} iterations); the scans {scans_apart:.3} apart",
        given.reports.len(),
        reference.reports.len()
    );
    let bound = 1e-4 + iterations_apart as f64 * Convergence::DEFAULT.change;
    assert!(with_axis < bound, "{with_axis} (bound {bound})");
    assert!(scans_apart > 0.5, "{scans_apart}");
}

#[test]
fn binning_by_two_reconstructs_the_half_resolution_scan_with_values_per_larger_voxel() {
    // The blobs preset is one physical object at every size, so a 32^2 scan binned by 2 sees
    // what a 16^2 scan sees, and its 16^3 reconstruction holds attenuation per (twice as large)
    // voxel: twice the 32^3 values, i.e. the 16^3 truth.
    let fine = scan(PhantomKind::Blobs, 32, 16, 30.0, None, None);
    let binned = bin_projections(&fine, 2).unwrap();
    let g = binned.geometry();
    assert_eq!((g.n0, g.n1, g.n2, g.deth, g.detw), (16, 16, 16, 16, 16));
    // The axis (column 16 of 32) lies on binned column 7.75 (binned pixel j is centred on 2j+0.5).
    assert_eq!(g.center, Some(7.75));
    let coarse = scan(PhantomKind::Blobs, 16, 16, 30.0, None, None);
    let truth = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Blobs,
        size: 16,
        angles: 16,
        tilt_deg: 30.0,
        photons: None,
        seed: 0,
        rotation_axis: None,
    })
    .unwrap()
    .scan
    .truth
    .unwrap()
    .values;
    let (from_binned, from_coarse) = (reconstruct(&binned), reconstruct(&coarse));
    let (e_binned, e_coarse) = (rel_l2(&from_binned, &truth), rel_l2(&from_coarse, &truth));
    let between = rel_l2(&from_binned, &from_coarse);
    let sum = |v: &[f32]| v.iter().map(|&x| x as f64).sum::<f64>();
    let (mass_binned, mass_coarse) = (
        sum(&from_binned) / sum(&truth),
        sum(&from_coarse) / sum(&truth),
    );
    eprintln!(
        "rel. L2 to the 16^3 truth: binned 32^2 scan {e_binned:.3}, 16^2 scan {e_coarse:.3}; \
         between them {between:.3}; total attenuation over the truth's: {mass_binned:.4} and \
         {mass_coarse:.4}"
    );
    // The binned pixels average 2 x 2 pixels (a wider detector response than the 16^2 scan's
    // point samples), and the binned rows sit a quarter pixel higher (a z shift of the volume),
    // so the volumes differ a little (more at 16^3 than at 32^3: measured 0.238 to the truth and
    // 0.203 between them, against 0.098 for the 16^2 scan; a wrong axis or unit is far off);
    // the units (values per binned voxel) agree to a percent (measured 1.0062 and 1.0059).
    assert!(e_binned < 0.3 && between < 0.25, "{e_binned}, {between}");
    assert!(
        (mass_binned / mass_coarse - 1.0).abs() < 0.01,
        "{mass_binned} vs {mass_coarse}"
    );
}

/// Adds a gain error to one detector pixel in 12: an offset of 0.02-0.08 in the line integral
/// (a 2-8 % gain), the same at every angle.
fn add_stripes(p: &Projections) -> Projections {
    let g = p.geometry();
    let mut rng = lamino::random::SplitMix64::new(17);
    let offsets: Vec<f32> = (0..g.deth * g.detw)
        .map(|_| {
            let (pick, size, sign) = (rng.next_f64(), rng.next_f64(), rng.next_f64());
            if pick < 1.0 / 12.0 {
                ((0.02 + 0.06 * size) * if sign < 0.5 { -1.0 } else { 1.0 }) as f32
            } else {
                0.0
            }
        })
        .collect();
    let values = p
        .values()
        .chunks(g.deth * g.detw)
        .flat_map(|frame| frame.iter().zip(&offsets).map(|(v, o)| v + o))
        .collect();
    Projections::new(g.clone(), values).unwrap()
}

/// The central slice of the filtered backprojection of `p` (the search's slab), axis and tilt
/// as simulated: linear in the data, so rings in it are the backprojection of what is left of
/// the stripes.
fn fbp_slice(p: &Projections, tilt_deg: f64) -> Vec<f32> {
    let candidate = Candidate {
        rotation_axis: p.geometry().rotation_axis(),
        tilt_deg,
    };
    score_candidates(ctx(), p, 1, &[candidate], &CENTRAL)
        .unwrap()
        .previews
        .remove(0)
}

/// Ring energy of `slice` against the stripe-free `reference` (both `n x n`, the rotation axis at
/// the centre): the energy of the rotationally symmetric part of their difference (its mean over
/// each one-pixel ring around the axis), relative to the reference's energy. Rings are what
/// stripes leave in a reconstruction; what stripe removal does to the sample itself is mostly not
/// rotationally symmetric and is measured separately.
fn ring_energy(slice: &[f32], reference: &[f32], n: usize) -> f64 {
    let radius = |i: usize| {
        let (y, x) = (
            (i / n) as f64 - (n / 2) as f64,
            (i % n) as f64 - (n / 2) as f64,
        );
        (y * y + x * x).sqrt().round() as usize
    };
    let mut sums = vec![(0.0f64, 0usize); n];
    for (i, (a, b)) in slice.iter().zip(reference).enumerate() {
        let r = radius(i);
        if r < n / 2 {
            sums[r].0 += (a - b) as f64;
            sums[r].1 += 1;
        }
    }
    let rings: f64 = sums
        .iter()
        .filter(|(_, c)| *c > 0)
        .map(|(s, c)| s * s / *c as f64)
        .sum();
    rings / reference.iter().map(|v| (*v as f64).powi(2)).sum::<f64>()
}

#[test]
fn stripe_removal_reduces_rings_and_leaves_a_clean_scan_nearly_alone() {
    // 128^2 detector, 180 angles: stripes of one pixel among structures of several. The bound on
    // the ring energy left is per phantom: a stripe is indistinguishable from a structure of the
    // sample that stays on one detector column at every angle, i.e. a ring around the axis, and
    // both methods remove those too. Shepp-Logan's skull is nearly such a ring (the
    // Fourier-wavelet method takes some of it), and the chip's wires, straight lines at fixed
    // distances from the axis, put a stationary line into the sinogram at each tangent point:
    // there both methods leave more ring energy than the stripes made (measured: 9.3e-4 ->
    // 2.6e-3 and 1.2e-3), and the test only bounds the change of the stripe-free scan.
    let (n, angles) = (128, 180);
    let mut failures = Vec::new();
    for (phantom, fw_bound, sort_bound) in [
        (PhantomKind::Blobs, 0.2, 0.2),
        (PhantomKind::Shepp, 0.8, 0.2),
        (PhantomKind::Chip, f64::INFINITY, f64::INFINITY),
    ] {
        let clean = scan(phantom, n, angles, 30.0, None, None);
        let striped = add_stripes(&clean);
        let reference = fbp_slice(&clean, 30.0);
        let rings = ring_energy(&fbp_slice(&striped, 30.0), &reference, n);
        for method in [StripeRemoval::FOURIER_WAVELET, StripeRemoval::SORTING] {
            let after = ring_energy(
                &fbp_slice(&remove_stripes(&striped, method).unwrap(), 30.0),
                &reference,
                n,
            );
            let untouched = remove_stripes(&clean, method).unwrap();
            let change = rel_l2(untouched.values(), clean.values());
            let change_slab = rel_l2(&fbp_slice(&untouched, 30.0), &reference);
            eprintln!(
                "{phantom} {n}^2 x {angles}, {:?}: ring energy {rings:.2e} -> {after:.2e}; a \
                 stripe-free scan changes by {change:.4} (projections), {change_slab:.4} (slab)",
                method.resolved(n)
            );
            let bound = match method {
                StripeRemoval::FourierWavelet { .. } => fw_bound,
                StripeRemoval::Sorting { .. } => sort_bound,
            };
            if !(after < bound * rings && change < 0.03) {
                failures.push(format!("{phantom} {method:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// `p` with only its `rows` central detector rows (and as many volume slices): a short detector.
fn central_rows(p: &Projections, rows: usize) -> Projections {
    let g = p.geometry();
    let first = (g.deth - rows) / 2;
    let values = p
        .values()
        .chunks(g.deth * g.detw)
        .flat_map(|frame| &frame[first * g.detw..(first + rows) * g.detw])
        .copied()
        .collect();
    let mut short = g.clone();
    short.deth = rows;
    short.n0 = rows;
    Projections::new(short, values).unwrap()
}

#[test]
fn auto_finds_the_axis_of_short_ct_detectors_with_its_defaults() {
    // Plain CT (tilt 0) over 360 degrees, noisy, axis off centre, on 2, 4 and 8 rows: the slab
    // fits the rows, and both the slab search (near the Fourier estimate) and the Fourier
    // estimate find the axis; the sharp slab score refines the Fourier estimate.
    let axis = 18.3;
    let full = scan(PhantomKind::Shepp, 32, 90, 0.0, Some(1e4), Some(axis));
    for rows in [2, 4, 8] {
        let p = central_rows(&full, rows);
        let auto = find_rotation_axis(ctx(), &p, 1, 0.0, None, 0.0, None).unwrap();
        eprintln!(
            "{rows} rows: auto {:.3} (slab {:.3} on {} slices, peak half width {:?}; Fourier {:?}), \
             true {axis}: {}",
            auto.rotation_axis,
            auto.slab_axis,
            auto.slab.slices,
            auto.peak_half_width,
            auto.fourier_axis,
            auto.reason
        );
        assert!(auto.slab.slices == rows, "{rows} rows: {:?}", auto.slab);
        assert!(auto.method == "fourier+slab", "{}", auto.reason);
        for found in [auto.rotation_axis, auto.slab_axis] {
            assert!((found - axis).abs() <= 0.5, "{rows} rows: {found}");
        }
        assert!(auto.disagreement.is_some_and(|d| d <= 1.0));
        assert!(auto.peak_half_width.is_some_and(|w| w > 0.0 && w < 2.0));
    }
}

#[test]
fn auto_finds_the_axis_of_a_short_laminography_detector_with_its_defaults() {
    // A small tilt on 8 rows: 8 slices would leave the rows, the search picks a thinner slab.
    let (axis, tilt) = (14.6, 5.0);
    let p = central_rows(
        &scan(PhantomKind::Shepp, 32, 90, tilt, Some(1e4), Some(axis)),
        8,
    );
    let auto = find_rotation_axis(ctx(), &p, 1, tilt, None, 0.0, None).unwrap();
    eprintln!(
        "tilt {tilt}, 8 rows: auto {:.3} on {} slices (radius {}), peak half width {:?}",
        auto.rotation_axis,
        auto.slab.slices,
        auto.passes.last().unwrap().score_radius,
        auto.peak_half_width
    );
    assert!(auto.method == "slab" && auto.fourier_axis.is_none());
    assert!(auto.slab.slices < 8, "{:?}", auto.slab);
    assert!(
        (auto.rotation_axis - axis).abs() <= 0.5,
        "{}",
        auto.rotation_axis
    );
}
