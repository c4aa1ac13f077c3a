//! Calibrated outputs: the voxel size in every file `reconstruct` writes (ImageJ TIFF metadata,
//! `/volume` attributes, OME-Zarr `multiscales`, report.json), and OME-Zarr volumes read back
//! through `zarrs` (values, pyramid levels, metadata) and replaced safely.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::process::run_lamino;

use lamino::io::{
    ome_metadata, pyramid_shapes, read_tiff_volume, write_volume, OutputSet, PixelSize, Stack,
    ZarrOptions, ZarrPart,
};
use zarrs::array::Array;
use zarrs::filesystem::FilesystemStore;
use zarrs::group::Group;

/// Level `level` of the OME-Zarr at `path`: its shape and values.
fn read_level(path: &Path, level: usize) -> ([usize; 3], Vec<f32>) {
    let store = Arc::new(FilesystemStore::new(path).unwrap());
    let array = Array::open(store, &format!("/{level}")).unwrap();
    let shape: Vec<usize> = array.shape().iter().map(|&n| n as usize).collect();
    let values: Vec<f32> = array.retrieve_array_subset(&array.subset_all()).unwrap();
    ([shape[0], shape[1], shape[2]], values)
}

/// The `ome` attributes of the group at `path`.
fn ome(path: &Path) -> serde_json::Value {
    let store = Arc::new(FilesystemStore::new(path).unwrap());
    let group = Group::open(store, "/").unwrap();
    group.attributes()["ome"].clone()
}

/// The 2 x 2 x 2 block means of `values` (`shape`), blocks cut by an odd edge averaging the
/// voxels they have: what level k + 1 of the pyramid holds of level k.
fn block_means(values: &[f32], [n0, n1, n2]: [usize; 3]) -> Vec<f32> {
    let m = [n0.div_ceil(2), n1.div_ceil(2), n2.div_ceil(2)];
    let mut out = Vec::with_capacity(m[0] * m[1] * m[2]);
    for z in 0..m[0] {
        for y in 0..m[1] {
            for x in 0..m[2] {
                let (mut sum, mut count) = (0.0f64, 0.0f64);
                for zz in 2 * z..(2 * z + 2).min(n0) {
                    for yy in 2 * y..(2 * y + 2).min(n1) {
                        for xx in 2 * x..(2 * x + 2).min(n2) {
                            sum += f64::from(values[(zz * n1 + yy) * n2 + xx]);
                            count += 1.0;
                        }
                    }
                }
                out.push((sum / count) as f32);
            }
        }
    }
    out
}

fn volume(shape: [usize; 3]) -> Stack {
    let n = shape.iter().product::<usize>();
    Stack {
        shape,
        values: (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.01 - 3.0)
            .collect(),
    }
}

#[test]
fn a_zarr_pyramid_reads_back_with_its_values_block_means_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.zarr");
    // Odd sides and chunks that do not divide them: edge chunks and edge blocks on every level.
    let v = volume([13, 10, 9]);
    let options = ZarrOptions {
        chunk: [4, 4, 8],
        min_side: 2,
        gzip_level: 4,
    };
    let voxel = PixelSize::micrometers(0.65).unwrap();
    let mut writer = ZarrPart::create_whole(&path, v.shape, Some(voxel), options).unwrap();
    for slice in v.values.chunks(10 * 9) {
        writer.push_image(slice).unwrap();
    }
    writer.finish_alone().unwrap();

    let shapes = pyramid_shapes(v.shape, 2);
    assert!(shapes == [[13, 10, 9], [7, 5, 5], [4, 3, 3], [2, 2, 2]]);
    let (shape, values) = read_level(&path, 0);
    assert!(
        shape == v.shape && values == v.values,
        "level 0 is the volume, bit for bit"
    );
    let mut expected = v.values.clone();
    for (k, pair) in shapes.windows(2).enumerate() {
        expected = block_means(&expected, pair[0]);
        let (shape, values) = read_level(&path, k + 1);
        assert!(shape == pair[1], "level {}: {shape:?}", k + 1);
        let worst = values
            .iter()
            .zip(&expected)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        // Means of means in f32 against f64 means: a few ulps of values of order 3.
        assert!(worst <= 1e-5, "level {}: {worst}", k + 1);
    }

    let meta = ome(&path);
    assert!(meta == ome_metadata("v", shapes.len(), Some(voxel)));
    assert!(meta["version"] == "0.5");
    let multiscale = &meta["multiscales"][0];
    for (axis, name) in multiscale["axes"]
        .as_array()
        .unwrap()
        .iter()
        .zip(["z", "y", "x"])
    {
        assert!(axis["name"] == name && axis["type"] == "space" && axis["unit"] == "micrometer");
    }
    let datasets = multiscale["datasets"].as_array().unwrap();
    assert!(datasets.len() == 4);
    for (k, d) in datasets.iter().enumerate() {
        let t = d["coordinateTransformations"].as_array().unwrap();
        let factor = (1 << k) as f64;
        assert!(d["path"] == k.to_string().as_str());
        assert!(t[0]["type"] == "scale" && t[0]["scale"][0].as_f64() == Some(0.65 * factor));
        let shift = (factor - 1.0) / 2.0 * 0.65;
        assert!(t[1]["type"] == "translation" && t[1]["translation"][2].as_f64() == Some(shift));
    }
}

#[test]
fn a_zarr_directory_replaces_the_previous_one_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.zarr");
    let first = volume([3, 4, 5]);
    write_volume(&path, &first).unwrap();
    assert!(read_level(&path, 0).1 == first.values);
    // A set that fails before its commit leaves the earlier volume as it was.
    let mut failing = OutputSet::begin(dir.path(), "t").unwrap();
    let staged = failing.stage("v.zarr").unwrap();
    let mut writer =
        ZarrPart::create_whole(&staged, [3, 4, 5], None, ZarrOptions::for_shape([3, 4, 5]))
            .unwrap();
    writer.push_image(&[9.0; 20]).unwrap();
    let err = failing.complete(writer.finish_alone()).unwrap_err();
    assert!(err.to_string().contains("1 of the 3 slices"), "{err}");
    assert!(read_level(&path, 0).1 == first.values);
    // A complete one replaces it; only the new volume is left.
    let second = volume([2, 3, 3]);
    write_volume(&path, &second).unwrap();
    assert!(read_level(&path, 0) == ([2, 3, 3], second.values.clone()));
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(entries.len() == 1, "{entries:?}");
    // A directory that is not a Zarr store is the user's: refused, untouched.
    let user = dir.path().join("mine.zarr");
    std::fs::create_dir(&user).unwrap();
    std::fs::write(user.join("notes.txt"), "keep").unwrap();
    let err = write_volume(&user, &second).unwrap_err().to_string();
    assert!(
        err.contains("a directory of that name is in the way"),
        "{err}"
    );
    assert!(std::fs::read(user.join("notes.txt")).unwrap() == b"keep");
}

/// The attribute `name` of `/volume` in the HDF5 file `path`, as f64 values or a string.
fn h5_attr(path: &Path, name: &str) -> hdf5_reader::Attribute {
    let file = hdf5_reader::Hdf5File::open(path).unwrap();
    let volume = file.dataset("volume").unwrap();
    volume.attribute(name).unwrap()
}

#[test]
fn reconstruct_writes_the_voxel_size_into_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let scan = dir.path().join("scan.h5");
    common::simulate_scan(&scan, "chip", 32);
    let out = dir.path().join("out");
    let args = [
        "reconstruct",
        scan.to_str().unwrap(),
        // tomocupy's exponent: 2 x 2 pixels.
        "--binning",
        "1",
        "--pixel-size",
        "0.65",
        "--format",
        "tiff,h5,zarr",
        "--iterations",
        "2",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    let o = run_lamino(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let voxel = 1.3;

    // report.json: the run and the voxel size.
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert!(report["input"] == scan.to_str().unwrap());
    assert!(report["command_line"][1] == "reconstruct");
    assert!(report["lamino_version"] == env!("CARGO_PKG_VERSION"));
    let started = report["started"].as_str().unwrap();
    assert!(started.len() == 20 && started.ends_with('Z') && started.as_bytes()[10] == b'T');
    assert!(report["voxel_size"]["value"].as_f64() == Some(voxel));
    assert!(report["voxel_size"]["unit"] == "micrometer");
    assert!(
        report["reconstruction"]["preprocessing"]["pixel_size"]["value"].as_f64() == Some(0.65)
    );

    // The three volumes hold the same values.
    let tif = read_tiff_volume(&out.join("recon.tif")).unwrap();
    assert!(tif.shape == [16, 16, 16]);
    let (shape, values) = read_level(&out.join("recon.zarr"), 0);
    assert!(shape == tif.shape && values == tif.values);
    let h5 = lamino::io::read_volume_h5(&out.join("recon.h5")).unwrap();
    assert!(h5 == tif);

    // recon.tif: ImageJ's description on the first page, resolution tags (pixels per micron).
    let mut decoder =
        tiff::decoder::Decoder::new(std::fs::File::open(out.join("recon.tif")).unwrap()).unwrap();
    let description = decoder
        .get_tag_ascii_string(tiff::tags::Tag::ImageDescription)
        .unwrap();
    assert!(
        description.starts_with("ImageJ=1.11a\nimages=16\nslices=16\n"),
        "{description}"
    );
    assert!(
        description.contains("\nunit=micron\nspacing=1.3\n"),
        "{description}"
    );
    let x = decoder
        .get_tag_u32_vec(tiff::tags::Tag::XResolution)
        .unwrap();
    assert!(
        (f64::from(x[0]) / f64::from(x[1]) - 1.0 / voxel).abs() <= 1e-6,
        "{x:?}"
    );

    // recon.h5: /volume says its axes, unit and voxel size.
    let h5 = out.join("recon.h5");
    assert!(h5_attr(&h5, "axes").read_string().unwrap() == "zyx");
    assert!(h5_attr(&h5, "units").read_string().unwrap() == "micrometer");
    assert!(h5_attr(&h5, "voxel_size").read_1d::<f64>().unwrap() == [voxel; 3]);
    assert!(h5_attr(&h5, "element_size_um").read_1d::<f64>().unwrap() == [voxel; 3]);

    // recon.zarr: one level (16^3 is below the pyramid's floor), scaled in micrometres.
    let meta = ome(&out.join("recon.zarr"));
    assert!(meta == ome_metadata("recon", 1, PixelSize::micrometers(voxel).ok()));

    // Without a pixel size the outputs say the voxels are uncalibrated, and only the formats
    // asked for are written (the previous run's recon.tif and recon.zarr are removed).
    let mut args = args.to_vec();
    args.drain(4..8);
    args.extend(["--format", "h5"]);
    let o = run_lamino(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!out.join("recon.tif").exists() && !out.join("recon.zarr").exists());
    assert!(h5_attr(&h5, "units").read_string().unwrap() == "pixel");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert!(report["voxel_size"].is_null());
}
