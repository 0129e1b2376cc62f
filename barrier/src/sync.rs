//! The one place this crate takes its synchronization primitives from: loom's under `cfg(loom)`,
//! so the models in `tests/loom.rs` explore every interleaving of the real code, std's otherwise.
//! Nothing else in the crate imports `std::sync`.

#[cfg(loom)]
pub(crate) use loom::sync::{
    Arc, Condvar, Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering},
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    Arc, Condvar, Mutex, MutexGuard,
    atomic::{AtomicU64, Ordering},
};

use std::sync::PoisonError;

/// Locks `mutex`, recovering it if a panicking holder poisoned it. Every state this crate keeps
/// under a mutex is updated in single steps that leave it consistent, so a poisoned lock holds
/// usable data, and `Drop` paths must never unwind inside an unwind.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The data of a mutex reached through `&mut` (no other reference exists, so no lock is
/// taken), recovering a poisoned one for the same reason as [`lock`].
pub(crate) fn get_mut<T>(mutex: &mut Mutex<T>) -> &mut T {
    mutex.get_mut().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `condvar`, recovering a poisoned lock for the same reason as [`lock`].
pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Whether the current thread is unwinding: the question every guard's `Drop` asks to tell a
/// panic from a normal end.
#[cfg(not(loom))]
pub(crate) fn panicking() -> bool {
    std::thread::panicking()
}

/// Under loom, every model thread runs on one OS thread, and std's panic count is per OS
/// thread: a real unwind on one model thread would make `thread::panicking()` true on the
/// others (and poison loom's internal std mutexes). So the models mark one model thread as
/// unwinding with [`loom_support::unwind`] instead; the guards' `Drop` code is the same.
#[cfg(loom)]
pub(crate) fn panicking() -> bool {
    std::thread::panicking() || loom_support::UNWINDING.with(std::cell::Cell::get)
}

/// Loom-only test support: drive a guard's unwind path on one model thread.
#[cfg(loom)]
pub mod loom_support {
    use std::cell::Cell;

    loom::thread_local! {
        pub(super) static UNWINDING: Cell<bool> = Cell::new(false);
    }

    /// Runs `f` (typically a `drop`) as if this model thread were unwinding from a panic: every
    /// guard dropped inside takes its panic path (requeue, report, decrement).
    pub fn unwind<R>(f: impl FnOnce() -> R) -> R {
        UNWINDING.with(|u| u.set(true));
        let result = f();
        UNWINDING.with(|u| u.set(false));
        result
    }
}
