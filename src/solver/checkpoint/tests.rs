//! Tests of the checkpoint file: the round trip, and refusals of damaged, edited, inconsistent
//! and older files; a failed write leaves the previous checkpoint.

use super::*;
use crate::geometry::Tilt;
use crate::hash::fnv1a;
use serde_json::{json, Value};

/// An edit of a checkpoint's JSON header.
type Edit = fn(&mut Value);

fn report(iteration: usize, rho: f64) -> IterationReport {
    IterationReport {
        iteration,
        data_term: 1.5,
        tv_term: 0.25,
        dual_term: -0.125,
        penalty_term: 0.0625,
        lagrangian: 0.90625,
        primal_residual: 0.25,
        dual_residual: 0.5,
        rho,
        change: 1e-2,
        primal_relative: 2e-2,
        dual_relative: 3e-2,
    }
}

/// A consistent state after 3 iterations, the last of which halved the penalty, with
/// distinct values in every array.
fn sample() -> (Checkpoint, [Vec<f32>; ARRAY_COUNT]) {
    sample_of(AdmmParams::default())
}

/// [`sample`] of the solver parameters `params`.
fn sample_of(params: AdmmParams) -> (Checkpoint, [Vec<f32>; ARRAY_COUNT]) {
    let geometry = Geometry::cube(4, 2, Tilt::from_phi(1.2));
    let lengths = Checkpoint::array_lengths(&geometry, &params);
    let mut next = 0.0f32;
    let arrays = lengths.map(|l| {
        (0..l)
            .map(|_| {
                next += 0.75;
                next
            })
            .collect()
    });
    let c = Checkpoint {
        iteration: 3,
        rho: 0.25,
        geometry,
        params,
        data_hash: 99,
        last_report: Some(report(2, 0.5)),
        lengths,
    };
    (c, arrays)
}

fn write(path: &Path, c: &Checkpoint, arrays: &[Vec<f32>; ARRAY_COUNT]) {
    c.write(path, |a, start, len| {
        Ok::<_, CheckpointError>(arrays[a][start..start + len].to_vec())
    })
    .unwrap();
}

/// A written sample checkpoint: its directory, path and bytes.
fn written() -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.ckpt");
    let (c, arrays) = sample();
    write(&path, &c, &arrays);
    let bytes = std::fs::read(&path).unwrap();
    (dir, path, bytes)
}

/// `bytes` with the JSON header edited by `f` (its length field follows it); the trailer is
/// the old one, or with `rehash` the checksum of the edited file.
fn edited(bytes: &[u8], f: impl FnOnce(&mut Value), rehash: bool) -> Vec<u8> {
    let len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[16..16 + len]).unwrap();
    f(&mut header);
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&bytes[16 + len..bytes.len() - 8]);
    let trailer = match rehash {
        true => fnv1a(&out).to_le_bytes(),
        false => bytes[bytes.len() - 8..].try_into().unwrap(),
    };
    out.extend_from_slice(&trailer);
    out
}

fn corrupt_reason(path: &Path, bytes: &[u8]) -> String {
    std::fs::write(path, bytes).unwrap();
    match Checkpoint::read(path) {
        Err(CheckpointError::Corrupt { reason, .. }) => reason,
        other => panic!("not refused as corrupt: {other:?}"),
    }
}

#[test]
fn round_trip_and_damage_detection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.ckpt");
    let (c, arrays) = sample();
    write(&path, &c, &arrays);
    let mut back: [Vec<f32>; ARRAY_COUNT] = c.lengths.map(|l| vec![f32::NAN; l]);
    let read = Checkpoint::read_arrays(
        &path,
        |_| Ok::<_, CheckpointError>(()),
        |a, start, words| {
            back[a][start..start + words.len()].copy_from_slice(words);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(read, c);
    assert_eq!(back, arrays);
    assert!(!path.with_extension("partial").exists());
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 9;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let damaged = Checkpoint::read(&path).unwrap_err();
    assert!(
        matches!(damaged, CheckpointError::Corrupt { ref reason, .. } if reason.contains("checksum")),
        "{damaged}"
    );
    for cut in [bytes.len() - 8, bytes.len() / 2, 20, 3] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        assert!(
            matches!(
                Checkpoint::read(&path),
                Err(CheckpointError::Corrupt { .. })
            ),
            "cut at {cut}"
        );
    }
    std::fs::write(&path, b"junk").unwrap();
    assert!(matches!(
        Checkpoint::read(&path),
        Err(CheckpointError::Corrupt { .. })
    ));
}

#[test]
fn a_flipped_bit_anywhere_in_the_file_is_refused() {
    let (_dir, path, bytes) = written();
    // Every byte, each bit position in turn.
    for i in 0..bytes.len() {
        let bit = i % 8;
        let mut damaged = bytes.clone();
        damaged[i] ^= 1 << bit;
        std::fs::write(&path, &damaged).unwrap();
        assert!(
            matches!(
                Checkpoint::read(&path),
                Err(CheckpointError::Corrupt { .. })
            ),
            "bit {bit} of byte {i} of {}",
            bytes.len()
        );
    }
}

/// Each header field edited to a value that is consistent with the rest, the checksum left
/// as it was: only the checksum over the whole file can tell.
#[test]
fn a_consistent_header_edit_is_refused_by_the_checksum() {
    let (_dir, path, bytes) = written();
    let edits: [(&str, Edit); 7] = [
        // 3 -> 2 iterations with the report of iteration 1: what a resume would trust.
        ("iteration", |h| {
            h["iteration"] = json!(2);
            h["last_report"]["iteration"] = json!(1);
        }),
        // The report's penalty, not halved.
        ("rho_bits", |h| h["rho_bits"] = json!(0.5f64.to_bits())),
        // A report that meets the convergence test at once.
        ("last_report", |h| {
            for key in ["change", "primal_relative", "dual_relative"] {
                h["last_report"][key] = json!(1e-9);
            }
        }),
        ("geometry", |h| {
            let mut g: Geometry = serde_json::from_value(h["geometry"].clone()).unwrap();
            g.tilt = Tilt::from_phi(1.3);
            h["geometry_fingerprint"] = json!(g.fingerprint());
            h["geometry"] = serde_json::to_value(g).unwrap();
        }),
        ("params", |h| h["params"]["alpha"] = json!(0.5)),
        ("data_hash", |h| h["data_hash"] = json!(100)),
        ("params.outer_iterations", |h| {
            h["params"]["outer_iterations"] = json!(4)
        }),
    ];
    for (field, edit) in &edits {
        let reason = corrupt_reason(&path, &edited(&bytes, *edit, false));
        assert!(reason.contains("checksum mismatch"), "{field}: {reason}");
        // Re-checksummed, the same edit passes: the checksum is unkeyed (module docs).
        std::fs::write(&path, edited(&bytes, *edit, true)).unwrap();
        assert!(Checkpoint::read(&path).is_ok(), "{field}");
    }
}

/// Edits to values inconsistent with the rest of the header are refused by name, whether or
/// not the checksum was recomputed after them.
#[test]
fn an_inconsistent_header_is_refused_naming_the_field() {
    let (_dir, path, bytes) = written();
    let edits: [(&str, Edit); 14] = [
        ("iteration = 301", |h| {
            h["iteration"] = json!(301);
            h["last_report"]["iteration"] = json!(300);
        }),
        ("rho = 0", |h| h["rho_bits"] = json!(0u64)),
        ("rho = NaN", |h| h["rho_bits"] = json!(f64::NAN.to_bits())),
        ("rho = -0.25", |h| {
            h["rho_bits"] = json!((-0.25f64).to_bits())
        }),
        ("rho = 0.125", |h| h["rho_bits"] = json!(0.125f64.to_bits())),
        ("last_report.iteration = 1", |h| {
            h["last_report"]["iteration"] = json!(1)
        }),
        ("last_report missing", |h| h["last_report"] = Value::Null),
        ("after 0 iterations", |h| h["iteration"] = json!(0)),
        ("lengths = [64, 192, 192, 192, 32, 64]", |h| {
            h["lengths"][4] = json!(32)
        }),
        ("lengths = [192, 64,", |h| {
            h["lengths"][0] = json!(192);
            h["lengths"][1] = json!(64);
        }),
        ("geometry_fingerprint = 7", |h| {
            h["geometry_fingerprint"] = json!(7)
        }),
        ("geometry: phi = 4", |h| {
            let mut g: Geometry = serde_json::from_value(h["geometry"].clone()).unwrap();
            g.tilt = Tilt::from_phi(4.0);
            h["geometry_fingerprint"] = json!(g.fingerprint());
            h["geometry"] = serde_json::to_value(g).unwrap();
        }),
        ("params: solver parameter outer_iterations = 0", |h| {
            h["params"]["outer_iterations"] = json!(0)
        }),
        (
            "iteration = 3: more than the parameters' outer_iterations = 2",
            |h| h["params"]["outer_iterations"] = json!(2),
        ),
    ];
    for (expected, edit) in &edits {
        for rehash in [false, true] {
            let reason = corrupt_reason(&path, &edited(&bytes, *edit, rehash));
            assert!(reason.contains(expected), "{expected}: {reason}");
        }
    }
}

/// Parameters without the carried residual write an empty sixth array; parameters that carry it
/// with no data residual are refused.
#[test]
fn a_carried_residual_needs_its_array() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.ckpt");
    let (c, arrays) = sample_of(AdmmParams {
        carried_residual: false,
        ..AdmmParams::default()
    });
    assert_eq!(c.lengths[ARRAY_COUNT - 1], 0);
    write(&path, &c, &arrays);
    assert_eq!(Checkpoint::read(&path).unwrap(), c);
    let bytes = std::fs::read(&path).unwrap();
    let carried_without_it = |h: &mut Value| h["params"]["carried_residual"] = json!(true);
    let reason = corrupt_reason(&path, &edited(&bytes, carried_without_it, true));
    assert!(
        reason.contains("lengths = [64, 192, 192, 192, 64, 0]"),
        "{reason}"
    );
}

#[test]
fn an_older_version_is_refused_with_what_to_do() {
    let (_dir, path, bytes) = written();
    let older = edited(&bytes, |h| h["version"] = json!(3), true);
    let reason = corrupt_reason(&path, &older);
    assert!(
        reason.contains("version 3") && reason.contains("without --resume"),
        "{reason}"
    );
    // Versions 4 to 6 carry the A u of the Gaussian kernel's operator.
    for version in 4..=6 {
        let gaussian = edited(&bytes, |h| h["version"] = json!(version), true);
        let reason = corrupt_reason(&path, &gaussian);
        assert!(
            reason.contains(&format!("version {version}"))
                && reason.contains("Gaussian")
                && reason.contains("without --resume"),
            "{reason}"
        );
    }
    // Version 7 stored A u by angle.
    let by_angle = edited(&bytes, |h| h["version"] = json!(7), true);
    let reason = corrupt_reason(&path, &by_angle);
    assert!(
        reason.contains("version 7")
            && reason.contains("by detector row")
            && reason.contains("without --resume"),
        "{reason}"
    );
    // Version 8 stored the volume by z slice.
    let by_slice = edited(&bytes, |h| h["version"] = json!(8), true);
    let reason = corrupt_reason(&path, &by_slice);
    assert!(
        reason.contains("version 8")
            && reason.contains("by y row")
            && reason.contains("without --resume"),
        "{reason}"
    );
    // Version 9's alpha was the absolute TV weight.
    let absolute = edited(&bytes, |h| h["version"] = json!(9), true);
    let reason = corrupt_reason(&path, &absolute);
    assert!(
        reason.contains("version 9")
            && reason.contains("relative to the data's scale")
            && reason.contains("without --resume"),
        "{reason}"
    );
    let newer = edited(&bytes, |h| h["version"] = json!(VERSION + 1), true);
    assert!(corrupt_reason(&path, &newer).contains("newer lamino"));
}

/// A refusal by `accept` is reported as such on an intact file, and as damage when the file
/// is damaged (the damage may be what made `accept` refuse).
#[test]
fn a_refusal_of_a_damaged_file_reports_the_damage() {
    let (_dir, path, bytes) = written();
    let refuse = |path: &Path| {
        let mut sunk = 0;
        let e = Checkpoint::read_arrays(
            path,
            |_| {
                Err(CheckpointError::Read {
                    path: "accept".into(),
                    reason: "different data".into(),
                })
            },
            |_, _, _| {
                sunk += 1;
                Ok(())
            },
        )
        .unwrap_err();
        assert!(sunk == 0, "a refused checkpoint reached the sink");
        e
    };
    assert!(refuse(&path).to_string().contains("different data"));
    std::fs::write(&path, edited(&bytes, |h| h["data_hash"] = json!(98), false)).unwrap();
    let e = refuse(&path);
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
}

#[test]
fn an_inconsistent_state_is_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.ckpt");
    let (c, arrays) = sample();
    let mut bad = c.clone();
    bad.iteration = 4;
    let err = bad
        .write(&path, |a, start, len| {
            Ok::<_, CheckpointError>(arrays[a][start..start + len].to_vec())
        })
        .unwrap_err();
    assert!(
        matches!(err, CheckpointError::Write { ref reason, .. } if reason.contains("last_report.iteration = 2")),
        "{err}"
    );
    assert!(!path.exists() && !path.with_extension("partial").exists());
}

#[test]
fn a_failed_write_leaves_the_previous_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.ckpt");
    let (c, arrays) = sample();
    write(&path, &c, &arrays);
    let before = std::fs::read(&path).unwrap();
    let mut later = c.clone();
    later.iteration = 4;
    later.last_report = Some(report(3, 0.25));
    let err = later
        .write(&path, |a, start, len| {
            if a == 3 {
                Err(CheckpointError::Write {
                    path: "device".into(),
                    reason: "lost".into(),
                })
            } else {
                Ok(arrays[a][start..start + len].to_vec())
            }
        })
        .unwrap_err();
    assert!(err.to_string().contains("lost"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(!path.with_extension("partial").exists());
}

/// The words of each array of `lengths` that member `index` of `members` keeps (each array cut
/// into `members` contiguous shares, as MPI ranks keep them).
fn shares(
    lengths: &[usize; ARRAY_COUNT],
    index: usize,
    members: usize,
) -> [Range<usize>; ARRAY_COUNT] {
    lengths.map(|l| crate::distributed::shares::share_range(index, members, l))
}

/// Writes `c` as `members` parts of generation `generation` and their manifest.
fn write_parts(
    path: &Path,
    c: &Checkpoint,
    arrays: &[Vec<f32>; ARRAY_COUNT],
    generation: &str,
    members: usize,
) {
    let parts = (0..members)
        .map(|r| {
            c.write_part(
                path,
                generation,
                r,
                shares(&c.lengths, r, members),
                |a, s, l| Ok::<_, CheckpointError>(arrays[a][s..s + l].to_vec()),
            )
            .unwrap()
        })
        .collect();
    c.write_manifest(path, parts).unwrap();
}

/// What `read_share` hands the sink of `share`: every word it sinks, NaN elsewhere.
fn read_back(
    path: &Path,
    share: Option<&[Range<usize>; ARRAY_COUNT]>,
    lengths: &[usize; ARRAY_COUNT],
) -> [Vec<f32>; ARRAY_COUNT] {
    let mut back: [Vec<f32>; ARRAY_COUNT] = lengths.map(|l| vec![f32::NAN; l]);
    Checkpoint::read_share(
        path,
        share,
        |_| Ok::<_, CheckpointError>(()),
        |a, start, words| {
            back[a][start..start + words.len()].copy_from_slice(words);
            Ok(())
        },
    )
    .unwrap();
    back
}

#[test]
fn parts_of_three_ranks_read_back_whole_or_by_the_shares_of_two() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.ckpt");
    let (c, arrays) = sample();
    write_parts(&path, &c, &arrays, "3-a", 3);
    assert_eq!(Checkpoint::read(&path).unwrap(), c);
    // One process: every word.
    assert_eq!(read_back(&path, None, &c.lengths), arrays);
    // Two ranks: each its share, nothing beyond it.
    for r in 0..2 {
        let share = shares(&c.lengths, r, 2);
        let back = read_back(&path, Some(&share), &c.lengths);
        for a in 0..ARRAY_COUNT {
            for (i, (&got, &want)) in back[a].iter().zip(&arrays[a]).enumerate() {
                match share[a].contains(&i) {
                    true => assert!(got == want, "array {a} word {i}"),
                    false => assert!(got.is_nan(), "array {a} word {i} outside the share"),
                }
            }
        }
    }
    // A single file reads by shares too.
    let single = dir.path().join("single.ckpt");
    write(&single, &c, &arrays);
    let share = shares(&c.lengths, 1, 2);
    let bits =
        |a: [Vec<f32>; ARRAY_COUNT]| a.map(|v| v.iter().map(|w| w.to_bits()).collect::<Vec<_>>());
    assert_eq!(
        bits(read_back(&single, Some(&share), &c.lengths)),
        bits(read_back(&path, Some(&share), &c.lengths))
    );
}

#[test]
fn a_manifest_replaces_the_previous_checkpoint_only_once_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.ckpt");
    let (c, arrays) = sample();
    write_parts(&path, &c, &arrays, "3-a", 3);
    let names = |dir: &Path| {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    };
    // Parts of a later state written, its manifest not (a rank was killed): the previous
    // checkpoint reads back whole.
    let mut later = c.clone();
    later.iteration = 4;
    later.last_report = Some(report(3, 0.25));
    let doubled: [Vec<f32>; ARRAY_COUNT] =
        arrays.clone().map(|a| a.iter().map(|v| 2.0 * v).collect());
    let part = later
        .write_part(&path, "4-b", 0, shares(&c.lengths, 0, 2), |a, s, l| {
            Ok::<_, CheckpointError>(doubled[a][s..s + l].to_vec())
        })
        .unwrap();
    std::fs::write(path.with_file_name("state.ckpt.4-b.r1.partial"), b"torn").unwrap();
    assert_eq!(Checkpoint::read(&path).unwrap(), c);
    assert_eq!(read_back(&path, None, &c.lengths), arrays);
    // Once the manifest is in place, the earlier parts and the torn one are gone.
    let other = later
        .write_part(&path, "4-b", 1, shares(&c.lengths, 1, 2), |a, s, l| {
            Ok::<_, CheckpointError>(doubled[a][s..s + l].to_vec())
        })
        .unwrap();
    later.write_manifest(&path, vec![part, other]).unwrap();
    assert_eq!(Checkpoint::read(&path).unwrap(), later);
    assert_eq!(read_back(&path, None, &c.lengths), doubled);
    assert_eq!(
        names(dir.path()),
        [
            "state.ckpt",
            "state.ckpt.4-b.r0.part",
            "state.ckpt.4-b.r1.part"
        ]
    );
    // A single-file checkpoint at the same path removes the parts.
    write(&path, &c, &arrays);
    assert_eq!(names(dir.path()), ["state.ckpt"]);
}

#[test]
fn an_edited_manifest_a_damaged_part_and_another_checkpoint_s_part_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.ckpt");
    let (c, arrays) = sample();
    write_parts(&path, &c, &arrays, "3-a", 2);
    let manifest = std::fs::read(&path).unwrap();
    // The header (iteration count, parts) is covered by the manifest's checksum.
    for edit in [
        (|h: &mut Value| h["data_hash"] = json!(98)) as Edit,
        |h| h["parts"][0]["hash"] = json!(1),
        |h| h["parts"][1]["words"][0][0] = json!(1),
    ] {
        let reason = corrupt_reason(&path, &edited(&manifest, edit, false));
        assert!(reason.contains("checksum mismatch"), "{reason}");
    }
    // Edited and rehashed, parts that do not tile the arrays are refused by name.
    let reason = corrupt_reason(
        &path,
        &edited(&manifest, |h| h["parts"][1]["words"][0][0] = json!(1), true),
    );
    assert!(reason.contains("the parts before it end at"), "{reason}");
    let reason = corrupt_reason(
        &path,
        &edited(
            &manifest,
            |h| h["parts"][1]["file"] = json!("../x.part"),
            true,
        ),
    );
    assert!(reason.contains("beside the manifest"), "{reason}");
    std::fs::write(&path, &manifest).unwrap();
    // A bit flipped in a part.
    let part = path.with_file_name("state.ckpt.3-a.r1.part");
    let good = std::fs::read(&part).unwrap();
    let mut bad = good.clone();
    bad[20] ^= 1;
    std::fs::write(&part, &bad).unwrap();
    let e = Checkpoint::read(&path).unwrap_err();
    assert!(
        matches!(&e, CheckpointError::Corrupt { path: p, reason } if *p == part && reason.contains("checksum mismatch")),
        "{e}"
    );
    // A rank whose share lies in the other part does not read the damaged one.
    let share = shares(&c.lengths, 0, 2);
    assert_eq!(
        read_back(&path, Some(&share), &c.lengths)[0][..share[0].end],
        arrays[0][..share[0].end]
    );
    // The part of another checkpoint, intact in itself.
    let mut other = c.clone();
    other.data_hash = 7;
    write_parts(
        &dir.path().join("other.ckpt"),
        &other,
        &arrays.clone().map(|a| a.iter().map(|v| v + 1.0).collect()),
        "3-a",
        2,
    );
    std::fs::copy(dir.path().join("other.ckpt.3-a.r1.part"), &part).unwrap();
    let e = Checkpoint::read(&path).unwrap_err();
    assert!(e.to_string().contains("another checkpoint"), "{e}");
    // A missing part.
    std::fs::remove_file(&part).unwrap();
    let e = Checkpoint::read(&path).unwrap_err();
    assert!(
        matches!(&e, CheckpointError::Read { path: p, .. } if *p == part),
        "{e}"
    );
}

/// The half-written file a kill leaves (`NAME.partial`) is removed by the next checkpoint
/// written at that path, as stale parts are.
#[test]
fn the_next_write_removes_a_half_written_file_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.ckpt");
    let (c, arrays) = sample();
    let left = dir.path().join("checkpoint.ckpt.partial");
    std::fs::write(&left, b"half").unwrap();
    write(&path, &c, &arrays);
    assert!(!left.exists());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["checkpoint.ckpt"]);
}
