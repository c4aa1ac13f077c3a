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
}
