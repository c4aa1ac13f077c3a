//! Every numeric option of every command, fed extreme values (0, 1, -1, 2^32, 2^63, 2^64 - 1,
//! NaN, +-inf, 1e+-300), ends within seconds in a typed error or a correct run: never a panic
//! (exit 101), an abort (134), a hang or an allocation beyond the address-space limit. The
//! options come from the binary's own command definition (the hidden `numeric-options`), so an
//! option added later is covered without a list to keep here. Each case is a process on an 8^3
//! scan (`--iterations 1` where it runs), with a time limit and RLIMIT_AS. The benchmarks size
//! their work on purpose (a minute on lavapipe even at their smallest): a benchmark case with a
//! value it may run with (0, 1, -1, 2^32, 1e-300) is stopped once it opens its device, its
//! options checked; with the others (2^63 and beyond, NaN, +-inf, 1e300) it must refuse, or
//! finish in time.

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lamino::io::{write_complex_npy, write_f32_npy, ComplexArray};

const VALUES: [&str; 11] = [
    "0",
    "1",
    "-1",
    "4294967296",
    "9223372036854775808",
    "18446744073709551615",
    "NaN",
    "inf",
    "-inf",
    "1e300",
    "1e-300",
];

/// A case's time: far above what a refusal takes (milliseconds) and what an 8^3 run of one
/// iteration takes on lavapipe (seconds), far below a hang.
const LIMIT: Duration = Duration::from_secs(60);

/// The address space a case may take: a run on the 8^3 scan with lavapipe's reservations stays
/// well below it; the allocations of unbounded counts (a 34 GB median window) go beyond.
const ADDRESS_SPACE: u64 = 8 << 30;

/// The values a benchmark can run with (a count of 0 or 1, a tilt of -1 degree, 2^32 bytes, a
/// tiny step): a benchmark case with one of them is stopped once it opens its device, its
/// options checked. With any other value it must refuse, or finish within the time limit as any
/// command must.
const A_BENCHMARK_MAY_RUN: [&str; 5] = ["0", "1", "-1", "4294967296", "1e-300"];

/// What the CLI prints when it opens the software adapter: a benchmark case has passed its
/// option checks by then.
const DEVICE_OPENED: &str = "note: running on the software adapter";

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// The inputs the commands read, made once.
struct Inputs {
    scan: PathBuf,
    stack: PathBuf,
    complex: PathBuf,
    fields: PathBuf,
}

fn inputs(dir: &Path) -> Inputs {
    let scan = dir.join("scan.h5");
    common::simulate_scan(&scan, "chip", 8);
    let stack = dir.join("stack.npy");
    let values: Vec<f32> = (0..4 * 8 * 8).map(|i| 1.0 + (i % 7) as f32 * 0.1).collect();
    write_f32_npy(&stack, &[4, 8, 8], &values).unwrap();
    let complex = dir.join("x.npy");
    write_complex_npy(
        &complex,
        &ComplexArray {
            shape: vec![4, 6],
            data: lamino::random::SplitMix64::new(1).complex_uniform(24),
        },
    )
    .unwrap();
    let fields = dir.join("fields");
    let o = common::process::run_lamino(&["flatfield", "fit", &s(&stack), "--out", &s(&fields)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Inputs {
        scan,
        stack,
        complex,
        fields,
    }
}

/// The arguments a command runs with on the tiny inputs (`out`: its output) when `option` is
/// varied, as (option, value) pairs, an empty option for a positional value.
fn base_args(command: &str, option: &str, i: &Inputs, out: &Path) -> Option<Vec<(String, String)>> {
    let pairs =
        |v: &[(&str, String)]| Some(v.iter().map(|(o, x)| (o.to_string(), x.clone())).collect());
    let one = "1".to_string();
    let eight = "8".to_string();
    match command {
        // The benchmarks at their smallest: the checks come first either way.
        "bench fft" => pairs(&[("--repeats", one), ("--bytes", "65536".into())]),
        "bench admm" => pairs(&[("--size", eight.clone()), ("--iterations", one.clone())]),
        "bench operator" => pairs(&[("--size", eight.clone()), ("--repeats", one.clone())]),
        "bench normal" => pairs(&[("--size", eight.clone()), ("--repeats", one.clone())]),
        "bench convergence" => pairs(&[
            ("--size", eight),
            ("--phantoms", "chip".into()),
            ("--reference-iterations", "2".into()),
        ]),
        "bench memo" => pairs(&[
            ("--size", eight),
            ("--iterations", "10".into()),
            ("--repeats", one),
            ("--policies", "certified:0.01".into()),
            ("--phantoms", "chip".into()),
            ("--reference-iterations", "2".into()),
            ("--max-iterations", "2".into()),
            ("--compare-memo", "certified:0.01".into()),
            ("--out", s(out)),
        ]),
        "bench align" => pairs(&[("--sizes", eight.clone())]),
        "bench search" => pairs(&[
            ("--sizes", eight),
            ("--candidates", "2".into()),
            ("--repeats", one),
        ]),
        "bench suite" => pairs(&[("--small", String::new()), ("--out", s(out))]),
        "bench stripes" => pairs(&[
            ("--angles", eight.clone()),
            ("--width", eight),
            ("--rows", one),
        ]),
        // The cost model's options act with `--model` only; the others without it.
        "bench scale" if option.starts_with("--model") => pairs(&[
            ("--model", String::new()),
            ("--model-measure-size", eight.clone()),
            ("--model-sizes", eight),
            ("--model-ranks", one),
        ]),
        "bench scale" => pairs(&[
            ("--size", eight.clone()),
            ("--iterations", one.clone()),
            ("--large", "0".into()),
            ("--plan-sizes", eight),
            ("--plan-device-gib", one),
        ]),
        "reconstruct" => pairs(&[
            ("", s(&i.scan)),
            ("--iterations", one),
            ("--quiet", String::new()),
            ("--out", s(out)),
        ]),
        "try" => pairs(&[
            ("", s(&i.scan)),
            ("--tilt-range", "30:30:1".into()),
            ("--out", s(out)),
        ]),
        "demo" => pairs(&[("--out", s(out))]),
        "simulate" => pairs(&[
            ("--phantom", "chip".into()),
            ("--size", "8".into()),
            ("--angles", "8".into()),
            ("--out", s(&out.with_extension("h5"))),
        ]),
        "apply fft" => pairs(&[
            ("--input", s(&i.complex)),
            ("--out", s(&out.with_extension("npy"))),
        ]),
        // Few solves on a small grid, as --iterations 1 for reconstruct: a tolerance no solve
        // reaches then ends within the case's time.
        "flatfield fit" => pairs(&[
            ("", s(&i.stack)),
            ("--max-iterations", "20".into()),
            ("--max-reweight-iterations", "2".into()),
            ("--working-size", "16".into()),
            ("--out", s(out)),
        ]),
        "flatfield apply" => pairs(&[
            ("", s(&i.stack)),
            ("--fields", s(&i.fields)),
            ("--out", s(out)),
        ]),
        _ => None,
    }
}

/// Options that exclude each other: varying the first drops the second from the base.
const EXCLUSIVE: [(&str, &str); 1] = [("--max-iterations", "--iterations")];

/// Every `COMMAND [SUBCOMMAND] --OPTION` the binary lists, by command.
fn numeric_options() -> BTreeMap<String, Vec<String>> {
    let o = common::process::lamino_command()
        .arg("numeric-options")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut by_command: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in String::from_utf8(o.stdout).unwrap().lines() {
        let (command, option) = line.rsplit_once(' ').unwrap();
        by_command
            .entry(command.to_string())
            .or_default()
            .push(option.to_string());
    }
    by_command
}

/// One case's outcome: how it ended, its stderr, its time.
struct Ended {
    status: std::process::ExitStatus,
    stderr: String,
    seconds: f64,
    /// Stopped once it opened its device (a benchmark past its option checks).
    started: bool,
}

/// Runs `args` in `dir` with the limits; `None` when it ran past [`LIMIT`] (killed). With
/// `stop_once_started`, a case that opens its device ([`DEVICE_OPENED`]) is stopped there.
fn run_case(args: &[String], dir: &Path, stop_once_started: bool) -> Option<Ended> {
    let log = dir.join("stderr.txt");
    let mut cmd = common::process::lamino_command();
    cmd.args(args)
        .arg("--allow-software-gpu")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    limit_address_space(&mut cmd);
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    loop {
        let started = stop_once_started
            && std::fs::read_to_string(&log).is_ok_and(|e| e.contains(DEVICE_OPENED));
        if started {
            child.kill().unwrap();
        }
        if let Some(status) = started
            .then(|| child.wait().unwrap())
            .or_else(|| child.try_wait().unwrap())
        {
            return Some(Ended {
                status,
                stderr: std::fs::read_to_string(&log).unwrap_or_default(),
                seconds: start.elapsed().as_secs_f64(),
                started,
            });
        }
        if start.elapsed() > LIMIT {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn limit_address_space(cmd: &mut Command) {
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: ADDRESS_SPACE,
                rlim_max: ADDRESS_SPACE,
            };
            match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
}

#[test]
fn every_numeric_option_takes_extreme_values_without_a_panic_abort_or_hang() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = inputs(dir.path());
    let options = numeric_options();
    assert!(
        options["reconstruct"].contains(&"--sort-size".to_string())
            && options["try"].contains(&"--slab-slices".to_string()),
        "the listing misses known options: {options:?}"
    );
    let mut cases = Vec::new();
    assert!(
        options["bench scale"].contains(&"--model-bus-gbps".to_string()),
        "the listing misses the benchmarks' options: {options:?}"
    );
    for (command, opts) in &options {
        for option in opts {
            // Every GPU command's `--device` is the same parser: fed once, to reconstruct.
            if option == "--device" && command != "reconstruct" {
                continue;
            }
            for value in VALUES {
                cases.push((command.clone(), option.clone(), value));
            }
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let times = std::sync::Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some((command, option, value)) = cases.get(n) else {
                    break;
                };
                let case_dir = dir.path().join(format!("case{n}"));
                std::fs::create_dir(&case_dir).unwrap();
                let Some(base) = base_args(command, option, &inputs, &case_dir.join("out")) else {
                    failures.lock().unwrap().push(format!(
                        "`{command}` has numeric options but no base arguments in this test: \
                         add them to base_args"
                    ));
                    continue;
                };
                let dropped = EXCLUSIVE
                    .iter()
                    .find(|(varied, _)| varied == option)
                    .map(|(_, other)| *other);
                let mut args: Vec<String> = command.split(' ').map(String::from).collect();
                for (o, v) in base
                    .iter()
                    .filter(|(o, _)| o != option && Some(o.as_str()) != dropped)
                {
                    args.extend([o.clone(), v.clone()].into_iter().filter(|a| !a.is_empty()));
                }
                args.push(format!("{option}={value}"));
                let what = args.join(" ");
                let stop_once_started =
                    command.starts_with("bench ") && A_BENCHMARK_MAY_RUN.contains(value);
                let ended = run_case(&args, &case_dir, stop_once_started);
                if let Some(e) = &ended {
                    times.lock().unwrap().push((e.seconds, what.clone()));
                }
                let failure = match ended {
                    None => Some(format!("{what}: ran past {LIMIT:?}")),
                    Some(e) if e.started => None,
                    Some(e) if e.status.code().is_none() || e.status.code() == Some(101) => {
                        Some(format!(
                            "{what}: {:?} after {:.1} s\n{}",
                            e.status, e.seconds, e.stderr
                        ))
                    }
                    Some(e) if e.stderr.contains("panicked") => {
                        Some(format!("{what}: panicked\n{}", e.stderr))
                    }
                    Some(e) if !e.status.success() && !e.stderr.contains("error") => Some(format!(
                        "{what}: failed without an error message\n{}",
                        e.stderr
                    )),
                    Some(_) => None,
                };
                failures.lock().unwrap().extend(failure);
                let _ = std::fs::remove_dir_all(&case_dir);
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let mut times = times.into_inner().unwrap();
    times.sort_by(|a, b| b.0.total_cmp(&a.0));
    eprintln!(
        "{} cases over {} commands in {:.1} s; the longest: {:#?}",
        cases.len(),
        options.len(),
        start.elapsed().as_secs_f64(),
        &times[..times.len().min(8)]
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
