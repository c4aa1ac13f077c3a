//! `lamino flatfield fit` / `apply` end to end on multi-page TIFF and .npy stacks, and the
//! stack readers for every supported type.

use crate::common::process::run_lamino;

use std::fs::File;
use std::path::Path;
use std::process::Output;

use lamino::flatfield::io::{read_fields, read_stack, StackReader};
use lamino::flatfield::synthetic::{generate, Synthetic};
use lamino::flatfield::{transform_cpu, Pixels, Stack, TransformParams};
use lamino::metrics::nan_max;
use ndarray::Array3;
use ndarray_npy::WriteNpyExt;
use tiff::encoder::{colortype, TiffEncoder};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A small S1-like stack: 20 images of 64x64 (upsampled to the 128 working grid).
fn small_stack() -> Stack {
    generate(&Synthetic {
        count: 20,
        height: 64,
        width: 64,
        blobs: 3,
        ..Synthetic::s1(31)
    })
    .stack
}

fn write_tiff_u16(path: &Path, stack: &Stack) {
    let mut enc = TiffEncoder::new(File::create(path).unwrap()).unwrap();
    for i in 0..stack.count() {
        let img: Vec<u16> = stack
            .image_f32(i)
            .iter()
            .map(|&v| v.clamp(0.0, 65535.0) as u16)
            .collect();
        enc.write_image::<colortype::Gray16>(stack.width() as u32, stack.height() as u32, &img)
            .unwrap();
    }
}

#[test]
fn fit_and_apply_a_tiff_stack() {
    let dir = tempfile::tempdir().unwrap();
    let stack_path = dir.path().join("stack.tif");
    let stack = small_stack();
    write_tiff_u16(&stack_path, &stack);
    let fields_dir = dir.path().join("fields");
    let out = run_lamino(&[
        "flatfield",
        "fit",
        stack_path.to_str().unwrap(),
        "--out",
        fields_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    for f in [
        "flatfield.npy",
        "darkfield.npy",
        "baseline.npy",
        "flatfield.tif",
        "darkfield.tif",
        "baseline.tif",
        "flatfield.png",
        "darkfield.png",
        "fields.png",
        "report.json",
    ] {
        assert!(fields_dir.join(f).exists(), "{f} missing");
    }
    // The fields plot: both 64 x 64 fields enlarged to 512 px side by side, and drawn content.
    let plot = image::open(fields_dir.join("fields.png"))
        .unwrap()
        .to_rgb8();
    assert!(plot.width() >= 2 * 512, "{:?}", plot.dimensions());
    let grey_levels: std::collections::HashSet<u8> = plot.pixels().map(|p| p.0[0]).collect();
    assert!(
        grey_levels.len() >= 32,
        "a near-blank plot: {} levels",
        grey_levels.len()
    );
    let fields = read_fields(&fields_dir).unwrap();
    assert_eq!((fields.height, fields.width), (64, 64));
    assert_eq!(fields.baseline.len(), 20);
    let mean = fields.flatfield.iter().map(|&v| v as f64).sum::<f64>() / 4096.0;
    assert!((mean - 1.0).abs() < 1e-4, "{mean}");

    let corrected_dir = dir.path().join("corrected");
    let out = run_lamino(&[
        "flatfield",
        "apply",
        stack_path.to_str().unwrap(),
        "--fields",
        fields_dir.to_str().unwrap(),
        "--out",
        corrected_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let corrected = read_stack(&corrected_dir.join("corrected.tif")).unwrap();
    assert_eq!(corrected.count(), 20);
    let input = read_stack(&stack_path).unwrap();
    let want = transform_cpu(&input, &fields, &TransformParams::default());
    let Pixels::F32(got) = corrected.pixels() else {
        panic!("corrected stack is not float32")
    };
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| ((a - b).abs() / b.abs().max(1.0)) as f64)
        .fold(0.0, nan_max);
    assert!(worst < 1e-6, "{worst}");
}

#[test]
fn changed_parameters_are_echoed_and_bad_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("stack.npy");
    let stack = small_stack();
    let Pixels::F32(px) = stack.pixels() else {
        unreachable!()
    };
    Array3::from_shape_vec((20, 64, 64), px.clone())
        .unwrap()
        .write_npy(File::create(&npy).unwrap())
        .unwrap();
    let fields_dir = dir.path().join("fields");
    let out = run_lamino(&[
        "flatfield",
        "fit",
        npy.to_str().unwrap(),
        "--out",
        fields_dir.to_str().unwrap(),
        "--epsilon",
        "0.2",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("epsilon = 0.2 (default 0.1)"),
        "{}",
        text(&out)
    );
    let report = std::fs::read_to_string(fields_dir.join("report.json")).unwrap();
    assert!(report.contains("epsilon = 0.2 (default 0.1)"), "{report}");
    // The rounds of the fit and of the baseline re-fit are in the report.
    let json: serde_json::Value = serde_json::from_str(&report).unwrap();
    let rounds = json["reweighting_rounds"].as_u64().unwrap();
    assert!(rounds >= 1 && rounds as usize == json["solves"].as_array().unwrap().len());
    assert!(!json["baseline_solves"].as_array().unwrap().is_empty());

    // An RGB TIFF is refused with the page and type named.
    let rgb = dir.path().join("rgb.tif");
    let mut enc = TiffEncoder::new(File::create(&rgb).unwrap()).unwrap();
    enc.write_image::<colortype::RGB8>(4, 4, &[7u8; 48])
        .unwrap();
    let out = run_lamino(&[
        "flatfield",
        "fit",
        rgb.to_str().unwrap(),
        "--out",
        "/nonexistent",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("page 0") && text(&out).contains("RGB"),
        "{}",
        text(&out)
    );
    // A bad parameter is refused before any work.
    let out = run_lamino(&[
        "flatfield",
        "fit",
        npy.to_str().unwrap(),
        "--out",
        fields_dir.to_str().unwrap(),
        "--working-size",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(text(&out).contains("working_size"), "{}", text(&out));
    // Every option is checked up front, naming its bound; nothing is written.
    let refused = dir.path().join("refused");
    let fit_with = |flag: &str, value: &str| {
        run_lamino(&[
            "flatfield",
            "fit",
            npy.to_str().unwrap(),
            "--out",
            refused.to_str().unwrap(),
            &format!("{flag}={value}"),
        ])
    };
    for (flag, value, needle) in [
        (
            "--max-reweight-iterations",
            "0",
            "max_reweight_iterations = 0: needs at least 1",
        ),
        (
            "--epsilon",
            "NaN",
            "epsilon = NaN: needs a finite value above 0",
        ),
        (
            "--lambda-darkfield",
            "-1",
            "lambda_darkfield = -1: needs a finite value of at least 0",
        ),
        ("--smoothness", "sharp", "standard or auto-data"),
    ] {
        let out = fit_with(flag, value);
        assert!(!out.status.success(), "{flag} {value}");
        assert!(
            text(&out).contains(needle),
            "{flag} {value}: {}",
            text(&out)
        );
    }
    let out = run_lamino(&[
        "flatfield",
        "apply",
        npy.to_str().unwrap(),
        "--fields",
        fields_dir.to_str().unwrap(),
        "--out",
        refused.to_str().unwrap(),
        "--flat-min",
        "0",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("flat_min = 0: needs a finite value above 0"),
        "{}",
        text(&out)
    );
    assert!(
        !refused.exists(),
        "a refused command wrote {}",
        refused.display()
    );
}

#[test]
fn every_supported_stack_type_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let values: Vec<u16> = (0..3 * 5 * 7).map(|i| (i * 601 % 65536) as u16).collect();
    let u8s: Vec<u8> = values.iter().map(|&v| (v % 256) as u8).collect();
    let f32s: Vec<f32> = values.iter().map(|&v| v as f32 * 0.5).collect();
    let cases = [
        ("u8.npy", Pixels::U8(u8s.clone())),
        ("u16.npy", Pixels::U16(values.clone())),
        ("f32.npy", Pixels::F32(f32s.clone())),
    ];
    for (name, pixels) in cases {
        let path = dir.path().join(name);
        let f = File::create(&path).unwrap();
        match &pixels {
            Pixels::U8(v) => Array3::from_shape_vec((3, 5, 7), v.clone())
                .unwrap()
                .write_npy(f),
            Pixels::U16(v) => Array3::from_shape_vec((3, 5, 7), v.clone())
                .unwrap()
                .write_npy(f),
            Pixels::F32(v) => Array3::from_shape_vec((3, 5, 7), v.clone())
                .unwrap()
                .write_npy(f),
        }
        .unwrap();
        let stack = read_stack(&path).unwrap();
        assert_eq!((stack.count(), stack.height(), stack.width()), (3, 5, 7));
        assert_eq!(stack.pixels(), &pixels, "{name}");
    }
    let tif = dir.path().join("u8.tif");
    let mut enc = TiffEncoder::new(File::create(&tif).unwrap()).unwrap();
    for i in 0..3 {
        enc.write_image::<colortype::Gray8>(7, 5, &u8s[i * 35..(i + 1) * 35])
            .unwrap();
    }
    drop(enc);
    let stack = read_stack(&tif).unwrap();
    assert_eq!(stack.pixels(), &Pixels::U8(u8s));
    let reader = StackReader::open(&tif).unwrap();
    assert_eq!((reader.count(), reader.height(), reader.width()), (3, 5, 7));
    // Pages of different sizes are refused.
    let mixed = dir.path().join("mixed.tif");
    let mut enc = TiffEncoder::new(File::create(&mixed).unwrap()).unwrap();
    enc.write_image::<colortype::Gray8>(7, 5, &[0u8; 35])
        .unwrap();
    enc.write_image::<colortype::Gray8>(5, 5, &[0u8; 25])
        .unwrap();
    drop(enc);
    let msg = StackReader::open(&mixed).unwrap_err().to_string();
    assert!(msg.contains("page 1"), "{msg}");
}
