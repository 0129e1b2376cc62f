//! Waiting for durability without a thread per waiter: [`Wal::durable`] is a future woken by
//! the commit that covers its frame, and a [`CommitThread`] leads the commits such waiters need.
//! A blocking waiter ([`Wal::wait_durable`]) still leads a commit itself; both kinds share the
//! same group commits.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::commit::{settled, take_lead};
use super::*;
use crate::sync::{Arc, thread};

/// The thread that leads a [`Wal`]'s group commits for async waiters ([`Wal::durable`]):
/// whenever frames are queued and no commit is in progress it writes and syncs them, and the
/// commit wakes the waiters it settled. It sleeps while there is nothing to commit.
///
/// Dropping it stops the thread after the commit in progress (if any) and joins it; waiters
/// still pending then lead their commits on the thread that polls them, as blocking waiters
/// do. A commit that panics on this thread makes the WAL read-only (as on any thread) and ends
/// the thread; every waiter is woken to see the failure.
pub struct CommitThread {
    wal: Arc<Wal>,
    handle: Option<thread::JoinHandle<()>>,
}

impl fmt::Debug for CommitThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommitThread").finish_non_exhaustive()
    }
}

impl CommitThread {
    /// Starts `wal`'s commit thread.
    ///
    /// # Errors
    /// The thread could not be spawned, or `wal` has a commit thread already
    /// ([`std::io::ErrorKind::AlreadyExists`]).
    pub fn start(wal: Arc<Wal>) -> std::io::Result<Self> {
        {
            let mut state = lock(&wal.commit);
            if state.committer.running {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "this WAL has a commit thread already",
                ));
            }
            state.committer = Committer {
                running: true,
                ..Committer::default()
            };
        }
        let runs = Arc::clone(&wal);
        let spawned = thread::Builder::new()
            .name("ourios-wal-commit".into())
            .spawn(move || run(&runs));
        match spawned {
            Ok(handle) => Ok(Self {
                wal,
                handle: Some(handle),
            }),
            Err(e) => {
                lock(&wal.commit).committer = Committer::default();
                Err(e)
            }
        }
    }
}

impl Drop for CommitThread {
    fn drop(&mut self) {
        lock(&self.wal.commit).committer.stop = true;
        self.wal.work.notify_all();
        if let Some(handle) = self.handle.take() {
            // A panic on the thread already made the WAL read-only; nothing more to report.
            let _ = handle.join();
        }
    }
}

/// The commit thread's loop: lead a commit whenever frames are queued and nobody leads one.
fn run(wal: &Wal) {
    // However the loop ends (a stop, or a commit that panicked), the thread is marked gone and
    // every async waiter is woken: the pending ones lead their own commits from then on.
    struct Exit<'a>(&'a Wal);
    impl Drop for Exit<'_> {
        fn drop(&mut self) {
            let mut state = lock(&self.0.commit);
            state.committer = Committer::default();
            let wakers = mem::take(&mut state.wakers);
            drop(state);
            wakers.into_iter().for_each(|(_, waker)| waker.wake());
        }
    }
    let _exit = Exit(wal);
    let mut state = lock(&wal.commit);
    while !state.committer.stop {
        if let Some(batch) = take_lead(&mut state) {
            drop(state);
            wal.lead(batch);
            state = lock(&wal.commit);
            continue;
        }
        state.committer.idle = true;
        state = wait(&wal.work, state);
        state.committer.idle = false;
    }
}

/// The future of [`Wal::durable`].
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited"]
pub struct Durable<'a> {
    wal: &'a Wal,
    lsn: Lsn,
}

impl Wal {
    /// The async form of [`Wal::wait_durable`]: completes once a `fdatasync` covering the frame
    /// [`Wal::submit`] gave `lsn` has succeeded, or with the error `wait_durable` returns.
    ///
    /// It waits without a thread of its own while a [`CommitThread`] runs: that thread leads
    /// the commit and the commit wakes this future. Without one, polling it leads the commit
    /// on the polling thread and blocks it until the commit ends, as `wait_durable` does.
    /// Dropping the future does not withdraw the frame: it is written by the next commit all
    /// the same.
    pub fn durable(&self, lsn: Lsn) -> Durable<'_> {
        Durable { wal: self, lsn }
    }
}

impl Future for Durable<'_> {
    type Output = Result<(), AppendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (wal, lsn) = (self.wal, self.lsn);
        let mut state = lock(&wal.commit);
        if let Some(outcome) = settled(&state, lsn) {
            return Poll::Ready(outcome);
        }
        if !state.committer.running || state.committer.stop {
            drop(state);
            return Poll::Ready(wal.wait_durable(lsn));
        }
        let waker = cx.waker();
        if !state
            .wakers
            .iter()
            .any(|(l, w)| *l == lsn && w.will_wake(waker))
        {
            state.wakers.push((lsn, waker.clone()));
        }
        // Nothing to do if a commit is in progress: its end wakes the idle thread for what
        // queued meanwhile.
        let idle = state.committer.idle && !state.leader_active && !state.batch.frames.is_empty();
        drop(state);
        if idle {
            wal.work.notify_one();
        }
        Poll::Pending
    }
}
