//! Mechanism legs of RFC 0054 §9.5 on `RecoverableBatch` alone: the lease rules, settle and
//! requeue, split, finish, and what `Drop` hands back.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use ourios_recoverable::{
    BatchReport, ItemState, RecoverableBatch, RequeueCause, RequeueTarget, Settlement,
};

use crate::support::{Buffer, Event, Journal, inject, is_injected, quiet_injected_panics};

fn buffer() -> Arc<Buffer> {
    Arc::new(Buffer::new(
        "records",
        Vec::new(),
        false,
        Arc::new(Journal::default()),
    ))
}

fn batch_of(ids: &[u32], target: &Arc<Buffer>) -> RecoverableBatch<u32> {
    RecoverableBatch::new(ids.to_vec(), target.clone() as Arc<dyn RequeueTarget<u32>>)
}

/// Dropping a batch requeues its `Pending` and `InFlight` items in one call, in order, with the
/// `InFlight` count as ambiguous; settled and individually requeued items are not requeued.
/// Reasoned mutation (not run as a mutant): in `RecoverableBatch::requeue_unsettled`, replace `let
/// ambiguous = self.in_flight;` with `let ambiguous = self.in_flight + self.pending;`.
#[test]
fn rfc0054_mech_drop_requeues_pending_and_in_flight_once_with_ambiguous() {
    let target = buffer();
    {
        let mut batch = batch_of(&[10, 11, 12, 13, 14], &target);
        let first = batch.begin_next().unwrap();
        assert_eq!(batch.settle(first, Settlement::Durable), 10);
        let second = batch.begin_next().unwrap();
        batch.requeue(second); // transient failure: back at once
        let third = batch.begin_next().unwrap();
        assert_eq!(batch.settle(third, Settlement::Dropped), 12);
        let _in_flight = batch.begin(4);
        assert_eq!(
            (0..5).map(|i| batch.state(i)).collect::<Vec<_>>(),
            vec![
                ItemState::Settled(Settlement::Durable),
                ItemState::Requeued,
                ItemState::Settled(Settlement::Dropped),
                ItemState::Pending,
                ItemState::InFlight,
            ]
        );
        assert_eq!(
            (batch.pending(), batch.in_flight(), batch.unsettled()),
            (1, 1, 2)
        );
        assert_eq!(batch.pending_indices(), vec![3]);
        assert_eq!(
            (batch.get(0), batch.get(3), batch.get(4), batch.get(9)),
            (None, Some(&13), Some(&14), None)
        );
    }
    assert_eq!(
        target.journal.events(),
        vec![
            Event::Requeued {
                sink: "records",
                items: vec![11],
                cause: RequeueCause::Refused
            },
            Event::Requeued {
                sink: "records",
                items: vec![13, 14],
                cause: RequeueCause::Unwound { ambiguous: 1 }
            },
        ]
    );
}

/// `finish` reports every count and requeues leftovers exactly like `Drop` (once: the drop that
/// follows inside `finish` hands back nothing more).
/// Reasoned mutation (not run as a mutant): in `RecoverableBatch::finish`, report `requeued:
/// self.requeued` taken before the call to `requeue_unsettled` (the leftovers are then missing from
/// the report).
#[test]
fn rfc0054_mech_finish_reports_counts_and_requeues_leftovers_once() {
    let target = buffer();
    let mut batch = batch_of(&[1, 2, 3, 4, 5, 6], &target);
    let split = batch.split_off_pending(|id| *id == 6);
    let a = batch.begin_next().unwrap();
    let _ = batch.settle(a, Settlement::Durable);
    let b = batch.begin_next().unwrap();
    let _ = batch.settle(b, Settlement::Dropped);
    let c = batch.begin_next().unwrap();
    batch.requeue(c);
    let _d = batch.begin_next().unwrap(); // 4 in flight, 5 pending
    let report = batch.finish();
    assert_eq!(
        report,
        BatchReport {
            durable: 1,
            dropped: 1,
            requeued: 3,
            ambiguous: 1,
            split_off: 1
        }
    );
    drop(split);
    assert_eq!(
        target.journal.requeues(),
        vec![
            Event::Requeued {
                sink: "records",
                items: vec![3],
                cause: RequeueCause::Refused
            },
            Event::Requeued {
                sink: "records",
                items: vec![4, 5],
                cause: RequeueCause::Unwound { ambiguous: 1 }
            },
            Event::Requeued {
                sink: "records",
                items: vec![6],
                cause: RequeueCause::Unwound { ambiguous: 0 }
            },
        ]
    );
}

/// A lease only works on the batch that issued it: using it on another batch panics and leaves
/// both batches intact, so their drops still requeue everything (nothing lost, nothing twice).
/// Reasoned mutation (not run as a mutant): delete the `if` in `RecoverableBatch::check` (the
/// foreign lease then takes item 0 of the wrong batch, which is `InFlight` too, and that item is
/// lost).
#[test]
fn rfc0054_mech_foreign_lease_is_refused_and_strands_nothing() {
    quiet_injected_panics();
    let target = buffer();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut one = batch_of(&[1, 2], &target);
        let mut two = batch_of(&[3, 4], &target);
        let lease = one.begin_next().unwrap();
        let _ = two.begin_next().unwrap();
        let _wrong = two.settle(lease, Settlement::Durable);
    }));
    let payload = outcome.unwrap_err();
    assert!(!is_injected(payload.as_ref()));
    assert!(
        payload
            .downcast_ref::<String>()
            .unwrap()
            .contains("belongs to another batch")
    );
    let mut back = target.sorted();
    back.dedup();
    assert_eq!(back, vec![1, 2, 3, 4]);
    assert_eq!(target.sorted().len(), 4);
}

/// `begin` on an item that is not `Pending` is a programming error: it panics and the batch is
/// unchanged (its drop still requeues what it holds, the settled item stays out).
/// Reasoned mutation (not run as a mutant): in `RecoverableBatch::begin`, move the `if
/// !matches!(..) { not_pending(..) }` check below the `mem::replace` (the InFlight item is then
/// replaced by the placeholder and lost).
#[test]
fn rfc0054_mech_begin_on_non_pending_panics_without_losing_items() {
    let target = buffer();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut batch = batch_of(&[1, 2, 3], &target);
        let settled = batch.begin(0);
        let _ = batch.settle(settled, Settlement::Durable);
        let _in_flight = batch.begin(1);
        let _again = batch.begin(1);
    }));
    assert!(outcome.is_err());
    assert_eq!(
        target.journal.requeues(),
        vec![Event::Requeued {
            sink: "records",
            items: vec![2, 3],
            cause: RequeueCause::Unwound { ambiguous: 1 }
        }]
    );
}

/// `split_off_pending` moves only `Pending` matches (an `InFlight` match stays with its lease);
/// the two batches then requeue disjoint sets through the same target, and `requeue_pending`
/// requeues the rest at once (cause `Refused`).
/// Reasoned mutation (not run as a mutant): in `split_off_pending`, filter on `Slot::Pending(item)
/// | Slot::InFlight(item)` (the in-flight item then moves while its lease still points at this
/// batch).
#[test]
fn rfc0054_mech_split_off_pending_moves_only_pending_items() {
    let target = buffer();
    let mut batch = batch_of(&[1, 2, 3, 4, 5], &target);
    let lease = batch.begin(1); // id 2, in flight
    let mut evens = batch.split_off_pending(|id| id % 2 == 0);
    assert_eq!(evens.len(), 1);
    assert_eq!(evens.get(0), Some(&4));
    assert_eq!(batch.state(3), ItemState::SplitOff);
    assert_eq!(batch.state(1), ItemState::InFlight);
    assert_eq!(batch.requeue_pending(), 3); // ids 1, 3, 5
    let _ = batch.settle(lease, Settlement::Durable);
    let l = evens.begin_next().unwrap();
    assert_eq!(evens.settle(l, Settlement::Durable), 4);
    drop(evens);
    drop(batch);
    assert_eq!(target.sorted(), vec![1, 3, 5]);
}

/// `item_mut` edits the leased item in place (the sink removes quarantined rows before putting
/// the remainder); a panic in that put requeues the remainder alone (RFC 0054 §9.4).
/// Reasoned mutation (not run as a mutant): in `RecoverableBatch::requeue_unsettled`, select only
/// `Slot::Pending(_)` (the in-flight remainder is then lost).
#[test]
fn rfc0054_mech_item_mut_edits_in_place_and_unwind_requeues_remainder() {
    quiet_injected_panics();
    #[derive(Debug, Default)]
    struct Parts(std::sync::Mutex<Vec<Vec<u32>>>);
    impl RequeueTarget<Vec<u32>> for Parts {
        fn requeue(&self, items: Vec<Vec<u32>>, _cause: RequeueCause) {
            crate::support::lock(&self.0).extend(items);
        }
    }
    let parts = Arc::new(Parts::default());
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut batch = RecoverableBatch::new(
            vec![vec![1, 2, 3, 4]],
            parts.clone() as Arc<dyn RequeueTarget<Vec<u32>>>,
        );
        let lease = batch.begin_next().unwrap();
        batch.item_mut(&lease).retain(|row| row % 2 == 1); // quarantine 2 and 4
        assert_eq!(batch.item(&lease), &vec![1, 3]);
        inject("put of the remainder");
    }));
    assert!(outcome.is_err_and(|p| is_injected(p.as_ref())));
    assert_eq!(*crate::support::lock(&parts.0), vec![vec![1, 3]]);
}

/// An empty or fully settled batch, and a `Drained` holding empty batches, never call their
/// target (the contract promises non-empty `items`).
/// Reasoned mutation (not run as a mutant): delete the `if items.is_empty() { return; }` in
/// `requeue_from_drop` (the `Drained` below then hands its targets two empty Vecs).
#[test]
fn rfc0054_mech_settled_or_empty_batch_drop_calls_no_target() {
    let target = buffer();
    {
        let mut drained = ourios_recoverable::Drained::new((), target.clone(), target.clone());
        drained.put_audit(Vec::new());
        drained.record_slot().clear();
        assert!(drained.is_empty());
    }
    drop(batch_of(&[], &target));
    let mut batch = batch_of(&[7], &target);
    let lease = batch.begin_next().unwrap();
    assert!(batch.begin_next().is_none());
    let _ = batch.settle(lease, Settlement::Durable);
    assert_eq!(batch.unsettled(), 0);
    assert_eq!(
        batch.finish(),
        BatchReport {
            durable: 1,
            ..BatchReport::default()
        }
    );
    assert!(target.journal.events().is_empty());
}

/// `len` and `is_empty` describe what the batch was built with, whatever its items' states.
/// Mutation check (cargo-mutants): `RecoverableBatch::is_empty` replaced with `true` or with
/// `false`.
#[test]
fn batch_is_empty_only_when_built_empty() {
    let target = buffer();
    let empty = batch_of(&[], &target);
    assert!(empty.is_empty());
    assert_eq!(empty.len(), 0);
    let mut one = batch_of(&[7], &target);
    assert!(!one.is_empty());
    let lease = one.begin_next().unwrap();
    let _ = one.settle(lease, Settlement::Durable);
    assert!(!one.is_empty(), "settling an item does not empty the batch");
    assert_eq!(one.len(), 1);
}
