//! Fields files: a directory of `flatfield`, `darkfield` and `baseline` as float32 `.npy` and
//! `.tif`, PNG previews and `report.json`. Stacks are read and written by [`crate::io`]'s
//! [`StackReader`] and [`StackWriter`], re-exported here for the flat-field commands.

use std::path::Path;

pub use crate::io::{read_stack, Dtype, StackReader, StackWriter};
use crate::io::{write_f32_npy, OutputSet};

use super::{Fields, FitReport, FlatfieldError};

fn file_error(path: &Path, reason: impl ToString) -> FlatfieldError {
    FlatfieldError::File {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// The kind of the [`OutputSet`] of a fields directory ([`write_fields`]).
pub const FIELDS_KIND: &str = "flatfield-fit";

/// Every file [`stage_fields`] may write.
pub const FIELDS_FILES: [&str; 10] = [
    "flatfield.npy",
    "flatfield.tif",
    "flatfield.png",
    "darkfield.npy",
    "darkfield.tif",
    "darkfield.png",
    "baseline.npy",
    "baseline.tif",
    "fields.png",
    "report.json",
];

/// Writes the files of [`stage_fields`] to `dir` as one [`OutputSet`] of kind [`FIELDS_KIND`]:
/// a fields directory never holds fields of two fits.
pub fn write_fields(
    dir: &Path,
    fields: &Fields,
    report: Option<&FitReport>,
) -> Result<(), FlatfieldError> {
    let mut set = OutputSet::begin(dir, FIELDS_KIND)?;
    let staged = stage_fields(&mut set, fields, report);
    set.complete(staged)?;
    Ok(())
}

/// Stages `flatfield`, `darkfield`, `baseline` as float32 `.npy` and `.tif`, PNG previews of the
/// two fields ([`crate::plot::write_preview_png`]: enlarged, robust grey window), `fields.png`
/// (both fields with their value ranges and the baseline per frame) and `report.json` when a
/// report is given, in `set`.
pub fn stage_fields(
    set: &mut OutputSet,
    fields: &Fields,
    report: Option<&FitReport>,
) -> Result<(), FlatfieldError> {
    let (h, w) = (fields.height, fields.width);
    let images: [(&str, &[f32], usize, usize); 3] = [
        ("flatfield", &fields.flatfield, h, w),
        ("darkfield", &fields.darkfield, h, w),
        ("baseline", &fields.baseline, 1, fields.baseline.len()),
    ];
    for (name, data, rows, cols) in images {
        let npy_name = format!("{name}.npy");
        let (npy, shown) = (set.stage(&npy_name)?, set.final_path(&npy_name));
        // The baseline, and a field of one row, are written as 1-D arrays.
        let shape: &[usize] = if rows == 1 { &[cols] } else { &[rows, cols] };
        write_f32_npy(&npy, shape, data).map_err(|e| file_error(&shown, e))?;
        if cols > 0 {
            let tif_name = format!("{name}.tif");
            let tif = set.stage(&tif_name)?;
            let shown = set.final_path(&tif_name);
            let written = StackWriter::create(&tif, 1, rows, cols)
                .and_then(|mut tif| tif.write_image(data).map(|()| tif))
                .and_then(StackWriter::finish);
            written.map_err(|e| file_error(&shown, e))?;
        }
        if rows > 1 {
            let png_name = format!("{name}.png");
            let png = set.stage(&png_name)?;
            crate::plot::write_preview_png(&png, data, rows, cols, name)
                .map_err(|e| file_error(&set.final_path(&png_name), e))?;
        }
    }
    let plot = set.stage("fields.png")?;
    super::figure::write_fields_png(
        &plot,
        &fields.flatfield,
        &fields.darkfield,
        (h, w),
        &fields.baseline,
    )
    .map_err(|e| file_error(&set.final_path("fields.png"), e))?;
    if let Some(report) = report {
        let (path, shown) = (set.stage("report.json")?, set.final_path("report.json"));
        let text = serde_json::to_string_pretty(report).map_err(|e| file_error(&shown, e))?;
        std::fs::write(&path, text).map_err(|e| file_error(&shown, e))?;
    }
    Ok(())
}

/// Reads `flatfield.npy`, `darkfield.npy` and `baseline.npy` (optional) from a fields directory.
pub fn read_fields(dir: &Path) -> Result<Fields, FlatfieldError> {
    let read = |name: &str, ndim: usize| -> Result<ndarray::ArrayD<f32>, FlatfieldError> {
        let path = dir.join(name);
        let array = crate::io::read_f32_npy(&path)?;
        if array.ndim() != ndim {
            return Err(file_error(
                &path,
                format!("shape {:?}: expected {ndim} axes", array.shape()),
            ));
        }
        Ok(array)
    };
    let flat = read("flatfield.npy", 2)?;
    let dark = read("darkfield.npy", 2)?;
    if flat.shape() != dark.shape() {
        return Err(file_error(
            dir,
            format!(
                "flatfield is {:?} but darkfield is {:?}",
                flat.shape(),
                dark.shape()
            ),
        ));
    }
    // Fits without a baseline (older fields directories) have none.
    let baseline = if dir.join("baseline.npy").exists() {
        read("baseline.npy", 1)?.into_raw_vec_and_offset().0
    } else {
        Vec::new()
    };
    let (height, width) = (flat.shape()[0], flat.shape()[1]);
    // Row-major: `read_f32_npy` returns the standard layout.
    Ok(Fields {
        height,
        width,
        flatfield: flat.into_raw_vec_and_offset().0,
        darkfield: dark.into_raw_vec_and_offset().0,
        baseline,
    })
}

/// Whether a path names a TIFF file (by extension).
pub fn is_tiff_path(path: &Path) -> bool {
    matches!(
        path.extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref(),
        Some("tif" | "tiff")
    )
}
