//! [`Turnstile`]: lets callers that took turns in some order (the node takes one per frame,
//! in the order it submits a tenant's frames) pass one at a time in that order, whatever order
//! they arrive in. With it a tenant's frames share one group commit and are still mined in lsn
//! order: the submit is serialised, the wait for durability is not, and mining is again.
//! A ticket waits blocking ([`Ticket::wait`]) or as a future ([`Ticket::passed`]); both kinds
//! can wait on one turnstile, and a turn that ends wakes only the ticket whose turn came.

use crate::sync::{Mutex, StdArc, lock, thread};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};

/// Turns are passed in the order [`Turnstile::take`] handed them out. A [`Ticket`] dropped
/// without waiting (its holder failed or unwound before its turn) gives its turn up, so no
/// later holder waits for it forever.
#[derive(Debug)]
pub struct Turnstile {
    state: Mutex<Turns>,
}

#[derive(Debug, Default)]
struct Turns {
    /// The next turn `take` hands out.
    next: u64,
    /// The turn that may pass now.
    serving: u64,
    /// Turns above `serving` given up before they came round.
    given_up: BTreeSet<u64>,
    /// Tickets waiting, by turn - futures ([`Passing`]) and threads asleep in [`Ticket::wait`]
    /// ([`Unpark`]) alike: `finish` wakes the one whose turn came and no other. (One condvar
    /// for every sleeper woke them all at each turn, to find one ready and send the rest back
    /// to sleep: as many context switches per turn as a tenant had blocking requests waiting.)
    wakers: BTreeMap<u64, Waker>,
}

/// Wakes a thread asleep in [`Ticket::wait`]: the waker it leaves in [`Turns::wakers`].
struct Unpark(thread::Thread);

impl Wake for Unpark {
    fn wake(self: StdArc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &StdArc<Self>) {
        self.0.unpark();
    }
}

/// A place in the queue, from [`Turnstile::take`].
#[derive(Debug)]
#[must_use = "a ticket dropped unused gives its turn up"]
pub struct Ticket<'a> {
    turnstile: &'a Turnstile,
    turn: u64,
    used: bool,
}

/// Holding the turn: every earlier ticket has passed or given up. Dropping it lets the next
/// one pass.
#[derive(Debug)]
pub struct Turn<'a> {
    turnstile: &'a Turnstile,
    turn: u64,
}

impl Default for Turnstile {
    fn default() -> Self {
        Self::new()
    }
}

impl Turnstile {
    /// A turnstile whose first turn is free.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(Turns::default()),
        }
    }

    /// The next turn. Call it under whatever lock orders the work the turns stand for.
    pub fn take(&self) -> Ticket<'_> {
        let mut turns = lock(&self.state);
        let turn = turns.next;
        turns.next += 1;
        Ticket {
            turnstile: self,
            turn,
            used: false,
        }
    }

    /// Ends `turn`: the holder passed, or gave up a turn that has not come round yet.
    fn finish(&self, turn: u64) {
        let mut turns = lock(&self.state);
        // A future given up leaves no waker behind.
        turns.wakers.remove(&turn);
        if turn != turns.serving {
            turns.given_up.insert(turn);
            return;
        }
        turns.serving += 1;
        loop {
            let serving = turns.serving;
            if !turns.given_up.remove(&serving) {
                break;
            }
            turns.serving += 1;
        }
        let serving = turns.serving;
        let waker = turns.wakers.remove(&serving);
        drop(turns);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<'a> Ticket<'a> {
    /// Waits until every earlier ticket has passed or given up, asleep until its turn comes.
    pub fn wait(mut self) -> Turn<'a> {
        self.used = true;
        let turnstile = self.turnstile;
        let mut turns = lock(&turnstile.state);
        if turns.serving != self.turn {
            let waker = Waker::from(StdArc::new(Unpark(thread::current())));
            turns.wakers.insert(self.turn, waker);
            while turns.serving != self.turn {
                drop(turns);
                // An unpark that came between the unlock and here is not lost: it leaves the
                // thread's token, and `park` returns at once. One that came for nothing (a
                // token left by an earlier wait, or a spurious return) only checks again.
                thread::park();
                turns = lock(&turnstile.state);
            }
            // The waker is gone: the `finish` that moved `serving` to this turn took it out.
        }
        Turn {
            turnstile,
            turn: self.turn,
        }
    }

    /// The async form of [`Ticket::wait`]: completes once every earlier ticket has passed or
    /// given up, woken by the turn before it finishing. Dropping the future before it
    /// completes gives the turn up, as dropping the ticket does.
    pub fn passed(self) -> Passing<'a> {
        Passing { ticket: Some(self) }
    }
}

/// The future of [`Ticket::passed`].
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited; dropped, it gives its turn up"]
pub struct Passing<'a> {
    /// `None` once the turn was handed out.
    ticket: Option<Ticket<'a>>,
}

impl<'a> Future for Passing<'a> {
    type Output = Turn<'a>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn<'a>> {
        let Some(ticket) = self.ticket.as_ref() else {
            panic!("`Passing` polled after it completed");
        };
        let (turnstile, turn) = (ticket.turnstile, ticket.turn);
        let mut turns = lock(&turnstile.state);
        if turns.serving != turn {
            turns.wakers.insert(turn, cx.waker().clone());
            return Poll::Pending;
        }
        turns.wakers.remove(&turn);
        drop(turns);
        if let Some(mut ticket) = self.ticket.take() {
            ticket.used = true;
        }
        Poll::Ready(Turn { turnstile, turn })
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !self.used {
            self.turnstile.finish(self.turn);
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.turnstile.finish(self.turn);
    }
}

#[cfg(all(test, target_os = "linux", not(loom)))]
mod tests {
    use super::*;

    /// This thread's voluntary context switches so far: one each time it went to sleep.
    fn sleeps() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    }

    /// Many threads asleep on one turnstile: each turn that ends wakes only the next ticket, so
    /// a waiter sleeps about once whatever its place in the queue. Woken together at every
    /// turn, the waiters would sleep again and again: the last of 64 some 40 times.
    /// Mutation check (by hand): in `finish`, wake every waiting ticket's waker (left in the
    /// map) as well as the next one's, and 64 waiters sleep 1 000-1 400 times (64 without).
    #[test]
    fn a_turn_that_ends_wakes_only_the_next_waiter() {
        const WAITERS: u64 = 64;
        let turns = StdArc::new(Turnstile::new());
        let first = turns.take();
        let (tx, rx) = std::sync::mpsc::channel();
        let threads: Vec<_> = (0..WAITERS)
            .map(|_| {
                let (turns, tx) = (StdArc::clone(&turns), tx.clone());
                let ticket_taken = std::sync::mpsc::channel::<()>();
                let handle = std::thread::spawn(move || {
                    let ticket = turns.take();
                    let turn = ticket.turn;
                    ticket_taken.0.send(()).unwrap();
                    let before = sleeps();
                    let _turn = ticket.wait();
                    tx.send((turn, sleeps() - before)).unwrap();
                });
                // Tickets taken one thread at a time, so the turns are in spawn order.
                ticket_taken.1.recv().unwrap();
                handle
            })
            .collect();
        // Every waiter asleep (its waker left) before the first turn ends.
        while lock(&turns.state).wakers.len() < WAITERS as usize {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        first.wait();
        for t in threads {
            t.join().unwrap();
        }
        drop(tx);
        let mut passed: Vec<(u64, u64)> = rx.iter().collect();
        assert_eq!(passed.len(), WAITERS as usize);
        let order: Vec<u64> = passed.iter().map(|&(turn, _)| turn).collect();
        assert!(order.is_sorted(), "turns passed out of order: {order:?}");
        passed.sort_by_key(|&(_, slept)| std::cmp::Reverse(slept));
        let total: u64 = passed.iter().map(|&(_, slept)| slept).sum();
        assert!(
            total < 4 * WAITERS,
            "{WAITERS} waiters slept {total} times; the most: {:?}",
            &passed[..4]
        );
    }
}
