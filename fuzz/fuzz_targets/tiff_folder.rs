//! The reader of folders of single-image TIFFs on arbitrary bytes: the first byte says how many
//! files (1 to 4) the rest is cut into, written as `frame_<i>.tif`; a typed error or a stack of
//! the folder's files, never a panic or an allocation the files' lengths do not justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&count, rest)) = data.split_first() else {
        return;
    };
    let count = usize::from(count % 4) + 1;
    let dir = std::env::temp_dir().join(format!("lamino-fuzz-folder-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let size = rest.len().div_ceil(count).max(1);
    for (i, part) in rest.chunks(size).enumerate() {
        std::fs::write(dir.join(format!("frame_{i}.tif")), part).unwrap();
    }
    if let Ok(s) = lamino::io::read_stack(&dir) {
        assert_eq!(s.values.len(), s.shape.iter().product::<usize>());
        assert!(s.shape[0] <= count);
    }
});
