//! Test helpers: real panics with a quiet hook, and a value whose drop records what the
//! barrier looked like at the moment of its requeue.

use std::panic::{AssertUnwindSafe, catch_unwind, panic_any};
use std::sync::{Arc, Condvar, Mutex, Once, PoisonError};
use std::time::Duration;

use ourios_barrier::{Barrier, LatchWord};

/// How long one test (or one state-machine case) may run before the watchdog ends the process.
/// Every test here finishes in well under a second; a wrong barrier makes a quiesce or a
/// gated enter wait forever, and that must fail the run, not stall it.
const HANG: Duration = Duration::from_secs(5);

/// Ends the test process (exit code 101, naming the test) if it is still alive after [`HANG`].
/// Hold it for the test's whole body; dropping it disarms the watchdog.
#[must_use = "the watchdog is disarmed when this is dropped"]
pub(crate) struct Watchdog {
    done: Arc<(Mutex<bool>, Condvar)>,
}

pub(crate) fn watchdog() -> Watchdog {
    let name = std::thread::current().name().unwrap_or("a test").to_owned();
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let watched = Arc::clone(&done);
    std::thread::spawn(move || {
        let (flag, changed) = &*watched;
        let guard = flag.lock().unwrap_or_else(PoisonError::into_inner);
        let (guard, _) = changed
            .wait_timeout_while(guard, HANG, |done| !*done)
            .unwrap_or_else(PoisonError::into_inner);
        if !*guard {
            eprintln!("{name}: still running after {HANG:?}; a wait that never ends is a failure");
            std::process::exit(101);
        }
    });
    Watchdog { done }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (flag, changed) = &*self.done;
        *flag.lock().unwrap_or_else(PoisonError::into_inner) = true;
        changed.notify_all();
    }
}

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
