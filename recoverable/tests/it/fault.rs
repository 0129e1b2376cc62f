//! Fault legs of mechanism leg M.2: a requeue into a poisoned sink, and a target that breaks its
//! contract by panicking while the thread is already unwinding.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use ourios_recoverable::{Drained, RecoverableBatch, RequeueCause, RequeueTarget};

use crate::support::{
    Buffer, Event, Guard, Journal, inject, is_injected, lock, quiet_injected_panics,
};

/// The consumer panics while holding the sink's buffer lock (guard declared after the handles,
/// so the unwind releases, and poisons, it first); the handles' drops then requeue into the
/// poisoned lock: the target recovers it, every item arrives, no double panic, no abort.
/// Reasoned mutation (not run as a mutant): in the test double `Buffer::requeue`
/// (tests/it/support.rs) replace `lock(&self.items)` with `self.items.lock().unwrap()`: the target
/// then panics inside the unwind; the handles catch it (no abort) but the items never arrive, and
/// this fails.
#[test]
fn fault_poisoned_target_still_receives_requeue() {
    quiet_injected_panics();
    let journal = Arc::new(Journal::default());
    let audit = Arc::new(Buffer::new("audit", vec![], true, journal.clone()));
    let records = Arc::new(Buffer::new("records", vec![], false, journal.clone()));
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut drained = Drained::new(Guard(journal.clone()), audit.clone(), records.clone());
        drained.put_audit(vec![100, 101]);
        drained.record_slot().extend([3, 4]);
        let mut batch = drained.take_records_where(|id| *id == 3);
        let _lease = batch.begin_next().unwrap();
        let _audit_lock = audit.items.lock().unwrap();
        let _record_lock = records.items.lock().unwrap();
        inject("while holding both sink locks");
    }));
    assert!(outcome.is_err_and(|p| is_injected(p.as_ref())));
    assert!(audit.items.is_poisoned() && records.items.is_poisoned());
    assert_eq!(*lock(&audit.items), vec![100, 101]);
    assert_eq!(records.sorted(), vec![3, 4]);
    assert_eq!(
        journal.events(),
        vec![
            Event::Requeued {
                sink: "records",
                items: vec![3],
                cause: RequeueCause::Unwound { ambiguous: 1 }
            },
            Event::Requeued {
                sink: "audit",
                items: vec![100, 101],
                cause: RequeueCause::Unwound { ambiguous: 0 }
            },
            Event::Requeued {
                sink: "records",
                items: vec![4],
                cause: RequeueCause::Unwound { ambiguous: 0 }
            },
            Event::GuardReleased,
        ]
    );
}

/// A target that breaks its contract and panics, called from a `Drop` during an unwind: the
/// process does not abort (the handles catch the nested panic), the original panic is the one
/// that reaches `catch_unwind`, and `Drained` still requeues the records and releases the
/// guard after the audit target failed.
/// Reasoned mutation (not run as a mutant): in `requeue_from_drop`, call `target.requeue(items,
/// cause)` directly instead of under `catch_unwind` (the test binary then aborts with a panic in a
/// destructor during cleanup).
#[test]
fn fault_panicking_target_in_unwind_does_not_abort() {
    quiet_injected_panics();
    #[derive(Debug)]
    struct Broken;
    impl RequeueTarget<u32> for Broken {
        fn requeue(&self, _items: Vec<u32>, _cause: RequeueCause) {
            inject("target breaks its contract");
        }
    }
    let journal = Arc::new(Journal::default());
    let records = Arc::new(Buffer::new("records", vec![], false, journal.clone()));
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut drained = Drained::new(Guard(journal.clone()), Arc::new(Broken), records.clone());
        drained.put_audit(vec![100]);
        drained.record_slot().push(7);
        let _batch =
            RecoverableBatch::new(vec![1u32], Arc::new(Broken) as Arc<dyn RequeueTarget<u32>>);
        inject("consumer");
    }));
    let payload = outcome.unwrap_err();
    assert_eq!(
        payload.downcast_ref::<String>().map(String::as_str),
        Some("injected panic: consumer")
    );
    assert_eq!(
        journal.events(),
        vec![
            Event::Requeued {
                sink: "records",
                items: vec![7],
                cause: RequeueCause::Unwound { ambiguous: 0 }
            },
            Event::GuardReleased,
        ]
    );
}

/// `panic_message` gives back what a caught panic said, for both payloads `panic!` makes, and a
/// placeholder for any other payload.
/// Mutation check (cargo-mutants): `panic_message` replaced with `""` or `"xyzzy"`.
#[test]
fn panic_message_reads_str_and_string_payloads() {
    let literal = std::panic::catch_unwind(|| panic!("a literal")).unwrap_err();
    assert_eq!(
        ourios_recoverable::panic_message(literal.as_ref()),
        "a literal"
    );
    let n = 7;
    let formatted = std::panic::catch_unwind(|| panic!("formatted {n}")).unwrap_err();
    assert_eq!(
        ourios_recoverable::panic_message(formatted.as_ref()),
        "formatted 7"
    );
    let other = std::panic::catch_unwind(|| std::panic::panic_any(42u8)).unwrap_err();
    assert_eq!(
        ourios_recoverable::panic_message(other.as_ref()),
        "a panic without a message"
    );
}
