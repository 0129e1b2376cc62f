//! The byte budget against a sequential model: random programs of `try_acquire` and permit
//! drops, starting from any limit, with the observer told every change; and a permit dropped by
//! an unwinding thread.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;

use ourios_barrier::{BudgetPermit, ByteBudget};

#[derive(Debug, Clone)]
enum Op {
    TryAcquire(usize),
    /// Drop the permit at this index (modulo the number held).
    Drop(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..40).prop_map(Op::TryAcquire),
        any::<usize>().prop_map(Op::Drop),
    ]
}

/// What the model's budget last told its observer, set to 0 (a new budget's holding) as each
/// case starts. Only `try_acquire_follows_the_model` uses it, from its own thread: Relaxed is
/// enough.
static OBSERVED: AtomicUsize = AtomicUsize::new(0);

fn observe(held: usize) {
    OBSERVED.store(held, Ordering::Relaxed);
}

proptest! {
    /// A permit is granted exactly when nothing is held or the bytes fit under the limit,
    /// `held` is always the sum of the live permits, and the observer was told that sum by the
    /// last change.
    /// Mutation check (tried by hand): drop the observer call from `BudgetPermit::drop` and it
    /// fails at the first drop.
    #[test]
    fn try_acquire_follows_the_model(limit in 0usize..64, ops in prop::collection::vec(op(), 1..60)) {
        OBSERVED.store(0, Ordering::Relaxed);
        let budget = ByteBudget::observed(limit, observe);
        let mut permits: Vec<BudgetPermit> = Vec::new();
        for op in ops {
            let held: usize = permits.iter().map(BudgetPermit::bytes).sum();
            match op {
                Op::TryAcquire(bytes) => {
                    let fits = held == 0 || held + bytes <= limit;
                    let got = budget.try_acquire(bytes);
                    prop_assert_eq!(got.is_some(), fits, "held {} + {} under {}", held, bytes, limit);
                    permits.extend(got);
                }
                Op::Drop(i) if !permits.is_empty() => {
                    let i = i % permits.len();
                    drop(permits.swap_remove(i));
                }
                Op::Drop(_) => {}
            }
            let model: usize = permits.iter().map(BudgetPermit::bytes).sum();
            prop_assert_eq!(budget.held(), model);
            prop_assert_eq!(OBSERVED.load(Ordering::Relaxed), model, "the observer's last word");
            // Past the limit only when one permit holds bytes (an item alone).
            let holding = permits.iter().filter(|p| p.bytes() > 0).count();
            prop_assert!(holding <= 1 || model <= limit, "over the limit with {} permits", holding);
        }
        drop(permits);
        prop_assert_eq!(budget.held(), 0);
        prop_assert_eq!(OBSERVED.load(Ordering::Relaxed), 0);
    }
}

/// An item larger than the whole limit is admitted alone, without waiting.
#[test]
fn an_item_alone_always_fits() {
    let budget = ByteBudget::new(10);
    let big = budget.acquire(1_000);
    assert_eq!(budget.held(), 1_000);
    assert!(
        budget.try_acquire(1).is_none(),
        "nothing joins an oversize item"
    );
    drop(big);
    assert_eq!(budget.held(), 0);
}

/// A permit dropped by a panicking thread's unwind gives its bytes back, so a waiter is not
/// stranded behind a dead holder.
#[test]
fn a_permit_dropped_in_an_unwind_gives_its_bytes_back() {
    let budget = ByteBudget::new(10);
    let holder = budget.clone();
    let died = std::thread::spawn(move || {
        let _permit = holder.acquire(10);
        panic!("the holder dies with its permit");
    })
    .join();
    assert!(died.is_err());
    assert_eq!(budget.held(), 0);
    // And a full-size acquire returns at once.
    let again = budget.acquire(10);
    assert_eq!(again.bytes(), 10);
}
