//! Where unsettled items go back: the [`RequeueTarget`] trait and why an item is requeued.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Where unsettled items go back: the buffer they were drained from.
///
/// Implemented by the sinks (the record buffer, the audit buffer). A [`RecoverableBatch`] or a
/// [`Drained`] calls it from its `Drop`, which may run while the thread is already unwinding, so
/// an implementation must guarantee all of the following:
///
/// 1. **It does not panic.** Recover a poisoned lock with
///    [`PoisonError::into_inner`](std::sync::PoisonError::into_inner) instead of unwrapping it:
///    the panic that poisoned it is very likely the one now unwinding through the handle. Do no
///    fallible work (no I/O, no encoding, no `unwrap`/`expect`, no indexing that can fail) on
///    this path. If it panics anyway, the handles catch the panic in their `Drop` so that it is
///    never a double panic (process abort), but the items passed to that call are then lost:
///    a panicking target breaks invariant I1.
/// 2. **It does not block on anything the consuming code can hold.** In particular it may take
///    the sink's own buffer lock, so a consumer must never keep that lock held in a scope that
///    outlives a handle requeueing into the same sink (declare lock guards *after* the handle,
///    so unwinding releases them first). It must not wait for the publish guard, the barrier, a
///    runtime or a channel.
/// 3. **It takes every item it is given, in order, exactly once.** After `requeue` returns, each
///    item is reachable from the buffer again (or from wherever the buffer's owner keeps it), and
///    the buffer's byte/record accounting and gauges are restored. An audit target puts the
///    items **ahead** of newer events emitted concurrently (`requeue_ahead`): they are older.
/// 4. **It counts ambiguous items.** [`RequeueCause::Unwound`] carries how many of the items were
///    `InFlight` when the handle dropped: their put may have been accepted by the store, so they
///    are the only allowed source of duplicates, and the target (which owns the metrics) counts
///    them.
///
/// `items` is never empty: the handles skip the call when there is nothing to requeue.
///
/// [`RecoverableBatch`]: crate::RecoverableBatch
/// [`Drained`]: crate::Drained
pub trait RequeueTarget<T>: Send + Sync {
    /// Put `items` back into the buffer they came from. Must not panic or block (see the trait
    /// documentation for the full contract).
    fn requeue(&self, items: Vec<T>, cause: RequeueCause);
}

/// Why items are handed back to a [`RequeueTarget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequeueCause {
    /// A consumer requeued them on purpose (transient failure, refused publish, set-aside).
    Refused,
    /// A handle was dropped with the items unsettled (unwind or early return).
    Unwound {
        /// How many of these items were `InFlight` (put started, result unknown): the only source
        /// of allowed duplicates. The target counts them.
        ambiguous: usize,
    },
}

/// Requeue from a `Drop`: a target that breaks its contract by panicking must not turn an unwind
/// into an abort, and must not make the handle's own `Drop` panic.
pub(crate) fn requeue_from_drop<T>(
    target: &dyn RequeueTarget<T>,
    items: Vec<T>,
    cause: RequeueCause,
) {
    if items.is_empty() {
        return;
    }
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| target.requeue(items, cause))) {
        // Dropping a panic payload runs arbitrary code that could itself panic; leaking it on
        // this already-broken path keeps `Drop` non-panicking.
        std::mem::forget(payload);
    }
}
