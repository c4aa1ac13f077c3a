// Complex numbers as vec2<f32> (re, im), and the batched strided layout shared by every kernel that
// reads or writes user arrays.

fn cmul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// A batched 1D view of a buffer binding: element n of transform `batch` lives at
//   offset + n*stride + b0*dist0 + b1*dist1 + b2*dist2,
// with batch = batch_base + local index decomposed as b0 + count0*(b1 + count1*b2).
// Arithmetic is u32 and wraps: `offset` is already relative to the start of the binding (it may
// "wrap below zero"), and every index that is actually formed lies inside the binding.
struct Layout {
    offset: u32,
    stride: u32,
    count0: u32,
    dist0: u32,
    count1: u32,
    dist1: u32,
    dist2: u32,
    batch_base: u32,
}

fn layout_index(l: Layout, local_batch: u32, n: u32) -> u32 {
    let b = l.batch_base + local_batch;
    let b0 = b % l.count0;
    let rest = b / l.count0;
    let b1 = rest % l.count1;
    let b2 = rest / l.count1;
    return l.offset + n * l.stride + b0 * l.dist0 + b1 * l.dist1 + b2 * l.dist2;
}
