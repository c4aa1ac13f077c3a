//! Where the elements of a batch of 1D transforms live in a buffer.

use super::FftError;

/// One batch dimension: `count` transforms, `dist` elements apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchDim {
    pub count: u64,
    pub dist: u64,
}

/// A batch of 1D transforms in a buffer of complex elements: element `n` of transform
/// `b = b0 + c0*(b1 + c1*b2)` is at `offset + n*stride + b0*d0 + b1*d1 + b2*d2` (in elements).
///
/// This covers a contiguous batch, an axis of a row-major array (the U1 stage's length-2n transform
/// along a slow axis), and transforms inside a padded pitch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub offset: u64,
    pub stride: u64,
    /// Fastest-varying first; at most three.
    pub batch: Vec<BatchDim>,
}

impl Layout {
    /// `batch` contiguous transforms of `len` elements, one after the other.
    pub fn contiguous(len: usize, batch: usize) -> Self {
        Self {
            offset: 0,
            stride: 1,
            batch: vec![BatchDim {
                count: batch as u64,
                dist: len as u64,
            }],
        }
    }

    /// Axis `axis` of a row-major array of `shape` (element offset 0): every other axis is batch.
    pub fn axis_of(shape: &[usize], axis: usize) -> Self {
        let after: u64 = shape[axis + 1..].iter().map(|&s| s as u64).product();
        let before: u64 = shape[..axis].iter().map(|&s| s as u64).product();
        Self {
            offset: 0,
            stride: after,
            batch: vec![
                BatchDim {
                    count: after,
                    dist: 1,
                },
                BatchDim {
                    count: before,
                    dist: shape[axis] as u64 * after,
                },
            ],
        }
    }

    /// Number of transforms.
    pub fn batch_count(&self) -> u64 {
        self.batch.iter().map(|d| d.count).product()
    }

    pub(crate) fn validate(&self, len: usize) -> Result<(), FftError> {
        if len == 0 {
            return Err(FftError::ZeroLength);
        }
        if self.stride == 0 {
            return Err(FftError::ZeroStride);
        }
        if self.batch.len() > 3 {
            return Err(FftError::TooManyBatchDims {
                got: self.batch.len(),
            });
        }
        if self.batch.iter().any(|d| d.count == 0) {
            return Err(FftError::EmptyBatch);
        }
        let count = self
            .batch
            .iter()
            .try_fold(1u64, |acc, d| acc.checked_mul(d.count))
            .ok_or_else(|| FftError::IndexOverflow("batch count exceeds 64 bits".into()))?;
        if count > u32::MAX as u64 {
            return Err(FftError::IndexOverflow(format!(
                "{count} transforms in one batch; at most {} are supported",
                u32::MAX
            )));
        }
        self.max_index(len)?;
        Ok(())
    }

    /// The largest element index the layout addresses.
    pub(crate) fn max_index(&self, len: usize) -> Result<u64, FftError> {
        let overflow =
            || FftError::IndexOverflow("the largest element index exceeds 64 bits".into());
        let mut max = (len as u64 - 1)
            .checked_mul(self.stride)
            .ok_or_else(overflow)?;
        max = max.checked_add(self.offset).ok_or_else(overflow)?;
        for d in &self.batch {
            let span = (d.count - 1).checked_mul(d.dist).ok_or_else(overflow)?;
            max = max.checked_add(span).ok_or_else(overflow)?;
        }
        Ok(max)
    }

    /// Element offset of element 0 of transform `b`.
    pub(crate) fn transform_base(&self, mut b: u64) -> u64 {
        let mut base = self.offset;
        for d in &self.batch {
            base += (b % d.count) * d.dist;
            b /= d.count;
        }
        base
    }

    /// Splits the batch into runs of consecutive transforms whose elements fit one binding of
    /// `window_elems` elements starting at a multiple of `align_elems`, with at most `max_count`
    /// transforms each.
    pub(crate) fn chunks(
        &self,
        len: usize,
        window_elems: u64,
        align_elems: u64,
        max_count: u64,
    ) -> Result<Vec<Chunk>, FftError> {
        let extent = (len as u64 - 1) * self.stride;
        // A binding must start at an aligned element, so a transform may need up to
        // `align_elems - 1` more elements of window than its own extent.
        let too_large = |lo: u64| FftError::TransformTooLarge {
            bytes: (extent + 1 + lo % align_elems) * 8,
            limit: window_elems * 8,
        };
        let total = self.batch_count();
        let mut chunks = Vec::new();
        let mut start = 0;
        while start < total {
            let first = self.transform_base(start);
            let (mut lo, mut hi) = (first, first + extent);
            if hi + 1 - lo / align_elems * align_elems > window_elems {
                return Err(too_large(lo));
            }
            let mut count = 1;
            while start + count < total && count < max_count {
                let base = self.transform_base(start + count);
                let (nlo, nhi) = (lo.min(base), hi.max(base + extent));
                if nhi + 1 - nlo / align_elems * align_elems > window_elems {
                    break;
                }
                (lo, hi) = (nlo, nhi);
                count += 1;
            }
            let window_start = lo / align_elems * align_elems;
            chunks.push(Chunk {
                start,
                count,
                window_start,
                window_len: hi + 1 - window_start,
            });
            start += count;
        }
        Ok(chunks)
    }
}

/// A run of transforms executed by one dispatch, and the binding window that holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub start: u64,
    pub count: u64,
    pub window_start: u64,
    pub window_len: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_layouts_address_every_element_once() {
        let shape = [3usize, 4, 5];
        for axis in 0..3 {
            let l = Layout::axis_of(&shape, axis);
            let mut seen = vec![0u8; 60];
            for b in 0..l.batch_count() {
                for n in 0..shape[axis] as u64 {
                    seen[(l.transform_base(b) + n * l.stride) as usize] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "axis {axis}: {seen:?}");
        }
    }

    #[test]
    fn chunks_cover_the_batch_and_respect_the_window() {
        let l = Layout {
            offset: 3,
            stride: 2,
            batch: vec![
                BatchDim { count: 5, dist: 1 },
                BatchDim { count: 7, dist: 40 },
            ],
        };
        let chunks = l.chunks(16, 64, 4, 1000).unwrap();
        assert_eq!(chunks.iter().map(|c| c.count).sum::<u64>(), 35);
        for c in &chunks {
            assert_eq!(c.window_start % 4, 0);
            assert!(c.window_len <= 64);
            for b in c.start..c.start + c.count {
                let base = l.transform_base(b);
                assert!(base >= c.window_start && base + 30 < c.window_start + c.window_len);
            }
        }
        assert!(matches!(
            l.chunks(40, 64, 4, 10),
            Err(FftError::TransformTooLarge { .. })
        ));
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(matches!(
            Layout::contiguous(4, 1).validate(0),
            Err(FftError::ZeroLength)
        ));
        assert!(matches!(
            Layout::contiguous(4, 0).validate(4),
            Err(FftError::EmptyBatch)
        ));
        let mut l = Layout::contiguous(4, 2);
        l.stride = 0;
        assert!(matches!(l.validate(4), Err(FftError::ZeroStride)));
        l.stride = u64::MAX / 2;
        assert!(matches!(l.validate(4), Err(FftError::IndexOverflow(_))));
        let l = Layout {
            offset: 0,
            stride: 1,
            batch: vec![BatchDim { count: 1, dist: 1 }; 4],
        };
        assert!(matches!(
            l.validate(4),
            Err(FftError::TooManyBatchDims { got: 4 })
        ));
    }
}
