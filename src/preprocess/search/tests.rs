//! The search's pure parts: candidate ranges, the grid's cap, the parabola, and which estimate
//! is the axis.

use super::*;
use crate::preprocess::decision::parabola_vertex;

#[test]
fn ranges_include_their_end_and_reject_nonsense() {
    assert_eq!(
        candidate_range(1.0, 2.0, 0.25).unwrap(),
        vec![1.0, 1.25, 1.5, 1.75, 2.0]
    );
    assert_eq!(candidate_range(3.0, 3.0, 1.0).unwrap(), vec![3.0]);
    assert!(candidate_range(0.0, 9_999.0, 1.0).unwrap().len() == MAX_CANDIDATES);
    for (a, b, s) in [
        (2.0, 1.0, 0.5),
        (0.0, 1.0, 0.0),
        (0.0, f64::NAN, 1.0),
        (0.0, 1e9, 1.0),
        (0.0, 1.0, 1e-300),
        (0.0, 10_000.0, 1.0),
    ] {
        assert!(matches!(
            candidate_range(a, b, s),
            Err(PreprocessError::BadSearch(_))
        ));
    }
}

#[test]
fn the_grid_of_both_ranges_is_capped() {
    let axes = candidate_range(0.0, 999.0, 1.0).unwrap();
    assert!(grid(&axes, &[0.0; 10]).unwrap().len() == MAX_CANDIDATES);
    assert!(matches!(
        grid(&axes, &[0.0; 11]),
        Err(PreprocessError::BadSearch(m)) if m.contains("1000 axes x 11 tilts")
    ));
    assert!(check_grid(usize::MAX, 2).is_err());
}

/// A search result over `axes` with `scores` (one tilt), its best refined by the parabola.
fn result(axes: &[f64], scores: &[f64]) -> SearchResult {
    let scored: Vec<Scored> = axes
        .iter()
        .zip(scores)
        .map(|(&rotation_axis, &score)| Scored {
            candidate: Candidate {
                rotation_axis,
                tilt_deg: 0.0,
            },
            score,
        })
        .collect();
    let best = (0..scored.len())
        .max_by(|&a, &b| scored[a].score.total_cmp(&scored[b].score))
        .unwrap();
    let (refined, peak_half_width) = refine(&scored, best);
    SearchResult {
        best: scored[best].candidate,
        scored,
        refined,
        peak_half_width,
        slab: Slab {
            slices: 1,
            z_offset: 0.0,
        },
        binning: 1,
        score_radius: 1.0,
        preview_shape: [1, 1],
        previews: Vec::new(),
    }
}

#[test]
fn a_flat_slab_score_does_not_overrule_the_fourier_estimate() {
    let axes = candidate_range(40.0, 60.0, 1.0).unwrap();
    // A sharp peak at 51 (the score falls by half 3 columns away), Fourier at 50.4: the slab
    // refines it, and decides alone without a Fourier estimate.
    let sharp: Vec<f64> = axes
        .iter()
        .map(|a| 1.0 / (1.0 + ((a - 51.2) / 3.0).powi(2)))
        .collect();
    let r = result(&axes, &sharp);
    let d = AxisDecision::of(&r, None, Some(50.4));
    assert_eq!(d.method, "fourier+slab", "{}", d.reason);
    assert!((d.rotation_axis - 51.2).abs() < 0.2, "{}", d.rotation_axis);
    let given = AxisDecision::of(&r, Some(51.17), Some(50.4));
    assert_eq!(given.rotation_axis, 51.17);
    let alone = AxisDecision::of(&r, None, None);
    assert_eq!(
        (alone.method, alone.rotation_axis),
        ("slab", r.refined.rotation_axis)
    );
    // Noise on a flat score: the best, 47, half a per cent above the window's lowest.
    let flat: Vec<f64> = axes
        .iter()
        .map(|&a| if a == 47.0 { 1.005 } else { 1.0 })
        .collect();
    let d = AxisDecision::of(&result(&axes, &flat), None, Some(50.4));
    assert_eq!((d.method, d.rotation_axis), ("fourier", 50.4));
    assert!(d.reason.contains("too flat"), "{}", d.reason);
    // The sharpest slab beyond the window around the Fourier estimate, or at its edge.
    let far: Vec<f64> = axes
        .iter()
        .map(|a| 1.0 / (1.0 + ((a - 58.0) / 2.0).powi(2)))
        .collect();
    let d = AxisDecision::of(&result(&axes, &far), None, Some(45.0));
    assert_eq!((d.method, d.rotation_axis), ("fourier", 45.0));
    assert!(d.reason.contains("no interior peak"), "{}", d.reason);
    // NaN scores never make a peak.
    let nan = vec![f64::NAN; axes.len()];
    assert_eq!(
        AxisDecision::of(&result(&axes, &nan), None, Some(50.0)).method,
        "fourier"
    );
}

#[test]
fn the_parabola_finds_its_vertex() {
    // y = -(x - 0.3)^2 at -1, 0, 1.
    let y = |x: f64| -(x - 0.3) * (x - 0.3);
    assert!((parabola_vertex(y(-1.0), y(0.0), y(1.0)) - 0.3).abs() < 1e-12);
    assert_eq!(parabola_vertex(1.0, 0.0, 1.0), 0.0);
}
