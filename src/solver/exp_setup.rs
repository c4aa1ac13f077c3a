//! Experiment (not committed): solver setup time, plain then default, in one context.
use super::AdmmSolver;
use crate::gpu::test_context as ctx;
use crate::operator::{Geometry, OperatorOptions};
use crate::params::AdmmParams;

#[test]
#[ignore = "experiment"]
fn time_setup() {
    let ctx = &ctx();
    let n = 32;
    let g = Geometry::cube(n, n, std::f64::consts::FRAC_PI_2 + 30f64.to_radians());
    let data: Vec<f32> = (0..g.data_len())
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
        .collect();
    for (name, params) in [
        ("plain", AdmmParams::plain()),
        ("default", AdmmParams::default()),
        ("default again", AdmmParams::default()),
    ] {
        let t = std::time::Instant::now();
        let mut s = AdmmSolver::new(ctx, &g, &data, params, &OperatorOptions::default()).unwrap();
        let setup = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        s.step(ctx).unwrap();
        let first = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        s.step(ctx).unwrap();
        let second = t.elapsed().as_secs_f64();
        println!("{name}: setup {setup:.2} s, first step {first:.2} s, second {second:.2} s");
    }
}
