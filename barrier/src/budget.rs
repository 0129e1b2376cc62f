//! A byte budget for work handed from one thread to another: what bounds the memory of the
//! partitions waiting for the publisher.
//!
//! A queue bounded in items bounds memory only if items are small; detached partitions range
//! from a few records to the partition target. [`ByteBudget::acquire`] blocks the producer
//! until the bytes already held plus its own fit the limit, and the [`BudgetPermit`] it returns
//! gives them back when dropped, whatever drops it: the consumer taking the item, an unwind, a
//! queue drained on its way out. An item larger than the whole limit is admitted alone (when
//! nothing else is held), so no size blocks forever.
//!
//! A budget made by [`ByteBudget::observed`] reports its held bytes, under its lock, each time
//! they change: a gauge set from there is never left stale by a permit given back elsewhere
//! (an unwind, a drained queue) or by two changes racing to set it.

use crate::sync::{Arc, Condvar, Mutex, MutexGuard, lock, wait};

/// Bytes held by permits, against a limit. Cloning shares the budget.
#[derive(Debug, Clone)]
pub struct ByteBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limit: usize,
    /// Bytes held by live permits. Only read and written under this mutex.
    held: Mutex<usize>,
    /// Notified whenever a permit gives bytes back.
    freed: Condvar,
    /// Told the held bytes after each change, under `held`'s lock.
    observe: Option<fn(usize)>,
}

impl ByteBudget {
    /// A budget of `limit` bytes (0 admits one item at a time).
    pub fn new(limit: usize) -> Self {
        Self::with_observer(limit, None)
    }

    /// A budget of `limit` bytes that calls `observe` with the bytes held after every change
    /// (a grant, a permit given back), under the budget's lock: the calls come in the order of
    /// the changes, so the last one always names the bytes held now. `observe` runs inside a
    /// permit's `Drop` and must not panic or touch the budget; setting a gauge is what it is
    /// for.
    pub fn observed(limit: usize, observe: fn(usize)) -> Self {
        Self::with_observer(limit, Some(observe))
    }

    fn with_observer(limit: usize, observe: Option<fn(usize)>) -> Self {
        Self {
            inner: Arc::new(Inner {
                limit,
                held: Mutex::new(0),
                freed: Condvar::new(),
                observe,
            }),
        }
    }

    /// Bytes held by live permits now.
    pub fn held(&self) -> usize {
        *lock(&self.inner.held)
    }

    /// Takes `bytes` from the budget, waiting while other permits hold so much that they would
    /// not fit (an item alone always fits). Returns at once when they fit.
    pub fn acquire(&self, bytes: usize) -> BudgetPermit {
        let mut held = lock(&self.inner.held);
        while !fits(*held, bytes, self.inner.limit) {
            held = wait(&self.inner.freed, held);
        }
        self.grant(held, bytes)
    }

    /// Takes `bytes` if they fit now, without waiting.
    pub fn try_acquire(&self, bytes: usize) -> Option<BudgetPermit> {
        let held = lock(&self.inner.held);
        fits(*held, bytes, self.inner.limit).then(|| self.grant(held, bytes))
    }

    /// Adds `bytes` to `held` (the budget's locked count, once they fit) and returns their
    /// permit.
    fn grant(&self, mut held: MutexGuard<'_, usize>, bytes: usize) -> BudgetPermit {
        *held += bytes;
        self.inner.observe_locked(*held);
        drop(held);
        BudgetPermit {
            budget: Arc::clone(&self.inner),
            bytes,
        }
    }
}

impl Inner {
    /// Tells the observer, if any, the bytes held; called with `held`'s lock taken.
    fn observe_locked(&self, held: usize) {
        if let Some(observe) = self.observe {
            observe(held);
        }
    }
}

/// Whether `bytes` may join `held` under `limit`: when nothing is held, always.
fn fits(held: usize, bytes: usize, limit: usize) -> bool {
    held == 0 || held.saturating_add(bytes) <= limit
}

/// Bytes taken from a [`ByteBudget`], given back on drop (never panics: the lock is
/// poison-tolerant).
#[derive(Debug)]
#[must_use = "dropping the permit gives its bytes back at once"]
pub struct BudgetPermit {
    budget: Arc<Inner>,
    bytes: usize,
}

impl BudgetPermit {
    /// The bytes it holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        let mut held = lock(&self.budget.held);
        *held = held.saturating_sub(self.bytes);
        self.budget.observe_locked(*held);
        drop(held);
        // Every waiter re-checks: the bytes given back may admit more than one.
        self.budget.freed.notify_all();
    }
}
