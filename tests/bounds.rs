//! Bounded options and the runs at the edges (issue #59): counts and sizes refused before any
//! work with the bound named, `try` candidates off the detector refused as `reconstruct`
//! refuses them, preview names with the precision of the step, a resume that asks for fewer
//! iterations than its checkpoint holds refused with the numbers, and 1-row, 1-column and 1 x 1
//! detectors reconstructed. Runs the binary on 8^3 scans on the software adapter.

mod common;

use lamino::Tilt;
use std::path::Path;
use std::process::Output;

use lamino::Geometry;

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn lamino(args: &[&str]) -> Output {
    common::process::run_lamino(args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `args` fails with a message holding every one of `needles`.
fn refused(args: &[&str], needles: &[&str]) {
    let o = lamino(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    for needle in needles {
        assert!(err.contains(needle), "{args:?}: no {needle:?} in {err}");
    }
}

#[test]
fn counts_and_sizes_are_refused_with_their_bound() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.h5");
    common::simulate_scan(&scan, "chip", 8);
    let (scan, out) = (s(&scan), s(&dir.path().join("out")));
    let huge = "18446744073709551615";
    for (extra, needles) in [
        (
            vec!["--remove-stripe", "sort", "--sort-size", huge],
            vec![huge, "sinograms 8 pixels wide", "at most 9"],
        ),
        (
            vec!["--remove-stripe", "sort", "--sort-size", "4294967296"],
            vec!["at most 9"],
        ),
        (vec!["--inner", huge], vec!["--inner", "at most 100"]),
        (
            vec!["--iterations", "4294967296"],
            vec!["--iterations", "at most 100000"],
        ),
        (
            vec!["--max-iterations", huge],
            vec!["--max-iterations", "at most 100000"],
        ),
    ] {
        let mut args = vec!["reconstruct", &scan, "--out", &out];
        args.extend(&extra);
        refused(&args, &needles);
    }
    for slices in ["4294967296", "9223372036854775808", "0"] {
        refused(
            &[
                "try",
                &scan,
                "--rotation-axis-range",
                "3:5:1",
                "--slab-slices",
                slices,
                "--out",
                &out,
            ],
            &["from 1 to the volume's 8 slices"],
        );
    }
    // An axis off the detector: refused by try as by reconstruct, with the detector's extent.
    for args in [
        vec!["try", &scan, "--rotation-axis-range=-100:-90:1"],
        vec!["try", &scan, "--rotation-axis-range=4:40:1"],
        vec!["reconstruct", &scan, "--rotation-axis=-95"],
    ] {
        let mut args = args.clone();
        args.extend(["--out", &out]);
        refused(&args, &["within the detector [0, 8]"]);
    }
    assert!(!dir.path().join("out").exists(), "a refused run wrote");
}

#[test]
fn try_names_its_previews_with_the_precision_of_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.h5");
    common::simulate_scan(&scan, "chip", 8);
    let out = dir.path().join("try");
    let o = lamino(&[
        "try",
        &s(&scan),
        "--rotation-axis-range",
        "4:4.01:0.005",
        "--out",
        &s(&out),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for name in ["axis_4.000.png", "axis_4.005.png", "axis_4.010.png"] {
        assert!(out.join(name).exists(), "no {name}");
    }
}

#[test]
fn a_resume_with_fewer_iterations_than_its_checkpoint_is_refused_with_the_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.h5");
    common::simulate_scan(&scan, "chip", 8);
    let (scan, out) = (s(&scan), s(&dir.path().join("rec")));
    let run = |extra: &[&str]| {
        let mut args = vec!["reconstruct", &scan, "--out", &out, "--quiet"];
        args.extend(extra);
        lamino(&args)
    };
    let o = run(&["--iterations", "3", "--checkpoint-every", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = || std::fs::read(Path::new(&out).join("report.json")).unwrap();
    let before = report();
    let o = run(&["--iterations", "2", "--resume"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the checkpoint holds 3 outer iterations, more than the 2"),
        "{err}"
    );
    assert!(report() == before, "a refused resume replaced the outputs");
    // As many as it holds: nothing more to run, and the report says 3.
    let o = run(&["--iterations", "3", "--resume"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&report()).unwrap();
    assert_eq!(
        report["reconstruction"]["params"]["outer_iterations"], 3,
        "{report}"
    );
}

#[test]
fn detectors_of_one_row_or_one_column_are_reconstructed() {
    let dir = tempfile::tempdir().unwrap();
    for (deth, detw) in [(1, 8), (8, 1), (1, 1)] {
        let mut g = Geometry::cube(8, 8, Tilt::CT);
        (g.deth, g.detw) = (deth, detw);
        (g.n0, g.n1, g.n2) = (deth, detw, detw);
        let name = format!("{deth}x{detw}");
        let geometry = dir.path().join(format!("{name}.json"));
        g.write_json(&geometry).unwrap();
        let values: Vec<f32> = (0..g.ntheta() * deth * detw)
            .map(|i| 0.1 + (i % detw) as f32 * 0.01)
            .collect();
        let npy = dir.path().join(format!("{name}.npy"));
        lamino::io::write_f32_npy(&npy, &[g.ntheta(), deth, detw], &values).unwrap();
        let out = dir.path().join(&name);
        let o = lamino(&[
            "reconstruct",
            &s(&npy),
            "--geometry",
            &s(&geometry),
            "--iterations",
            "1",
            "--quiet",
            "--out",
            &s(&out),
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let volume = lamino::io::read_tiff_volume(&out.join("recon.tif")).unwrap();
        assert_eq!(volume.shape, [deth, detw, detw], "{name}");
        assert!(volume.values.iter().all(|v| v.is_finite()), "{name}");
    }
}
