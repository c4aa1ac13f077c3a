//! `lamino bench operator`: L and L* per stage, with the FFT share of each, against the f32 CPU
//! implementation on all cores; and the arrays operator applications are timed on (shared with
//! `lamino bench admm` and the criterion benches).

use std::time::Instant;

use num_complex::Complex;
use serde::Serialize;

use super::{median, print_json, time_once, BenchError};
use crate::fft::{Direction, FftError, FftPlan, Normalization};
use crate::geometry::Tilt;
use crate::gpu::{GpuContext, Recorder};
use crate::random::SplitMix64;

/// One line of `lamino bench operator --json`: one application of L or L*.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorBenchRecord {
    /// "L" or "L*".
    pub operator: &'static str,
    /// Detector side n (n x n pixels; the default volume is n^3 voxels).
    pub size: usize,
    /// The volume timed `(n0, n1, n2)`: the default n^3, or a slab of it (`--slab`).
    pub volume: [usize; 3],
    /// The detector `(rows, columns)` timed: n x n, or a slab's shadow rows.
    pub detector: [usize; 2],
    pub angles: usize,
    /// Median GPU time of the whole application (L and L* alternated), milliseconds.
    pub ms: f64,
    /// Median GPU time of each stage (each measured on its own), milliseconds.
    pub ms_u1: f64,
    pub ms_u2: f64,
    pub ms_f: f64,
    /// GPU time of the FFTs inside each stage (the operator's own sizes and layouts, once per
    /// chunk as the stage runs them), milliseconds, and their share of the stage's time.
    pub fft_ms_u1: f64,
    pub fft_ms_u2: f64,
    pub fft_ms_f: f64,
    pub fft_share_u1: f64,
    pub fft_share_u2: f64,
    pub fft_share_f: f64,
    /// Bytes of FFT workspace the operator's plans bind in the context's shared pool.
    pub fft_workspace_bytes: u64,
    /// Bytes the shared pool saves against workspace of each plan's own (the sum of the plans'
    /// needs minus the pool).
    pub fft_workspace_saved_bytes: u64,
    /// Nonuniform points (deth z frequencies of every (y, x) column: deth * n1 * n2) gridded per
    /// second by the U1 stage.
    pub u1_points_per_s: f64,
    /// Nonuniform points (ntheta * deth * detw) gridded per second by the U2 stage.
    pub u2_points_per_s: f64,
    /// The time of L* over the time of L: the median of the ratios of alternated L, L* pairs, so
    /// that both see the same machine load (on the L record, that of the L* record after it).
    /// The adjoint does the forward's arithmetic, so 1 is the goal.
    pub adjoint_over_forward: f64,
    /// How U2* weighed its points (`AdjointGridding`): "tabulated" or "evaluated" on the L*
    /// records (both, side by side, where one detector row's records fit a binding), absent on
    /// the L record.
    pub adjoint_gridding: Option<&'static str>,
    /// On an L* record beside another: the relative L2 difference of its output from the
    /// other's, from the same data (the two ways add the same products in the same order).
    pub adjoint_difference: Option<f64>,
    /// Bytes of the volume, spectrum and data arrays: what one application reads and writes at least.
    pub array_bytes: u64,
    /// Device memory the operator holds.
    pub device_bytes: u64,
    /// The same application with the f32 rustfft CPU implementation on all cores, milliseconds.
    pub cpu_ms: f64,
    /// cpu_ms / ms: how many times faster the GPU is.
    pub speedup_vs_cpu: f64,
    pub timing: &'static str,
    pub device: String,
}

/// Complex volume, spectrum and data arrays to time operator applications on (zeros until
/// written: no kernel branches on values, so the cost does not depend on them).
pub struct OperatorArrays {
    volume: crate::array::Field,
    spectrum: crate::array::Field,
    data: crate::array::Field,
    scalars: crate::array::Scalars,
}

impl OperatorArrays {
    pub fn new(
        ctx: &GpuContext,
        g: &crate::geometry::Geometry,
    ) -> Result<Self, crate::gpu::GpuError> {
        use crate::array::{Field, Scalars};
        use crate::operator::Space;
        Ok(Self {
            volume: Field::zeros(ctx, "volume", Space::Volume.layout(g, 2))?,
            spectrum: Field::zeros(ctx, "spectrum", Space::Spectrum.layout(g, 2))?,
            data: Field::zeros(ctx, "data", Space::Data.layout(g, 2))?,
            scalars: Scalars::new(ctx, 1, 1)?,
        })
    }

    /// `what` from the array of its input space to the array of its output space (the 2D FFT
    /// stage in place on the data).
    pub fn application(
        &self,
        ctx: &GpuContext,
        op: &crate::operator::LaminoOperator,
        what: crate::operator::Apply,
    ) -> Result<crate::operator::Application, crate::operator::OperatorError> {
        use crate::operator::{Sink, Source, Space};
        let field = |space| match space {
            Space::Volume => &self.volume,
            Space::Spectrum => &self.spectrum,
            Space::Data => &self.data,
        };
        let (from, to) = what.spaces();
        op.application(
            ctx,
            &self.scalars,
            None,
            what,
            Source::Complex(field(from)),
            Sink::Complex(field(to)),
        )
    }
}

/// Times L and L* for an `n`^3 volume, `angles` projections at a 20 degree tilt, and with
/// `slab` the same for only those z planes of it (the records of both, the cube's first).
pub fn bench_operator(
    ctx: &GpuContext,
    n: usize,
    angles: usize,
    repeats: usize,
    slab: Option<std::ops::Range<usize>>,
) -> Result<Vec<OperatorBenchRecord>, crate::operator::OperatorError> {
    use crate::geometry::{Geometry, VolumeBox};
    let cube = Geometry::cube(n, angles, Tilt::from_degrees(20.0));
    let mut records = bench_geometry(ctx, &cube, repeats)?;
    if let Some(z) = slab {
        let g = cube.with_subvolume(&VolumeBox {
            z,
            ..VolumeBox::full(&cube)
        })?;
        // The detector rows the slab projects onto, as `reconstruct --slab` cuts them.
        let g = g.with_detector_rows(g.shadow_rows())?;
        records.extend(bench_geometry(ctx, &g, repeats)?);
    }
    Ok(records)
}

/// Times L and L* of the geometry `g` (a square detector): L once, L* for each way U2* can weigh
/// its points here (tabulated where one detector row's records fit a binding, and evaluated), with
/// L*/L from pairs alternated with L for each.
fn bench_geometry(
    ctx: &GpuContext,
    g: &crate::geometry::Geometry,
    repeats: usize,
) -> Result<Vec<OperatorBenchRecord>, crate::operator::OperatorError> {
    use crate::operator::{AdjointGridding, Apply, LaminoOperator, OperatorOptions};
    use crate::reference::CpuOperator;
    let (g, n, angles) = (g.clone(), g.detw, g.ntheta());
    let volume = SplitMix64::new(1).complex_uniform(g.volume_len());
    let data = SplitMix64::new(2).complex_uniform(g.data_len());
    let arrays = OperatorArrays::new(ctx, &g)?;
    let mut ways = Vec::new();
    for way in [AdjointGridding::Tabulated, AdjointGridding::Evaluated] {
        let options = OperatorOptions {
            adjoint_gridding: way,
            ..OperatorOptions::default()
        };
        match LaminoOperator::new(ctx, &g, &options) {
            Ok(op) => ways.push(op),
            // Records beyond a binding: the evaluated way alone.
            Err(crate::operator::OperatorError::TooLarge { .. })
                if way == AdjointGridding::Tabulated => {}
            Err(e) => return Err(e),
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = CpuOperator::new(&g, threads);
    let cpu_ms = |forward: bool| {
        let mut times = Vec::new();
        for _ in 0..repeats.clamp(1, 3) {
            let start = Instant::now();
            let out = if forward {
                cpu.forward(&volume)
            } else {
                cpu.adjoint(&data)
            };
            times.push(start.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(out);
        }
        median(times)
    };
    let (cpu_forward, cpu_adjoint) = (cpu_ms(true), cpu_ms(false));
    let [fft_u1, fft_u2, fft_f] = operator_fft_ms(ctx, &g, ways[0].chunks(), repeats)?;
    let array_bytes = (g.volume_len() + g.spectrum_len() + g.data_len()) as u64 * 8;
    let shape = Apply::Adjoint.spaces().0.shape(&g);
    let outputs = ways
        .iter()
        .map(|op| op.apply_host(ctx, Apply::Adjoint, &shape, &data))
        .collect::<Result<Vec<_>, _>>()?;
    let mut records = Vec::new();
    for (i, op) in ways.iter().enumerate() {
        let (whole_ms, ratio, timing) =
            time_forward_and_adjoint(ctx, op, &arrays, (&volume, &data), repeats)?;
        let time = |what: Apply| time_application(ctx, op, &arrays, what, repeats);
        // Each L* against the other's output.
        let difference = (outputs.len() == 2).then(|| complex_rel_l2(&outputs[i], &outputs[1 - i]));
        // L with the first way only (the forward is the same either way), then L*.
        let forward_run = (
            "L",
            whole_ms[0],
            [Apply::Usfft1d, Apply::Usfft2d, Apply::Fft2dAdjoint],
            cpu_forward,
        );
        let adjoint_run = (
            "L*",
            whole_ms[1],
            [Apply::Usfft1dAdjoint, Apply::Usfft2dAdjoint, Apply::Fft2d],
            cpu_adjoint,
        );
        let workspace = op.fft_workspace_bytes();
        for (name, ms, stages, cpu_ms) in (i == 0)
            .then_some(forward_run)
            .into_iter()
            .chain([adjoint_run])
        {
            // The data array is workspace for L*: its values change between repeats, its cost
            // does not (no kernel branches on values).
            ctx.write(arrays.data.buffer(), 0, &data);
            let (ms_u1, _) = time(stages[0])?;
            let (ms_u2, _) = time(stages[1])?;
            let (ms_f, _) = time(stages[2])?;
            let adjoint = name == "L*";
            records.push(OperatorBenchRecord {
                operator: name,
                size: n,
                volume: [g.n0, g.n1, g.n2],
                detector: [g.deth, g.detw],
                angles,
                ms,
                ms_u1,
                ms_u2,
                ms_f,
                fft_ms_u1: fft_u1,
                fft_ms_u2: fft_u2,
                fft_ms_f: fft_f,
                fft_share_u1: fft_u1 / ms_u1,
                fft_share_u2: fft_u2 / ms_u2,
                fft_share_f: fft_f / ms_f,
                fft_workspace_bytes: workspace.0,
                fft_workspace_saved_bytes: workspace.1.saturating_sub(workspace.0),
                u1_points_per_s: g.spectrum_len() as f64 / (ms_u1 / 1e3),
                u2_points_per_s: g.data_len() as f64 / (ms_u2 / 1e3),
                adjoint_over_forward: ratio,
                adjoint_gridding: adjoint.then_some(op.adjoint_gridding().name()),
                adjoint_difference: difference.filter(|_| adjoint),
                array_bytes,
                device_bytes: op.device_bytes(),
                cpu_ms,
                speedup_vs_cpu: cpu_ms / ms,
                timing,
                device: ctx.info().name.clone(),
            });
        }
    }
    Ok(records)
}

/// `|a - b| / |b|` of complex values (metrics::rel_l2 over their parts).
fn complex_rel_l2(a: &[Complex<f32>], b: &[Complex<f32>]) -> f64 {
    crate::metrics::rel_l2(bytemuck::cast_slice(a), bytemuck::cast_slice(b))
}

/// Median times of L and L* over `repeats` alternated pairs (after one untimed pair),
/// milliseconds, the median of the pairs' L*/L ratios, and how they were timed. Alternating puts
/// both under the same machine load, so the ratio holds where the load drifts within a run. Each
/// application starts from the `(volume, data)` inputs, so values cannot grow from pair to pair.
fn time_forward_and_adjoint(
    ctx: &GpuContext,
    op: &crate::operator::LaminoOperator,
    arrays: &OperatorArrays,
    (volume, data): (&[Complex<f32>], &[Complex<f32>]),
    repeats: usize,
) -> Result<([f64; 2], f64, &'static str), crate::operator::OperatorError> {
    use crate::operator::Apply;
    let forward = arrays.application(ctx, op, Apply::Forward)?;
    let adjoint = arrays.application(ctx, op, Apply::Adjoint)?;
    let (mut times, mut ratios) = ([Vec::new(), Vec::new()], Vec::new());
    let mut how = "wall";
    for i in 0..=repeats {
        ctx.write(arrays.volume.buffer(), 0, volume);
        let (l, h) = time_once(ctx, |rec| op.record(ctx, rec, &forward))?;
        ctx.write(arrays.data.buffer(), 0, data);
        let (l_adjoint, _) = time_once(ctx, |rec| op.record(ctx, rec, &adjoint))?;
        if i > 0 {
            times[0].push(l);
            times[1].push(l_adjoint);
            ratios.push(l_adjoint / l);
            how = h;
        }
    }
    let [l, l_adjoint] = times;
    Ok(([median(l), median(l_adjoint)], median(ratios), how))
}

/// Median time of `repeats` applications of `what` (after one untimed), milliseconds, and how
/// it was timed.
fn time_application(
    ctx: &GpuContext,
    op: &crate::operator::LaminoOperator,
    arrays: &OperatorArrays,
    what: crate::operator::Apply,
    repeats: usize,
) -> Result<(f64, &'static str), crate::operator::OperatorError> {
    let application = arrays.application(ctx, op, what)?;
    let mut times = Vec::new();
    let mut how = "wall";
    for i in 0..=repeats {
        let (ms, h) = time_once(ctx, |rec| op.record(ctx, rec, &application))?;
        if i > 0 {
            times.push(ms);
            how = h;
        }
    }
    Ok((median(times), how))
}

/// One line of `lamino bench operator --stage S --json`: one gridding stage alone.
#[derive(Debug, Clone, Serialize)]
pub struct StageBenchRecord {
    /// "U1", "U1*", "U2" or "U2*".
    pub stage: &'static str,
    /// Detector side n (n x n pixels, n^3 voxels).
    pub size: usize,
    pub angles: usize,
    /// Median time of the stage, milliseconds.
    pub ms: f64,
    /// Nonuniform points gridded per second (U1: deth * n1 * n2; U2: ntheta * deth * detw).
    pub points_per_s: f64,
    /// How U2* weighed its points (`AdjointGridding`), as resolved on this device.
    pub adjoint_gridding: &'static str,
    pub timing: &'static str,
    pub device: String,
}

/// A gridding stage `lamino bench operator --stage` times alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GriddingStage {
    U1,
    U1Adjoint,
    U2,
    U2Adjoint,
}

impl GriddingStage {
    /// The stage as `--stage` names it, with its name in the records.
    pub const ALL: [(&'static str, Self, &'static str); 4] = [
        ("u1", Self::U1, "U1"),
        ("u1-adjoint", Self::U1Adjoint, "U1*"),
        ("u2", Self::U2, "U2"),
        ("u2-adjoint", Self::U2Adjoint, "U2*"),
    ];

    fn name(self) -> &'static str {
        Self::ALL.iter().find(|e| e.1 == self).map_or("", |e| e.2)
    }

    fn apply(self) -> crate::operator::Apply {
        use crate::operator::Apply;
        match self {
            Self::U1 => Apply::Usfft1d,
            Self::U1Adjoint => Apply::Usfft1dAdjoint,
            Self::U2 => Apply::Usfft2d,
            Self::U2Adjoint => Apply::Usfft2dAdjoint,
        }
    }
}

/// Times the gridding stage `stage` alone for an `n`^3 volume and `angles` projections at a 20
/// degree tilt, U2* weighing its points as `adjoint` says: no whole application, no FFT share,
/// no CPU reference, so that a run holds little besides the stage (what an instruction count
/// under callgrind needs: the difference between two repeat counts is the stage's own).
pub fn bench_stage(
    ctx: &GpuContext,
    (n, angles): (usize, usize),
    repeats: usize,
    stage: GriddingStage,
    adjoint: crate::operator::AdjointGridding,
) -> Result<StageBenchRecord, crate::operator::OperatorError> {
    use crate::geometry::Geometry;
    use crate::operator::{LaminoOperator, OperatorOptions};
    let g = Geometry::cube(n, angles, Tilt::from_degrees(20.0));
    let points = match stage {
        GriddingStage::U1 | GriddingStage::U1Adjoint => g.spectrum_len(),
        GriddingStage::U2 | GriddingStage::U2Adjoint => g.data_len(),
    };
    let options = OperatorOptions {
        adjoint_gridding: adjoint,
        ..OperatorOptions::default()
    };
    let op = LaminoOperator::new(ctx, &g, &options)?;
    let arrays = OperatorArrays::new(ctx, &g)?;
    let (ms, timing) = time_application(ctx, &op, &arrays, stage.apply(), repeats)?;
    Ok(StageBenchRecord {
        stage: stage.name(),
        size: n,
        angles,
        ms,
        points_per_s: points as f64 / (ms / 1e3),
        adjoint_gridding: op.adjoint_gridding().name(),
        timing,
        device: ctx.info().name.clone(),
    })
}

/// Prints one gridding stage alone (see [`bench_stage`]): the median of `repeats`.
pub fn print_stage(
    ctx: &GpuContext,
    json: bool,
    (size, angles): (usize, usize),
    repeats: usize,
    stage: GriddingStage,
    adjoint: crate::operator::AdjointGridding,
) -> Result<(), BenchError> {
    let r = bench_stage(ctx, (size, angles), repeats.max(1), stage, adjoint)?;
    if json {
        print_json(&r)?;
    } else {
        // U2* names how it weighed its points.
        let way = match stage {
            GriddingStage::U2Adjoint => format!(" {}", r.adjoint_gridding),
            _ => String::new(),
        };
        println!(
            "{:<3}{way} n={} angles={}: {:.2} ms, {:.3e} points/s [{}]",
            r.stage, r.size, r.angles, r.ms, r.points_per_s, r.timing
        );
    }
    Ok(())
}

/// GPU time of the FFTs of the stages U1, U2 and F of one operator application: plans of the
/// operator's sizes and layouts (U1 along the 2 n0 axis of a (2 n0, chunk_y n2) grid, U2 over the
/// (chunk_rows, 2 n1, 2 n2) grids, F over the (chunk_angles, deth, detw) projections), each timed
/// on its own and multiplied by the number of chunks the stage runs.
fn operator_fft_ms(
    ctx: &GpuContext,
    g: &crate::geometry::Geometry,
    (chunk_y, chunk_rows, chunk_angles): (usize, usize, usize),
    repeats: usize,
) -> Result<[f64; 3], FftError> {
    use crate::fft::{FftDescriptor, FftPlan1d, Layout};
    let time = |record: &dyn Fn(&mut Recorder), data: &crate::gpu::GpuBuffer, len: usize| {
        let zeros = vec![Complex::<f32>::new(0.0, 0.0); len];
        let mut times = Vec::new();
        for i in 0..=repeats {
            ctx.write(data, 0, &zeros);
            let (ms, _) = time_once(ctx, |rec| {
                record(rec);
                Ok(())
            })?;
            if i > 0 {
                times.push(ms);
            }
        }
        Ok::<f64, FftError>(median(times))
    };
    let columns = chunk_y * g.n2;
    let u1_len = 2 * g.n0 * columns;
    let u1_data = ctx.storage_buffer("bench u1 grid", u1_len as u64 * 8)?;
    // Specialised as the operator's own plans are.
    let u1 = FftPlan1d::specialized(
        ctx,
        FftDescriptor {
            len: 2 * g.n0,
            layout: Layout::axis_of(&[2 * g.n0, columns], 0),
            direction: Direction::Forward,
            normalization: Normalization::None,
        },
        &u1_data,
    )?;
    let u1_ms = time(&|rec| u1.record(rec), &u1_data, u1_len)? * g.n1.div_ceil(chunk_y) as f64;
    // The 2D FFTs of U2 and F: the last two axes of a batch of chunks.
    let time_2d = |label: &str, shape: [usize; 3]| {
        let len = shape.iter().product();
        let data = ctx.storage_buffer(label, len as u64 * 8)?;
        let plan = FftPlan::specialized(
            ctx,
            &shape,
            2,
            Direction::Forward,
            Normalization::None,
            &data,
        )?;
        time(&|rec| plan.record(rec), &data, len)
    };
    let u2_ms = time_2d("bench u2 grid", [chunk_rows, 2 * g.n1, 2 * g.n2])?
        * g.deth.div_ceil(chunk_rows) as f64;
    let f_ms = time_2d("bench projections", [chunk_angles, g.deth, g.detw])?
        * g.ntheta().div_ceil(chunk_angles) as f64;
    Ok([u1_ms, u2_ms, f_ms])
}

/// Prints L and L* for an `size`^3 volume seen at `angles` (and for its z planes `slab`): the
/// median of `repeats`.
pub fn print(
    ctx: &GpuContext,
    json: bool,
    size: usize,
    angles: usize,
    repeats: usize,
    slab: Option<std::ops::Range<usize>>,
) -> Result<(), BenchError> {
    for r in bench_operator(ctx, size, angles, repeats.max(1), slab)? {
        if json {
            print_json(&r)?;
        } else {
            // L* names how U2* weighed its points, and how far its output is from the other way's.
            let way = match (r.adjoint_gridding, r.adjoint_difference) {
                (Some(way), Some(d)) => format!(" {way} (rel. L2 {d:.1e} from the other)"),
                (Some(way), None) => format!(" {way}"),
                _ => String::new(),
            };
            println!(
                "{:<2}{way} n={} volume {}x{}x{} detector {}x{} angles={}: {:.2} ms (U1 {:.2}, U2 {:.2}, F {:.2}; FFT share {:.2}, {:.2}, {:.2}), U1 {:.3e} U2 {:.3e} points/s, L*/L {:.2}, CPU {:.2} ms ({:.2}x), FFT workspace {:.1} MiB shared ({:.1} MiB saved), device {:.1} MiB [{}]",
                r.operator,
                r.size,
                r.volume[0],
                r.volume[1],
                r.volume[2],
                r.detector[0],
                r.detector[1],
                r.angles,
                r.ms,
                r.ms_u1,
                r.ms_u2,
                r.ms_f,
                r.fft_share_u1,
                r.fft_share_u2,
                r.fft_share_f,
                r.u1_points_per_s,
                r.u2_points_per_s,
                r.adjoint_over_forward,
                r.cpu_ms,
                r.speedup_vs_cpu,
                r.fft_workspace_bytes as f64 / (1 << 20) as f64,
                r.fft_workspace_saved_bytes as f64 / (1 << 20) as f64,
                r.device_bytes as f64 / (1 << 20) as f64,
                r.timing
            );
        }
    }
    Ok(())
}
