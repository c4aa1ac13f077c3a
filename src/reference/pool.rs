//! The memo layer's key in f64: a 3x3 adaptive average pool (PyTorch's bin bounds) of the real and
//! imaginary planes of every channel of a strided 3D block.

use num_complex::Complex32;

/// Key of the block of `extents` at `offset` with `strides` in `values`: channels along
/// `channel_axis`, pooled over the other two axes in order; value
/// `((2 channel + part) 3 + bi) 3 + bj` with part 0 real, 1 imaginary.
pub fn pooled_key(
    values: &[Complex32],
    offset: usize,
    strides: [usize; 3],
    extents: [usize; 3],
    channel_axis: usize,
) -> Vec<f64> {
    let (a, b) = match channel_axis {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    // Bin i of 3 over n covers [floor(i n / 3), ceil((i + 1) n / 3)); bins overlap when 3 does
    // not divide n.
    let bins = |i: usize, n: usize| (i * n / 3)..((i + 1) * n).div_ceil(3);
    let mut key = Vec::with_capacity(18 * extents[channel_axis]);
    for ch in 0..extents[channel_axis] {
        for part in 0..2 {
            for bi in 0..3 {
                for bj in 0..3 {
                    let (mut sum, mut cells) = (0.0, 0.0);
                    for i in bins(bi, extents[a]) {
                        for j in bins(bj, extents[b]) {
                            let c = values[offset
                                + ch * strides[channel_axis]
                                + i * strides[a]
                                + j * strides[b]];
                            sum += if part == 0 { c.re } else { c.im } as f64;
                            cells += 1.0;
                        }
                    }
                    key.push(sum / cells);
                }
            }
        }
    }
    key
}
