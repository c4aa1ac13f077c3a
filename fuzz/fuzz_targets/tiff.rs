//! Multi-page TIFF stack and volume readers on arbitrary bytes: a typed error or a valid result,
//! never a panic or an allocation the file's length does not justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("lamino-fuzz-{}.tif", std::process::id()));
    std::fs::write(&path, data).unwrap();
    if let Ok(s) = lamino::io::read_stack(&path) {
        assert_eq!(s.values.len(), s.shape.iter().product::<usize>());
    }
    if let Ok(v) = lamino::io::read_tiff_volume(&path) {
        assert_eq!(v.values.len(), v.shape.iter().product::<usize>());
    }
});
