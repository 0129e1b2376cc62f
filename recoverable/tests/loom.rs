//! Mechanism leg M.3 under loom: a `Drop` requeue on one thread against an observer (a barrier)
//! that waits until the handle is dropped or fully settled, then reads the buffers.
//!
//! Time budget: each model explores in well under a second with these sizes. Run with
//! `cargo xtask loom recoverable`, which is:
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=2 cargo test -p ourios-recoverable --test loom --release`
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

use ourios_recoverable::{Drained, RequeueCause, RequeueTarget, Settlement};

/// Two sink buffers and a store, each behind its own lock, as in the node.
#[derive(Debug, Default)]
struct Sinks {
    audit: Mutex<Vec<u32>>,
    records: Mutex<Vec<u32>>,
    store: Mutex<Vec<u32>>,
}

/// Loom's mutex does not poison; the std targets recover poison (see `tests/it/fault.rs`).
#[derive(Debug)]
struct AuditTarget(Arc<Sinks>);
impl RequeueTarget<u32> for AuditTarget {
    fn requeue(&self, items: Vec<u32>, _cause: RequeueCause) {
        self.0.audit.lock().unwrap().splice(0..0, items);
    }
}

#[derive(Debug)]
struct RecordTarget(Arc<Sinks>);
impl RequeueTarget<u32> for RecordTarget {
    fn requeue(&self, items: Vec<u32>, _cause: RequeueCause) {
        self.0.records.lock().unwrap().extend(items);
    }
}

/// The publish guard: releasing it is what a barrier waits for.
#[derive(Debug)]
struct PublishGuard(Arc<AtomicBool>);
impl Drop for PublishGuard {
    fn drop(&mut self) {
        // Release: every requeue `Drained::drop` made before the guard dropped is visible to an
        // observer that Acquire-loads `true`.
        self.0.store(true, Ordering::Release);
    }
}

const AUDIT: [u32; 1] = [100];
const RECORDS: [u32; 2] = [0, 1];

/// Where the consumer stops (an early return: the same `Drop` path as an unwind).
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Both takes done, nothing consumed: `Drained` holds everything.
    BeforeAudit,
    /// Audit written; partition 0 taken into a `RecoverableBatch` and in flight, partition 1
    /// still in `Drained`.
    InsideRecords,
    /// Everything settled.
    Never,
}

/// One consumer builds `Drained` empty, takes audit then records, and consumes up to `stop`.
/// An observer waits for the guard's release and checks no id is missing from both the
/// buffers and the store.
fn model_consumer_vs_observer(stop: Stop) {
    loom::model(move || {
        let sinks = Arc::new(Sinks {
            audit: Mutex::new(AUDIT.to_vec()),
            records: Mutex::new(RECORDS.to_vec()),
            store: Mutex::new(Vec::new()),
        });
        let released = Arc::new(AtomicBool::new(false));

        let consumer = {
            let sinks = sinks.clone();
            let released = released.clone();
            thread::spawn(move || {
                let mut drained = Drained::new(
                    PublishGuard(released),
                    std::sync::Arc::new(AuditTarget(sinks.clone())),
                    std::sync::Arc::new(RecordTarget(sinks.clone())),
                );
                let audit = std::mem::take(&mut *sinks.audit.lock().unwrap());
                drained.put_audit(audit);
                {
                    let mut buffer = sinks.records.lock().unwrap();
                    while !buffer.is_empty() {
                        drained.record_slot().push(buffer.remove(0));
                    }
                }
                if let Stop::BeforeAudit = stop {
                    return;
                }
                if let Some(mut audit) = drained.take_audit() {
                    while let Some(lease) = audit.begin_next() {
                        sinks.store.lock().unwrap().push(*audit.item(&lease));
                        let _ = audit.settle(lease, Settlement::Durable);
                    }
                    let _ = audit.finish();
                }
                let mut first = drained.take_records_where(|id| *id == 0);
                let lease = first.begin_next().unwrap();
                if let Stop::InsideRecords = stop {
                    // The put of partition 0 started; its result is unknown.
                    return;
                }
                sinks.store.lock().unwrap().push(*first.item(&lease));
                let _ = first.settle(lease, Settlement::Durable);
                let mut rest = drained.take_records_where(|_| true);
                while let Some(lease) = rest.begin_next() {
                    sinks.store.lock().unwrap().push(*rest.item(&lease));
                    let _ = rest.settle(lease, Settlement::Durable);
                }
            })
        };

        // The observer: a barrier waiting until the handle is dropped or fully settled.
        // Acquire: pairs with the guard's Release store.
        while !released.load(Ordering::Acquire) {
            thread::yield_now();
        }
        let audit = sinks.audit.lock().unwrap().clone();
        let records = sinks.records.lock().unwrap().clone();
        let store = sinks.store.lock().unwrap().clone();
        for id in AUDIT.iter().chain(&RECORDS) {
            assert!(
                audit.contains(id) || records.contains(id) || store.contains(id),
                "{stop:?}: item {id} missing from both the buffers and the store \
                 (audit {audit:?}, records {records:?}, store {store:?})"
            );
        }
        consumer.join().unwrap();
    });
}

/// A `Drop` requeue on the consumer thread (partition 0 in flight in its `RecoverableBatch`,
/// partition 1 still in `Drained`) vs an observer that waits for the guard and reads the
/// buffers: it never sees an item missing from both places.
/// Reasoned mutation (not run as a mutant): move `drop(self.guard.take());` to the top of
/// `Drained::drop`: loom finds the interleaving where the observer reads the record buffer before
/// partition 1 is back.
#[test]
fn loom_drop_requeue_vs_observer_never_sees_missing_item() {
    model_consumer_vs_observer(Stop::InsideRecords);
}

/// The same with everything still in `Drained` (stopped before the audit write): audit and
/// records both come back before the guard is released.
/// Reasoned mutation (not run as a mutant): move `drop(self.guard.take());` to the top of
/// `Drained::drop`.
#[test]
fn loom_drained_drop_before_audit_vs_observer_never_sees_missing_item() {
    model_consumer_vs_observer(Stop::BeforeAudit);
}

/// Fully settled: the observer finds every item in the store when the guard is released.
/// Reasoned mutation (not run as a mutant): comment out the `push` of partition 1 into the store in
/// the consumer (the settled partition then exists nowhere, which is exactly what settling without
/// a durable put would do).
#[test]
fn loom_fully_settled_vs_observer_never_sees_missing_item() {
    model_consumer_vs_observer(Stop::Never);
}
