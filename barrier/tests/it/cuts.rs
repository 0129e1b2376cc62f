//! Cuts: the epoch split, quiesce, the epoch-scoped verdict, proceed-and-decide, and the
//! epoch reset.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;

use ourios_barrier::{
    Barrier, CLEAR, Cleared, EnterError, Guarded, LAST_EPOCH, LatchWord, PublishOutcome,
};

use crate::support::drop_in_panic;

/// Sets its flag when dropped: the stand-in for a batch's requeue, observable from another
/// thread.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// RFC0052.epoch-split: work entered before a cut's begin is tagged with the cut's epoch E,
/// work entered after it E+1, and `barrier_epoch` moves from E to E+1 in `begin_cut`.
/// Reasoned mutation (not run as a mutant): advance the epoch by 2 in `begin_cut` and the tag of
/// `after` is E+2.
#[test]
fn rfc0052_epoch_split_before_cut_is_e_after_is_e_plus_one() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let before = barrier.enter_encode();
    let publish_before = barrier.enter_publish();
    let cut = barrier.begin_cut();
    let after = barrier.enter_encode();
    let publish_after = barrier.enter_publish();
    assert_eq!(
        (before.epoch(), publish_before.epoch()),
        (cut.epoch(), cut.epoch())
    );
    assert_eq!(
        (after.epoch(), publish_after.epoch()),
        (cut.epoch() + 1, cut.epoch() + 1)
    );
    assert_eq!(barrier.barrier_epoch(), cut.epoch() + 1);
    publish_before.ok();
    publish_after.ok();
}

/// RFC0052.quiesce: `quiesce_encodes(E)` returns with work tagged E+1 still alive (it does not
/// wait for it), and when it returns, the batch tagged E that another thread was holding has
/// dropped (its requeue visible).
/// Reasoned mutation (not run as a mutant): make `quiesce_encodes` return without waiting (drop the
/// loop) and the `requeued` assertion can fail; make it wait for all epochs and the test hangs on
/// `after`.
#[test]
fn rfc0052_quiesce_encodes_waits_for_exactly_the_work_through_e() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let requeued = Arc::new(AtomicBool::new(false));
    let batch = Guarded::new(SetOnDrop(Arc::clone(&requeued)), barrier.enter_encode());
    let cut = barrier.begin_cut();
    let after = barrier.enter_encode();
    let (go, gate) = mpsc::channel::<()>();
    let worker = thread::spawn(move || {
        gate.recv().unwrap();
        drop(batch);
    });
    go.send(()).unwrap();
    barrier.quiesce_encodes(&cut);
    assert!(requeued.load(Ordering::SeqCst));
    assert_eq!(after.epoch(), cut.epoch() + 1);
    worker.join().unwrap();
}

/// RFC0052.quiesce: `quiesce_publishes(E)` waits for the publishes tagged <= E (here a detach
/// completed on another thread) and not for those tagged E+1.
/// Reasoned mutation (not run as a mutant): drop the `publishes_through` condition in
/// `quiesce_publishes` and the verdict can come back before the Requeued outcome is recorded (ok
/// instead of not ok).
#[test]
fn rfc0052_quiesce_publishes_waits_for_exactly_the_publishes_through_e() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let guard = barrier.enter_encode();
    let token = guard.detach();
    let cut = barrier.begin_cut();
    drop(guard);
    let later = barrier.enter_publish();
    let publisher = thread::spawn(move || token.complete(PublishOutcome::Requeued));
    let verdict = barrier.quiesce_publishes(&cut);
    assert!(
        !verdict.all_ok(cut.epoch()),
        "the requeued detach tagged E was waited for"
    );
    assert_eq!(later.epoch(), cut.epoch() + 1);
    later.ok();
    publisher.join().unwrap();
}

/// `absorb_settled` hands the failures of publishes that settled before it to nobody: a failed
/// publish tagged E, then `absorb_settled` (returning E), then a cut: the cut's verdict is ok.
/// A publish that fails after the absorb still fails the next cut.
/// Mutation check (cargo-mutants): `absorb_settled` replaced with `0` or with `1`: the epoch
/// it returns is wrong, and (no quiesce) the absorbed failure reaches the cut's verdict.
#[test]
fn absorb_settled_forgets_settled_failures_and_keeps_later_ones() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    for _ in 0..2 {
        let cut = barrier.begin_cut();
        assert!(barrier.quiesce_publishes(&cut).all_ok(cut.epoch()));
    }
    let e = barrier.barrier_epoch();
    barrier.enter_publish().complete(PublishOutcome::Failed);
    assert_eq!(
        barrier.absorb_settled(),
        e,
        "it absorbs through the epoch current at the call"
    );
    assert_eq!(
        barrier.barrier_epoch(),
        e + 1,
        "and moves new work on by one"
    );
    let cut = barrier.begin_cut();
    assert!(
        barrier.quiesce_publishes(&cut).all_ok(cut.epoch()),
        "the settled failure was absorbed"
    );
    barrier.enter_publish().complete(PublishOutcome::Failed);
    let _ = barrier.absorb_settled();
    let late = barrier.enter_publish();
    late.complete(PublishOutcome::Failed);
    let cut = barrier.begin_cut();
    assert!(
        !barrier.quiesce_publishes(&cut).all_ok(cut.epoch()),
        "a failure after the absorb is the cut's"
    );
}

/// RFC0052.verdict: failures are scoped by epoch. A publish tagged E+1 that failed before cut
/// E's verdict does not fail cut E; it fails cut E+1; and a failure record is forgotten once a
/// verdict consumed it, so cut E+2 is ok again.
/// Reasoned mutation (not run as a mutant): consume every failure in `quiesce_publishes` (not only
/// those <= E) and cut E's verdict is not ok; never remove consumed failures and cut E+2 is not ok.
#[test]
fn rfc0052_verdict_is_scoped_to_publishes_tagged_through_e() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let p_e = barrier.enter_publish();
    let cut_e = barrier.begin_cut();
    let p_next = barrier.enter_publish();
    p_next.complete(PublishOutcome::Failed); // tagged E+1, fails before cut E's verdict
    p_e.ok();
    let verdict = barrier.quiesce_publishes(&cut_e);
    assert!(
        verdict.all_ok(cut_e.epoch()),
        "E+1's failure must not fail cut E"
    );
    assert!(
        !verdict.all_ok(cut_e.epoch() + 1),
        "a verdict does not vouch above its epoch"
    );

    let cut_next = barrier.begin_cut();
    let verdict = barrier.quiesce_publishes(&cut_next);
    assert!(!verdict.all_ok(cut_next.epoch()));
    assert_eq!(verdict.lowest_failed_epoch(), Some(cut_e.epoch() + 1));
    assert!(
        verdict.all_ok(cut_e.epoch()),
        "all_ok(e) looks at failures <= e only"
    );

    let cut_after = barrier.begin_cut();
    assert!(
        barrier
            .quiesce_publishes(&cut_after)
            .all_ok(cut_after.epoch())
    );
    assert_eq!(barrier.stats().unconsumed_failures, 0);
}

/// RFC0052.verdict: a failure no verdict consumed (its cut was dropped before deciding, e.g.
/// it panicked) is not forgotten: the next cut's verdict, which covers its epoch, blames it.
/// Reasoned mutation (not run as a mutant): consume only the failures tagged exactly E in
/// `quiesce_publishes` and the second cut's verdict is ok.
#[test]
fn rfc0052_verdict_blames_an_unconsumed_failure_on_the_next_cut() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let publish = barrier.enter_publish(); // tagged 0
    let dropped = barrier.begin_cut();
    publish.complete(PublishOutcome::Failed);
    drop(dropped);
    let next = barrier.begin_cut();
    let verdict = barrier.quiesce_publishes(&next);
    assert!(!verdict.all_ok(next.epoch()));
    assert_eq!(verdict.lowest_failed_epoch(), Some(0));
}

/// M.8 / RFC0054.4 (barrier half): the cut never skips because the latch is set. A batch
/// tagged 0 panics (its requeue ran, the latch holds epoch 0 <= barrier_epoch); the next cut
/// still begins, quiesces, gets an ok verdict (an encode panic whose records were requeued
/// fails no publish) and its clear against its captured word succeeds. Whether the cut may
/// clear also depends on its own drain, which this crate does not have: the node's
/// `rfc0054_m8_latched_cut_proceeds_and_its_drain_decides` runs that half.
/// Reasoned mutation (not run as a mutant): make `begin_cut` refuse (or the verdict fail) when the
/// captured latch word is not clear — the RFC 0052 `failed_epoch <= barrier_epoch: skip` — and the
/// clear never happens.
#[test]
fn rfc0054_m8_cut_with_failed_latch_proceeds_and_verdict_and_cas_decide() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let requeued = Arc::new(AtomicBool::new(false));
    drop_in_panic(Guarded::new(
        SetOnDrop(Arc::clone(&requeued)),
        barrier.enter_encode(),
    ));
    assert!(requeued.load(Ordering::SeqCst));
    let latched = barrier.latch().capture();
    assert_eq!(latched.failed_epoch(), Some(0));
    assert!(
        latched.epoch() <= barrier.barrier_epoch(),
        "the old timer would have skipped"
    );

    let cut = barrier.begin_cut();
    assert_eq!(cut.latch_word(), latched);
    barrier.quiesce_encodes(&cut);
    let verdict = barrier.quiesce_publishes(&cut);
    assert!(verdict.all_ok(cut.epoch()));
    assert_eq!(barrier.latch().clear(cut.latch_word()), Cleared::Cleared);
    assert_eq!(barrier.latch().capture(), CLEAR);
}

/// RFC0054.4 with a publish panic: the cut that covers the panicked publish proceeds but its
/// verdict is not ok, so it does not stamp and does not clear; the next cut (whose drain takes
/// the requeued records) gets an ok verdict and clears the latch without a restart.
/// Reasoned mutation (not run as a mutant): make `all_ok` ignore `panicked` publishes and the first
/// cut would clear.
#[test]
fn rfc0054_4_publish_panic_fails_its_cut_and_the_next_cut_clears() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let publish = barrier.enter_publish();
    let first = barrier.begin_cut();
    drop_in_panic(publish);
    barrier.quiesce_encodes(&first);
    let verdict = barrier.quiesce_publishes(&first);
    assert!(
        !verdict.all_ok(first.epoch()),
        "the panicked publish fails cut E"
    );
    // Not stamped, so not cleared. The next tick proceeds anyway.
    let second = barrier.begin_cut();
    assert!(!second.latch_word().is_clear());
    barrier.quiesce_encodes(&second);
    assert!(barrier.quiesce_publishes(&second).all_ok(second.epoch()));
    assert_eq!(barrier.latch().clear(second.latch_word()), Cleared::Cleared);
    assert!(barrier.latch().capture().is_clear());
}

/// C.5 (§9.7 cadence leg): a panic raised during a cut — at a later epoch (new work tagged E+1)
/// or at the same epoch as a latch already set — changes the word, so that cut's clear fails
/// and the failure survives for the next cut, which clears it.
/// Reasoned mutation (not run as a mutant): have `begin_cut` capture nothing and `clear` CAS from
/// the current word and the first clear succeeds, erasing the E+1 failure.
#[test]
fn rfc0054_c5_report_during_a_cut_survives_for_the_next_cut() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    drop_in_panic(barrier.enter_encode()); // latch (0, 1)
    let cut = barrier.begin_cut(); // E = 0, captures (0, 1)
    drop_in_panic(barrier.enter_encode()); // tagged E+1, during the cut: (0, 2)
    barrier.quiesce_encodes(&cut);
    assert!(barrier.quiesce_publishes(&cut).all_ok(cut.epoch()));
    assert_eq!(
        barrier.latch().clear(cut.latch_word()),
        Cleared::Raced {
            current: LatchWord::new(0, 2)
        }
    );
    let next = barrier.begin_cut();
    barrier.quiesce_encodes(&next);
    assert!(barrier.quiesce_publishes(&next).all_ok(next.epoch()));
    assert_eq!(barrier.latch().clear(next.latch_word()), Cleared::Cleared);
}

/// M.7: at `barrier_epoch == u32::MAX - 1` the next cut resets instead of advancing. While it
/// is quiescing, new work is held back (the try_ variants say so), `barrier_epoch` stays at
/// `u32::MAX - 1`; after both quiesces returned with no guard outstanding the epoch is 0, new
/// work is tagged 0, and a later cut advances normally.
/// Reasoned mutation (not run as a mutant): advance to `epoch + 1` at LAST_EPOCH in `begin_cut` and
/// the cut's epoch becomes `u32::MAX` territory (barrier_epoch after quiesce is not 0).
#[test]
fn rfc0054_m7_epoch_reset_at_last_epoch_after_both_quiesces() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::with_state(LAST_EPOCH - 1, CLEAR).unwrap();
    let cut = barrier.begin_cut();
    assert!(!cut.resets_epoch());
    barrier.quiesce_encodes(&cut);
    let _ = barrier.quiesce_publishes(&cut);
    assert_eq!(barrier.barrier_epoch(), LAST_EPOCH);

    let last = barrier.enter_encode();
    let token = last.detach();
    assert_eq!(last.epoch(), LAST_EPOCH);
    let reset = barrier.begin_cut();
    assert!(reset.resets_epoch());
    assert_eq!(reset.epoch(), LAST_EPOCH);
    assert_eq!(
        barrier.barrier_epoch(),
        LAST_EPOCH,
        "no increment into the reserved epoch"
    );
    assert_eq!(
        barrier.try_enter_encode().unwrap_err(),
        EnterError::ResetInProgress {
            cut_epoch: LAST_EPOCH
        }
    );
    assert!(barrier.try_enter_publish().is_err());
    assert!(barrier.stats().reset_in_progress);
    drop(last);
    barrier.quiesce_encodes(&reset);
    assert!(
        barrier.stats().reset_in_progress,
        "a publish is still outstanding"
    );
    token.complete(PublishOutcome::Durable);
    let verdict = barrier.quiesce_publishes(&reset);
    assert!(verdict.all_ok(LAST_EPOCH));
    let stats = barrier.stats();
    assert_eq!(
        (
            stats.barrier_epoch,
            stats.reset_in_progress,
            stats.epoch_resets
        ),
        (0, false, 1)
    );
    let fresh = barrier.try_enter_encode().unwrap();
    assert_eq!(fresh.epoch(), 0);
    drop(fresh);
    drop(reset);
    let next = barrier.begin_cut();
    assert_eq!((next.epoch(), barrier.barrier_epoch()), (0, 1));
    assert_eq!(barrier.stats().accounting_errors, 0);
}

/// M.7: `enter_encode` during a reset blocks until the reset completed and then tags 0; the
/// reset cut's quiesce waits for the batch another thread still holds.
/// Reasoned mutation (not run as a mutant): let `enter_encode` ignore the gate bit and the waiting
/// thread's batch is tagged `u32::MAX - 1`, after the cut.
#[test]
fn rfc0054_m7_new_work_waits_for_the_reset_then_is_tagged_zero() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::with_state(LAST_EPOCH, CLEAR).unwrap();
    let old = barrier.enter_encode();
    let reset = barrier.begin_cut();
    let (gate_closed, closed) = mpsc::channel::<()>();
    let (release_old, release) = mpsc::channel::<()>();
    let old_holder = thread::spawn(move || {
        release.recv().unwrap();
        drop(old);
    });
    let b = barrier.clone();
    let newcomer = thread::spawn(move || {
        // The old batch is still held, so the gate is closed here for certain.
        assert!(b.try_enter_encode().is_err());
        gate_closed.send(()).unwrap();
        b.enter_encode().epoch()
    });
    closed.recv().unwrap();
    release_old.send(()).unwrap();
    barrier.quiesce_encodes(&reset);
    assert!(barrier.quiesce_publishes(&reset).all_ok(LAST_EPOCH));
    assert_eq!(newcomer.join().unwrap(), 0);
    old_holder.join().unwrap();
    assert_eq!(barrier.stats().epoch_resets, 1);
}

/// M.7: a resetting cut dropped before its quiesce (it panicked) does not leave the gate
/// closed: the reset runs as soon as the last outstanding guard ends, and the dropped cut's
/// unconsumed failures are blamed on the first cut after the reset.
/// Reasoned mutation (not run as a mutant): remove `Cut::drop`'s `abandon_reset` and
/// `reset_in_progress` stays true forever (enter_encode would block).
#[test]
fn rfc0054_m7_dropped_reset_cut_resets_once_nothing_is_outstanding() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::with_state(LAST_EPOCH, CLEAR).unwrap();
    let old = barrier.enter_encode();
    let publish = barrier.enter_publish();
    let reset = barrier.begin_cut();
    publish.complete(PublishOutcome::Failed);
    drop(reset);
    assert!(
        barrier.stats().reset_in_progress,
        "a guard is still outstanding"
    );
    drop(old);
    let stats = barrier.stats();
    assert_eq!(
        (
            stats.barrier_epoch,
            stats.reset_in_progress,
            stats.epoch_resets
        ),
        (0, false, 1)
    );
    let first = barrier.begin_cut();
    let verdict = barrier.quiesce_publishes(&first);
    assert!(
        !verdict.all_ok(first.epoch()),
        "the failure the dropped cut never consumed"
    );
    assert_eq!(verdict.lowest_failed_epoch(), Some(0));
}

/// M.7: the reset does not erase an undrained failure: a latch set before the reset (and not
/// cleared, because the reset cut's verdict failed) is still set after it, and the next cut
/// that stamps clears it.
/// Reasoned mutation (not run as a mutant): store CLEAR into the latch in `try_reset` and the latch
/// is clear after the reset.
#[test]
fn rfc0054_m7_reset_keeps_the_latch_until_a_stamping_cut_clears_it() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::with_state(LAST_EPOCH, CLEAR).unwrap();
    let publish = barrier.enter_publish();
    let reset = barrier.begin_cut();
    drop_in_panic(publish);
    let verdict = barrier.quiesce_publishes(&reset);
    assert!(!verdict.all_ok(LAST_EPOCH));
    assert_eq!(barrier.barrier_epoch(), 0);
    assert_eq!(barrier.latch().capture(), LatchWord::new(LAST_EPOCH, 1));
    let next = barrier.begin_cut();
    assert!(barrier.quiesce_publishes(&next).all_ok(next.epoch()));
    assert_eq!(barrier.latch().clear(next.latch_word()), Cleared::Cleared);
}

/// A cut from before an epoch reset is stale: quiescing it returns at once and its verdict is
/// never ok, so it cannot stamp with epochs that now mean something else.
/// Reasoned mutation (not run as a mutant): ignore `era` in `quiesce_publishes` and the stale
/// verdict is ok.
#[test]
fn verdict_of_a_cut_superseded_by_a_reset_is_stale() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::with_state(LAST_EPOCH, CLEAR).unwrap();
    let reset = barrier.begin_cut();
    let _ = barrier.quiesce_publishes(&reset);
    let verdict = barrier.quiesce_publishes(&reset);
    assert!(verdict.is_stale());
    assert!(!verdict.all_ok(0));
}

/// `with_state` refuses the reserved clear epoch as a starting epoch.
/// Reasoned mutation (not run as a mutant): drop the check in `with_state` and it returns Ok.
#[test]
fn barrier_with_reserved_epoch_is_refused() {
    let _watchdog = crate::support::watchdog();
    let error = Barrier::with_state(u32::MAX, CLEAR).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "barrier epoch {} is reserved for the clear latch word; the highest live epoch is {LAST_EPOCH}",
            u32::MAX
        )
    );
}

/// Many threads entering and leaving encode batches while cuts advance: every cut's
/// quiesce returns, every batch is tagged E or E+1 around the cut that saw it, and the books
/// balance (nothing outstanding, no accounting error).
/// Reasoned mutation (not run as a mutant): make the fast-path exit decrement without checking the
/// epoch (a guard moved off the word then decrements the word of the next epoch) and
/// `accounting_errors` or a hung quiesce shows it.
#[test]
fn cuts_and_concurrent_batches_balance() {
    let _watchdog = crate::support::watchdog();
    const BATCHES: u64 = 20_000;
    let barrier = Barrier::new();
    let finished = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let b = barrier.clone();
            let finished = Arc::clone(&finished);
            thread::spawn(move || {
                for n in 0..BATCHES {
                    let guard = b.enter_encode();
                    if n % 3 == 0 {
                        guard.detach().complete(PublishOutcome::Durable);
                    }
                    drop(guard);
                }
                finished.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    let mut cuts = 0_u32;
    loop {
        let done = finished.load(Ordering::SeqCst) == 2;
        let cut = barrier.begin_cut();
        barrier.quiesce_encodes(&cut);
        assert!(barrier.quiesce_publishes(&cut).all_ok(cut.epoch()));
        cuts += 1;
        if done {
            break;
        }
    }
    for worker in workers {
        worker.join().unwrap();
    }
    let stats = barrier.stats();
    assert_eq!(
        (
            stats.encodes_outstanding,
            stats.publishes_outstanding,
            stats.accounting_errors
        ),
        (0, 0, 0)
    );
    assert_eq!(stats.publishes_settled, 2 * BATCHES.div_ceil(3));
    assert_eq!(stats.barrier_epoch, cuts);
}

/// Yields until `cond` holds (the test's watchdog bounds the wait).
fn spin_until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        thread::yield_now();
    }
}

/// The verdict and the stats count every failed and panicked publish: one of each (and one
/// ok) in epoch 5 give a verdict for epoch 5 of one failed and one panicked, and stats of
/// three settled, one failed, one panicked.
/// Mutation check (cargo-mutants): any `+=` on a failure counter in `settle_publish` made `*=`;
/// `Verdict::epoch` replaced with a constant.
#[test]
fn verdict_and_stats_count_each_failed_and_panicked_publish() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::with_state(5, CLEAR).unwrap();
    let failed = barrier.enter_publish();
    let panicked = barrier.enter_publish();
    let ok = barrier.enter_publish();
    failed.complete(PublishOutcome::Failed);
    drop_in_panic(panicked);
    ok.ok();
    let cut = barrier.begin_cut();
    barrier.quiesce_encodes(&cut);
    let verdict = barrier.quiesce_publishes(&cut);
    assert_eq!(verdict.epoch(), 5);
    assert_eq!(
        (verdict.failed_publishes(), verdict.panicked_publishes()),
        (1, 1)
    );
    let stats = barrier.stats();
    assert_eq!(
        (
            stats.publishes_settled,
            stats.publishes_failed,
            stats.publishes_panicked
        ),
        (3, 1, 1)
    );
}

/// `BarrierStats::waiting` counts the callers blocked in the barrier, and only while they
/// are: a cut in `quiesce_encodes` and then `quiesce_publishes`, and an `enter_encode` at the
/// closed reset gate (which then tags 0). Every wait is observed, not assumed.
/// Mutation check (cargo-mutants): `Shared::wait_for_gate` replaced with `()` (the enter spins
/// instead of waiting, and is never seen waiting); `+=`/`-=` on `waiting` in `wait_while`
/// swapped.
#[test]
fn waiting_counts_cuts_in_a_quiesce_and_enters_at_the_reset_gate() {
    let _watchdog = crate::support::watchdog();
    let barrier = Barrier::new();
    let batch = barrier.enter_encode();
    let publish = barrier.enter_publish();
    let cut = barrier.begin_cut();
    thread::scope(|s| {
        let b = &barrier;
        let cut = &cut;
        let waiter = s.spawn(move || {
            b.quiesce_encodes(cut);
            b.quiesce_publishes(cut)
        });
        spin_until(|| barrier.stats().waiting == 1);
        assert_eq!(barrier.stats().encodes_outstanding, 1);
        drop(batch);
        spin_until(|| barrier.stats().encodes_outstanding == 0);
        assert!(!waiter.is_finished() || barrier.stats().publishes_outstanding == 0);
        publish.ok();
        let verdict = waiter.join().unwrap();
        assert!(verdict.all_ok(cut.epoch()));
    });
    assert_eq!(barrier.stats().waiting, 0);

    let barrier = Barrier::with_state(LAST_EPOCH, CLEAR).unwrap();
    let last = barrier.enter_encode();
    let reset = barrier.begin_cut();
    assert!(reset.resets_epoch());
    thread::scope(|s| {
        let b = &barrier;
        let entering = s.spawn(move || b.enter_encode().epoch());
        spin_until(|| barrier.stats().waiting == 1);
        drop(last);
        barrier.quiesce_encodes(&reset);
        let _ = barrier.quiesce_publishes(&reset);
        assert_eq!(entering.join().unwrap(), 0, "tagged after the reset");
    });
    assert_eq!(barrier.stats().waiting, 0);
}
