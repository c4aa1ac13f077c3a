//! Benchmarks that print figures: ratios are measured in one run, on one device, so that VM noise
//! and clock changes cancel out as far as possible.

use std::time::Instant;

use bytemuck::{Pod, Zeroable};
use num_complex::Complex;
use serde::Serialize;

use crate::fft::{Direction, FftError, FftPlan, LaunchSource, Normalization, Strategy};
use crate::gpu::{GpuContext, KernelSpec, Recorder};
use crate::random::SplitMix64;
use crate::reference::fft_last_axes;
use crate::shaders;

/// One line of `lamino bench fft --json`.
#[derive(Debug, Clone, Serialize)]
pub struct FftBenchRecord {
    /// Transform shape (batch excluded).
    pub shape: Vec<usize>,
    /// Number of transforms.
    pub batch: usize,
    /// "auto" (the launches tuned on this device), "fused" (one pass per axis in workgroup memory)
    /// or "multipass" (at least two passes through global memory per axis), the last two with the
    /// untuned default launches.
    pub strategy: &'static str,
    /// Whether `Strategy::Auto` runs the same passes as this strategy on this device.
    pub auto: bool,
    /// Wall time of planning, milliseconds: kernel compilation, tables, bind groups, and for
    /// "auto" the tuning measurements (or the cache lookup when measured before).
    pub plan_ms: f64,
    /// Where the launches came from: "measured" (tuned while planning), "cache" (tuned earlier),
    /// "default" (untuned), or "mixed".
    pub launches_from: &'static str,
    /// Each axis's passes as "sub-length: launch", last axis first.
    pub launches: Vec<String>,
    /// Median GPU time of one batched forward transform, milliseconds.
    pub ms: f64,
    /// (bytes read + bytes written, once each) / time, in GB/s.
    pub gbps: f64,
    /// A copy kernel on the same device in the same run, GB/s: the memory-bandwidth bound.
    pub copy_gbps: f64,
    /// Median time of the same transforms with rustfft (f32) on all CPU cores, milliseconds.
    pub rustfft_ms: f64,
    /// "gpu-timestamps" or "wall" (submit to completion) when the device has no timestamps.
    pub timing: &'static str,
    /// Device the figures come from.
    pub device: String,
}

/// The shapes of the benchmark, each batched up to about `target_bytes`.
pub fn fft_bench_shapes() -> Vec<Vec<usize>> {
    vec![
        vec![256],
        vec![1024],
        vec![4096],
        vec![1 << 20],
        vec![256, 256],
        vec![512, 512],
        vec![768, 768],
        vec![64, 64, 64],
        vec![128, 128, 128],
    ]
}

/// CPU seconds this process has used, all threads (`None` where the platform does not say).
/// On a software adapter the device's work runs on the process's threads, so this is the work a
/// run did, less sensitive than wall time to other processes sharing the cores.
pub fn process_cpu_seconds() -> Option<f64> {
    #[cfg(unix)]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // Safety: clock_gettime writes the timespec it is given and nothing else.
        let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0;
        ok.then_some(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `record` once and returns its time in ms: GPU timestamps where the device has them, else
/// wall time from submit to completion.
fn time_once(
    ctx: &GpuContext,
    record: impl FnOnce(&mut Recorder) -> Result<(), crate::gpu::GpuError>,
) -> Result<(f64, &'static str), FftError> {
    let mut rec = ctx.timed_recorder("bench");
    record(&mut rec)?;
    let start = Instant::now();
    let gpu_ms = rec.finish_timed(ctx)?;
    let wall = start.elapsed().as_secs_f64() * 1e3;
    Ok(match gpu_ms {
        Some(ms) if ms > 0.0 => (ms, "gpu-timestamps"),
        _ => (wall, "wall"),
    })
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CopyParams {
    count: u32,
    pad: [u32; 3],
}

/// Invocations per workgroup of the copy kernel.
const COPY_WORKGROUP: u32 = 256;

/// Bandwidth of a plain copy of `bytes` bytes (read + write) in GB/s, median of `repeats`.
pub fn copy_gbps(ctx: &GpuContext, bytes: u64, repeats: usize) -> Result<f64, FftError> {
    let bytes = bytes.min(ctx.max_binding_bytes()) / 16 * 16;
    let src = ctx.storage_buffer("copy src", bytes)?;
    let dst = ctx.storage_buffer("copy dst", bytes)?;
    let count = (bytes / 16) as u32;
    let params = ctx.uniform("copy params", &CopyParams { count, pad: [0; 3] })?;
    let kernel = ctx.kernel(&KernelSpec {
        shader: &shaders::COPY,
        entry: "copy_vec4",
        overrides: vec![("WORKGROUP", COPY_WORKGROUP as f64)],
    })?;
    let bound = kernel.bind(ctx, &[(&src).into(), (&dst).into(), (&params).into()])?;
    let groups = count.div_ceil(COPY_WORKGROUP);
    time_once(ctx, |rec| {
        rec.dispatch(&bound, groups);
        Ok(())
    })?; // warm-up: pays shader compilation
    let mut times = Vec::new();
    for _ in 0..repeats {
        times.push(
            time_once(ctx, |rec| {
                rec.dispatch(&bound, groups);
                Ok(())
            })?
            .0,
        );
    }
    Ok(2.0 * bytes as f64 / (median(times) * 1e6))
}

/// Benchmarks one shape, batched to about `target_bytes`, with each strategy that applies to it.
pub fn bench_fft_shape(
    ctx: &GpuContext,
    shape: &[usize],
    target_bytes: u64,
    repeats: usize,
    copy_gbps: f64,
) -> Result<Vec<FftBenchRecord>, FftError> {
    let elems: usize = shape.iter().product();
    let batch = ((target_bytes / 8) as usize / elems).max(1);
    let mut full = vec![batch];
    full.extend_from_slice(shape);
    let total = batch * elems;
    let input = SplitMix64::new(42).complex_uniform(total);
    let data = ctx.upload("bench data", &input)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut cpu_times = Vec::new();
    let mut cpu: Vec<Complex<f32>> = input.clone();
    for _ in 0..repeats.clamp(1, 3) {
        cpu.copy_from_slice(&input);
        let start = Instant::now();
        fft_last_axes(&mut cpu, &full, shape.len(), Direction::Forward, threads);
        cpu_times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let rustfft_ms = median(cpu_times);
    let mut records = Vec::new();
    let mut auto_passes: Vec<Vec<usize>> = Vec::new();
    for (strategy, name) in [
        (Strategy::Auto, "auto"),
        (Strategy::Fused, "fused"),
        (Strategy::MultiPass, "multipass"),
    ] {
        let start = Instant::now();
        let plan = FftPlan::with_strategy(
            ctx,
            &full,
            shape.len(),
            Direction::Forward,
            Normalization::None,
            &data,
            strategy,
        )?;
        let plan_ms = start.elapsed().as_secs_f64() * 1e3;
        let axes = plan.axis_plans();
        let passes: Vec<Vec<usize>> = axes
            .iter()
            .map(|p| p.passes().iter().map(|x| x.sub).collect())
            .collect();
        if strategy == Strategy::Auto {
            auto_passes = passes.clone();
        } else if axes.iter().any(|p| p.strategy() != strategy) {
            continue; // this strategy does not apply to these lengths
        }
        let sources: Vec<LaunchSource> = axes
            .iter()
            .flat_map(|p| p.passes().iter().map(|x| x.source))
            .collect();
        let launches_from = match sources.first() {
            Some(first) if sources.iter().all(|s| s == first) => match first {
                LaunchSource::Measured => "measured",
                LaunchSource::Cache => "cache",
                LaunchSource::Default => "default",
            },
            _ => "mixed",
        };
        let launches = axes
            .iter()
            .flat_map(|p| {
                p.passes()
                    .iter()
                    .map(|x| format!("{}: {}", x.sub, x.launch))
            })
            .collect();
        let mut times = Vec::new();
        let mut timing = "wall";
        for i in 0..=repeats {
            // Fresh input each time so repeated unnormalised transforms cannot overflow.
            ctx.write(&data, 0, &input);
            let (ms, how) = time_once(ctx, |rec| {
                plan.record(rec);
                Ok(())
            })?;
            if i > 0 {
                times.push(ms);
                timing = how;
            }
        }
        let ms = median(times);
        records.push(FftBenchRecord {
            shape: shape.to_vec(),
            batch,
            strategy: name,
            auto: passes == auto_passes,
            plan_ms,
            launches_from,
            launches,
            ms,
            gbps: 2.0 * (total * 8) as f64 / (ms * 1e6),
            copy_gbps,
            rustfft_ms,
            timing,
            device: ctx.info().name.clone(),
        });
    }
    Ok(records)
}

/// One line of `lamino bench operator --json`: one application of L or L*.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorBenchRecord {
    /// "L" or "L*".
    pub operator: &'static str,
    /// Volume side n (n^3 voxels, n x n detector).
    pub size: usize,
    pub angles: usize,
    /// Median GPU time of the whole application, milliseconds.
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
    /// Nonuniform points (ntheta * deth * detw) gridded per second by the U2 stage.
    pub u2_points_per_s: f64,
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
        g: &crate::operator::Geometry,
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

/// Times L and L* for an `n`^3 volume, `angles` projections at a 20 degree tilt.
pub fn bench_operator(
    ctx: &GpuContext,
    n: usize,
    angles: usize,
    repeats: usize,
) -> Result<Vec<OperatorBenchRecord>, crate::operator::OperatorError> {
    use crate::operator::{Apply, Geometry, LaminoOperator, OperatorOptions};
    use crate::reference::CpuOperator;
    let g = Geometry::cube(n, angles, std::f64::consts::FRAC_PI_2 + 20f64.to_radians());
    let op = LaminoOperator::new(ctx, &g, &OperatorOptions::default())?;
    let volume = SplitMix64::new(1).complex_uniform(g.volume_len());
    let data = SplitMix64::new(2).complex_uniform(g.data_len());
    let arrays = OperatorArrays::new(ctx, &g)?;
    ctx.write(arrays.volume.buffer(), 0, &volume);
    ctx.write(arrays.data.buffer(), 0, &data);
    let time = |what: Apply| -> Result<(f64, &'static str), crate::operator::OperatorError> {
        let application = arrays.application(ctx, &op, what)?;
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
    };
    let [fft_u1, fft_u2, fft_f] = operator_fft_ms(ctx, &g, op.chunks(), repeats)?;
    let workspace = op.fft_workspace_bytes();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = CpuOperator::new(&g, threads);
    let array_bytes = (g.volume_len() + g.spectrum_len() + g.data_len()) as u64 * 8;
    let mut records = Vec::new();
    for (name, whole, stages) in [
        (
            "L",
            Apply::Forward,
            [Apply::Usfft1d, Apply::Usfft2d, Apply::Fft2dAdjoint],
        ),
        (
            "L*",
            Apply::Adjoint,
            [Apply::Usfft1dAdjoint, Apply::Usfft2dAdjoint, Apply::Fft2d],
        ),
    ] {
        // The data array is workspace for L*: its values change between repeats, its cost does
        // not (no kernel branches on values).
        ctx.write(arrays.data.buffer(), 0, &data);
        let (ms, timing) = time(whole)?;
        let (ms_u1, _) = time(stages[0])?;
        let (ms_u2, _) = time(stages[1])?;
        let (ms_f, _) = time(stages[2])?;
        let mut cpu_times = Vec::new();
        for _ in 0..repeats.clamp(1, 3) {
            let start = Instant::now();
            let out = if name == "L" {
                cpu.forward(&volume)
            } else {
                cpu.adjoint(&data)
            };
            cpu_times.push(start.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(out);
        }
        let cpu_ms = median(cpu_times);
        records.push(OperatorBenchRecord {
            operator: name,
            size: n,
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
            u2_points_per_s: g.data_len() as f64 / (ms_u2 / 1e3),
            array_bytes,
            device_bytes: op.device_bytes(),
            cpu_ms,
            speedup_vs_cpu: cpu_ms / ms,
            timing,
            device: ctx.info().name.clone(),
        });
    }
    Ok(records)
}

/// GPU time of the FFTs of the stages U1, U2 and F of one operator application: plans of the
/// operator's sizes and layouts (U1 along the 2 n0 axis of a (2 n0, chunk_y n2) grid, U2 over the
/// (chunk_rows, 2 n1, 2 n2) grids, F over the (chunk_angles, deth, detw) projections), each timed
/// on its own and multiplied by the number of chunks the stage runs.
fn operator_fft_ms(
    ctx: &GpuContext,
    g: &crate::operator::Geometry,
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
    let u2_shape = [chunk_rows, 2 * g.n1, 2 * g.n2];
    let u2_len = u2_shape.iter().product();
    let u2_data = ctx.storage_buffer("bench u2 grid", u2_len as u64 * 8)?;
    let u2 = FftPlan::specialized(
        ctx,
        &u2_shape,
        2,
        Direction::Forward,
        Normalization::None,
        &u2_data,
    )?;
    let u2_ms = time(&|rec| u2.record(rec), &u2_data, u2_len)? * g.deth.div_ceil(chunk_rows) as f64;
    let f_shape = [chunk_angles, g.deth, g.detw];
    let f_len = f_shape.iter().product();
    let f_data = ctx.storage_buffer("bench projections", f_len as u64 * 8)?;
    let f = FftPlan::specialized(
        ctx,
        &f_shape,
        2,
        Direction::Forward,
        Normalization::None,
        &f_data,
    )?;
    let f_ms =
        time(&|rec| f.record(rec), &f_data, f_len)? * g.ntheta().div_ceil(chunk_angles) as f64;
    Ok([u1_ms, u2_ms, f_ms])
}

/// One line of `lamino bench admm --json`.
#[derive(Debug, Clone, Serialize)]
pub struct AdmmBenchRecord {
    pub size: usize,
    pub angles: usize,
    pub inner_iterations: usize,
    /// Median wall time of one outer iteration (submit to completion, readbacks included), ms.
    pub ms_per_iteration: f64,
    /// GPU time of the operator applications one outer iteration makes (1 + inner A*, inner A),
    /// each timed on its own, ms.
    pub ms_operator: f64,
    /// The rest: vector kernels, reductions, readbacks and submission overhead, ms.
    pub ms_vector_and_sync: f64,
    /// Device memory of the operator plus the solver's vectors.
    pub device_bytes: u64,
    /// Per outer iteration (the most over the timed iterations): command submissions, host
    /// waits for the device, bytes read back and bytes uploaded.
    pub submissions_per_iteration: u64,
    pub waits_per_iteration: u64,
    pub bytes_read_back_per_iteration: u64,
    pub bytes_uploaded_per_iteration: u64,
    /// Share of the device time span of consecutive outer iterations (from the first pass's
    /// start to the last pass's end) in which no compute pass ran: gaps between submissions,
    /// host waits, transfers. From GPU timestamps around every pass, in further iterations run
    /// with the timeline on; `None` without timestamp queries.
    pub device_idle_share: Option<f64>,
    /// Compute passes per outer iteration in those iterations.
    pub passes_per_iteration: Option<usize>,
    pub device: String,
}

/// Times outer ADMM iterations for an `n`^3 volume and `angles` projections.
pub fn bench_admm(
    ctx: &GpuContext,
    n: usize,
    angles: usize,
    iterations: usize,
) -> Result<AdmmBenchRecord, crate::solver::SolverError> {
    use crate::operator::{Apply, Geometry, OperatorOptions};
    use crate::params::AdmmParams;
    use crate::solver::AdmmSolver;
    let g = Geometry::cube(n, angles, std::f64::consts::FRAC_PI_2 + 30f64.to_radians());
    let mut rng = SplitMix64::new(3);
    let data: Vec<f32> = (0..g.data_len()).map(|_| rng.next_f64() as f32).collect();
    // Timed iterations of the default solver (the convergence test does not stop a benchmark),
    // then as many with every pass timestamped (which costs host time: not in the wall times).
    let iterations = iterations.max(1);
    let params = AdmmParams::exactly(2 * iterations + 1);
    let mut solver = AdmmSolver::new(ctx, &g, &data, params, &OperatorOptions::default())?;
    solver.step(ctx)?; // warm-up: pays shader compilation
    ctx.complete_downloads()?;
    let mut times = Vec::new();
    let mut traffic = crate::gpu::Traffic::default();
    for _ in 0..iterations {
        let before = ctx.traffic();
        let start = Instant::now();
        solver.step(ctx)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        let t = ctx.traffic() - before;
        traffic.submissions = traffic.submissions.max(t.submissions);
        traffic.waits = traffic.waits.max(t.waits);
        traffic.bytes_downloaded = traffic.bytes_downloaded.max(t.bytes_downloaded);
        traffic.bytes_uploaded = traffic.bytes_uploaded.max(t.bytes_uploaded);
    }
    // One timeline over consecutive iterations, so that the gaps between them (the host reading
    // the iteration's scalars and recording the next) count as idle.
    let busy = match ctx.start_timeline() {
        true => {
            for _ in 0..iterations {
                solver.step(ctx)?;
            }
            ctx.stop_timeline()?
        }
        false => None,
    };
    let op = solver.operator();
    let arrays = OperatorArrays::new(ctx, &g)?;
    let time_op = |what| -> Result<f64, crate::solver::SolverError> {
        let application = arrays.application(ctx, op, what)?;
        let mut t = Vec::new();
        for _ in 0..3 {
            t.push(
                time_once(ctx, |rec| op.record(ctx, rec, &application))
                    .map_err(|e| match e {
                        FftError::Gpu(g) => crate::solver::SolverError::Gpu(g),
                        other => crate::solver::SolverError::Operator(other.into()),
                    })?
                    .0,
            );
        }
        Ok(median(t))
    };
    let (a, a_adj) = (
        time_op(Apply::FourierForward)?,
        time_op(Apply::FourierAdjoint)?,
    );
    let k = params.inner_iterations as f64;
    let ms_operator = (1.0 + k) * a_adj + k * a;
    let ms_per_iteration = median(times);
    Ok(AdmmBenchRecord {
        size: n,
        angles,
        inner_iterations: params.inner_iterations,
        ms_per_iteration,
        ms_operator,
        ms_vector_and_sync: ms_per_iteration - ms_operator,
        device_bytes: op.device_bytes() + solver.vector_device_bytes(),
        submissions_per_iteration: traffic.submissions,
        waits_per_iteration: traffic.waits,
        bytes_read_back_per_iteration: traffic.bytes_downloaded,
        bytes_uploaded_per_iteration: traffic.bytes_uploaded,
        device_idle_share: busy.map(|b| b.idle_share()),
        passes_per_iteration: busy.map(|b| b.passes / iterations),
        device: ctx.info().name.clone(),
    })
}

/// One line of `lamino bench scale --json`: a run (`kind` "ratio" or "large") or a plan only
/// (`kind` "plan").
#[derive(Debug, Clone, Serialize)]
pub struct ScaleBenchRecord {
    pub kind: &'static str,
    pub size: usize,
    pub angles: usize,
    pub plan: crate::plan::MemoryPlan,
    /// Median wall time of a timed outer iteration under `plan`, ms (runs only).
    pub ms_per_iteration: Option<f64>,
    /// The same for every array on the device, in the same process (the "ratio" run).
    pub in_core_ms_per_iteration: Option<f64>,
    /// `ms_per_iteration / in_core_ms_per_iteration`.
    pub streaming_over_in_core: Option<f64>,
    /// Host <-> device bytes per timed iteration, counted by the context (runs only).
    pub bytes_moved_per_iteration: Option<u64>,
    /// Those bytes over the streamed iteration's time, GB/s: the rate its transfers sustained
    /// (they overlap the computation, so the link carried at least this; the extra time over
    /// in-core is no measure when streaming is not slower).
    pub achieved_gbps: Option<f64>,
    /// A plain upload and download of the staging size through the same context, GB/s.
    pub copy_gbps: Option<f64>,
    /// The most device memory held at once, bytes (runs only).
    pub peak_device_bytes: Option<u64>,
    /// The process's peak resident set after the run (Linux VmHWM; it includes the pages of
    /// scratch files mapped in while they were read or written), bytes (runs only).
    pub peak_host_bytes: Option<u64>,
    pub device: String,
}

/// The tilt of the scale benchmark's scans (30 degrees).
const SCALE_PHI: f64 = std::f64::consts::FRAC_PI_2 + std::f64::consts::FRAC_PI_6;

/// Times `iterations` outer iterations (after one untimed with `warm_up`) under `plan` on a
/// fresh context whose budget is the plan's; returns (median ms, bytes moved per timed
/// iteration, peak).
fn timed_iterations(
    options: &crate::gpu::DeviceOptions,
    g: &crate::operator::Geometry,
    data: &[f32],
    plan: &crate::plan::MemoryPlan,
    iterations: usize,
    warm_up: bool,
) -> Result<(f64, u64, u64), ScaleBenchError> {
    use crate::params::AdmmParams;
    use crate::solver::AdmmSolver;
    let ctx = GpuContext::new(options)?;
    ctx.set_device_budget(plan.budgets.device_bytes);
    let params = AdmmParams::exactly(iterations + usize::from(warm_up));
    let mut solver = AdmmSolver::with_plan(&ctx, g, data, params, plan)?;
    if warm_up {
        solver.step(&ctx)?; // pays shader compilation
    }
    let before = ctx.traffic();
    let mut times = Vec::new();
    for _ in 0..iterations {
        let start = Instant::now();
        solver.step(&ctx)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let after = ctx.traffic();
    let moved = (after.bytes_uploaded + after.bytes_downloaded)
        - (before.bytes_uploaded + before.bytes_downloaded);
    Ok((
        median(times),
        moved / iterations as u64,
        ctx.peak_device_bytes(),
    ))
}

/// Errors of the scale benchmark.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScaleBenchError {
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error(transparent)]
    Solver(#[from] crate::solver::SolverError),
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    #[error(transparent)]
    Fft(#[from] FftError),
}

/// Random data in the operator's range of values for an `n`^3 volume seen at `angles`.
fn scale_scan(n: usize, angles: usize) -> (crate::operator::Geometry, Vec<f32>) {
    let g = crate::operator::Geometry::cube(n, angles, SCALE_PHI);
    let mut rng = SplitMix64::new(5);
    let data = (0..g.data_len()).map(|_| rng.next_f64() as f32).collect();
    (g, data)
}

/// `lamino bench scale`, the streaming case: per-iteration time at 1/8 of the in-core device
/// need against in-core, in the same process, with the bytes moved and a plain copy's rate.
pub fn bench_scale_ratio(
    options: &crate::gpu::DeviceOptions,
    n: usize,
    angles: usize,
    iterations: usize,
) -> Result<ScaleBenchRecord, ScaleBenchError> {
    use crate::operator::OperatorOptions;
    use crate::params::AdmmParams;
    use crate::plan::{plan, Budgets, MemoryPlan};
    let iterations = iterations.max(1);
    let (g, data) = scale_scan(n, angles);
    let params = AdmmParams::exactly(iterations + 1);
    let ctx = GpuContext::new(options)?;
    let in_core = MemoryPlan::in_core(&ctx, &g, &params, &OperatorOptions::default())?;
    let budgets = Budgets::given(in_core.device_bytes / 8, u64::MAX, None);
    let streaming = plan(&ctx, &g, &params, &OperatorOptions::default(), &budgets)?;
    let copy = copy_round_trip_gbps(&ctx, streaming.staging_words.max(1 << 20))?;
    let device = ctx.info().name.clone();
    drop(ctx);
    let (in_core_ms, _, _) = timed_iterations(options, &g, &data, &in_core, iterations, true)?;
    let (ms, moved, peak) = timed_iterations(options, &g, &data, &streaming, iterations, true)?;
    Ok(ScaleBenchRecord {
        kind: "ratio",
        size: n,
        angles,
        plan: streaming,
        ms_per_iteration: Some(ms),
        in_core_ms_per_iteration: Some(in_core_ms),
        streaming_over_in_core: Some(ms / in_core_ms),
        bytes_moved_per_iteration: Some(moved),
        achieved_gbps: Some(moved as f64 / (ms / 1e3) / 1e9),
        copy_gbps: Some(copy),
        peak_device_bytes: Some(peak),
        peak_host_bytes: crate::flatfield::bench::host_peak_bytes(),
        device: device.clone(),
    })
}

/// `lamino bench scale`, the large case: one timed outer iteration of an `n`^3 volume within
/// `device_bytes` on the device and `host_bytes` in host memory, the rest in `scratch`.
pub fn bench_scale_large(
    options: &crate::gpu::DeviceOptions,
    n: usize,
    angles: usize,
    device_bytes: u64,
    host_bytes: u64,
    scratch: &std::path::Path,
) -> Result<ScaleBenchRecord, ScaleBenchError> {
    use crate::operator::OperatorOptions;
    use crate::params::AdmmParams;
    use crate::plan::{plan, Budgets};
    let (g, data) = scale_scan(n, angles);
    let params = AdmmParams::exactly(1);
    let ctx = GpuContext::new(options)?;
    let budgets = Budgets::given(device_bytes, host_bytes, Some(scratch.into()));
    let streaming = plan(&ctx, &g, &params, &OperatorOptions::default(), &budgets)?;
    let device = ctx.info().name.clone();
    drop(ctx);
    // One iteration, the first: on lavapipe a 256^3 iteration takes tens of minutes, against
    // well under a second of shader compilation.
    let (ms, moved, peak) = timed_iterations(options, &g, &data, &streaming, 1, false)?;
    Ok(ScaleBenchRecord {
        kind: "large",
        size: n,
        angles,
        plan: streaming,
        ms_per_iteration: Some(ms),
        in_core_ms_per_iteration: None,
        streaming_over_in_core: None,
        bytes_moved_per_iteration: Some(moved),
        achieved_gbps: None,
        copy_gbps: None,
        peak_device_bytes: Some(peak),
        peak_host_bytes: crate::flatfield::bench::host_peak_bytes(),
        device: device.clone(),
    })
}

/// `lamino bench scale`, plans only: an `n`^3 volume seen at `n` angles within the budgets, on
/// this device's limits (nothing is allocated). What exceeds the host budget is planned into
/// scratch files (a node's NVMe, as mLR offloads), whose space is not checked here.
pub fn bench_scale_plan(
    ctx: &GpuContext,
    n: usize,
    device_bytes: u64,
    host_bytes: u64,
) -> Result<ScaleBenchRecord, ScaleBenchError> {
    use crate::operator::{Geometry, OperatorOptions};
    use crate::plan::{plan_on_paper, Budgets};
    let g = Geometry::cube(n, n, SCALE_PHI);
    let budgets = Budgets::given(device_bytes, host_bytes, Some("scratch".into()));
    let p = plan_on_paper(
        ctx,
        &g,
        &crate::params::AdmmParams::default(),
        &OperatorOptions::default(),
        &budgets,
    )?;
    Ok(ScaleBenchRecord {
        kind: "plan",
        size: n,
        angles: n,
        plan: p,
        ms_per_iteration: None,
        in_core_ms_per_iteration: None,
        streaming_over_in_core: None,
        bytes_moved_per_iteration: None,
        achieved_gbps: None,
        copy_gbps: None,
        peak_device_bytes: None,
        peak_host_bytes: None,
        device: ctx.info().name.clone(),
    })
}

/// What `lamino bench scale --model` measured on this device: one in-core outer iteration of a
/// small scan against a plain copy of the bytes its passes touch.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleModelMeasurement {
    pub kind: &'static str,
    pub size: usize,
    pub angles: usize,
    /// Median wall time of one in-core outer iteration, ms.
    pub ms_per_iteration: f64,
    /// Bytes its passes read and write (`plan::cluster_model::touched_bytes`).
    pub touched_bytes: u64,
    /// A plain copy on the device (bytes read + written per second), GB/s.
    pub copy_gbps: f64,
    /// `ms_per_iteration` over the time a copy of `touched_bytes` takes.
    pub copy_equivalents: f64,
    pub device: String,
}

/// `lamino bench scale --model`: measures the cost of an iteration on this device at side
/// `measure_size`, then models every size of `sizes` on each of `ranks`, with the measured copy
/// equivalents and copy bandwidth wherever `inputs` leaves them 0.
pub fn bench_scale_model(
    options: &crate::gpu::DeviceOptions,
    measure_size: usize,
    mut inputs: crate::plan::cluster_model::ClusterInputs,
    sizes: &[usize],
    ranks: &[usize],
) -> Result<
    (
        ScaleModelMeasurement,
        Vec<crate::plan::cluster_model::ClusterPoint>,
    ),
    ScaleBenchError,
> {
    use crate::operator::OperatorOptions;
    use crate::params::AdmmParams;
    use crate::plan::cluster_model::{model, touched_bytes};
    use crate::plan::MemoryPlan;
    let (g, data) = scale_scan(measure_size, measure_size);
    let params = AdmmParams::exactly(2);
    let ctx = GpuContext::new(options)?;
    let in_core = MemoryPlan::in_core(&ctx, &g, &params, &OperatorOptions::default())?;
    let copy = copy_gbps(&ctx, 64 << 20, 5)?;
    let device = ctx.info().name.clone();
    let (ms, _, _) = timed_iterations(options, &g, &data, &in_core, 1, true)?;
    let touched = touched_bytes(&g, &params);
    let copy_equivalents = ms / 1e3 * copy * 1e9 / touched as f64;
    if inputs.copy_equivalents <= 0.0 {
        inputs.copy_equivalents = copy_equivalents;
    }
    if inputs.device_gbps <= 0.0 {
        inputs.device_gbps = copy;
    }
    let mut points = Vec::new();
    for &n in sizes {
        let target = crate::operator::Geometry::cube(n, n, SCALE_PHI);
        points.extend(model(&ctx, &target, &params, &inputs, ranks)?);
    }
    Ok((
        ScaleModelMeasurement {
            kind: "model-measurement",
            size: measure_size,
            angles: measure_size,
            ms_per_iteration: ms,
            touched_bytes: touched,
            copy_gbps: copy,
            copy_equivalents,
            device,
        },
        points,
    ))
}

/// Host -> device -> host through the context's own write and read paths: `words` f32 each
/// way, the median of five, GB/s counting both directions.
fn copy_round_trip_gbps(ctx: &GpuContext, words: usize) -> Result<f64, ScaleBenchError> {
    let buffer = ctx.storage_buffer("copy probe", words as u64 * 4)?;
    let host = vec![1.0f32; words];
    let mut times = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        ctx.write(&buffer, 0, &host);
        let back: Vec<f32> = ctx.read(&buffer, 0, words)?;
        times.push(start.elapsed().as_secs_f64());
        debug_assert_eq!(back.len(), words);
    }
    Ok(2.0 * words as f64 * 4.0 / median(times) / 1e9)
}

/// The volumes of one long run at the iteration where the default convergence test first passed
/// and at its end. The default run's iterates are the first iterates of the long run (same data,
/// same parameters but the stopping rule), so one run gives both.
pub struct ConvergedPrefix {
    /// Outer iterations after which the default test first passed, with the volume there;
    /// `None` when it never passed.
    pub at_stop: Option<(usize, Vec<f32>)>,
    /// The volume after all the run's iterations.
    pub at_end: Vec<f32>,
}

/// Runs exactly `iterations` outer iterations of the default solver and records where the
/// default convergence test first passed.
pub fn converge_then_continue(
    ctx: &GpuContext,
    g: &crate::operator::Geometry,
    data: &[f32],
    iterations: usize,
) -> Result<ConvergedPrefix, crate::solver::SolverError> {
    use crate::operator::OperatorOptions;
    use crate::params::AdmmParams;
    use crate::params::Convergence;
    use crate::solver::AdmmSolver;
    let params = AdmmParams::exactly(iterations);
    let mut solver = AdmmSolver::new(ctx, g, data, params, &OperatorOptions::default())?;
    let mut at_stop = None;
    while solver.stop_reason().is_none() {
        let report = solver.step(ctx)?;
        if at_stop.is_none() && report.converged(&Convergence::DEFAULT) {
            at_stop = Some((report.iteration + 1, solver.volume(ctx)?));
        }
    }
    Ok(ConvergedPrefix {
        at_stop,
        at_end: solver.volume(ctx)?,
    })
}

/// One line of `lamino bench convergence --json`.
#[derive(Debug, Clone, Serialize)]
pub struct ConvergenceBenchRecord {
    pub phantom: String,
    pub size: usize,
    pub angles: usize,
    pub tilt_deg: f64,
    pub photons: f64,
    /// Outer iterations the default run makes (where the default test first passed); `None`
    /// when it did not pass within `reference_iterations`.
    pub default_iterations: Option<usize>,
    pub reference_iterations: usize,
    /// Relative L2 distance of the default run's volume from the reference run's.
    pub default_to_reference: Option<f64>,
    /// Relative L2 distances from the phantom.
    pub default_to_truth: Option<f64>,
    pub reference_to_truth: f64,
    /// Wall time of the reference run (which contains the default run), s.
    pub seconds: f64,
    pub device: String,
}

/// Why `lamino bench convergence` could not measure.
#[derive(Debug, thiserror::Error)]
pub enum ConvergenceBenchError {
    #[error(transparent)]
    Simulate(#[from] crate::simulate::SimulateError),
    #[error(transparent)]
    Input(#[from] crate::recon::input::InputError),
    #[error(transparent)]
    Solver(#[from] crate::solver::SolverError),
}

/// The line integrals of a noisy simulated scan of `phantom` (Poisson noise, seed 0), as a
/// reconstruction reads them: the scans the convergence defaults are measured and tested on.
pub fn noisy_projections(
    phantom: crate::simulate::PhantomKind,
    size: usize,
    (angles, tilt_deg, photons): (usize, f64, f64),
) -> Result<crate::scan::Projections, ConvergenceBenchError> {
    use crate::recon::input::projections_from_scan;
    use crate::simulate::{simulated_scan, ScanSpec};
    let sim = simulated_scan(&ScanSpec {
        phantom,
        size,
        angles,
        tilt_deg,
        photons: Some(photons),
        seed: 0,
        rotation_axis: None,
    })?;
    Ok(projections_from_scan(std::path::Path::new("simulated"), sim.scan, None)?.projections)
}

/// Simulates a noisy scan of `phantom` (seed 0) and measures how far the default stopping rule
/// stops from a run of `reference_iterations` outer iterations.
pub fn bench_convergence(
    ctx: &GpuContext,
    phantom: crate::simulate::PhantomKind,
    size: usize,
    (angles, tilt_deg, photons): (usize, f64, f64),
    reference_iterations: usize,
) -> Result<ConvergenceBenchRecord, ConvergenceBenchError> {
    use crate::metrics::rel_l2;
    use crate::simulate::rasterize;
    let p = noisy_projections(phantom, size, (angles, tilt_deg, photons))?;
    let truth = rasterize(&phantom.build(size), p.geometry());
    let start = Instant::now();
    let run = converge_then_continue(ctx, p.geometry(), &p.operator_data(), reference_iterations)?;
    let seconds = start.elapsed().as_secs_f64();
    let at_stop = run.at_stop.as_ref();
    Ok(ConvergenceBenchRecord {
        phantom: phantom.to_string(),
        size,
        angles,
        tilt_deg,
        photons,
        default_iterations: at_stop.map(|(k, _)| *k),
        reference_iterations,
        default_to_reference: at_stop.map(|(_, v)| rel_l2(v, &run.at_end)),
        default_to_truth: at_stop.map(|(_, v)| rel_l2(v, &truth)),
        reference_to_truth: rel_l2(&run.at_end, &truth),
        seconds,
        device: ctx.info().name.clone(),
    })
}
