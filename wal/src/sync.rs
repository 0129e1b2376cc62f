//! The one place this crate takes its synchronisation primitives from: `loom` under
//! `cfg(loom)` (so `tests/loom.rs` can explore the group-commit interleavings), `std` otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread;

#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread;

/// `std`'s `Arc` under every cfg, for trait objects (`Arc<dyn WalIo>`): loom's `Arc` cannot hold
/// unsized values, and this one only shares ownership of a stateless handle, so it is not a
/// synchronisation point loom needs to model.
pub(crate) use std::sync::Arc as StdArc;

/// Locks `mutex`, recovering the guard if a panicking thread poisoned it.
///
/// Every critical section in this crate leaves its state consistent at each point where a panic
/// could unwind (plain field updates, no multi-step invariants across calls that can panic), so
/// a poisoned lock carries no torn state and is safe to keep using; `Drop` impls rely on this
/// never panicking.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits on `condvar`, recovering the guard if the lock was poisoned meanwhile.
pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar
        .wait(guard)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
