//! The checkpoint reader on arbitrary bytes: a typed error or a checkpoint whose header is
//! consistent and whose arrays fill the file, never a panic or an allocation the file's length
//! does not justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("lamino-fuzz-{}.ckpt", std::process::id()));
    std::fs::write(&path, data).unwrap();
    let mut words = 0usize;
    let read = lamino::solver::Checkpoint::read_arrays(
        &path,
        |_| Ok::<_, lamino::solver::CheckpointError>(()),
        |_, _, block| {
            words += block.len();
            Ok(())
        },
    );
    if let Ok(c) = read {
        assert_eq!(words, c.lengths.iter().sum::<usize>());
        assert!(c.rho.is_finite() && c.rho > 0.0);
        assert!(c.iteration <= c.params.outer_iterations);
        c.geometry.validate().unwrap();
    }
});
