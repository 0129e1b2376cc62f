//! [`Turnstile`]: lets callers that took turns in some order (the node takes one per frame,
//! in the order it submits a tenant's frames) pass one at a time in that order, whatever order
//! they arrive in. With it a tenant's frames share one group commit and are still mined in lsn
//! order: the submit is serialised, the wait for durability is not, and mining is again.

use crate::sync::{Condvar, Mutex, lock, wait};
use std::collections::BTreeSet;

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
        drop(turns);
        // Every waiter checks its own turn; there are as many as a tenant has requests in
        // flight.
        self.passed.notify_all();
    }
}

impl<'a> Ticket<'a> {
    /// Waits until every earlier ticket has passed or given up.
    pub fn wait(mut self) -> Turn<'a> {
        self.used = true;
        let turnstile = self.turnstile;
        let mut turns = lock(&turnstile.state);
        while turns.serving != self.turn {
            turns = wait(&turnstile.passed, turns);
        }
        Turn {
            turnstile,
            turn: self.turn,
        }
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
