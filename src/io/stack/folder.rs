//! Folders of single-image TIFFs, one image per file in natural name order, as detector
//! software writes them.

use std::path::{Path, PathBuf};

use super::super::IoError;
use super::tiff_pages::{check_tiff_page, open_tiff_decoder, TiffPage};
use super::{Source, StackReader};

/// The `.tif` / `.tiff` files of `dir` (any case; not those whose name starts with `.`, such as
/// the `._name.tif` files macOS leaves) in natural order ([`natural_cmp`]); other files and
/// sub-folders are ignored, a `.tif` entry that is not a readable file is an error.
fn tiff_files_in(dir: &Path) -> Result<Vec<PathBuf>, IoError> {
    let read = |e: std::io::Error| IoError::Read {
        path: dir.into(),
        reason: format!("listing the folder: {e}"),
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let path = entry.map_err(read)?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if name.starts_with('.') || !matches!(ext.to_ascii_lowercase().as_str(), "tif" | "tiff") {
            continue;
        }
        // A `.tif` entry that cannot be read (a dangling or looping link, no permission, a
        // device) is a frame missing from the stack: refused by name, never skipped.
        let unreadable = |reason: String| IoError::FolderFrame {
            folder: dir.into(),
            file: path.clone(),
            reason,
        };
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => files.push(path),
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(unreadable("not a regular file".into())),
            Err(e) => return Err(unreadable(format!("cannot be read: {e}"))),
        }
    }
    files.sort_by(|a, b| natural_cmp(&a.to_string_lossy(), &b.to_string_lossy()));
    if files.is_empty() {
        return Err(IoError::Read {
            path: dir.into(),
            reason: "the folder holds no .tif or .tiff file".into(),
        });
    }
    Ok(files)
}

/// Natural order of names: runs of digits compare as numbers (`proj_2` before `proj_10`; with
/// equal values the shorter run, `proj_2` before `proj_002`), everything else character by
/// character, as file managers sort and as detector software numbers its frames.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (mut a, mut b) = (a, b);
    loop {
        let (Some(ca), Some(cb)) = (a.chars().next(), b.chars().next()) else {
            return a.len().cmp(&b.len());
        };
        if ca.is_ascii_digit() && cb.is_ascii_digit() {
            let run = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            let (ra, rb) = (run(a), run(b));
            let (da, db) = (&a[..ra], &b[..rb]);
            let (ta, tb) = (da.trim_start_matches('0'), db.trim_start_matches('0'));
            let order = ta
                .len()
                .cmp(&tb.len())
                .then_with(|| ta.cmp(tb))
                .then_with(|| ra.cmp(&rb));
            if order != Ordering::Equal {
                return order;
            }
            (a, b) = (&a[ra..], &b[rb..]);
        } else {
            if ca != cb {
                return ca.cmp(&cb);
            }
            (a, b) = (&a[ca.len_utf8()..], &b[cb.len_utf8()..]);
        }
    }
}

impl StackReader {
    /// Opens a folder of TIFF files of one image each, a stack of its files in natural order
    /// ([`natural_cmp`]): every file's header is checked here (one page, the first file's size
    /// and sample type, each size against the file's length); the pixels are read later, one
    /// file per image.
    pub fn open_folder(dir: &Path) -> Result<Self, IoError> {
        let files = tiff_files_in(dir)?;
        let frame_error = |file: &Path, reason: String| IoError::FolderFrame {
            folder: dir.into(),
            file: file.into(),
            reason,
        };
        let mut first: Option<TiffPage> = None;
        for file in &files {
            let (mut dec, file_len) = open_tiff_decoder(file)?;
            let page = check_tiff_page(file, &mut dec, 0, file_len)?;
            if dec.more_images() {
                return Err(frame_error(
                    file,
                    "holds more than one page; a folder holds one image per file (give a \
                     multi-page TIFF as a file, not in a folder)"
                        .into(),
                ));
            }
            match first {
                None => first = Some(page),
                Some(f)
                    if (f.height, f.width, f.dtype) != (page.height, page.width, page.dtype) =>
                {
                    return Err(frame_error(
                        file,
                        format!(
                            "is {}x{} {:?}, but the first file, {}, is {}x{} {:?}: every image \
                             of a stack has one size and sample type",
                            page.height,
                            page.width,
                            page.dtype,
                            files[0].display(),
                            f.height,
                            f.width,
                            f.dtype
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        let first = first.expect("tiff_files_in returns at least one file");
        Ok(Self {
            path: dir.into(),
            count: files.len(),
            height: first.height,
            width: first.width,
            dtype: first.dtype,
            next: 0,
            source: Source::Folder(files),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::{Equal, Greater, Less};

    #[test]
    fn natural_order_compares_digit_runs_as_numbers() {
        let mut names = vec![
            "proj_10.tif",
            "proj_2.tif",
            "proj_002.tif",
            "proj_1.tif",
            "proj_0100.tif",
            "proj_99.tif",
            "flat_3.tif",
            "proj_2b.tif",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            [
                "flat_3.tif",
                "proj_1.tif",
                "proj_2.tif",
                "proj_2b.tif",
                "proj_002.tif",
                "proj_10.tif",
                "proj_99.tif",
                "proj_0100.tif",
            ]
        );
        assert_eq!(natural_cmp("a", "a"), Equal);
        assert_eq!(natural_cmp("a", "a1"), Less);
        assert_eq!(natural_cmp("a1x", "a1"), Greater);
        // Runs longer than any integer type still compare by value.
        assert_eq!(
            natural_cmp("s_100000000000000000000001", "s_99999999999999999999999"),
            Greater
        );
    }
}
