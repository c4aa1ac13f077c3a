//! The library pipeline: cancellation with a checkpoint, resume to the uninterrupted result,
//! lateral padding, and refusal of bad projections.

mod common;

use lamino::Tilt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::ctx;
use lamino::geometry::Geometry;
use lamino::operator::{Apply, LaminoOperator, OperatorOptions};
use lamino::params::AdmmParams;
use lamino::plan::{Mode, PlanError};
use lamino::recon::{ReconError, Reconstructor};
use lamino::scan::{Projections, ScanError};
use num_complex::Complex32;

/// Projections (line integrals) of a centred box, computed with the operator and scaled back to
/// line-integral units.
fn projections(n: usize) -> Projections {
    let g = Geometry::cube(n, 8, Tilt::from_phi(1.92));
    let mut u = vec![Complex32::new(0.0, 0.0); g.volume_len()];
    for z in n / 2 - 2..n / 2 + 2 {
        for y in n / 4..3 * n / 4 {
            for x in n / 4..3 * n / 4 {
                u[(z * n + y) * n + x] = Complex32::new(1.0, 0.0);
            }
        }
    }
    let op = LaminoOperator::new(ctx(), &g, &OperatorOptions::default()).unwrap();
    let d = op
        .apply_host(ctx(), Apply::Forward, &[n, n, n], &u)
        .unwrap();
    let scale = ((g.n2 * g.ntheta()) as f32).sqrt();
    Projections::new(g, d.iter().map(|c| c.re * scale).collect()).unwrap()
}

#[test]
fn cancelling_writes_a_checkpoint_and_resuming_finishes_the_same_volume() {
    let p = projections(16);
    let params = AdmmParams::exactly(4);
    let full = Reconstructor::new(ctx()).params(params).run(&p).unwrap();
    assert!(full.completed && full.reports.len() == 4);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.ckpt");
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    let mut seen = Vec::new();
    let partial = Reconstructor::new(ctx())
        .params(params)
        .checkpoint_every(path.clone(), 100)
        .cancel_flag(cancel)
        .on_progress(|pr| {
            seen.push((pr.iteration, pr.total));
            if pr.iteration == 1 {
                // As Ctrl-C would, while iteration 2 runs: it finishes, then the run stops.
                flag.store(true, Ordering::SeqCst);
            }
        })
        .run(&p)
        .unwrap();
    assert!(!partial.completed);
    assert_eq!(seen, vec![(0, 4), (1, 4), (2, 4)]);
    assert!(path.exists(), "cancelling must leave a checkpoint");

    let resumed = Reconstructor::new(ctx())
        .params(params)
        .resume_from(path)
        .run(&p)
        .unwrap();
    assert_eq!(resumed.resumed_from, Some(3));
    assert!(resumed.completed && resumed.reports.len() == 1);
    let same = resumed
        .volume
        .iter()
        .zip(&full.volume)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(
        same,
        "a resumed run must equal the uninterrupted one bit for bit"
    );
}

#[test]
fn padding_is_cropped_and_bad_projections_are_refused() {
    let p = projections(16);
    let params = AdmmParams::exactly(1);
    let r = Reconstructor::new(ctx())
        .params(params)
        .lateral_padding(4)
        .run(&p)
        .unwrap();
    assert_eq!(r.volume.len(), 16 * 16 * 16);
    assert!(r.volume.iter().all(|v| v.is_finite()));

    let g = p.geometry().clone();
    let mut values = p.values().to_vec();
    values[16 * 16 + 3] = f32::INFINITY;
    let err = Projections::new(g.clone(), values).unwrap_err();
    assert!(
        matches!(
            err,
            ScanError::NonFinite {
                angle: 1,
                row: 0,
                column: 3,
                ..
            }
        ),
        "{err}"
    );
    let err = Projections::new(g, vec![0.0; 5]).unwrap_err();
    assert!(matches!(err, ScanError::Shape { .. }), "{err}");
}

#[test]
fn the_plan_holds_what_the_run_holds_and_a_budget_too_small_for_one_chunk_is_refused() {
    let p = projections(16);
    let params = AdmmParams::exactly(1);
    // A context of its own: the peak must not count other tests' arrays.
    let own = common::new_context();
    let done = Reconstructor::new(&own).params(params).run(&p).unwrap();
    assert_eq!(done.plan.mode, Mode::InCore);
    let ratio = done.plan.device_bytes as f64 / done.peak_device_bytes as f64;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "plan {} vs peak {}",
        done.plan.device_bytes,
        done.peak_device_bytes
    );
    let err = Reconstructor::new(ctx())
        .params(params)
        .device_memory_budget(64 << 10)
        .run(&p)
        .unwrap_err();
    assert!(
        matches!(err, ReconError::Plan(PlanError::DeviceBudget { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("MiB"), "{err}");
}

/// A job bins its projections, removes the stripes, sets the axis given in unbinned columns and
/// boxes the volume, in that order, recording each in its preprocessing: the projections are
/// those of the library's steps taken by hand, each step is heard of once, and its plan is the
/// one planned without reading (`--dry-run`'s). It runs under the reconstruction's device
/// budget: the device is capped at it from the preparation on. A listener's error and the
/// cancel flag stop a job before its solve.
#[test]
fn a_job_takes_the_steps_in_order_and_records_them() {
    use lamino::geometry::VolumeBox;
    use lamino::preprocess::{bin_projections, remove_stripes, AxisSource, StripeRemoval};
    use lamino::recon::input::LoadedProjections;
    use lamino::recon::{AxisStep, Job, JobError, JobEvent, JobInput, Preparation, Prepared};

    let scan = common::chip_projections(32, 3);
    let b = 2;
    let method = StripeRemoval::Sorting { size: None };
    let axis = lamino::DetectorColumn::recorded(15.25);
    let volume = VolumeBox {
        z: 4..12,
        y: 2..14,
        x: 2..14,
    };
    let job = || Job {
        input: JobInput::Loaded {
            loaded: LoadedProjections::given(scan.clone(), "a test", "a test"),
            binning: b,
        },
        preparation: Preparation {
            stripes: Some(method),
            axis: AxisStep::Column(axis),
            volume: Some(volume.clone()),
            shifts: None,
            align: None,
        },
    };
    let mut heard = Vec::new();
    // A context of its own: the budget stays on it.
    let device = common::new_context();
    let budget = 64 << 20;
    let reconstructor = Reconstructor::new(&device).device_memory_budget(budget);
    let dry = reconstructor.plan_job(&job(), &mut |_| Ok(())).unwrap();
    let opened = reconstructor
        .open(job(), &mut |event| {
            heard.push(match event {
                JobEvent::Loaded(loaded) => {
                    assert_eq!(loaded.projections.geometry().detw, 16, "binned");
                    "loaded"
                }
                JobEvent::Prepared(Prepared::StripesRemoved { share, .. }) => {
                    assert!(share.is_none(), "one process has no share");
                    "stripes"
                }
                JobEvent::Prepared(Prepared::Boxed { kept, of }) => {
                    assert_eq!(of, [16, 16]);
                    assert!(kept[0] <= 16 && kept[1] <= 16, "{kept:?}");
                    "box"
                }
                JobEvent::Planned { plan, geometry, .. } => {
                    assert_eq!(geometry.n0, 8, "the box's planes");
                    assert_eq!(plan.device_bytes, dry.device_bytes);
                    "planned"
                }
                other => panic!("a step not asked for: {other:?}"),
            });
            Ok(())
        })
        .unwrap();
    assert_eq!(heard, ["loaded", "stripes", "box", "planned"]);
    assert_eq!(device.device_budget(), Some(budget));
    assert_eq!(
        serde_json::to_value(&opened.plan).unwrap(),
        serde_json::to_value(&dry).unwrap(),
        "the plan of the job read is the one planned without reading"
    );
    let binned = bin_projections(&scan, b).unwrap();
    let method = method.resolved(binned.geometry().detw);
    let by_hand = remove_stripes(&binned, method)
        .unwrap()
        .with_rotation_axis(axis.in_binned(b))
        .unwrap()
        .with_volume(&volume)
        .unwrap();
    let (prepared, pre) = (&opened.projections, &opened.preprocessing);
    assert_eq!(prepared.geometry(), by_hand.geometry());
    assert!(prepared.values() == by_hand.values(), "the same values");
    assert_eq!(pre.binning, b);
    assert_eq!(pre.stripe_removal, Some(method));
    assert_eq!(pre.rotation_axis_source, AxisSource::Given);
    assert_eq!(pre.rotation_axis, axis);
    assert_eq!(pre.axis_search, None);
    assert_eq!(pre.tilt_source.as_deref(), Some("a test"));

    // A listener that cannot go on stops the job at the step it was told of.
    let refused = reconstructor.open(job(), &mut |event| match event {
        JobEvent::Prepared(Prepared::StripesRemoved { .. }) => Err("no room for it".into()),
        _ => Ok(()),
    });
    assert!(
        matches!(&refused, Err(JobError::Listener(e)) if e.to_string() == "no room for it"),
        "{refused:?}"
    );
    // A stop asked for before the solve ends the job there, naming the step it stopped.
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let cancelled = Reconstructor::new(&device)
        .cancel_flag(cancel)
        .open(job(), &mut |_| Ok(()));
    assert!(
        matches!(
            cancelled,
            Err(JobError::Cancelled {
                during: "reading the projections"
            })
        ),
        "{cancelled:?}"
    );
}

/// Projection matching that has not settled within its rounds is an error that says so, and a
/// cancel flag stops it before its next round; neither gives shifts.
#[test]
fn projection_matching_that_does_not_settle_is_an_error_and_a_cancel_stops_it() {
    use lamino::preprocess::AlignOptions;
    use lamino::recon::align::align;
    use lamino::recon::AlignError;
    use lamino::simulate::{simulated_moving_scan, Motion, PhantomKind, ScanSpec};
    let spec = ScanSpec {
        phantom: PhantomKind::Blobs,
        size: 8,
        angles: 8,
        tilt_deg: 30.0,
        photons: None,
        seed: 1,
        rotation_axis: None,
    };
    let motion = Motion {
        jitter_px: 1.0,
        drift_px: 0.0,
        seed: 3,
    };
    let sim = simulated_moving_scan(&spec, motion).unwrap();
    let scan = Projections::new(sim.geometry, sim.line_integrals).unwrap();
    let one_round = AlignOptions {
        max_rounds: 1,
        tolerance_px: 1e-9,
        ..AlignOptions::DEFAULT
    };
    let mut heard = 0;
    let e = align(
        ctx(),
        &scan,
        AdmmParams::default(),
        &one_round,
        None,
        &mut |_| heard += 1,
    )
    .unwrap_err();
    assert!(
        matches!(e, AlignError::NotConverged { rounds: 1, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("did not converge after"), "{e}");
    assert_eq!(heard, 1);
    let cancel = AtomicBool::new(true);
    let e = align(
        ctx(),
        &scan,
        AdmmParams::default(),
        &AlignOptions::DEFAULT,
        Some(&cancel),
        &mut |_| panic!("no round runs once cancelled"),
    )
    .unwrap_err();
    assert!(matches!(e, AlignError::Cancelled), "{e}");
}
