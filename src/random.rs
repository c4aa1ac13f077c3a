//! The crate's one seeded random source (SplitMix64): Poisson noise of simulated scans, the start
//! vectors of power iterations, FFT tuning inputs, and the test data of tests and benchmarks all
//! draw from it, so every machine draws the same values without a random-number dependency.

/// SplitMix64 (Steele, Lea, Flood 2014): fast, statistically solid for test data, fully seeded.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller, the cosine branch: one normal per two uniforms).
    pub fn next_normal(&mut self) -> f64 {
        let radius = (-2.0 * (1.0 - self.next_f64()).ln()).sqrt();
        radius * (2.0 * std::f64::consts::PI * self.next_f64()).cos()
    }

    /// `len` complex values with real and imaginary parts uniform in [-0.5, 0.5).
    pub fn complex_uniform(&mut self, len: usize) -> Vec<num_complex::Complex<f32>> {
        (0..len)
            .map(|_| {
                let re = self.next_f64() - 0.5;
                let im = self.next_f64() - 0.5;
                num_complex::Complex::new(re as f32, im as f32)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_values_stay_in_range_and_repeat_with_the_seed() {
        let a = SplitMix64::new(7).complex_uniform(1000);
        let b = SplitMix64::new(7).complex_uniform(1000);
        assert_eq!(a, b);
        assert!(a
            .iter()
            .all(|c| (-0.5..0.5).contains(&c.re) && (-0.5..0.5).contains(&c.im)));
        let mean: f32 = a.iter().map(|c| c.re).sum::<f32>() / 1000.0;
        assert!(mean.abs() < 0.05, "{mean}");
    }
}
