//! MPI ranks (feature `mpi`, run under Open MPI's `mpirun`): the single-process bits for 2, 3
//! and 4 ranks, in-core and streaming, exchanging while the stages compute or between them
//! (and the spectrum's bytes each rank sends, owned by U2's
//! chunks; an in-core rank moves over its bus only what it exchanges), checkpoints written in parts by every rank that any number of ranks resumes, a rank
//! killed while writing its part leaves the previous checkpoint, a rank that fails or is killed
//! ends the run with an error instead of leaving the others waiting, and the outputs written
//! from every rank's slices a slab at a time (`recon.zarr` by every rank, each its chunks), no
//! rank holding more than its share and a slab.
#![cfg(feature = "mpi")]

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::process::{mpirun, run_lamino};

fn lamino() -> &'static str {
    env!("CARGO_BIN_EXE_lamino")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// A simulated 32^3 chip scan in `dir`.
fn scan(dir: &Path) -> String {
    let scan = dir.join("scan.h5");
    common::simulate_scan(&scan, "chip", 32);
    s(&scan)
}

fn reconstruct_args<'a>(scan: &'a str, out: &'a str, iterations: &'a str) -> Vec<&'a str> {
    vec![
        "reconstruct",
        scan,
        "--out",
        out,
        "--iterations",
        iterations,
        "--quiet",
    ]
}

#[test]
fn ranks_of_one_or_two_devices_write_the_one_process_volume_at_32() {
    let dir = tempfile::tempdir().unwrap();
    let scan = scan(dir.path());
    let one = s(&dir.path().join("one"));
    let o = run_lamino(&reconstruct_args(&scan, &one, "3"));
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = std::fs::read(Path::new(&one).join("recon.tif")).unwrap();
    // 2, 3 and 4 ranks of one device, and 2 ranks of two devices each (one adapter opened
    // twice), each device keeping its planes (in-core: they fit the default budget); and 2
    // ranks whose 3 MiB leave no room for their planes beside the team's plan (streaming).
    // Stages send their blocks while they compute, but in the last run, which exchanges
    // between stages only (one rank asks for it).
    for (ranks, devices, budget, overlap) in [
        (2, "best", None, true),
        (3, "best", None, true),
        (4, "best", None, true),
        (2, "0,0", None, true),
        (2, "best", Some("2"), true),
        (3, "best", None, false),
    ] {
        let out = dir
            .path()
            .join(format!("ranks-{ranks}-{devices}-{budget:?}-{overlap}"));
        let out_arg = s(&out);
        let mut args = vec!["--device", devices];
        args.extend(reconstruct_args(&scan, &out_arg, "3"));
        if let Some(mib) = budget {
            args.extend(["--max-device-memory", mib]);
        }
        let o = if overlap {
            mpirun(ranks, &args).output().unwrap()
        } else {
            // One rank's `off` turns the overlap off on every rank: they agree at the start.
            let off: &[(&str, &str)] = &[("LAMINO_EXCHANGE_OVERLAP", "off")];
            let env: Vec<&[(&str, &str)]> =
                (0..ranks).map(|r| if r == 1 { off } else { &[] }).collect();
            mpirun_each(&env, &args).output().unwrap()
        };
        assert!(o.status.success(), "{ranks} ranks: {}", stderr(&o));
        let got = std::fs::read(out.join("recon.tif")).unwrap();
        assert!(
            got == expected,
            "{ranks} ranks of devices {devices} changed the volume"
        );
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        let per_rank = report["reconstruction"]["ranks"].as_array().unwrap();
        assert_eq!(per_rank.len(), ranks);
        let members = report["reconstruction"]["plan"]["members"]
            .as_array()
            .unwrap();
        let mode = if budget.is_none() {
            "in_core"
        } else {
            "streaming"
        };
        assert!(members.iter().all(|m| m["mode"] == mode), "{members:?}");
        let spectrum = spectrum_bytes(&report["reconstruction"], ranks, devices.split(',').count());
        for (r, entry) in per_rank.iter().enumerate() {
            assert_eq!(entry["rank"], r);
            assert!(entry["bytes_sent"].as_u64().unwrap() > 0, "{entry}");
            let iterations_s = entry["iterations_s"].as_f64().unwrap();
            assert!(iterations_s > 0.0, "{entry}");
            // The time in exchanges is part of the iterations', and every iteration exchanges;
            // with the overlap, every rank has 2 or more chunks of a stage, so its stages
            // exchange while they compute.
            let exchange_s = entry["iteration_exchange_s"].as_f64().unwrap();
            assert!(exchange_s > 0.0 && exchange_s < iterations_s, "{entry}");
            let overlapped_s = entry["iteration_overlapped_exchange_s"].as_f64().unwrap();
            assert!(overlapped_s <= exchange_s, "{entry}");
            assert_eq!(overlapped_s > 0.0, overlap, "{entry}");
            let by_array = entry["iteration_bytes_by_array"].as_array().unwrap();
            let sent = by_array
                .iter()
                .find(|a| a["array"].as_str().unwrap().starts_with("spectrum"))
                .unwrap()["bytes"]
                .as_u64();
            // The data side is kept by U2's chunks of detector rows as the spectrum is: U2
            // writes it and U2* reads it at home, and the vector passes run over the homes. The
            // volume side is kept by U1's chunks of y rows: U1 reads p and U1* writes r saved
            // at home, and of the volume side only the halos of the gradient (of p) and the
            // divergence (of psi, lambda and grad u) cross.
            let at_home: Vec<_> = by_array
                .iter()
                .filter(|a| {
                    let at_home = [
                        "D hat",
                        "A u",
                        "A p",
                        "u",
                        "u previous",
                        "r",
                        "r saved",
                        "grad u previous",
                        "grad p",
                    ];
                    at_home.contains(&a["array"].as_str().unwrap())
                })
                .collect();
            assert!(
                at_home.len() == 9 && at_home.iter().all(|a| a["bytes"] == 0),
                "{ranks} ranks: rank {r} sent blocks of arrays read at home: {at_home:?}"
            );
            assert!(
                sent == Some(spectrum[r]),
                "{ranks} ranks: rank {r} sent {sent:?} bytes of the spectrum, not {}",
                spectrum[r]
            );
        }
        if (ranks, devices, budget) == (2, "best", None) {
            in_core_ranks_move_only_what_they_exchange(&report["reconstruction"]);
        }
    }
}

/// Two ranks of one device each, both in-core (their planes fit their devices): each moves over
/// its bus only what it exchanges with the other, which the ranks' ledger counts on the
/// network's side: it downloads what it sends (the blocks it wrote for the other's planes, and
/// those of its planes the other reads) and uploads what it receives, each once, and besides
/// those only the reductions' plane sums (its own down, every rank's up: 8 bytes a plane, at
/// most sixteen reductions per CG step and one more step's worth per outer iteration).
fn in_core_ranks_move_only_what_they_exchange(reconstruction: &serde_json::Value) {
    let ranks = reconstruction["ranks"].as_array().unwrap();
    let iterations = reconstruction["reports"].as_array().unwrap().len() as u64;
    // The blocks each rank sent per outer iteration (reductions and agreements are not blocks).
    let sent: Vec<u64> = ranks
        .iter()
        .map(|e| {
            let arrays = e["iteration_bytes_by_array"].as_array().unwrap();
            arrays
                .iter()
                .map(|a| a["bytes"].as_u64().unwrap())
                .sum::<u64>()
                / iterations
        })
        .collect();
    let g = &reconstruction["geometry"];
    // Reductions run over the volume's z slices or the data's detector rows.
    let planes = g["n0"].as_u64().unwrap().max(g["deth"].as_u64().unwrap());
    let params: lamino::params::AdmmParams =
        serde_json::from_value(reconstruction["params"].clone()).unwrap();
    // The report states the CG steps the run took.
    let inner = params
        .inner_iterations
        .expect("the report states the CG steps") as u64;
    let reductions = 16 * (1 + inner) * 16 * planes;
    for (r, e) in ranks.iter().enumerate() {
        let bus: u64 = e["bus_bytes_per_iteration"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap())
            .sum();
        let received = sent[1 - r];
        eprintln!(
            "rank {r}: {bus} bytes over the bus per iteration; sent {} and received {received} \
             bytes of blocks",
            sent[r]
        );
        assert!(
            received <= bus && bus <= sent[r] + received + reductions,
            "rank {r}: {bus} bytes over the bus per iteration, sent {} bytes of blocks and \
             received {received}",
            sent[r]
        );
    }
}

/// The bytes of the spectrum each of `ranks` ranks of `devices` devices sends during the
/// iterations of the run `reconstruction` reports, when each keeps the detector rows of its
/// share of U2's chunks: in every A, U1 writes all rows of its y chunks and sends those of other
/// homes; in every A*, U1* of the other ranks reads its rows of their y chunks. U2 and U2* read
/// and write at home.
fn spectrum_bytes(reconstruction: &serde_json::Value, ranks: usize, devices: usize) -> Vec<u64> {
    use lamino::distributed::shares::chunk_planes;
    let g = &reconstruction["geometry"];
    let dim = |key: &str| g[key].as_u64().unwrap() as usize;
    let (n1, n2, deth) = (dim("n1"), dim("n2"), dim("deth"));
    let chunks = &reconstruction["plan"]["chunks"];
    let chunk = |i: usize| chunks[i].as_u64().unwrap() as usize;
    let params: lamino::params::AdmmParams =
        serde_json::from_value(reconstruction["params"].clone()).unwrap();
    let iterations = reconstruction["reports"].as_array().unwrap().len();
    let (forward, adjoint) = lamino::plan::operator_applications_in(&params, n2, iterations);
    (0..ranks)
        .map(|r| {
            let group = r * devices..(r + 1) * devices;
            let members = ranks * devices;
            let rows = chunk_planes(group.clone(), members, deth, chunk(1)).len() as u64;
            let ys = chunk_planes(group, members, n1, chunk(0)).len() as u64;
            let words = forward * (deth as u64 - rows) * ys + adjoint * rows * (n1 as u64 - ys);
            words * n2 as u64 * 8
        })
        .collect()
}

/// The processes mpirun started, by rank (from their environment).
fn rank_pid(mpirun: &Child, rank: usize) -> Option<u32> {
    let children = std::fs::read_to_string(format!(
        "/proc/{}/task/{}/children",
        mpirun.id(),
        mpirun.id()
    ))
    .ok()?;
    children
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|&b| b == 0)
                    .any(|v| v == format!("OMPI_COMM_WORLD_RANK={rank}").as_bytes())
            })
        })
}

/// Waits for `child` at most `limit`; kills it and fails if it runs longer.
fn wait_within(mut child: Child, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), start.elapsed());
        }
        if start.elapsed() > limit {
            child.kill().ok();
            panic!("the run did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_killed_rank_ends_the_run_and_its_last_checkpoint_resumes_on_any_number_of_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let scan = scan(dir.path());
    let out = dir.path().join("killed");
    let checkpoint = out.join("checkpoint.ckpt");
    let out_arg = s(&out);
    let mut args = reconstruct_args(&scan, &out_arg, "40");
    args.extend(["--checkpoint-every", "1"]);
    let child = mpirun(2, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !checkpoint.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no checkpoint came"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = rank_pid(&child, 1).expect("rank 1 runs");
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let (o, took) = wait_within(child, Duration::from_secs(60));
    assert!(!o.status.success(), "the run went on without rank 1");
    let message = stderr(&o);
    assert!(
        message.contains("rank 1") || message.contains("rank: 1"),
        "{message}"
    );
    eprintln!("the run ended {took:?} after rank 1 was killed");
    // The last checkpoint resumes, on 3 ranks and on one process, to the uninterrupted result.
    let whole = dir.path().join("whole");
    let o = run_lamino(&reconstruct_args(&scan, &s(&whole), "8"));
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = std::fs::read(whole.join("recon.tif")).unwrap();
    let alone = dir.path().join("alone");
    copy_checkpoint(&out, &alone);
    let mut resume = reconstruct_args(&scan, &out_arg, "8");
    resume.push("--resume");
    let o = mpirun(3, &resume).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(out.join("recon.tif")).unwrap() == expected);
    let mut resume = reconstruct_args(&scan, alone.to_str().unwrap(), "8");
    resume.push("--resume");
    let o = run_lamino(&resume);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(alone.join("recon.tif")).unwrap() == expected);
}

#[test]
fn a_rank_that_fails_stops_every_rank_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let scan = scan(dir.path());
    let out = s(&dir.path().join("failed"));
    // Rank 1 is given a device that does not exist (MPMD: two programs, one rank each).
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe"])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir());
    for (i, device) in ["0", "7"].into_iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args([
            "-n",
            "1",
            lamino(),
            "--allow-software-gpu",
            "--device",
            device,
        ])
        .args(reconstruct_args(&scan, &out, "20"));
    }
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (o, took) = wait_within(child, Duration::from_secs(60));
    assert!(!o.status.success());
    let message = stderr(&o);
    assert!(
        message.contains("error on rank 1 of 2") && message.contains("no adapter with index 7"),
        "{message}"
    );
    eprintln!("every rank stopped {took:?} after the start");
}

/// Copies the checkpoint in `from` (its manifest and parts) to a new directory `to`.
fn copy_checkpoint(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let name = entry.unwrap().file_name();
        if name.to_string_lossy().starts_with("checkpoint.ckpt") {
            std::fs::copy(from.join(&name), to.join(&name)).unwrap();
        }
    }
}

/// The files of the checkpoint in `dir`: the manifest and its parts.
fn checkpoint_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("checkpoint.ckpt"))
        .collect();
    names.sort();
    names
}

/// `mpirun` of one rank per entry of `env`, each with its environment (MPMD: `env` starts lamino
/// with it), running lamino with `args`.
fn mpirun_each(env: &[&[(&str, &str)]], args: &[&str]) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe"])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir());
    for (i, vars) in env.iter().enumerate() {
        if i > 0 {
            cmd.arg(":");
        }
        cmd.args(["-n", "1", "env"]);
        cmd.args(vars.iter().map(|(k, v)| format!("{k}={v}")));
        cmd.args([lamino(), "--allow-software-gpu"]).args(args);
    }
    cmd
}

#[test]
fn a_checkpoint_in_parts_of_three_ranks_resumes_on_two_and_on_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let scan = scan(dir.path());
    let whole = dir.path().join("whole");
    let o = run_lamino(&reconstruct_args(&scan, &s(&whole), "4"));
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = std::fs::read(whole.join("recon.tif")).unwrap();
    // Three ranks, a checkpoint after each of 2 iterations: each rank writes its part.
    let three = dir.path().join("three");
    let three_arg = s(&three);
    let mut args = reconstruct_args(&scan, &three_arg, "2");
    args.extend(["--checkpoint-every", "1"]);
    let o = mpirun(3, &args).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let files = checkpoint_files(&three);
    assert!(files.len() == 4, "a manifest and three parts: {files:?}");
    for r in 0..3 {
        assert!(
            files.iter().any(|f| f.starts_with("checkpoint.ckpt.2-") && f.ends_with(&format!(".r{r}.part"))),
            "rank {r}'s part of the last checkpoint: {files:?}"
        );
    }
    // Two ranks and one process continue it to the uninterrupted result.
    let two = dir.path().join("two");
    copy_checkpoint(&three, &two);
    let mut resume = reconstruct_args(&scan, two.to_str().unwrap(), "4");
    resume.push("--resume");
    let o = mpirun(2, &resume).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(two.join("recon.tif")).unwrap() == expected);
    let alone = dir.path().join("alone");
    copy_checkpoint(&three, &alone);
    let mut resume = reconstruct_args(&scan, alone.to_str().unwrap(), "4");
    resume.push("--resume");
    let o = run_lamino(&resume);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(alone.join("recon.tif")).unwrap() == expected);
}

#[test]
fn a_rank_killed_while_writing_its_part_leaves_the_previous_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let scan = scan(dir.path());
    let out = dir.path().join("killed");
    let out_arg = s(&out);
    let mut args = reconstruct_args(&scan, &out_arg, "4");
    args.extend(["--checkpoint-every", "1"]);
    // Rank 1 aborts (as a SIGKILL stops it) half-way through its part of the second checkpoint.
    let o = mpirun_each(&[&[], &[("LAMINO_FAULT_ABORT_CHECKPOINT", "2")]], &args)
        .output()
        .unwrap();
    assert!(!o.status.success(), "the run went on without rank 1");
    let files = checkpoint_files(&out);
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("checkpoint.ckpt.2-") && f.ends_with(".r1.part.partial")),
        "rank 1 was stopped inside its part: {files:?}"
    );
    // The first checkpoint is whole: one process resumes it to the uninterrupted result.
    let whole = dir.path().join("whole");
    let o = run_lamino(&reconstruct_args(&scan, &s(&whole), "3"));
    assert!(o.status.success(), "{}", stderr(&o));
    let mut resume = reconstruct_args(&scan, out.to_str().unwrap(), "3");
    resume.extend(["--resume", "--checkpoint-every", "1"]);
    let o = run_lamino(&resume);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["reconstruction"]["resumed_from"], 1);
    assert!(
        std::fs::read(out.join("recon.tif")).unwrap()
            == std::fs::read(whole.join("recon.tif")).unwrap()
    );
    // The next checkpoint (one file, of one process) removed the torn part and the first
    // checkpoint's parts.
    let files = checkpoint_files(&out);
    assert!(files == ["checkpoint.ckpt"], "{files:?}");
}

/// Every file under `dir`, by path relative to it, with its bytes.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                files.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// The outputs of 2 and 3 ranks are those of one process, byte for byte: `recon.tif`, written
/// by the first rank from every rank's slices, and every file of `recon.zarr`, whose chunks each
/// rank writes itself (chunks of 8 x 16 x 16 and a pyramid of 32^3, 16^3 and 8^3: 4, 2 and 1
/// rows of chunks, so rows and pyramid slices cross the ranks' boundaries, 0:16:32 and
/// 0:11:22:32). No rank held more of the volume than its share and a slab, counting its part
/// of the OME-Zarr (its rows of chunks and the boundary slices it received).
#[test]
fn ranks_write_the_one_process_outputs_each_its_zarr_chunks_holding_their_share_and_a_slab() {
    let dir = tempfile::tempdir().unwrap();
    let scan = scan(dir.path());
    let formats = ["--format", "tiff,zarr", "--zarr-chunks", "8,16,16"];
    let one = dir.path().join("one");
    let mut args = reconstruct_args(&scan, one.to_str().unwrap(), "2");
    args.extend(formats);
    let o = run_lamino(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let zarr_one = tree(&one.join("recon.zarr"));
    let names: Vec<&String> = zarr_one.iter().map(|f| &f.0).collect();
    // The group's and 3 levels' metadata, 4 x 2 x 2 + 2 + 1 chunks.
    assert!(zarr_one.len() == 4 + 16 + 2 + 1, "{names:?}");
    for ranks in [2, 3] {
        let out = dir.path().join(format!("ranks-{ranks}"));
        let mut args = reconstruct_args(&scan, out.to_str().unwrap(), "2");
        args.retain(|a| *a != "--quiet");
        args.extend(formats);
        let o = mpirun(ranks, &args).output().unwrap();
        let message = stderr(&o);
        assert!(o.status.success(), "{message}");
        assert!(
            std::fs::read(one.join("recon.tif")).unwrap()
                == std::fs::read(out.join("recon.tif")).unwrap()
        );
        let zarr = tree(&out.join("recon.zarr"));
        assert!(
            zarr.iter().map(|f| &f.0).eq(names.iter().copied()),
            "{ranks} ranks: {:?}",
            zarr.iter().map(|f| &f.0).collect::<Vec<_>>()
        );
        for ((name, a), (_, b)) in zarr_one.iter().zip(&zarr) {
            assert!(a == b, "{ranks} ranks changed recon.zarr/{name}");
        }
        // Each rank held, while the volume was written, its share and at most one slab of it,
        // as the resident pages of its volume array, the slices it held and its OME-Zarr part's
        // buffers say (4 pages of slack: the pages at either end of its share and of the array
        // may also hold other data).
        let plane = 32 * 32 * 4;
        let (mut seen, mut shares) = (0, 0);
        for line in message
            .lines()
            .filter(|l| l.starts_with("writing the volume, rank"))
        {
            let numbers: Vec<u64> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect();
            let [rank, held, share, slab] = numbers[..] else {
                panic!("{line}")
            };
            eprintln!("{ranks} ranks: {line}");
            // Its share: whole y rows (the ranks' shares of U1's chunks).
            assert!(
                rank == seen && share % plane as u64 == 0 && slab <= 32 * plane as u64,
                "{line}"
            );
            shares += share;
            assert!(held >= share, "the ledger misses the share: {line}");
            assert!(held <= share + slab + 4 * 4096, "{line}");
            seen += 1;
        }
        assert!(
            seen == ranks as u64 && shares == 32 * plane as u64,
            "{message}"
        );
    }
}
