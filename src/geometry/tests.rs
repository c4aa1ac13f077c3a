//! Tests of geometries: validation, sub-volumes and their shadows, the fingerprint and the
//! JSON form.

use std::f64::consts::PI;

use super::*;

#[test]
fn validation_names_each_problem() {
    let good = Geometry::cube(32, 16, Tilt::from_degrees(20.0));
    good.validate().unwrap();
    let mut g = good.clone();
    g.n1 = 31;
    assert!(matches!(
        g.validate(),
        Err(GeometryError::BadSize {
            name: "n1",
            value: 31
        })
    ));
    let mut g = good.clone();
    g.detw = 0;
    assert!(matches!(
        g.validate(),
        Err(GeometryError::BadSize { name: "detw", .. })
    ));
    let mut g = good.clone();
    g.theta.clear();
    assert!(matches!(g.validate(), Err(GeometryError::NoAngles)));
    let mut g = good.clone();
    g.theta[3] = f64::NAN;
    assert!(matches!(
        g.validate(),
        Err(GeometryError::NonFiniteAngle { index: 3, .. })
    ));
    let mut g = good.clone();
    g.tilt = Tilt::from_phi(PI);
    assert!(matches!(
        g.validate(),
        Err(GeometryError::PhiOutOfRange { .. })
    ));
    let mut g = good.clone();
    g.eps = 1e-9;
    assert!(matches!(g.validate(), Err(GeometryError::BadEps { .. })));
    for center in [-0.5, 32.5, f64::NAN] {
        let g = Geometry {
            center: Some(center),
            ..good.clone()
        };
        assert!(
            matches!(g.validate(), Err(GeometryError::BadCenter { .. })),
            "{center}"
        );
    }
}

#[test]
fn fingerprints_see_every_bit_and_survive_json() {
    let g = Geometry::cube(16, 7, Tilt::from_phi(1.2345678901234567));
    let mut h = g.clone();
    h.theta[5] = f64::from_bits(h.theta[5].to_bits() + 1);
    assert_ne!(g.fingerprint(), h.fingerprint());
    let mut h = g.clone();
    h.tilt = Tilt::from_phi(f64::from_bits(h.tilt.phi().to_bits() - 1));
    assert_ne!(g.fingerprint(), h.fingerprint());
    let mut h = g.clone();
    h.n2 += 2;
    assert_ne!(g.fingerprint(), h.fingerprint());
    let mut h = g.clone();
    h.center = Some(g.rotation_axis());
    assert_ne!(g.fingerprint(), h.fingerprint());
    let mut k = h.clone();
    k.center = Some(f64::from_bits(g.rotation_axis().to_bits() + 1));
    assert_ne!(h.fingerprint(), k.fingerprint());
    let mut h = g.clone();
    h.offset = [0.0, 0.0, 1.0];
    assert_ne!(g.fingerprint(), h.fingerprint());
    let mut k = h.clone();
    k.offset = [0.0, 1.0, 0.0];
    assert_ne!(h.fingerprint(), k.fingerprint());
    let mut h = g.clone();
    h.shifts = vec![[0.0; 2]; 7];
    assert_ne!(g.fingerprint(), h.fingerprint());
    let mut k = h.clone();
    k.shifts[6][1] = f64::from_bits(1);
    assert_ne!(h.fingerprint(), k.fingerprint());
    // Angles with long decimal expansions come back from JSON with the same bits.
    let mut g = g;
    g.theta = (0..50)
        .map(|i| (i as f64 * 7.3).to_radians() / 3.0)
        .collect();
    let text = serde_json::to_string(&g).unwrap();
    let back: Geometry = serde_json::from_str(&text).unwrap();
    assert_eq!(back.fingerprint(), g.fingerprint());
}

#[test]
fn json_round_trip_with_default_eps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.json");
    let g = Geometry::cube(16, 4, Tilt::from_phi(1.2));
    g.write_json(&path).unwrap();
    assert_eq!(Geometry::read_json(&path).unwrap(), g);
    std::fs::write(
        &path,
        r#"{"n0":4,"n1":4,"n2":4,"deth":4,"detw":4,"theta":[0.0,1.0],"phi":1.0}"#,
    )
    .unwrap();
    let old = Geometry::read_json(&path).unwrap();
    assert_eq!(old.eps, DEFAULT_EPS);
    assert_eq!((old.center, old.rotation_axis()), (None, 2.0));
    let shifted = Geometry {
        center: Some(9.75),
        ..g.clone()
    };
    shifted.write_json(&path).unwrap();
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("\"center\": 9.75"));
    assert_eq!(Geometry::read_json(&path).unwrap(), shifted);
    assert!(!std::fs::read_to_string(&path).unwrap().contains("offset"));
    let slab = g
        .with_subvolume(&VolumeBox {
            z: 2..8,
            ..VolumeBox::full(&g)
        })
        .unwrap();
    slab.write_json(&path).unwrap();
    assert_eq!(Geometry::read_json(&path).unwrap(), slab);
    std::fs::write(&path, r#"{"n0":5}"#).unwrap();
    assert!(matches!(
        Geometry::read_json(&path),
        Err(GeometryError::File { .. })
    ));
    // Sizes whose products overflow 64 bits are an error, not an arithmetic panic.
    std::fs::write(
        &path,
        r#"{"n0":1099511627776,"n1":1099511627776,"n2":2,"deth":2,"detw":2,"theta":[0.0],"phi":1.0}"#,
    )
    .unwrap();
    assert!(matches!(
        Geometry::read_json(&path),
        Err(GeometryError::Overflow)
    ));
}

#[test]
fn a_subvolume_is_sized_and_placed_in_the_default_volume() {
    let g = Geometry::for_detector(32, 48, vec![0.0, 1.0], Tilt::from_phi(1.9));
    let b = VolumeBox {
        z: 20..28,
        y: 6..30,
        x: 10..48,
    };
    let s = g.with_subvolume(&b).unwrap();
    assert_eq!((s.n0, s.n1, s.n2), (8, 24, 38));
    // Centres: z 24 - 16, y 18 - 24, x 29 - 24.
    assert_eq!(s.offset, [8.0, -6.0, 5.0]);
    assert_eq!(g.with_subvolume(&VolumeBox::full(&g)).unwrap(), g);
    // Odd, too short and outside: errors naming the axis and the nearest valid range.
    let err = |b: VolumeBox| g.with_subvolume(&b).unwrap_err().to_string();
    let e = err(VolumeBox {
        z: 3..10,
        ..VolumeBox::full(&g)
    });
    assert!(
        e.contains("z 3:10") && e.contains("even") && e.contains("3:11"),
        "{e}"
    );
    let e = err(VolumeBox {
        x: 44..46,
        ..VolumeBox::full(&g)
    });
    assert!(
        e.contains("x 44:46") && e.contains("minimum 4") && e.contains("44:48"),
        "{e}"
    );
    let e = err(VolumeBox {
        y: 10..50,
        ..VolumeBox::full(&g)
    });
    assert!(e.contains("y 10:50") && e.contains("0:48"), "{e}");
}

#[test]
fn a_box_is_cut_to_the_rows_it_projects_onto() {
    let theta: Vec<f64> = (0..12).map(|i| i as f64 * 0.5).collect();
    let g = Geometry::for_detector(64, 32, theta, Tilt::from_phi(110f64.to_radians()));
    // The default volume's shadow covers its detector: nothing to cut.
    assert!(g.shadow_rows() == (0..64));
    let slab = g
        .with_subvolume(&VolumeBox {
            z: 40..48,
            ..VolumeBox::full(&g)
        })
        .unwrap();
    let rows = slab.shadow_rows();
    assert!(
        rows.len().is_multiple_of(2) && rows.len() < 64 && rows.end <= 64,
        "{rows:?}"
    );
    let cut = slab.with_detector_rows(rows.clone()).unwrap();
    assert!(cut.deth == rows.len() && (cut.n0, cut.n1, cut.n2) == (8, 32, 32));
    // Every voxel lands on the detector row it did: the origin moved with the cut.
    for t in 0..g.ntheta() {
        let before = slab.projection_shift(t)[0] + 32.0;
        let after = cut.projection_shift(t)[0] + (rows.start + rows.len() / 2) as f64;
        assert!((before - after).abs() <= 1e-9, "{t}: {before} {after}");
    }
    // Plain CT: the slab's own rows plus the kernel's reach and a row each side.
    let ct = Geometry {
        tilt: Tilt::CT,
        ..slab.clone()
    };
    assert!(ct.shadow_rows() == (37..51), "{:?}", ct.shadow_rows());
    for bad in [10..10, 60..70] {
        assert!(matches!(
            slab.with_detector_rows(bad),
            Err(GeometryError::BadBox { .. })
        ));
    }
    assert!(matches!(
        slab.with_detector_rows(3..8),
        Err(GeometryError::BadSize { name: "deth", .. })
    ));
}

#[test]
fn an_offset_must_be_finite() {
    let g = Geometry {
        offset: [3.0, -2.5, 4.25],
        ..Geometry::for_detector(8, 26, vec![0.0, 0.7, 2.1], Tilt::from_phi(1.9))
    };
    g.validate().unwrap();
    let bad = Geometry {
        offset: [0.0, f64::NAN, 0.0],
        ..g.clone()
    };
    assert!(matches!(
        bad.validate(),
        Err(GeometryError::BadOffset { .. })
    ));
}

#[test]
fn shifts_are_one_finite_pair_per_projection_and_move_its_phases() {
    let g = Geometry {
        shifts: vec![[0.0, 0.0], [1.5, -2.25], [0.0, 0.0]],
        ..Geometry::for_detector(8, 26, vec![0.0, 0.7, 2.1], Tilt::from_phi(1.9))
    };
    g.validate().unwrap();
    // The projection's shift adds to where the rest of the geometry puts it, rows then columns.
    let still = Geometry {
        shifts: Vec::new(),
        ..g.clone()
    };
    let [v, u] = still.projection_shift(1);
    assert_eq!(g.projection_shift(1), [v - 2.25, u + 1.5]);
    assert_eq!(g.projection_shift(0), still.projection_shift(0));
    assert_eq!(
        (g.detector_phase_angles(), still.detector_phase_angles()),
        (3, 1)
    );
    let short = Geometry {
        shifts: vec![[0.0; 2]; 2],
        ..g.clone()
    };
    assert!(matches!(
        short.validate(),
        Err(GeometryError::ShiftCount {
            shifts: 2,
            angles: 3
        })
    ));
    let mut nan = g.clone();
    nan.shifts[2][0] = f64::INFINITY;
    let err = nan.validate().unwrap_err();
    assert!(
        matches!(err, GeometryError::NonFiniteShift { index: 2, .. }),
        "{err}"
    );
    // Files with shifts keep their bits; files without read as none.
    let back: Geometry = serde_json::from_str(&serde_json::to_string(&g).unwrap()).unwrap();
    assert_eq!(back, g);
    assert!(!serde_json::to_string(&still).unwrap().contains("shifts"));
}
