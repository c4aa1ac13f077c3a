//! Small text inputs a user names (angle lists, geometry JSON), read with a bound: a path to
//! `/dev/zero`, a FIFO or a multi-gigabyte file by mistake must end in an error naming the limit,
//! not in an allocation that grows until the process is killed.

use std::io::Read;
use std::path::Path;

use thiserror::Error;

/// The largest text input read, 64 MiB. A geometry JSON file of a million angles takes about
/// 25 MB, an angle list of a million angles about 20 MB; no real text input comes near this.
pub const MAX_TEXT_BYTES: u64 = 64 << 20;

/// Why a text input could not be read; the caller's error names the file.
#[derive(Debug, Error)]
pub enum TextError {
    #[error("{0}")]
    Read(std::io::Error),
    #[error(
        "longer than {MAX_TEXT_BYTES} bytes (64 MiB), the most lamino reads from a text input; \
         is it the right file?"
    )]
    TooLarge,
    #[error("not UTF-8 text: {0}")]
    NotUtf8(std::string::FromUtf8Error),
}

/// The whole of the text file `path`, reading at most [`MAX_TEXT_BYTES`] + 1 bytes so that an
/// endless or huge file is refused after a bounded read.
pub fn read_text(path: &Path) -> Result<String, TextError> {
    let file = std::fs::File::open(path).map_err(TextError::Read)?;
    let mut bytes = Vec::new();
    file.take(MAX_TEXT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(TextError::Read)?;
    if bytes.len() as u64 > MAX_TEXT_BYTES {
        return Err(TextError::TooLarge);
    }
    String::from_utf8(bytes).map_err(TextError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_up_to_the_limit_is_read_and_longer_text_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("angles.txt");
        std::fs::write(&path, "0 1.5\n").unwrap();
        assert!(read_text(&path).unwrap() == "0 1.5\n");
        let file = std::fs::File::create(&path).unwrap();
        // Sparse: the length without writing the bytes.
        file.set_len(MAX_TEXT_BYTES + 1).unwrap();
        assert!(matches!(read_text(&path), Err(TextError::TooLarge)));
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(matches!(read_text(&path), Err(TextError::NotUtf8(_))));
        assert!(matches!(
            read_text(&dir.path().join("missing")),
            Err(TextError::Read(_))
        ));
    }
}
