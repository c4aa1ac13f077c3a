//! Inputs as the field's tools write them (the fixtures of `assets/files`, written by tifffile and
//! numpy with `assets/files/make_fixtures.py`): folders of single-image TIFFs read as the
//! multi-page stack of the same frames, in natural name order; `.npy` intensities and line
//! integrals of every type numpy saves them in, converted once to f32; the refusals, each naming
//! the file at fault.

use std::fs::File;
use std::path::{Path, PathBuf};

use lamino::io::{read_complex_npy, read_stack, IoError, Pixels, StackReader};
use lamino::recon::input::{load_projections, InputError, ProjectionInput, Shading};
use ndarray_npy::WriteNpyExt;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets/files")
        .join(name)
}

/// The fixture's projections, `100 + (37 k) % 1000` at flat index k of (12, 16, 16).
fn data_values() -> Vec<u16> {
    (0..12 * 16 * 16)
        .map(|k| (100 + (37 * k) % 1000) as u16)
        .collect()
}

/// The line integrals of `projections` normalised with the fixture's flats and darks as stacks
/// or as folders, at a 30 degree tilt.
fn line_integrals(projections: PathBuf, fields_as_folders: bool) -> Result<Vec<f32>, InputError> {
    let field = |name: &str| match fields_as_folders {
        true => fixture(&format!("{name}_folder")),
        false => fixture(&format!("{name}_stack.tif")),
    };
    let input = ProjectionInput::TiffStack {
        path: projections,
        angles: fixture("angles.txt"),
        theta_units: None,
        tilt_deg: 30.0,
        shading: Shading::Fields {
            flats: field("flats"),
            darks: Some(field("darks")),
        },
    };
    Ok(load_projections(&input)?.projections.values().to_vec())
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn a_folder_of_single_tiffs_is_its_multipage_stack_in_natural_order() {
    let folder = read_stack(&fixture("proj_folder")).unwrap();
    let stack = read_stack(&fixture("proj_stack.tif")).unwrap();
    assert_eq!(folder.shape, [12, 16, 16]);
    assert!(folder == stack);
    // proj_0 .. proj_11 in natural order (proj_2 before proj_10): the frames in the formula's
    // order; name order would put proj_10 second. The notes and the `._proj_3.tif` beside them
    // are skipped.
    let Pixels::U16(values) = folder.pixels() else {
        panic!("a uint16 folder read as {:?}", folder.pixels().dtype())
    };
    assert!(*values == data_values());
    let reader = StackReader::open(&fixture("proj_folder")).unwrap();
    assert!(reader.is_tiff() && reader.count() == 12);
}

#[test]
fn folders_give_the_projections_of_stacks_bit_for_bit() {
    let from_stacks = line_integrals(fixture("proj_stack.tif"), false).unwrap();
    let from_folders = line_integrals(fixture("proj_folder"), true).unwrap();
    assert_eq!(from_stacks.len(), 12 * 16 * 16);
    assert!(bits(&from_folders) == bits(&from_stacks));
}

#[test]
fn npy_intensities_of_every_type_give_the_stacks_projections_bit_for_bit() {
    let want = bits(&line_integrals(fixture("proj_stack.tif"), false).unwrap());
    for name in ["f64", "f64_be", "f16", "f16_be", "i16", "u32"] {
        let got = line_integrals(fixture(&format!("proj_{name}.npy")), false)
            .unwrap_or_else(|e| panic!("proj_{name}.npy: {e}"));
        assert!(bits(&got) == want, "proj_{name}.npy");
    }
    // A column-major stack cannot be read image by image: refused, saying how to save it.
    let err = read_stack(&fixture("proj_f64_fortran.npy")).unwrap_err();
    assert!(
        err.to_string().contains("np.ascontiguousarray") && err.to_string().contains("Fortran"),
        "{err}"
    );
}

#[test]
fn float64_and_float16_line_integrals_are_numpys_float32_conversion() {
    let re = |name: &str| -> Vec<u32> {
        let a = read_complex_npy(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(a.shape, vec![3, 4, 5], "{name}");
        a.data.iter().map(|c| c.re.to_bits()).collect()
    };
    let f64_ref = re("line_f64_as_f32.npy");
    let f16_ref = re("line_f16_as_f32.npy");
    // The fixture's values are not exact in float32 or float16 (the two references differ), and
    // include values below both types' normal ranges.
    assert!(f64_ref != f16_ref);
    for name in ["line_f64.npy", "line_f64_be.npy", "line_f64_fortran.npy"] {
        assert!(re(name) == f64_ref, "{name}");
    }
    for name in ["line_f16.npy", "line_f16_be.npy"] {
        assert!(re(name) == f16_ref, "{name}");
    }
}

/// The folder or file an error names, and its message.
fn folder_error(name: &str) -> (PathBuf, String) {
    match StackReader::open(&fixture(name)).unwrap_err() {
        IoError::FolderFrame {
            folder,
            file,
            reason,
        } => {
            assert_eq!(folder, fixture(name));
            (file, reason)
        }
        other => panic!("{name}: {other}"),
    }
}

#[test]
fn folders_that_are_not_one_stack_are_refused_naming_the_file() {
    let (file, reason) = folder_error("mixed_sizes");
    assert_eq!(file, fixture("mixed_sizes/a_10.tif"));
    assert!(
        reason.contains("16x12") && reason.contains("a_1.tif"),
        "{reason}"
    );
    let (file, reason) = folder_error("mixed_types");
    assert_eq!(file, fixture("mixed_types/b_2.tif"));
    assert!(reason.contains("F32") && reason.contains("U16"), "{reason}");
    let (file, reason) = folder_error("multipage_in_folder");
    assert_eq!(file, fixture("multipage_in_folder/c_2.tif"));
    assert!(reason.contains("more than one page"), "{reason}");

    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("angles.txt"), "0\n").unwrap();
    let err = StackReader::open(empty.path()).unwrap_err();
    assert!(
        matches!(&err, IoError::Read { path, .. } if path == empty.path())
            && err.to_string().contains("no .tif"),
        "{err}"
    );
}

/// A `.tif` entry of a folder that cannot be read (a dangling link, a link loop) is refused by
/// name, as a `.tif` that is not a TIFF is, not skipped.
#[cfg(unix)]
#[test]
fn unreadable_tif_entries_of_a_folder_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["proj_0.tif", "proj_1.tif"] {
        std::fs::copy(fixture("proj_folder").join(name), dir.path().join(name)).unwrap();
    }
    let dangling = dir.path().join("proj_2.tif");
    std::os::unix::fs::symlink(dir.path().join("gone.tif"), &dangling).unwrap();
    let looping = dir.path().join("proj_3.tif");
    std::os::unix::fs::symlink(&looping, &looping).unwrap();
    for (link, other) in [(&dangling, &looping), (&looping, &dangling)] {
        std::fs::rename(other, dir.path().join("aside")).unwrap();
        match StackReader::open(dir.path()).unwrap_err() {
            IoError::FolderFrame { file, reason, .. } => {
                assert_eq!(&file, link);
                assert!(reason.contains("cannot be read"), "{reason}");
            }
            other => panic!("{link:?}: {other}"),
        }
        std::fs::rename(dir.path().join("aside"), other).unwrap();
    }
}

#[test]
fn float64_values_beyond_float32_are_refused_naming_their_index_and_nan_stays_nan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.npy");
    let mut values = ndarray::Array3::<f64>::from_elem((2, 3, 4), 1000.0);
    values[[1, 0, 2]] = -1e300;
    values.write_npy(File::create(&path).unwrap()).unwrap();
    match read_stack(&path).unwrap_err() {
        IoError::OutOfRange {
            path: p,
            index,
            value,
        } => {
            assert!(
                p == path && index == 14 && value == -1e300,
                "{p:?} {index} {value}"
            );
        }
        other => panic!("{other}"),
    }
    // The line-integral route converts the same way.
    let err = read_complex_npy(&path).unwrap_err();
    assert!(err.to_string().contains("value 14 is -1e300"), "{err}");

    // NaN is not out of range: it reads as NaN, and normalisation's finite-value check refuses
    // it with its index, as for a float32 file.
    values[[1, 0, 2]] = 1000.0;
    values[[0, 0, 2]] = f64::NAN;
    values.write_npy(File::create(&path).unwrap()).unwrap();
    let Pixels::F32(read) = read_stack(&path).unwrap().values else {
        panic!("float64 is read as f32")
    };
    assert!(read[2].is_nan() && read[1] == 1000.0 && read[14] == 1000.0);
    let angles = dir.path().join("angles.txt");
    std::fs::write(&angles, "0\n90\n").unwrap();
    let flats = dir.path().join("flats.npy");
    ndarray::Array3::<f64>::from_elem((1, 3, 4), 2000.0)
        .write_npy(File::create(&flats).unwrap())
        .unwrap();
    let input = ProjectionInput::TiffStack {
        path: path.clone(),
        angles,
        theta_units: None,
        tilt_deg: 30.0,
        shading: Shading::Fields { flats, darks: None },
    };
    let err = load_projections(&input).unwrap_err();
    assert!(err.to_string().contains("data value 2 is NaN"), "{err}");
}

/// `lamino reconstruct` of the fixture's projections, flats and darks given as `kind` ("folder"
/// or "stack"), one iteration; returns the volume's bits.
fn reconstruct(dir: &Path, kind: &str) -> Vec<u32> {
    let arg = |name: &str| match kind {
        "folder" => fixture(&format!("{name}_folder")),
        _ => fixture(&format!("{name}_stack.tif")),
    };
    let out = dir.join(kind);
    let o = crate::common::process::lamino_command()
        .arg("--allow-software-gpu")
        .arg("reconstruct")
        .arg(arg("proj"))
        .arg("--angles")
        .arg(fixture("angles.txt"))
        .args([
            "--tilt-deg",
            "30",
            "--iterations",
            "1",
            "--quiet",
            "--flats",
        ])
        .arg(arg("flats"))
        .arg("--darks")
        .arg(arg("darks"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{kind}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    bits(
        &lamino::io::read_tiff_volume(&out.join("recon.tif"))
            .unwrap()
            .values,
    )
}

#[test]
fn reconstruct_takes_folders_for_projections_flats_and_darks() {
    let dir = tempfile::tempdir().unwrap();
    assert!(reconstruct(dir.path(), "folder") == reconstruct(dir.path(), "stack"));
}
