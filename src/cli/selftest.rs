//! `lamino selftest`: this device's FFTs against an f64 CPU reference, within the accuracy bound
//! of the FFT issue (2e-6 + 5e-7 log10(N), doubled for prime factors above 13).

use crate::fft::{Direction, FftPlan, Normalization};
use crate::random::SplitMix64;
use crate::reference::{fft_last_axes, max_relative_error};

use super::{Cli, CliResult};

pub fn run(cli: &Cli) -> CliResult {
    let ctx = cli.context()?;
    println!("device: {}", ctx.info());
    match ctx.pipeline_cache() {
        Some((file, 0)) => println!("pipeline cache: {} (empty: a cold start)", file.display()),
        Some((file, bytes)) => println!("pipeline cache: {} ({bytes} bytes read)", file.display()),
        None => println!(
            "pipeline cache: none (turned off, or none on this backend: the driver's own shader \
             cache, if any, serves the next run)"
        ),
    }
    let mut failures = 0;
    let cases: [&[usize]; 6] = [
        &[1000],
        &[1021],
        &[4096],
        &[100, 60],
        &[256, 256],
        &[64, 64, 64],
    ];
    for (i, shape) in cases.iter().enumerate() {
        let n: usize = shape.iter().product();
        let input = SplitMix64::new(i as u64).complex_uniform(n);
        for direction in [Direction::Forward, Direction::Inverse] {
            let data = ctx.upload("selftest data", &input)?;
            let plan = FftPlan::new(
                &ctx,
                shape,
                shape.len(),
                direction,
                Normalization::None,
                &data,
            )?;
            plan.execute(&ctx)?;
            let gpu = ctx.read(&data, 0, n)?;
            let mut reference: Vec<num_complex::Complex<f64>> = input
                .iter()
                .map(|c| num_complex::Complex::new(c.re as f64, c.im as f64))
                .collect();
            fft_last_axes(&mut reference, shape, shape.len(), direction, 2);
            let err = max_relative_error(&gpu, &reference);
            let bound = crate::fft::recipe::accuracy_bound(shape);
            // Written so that a NaN error fails.
            let ok = err <= bound;
            failures += usize::from(!ok);
            println!(
                "{:>14} {:<8} rel. max error {:.2e}  bound {:.2e}  {}",
                format!("{shape:?}"),
                format!("{direction:?}"),
                err,
                bound,
                if ok { "ok" } else { "FAILED" }
            );
        }
    }
    if failures > 0 {
        return Err(format!("{failures} transforms exceeded the accuracy bound").into());
    }
    println!("all transforms within the accuracy bound");
    Ok(())
}
