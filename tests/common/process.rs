//! The `lamino` binary as the tests start it: one way to build its command line, run it to its
//! end or within a time limit, follow its stderr as it comes and signal it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The binary with none of the variables that change what it does inherited from the test's
/// environment: the software-adapter opt-in (a test that runs on lavapipe passes
/// `--allow-software-gpu`, one that checks the opt-in passes nothing) and the fault injection.
pub fn lamino_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lamino"));
    cmd.env_remove("LAMINO_ALLOW_SOFTWARE_GPU")
        .env_remove("LAMINO_FAULT_ABORT_CHECKPOINT");
    cmd
}

/// `lamino ARGS --allow-software-gpu`, run to its end with its output captured.
pub fn run_lamino(args: &[&str]) -> Output {
    lamino_command()
        .args(args)
        .arg("--allow-software-gpu")
        .output()
        .expect("run lamino")
}

/// `mpirun` for `ranks` ranks running `lamino --allow-software-gpu ARGS` (the MPI tests, feature
/// `mpi`). As root (CI) mpirun needs to be told that this is intended.
pub fn mpirun(ranks: usize, args: &[&str]) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-n"])
        .arg(ranks.to_string())
        .arg(env!("CARGO_BIN_EXE_lamino"))
        .arg("--allow-software-gpu")
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir());
    cmd
}

/// Runs `cmd` with its output captured; a run past `limit` is killed and fails the test (a hang
/// is a failure, not a stuck test binary).
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lamino");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!("{cmd:?} ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Asserts that `o` is a success and returns its stderr.
pub fn succeeded(o: &Output) -> String {
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    stderr
}

/// The lines of `child`'s stderr (piped) as they come.
pub fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("the child's stderr is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Sends signal `number` to `child`.
#[cfg(unix)]
pub fn signal(child: &Child, number: i32) {
    // SAFETY: kill(2) on the pid of a child this test started and has not waited for.
    let sent = unsafe { libc::kill(child.id() as i32, number) };
    assert!(sent == 0, "kill: {}", std::io::Error::last_os_error());
}

/// The bytes of the volume a `reconstruct --out OUT` wrote (`OUT/recon.tif`), for bit-for-bit
/// comparisons.
pub fn recon_tif(out: &Path) -> Vec<u8> {
    std::fs::read(out.join("recon.tif")).unwrap()
}
