//! Experiment (not committed): each vector call site of one outer iteration timed alone at 64^3.
use super::AdmmSolver;
use crate::gpu::test_context as ctx;
use crate::operator::{Geometry, OperatorOptions};
use crate::params::AdmmParams;

#[test]
#[ignore = "experiment"]
fn time_each_vector_op() {
    let ctx = &ctx();
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let g = Geometry::cube(n, n, std::f64::consts::FRAC_PI_2 + 30f64.to_radians());
    let data: Vec<f32> = (0..g.data_len())
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
        .collect();
    let mut s = AdmmSolver::new(
        ctx,
        &g,
        &data,
        AdmmParams::exactly(3),
        &OperatorOptions::default(),
    )
    .unwrap();
    s.step(ctx).unwrap();
    let o = &s.ops;
    let mut list: Vec<(&str, &super::vector::VectorOp)> = vec![
        ("save_u_prev", &o.save_u_prev),
        ("save_h0", &o.save_h0),
        ("r_add_tv_gradient", &o.r_add_tv_gradient),
        ("dot_rr", &o.dot_rr),
        ("p_update", &o.p_update),
        ("grad_p", &o.grad_p),
        ("dot_apap", &o.dot_apap),
        ("dot_gpgp", &o.dot_gpgp),
        ("u_move", &o.u_move),
        ("au_move", &o.au_move),
        ("grad_u_move", &o.grad_u_move),
        ("r_sub_tv_curvature", &o.r_sub_tv_curvature),
        ("dot_rr_new", &o.dot_rr_new),
        ("r_saved_from_r", &o.r_saved_from_r),
        ("dot_p_rsaved", &o.dot_p_rsaved),
        ("dot_p_r", &o.dot_p_r),
        ("psi_shrink", &o.psi_shrink),
        ("lambda_update", &o.lambda_update),
    ];
    if let Some(r) = &o.relax {
        list.push(("relax", r));
    }
    if let Some(r) = &o.r_from_saved {
        list.push(("r_from_saved", r));
    }
    for (i, op) in o.sums.iter().enumerate() {
        list.push((
            [
                "sum0", "sum1", "sum2", "sum3", "sum4", "sum5", "sum6", "sum7", "sum8", "sum9",
            ][i.min(9)],
            op,
        ));
    }
    let mut total = 0.0;
    for (name, op) in list {
        let mut t = Vec::new();
        for _ in 0..5 {
            let mut rec = ctx.recorder("exp");
            op.record(ctx, &mut rec).unwrap();
            let start = std::time::Instant::now();
            ctx.submit_and_wait(rec).unwrap();
            t.push(start.elapsed().as_secs_f64() * 1e3);
        }
        t.sort_by(f64::total_cmp);
        total += t[2];
        println!("{name:<20} {:8.2} ms", t[2]);
    }
    let mut t = Vec::new();
    for _ in 0..5 {
        let rec = ctx.recorder("empty");
        let start = std::time::Instant::now();
        ctx.submit_and_wait(rec).unwrap();
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    t.sort_by(f64::total_cmp);
    println!(
        "empty submit+wait {:.2} ms; sum of medians {total:.1} ms",
        t[2]
    );
}
