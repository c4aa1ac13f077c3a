//! The `lamino` binary: `devices`, `apply fft` against the CPU reference, the demo, and clear
//! failures for bad input and for a missing hardware GPU.

mod common;

use lamino::Tilt;
use std::path::Path;
use std::process::Output;

use common::to_f64;
use lamino::fft::{recipe, Direction};
use lamino::io::{read_complex_npy, write_complex_npy, ComplexArray};
use lamino::random::SplitMix64;
use lamino::reference::{fft_last_axes, max_relative_error};
use ndarray_npy::WriteNpyExt;

fn lamino(args: &[&str], allow_software: bool) -> Output {
    let mut cmd = common::process::lamino_command();
    cmd.args(args);
    if allow_software {
        cmd.arg("--allow-software-gpu");
    }
    cmd.output().expect("run lamino")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A JSON file a command wrote (a report, `try.json`), parsed.
fn read_json(path: impl AsRef<std::path::Path>) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The objects of a `--json` output, one per line.
fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8(stdout.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn apply_fft_matches_the_reference_on_the_last_axes() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("x.npy"), dir.path().join("y.npy"));
    let shape = vec![3, 20, 17];
    let data = SplitMix64::new(21).complex_uniform(shape.iter().product());
    write_complex_npy(
        &input,
        &ComplexArray {
            shape: shape.clone(),
            data: data.clone(),
        },
    )
    .unwrap();
    for (axes, inverse) in [(2usize, false), (3, true)] {
        let mut args = vec![
            "apply",
            "fft",
            "--input",
            input.to_str().unwrap(),
            "--out",
            output.to_str().unwrap(),
        ];
        let axes_arg = axes.to_string();
        args.extend(["--axes", &axes_arg]);
        if inverse {
            args.push("--inverse");
        }
        let o = lamino(&args, true);
        assert!(o.status.success(), "{}", stderr(&o));
        let got = read_complex_npy(&output).unwrap();
        assert_eq!(got.shape, shape);
        let mut reference = to_f64(&data);
        let direction = if inverse {
            Direction::Inverse
        } else {
            Direction::Forward
        };
        fft_last_axes(&mut reference, &shape, axes, direction, 1);
        let err = max_relative_error(&got.data, &reference);
        assert!(
            err <= recipe::accuracy_bound(&shape[3 - axes..]),
            "axes {axes}: {err:.2e}"
        );
    }
}

#[test]
fn apply_fft_promotes_float32_and_normalises_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("f.npy"), dir.path().join("y.npy"));
    ndarray::Array1::<f32>::from_elem(8, 2.0)
        .write_npy(std::fs::File::create(&input).unwrap())
        .unwrap();
    let o = lamino(
        &[
            "apply",
            "fft",
            "--input",
            input.to_str().unwrap(),
            "--out",
            output.to_str().unwrap(),
            "--normalize",
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let y = read_complex_npy(&output).unwrap();
    // The mean of a constant signal lands in bin 0; every other bin is zero.
    assert!(
        (y.data[0].re - 2.0).abs() < 1e-6 && y.data[1..].iter().all(|c| c.norm() < 1e-6),
        "{:?}",
        y.data
    );
}

fn expect_failure(args: &[&str], needle: &str, output: &Path) {
    let o = lamino(args, true);
    assert!(!o.status.success(), "{args:?} should fail");
    assert!(
        stderr(&o).contains(needle),
        "{args:?}: message {:?} lacks {needle:?}",
        stderr(&o)
    );
    assert!(!output.exists(), "{args:?} wrote an output despite failing");
}

#[test]
fn bad_input_exits_non_zero_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.npy");
    let o = out.to_str().unwrap();
    let fft_fails = |input: &Path, needle: &str| {
        expect_failure(
            &[
                "apply",
                "fft",
                "--input",
                input.to_str().unwrap(),
                "--out",
                o,
            ],
            needle,
            &out,
        )
    };
    let missing = dir.path().join("missing.npy");
    fft_fails(&missing, "cannot read");
    // float64 and float16 are converted on read; an integer array is no signal.
    let i64s = dir.path().join("i64.npy");
    ndarray::Array1::<i64>::zeros(4)
        .write_npy(std::fs::File::create(&i64s).unwrap())
        .unwrap();
    fft_fails(&i64s, "<i8");
    let empty = dir.path().join("empty.npy");
    ndarray::Array2::<f32>::zeros((3, 0))
        .write_npy(std::fs::File::create(&empty).unwrap())
        .unwrap();
    fft_fails(&empty, "at least one element");
    let corrupt = dir.path().join("corrupt.npy");
    std::fs::write(&corrupt, b"\x93NUMPY\x01\x00garbage").unwrap();
    fft_fails(&corrupt, "not a valid .npy");
    // A TIFF stack given for the array: named as what it is, not as a damaged TIFF.
    let tif = dir.path().join("stack.tif");
    lamino::io::write_tiff_volume(
        &tif,
        &lamino::io::Stack {
            shape: [2, 3, 4],
            values: vec![1.0; 24],
        },
    )
    .unwrap();
    fft_fails(&tif, "is not a NumPy .npy file but a TIFF file");
    let h5 = dir.path().join("scan.npy");
    std::fs::write(&h5, b"\x89HDF\r\n\x1a\n\0\0\0\0\0\0\0\0").unwrap();
    fft_fails(&h5, "is not a NumPy .npy file but an HDF5 file");
    let good = dir.path().join("good.npy");
    ndarray::Array2::<f32>::zeros((2, 2))
        .write_npy(std::fs::File::create(&good).unwrap())
        .unwrap();
    expect_failure(
        &[
            "apply",
            "fft",
            "--input",
            good.to_str().unwrap(),
            "--out",
            o,
            "--axes",
            "3",
        ],
        "--axes 3",
        &out,
    );
    // `devices` takes no GPU options after it: the selector goes before the command.
    let o = lamino(&["--device", "gpu0", "devices"], false);
    assert!(!o.status.success(), "a bad selector was accepted");
    assert!(
        stderr(&o).contains("invalid device selector"),
        "{}",
        stderr(&o)
    );
}

/// A 100-byte TIFF whose header claims 2^30 x 2^30 float32 pixels is refused from its length by
/// `reconstruct` and `flatfield fit` alike, before anything is allocated from the claim.
#[test]
fn a_tiny_tiff_claiming_a_huge_image_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (tif, angles) = (dir.path().join("x.tif"), dir.path().join("a.txt"));
    std::fs::write(&tif, common::huge_tiff()).unwrap();
    std::fs::write(&angles, "0\n").unwrap();
    let out = dir.path().join("out");
    let (t, a, o) = (
        tif.to_str().unwrap(),
        angles.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    let needle = "x.tif: TIFF page 0 claims shape [1073741824, 1073741824] of F32 (uncompressed), more than a file of 100 bytes can hold";
    expect_failure(
        &[
            "reconstruct",
            t,
            "--angles",
            a,
            // One angle states no unit of its own.
            "--theta-units",
            "deg",
            "--tilt-deg",
            "30",
            "--flatfield",
            "envelope",
            "--out",
            o,
        ],
        needle,
        &out,
    );
    expect_failure(&["flatfield", "fit", t, "--out", o], needle, &out);
}

/// `score` refuses a volume holding NaN or infinity, naming the file, the voxel and the value.
#[test]
fn score_refuses_non_finite_volumes() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let volume = |name: &str, at: usize, value: f32| {
        let mut v = ndarray::Array3::<f32>::from_elem((4, 4, 4), 1.0);
        v.as_slice_mut().unwrap()[at] = value;
        v.write_npy(std::fs::File::create(path(name)).unwrap())
            .unwrap();
    };
    volume("a.npy", 0, 1.0);
    volume("nan.npy", 21, f32::NAN);
    volume("inf.npy", 63, f32::NEG_INFINITY);
    let score = |rec: &str, truth: &str| {
        lamino(
            &[
                "score",
                path(rec).to_str().unwrap(),
                path(truth).to_str().unwrap(),
            ],
            false,
        )
    };
    let o = score("a.npy", "a.npy");
    assert!(o.status.success(), "{}", stderr(&o));
    for (rec, truth, needle) in [
        (
            "a.npy",
            "nan.npy",
            "nan.npy: voxel (z, y, x) = [1, 1, 1] is NaN",
        ),
        (
            "inf.npy",
            "a.npy",
            "inf.npy: voxel (z, y, x) = [3, 3, 3] is -inf",
        ),
    ] {
        let o = score(rec, truth);
        assert!(
            !o.status.success() && stderr(&o).contains(needle),
            "{rec} {truth}: {}",
            stderr(&o)
        );
        assert!(
            o.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

#[test]
fn without_a_hardware_gpu_the_cli_refuses_unless_told_otherwise() {
    let hardware = lamino::gpu::list_adapters(None).iter().any(|a| !a.software);
    let o = lamino(&["selftest"], false);
    if hardware {
        assert!(o.status.success(), "{}", stderr(&o));
    } else {
        assert!(!o.status.success());
        let msg = stderr(&o);
        assert!(
            msg.contains("no hardware GPU") && msg.contains("lamino devices"),
            "{msg}"
        );
        assert!(
            msg.contains("--allow-software-gpu") && msg.contains("LAMINO_ALLOW_SOFTWARE_GPU=1"),
            "{msg}"
        );
    }
    let o = lamino(&["--device", "99", "selftest"], true);
    assert!(
        !o.status.success() && stderr(&o).contains("no adapter with index 99"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn compiled_pipelines_are_kept_for_the_next_run_where_the_device_has_a_cache() {
    let dir = tempfile::tempdir().unwrap();
    // The directory by LAMINO_PIPELINE_CACHE: the driver's own shader cache (Mesa's, under
    // XDG_CACHE_HOME) stays where it is, warm.
    let cache = dir.path().join("cache");
    let selftest = |setting: &std::ffi::OsStr| {
        let mut cmd = common::process::lamino_command();
        cmd.args(["selftest", "--allow-software-gpu"])
            .env(lamino::gpu::PIPELINE_CACHE_ENV, setting);
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let stdout = String::from_utf8(o.stdout).unwrap();
        let line = stdout
            .lines()
            .find(|l| l.starts_with("pipeline cache: "))
            .unwrap_or_else(|| panic!("no pipeline cache line:\n{stdout}"))
            .to_string();
        line
    };
    let cold = selftest(cache.as_os_str());
    if cold.contains("none") {
        eprintln!("skipped: this device has no pipeline cache ({cold})");
        return;
    }
    assert!(cold.ends_with("(empty: a cold start)"), "{cold}");
    let written: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
    assert_eq!(written.len(), 1, "one file for this adapter and driver");
    let warm = selftest(cache.as_os_str());
    assert!(warm.ends_with("bytes read)"), "{warm}");
    std::fs::remove_dir_all(&cache).unwrap();
    let off = selftest("off".as_ref());
    assert!(off.contains("none (turned off"), "{off}");
    assert!(!cache.exists(), "nothing written when off");
}

#[test]
fn devices_lists_every_adapter_and_the_selftest_passes() {
    let o = lamino(&["devices", "--json"], false);
    assert!(o.status.success(), "{}", stderr(&o));
    let listed = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .count();
    assert_eq!(listed, lamino::gpu::list_adapters(None).len());
    assert!(listed >= 1);
    let o = lamino(&["selftest"], true);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", stderr(&o));
    assert!(
        stdout.contains("all transforms within the accuracy bound"),
        "{stdout}"
    );
}

#[test]
fn apply_operator_commands_match_the_references_and_check_shapes() {
    use lamino::geometry::Geometry;
    use lamino::reference::{usfft1d_direct, CpuOperator};
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let g = Geometry {
        n0: 12,
        n1: 10,
        n2: 14,
        deth: 12,
        detw: 16,
        ..Geometry::cube(12, 5, Tilt::from_phi(1.9))
    };
    g.write_json(&path("g.json")).unwrap();
    let volume = SplitMix64::new(31).complex_uniform(g.volume_len());
    write_complex_npy(
        &path("u.npy"),
        &ComplexArray {
            shape: vec![12, 10, 14],
            data: volume.clone(),
        },
    )
    .unwrap();
    let args = |op: &str, input: &str, output: &str| {
        lamino(
            &[
                "apply",
                op,
                "--geometry",
                path("g.json").to_str().unwrap(),
                "--input",
                path(input).to_str().unwrap(),
                "--out",
                path(output).to_str().unwrap(),
            ],
            true,
        )
    };
    let o = args("forward", "u.npy", "d.npy");
    assert!(o.status.success(), "{}", stderr(&o));
    let d = read_complex_npy(&path("d.npy")).unwrap();
    assert_eq!(d.shape, vec![5, 12, 16]);
    let reference = CpuOperator::new(&g, 1).forward(&volume);
    let err = max_relative_error(&d.data, &to_f64(&reference));
    assert!(err < 1e-5, "forward vs CPU: {err:.2e}");

    let o = args("adjoint", "d.npy", "back.npy");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        read_complex_npy(&path("back.npy")).unwrap().shape,
        vec![12, 10, 14]
    );

    let o = args("usfft1d", "u.npy", "s.npy");
    assert!(o.status.success(), "{}", stderr(&o));
    let s = read_complex_npy(&path("s.npy")).unwrap();
    assert_eq!(s.shape, vec![12, 10, 14]);
    let direct = usfft1d_direct(&g, &to_f64(&volume));
    assert!(max_relative_error(&s.data, &direct) < 1e-3);
    let o = args("usfft2d", "s.npy", "f.npy");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        read_complex_npy(&path("f.npy")).unwrap().shape,
        vec![5, 12, 16]
    );

    // Wrong shapes and bad geometry files are refused, and nothing is written.
    let o = args("adjoint", "u.npy", "never.npy");
    assert!(
        !o.status.success() && stderr(&o).contains("reads shape [5, 12, 16]"),
        "{}",
        stderr(&o)
    );
    std::fs::write(
        path("g.json"),
        r#"{"n0": 11, "n1": 10, "n2": 14, "deth": 12, "detw": 16, "theta": [0.0], "phi": 1.9}"#,
    )
    .unwrap();
    let o = args("forward", "u.npy", "never.npy");
    assert!(
        !o.status.success() && stderr(&o).contains("n0 = 11"),
        "{}",
        stderr(&o)
    );
    assert!(!path("never.npy").exists());
}

#[test]
fn reconstruct_and_score_write_the_promised_files_and_refuse_bad_input() {
    use lamino::geometry::Geometry;
    use lamino::operator::{Apply, LaminoOperator, OperatorOptions};
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let n = 16;
    let g = Geometry::cube(n, 12, Tilt::from_phi(1.92));
    g.write_json(&path("g.json")).unwrap();
    // A box, projected with the operator and scaled back to line integrals.
    let mut truth = vec![0.0f32; n * n * n];
    for z in 6..10 {
        for y in 4..12 {
            for x in 4..12 {
                truth[(z * n + y) * n + x] = 1.0;
            }
        }
    }
    let ctx = common::ctx();
    let op = LaminoOperator::new(ctx, &g, &OperatorOptions::default()).unwrap();
    let c: Vec<num_complex::Complex32> = truth
        .iter()
        .map(|&v| num_complex::Complex32::new(v, 0.0))
        .collect();
    let d = op.apply_host(ctx, Apply::Forward, &[n, n, n], &c).unwrap();
    let scale = ((n * 12) as f32).sqrt();
    let p: Vec<num_complex::Complex32> = d
        .iter()
        .map(|v| num_complex::Complex32::new(v.re * scale, 0.0))
        .collect();
    write_complex_npy(
        &path("p.npy"),
        &ComplexArray {
            shape: vec![12, n, n],
            data: p.clone(),
        },
    )
    .unwrap();
    let t: Vec<num_complex::Complex32> = truth
        .iter()
        .map(|&v| num_complex::Complex32::new(v, 0.0))
        .collect();
    write_complex_npy(
        &path("truth.npy"),
        &ComplexArray {
            shape: vec![n, n, n],
            data: t,
        },
    )
    .unwrap();

    let out = path("out");
    let out_s = out.to_str().unwrap();
    let o = lamino(
        &[
            "reconstruct",
            path("p.npy").to_str().unwrap(),
            "--geometry",
            path("g.json").to_str().unwrap(),
            "--out",
            out_s,
            "--quiet",
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for f in [
        "recon.tif",
        "report.json",
        "preview_xy.png",
        "preview_xz.png",
        "preview_yz.png",
        "convergence.png",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    // Previews at a readable size (16^3 here, enlarged), the convergence plot with content.
    for (f, min_side) in [("preview_xy.png", 512), ("convergence.png", 600)] {
        let img = image::open(out.join(f)).unwrap().to_rgb8();
        assert!(
            img.width().max(img.height()) >= min_side,
            "{f}: {:?}",
            img.dimensions()
        );
        let inked = img
            .pixels()
            .filter(|p| p.0.iter().any(|&c| c < 200))
            .count();
        assert!(inked >= 2000, "{f}: only {inked} drawn pixels");
    }
    let report = read_json(out.join("report.json"));
    // The default stops on the convergence test, well before the safety net.
    let iterations = report["reconstruction"]["reports"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(report["reconstruction"]["stop"], "converged");
    assert!((10..300).contains(&iterations), "{iterations} iterations");
    assert!(report["reconstruction"]["geometry"]["n0"] == 16);
    let o = lamino(
        &[
            "score",
            out.join("recon.tif").to_str().unwrap(),
            path("truth.npy").to_str().unwrap(),
        ],
        false,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        s["rel_l2"].as_f64().unwrap() < 0.5 && s["ssim"].as_f64().unwrap() > 0.5,
        "{s}"
    );
    // The comparison panel, next to the reconstruction: three slices of 16 px, each enlarged.
    let panel = image::open(out.join("comparison.png")).unwrap().to_rgb8();
    assert!(
        panel.width() >= 3 * 320 && panel.height() >= 3 * 320,
        "{:?}",
        panel.dimensions()
    );
    let grey_levels: std::collections::HashSet<u8> = panel.pixels().map(|p| p.0[0]).collect();
    assert!(
        grey_levels.len() >= 32,
        "a near-blank panel: {} levels",
        grey_levels.len()
    );

    // Bad input: nothing already written is damaged.
    let reconstruct_fails = |input: &str, needle: &str| {
        let (input, geometry) = (path(input), path("g.json"));
        let args = [
            "reconstruct",
            input.to_str().unwrap(),
            "--geometry",
            geometry.to_str().unwrap(),
            "--out",
            out_s,
        ];
        let o = lamino(&args, true);
        assert!(
            !o.status.success() && stderr(&o).contains(needle),
            "{}",
            stderr(&o)
        );
    };
    let before = std::fs::read(out.join("recon.tif")).unwrap();
    let o = lamino(
        &[
            "reconstruct",
            path("p.npy").to_str().unwrap(),
            "--out",
            out_s,
        ],
        true,
    );
    assert!(
        !o.status.success() && stderr(&o).contains("--geometry"),
        "{}",
        stderr(&o)
    );
    let mut nan = p.clone();
    nan[5].re = f32::NAN;
    write_complex_npy(
        &path("nan.npy"),
        &ComplexArray {
            shape: vec![12, n, n],
            data: nan,
        },
    )
    .unwrap();
    reconstruct_fails("nan.npy", "must be finite");
    reconstruct_fails("truth.npy", "needs (ntheta, deth, detw)");
    assert_eq!(std::fs::read(out.join("recon.tif")).unwrap(), before);
}

/// `lamino simulate` of 16^3 blobs at 16 angles, 30 degrees, 1e6 photons, with `extra`, to `scan`.
fn simulate_blobs(scan: &Path, extra: &[&str]) {
    let size = [
        "--size",
        "16",
        "--angles",
        "16",
        "--tilt-deg",
        "30",
        "--photons",
        "1e6",
    ];
    let args = [&["simulate", "--phantom", "blobs"], &size[..], extra].concat();
    let o = lamino(
        &[&args[..], &["--out", scan.to_str().unwrap()]].concat(),
        false,
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn simulate_reconstruct_and_score_a_dxchange_scan() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.h5");
    let out = dir.path().join("rec");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    simulate_blobs(&scan, &[]);
    let o = lamino(
        &["reconstruct", &s(&scan), "--out", &s(&out), "--quiet"],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // The report records what normalisation clamped, whatever it was.
    let report = read_json(out.join("report.json"));
    let clamps = &report["reconstruction"]["preprocessing"]["clamps"];
    let (clamped, pixels) = (clamps["clamped"].as_u64(), clamps["pixels"].as_u64());
    assert!(
        pixels == Some(16 * 16 * 16) && clamped.is_some_and(|c| c * 100 <= 16 * 16 * 16),
        "{report}"
    );
    let o = lamino(&["score", &s(&out.join("recon.tif")), &s(&scan)], false);
    assert!(o.status.success(), "{}", stderr(&o));
    let score: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Smooth blobs, 16 angles at a 30 degree tilt, 1e6 photons: most of the volume comes back.
    assert!(score["rel_l2"].as_f64().unwrap() < 0.5, "{score}");
    assert!(score["ssim"].as_f64().unwrap() > 0.8, "{score}");
}

/// A scan whose sample moved (`simulate --jitter --drift`, the true shifts in SCAN.shifts.csv)
/// reconstructs closer to the phantom with `--shifts` than without; report.json's geometry
/// holds them; a shifts file of the wrong length or with NaN is refused naming the line or the
/// counts, before anything is written.
#[test]
fn a_scan_that_moved_reconstructs_with_its_shifts_and_bad_shift_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.h5");
    let shifts = dir.path().join("scan.shifts.csv");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    simulate_blobs(&scan, &["--jitter", "1", "--drift", "1"]);
    let text = std::fs::read_to_string(&shifts).unwrap();
    assert_eq!(text.lines().count(), 17, "{text}");
    let score = |extra: &[&str], name: &str| {
        let out = dir.path().join(name);
        let mut args = vec!["reconstruct", &s(&scan), "--out", &s(&out), "--quiet"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = lamino(&args, true);
        assert!(o.status.success(), "{}", stderr(&o));
        let o = lamino(&["score", &s(&out.join("recon.tif")), &s(&scan)], false);
        let score: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (
            score["rel_l2"].as_f64().unwrap(),
            read_json(out.join("report.json")),
        )
    };
    let (moved, _) = score(&[], "moved");
    let (aligned, report) = score(&["--shifts", &s(&shifts)], "aligned");
    eprintln!("rel. L2 to the phantom: {moved:.3} without the shifts, {aligned:.3} with them");
    assert!(
        aligned < 0.5 && aligned < 0.75 * moved,
        "{aligned} vs {moved}"
    );
    let held = &report["reconstruction"]["geometry"]["shifts"];
    assert_eq!(held.as_array().map(Vec::len), Some(16), "{report}");
    // Projection matching finds them from the scan alone, up to what the data cannot tell from
    // the volume's own position (a common shift and a translation's sinusoids).
    let matched = ["--align", "--iterations", "4", "--checkpoint-every", "1"];
    let (_, report) = score(&matched, "matched");
    let alignment = &report["reconstruction"]["preprocessing"]["alignment"];
    let rounds = alignment["rounds"]
        .as_array()
        .expect("the rounds are reported");
    assert!(rounds.len() >= 2, "{alignment}");
    for name in ["shifts.csv", "shifts.png", "alignment.png"] {
        assert!(dir.path().join("matched").join(name).is_file(), "{name}");
    }
    let read = |path: &Path| -> Vec<[f64; 3]> {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.starts_with("angle_deg,du,dv\n"), "{text}");
        text.lines()
            .skip(1)
            .map(|l| {
                let v: Vec<f64> = l.split(',').map(|x| x.parse().unwrap()).collect();
                [v[0], v[1], v[2]]
            })
            .collect()
    };
    let (truth, found) = (read(&shifts), read(&dir.path().join("matched/shifts.csv")));
    let error = rms_beyond_rigid_motion(&truth, &found, 30.0);
    eprintln!("projection matching: {error:.3} px RMS from the true shifts beyond rigid motion");
    assert!(error < 0.1, "{error}");
    // Resumed, the checkpoint's shifts are taken, not matched again.
    let (_, resumed) = score(&["--align", "--iterations", "5", "--resume"], "matched");
    let geometry = |r: &serde_json::Value| r["reconstruction"]["geometry"]["shifts"].clone();
    assert_eq!(resumed["reconstruction"]["resumed_from"], 4, "{resumed}");
    assert!(resumed["reconstruction"]["preprocessing"]["alignment"].is_null());
    assert_eq!(geometry(&resumed), geometry(&report));
    let bad = dir.path().join("bad.csv");
    let out = dir.path().join("refused");
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&bad, lines[..10].join("\n")).unwrap();
    let args = [
        "reconstruct",
        &s(&scan),
        "--shifts",
        &s(&bad),
        "--out",
        &s(&out),
    ];
    expect_failure(&args, "9 projections' shifts for a scan of 16", &out);
    let nan = [&[lines[0], "0,NaN,0.5"], &lines[2..]].concat().join("\n");
    std::fs::write(&bad, nan).unwrap();
    expect_failure(
        &args,
        "line 2: \"0,NaN,0.5\" is not three finite numbers",
        &out,
    );
}

/// The RMS difference (pixels, over both directions) of `found` from `truth` (`[angle_deg, du,
/// dv]` per projection) once its least-squares fit by rigid motion is removed: a common shift
/// of each direction, and a translation `(x, y)` of the volume, `du = x cos + y sin`,
/// `dv = cos(phi) (x sin - y cos)`, phi = 90 degrees + the tilt.
fn rms_beyond_rigid_motion(truth: &[[f64; 3]], found: &[[f64; 3]], tilt_deg: f64) -> f64 {
    let cos_phi = (90.0 + tilt_deg).to_radians().cos();
    let rows: Vec<([f64; 4], f64)> = truth
        .iter()
        .zip(found)
        .flat_map(|(t, f)| {
            let (sin, cos) = t[0].to_radians().sin_cos();
            [
                ([1.0, 0.0, cos, sin], f[1] - t[1]),
                ([0.0, 1.0, cos_phi * sin, -cos_phi * cos], f[2] - t[2]),
            ]
        })
        .collect();
    // The normal equations, solved by elimination (they are well conditioned for 16 angles).
    let mut a = [[0.0; 5]; 4];
    for (basis, value) in &rows {
        for i in 0..4 {
            for j in 0..4 {
                a[i][j] += basis[i] * basis[j];
            }
            a[i][4] += basis[i] * value;
        }
    }
    for col in 0..4 {
        for row in 0..4 {
            if row != col {
                let (f, pivot) = (a[row][col] / a[col][col], a[col]);
                a[row].iter_mut().zip(pivot).for_each(|(x, p)| *x -= f * p);
            }
        }
    }
    let fit: Vec<f64> = (0..4).map(|i| a[i][4] / a[i][i]).collect();
    let sum: f64 = rows
        .iter()
        .map(|(basis, value)| {
            let r = value - (0..4).map(|i| basis[i] * fit[i]).sum::<f64>();
            r * r
        })
        .sum();
    (sum / truth.len() as f64).sqrt()
}

/// Scans whose normalisation clamps most pixels (white field zero, darks above the whites, data
/// at the dark) are refused with the numbers, before anything is reconstructed or written; the
/// limit is an option.
#[test]
fn scans_whose_normalisation_clamps_most_pixels_are_refused() {
    use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};
    let dir = tempfile::tempdir().unwrap();
    let sim = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Blobs,
        size: 8,
        angles: 8,
        tilt_deg: 30.0,
        photons: Some(1e4),
        seed: 1,
        rotation_axis: None,
    })
    .unwrap();
    for name in ["zero_white", "dark_above_white", "data_at_dark"] {
        let mut scan = sim.scan.clone();
        match name {
            "zero_white" => scan.flats.values.fill(0.0),
            "dark_above_white" => {
                scan.darks.values = scan.flats.values[..scan.darks.values.len()]
                    .iter()
                    .map(|v| 2.0 * v)
                    .collect()
            }
            _ => scan.data.values.fill(0.0),
        }
        let path = dir.path().join(format!("{name}.h5"));
        lamino::io::write_dxchange(&path, &scan).unwrap();
        let out = dir.path().join(name);
        let o = lamino(
            &[
                "reconstruct",
                path.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            true,
        );
        let msg = stderr(&o);
        assert!(!o.status.success(), "{name}: {msg}");
        assert!(
            msg.contains("100.00 %") && msg.contains("--max-clamped-fraction"),
            "{name}: {msg}"
        );
        assert!(!out.join("recon.tif").exists(), "{name}");
    }
    // A fraction outside 0..=1 is refused by the option itself.
    let o = lamino(
        &[
            "reconstruct",
            "x.h5",
            "--max-clamped-fraction",
            "2",
            "--out",
            "o",
        ],
        true,
    );
    assert!(
        !o.status.success() && stderr(&o).contains("expected a fraction from 0 to 1"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn tiff_intensity_stacks_with_flats_reconstruct_like_dxchange() {
    use lamino::io::{read_dxchange, write_tiff_volume};
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let s = |path: std::path::PathBuf| path.to_str().unwrap().to_string();
    let o = lamino(
        &[
            "simulate",
            "--phantom",
            "blobs",
            "--size",
            "16",
            "--angles",
            "16",
            "--tilt-deg",
            "30",
            "--photons",
            "1e5",
            "--out",
            &s(p("scan.h5")),
        ],
        false,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let scan = read_dxchange(&p("scan.h5")).unwrap();
    write_tiff_volume(&p("data.tif"), &scan.data).unwrap();
    write_tiff_volume(&p("flats.tif"), &scan.flats).unwrap();
    let degrees: Vec<String> = scan
        .theta
        .iter()
        .map(|t| t.to_degrees().to_string())
        .collect();
    std::fs::write(p("angles.txt"), degrees.join("\n")).unwrap();

    // The same scan through DXchange and through TIFF + flats gives the same volume (ten
    // iterations: the equivalence does not need a converged volume).
    let o = lamino(
        &[
            "reconstruct",
            &s(p("scan.h5")),
            "--out",
            &s(p("from_h5")),
            "--quiet",
            "--iterations",
            "10",
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // `reconstruct` of the TIFF stack with an angle list (if any), extra options and an output.
    let run_tiff = |angles: Option<&str>, extra: &[&str], out: &str| {
        let (data, out) = (s(p("data.tif")), s(p(out)));
        let angles = angles.map(|a| s(p(a)));
        let mut a = vec![
            "reconstruct",
            &data,
            "--tilt-deg",
            "30",
            "--out",
            &out,
            "--quiet",
            "--iterations",
            "10",
        ];
        if let Some(angles) = &angles {
            a.extend(["--angles", angles.as_str()]);
        }
        a.extend(extra);
        lamino(&a, true)
    };
    let flats = s(p("flats.tif"));
    let o = run_tiff(Some("angles.txt"), &["--flats", &flats], "from_tiff");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(p("from_h5/recon.tif")).unwrap(),
        std::fs::read(p("from_tiff/recon.tif")).unwrap()
    );

    // Missing angles, a wrong angle count, or no shading source: clear errors.
    let o = run_tiff(None, &["--flats", &flats], "x");
    assert!(
        !o.status.success() && stderr(&o).contains("--angles"),
        "{}",
        stderr(&o)
    );
    std::fs::write(p("short.txt"), "0\n10\n").unwrap();
    let o = run_tiff(Some("short.txt"), &["--flats", &flats], "x");
    assert!(
        !o.status.success() && stderr(&o).contains("lists 2 angles for 16 projections"),
        "{}",
        stderr(&o)
    );
    let o = run_tiff(Some("angles.txt"), &[], "x");
    assert!(
        !o.status.success() && stderr(&o).contains("--flatfield envelope"),
        "{}",
        stderr(&o)
    );
    let o = run_tiff(
        Some("angles.txt"),
        &["--flats", &flats, "--flatfield", "envelope"],
        "x",
    );
    assert!(
        !o.status.success() && stderr(&o).contains("cannot be used with"),
        "{}",
        stderr(&o)
    );

    // Without flats the open beam comes from the projections: this scan's is uniform (I0), so
    // the volume is close to the one reconstructed with the flats.
    let o = run_tiff(
        Some("angles.txt"),
        &["--flatfield", "envelope"],
        "estimated",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = lamino(
        &[
            "score",
            &s(p("estimated/recon.tif")),
            &s(p("from_tiff/recon.tif")),
        ],
        false,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let score: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    eprintln!("--flatfield envelope vs --flats: {score}");
    assert!(score["rel_l2"].as_f64().unwrap() < 0.1, "{score}");
    // `basic` (the issue's spelling) runs the same estimate and says why it is not BaSiC.
    let o = run_tiff(
        Some("angles.txt"),
        &["--flatfield", "basic"],
        "estimated_basic",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("envelope method"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(p("estimated_basic/recon.tif")).unwrap(),
        std::fs::read(p("estimated/recon.tif")).unwrap()
    );
}

/// `--device-fraction` streams every frontier run (the exact one too) through a fraction of its
/// in-core device need, and `--policies` picks the settings swept.
#[test]
fn bench_memo_streams_the_frontier_runs_through_a_device_fraction() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("frontier");
    let o = lamino(
        &[
            "bench",
            "memo",
            "--json",
            "--size",
            "32",
            "--iterations",
            "10",
            "--chunk",
            "4",
            "--only",
            "frontier",
            "--repeats",
            "1",
            "--device-fraction",
            "4",
            "--policies",
            "mlr:0.9,certified:0.01",
            "--out",
            out.to_str().unwrap(),
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = json_lines(&o.stdout);
    let settings: Vec<&str> = lines
        .iter()
        .map(|l| l["setting"].as_str().unwrap())
        .collect();
    assert_eq!(settings, ["off", "off", "mlr:0.9", "certified:0.01"]);
    for l in &lines {
        assert_eq!(l["mode"], "streaming", "{l}");
        assert!(l["device_budget"].as_u64().unwrap() > 0, "{l}");
        assert!(l["bytes_moved"].as_u64().unwrap() > 0, "{l}");
    }
    assert!(out.join("memo_frontier.csv").exists());
    let o = lamino(&["bench", "memo", "--device-fraction", "0"], true);
    assert!(!o.status.success(), "{}", stderr(&o));
}

#[test]
fn bench_memo_prints_every_run_and_writes_the_frontier() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("frontier");
    let o = lamino(
        &[
            "bench",
            "memo",
            "--json",
            "--size",
            "16",
            "--iterations",
            "10",
            "--chunk",
            "4",
            "--only",
            "frontier",
            "--repeats",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = json_lines(&o.stdout);
    // exact, off at the memo chunking, six mlr, eight certified and three certified:auto settings.
    assert_eq!(lines.len(), 19);
    assert!(lines.iter().all(|l| l["section"] == "frontier"));
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["policy"] == "certified_auto")
            .count(),
        3
    );
    assert_eq!(lines[0]["policy"], "exact");
    assert_eq!(lines[0]["accuracy"], 1.0);
    for l in &lines {
        for field in [
            "accuracy",
            "normalized_time",
            "hit_rate",
            "lookup_ms_median",
            "lookup_ms_p99",
            "cache_bytes",
            "bytes_moved",
        ] {
            assert!(l.get(field).is_some(), "{field} missing in {l}");
        }
        assert_eq!(l["mode"], "in_core", "{l}");
        assert!(l["device_budget"].is_null(), "{l}");
    }
    assert_eq!(
        lines.iter().filter(|l| l["policy"] == "certified").count(),
        8
    );
    // Every memoized run that finished reports each stage's hit rate.
    for l in lines[2..].iter().filter(|l| l["error"].is_null()) {
        let stages = l["stage_hit_rates"].as_array().unwrap();
        assert_eq!(stages.len(), 4, "{l}");
    }
    assert!(out.join("memo_frontier.csv").exists() && out.join("memo_frontier.png").exists());
    let o = lamino(&["bench", "memo", "--iterations", "5"], true);
    assert!(
        !o.status.success() && stderr(&o).contains("at least 10"),
        "{}",
        stderr(&o)
    );
}

/// Relative L2 distance between two volumes, in f64.
fn relative_l2(a: &[f32], b: &[f32]) -> f64 {
    let (diff, norm) = a.iter().zip(b).fold((0.0, 0.0), |(d, n), (&x, &y)| {
        let (x, y) = (f64::from(x), f64::from(y));
        (d + (x - y) * (x - y), n + y * y)
    });
    (diff / norm).sqrt()
}

#[test]
fn a_reconstruction_on_gl_gives_the_vulkan_volume() {
    let backend_listed = |b: &str| {
        let o = lamino(&["--backend", b, "devices", "--json"], false);
        assert!(o.status.success(), "{}", stderr(&o));
        let lines = json_lines(&o.stdout);
        assert!(
            lines.iter().all(|l| l["backend"].as_str()
                == Some(match b {
                    "gl" => "Gl",
                    _ => "Vulkan",
                })),
            "--backend {b} listed another backend: {lines:?}"
        );
        !lines.is_empty()
    };
    let vulkan = backend_listed("vulkan");
    let gl = backend_listed("gl");
    if !(vulkan && gl) {
        // CI installs both (Mesa's lavapipe and llvmpipe through EGL).
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs on both backends: install mesa-vulkan-drivers, libegl1, libegl-mesa0 and \
             libgl1-mesa-dri"
        );
        eprintln!("skipped: this machine lacks a Vulkan or a GL adapter");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("chip.h5");
    common::simulate_scan(&scan, "chip", 32);
    let volume = |backend: &str| {
        let out = dir.path().join(backend);
        let o = lamino(
            &[
                "--backend",
                backend,
                "reconstruct",
                scan.to_str().unwrap(),
                "--format",
                "tiff",
                "--quiet",
                "--out",
                out.to_str().unwrap(),
            ],
            true,
        );
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        let report = read_json(out.join("report.json"));
        let device = report["reconstruction"]["device"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            device.contains(match backend {
                "gl" => "(Gl,",
                _ => "(Vulkan,",
            }),
            "{backend} ran on {device}"
        );
        assert_eq!(report["reconstruction"]["stop"], "converged");
        lamino::io::read_tiff_volume(&out.join("recon.tif"))
            .unwrap()
            .values
    };
    let on_vulkan = volume("vulkan");
    let on_gl = volume("gl");
    // Another compiler (GLSL through Mesa's GL front end): not the same bits, the same volume
    // (on llvmpipe: 4.4e-7 for this chip; 4.3e-7 for a noisy one, both converged in 89
    // iterations).
    let distance = relative_l2(&on_gl, &on_vulkan);
    eprintln!("GL against Vulkan: relative L2 {distance:e}");
    assert!(distance <= 1e-4, "GL against Vulkan: {distance:e}");
}

#[test]
fn bench_suite_lists_its_steps_runs_each_and_records_one_that_runs_over_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("suite");
    let dry = lamino(
        &[
            "bench",
            "suite",
            "--dry-run",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ],
        false,
    );
    assert!(dry.status.success(), "{}", stderr(&dry));
    let listed: Vec<String> = json_lines(&dry.stdout)
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        listed,
        [
            "fft",
            "operator-128",
            "operator-256",
            "admm-128",
            "normal-64-256",
            "convergence-128",
            "streaming-512-1024",
            "memo-64"
        ]
    );
    assert!(!out.exists(), "a dry run writes nothing");
    let o = lamino(
        &["bench", "suite", "--small", "--out", out.to_str().unwrap()],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let suite = read_json(out.join("suite.json"));
    assert!(!suite["adapter"]["name"].as_str().unwrap().is_empty());
    assert!(
        suite["opened_limits"]["max_storage_binding_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let steps = suite["steps"].as_array().unwrap();
    assert_eq!(steps.len(), listed.len());
    for step in steps {
        let name = step["name"].as_str().unwrap();
        assert_eq!(step["status"], "passed", "{step}");
        let records = step["records"].as_array().unwrap();
        assert!(!records.is_empty(), "{name} printed no record");
        let file = std::fs::read_to_string(out.join(format!("{name}.jsonl"))).unwrap();
        assert_eq!(file.lines().count(), records.len(), "{name}");
    }
    // A step over its time is stopped and recorded, the suite goes on, and says which.
    let o = lamino(
        &[
            "bench",
            "suite",
            "--small",
            "--step-timeout-s",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        true,
    );
    assert!(!o.status.success());
    let suite = read_json(out.join("suite.json"));
    let steps = suite["steps"].as_array().unwrap();
    assert_eq!(steps.len(), listed.len(), "every step was tried");
    assert_eq!(steps[0]["status"], "timed_out", "{}", steps[0]);
    assert!(
        stderr(&o).contains("did not pass") && stderr(&o).contains("fft"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bench_convergence_reports_where_the_default_stops_against_a_longer_run() {
    let o = lamino(
        &[
            "bench",
            "convergence",
            "--json",
            "--size",
            "16",
            "--phantoms",
            "shepp",
            "--reference-iterations",
            "100",
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let r = &lines[0];
    assert_eq!(r["phantom"], "shepp", "{r}");
    assert_eq!(r["reference_iterations"], 100, "{r}");
    let k = r["default_iterations"]
        .as_u64()
        .expect("stops within 100 at 16^3");
    assert!((1..=100).contains(&k), "{r}");
    let d = r["default_to_reference"].as_f64().unwrap();
    assert!((0.0..=0.01).contains(&d), "{r}");
    let truth = r["reference_to_truth"].as_f64().unwrap();
    assert!(truth > 0.0 && truth < 1.0, "{r}");
    // Where each run first came within 0.5 % of the reference: plain ADMM's run is the
    // reference's own first iterations, so it gets there within them.
    assert_eq!(r["reached_within"], 0.005, "{r}");
    for run in ["default", "plain"] {
        let reached = &r[run]["reached"];
        let k = reached["outer_iterations"].as_u64().expect("reached");
        assert!((1..=100).contains(&k), "{r}");
        assert!(reached["to_reference"].as_f64().unwrap() <= 0.005, "{r}");
    }
    assert!(
        r["reached_applications_ratio"].as_f64().unwrap() > 0.0,
        "{r}"
    );
}

#[test]
fn bench_memo_comparison_times_cg_dai_yuan_and_memo_against_the_converged_result() {
    let o = lamino(
        &[
            "bench",
            "memo",
            "--json",
            "--size",
            "16",
            "--only",
            "comparison",
            "--phantoms",
            "chip",
            "--reference-iterations",
            "12",
            "--max-iterations",
            "4",
            "--compare-memo",
            "certified:0.01",
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = json_lines(&o.stdout);
    // The reference, CG read off its trajectory, Dai-Yuan without and with memo.
    let runs: Vec<(&str, &str, &str)> = lines
        .iter()
        .map(|l| {
            assert_eq!(l["section"], "comparison", "{l}");
            (
                l["kind"].as_str().unwrap(),
                l["solver"].as_str().unwrap(),
                l["memo"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            ("reference", "cg", "off"),
            ("run", "cg", "off"),
            ("run", "dai_yuan", "off"),
            ("run", "dai_yuan", "certified:0.01")
        ]
    );
    for l in &lines {
        let t = l["time_s"].as_f64().unwrap();
        assert!(t > 0.0, "{l}");
        assert!(l["distance"].as_f64().unwrap() >= 0.0, "{l}");
    }
    assert_eq!(lines[1]["normalized_time"], 1.0);
}

#[test]
fn try_finds_the_axis_and_reconstruct_takes_it_with_binning_and_stripe_removal() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let scan = p("scan.h5");
    let o = lamino(
        &[
            "simulate",
            "--phantom",
            "chip",
            "--size",
            "32",
            "--angles",
            "48",
            "--tilt-deg",
            "30",
            "--photons",
            "1e5",
            "--rotation-axis",
            "18.5",
            "--out",
            &s(&scan),
        ],
        false,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("rotation axis at column 18.5"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = lamino(
        &[
            "try",
            &s(&scan),
            "--rotation-axis-range",
            "16:21:0.5",
            "--out",
            &s(&p("try")),
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("best: --rotation-axis 18.50"), "{stdout}");
    assert!(stdout.contains("confidence: the score halves"), "{stdout}");
    let report = read_json(p("try/try.json"));
    let width = report["peak_half_width"].as_f64().unwrap();
    assert!(width > 0.0 && width < 5.0, "{report}");
    for name in [
        "axis_16.00.png",
        "axis_18.50.png",
        "axis_21.00.png",
        "slices.tif",
        "try.json",
    ] {
        assert!(p("try").join(name).exists(), "{name}");
    }
    let csv = std::fs::read_to_string(p("try/scores.csv")).unwrap();
    assert_eq!(csv.lines().count(), 12, "{csv}");
    let o = lamino(
        &[
            "try",
            &s(&scan),
            "--rotation-axis",
            "18.5",
            "--tilt-range",
            "29:31:1",
            "--binning",
            "1",
            "--out",
            &s(&p("tilt")),
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(p("tilt/tilt_29.00.png").exists() && p("tilt/tilt_31.00.png").exists());
    // Binned by 2: 16 x 16 previews, the axis still given in unbinned columns.
    let report = read_json(p("tilt/try.json"));
    assert_eq!(report["preprocessing"]["binning"], 2, "{report}");
    assert_eq!(
        report["search"]["preview_shape"],
        serde_json::json!([16, 16])
    );

    // --rotation-axis auto: searched, reported, recorded.
    let o = lamino(
        &[
            "reconstruct",
            &s(&scan),
            "--rotation-axis",
            "auto",
            "--out",
            &s(&p("auto")),
            "--quiet",
            // The search and its report are checked, not the solve: two iterations, not a run
            // to convergence (the longest part of these runs).
            "--iterations",
            "2",
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("rotation axis searched over"),
        "{}",
        stderr(&o)
    );
    let report = read_json(p("auto/report.json"));
    let pre = &report["reconstruction"]["preprocessing"];
    assert_eq!(pre["rotation_axis_source"], "searched", "{pre}");
    let found = pre["rotation_axis"].as_f64().unwrap();
    assert!((found - 18.5).abs() < 0.5, "{found}");
    assert!(p("auto/axis_search.csv").exists());
    // Laminography: the slab search alone, with its confidence and the slab it chose.
    let search = &pre["axis_search"];
    assert_eq!(search["method"], "slab", "{pre}");
    assert!(search["peak_half_width"].as_f64().unwrap() > 0.0, "{pre}");
    assert!(search["slab"]["slices"].as_u64().unwrap() >= 1, "{pre}");
    assert!(search["fourier_axis"].is_null(), "{pre}");

    let o = lamino(
        &[
            "reconstruct",
            &s(&scan),
            "--rotation-axis",
            "18.5",
            "--binning",
            "1",
            "--remove-stripe",
            "sort",
            "--out",
            &s(&p("rec")),
            "--quiet",
            // The preprocessing and its report are checked, not the solve.
            "--iterations",
            "2",
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report = read_json(p("rec/report.json"));
    let rec = &report["reconstruction"];
    assert_eq!(rec["geometry"]["n2"], 16, "{rec}");
    // The report's axis is the original detector's column; the geometry's own (binned) column
    // (18.5 - 0.5) / 2 = 9 is named as such.
    assert_eq!(rec["rotation_axis"], 18.5, "{rec}");
    assert_eq!(rec["rotation_axis_in_geometry"], 9.0, "{rec}");
    assert_eq!(rec["geometry"]["center"], 9.0, "{rec}");
    let pre = &rec["preprocessing"];
    assert_eq!(pre["binning"], 2, "{pre}");
    assert_eq!(pre["rotation_axis"], 18.5, "{pre}");
    assert_eq!(pre["rotation_axis_source"], "given", "{pre}");
    assert_eq!(pre["stripe_removal"]["method"], "sorting", "{pre}");

    for (args, needle) in [
        (
            vec!["try", &s(&scan), "--out", &s(&p("x"))],
            "--rotation-axis-range",
        ),
        (
            vec![
                "reconstruct",
                &s(&scan),
                "--binning",
                "4",
                "--out",
                &s(&p("x")),
            ],
            "2^b",
        ),
        (
            vec![
                "reconstruct",
                &s(&scan),
                "--fw-sigma",
                "2",
                "--out",
                &s(&p("x")),
            ],
            "need --remove-stripe",
        ),
        (
            vec![
                "reconstruct",
                &s(&scan),
                "--rotation-axis",
                "40",
                "--out",
                &s(&p("x")),
            ],
            "rotation axis at column 40",
        ),
        (
            vec![
                "try",
                &s(&scan),
                "--rotation-axis-range",
                "20:10:1",
                "--out",
                &s(&p("x")),
            ],
            "A <= B",
        ),
        (
            vec![
                "reconstruct",
                &s(&scan),
                "--memo-stages",
                "usfft2d,u1",
                "--out",
                &s(&p("x")),
            ],
            "bad memo stage list",
        ),
    ] {
        let o = lamino(&args, true);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

/// `--max-device-memory` holds from the moment the devices open: the axis search of
/// `--rotation-axis auto`, which runs before the solve plans its memory, keeps to it too (its
/// slabs for a 64-wide detector need 3.2 MB: refused under 1 MiB, naming the option).
#[test]
fn the_device_budget_holds_for_the_axis_search() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.h5");
    common::simulate_scan(&scan, "chip", 64);
    let out = dir.path().join("rec");
    let o = lamino(
        &[
            "reconstruct",
            scan.to_str().unwrap(),
            "--rotation-axis",
            "auto",
            "--max-device-memory",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        true,
    );
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("more than the device budget (--max-device-memory), 1048576 bytes"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
}

/// A reconstruction too large for its budgets (device 10 MiB of which the memo cache takes 8,
/// host 2 MiB, the rest in scratch files) streams with `--memo`, reuses chunks, stays within the
/// device budget, writes its outputs from where the solver keeps the volume (the TIFF and the
/// HDF5 dataset hold the same values) and leaves no scratch file.
#[test]
fn a_streaming_reconstruction_with_memo_writes_its_outputs_slab_by_slab() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.h5");
    let out = dir.path().join("rec");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    common::simulate_scan(&scan, "chip", 32);
    let o = lamino(
        &[
            "reconstruct",
            &s(&scan),
            "--out",
            &s(&out),
            "--iterations",
            "2",
            "--max-device-memory",
            "10",
            "--max-host-memory",
            "2",
            "--scratch",
            &s(&scratch),
            "--memo",
            "mlr:0.5",
            "--memo-device-mib",
            "8",
            "--memo-host-mib",
            "1",
            "--quiet",
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report = read_json(out.join("report.json"));
    let r = &report["reconstruction"];
    assert_eq!(r["plan"]["mode"], "streaming", "{}", r["plan"]);
    assert!(r["plan"]["scratch_bytes"].as_u64().unwrap() > 0);
    assert!(
        r["memo_stats"]["hits"].as_u64().unwrap() > 0,
        "{}",
        r["memo_stats"]
    );
    assert!(r["peak_device_bytes"].as_u64().unwrap() <= 10 << 20);
    let tif = lamino::io::read_tiff_volume(&out.join("recon.tif")).unwrap();
    assert_eq!(tif.shape, [32, 32, 32]);
    assert!(tif.values.iter().all(|v| v.is_finite()));
    // The HDF5 file ends with its contiguous dataset (32^3 floats, already 8-byte aligned).
    let h5 = std::fs::read(out.join("recon.h5")).unwrap();
    let values: Vec<u8> = tif.values.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert!(
        h5.ends_with(&values),
        "recon.h5 does not hold recon.tif's values"
    );
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
}

#[test]
fn bench_scale_model_measures_this_device_and_models_each_size_on_each_gpu_count() {
    let o = lamino(
        &[
            "bench",
            "scale",
            "--model",
            "--json",
            "--model-measure-size",
            "16",
            "--model-sizes",
            "64,128",
            "--model-ranks",
            "1,2,4",
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = json_lines(&o.stdout);
    assert_eq!(lines.len(), 1 + 2 * 3);
    let measured = &lines[0];
    assert_eq!(measured["kind"], "model-measurement", "{measured}");
    assert!(measured["ms_per_iteration"].as_f64().unwrap() > 0.0);
    assert!(measured["copy_equivalents"].as_f64().unwrap() > 0.0);
    // The target's largest binding (the default 2047 MiB), whatever this device's is.
    assert_eq!(
        measured["model_max_binding_bytes"],
        2047u64 << 20,
        "{measured}"
    );
    let points = &lines[1..];
    let key: Vec<(u64, u64)> = points
        .iter()
        .map(|p| (p["size"].as_u64().unwrap(), p["ranks"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        key,
        [(64, 1), (64, 2), (64, 4), (128, 1), (128, 2), (128, 4)]
    );
    for p in points {
        let f = |k: &str| p[k].as_f64().unwrap();
        let parts = f("device_s").max(f("bus_s")) + f("network_s") + f("latency_s");
        assert!((f("iteration_s") - parts).abs() <= 1e-9 * parts, "{p}");
        assert!(
            f("efficiency") > 0.0 && f("efficiency") <= 1.0 + 1e-9,
            "{p}"
        );
        let single = p["ranks"] == 1;
        assert_eq!(p["network_bytes_per_rank"] == 0, single, "{p}");
        // Rank 0 streams exactly when some rank does (the first ranks hold the larger shares).
        let streaming = p["streaming_ranks"].as_u64().unwrap();
        assert!(streaming <= p["ranks"].as_u64().unwrap(), "{p}");
        assert_eq!(p["mode"] == "streaming", streaming > 0, "{p}");
    }
    // The bigger volume costs more per iteration on the same GPUs.
    assert!(points[3]["iteration_s"].as_f64() > points[0]["iteration_s"].as_f64());
}

#[test]
fn reconstruct_on_two_devices_writes_the_one_device_volume_and_other_commands_refuse_several() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.h5");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    common::simulate_scan(&scan, "chip", 16);
    let mut volumes = Vec::new();
    for devices in ["0", "0,0"] {
        let out = dir.path().join(format!("rec-{devices}"));
        let o = lamino(
            &[
                "--device",
                devices,
                "reconstruct",
                &s(&scan),
                "--out",
                &s(&out),
                "--iterations",
                "3",
                "--quiet",
            ],
            true,
        );
        assert!(o.status.success(), "{devices}: {}", stderr(&o));
        let report = read_json(out.join("report.json"));
        let device = report["reconstruction"]["device"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            device.matches(" + ").count(),
            devices.matches(',').count(),
            "{device}"
        );
        volumes.push(std::fs::read(out.join("recon.tif")).unwrap());
    }
    assert!(volumes[0] == volumes[1], "two devices changed the volume");
    // One-device commands say so instead of picking one of the devices.
    let o = lamino(&["--device", "0,0", "selftest"], true);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("runs on one device"), "{}", stderr(&o));
    let o = lamino(&["--device", "0,x", "devices"], false);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("\"0,2\""), "{}", stderr(&o));
}

#[test]
fn auto_on_a_ct_scan_reports_the_fourier_estimate_and_the_slab_search() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let scan = p("ct.h5");
    let o = lamino(
        &[
            "simulate",
            "--phantom",
            "shepp",
            "--size",
            "32",
            "--angles",
            "90",
            "--tilt-deg",
            "0",
            "--photons",
            "1e4",
            "--rotation-axis",
            "17.3",
            "--out",
            &s(&scan),
        ],
        false,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = lamino(
        &[
            "try",
            &s(&scan),
            "--tilt-deg",
            "0",
            "--rotation-axis-range",
            "15:20:0.5",
            "--out",
            &s(&p("try")),
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("confidence: the score halves")
            && stdout.contains("Fourier estimate (Vo et al.): --rotation-axis"),
        "{stdout}"
    );
    let report = read_json(p("try/try.json"));
    let fourier = report["fourier_axis"].as_f64().unwrap();
    assert!((fourier - 17.3).abs() <= 0.5, "{report}");
    let o = lamino(
        &[
            "reconstruct",
            &s(&scan),
            "--tilt-deg",
            "0",
            "--rotation-axis",
            "auto",
            "--out",
            &s(&p("auto")),
            "--quiet",
            // The search and its report are checked, not the solve: two iterations, not a run
            // to convergence (the longest part of these runs).
            "--iterations",
            "2",
        ],
        true,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Fourier estimate (Vo et al.)"),
        "{}",
        stderr(&o)
    );
    let report = read_json(p("auto/report.json"));
    let pre = &report["reconstruction"]["preprocessing"];
    let search = &pre["axis_search"];
    // The Fourier estimate, refined by the slab score only where its peak is sharp.
    let chosen = pre["rotation_axis"].as_f64().unwrap();
    let by = match search["method"].as_str() {
        Some("fourier") => "fourier_axis",
        Some("fourier+slab") => "slab_axis",
        other => panic!("method {other:?}: {pre}"),
    };
    assert!(chosen == search[by].as_f64().unwrap(), "{pre}");
    assert!(
        search["reason"]
            .as_str()
            .unwrap()
            .contains("Fourier estimate"),
        "{pre}"
    );
    assert!((chosen - 17.3).abs() <= 0.5, "{pre}");
    assert!(
        (search["slab_axis"].as_f64().unwrap() - 17.3).abs() <= 0.5,
        "{pre}"
    );
    assert!(search["disagreement"].as_f64().unwrap() <= 1.0, "{pre}");
    assert!(search["peak_half_width"].as_f64().unwrap() > 0.0, "{pre}");
}
