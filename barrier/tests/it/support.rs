//! Test helpers: real panics with a quiet hook, and a value whose drop records what the
//! barrier looked like at the moment of its requeue.

use std::panic::{AssertUnwindSafe, catch_unwind, panic_any};
use std::sync::{Arc, Mutex, Once};

use ourios_barrier::{Barrier, LatchWord};

/// The payload of every panic a test raises on purpose; the hook stays quiet for it only.
pub(crate) struct ExpectedPanic;

/// Installs (once) a panic hook that is silent for [`ExpectedPanic`] and delegates otherwise.
pub(crate) fn quiet_expected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<ExpectedPanic>() {
                previous(info);
            }
        }));
    });
}

/// Drops `value` inside a real panic (the unwind drops it), and checks that it did panic.
pub(crate) fn drop_in_panic<T>(value: T) {
    quiet_expected_panics();
    let result = catch_unwind(AssertUnwindSafe(move || {
        let _held = value;
        panic_any(ExpectedPanic);
    }));
    assert!(result.is_err(), "the closure must have panicked");
}

/// What the barrier looked like when a [`Requeue`] ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AtRequeue {
    pub(crate) latch: LatchWord,
    pub(crate) encodes_outstanding: u64,
    pub(crate) publishes_outstanding: u64,
}

/// Stands in for a `RecoverableBatch`: its drop is the requeue, and it records the barrier's
/// state at that instant.
pub(crate) struct Requeue {
    barrier: Barrier,
    seen: Arc<Mutex<Option<AtRequeue>>>,
}

impl Requeue {
    pub(crate) fn new(barrier: &Barrier) -> (Self, Arc<Mutex<Option<AtRequeue>>>) {
        let seen = Arc::new(Mutex::new(None));
        (
            Self {
                barrier: barrier.clone(),
                seen: Arc::clone(&seen),
            },
            seen,
        )
    }
}

impl Drop for Requeue {
    fn drop(&mut self) {
        let stats = self.barrier.stats();
        let at = AtRequeue {
            latch: stats.latch,
            encodes_outstanding: stats.encodes_outstanding,
            publishes_outstanding: stats.publishes_outstanding,
        };
        *self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(at);
    }
}

/// The recorded requeue, which must have run.
pub(crate) fn requeued(seen: &Mutex<Option<AtRequeue>>) -> AtRequeue {
    seen.lock().unwrap().expect("the requeue must have run")
}
