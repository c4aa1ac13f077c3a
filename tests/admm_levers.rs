//! Experiment of issue 31 (not kept): levers evaluated on the f64 CPU reference of the iterations.
//! Applications of A and A* until the volume first comes within 0.5 % (rel. L2) of 300 plain
//! iterations, per phantom. `LEVER_SIZE=16 cargo test --test admm_levers -- --ignored --nocapture`.

use lamino::bench::noisy_projections;
use lamino::params::AdmmParams;
use lamino::reference::CpuAdmm;
use lamino::simulate::PhantomKind;

fn rel(a: &[f64], b: &[f64]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let n: f64 = b.iter().map(|y| y * y).sum();
    (d / n).sqrt()
}

#[test]
#[ignore]
fn levers_against_plain_admm() {
    let n: usize = std::env::var("LEVER_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let threads = 2;
    let phantoms: Vec<PhantomKind> = std::env::var("LEVER_PHANTOMS")
        .ok()
        .map(|s| s.split(',').map(|p| p.parse().unwrap()).collect())
        .unwrap_or(PhantomKind::ALL.to_vec());
    for phantom in phantoms {
        let p = noisy_projections(phantom, n, (n, 30.0, 1e5)).unwrap();
        let (g, data) = (p.geometry().clone(), p.operator_data());
        let plain = AdmmParams::plain();
        let start = std::time::Instant::now();
        let mut reference = CpuAdmm::new(&g, &data, plain, threads);
        let mut volumes = Vec::new();
        for _ in 0..300 {
            reference.step();
            volumes.push(reference.volume().to_vec());
        }
        let r = volumes.last().unwrap().clone();
        let k_plain = volumes.iter().position(|v| rel(v, &r) <= 0.005).unwrap() + 1;
        let apps_plain = k_plain * 9;
        eprintln!(
            "{phantom} {n}^3: plain reaches 0.5 % after {k_plain} iterations, {apps_plain} applications ({:.0} s for 300)",
            start.elapsed().as_secs_f64()
        );
        let d = AdmmParams::default();
        let variants: Vec<(&str, AdmmParams, Option<f64>, (f64, f64), bool)> = vec![
            ("default", d, None, (10.0, 2.0), false),
            ("default+precond", d, None, (10.0, 2.0), true),
            (
                "default+precond+1CG",
                AdmmParams {
                    inner_iterations: 1,
                    ..d
                },
                None,
                (10.0, 2.0),
                true,
            ),
            (
                "default+balancing(5;sqrt2)",
                d,
                None,
                (5.0, 2f64.sqrt()),
                false,
            ),
        ];
        let variants: Vec<_> = variants
            .into_iter()
            .filter(|v| {
                std::env::var("LEVER_ONLY").map_or(true, |o| o.split(',').any(|n| n == v.0))
            })
            .collect();
        for (name, params, eta, balancing, precond) in variants {
            let mut s = CpuAdmm::new(&g, &data, params, threads);
            s.restart_eta = eta;
            s.balancing = balancing;
            if precond {
                s.enable_preconditioner();
            }
            let per = 2 * params.inner_iterations + 1;
            let mut prev = s.volume().to_vec();
            let mut change_at = None;
            let mut reached = None;
            for k in 1..=300 {
                s.step();
                let v = s.volume();
                let dv: f64 = v
                    .iter()
                    .zip(&prev)
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum::<f64>()
                    .sqrt();
                let nv: f64 = v.iter().map(|a| a * a).sum::<f64>().sqrt();
                if change_at.is_none() && dv / nv <= 2e-4 {
                    change_at = Some(k);
                }
                if reached.is_none() && rel(v, &r) <= 0.005 {
                    reached = Some(k);
                }
                prev = v.to_vec();
                if reached.is_some() && change_at.is_some() {
                    break;
                }
            }
            eprintln!(
                "  {name}: within 0.5 % after {reached:?} iterations = {:?} applications ({:?}x plain); change <= 2e-4 at {change_at:?}; restarts {}",
                reached.map(|k| k * per),
                reached.map(|k| format!("{:.2}", (k * per) as f64 / apps_plain as f64)),
                s.restarts()
            );
        }
    }
}
