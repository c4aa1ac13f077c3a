//! Experiment of issue 31 (not kept in the tree): spectral penalty selection (Xu et al. 2017) on
//! the f64 CPU reference of the iterations, against the default's residual balancing. Per run:
//! where the volume first comes within 0.5 % (rel. L2) of 300 plain iterations, and where the
//! default stopping test first passes and how far it is there.
//! `SPECTRAL_SIZE=32 SPECTRAL_PHANTOMS=chip cargo test --test admm_spectral -- --ignored --nocapture`

use lamino::bench::noisy_projections;
use lamino::params::{AdmmParams, Convergence};
use lamino::reference::CpuAdmm;
use lamino::simulate::PhantomKind;

fn rel(a: &[f64], b: &[f64]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let n: f64 = b.iter().map(|y| y * y).sum();
    (d / n).sqrt()
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore]
fn spectral_penalty_against_residual_balancing() {
    let n: usize = env("SPECTRAL_SIZE", 32);
    let threads = 2;
    let phantoms: Vec<PhantomKind> = std::env::var("SPECTRAL_PHANTOMS")
        .ok()
        .map(|s| s.split(',').map(|p| p.parse().unwrap()).collect())
        .unwrap_or(PhantomKind::ALL.to_vec());
    let c = Convergence::DEFAULT;
    for phantom in phantoms {
        let p = noisy_projections(phantom, n, (n, 30.0, 1e5)).unwrap();
        let (g, data) = (p.geometry().clone(), p.operator_data());
        let start = std::time::Instant::now();
        let cache = format!("/tmp/spectral-ref-{phantom}-{n}.f64");
        let r: Vec<f64> = match std::fs::read(&cache) {
            Ok(bytes) => bytes
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                .collect(),
            Err(_) => {
                let mut reference = CpuAdmm::new(&g, &data, AdmmParams::plain(), threads);
                for _ in 0..300 {
                    reference.step();
                }
                let r = reference.volume().to_vec();
                let bytes: Vec<u8> = r.iter().flat_map(|v| v.to_le_bytes()).collect();
                std::fs::write(&cache, bytes).unwrap();
                r
            }
        };
        eprintln!(
            "{phantom} {n}^3: reference ready after {:.0} s",
            start.elapsed().as_secs_f64()
        );
        let d = AdmmParams::default();
        let variants: Vec<(&str, AdmmParams, Option<usize>)> = vec![
            ("default", d, None),
            ("spectral T2", d, Some(2)),
            ("spectral T2, rho0 0.5", AdmmParams { rho0: 0.5, ..d }, Some(2)),
            ("spectral T4", d, Some(4)),
        ];
        let only = std::env::var("SPECTRAL_ONLY").ok();
        for (name, params, period) in variants {
            if only.as_ref().is_some_and(|o| !o.split(',').any(|x| x == name)) {
                continue;
            }
            let t = std::time::Instant::now();
            let mut s = CpuAdmm::new(&g, &data, params, threads);
            s.spectral_period = period;
            let per = 2 * params.inner_iterations;
            let mut reached = None;
            let mut passed = None;
            for k in 1..=300 {
                s.step();
                let (change, primal, dual) = s.measures;
                let distance = rel(s.volume(), &r);
                if reached.is_none() && distance <= 0.005 {
                    reached = Some(k);
                }
                if passed.is_none() && change <= c.change && primal <= c.primal && dual <= c.dual
                {
                    passed = Some((k, distance));
                }
                if reached.is_some() && passed.is_some() {
                    break;
                }
            }
            let path: Vec<String> = s
                .rho_path
                .iter()
                .enumerate()
                .filter(|(k, _)| k % 10 == 0)
                .map(|(k, r)| format!("{k}:{r:.3}"))
                .collect();
            eprintln!(
                "  {name}: within 0.5 % after {reached:?} iterations = {:?} applications; test passes at {:?} ({:.3} % away); {:.0} s; rho {}",
                reached.map(|k| k * per + 1),
                passed.map(|p| p.0),
                passed.map_or(f64::NAN, |p| 100.0 * p.1),
                t.elapsed().as_secs_f64(),
                path.join(" ")
            );
        }
    }
}
