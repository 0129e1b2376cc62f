//! Appends and group commit: an append returns only after a sync covering it, concurrent
//! appends share syncs, lsns are global and strictly increasing.

use std::collections::HashMap;
use std::sync::{Arc, mpsc};
use std::thread;

use ourios_wal::testing::FaultPoint;
use ourios_wal::{AppendError, Lsn, OpenError, Wal};

use crate::common::{config, open, open_faulty, payload, replay_all, tempdir, tenant};

/// Proves appends get consecutive lsns from 1 and replay returns tenant and payload intact.
/// Reasoned mutation (not run as a mutant): in `Wal::append`, drop `state.next_lsn += 1` and every
/// frame gets lsn 1 (replay then fails on a non-increasing lsn).
#[test]
fn append_lsns_start_at_one_and_replay_returns_frames_intact() {
    let dir = tempdir();
    let (wal, report) = open(dir.path());
    assert_eq!(report.last_lsn, Lsn::ZERO);
    let (a, b) = (tenant("a"), tenant("b"));
    let mut expected = Vec::new();
    for i in 0..10u64 {
        let t = if i % 3 == 0 { &b } else { &a };
        let p = payload(i, i as usize * 100);
        assert_eq!(wal.append(t, &p).unwrap(), Lsn(i + 1));
        expected.push((Lsn(i + 1), t.clone(), p));
    }
    let got: Vec<_> = replay_all(&wal)
        .into_iter()
        .map(|f| (f.lsn, f.tenant.clone(), f.payload().to_vec()))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(wal.durable_lsn(), Lsn(10));
}

/// Proves the two halves of `append`: `submit` fixes the lsn in call order without writing or
/// syncing anything, and the first `wait_durable` writes and syncs every submitted frame in one
/// commit, so the second returns without a sync of its own (what lets a tenant's requests share
/// a commit while the node orders their mining by lsn).
/// Reasoned mutation (not run as a mutant): make `submit` wait for durability itself (the old
/// single-step `append`) and `syncs` is 1 before the first `wait_durable`.
#[test]
fn submit_fixes_the_order_and_one_wait_commits_every_submitted_frame() {
    let dir = tempdir();
    let (wal, _) = open(dir.path());
    let t = tenant("t");
    let syncs = wal.stats().syncs;
    let first = wal.submit(&t, &payload(1, 64)).unwrap();
    let second = wal.submit(&t, &payload(2, 64)).unwrap();
    assert_eq!((first, second), (Lsn(1), Lsn(2)));
    assert_eq!(wal.stats().syncs, syncs, "submit synced");
    assert_eq!(wal.durable_lsn(), Lsn::ZERO, "submit acknowledged");
    wal.wait_durable(second).unwrap();
    assert_eq!(wal.durable_lsn(), Lsn(2));
    wal.wait_durable(first).unwrap();
    assert_eq!(
        wal.stats().syncs,
        syncs + 1,
        "one commit covers both frames"
    );
    let lsns: Vec<Lsn> = replay_all(&wal).into_iter().map(|f| f.lsn).collect();
    assert_eq!(lsns, vec![Lsn(1), Lsn(2)]);
}

/// Proves an append is not acknowledged while the sync covering it is still running, and that
/// one sync covers every append queued behind the one in flight (group commit): 9 appends,
/// exactly 2 syncs.
/// Reasoned mutation (not run as a mutant): in `Wal::append`, return `Ok(lsn)` right after queueing
/// the frame and the `try_recv` before the release sees acks; make `lead` take only its own frame
/// and `syncs` becomes 9.
#[test]
fn group_commit_one_sync_covers_every_queued_append_and_none_acks_early() {
    let dir = tempdir();
    let (wal, io) = open_faulty(dir.path(), 1 << 20);
    let wal = Arc::new(wal);
    let t = tenant("t");
    let pause = io.pause(FaultPoint::Sync, 1);
    let (tx, rx) = mpsc::channel();
    let spawn = |i: u64| {
        let (wal, t, tx) = (Arc::clone(&wal), t.clone(), tx.clone());
        thread::spawn(move || tx.send(wal.append(&t, &payload(i, 64)).unwrap()).unwrap())
    };
    let first = spawn(0);
    pause.wait_reached();
    let rest: Vec<_> = (1..9).map(spawn).collect();
    while wal.stats().queued_frames < 8 {
        thread::yield_now();
    }
    assert!(rx.try_recv().is_err(), "an append returned before its sync");
    let before = wal.stats().syncs;
    pause.release();
    for h in rest.into_iter().chain([first]) {
        h.join().unwrap();
    }
    drop(tx);
    let mut lsns: Vec<Lsn> = rx.iter().collect();
    lsns.sort();
    assert_eq!(lsns, (1..=9).map(Lsn).collect::<Vec<_>>());
    assert_eq!(wal.stats().syncs - before, 2);
    assert_eq!(wal.stats().appends, 9);
}

/// Proves many threads appending at once all get distinct lsns, and replay returns exactly the
/// acknowledged frames, in strictly increasing lsn order, with their payloads.
/// Reasoned mutation (not run as a mutant): in `Wal::lead`, set `state.durable = last` before
/// `write_batch` and frames can be acknowledged without being written (replay misses some under
/// contention).
#[test]
fn group_commit_concurrent_appends_all_replay_in_lsn_order() {
    let dir = tempdir();
    let (wal, _) = Wal::open(config(dir.path(), 32 * 1024)).unwrap();
    let wal = Arc::new(wal);
    let handles: Vec<_> = (0..8u64)
        .map(|th| {
            let wal = Arc::clone(&wal);
            thread::spawn(move || {
                let t = tenant(&format!("t{}", th % 3));
                (0..100u64)
                    .map(|i| {
                        let p = payload(th * 1000 + i, 50 + (i as usize % 7) * 90);
                        (wal.append(&t, &p).unwrap(), (t.clone(), p))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let acked: HashMap<_, _> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(acked.len(), 800);
    let frames = replay_all(&wal);
    assert_eq!(frames.len(), 800);
    assert!(frames.windows(2).all(|w| w[0].lsn < w[1].lsn));
    for f in frames {
        let (t, p) = &acked[&f.lsn];
        assert_eq!((&f.tenant, f.payload()), (t, &p[..]));
    }
    assert!(
        wal.stats().segments > 1,
        "32 KiB segments must have rotated"
    );
}

/// Proves a frame above `max_frame_bytes` is refused with the tenant and sizes named, and
/// nothing is written for it (the next lsn is unchanged).
/// Reasoned mutation (not run as a mutant): remove the `.filter(...)` on the frame size in
/// `Wal::append` and the large frame is accepted.
#[test]
fn append_frame_too_large_is_refused_and_nothing_is_written() {
    let dir = tempdir();
    let mut cfg = config(dir.path(), 1 << 20);
    cfg.max_frame_bytes = 1000;
    let (wal, _) = Wal::open(cfg).unwrap();
    let t = tenant("big");
    let err = wal.append(&t, &[0u8; 1000]).unwrap_err();
    assert!(
        matches!(&err, AppendError::FrameTooLarge { tenant, size, max: 1000 }
            if tenant.as_str() == "big" && *size == 1000 + 17 + 3),
        "{err:?}"
    );
    assert!(err.to_string().contains("big"), "{err}");
    assert_eq!(wal.append(&t, &[0u8; 980]).unwrap(), Lsn(1));
    assert_eq!(replay_all(&wal).len(), 1);
}

/// Proves lsns continue above the last frame after a reopen (global monotonic across runs).
/// Reasoned mutation (not run as a mutant): in `Wal::open_with_io`, start `next_lsn` at 1 and the
/// post-reopen append returns lsn 1 (and the reopen after it fails on a non-increasing lsn).
#[test]
fn append_lsns_continue_above_the_last_frame_after_reopen() {
    let dir = tempdir();
    let t = tenant("t");
    {
        let (wal, _) = open(dir.path());
        for i in 0..5 {
            wal.append(&t, &payload(i, 10)).unwrap();
        }
    }
    let (wal, report) = open(dir.path());
    assert_eq!((report.last_lsn, report.frames), (Lsn(5), 5));
    assert_eq!(wal.append(&t, b"x").unwrap(), Lsn(6));
    drop(wal);
    let (wal, _) = open(dir.path());
    let lsns: Vec<_> = replay_all(&wal).iter().map(|f| f.lsn.0).collect();
    assert_eq!(lsns, vec![1, 2, 3, 4, 5, 6]);
}

/// Proves a second open of a directory that is already open is refused (two writers would
/// interleave frames and lsns).
/// Reasoned mutation (not run as a mutant): make `StdIo::lock_dir` return the file without
/// `try_lock` and the second open succeeds.
#[test]
fn open_refuses_a_directory_another_wal_has_open() {
    let dir = tempdir();
    let (_wal, _) = open(dir.path());
    let err = Wal::open(config(dir.path(), 1 << 20)).unwrap_err();
    assert!(matches!(err, OpenError::Locked { .. }), "{err:?}");
}
