//! A failed run never damages earlier results: every command that writes files is run as a child
//! with a small RLIMIT_FSIZE (the disk fills at a seeded byte offset of its outputs), once with
//! SIGXFSZ ignored (writes fail with EFBIG: the command must fail naming the directory and leave
//! the previous outputs byte for byte) and once with the signal's default action (the process is
//! killed mid-write: the previous outputs stay whole, and the next run removes the staging it
//! left). Inputs that are also outputs are refused before anything is written, and I/O errors
//! name their path.

#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use lamino::io::{write_tiff_volume, write_volume, STAGING_PREFIX};
use lamino::random::SplitMix64;
use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};

/// How a run's file size limit acts.
#[derive(Clone, Copy, Debug)]
enum Limit {
    None,
    /// Writes past the size fail with EFBIG.
    Efbig(u64),
    /// SIGXFSZ kills the process at the first write past the size.
    Kill(u64),
}

fn lamino(args: &[String], cwd: &Path, limit: Limit) -> Output {
    let mut cmd = common::process::lamino_command();
    cmd.arg("--allow-software-gpu")
        .args(args)
        .current_dir(cwd)
        // Caches elsewhere than the outputs must not be what the limit hits first.
        .env("MESA_SHADER_CACHE_DISABLE", "true")
        .env("XDG_CACHE_HOME", cwd.join("cache"))
        .env("HOME", cwd);
    let (bytes, ignore) = match limit {
        Limit::None => return cmd.output().expect("run lamino"),
        Limit::Efbig(b) => (b, true),
        Limit::Kill(b) => (b, false),
    };
    // Safety: between fork and exec the closure only calls async-signal-safe functions.
    unsafe {
        cmd.pre_exec(move || {
            let rlimit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let action = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
            libc::signal(libc::SIGXFSZ, action);
            Ok(())
        });
    }
    cmd.output().expect("run lamino")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// Every file under `dir` (relative path -> bytes), staging directories left aside.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with(STAGING_PREFIX) {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(path.strip_prefix(root).unwrap().into(), bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn staging_dirs(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(STAGING_PREFIX))
        .collect()
}

/// The inputs every command reads, in `dir`: a 16^3 chip scan (`scan.h5`), its truth
/// (`truth.tif`), its intensities as stacks (`stack.tif`, `stack.npy`).
fn fixtures(dir: &Path) {
    common::simulate_scan(&dir.join("scan.h5"), "chip", 16);
    let sim = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size: 16,
        angles: 16,
        tilt_deg: 30.0,
        photons: Some(1e4),
        seed: 5,
        rotation_axis: None,
    })
    .unwrap();
    write_tiff_volume(&dir.join("truth.tif"), sim.scan.truth.as_ref().unwrap()).unwrap();
    write_tiff_volume(&dir.join("stack.tif"), &sim.scan.data).unwrap();
    write_volume(&dir.join("stack.npy"), &sim.scan.data).unwrap();
}

/// A command that writes `out` (a directory, or the directory of its one output file): the
/// run that makes the previous outputs and a different run that is made to fail.
struct Case {
    name: &'static str,
    out: &'static str,
    previous: Vec<String>,
    failing: Vec<String>,
}

fn cases() -> Vec<Case> {
    let fit = |extra: &[&str]| {
        let mut a = strings(&[
            "flatfield",
            "fit",
            "stack.tif",
            "--out",
            "fields",
            "--working-size",
            "16",
            "--max-reweight-iterations",
            "2",
        ]);
        a.extend(strings(extra));
        a
    };
    vec![
        Case {
            name: "simulate",
            out: "sim",
            previous: strings(&[
                "simulate",
                "--phantom",
                "chip",
                "--size",
                "16",
                "--angles",
                "8",
                "--tilt-deg",
                "20",
                "--out",
                "sim/scan.h5",
            ]),
            failing: strings(&[
                "simulate",
                "--phantom",
                "blobs",
                "--size",
                "16",
                "--angles",
                "8",
                "--tilt-deg",
                "20",
                "--out",
                "sim/scan.h5",
            ]),
        },
        Case {
            name: "reconstruct",
            out: "rec",
            previous: strings(&[
                "reconstruct",
                "scan.h5",
                "--out",
                "rec",
                "--iterations",
                "2",
            ]),
            failing: strings(&[
                "reconstruct",
                "scan.h5",
                "--out",
                "rec",
                "--iterations",
                "3",
                "--rotation-axis",
                "auto",
            ]),
        },
        Case {
            name: "try",
            out: "try",
            previous: strings(&[
                "try",
                "scan.h5",
                "--rotation-axis-range",
                "7:9:1",
                "--out",
                "try",
            ]),
            failing: strings(&[
                "try",
                "scan.h5",
                "--rotation-axis-range",
                "7:9:0.5",
                "--out",
                "try",
            ]),
        },
        Case {
            name: "apply fft",
            out: "fft",
            previous: strings(&[
                "apply",
                "fft",
                "--input",
                "stack.npy",
                "--output",
                "fft/f.npy",
            ]),
            failing: strings(&[
                "apply",
                "fft",
                "--input",
                "stack.npy",
                "--output",
                "fft/f.npy",
                "--inverse",
            ]),
        },
        Case {
            name: "score",
            out: "score",
            previous: strings(&["score", "stack.tif", "truth.tif", "--panel", "score/p.png"]),
            failing: strings(&["score", "truth.tif", "stack.tif", "--panel", "score/p.png"]),
        },
        Case {
            name: "flatfield fit",
            out: "fields",
            previous: fit(&[]),
            failing: fit(&["--epsilon", "0.2"]),
        },
        Case {
            name: "flatfield apply",
            out: "corr",
            previous: strings(&[
                "flatfield",
                "apply",
                "stack.tif",
                "--fields",
                "fields0",
                "--out",
                "corr",
            ]),
            failing: strings(&[
                "flatfield",
                "apply",
                "stack.tif",
                "--fields",
                "fields0",
                "--out",
                "corr",
                "--flat-min",
                "0.5",
            ]),
        },
        Case {
            name: "demo",
            out: "demo",
            previous: strings(&["demo", "--size", "16", "--out", "demo"]),
            // The failing run is the one made four times: the smaller scan (a cold demo on
            // lavapipe took 87.7 s at 20^3, 39.8 s at 12^3).
            failing: strings(&["demo", "--size", "12", "--out", "demo"]),
        },
    ]
}

/// Fits flat-fields to the fixture stack into `root/out` (an input of `flatfield apply`; small
/// and few solves, since these tests are about the files, not the fit).
fn fit_fields(root: &Path, out: &str) {
    let o = lamino(
        &strings(&[
            "flatfield",
            "fit",
            "stack.tif",
            "--out",
            out,
            "--working-size",
            "16",
            "--max-reweight-iterations",
            "2",
        ]),
        root,
        Limit::None,
    );
    assert!(o.status.success(), "{}", text(&o));
}

/// For every command: the failing run under a file size limit at seeded offsets below its
/// largest output fails naming the output directory, and the previous outputs are left byte for
/// byte; killed by SIGXFSZ mid-write, the same, and the next run removes the staging it left.
#[test]
fn a_full_disk_or_a_kill_mid_write_leaves_the_previous_outputs_whole() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixtures(root);
    // The fields `flatfield apply` reads, fitted once.
    fit_fields(root, "fields0");
    let mut rng = SplitMix64::new(26);
    for case in cases() {
        let out = root.join(case.out);
        let o = lamino(&case.previous, root, Limit::None);
        assert!(o.status.success(), "{}: {}", case.name, text(&o));
        let before = contents(&out);
        let largest = before.values().map(Vec::len).max().unwrap() as u64;
        // Offsets in the first quarter, the middle and the end of the largest output.
        let offsets = [0.0, 0.4, 0.8].map(|lo| {
            let f = lo + 0.2 * rng.next_f64();
            ((largest as f64 * f) as u64).max(1)
        });
        for (k, &bytes) in offsets.iter().enumerate() {
            let limit = if k == 1 {
                Limit::Kill(bytes)
            } else {
                Limit::Efbig(bytes)
            };
            let o = lamino(&case.failing, root, limit);
            let what = format!("{} under {limit:?}", case.name);
            assert!(!o.status.success(), "{what} succeeded: {}", text(&o));
            assert!(!text(&o).contains("panicked"), "{what}: {}", text(&o));
            assert!(
                contents(&out) == before,
                "{what} changed the previous outputs"
            );
            if let Limit::Efbig(_) = limit {
                let message = String::from_utf8_lossy(&o.stderr);
                assert!(
                    message.contains(&s(&out)) || message.contains(case.out),
                    "{what}: the message names no path: {message}"
                );
                assert!(message.contains("unchanged"), "{what}: {message}");
                assert!(staging_dirs(&out).is_empty(), "{what} left staging");
            } else {
                use std::os::unix::process::ExitStatusExt;
                assert!(
                    o.status.signal() == Some(libc::SIGXFSZ),
                    "{what}: {:?}",
                    o.status
                );
            }
        }
        // The next run completes, replaces the set and removes the staging the kill left.
        let o = lamino(&case.failing, root, Limit::None);
        assert!(o.status.success(), "{}: {}", case.name, text(&o));
        assert!(staging_dirs(&out).is_empty(), "{}: staging left", case.name);
        assert!(
            contents(&out) != before,
            "{}: the new run changed nothing",
            case.name
        );
    }
}

/// A run whose set lacks a member of the previous one (no convergence.png without iterations'
/// reports) removes it: the directory never mixes two runs.
#[test]
fn members_of_the_previous_set_that_the_new_one_lacks_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    common::simulate_scan(&root.join("scan.h5"), "chip", 16);
    let run = |extra: &[&str]| {
        let mut args = strings(&["reconstruct", "scan.h5", "--out", "rec"]);
        args.extend(strings(extra));
        let o = lamino(&args, root, Limit::None);
        assert!(o.status.success(), "{}", text(&o));
    };
    run(&["--iterations", "2", "--rotation-axis", "auto"]);
    assert!(root.join("rec/axis_search.csv").exists());
    run(&["--iterations", "2"]);
    assert!(!root.join("rec/axis_search.csv").exists());
    assert!(root.join("rec/recon.tif").exists());
}

/// An input that is also an output is refused before anything is written, and stays intact.
#[test]
fn an_input_that_is_an_output_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixtures(root);
    fit_fields(root, "F");
    for ext in ["npy", "tif"] {
        let input = root.join(format!("F/corrected.{ext}"));
        std::fs::copy(root.join(format!("stack.{ext}")), &input).unwrap();
        let before = contents(root);
        let o = lamino(
            &strings(&[
                "flatfield",
                "apply",
                &s(&input),
                "--fields",
                "F",
                "--out",
                "F",
            ]),
            root,
            Limit::None,
        );
        assert!(!o.status.success(), "{ext}: {}", text(&o));
        let message = String::from_utf8_lossy(&o.stderr);
        assert!(
            message.contains("is an input of this command") && message.contains(&s(&input)),
            "{ext}: {message}"
        );
        assert!(
            contents(root) == before,
            "{ext}: a refused run changed files"
        );
    }
    // The fields a fit reads from its own output directory.
    let o = lamino(
        &strings(&["flatfield", "fit", "F/flatfield.tif", "--out", "F"]),
        root,
        Limit::None,
    );
    assert!(
        !o.status.success() && text(&o).contains("is an input"),
        "{}",
        text(&o)
    );
    // reconstruct: the scan inside its output directory under an output's name (a hard link).
    std::fs::create_dir(root.join("rec")).unwrap();
    std::fs::hard_link(root.join("stack.tif"), root.join("rec/recon.tif")).unwrap();
    let before = contents(root);
    let o = lamino(
        &strings(&[
            "reconstruct",
            "rec/recon.tif",
            "--angles",
            "angles.txt",
            "--tilt-deg",
            "30",
            "--flatfield",
            "envelope",
            "--out",
            "rec",
        ]),
        root,
        Limit::None,
    );
    assert!(
        !o.status.success() && text(&o).contains("is an input"),
        "{}",
        text(&o)
    );
    assert!(contents(root) == before);
    // score: the panel over the truth.
    let o = lamino(
        &strings(&["score", "stack.tif", "truth.tif", "--panel", "truth.tif"]),
        root,
        Limit::None,
    );
    assert!(
        !o.status.success() && text(&o).contains("is an input"),
        "{}",
        text(&o)
    );
    assert!(contents(root) == before);
}

/// I/O errors name the path and what was being done; corrupt TIFFs are called TIFF.
#[test]
fn io_errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixtures(root);
    std::fs::write(root.join("plain.txt"), "x").unwrap();
    // An --out that is a file, and one below a file.
    for out in ["plain.txt", "plain.txt/sub"] {
        let o = lamino(
            &strings(&["reconstruct", "scan.h5", "--iterations", "1", "--out", out]),
            root,
            Limit::None,
        );
        let message = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{out}");
        assert!(
            message.contains(&format!(
                "cannot write {out}: creating the output directory"
            )),
            "{out}: {message}"
        );
    }
    let o = lamino(
        &strings(&[
            "simulate",
            "--phantom",
            "chip",
            "--size",
            "8",
            "--angles",
            "4",
        ])
        .into_iter()
        .chain(strings(&["--tilt-deg", "20", "--out", "plain.txt/scan.h5"]))
        .collect::<Vec<_>>(),
        root,
        Limit::None,
    );
    let message = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && message.contains("cannot write plain.txt: creating the output directory"),
        "{message}"
    );
    // A corrupt TIFF is not called a .npy file.
    std::fs::write(root.join("bad.tif"), b"II*\0garbage").unwrap();
    let o = lamino(
        &strings(&["flatfield", "fit", "bad.tif", "--out", "G"]),
        root,
        Limit::None,
    );
    let message = String::from_utf8_lossy(&o.stderr);
    assert!(
        message.contains("bad.tif is not a valid TIFF file") && !message.contains(".npy"),
        "{message}"
    );
    // The fit failed before writing: it leaves no output directory behind.
    assert!(!root.join("G").exists());
}
