// Exchange between register stages in workgroup memory: COLUMNS columns of the pass's sub-length,
// interleaved when lanes step through columns first (neighbouring lanes, neighbouring words).

// At least COLUMNS * SUB elements.
override SHARED: u32 = 1u;

var<workgroup> exchange: array<vec2<f32>, SHARED>;

fn exchange_index(slot: u32, q: u32) -> u32 {
    if (COLUMNS_FASTEST) {
        return q * COLUMNS + slot;
    }
    return slot * len_sub() + q;
}

fn exchange_load(slot: u32, q: u32) -> vec2<f32> {
    return exchange[exchange_index(slot, q)];
}

fn exchange_store(slot: u32, q: u32, value: vec2<f32>) {
    exchange[exchange_index(slot, q)] = value;
}

fn exchange_barrier() {
    workgroupBarrier();
}
