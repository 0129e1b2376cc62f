//! Guards: [`BatchGuard`] per encode batch, [`PublishGuard`] per sweep publish, and the shared
//! publish completion a batch's detaches hold ([`DetachToken`], [`PublishCompletion`]).
//!
//! The unwind rule (RFC 0052 §3.1 as amended by RFC 0054 §9.5-9.6): a guard dropped by a panic
//! lets the caller's requeue run **first**, reports its epoch to the latch (`Release`)
//! **second**, and decrements its outstanding count **last**, so a quiesce that returns sees
//! both the requeued records and the report. The first step is the caller's: hold the
//! recoverable batch and its guard together in a [`Guarded`], whose fields drop in declaration
//! order — value, then guard — which the language guarantees, so the order cannot be got wrong
//! at a call site. Every `Drop` here is non-panicking and recovers poisoned locks.

use std::fmt;
use std::ops::{Deref, DerefMut};

use crate::barrier::{Settlement, Shared};
use crate::sync::{Arc, Mutex, get_mut, lock, panicking};

/// How one publish ended. Only [`Durable`](Self::Durable) and [`Dropped`](Self::Dropped) are ok
/// for the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PublishOutcome {
    /// The put returned Ok: the rows are in the store.
    Durable,
    /// The sink dropped the items under its own permanent policy (for records: quarantined with
    /// a durable `record_quarantined` event). Settled for ownership and publication.
    Dropped,
    /// The items went back into the buffers after a transient failure. Not ok: a publish that
    /// did not reach the store is a failed publish for `all_ok`, whatever the drain order of
    /// the cut that reads the verdict (fail closed; the next cut drains them).
    Requeued,
    /// The items were parked back into the buffers because the publisher queue was
    /// disconnected. Not ok: RFC 0054 §9.5 has a cut captured before a park fail its
    /// `all_ok(cut.epoch)`.
    Parked,
    /// The publish failed in any other way (e.g. a permanent audit failure that made a tenant
    /// terminal). Not ok.
    Failed,
}

impl PublishOutcome {
    /// Whether the verdict counts this outcome as ok.
    #[must_use]
    pub const fn is_ok(self) -> bool {
        matches!(self, Self::Durable | Self::Dropped)
    }

    const fn settlement(self) -> Settlement {
        if self.is_ok() {
            Settlement::Ok
        } else {
            Settlement::Failed
        }
    }
}

/// The guard of one encode batch, tagged with the epoch current when it entered
/// ([`Barrier::enter_encode`](crate::Barrier::enter_encode)). `quiesce_encodes` waits for it.
///
/// On drop: if the thread is panicking, it reports its epoch to the latch; then it ends the
/// encode phase of its shared publish completion (if any detach happened); then it decrements.
/// Put the batch it protects in a [`Guarded`] with it so the batch's requeue runs before all of
/// that.
#[must_use = "dropping a BatchGuard ends its batch at once"]
pub struct BatchGuard {
    shared: Arc<Shared>,
    epoch: u32,
    /// Counted on the encode word (fast path) rather than in the map.
    on_word: bool,
    completion: Mutex<Option<Arc<PublishCompletion>>>,
}

impl BatchGuard {
    pub(crate) fn new(shared: Arc<Shared>, epoch: u32, on_word: bool) -> Self {
        Self {
            shared,
            epoch,
            on_word,
            completion: Mutex::new(None),
        }
    }

    /// The epoch this batch is tagged with.
    #[must_use]
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Registers one detached partition on this batch's shared publish completion (created and
    /// registered with the barrier, tagged with this batch's epoch, on the first detach). The
    /// completion settles when every token is completed or dropped and this guard has dropped.
    /// Registration happens while this guard is alive, so before any `quiesce_encodes` that
    /// covers its epoch returns, and so before the matching `quiesce_publishes` looks.
    pub fn detach(&self) -> DetachToken {
        let mut slot = lock(&self.completion);
        let completion = match slot.as_ref() {
            Some(completion) => Arc::clone(completion),
            None => {
                let completion = PublishCompletion::register(&self.shared, self.epoch);
                *slot = Some(Arc::clone(&completion));
                completion
            }
        };
        completion.add_detach();
        DetachToken {
            completion,
            done: false,
        }
    }

    /// This batch's shared publish completion, if any partition was detached.
    #[must_use]
    pub fn publish_completion(&self) -> Option<Arc<PublishCompletion>> {
        lock(&self.completion).as_ref().map(Arc::clone)
    }
}

impl Drop for BatchGuard {
    fn drop(&mut self) {
        // First, the caller's requeue: a `Guarded` has already dropped its value.
        if panicking() {
            // Second, the report (Release inside `report`). It cannot be refused: a guard's
            // epoch is at most LAST_EPOCH. A sticky result is visible in the word.
            let _ = self.shared.latch.report(self.epoch);
        }
        // `&mut self`: no other reference can hold the slot's lock, so take without locking.
        let completion = get_mut(&mut self.completion).take();
        if let Some(completion) = completion {
            completion.end_encode();
        }
        // Last, the decrement.
        self.shared.exit_encode(self.epoch, self.on_word);
    }
}

impl fmt::Debug for BatchGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchGuard")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// The guard of one publish that is not a batch's detach — a sweep's in-flight `Drained` —
/// tagged with the epoch current when it entered
/// ([`Barrier::enter_publish`](crate::Barrier::enter_publish)). `quiesce_publishes` waits for it.
///
/// End it with [`complete`](Self::complete) or [`ok`](Self::ok). A
/// guard dropped by a panic reports its epoch to the latch and settles as panicked; a guard
/// dropped without an outcome outside a panic settles as failed (fail closed).
#[must_use = "dropping a PublishGuard without an outcome settles it as failed"]
pub struct PublishGuard {
    shared: Arc<Shared>,
    epoch: u32,
    settled: bool,
}

impl PublishGuard {
    pub(crate) fn new(shared: Arc<Shared>, epoch: u32) -> Self {
        Self {
            shared,
            epoch,
            settled: false,
        }
    }

    /// The epoch this publish is tagged with.
    #[must_use]
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Settles the publish with `outcome`.
    pub fn complete(self, outcome: PublishOutcome) {
        self.settle(outcome.settlement());
    }

    /// Settles the publish as [`PublishOutcome::Durable`].
    pub fn ok(self) {
        self.complete(PublishOutcome::Durable);
    }

    pub(crate) fn settle(mut self, settlement: Settlement) {
        self.settled = true;
        self.shared.settle_publish(self.epoch, settlement);
    }
}

impl Drop for PublishGuard {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // First, the caller's requeue: a `Guarded` has already dropped its value.
        let settlement = if panicking() {
            // Second, the report (Release inside `report`).
            let _ = self.shared.latch.report(self.epoch);
            Settlement::Panicked
        } else {
            Settlement::Failed
        };
        // Last, the failure record and the decrement.
        self.shared.settle_publish(self.epoch, settlement);
    }
}

impl fmt::Debug for PublishGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublishGuard")
            .field("epoch", &self.epoch)
            .field("settled", &self.settled)
            .finish_non_exhaustive()
    }
}

struct CompletionState {
    /// Detaches not completed yet: +1 per detach, -1 per completion.
    pending: u64,
    /// The batch guard has dropped: no more detaches.
    encode_ended: bool,
    /// The worst outcome so far.
    worst: Settlement,
    /// Taken exactly once, by the step that makes `pending == 0 && encode_ended` true.
    guard: Option<PublishGuard>,
}

/// A batch's shared publish completion (RFC 0054 §9.5): an `Arc` holding the batch's
/// [`PublishGuard`] and a count, +1 per detach and -1 per completion, that settles the guard
/// exactly once, when the count is zero and the batch's encode phase has ended (its
/// [`BatchGuard`] dropped). It settles with the worst outcome of its detaches.
pub struct PublishCompletion {
    shared: Arc<Shared>,
    epoch: u32,
    state: Mutex<CompletionState>,
}

impl PublishCompletion {
    fn register(shared: &Arc<Shared>, epoch: u32) -> Arc<Self> {
        shared.register_publish_at(epoch);
        Arc::new(Self {
            shared: Arc::clone(shared),
            epoch,
            state: Mutex::new(CompletionState {
                pending: 0,
                encode_ended: false,
                worst: Settlement::Ok,
                guard: Some(PublishGuard::new(Arc::clone(shared), epoch)),
            }),
        })
    }

    /// The epoch of the batch the completion belongs to.
    #[must_use]
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Detaches not completed yet.
    #[must_use]
    pub fn pending(&self) -> u64 {
        lock(&self.state).pending
    }

    /// Whether the completion has settled its guard.
    #[must_use]
    pub fn is_settled(&self) -> bool {
        lock(&self.state).guard.is_none()
    }

    fn add_detach(&self) {
        lock(&self.state).pending += 1;
    }

    /// -1 for one detach, with its outcome.
    fn finish_one(&self, settlement: Settlement) {
        let ready = {
            let mut state = lock(&self.state);
            state.worst = state.worst.max(settlement);
            state.pending = state.pending.saturating_sub(1);
            Self::take_if_done(&mut state)
        };
        if let Some((guard, worst)) = ready {
            guard.settle(worst);
        }
    }

    /// The batch's encode phase ended (its guard dropped).
    fn end_encode(&self) {
        let ready = {
            let mut state = lock(&self.state);
            state.encode_ended = true;
            Self::take_if_done(&mut state)
        };
        if let Some((guard, worst)) = ready {
            guard.settle(worst);
        }
    }

    fn take_if_done(state: &mut CompletionState) -> Option<(PublishGuard, Settlement)> {
        if state.pending == 0 && state.encode_ended {
            state.guard.take().map(|guard| (guard, state.worst))
        } else {
            None
        }
    }
}

impl fmt::Debug for PublishCompletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("PublishCompletion")
            .field("epoch", &self.epoch)
            .field("pending", &state.pending)
            .field("encode_ended", &state.encode_ended)
            .field("settled", &state.guard.is_none())
            .finish_non_exhaustive()
    }
}

/// One detached partition's share of its batch's [`PublishCompletion`] (the handle a queued
/// `Detached` item carries). Complete it with the partition's outcome. Dropped by a panic, it
/// reports the batch's epoch to the latch and counts as panicked; dropped without an outcome
/// outside a panic, it counts as failed (fail closed).
#[must_use = "dropping a DetachToken without an outcome counts its publish as failed"]
pub struct DetachToken {
    completion: Arc<PublishCompletion>,
    done: bool,
}

impl DetachToken {
    /// The epoch of the batch this partition was detached from.
    #[must_use]
    pub fn epoch(&self) -> u32 {
        self.completion.epoch
    }

    /// The shared completion this token is a share of.
    #[must_use]
    pub fn completion(&self) -> &Arc<PublishCompletion> {
        &self.completion
    }

    /// Completes this share with `outcome`.
    pub fn complete(mut self, outcome: PublishOutcome) {
        self.done = true;
        self.completion.finish_one(outcome.settlement());
    }
}

impl Drop for DetachToken {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // First, the caller's requeue: a `Guarded` has already dropped its value.
        let settlement = if panicking() {
            // Second, the report (Release inside `report`).
            let _ = self.completion.shared.latch.report(self.completion.epoch);
            Settlement::Panicked
        } else {
            Settlement::Failed
        };
        // Last, the decrement (which may settle the shared completion).
        self.completion.finish_one(settlement);
    }
}

impl fmt::Debug for DetachToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DetachToken")
            .field("epoch", &self.completion.epoch)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// A value (the recoverable batch a guard protects) held together with its guard, so that on
/// any drop — normal or unwinding — the value drops **first** (its `Drop` requeues what it still
/// owns) and the guard second (report, then decrement). Rust drops struct fields in declaration
/// order; this type exists so no call site has to get a local-variable order right.
///
/// ```
/// # use ourios_barrier::{Barrier, Guarded};
/// # struct RecoverableBatch;
/// let barrier = Barrier::new();
/// let mut batch = Guarded::new(RecoverableBatch, barrier.enter_encode());
/// let _epoch = batch.guard().epoch();
/// // work through `*batch` / `&mut *batch`; a panic here requeues, then reports, then decrements
/// drop(batch);
/// ```
#[derive(Debug)]
pub struct Guarded<T, G> {
    // Field order is drop order: the value (requeue) before the guard (report, decrement).
    value: T,
    guard: G,
}

impl<T, G> Guarded<T, G> {
    /// Holds `value` under `guard`.
    pub fn new(value: T, guard: G) -> Self {
        Self { value, guard }
    }

    /// The guard.
    pub fn guard(&self) -> &G {
        &self.guard
    }

    /// Takes the two apart. From here the caller owns the order again: drop the value before
    /// the guard.
    pub fn into_parts(self) -> (T, G) {
        (self.value, self.guard)
    }
}

impl<T> Guarded<T, PublishGuard> {
    /// Drops the value (its remaining requeue), then settles the guard with `outcome`.
    pub fn complete(self, outcome: PublishOutcome) {
        let (value, guard) = self.into_parts();
        drop(value);
        guard.complete(outcome);
    }
}

impl<T> Guarded<T, DetachToken> {
    /// Drops the value (its remaining requeue), then completes the token with `outcome`.
    pub fn complete(self, outcome: PublishOutcome) {
        let (value, token) = self.into_parts();
        drop(value);
        token.complete(outcome);
    }
}

impl<T, G> Deref for Guarded<T, G> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T, G> DerefMut for Guarded<T, G> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}
