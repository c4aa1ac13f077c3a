// The scalar steps of the solver's inner iterations, on the GPU, so that a whole outer
// iteration is recorded without reading anything back: the conjugate-gradient step length and
// direction coefficient, and the Dai-Yuan coefficient. Reduction results are double words
// (hi, lo); coefficients are f32 slots the vector kernels multiply their constants with.

struct ScalarParams {
    // Reduction-result slots read.
    rr: u32,
    rr_new: u32,
    apap: u32,
    gpgp: u32,
    p_rprev: u32,
    p_r: u32,
    // Coefficient slots read.
    inv_n: u32,
    rho: u32,
    // Coefficient slots written.
    step: u32,
    neg_step: u32,
    neg_step_rho: u32,
    beta: u32,
}

@group(0) @binding(0) var<storage, read_write> sums: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> coefficients: array<f32>;
@group(0) @binding(2) var<uniform> p: ScalarParams;

fn sum_of(slot: u32) -> f32 {
    let d = sums[slot];
    return d.x + d.y;
}

// s = |r|^2 / (p.Hp), p.Hp = inv_n |A p|^2 + rho |grad p|^2 without applying H. A zero residual
// or a non-positive curvature stops the iteration (s = 0, so the moves change nothing); a NaN
// curvature propagates into the iterates, where the host finds it.
@compute @workgroup_size(1)
fn cg_step() {
    let rr = sum_of(p.rr);
    let curvature = coefficients[p.inv_n] * sum_of(p.apap) + coefficients[p.rho] * sum_of(p.gpgp);
    var s = rr / curvature;
    if (rr == 0.0 || curvature <= 0.0) {
        s = 0.0;
    }
    coefficients[p.step] = s;
    coefficients[p.neg_step] = -s;
    coefficients[p.neg_step_rho] = -s * coefficients[p.rho];
}

// beta = |r_new|^2 / |r|^2 (Fletcher-Reeves, exact for the quadratic subproblem), then |r|^2 is
// replaced by |r_new|^2 for the next step.
@compute @workgroup_size(1)
fn cg_beta() {
    let rr = sum_of(p.rr);
    var beta = sum_of(p.rr_new) / rr;
    if (rr == 0.0) {
        beta = 0.0;
    }
    coefficients[p.beta] = beta;
    sums[p.rr] = sums[p.rr_new];
}

// The reference's Dai-Yuan coefficient: beta = |r|^2 / (p.(r_prev - r) + 1e-32).
@compute @workgroup_size(1)
fn dy_beta() {
    coefficients[p.beta] = sum_of(p.rr) / (sum_of(p.p_rprev) - sum_of(p.p_r) + 1e-32);
}
