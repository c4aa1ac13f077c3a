//! Scans as beamline software writes them, end to end through `lamino reconstruct`: angles in
//! radians without a unit (refused, then read with `--theta-units rad`), `--angles` replacing an
//! HDF5 scan's angles, a scan without darks, an NXtomo file (`.nxs`), and options that do not
//! apply to an input refused by name. Each variant is the same simulated 16^3 scan, so every
//! accepted one must give the plain DXchange file's line integrals and geometry (and volume) bit
//! for bit.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use hdf5_writer::{AttributeBuilder, DatasetBuilder, Hdf5Builder, Hdf5Writer, WriteOptions};
use lamino::geometry::Geometry;
use lamino::io::{
    read_dxchange, read_dxchange_with, read_tiff_volume, AngleUnit, IoError, Scan, ScanOptions,
    Stack, StatedLength,
};
use lamino::recon::input::{
    input_geometry, load_projections, read_angle_list_in, InputError, LoadOptions, ProjectionInput,
};

const SIZE: usize = 16;

fn lamino(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lamino"))
        .args(args)
        .arg("--allow-software-gpu")
        .env_remove("LAMINO_ALLOW_SOFTWARE_GPU")
        .output()
        .expect("run lamino")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Writes the stacks and angles of `scan` the way a beamline script would: `theta` as given
/// (with `units` if any), darks only if `darks`, the tilt in `/lamino/phi_deg`.
fn write_variant(path: &Path, scan: &Scan, theta: &[f64], units: Option<&str>, darks: bool) {
    let mut file = Hdf5Builder::new();
    let mut stacks = vec![("data", &scan.data), ("data_white", &scan.flats)];
    if darks {
        stacks.push(("data_dark", &scan.darks));
    }
    for (name, st) in stacks {
        let shape = st.shape.map(|n| n as u64);
        let d = DatasetBuilder::typed_data(format!("exchange/{name}"), shape, &st.values);
        file = file.dataset(d.unwrap());
    }
    let mut d = DatasetBuilder::typed_data("exchange/theta", [theta.len() as u64], theta).unwrap();
    if let Some(units) = units {
        d = d.attribute(AttributeBuilder::fixed_string("units", units));
    }
    let phi = [scan.tilt.unwrap().phi().to_degrees()];
    let tilt = DatasetBuilder::typed_data("lamino/phi_deg", Vec::<u64>::new(), &phi[..]);
    finish(path, file.dataset(d).dataset(tilt.unwrap()));
}

fn finish(path: &Path, file: Hdf5Builder) {
    let plan = file.into_plan().unwrap();
    let out = std::fs::File::create(path).unwrap();
    Hdf5Writer::new(out, WriteOptions::default())
        .finish(plan)
        .unwrap();
}

/// The scan as an NXtomo entry: a dark, the flats, then the projections, all in one stack, with
/// `image_key` and the rotation angles in degrees.
fn write_nxtomo(path: &Path, scan: &Scan, degrees: &[f64]) {
    write_nxtomo_without(path, scan, degrees, "");
}

/// [`write_nxtomo`] without `missing`: the `flats` or `projections` (frames and keys), the
/// `image_key` or the `rotation_angle` dataset ("" for none).
fn write_nxtomo_without(path: &Path, scan: &Scan, degrees: &[f64], missing: &str) {
    let [n, h, w] = scan.data.shape;
    let nflat = if missing == "flats" {
        0
    } else {
        scan.flats.shape[0]
    };
    let n = if missing == "projections" { 0 } else { n };
    let mut frames = scan.darks.values[..h * w].to_vec();
    frames.extend_from_slice(&scan.flats.values[..nflat * h * w]);
    frames.extend_from_slice(&scan.data.values[..n * h * w]);
    let mut keys = vec![2i64];
    keys.extend(std::iter::repeat_n(1, nflat));
    keys.extend(std::iter::repeat_n(0, n));
    let mut angles = vec![0.0; 1 + nflat];
    angles.extend_from_slice(&degrees[..n]);
    let total = (1 + nflat + n) as u64;
    let det = "entry/instrument/detector";
    let mut file = Hdf5Builder::new().dataset(
        DatasetBuilder::typed_data(format!("{det}/data"), [total, h as u64, w as u64], &frames)
            .unwrap(),
    );
    if missing != "image_key" {
        let d = DatasetBuilder::typed_data(format!("{det}/image_key"), [total], &keys);
        file = file.dataset(d.unwrap());
    }
    if missing != "rotation_angle" {
        let d = DatasetBuilder::typed_data("entry/sample/rotation_angle", [total], &angles);
        file = file.dataset(
            d.unwrap()
                .attribute(AttributeBuilder::fixed_string("units", "degree")),
        );
    }
    finish(path, file);
}

/// Reconstructs `input` with `extra` options into `out`; the volume and stderr.
fn reconstruct(input: &Path, extra: &[&str], out: &Path) -> (Stack, String) {
    let mut args = vec![
        "reconstruct",
        s(input),
        "--iterations",
        "2",
        "--out",
        s(out),
    ];
    args.extend_from_slice(extra);
    let o = lamino(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    (
        read_tiff_volume(&out.join("recon.tif")).unwrap(),
        stderr(&o),
    )
}

fn input_warnings(out: &Path) -> Vec<String> {
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let warnings = &report["reconstruction"]["preprocessing"]["input_warnings"];
    warnings
        .as_array()
        .unwrap_or_else(|| panic!("{report}"))
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

/// The simulated scan every test varies, written once per run of this test binary (under
/// cargo's scratch folder for integration tests), with its contents.
fn simulated() -> &'static (PathBuf, Scan) {
    static SCAN: OnceLock<(PathBuf, Scan)> = OnceLock::new();
    SCAN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("beamline_inputs");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("scan.h5");
        common::simulate_scan(&path, "chip", SIZE);
        let scan = read_dxchange(&path).unwrap();
        // Zero darks: a scan without them is the same scan.
        assert!(scan.darks.values.iter().all(|&v| v == 0.0));
        (path, scan)
    })
}

/// The line integrals and geometry `input` loads to, to compare variants of one scan without a
/// reconstruction each (equal inputs give equal volumes).
fn loaded(input: ProjectionInput) -> (Vec<f32>, Geometry) {
    let p = load_projections(&input).unwrap().projections;
    (p.values().to_vec(), p.geometry().clone())
}

fn hdf5_input(path: &Path, tilt_deg: Option<f64>, angles: Option<&Path>) -> ProjectionInput {
    ProjectionInput::DXchange {
        path: path.to_path_buf(),
        tilt_deg,
        angles: angles.map(Path::to_path_buf),
        theta_units: None,
        tilt_path: None,
        theta_path: None,
    }
}

fn degrees(scan: &Scan) -> Vec<f64> {
    scan.theta.iter().map(|t| t.to_degrees()).collect()
}

#[test]
fn radians_without_units_are_refused_and_theta_units_rad_gives_the_degrees_volume() {
    let (path, scan) = simulated();
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| -> PathBuf { dir.path().join(name) };
    let (reference, _) = reconstruct(path, &[], &p("ref"));
    // The radians are those lamino reads from the degrees file: the volumes agree to the bit.
    write_variant(&p("rad.h5"), scan, &scan.theta, None, true);
    let o = lamino(&["reconstruct", s(&p("rad.h5")), "--out", s(&p("refused"))]);
    assert!(!o.status.success());
    for part in ["rad.h5", "/exchange/theta", "--theta-units deg|rad"] {
        assert!(stderr(&o).contains(part), "{}", stderr(&o));
    }
    let (volume, _) = reconstruct(&p("rad.h5"), &["--theta-units", "rad"], &p("rad"));
    assert!(volume == reference);
}

#[test]
fn replaced_angles_and_missing_darks_are_said_on_stderr_and_in_the_report() {
    let (path, scan) = simulated();
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| -> PathBuf { dir.path().join(name) };
    let list = p("angles.csv");
    let mut text = String::from("# exported from the stage log\nframe,theta_deg\n");
    for (i, d) in degrees(scan).iter().enumerate() {
        text += &format!("{i},{d}\n");
    }
    std::fs::write(&list, text).unwrap();
    // Unit-less radians that --angles replaces, and no darks.
    write_variant(&p("nodark.h5"), scan, &scan.theta, None, false);
    let want = loaded(hdf5_input(path, None, None));
    assert!(loaded(hdf5_input(&p("nodark.h5"), None, Some(&list))) == want);
    let (_, err) = reconstruct(&p("nodark.h5"), &["--angles", s(&list)], &p("out"));
    assert!(err.contains("angles.csv replace those of"), "{err}");
    assert!(err.contains("no dark fields"), "{err}");
    let warnings = input_warnings(&p("out"));
    assert!(
        warnings.iter().any(|w| w.contains("angles.csv")),
        "{warnings:?}"
    );
    assert!(
        warnings.iter().any(|w| w.contains("darks taken as zero")),
        "{warnings:?}"
    );
}

#[test]
fn an_nxtomo_scan_reconstructs_as_its_dxchange_twin() {
    let (path, scan) = simulated();
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| -> PathBuf { dir.path().join(name) };
    // Under the extension NeXus files take; NXtomo has no tilt.
    write_nxtomo(&p("scan.nxs"), scan, &degrees(scan));
    let tilt = scan.tilt.unwrap().degrees().round();
    assert!(
        loaded(hdf5_input(&p("scan.nxs"), Some(tilt), None))
            == loaded(hdf5_input(path, None, None))
    );
    let o = lamino(&["reconstruct", s(&p("scan.nxs")), "--out", s(&p("notilt"))]);
    assert!(
        !o.status.success() && stderr(&o).contains("--tilt-deg"),
        "{}",
        stderr(&o)
    );
    let (_, err) = reconstruct(&p("scan.nxs"), &["--tilt-deg", "30"], &p("nx"));
    assert!(err.contains("read as NXtomo (entry /entry)"), "{err}");
}

#[test]
fn options_that_do_not_apply_to_an_input_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let h5 = dir.path().join("scan.h5");
    let npy = dir.path().join("p.npy");
    let tif = dir.path().join("p.tif");
    let other = dir.path().join("other.txt");
    // The check comes before any file is read: none of these exist but `other`.
    std::fs::write(&other, "0").unwrap();
    let o = s(&other);
    let out = dir.path().join("out");
    for (input, option, kind) in [
        (&h5, ["--darks", o], "an HDF5 scan"),
        (&h5, ["--flats", o], "an HDF5 scan"),
        (&h5, ["--geometry", o], "an HDF5 scan"),
        (&h5, ["--flatfield", "envelope"], "an HDF5 scan"),
        (&npy, ["--tilt-deg", "20"], "`.npy` line integrals"),
        (&npy, ["--angles", o], "`.npy` line integrals"),
        (&npy, ["--theta-units", "rad"], "`.npy` line integrals"),
        (&npy, ["--darks", o], "`.npy` line integrals"),
        (&npy, ["--tilt-path", "/t"], "`.npy` line integrals"),
        (&tif, ["--geometry", o], "a TIFF intensity stack"),
        (&tif, ["--theta-path", "/t"], "a TIFF intensity stack"),
    ] {
        let args = [
            "reconstruct",
            s(input),
            option[0],
            option[1],
            "--out",
            s(&out),
        ];
        let result = lamino(&[&args[..], &["--dry-run"]].concat());
        let err = stderr(&result);
        assert!(!result.status.success(), "{option:?}: {err}");
        let want = format!("{} does not apply to {}", option[0], input.display());
        assert!(
            err.contains(&want) && err.contains(kind),
            "{option:?}: {err}"
        );
    }
}

#[test]
fn angle_lists_follow_the_unit_rules() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("angles.txt");
    let read = |text: &str, units| {
        std::fs::write(&list, text).unwrap();
        read_angle_list_in(&list, units)
    };
    // Degrees, with comments and blank lines.
    let got = read("# theta\n0\n\n90 # half\n180\n", None).unwrap();
    assert!(got == [0.0, 90f64.to_radians(), 180f64.to_radians()]);
    // Radians-looking without a unit: refused, naming the option.
    let err = read("0\n1.5\n3.1\n", None).unwrap_err();
    assert!(
        matches!(err, InputError::Io(IoError::AmbiguousAngles { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("--theta-units deg|rad"), "{err}");
    assert!(read("0\n1.5\n3.1\n", Some(AngleUnit::Radians)).unwrap() == [0.0, 1.5, 3.1]);
    // A small span in degrees is refused too.
    assert!(read("0\n2\n4\n", None).is_err());
    assert!(read("0\n2\n4\n", Some(AngleUnit::Degrees)).is_ok());
    // A CSV header names the unit; an option contradicting it is an error.
    let csv = "frame,angle_rad\n0,0\n1,1.5\n";
    assert!(read(csv, None).unwrap() == [0.0, 1.5]);
    let err = read(csv, Some(AngleUnit::Degrees)).unwrap_err();
    assert!(
        matches!(err, InputError::Io(IoError::AngleUnitConflict { .. })),
        "{err:?}"
    );
    // Nothing to read.
    assert!(matches!(
        read("# none\n", None),
        Err(InputError::Angles { .. })
    ));
}

/// Angles that span no rotation or are no angles at all are refused in any unit, naming where
/// they come from: `/exchange/theta` all 0 degrees or all 1e300 degrees, `rotation_step` 0 with
/// `--theta-units deg`, a list of zeros.
#[test]
fn degenerate_angles_are_refused_naming_them() {
    let (_, scan) = simulated();
    let dir = tempfile::tempdir().unwrap();
    let n = scan.data.shape[0];
    let path = dir.path().join("theta.h5");
    let deg = ScanOptions {
        theta_units: Some(AngleUnit::Degrees),
        ..ScanOptions::default()
    };
    for (theta, units) in [(0.0, Some("deg")), (0.0, None), (1e300, Some("degree"))] {
        write_variant(&path, scan, &vec![theta; n], units, true);
        let err = read_dxchange_with(&path, &deg).unwrap_err();
        let expected = match theta {
            0.0 => matches!(err, IoError::NoRotation { count, .. } if count == n),
            _ => matches!(err, IoError::AngleOutOfRange { index: 0, .. }),
        };
        assert!(expected, "{theta} {units:?}: {err:?}");
        assert!(err.to_string().contains("/exchange/theta"), "{err}");
    }

    // rotation_start + i * rotation_step with a step of 0.
    let step = dir.path().join("step.h5");
    let mut file = Hdf5Builder::new();
    for (name, st) in [("data", &scan.data), ("data_white", &scan.flats)] {
        let shape = st.shape.map(|n| n as u64);
        let d = DatasetBuilder::typed_data(format!("exchange/{name}"), shape, &st.values);
        file = file.dataset(d.unwrap());
    }
    for (name, value) in [("rotation_start", 10.0), ("rotation_step", 0.0)] {
        let d = DatasetBuilder::typed_data(
            format!("process/acquisition/rotation/{name}"),
            [1],
            &[value][..],
        );
        file = file.dataset(d.unwrap());
    }
    finish(&step, file);
    let err = read_dxchange_with(&step, &deg).unwrap_err();
    assert!(matches!(err, IoError::NoRotation { .. }), "{err:?}");
    assert!(err.to_string().contains("rotation_step"), "{err}");

    let list = dir.path().join("zeros.txt");
    std::fs::write(&list, "0\n0\n0\n").unwrap();
    let err = read_angle_list_in(&list, Some(AngleUnit::Degrees)).unwrap_err();
    assert!(
        matches!(err, InputError::Io(IoError::NoRotation { count: 3, .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("span no rotation"), "{err}");
}

/// An NXtomo file lacking its flats, its projections, `image_key` or `rotation_angle` is
/// refused naming what is missing, not as a file without `/exchange/data`.
#[test]
fn an_nxtomo_scan_missing_a_part_is_refused_naming_it() {
    let (_, scan) = simulated();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scan.nxs");
    for (missing, named) in [
        (
            "flats",
            "no frame has image key 1: the scan has no flat fields",
        ),
        (
            "projections",
            "no frame has image key 0: the scan has no projections",
        ),
        ("image_key", "/entry/instrument/detector/image_key"),
        ("rotation_angle", "/entry/sample/rotation_angle"),
    ] {
        write_nxtomo_without(&path, scan, &degrees(scan), missing);
        let err = match load_projections(&hdf5_input(&path, Some(30.0), None)) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{missing}: read without it"),
        };
        assert!(err.contains(named), "{missing}: {err}");
        assert!(!err.contains("/exchange/data"), "{missing}: {err}");
    }
}

/// A pixel size no output can record consistently is refused on the command line, and an
/// NXtomo `x_pixel_size` that is no pixel size is named, as DXchange metadata is (the scan's
/// reader turns it into an input warning), whatever its sign.
#[test]
fn pixel_sizes_that_cannot_be_recorded_are_refused_naming_the_range() {
    let (path, _) = simulated();
    for size in ["1e300", "1e-300", "-1", "nan"] {
        let option = format!("--pixel-size={size}");
        let o = lamino(&["reconstruct", s(path), &option, "--out", "unused"]);
        assert!(!o.status.success(), "{size}");
        assert!(
            stderr(&o).contains("expected 0.0001 to 10000 micrometres"),
            "{size}: {}",
            stderr(&o)
        );
    }
    for (value, units) in [(-6.5e-6, "m"), (0.0, "m"), (f64::NAN, "m"), (1e300, "nm")] {
        let stated = StatedLength {
            value,
            units: Some(units.into()),
        };
        let e = stated.micrometers().unwrap_err();
        assert!(e.contains("a pixel size of"), "{value} {units}: {e}");
    }
}

/// `.npy` line integrals with a geometry file of any size, as the other inputs take: the scan
/// cut to 15 rows and 13 columns, as a DXchange file (which the reconstruction pads) and as the
/// line integrals that file loads to with their geometry: both load to the same values and
/// geometry and reconstruct the same (15, 13, 13) volume, bit for bit.
#[test]
fn npy_line_integrals_of_any_size_reconstruct_as_the_other_inputs() {
    let (_, scan) = simulated();
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| -> PathBuf { dir.path().join(name) };
    let (h, w) = (15, 13);
    let cut = |st: &Stack| {
        let [n, rows, columns] = st.shape;
        let mut values = Vec::with_capacity(n * h * w);
        for frame in st.values.chunks(rows * columns) {
            for row in frame.chunks(columns).skip(1).take(h) {
                values.extend_from_slice(&row[2..2 + w]);
            }
        }
        Stack {
            shape: [n, h, w],
            values,
        }
    };
    let odd = Scan {
        data: cut(&scan.data),
        flats: cut(&scan.flats),
        darks: cut(&scan.darks),
        ..scan.clone()
    };
    write_variant(&p("odd.h5"), &odd, &degrees(scan), Some("degrees"), true);
    let (values, g) = loaded(hdf5_input(&p("odd.h5"), None, None));
    assert!([g.deth, g.detw, g.n0, g.n1, g.n2] == [h, w, h, w, w]);
    g.write_json(&p("odd.json")).unwrap();
    let array = ndarray::Array3::from_shape_vec((g.ntheta(), h, w), values.clone()).unwrap();
    ndarray_npy::write_npy(p("odd.npy"), &array).unwrap();
    let npy = ProjectionInput::LineIntegrals {
        path: p("odd.npy"),
        geometry: p("odd.json"),
    };
    assert!(loaded(npy) == (values, g));
    let (from_h5, _) = reconstruct(&p("odd.h5"), &[], &p("h5"));
    let (from_npy, _) = reconstruct(&p("odd.npy"), &["--geometry", s(&p("odd.json"))], &p("npy"));
    assert!(from_npy.shape == [h, w, w], "{:?}", from_npy.shape);
    assert!(from_npy == from_h5);
}

/// A fixture of `assets/dxchange/`.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets/dxchange")
        .join(name)
}

/// The geometry of the HDF5 scan `path` read with `tilt_deg`, `--tilt-path` and `--theta-path`
/// (the headers only), or the error.
fn hdf5_geometry(
    path: &Path,
    tilt_deg: Option<f64>,
    tilt_path: Option<&str>,
    theta_path: Option<&str>,
) -> Result<Geometry, InputError> {
    let input = ProjectionInput::DXchange {
        path: path.to_path_buf(),
        tilt_deg,
        angles: None,
        theta_units: None,
        tilt_path: tilt_path.map(str::to_string),
        theta_path: theta_path.map(str::to_string),
    };
    input_geometry(&input, &LoadOptions::default())
}

/// Degrees of the tilt `T` of a geometry (phi = 90 + T).
fn tilt_of(g: &Geometry) -> f64 {
    g.tilt.degrees()
}

/// The tilt and angles where a beamline's own layout holds them (`--tilt-path`, `--theta-path`,
/// both in radians by their `units`), and the NeXus rotation axis `vector` of an NXtomo file:
/// read from the file, said on stderr and in report.json; `--tilt-deg` overrides a file's tilt,
/// said when they differ; a file without a tilt names the options that give one.
#[test]
fn the_tilt_and_angles_are_read_where_the_file_records_them() {
    let paths = fixture("h5py_tilt_theta_paths_u16.h5");
    let (tilt, rotation) = (
        "/measurement/sample/lamino_tilt",
        "/measurement/sample/rotation_rad",
    );
    // Neither the angles nor the tilt are where DXchange keeps them.
    let e = hdf5_geometry(&paths, Some(20.0), None, None).unwrap_err();
    assert!(e.to_string().contains("/exchange/theta"), "{e}");
    let e = hdf5_geometry(&paths, None, None, Some(rotation)).unwrap_err();
    assert!(
        e.to_string().contains("--tilt-deg") && e.to_string().contains("--tilt-path"),
        "{e}"
    );
    let g = hdf5_geometry(&paths, None, Some(tilt), Some(rotation)).unwrap();
    assert!((tilt_of(&g) - 20.0).abs() <= 1e-9, "{}", tilt_of(&g));
    assert!(g.theta.len() == 12);
    for (i, t) in g.theta.iter().enumerate() {
        assert!((t.to_degrees() - 30.0 * i as f64).abs() <= 1e-9, "{i}: {t}");
    }
    let e = hdf5_geometry(&paths, None, Some("/nowhere"), Some(rotation)).unwrap_err();
    assert!(e.to_string().contains("/nowhere (--tilt-path)"), "{e}");
    // The option wins over the file's tilt.
    let g = hdf5_geometry(&paths, Some(30.0), Some(tilt), Some(rotation)).unwrap();
    assert!((tilt_of(&g) - 30.0).abs() <= 1e-9);

    // NXtomo: the rotation axis leaning 25 degrees towards the beam.
    let nx = fixture("nxtomo_tilted_f32.nx");
    let g = hdf5_geometry(&nx, None, None, None).unwrap();
    assert!((tilt_of(&g) - 25.0).abs() <= 1e-9, "{}", tilt_of(&g));
    let plain = fixture("nxtomo_f32.nx");
    let e = hdf5_geometry(&plain, None, None, None).unwrap_err();
    assert!(e.to_string().contains("--tilt-deg"), "{e}");

    // End to end: the sources on stderr and in report.json, the override said.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let args = ["--tilt-path", tilt, "--theta-path", rotation];
    let (_, err) = reconstruct(&paths, &args, &out);
    assert!(
        err.contains(&format!(
            "tilt 20.000000 degrees from {tilt} (units radians)"
        )) && err.contains(&format!("angles from {rotation}")),
        "{err}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let pre = &report["reconstruction"]["preprocessing"];
    assert!(
        pre["tilt_source"] == format!("{tilt} (units radians)"),
        "{pre}"
    );
    assert!(pre["angles_source"] == rotation, "{pre}");
    let (_, err) = reconstruct(&nx, &["--tilt-deg", "30"], &out);
    assert!(
        err.contains("--tilt-deg 30 overrides the tilt of 25.000000 degrees"),
        "{err}"
    );
    assert!(input_warnings(&out)
        .iter()
        .any(|w| w.contains("overrides the tilt")));
}
