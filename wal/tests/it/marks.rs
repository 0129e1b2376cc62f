//! Per-tenant frontier `X_t`, snapshot mark `S_t` and snapshot files: persisted atomically,
//! never moving back, `S_t <= X_t`, and holds that keep the frontier below a frame.

use std::fs;
use std::sync::Arc;

use ourios_wal::testing::{Failure, FaultPoint, FaultyIo};
use ourios_wal::{
    DiscardReason, FrontierOutcome, HoldOutcome, Lsn, MarkError, Marks, OpenError, ReplayMode,
    Snapshot, SnapshotOutcome, Stamp, Wal,
};

use crate::common::{config, open, replay_all, tempdir, tenant};

/// Opens a WAL in `dir` and appends `n` frames for tenant `t`.
fn wal_with_frames(dir: &std::path::Path, n: u64) -> Wal {
    let (wal, _) = open(dir);
    for i in 0..n {
        wal.append(&tenant("t"), &[i as u8]).unwrap();
    }
    wal
}

/// Proves a stamped frontier and snapshot survive a reopen exactly (`X_t`, `S_t` and the
/// snapshot bytes).
/// Reasoned mutation (not run as a mutant): skip `commit_renames` for the marks files and the
/// reopened frontier is 0.
#[test]
fn marks_frontier_and_snapshot_persist_across_reopen() {
    let dir = tempdir();
    let t = tenant("t");
    {
        let wal = wal_with_frames(dir.path(), 5);
        let out = wal
            .stamp(&[Stamp {
                tenant: &t,
                frontier: Lsn(4),
                snapshot: Some(b"miner state at 4"),
            }])
            .unwrap();
        assert_eq!(
            out[0].frontier,
            FrontierOutcome::Advanced {
                from: Lsn::ZERO,
                to: Lsn(4)
            }
        );
        assert_eq!(out[0].snapshot, SnapshotOutcome::Installed { lsn: Lsn(4) });
    }
    let (wal, report) = open(dir.path());
    assert!(report.discarded_snapshots.is_empty());
    assert_eq!(
        wal.marks(&t),
        Marks {
            frontier: Lsn(4),
            snapshot: Lsn(4),
            hold: None
        }
    );
    assert_eq!(
        wal.read_snapshot(&t).unwrap(),
        Some(Snapshot {
            lsn: Lsn(4),
            state: b"miner state at 4".to_vec()
        })
    );
}

/// Proves frontiers and snapshot marks never move back: a lower stamp is ignored and reported
/// `Unchanged`/`Stale`, in memory and on disk.
/// Reasoned mutation (not run as a mutant): replace `current.frontier.max(target)` with `target` in
/// `Wal::stamp` and the frontier regresses to 2.
#[test]
fn marks_regression_is_ignored_not_applied() {
    let dir = tempdir();
    let t = tenant("t");
    {
        let wal = wal_with_frames(dir.path(), 5);
        wal.stamp(&[Stamp {
            tenant: &t,
            frontier: Lsn(5),
            snapshot: Some(b"five"),
        }])
        .unwrap();
        let out = wal
            .stamp(&[Stamp {
                tenant: &t,
                frontier: Lsn(2),
                snapshot: Some(b"two"),
            }])
            .unwrap();
        assert_eq!(
            out[0].frontier,
            FrontierOutcome::Unchanged { current: Lsn(5) }
        );
        assert_eq!(out[0].snapshot, SnapshotOutcome::Stale { current: Lsn(5) });
        assert_eq!(
            wal.stamp_frontier(&t, Lsn(5)).unwrap(),
            FrontierOutcome::Unchanged { current: Lsn(5) }
        );
    }
    let (wal, _) = open(dir.path());
    assert_eq!(
        (wal.marks(&t).frontier, wal.marks(&t).snapshot),
        (Lsn(5), Lsn(5))
    );
    assert_eq!(wal.read_snapshot(&t).unwrap().unwrap().state, b"five");
}

/// Proves a frontier above the durable lsn is refused before anything is written, even for the
/// other tenants of the same call; so is a tenant listed twice.
/// Reasoned mutation (not run as a mutant): remove the `s.frontier > durable` check and tenant `a`
/// is stamped to 9.
#[test]
fn marks_frontier_beyond_the_durable_lsn_is_refused_atomically() {
    let dir = tempdir();
    let wal = wal_with_frames(dir.path(), 3);
    let (a, b) = (tenant("a"), tenant("b"));
    let err = wal
        .stamp(&[
            Stamp {
                tenant: &a,
                frontier: Lsn(2),
                snapshot: None,
            },
            Stamp {
                tenant: &b,
                frontier: Lsn(9),
                snapshot: None,
            },
        ])
        .unwrap_err();
    assert!(
        matches!(&err, MarkError::BeyondDurable { tenant, requested: Lsn(9), durable: Lsn(3) }
            if tenant == &b),
        "{err:?}"
    );
    assert_eq!(wal.marks(&a).frontier, Lsn::ZERO);
    let err = wal
        .stamp(&[
            Stamp {
                tenant: &a,
                frontier: Lsn(1),
                snapshot: None,
            },
            Stamp {
                tenant: &a,
                frontier: Lsn(2),
                snapshot: None,
            },
        ])
        .unwrap_err();
    assert!(matches!(err, MarkError::DuplicateTenant { .. }), "{err:?}");
    assert_eq!(wal.marks(&a).frontier, Lsn::ZERO);
}

/// Proves a failure while persisting (temp file sync, rename) leaves the old frontier both in
/// memory and on disk, and a failed directory sync leaves memory at the old value (memory never
/// claims more than is durable; the disk may hold either value).
/// Reasoned mutation (not run as a mutant): in `Wal::stamp`, update the in-memory frontier before
/// `commit_renames` and the in-memory frontier is 3 after the failure.
#[test]
fn marks_failed_persist_keeps_the_old_marks() {
    for point in [FaultPoint::Sync, FaultPoint::Rename, FaultPoint::DirSync] {
        let dir = tempdir();
        let t = tenant("t");
        {
            let io = FaultyIo::std();
            let (wal, _) =
                Wal::open_with_io(config(dir.path(), 1 << 20), Arc::new(io.clone())).unwrap();
            for i in 0..3 {
                wal.append(&t, &[i]).unwrap();
            }
            wal.stamp_frontier(&t, Lsn(1)).unwrap();
            io.fail(point, 1, Failure::Error);
            let err = wal.stamp_frontier(&t, Lsn(3)).unwrap_err();
            assert!(matches!(err, MarkError::Io { .. }), "{point:?}: {err:?}");
            assert_eq!(wal.marks(&t).frontier, Lsn(1), "{point:?}");
        }
        let (wal, _) = open(dir.path());
        let on_disk = wal.marks(&t).frontier;
        if point == FaultPoint::DirSync {
            assert!(on_disk == Lsn(1) || on_disk == Lsn(3), "{on_disk:?}");
        } else {
            assert_eq!(on_disk, Lsn(1), "{point:?}");
        }
    }
}

/// Proves a corrupt snapshot file is discarded on open (reported, `S_t = 0`, no snapshot to
/// read) and the tenant then replays in full: frames up to `X_t` in regeneration-only mode
/// instead of skipped.
/// Reasoned mutation (not run as a mutant): in `marks::load`, keep the snapshot lsn when decoding
/// fails (e.g. use the frontier) and the frames come back `Skipped` with no state to restore them
/// from.
#[test]
fn marks_corrupt_snapshot_is_discarded_and_the_tenant_replays_in_full() {
    let dir = tempdir();
    let t = tenant("t");
    {
        let wal = wal_with_frames(dir.path(), 4);
        wal.stamp(&[Stamp {
            tenant: &t,
            frontier: Lsn(3),
            snapshot: Some(b"state"),
        }])
        .unwrap();
    }
    let snap = dir.path().join("tenants").join("t.snap");
    let mut bytes = fs::read(&snap).unwrap();
    let last = bytes.len() - 6;
    bytes[last] ^= 1;
    fs::write(&snap, bytes).unwrap();
    let (wal, report) = open(dir.path());
    assert_eq!(report.discarded_snapshots.len(), 1);
    assert_eq!(report.discarded_snapshots[0].reason, DiscardReason::Corrupt);
    assert_eq!(report.discarded_snapshots[0].tenant, t);
    assert_eq!(wal.read_snapshot(&t).unwrap(), None);
    let modes: Vec<_> = replay_all(&wal).iter().map(|f| f.mode).collect();
    use ReplayMode::*;
    assert_eq!(
        modes,
        vec![RegenerationOnly, RegenerationOnly, RegenerationOnly, Normal]
    );
}

/// Proves a damaged marks file fails open with the file named (it is replaced atomically, so
/// damage is not a torn write and must not silently reset the frontier), and that leftover
/// temporary files from an interrupted stamp are removed.
/// Reasoned mutation (not run as a mutant): in `marks::load`, map a failed decode to frontier 0 and
/// the open succeeds.
#[test]
fn marks_damaged_marks_file_fails_open_and_leftover_temp_files_are_removed() {
    let dir = tempdir();
    let t = tenant("t");
    {
        let wal = wal_with_frames(dir.path(), 2);
        wal.stamp_frontier(&t, Lsn(2)).unwrap();
    }
    let tenants = dir.path().join("tenants");
    fs::write(tenants.join("t.marks.tmp"), b"half written").unwrap();
    drop(open(dir.path()));
    assert!(!tenants.join("t.marks.tmp").exists());
    let marks = tenants.join("t.marks");
    let mut bytes = fs::read(&marks).unwrap();
    bytes[13] ^= 0xff;
    fs::write(&marks, bytes).unwrap();
    let err = Wal::open(config(dir.path(), 1 << 20)).unwrap_err();
    assert!(
        matches!(&err, OpenError::CorruptMarks { path } if *path == marks),
        "{err:?}"
    );
    assert!(err.to_string().contains("t.marks"), "{err}");
}

/// Proves a hold keeps every later stamp below the held frame (clamped to `frame - 1` and
/// reported `Held`), several holds keep the lowest, and a snapshot at the requested position
/// is then not installed because it would be ahead of the clamped frontier.
/// Reasoned mutation (not run as a mutant): in `Marks::cap`, return `self.hold` (not `hold - 1`)
/// and the frontier reaches the held frame.
#[test]
fn hold_clamps_the_frontier_below_the_lowest_held_frame() {
    let dir = tempdir();
    let t = tenant("t");
    let wal = wal_with_frames(dir.path(), 10);
    assert_eq!(wal.hold(&t, Lsn(8)), HoldOutcome::Held { frame: Lsn(8) });
    assert_eq!(wal.hold(&t, Lsn(6)), HoldOutcome::Held { frame: Lsn(6) });
    assert_eq!(wal.hold(&t, Lsn(9)), HoldOutcome::Held { frame: Lsn(6) });
    let out = wal
        .stamp(&[Stamp {
            tenant: &t,
            frontier: Lsn(10),
            snapshot: Some(b"at ten"),
        }])
        .unwrap();
    assert_eq!(
        out[0].frontier,
        FrontierOutcome::Held {
            from: Lsn::ZERO,
            to: Lsn(5),
            requested: Lsn(10),
            hold: Lsn(6)
        }
    );
    assert_eq!(
        out[0].snapshot,
        SnapshotOutcome::AheadOfFrontier { frontier: Lsn(5) }
    );
    assert_eq!(wal.marks(&t).frontier, Lsn(5));
    assert_eq!(wal.marks(&t).snapshot, Lsn::ZERO);
    // A stamp below the hold is unaffected by it.
    let other = tenant("other");
    assert_eq!(
        wal.stamp_frontier(&other, Lsn(10)).unwrap(),
        FrontierOutcome::Advanced {
            from: Lsn::ZERO,
            to: Lsn(10)
        }
    );
}

/// Proves a hold on a frame the frontier already reached is reported, not silently accepted,
/// and that holds are cleared by reopening (in memory only).
/// Reasoned mutation (not run as a mutant): drop the `entry.frontier >= frame` test in `Wal::hold`
/// and it reports `Held` for a frame already stamped past.
#[test]
fn hold_already_past_is_reported_and_holds_clear_on_reopen() {
    let dir = tempdir();
    let t = tenant("t");
    {
        let wal = wal_with_frames(dir.path(), 6);
        wal.stamp_frontier(&t, Lsn(4)).unwrap();
        assert_eq!(
            wal.hold(&t, Lsn(3)),
            HoldOutcome::AlreadyPast { frontier: Lsn(4) }
        );
        assert_eq!(wal.hold(&t, Lsn(5)), HoldOutcome::Held { frame: Lsn(5) });
        assert_eq!(wal.marks(&t).hold, Some(Lsn(5)));
    }
    let (wal, _) = open(dir.path());
    assert_eq!(wal.marks(&t).hold, None);
    assert_eq!(
        wal.stamp_frontier(&t, Lsn(6)).unwrap(),
        FrontierOutcome::Advanced {
            from: Lsn(4),
            to: Lsn(6)
        }
    );
}
