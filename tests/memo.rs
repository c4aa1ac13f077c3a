//! The memo layer: the exact path is reproduced bit for bit when nothing may be reused, reuse
//! happens exactly when the policy's criterion holds, every certified reuse stays within its
//! error bound, eviction keeps both tiers within budget, and the statistics add up.

mod common;

use lamino::Tilt;

use common::ctx;
use lamino::array::{Field, Scalars};
use lamino::geometry::Geometry;
use lamino::gpu::{GpuContext, Traffic};
use lamino::memo::{Memo, MemoOptions, MemoPolicy, MemoStages, MemoStats};
use lamino::operator::{Apply, LaminoOperator, OperatorOptions, Sink, Source, Space, Stage};
use lamino::params::AdmmParams;
use lamino::random::SplitMix64;
use lamino::solver::AdmmSolver;
use num_complex::Complex32;

const N: usize = 16;
const ROWS: usize = 4;

fn geometry() -> Geometry {
    Geometry::cube(N, 8, Tilt::from_degrees(30.0))
}

fn chunked() -> OperatorOptions {
    OperatorOptions {
        max_chunk_y: Some(ROWS),
        max_chunk_rows: Some(ROWS),
        ..OperatorOptions::default()
    }
}

/// `policy` on every stage (these tests exercise each stage's mechanics).
fn options(policy: MemoPolicy) -> MemoOptions {
    MemoOptions {
        policy,
        stages: MemoStages::ALL,
        ..MemoOptions::default()
    }
}

fn random(len: usize, seed: u64) -> Vec<Complex32> {
    let mut rng = SplitMix64::new(seed);
    (0..len)
        .map(|_| Complex32::new(rng.next_f64() as f32 - 0.5, rng.next_f64() as f32 - 0.5))
        .collect()
}

/// Applies U1 through the memo layer to a volume and returns the spectrum.
fn u1(memo: &mut Memo, op: &LaminoOperator, volume: &[Complex32]) -> Vec<Complex32> {
    let g = geometry();
    let field = |space: Space| Field::zeros(ctx(), "test array", space.layout(&g, 2)).unwrap();
    let (source, sink) = (field(Space::Volume), field(Space::Spectrum));
    ctx().write(source.buffer(), 0, volume);
    let scalars = Scalars::new(ctx(), 1, 1).unwrap();
    let application = op
        .application(
            ctx(),
            &scalars,
            None,
            Apply::Usfft1d,
            Source::Complex(&source),
            Sink::Complex(&sink),
        )
        .unwrap();
    memo.apply(ctx(), op, &application).unwrap();
    ctx().read(sink.buffer(), 0, g.spectrum_len()).unwrap()
}

fn exact_u1(op: &LaminoOperator, volume: &[Complex32]) -> Vec<Complex32> {
    op.apply_host(ctx(), Apply::Usfft1d, &[N, N, N], volume)
        .unwrap()
}

fn stage(stats: &MemoStats, stage: Stage) -> &lamino::memo::StageStats {
    stats.stages.iter().find(|s| s.stage == stage).unwrap()
}

/// The volume's y rows `[y0, y0 + ROWS)` (one U1 chunk) as a flat vector.
fn chunk_of(volume: &[Complex32], y0: usize) -> Vec<Complex32> {
    let mut out = Vec::new();
    for z in 0..N {
        for y in y0..y0 + ROWS {
            out.extend_from_slice(&volume[(z * N + y) * N..(z * N + y + 1) * N]);
        }
    }
    out
}

/// The f64 reference key of the U1 chunk of rows `[y0, y0 + ROWS)` of a volume.
fn pooled_key(volume: &[Complex32], y0: usize) -> Vec<f64> {
    lamino::reference::pooled_key(volume, y0 * N, [N * N, N, 1], [N, ROWS, N], 1)
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn solve(policy: MemoPolicy) -> (Vec<f32>, Option<MemoStats>) {
    let g = geometry();
    let truth: Vec<f32> = random(g.volume_len(), 3)
        .iter()
        .map(|c| c.re.max(0.0))
        .collect();
    let op = LaminoOperator::new(ctx(), &g, &chunked()).unwrap();
    let complex: Vec<Complex32> = truth.iter().map(|&v| Complex32::new(v, 0.0)).collect();
    let data: Vec<f32> = op
        .apply_host(ctx(), Apply::Forward, &[N, N, N], &complex)
        .unwrap()
        .iter()
        .map(|c| c.re)
        .collect();
    let params = AdmmParams::exactly(3);
    let mut solver = AdmmSolver::new(ctx(), &g, &data, params, &chunked()).unwrap();
    solver.set_memo(ctx(), options(policy)).unwrap();
    solver.run(ctx(), |_| {}).unwrap();
    (solver.volume(ctx()).unwrap(), solver.memo_stats())
}

#[test]
fn tau_one_and_tol_zero_reproduce_the_exact_path_bit_for_bit() {
    let (exact, none) = solve(MemoPolicy::Off);
    assert!(none.is_none());
    for policy in [
        MemoPolicy::Mlr { tau: 1.0 },
        MemoPolicy::Certified { tol: 0.0 },
    ] {
        let (volume, stats) = solve(policy);
        let stats = stats.unwrap();
        assert_eq!(bits(&volume), bits(&exact), "{policy}");
        // Every chunk went through the memo layer: 4 stages x 4 chunks per application.
        assert!(
            stats.chunks > 0 && stats.chunks % 4 == 0,
            "{policy}: {}",
            stats.chunks
        );
        assert_eq!(stats.chunks, stats.hits + stats.misses);
        if let MemoPolicy::Certified { .. } = policy {
            assert_eq!(stats.hits, 0, "TOL = 0 never reuses");
        }
    }
}

#[test]
fn pooled_keys_and_mlr_reuse_follow_the_cosine_criterion() {
    let g = geometry();
    let op = LaminoOperator::new(ctx(), &g, &chunked()).unwrap();
    let tau = 0.95;
    let mut memo = Memo::new(ctx(), &op, options(MemoPolicy::Mlr { tau })).unwrap();
    let first = random(g.volume_len(), 1);
    let out_first = u1(&mut memo, &op, &first);
    assert_eq!(bits_of(&out_first), bits_of(&exact_u1(&op, &first)));
    // Chunk 0 barely changes, chunk 1 is replaced, chunk 2 is scaled (cosine 1: the reference's
    // policy reuses it although the output should double), chunk 3 changes a little.
    let mut second = first.clone();
    let noise = random(g.volume_len(), 2);
    for z in 0..N {
        for y in 0..N {
            for x in 0..N {
                let i = (z * N + y) * N + x;
                second[i] = match y / ROWS {
                    0 => first[i] + noise[i] * 0.01,
                    1 => noise[i],
                    2 => first[i] * 2.0,
                    _ => first[i] + noise[i] * 0.3,
                };
            }
        }
    }
    let expected: Vec<bool> = (0..N / ROWS)
        .map(|c| {
            cosine(
                &pooled_key(&first, c * ROWS),
                &pooled_key(&second, c * ROWS),
            ) >= tau
        })
        .collect();
    let out = u1(&mut memo, &op, &second);
    let exact = exact_u1(&op, &second);
    let stats = memo.stats();
    let s = stage(&stats, Stage::Usfft1d);
    assert_eq!(
        s.hits as usize,
        expected.iter().filter(|&&e| e).count(),
        "{expected:?}"
    );
    assert_eq!(s.chunks, 8);
    assert!(expected[0] && !expected[1] && expected[2], "{expected:?}");
    // Reused chunks hold the first call's output, computed ones the exact output.
    for (c, &reused) in expected.iter().enumerate() {
        let want = if reused { &out_first } else { &exact };
        for k in 0..N {
            for y in c * ROWS..(c + 1) * ROWS {
                let row = (k * N + y) * N;
                assert_eq!(
                    bits_of(&out[row..row + N]),
                    bits_of(&want[row..row + N]),
                    "chunk {c}"
                );
            }
        }
    }
}

fn bits_of(v: &[Complex32]) -> Vec<u64> {
    v.iter()
        .map(|c| ((c.re.to_bits() as u64) << 32) | c.im.to_bits() as u64)
        .collect()
}

#[test]
fn certified_reuse_keeps_each_stage_within_its_budget_and_every_reuse_within_its_bound() {
    let g = geometry();
    let op = LaminoOperator::new(ctx(), &g, &chunked()).unwrap();
    let tol = 1e-2;
    let mut memo = Memo::new(
        ctx(),
        &op,
        MemoOptions {
            audit: true,
            ..options(MemoPolicy::Certified { tol })
        },
    )
    .unwrap();
    let mut rng = SplitMix64::new(9);
    // Per round, each chunk's relative residual in units of TOL. The stage's budget is TOL^2 of
    // the chunks' |x|^2 together (about 4 TOL^2 |x_c|^2 here): smallest residuals first while
    // they fit. E.g. [1.6, 1.6, 0.3, 3.0] reuses the 0.3 chunk and one 1.6 chunk (a relative
    // residual above TOL), not the second (2.65 then 5.21 of 4).
    let rounds: [[f64; 4]; 6] = [
        [0.3, 0.3, 0.3, 3.0],
        [0.3, 0.3, 1.5, 0.3],
        [1.6, 1.6, 0.3, 3.0],
        [3.0, 3.0, 3.0, 3.0],
        [0.6, 0.6, 0.6, 0.6],
        [2.5, 0.3, 0.3, 0.3],
    ];
    let mut expected_hits = 0;
    for (round, scales) in rounds.iter().enumerate() {
        // A fresh random input (computed and stored), then alpha times it plus noise of a chosen
        // relative size per chunk: the only stored chunk close to the second is its own base,
        // which is the chunk's last entry, so the decision can be predicted.
        let base = random(g.volume_len(), 100 + round as u64);
        u1(&mut memo, &op, &base);
        let alpha = Complex32::new(rng.next_f64() as f32 + 0.5, rng.next_f64() as f32 - 0.5);
        let noise = random(g.volume_len(), 200 + round as u64);
        let mut next: Vec<Complex32> = base.iter().map(|&v| v * alpha).collect();
        // Each chunk's squared least-squares residual against its base and |x|^2, in f64.
        let mut residuals = Vec::new();
        for (c, scale) in scales.iter().enumerate() {
            let norm = |v: &[Complex32]| v.iter().map(|c| c.norm_sqr() as f64).sum::<f64>().sqrt();
            let f = (scale * tol * norm(&chunk_of(&next, c * ROWS))
                / norm(&chunk_of(&noise, c * ROWS))) as f32;
            for z in 0..N {
                for y in c * ROWS..(c + 1) * ROWS {
                    for x in 0..N {
                        let i = (z * N + y) * N + x;
                        next[i] += noise[i] * f;
                    }
                }
            }
            let (x, p) = (chunk_of(&next, c * ROWS), chunk_of(&base, c * ROWS));
            let (mut re, mut im, mut cc, mut xx) = (0.0, 0.0, 0.0, 0.0);
            for (a, b) in p.iter().zip(&x) {
                let (a, b) = ((a.re as f64, a.im as f64), (b.re as f64, b.im as f64));
                re += a.0 * b.0 + a.1 * b.1;
                im += a.0 * b.1 - a.1 * b.0;
                cc += a.0 * a.0 + a.1 * a.1;
                xx += b.0 * b.0 + b.1 * b.1;
            }
            residuals.push(((xx - (re * re + im * im) / cc).max(0.0), xx));
        }
        let budget = tol * tol * residuals.iter().map(|r| r.1).sum::<f64>();
        let mut sorted: Vec<f64> = residuals.iter().map(|r| r.0).collect();
        sorted.sort_by(f64::total_cmp);
        let mut spent = 0.0;
        for r2 in sorted {
            spent += r2;
            assert!(
                (spent - budget).abs() > 0.2 * budget,
                "round {round}: {spent} of {budget}: the test keeps off the budget"
            );
            if spent > budget {
                break;
            }
            expected_hits += 1;
        }
        let before = stage(&memo.stats(), Stage::Usfft1d).hits;
        u1(&mut memo, &op, &next);
        let after = stage(&memo.stats(), Stage::Usfft1d).hits;
        assert!(after >= before);
    }
    let stats = memo.stats();
    let s = stage(&stats, Stage::Usfft1d);
    // Per round: 3, 4, 2, none, 4, 3.
    assert_eq!(expected_hits, 16);
    assert_eq!(s.hits as usize, expected_hits);
    assert_eq!(s.audited, s.hits);
    assert!(
        s.max_audit_error_over_bound <= 1.0,
        "{}",
        s.max_audit_error_over_bound
    );
    // Reused chunks above TOL on their own (1.5 and 1.6 TOL), none beyond the budget's reach.
    assert!(
        s.max_relative_residual > 1.4 * tol && s.max_relative_residual < 2.0 * tol,
        "{}",
        s.max_relative_residual
    );
    assert_eq!(s.chunks, s.hits + s.misses);
    assert_eq!(s.chunks, 2 * rounds.len() as u64 * 4);
}

#[test]
fn the_default_memoizes_the_2d_gridding_stages_only() {
    let g = geometry();
    let op = LaminoOperator::new(ctx(), &g, &chunked()).unwrap();
    let memo = Memo::new(
        ctx(),
        &op,
        MemoOptions {
            policy: MemoPolicy::Mlr { tau: 0.9 },
            ..MemoOptions::default()
        },
    )
    .unwrap();
    let stats = memo.stats();
    assert_eq!(stats.stages.len(), 4);
    for s in &stats.stages {
        let memoized = matches!(s.stage, Stage::Usfft2d | Stage::Usfft2dAdjoint);
        assert_eq!(s.slots > 0, memoized, "{s:?}");
        match &s.disabled {
            None => assert!(memoized, "{s:?}"),
            Some(why) => assert!(!memoized && why.contains("--memo-stages"), "{why}"),
        }
    }
}

#[test]
fn eviction_keeps_both_tiers_within_budget_and_promoted_entries_are_reused() {
    let g = geometry();
    let op = LaminoOperator::new(ctx(), &g, &chunked()).unwrap();
    // A U1 slot holds a 16 x 4 x 16 input and a 16 x 4 x 16 output: 16 KiB. Per stage:
    // seventeen slots' worth of device memory, which is a wave of one chunk (its staging slot,
    // the promotion reserve of four and one more: six slots, the rest the outbox for demotions
    // and the readback buffer it is read through), so two entries stay on the device; three
    // entries on the host.
    let slot = 2 * 16 * 4 * 16 * 8;
    let mut memo = Memo::new(
        ctx(),
        &op,
        MemoOptions {
            device_bytes: 4 * 17 * slot,
            host_bytes: 4 * 3 * slot,
            audit: true,
            ..options(MemoPolicy::Certified { tol: 0.05 })
        },
    )
    .unwrap();
    let stats = memo.stats();
    let s = stage(&stats, Stage::Usfft1d);
    assert_eq!((s.wave, s.slots), (1, 6), "{s:?}");
    let inputs: Vec<Vec<Complex32>> = (0..6).map(|i| random(g.volume_len(), 40 + i)).collect();
    for x in &inputs {
        u1(&mut memo, &op, x);
        let stats = memo.stats();
        let s = stage(&stats, Stage::Usfft1d);
        assert!(
            s.device_bytes <= 2 * slot && s.peak_device_bytes <= 2 * slot,
            "{s:?}"
        );
        assert!(s.peak_host_bytes <= 3 * slot, "{s:?}");
    }
    let stats = memo.stats();
    let s = stage(&stats, Stage::Usfft1d);
    // 24 chunks stored, 5 kept: 22 demoted from the device, 19 of them dropped from the host.
    assert_eq!((s.misses, s.hits, s.demoted, s.dropped), (24, 0, 22, 19));
    // The last input's first two chunks now live on the host: reusing them promotes them.
    let alpha = Complex32::new(0.8, 0.3);
    let noise = random(g.volume_len(), 99);
    let next: Vec<Complex32> = inputs[5]
        .iter()
        .zip(&noise)
        .map(|(&x, &n)| x * alpha + n * 1e-4)
        .collect();
    let out = u1(&mut memo, &op, &next);
    let exact = exact_u1(&op, &next);
    let stats = memo.stats();
    let s = stage(&stats, Stage::Usfft1d);
    assert_eq!(s.hits, 4, "{s:?}");
    assert!(s.promotions >= 2, "{s:?}");
    assert!(s.max_audit_error_over_bound <= 1.0, "{s:?}");
    assert!(
        s.peak_device_bytes <= 2 * slot && s.peak_host_bytes <= 3 * slot,
        "{s:?}"
    );
    let err: f64 = out
        .iter()
        .zip(&exact)
        .map(|(a, b)| (a - b).norm_sqr() as f64)
        .sum();
    let norm: f64 = exact.iter().map(|v| v.norm_sqr() as f64).sum();
    assert!((err / norm).sqrt() < 1e-3, "{}", (err / norm).sqrt());
}

#[test]
fn the_reconstruction_report_includes_the_memo_statistics() {
    use lamino::recon::{write_outputs, Reconstructor};
    use lamino::scan::Projections;
    let g = geometry();
    let op = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap();
    let truth: Vec<Complex32> = random(g.volume_len(), 8)
        .iter()
        .map(|c| Complex32::new(c.re.abs(), 0.0))
        .collect();
    let scale = ((g.n2 * g.ntheta()) as f32).sqrt();
    let data: Vec<f32> = op
        .apply_host(ctx(), Apply::Forward, &[N, N, N], &truth)
        .unwrap()
        .iter()
        .map(|c| c.re * scale)
        .collect();
    let projections = Projections::new(g.clone(), data).unwrap();
    let result = Reconstructor::new(ctx())
        .params(AdmmParams::exactly(2))
        .memo(MemoOptions {
            chunk_rows: ROWS,
            ..options(MemoPolicy::Certified { tol: 1e-3 })
        })
        .run(&projections)
        .unwrap();
    let stats = result.memo_stats.as_ref().unwrap();
    assert!(stats.chunks > 0);
    let dir = tempfile::tempdir().unwrap();
    write_outputs(dir.path(), &result).unwrap();
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
    let memo = &report["reconstruction"]["memo_stats"];
    assert_eq!(memo["policy"], "certified:0.001");
    assert_eq!(memo["chunks"].as_u64().unwrap(), stats.chunks);
    assert_eq!(
        memo["hits"].as_u64().unwrap() + memo["misses"].as_u64().unwrap(),
        stats.chunks
    );
    assert_eq!(memo["stages"].as_array().unwrap().len(), 4);
    assert_eq!(report["reconstruction"]["memo"]["chunk_rows"], ROWS);
}

/// Waits, submissions and bytes read back by one memoized U1 application on a context of its
/// own (the shared one counts the other tests' traffic too).
fn counted_u1(
    ctx: &GpuContext,
    memo: &mut Memo,
    op: &LaminoOperator,
    volume: &[Complex32],
) -> Traffic {
    let g = geometry();
    let field = |space: Space| Field::zeros(ctx, "test array", space.layout(&g, 2)).unwrap();
    let (source, sink) = (field(Space::Volume), field(Space::Spectrum));
    ctx.write(source.buffer(), 0, volume);
    let scalars = Scalars::new(ctx, 1, 1).unwrap();
    let application = op
        .application(
            ctx,
            &scalars,
            None,
            Apply::Usfft1d,
            Source::Complex(&source),
            Sink::Complex(&sink),
        )
        .unwrap();
    ctx.wait().unwrap();
    let before = ctx.traffic();
    memo.apply(ctx, op, &application).unwrap();
    let traffic = ctx.traffic() - before;
    ctx.wait().unwrap();
    traffic
}

#[test]
fn a_stage_application_takes_at_most_three_round_trips_whatever_the_number_of_chunks() {
    let ctx = common::new_context();
    let g = geometry();
    let x = random(g.volume_len(), 7);
    let noise = random(g.volume_len(), 8);
    // Close to a multiple of x (relative residual about 1.2e-4): every chunk has a candidate and
    // is reused. At TOL 1e-2 the normal equations' estimate plus its rounding margin (a few 1e-6
    // of |x|^2 at these sizes) settles every combination: two round trips. At TOL 5e-4 the margin
    // alone exceeds the budget, so every residual is measured: all three round trips happen.
    let near: Vec<Complex32> = x
        .iter()
        .zip(&noise)
        .map(|(&x, &n)| x * Complex32::new(0.8, 0.3) + n * 1e-4)
        .collect();
    let mut waits = Vec::new();
    for rows in [ROWS, 1] {
        let chunking = OperatorOptions {
            max_chunk_y: Some(rows),
            max_chunk_rows: Some(rows),
            ..OperatorOptions::default()
        };
        let op = LaminoOperator::new(&ctx, &g, &chunking).unwrap();
        let chunks = op.chunk_count(Stage::Usfft1d);
        assert_eq!(chunks, N / rows);
        for (tol, trips) in [(1e-2, 2), (5e-4, 3)] {
            let mut memo = Memo::new(&ctx, &op, options(MemoPolicy::Certified { tol })).unwrap();
            let first = counted_u1(&ctx, &mut memo, &op, &x);
            let second = counted_u1(&ctx, &mut memo, &op, &near);
            let stats = memo.stats();
            let s = stage(&stats, Stage::Usfft1d);
            assert_eq!(s.wave, chunks, "one wave holds every chunk: {s:?}");
            assert_eq!((s.misses, s.hits), (chunks as u64, chunks as u64), "{s:?}");
            // Nothing to compare against the first time: the keys only.
            assert_eq!(first.waits, 1, "{chunks} chunks: {first:?}");
            assert_eq!(
                second.waits, trips,
                "{chunks} chunks, TOL {tol}: {second:?}"
            );
            assert_eq!(
                (s.round_trips, s.max_round_trips),
                (1 + trips, trips),
                "{s:?}"
            );
            assert!(second.submissions <= 4, "{chunks} chunks: {second:?}");
            // Keys, then normal equations (and residuals): a few hundred bytes per chunk beyond
            // the keys, no chunk data (a chunk here is at least 2 KiB).
            assert!(
                second.bytes_downloaded <= first.bytes_downloaded + 256 * chunks as u64,
                "{chunks} chunks: {first:?} then {second:?}"
            );
            waits.push((first.waits, second.waits));
        }
    }
    assert_eq!(waits[..2], waits[2..]);
}

/// In streaming mode (host arrays) a reused chunk moves no chunk data between host and device:
/// its input is keyed and decided on the host, from the host array it would have been uploaded
/// from, and its output is formed on the host from the entries' host copies (a host output
/// array) or on the device from the entries' slots (a device output array). Every stage, with
/// each placement of its arrays, under `mlr` and `certified`: applied twice to the same input,
/// the second application reuses every chunk, moves less than one chunk's block (nothing between
/// host arrays; the memo kernels' job tables and the keys of a device input), and gives the first
/// one's bits (`mlr`) or its values within rounding (`certified`). Without host memory for the
/// memo, `certified` compares on the device and uploads the inputs.
#[test]
fn a_reused_chunk_moves_no_chunk_data_between_host_and_device() {
    use lamino::array::{Residency, Staging};
    use std::sync::Arc;
    let ctx = common::new_context();
    let g = geometry();
    let op = LaminoOperator::new(&ctx, &g, &chunked()).unwrap();
    let staging = Arc::new(Staging::new(&ctx, 2 * ROWS * N * N * 2).unwrap());
    let scalars = Scalars::new(&ctx, 1, 1).unwrap();
    // The smallest chunk block of any stage here, in bytes: U2's output, 8 angles x ROWS detector
    // rows x N columns.
    let block_bytes = (8 * ROWS * N * 8) as u64;
    let (host, device) = (Residency::Host, Residency::Device);
    // `what` bound to a random source array where `from` says and a sink where `to` says.
    let bind = |what: Apply, from: &Residency, to: &Residency, seed: u64| {
        let (from_space, to_space) = what.spaces();
        let source = Field::new(&ctx, "x", from_space.layout(&g, 2), from).unwrap();
        let sink = Field::new(&ctx, "y", to_space.layout(&g, 2), to).unwrap();
        let x = random(from_space.layout(&g, 2).words() / 2, seed);
        source.write(&ctx, bytemuck::cast_slice(&x)).unwrap();
        let app = op
            .application(
                &ctx,
                &scalars,
                Some(&staging),
                what,
                Source::Complex(&source),
                Sink::Complex(&sink),
            )
            .unwrap();
        (app, sink)
    };
    for (what, which, from, to) in [
        (Apply::Usfft2d, Stage::Usfft2d, &host, &host),
        (Apply::Usfft2dAdjoint, Stage::Usfft2dAdjoint, &host, &host),
        (Apply::Usfft1d, Stage::Usfft1d, &device, &host),
        (Apply::Usfft1dAdjoint, Stage::Usfft1dAdjoint, &host, &device),
    ] {
        for policy in ["mlr:0.5", "certified:0.01"] {
            let policy: MemoPolicy = policy.parse().unwrap();
            let (app, sink) = bind(what, from, to, 21);
            let mut memo = Memo::with_staging(&ctx, &op, options(policy), Some(&staging)).unwrap();
            let mut apply = || {
                ctx.wait().unwrap();
                ctx.complete_downloads().unwrap();
                let before = ctx.traffic();
                memo.apply(&ctx, &op, &app).unwrap();
                let traffic = ctx.traffic() - before;
                (traffic, sink.read(&ctx).unwrap())
            };
            let (first, computed) = apply();
            let (second, reused) = apply();
            let stats = memo.stats();
            let s = stage(&stats, which);
            let chunks = op.chunk_count(which) as u64;
            let case = format!("{what:?} {from:?} -> {to:?}, {policy}");
            eprintln!("{case}: first {first:?}, second {second:?}");
            assert_eq!((s.misses, s.hits), (chunks, chunks), "{case}: {s:?}");
            let on_host = if *to == Residency::Host { chunks } else { 0 };
            assert_eq!(s.formed_on_host, on_host, "{case}");
            assert_eq!(s.promotions, 0, "{case}");
            assert!(first.bytes_uploaded + first.bytes_downloaded > chunks * block_bytes);
            assert!(
                second.bytes_uploaded < block_bytes && second.bytes_downloaded < block_bytes,
                "{case}: {second:?}"
            );
            if policy.is_certified() {
                let scale = computed.iter().fold(0f32, |m, v| m.max(v.abs()));
                let worst = computed
                    .iter()
                    .zip(&reused)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                // NaN fails this comparison.
                assert!(worst <= 1e-5 * scale, "{case}: {worst} of {scale}");
            } else {
                assert_eq!(bits(&computed), bits(&reused), "{case}");
            }
        }
    }
    // Without host memory for the memo, `certified` compares on the device: the chunks are still
    // reused, but their inputs are uploaded for the comparison.
    let policy: MemoPolicy = "certified:0.01".parse().unwrap();
    let no_host = MemoOptions {
        host_bytes: 0,
        ..options(policy)
    };
    let (app, _sink) = bind(Apply::Usfft2d, &host, &host, 22);
    let mut memo = Memo::with_staging(&ctx, &op, no_host, Some(&staging)).unwrap();
    memo.apply(&ctx, &op, &app).unwrap();
    ctx.wait().unwrap();
    ctx.complete_downloads().unwrap();
    let before = ctx.traffic();
    memo.apply(&ctx, &op, &app).unwrap();
    let second = ctx.traffic() - before;
    let stats = memo.stats();
    let s = stage(&stats, Stage::Usfft2d);
    let chunks = op.chunk_count(Stage::Usfft2d) as u64;
    assert_eq!((s.hits, s.formed_on_host), (chunks, 0), "{s:?}");
    assert!(second.bytes_uploaded >= chunks * block_bytes, "{second:?}");
}
