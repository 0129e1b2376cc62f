//! The publisher thread (RFC 0054 §9.5): one dedicated OS thread behind a bounded queue of
//! [`Detached`] items, each a partition an encode worker detached, already inside the
//! publisher's own `RecoverableBatch` and holding its share of the batch's shared completion.
//!
//! - Each item runs under `catch_unwind`, and the item is *moved into* the unwinding closure, so
//!   a panic drops it during the unwind: its `RecoverableBatch` requeues first, then its
//!   `DetachToken` reports the epoch to the latch and settles as panicked. The panic is counted
//!   (`error.type = publisher_panic`) and the thread continues.
//! - A thread that dies anyway (a panic outside an item) drains every item still queued back
//!   into the buffers (parked) on its way out, and the next sender that finds the queue
//!   disconnected parks its own item and respawns the thread behind the publisher-slot mutex.
//! - A sender that finds the queue disconnected *parks*: the partition goes back into the
//!   buffers under the sink lock (recording the current `barrier_epoch`, keeping its audit
//!   watermark) before the token is completed as `Parked`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;

use ourios_barrier::{BatchGuard, BudgetPermit, ByteBudget, DetachToken, Guarded, PublishOutcome};
use ourios_recoverable::{RecoverableBatch, lock};
use ourios_sinks::Partition;

use crate::coordinator::{Inner, PublishCoordinator};
use crate::metrics;

/// A detached partition on its way to the publisher: its `RecoverableBatch` (dropped first,
/// requeueing whatever is unsettled) and its share of the batch's shared completion (dropped
/// second: report, then decrement).
pub type Detached = Guarded<RecoverableBatch<Partition>, DetachToken>;

/// Publisher settings. A full queue, by either bound, blocks the encode worker that detached:
/// the two bounds are what cap the memory of partitions waiting to be published.
#[derive(Debug, Clone, Copy)]
pub struct PublisherConfig {
    /// Bound of the queue, in detached partitions.
    pub queue_bound: usize,
    /// Bound of the queue in the partitions' estimated bytes (`Partition::bytes`); a partition
    /// larger than this is admitted when the queue is empty.
    pub queue_bytes: usize,
}

/// Default of [`PublisherConfig::queue_bytes`].
pub const DEFAULT_QUEUE_BYTES: usize = 32 << 20;

impl Default for PublisherConfig {
    fn default() -> Self {
        Self {
            queue_bound: 64,
            queue_bytes: DEFAULT_QUEUE_BYTES,
        }
    }
}

/// An item in the queue with the bytes it holds of the queue's budget. Fields drop in order:
/// the item first (requeue, then report), the permit after, however the item is dropped.
struct Queued {
    item: Detached,
    permit: BudgetPermit,
}

/// The publisher-slot mutex: the current sender and thread, replaced only by whoever holds it.
#[derive(Debug)]
pub(crate) struct PublisherSlot {
    config: PublisherConfig,
    /// The queue's byte bound; outlives respawns (a dead thread's items give theirs back as
    /// they are parked or dropped).
    budget: ByteBudget,
    state: Mutex<SlotState>,
}

#[derive(Debug, Default)]
struct SlotState {
    /// `None` once shut down.
    tx: Option<SyncSender<Queued>>,
    /// Bumped on every (re)spawn, so a sender only replaces the generation it saw die.
    generation: u64,
    thread: Option<JoinHandle<()>>,
    shut_down: bool,
}

impl PublisherSlot {
    pub(crate) fn new(config: PublisherConfig) -> Self {
        Self {
            config,
            // The gauge is set under the budget's lock, so a permit given back anywhere (an
            // unwind, a parked item) leaves it right.
            budget: ByteBudget::observed(config.queue_bytes, |held| {
                ::metrics::gauge!(metrics::PUBLISHER_QUEUE_BYTES).set(held as f64);
            }),
            state: Mutex::new(SlotState::default()),
        }
    }
}

impl PublishCoordinator {
    /// Starts the publisher thread if it is not running (first start, or after it died).
    /// Returns false after shutdown.
    pub fn ensure_publisher(&self) -> bool {
        let mut state = self.slot();
        if state.shut_down {
            return false;
        }
        let alive = state.thread.as_ref().is_some_and(|t| !t.is_finished());
        if !alive {
            self.spawn_locked(&mut state);
        }
        true
    }

    /// Whether the publisher thread is running.
    pub fn publisher_alive(&self) -> bool {
        let state = self.slot();
        state.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Estimated bytes of the partitions in the publisher queue.
    pub fn queued_bytes(&self) -> usize {
        self.inner.slot.budget.held()
    }

    /// How many times the publisher thread was started (1 + respawns).
    pub fn publisher_generation(&self) -> u64 {
        self.slot().generation
    }

    fn spawn_locked(&self, state: &mut SlotState) {
        if let Some(old) = state.thread.take() {
            // The old thread has finished (or is finishing): its receiver is gone or going, and
            // it drained its queue back into the buffers on the way out.
            let _ = old.join();
        }
        let (tx, rx) = sync_channel(self.inner.slot.config.queue_bound);
        // Weak: the thread must not keep alive the state that holds its own sender, or it
        // would outlive every handle (a cycle only `close` broke).
        let inner = Arc::downgrade(&self.inner);
        let runtime = self.inner.runtime.clone();
        let reason = if state.generation == 0 {
            "start"
        } else {
            "respawn"
        };
        state.generation += 1;
        let generation = state.generation;
        let thread = std::thread::Builder::new()
            .name(format!("ourios-publisher-{generation}"))
            .spawn(move || run(inner, runtime, rx))
            .expect("spawning the publisher thread (out of threads is not recoverable here)");
        ::metrics::counter!(metrics::PUBLISHER_SPAWNS, "reason" => reason).increment(1);
        state.tx = Some(tx);
        state.thread = Some(thread);
    }

    /// Hands the partitions a trigger detached from `guard`'s batch to the publisher.
    ///
    /// `detached` owns them (the sink's `append` returns them in a batch); each is split off
    /// into its own `RecoverableBatch`, moving from one owner to the other, and takes a share
    /// of the batch's shared completion *before* the enqueue (RFC 0054 §9.5: the transfer
    /// happens at the in-flight registration), so a panic anywhere here leaves every partition
    /// owned by a batch that requeues it. A full queue blocks (the memory bound). A
    /// disconnected queue parks the partition back into the buffers, completes its share as
    /// `Parked`, and respawns the publisher. A partition waits for room in the queue's byte
    /// bound before it joins the queue (counted in `ourios.publisher.budget_waits`).
    pub fn enqueue(&self, mut detached: RecoverableBatch<Partition>, guard: &BatchGuard) {
        while detached.pending() > 0 {
            let mut first = true;
            let one = detached.split_off_pending(|_| std::mem::take(&mut first));
            let item: Detached = Guarded::new(one, guard.detach());
            self.send(item);
        }
    }

    fn send(&self, item: Detached) {
        let bytes = (0..item.len())
            .filter_map(|i| item.get(i).map(Partition::bytes))
            .sum();
        let budget = &self.inner.slot.budget;
        let permit = budget.try_acquire(bytes).unwrap_or_else(|| {
            ::metrics::counter!(metrics::PUBLISHER_BUDGET_WAITS).increment(1);
            budget.acquire(bytes)
        });
        let item = Queued { item, permit };
        let (tx, generation) = {
            let state = self.slot();
            (state.tx.clone(), state.generation)
        };
        let item = match tx {
            Some(tx) => match tx.try_send(item) {
                Ok(()) => {
                    ::metrics::gauge!(metrics::PUBLISHER_QUEUE_DEPTH).increment(1.0);
                    return;
                }
                // Full: block on the bound (the memory cap).
                Err(TrySendError::Full(item)) => match tx.send(item) {
                    Ok(()) => {
                        ::metrics::gauge!(metrics::PUBLISHER_QUEUE_DEPTH).increment(1.0);
                        return;
                    }
                    Err(e) => e.0,
                },
                Err(TrySendError::Disconnected(item)) => item,
            },
            None => item,
        };
        park(item.item);
        // Respawn behind the slot mutex, only if nobody has replaced the generation we saw die.
        let mut state = self.slot();
        if !state.shut_down && state.generation == generation {
            self.spawn_locked(&mut state);
        }
    }

    /// The publisher-slot mutex (poison-tolerant: nothing that panics runs under it).
    fn slot(&self) -> MutexGuard<'_, SlotState> {
        lock(&self.inner.slot.state)
    }

    /// Marks the slot shut down and closes the queue; returns the thread to join, if any.
    fn close_slot(&self) -> Option<JoinHandle<()>> {
        let mut state = self.slot();
        state.shut_down = true;
        state.tx = None;
        state.thread.take()
    }

    /// Closes the queue without waiting: the thread publishes what is queued and exits (its
    /// handle is detached). Later `enqueue`s park. For `Drop` paths that must not block.
    pub fn close(&self) {
        drop(self.close_slot());
    }

    /// Stops the publisher: closes the queue, lets the thread publish what is queued, joins it.
    /// Later `enqueue`s park their partitions (the final cut drains them).
    pub fn shutdown(&self) {
        if let Some(thread) = self.close_slot() {
            let _ = thread.join();
        }
    }
}

/// Parks a detached item: the partition goes back into the buffers (the sink keeps its audit
/// watermark) before its token completes.
fn park(item: Detached) {
    let (mut batch, token) = item.into_parts();
    let n = batch.requeue_pending();
    drop(batch);
    ::metrics::counter!(metrics::PUBLISHER_PARKED).increment(n as u64);
    token.complete(PublishOutcome::Parked);
}

/// Drains the queue back into the buffers when the thread exits, normally or by unwinding.
struct DrainOnExit {
    rx: Receiver<Queued>,
}

impl Drop for DrainOnExit {
    fn drop(&mut self) {
        while let Ok(item) = self.rx.try_recv() {
            ::metrics::gauge!(metrics::PUBLISHER_QUEUE_DEPTH).decrement(1.0);
            // `park` requeues through the sink (poison-tolerant, non-panicking) and completes
            // the token; nothing here can unwind. The permit gives its bytes back after.
            park(item.item);
        }
    }
}

/// The publisher thread. It holds the coordinator's state weakly and upgrades it for one item
/// at a time: once every handle is gone the state drops, its sender with it, `recv` fails and
/// the thread ends; items still queued are parked (their batches requeue into the sink, which
/// they hold themselves).
fn run(inner: Weak<Inner>, runtime: tokio::runtime::Handle, rx: Receiver<Queued>) {
    let queue = DrainOnExit { rx };
    let _enter = runtime.enter();
    while let Ok(Queued { item, permit }) = queue.rx.recv() {
        ::metrics::gauge!(metrics::PUBLISHER_QUEUE_DEPTH).decrement(1.0);
        // The item has left the queue: its bytes no longer count against the queue's bound
        // (as its slot no longer counts against the item bound), so what the bounds cap is
        // the queue plus the one item in hand, and a sender never waits on the item in hand.
        drop(permit);
        // Test hook (compiled out unless the `failpoints` feature is on): a panic outside any
        // item kills the thread; `item` drops in the unwind (requeue, then report), and `queue`
        // drains what is left.
        fail::fail_point!("publisher::thread::die", |_| panic!(
            "publisher thread killed by failpoint"
        ));
        let Some(inner) = inner.upgrade() else {
            park(item);
            continue;
        };
        let c = PublishCoordinator { inner };
        let result = catch_unwind(AssertUnwindSafe(move || {
            // The item is owned by this closure: an unwind drops it here, so its batch
            // requeues and its token reports + settles as panicked, before catch_unwind returns.
            let mut item = item;
            // Taken before the publish: a requeued partition leaves the batch.
            let tenants: Vec<_> = (0..item.len())
                .filter_map(|i| item.get(i).map(|p| p.key().tenant.clone()))
                .collect();
            let outcome = c.inner.runtime.block_on(c.publish_detached(&mut item));
            ::metrics::counter!(metrics::PUBLISHER_ITEMS, "outcome" => outcome_label(outcome))
                .increment(1);
            if !outcome.is_ok() {
                // Before the settle: the cut that waits for this share finds the entry.
                c.inner.failures.record(item.guard().epoch(), tenants);
            }
            item.complete(outcome);
        }));
        if result.is_err() {
            ::metrics::counter!(ourios_sinks::metrics::FLUSH_ERRORS, "error.type" => "publisher_panic").increment(1);
        }
    }
}

fn outcome_label(outcome: PublishOutcome) -> &'static str {
    match outcome {
        PublishOutcome::Durable => "durable",
        PublishOutcome::Dropped => "dropped",
        PublishOutcome::Requeued => "requeued",
        PublishOutcome::Parked => "parked",
        PublishOutcome::Failed => "failed",
    }
}

impl PublishCoordinator {
    /// Publishes one detached item (`Feed::publish`): the audit events it depends on first if
    /// they are not durable yet, then its partition. Terminal tenants and audit-before-records
    /// refusals requeue inside `publish_owned`.
    async fn publish_detached(&self, batch: &mut RecoverableBatch<Partition>) -> PublishOutcome {
        // Test hook (compiled out unless `failpoints`): a detached publish held before it runs.
        fail::fail_point!("publisher::detached::publish");
        let needs_audit = batch.pending_indices().into_iter().any(|i| {
            batch.get(i).is_some_and(|p| {
                !self
                    .inner
                    .audit
                    .is_durable_through(&p.key().tenant, p.audit_watermark())
            })
        });
        if needs_audit {
            let _ = self.flush_audit().await;
        }
        let report = self.inner.records.publish_owned(batch).await;
        if report.all_durable() {
            PublishOutcome::Durable
        } else {
            PublishOutcome::Requeued
        }
    }
}
