//! `.npy` readers (complex/float arrays and u8/u16/f32/f64 stacks) on arbitrary bytes: a typed
//! error or a valid result, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("lamino-fuzz-{}.npy", std::process::id()));
    std::fs::write(&path, data).unwrap();
    if let Ok(a) = lamino::io::read_complex_npy(&path) {
        assert_eq!(a.data.len(), a.shape.iter().product::<usize>());
    }
    if let Ok(s) = lamino::io::read_stack(&path) {
        assert_eq!(s.values.len(), s.shape.iter().product::<usize>());
    }
});
