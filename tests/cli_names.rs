//! The command line's names and help: tomocupy's names (`--binning` as an exponent, aliases,
//! refusals that say why), `apply --out`, defaults and examples in the help, GPU options only on
//! the commands that use a GPU, the parameter echo. Runs the binary; the GPU runs use the
//! software adapter at 8^3.

mod common;

use std::path::Path;
use std::process::Output;

use lamino::io::{read_complex_npy, write_complex_npy, ComplexArray};
use lamino::random::SplitMix64;

/// lamino with `args`, without the software-adapter opt-in of the environment.
fn lamino(args: &[&str]) -> Output {
    common::process::lamino_command()
        .args(args)
        .output()
        .expect("run lamino")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A noisy 32^3 chip scan (32 angles, tilt 30 degrees) in `dir`.
fn scan(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("scan.h5");
    let o = lamino(&[
        "simulate",
        "--phantom",
        "chip",
        "--size",
        "32",
        "--angles",
        "32",
        "--tilt-deg",
        "30",
        "--photons",
        "1e5",
        "--out",
        s(&path),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    path
}

#[test]
fn help_shows_defaults_examples_and_no_internal_notes() {
    let o = lamino(&["help", "reconstruct"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&o);
    let d = lamino::AdmmParams::default();
    let solver_defaults = [
        d.outer_iterations.to_string(),
        d.alpha.to_string(),
        d.rho0.to_string(),
        d.relaxation.to_string(),
    ]
    .map(|v| format!("[default: {v}]"));
    // The CG steps' default follows the width: the help states the rule with the constants.
    let inner_rule = format!(
        "[default: {} on volumes narrower than {} voxels (with padding), {} from {}",
        lamino::AdmmParams::INNER_ITERATIONS,
        lamino::AdmmParams::WIDE_FROM,
        lamino::AdmmParams::WIDE_INNER_ITERATIONS,
        lamino::AdmmParams::WIDE_FROM
    );
    for expected in solver_defaults
        .iter()
        .chain([&inner_rule])
        .map(String::as_str)
        .chain([
            "Examples:",
            "lamino reconstruct scan.h5",
            "[default: 0]",
            "[default: 256]",
            "(default 1)",
            "GPU options",
            "--lamino-angle",
            "--center",
            "--remove-stripe-method",
        ])
    {
        assert!(help.contains(expected), "no {expected:?} in\n{help}");
    }
    for command in [
        "reconstruct",
        "try",
        "demo",
        "flatfield",
        "apply",
        "bench",
        "score",
    ] {
        let o = lamino(&["help", command]);
        let help = stdout(&o);
        assert!(o.status.success(), "{command}: {}", stderr(&o));
        for internal in ["lamino::", "issue", "the name the"] {
            assert!(
                !help.contains(internal),
                "{command}: {internal:?} in\n{help}"
            );
        }
    }
}

#[test]
fn gpu_options_appear_only_on_commands_that_use_a_gpu() {
    for command in [
        "reconstruct",
        "try",
        "demo",
        "selftest",
        "apply",
        "bench",
        "flatfield",
    ] {
        let help = stdout(&lamino(&[command, "--help"]));
        assert!(
            help.contains("--device") && help.contains("--allow-software-gpu"),
            "{command}:\n{help}"
        );
    }
    for command in ["score", "simulate", "devices"] {
        let help = stdout(&lamino(&[command, "--help"]));
        assert!(
            !help.contains("--device") && !help.contains("--allow-software-gpu"),
            "{command}:\n{help}"
        );
        // Nor are they accepted there after the command.
        let o = lamino(&[command, "--allow-software-gpu"]);
        assert!(
            stderr(&o).contains("unexpected argument '--allow-software-gpu'"),
            "{command}: {}",
            stderr(&o)
        );
    }
    // Before the command or after it, the device is the one named (the one after the command
    // when both are given).
    for args in [
        vec!["--device", "99", "selftest", "--allow-software-gpu"],
        vec!["selftest", "--device", "99", "--allow-software-gpu"],
        vec![
            "--device",
            "0",
            "selftest",
            "--device",
            "99",
            "--allow-software-gpu",
        ],
    ] {
        let o = lamino(&args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?}");
        assert!(err.contains("no adapter with index 99"), "{args:?}: {err}");
    }
}

#[test]
fn tomocupy_names_without_an_equivalent_say_what_lamino_offers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rec");
    for (args, needles) in [
        (
            vec!["--save-format", "tiff"],
            vec!["--save-format", "--format", "recon.tif", "recon.h5"],
        ),
        (
            vec!["--start-row", "100"],
            vec!["--start-row", "--slab START:END"],
        ),
        (
            vec!["--end-row", "200"],
            vec!["--end-row", "--slab START:END"],
        ),
        (vec!["--binning", "4"], vec!["--binning", "2^b"]),
        (
            vec!["--remove-stripe-method", "vo-all"],
            vec!["vo-all", "--remove-stripe sort"],
        ),
        (vec!["--remove-stripe", "ti"], vec!["Titarenko", "fw"]),
    ] {
        for command in ["reconstruct", "try"] {
            if command == "try" && args[0].starts_with("--remove") {
                continue;
            }
            let mut full = vec![command, "scan.h5", "--out", s(&out)];
            full.extend(&args);
            let o = lamino(&full);
            let err = stderr(&o);
            assert!(!o.status.success(), "{full:?} succeeded");
            for needle in &needles {
                assert!(err.contains(needle), "{full:?}: no {needle:?} in {err}");
            }
            assert!(!err.contains("unexpected argument"), "{full:?}: {err}");
        }
    }
    assert!(!out.exists(), "a refused run wrote {}", out.display());
}

#[test]
fn binning_is_an_exponent_and_tomocupy_aliases_reach_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let scan = scan(dir.path());
    let out = dir.path().join("rec");
    let o = lamino(&[
        "reconstruct",
        s(&scan),
        "--binning",
        "2",
        "--lamino-angle",
        "30",
        "--center",
        "17.5",
        "--remove-stripe-method",
        "none",
        "--iterations",
        "1",
        "--alpha",
        "0.002",
        "--no-penalty-from-gradient",
        "--out",
        s(&out),
        "--allow-software-gpu",
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("binning 2 = 4 x 4 pixels"), "{err}");
    // The parameter echo: names and values, the changed ones with their default.
    assert!(err.contains("solver parameters:"), "{err}");
    assert!(err.contains("--alpha       0.002   (default: 5)"), "{err}");
    assert!(err.contains("after exactly 1 iterations"), "{err}");
    assert!(
        err.contains("penalty rule  residual balancing alone (--no-penalty-from-gradient)   (default: residual balancing; after 10 iterations 0.85 sqrt(w / rms |grad u|))"),
        "{err}"
    );
    assert!(!err.contains("AdmmParams"), "{err}");
    // The CG steps by the operator's width (8 voxels), said so, and recorded as taken.
    assert!(
        err.contains("--inner       2 (by the width, 8 voxels: 3 from 64, else 2)\n"),
        "{err}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let rec = &report["reconstruction"];
    assert_eq!(rec["geometry"]["n2"], 8, "{rec}");
    assert_eq!(rec["params"]["inner_iterations"], 2, "{rec}");
    let phi = rec["geometry"]["phi"].as_f64().unwrap();
    assert!((phi.to_degrees() - 120.0).abs() <= 1e-9, "phi {phi}");
    let pre = &rec["preprocessing"];
    assert_eq!(pre["binning"], 4, "{pre}");
    assert_eq!(pre["rotation_axis"], 17.5, "{pre}");
    assert_eq!(pre["rotation_axis_source"], "given", "{pre}");
    assert!(pre["stripe_removal"].is_null(), "{pre}");
}

#[test]
fn apply_takes_out_and_still_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("x.npy");
    let data = SplitMix64::new(3).complex_uniform(8 * 6);
    write_complex_npy(
        &input,
        &ComplexArray {
            shape: vec![8, 6],
            data,
        },
    )
    .unwrap();
    let (a, b) = (dir.path().join("a.npy"), dir.path().join("b.npy"));
    for (flag, out) in [("--out", &a), ("--output", &b)] {
        let o = lamino(&[
            "apply",
            "fft",
            "--input",
            s(&input),
            flag,
            s(out),
            "--allow-software-gpu",
        ]);
        assert!(o.status.success(), "{flag}: {}", stderr(&o));
    }
    let (a, b) = (read_complex_npy(&a).unwrap(), read_complex_npy(&b).unwrap());
    assert_eq!(a.shape, vec![8, 6]);
    assert!(a.data == b.data, "the same transform gave two results");
    let help = stdout(&lamino(&["apply", "fft", "--help"]));
    for arg in ["--input <INPUT>\n", "--out <OUT>\n"] {
        let line = help.lines().find(|l| l.contains(arg.trim())).unwrap();
        assert!(line.trim().len() > arg.trim().len(), "no help text: {line}");
    }
}
