// The solver's vector module over vec4<f32> words (see vector.wgsl): `lincomb` and `dot` over
// arrays whose planes and window offsets are whole multiples of four words, moving 16 bytes per
// load and store.

alias Word = vec4<f32>;

fn word_sum(value: Word) -> f32 {
    return (value.x + value.y) + (value.z + value.w);
}

// Partial sums are f32 words: one component of a vec4 of the output.
fn store_partial(i: u32, value: f32) {
    z[i / 4u][i % 4u] = value;
}
