//! The NXtomo (HDF5) reader on arbitrary bytes: a typed error or a scan whose frames of each kind
//! read back in the shapes the reader announced, never a panic or an allocation the file's length
//! does not justify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lamino::io::{NxtomoReader, ScanOptions};

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("lamino-fuzz-{}.nxs", std::process::id()));
    std::fs::write(&path, data).unwrap();
    let Ok(reader) = NxtomoReader::open(&path, &ScanOptions::default()) else {
        return;
    };
    let scan = &reader.info().scan;
    let n = scan.projections.shape[0];
    assert_eq!(scan.theta.len(), n);
    if let Ok(p) = reader.read_projections(0..n) {
        assert_eq!(p.shape, scan.projections.shape);
        assert_eq!(p.values.len(), p.shape.iter().product::<usize>());
    }
    if let Ok(f) = reader.read_flats() {
        assert_eq!(f.shape, scan.flats.shape);
        assert_eq!(f.values.len(), f.shape.iter().product::<usize>());
    }
    if let Ok(d) = reader.read_darks() {
        assert_eq!(d.values.len(), d.shape.iter().product::<usize>());
    }
});
