// Double-word (hi + lo) arithmetic: a reduction's finish adds up to millions of partial sums,
// and error-free transformations keep the result as accurate as an f64 sum would be. Shared by
// the solver's reductions and the memo's distances.

fn two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = a + b;
    let bb = s - a;
    return vec2<f32>(s, (a - (s - bb)) + (b - bb));
}

fn dw_add(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    let s = two_sum(a.x, b.x);
    let e = s.y + a.y + b.y;
    let hi = s.x + e;
    return vec2<f32>(hi, e - (hi - s.x));
}
