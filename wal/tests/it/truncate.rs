//! Truncation: sealed segments every tenant in them has passed (`min(X_t, S_t)`) are deleted;
//! the active segment never is; disk use stays bounded while frontiers advance.

use std::fs;
use std::path::Path;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use ourios_wal::testing::{Failure, FaultPoint};
use ourios_wal::{Lsn, SegmentError, Stamp, TenantId, Wal};

use crate::common::{config, open_faulty, payload, replay_all, tempdir, tenant};

fn disk_segments(dir: &Path) -> (usize, u64) {
    fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .fold((0, 0), |(n, b), len| (n + 1, b + len))
}

/// Stamps every tenant at the durable lsn, with a snapshot when `snapshots`.
fn stamp_all(wal: &Wal, tenants: &[TenantId], snapshots: bool) {
    let at = wal.durable_lsn();
    let state = at.0.to_le_bytes();
    let stamps: Vec<_> = tenants
        .iter()
        .map(|tenant| Stamp {
            tenant,
            frontier: at,
            snapshot: snapshots.then_some(&state[..]),
        })
        .collect();
    wal.stamp(&stamps).unwrap();
}

/// Proves disk use stays bounded over a long run when frontiers and snapshots advance: 600
/// frames of 4 KiB (2.4 MiB, about 150 segments of 16 KiB) never leave more than 8 segment
/// files on disk. The same run with frontiers but no snapshots (`S_t = 0`) keeps every
/// segment: truncation uses `min(X_t, S_t)`.
/// Reasoned mutation (not run as a mutant): in `Wal::truncate`, use `mk.frontier` instead of
/// `mk.frontier.min(mk.snapshot)` and the no-snapshot run deletes segments; skip the deletion
/// and the bounded run grows to about 150 files.
#[test]
fn truncate_disk_use_stays_bounded_while_frontiers_advance() {
    let tenants: Vec<_> = ["a", "b", "c"].into_iter().map(tenant).collect();
    for snapshots in [true, false] {
        let dir = tempdir();
        let (wal, _) = Wal::open(config(dir.path(), 16 * 1024)).unwrap();
        let (mut max_files, mut max_bytes) = (0, 0);
        let total = if snapshots { 600 } else { 120 };
        for i in 0..total {
            wal.append(&tenants[i % 3], &payload(i as u64, 4096))
                .unwrap();
            if i % 20 == 19 {
                stamp_all(&wal, &tenants, snapshots);
                wal.truncate().unwrap();
                let (files, bytes) = disk_segments(dir.path());
                max_files = max_files.max(files);
                max_bytes = max_bytes.max(bytes);
            }
        }
        if snapshots {
            assert!(max_files <= 8, "{max_files} segment files at peak");
            assert!(max_bytes <= 8 * 17 * 1024, "{max_bytes} bytes at peak");
            assert!(wal.stats().rotations >= 140);
        } else {
            assert_eq!(
                disk_segments(dir.path()).0,
                wal.stats().rotations as usize + 1
            );
        }
    }
}

/// Proves a segment is kept while any tenant with frames in it has not passed them, segments
/// holding only passed tenants are deleted even if that leaves a gap, the WAL reopens over the
/// gap, and the kept segment goes once that tenant passes it.
/// Reasoned mutation (not run as a mutant): in `Wal::truncate`, test `any` instead of `all` tenants
/// and the segment holding `b`'s unpublished frame is deleted (its frame is missing after reopen).
#[test]
fn truncate_keeps_segments_a_tenant_has_not_passed() {
    let dir = tempdir();
    let (a, b) = (tenant("a"), tenant("b"));
    {
        let (wal, _) = Wal::open(config(dir.path(), 1 << 20)).unwrap();
        for owners in [[&a, &a], [&a, &b], [&a, &a]] {
            for t in owners {
                wal.append(t, t.as_str().as_bytes()).unwrap();
            }
            wal.rotate().unwrap();
        }
        wal.append(&a, b"active").unwrap();
        stamp_all(&wal, std::slice::from_ref(&a), true);
        let report = wal.truncate().unwrap();
        assert_eq!(report.deleted.len(), 2);
        assert_eq!(report.remaining, 2);
    }
    let (wal, _) = Wal::open(config(dir.path(), 1 << 20)).unwrap();
    let lsns: Vec<_> = replay_all(&wal).iter().map(|f| f.lsn.0).collect();
    assert_eq!(lsns, vec![3, 4, 7]);
    wal.stamp(&[Stamp {
        tenant: &b,
        frontier: Lsn(4),
        snapshot: Some(b"b"),
    }])
    .unwrap();
    assert_eq!(wal.truncate().unwrap().deleted.len(), 1);
    assert_eq!(wal.segment_paths().len(), 1);
}

/// Proves the active segment is never deleted, even when every tenant has passed all of it,
/// and appends continue after truncation.
/// Reasoned mutation (not run as a mutant): include the active segment's metadata in the candidates
/// of `Wal::truncate` and the WAL loses its only segment file.
#[test]
fn truncate_never_deletes_the_active_segment() {
    let dir = tempdir();
    let (wal, _) = Wal::open(config(dir.path(), 1 << 20)).unwrap();
    let t = tenant("t");
    wal.append(&t, b"x").unwrap();
    stamp_all(&wal, std::slice::from_ref(&t), true);
    let report = wal.truncate().unwrap();
    assert!(report.deleted.is_empty());
    assert_eq!(report.remaining, 1);
    assert_eq!(wal.append(&t, b"y").unwrap(), Lsn(2));
    assert_eq!(disk_segments(dir.path()).0, 1);
}

/// Proves truncation defers while a replay is reading (it would delete files under it), and
/// runs once the replay is dropped.
/// Reasoned mutation (not run as a mutant): drop the `replays_live > 0` check and the first
/// truncate deletes the sealed segment mid-replay.
#[test]
fn truncate_defers_while_a_replay_is_live() {
    let dir = tempdir();
    let (wal, _) = Wal::open(config(dir.path(), 1 << 20)).unwrap();
    let t = tenant("t");
    wal.append(&t, b"x").unwrap();
    wal.rotate().unwrap();
    wal.append(&t, b"y").unwrap();
    stamp_all(&wal, std::slice::from_ref(&t), true);
    let replay = wal.replay();
    let report = wal.truncate().unwrap();
    assert!(report.deferred && report.deleted.is_empty());
    assert_eq!(replay.count(), 2);
    assert_eq!(wal.truncate().unwrap().deleted.len(), 1);
}

/// Proves a segment's removal does not hold up commits: with the removal paused (on ext4 a
/// 64 MiB segment took 25-40 ms to remove, and every commit waited for it) an append is
/// acknowledged, and the truncation then finishes and reports the segment deleted.
/// Mutation check (by hand): remove the segments before `drop(log)` in `Wal::truncate` and the
/// append does not return while the removal is paused (the test fails after a minute instead
/// of hanging).
#[test]
fn truncate_removes_segments_without_holding_up_commits() {
    let dir = tempdir();
    let t = tenant("t");
    let (wal, io) = open_faulty(dir.path(), 1 << 20);
    let wal = Arc::new(wal);
    wal.append(&t, b"sealed").unwrap();
    wal.rotate().unwrap();
    wal.append(&t, b"active").unwrap();
    stamp_all(&wal, std::slice::from_ref(&t), true);
    let pause = io.pause(FaultPoint::Remove, 1);
    let truncation = {
        let wal = Arc::clone(&wal);
        thread::spawn(move || wal.truncate())
    };
    pause.wait_reached();
    let (acked, appended) = mpsc::channel();
    let appender = {
        let wal = Arc::clone(&wal);
        thread::spawn(move || acked.send(wal.append(&tenant("t"), b"during")))
    };
    // A liveness bound, not a speed one: the append needs no removal to finish.
    let during = appended.recv_timeout(Duration::from_secs(60));
    pause.release();
    let lsn = during
        .expect("an append waited for a paused segment removal")
        .unwrap();
    assert_eq!(lsn, Lsn(3));
    appender.join().unwrap().unwrap();
    let report = truncation.join().unwrap().unwrap();
    assert_eq!(report.deleted.len(), 1);
    assert_eq!(report.remaining, 1);
    assert_eq!(disk_segments(dir.path()).0, 1);
}

/// Proves a segment whose retiring rename failed stays listed and on disk with the passed
/// ones after it, the WAL stays writable, and the next truncation deletes them.
/// Mutation check (by hand): drop the line that lists them again in `Wal::truncate` and the
/// second truncation deletes nothing (they stay on disk for good).
#[test]
fn truncate_that_fails_to_retire_keeps_the_segment_for_the_next_one() {
    let dir = tempdir();
    let t = tenant("t");
    let (wal, io) = open_faulty(dir.path(), 1 << 20);
    for i in 0..3 {
        wal.append(&t, &payload(i, 10)).unwrap();
        wal.rotate().unwrap();
    }
    wal.append(&t, b"active").unwrap();
    stamp_all(&wal, std::slice::from_ref(&t), true);
    io.fail(FaultPoint::Rename, 2, Failure::Error);
    let err = wal.truncate().unwrap_err();
    assert!(
        matches!(err, SegmentError::Io { op: "retiring", .. }),
        "{err}"
    );
    assert_eq!(disk_segments(dir.path()).0, 3);
    assert_eq!(wal.segment_paths().len(), 3);
    assert_eq!(wal.append(&t, b"after").unwrap(), Lsn(5));
    let report = wal.truncate().unwrap();
    assert_eq!(report.deleted.len(), 2);
    assert_eq!(report.remaining, 1);
    assert_eq!(disk_segments(dir.path()).0, 1);
}

/// Proves a retired segment whose removal failed, or whose directory sync failed, is removed
/// by the next truncation, and one left by a process that ended first is removed on open,
/// the WAL replaying every frame still listed.
/// Mutation check (by hand): drop `log.retired.extend(retired)` in `Wal::truncate` and the
/// retired files stay until the next open; drop the removal of retired files in
/// `segment::scan` and they stay for good.
#[test]
fn a_retired_segment_not_removed_is_removed_by_the_next_truncation_or_open() {
    let dir = tempdir();
    let t = tenant("t");
    {
        let (wal, io) = open_faulty(dir.path(), 1 << 20);
        for (i, fault) in [FaultPoint::Remove, FaultPoint::DirSync]
            .into_iter()
            .enumerate()
        {
            wal.append(&t, &payload(i as u64, 10)).unwrap();
            wal.rotate().unwrap();
            wal.append(&t, b"active").unwrap();
            stamp_all(&wal, std::slice::from_ref(&t), true);
            io.fail(fault, 1, Failure::Error);
            let err = wal.truncate().unwrap_err();
            assert!(matches!(err, SegmentError::Io { .. }), "{err}");
            assert_eq!(wal.segment_paths().len(), 1, "{fault:?}");
            assert_eq!(
                disk_segments(dir.path()).0,
                2,
                "{fault:?}: retired and active"
            );
            let report = wal.truncate().unwrap();
            assert!(report.deleted.is_empty());
            assert_eq!(disk_segments(dir.path()).0, 1, "{fault:?}");
        }
        wal.rotate().unwrap();
        wal.append(&t, b"last").unwrap();
        stamp_all(&wal, std::slice::from_ref(&t), true);
        io.fail(FaultPoint::Remove, 1, Failure::Error);
        wal.truncate().unwrap_err();
        assert_eq!(disk_segments(dir.path()).0, 2);
    }
    let (wal, _) = Wal::open(config(dir.path(), 1 << 20)).unwrap();
    assert_eq!(disk_segments(dir.path()).0, 1);
    let lsns: Vec<_> = replay_all(&wal).iter().map(|f| f.lsn.0).collect();
    assert_eq!(lsns, vec![5]);
}
