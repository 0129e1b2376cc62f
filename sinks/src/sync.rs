//! The one place this crate takes its synchronisation primitives from.
//!
//! The sinks hold their buffers behind plain mutexes: every counter that must agree with a
//! buffer (sequence numbers, byte accounting) lives under the same lock as the buffer. The one
//! atomic is the object-key counter, which only has to be unique.
//! The cross-buffer ordering (audit requeued before records) is owned by `ourios-recoverable`,
//! whose loom models cover it; this crate is not built under `cfg(loom)` because its I/O stack
//! (tokio, object_store, parquet) is not.

pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
pub(crate) use std::sync::{Arc, Mutex, OnceLock};

/// Lock `mutex`, recovering it if a panicking thread poisoned it: every mutation under these
/// locks leaves the protected state consistent at each point a panic can be raised (failpoints
/// included), and the requeue paths run inside `Drop` during an unwind.
pub(crate) use ourios_recoverable::lock;
