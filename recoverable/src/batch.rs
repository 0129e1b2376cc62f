//! [`RecoverableBatch`]: items a consumer owns until each one is settled or requeued.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;
use std::thread::ThreadId;

use crate::target::{RequeueCause, RequeueTarget, requeue_from_drop};

/// How a consumer settled an item: the ownership boundary of RFC 0054 §9.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// The put returned Ok: the item is durable in the store.
    Durable,
    /// The sink dropped it under its own permanent policy (for records: quarantined with a
    /// durable `record_quarantined` event; for audit: the derivation-failure path).
    Dropped,
}

/// The state of one item of a [`RecoverableBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemState {
    /// Owned by the batch, no put started.
    Pending,
    /// Its put started and has not been settled: if the batch drops now it is requeued as an
    /// ambiguous put (the store may have accepted it).
    InFlight,
    /// Taken out by the consumer after its put settled; never requeued.
    Settled(Settlement),
    /// Handed back to the batch's [`RequeueTarget`]; never requeued again.
    Requeued,
    /// Moved into another batch by [`RecoverableBatch::split_off_pending`], which owns it now.
    SplitOff,
}

/// Proof that one item of one batch is `InFlight`.
///
/// Returned by [`RecoverableBatch::begin`] and [`RecoverableBatch::begin_next`] and consumed by
/// [`RecoverableBatch::settle`] or [`RecoverableBatch::requeue`]: an item can leave the batch
/// only through its lease, and only once. Not `Clone`/`Copy`. Dropping a lease without settling
/// leaves the item `InFlight`, and the batch's `Drop` requeues it as ambiguous.
#[must_use = "an InFlight item is settled or requeued through its lease"]
#[derive(Debug, PartialEq, Eq)]
pub struct Lease {
    batch: BatchId,
    index: usize,
}

impl Lease {
    /// The index of the leased item in its batch.
    pub fn index(&self) -> usize {
        self.index
    }
}

/// Identity of one batch, so a lease cannot settle an item of another batch. Unique within the
/// process without shared state: a per-thread sequence number paired with the thread's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchId {
    thread: ThreadId,
    seq: u64,
}

impl BatchId {
    fn fresh() -> Self {
        thread_local! {
            // No destructor, so access never fails, even during thread teardown.
            static NEXT: Cell<u64> = const { Cell::new(0) };
        }
        let seq = NEXT.with(|next| {
            let seq = next.get();
            next.set(seq.wrapping_add(1));
            seq
        });
        Self {
            thread: std::thread::current().id(),
            seq,
        }
    }
}

/// Counts of a consumed batch, returned by [`RecoverableBatch::finish`].
#[must_use = "the ambiguous count is the number of possible duplicates: count it"]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchReport {
    /// Items settled as [`Settlement::Durable`].
    pub durable: usize,
    /// Items settled as [`Settlement::Dropped`].
    pub dropped: usize,
    /// Items handed back to the target, on purpose or by `finish` itself.
    pub requeued: usize,
    /// Items `InFlight` when `finish` ran: requeued as ambiguous puts (possible duplicates).
    pub ambiguous: usize,
    /// Items moved into another batch by [`RecoverableBatch::split_off_pending`].
    pub split_off: usize,
}

/// One item's slot: the item is present exactly while the state is `Pending` or `InFlight`, so
/// an item cannot be taken out of the batch without a state change.
enum Slot<T> {
    Pending(T),
    InFlight(T),
    Settled(Settlement),
    Requeued,
    SplitOff,
}

impl<T> Slot<T> {
    fn state(&self) -> ItemState {
        match self {
            Slot::Pending(_) => ItemState::Pending,
            Slot::InFlight(_) => ItemState::InFlight,
            Slot::Settled(how) => ItemState::Settled(*how),
            Slot::Requeued => ItemState::Requeued,
            Slot::SplitOff => ItemState::SplitOff,
        }
    }
}

/// A consumer's batch whose `Drop` requeues everything it has not settled (RFC 0054 §9.5).
///
/// Every item is in one [`ItemState`]. The consumer moves an item to `InFlight` when its put
/// starts ([`begin`](Self::begin)/[`begin_next`](Self::begin_next), which return a [`Lease`]),
/// and takes it out only by settling that lease ([`settle`](Self::settle)). A transient failure
/// requeues that one item at once through the target ([`requeue`](Self::requeue)), never into a
/// local collection. Dropping the batch (unwind or early return) requeues every `Pending` and
/// `InFlight` item in one target call with [`RequeueCause::Unwound`], whose `ambiguous` is the
/// number of `InFlight` items. Nothing settled is requeued and nothing is requeued twice.
pub struct RecoverableBatch<T> {
    slots: Vec<Slot<T>>,
    target: Arc<dyn RequeueTarget<T>>,
    id: BatchId,
    /// No index below this one is `Pending` (items only ever leave `Pending`).
    next_pending: usize,
    pending: usize,
    in_flight: usize,
    durable: usize,
    dropped: usize,
    requeued: usize,
    split_off: usize,
}

impl<T> fmt::Debug for RecoverableBatch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecoverableBatch")
            .field("len", &self.slots.len())
            .field("pending", &self.pending)
            .field("in_flight", &self.in_flight)
            .field("durable", &self.durable)
            .field("dropped", &self.dropped)
            .field("requeued", &self.requeued)
            .field("split_off", &self.split_off)
            .finish_non_exhaustive()
    }
}

impl<T> RecoverableBatch<T> {
    /// A batch of `Pending` items that requeues into `target` whatever it has not settled.
    pub fn new(items: Vec<T>, target: Arc<dyn RequeueTarget<T>>) -> Self {
        let pending = items.len();
        Self {
            slots: items.into_iter().map(Slot::Pending).collect(),
            target,
            id: BatchId::fresh(),
            next_pending: 0,
            pending,
            in_flight: 0,
            durable: 0,
            dropped: 0,
            requeued: 0,
            split_off: 0,
        }
    }

    /// Number of items the batch was built with (whatever their state now).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the batch was built with no items.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The state of the item at `index`.
    ///
    /// # Panics
    ///
    /// If `index >= self.len()` (as slice indexing does).
    pub fn state(&self, index: usize) -> ItemState {
        self.slots[index].state()
    }

    /// How many items are `Pending`.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// How many items are `InFlight`: the ambiguous puts if the batch dropped now.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// How many items are `Pending` or `InFlight`: what a drop now would requeue. Zero means the
    /// batch is fully settled (ownership-settled: settled out, requeued or split off).
    pub fn unsettled(&self) -> usize {
        self.pending + self.in_flight
    }

    /// The `Pending` items' indices, in order (to iterate while calling [`begin`](Self::begin)).
    pub fn pending_indices(&self) -> Vec<usize> {
        (self.next_pending..self.slots.len())
            .filter(|&i| matches!(self.slots[i], Slot::Pending(_)))
            .collect()
    }

    /// The item at `index` if the batch still holds it (`Pending` or `InFlight`).
    pub fn get(&self, index: usize) -> Option<&T> {
        match self.slots.get(index)? {
            Slot::Pending(item) | Slot::InFlight(item) => Some(item),
            _ => None,
        }
    }

    /// Move the first `Pending` item to `InFlight` (its put starts). `None` when nothing is
    /// `Pending`.
    pub fn begin_next(&mut self) -> Option<Lease> {
        while self.next_pending < self.slots.len() {
            let index = self.next_pending;
            self.next_pending += 1;
            if matches!(self.slots[index], Slot::Pending(_)) {
                return Some(self.begin(index));
            }
        }
        None
    }

    /// Move the `Pending` item at `index` to `InFlight` (its put starts).
    ///
    /// # Panics
    ///
    /// If the item is not `Pending` (or `index` is out of range): a programming error. The batch
    /// is unchanged, so its `Drop` still requeues what it holds.
    pub fn begin(&mut self, index: usize) -> Lease {
        let slot = &mut self.slots[index];
        // Replace with a placeholder only once we know the slot is Pending, so a panic here
        // leaves every item where it was.
        if !matches!(slot, Slot::Pending(_)) {
            not_pending(index, slot.state());
        }
        if let Slot::Pending(item) = std::mem::replace(slot, Slot::Requeued) {
            *slot = Slot::InFlight(item);
        }
        self.pending -= 1;
        self.in_flight += 1;
        Lease {
            batch: self.id,
            index,
        }
    }

    /// The leased (`InFlight`) item.
    ///
    /// # Panics
    ///
    /// If `lease` belongs to another batch.
    pub fn item(&self, lease: &Lease) -> &T {
        self.check(lease);
        match &self.slots[lease.index] {
            Slot::InFlight(item) => item,
            other => unreachable_lease(lease, other.state()),
        }
    }

    /// The leased (`InFlight`) item, mutably (e.g. to remove quarantined rows in place before
    /// the put of the remainder).
    ///
    /// # Panics
    ///
    /// If `lease` belongs to another batch.
    pub fn item_mut(&mut self, lease: &Lease) -> &mut T {
        self.check(lease);
        match &mut self.slots[lease.index] {
            Slot::InFlight(item) => item,
            other => unreachable_lease(lease, other.state()),
        }
    }

    /// The put returned Ok ([`Settlement::Durable`]) or the sink dropped the item under its own
    /// permanent policy ([`Settlement::Dropped`]): take it out. It is never requeued.
    ///
    /// # Panics
    ///
    /// If `lease` belongs to another batch (the batch is unchanged).
    #[must_use = "the settled item leaves the batch here"]
    pub fn settle(&mut self, lease: Lease, how: Settlement) -> T {
        let item = self.take_in_flight(&lease, Slot::Settled(how));
        match how {
            Settlement::Durable => self.durable += 1,
            Settlement::Dropped => self.dropped += 1,
        }
        item
    }

    /// A transient failure: requeue this one item now through the target
    /// ([`RequeueCause::Refused`]); its state becomes `Requeued`. Call it under the sink's
    /// lock discipline before the next put starts, so a later panic cannot strand it.
    ///
    /// # Panics
    ///
    /// If `lease` belongs to another batch (the batch is unchanged).
    pub fn requeue(&mut self, lease: Lease) {
        let item = self.take_in_flight(&lease, Slot::Requeued);
        self.requeued += 1;
        self.target.requeue(vec![item], RequeueCause::Refused);
    }

    /// Requeue every `Pending` item now, in one target call ([`RequeueCause::Refused`]).
    /// Returns how many were requeued. `InFlight` items are left to their leases.
    pub fn requeue_pending(&mut self) -> usize {
        let items = self.take_for_requeue(|slot| matches!(slot, Slot::Pending(_)));
        let n = items.len();
        self.pending -= n;
        self.requeued += n;
        if n > 0 {
            self.target.requeue(items, RequeueCause::Refused);
        }
        n
    }

    /// Move the `Pending` items matching `pred` into a new batch with the same target (to
    /// publish some tenants and refuse others). Their state here becomes `SplitOff`.
    ///
    /// `pred` runs on every `Pending` item before anything moves, so a panicking `pred` leaves
    /// this batch unchanged.
    pub fn split_off_pending(&mut self, mut pred: impl FnMut(&T) -> bool) -> RecoverableBatch<T> {
        let chosen: Vec<usize> = (self.next_pending..self.slots.len())
            .filter(|&i| match &self.slots[i] {
                Slot::Pending(item) => pred(item),
                _ => false,
            })
            .collect();
        let mut items = Vec::with_capacity(chosen.len());
        for i in chosen {
            if let Slot::Pending(item) = std::mem::replace(&mut self.slots[i], Slot::SplitOff) {
                items.push(item);
            }
        }
        self.pending -= items.len();
        self.split_off += items.len();
        RecoverableBatch::new(items, Arc::clone(&self.target))
    }

    /// Consume the batch and report its counts. Anything still `Pending` or `InFlight` is
    /// requeued exactly as by `Drop` ([`RequeueCause::Unwound`], `ambiguous` = the `InFlight`
    /// count) and appears in the report's `requeued` and `ambiguous`.
    pub fn finish(mut self) -> BatchReport {
        let ambiguous = self.requeue_unsettled();
        BatchReport {
            durable: self.durable,
            dropped: self.dropped,
            requeued: self.requeued,
            ambiguous,
            split_off: self.split_off,
        }
    }

    /// Hand every `Pending` and `InFlight` item to the target in one call (cause `Unwound`),
    /// without panicking. Returns the ambiguous (`InFlight`) count.
    fn requeue_unsettled(&mut self) -> usize {
        let ambiguous = self.in_flight;
        if self.pending + self.in_flight == 0 {
            return 0;
        }
        let items =
            self.take_for_requeue(|slot| matches!(slot, Slot::Pending(_) | Slot::InFlight(_)));
        self.requeued += items.len();
        self.pending = 0;
        self.in_flight = 0;
        requeue_from_drop(&*self.target, items, RequeueCause::Unwound { ambiguous });
        ambiguous
    }

    /// Take out the items of the slots matching `select`, in index order, marking each slot
    /// `Requeued`. Does not touch the counters. Never panics (`select` is a `matches!`).
    fn take_for_requeue(&mut self, select: impl Fn(&Slot<T>) -> bool) -> Vec<T> {
        let mut items = Vec::new();
        for slot in &mut self.slots {
            if select(slot)
                && let Slot::Pending(item) | Slot::InFlight(item) =
                    std::mem::replace(slot, Slot::Requeued)
            {
                items.push(item);
            }
        }
        items
    }

    #[inline]
    fn check(&self, lease: &Lease) {
        if lease.batch != self.id {
            foreign_lease(lease.index);
        }
    }

    #[inline]
    fn take_in_flight(&mut self, lease: &Lease, then: Slot<T>) -> T {
        self.check(lease);
        let slot = &mut self.slots[lease.index];
        if !matches!(slot, Slot::InFlight(_)) {
            unreachable_lease(lease, slot.state());
        }
        match std::mem::replace(slot, then) {
            Slot::InFlight(item) => {
                self.in_flight -= 1;
                item
            }
            // Checked just above.
            other => unreachable_lease(lease, other.state()),
        }
    }
}

// The panics live out of line so the hot paths (begin, item, settle) stay small enough to
// inline into the consumer's loop.

#[cold]
#[inline(never)]
fn not_pending(index: usize, state: ItemState) -> ! {
    panic!("begin({index}) on an item in state {state:?}, not Pending")
}

#[cold]
#[inline(never)]
fn foreign_lease(index: usize) -> ! {
    panic!("lease for item {index} belongs to another batch")
}

/// A lease is created only for an item it moves to `InFlight` and is consumed by the only calls
/// that move it out, so its item is always `InFlight`.
#[cold]
#[inline(never)]
fn unreachable_lease(lease: &Lease, state: ItemState) -> ! {
    unreachable!(
        "leased item {} is {state:?}, not InFlight: lease invariant broken",
        lease.index
    )
}

impl<T> Drop for RecoverableBatch<T> {
    /// Requeue every `Pending` and `InFlight` item in one target call,
    /// `RequeueCause::Unwound { ambiguous: <InFlight count> }`. Never panics.
    fn drop(&mut self) {
        let _ambiguous = self.requeue_unsettled();
    }
}
