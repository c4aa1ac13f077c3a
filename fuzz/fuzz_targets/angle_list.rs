//! The angle-list reader on arbitrary bytes: a typed error or finite angles.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("lamino-fuzz-{}.txt", std::process::id()));
    std::fs::write(&path, data).unwrap();
    if let Ok(angles) = lamino::recon::input::read_angle_list(&path) {
        assert!(angles.iter().all(|a| a.is_finite()));
    }
});
