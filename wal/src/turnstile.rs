//! [`Turnstile`]: lets callers that took turns in some order (the node takes one per frame,
//! in the order it submits a tenant's frames) pass one at a time in that order, whatever order
//! they arrive in. With it a tenant's frames share one group commit and are still mined in lsn
//! order: the submit is serialised, the wait for durability is not, and mining is again.
//! A ticket waits blocking ([`Ticket::wait`]) or as a future ([`Ticket::passed`]); both kinds
//! can wait on one turnstile.

use crate::sync::{Condvar, Mutex, lock, wait};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Turns are passed in the order [`Turnstile::take`] handed them out. A [`Ticket`] dropped
/// without waiting (its holder failed or unwound before its turn) gives its turn up, so no
/// later holder waits for it forever.
#[derive(Debug)]
pub struct Turnstile {
    state: Mutex<Turns>,
    passed: Condvar,
}

#[derive(Debug, Default)]
struct Turns {
    /// The next turn `take` hands out.
    next: u64,
    /// The turn that may pass now.
    serving: u64,
    /// Turns above `serving` given up before they came round.
    given_up: BTreeSet<u64>,
    /// Threads asleep in [`Ticket::wait`]: `finish` notifies the condvar only if there are any.
    sleepers: usize,
    /// Futures ([`Passing`]) waiting, by turn: `finish` wakes the one whose turn came.
    wakers: BTreeMap<u64, Waker>,
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
            passed: Condvar::new(),
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
        let sleepers = turns.sleepers > 0;
        drop(turns);
        if let Some(waker) = waker {
            waker.wake();
        }
        if sleepers {
            // Every sleeper checks its own turn; there are as many as a tenant has blocking
            // requests in flight.
            self.passed.notify_all();
        }
    }
}

impl<'a> Ticket<'a> {
    /// Waits until every earlier ticket has passed or given up.
    pub fn wait(mut self) -> Turn<'a> {
        self.used = true;
        let turnstile = self.turnstile;
        let mut turns = lock(&turnstile.state);
        while turns.serving != self.turn {
            turns.sleepers += 1;
            turns = wait(&turnstile.passed, turns);
            turns.sleepers -= 1;
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
