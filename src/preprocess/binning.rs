//! Detector binning: `b x b` blocks of pixels become one pixel (and the volume's voxels `b`
//! times larger), for quick looks and searches.
//!
//! Units. A line integral `-ln(I/I0)` is dimensionless and does not depend on the pixel size, so
//! binning keeps it: intensities (counts, white and dark fields) are **summed** over each block
//! before the `-log` ([`bin_frames`]; the ratio of summed counts is the block's mean transmission,
//! and summing keeps photon statistics and dead pixels benign), and line integrals that arrive
//! already logged are averaged ([`bin_projections`], the block sum divided by `b^2`). The
//! reconstruction is in units of its own voxel, which is `b` times larger: it holds `b` times the
//! attenuation per voxel of the unbinned reconstruction of the same sample. Divide by `b` to
//! compare with an unbinned volume.
//!
//! Geometry. Pixel `w` is centred at coordinate `w`; binned pixel `j` covers pixels
//! `b j .. b j + b - 1` and is centred at `b j + (b - 1)/2`, so a rotation axis at column `c`
//! lies at binned column `(c - (b - 1)/2) / b` (set explicitly, never left to the default).
//! Pixels that do not fill a whole block at the right and bottom edges, and one more block where
//! the binned size would be odd (the operator needs even sizes), are dropped. The row origin
//! moves by at most one binned pixel, which only shifts the volume along z by less than one voxel.

use super::PreprocessError;
use crate::geometry::{DetectorColumn, Geometry};
use crate::io::Stack;
use crate::scan::Projections;

/// The largest `--binning` exponent, as tomocupy's (`--binning 3`: 8 x 8 pixels).
pub const MAX_BINNING: u32 = 3;

/// `--binning b` of the command lines (`lamino`'s and the viewer's): tomocupy's exponent, the
/// detector binned by 2^b; the message says what is expected.
pub fn parse_binning(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(b) if b <= MAX_BINNING => Ok(b),
        _ => Err(format!(
            "expected an exponent 0 to {MAX_BINNING}, as tomocupy's: the detector is binned by \
             2^b (0 none, 1 2 x 2, 2 4 x 4, 3 8 x 8 pixels)"
        )),
    }
}

/// The binning factor of the exponent `b` (the unit of [`bin_projections`] and
/// [`LoadOptions::binning`](crate::recon::input::LoadOptions::binning)).
pub fn binning_factor(b: u32) -> usize {
    1 << b
}

/// The largest even count of whole `b`-blocks in `n` pixels.
fn binned_len(n: usize, b: usize) -> usize {
    n / b / 2 * 2
}

fn check_factor(b: usize) -> Result<(), PreprocessError> {
    if b == 0 {
        return Err(PreprocessError::BadBinning {
            factor: b,
            reason: "the binning factor must be at least 1".into(),
        });
    }
    Ok(())
}

/// The geometry of `g`'s scan binned by `b`: detector and volume sizes divided by `b` (rounded
/// down to even), the rotation axis in binned columns.
pub fn bin_geometry(g: &Geometry, b: usize) -> Result<Geometry, PreprocessError> {
    bin_geometry_by(g, [b, b])
}

/// [`bin_geometry`] with the rows (and the volume's z) binned by `rows` and the columns (and
/// the volume's y and x) by `columns`.
pub(super) fn bin_geometry_by(
    g: &Geometry,
    [rows, columns]: [usize; 2],
) -> Result<Geometry, PreprocessError> {
    check_factor(rows)?;
    check_factor(columns)?;
    if rows == 1 && columns == 1 {
        return Ok(g.clone());
    }
    let sizes = [
        ("deth", g.deth, rows),
        ("detw", g.detw, columns),
        ("n0", g.n0, rows),
        ("n1", g.n1, columns),
        ("n2", g.n2, columns),
    ];
    if let Some((name, n, b)) = sizes
        .iter()
        .find(|(_, n, b)| *b > 1 && binned_len(*n, *b) < 2)
    {
        return Err(PreprocessError::BadBinning {
            factor: *b,
            reason: format!("{name} = {n} leaves fewer than 2 binned pixels"),
        });
    }
    let [deth, detw, n0, n1, n2] = sizes.map(|(_, n, b)| if b > 1 { binned_len(n, b) } else { n });
    let b = columns as f64;
    Ok(Geometry {
        n0,
        n1,
        n2,
        deth,
        detw,
        center: Some(DetectorColumn::recorded(g.rotation_axis()).in_binned(columns)),
        // The volume's centre in binned voxels.
        offset: [g.offset[0] / rows as f64, g.offset[1] / b, g.offset[2] / b],
        // The projections' shifts in binned pixels (differences: no half-pixel moves).
        shifts: g
            .shifts
            .iter()
            .map(|&[du, dv]| [du / b, dv / rows as f64])
            .collect(),
        ..g.clone()
    })
}

/// Sums `b x b` blocks of every frame of `stack` (intensities: counts, white and dark fields),
/// dropping the edge pixels [`bin_geometry`] drops. Sums are formed in f64. `b = 1` returns the
/// stack itself.
pub fn bin_frames(stack: Stack, b: usize) -> Result<Stack, PreprocessError> {
    check_factor(b)?;
    // Unbinned frames of any size go through (a 1-row detector is one CT slice).
    if b == 1 {
        return Ok(stack);
    }
    let [count, h, w] = stack.shape;
    let (hb, wb) = (binned_len(h, b), binned_len(w, b));
    if hb < 2 || wb < 2 {
        return Err(PreprocessError::BadBinning {
            factor: b,
            reason: format!("frames of {h} x {w} leave fewer than 2 binned pixels"),
        });
    }
    Ok(block_sums(&stack.values, [count, h, w], [b, b]))
}

/// The sums (formed in f64) of the `bh x bw` blocks of every frame of `values`, frames of
/// `[count, h, w]`, the edge pixels [`bin_geometry`] drops left out (none along an axis binned
/// by 1). It reads `values` where they lie: [`bin_projections`] bins a scan without a second
/// copy of it.
fn block_sums(values: &[f32], [count, h, w]: [usize; 3], [bh, bw]: [usize; 2]) -> Stack {
    let kept = |n: usize, b: usize| if b > 1 { binned_len(n, b) } else { n };
    let (hb, wb) = (kept(h, bh), kept(w, bw));
    let mut sums = Vec::with_capacity(count * hb * wb);
    for frame in values.chunks_exact(h * w) {
        for i in 0..hb {
            for j in 0..wb {
                let mut sum = 0.0f64;
                for r in bh * i..bh * (i + 1) {
                    let row = &frame[r * w + bw * j..r * w + bw * (j + 1)];
                    sum += row.iter().map(|&v| v as f64).sum::<f64>();
                }
                sums.push(sum as f32);
            }
        }
    }
    Stack {
        shape: [count, hb, wb],
        values: sums,
    }
}

/// Line integrals binned by `b`: the mean over each `b x b` block (the block's sum over `b^2`),
/// with the geometry of [`bin_geometry`]. Only the angles held are binned (an MPI rank's share
/// stays its share).
pub fn bin_projections(p: &Projections, b: usize) -> Result<Projections, PreprocessError> {
    bin_projections_by(p, [b, b])
}

/// Line integrals with every `b` columns averaged and the rows kept: the binning of a plain-CT
/// axis search, whose detector rows are slices of their own (so a 2-row detector bins too).
/// The volume's y and x are binned with the columns, its z kept.
pub(super) fn bin_columns(p: &Projections, b: usize) -> Result<Projections, PreprocessError> {
    bin_projections_by(p, [1, b])
}

/// Line integrals binned by `rows x columns` blocks: each block's mean.
fn bin_projections_by(
    p: &Projections,
    factors: [usize; 2],
) -> Result<Projections, PreprocessError> {
    let g = p.geometry();
    let geometry = bin_geometry_by(g, factors)?;
    if factors == [1, 1] {
        return Ok(p.clone());
    }
    let angles = p.angles();
    // The sizes are checked by bin_geometry_by.
    let sums = block_sums(p.values(), [angles.len(), g.deth, g.detw], factors);
    let inv = 1.0 / (factors[0] * factors[1]) as f32;
    let values = sums.values.iter().map(|v| v * inv).collect();
    Ok(Projections::part(geometry, angles, values)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Tilt;

    #[test]
    fn binning_is_tomocupys_exponent() {
        let factors: Vec<usize> = ["0", "1", "2", "3"]
            .iter()
            .map(|s| binning_factor(parse_binning(s).unwrap()))
            .collect();
        assert_eq!(factors, [1, 2, 4, 8]);
        for bad in ["4", "-1", "2.0", "x"] {
            let e = parse_binning(bad).unwrap_err();
            assert!(e.contains("2^b"), "{bad}: {e}");
        }
    }

    #[test]
    fn frames_are_summed_in_blocks_and_ragged_edges_dropped() {
        // 2 frames of 5 x 9: binning by 2 keeps 4 x 8 (the last row and column do not fill a
        // block), binning by 4 keeps 1 x 2 -> too few rows.
        let stack = Stack {
            shape: [2, 5, 9],
            values: (0..90).map(|i| i as f32).collect(),
        };
        let b2 = bin_frames(stack.clone(), 2).unwrap();
        assert_eq!(b2.shape, [2, 2, 4]);
        // Frame 1, binned (1, 3): pixels (2..4, 6..8) of frame 1 = 45 + r*9 + c.
        let expect: f32 = [(2, 6), (2, 7), (3, 6), (3, 7)]
            .iter()
            .map(|&(r, c)| (45 + r * 9 + c) as f32)
            .sum();
        assert_eq!(b2.values[4 * 2 + 4 + 3], expect);
        assert!(matches!(
            bin_frames(stack.clone(), 4),
            Err(PreprocessError::BadBinning { factor: 4, .. })
        ));
        assert!(matches!(
            bin_frames(stack.clone(), 0),
            Err(PreprocessError::BadBinning { factor: 0, .. })
        ));
        assert_eq!(bin_frames(stack.clone(), 1).unwrap(), stack);
    }

    #[test]
    fn binned_geometry_keeps_the_rotation_axis_where_it_physically_is() {
        let g = Geometry {
            center: Some(70.3),
            ..Geometry::for_detector(64, 132, vec![0.0, 1.0], Tilt::from_phi(1.9))
        };
        let b = bin_geometry(&g, 4).unwrap();
        // 132 / 4 = 33 blocks, 32 kept (even).
        assert_eq!((b.deth, b.detw, b.n0, b.n1, b.n2), (16, 32, 16, 32, 32));
        // Binned column j is centred at 4 j + 1.5.
        let c = b.center.unwrap();
        assert!((4.0 * c + 1.5 - 70.3).abs() < 1e-12, "{c}");
        // The default axis (column 66) maps to 16.125, not to the binned default 16.
        let d = bin_geometry(&Geometry { center: None, ..g }, 4).unwrap();
        assert_eq!(d.center, Some(16.125));
        assert!(bin_geometry(&Geometry::cube(8, 2, Tilt::from_phi(1.9)), 8).is_err());
    }

    #[test]
    fn columns_alone_bin_a_two_row_detector() {
        let g = Geometry {
            center: Some(9.3),
            shifts: vec![[3.0, 1.0], [-1.0, 0.5], [0.0, 0.0]],
            ..Geometry::for_detector(2, 20, vec![0.0, 1.0, 2.0], Tilt::CT)
        };
        let values: Vec<f32> = (0..g.data_len()).map(|i| (i % 11) as f32).collect();
        let p = Projections::new(g.clone(), values.clone()).unwrap();
        assert!(bin_projections(&p, 2).is_err());
        let b = bin_columns(&p, 2).unwrap();
        let bg = b.geometry();
        assert_eq!((bg.deth, bg.detw, bg.n0, bg.n1, bg.n2), (2, 10, 2, 10, 10));
        assert!((2.0 * bg.center.unwrap() + 0.5 - 9.3).abs() < 1e-12);
        // The projections' shifts in binned pixels: columns halved, rows kept.
        assert_eq!(bg.shifts, [[1.5, 1.0], [-0.5, 0.5], [0.0, 0.0]]);
        let at = |t: usize, v: usize, w: usize| values[(t * 2 + v) * 20 + w];
        assert_eq!(
            b.values()[(2 * 2 + 1) * 10 + 3],
            (at(2, 1, 6) + at(2, 1, 7)) / 2.0
        );
    }

    #[test]
    fn binned_line_integrals_are_block_means() {
        let g = Geometry::cube(8, 2, Tilt::from_phi(1.9));
        let values: Vec<f32> = (0..g.data_len()).map(|i| (i % 7) as f32).collect();
        let p = Projections::new(g.clone(), values.clone()).unwrap();
        let b = bin_projections(&p, 2).unwrap();
        assert_eq!(b.geometry().detw, 4);
        let at = |t: usize, v: usize, w: usize| values[(t * 8 + v) * 8 + w];
        let mean = (at(1, 2, 4) + at(1, 2, 5) + at(1, 3, 4) + at(1, 3, 5)) / 4.0;
        assert_eq!(b.values()[(4 + 1) * 4 + 2], mean);
    }
}
