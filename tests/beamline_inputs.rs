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
use lamino::io::{read_dxchange, read_tiff_volume, AngleUnit, IoError, Scan, Stack};
use lamino::operator::Geometry;
use lamino::recon::input::{load_projections, read_angle_list_in, InputError, ProjectionInput};

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
    let phi = [scan.phi.unwrap().to_degrees()];
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
    let [n, h, w] = scan.data.shape;
    let nflat = scan.flats.shape[0];
    let mut frames = scan.darks.values[..h * w].to_vec();
    frames.extend_from_slice(&scan.flats.values);
    frames.extend_from_slice(&scan.data.values);
    let mut keys = vec![2i64];
    keys.extend(std::iter::repeat_n(1, nflat));
    keys.extend(std::iter::repeat_n(0, n));
    let mut angles = vec![0.0; 1 + nflat];
    angles.extend_from_slice(degrees);
    let total = (1 + nflat + n) as u64;
    let det = "entry/instrument/detector";
    let file = Hdf5Builder::new()
        .dataset(
            DatasetBuilder::typed_data(format!("{det}/data"), [total, h as u64, w as u64], &frames)
                .unwrap(),
        )
        .dataset(DatasetBuilder::typed_data(format!("{det}/image_key"), [total], &keys).unwrap())
        .dataset(
            DatasetBuilder::typed_data("entry/sample/rotation_angle", [total], &angles)
                .unwrap()
                .attribute(AttributeBuilder::fixed_string("units", "degree")),
        );
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
    let tilt = (scan.phi.unwrap().to_degrees() - 90.0).round();
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
        (&tif, ["--geometry", o], "a TIFF intensity stack"),
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
