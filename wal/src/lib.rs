//! The write-ahead log of the ingest node: a request is durable once [`Wal::append`] returns
//! its [`Lsn`], and only then may it be acknowledged.
//!
//! Contract: frames (one validated [`TenantId`] each, a CRC32C, a global monotonic lsn) go into
//! segment files; concurrent appends share one `fdatasync` (group commit) and each returns only
//! after a sync covering it succeeded. A failed write, sync or rotation fails every frame it
//! covered and makes the WAL read-only (no fsync retry: after a failed fsync the page cache's
//! state is unknown); reopening re-validates from disk. Opening heals a torn tail on the newest
//! segment (reported and counted) and refuses damage anywhere else, naming the segment and the
//! byte offset. Per tenant it keeps the frontier `X_t` and snapshot mark `S_t` (each file
//! replaced atomically, never moving back, `S_t <= X_t`, stamps clamped below in-memory holds)
//! with the miner's snapshot bytes, replays each frame tagged `Skipped`, `RegenerationOnly` or
//! `Normal` (DESIGN §7), and deletes sealed segments every tenant in them has passed (renamed
//! aside, then cut down and removed a step at a time, outside the lock commits take).
//!
//! Criteria proved here: DESIGN §7 (group commit and ack-after-sync, torn tail vs corruption,
//! replay modes, bounded disk) and the WAL's side of I1 (an acknowledged frame survives SIGKILL,
//! `tests/it/crash.rs`) and I4 (a frontier never passes the durable lsn or a hold). The hold is
//! what RFC 0054's `mine_batch_ordered` unwind arm puts on a frame whose suffix was not mined.
//!
//! It deliberately knows nothing of OTLP, templates, the miner's snapshot format or when a cut
//! happens: payloads and snapshots are opaque bytes, and the caller decides when to stamp,
//! rotate (besides size and age) and truncate. It runs no background thread unless asked for a
//! [`CommitThread`], which leads commits for async waiters ([`Wal::durable`]). All file access
//! goes through [`WalIo`]; [`testing::FaultyIo`] fails or pauses any call for tests.

mod error;
mod format;
mod identity;
mod io;
mod marks;
pub mod metrics;
mod replay;
mod segment;
mod sync;
pub mod testing;
mod turnstile;
mod types;
mod wal;

pub use error::{
    AppendError, Corruption, FailStage, MarkError, OpenError, ReplayError, SegmentError, WalFailure,
};
pub use format::{BadFrame, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN, frame_len};
pub use identity::WalId;
pub use io::{SegmentFile, StdIo, WalIo};
pub use marks::{DiscardReason, DiscardedSnapshot, Marks, ReplayMode};
pub use replay::{Replay, ReplayFrame};
pub use segment::TornTail;
pub use turnstile::{Passing, Ticket, Turn, Turnstile};
pub use types::{Lsn, MAX_TENANT_LEN, TenantId, TenantIdError};
pub use wal::{
    CommitThread, DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_SEGMENT_AGE, DEFAULT_MAX_SEGMENT_BYTES,
    Durable, FrontierOutcome, HoldOutcome, RecoveryReport, Snapshot, SnapshotOutcome, Stamp,
    StampOutcome, TruncateReport, Wal, WalConfig, WalStats,
};
