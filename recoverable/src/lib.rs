//! The ownership state machine of RFC 0054: no drained batch becomes unreachable because its
//! consumer panicked.
//!
//! A [`RecoverableBatch`] holds items (record partitions, audit groups, a worker's unappended
//! records), each `Pending`, `InFlight`, `Settled { Durable | Dropped }` or `Requeued`; a
//! consumer takes an item out only by settling the [`Lease`] it got when the put started, and
//! the batch's `Drop` hands every `Pending` and `InFlight` item back to its [`RequeueTarget`],
//! reporting the `InFlight` ones as ambiguous puts (the only allowed duplicates). A [`Drained`]
//! owns a sweep's or cut's batches from before the first take; its `Drop` requeues audit events
//! first, records second, and only then releases the publish guard. Neither `Drop` panics.
//!
//! Criteria proved here (tests in `tests/it`, `tests/loom.rs`): the mechanism legs of RFC 0054
//! §9.5 (settle/requeue/drop state machine, nothing settled requeued, nothing requeued twice,
//! ambiguous = `InFlight` at the panic), RFC0054.1 for a panic at each point of a two-phase
//! consumer (the "panic at each point" leg of §9.7), and the requeue-vs-observe ordering.
//!
//! ```
//! use std::sync::{Arc, Mutex, PoisonError};
//! use ourios_recoverable::{RecoverableBatch, RequeueCause, RequeueTarget, Settlement};
//!
//! struct Buffer(Mutex<Vec<u32>>);
//! impl RequeueTarget<u32> for Buffer {
//!     fn requeue(&self, items: Vec<u32>, _cause: RequeueCause) {
//!         // Never panic: recover a poisoned lock.
//!         let mut buf = ourios_recoverable::lock(&self.0);
//!         buf.splice(0..0, items);
//!     }
//! }
//!
//! let buffer = Arc::new(Buffer(Mutex::new(Vec::new())));
//! let mut batch = RecoverableBatch::new(vec![1, 2, 3], buffer.clone());
//! let lease = batch.begin_next().unwrap(); // the put of item 1 starts
//! let one = batch.settle(lease, Settlement::Durable); // it returned Ok: take it out
//! assert_eq!(one, 1);
//! let _in_flight = batch.begin_next().unwrap(); // the put of item 2 starts, then...
//! drop(batch); // ...an unwind: 2 (ambiguous) and 3 go back, 1 does not
//! assert_eq!(*buffer.0.lock().unwrap(), vec![2, 3]);
//! ```
//!
//! It deliberately knows nothing of sinks, Parquet, stores, the barrier or tokio: requeue targets
//! are a trait the sinks implement, the guard is an opaque type parameter, and it owns no metrics
//! (targets count requeues and ambiguous puts).

mod batch;
mod drained;
mod target;

pub use batch::{BatchReport, ItemState, Lease, RecoverableBatch, Settlement};
pub use drained::Drained;
pub use target::{RequeueCause, RequeueTarget};

/// The text of a panic payload (a `&str` or a `String`, as `panic!` makes them), or a
/// placeholder for any other payload: for a caught panic's log line or event.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// Locks `mutex`, recovering it if a panicking holder poisoned it.
///
/// A requeue target must never panic (it runs in `Drop` during an unwind), and every state the
/// crates built on this one keep under a plain mutex is updated in steps that leave it
/// consistent wherever a panic can be raised, so the data behind a poisoned lock is usable.
/// (`ourios-wal` and `ourios-barrier`, which depend on nothing of ours and run under loom, keep
/// their own in their `sync` modules.)
pub fn lock<T: ?Sized>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
