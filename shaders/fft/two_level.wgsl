// One FFT pass whose sub-transform runs in two levels (the four-step method inside a workgroup):
// SUB = TL_A * TL_B, one column per workgroup of max(TL_A, TL_B) invocations.
//
//   level 1: invocation t < TL_B loads inputs q = t + TL_B n1 (n1 < TL_A) into its private array,
//            transforms them over n1 (length TL_A), multiplies output k1 by w_SUB^(t k1) and
//            writes it to workgroup memory at k1 TL_B + t;
//   level 2: after one barrier, invocation t < TL_A reads row t (TL_B elements), transforms it
//            (length TL_B) and writes output k2 to frequency t + TL_A k2.
//
// The helpers `tl_*` are generated per (TL_A, TL_B) and written out in full (`src/fft/two_level.rs`):
// every index into the private array is a constant, which keeps it in registers; loops over it
// would index it at run time, which CPU rasterisers turn into slow per-element selects. Loads,
// stores, hooks, the four-step twiddle of the pass and the layouts are those of `pass.wgsl`, which
// this file follows.

alias LevelArray = array<vec2<f32>, TL_MAX>;

@compute @workgroup_size(WORKGROUP)
fn fft_pass_two_level(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    var col: Column;
    col.t = lid;
    col.slot = 0u;
    place_column(&col, wid.x + wid.y * groups.x);
    var x: LevelArray;
    if (col.valid && lid < TL_B) {
        tl_load(col, lid, &x);
        tl_fft_a(&x);
        tl_to_exchange(lid, &x);
    }
    workgroupBarrier();
    if (col.valid && lid < TL_A) {
        tl_from_exchange(lid, &x);
        tl_fft_b(&x);
        tl_store(col, lid, &x);
    }
}
