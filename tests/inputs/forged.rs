//! Inputs that claim far more than they hold or than the machine has: each must end quickly in a
//! typed error naming the file or the option, never in an allocation abort or an out-of-memory
//! kill. No GPU: every case is refused before a device is opened.

use std::io::Cursor;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::process::{lamino_command, output_within};

use lamino::geometry::{Geometry, GeometryError};
use lamino::io::{read_stack, IoError, StackReader, MAX_TEXT_BYTES};
use lamino::recon::input::{read_angle_list, read_intensity_stack, InputError};
use lamino::simulate::{simulated_scan, PhantomKind, ScanSpec, SimulateError};
use tiff::encoder::{colortype, Compression, DeflateLevel, TiffEncoder};
use tiff::tags::Tag;

/// Far above what any case takes (a refusal is immediate; reading 64 MiB of /dev/zero a few
/// tens of milliseconds): only an unbounded read or allocation reaches it.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs the binary with `args`, killing it past [`LIMIT`] (the test then fails by name).
fn lamino(args: &[&str]) -> Output {
    output_within(lamino_command().args(args), LIMIT)
}

/// Asserts that `o` is a clean refusal (exit status 1 or clap's 2, no signal) whose message
/// contains every one of `words`.
fn refused(o: &Output, words: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        matches!(o.status.code(), Some(1 | 2)),
        "status {:?} (a signal is an abort or a kill): {err}",
        o.status
    );
    for w in words {
        assert!(err.contains(w), "expected {w:?} in: {err}");
    }
}

fn push_u16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn push_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// A decompression bomb: `pages` float32 pages of `side x side` whose directories all point at
/// the same deflate strips (one page of zeros, compressed once), so a file of kilobytes decodes
/// to `pages x side^2 x 4` bytes. Every page is valid on its own and within the per-page bound.
fn tiff_bomb(side: u32, pages: usize) -> Vec<u8> {
    let mut one = Cursor::new(Vec::new());
    TiffEncoder::new(&mut one)
        .unwrap()
        .with_compression(Compression::Deflate(DeflateLevel::Best))
        .write_image::<colortype::Gray32Float>(side, side, &vec![0.0; (side * side) as usize])
        .unwrap();
    let one = one.into_inner();
    let mut dec = tiff::decoder::Decoder::new(Cursor::new(&one)).unwrap();
    let offsets = dec.get_tag_u32_vec(Tag::StripOffsets).unwrap();
    let counts = dec.get_tag_u32_vec(Tag::StripByteCounts).unwrap();
    let rows_per_strip = dec.get_tag_u32(Tag::RowsPerStrip).unwrap();

    // Header, the strips, the two strip arrays, then the directories.
    let mut b = b"II*\0".to_vec();
    push_u32(&mut b, 0); // first directory, patched below
    let mut new_offsets = Vec::new();
    for (&o, &c) in offsets.iter().zip(&counts) {
        new_offsets.push(b.len() as u32);
        b.extend_from_slice(&one[o as usize..(o + c) as usize]);
    }
    let strips = new_offsets.len() as u32;
    let array = |b: &mut Vec<u8>, values: &[u32]| {
        let at = b.len() as u32;
        for &v in values {
            push_u32(b, v);
        }
        at
    };
    // One strip: the value itself; several: where the array is.
    let (offsets_at, counts_at) = if strips == 1 {
        (new_offsets[0], counts[0])
    } else {
        (array(&mut b, &new_offsets), array(&mut b, &counts))
    };
    let first = b.len() as u32;
    b[4..8].copy_from_slice(&first.to_le_bytes());
    const SHORT: u16 = 3;
    const LONG: u16 = 4;
    let entries: [(u16, u16, u32, u32); 10] = [
        (256, LONG, 1, side),
        (257, LONG, 1, side),
        (258, SHORT, 1, 32),
        (259, SHORT, 1, 8), // deflate
        (262, SHORT, 1, 1), // black is zero
        (273, LONG, strips, offsets_at),
        (277, SHORT, 1, 1),
        (278, LONG, 1, rows_per_strip),
        (279, LONG, strips, counts_at),
        (339, SHORT, 1, 3), // IEEE float
    ];
    let ifd_len = 2 + 12 * entries.len() + 4;
    for page in 0..pages {
        push_u16(&mut b, entries.len() as u16);
        for (tag, kind, count, value) in entries {
            push_u16(&mut b, tag);
            push_u16(&mut b, kind);
            push_u32(&mut b, count);
            match (kind, count) {
                (SHORT, 1) => {
                    push_u16(&mut b, value as u16);
                    push_u16(&mut b, 0);
                }
                _ => push_u32(&mut b, value),
            }
        }
        let next = if page + 1 < pages {
            b.len() as u32 + 4
        } else {
            0
        };
        assert!(b.len() as u32 + 4 == first + ((page + 1) * ifd_len) as u32);
        push_u32(&mut b, next);
    }
    b
}

#[test]
fn a_tiff_decompression_bomb_is_refused_before_it_is_decoded() {
    let dir = tempfile::tempdir().unwrap();
    // 2000 pages of 2048^2 float32: 32 GiB from a file of about 300 KB.
    let bomb = tiff_bomb(2048, 2000);
    assert!(bomb.len() < 400_000, "{} bytes", bomb.len());
    let path = dir.path().join("bomb.tif");
    std::fs::write(&path, &bomb).unwrap();

    // Its first page alone is a valid image that decodes (the bomb is real, not a corrupt file).
    let few = dir.path().join("few.tif");
    std::fs::write(&few, tiff_bomb(64, 3)).unwrap();
    let small = read_stack(&few).unwrap();
    assert!(small.shape == [3, 64, 64] && small.values.len() == 3 * 64 * 64);

    let start = Instant::now();
    let implausible = |e: Option<IoError>| match e {
        Some(e @ IoError::ImplausibleSize { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("bomb.tif") && msg.contains("together") && msg.contains("corrupt"),
                "{msg}"
            );
        }
        other => panic!("expected ImplausibleSize, got {other:?}"),
    };
    implausible(StackReader::open(&path).err());
    implausible(read_stack(&path).err());
    assert!(matches!(
        read_intensity_stack(&path),
        Err(InputError::Io(IoError::ImplausibleSize { .. }))
    ));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );

    // `lamino score` reads both volumes whole: refused, not killed.
    let p = path.to_str().unwrap();
    refused(&lamino(&["score", p, p]), &["bomb.tif", "corrupt"]);
}

#[test]
fn text_inputs_are_read_with_a_bound() {
    let dev_zero = Path::new("/dev/zero");
    let limit = format!("{MAX_TEXT_BYTES} bytes");
    match read_angle_list(dev_zero) {
        Err(e @ InputError::Angles { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("/dev/zero") && msg.contains(&limit), "{msg}");
        }
        other => panic!("expected an angle-list error, got {other:?}"),
    }
    match Geometry::read_json(dev_zero) {
        Err(e @ GeometryError::File { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("/dev/zero") && msg.contains(&limit), "{msg}");
        }
        other => panic!("expected a geometry file error, got {other:?}"),
    }
    // A file just over the limit (sparse: no bytes written) is refused the same way.
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("angles.txt");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(MAX_TEXT_BYTES + 1)
        .unwrap();
    assert!(matches!(
        read_angle_list(&big),
        Err(InputError::Angles { reason, .. }) if reason.contains(&limit)
    ));
    // Through the command line: `--geometry` is read before any device is opened.
    let input = dir.path().join("p.npy");
    let out = dir.path().join("out");
    let (input, out) = (input.to_str().unwrap(), out.to_str().unwrap());
    let o = lamino(&[
        "reconstruct",
        input,
        "--geometry",
        "/dev/zero",
        "--dry-run",
        "--out",
        out,
    ]);
    refused(&o, &["/dev/zero", &limit]);
}

#[test]
fn simulated_sizes_are_checked_before_anything_is_allocated() {
    let spec = |size, angles, photons| ScanSpec {
        phantom: PhantomKind::Shepp,
        size,
        angles,
        tilt_deg: 30.0,
        photons,
        seed: 0,
        rotation_axis: None,
    };
    assert!(matches!(
        simulated_scan(&spec(8, 1_000_000_000_000, None)),
        Err(SimulateError::HostMemory(_))
    ));
    for (size, angles) in [(8, 1 << 62), (1 << 22, 8), (usize::MAX, 1)] {
        assert!(
            matches!(
                simulated_scan(&spec(size, angles, None)),
                Err(SimulateError::TooLarge { .. })
            ),
            "{size} {angles}"
        );
    }
    // The command line: a refusal naming the sizes, not an abort ("capacity overflow").
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("scan.h5");
    let out = out.to_str().unwrap();
    let simulate = |angles: &str, photons: Option<&str>| {
        let mut args = vec![
            "simulate",
            "--phantom",
            "shepp",
            "--size",
            "8",
            "--tilt-deg",
            "30",
            "--angles",
            angles,
            "--out",
            out,
        ];
        if let Some(p) = photons {
            args.extend(["--photons", p]);
        }
        lamino(&args)
    };
    refused(
        &simulate("1000000000000", None),
        &["1000000000000 angles", "host memory"],
    );
    refused(
        &simulate("4611686018427387904", None),
        &["4611686018427387904 angles", "overflow"],
    );
    // Photon counts: a positive f64 that is not a normal f32, an f32 overflow, and a count so
    // small that every Poisson draw is zero.
    refused(
        &simulate("8", Some("1e-300")),
        &["photon count 1e-300", "float32"],
    );
    refused(
        &simulate("8", Some("1e39")),
        &["photon count 1e39", "float32"],
    );
    refused(
        &simulate("8", Some("1e-20")),
        &["photon count 1e-20", "every simulated intensity is 0"],
    );
    assert!(!Path::new(out).exists());
    let o = simulate("8", Some("1e4"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn search_grids_are_capped_as_a_whole_before_the_scan_is_read() {
    let dir = tempfile::tempdir().unwrap();
    // The scan does not exist: the ranges are refused before it would be read.
    let missing = dir.path().join("missing.h5");
    let out = dir.path().join("try");
    let (missing, out) = (missing.to_str().unwrap(), out.to_str().unwrap());
    let search = |ranges: &[&str]| {
        let mut args = vec!["try", missing, "--out", out];
        args.extend(ranges);
        lamino(&args)
    };
    // 9412 axes x 9091 tilts: each range within the cap, the grid 85 million candidates.
    refused(
        &search(&[
            "--rotation-axis-range",
            "0:16:0.0017",
            "--tilt-range",
            "10:20:0.0011",
        ]),
        &["9412 axes x 9091 tilts", "more than 10000 candidates"],
    );
    // A step so small that the count is beyond usize: too many, not none.
    refused(
        &search(&["--rotation-axis-range", "0:1:1e-300"]),
        &["range 0.0:1.0:1e-300 has about 1.0e300 candidates, more than 10000"],
    );
    // Within the cap: the search goes on to read the scan (which is missing here).
    refused(
        &search(&[
            "--rotation-axis-range",
            "0:16:0.5",
            "--tilt-range",
            "10:20:1",
        ]),
        &["missing.h5"],
    );
}

#[test]
fn memory_options_that_overflow_64_bits_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    for (option, value) in [
        ("--max-device-memory", "17592186044416"),
        ("--max-device-memory", "17592186044417"),
        ("--max-host-memory", "18446744073709551615"),
        ("--memo-device-mib", "17592186044416"),
        ("--memo-host-mib", "17592186044417"),
    ] {
        let o = lamino(&["reconstruct", "scan.h5", option, value, "--out", out]);
        refused(&o, &[option, "more than 2^64 bytes"]);
    }
    let o = lamino(&["bench", "scale", "--plan-device-gib", "8,17179869184"]);
    refused(&o, &["--plan-device-gib", "more than 2^64 bytes"]);
    // The largest value that fits is accepted by the parser (the run then fails on the
    // missing scan, not on the option).
    let o = lamino(&[
        "reconstruct",
        "missing.h5",
        "--max-device-memory",
        "17592186044415",
        "--dry-run",
        "--out",
        out,
    ]);
    refused(&o, &["missing.h5"]);
}
