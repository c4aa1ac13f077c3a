//! Messages and environment of `lamino` commands seen on real runs (issue #60): the Vulkan
//! loader's complaint about XDG_RUNTIME_DIR, `--dry-run` without the software-adapter opt-in, the
//! range `--lamino-start-row/--lamino-end-row` suggests, the tilt a CT file without one asks
//! for, and SIGTERM during the rotation-axis search.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use lamino::io::write_dxchange;
use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};

use common::process::{lamino_command, output_within, run_lamino, succeeded};

/// A noiseless chip scan of `size`^3 voxels and `size` angles written to `dir/scan.h5`, with
/// its tilt (`None`: a CT file that records none).
fn scan(dir: &Path, size: usize, tilt: Option<f64>) -> String {
    let mut sim = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size,
        angles: size,
        tilt_deg: tilt.unwrap_or(0.0),
        photons: None,
        seed: 1,
        rotation_axis: None,
    })
    .unwrap();
    if tilt.is_none() {
        sim.scan.tilt = None;
    }
    let path = dir.join("scan.h5");
    write_dxchange(&path, &sim.scan).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_dry_run_without_a_runtime_dir_or_the_software_opt_in_plans_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let h5 = scan(dir.path(), 16, Some(30.0));
    let out = dir.path().join("out");
    for runtime_dir in [None, Some(""), Some("relative")] {
        let mut cmd = lamino_command();
        cmd.args(["reconstruct", &h5, "--dry-run", "--out"])
            .arg(&out);
        match runtime_dir {
            None => cmd.env_remove("XDG_RUNTIME_DIR"),
            Some(d) => cmd.env("XDG_RUNTIME_DIR", d),
        };
        let o = output_within(&mut cmd, Duration::from_secs(120));
        let stderr = succeeded(&o);
        assert!(
            !stderr.contains("XDG_RUNTIME_DIR"),
            "{runtime_dir:?}: {stderr}"
        );
        assert!(!stderr.contains("--allow-software-gpu") || stderr.contains("the plan is for"));
        let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(plan["mode"].is_string(), "{plan}");
    }
    // A plan reads no projection and writes nothing.
    assert!(!out.exists());
}

#[test]
fn the_lamino_rows_refused_suggest_a_range_that_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let h5 = scan(dir.path(), 16, Some(30.0));
    let out = dir.path().join("out");
    let dry_run = |rows: [&str; 2]| {
        run_lamino(&[
            "reconstruct",
            &h5,
            "--binning",
            "1",
            "--lamino-start-row",
            rows[0],
            "--lamino-end-row",
            rows[1],
            "--dry-run",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let o = dry_run(["0", "2"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    // Binned by 2, the slab of 1 plane is below the kernel's 4: 0:4 binned is 0:8 unbinned.
    let suggested = "the nearest valid range is --lamino-start-row 0 --lamino-end-row 8";
    assert!(
        !o.status.success() && stderr.contains(suggested),
        "{stderr}"
    );
    succeeded(&dry_run(["0", "8"]));
}

#[test]
fn a_ct_file_without_a_tilt_asks_for_tilt_deg_0() {
    let dir = tempfile::tempdir().unwrap();
    let h5 = scan(dir.path(), 16, None);
    let out = dir.path().join("out");
    let o = run_lamino(&[
        "reconstruct",
        &h5,
        "--dry-run",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("`--tilt-deg 0` for plain CT"),
        "{stderr}"
    );
}

#[cfg(unix)]
#[test]
fn sigterm_during_the_axis_search_says_so_and_leaves_no_staging() {
    let dir = tempfile::tempdir().unwrap();
    let h5 = scan(dir.path(), 32, Some(30.0));
    let out = dir.path().join("out");
    let mut child = lamino_command()
        .args([
            "--allow-software-gpu",
            "reconstruct",
            &h5,
            "--rotation-axis",
            "auto",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = common::process::stderr_lines(&mut child);
    // The search says when it begins (it takes seconds here); the tilt's source, printed while
    // the projections are read, came too early (a SIGTERM there stops the reading).
    let mut seen = Vec::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(120)) {
        let searching = line.contains("searching for the rotation axis");
        seen.push(line);
        if searching {
            break;
        }
    }
    common::process::signal(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    seen.extend(lines.iter());
    let stderr = seen.join("\n");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{stderr}");
    assert!(
        stderr.contains("stopped by SIGTERM during the rotation-axis search; nothing written"),
        "{stderr}"
    );
    assert!(!stderr.contains("reconstructing"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&out)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// The device's limits by `--limits` or LAMINO_LIMITS: the portable ones run (the self-test's
/// transforms pass under them); a setting other than `adapter` or `portable` is refused, naming
/// the option or the variable, before any device opens.
#[test]
fn the_device_limits_are_chosen_by_option_or_variable_and_a_bad_one_is_refused() {
    let run = |limits_env: Option<&str>, args: &[&str]| {
        let mut cmd = lamino_command();
        cmd.env_remove("LAMINO_LIMITS")
            .env("XDG_RUNTIME_DIR", std::env::temp_dir())
            .args(args)
            .arg("--allow-software-gpu");
        if let Some(v) = limits_env {
            cmd.env("LAMINO_LIMITS", v);
        }
        cmd.output().unwrap()
    };
    for (env, args) in [
        (None, &["selftest", "--limits", "portable"][..]),
        (Some("portable"), &["selftest"][..]),
    ] {
        let o = run(env, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{env:?} {args:?}: {err}");
    }
    let o = run(None, &["selftest", "--limits", "large"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("invalid value 'large' for '--limits <LIMITS>'")
            && err.contains("[possible values: adapter, portable]"),
        "{err}"
    );
    let o = run(Some("large"), &["selftest"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("LAMINO_LIMITS=\"large\": expected \"adapter\""),
        "{err}"
    );
}
