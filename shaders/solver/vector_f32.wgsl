// The solver's vector module over f32 words (see vector.wgsl): any plane length, and the kernels
// over voxels (vector_voxels.wgsl).

alias Word = f32;

fn word_sum(value: Word) -> f32 {
    return value;
}

fn store_partial(i: u32, value: f32) {
    z[i] = value;
}
