//! Epochs, the packed epoch latch, encode/publish guards and the epoch-scoped verdict: the
//! state every "did this cut drain what failed?" decision rests on (RFC 0052 as amended by
//! RFC 0054 §9.6; `rfcs/0052-snapshot-barrier.md`).
//! Beside them, [`ByteBudget`]: the bound, in bytes, on detached partitions waiting for the
//! publisher (RFC 0059).
//!
//! Contract. Every unit of work holds a guard tagged with the epoch current when it entered; a
//! cut with epoch E advances new work to E+1 in the same atomic step that fixes every tag, so
//! [`Barrier::quiesce_encodes`] and [`Barrier::quiesce_publishes`] wait for exactly the work
//! tagged <= E, and the [`Verdict`] says whether any publish tagged <= E failed or panicked
//! (failures tagged E+1 are kept for the next cut). A guard dropped by a panic lets the
//! caller's requeue run first (hold the batch in a [`Guarded`]), reports its epoch to the
//! [`EpochLatch`] with `Release` second, and decrements last, so a quiesce that returns sees
//! both. The latch is one `AtomicU64` (lowest failed epoch high, generation low): a cut clears
//! it only by a CAS from the exact word it captured, so any report in between survives; the
//! generation is sticky at `u32::MAX`; the cut at `u32::MAX - 1` resets the epoch to 0 once no
//! guard is outstanding. A cut never skips because the latch is set: the verdict and the CAS
//! decide (RFC 0054 §3).
//!
//! Proves (tests in `tests/it` and `tests/loom.rs`): RFC0052.epoch-split, RFC0052.quiesce,
//! RFC0052.verdict, RFC0054.4-restart and the barrier half of RFC0054.4, and the draft legs
//! C.5 and M.4-M.8 of RFC 0054.
//!
//! Deliberately not known here: what is published, WAL positions, stamps, snapshots. Ordering
//! a WAL position against the tags is the caller's: take the capture and
//! [`Barrier::begin_cut`] under the same lock as mining-then-[`Barrier::enter_encode`]. The
//! latch is never persisted, so a restart (a new [`Barrier`]) always starts clear. Every guard
//! settles in its `Drop`, so no quiesce waits on a guard nobody owns; `mem::forget` on a guard is
//! the one way to make a quiesce wait forever.

mod barrier;
mod budget;
mod error;
mod guard;
mod latch;
pub(crate) mod sync;

/// Loom-only test support (exists only under `--cfg loom`).
#[cfg(loom)]
pub use sync::loom_support;

pub use barrier::{Barrier, BarrierStats, Cut, Verdict};
pub use budget::{BudgetPermit, ByteBudget};
pub use error::{EnterError, StartError};
pub use guard::{
    BatchGuard, DetachToken, Guarded, PublishCompletion, PublishGuard, PublishOutcome,
};
pub use latch::{
    CLEAR, CLEAR_EPOCH, CLEAR_GENERATION, Cleared, EPOCH_MASK, EPOCH_SHIFT, EpochLatch,
    GENERATION_MASK, LAST_EPOCH, LatchWord, Reported, STICKY_GENERATION,
};
