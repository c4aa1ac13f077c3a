// Exchange between register stages in the invocation's own array (one invocation per column,
// THREADS = 1): no barriers. On CPU rasterisers, whose lanes keep private arrays side by side,
// this beats workgroup memory for short sub-lengths. PRIVATE_LEN (>= SUB) comes from the
// permutation that includes this file.

var<private> exchange: array<vec2<f32>, PRIVATE_LEN>;

fn exchange_load(slot: u32, q: u32) -> vec2<f32> {
    return exchange[q];
}

fn exchange_store(slot: u32, q: u32, value: vec2<f32>) {
    exchange[q] = value;
}

fn exchange_barrier() {}
