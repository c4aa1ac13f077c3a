//! The geometry JSON reader on arbitrary bytes: a typed error or a geometry that validates.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("lamino-fuzz-{}.json", std::process::id()));
    std::fs::write(&path, data).unwrap();
    if let Ok(g) = lamino::geometry::Geometry::read_json(&path) {
        g.validate().unwrap();
    }
});
