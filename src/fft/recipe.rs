//! The pure part of planning: which algorithm and which radices for a length. No GPU involved.

/// Radices with a kernel of their own (2, 4, 8) or a direct small DFT (3, 5, 7, 11, 13).
pub const RADICES: [u32; 8] = [8, 4, 2, 3, 5, 7, 11, 13];

/// Largest prime handled by a Stockham pass; lengths with a larger prime factor use Bluestein.
pub const MAX_STOCKHAM_PRIME: u64 = 13;

/// How a length is transformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Algorithm {
    /// Length 1: the identity (times the normalisation, which is 1).
    Identity,
    /// Stockham autosort passes with these radices, applied in order (their product is the length).
    Stockham { radices: Vec<u32> },
    /// Bluestein's chirp-z transform through a smooth length `inner` >= 2n - 1.
    Bluestein { inner: usize },
}

/// Radices for `n` when every prime factor is at most 13: radix 8 as often as possible, then one 4
/// or 2 for the rest of the power of two, then the odd primes. `None` otherwise.
pub fn stockham_radices(n: usize) -> Option<Vec<u32>> {
    let mut rest = n;
    let mut radices = Vec::new();
    while rest.is_multiple_of(8) {
        radices.push(8);
        rest /= 8;
    }
    if rest.is_multiple_of(4) {
        radices.push(4);
        rest /= 4;
    } else if rest.is_multiple_of(2) {
        radices.push(2);
        rest /= 2;
    }
    for p in [3usize, 5, 7, 11, 13] {
        while rest.is_multiple_of(p) {
            radices.push(p as u32);
            rest /= p;
        }
    }
    (rest == 1).then_some(radices)
}

/// The register stages of a sub-transform of length `n` (every prime factor at most 13): the power
/// of two in as few stages of at most `max_radix` (8 or 16) as possible, split as evenly as
/// possible (512 = 8 8 8 rather than 16 16 2), then the odd primes. `None` for other lengths.
pub fn stage_radices(n: usize, max_radix: u32) -> Option<Vec<u32>> {
    let mut rest = n;
    let mut bits = 0u32;
    while rest.is_multiple_of(2) {
        rest /= 2;
        bits += 1;
    }
    let max_bits = max_radix.trailing_zeros().max(1);
    let stages = bits.div_ceil(max_bits);
    let mut radices: Vec<u32> = (0..stages)
        .map(|s| 1 << (bits / stages + u32::from(s < bits % stages)))
        .collect();
    for p in [3usize, 5, 7, 11, 13] {
        while rest.is_multiple_of(p) {
            radices.push(p as u32);
            rest /= p;
        }
    }
    (rest == 1).then_some(radices)
}

/// Splits a length into passes of at most `max_sub` each (their product is `n`): as few passes as
/// possible, as even as possible. At least `min_passes`; `None` when no such split exists (a prime
/// factor above `max_sub`, or fewer factors than passes asked for).
pub fn split_passes(n: usize, max_sub: usize, min_passes: usize) -> Option<Vec<usize>> {
    fn best(n: usize, parts: usize, max_sub: usize) -> Option<Vec<usize>> {
        if parts == 1 {
            return (n <= max_sub).then(|| vec![n]);
        }
        // The first part is the largest divisor not above the even share that still leaves a
        // splittable rest; trying divisors from the even share downwards keeps parts balanced.
        let share = (n as f64).powf(1.0 / parts as f64).round() as usize;
        let mut candidates: Vec<usize> = (2..=max_sub.min(n / 2))
            .filter(|d| n.is_multiple_of(*d))
            .collect();
        candidates.sort_by_key(|&d| (d.abs_diff(share), std::cmp::Reverse(d)));
        candidates.into_iter().find_map(|d| {
            let mut rest = best(n / d, parts - 1, max_sub)?;
            rest.insert(0, d);
            Some(rest)
        })
    }
    if n < 2 {
        return None;
    }
    let most = (usize::BITS - n.leading_zeros()) as usize;
    (min_passes.max(1)..=most).find_map(|parts| best(n, parts, max_sub))
}

/// Smallest number >= `min` whose prime factors are all in {2, 3, 5, 7}.
pub fn next_smooth(min: usize) -> usize {
    let mut best = min.next_power_of_two();
    let mut p7 = 1usize;
    while p7 < best {
        let mut p5 = p7;
        while p5 < best {
            let mut p3 = p5;
            while p3 < best {
                let mut v = p3;
                while v < min {
                    v *= 2;
                }
                best = best.min(v);
                p3 *= 3;
            }
            p5 *= 5;
        }
        p7 *= 7;
    }
    best
}

/// Largest prime factor of `n` (1 for n = 1).
pub fn largest_prime_factor(mut n: u64) -> u64 {
    let mut largest = 1;
    let mut p = 2;
    while p * p <= n {
        while n.is_multiple_of(p) {
            largest = p;
            n /= p;
        }
        p += 1;
    }
    if n > 1 {
        largest = n;
    }
    largest
}

/// The algorithm for a length.
pub fn design(n: usize) -> Algorithm {
    if n == 1 {
        return Algorithm::Identity;
    }
    match stockham_radices(n) {
        Some(radices) => Algorithm::Stockham { radices },
        None => Algorithm::Bluestein {
            inner: next_smooth(2 * n - 1),
        },
    }
}

/// The accuracy an FFT of this shape must reach: the relative L-infinity error
/// `max|a - b| / max|b|` against an f64 reference is at most `2e-6 + 5e-7 log10(N)` (N the total
/// number of elements transformed together), doubled when a length has a prime factor above 13
/// (those go through Bluestein, which adds two transforms and two chirp products).
pub fn accuracy_bound(shape: &[usize]) -> f64 {
    let n: f64 = shape.iter().map(|&s| s as f64).product();
    let base = 2e-6 + 5e-7 * n.log10();
    let bluestein = shape
        .iter()
        .any(|&s| largest_prime_factor(s as u64) > MAX_STOCKHAM_PRIME);
    if bluestein {
        2.0 * base
    } else {
        base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radices_multiply_to_the_length_for_every_smooth_length() {
        for n in 2..=5000usize {
            match design(n) {
                Algorithm::Stockham { radices } => {
                    assert_eq!(radices.iter().map(|&r| r as usize).product::<usize>(), n);
                    assert!(radices.iter().all(|r| RADICES.contains(r)));
                    assert!(largest_prime_factor(n as u64) <= MAX_STOCKHAM_PRIME);
                }
                Algorithm::Bluestein { inner } => {
                    assert!(largest_prime_factor(n as u64) > MAX_STOCKHAM_PRIME, "{n}");
                    assert!(inner >= 2 * n - 1 && largest_prime_factor(inner as u64) <= 7);
                }
                Algorithm::Identity => panic!("{n}"),
            }
        }
        assert_eq!(design(1), Algorithm::Identity);
    }

    #[test]
    fn known_designs() {
        assert_eq!(stockham_radices(4096), Some(vec![8, 8, 8, 8]));
        assert_eq!(stockham_radices(768), Some(vec![8, 8, 4, 3]));
        assert_eq!(stockham_radices(2000), Some(vec![8, 2, 5, 5, 5]));
        assert_eq!(stockham_radices(17), None);
        assert_eq!(design(17), Algorithm::Bluestein { inner: 35 });
        assert_eq!(next_smooth(1), 1);
        assert_eq!(next_smooth(11), 12);
        assert_eq!(next_smooth(2 * 1021 - 1), 2048);
        assert_eq!(largest_prime_factor(2 * 3 * 17), 17);
    }

    #[test]
    fn stage_radices_are_few_and_even() {
        assert_eq!(stage_radices(256, 16), Some(vec![16, 16]));
        assert_eq!(stage_radices(512, 16), Some(vec![8, 8, 8]));
        assert_eq!(stage_radices(1024, 16), Some(vec![16, 8, 8]));
        assert_eq!(stage_radices(4096, 8), Some(vec![8, 8, 8, 8]));
        assert_eq!(stage_radices(768, 16), Some(vec![16, 16, 3]));
        assert_eq!(stage_radices(2, 16), Some(vec![2]));
        assert_eq!(stage_radices(45, 16), Some(vec![3, 3, 5]));
        assert_eq!(stage_radices(34, 16), None);
        for n in 2..=8192usize {
            for max_radix in [8, 16] {
                if let Some(r) = stage_radices(n, max_radix) {
                    assert_eq!(r.iter().map(|&x| x as usize).product::<usize>(), n);
                    assert!(r.iter().all(|&x| x <= max_radix.max(13)));
                    assert!(r.len() <= 8, "{n}: {r:?}");
                }
            }
        }
    }

    #[test]
    fn passes_split_lengths_evenly() {
        assert_eq!(split_passes(256, 4096, 1), Some(vec![256]));
        assert_eq!(split_passes(1 << 20, 4096, 1), Some(vec![1024, 1024]));
        assert_eq!(split_passes(64, 4096, 2), Some(vec![8, 8]));
        assert_eq!(split_passes(6, 4096, 2), Some(vec![2, 3]));
        assert_eq!(split_passes(8, 4096, 2), Some(vec![4, 2]));
        assert_eq!(split_passes(7, 4096, 2), None);
        assert_eq!(split_passes(1 << 26, 4096, 1), Some(vec![512, 256, 512]));
        for n in [3 * 4096, 1 << 24, 2000 * 2000, 17 * 4096] {
            let p = split_passes(n, 4096, 1).unwrap();
            assert_eq!(p.iter().product::<usize>(), n);
            assert!(p.iter().all(|&x| x <= 4096) && p.len() == 2, "{n}: {p:?}");
        }
    }
}
