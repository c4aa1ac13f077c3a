//! DXchange HDF5 files: round trips, the on-disk conventions (theta in degrees, the tilt in
//! /lamino/phi_deg), integer detector counts, and a typed error for every kind of bad file.

use std::f64::consts::PI;
use std::path::Path;

use lamino::io::{read_dxchange, write_dxchange, IoError, Scan, Stack};
use lamino::reference::SplitMix64;

const TILT: f64 = PI / 2.0 + 20.0 * PI / 180.0;

fn scan(with_extras: bool) -> Scan {
    let mut rng = SplitMix64::new(15);
    let mut stack = |shape: [usize; 3]| Stack {
        shape,
        values: (0..shape.iter().product())
            .map(|_| (1000.0 * rng.next_f64()) as f32)
            .collect(),
    };
    Scan {
        data: stack([5, 6, 8]),
        flats: stack([3, 6, 8]),
        darks: stack([2, 6, 8]),
        theta: (0..5).map(|i| 0.3 * i as f64).collect(),
        phi: with_extras.then_some(TILT),
        truth: with_extras.then(|| stack([4, 6, 8])),
    }
}

#[test]
fn dxchange_files_round_trip_with_theta_in_degrees() {
    let dir = tempfile::tempdir().unwrap();
    for extras in [true, false] {
        let path = dir.path().join(format!("scan-{extras}.h5"));
        let s = scan(extras);
        write_dxchange(&path, &s).unwrap();
        let back = read_dxchange(&path).unwrap();
        for (a, b) in back.theta.iter().zip(&s.theta) {
            assert!((a - b).abs() < 1e-14, "{a} vs {b}");
        }
        assert!(back
            .phi
            .zip(s.phi)
            .is_none_or(|(a, b)| (a - b).abs() < 1e-14));
        assert_eq!(back.phi.is_some(), extras);
        assert_eq!(
            Scan {
                theta: s.theta.clone(),
                phi: s.phi,
                ..back
            },
            s
        );
        // On disk the angles are degrees and the tilt is /lamino/phi_deg.
        let file = hdf5::File::open(&path).unwrap();
        let deg = file
            .dataset("exchange/theta")
            .unwrap()
            .read_raw::<f64>()
            .unwrap();
        assert!((deg[1] - 0.3f64.to_degrees()).abs() < 1e-12);
        if extras {
            let phi = file
                .dataset("lamino/phi_deg")
                .unwrap()
                .read_scalar::<f64>()
                .unwrap();
            assert!((phi - 110.0).abs() < 1e-12, "{phi}");
        }
    }
    // The write went through a temporary file that is gone.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// A DXchange-like file written directly, to build files `write_dxchange` refuses to write.
fn write_raw(path: &Path, data: &[f32], data_shape: [usize; 3], theta: &[f32], skip: &str) {
    let file = hdf5::File::create(path).unwrap();
    let ex = file.create_group("exchange").unwrap();
    let frame = [1, data_shape[1], data_shape[2]];
    let ones = vec![1.0f32; frame[1] * frame[2]];
    for (name, shape, values) in [
        ("data", data_shape, data),
        ("data_white", frame, &ones[..]),
        ("data_dark", frame, &ones[..]),
    ] {
        if name != skip {
            ex.new_dataset::<f32>()
                .shape(shape)
                .create(name)
                .unwrap()
                .write_raw(values)
                .unwrap();
        }
    }
    if skip != "theta" {
        ex.new_dataset::<f32>()
            .shape([theta.len()])
            .create("theta")
            .unwrap()
            .write_raw(theta)
            .unwrap();
    }
}

#[test]
fn bad_dxchange_files_are_typed_errors_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.h5");
    let data = vec![1.0f32; 3 * 2 * 4];
    for skip in ["data", "data_dark", "theta"] {
        write_raw(&path, &data, [3, 2, 4], &[0.0, 1.0, 2.0], skip);
        match read_dxchange(&path) {
            Err(IoError::MissingDataset { dataset, .. }) => {
                assert_eq!(dataset, format!("/exchange/{skip}"))
            }
            other => panic!("missing {skip}: {other:?}"),
        }
    }
    let no_group = dir.path().join("empty.h5");
    hdf5::File::create(&no_group).unwrap();
    let err = read_dxchange(&no_group).unwrap_err();
    assert!(
        err.to_string().contains("empty.h5") && err.to_string().contains("/exchange/data"),
        "{err}"
    );

    write_raw(&path, &data, [3, 2, 4], &[0.0, 1.0], "");
    assert!(matches!(
        read_dxchange(&path),
        Err(IoError::ThetaLength {
            theta: 2,
            projections: 3,
            ..
        })
    ));

    let mut nan = data.clone();
    nan[7] = f32::NAN;
    write_raw(&path, &nan, [3, 2, 4], &[0.0, 1.0, 2.0], "");
    match read_dxchange(&path) {
        Err(IoError::NonFinite {
            dataset, index: 7, ..
        }) => assert_eq!(dataset, "/exchange/data"),
        other => panic!("NaN: {other:?}"),
    }

    let text = dir.path().join("notes.h5");
    std::fs::write(&text, "not an HDF5 file").unwrap();
    let err = read_dxchange(&text).unwrap_err();
    assert!(matches!(err, IoError::NotHdf5 { .. }), "{err:?}");
    assert!(err.to_string().contains("notes.h5"), "{err}");
    assert!(matches!(
        read_dxchange(&dir.path().join("absent.h5")),
        Err(IoError::Read { .. })
    ));

    // Writing refuses what reading would reject, and leaves no file behind.
    let out = dir.path().join("refused.h5");
    let mut s = scan(false);
    s.flats.shape = [4, 8, 6];
    assert!(matches!(
        write_dxchange(&out, &s),
        Err(IoError::BadShape { .. })
    ));
    let mut s = scan(true);
    s.truth.as_mut().unwrap().values[3] = f32::INFINITY;
    match write_dxchange(&out, &s) {
        Err(IoError::NonFinite {
            dataset, index: 3, ..
        }) => assert_eq!(dataset, "/truth/volume"),
        other => panic!("{other:?}"),
    }
    assert!(!out.exists());
}

#[test]
fn detector_counts_stored_as_uint16_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("u16.h5");
    write_raw(&path, &[1.0; 8], [2, 2, 2], &[0.0, 90.0], "data");
    let file = hdf5::File::open_rw(&path).unwrap();
    let counts: Vec<u16> = (0..8).map(|i| 1000 + i).collect();
    file.group("exchange")
        .unwrap()
        .new_dataset::<u16>()
        .shape([2, 2, 2])
        .create("data")
        .unwrap()
        .write_raw(&counts)
        .unwrap();
    drop(file);
    let s = read_dxchange(&path).unwrap();
    assert_eq!(
        s.data.values,
        counts.iter().map(|&c| c as f32).collect::<Vec<_>>()
    );
    assert!((s.theta[1] - PI / 2.0).abs() < 1e-7);
}
