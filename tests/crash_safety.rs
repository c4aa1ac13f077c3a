//! Resume and crash safety of `lamino reconstruct`: a checkpoint resumes from every input route;
//! a run killed at seeded moments (SIGKILL, an abort in the middle of a checkpoint write) or
//! interrupted with SIGINT, then resumed, ends with the volume of an uninterrupted run, bit for
//! bit.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lamino::io::{write_dxchange, write_tiff_volume};
use lamino::random::SplitMix64;
use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};

use common::process::{lamino_command, recon_tif, succeeded};

const ITERATIONS: &str = "6";

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// Writes one simulated scan three ways and returns the input arguments of each route (the
/// DXchange route twice: with the default rotation axis and with `--rotation-axis`).
fn inputs(dir: &Path) -> Vec<(&'static str, Vec<String>)> {
    let sim = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size: 16,
        angles: 12,
        tilt_deg: 25.0,
        photons: Some(1e5),
        seed: 3,
        rotation_axis: None,
    })
    .unwrap();
    let h5 = dir.join("scan.h5");
    write_dxchange(&h5, &sim.scan).unwrap();
    write_tiff_volume(&dir.join("data.tif"), &sim.scan.data).unwrap();
    write_tiff_volume(&dir.join("flats.tif"), &sim.scan.flats).unwrap();
    // Degrees with long decimal expansions: the checkpoint must not care how they print.
    let degrees: Vec<String> = sim
        .scan
        .theta
        .iter()
        .map(|t| format!("{:.17}", t.to_degrees() + 1.0 / 3.0))
        .collect();
    std::fs::write(dir.join("angles.txt"), degrees.join("\n")).unwrap();
    let mut g = sim.geometry.clone();
    g.theta = sim.geometry.theta.iter().map(|t| t + 0.1 / 3.0).collect();
    g.write_json(&dir.join("g.json")).unwrap();
    let line_integrals =
        ndarray::Array3::from_shape_vec((g.ntheta(), g.deth, g.detw), sim.line_integrals.clone())
            .unwrap();
    ndarray_npy::write_npy(dir.join("p.npy"), &line_integrals).unwrap();
    vec![
        ("dxchange", vec![s(&h5)]),
        (
            "tiff",
            vec![
                s(&dir.join("data.tif")),
                "--angles".into(),
                s(&dir.join("angles.txt")),
                "--tilt-deg".into(),
                "25".into(),
                "--flats".into(),
                s(&dir.join("flats.tif")),
            ],
        ),
        (
            "npy",
            vec![
                s(&dir.join("p.npy")),
                "--geometry".into(),
                s(&dir.join("g.json")),
            ],
        ),
        // The rotation axis off centre: part of the geometry's fingerprint.
        (
            "dxchange-axis",
            vec![s(&h5), "--rotation-axis".into(), "8.75".into()],
        ),
    ]
}

fn reconstruct(input: &[String], out: &Path, extra: &[&str]) -> Command {
    let mut cmd = lamino_command();
    cmd.arg("--allow-software-gpu")
        .arg("reconstruct")
        .args(input)
        .args(["--out", &s(out), "--quiet"])
        .args(extra);
    cmd
}

#[test]
fn a_checkpoint_resumes_from_every_input_route_to_the_uninterrupted_bits() {
    let dir = tempfile::tempdir().unwrap();
    for (route, input) in inputs(dir.path()) {
        let full = dir.path().join(format!("{route}-full"));
        succeeded(
            &reconstruct(&input, &full, &["--iterations", ITERATIONS])
                .output()
                .unwrap(),
        );
        let split = dir.path().join(format!("{route}-split"));
        succeeded(
            &reconstruct(
                &input,
                &split,
                &["--iterations", "3", "--checkpoint-every", "1"],
            )
            .output()
            .unwrap(),
        );
        succeeded(
            &reconstruct(&input, &split, &["--iterations", ITERATIONS, "--resume"])
                .output()
                .unwrap(),
        );
        assert!(
            recon_tif(&full) == recon_tif(&split),
            "{route}: the resumed run differs from the uninterrupted one"
        );
    }
    // A checkpoint of the run with the axis at 8.75 does not resume with the axis elsewhere.
    let (_, input) = inputs(dir.path()).remove(0);
    let o = reconstruct(
        &input,
        &dir.path().join("dxchange-axis-split"),
        &[
            "--rotation-axis",
            "8.5",
            "--iterations",
            ITERATIONS,
            "--resume",
        ],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("different geometry"),
        "{stderr}"
    );
}

/// Every file under `dir` with its bytes, sorted by path.
fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .flat_map(|p| match p.is_dir() {
            true => snapshot(&p),
            false => vec![(p.clone(), std::fs::read(&p).unwrap())],
        })
        .collect();
    files.sort();
    files
}

/// An edit of a checkpoint's JSON header.
type HeaderEdit = fn(&mut serde_json::Value);

/// `checkpoint.ckpt` in `out` with its JSON header edited by `edit` and the checksum left as it
/// was (the layout is in `lamino::solver::Checkpoint`'s module docs).
fn edit_checkpoint_header(out: &Path, edit: HeaderEdit) {
    let path = out.join("checkpoint.ckpt");
    let bytes = std::fs::read(&path).unwrap();
    let len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[16..16 + len]).unwrap();
    edit(&mut header);
    let header = serde_json::to_vec(&header).unwrap();
    let mut edited = bytes[..8].to_vec();
    edited.extend_from_slice(&(header.len() as u64).to_le_bytes());
    edited.extend_from_slice(&header);
    edited.extend_from_slice(&bytes[16 + len..]);
    std::fs::write(&path, edited).unwrap();
}

#[test]
fn resume_refuses_an_edited_checkpoint_and_leaves_the_previous_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let (_, input) = inputs(dir.path()).remove(0);
    // Two iterations fewer than were done, with the report of the iteration before them:
    // consistent, so only the checksum over the header can tell; then the iteration count
    // alone, which the consistency checks refuse.
    let cases: [(&str, HeaderEdit); 2] = [
        ("checksum mismatch", |h| {
            h["iteration"] = 1.into();
            h["last_report"]["iteration"] = 0.into();
        }),
        ("last_report.iteration = 2", |h| h["iteration"] = 1.into()),
    ];
    for (expected, edit) in cases {
        let out = dir.path().join(expected.replace(' ', "-"));
        succeeded(
            &reconstruct(
                &input,
                &out,
                &["--iterations", "3", "--checkpoint-every", "1"],
            )
            .output()
            .unwrap(),
        );
        edit_checkpoint_header(&out, edit);
        let before = snapshot(&out);
        let o = reconstruct(&input, &out, &["--iterations", ITERATIONS, "--resume"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success()
                && stderr.contains("is not a usable lamino checkpoint")
                && stderr.contains(expected),
            "{stderr}"
        );
        assert!(snapshot(&out) == before, "{expected}: the outputs changed");
    }
}

/// Completes a run that was stopped: resumes from its checkpoint, or starts again when it was
/// stopped before writing one.
fn finish(input: &[String], out: &Path) {
    let ckpt = out.join("checkpoint.ckpt");
    let mut extra = vec!["--iterations", ITERATIONS, "--checkpoint-every", "1"];
    if ckpt.exists() {
        extra.push("--resume");
    }
    succeeded(&reconstruct(input, out, &extra).output().unwrap());
}

#[test]
fn runs_killed_at_seeded_moments_resume_to_the_uninterrupted_bits() {
    let dir = tempfile::tempdir().unwrap();
    let (_, input) = inputs(dir.path()).remove(0);
    let reference = dir.path().join("reference");
    let start = Instant::now();
    succeeded(
        &reconstruct(
            &input,
            &reference,
            &["--iterations", ITERATIONS, "--checkpoint-every", "1"],
        )
        .output()
        .unwrap(),
    );
    let duration = start.elapsed();

    // SIGKILL at seeded moments over the whole run.
    let mut rng = SplitMix64::new(11);
    for case in 0..4 {
        let out = dir.path().join(format!("killed-{case}"));
        let mut child = reconstruct(
            &input,
            &out,
            &["--iterations", ITERATIONS, "--checkpoint-every", "1"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        std::thread::sleep(duration.mul_f64(0.15 + 0.7 * rng.next_f64()));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        finish(&input, &out);
        assert!(
            recon_tif(&out) == recon_tif(&reference),
            "SIGKILL case {case}"
        );
    }

    // An abort in the middle of the 2nd and of the 5th checkpoint write: the file being
    // written is left half-written under its temporary name, the last complete checkpoint
    // stays valid, and the run resumes from it.
    for n in ["2", "5"] {
        let out = dir.path().join(format!("torn-{n}"));
        let o = reconstruct(
            &input,
            &out,
            &["--iterations", ITERATIONS, "--checkpoint-every", "1"],
        )
        .env("LAMINO_FAULT_ABORT_CHECKPOINT", n)
        .output()
        .unwrap();
        assert!(!o.status.success(), "the fault was not injected");
        let partial = out.join("checkpoint.ckpt.partial");
        assert!(partial.exists());
        assert!(out.join("checkpoint.ckpt").exists());
        assert!(!out.join("recon.tif").exists());
        finish(&input, &out);
        assert!(
            !partial.exists(),
            "the resumed run removes the half-written checkpoint"
        );
        assert!(
            recon_tif(&out) == recon_tif(&reference),
            "abort in checkpoint write {n}"
        );
    }
}

#[cfg(unix)]
#[test]
fn sigint_stops_after_the_current_iteration_with_a_checkpoint_to_resume_from() {
    let dir = tempfile::tempdir().unwrap();
    let (_, input) = inputs(dir.path()).remove(0);
    let reference = dir.path().join("reference");
    succeeded(
        &reconstruct(&input, &reference, &["--iterations", ITERATIONS])
            .output()
            .unwrap(),
    );
    // A long run, interrupted once its first checkpoint is on disk.
    let out = dir.path().join("interrupted");
    let child = reconstruct(
        &input,
        &out,
        &["--iterations", "300", "--checkpoint-every", "1"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let ckpt = out.join("checkpoint.ckpt");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ckpt.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    common::process::signal(&child, libc::SIGINT);
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("interrupted"),
        "{stderr}"
    );
    assert!(!out.join("recon.tif").exists());
    let stopped_at = lamino::solver::Checkpoint::read(&ckpt).unwrap().iteration;
    assert!(stopped_at < 300, "SIGINT did not stop the run");
    // Resumed with the reference's iteration count, it ends on the reference's bits (when it
    // stopped before the reference's last iteration, as it does on any device this test meets).
    succeeded(
        &reconstruct(&input, &out, &["--iterations", ITERATIONS, "--resume"])
            .output()
            .unwrap(),
    );
    if stopped_at <= ITERATIONS.parse().unwrap() {
        assert!(recon_tif(&out) == recon_tif(&reference));
    }
}

/// `--rotation-axis auto --resume` takes the axis the checkpoint was written with (no second
/// search) and ends on the bits of an uninterrupted run; another axis is refused naming it.
#[test]
fn an_auto_axis_resumes_with_the_checkpoints_axis_and_a_mismatch_names_both() {
    let dir = tempfile::tempdir().unwrap();
    let (_, input) = inputs(dir.path()).remove(0);
    let auto = ["--rotation-axis", "auto"];
    let full = dir.path().join("full");
    succeeded(
        &reconstruct(
            &input,
            &full,
            &[&auto[..], &["--iterations", ITERATIONS]].concat(),
        )
        .output()
        .unwrap(),
    );
    let split = dir.path().join("split");
    let first = ["--iterations", "3", "--checkpoint-every", "1"];
    succeeded(
        &reconstruct(&input, &split, &[&auto[..], &first].concat())
            .output()
            .unwrap(),
    );
    let preprocessing = |out: &Path| {
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        report["reconstruction"]["preprocessing"].clone()
    };
    let found = preprocessing(&split)["rotation_axis"].as_f64().unwrap();
    // Not quiet: what it says of the axis is the point.
    let resumed = lamino_command()
        .args(["--allow-software-gpu", "reconstruct"])
        .args(&input)
        .args(["--out", &s(&split), "--iterations", ITERATIONS, "--resume"])
        .args(auto)
        .output()
        .unwrap();
    let stderr = succeeded(&resumed);
    assert!(
        stderr.contains("not searched again") && !stderr.contains("rotation axis searched"),
        "{stderr}"
    );
    let pre = preprocessing(&split);
    assert_eq!(pre["rotation_axis_source"], "checkpoint", "{pre}");
    assert_eq!(pre["rotation_axis"].as_f64(), Some(found), "{pre}");
    assert!(recon_tif(&full) == recon_tif(&split));
    // The printed axis moved a quarter column: both values named, in unbinned columns.
    let moved = format!("{:.2}", found + 0.25);
    let o = reconstruct(
        &input,
        &split,
        &[
            "--rotation-axis",
            &moved,
            "--iterations",
            ITERATIONS,
            "--resume",
        ],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let named =
        format!("rotation_axis (unbinned columns): checkpoint {found:.2}, this run {moved}");
    assert!(!o.status.success() && stderr.contains(&named), "{stderr}");
}
