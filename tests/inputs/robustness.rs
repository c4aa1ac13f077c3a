//! Every file reader against damaged input: a small valid file truncated at every offset and with
//! seeded byte flips (and 32-bit words set to huge values, to forge sizes) must end in a typed
//! error or a valid result: never a panic, an abort or a hang. Nothing is caught here: a panic
//! fails the test, and a case that runs past `HANG_LIMIT` fails it by name.
//!
//! Readers covered: `.npy` (complex64, float32; stacks of u8, u16, f32, f64), multi-page TIFF
//! (stacks of u8, u16, f32, uncompressed and compressed; float32 volumes), geometry JSON, the angle
//! list and flat-field fields directories. The example assets (`assets/examples`) are the seeds of
//! the geometry and angle-list cases, so they are parsed by every run.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lamino::flatfield::io::{read_fields, write_fields};
use lamino::flatfield::Fields;
use lamino::geometry::Geometry;
use lamino::io::{read_complex_npy, read_stack, read_tiff_volume, Pixels, Stack, StackReader};
use lamino::random::SplitMix64;
use lamino::recon::input::read_angle_list;
use ndarray_npy::WriteNpyExt;
use tiff::encoder::{colortype, Compression, DeflateLevel, TiffEncoder};

/// Far above what one case takes (well under a millisecond to a few): only a hang reaches it.
const HANG_LIMIT: Duration = Duration::from_secs(20);
/// Seeded damaged copies per valid file, besides the truncations.
const FLIPS: usize = 1000;

/// Runs every damaged copy of `valid` through `read` (which writes nothing and checks what it
/// gets), in a worker thread watched for hangs; a panic in the worker is re-raised here.
fn damage_and_read(
    name: &str,
    valid: Vec<u8>,
    file_name: &'static str,
    seed: u64,
    read: impl Fn(&Path) + Send + 'static,
) {
    let start = Instant::now();
    let cases = 1 + valid.len() + FLIPS;
    let (tx, rx) = mpsc::channel::<String>();
    let worker = std::thread::spawn(move || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file_name);
        let run = |label: String, bytes: &[u8]| {
            // A new file each time: rewriting one in place makes ext4 flush it on every close.
            let _ = std::fs::remove_file(&path);
            std::fs::write(&path, bytes).unwrap();
            tx.send(label).unwrap();
            read(&path);
        };
        run("the valid file".into(), &valid);
        for len in 0..valid.len() {
            run(format!("truncated to {len} bytes"), &valid[..len]);
        }
        let mut rng = SplitMix64::new(seed);
        let mut below = |n: usize| (rng.next_u64() % n as u64) as usize;
        for case in 0..FLIPS {
            let mut bytes = valid.clone();
            if case % 4 == 3 {
                // A forged size: a 32-bit word of 0xffffffff, 0x80000000 or 0x40000000.
                let at = below(valid.len() - 3);
                let word = [u32::MAX, 1 << 31, 1 << 30][below(3)];
                bytes[at..at + 4].copy_from_slice(&word.to_le_bytes());
            } else {
                for _ in 0..1 + below(3) {
                    let at = below(valid.len());
                    bytes[at] ^= 1 + below(255) as u8;
                }
            }
            run(format!("damaged copy {case} (seed {seed})"), &bytes);
        }
    });
    let mut last = String::from("start");
    loop {
        match rx.recv_timeout(HANG_LIMIT) {
            Ok(label) => last = label,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("{name}: {last} ran longer than {HANG_LIMIT:?} (a hang)")
            }
        }
    }
    if let Err(panic) = worker.join() {
        eprintln!("{name}: the reader panicked on {last}");
        std::panic::resume_unwind(panic);
    }
    eprintln!(
        "{name}: {cases} cases in {:.2} s",
        start.elapsed().as_secs_f64()
    );
}

/// What `read` returns for a file holding `bytes` (the undamaged case, checked exactly).
fn read_back<T>(bytes: &[u8], file_name: &str, read: impl Fn(&Path) -> T) -> T {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file_name);
    std::fs::write(&path, bytes).unwrap();
    read(&path)
}

fn npy_bytes(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut bytes = Vec::new();
    write(&mut bytes);
    bytes
}

/// A valid stack read back is whole: its values fill its shape.
fn check_stack(stack: &Stack<Pixels>) {
    let [n, h, w] = stack.shape;
    assert!(h > 0 && w > 0, "{:?}", stack.shape);
    assert_eq!(stack.values.len(), n * h * w, "{:?}", stack.shape);
}

/// Reads the stack both at once and image by image.
fn read_stack_both_ways(path: &Path) {
    if let Ok(stack) = read_stack(path) {
        check_stack(&stack);
    }
    if let Ok(mut reader) = StackReader::open(path) {
        let px = reader.height() * reader.width();
        while let Some(image) = reader.next_image() {
            match image {
                Ok(pixels) => assert_eq!(pixels.len(), px),
                Err(_) => break,
            }
        }
    }
}

#[test]
fn npy_readers_survive_truncation_and_flips() {
    let values = SplitMix64::new(1).complex_uniform(24);
    let complex = npy_bytes(|b| {
        ndarray::Array3::from_shape_vec((2, 3, 4), values.clone())
            .unwrap()
            .write_npy(b)
            .unwrap()
    });
    let back = read_back(&complex, "c.npy", |p| read_complex_npy(p).unwrap());
    assert_eq!((back.shape, back.data), (vec![2, 3, 4], values));
    let float = npy_bytes(|b| {
        ndarray::Array3::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 12 + j * 4 + k) as f32)
            .write_npy(b)
            .unwrap()
    });
    let read_complex = |path: &Path| {
        if let Ok(a) = read_complex_npy(path) {
            assert_eq!(a.data.len(), a.shape.iter().product::<usize>());
        }
    };
    damage_and_read("complex64 .npy", complex, "c.npy", 11, read_complex);
    damage_and_read("float32 .npy", float, "f.npy", 12, read_complex);
    let shape = (3, 4, 5);
    let stacks = [
        npy_bytes(|b| {
            ndarray::Array3::from_shape_fn(shape, |(i, j, k)| (i * 20 + j * 5 + k) as u8)
                .write_npy(b)
                .unwrap()
        }),
        npy_bytes(|b| {
            ndarray::Array3::from_shape_fn(shape, |(i, j, k)| (i * 2000 + j * 5 + k) as u16)
                .write_npy(b)
                .unwrap()
        }),
        npy_bytes(|b| {
            ndarray::Array3::from_shape_fn(shape, |(i, j, k)| (i + j + k) as f32 * 0.5)
                .write_npy(b)
                .unwrap()
        }),
        npy_bytes(|b| {
            ndarray::Array3::from_shape_fn(shape, |(i, j, k)| (i + j + k) as f64 * 0.25)
                .write_npy(b)
                .unwrap()
        }),
    ];
    for (i, (bytes, name)) in stacks
        .into_iter()
        .zip(["u8", "u16", "f32", "f64"])
        .enumerate()
    {
        damage_and_read(
            &format!("{name} .npy stack"),
            bytes,
            "s.npy",
            20 + i as u64,
            read_stack_both_ways,
        );
    }
}

/// A three-page 5 x 7 TIFF of `C`, written by the tiff crate as the tools in the field do.
fn tiff_bytes<C>(values: &[C::Inner], compression: Compression) -> Vec<u8>
where
    C: colortype::ColorType,
    [C::Inner]: tiff::encoder::TiffValue,
{
    let mut bytes = std::io::Cursor::new(Vec::new());
    {
        let mut enc = TiffEncoder::new(&mut bytes)
            .unwrap()
            .with_compression(compression);
        for page in values.chunks(35) {
            enc.write_image::<C>(7, 5, page).unwrap();
        }
    }
    bytes.into_inner()
}

#[test]
fn tiff_readers_survive_truncation_and_flips() {
    let u8s: Vec<u8> = (0..105).map(|i| (i * 7 % 256) as u8).collect();
    let u16s: Vec<u16> = (0..105).map(|i| (i * 601 % 65536) as u16).collect();
    let f32s: Vec<f32> = (0..105).map(|i| i as f32 * 0.5 - 3.0).collect();
    let plain = Compression::Uncompressed;
    let cases = [
        ("u8 TIFF stack", tiff_bytes::<colortype::Gray8>(&u8s, plain)),
        (
            "u16 TIFF stack",
            tiff_bytes::<colortype::Gray16>(&u16s, plain),
        ),
        (
            "f32 TIFF stack",
            tiff_bytes::<colortype::Gray32Float>(&f32s, plain),
        ),
        (
            "Deflate u16 TIFF stack",
            tiff_bytes::<colortype::Gray16>(&u16s, Compression::Deflate(DeflateLevel::Balanced)),
        ),
        (
            "LZW f32 TIFF stack",
            tiff_bytes::<colortype::Gray32Float>(&f32s, Compression::Lzw),
        ),
        (
            "PackBits u8 TIFF stack",
            tiff_bytes::<colortype::Gray8>(&u8s, Compression::Packbits),
        ),
    ];
    let expected = [
        Pixels::U8(u8s.clone()),
        Pixels::U16(u16s.clone()),
        Pixels::F32(f32s.clone()),
        Pixels::U16(u16s),
        Pixels::F32(f32s.clone()),
        Pixels::U8(u8s),
    ];
    for ((name, bytes), pixels) in cases.iter().zip(expected) {
        let back = read_back(bytes, "s.tif", |p| read_stack(p).unwrap());
        assert_eq!((back.shape, back.values), ([3, 5, 7], pixels), "{name}");
    }
    for (i, (name, bytes)) in cases.into_iter().enumerate() {
        damage_and_read(name, bytes, "s.tif", 30 + i as u64, read_stack_both_ways);
    }
    let volume = tiff_bytes::<colortype::Gray32Float>(&f32s, plain);
    let back = read_back(&volume, "v.tif", |p| read_tiff_volume(p).unwrap());
    assert_eq!((back.shape, back.values), ([3, 5, 7], f32s.clone()));
    damage_and_read("f32 TIFF volume", volume, "v.tif", 40, |path| {
        if let Ok(v) = read_tiff_volume(path) {
            assert_eq!(v.values.len(), v.shape.iter().product::<usize>());
        }
    });
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets/examples")
        .join(name)
}

/// The README's example files parse, and describe the same scan: the angle list (degrees) is the
/// geometry's theta (radians).
#[test]
fn the_example_geometry_and_angle_list_parse() {
    let geometry = Geometry::read_json(&example("geometry.json")).unwrap();
    let angles = read_angle_list(&example("angles.txt")).unwrap();
    assert_eq!(angles.len(), geometry.ntheta());
    for (a, t) in angles.iter().zip(&geometry.theta) {
        assert!((a - t).abs() <= 1e-12, "{a} vs {t}");
    }
}

#[test]
fn geometry_and_angle_list_readers_survive_truncation_and_flips() {
    damage_and_read(
        "geometry JSON",
        std::fs::read(example("geometry.json")).unwrap(),
        "g.json",
        50,
        |path| {
            if let Ok(g) = Geometry::read_json(path) {
                g.validate().unwrap();
            }
        },
    );
    damage_and_read(
        "angle list",
        std::fs::read(example("angles.txt")).unwrap(),
        "a.txt",
        51,
        |path| {
            if let Ok(angles) = read_angle_list(path) {
                assert!(angles.iter().all(|a| a.is_finite()));
            }
        },
    );
}

#[test]
fn fields_reader_survives_truncation_and_flips() {
    let (h, w) = (4, 6);
    let fields = Fields {
        height: h,
        width: w,
        flatfield: (0..h * w).map(|i| 0.5 + i as f32 / 24.0).collect(),
        darkfield: (0..h * w).map(|i| i as f32).collect(),
        baseline: vec![100.0, 120.0, 90.0],
    };
    let valid = tempfile::tempdir().unwrap();
    write_fields(valid.path(), &fields, None).unwrap();
    assert_eq!(read_fields(valid.path()).unwrap(), fields);
    // Damage one file of the directory at a time; the other two stay valid.
    for (i, name) in ["flatfield.npy", "darkfield.npy", "baseline.npy"]
        .into_iter()
        .enumerate()
    {
        let others: Vec<(&str, Vec<u8>)> = ["flatfield.npy", "darkfield.npy", "baseline.npy"]
            .into_iter()
            .filter(|n| *n != name)
            .map(|n| (n, std::fs::read(valid.path().join(n)).unwrap()))
            .collect();
        damage_and_read(
            &format!("fields: {name}"),
            std::fs::read(valid.path().join(name)).unwrap(),
            name,
            60 + i as u64,
            move |path| {
                let dir = path.parent().unwrap();
                for (n, bytes) in &others {
                    if !dir.join(n).exists() {
                        std::fs::write(dir.join(n), bytes).unwrap();
                    }
                }
                if let Ok(f) = read_fields(dir) {
                    assert_eq!(f.flatfield.len(), f.height * f.width);
                    assert_eq!(f.darkfield.len(), f.height * f.width);
                }
            },
        );
    }
}

/// The case, in-process: a 100-byte TIFF whose header claims 2^30 x 2^30 float32 pixels
/// is refused by every TIFF reader from its length alone.
#[test]
fn a_tiff_claiming_2_to_the_60_pixels_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.tif");
    std::fs::write(&path, common::huge_tiff()).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 100);
    for err in [
        StackReader::open(&path).unwrap_err(),
        read_stack(&path).unwrap_err(),
        read_tiff_volume(&path).unwrap_err(),
    ] {
        let msg = err.to_string();
        assert!(
            msg.contains("[1073741824, 1073741824]") && msg.contains("file of 100 bytes"),
            "{msg}"
        );
    }
}
