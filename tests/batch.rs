//! `lamino reconstruct` under a batch system: SIGTERM (`kill`, `timeout`, SLURM at the time
//! limit) and SIGUSR1 (SLURM's warning) stop a run with a checkpoint that `--resume` continues to
//! the bits of an uninterrupted run, with exit status 128 + the signal and a message naming both;
//! with stderr not a terminal the iterations are reported as lines; `--checkpoint-every 1s`
//! writes checkpoints on time. (SIGINT and SIGKILL: tests/crash_safety.rs.)
#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use lamino::io::write_dxchange;
use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};
use lamino::solver::Checkpoint;

use common::process::{lamino_command, recon_tif, signal, stderr_lines, succeeded};

/// Iterations of the uninterrupted run (a signal sent after the first stops a run well before).
const ITERATIONS: usize = 8;

/// A 16^3 chip scan, 12 angles, 25 degree tilt, Poisson noise, as DXchange HDF5.
fn scan(dir: &Path) -> PathBuf {
    let sim = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size: 16,
        angles: 12,
        tilt_deg: 25.0,
        photons: Some(1e5),
        seed: 5,
        rotation_axis: None,
    })
    .unwrap();
    let path = dir.join("scan.h5");
    write_dxchange(&path, &sim.scan).unwrap();
    path
}

fn reconstruct(scan: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut cmd = lamino_command();
    cmd.arg("--allow-software-gpu")
        .arg("reconstruct")
        .arg(scan)
        .arg("--out")
        .arg(out)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `cmd` to success and returns its stderr.
fn finish(mut cmd: Command) -> String {
    succeeded(&cmd.output().unwrap())
}

/// The uninterrupted run of `ITERATIONS` with stderr piped, shared by the tests (every test's
/// scan is the same).
struct Reference {
    volume: Vec<u8>,
    stderr: String,
    /// Whether the run left a checkpoint.
    checkpoint: bool,
}

fn reference() -> &'static Reference {
    static REFERENCE: OnceLock<Reference> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("reference");
        let iterations = ITERATIONS.to_string();
        let stderr = finish(reconstruct(
            &scan(dir.path()),
            &out,
            &["--iterations", &iterations],
        ));
        Reference {
            volume: recon_tif(&out),
            stderr,
            checkpoint: out.join("checkpoint.ckpt").exists(),
        }
    })
}

/// A run of up to 300 iterations stopped by `number` once its first iteration is reported, then
/// resumed to `ITERATIONS`: the exit status, the message and the resumed bits.
fn stopped_by_signal_resumes_to_the_uninterrupted_bits(number: i32, name: &str, status: i32) {
    let dir = tempfile::tempdir().unwrap();
    let scan = scan(dir.path());

    let out = dir.path().join("stopped");
    let mut child = reconstruct(&scan, &out, &["--iterations", "300"])
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    let mut stderr = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        match lines.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                let first = line.starts_with("iteration 1/300:");
                stderr.push(line);
                if first {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    assert!(
        stderr
            .last()
            .is_some_and(|l| l.starts_with("iteration 1/300:")),
        "no progress line for the first iteration: {stderr:?}"
    );
    signal(&child, number);
    let exit = child.wait().unwrap();
    stderr.extend(lines.iter());
    let stderr = stderr.join("\n");
    assert!(exit.code() == Some(status), "{exit:?}: {stderr}");
    let ckpt = out.join("checkpoint.ckpt");
    assert!(
        stderr.contains(&format!("interrupted by {name} after iteration"))
            && stderr.contains(&ckpt.display().to_string()),
        "{stderr}"
    );
    assert!(!out.join("recon.tif").exists());
    let stopped_at = Checkpoint::read(&ckpt).unwrap().iteration;
    assert!(
        (1..=ITERATIONS).contains(&stopped_at),
        "{name} stopped the run at iteration {stopped_at}"
    );

    let iterations = ITERATIONS.to_string();
    finish(reconstruct(
        &scan,
        &out,
        &["--iterations", &iterations, "--resume"],
    ));
    assert!(
        recon_tif(&out) == reference().volume,
        "{name}: the resumed run differs"
    );
}

#[test]
fn sigterm_stops_with_a_checkpoint_that_resumes_to_the_uninterrupted_bits() {
    stopped_by_signal_resumes_to_the_uninterrupted_bits(libc::SIGTERM, "SIGTERM", 143);
}

#[test]
fn sigusr1_stops_with_a_checkpoint_that_resumes_to_the_uninterrupted_bits() {
    stopped_by_signal_resumes_to_the_uninterrupted_bits(
        libc::SIGUSR1,
        "SIGUSR1",
        128 + libc::SIGUSR1,
    );
}

#[test]
fn a_run_with_stderr_piped_reports_its_iterations_in_lines_and_a_short_run_no_checkpoint() {
    let stderr = &reference().stderr;
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("iteration "))
        .collect();
    // The first iteration and the last (the run is far shorter than the 30 s interval).
    let first = format!("iteration 1/{ITERATIONS}: |Lu-d|^2 ");
    let last = format!("iteration {ITERATIONS}/{ITERATIONS}: |Lu-d|^2 ");
    assert!(
        lines.len() == 2 && lines[0].starts_with(&first) && lines[1].starts_with(&last),
        "{stderr}"
    );
    for line in &lines {
        assert!(
            line.contains(", primal ")
                && line.contains("; elapsed ")
                && line.contains(" s, remaining "),
            "{line}"
        );
    }
    // No bar was drawn into the pipe.
    assert!(!stderr.contains("[="), "{stderr}");
    // `--checkpoint-every auto` (the default) writes none for a run this short.
    assert!(!reference().checkpoint);
    // `--quiet` prints no progress.
    let dir = tempfile::tempdir().unwrap();
    let quiet = finish(reconstruct(
        &scan(dir.path()),
        &dir.path().join("quiet"),
        &["--iterations", "1", "--quiet"],
    ));
    assert!(!quiet.contains("iteration "), "{quiet}");
}

#[test]
fn checkpoint_every_1s_writes_checkpoints_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let scan = scan(dir.path());
    let out = dir.path().join("timed");
    let mut child = reconstruct(
        &scan,
        &out,
        &["--iterations", "300", "--checkpoint-every", "1s", "--quiet"],
    )
    .spawn()
    .unwrap();
    let lines = stderr_lines(&mut child);
    // The checkpoint's modification times, as it is replaced.
    let ckpt = out.join("checkpoint.ckpt");
    let mut written: Vec<SystemTime> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while written.len() < 3 && Instant::now() < deadline {
        if let Ok(modified) = std::fs::metadata(&ckpt).and_then(|m| m.modified()) {
            if written.last() != Some(&modified) {
                written.push(modified);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    signal(&child, libc::SIGTERM);
    let exit = child.wait().unwrap();
    let stderr: Vec<String> = lines.iter().collect();
    assert!(exit.code() == Some(143), "{exit:?}: {stderr:?}");
    assert!(written.len() == 3, "checkpoints written: {written:?}");
    for pair in written.windows(2) {
        let gap = pair[1].duration_since(pair[0]).unwrap().as_secs_f64();
        // At least the interval apart (a write waits for the end of an iteration, a few tenths
        // of a second here), not one per iteration.
        assert!((1.0..10.0).contains(&gap), "checkpoints {gap} s apart");
    }
    Checkpoint::read(&ckpt).unwrap();
}
