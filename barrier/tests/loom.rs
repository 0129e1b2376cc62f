//! Loom models of every concurrency boundary in this crate, through the public API: the latch
//! (report vs capture/clear, report vs report), a panicking guard vs quiesce, the shared
//! completion, the tag vs the cut's advance, and the byte budget's waiters. Sizes are tiny: two or three threads, one or
//! two operations each.
//!
//! Loom runs every model thread on one OS thread and std's panic count is per OS thread, so a
//! real unwind on one model thread would read as unwinding on all of them (and poison loom's
//! internal std mutexes). The models therefore drive a guard's unwind path with
//! `loom_support::unwind` (the crate's `panicking()` is true for that model thread only); the
//! `it` tests drop the same guards under real panics.
//!
//! Run with `cargo xtask loom barrier` (time budget: the whole file in under two minutes on
//! 2 cores, most of it compiling), which is:
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=2
//! cargo test -p ourios-barrier --test loom --release`
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;

use ourios_barrier::{
    Barrier, ByteBudget, CLEAR, Cleared, EpochLatch, Guarded, LAST_EPOCH, LatchWord,
    PublishOutcome, loom_support,
};

/// Stands in for a `RecoverableBatch`: its drop is the requeue. It stores with `Relaxed` on
/// purpose, so the only thing that can make it visible to the cut is the barrier's own
/// synchronization.
struct Requeue(Arc<AtomicBool>);

impl Drop for Requeue {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// C.5: a same-epoch report between a cut's capture and its clear survives: either the capture
/// already contained it (and the clear may erase it, having drained it), or the clear fails
/// (or runs before the report), and the latch still holds epoch 1 at the end. Two separate
/// atomics would miss this: the epoch half does not change.
/// Reasoned mutation (not run as a mutant): make `clear` compare the epoch half only (CAS from the
/// current word when its epoch equals the captured epoch), or store CLEAR unconditionally, and loom
/// finds the interleaving where the report is erased.
#[test]
fn loom_latch_same_epoch_report_survives_clear() {
    loom::model(|| {
        let latch = Arc::new(EpochLatch::with_word(LatchWord::new(1, 1)));
        let reporter = {
            let latch = Arc::clone(&latch);
            thread::spawn(move || {
                let _ = latch.report(1);
            })
        };
        let captured = latch.capture();
        let cleared = latch.clear(captured);
        reporter.join().unwrap();
        let end = latch.capture();
        if captured.generation() == 2 {
            assert_eq!(cleared, Cleared::Cleared, "the cut captured the report");
            assert_eq!(end, CLEAR);
        } else {
            assert_eq!(captured, LatchWord::new(1, 1));
            assert!(!end.is_clear(), "the report after the capture must survive");
            assert_eq!(end.epoch(), 1);
            if let Cleared::Raced { current } = cleared {
                assert_eq!(current, LatchWord::new(1, 2));
                assert_eq!(end, LatchWord::new(1, 2));
            }
        }
    });
}

/// C.5: a lower-epoch report between capture and clear survives the same way, with the epoch
/// half lowered to the reported epoch.
/// Reasoned mutation (not run as a mutant): make `clear` store CLEAR unconditionally and loom finds
/// the interleaving where epoch 3 is erased without being captured.
#[test]
fn loom_latch_lower_epoch_report_survives_clear() {
    loom::model(|| {
        let latch = Arc::new(EpochLatch::with_word(LatchWord::new(5, 1)));
        let reporter = {
            let latch = Arc::clone(&latch);
            thread::spawn(move || {
                let _ = latch.report(3);
            })
        };
        let captured = latch.capture();
        let cleared = latch.clear(captured);
        reporter.join().unwrap();
        let end = latch.capture();
        if captured.epoch() == 3 {
            assert_eq!(captured, LatchWord::new(3, 2));
            assert_eq!(cleared, Cleared::Cleared);
            assert_eq!(end, CLEAR);
        } else {
            assert_eq!(end.failed_epoch(), Some(3), "the lower report must survive");
        }
    });
}

/// C.5: two concurrent reports (epochs 4 and 2) leave the minimum epoch and generation + 2,
/// and a concurrent capture only ever sees a coherent pair that some prefix of the reports
/// produced.
/// Reasoned mutation (not run as a mutant): split `report` into a load and a plain store (no CAS
/// loop) and loom finds the lost update (generation 1).
#[test]
fn loom_latch_two_reports_min_epoch_generation_plus_two() {
    loom::model(|| {
        let latch = Arc::new(EpochLatch::new());
        let reporters: Vec<_> = [4, 2]
            .into_iter()
            .map(|epoch| {
                let latch = Arc::clone(&latch);
                thread::spawn(move || {
                    let _ = latch.report(epoch);
                })
            })
            .collect();
        let seen = latch.capture();
        let coherent = [
            CLEAR,
            LatchWord::new(4, 1),
            LatchWord::new(2, 1),
            LatchWord::new(2, 2),
        ];
        assert!(coherent.contains(&seen), "incoherent capture {seen:?}");
        for reporter in reporters {
            reporter.join().unwrap();
        }
        assert_eq!(latch.capture(), LatchWord::new(2, 2));
    });
}

/// M.4: a batch guard dropped by a panic on a worker thread, concurrently with a cut's begin
/// and quiesce on another: whenever `quiesce_encodes` returns, the batch's requeue (a Relaxed
/// store) and its latch report are visible to the cut.
/// Reasoned mutation (not run as a mutant): move the report after `exit_encode` in
/// `BatchGuard::drop`, or weaken either the fast-path exit's `Release` or the cut's advance's
/// `Acquire` to `Relaxed`, and loom finds a run where the cut sees no report or no requeue.
#[test]
fn loom_guard_requeue_and_report_visible_after_quiesce() {
    loom::model(|| {
        let barrier = Barrier::new();
        let requeued = Arc::new(AtomicBool::new(false));
        let batch = Guarded::new(Requeue(Arc::clone(&requeued)), barrier.enter_encode());
        let worker = thread::spawn(move || loom_support::unwind(move || drop(batch)));
        let cut = barrier.begin_cut();
        barrier.quiesce_encodes(&cut);
        assert!(
            requeued.load(Ordering::Relaxed),
            "requeue not visible after quiesce"
        );
        assert_eq!(
            barrier.latch().capture().failed_epoch(),
            Some(0),
            "report not visible"
        );
        worker.join().unwrap();
    });
}

/// M.5: the shared completion settles exactly once with two detaches completing on two
/// threads and the encode end (the batch guard's drop) on a third: `quiesce_publishes`
/// returns (it would deadlock if nothing settled), exactly one publish settled, with the
/// worst outcome, and nothing was decremented twice.
/// Reasoned mutation (not run as a mutant): settle without taking the guard out of its `Option`
/// (every step that sees the count at zero settles) and loom finds the run where two steps settle
/// (`publishes_settled == 2`).
#[test]
fn loom_shared_completion_settles_once() {
    loom::model(|| {
        let barrier = Barrier::new();
        let guard = barrier.enter_encode();
        let (first, second) = (guard.detach(), guard.detach());
        let cut = barrier.begin_cut();
        let a = thread::spawn(move || first.complete(PublishOutcome::Durable));
        let b = thread::spawn(move || second.complete(PublishOutcome::Requeued));
        drop(guard);
        let verdict = barrier.quiesce_publishes(&cut);
        assert!(!verdict.all_ok(cut.epoch()));
        assert_eq!(verdict.failed_publishes(), 1);
        a.join().unwrap();
        b.join().unwrap();
        let stats = barrier.stats();
        assert_eq!(stats.publishes_settled, 1);
        assert_eq!(
            (stats.publishes_outstanding, stats.accounting_errors),
            (0, 0)
        );
    });
}

/// RFC0052.epoch-split and RFC0052.quiesce under concurrency: a batch entering while a cut
/// begins is tagged E or E+1, never anything else, and if it was tagged E, `quiesce_encodes`
/// does not return before it ended.
/// Reasoned mutation (not run as a mutant): read the epoch with one load and count with a separate
/// `fetch_add` in `enter_encode` (tag and count not one RMW) and loom finds a batch tagged E that
/// quiesce did not wait for.
#[test]
fn loom_encode_tag_and_cut_are_ordered() {
    loom::model(|| {
        let barrier = Barrier::new();
        let ended = Arc::new(AtomicBool::new(false));
        let worker = {
            let barrier = barrier.clone();
            let ended = Arc::clone(&ended);
            thread::spawn(move || {
                let batch = Guarded::new(Requeue(ended), barrier.enter_encode());
                let epoch = batch.guard().epoch();
                drop(batch);
                epoch
            })
        };
        let cut = barrier.begin_cut();
        barrier.quiesce_encodes(&cut);
        let ended_at_quiesce = ended.load(Ordering::Relaxed);
        let tag = worker.join().unwrap();
        assert!(tag == cut.epoch() || tag == cut.epoch() + 1, "tag {tag}");
        if tag <= cut.epoch() {
            assert!(
                ended_at_quiesce,
                "quiesce returned before a batch tagged E ended"
            );
        }
    });
}

/// M.7 under concurrency: the cut at `u32::MAX - 1` resets the epoch while a batch of the old
/// epoch ends on one thread and new work arrives on another. The newcomer is tagged either
/// `u32::MAX - 1` (it entered before the cut, and then quiesce waited for it) or 0 (it waited
/// at the gate until the reset), never anything else; after `quiesce_publishes` the epoch is 0,
/// exactly one reset ran and the books balance.
/// Reasoned mutation (not run as a mutant): let `enter_encode`'s fast path ignore the gate bit and
/// loom finds a newcomer tagged `u32::MAX - 1` that the resetting cut never waited for (or an
/// accounting error).
#[test]
fn loom_epoch_reset_gate_orders_new_work_after_the_reset() {
    loom::model(|| {
        let barrier = Barrier::with_state(LAST_EPOCH, CLEAR).unwrap();
        let old = barrier.enter_encode();
        let old_holder = thread::spawn(move || drop(old));
        let newcomer_ended = Arc::new(AtomicBool::new(false));
        let newcomer = {
            let barrier = barrier.clone();
            let ended = Arc::clone(&newcomer_ended);
            thread::spawn(move || {
                let batch = Guarded::new(Requeue(ended), barrier.enter_encode());
                let epoch = batch.guard().epoch();
                drop(batch);
                epoch
            })
        };
        let cut = barrier.begin_cut();
        assert!(cut.resets_epoch());
        barrier.quiesce_encodes(&cut);
        let newcomer_ended_at_quiesce = newcomer_ended.load(Ordering::Relaxed);
        let verdict = barrier.quiesce_publishes(&cut);
        assert!(verdict.all_ok(LAST_EPOCH));
        let tag = newcomer.join().unwrap();
        old_holder.join().unwrap();
        assert!(tag == LAST_EPOCH || tag == 0, "tag {tag}");
        if tag == LAST_EPOCH {
            assert!(
                newcomer_ended_at_quiesce,
                "the reset cut did not wait for a batch it covers"
            );
        }
        let stats = barrier.stats();
        assert_eq!((stats.barrier_epoch, stats.epoch_resets), (0, 1));
        assert_eq!((stats.encodes_outstanding, stats.accounting_errors), (0, 0));
    });
}

/// What the budget model's observer was last told. A std atomic, outside loom's model: loom
/// runs the model's threads on one OS thread, and the observer is called under the budget's
/// (modelled) lock, which is what orders the calls. Only that model uses it.
static BUDGET_OBSERVED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn observe_budget(held: usize) {
    BUDGET_OBSERVED.store(held, std::sync::atomic::Ordering::Relaxed);
}

/// The byte budget: the main thread holds the whole limit; two producers wait for 2 and 1
/// bytes of a limit of 3. When the holder gives its bytes back, both get in (the bytes freed
/// admit more than one waiter), neither ever sees more than the limit held, and everything is
/// given back at the end, where the observer's last word is 0 however the changes raced. A lost
/// wakeup is a deadlock loom reports.
/// Reasoned mutation (not run as a mutant): delete the `notify_all` in `BudgetPermit::drop` and
/// loom reports the producers asleep forever; admit on `held + bytes <= limit` alone (dropping
/// the "nothing held" clause) and the oversize acquire in `an_item_alone_always_fits` hangs.
/// Mutation check (tried by hand): in `BudgetPermit::drop`, tell the observer after releasing
/// the lock and notifying the waiters, and loom finds an interleaving whose last word is stale.
#[test]
fn loom_budget_wakes_waiters_and_never_exceeds_its_limit() {
    loom::model(|| {
        BUDGET_OBSERVED.store(0, std::sync::atomic::Ordering::Relaxed);
        let budget = ByteBudget::observed(3, observe_budget);
        let full = budget.acquire(3);
        let producers: Vec<_> = [2, 1]
            .into_iter()
            .map(|bytes| {
                let budget = budget.clone();
                thread::spawn(move || {
                    let permit = budget.acquire(bytes);
                    let held = budget.held();
                    assert!(held <= 3, "{held} bytes held under a limit of 3");
                    drop(permit);
                })
            })
            .collect();
        drop(full);
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(budget.held(), 0);
        assert_eq!(
            BUDGET_OBSERVED.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "the observer's last word is the bytes held"
        );
    });
}
