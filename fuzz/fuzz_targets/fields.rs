//! The flat-field fields reader with arbitrary bytes as `flatfield.npy` (the dark-field and
//! baseline valid): a typed error or fields whose sizes agree.
#![no_main]

use lamino::flatfield::{io, Fields};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("lamino-fuzz-fields-{}", std::process::id()));
    if !dir.join("darkfield.npy").exists() {
        let fields = Fields {
            height: 4,
            width: 6,
            flatfield: vec![1.0; 24],
            darkfield: vec![0.5; 24],
            baseline: vec![100.0, 120.0],
        };
        io::write_fields(&dir, &fields, None).unwrap();
    }
    std::fs::write(dir.join("flatfield.npy"), data).unwrap();
    if let Ok(f) = io::read_fields(&dir) {
        assert_eq!(f.flatfield.len(), f.height * f.width);
        assert_eq!(f.darkfield.len(), f.height * f.width);
    }
});
