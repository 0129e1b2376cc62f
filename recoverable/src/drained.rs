//! [`Drained`]: the owner of a sweep's or a cut's drained batches from before the first take.

use std::fmt;
use std::sync::Arc;

use crate::batch::RecoverableBatch;
use crate::target::{RequeueCause, RequeueTarget, requeue_from_drop};

/// The batches a sweep or a cut drained, owned from before the first take until consumed.
///
/// Built **empty first** ([`new`](Self::new)) with the publish guard and the two sinks' requeue
/// targets, then filled as the takes happen: the record drain pushes each partition into
/// [`record_slot`](Self::record_slot) the moment it leaves the buffer, and the audit take moves
/// its batch in on return ([`put_audit`](Self::put_audit)). So at no instant does a removed batch
/// live only on a stack frame. The consuming calls take what they consume as
/// [`RecoverableBatch`]es ([`take_audit`](Self::take_audit),
/// [`take_records_where`](Self::take_records_where)), and every normal requeue arm takes what it
/// requeues ([`requeue_audit`](Self::requeue_audit),
/// [`requeue_records_where`](Self::requeue_records_where)), so `Drop` only handles what is left:
/// it requeues the audit events **first** (ahead of concurrent emits), the records **second**,
/// and only then drops the guard (RFC 0054 §9.5).
pub struct Drained<A, R, G> {
    audit: Option<Vec<A>>,
    records: Option<Vec<R>>,
    audit_target: Arc<dyn RequeueTarget<A>>,
    record_target: Arc<dyn RequeueTarget<R>>,
    /// `Some` until `Drop::drop`, which drops it explicitly after both requeues, so whoever
    /// waits on the guard (quiesce, a barrier) observes the buffers restored. Declared last as
    /// well, so even a future field added above cannot outlive it by accident.
    guard: Option<G>,
}

impl<A, R, G> fmt::Debug for Drained<A, R, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drained")
            .field("audit", &self.audit.as_ref().map(Vec::len))
            .field("records", &self.records.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

impl<A, R, G> Drained<A, R, G> {
    /// An empty `Drained`: create it before the first take.
    pub fn new(
        guard: G,
        audit_target: Arc<dyn RequeueTarget<A>>,
        record_target: Arc<dyn RequeueTarget<R>>,
    ) -> Self {
        Self {
            audit: None,
            records: None,
            audit_target,
            record_target,
            guard: Some(guard),
        }
    }

    /// The partition slot: the record drain pushes each partition here the moment it leaves the
    /// buffer.
    pub fn record_slot(&mut self) -> &mut Vec<R> {
        self.records.get_or_insert_with(Vec::new)
    }

    /// The audit take moves its batch in on return (appended if called twice).
    pub fn put_audit(&mut self, batch: Vec<A>) {
        match &mut self.audit {
            Some(audit) => audit.extend(batch),
            None => self.audit = Some(batch),
        }
    }

    /// The audit events still held (empty once taken).
    pub fn audit(&self) -> &[A] {
        self.audit.as_deref().unwrap_or(&[])
    }

    /// The record partitions still held (empty once taken).
    pub fn records(&self) -> &[R] {
        self.records.as_deref().unwrap_or(&[])
    }

    /// Move the audit batch into a [`RecoverableBatch`] requeueing into the audit target.
    /// `None` if there is no audit batch (never put, or already taken).
    pub fn take_audit(&mut self) -> Option<RecoverableBatch<A>> {
        let audit = self.audit.take()?;
        Some(RecoverableBatch::new(audit, Arc::clone(&self.audit_target)))
    }

    /// Move the record partitions matching `pred` into a [`RecoverableBatch`] requeueing into
    /// the record target; the rest stay here.
    ///
    /// `pred` runs on every partition before anything moves, so a panicking `pred` leaves every
    /// partition here (and `Drop` requeues them).
    pub fn take_records_where(&mut self, pred: impl FnMut(&R) -> bool) -> RecoverableBatch<R> {
        let taken = take_matching(&mut self.records, pred);
        RecoverableBatch::new(taken, Arc::clone(&self.record_target))
    }

    /// A normal requeue arm for records: take the partitions matching `pred` and requeue them
    /// now ([`RequeueCause::Refused`]). Returns how many.
    pub fn requeue_records_where(&mut self, pred: impl FnMut(&R) -> bool) -> usize {
        let taken = take_matching(&mut self.records, pred);
        let n = taken.len();
        if n > 0 {
            self.record_target.requeue(taken, RequeueCause::Refused);
        }
        n
    }

    /// A normal requeue arm for audit: take the audit batch and requeue it now
    /// ([`RequeueCause::Refused`]). Returns how many events.
    pub fn requeue_audit(&mut self) -> usize {
        let taken = self.audit.take().unwrap_or_default();
        let n = taken.len();
        if n > 0 {
            self.audit_target.requeue(taken, RequeueCause::Refused);
        }
        n
    }

    /// The publish guard.
    pub fn guard(&self) -> &G {
        // Only `Drop::drop` takes the guard, and nothing can call `guard()` after it starts.
        self.guard
            .as_ref()
            .expect("the guard is present until Drained drops")
    }

    /// Ends the drain: requeues whatever is still held (audit first, records second, as `Drop`
    /// does, cause `Refused`) and returns the guard, so the caller can settle it with the
    /// outcome it knows. Nothing is left for `Drop`.
    pub fn finish(mut self) -> G {
        if let Some(audit) = self.audit.take().filter(|a| !a.is_empty()) {
            requeue_from_drop(&*self.audit_target, audit, RequeueCause::Refused);
        }
        if let Some(records) = self.records.take().filter(|r| !r.is_empty()) {
            requeue_from_drop(&*self.record_target, records, RequeueCause::Refused);
        }
        self.guard
            .take()
            .expect("the guard is present until Drained drops or finishes")
    }

    /// Whether nothing is held: a drop now requeues nothing.
    pub fn is_empty(&self) -> bool {
        self.audit().is_empty() && self.records().is_empty()
    }
}

/// Move the elements matching `pred` out of `slot`, keeping order on both sides. `pred` runs on
/// every element first, so if it panics nothing has moved.
fn take_matching<R>(slot: &mut Option<Vec<R>>, mut pred: impl FnMut(&R) -> bool) -> Vec<R> {
    let Some(records) = slot.as_mut() else {
        return Vec::new();
    };
    let chosen: Vec<bool> = records.iter().map(&mut pred).collect();
    if chosen.iter().all(|&c| c) {
        return std::mem::take(records);
    }
    let mut chosen = chosen.into_iter();
    records
        .extract_if(.., |_| chosen.next().unwrap_or(false))
        .collect()
}

impl<A, R, G> Drop for Drained<A, R, G> {
    /// Requeue what is still held, audit events first, records second
    /// (`RequeueCause::Unwound { ambiguous: 0 }`: nothing here was in flight), then drop the
    /// guard. Never panics (a panicking target is caught; the guard's own `Drop` is the guard
    /// type's contract).
    fn drop(&mut self) {
        if let Some(audit) = self.audit.take() {
            requeue_from_drop(
                &*self.audit_target,
                audit,
                RequeueCause::Unwound { ambiguous: 0 },
            );
        }
        if let Some(records) = self.records.take() {
            requeue_from_drop(
                &*self.record_target,
                records,
                RequeueCause::Unwound { ambiguous: 0 },
            );
        }
        // Last: only now may a barrier waiting on the guard look at the buffers.
        drop(self.guard.take());
    }
}
