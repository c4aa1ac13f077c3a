//! The DXchange (HDF5) reader on arbitrary bytes: a typed error or a scan whose stacks agree
//! with their shapes, never a panic or an allocation the file's length does not justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("lamino-fuzz-{}.h5", std::process::id()));
    std::fs::write(&path, data).unwrap();
    if let Ok(scan) = lamino::io::read_dxchange(&path) {
        for stack in [&scan.data, &scan.flats, &scan.darks]
            .into_iter()
            .chain(&scan.truth)
        {
            assert_eq!(stack.values.len(), stack.shape.iter().product::<usize>());
        }
        assert_eq!(scan.theta.len(), scan.data.shape[0]);
    }
});
