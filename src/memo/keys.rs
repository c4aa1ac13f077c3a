//! Host-side keys: for chunks whose stage-in reads host arrays (a streaming plan), the input
//! values the stage-in would form and the 3x3-pooled key the device's `pool_key` would compute
//! from them, bit for bit, so that such chunks are keyed and decided without an upload.

use num_complex::Complex32;

use crate::operator::Block;

/// The complex values a chunk's stage-in forms from `blocks` (the host blocks it uploads, in
/// binding order): one real array (imaginary parts 0), one complex array, or the difference of
/// two complex arrays, with the device's f32 arithmetic.
pub(super) fn chunk_values(len: usize, blocks: &[Vec<f32>]) -> Vec<Complex32> {
    match blocks {
        [x] if x.len() == len => x.iter().map(|&re| Complex32::new(re, 0.0)).collect(),
        [x] => bytemuck::cast_slice(x).to_vec(),
        [x, y] => x
            .chunks_exact(2)
            .zip(y.chunks_exact(2))
            .map(|(a, b)| Complex32::new(a[0] - b[0], a[1] - b[1]))
            .collect(),
        _ => unreachable!("a stage-in reads one or two arrays"),
    }
}

/// The key the device's `pool_key` computes for a chunk whose input block is `x` (`input`'s
/// extents, row-major). The same f32 operations in the same order (sums over the bins, then one
/// division), so the same bits where the device rounds division exactly (as lavapipe does; WGSL
/// allows 2.5 ulp).
pub(super) fn host_pooled_key(input: &Block, x: &[Complex32]) -> Vec<f32> {
    let value = |i: usize, part: usize| [x[i].re, x[i].im][part];
    let e = input.extents.map(|e| e as usize);
    let channel_axis = input.channel_axis;
    let (axis_a, axis_b) = match channel_axis {
        0 => (1, 2),
        2 => (0, 1),
        _ => (0, 2),
    };
    let strides = [e[1] * e[2], e[2], 1];
    let (na, nb) = (e[axis_a], e[axis_b]);
    let bin = |i: usize, n: usize| i * n / 3..((i + 1) * n).div_ceil(3);
    let mut key = Vec::with_capacity(18 * e[channel_axis]);
    for channel in 0..e[channel_axis] {
        for part in 0..2 {
            for bi in 0..3 {
                for bj in 0..3 {
                    let mut sum = 0f32;
                    for a in bin(bi, na) {
                        for b in bin(bj, nb) {
                            let i = channel * strides[channel_axis]
                                + a * strides[axis_a]
                                + b * strides[axis_b];
                            sum += value(i, part);
                        }
                    }
                    let cells = bin(bi, na).len() * bin(bj, nb).len();
                    key.push(sum / cells as f32);
                }
            }
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Geometry;
    use crate::geometry::Tilt;
    use crate::memo::gpu::{self, Shape, StageDevice};
    use crate::operator::{LaminoOperator, OperatorOptions, Space, Stage};
    use crate::random::SplitMix64;

    use crate::gpu::test_context as ctx;

    #[test]
    fn a_wave_stages_every_chunk_and_its_keys_are_the_reference_pooling() {
        let ctx = ctx();
        // 20 and 14 are not multiples of 3, so PyTorch's bins overlap.
        let mut g = Geometry::cube(20, 7, Tilt::from_phi(2.0));
        g.deth = 14;
        let options = OperatorOptions {
            max_chunk_y: Some(6),
            max_chunk_rows: Some(5),
            ..OperatorOptions::default()
        };
        let op = LaminoOperator::new(&ctx, &g, &options).unwrap();
        let mut rng = SplitMix64::new(1);
        let scalars = crate::array::Scalars::new(&ctx, 1, 1).unwrap();
        let arrays = [Space::Volume, Space::Spectrum, Space::Data].map(|space| {
            let len = space.shape(&g).iter().product::<usize>();
            let v: Vec<Complex32> = (0..len)
                .map(|_| Complex32::new(rng.next_f64() as f32, rng.next_f64() as f32 - 0.5))
                .collect();
            let field = crate::array::Field::zeros(&ctx, "input", space.layout(&g, 2)).unwrap();
            ctx.write(field.buffer(), 0, &v);
            (space, field)
        });
        let field = |space| &arrays.iter().find(|(s, _)| *s == space).unwrap().1;
        for stage in Stage::ALL {
            let chunks = op.chunk_count(stage);
            let ios: Vec<(&Block, &Block)> = (0..chunks).map(|j| op.chunk_io(stage, j)).collect();
            let shape = Shape {
                chunks,
                in_max: ios[0].0.len(),
                out_max: ios[0].1.len(),
                key_max: 18 * ios[0].0.extents[ios[0].0.channel_axis],
                host_tier: true,
                audit: false,
            };
            let plan = gpu::plan(&shape, 1 << 30, ctx.max_binding_bytes()).unwrap();
            assert_eq!(plan.wave, chunks, "{stage:?}");
            let buffers = (&ios[0].0.buffer, &ios[0].1.buffer);
            let dev = StageDevice::new(&ctx, buffers, &shape, &plan).unwrap();
            let (from, to) = stage.apply().spaces();
            let application = op
                .application(
                    &ctx,
                    &scalars,
                    None,
                    stage.apply(),
                    crate::operator::Source::Complex(field(from)),
                    crate::operator::Sink::Complex(field(to)),
                )
                .unwrap();
            // Slots in reverse, so that slot and chunk differ.
            let slot = |j: usize| chunks - 1 - j;
            let mut rec = ctx.recorder("test");
            for (j, (input, _)) in ios.iter().enumerate() {
                op.record_chunk_in(&ctx, &mut rec, &application, 0, j)
                    .unwrap();
                dev.record_copy_in(&ctx, &mut rec, j, input, slot(j));
            }
            let inputs: Vec<(&Block, usize)> = ios
                .iter()
                .enumerate()
                .map(|(j, io)| (io.0, slot(j)))
                .collect();
            dev.record_keys(&ctx, &mut rec, &inputs);
            ctx.submit(rec).unwrap();
            let lens: Vec<u64> = ios
                .iter()
                .map(|(i, _)| 18 * i.extents[i.channel_axis])
                .collect();
            let (keys, demoted) = dev.read_keys(&ctx, &lens, 0).unwrap();
            assert!(demoted.is_empty());
            for (j, (input, _)) in ios.iter().enumerate() {
                let e = input.extents.map(|e| e as usize);
                let staged: Vec<Complex32> = ctx
                    .read(dev.slab(), dev.slot_offsets(slot(j)).0, e.iter().product())
                    .unwrap();
                let want = crate::reference::pooled_key(
                    &staged,
                    0,
                    [e[1] * e[2], e[2], 1],
                    e,
                    input.channel_axis,
                );
                assert_eq!(keys[j].len(), want.len(), "{stage:?}");
                // The key pooled on the host from the same block (as a complex, a real and a
                // difference source) has the device key's bits.
                let words: Vec<f32> = bytemuck::cast_slice(&staged).to_vec();
                let n = staged.len();
                let key_of = |blocks: &[Vec<f32>]| host_pooled_key(input, &chunk_values(n, blocks));
                let host = key_of(std::slice::from_ref(&words));
                assert_eq!(host, keys[j], "{stage:?} chunk {j}: host key");
                let re: Vec<f32> = staged.iter().map(|c| c.re).collect();
                let real = key_of(std::slice::from_ref(&re));
                let zero = vec![0.0; words.len()];
                let difference = key_of(&[words.clone(), zero]);
                assert_eq!(difference, keys[j], "{stage:?} chunk {j}: difference");
                for (k, (r, h)) in real.iter().zip(&host).enumerate() {
                    // Key value k pools the real part when (k / 9) is even, else the imaginary
                    // part, which a real source has as zero.
                    let want = if (k / 9) % 2 == 0 { *h } else { 0.0 };
                    assert_eq!(
                        r.to_bits(),
                        want.to_bits(),
                        "{stage:?} chunk {j} real key[{k}]"
                    );
                }
                for (i, (&got, &w)) in keys[j].iter().zip(&want).enumerate() {
                    assert!(
                        (got as f64 - w).abs() <= 1e-6 * (1.0 + w.abs()),
                        "{stage:?} chunk {j} key[{i}]: {got} vs {w}"
                    );
                }
                // The operator's input block still holds the last chunk: its staged copy is the
                // same bits (the last chunk is the short one).
                if j + 1 == chunks {
                    let local: Vec<Complex32> = ctx
                        .read(&input.buffer, 0, (input.buffer.bytes() / 8) as usize)
                        .unwrap();
                    let v = input.view;
                    for (k, value) in staged.iter().enumerate() {
                        let (a, b, c) = (k / (e[1] * e[2]), (k / e[2]) % e[1], k % e[2]);
                        let at = v.offset as usize
                            + a * v.strides[0] as usize
                            + b * v.strides[1] as usize
                            + c * v.strides[2] as usize;
                        assert_eq!(value.re.to_bits(), local[at].re.to_bits());
                        assert_eq!(value.im.to_bits(), local[at].im.to_bits());
                    }
                }
            }
        }
    }
}
