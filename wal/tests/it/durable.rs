//! Async waiters (`Wal::durable`) and the commit thread that leads their commits: a waiter
//! waits without a thread, is woken by the commit that covers it, sees a failure as a blocking
//! waiter does, and is never left behind when the commit thread stops.

use std::sync::Arc;
use std::task::Poll;
use std::thread;

use ourios_wal::testing::{Failure, FaultPoint};
use ourios_wal::{AppendError, CommitThread, FailStage, Lsn};

use crate::common::{CountingWaker, open_faulty, poll_once, tempdir, tenant};

/// Proves an async waiter does not commit on the thread that polls it while a commit thread
/// runs: the first poll returns `Pending` at once, the commit thread is the one inside the
/// sync, and the commit wakes the waiter, which then completes with the frame durable.
/// Mutation check (tried by hand): drop the wakers' `wake` after a commit in `Wal::lead` and
/// the waiter is never woken.
#[test]
fn durable_is_woken_by_the_commit_the_commit_thread_leads() {
    let dir = tempdir();
    let (wal, io) = open_faulty(dir.path(), 1 << 20);
    let wal = Arc::new(wal);
    let committer = CommitThread::start(Arc::clone(&wal)).unwrap();
    let syncs = io.calls(FaultPoint::Sync);
    let pause = io.pause(FaultPoint::Sync, 1);
    let lsn = wal.submit(&tenant("t"), b"one").unwrap();
    let waker = Arc::new(CountingWaker::default());
    let mut durable = wal.durable(lsn);
    assert!(poll_once(&mut durable, &waker).is_pending());
    // The commit thread is in the sync; this thread is not.
    pause.wait_reached();
    assert_eq!(waker.wakes(), 0, "woken before the sync ended");
    assert!(poll_once(&mut durable, &waker).is_pending());
    pause.release();
    waker.wait_past(0);
    assert!(matches!(
        poll_once(&mut durable, &waker),
        Poll::Ready(Ok(()))
    ));
    assert!(wal.durable_lsn() >= lsn);
    assert_eq!(io.calls(FaultPoint::Sync), syncs + 1);
    drop(committer);
}

/// Proves a failed sync reaches an async waiter as `Failed` for the frames it covered, and a
/// frame submitted later as `Poisoned`, whether it waits async or blocking.
#[test]
fn durable_sees_the_failure_of_its_commit() {
    let dir = tempdir();
    let (wal, io) = open_faulty(dir.path(), 1 << 20);
    let wal = Arc::new(wal);
    let _committer = CommitThread::start(Arc::clone(&wal)).unwrap();
    io.fail(FaultPoint::Sync, 1, Failure::Error);
    let lsn = wal.submit(&tenant("t"), b"one").unwrap();
    let waker = Arc::new(CountingWaker::default());
    let mut durable = wal.durable(lsn);
    let mut seen = 0;
    let outcome = loop {
        if let Poll::Ready(outcome) = poll_once(&mut durable, &waker) {
            break outcome;
        }
        waker.wait_past(seen);
        seen = waker.wakes();
    };
    match outcome {
        Err(AppendError::Failed(f)) => {
            assert_eq!(f.stage, FailStage::Sync);
            assert_eq!(f.batch, Some((lsn, lsn)));
        }
        other => panic!("the waiter of the failed sync got {other:?}"),
    }
    let later = wal.submit(&tenant("t"), b"two");
    assert!(matches!(later, Err(AppendError::Poisoned(_))), "{later:?}");
    assert!(wal.durable_lsn() < lsn);
}

/// Proves that without a commit thread an async waiter leads its own commit on the polling
/// thread: the first poll completes with the frame durable.
#[test]
fn durable_without_a_commit_thread_commits_on_the_polling_thread() {
    let dir = tempdir();
    let (wal, io) = open_faulty(dir.path(), 1 << 20);
    let syncs = io.calls(FaultPoint::Sync);
    let lsn = wal.submit(&tenant("t"), b"one").unwrap();
    let waker = Arc::new(CountingWaker::default());
    assert!(matches!(
        poll_once(&mut wal.durable(lsn), &waker),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(io.calls(FaultPoint::Sync), syncs + 1);
    assert_eq!(wal.durable_lsn(), lsn);
}

/// Proves a waiter still pending when the commit thread stops is woken and, polled again,
/// completes: the stopping thread leaves its queued frame, and the waiter commits it itself.
/// Mutation check (tried by hand): make the commit thread's exit guard keep the wakers and the
/// waiter is never woken.
#[test]
fn stopping_the_commit_thread_leaves_no_waiter_behind() {
    let dir = tempdir();
    let (wal, io) = open_faulty(dir.path(), 1 << 20);
    let wal = Arc::new(wal);
    let committer = CommitThread::start(Arc::clone(&wal)).unwrap();
    let pause = io.pause(FaultPoint::Sync, 1);
    let first = wal.submit(&tenant("t"), b"first").unwrap();
    let waker = Arc::new(CountingWaker::default());
    let mut first_durable = wal.durable(first);
    assert!(poll_once(&mut first_durable, &waker).is_pending());
    pause.wait_reached();
    // Queued behind the commit in progress.
    let second = wal.submit(&tenant("t"), b"second").unwrap();
    let second_waker = Arc::new(CountingWaker::default());
    let mut second_durable = wal.durable(second);
    assert!(poll_once(&mut second_durable, &second_waker).is_pending());
    // Stopping waits for the commit in progress: drop the handle on another thread, and let
    // the commit end once the thread was told to stop (so it leaves the queued frame behind).
    assert!(wal.stats().commit_thread);
    let stopping = thread::spawn(move || drop(committer));
    while wal.stats().commit_thread {
        thread::yield_now();
    }
    pause.release();
    stopping.join().unwrap();
    second_waker.wait_past(0);
    assert!(matches!(
        poll_once(&mut second_durable, &second_waker),
        Poll::Ready(Ok(()))
    ));
    assert!(matches!(
        poll_once(&mut first_durable, &waker),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(wal.durable_lsn(), Lsn(second.0));
}

/// Proves a WAL has one commit thread at a time: a second start is refused while the first
/// runs, and allowed once it stopped.
#[test]
fn one_commit_thread_per_wal() {
    let dir = tempdir();
    let (wal, _io) = open_faulty(dir.path(), 1 << 20);
    let wal = Arc::new(wal);
    let first = CommitThread::start(Arc::clone(&wal)).unwrap();
    let again = CommitThread::start(Arc::clone(&wal)).unwrap_err();
    assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
    drop(first);
    let _second = CommitThread::start(Arc::clone(&wal)).unwrap();
}

/// Proves async tickets pass in the order they were taken, whatever order they are polled in:
/// each is woken only when the turn before it ends, and a future dropped before its turn gives
/// the turn up (the next one is woken past it).
/// Mutation check (tried by hand): wake no future in `Turnstile::finish` and the second ticket
/// is never woken.
#[test]
fn async_turns_pass_in_order_and_a_dropped_one_gives_its_turn_up() {
    let turns = ourios_wal::Turnstile::new();
    let (first, second, third, fourth) = (turns.take(), turns.take(), turns.take(), turns.take());
    let wakers: Vec<_> = (0..4).map(|_| Arc::new(CountingWaker::default())).collect();
    let mut fourth = fourth.passed();
    let mut third = third.passed();
    let mut second = second.passed();
    assert!(poll_once(&mut fourth, &wakers[3]).is_pending());
    assert!(poll_once(&mut third, &wakers[2]).is_pending());
    assert!(poll_once(&mut second, &wakers[1]).is_pending());
    let mut first = first.passed();
    let Poll::Ready(turn) = poll_once(&mut first, &wakers[0]) else {
        panic!("the first turn is free");
    };
    assert_eq!(wakers[1].wakes(), 0);
    drop(turn);
    assert_eq!(
        (wakers[1].wakes(), wakers[2].wakes(), wakers[3].wakes()),
        (1, 0, 0),
        "only the next turn is woken"
    );
    // The third gives its turn up before it came round.
    drop(third);
    let Poll::Ready(turn) = poll_once(&mut second, &wakers[1]) else {
        panic!("woken for its turn");
    };
    assert!(poll_once(&mut fourth, &wakers[3]).is_pending());
    drop(turn);
    assert_eq!(wakers[3].wakes(), 1, "woken past the turn given up");
    assert!(poll_once(&mut fourth, &wakers[3]).is_ready());
}
