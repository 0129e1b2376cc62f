//! Failed writes, syncs and rotations injected at exact points: every waiter the failure
//! covered gets the error, nothing after it is acknowledged, reopening re-validates from disk.

use std::sync::{Arc, Barrier};
use std::thread;

use ourios_wal::testing::{Failure, FaultPoint};
use ourios_wal::{AppendError, BadFrame, FailStage, Lsn, SegmentError, Wal};

use crate::common::{open, open_faulty, payload, replay_all, tempdir, tenant};

/// Spawns `n` appenders that queue behind the commit paused at `pause`, waits until all are
/// queued, and returns their handles.
fn queue_behind(
    wal: &Arc<Wal>,
    n: u64,
    from: u64,
) -> Vec<thread::JoinHandle<Result<Lsn, AppendError>>> {
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let wal = Arc::clone(wal);
            thread::spawn(move || wal.append(&tenant("t"), &payload(from + i, 100)))
        })
        .collect();
    while wal.stats().queued_frames < n as usize {
        thread::yield_now();
    }
    handles
}

/// Proves a failed fdatasync fails every append it covered (all four waiters of the batch get
/// `Failed` with stage `Sync` and the batch's lsn range), the append acknowledged by the sync
/// before it stays acknowledged, every later append is refused as `Poisoned`, and a reopen
/// finds the acknowledged frames and accepts appends again.
/// Reasoned mutation (not run as a mutant): in `Wal::append`, drop the `covered` test (always
/// `Poisoned`) and the four waiters get the wrong error; in `Wal::lead`, ignore the `Err` arm and
/// they are acknowledged.
#[test]
fn fault_failed_sync_fails_every_waiter_it_covered_and_nothing_after_is_acked() {
    let dir = tempdir();
    let t = tenant("t");
    {
        let (wal, io) = open_faulty(dir.path(), 1 << 20);
        let wal = Arc::new(wal);
        assert_eq!(wal.append(&t, b"before").unwrap(), Lsn(1));
        let pause = io.pause(FaultPoint::Sync, 1);
        io.fail(FaultPoint::Sync, 2, Failure::Error);
        let leader = {
            let wal = Arc::clone(&wal);
            thread::spawn(move || wal.append(&tenant("t"), b"leader"))
        };
        pause.wait_reached();
        let waiters = queue_behind(&wal, 4, 10);
        pause.release();
        assert_eq!(leader.join().unwrap().unwrap(), Lsn(2));
        for w in waiters {
            match w.join().unwrap() {
                Err(AppendError::Failed(f)) => {
                    assert_eq!(f.stage, FailStage::Sync);
                    assert_eq!(f.batch, Some((Lsn(3), Lsn(6))));
                }
                other => panic!("waiter of the failed sync got {other:?}"),
            }
        }
        for i in 0..3 {
            let err = wal.append(&t, &payload(i, 10)).unwrap_err();
            assert!(matches!(err, AppendError::Poisoned(_)), "{err:?}");
            assert!(err.to_string().contains("read-only"), "{err}");
        }
        assert_eq!(wal.durable_lsn(), Lsn(2));
        assert!(wal.failure().is_some());
    }
    let (wal, _) = open(dir.path());
    let frames = replay_all(&wal);
    assert_eq!(frames[0].payload(), b"before");
    assert_eq!(frames[1].payload(), b"leader");
    let next = wal.append(&t, b"after").unwrap();
    assert!(next > frames.last().unwrap().lsn);
}

/// Proves a write that fails part-way fails its frame, poisons the WAL, and leaves a partial
/// frame that the next open treats as a torn tail: cut at the end of the last whole frame,
/// reported, and the earlier frames intact.
/// Reasoned mutation (not run as a mutant): in `segment::scan_one`, return the corruption error for
/// tearable problems in the newest segment too and the reopen fails instead of healing.
#[test]
fn fault_failed_write_poisons_and_reopen_truncates_the_partial_frame() {
    let dir = tempdir();
    let t = tenant("t");
    let end_of_third;
    {
        let (wal, io) = open_faulty(dir.path(), 1 << 20);
        for i in 0..3 {
            wal.append(&t, &payload(i, 200)).unwrap();
        }
        end_of_third = 24 + 3 * (17 + 1 + 200);
        io.fail(FaultPoint::Write, 1, Failure::PartialWrite { keep: 30 });
        let err = wal.append(&t, &payload(3, 200)).unwrap_err();
        assert!(
            matches!(&err, AppendError::Failed(f) if f.stage == FailStage::Write),
            "{err:?}"
        );
        let err = wal.append(&t, &payload(4, 200)).unwrap_err();
        assert!(matches!(err, AppendError::Poisoned(_)), "{err:?}");
    }
    let (wal, report) = open(dir.path());
    let torn = report.torn_tail.expect("the partial frame is a torn tail");
    assert_eq!((torn.offset, torn.bytes), (end_of_third as u64, 30));
    assert_eq!(torn.problem, Some(BadFrame::Truncated));
    let frames = replay_all(&wal);
    assert_eq!(frames.len(), 3);
    assert_eq!(wal.append(&t, b"x").unwrap(), Lsn(4));
}

/// Proves a panic inside the commit (here: inside the sync) does not hang the other waiters of
/// its batch: the panicking thread unwinds, the other waiter gets `Failed` with stage `Panic`,
/// and later appends are refused.
/// Reasoned mutation (not run as a mutant): set `done = true` on `LeadGuard` before `write_batch`
/// and the other waiter blocks forever (the test hangs).
#[test]
fn fault_commit_leader_panic_fails_its_batch_and_poisons() {
    let dir = tempdir();
    let (wal, io) = open_faulty(dir.path(), 1 << 20);
    let wal = Arc::new(wal);
    let pause = io.pause(FaultPoint::Sync, 1);
    io.fail(FaultPoint::Sync, 2, Failure::Panic);
    let first = {
        let wal = Arc::clone(&wal);
        thread::spawn(move || wal.append(&tenant("t"), b"first"))
    };
    pause.wait_reached();
    let waiters = queue_behind(&wal, 2, 0);
    pause.release();
    assert_eq!(first.join().unwrap().unwrap(), Lsn(1));
    let results: Vec<_> = waiters.into_iter().map(|w| w.join()).collect();
    assert_eq!(
        results.iter().filter(|r| r.is_err()).count(),
        1,
        "one leader panicked"
    );
    let other = results.into_iter().find_map(Result::ok).unwrap();
    assert!(
        matches!(&other, Err(AppendError::Failed(f)) if f.stage == FailStage::Panic),
        "{other:?}"
    );
    let err = wal.append(&tenant("t"), b"later").unwrap_err();
    assert!(matches!(err, AppendError::Poisoned(_)), "{err:?}");
}

/// Proves the directory is fsynced when a rotation creates a segment, before any frame in it
/// is acknowledged: failing that directory sync fails the append that rotated, with stage
/// `Rotate`, and poisons the WAL.
/// Reasoned mutation (not run as a mutant): remove `io.sync_dir(dir)?` from `create_segment` and
/// the append succeeds.
#[test]
fn fault_failed_directory_sync_on_rotation_fails_the_batch() {
    let dir = tempdir();
    let (wal, io) = open_faulty(dir.path(), 1024);
    let t = tenant("t");
    wal.append(&t, &payload(0, 900)).unwrap();
    io.fail(FaultPoint::DirSync, 1, Failure::Error);
    let err = wal.append(&t, &payload(1, 900)).unwrap_err();
    assert!(
        matches!(&err, AppendError::Failed(f) if f.stage == FailStage::Rotate),
        "{err:?}"
    );
    assert!(matches!(
        wal.append(&t, b"x").unwrap_err(),
        AppendError::Poisoned(_)
    ));
}

/// Proves an explicit rotation that fails (segment creation refused) reports the failure and
/// leaves the WAL read-only, and that `rotate` on a poisoned WAL is refused.
/// Reasoned mutation (not run as a mutant): in `Wal::rotate`, skip recording the failure in the
/// commit state and the append after it succeeds.
#[test]
fn fault_failed_explicit_rotation_poisons() {
    let dir = tempdir();
    let (wal, io) = open_faulty(dir.path(), 1 << 20);
    let t = tenant("t");
    wal.append(&t, b"a").unwrap();
    io.fail(FaultPoint::Create, 1, Failure::Error);
    assert!(matches!(wal.rotate(), Err(SegmentError::RotateFailed(_))));
    assert!(matches!(
        wal.append(&t, b"b").unwrap_err(),
        AppendError::Poisoned(_)
    ));
    assert!(matches!(wal.rotate(), Err(SegmentError::Poisoned(_))));
}

/// Proves concurrent appenders released at once behind a failing sync all see an error and none
/// an acknowledgement: with every sync failing, no append from eight threads succeeds.
/// Reasoned mutation (not run as a mutant): in `Wal::append`, check `state.durable >= lsn` after
/// the failure test is removed and a waiter spins forever or returns Ok.
#[test]
fn fault_no_append_is_acknowledged_when_its_sync_fails_under_contention() {
    let dir = tempdir();
    let (wal, io) = open_faulty(dir.path(), 1 << 20);
    let wal = Arc::new(wal);
    io.fail(FaultPoint::Sync, 1, Failure::Error);
    let start = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8u64)
        .map(|i| {
            let (wal, start) = (Arc::clone(&wal), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                wal.append(&tenant("t"), &payload(i, 64))
            })
        })
        .collect();
    for h in handles {
        let r = h.join().unwrap();
        assert!(
            matches!(r, Err(AppendError::Failed(_) | AppendError::Poisoned(_))),
            "{r:?}"
        );
    }
    assert_eq!(wal.durable_lsn(), Lsn::ZERO);
}
