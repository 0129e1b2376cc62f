//! Every guard rule, single-threaded, with real panics.

use ourios_barrier::{Barrier, Guarded, LatchWord, PublishOutcome};

use crate::support::{AtRequeue, Requeue, drop_in_panic, requeued};

/// M.4 (ordering): a `Guarded` batch dropped by a panic runs the requeue first — at that
/// instant the latch is still clear and the guard still counted — and afterwards the latch
/// holds the batch's epoch and nothing is outstanding.
/// Reasoned mutation (not run as a mutant): swap the two fields of `Guarded` (guard before value)
/// and the requeue sees the report already made and the count already gone.
#[test]
fn rfc0054_m4_guarded_batch_requeues_before_report_and_decrement() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let cut = barrier.begin_cut(); // epoch 0 -> 1, so the batch below is tagged 1
    let (requeue, seen) = Requeue::new(&barrier);
    let batch = Guarded::new(requeue, barrier.enter_encode());
    assert_eq!(batch.guard().epoch(), 1);
    drop_in_panic(batch);
    assert_eq!(
        requeued(&seen),
        AtRequeue {
            latch: cut.latch_word(),
            encodes_outstanding: 1,
            publishes_outstanding: 0
        }
    );
    assert_eq!(barrier.latch().capture(), LatchWord::new(1, 1));
    assert_eq!(barrier.stats().encodes_outstanding, 0);
}

/// A batch guard that ends normally reports nothing and decrements.
/// Reasoned mutation (not run as a mutant): drop the `panicking()` condition in `BatchGuard::drop`
/// and the latch is set.
#[test]
fn batch_guard_normal_drop_reports_nothing() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let (requeue, seen) = Requeue::new(&barrier);
    drop(Guarded::new(requeue, barrier.enter_encode()));
    assert!(requeued(&seen).latch.is_clear());
    assert!(barrier.latch().capture().is_clear());
    assert_eq!(barrier.stats().encodes_outstanding, 0);
}

/// A batch guard moved off the encode word by a cut (slow-path exit) still reports, then
/// decrements the map entry quiesce waits on.
/// Reasoned mutation (not run as a mutant): skip `decrement` in `exit_encode`'s slow path and
/// `encodes_outstanding` stays 1 (and quiesce would hang).
#[test]
fn batch_guard_of_a_cut_epoch_reports_and_leaves_the_map() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let guard = barrier.enter_encode();
    let cut = barrier.begin_cut();
    assert_eq!(barrier.stats().encodes_outstanding, 1);
    drop_in_panic(guard);
    assert_eq!(barrier.latch().capture(), LatchWord::new(0, 1));
    assert_eq!(barrier.stats().encodes_outstanding, 0);
    barrier.quiesce_encodes(&cut);
    assert_eq!(barrier.stats().accounting_errors, 0);
}

/// Only `Durable` and `Dropped` are ok for the verdict; `Requeued`, `Parked` and `Failed`
/// fail closed.
/// Reasoned mutation (not run as a mutant): make `is_ok` true for `Requeued` and the table below
/// fails.
#[test]
fn publish_outcome_only_durable_and_dropped_are_ok() {
    let _watchdog = crate::support::watchdog();
    use PublishOutcome::*;
    for (outcome, ok) in [
        (Durable, true),
        (Dropped, true),
        (Requeued, false),
        (Parked, false),
        (Failed, false),
    ] {
        assert_eq!(outcome.is_ok(), ok, "{outcome:?}");
        let barrier = Barrier::new();
        let publish = barrier.enter_publish();
        let cut = barrier.begin_cut();
        publish.complete(outcome);
        let verdict = barrier.quiesce_publishes(&cut);
        assert_eq!(verdict.all_ok(cut.epoch()), ok, "{outcome:?}");
        assert_eq!(verdict.failed_publishes(), u64::from(!ok));
        assert!(
            barrier.latch().capture().is_clear(),
            "an outcome is not a panic"
        );
    }
}

/// A sweep's publish guard: `ok` keeps the verdict ok, a `Failed` outcome fails it, and neither
/// touches the latch.
/// Mutation check (cargo-mutants): `PublishGuard::ok` replaced with `()` (the guard is then
/// dropped unsettled, which settles it as failed) and the first verdict is not ok.
#[test]
fn publish_guard_ok_and_fail_decide_the_verdict() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let good = barrier.enter_publish();
    let cut = barrier.begin_cut();
    good.ok();
    assert!(barrier.quiesce_publishes(&cut).all_ok(cut.epoch()));
    let bad = barrier.enter_publish();
    let cut = barrier.begin_cut();
    bad.complete(PublishOutcome::Failed);
    let verdict = barrier.quiesce_publishes(&cut);
    assert!(!verdict.all_ok(cut.epoch()));
    assert_eq!(verdict.lowest_failed_epoch(), Some(1));
    assert!(barrier.latch().capture().is_clear());
}

/// A publish guard dropped by a panic (a sweep's `Drained` unwinding) runs the requeue first,
/// reports its epoch to the latch, and counts as panicked in the verdict.
/// Reasoned mutation (not run as a mutant): settle as `Failed` instead of `Panicked` in
/// `PublishGuard::drop` and `panicked_publishes` is 0; remove the report and the latch stays clear.
#[test]
fn publish_guard_dropped_in_panic_requeues_reports_and_fails_verdict() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let (requeue, seen) = Requeue::new(&barrier);
    let drained = Guarded::new(requeue, barrier.enter_publish());
    let cut = barrier.begin_cut();
    drop_in_panic(drained);
    let at = requeued(&seen);
    assert!(
        at.latch.is_clear() && at.publishes_outstanding == 1,
        "requeue first: {at:?}"
    );
    assert_eq!(barrier.latch().capture(), LatchWord::new(0, 1));
    let verdict = barrier.quiesce_publishes(&cut);
    assert!(!verdict.all_ok(0));
    assert_eq!(
        (verdict.failed_publishes(), verdict.panicked_publishes()),
        (0, 1)
    );
}

/// A publish guard dropped without an outcome outside a panic is a forgotten settle: it
/// counts as failed (fail closed), and reports nothing to the latch.
/// Reasoned mutation (not run as a mutant): treat the non-panicking drop as ok and the verdict is
/// ok.
#[test]
fn publish_guard_dropped_without_outcome_fails_closed() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let publish = barrier.enter_publish();
    let cut = barrier.begin_cut();
    drop(publish);
    let verdict = barrier.quiesce_publishes(&cut);
    assert!(!verdict.all_ok(0));
    assert_eq!(verdict.failed_publishes(), 1);
    assert!(barrier.latch().capture().is_clear());
}

/// The shared completion does not settle while a detach is pending, nor while the batch's
/// encode phase is open, and settles exactly once when both are done — in either order.
/// Reasoned mutation (not run as a mutant): drop `&& state.encode_ended` from `take_if_done` and
/// the first `is_settled` after the tokens complete is already true.
#[test]
fn rfc0054_m5_shared_completion_settles_when_count_is_zero_and_encode_ended() {
    let _watchdog = crate::support::watchdog();
    // Tokens first, then the encode end.
    let barrier = Barrier::new();
    let guard = barrier.enter_encode();
    let (a, b) = (guard.detach(), guard.detach());
    let completion = guard
        .publish_completion()
        .expect("a detach creates the completion");
    assert_eq!((completion.pending(), completion.epoch()), (2, 0));
    assert_eq!(
        barrier.stats().publishes_outstanding,
        1,
        "one publish per completion"
    );
    a.complete(PublishOutcome::Durable);
    b.complete(PublishOutcome::Durable);
    assert!(!completion.is_settled(), "the encode phase is still open");
    drop(guard);
    assert!(completion.is_settled());
    assert_eq!(barrier.stats().publishes_outstanding, 0);
    assert_eq!(barrier.stats().publishes_settled, 1);

    // Encode end first, then the tokens.
    let barrier = Barrier::new();
    let guard = barrier.enter_encode();
    let (a, b) = (guard.detach(), guard.detach());
    let completion = guard.publish_completion().unwrap();
    drop(guard);
    a.complete(PublishOutcome::Durable);
    assert!(!completion.is_settled(), "one detach is pending");
    b.complete(PublishOutcome::Durable);
    assert!(completion.is_settled());
    assert_eq!(barrier.stats().publishes_settled, 1);
    assert_eq!(barrier.stats().accounting_errors, 0);
}

/// A batch that detached nothing registers no publish.
/// Reasoned mutation (not run as a mutant): register the completion eagerly in `enter_encode` and
/// `publishes_outstanding` is 1.
#[test]
fn batch_without_detach_registers_no_publish() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let guard = barrier.enter_encode();
    assert!(guard.publish_completion().is_none());
    assert_eq!(barrier.stats().publishes_outstanding, 0);
    drop(guard);
    assert_eq!(barrier.stats().publishes_settled, 0);
}

/// The shared completion settles with the worst outcome of its detaches: one durable and one
/// requeued partition make one failed publish in the verdict.
/// Reasoned mutation (not run as a mutant): keep the last outcome instead of `max` in `finish_one`
/// and the verdict is ok.
#[test]
fn shared_completion_settles_with_the_worst_outcome() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let guard = barrier.enter_encode();
    let (a, b) = (guard.detach(), guard.detach());
    let cut = barrier.begin_cut();
    a.complete(PublishOutcome::Requeued);
    b.complete(PublishOutcome::Durable);
    drop(guard);
    let verdict = barrier.quiesce_publishes(&cut);
    assert!(!verdict.all_ok(0));
    assert_eq!(verdict.failed_publishes(), 1);
}

/// A detach token dropped by a panic in the publisher (inside a `Guarded` with the partition's
/// recoverable batch) requeues first, reports the batch's epoch, and makes the completion
/// settle as panicked; the worker's batch guard reports nothing of its own.
/// Reasoned mutation (not run as a mutant): remove the report from `DetachToken::drop` and the
/// latch stays clear.
#[test]
fn detach_token_dropped_in_panic_requeues_reports_and_counts_panicked() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let guard = barrier.enter_encode();
    let (requeue, seen) = Requeue::new(&barrier);
    let item = Guarded::new(requeue, guard.detach());
    let cut = barrier.begin_cut();
    drop(guard); // the worker finished normally
    drop_in_panic(item);
    let at = requeued(&seen);
    assert!(
        at.latch.is_clear() && at.publishes_outstanding == 1,
        "requeue first: {at:?}"
    );
    assert_eq!(barrier.latch().capture(), LatchWord::new(0, 1));
    let verdict = barrier.quiesce_publishes(&cut);
    assert_eq!(
        (verdict.failed_publishes(), verdict.panicked_publishes()),
        (0, 1)
    );
    assert!(!verdict.all_ok(0));
}

/// A detach token dropped without an outcome outside a panic (e.g. a queue dropped at
/// shutdown) counts as failed, so the completion still settles and no wait is unbounded.
/// Reasoned mutation (not run as a mutant): skip `finish_one` in the non-panicking arm of
/// `DetachToken::drop` and `publishes_outstanding` stays 1.
#[test]
fn detach_token_dropped_without_outcome_fails_closed_and_settles() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let guard = barrier.enter_encode();
    let token = guard.detach();
    let cut = barrier.begin_cut();
    drop(guard);
    drop(token);
    assert_eq!(barrier.stats().publishes_outstanding, 0);
    let verdict = barrier.quiesce_publishes(&cut);
    assert_eq!(verdict.failed_publishes(), 1);
    assert!(barrier.latch().capture().is_clear());
}

/// `Guarded::complete` drops the value (its remaining requeue) before settling the guard, for
/// publish guards and detach tokens alike.
/// Reasoned mutation (not run as a mutant): settle before `drop(value)` in either `complete` and
/// the requeue sees `publishes_outstanding == 0`.
#[test]
fn guarded_complete_drops_the_value_before_settling() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let (requeue, seen) = Requeue::new(&barrier);
    Guarded::new(requeue, barrier.enter_publish()).complete(PublishOutcome::Durable);
    assert_eq!(requeued(&seen).publishes_outstanding, 1);
    assert_eq!(barrier.stats().publishes_outstanding, 0);

    let guard = barrier.enter_encode();
    let (requeue, seen) = Requeue::new(&barrier);
    let item = Guarded::new(requeue, guard.detach());
    drop(guard);
    item.complete(PublishOutcome::Durable);
    assert_eq!(requeued(&seen).publishes_outstanding, 1);
    assert_eq!(barrier.stats().publishes_outstanding, 0);
}

/// `Guarded` gives the value back through `Deref`/`DerefMut`/`into_parts` and the guard
/// through `guard()`.
/// Reasoned mutation (not run as a mutant): make `deref_mut` return a copy and the pushed item is
/// lost.
#[test]
fn guarded_gives_access_to_value_and_guard() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let mut batch = Guarded::new(vec![1_u32], barrier.enter_encode());
    batch.push(2);
    assert_eq!(*batch, vec![1, 2]);
    assert_eq!(batch.guard().epoch(), 0);
    let (value, guard) = batch.into_parts();
    assert_eq!(value, vec![1, 2]);
    drop(guard);
    assert_eq!(barrier.stats().encodes_outstanding, 0);
}

/// `Guarded::complete` settles with the outcome it is given, after dropping the value: a
/// durable completion of a plain publish guard and of a detach token leaves the verdict ok and
/// nothing failed, and a shared completion reports its batch's epoch.
/// Mutation check (cargo-mutants): either `Guarded::complete` replaced with `()` (the guard is
/// then dropped unsettled, which settles it as failed); `PublishCompletion::epoch` replaced
/// with a constant.
#[test]
fn guarded_complete_settles_with_its_outcome() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::with_state(7, ourios_barrier::CLEAR).unwrap();
    let (requeue, seen) = Requeue::new(&barrier);
    Guarded::new(requeue, barrier.enter_publish()).complete(PublishOutcome::Durable);
    let _ = requeued(&seen); // the value was dropped (panics if not)
    let batch = barrier.enter_encode();
    let token = batch.detach();
    assert_eq!(token.completion().epoch(), 7);
    drop(batch);
    Guarded::new((), token).complete(PublishOutcome::Durable);
    let cut = barrier.begin_cut();
    barrier.quiesce_encodes(&cut);
    assert!(barrier.quiesce_publishes(&cut).all_ok(7));
    let stats = barrier.stats();
    assert_eq!((stats.publishes_settled, stats.publishes_failed), (2, 0));
}
