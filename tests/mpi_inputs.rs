//! MPI ranks keep only their share of the inputs and of the scratch files (feature `mpi`, run
//! under Open MPI's `mpirun`): a TIFF stack and `.npy` line integrals are read a rank's angles
//! at a time, stripe removal runs on each rank's detector rows, the axis search sums each rank's
//! angles in turn (the scores of one process, the first rank telling the others the axis),
//! scratch files hold a rank's planes only, and each gives the one-process volume bit for bit.
#![cfg(feature = "mpi")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::process::{mpirun, run_lamino, succeeded};

use lamino::io::{write_f32_npy, StackWriter};
use lamino::recon::input::projections_from_scan;
use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec};

/// Side of the simulated scans (voxels, detector pixels and angles).
const SIZE: usize = 32;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// The numbers of the line of `text` that starts with `prefix`, in order (every run of digits).
fn numbers_after(text: &str, prefix: &str) -> Vec<usize> {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{text}"));
    line[prefix.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Runs `reconstruct input extra --out DIR` as one process and on `ranks` ranks; asserts both
/// succeed with the same `recon.tif` (and, where the axis was searched, the same scores in
/// `axis_search.csv`), byte for byte, and returns the ranks' stderr.
fn same_volume_on_ranks(ranks: usize, dir: &Path, input: &Path, extra: &[&str]) -> String {
    let args = |out: &Path| -> Vec<String> {
        let mut a = vec!["reconstruct".to_string(), s(input)];
        a.extend(extra.iter().map(|x| x.to_string()));
        a.extend(["--iterations", "2", "--out"].map(String::from));
        a.push(s(out));
        a
    };
    let (one, many) = (dir.join("one"), dir.join("ranks"));
    succeeded(&run_lamino(&strs(&args(&one))));
    let o = mpirun(ranks, &strs(&args(&many))).output().unwrap();
    let text = stderr(&o);
    assert!(o.status.success(), "{text}");
    // Only the first rank speaks: the others' notes once tore its lines in the merged stderr.
    let notes = text
        .matches("note: running on the software adapter")
        .count();
    assert!(
        notes == 1,
        "{notes} software-adapter notes from {ranks} ranks:\n{text}"
    );
    for file in ["recon.tif", "axis_search.csv"] {
        let expected = std::fs::read(one.join(file)).ok();
        let got = std::fs::read(many.join(file)).ok();
        assert!(
            got == expected,
            "{file}: {ranks} ranks differ from one process\n{text}"
        );
    }
    text
}

// Only the first rank speaks (the others run as with --quiet): its lines are checked.

/// The first rank read only its angles, the first half: `F` frames of `N`, its angles `a..b`.
fn check_reads(text: &str) {
    let n = numbers_after(text, "rank 0 of 2: read ");
    assert!(
        n == [SIZE / 2, SIZE, 0, SIZE / 2, SIZE / 2 * SIZE * SIZE],
        "{n:?}"
    );
}

/// Stripe removal corrected the first rank's half of the detector rows and held at most twice
/// its share of the projections (its angles or its rows, and their copies on their way to the
/// other rank).
fn check_stripes(text: &str) {
    let n = numbers_after(text, "rank 0 of 2: stripes removed");
    let [a, b, held, angles_values] = n[..] else {
        panic!("{n:?}")
    };
    assert!(
        [a, b, angles_values] == [0, SIZE / 2, SIZE.pow(3) / 2],
        "{n:?}"
    );
    assert!(held <= 2 * angles_values, "{n:?}");
}

/// The first of `ranks` ranks searched the axis on its share of the `angles` angles, holding at
/// most that share and its binned copy (binned by 2 at least: a quarter of it), and two passes'
/// worth of slab sums: at most `2 x candidates x slices x SIZE^2`, with the most candidates of
/// a pass (the first, half a pixel apart over the default range of +- SIZE/8 columns) and the
/// most slices of a chosen slab. Neither grows with the scan's other angles.
fn check_search(text: &str, ranks: usize, angles: usize) {
    let n = numbers_after(text, &format!("rank 0 of {ranks}: axis searched"));
    let [a, b, held, slab_values] = n[..] else {
        panic!("{n:?}")
    };
    let share = angles.div_ceil(ranks);
    assert!([a, b] == [0, share], "{n:?}");
    let share_values = share * SIZE * SIZE;
    assert!(
        held >= share_values && held <= share_values + share_values / 4,
        "{n:?}"
    );
    let candidates = 2 * (SIZE / 8) * 2 + 1;
    let most = 2 * candidates * lamino::preprocess::DEFAULT_SLAB_SLICES * SIZE * SIZE;
    assert!(
        slab_values > 0 && slab_values <= most,
        "{n:?} (at most {most})"
    );
}

/// A noisy simulated chip scan at a 30 degree tilt (intensities, flats and darks).
fn scan() -> lamino::io::Scan {
    simulated_scan(&ScanSpec {
        phantom: PhantomKind::Chip,
        size: SIZE,
        angles: SIZE,
        tilt_deg: 30.0,
        photons: Some(1e5),
        seed: 7,
        rotation_axis: None,
    })
    .unwrap()
    .scan
}

fn write_stack(path: &Path, stack: &lamino::io::Stack) {
    let [n, h, w] = stack.shape;
    let mut writer = StackWriter::create(path, n, h, w).unwrap();
    for frame in stack.values.chunks(h * w) {
        writer.write_image(frame).unwrap();
    }
    writer.finish().unwrap();
}

/// A TIFF stack of intensities with its flats, darks and angle list: the arguments after the
/// stack's path.
fn tiff_input(dir: &Path) -> (PathBuf, Vec<String>) {
    let scan = scan();
    let p = |name: &str| dir.join(name);
    write_stack(&p("proj.tif"), &scan.data);
    write_stack(&p("flats.tif"), &scan.flats);
    write_stack(&p("darks.tif"), &scan.darks);
    let degrees: Vec<String> = scan
        .theta
        .iter()
        .map(|t| format!("{}", t.to_degrees()))
        .collect();
    std::fs::write(p("angles.txt"), degrees.join("\n")).unwrap();
    let args = [
        "--angles",
        &s(&p("angles.txt")),
        "--tilt-deg",
        "30",
        "--flats",
        &s(&p("flats.tif")),
        "--darks",
        &s(&p("darks.tif")),
    ]
    .map(String::from)
    .to_vec();
    (p("proj.tif"), args)
}

/// `.npy` line integrals with their geometry file: the arguments after the array's path.
fn npy_input(dir: &Path) -> (PathBuf, Vec<String>) {
    let loaded = projections_from_scan(Path::new("simulated"), scan(), Some(30.0)).unwrap();
    let p = loaded.projections;
    let g = p.geometry();
    let (npy, json) = (dir.join("data.npy"), dir.join("geometry.json"));
    write_f32_npy(&npy, &[g.ntheta(), g.deth, g.detw], p.values()).unwrap();
    g.write_json(&json).unwrap();
    (npy, vec!["--geometry".into(), s(&json)])
}

#[test]
fn two_ranks_read_their_angles_of_a_tiff_stack_and_remove_stripes_on_their_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (input, mut args) = tiff_input(dir.path());
    args.extend(["--remove-stripe", "fw", "--rotation-axis", "auto"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = same_volume_on_ranks(2, dir.path(), &input, &args);
    check_reads(&text);
    check_stripes(&text);
    check_search(&text, 2, SIZE);
    // The first rank scored and told the other the axis.
    assert!(
        text.matches("rotation axis searched").count() == 1,
        "{text}"
    );
}

#[test]
fn two_ranks_read_their_angles_of_npy_line_integrals_and_remove_stripes_on_their_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (input, mut args) = npy_input(dir.path());
    args.extend(["--remove-stripe", "sort", "--rotation-axis", "auto"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = same_volume_on_ranks(2, dir.path(), &input, &args);
    check_reads(&text);
    check_stripes(&text);
    check_search(&text, 2, SIZE);
    // The first rank scored and told the other the axis.
    assert!(
        text.matches("rotation axis searched").count() == 1,
        "{text}"
    );
}

/// A plain CT scan (tilt 0, 360 degrees) with its rotation axis off centre, as `.npy` line
/// integrals: the arguments after the array's path.
fn ct_npy_input(dir: &Path) -> (PathBuf, Vec<String>) {
    let scan = simulated_scan(&ScanSpec {
        phantom: PhantomKind::Blobs,
        size: SIZE,
        angles: SIZE,
        tilt_deg: 0.0,
        photons: Some(1e5),
        seed: 5,
        rotation_axis: Some(SIZE as f64 / 2.0 + 1.3),
    })
    .unwrap()
    .scan;
    let loaded = projections_from_scan(Path::new("simulated"), scan, Some(0.0)).unwrap();
    let p = loaded.projections;
    let g = p.geometry();
    let (npy, json) = (dir.join("ct.npy"), dir.join("ct.json"));
    write_f32_npy(&npy, &[g.ntheta(), g.deth, g.detw], p.values()).unwrap();
    g.write_json(&json).unwrap();
    (npy, vec!["--geometry".into(), s(&json)])
}

/// Three ranks search the axis of a CT scan: the slab sums pass through the middle rank, and
/// each rank sends the first its rows of Vo et al.'s mean sinogram. The scores, the axis and the
/// volume are those of one process.
#[test]
fn three_ranks_search_the_axis_of_a_ct_scan_in_turn_with_the_scores_of_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let (input, mut args) = ct_npy_input(dir.path());
    args.extend(["--rotation-axis", "auto"].map(String::from));
    let text = same_volume_on_ranks(3, dir.path(), &input, &strs(&args));
    check_search(&text, 3, SIZE);
    assert!(
        text.matches("rotation axis searched").count() == 1 && text.contains("Fourier estimate"),
        "{text}"
    );
}

/// Streaming with scratch files (device and host budgets too small for the arrays): each rank's
/// scratch files hold its planes of each array, rounded out to whole pages, not the whole array.
#[test]
fn two_ranks_streaming_keep_only_their_planes_in_scratch_files() {
    let dir = tempfile::tempdir().unwrap();
    let (input, args) = npy_input(dir.path());
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    let scratch_arg = s(&scratch);
    args.extend([
        "--max-device-memory",
        "4",
        "--max-host-memory",
        "1",
        "--scratch",
        &scratch_arg,
    ]);
    let text = same_volume_on_ranks(2, dir.path(), &input, &args);
    const PAGE: usize = 4096;
    let n = numbers_after(&text, "rank 0 of 2: scratch files of ");
    let [file, share, arrays, whole] = n[..] else {
        panic!("{n:?}")
    };
    assert!(arrays > 0 && share > 0, "{n:?}");
    assert!(share <= file && file <= share + 2 * PAGE * arrays, "{n:?}");
    assert!(
        2 * share <= whole + 2 * PAGE * arrays && file < whole,
        "{n:?}"
    );
    assert!(std::fs::read_dir(&scratch).unwrap().count() == 0);
}
