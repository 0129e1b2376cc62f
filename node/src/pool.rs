//! `EncodePool` (RFC 0054 §9.5): encode workers behind a bounded `sync_channel`, and a
//! supervisor that holds the receiver.
//!
//! - A full channel blocks `submit` (ingest), and so does a batch whose records' estimated
//!   bytes do not fit beside those queued and being appended (a `ByteBudget`, the publisher
//!   queue's, whose permit travels with the batch): the two bounds cap
//!   the memory between the miners and the record buffers, in batches and in bytes.
//! - A worker's unappended remainder lives in a `RecoverableBatch` held in a `Guarded` with the
//!   batch's `BatchGuard`, so an unwind requeues the remainder (via `buffer_only`) *before* the
//!   guard reports its epoch and decrements: quiesce never reads the pool idle across a panic.
//! - The handoff of each record happens inside `SharedParquetSink::append`, before its trigger.
//! - The supervisor respawns a worker only when its exit was a panic (never on the normal exit
//!   a closed channel produces), counts it, and drains and requeues whatever is still queued
//!   when the pool stops. A worker that cannot be spawned (no thread to be had) is counted and
//!   not retried; when none is left, or the supervisor itself unwinds, it disconnects the pool
//!   first and then requeues every queued batch, so no acknowledged batch is dropped with the
//!   receiver.
//! - `submit` on a disconnected pool appends through `buffer_only`, still acknowledges, and
//!   counts `ourios.ingest.encode_fallback`.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use ourios_barrier::{BatchGuard, BudgetPermit, ByteBudget, Guarded};
use ourios_publisher::PublishCoordinator;
use ourios_recoverable::{RecoverableBatch, RequeueCause, RequeueTarget, Settlement, lock};
use ourios_sinks::{AppendOutcome, LogRecord, SharedParquetSink};

use crate::metrics;

/// One mined frame's records on their way to a worker, with the guard tagging its epoch.
#[derive(Debug)]
pub(crate) struct EncodeBatch {
    records: Vec<LogRecord>,
    guard: BatchGuard,
    /// The records' share of the queue's bytes ([`EncodePool::start`]'s `bound_bytes`), given
    /// back when the batch is appended or dropped any other way (requeued, drained, unwound).
    share: BudgetPermit,
}

/// Requeues a worker's unappended records into the record buffer (no trigger, no publish).
#[derive(Debug)]
struct BufferOnly(SharedParquetSink);

impl RequeueTarget<LogRecord> for BufferOnly {
    fn requeue(&self, items: Vec<LogRecord>, cause: RequeueCause) {
        if let RequeueCause::Unwound { .. } = cause {
            ::metrics::counter!(ourios_sinks::metrics::SINK_REQUEUES, "consumer" => "worker", "cause" => "unwound")
                .increment(items.len() as u64);
        }
        // buffer_only takes the sink lock poison-tolerantly and does not panic.
        self.0.buffer_only(items);
    }
}

/// Test hook (always false unless the `failpoints` feature is on): `submit` finds the pool
/// disconnected, so a test drives the real fallback branch.
fn disconnected_by_failpoint() -> bool {
    fail::fail_point!("node::pool::disconnected", |_| true);
    false
}

/// The pool. Dropping it stops the workers (after they drain the queue) and joins the
/// supervisor.
#[derive(Debug)]
pub(crate) struct EncodePool {
    /// Shared with the supervisor, which takes it when it ends: a later `submit` falls back.
    tx: Arc<Mutex<Option<SyncSender<EncodeBatch>>>>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
    records: SharedParquetSink,
    /// The queue's bound in bytes; a batch larger than it goes alone.
    queued: ByteBudget,
}

impl EncodePool {
    /// Starts `workers` workers behind a queue of `bound` batches and `bound_bytes` estimated
    /// bytes of records.
    pub(crate) fn start(
        workers: usize,
        bound: usize,
        bound_bytes: usize,
        records: SharedParquetSink,
        coordinator: PublishCoordinator,
    ) -> Self {
        let (tx, rx) = sync_channel::<EncodeBatch>(bound);
        let tx = Arc::new(Mutex::new(Some(tx)));
        let ctx = Arc::new(WorkerCtx {
            rx: Mutex::new(rx),
            records: records.clone(),
            coordinator,
        });
        let end = SupervisorEnd {
            tx: Arc::clone(&tx),
            ctx: Arc::clone(&ctx),
        };
        let supervisor = std::thread::Builder::new()
            .name("ourios-encode-supervisor".into())
            .spawn(move || {
                let _end = end;
                supervise(&ctx, workers.max(1));
            });
        let supervisor = match supervisor {
            Ok(handle) => Some(handle),
            Err(e) => {
                // No thread for the supervisor: the pool starts disconnected (its end ran when
                // the closure was dropped) and every submit takes the counted fallback.
                tracing::error!(
                    error = %crate::server::said(&e),
                    "the encode pool could not start; mined records go straight to the record buffers"
                );
                None
            }
        };
        // Exported from the start: a node whose requests are all mined in place never queues
        // a batch, and an operator still finds the gauge, at 0.
        ::metrics::gauge!(metrics::INGEST_ENCODE_QUEUE_BYTES).set(0.0);
        Self {
            tx,
            supervisor: Mutex::new(supervisor),
            records,
            // Set under the budget's lock: a batch's bytes given back by whichever thread drops
            // it (a worker, an unwind, the fallback) leave the gauge right.
            queued: ByteBudget::observed(bound_bytes, |held| {
                ::metrics::gauge!(metrics::INGEST_ENCODE_QUEUE_BYTES).set(held as f64);
            }),
        }
    }

    /// Hands a mined batch to a worker. Blocks while the queue is full, in batches or in bytes
    /// (counted on `ourios.ingest.encode_queue_full`); on an async worker of a multi-thread
    /// runtime the wait first hands the worker's other tasks to another thread
    /// (`block_in_place`), so a full queue never stalls the runtime. On a disconnected pool the
    /// records go into the buffers through `buffer_only` (published by the next sweep or cut),
    /// and the guard ends normally: the caller still acknowledges.
    pub(crate) fn submit(&self, records: Vec<LogRecord>, guard: BatchGuard) {
        // Room in bytes first, holding no sender while it waits: the supervisor's end waits for
        // every sender, and frees the bytes of what it drains.
        let bytes = records.iter().map(LogRecord::estimated_bytes).sum();
        let share = self.queued.try_acquire(bytes).unwrap_or_else(|| {
            ::metrics::counter!(metrics::INGEST_ENCODE_QUEUE_FULL).increment(1);
            may_block(|| self.queued.acquire(bytes))
        });
        let tx = if disconnected_by_failpoint() {
            None
        } else {
            lock(&self.tx).clone()
        };
        let batch = EncodeBatch {
            records,
            guard,
            share,
        };
        let batch = match tx {
            Some(tx) => match tx.try_send(batch) {
                Ok(()) => return,
                Err(TrySendError::Full(batch)) => {
                    ::metrics::counter!(metrics::INGEST_ENCODE_QUEUE_FULL).increment(1);
                    match may_block(|| tx.send(batch)) {
                        Ok(()) => return,
                        Err(e) => e.0,
                    }
                }
                Err(TrySendError::Disconnected(batch)) => batch,
            },
            None => batch,
        };
        ::metrics::counter!(metrics::INGEST_ENCODE_FALLBACK).increment(1);
        let EncodeBatch { records, guard, .. } = batch;
        self.records.buffer_only(records);
        drop(guard);
    }

    /// Closes the queue without waiting: the workers finish what is queued and exit.
    pub(crate) fn close(&self) {
        drop(lock(&self.tx).take());
    }

    /// Closes the queue, lets the workers finish what is queued, joins the supervisor.
    pub(crate) fn shutdown(&self) {
        drop(lock(&self.tx).take());
        if let Some(s) = lock(&self.supervisor).take() {
            let _ = s.join();
        }
    }
}

impl Drop for EncodePool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[derive(Debug)]
struct WorkerCtx {
    rx: Mutex<Receiver<EncodeBatch>>,
    records: SharedParquetSink,
    coordinator: PublishCoordinator,
}

/// Sent by a worker's exit guard: (worker id, exited by panic).
type Exit = (usize, bool);

struct ExitSignal {
    id: usize,
    tx: std::sync::mpsc::Sender<Exit>,
}

impl Drop for ExitSignal {
    fn drop(&mut self) {
        let _ = self.tx.send((self.id, std::thread::panicking()));
    }
}

/// Spawns worker `id`; `Err` when the system has no thread to give (the caller counts it).
fn spawn_worker(
    ctx: &Arc<WorkerCtx>,
    id: usize,
    exits: &std::sync::mpsc::Sender<Exit>,
) -> std::io::Result<JoinHandle<()>> {
    // Test hook (compiled out unless `failpoints`): the thread cannot be spawned.
    fail::fail_point!("node::pool::spawn", |_| Err(std::io::Error::other(
        "worker spawn refused by failpoint"
    )));
    let ctx = Arc::clone(ctx);
    let signal = ExitSignal {
        id,
        tx: exits.clone(),
    };
    std::thread::Builder::new()
        .name(format!("ourios-encode-{id}"))
        .spawn(move || {
            let _signal = signal;
            work(&ctx);
        })
}

/// Spawns worker `id`, counting a failure; `None` when it could not be spawned.
fn try_spawn(
    ctx: &Arc<WorkerCtx>,
    id: usize,
    exits: &std::sync::mpsc::Sender<Exit>,
) -> Option<JoinHandle<()>> {
    match spawn_worker(ctx, id, exits) {
        Ok(handle) => Some(handle),
        Err(e) => {
            ::metrics::counter!(metrics::ENCODE_WORKER_SPAWN_FAILURES).increment(1);
            tracing::error!(worker = id, error = %crate::server::said(&e), "an encode worker could not be spawned");
            None
        }
    }
}

/// Runs until every worker has ended: normally (the queue closed and emptied) or by a panic
/// whose respawn failed. [`SupervisorEnd`] then disconnects and empties the queue.
fn supervise(ctx: &Arc<WorkerCtx>, workers: usize) {
    let (exits_tx, exits_rx) = channel::<Exit>();
    let mut handles: Vec<Option<JoinHandle<()>>> = (0..workers)
        .map(|id| try_spawn(ctx, id, &exits_tx))
        .collect();
    let mut alive = handles.iter().filter(|h| h.is_some()).count();
    while alive > 0 {
        let Ok((id, panicked)) = exits_rx.recv() else {
            break;
        };
        let joined = handles[id].take().map(JoinHandle::join);
        let by_panic = panicked || matches!(joined, Some(Err(_)));
        if by_panic {
            ::metrics::counter!(metrics::ENCODE_WORKER_RESPAWNS).increment(1);
            ::metrics::counter!(ourios_sinks::metrics::FLUSH_ERRORS, "error.type" => "encode_worker_panic").increment(1);
            handles[id] = try_spawn(ctx, id, &exits_tx);
        }
        if handles[id].is_none() {
            alive -= 1;
        }
    }
}

/// The supervisor's end, normal or by unwind: takes the pool's sender, so every later `submit`
/// takes the counted fallback, then requeues every batch still queued or being sent, so none
/// is dropped with the receiver. Never panics: the locks are taken poison-tolerantly and
/// `buffer_only` does not panic.
struct SupervisorEnd {
    tx: Arc<Mutex<Option<SyncSender<EncodeBatch>>>>,
    ctx: Arc<WorkerCtx>,
}

impl Drop for SupervisorEnd {
    fn drop(&mut self) {
        drop(lock(&self.tx).take());
        let rx = lock(&self.ctx.rx);
        // `recv` ends once every sender is gone: a `submit` that cloned the sender before it
        // was taken either sends (and the batch is requeued here) or finds it disconnected.
        while let Ok(batch) = rx.recv() {
            ::metrics::counter!(metrics::INGEST_ENCODE_FALLBACK).increment(1);
            self.ctx.records.buffer_only(batch.records);
            drop(batch.guard);
        }
    }
}

/// Runs `f`, which may block. On an async worker of a multi-thread runtime it first moves the
/// worker's other tasks to another thread (tokio's `block_in_place`); anywhere else (a blocking
/// pool thread, a plain thread, a current-thread runtime) it just runs `f`.
pub(crate) fn may_block<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// The one handoff both branches use (a worker, or `mine_batch_ordered` inline): append the
/// record (the sink owns it from inside the call, before any trigger) and hand the partitions a
/// trigger detached to the publisher under the batch's guard. A quarantined record is held by
/// the sink until its event is durable: nothing more to do here.
pub(crate) fn hand_off(
    records: &SharedParquetSink,
    coordinator: &PublishCoordinator,
    record: LogRecord,
    guard: &BatchGuard,
) {
    match records.append(record) {
        AppendOutcome::Buffered {
            detached: Some(detached),
        } => {
            // Test hook (compiled out unless `failpoints`): a panic between the detach and the
            // hand-over; `detached` owns the partitions and requeues them as it unwinds.
            fail::fail_point!("node::pool::hand_off");
            // A full publisher queue blocks here; on an async worker (a request handed on in
            // place) its other tasks move to another thread first.
            may_block(|| coordinator.enqueue(detached, guard));
        }
        AppendOutcome::Buffered { detached: None } => {}
        AppendOutcome::Quarantined { .. } => {}
    }
}

fn work(ctx: &WorkerCtx) {
    loop {
        let batch = {
            let rx = lock(&ctx.rx);
            rx.recv()
        };
        let Ok(EncodeBatch {
            records,
            guard,
            share,
        }) = batch
        else {
            return;
        };
        let target: Arc<dyn RequeueTarget<LogRecord>> = Arc::new(BufferOnly(ctx.records.clone()));
        // Value first, guard second: an unwind requeues the remainder, then the guard reports
        // its epoch, then decrements.
        let mut batch = Guarded::new(RecoverableBatch::new(records, target), guard);
        while let Some(lease) = batch.begin_next() {
            // Test hook (compiled out unless `failpoints`): a panic in the encode loop.
            fail::fail_point!("node::worker::encode", |_| panic!(
                "encode worker panic injected by failpoint"
            ));
            // The handoff: `append` inserts the record before any trigger step.
            let record = batch.settle(lease, Settlement::Durable);
            hand_off(&ctx.records, &ctx.coordinator, record, batch.guard());
        }
        drop(batch);
        // The batch's bytes are in the record buffers now (or, on an unwind, requeued there and
        // given back as `share` unwinds with it).
        drop(share);
    }
}
