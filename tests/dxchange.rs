//! DXchange HDF5 files: round trips, the on-disk conventions (theta in degrees, the tilt in
//! /lamino/phi_deg), files written by h5py and by libhdf5 (fixtures in assets/dxchange, made by
//! its make_fixtures.py), block reads for streaming, and a typed error for every kind of bad file,
//! truncated and corrupted ones included.

use lamino::Tilt;
use std::path::{Path, PathBuf};

use hdf5_writer::{AttributeBuilder, DatasetBuilder, Hdf5Builder, Hdf5Writer, WriteOptions};
use lamino::io::{
    read_dxchange, read_dxchange_with, write_dxchange, write_volume_h5, AngleUnit, DxchangeReader,
    IoError, NxtomoReader, SampleType, Scan, ScanOptions, Stack,
};
use lamino::random::SplitMix64;
use lamino::recon::input::read_volume;

const TILT: Tilt = Tilt::from_degrees(20.0);

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets/dxchange")
        .join(name)
}

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
        tilt: with_extras.then_some(TILT),
        truth: with_extras.then(|| stack([4, 6, 8])),
    }
}

/// Reads `dataset` of `path` as f64 with the HDF5 library directly, not through lamino.
fn raw_f64(path: &Path, dataset: &str) -> Vec<f64> {
    let file = hdf5_reader::Hdf5File::open(path).unwrap();
    file.dataset(dataset)
        .unwrap()
        .read_array::<f64>()
        .unwrap()
        .into_raw_vec_and_offset()
        .0
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
            .tilt
            .map(Tilt::phi)
            .zip(s.tilt.map(Tilt::phi))
            .is_none_or(|(a, b)| (a - b).abs() < 1e-14));
        assert_eq!(back.tilt.is_some(), extras);
        assert_eq!(
            Scan {
                theta: s.theta.clone(),
                tilt: s.tilt,
                ..back
            },
            s
        );
        // On disk the angles are degrees (and say so) and the tilt is /lamino/phi_deg.
        let deg = raw_f64(&path, "/exchange/theta");
        assert!((deg[1] - 0.3f64.to_degrees()).abs() < 1e-12);
        let file = hdf5_reader::Hdf5File::open(&path).unwrap();
        let units = file.dataset("/exchange/theta").unwrap().attribute("units");
        assert_eq!(units.unwrap().read_string().unwrap(), "degrees");
        if extras {
            let phi = raw_f64(&path, "/lamino/phi_deg");
            assert!(phi.len() == 1 && (phi[0] - 110.0).abs() < 1e-12, "{phi:?}");
        }
    }
    // The write went through a temporary file that is gone.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn volumes_are_written_as_slash_volume() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recon.h5");
    let volume = scan(true).truth.unwrap();
    write_volume_h5(&path, &volume).unwrap();
    let file = hdf5_reader::Hdf5File::open(&path).unwrap();
    let d = file.dataset("/volume").unwrap();
    assert_eq!(d.shape(), [4, 6, 8]);
    assert_eq!(
        d.read_array::<f32>().unwrap().into_raw_vec_and_offset().0,
        volume.values
    );
}

/// A volume read from `.h5` is a reconstruction's `/volume` or a simulated scan's phantom, so
/// `lamino score` takes either; a file with neither names both.
#[test]
fn volumes_read_back_from_reconstructions_and_simulated_scans() {
    let dir = tempfile::tempdir().unwrap();
    let recon = dir.path().join("recon.h5");
    let s = scan(true);
    let truth = s.truth.clone().unwrap();
    write_volume_h5(&recon, &truth).unwrap();
    assert_eq!(read_volume(&recon).unwrap(), truth);
    let simulated = dir.path().join("scan.h5");
    write_dxchange(&simulated, &s).unwrap();
    assert_eq!(read_volume(&simulated).unwrap(), truth);
    let plain = dir.path().join("plain.h5");
    write_dxchange(&plain, &scan(false)).unwrap();
    let err = read_volume(&plain).unwrap_err().to_string();
    assert!(err.contains("/volume or /truth/volume"), "{err}");
}

/// The closed forms make_fixtures.py writes (see assets/dxchange/README.md).
fn expected(kind: &str, len: usize) -> Vec<f64> {
    (0..len as u64)
        .map(|k| match kind {
            "data" => 100 + (37 * k) % 1000,
            "flats" => 2000 + (13 * k) % 100,
            _ => 10 + k % 7,
        } as f64)
        .collect()
}

/// Checks every value of a fixture (stacks divided by `divisor`) and every block read.
fn check_fixture(name: &str, ntheta: usize, sample: SampleType, divisor: f64) {
    let path = fixture(name);
    let reader = DxchangeReader::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let info = reader.info().clone();
    assert_eq!(info.projections.shape, [ntheta, 6, 8], "{name}");
    assert_eq!(info.flats.shape, [3, 6, 8], "{name}");
    assert_eq!(info.darks.unwrap().shape, [2, 6, 8], "{name}");
    assert_eq!(info.projections.sample, sample, "{name}");
    for (i, t) in info.theta.iter().enumerate() {
        let want = (180.0 * i as f64 / ntheta as f64).to_radians();
        // theta is float32 in some fixtures: half an ulp of a float32 of degrees.
        assert!((t - want).abs() <= 1e-7 * want.abs().max(1e-3), "{name}");
    }
    let scan = read_dxchange(&path).unwrap();
    for (kind, stack) in [
        ("data", &scan.data),
        ("flats", &scan.flats),
        ("darks", &scan.darks),
    ] {
        let want = expected(kind, stack.values.len());
        for (i, (&got, want)) in stack.values.iter().zip(&want).enumerate() {
            let want = (want / divisor) as f32;
            assert!(got == want, "{name} {kind}[{i}] = {got}, expected {want}");
        }
        assert_eq!(stack.values.len(), want.len(), "{name} {kind}");
    }
    assert_eq!(reader.read_flats().unwrap(), scan.flats);
    assert_eq!(reader.read_darks().unwrap(), scan.darks);
    // Blocks of every size tile the projections exactly, across chunk boundaries.
    let frame = 6 * 8;
    for block in 1..=ntheta {
        for a0 in (0..ntheta).step_by(block) {
            let a1 = (a0 + block).min(ntheta);
            let got = reader.read_projections(a0..a1).unwrap();
            assert_eq!(got.shape, [a1 - a0, 6, 8]);
            assert!(
                got.values == scan.data.values[a0 * frame..a1 * frame],
                "{name}: block {a0}..{a1}"
            );
        }
    }
}

#[test]
fn files_written_by_h5py_are_read_exactly() {
    check_fixture("h5py_contiguous_f32.h5", 10, SampleType::F32, 1.0);
    check_fixture("h5py_chunked_gzip_shuffle_u16.h5", 13, SampleType::U16, 1.0);
    check_fixture("h5py_v110_chunk_indexes_u16.h5", 11, SampleType::U16, 1.0);
    check_fixture("h5py_fixed_array_f64.h5", 9, SampleType::F64, 7.0);
    check_fixture("h5py_hdf5_2_format_f32.h5", 6, SampleType::F32, 1.0);
    check_fixture("h5py_big_endian_f32.h5", 7, SampleType::F32, 1.0);
    check_fixture("h5py_scaleoffset_u16.h5", 5, SampleType::U16, 1.0);
    // The tilt only the first one records.
    let phi = read_dxchange(&fixture("h5py_contiguous_f32.h5"))
        .unwrap()
        .tilt
        .map(Tilt::phi);
    assert!((phi.unwrap() - TILT.phi()).abs() < 1e-14);
}

#[test]
fn a_scan_written_by_libhdf5_is_read() {
    // `lamino simulate --phantom chip --size 8 --angles 6 --tilt-deg 20 --photons 1000` when
    // lamino wrote through hdf5-metno and libhdf5 1.10.8; the sums were computed with h5py.
    let s = read_dxchange(&fixture("libhdf5_lamino_simulate.h5")).unwrap();
    let sum = |s: &Stack| s.values.iter().map(|&v| v as f64).sum::<f64>();
    assert_eq!(s.data.shape, [6, 8, 8]);
    assert_eq!(s.flats.shape, [1, 8, 8]);
    assert_eq!(s.darks.shape, [1, 8, 8]);
    assert_eq!(sum(&s.data), 242127.0);
    assert_eq!(sum(&s.flats), 64000.0);
    assert_eq!(sum(&s.darks), 0.0);
    let truth = s.truth.as_ref().unwrap();
    assert_eq!(truth.shape, [8, 8, 8]);
    assert!(
        (sum(truth) - 83.02500177919865).abs() < 1e-9,
        "{}",
        sum(truth)
    );
    for (i, t) in s.theta.iter().enumerate() {
        assert!((t - (60.0 * i as f64).to_radians()).abs() < 1e-12);
    }
    assert!((s.tilt.unwrap().phi() - TILT.phi()).abs() < 1e-14);
}

#[test]
fn lzf_is_read_in_every_build_and_other_plugin_filters_are_named() {
    // LZF (h5py's filter 32000) is decoded in Rust: every value and block read.
    check_fixture("h5py_lzf_f32.h5", 5, SampleType::F32, 1.0);

    // Blosc (written by h5py through hdf5plugin) is named, with the feature that may read it.
    let result = read_dxchange(&fixture("h5py_blosc_f32.h5"));
    #[cfg(not(feature = "hdf5-sys"))]
    match result {
        Err(e @ IoError::NeedsHdf5Sys { .. }) => {
            let text = e.to_string();
            for part in [
                "h5py_blosc_f32.h5",
                "/exchange/data",
                "Blosc (32001)",
                "--features hdf5-sys",
            ] {
                assert!(text.contains(part), "{text}");
            }
        }
        other => panic!("{other:?}"),
    }
    // libhdf5 reads it only where its Blosc plugin is installed (HDF5_PLUGIN_PATH); an error
    // otherwise, which names the file.
    #[cfg(feature = "hdf5-sys")]
    if let Err(e) = result {
        assert!(e.to_string().contains("h5py_blosc_f32.h5"), "{e}");
    }
}

#[test]
fn radians_without_units_are_refused_and_read_with_the_unit_given() {
    let path = fixture("h5py_theta_radians_f32.h5");
    let err = read_dxchange(&path).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, IoError::AmbiguousAngles { .. }), "{err:?}");
    for part in [
        "h5py_theta_radians_f32.h5",
        "/exchange/theta",
        "--theta-units deg|rad",
    ] {
        assert!(text.contains(part), "{text}");
    }
    let radians = ScanOptions {
        theta_units: Some(AngleUnit::Radians),
        theta: None,
        ..Default::default()
    };
    let got = read_dxchange_with(&path, &radians).unwrap();
    let degrees = read_dxchange(&fixture("h5py_contiguous_f32.h5")).unwrap();
    // h5py wrote np.deg2rad of the degrees file's angles: equal to a rounding.
    for (r, d) in got.theta.iter().zip(&degrees.theta) {
        assert!((r - d).abs() <= 1e-15, "{r} {d}");
    }
    assert!(got.data == degrees.data && got.flats == degrees.flats);
    // A stated unit that contradicts the option is an error; agreeing ones are fine.
    let conflict = read_dxchange_with(&fixture("h5py_contiguous_f32.h5"), &radians).unwrap_err();
    assert!(
        matches!(conflict, IoError::AngleUnitConflict { .. }),
        "{conflict:?}"
    );
    assert!(conflict.to_string().contains("--theta-units"), "{conflict}");
    let agreeing = ScanOptions {
        theta_units: Some(AngleUnit::Degrees),
        theta: None,
        ..Default::default()
    };
    assert!(read_dxchange_with(&fixture("h5py_contiguous_f32.h5"), &agreeing).unwrap() == degrees);
}

#[test]
fn angles_from_the_rotation_metadata_and_no_darks() {
    let path = fixture("h5py_rotation_no_dark_u16.h5");
    let reader = DxchangeReader::open(&path).unwrap();
    let info = reader.info();
    assert!(info.darks.is_none());
    assert!(info
        .theta_source
        .starts_with("/process/acquisition/rotation/"));
    assert!(info.theta.len() == 12);
    for (i, t) in info.theta.iter().enumerate() {
        let want = (15.0 * i as f64).to_radians();
        assert!((t - want).abs() <= 1e-12, "{t} {want}");
    }
    let darks = reader.read_darks().unwrap();
    assert!(darks.shape == [1, 6, 8] && darks.values.iter().all(|&v| v == 0.0));
    let data = reader.read_projections(0..12).unwrap();
    let want: Vec<f32> = expected("data", 12 * 48)
        .iter()
        .map(|&v| v as f32)
        .collect();
    assert!(data.values == want);
    // Angles given replace the file's; their count must match.
    let given = ScanOptions {
        theta_units: None,
        theta: Some(("list.txt".into(), vec![0.5; 12])),
        ..Default::default()
    };
    let r = DxchangeReader::open_with(&path, &given).unwrap();
    assert!(r.info().theta == [0.5; 12] && r.info().theta_source == "list.txt");
    let short = ScanOptions {
        theta_units: None,
        theta: Some(("list.txt".into(), vec![0.5; 11])),
        ..Default::default()
    };
    match DxchangeReader::open_with(&path, &short) {
        Err(e @ IoError::ThetaLength { .. }) => {
            assert!(
                e.to_string().contains("11 angles in list.txt but 12"),
                "{e}"
            )
        }
        other => panic!("{:?}", other.map(|r| r.info().clone())),
    }
}

#[test]
fn an_nxtomo_file_holds_the_same_scan_as_its_dxchange_twin() {
    let nx = NxtomoReader::open(&fixture("nxtomo_f32.nx"), &ScanOptions::default()).unwrap();
    let dx = read_dxchange(&fixture("h5py_contiguous_f32.h5")).unwrap();
    let info = nx.info();
    assert!(info.entry == "/entry0000");
    assert!(info.scan.theta == dx.theta, "{:?}", info.scan.theta);
    assert!(info.scan.projections.shape == [10, 6, 8]);
    assert!(nx.read_projections(0..10).unwrap() == dx.data);
    assert!(nx.read_flats().unwrap() == dx.flats);
    assert!(nx.read_darks().unwrap() == dx.darks);
    // Across the alignment frame between projections 4 and 5.
    assert!(nx.read_projections(3..7).unwrap().values == dx.data.values[3 * 48..7 * 48]);
    let px = info.x_pixel_size.as_ref().unwrap();
    assert!(px.value == 6.5e-6 && px.units.as_deref() == Some("m"));
    let um = px.micrometers().unwrap();
    assert!((um.value - 6.5).abs() <= 1e-12, "{um:?}");
    assert!(info.y_pixel_size == info.x_pixel_size);
    // A DXchange file is no NXtomo file.
    match NxtomoReader::open(&fixture("h5py_contiguous_f32.h5"), &ScanOptions::default()) {
        Err(e @ IoError::MissingDataset { .. }) => {
            assert!(e.to_string().contains("NXtomo"), "{e}")
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("read a DXchange file as NXtomo"),
    }
}

/// A DXchange-like file written directly, to build files `write_dxchange` refuses to write.
fn write_raw(path: &Path, data: &[f32], data_shape: [u64; 3], theta: &[f32], skip: &str) {
    write_raw_with(path, data, data_shape, theta, skip, Some("degrees"))
}

fn write_raw_with(
    path: &Path,
    data: &[f32],
    data_shape: [u64; 3],
    theta: &[f32],
    skip: &str,
    units: Option<&str>,
) {
    let frame = [1, data_shape[1], data_shape[2]];
    let ones = vec![1.0f32; (frame[1] * frame[2]) as usize];
    let mut file = Hdf5Builder::new();
    for (name, shape, values) in [
        ("data", data_shape, data),
        ("data_white", frame, &ones[..]),
        ("data_dark", frame, &ones[..]),
    ] {
        if name != skip {
            let d = DatasetBuilder::typed_data(format!("exchange/{name}"), shape, values);
            file = file.dataset(d.unwrap());
        }
    }
    if skip != "theta" {
        let mut d = DatasetBuilder::typed_data("exchange/theta", [theta.len() as u64], theta);
        if let Some(units) = units {
            d = d.map(|d| d.attribute(AttributeBuilder::fixed_string("units", units)));
        }
        file = file.dataset(d.unwrap());
    }
    let plan = file.into_plan().unwrap();
    let out = std::fs::File::create(path).unwrap();
    Hdf5Writer::new(out, WriteOptions::default())
        .finish(plan)
        .unwrap();
}

#[test]
fn bad_dxchange_files_are_typed_errors_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.h5");
    let data = vec![1.0f32; 3 * 2 * 4];
    for skip in ["data", "data_white", "theta"] {
        write_raw(&path, &data, [3, 2, 4], &[0.0, 1.0, 2.0], skip);
        match read_dxchange(&path) {
            Err(IoError::MissingDataset { dataset, .. }) => {
                assert!(
                    dataset.starts_with(&format!("/exchange/{skip}")),
                    "{dataset}"
                )
            }
            other => panic!("missing {skip}: {other:?}"),
        }
    }
    // Without /exchange/theta the message names the fallback too.
    let err = read_dxchange(&path).unwrap_err().to_string();
    assert!(
        err.contains("/process/acquisition/rotation/rotation_start"),
        "{err}"
    );
    // Darks are optional: one zero frame.
    write_raw(&path, &data, [3, 2, 4], &[0.0, 1.0, 2.0], "data_dark");
    let s = read_dxchange(&path).unwrap();
    assert!(s.darks.shape == [1, 2, 4] && s.darks.values == [0.0; 8]);
    assert!(DxchangeReader::open(&path).unwrap().info().darks.is_none());
    let no_group = dir.path().join("empty.h5");
    let plan = Hdf5Builder::new().into_plan().unwrap();
    let out = std::fs::File::create(&no_group).unwrap();
    Hdf5Writer::new(out, WriteOptions::default())
        .finish(plan)
        .unwrap();
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
    nan[9] = f32::NAN;
    write_raw(&path, &nan, [3, 2, 4], &[0.0, 1.0, 2.0], "");
    match read_dxchange(&path) {
        Err(IoError::NonFinite {
            dataset, index: 9, ..
        }) => assert_eq!(dataset, "/exchange/data"),
        other => panic!("NaN: {other:?}"),
    }
    // A block read reports the index within the whole dataset.
    let reader = DxchangeReader::open(&path).unwrap();
    assert!(reader.read_projections(0..1).is_ok());
    assert!(matches!(
        reader.read_projections(1..2),
        Err(IoError::NonFinite { index: 9, .. })
    ));
    for bad in [0..0, 2..4, 3..4] {
        assert!(matches!(
            reader.read_projections(bad),
            Err(IoError::BadRange { len: 3, .. })
        ));
    }

    // Angles in an unknown unit are refused; radians are taken as they are.
    write_raw_with(&path, &data, [3, 2, 4], &[0.0, 1.0, 2.0], "", Some("grad"));
    assert!(matches!(
        read_dxchange(&path),
        Err(IoError::ThetaUnits { units, .. }) if units == "grad"
    ));
    write_raw_with(&path, &data, [3, 2, 4], &[0.0, 1.0, 2.0], "", Some("rad"));
    assert_eq!(read_dxchange(&path).unwrap().theta, [0.0, 1.0, 2.0]);
    // Without a unit, angles within 2 pi are not guessed.
    write_raw_with(&path, &data, [3, 2, 4], &[0.0, 1.0, 2.0], "", None);
    let err = read_dxchange(&path).unwrap_err();
    assert!(matches!(err, IoError::AmbiguousAngles { .. }), "{err:?}");
    assert!(err.to_string().contains("--theta-units deg|rad"), "{err}");

    let text = dir.path().join("notes.h5");
    std::fs::write(&text, "not an HDF5 file").unwrap();
    let err = read_dxchange(&text).unwrap_err();
    assert!(matches!(err, IoError::NotHdf5 { .. }), "{err:?}");
    assert!(err.to_string().contains("notes.h5"), "{err}");
    assert!(matches!(
        read_dxchange(&dir.path().join("absent.h5")),
        Err(IoError::Read { .. })
    ));
    assert!(matches!(
        read_dxchange(dir.path()),
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
fn a_shape_larger_than_the_file_is_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(fixture("h5py_contiguous_f32.h5")).unwrap();
    // /exchange/data's dataspace: its dimensions and maximum dimensions (10, 6, 8) as
    // little-endian u64, the only such runs in the file. Claim 2^40 projections instead.
    let dims: Vec<u8> = [10u64, 6, 8].iter().flat_map(|d| d.to_le_bytes()).collect();
    let at: Vec<usize> = (0..bytes.len() - dims.len())
        .filter(|&i| bytes[i..i + dims.len()] == dims[..])
        .collect();
    assert_eq!(at.len(), 2);
    for i in at {
        bytes[i..i + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    }
    let path = dir.path().join("huge.h5");
    std::fs::write(&path, &bytes).unwrap();
    match DxchangeReader::open(&path) {
        Err(e @ IoError::ImplausibleSize { .. }) => {
            assert!(e.to_string().contains("/exchange/data"), "{e}")
        }
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("a claim of 2^40 projections was accepted"),
    }
}

/// The streaming mode reads blocks on another thread than the one that opened the file.
#[test]
fn a_reader_can_move_to_and_be_shared_with_other_threads() {
    fn send_and_sync<T: Send + Sync>(_: &T) {}
    let reader = DxchangeReader::open(&fixture("h5py_contiguous_f32.h5")).unwrap();
    send_and_sync(&reader);
    let block = std::thread::scope(|s| s.spawn(|| reader.read_projections(2..5)).join());
    assert_eq!(
        block.unwrap().unwrap(),
        reader.read_projections(2..5).unwrap()
    );
}

#[test]
fn a_file_that_shrinks_while_open_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["h5py_contiguous_f32.h5", "h5py_chunked_gzip_shuffle_u16.h5"] {
        let path = dir.path().join(name);
        std::fs::copy(fixture(name), &path).unwrap();
        let reader = DxchangeReader::open(&path).unwrap();
        let n = reader.info().projections.shape[0];
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len / 4)
            .unwrap();
        let err = reader.read_projections(1..n).unwrap_err();
        assert!(err.to_string().contains(name), "{err}");
    }
}

/// Every truncation of each fixture at a spread of offsets is an error, and seeded byte flips
/// give an error or a valid scan: never a panic, an abort or a hang (issue 10, section 4).
#[test]
fn truncated_and_corrupted_files_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("case.h5");
    let mut rng = SplitMix64::new(10);
    for name in [
        "h5py_contiguous_f32.h5",
        "h5py_chunked_gzip_shuffle_u16.h5",
        "h5py_v110_chunk_indexes_u16.h5",
        "libhdf5_lamino_simulate.h5",
    ] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        // Every offset in the first 2 KiB (superblock, root group, first headers), then every
        // 29th, and the last byte.
        let cuts = (0..bytes.len()).filter(|&n| n < 2048 || n % 29 == 0 || n == bytes.len() - 1);
        for n in cuts {
            std::fs::write(&path, &bytes[..n]).unwrap();
            let result = DxchangeReader::open(&path).and_then(|r| {
                r.read_projections(0..r.info().projections.shape[0])?;
                r.read_flats()?;
                r.read_darks()
            });
            assert!(result.is_err(), "{name} cut to {n} bytes was read");
        }
        let (mut valid, mut refused) = (0, 0);
        for _ in 0..400 {
            let mut flipped = bytes.clone();
            for _ in 0..1 + rng.next_u64() % 4 {
                let at = (rng.next_u64() % bytes.len() as u64) as usize;
                flipped[at] ^= 1 << (rng.next_u64() % 8);
            }
            std::fs::write(&path, &flipped).unwrap();
            match read_dxchange(&path) {
                Ok(_) => valid += 1,
                Err(e) => {
                    assert!(e.to_string().contains("case.h5"), "{e}");
                    refused += 1;
                }
            }
        }
        assert_eq!(valid + refused, 400, "{name}");
    }
}

#[cfg(feature = "hdf5-sys")]
mod through_libhdf5 {
    //! Cross-checks with the system libhdf5 (feature `hdf5-sys`): what lamino writes, libhdf5
    //! reads; what libhdf5 writes (contiguous, chunked with shuffle + gzip, uint16 / float64),
    //! lamino reads without it.

    use super::*;
    use std::f64::consts::PI;

    #[test]
    fn libhdf5_reads_what_lamino_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scan.h5");
        let s = scan(true);
        write_dxchange(&path, &s).unwrap();
        let file = hdf5::File::open(&path).unwrap();
        let data = file.dataset("exchange/data").unwrap();
        assert_eq!(data.shape(), [5, 6, 8]);
        assert_eq!(data.read_raw::<f32>().unwrap(), s.data.values);
        let truth = file.dataset("truth/volume").unwrap();
        assert_eq!(truth.read_raw::<f32>().unwrap(), s.truth.unwrap().values);
        let theta = file.dataset("exchange/theta").unwrap();
        let degrees = theta.read_raw::<f64>().unwrap();
        assert!((degrees[1] - 0.3f64.to_degrees()).abs() < 1e-12);
        let units: hdf5::types::FixedAscii<8> = theta.attr("units").unwrap().read_scalar().unwrap();
        assert_eq!(units.as_str(), "degrees");
        let phi = file.dataset("lamino/phi_deg").unwrap();
        assert!((phi.read_scalar::<f64>().unwrap() - 110.0).abs() < 1e-12);

        let volume = dir.path().join("recon.h5");
        write_volume_h5(&volume, &s.data).unwrap();
        let file = hdf5::File::open(&volume).unwrap();
        assert_eq!(
            file.dataset("volume").unwrap().read_raw::<f32>().unwrap(),
            s.data.values
        );
    }

    #[test]
    fn lamino_reads_what_libhdf5_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (n, h, w) = (7, 6, 8);
        for (chunked, name) in [(false, "contiguous.h5"), (true, "chunked.h5")] {
            let path = dir.path().join(name);
            let file = hdf5::File::create(&path).unwrap();
            let ex = file.create_group("exchange").unwrap();
            let counts: Vec<u16> = expected("data", n * h * w)
                .iter()
                .map(|&v| v as u16)
                .collect();
            let flats: Vec<f64> = expected("flats", 3 * h * w);
            let darks: Vec<f64> = expected("darks", 2 * h * w);
            let filtered = || {
                let b = ex.new_dataset_builder();
                if chunked {
                    b.chunk([2, 4, w]).shuffle().deflate(4)
                } else {
                    b
                }
            };
            filtered()
                .with_data(&ndarray::Array3::from_shape_vec((n, h, w), counts.clone()).unwrap())
                .create("data")
                .unwrap();
            filtered()
                .with_data(&ndarray::Array3::from_shape_vec((3, h, w), flats.clone()).unwrap())
                .create("data_white")
                .unwrap();
            filtered()
                .with_data(&ndarray::Array3::from_shape_vec((2, h, w), darks.clone()).unwrap())
                .create("data_dark")
                .unwrap();
            let degrees: Vec<f64> = (0..n).map(|i| 30.0 * i as f64).collect();
            ex.new_dataset_builder()
                .with_data(&degrees)
                .create("theta")
                .unwrap();
            // libhdf5 writes the file out when its last handle closes.
            drop((ex, file));

            let reader = DxchangeReader::open(&path).unwrap();
            assert_eq!(reader.info().projections.sample, SampleType::U16);
            assert_eq!(reader.info().flats.sample, SampleType::F64);
            let s = read_dxchange(&path).unwrap();
            let as_f32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
            assert_eq!(s.data.values, as_f32(&expected("data", n * h * w)));
            assert_eq!(s.flats.values, as_f32(&flats));
            assert_eq!(s.darks.values, as_f32(&darks));
            assert_eq!(
                reader.read_projections(3..6).unwrap().values,
                s.data.values[3 * h * w..6 * h * w]
            );
            assert!((s.theta[1] - PI / 6.0).abs() < 1e-15);
        }
    }
}
