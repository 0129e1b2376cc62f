//! Every metric this crate emits, by name. Names follow the `ourios.*` registry; the Prometheus
//! exporter turns dots into underscores.

/// Counter: frames acknowledged (their covering sync succeeded).
pub const APPENDS: &str = "ourios.wal.appends";
/// Counter: appends that returned an error, labelled `error.type`
/// (`frame_too_large`, `write_failed`, `sync_failed`, `poisoned`).
pub const APPEND_ERRORS: &str = "ourios.wal.append_errors";
/// Counter: successful group-commit `fdatasync` calls on segment files.
pub const SYNCS: &str = "ourios.wal.syncs";
/// Histogram: frames covered by one group-commit sync (how well commits are shared).
pub const SYNC_BATCH_FRAMES: &str = "ourios.wal.sync_batch_frames";
/// Histogram: seconds one group commit took, from taking the log lock through the write and
/// its `fdatasync` (a rotation on the way included); every frame of the batch waited this long.
pub const COMMIT_SECONDS: &str = "ourios.wal.commit_seconds";
/// Counter: frame bytes written to segment files (headers included).
pub const BYTES: &str = "ourios.wal.bytes";
/// Gauge: segment files currently on disk (sealed plus the active one).
pub const SEGMENTS: &str = "ourios.wal.segments";
/// Counter: segment rotations (by size, age or an explicit `rotate`).
pub const ROTATIONS: &str = "ourios.wal.rotations";
/// Counter: sealed segments deleted by truncation.
pub const SEGMENTS_DELETED: &str = "ourios.wal.segments_deleted";
/// Counter: torn tails truncated on open (newest segment only).
pub const TORN_TAIL_TRUNCATIONS: &str = "ourios.wal.torn_tail_truncations";
/// Counter: bytes cut off by torn-tail truncation on open.
pub const TORN_TAIL_BYTES: &str = "ourios.wal.torn_tail_bytes";
/// Gauge: 1 while the WAL refuses appends after a failed write or sync, else 0.
pub const POISONED: &str = "ourios.wal.poisoned";
/// Gauge per tenant (label `tenant`): the tenant's newest durable lsn minus its frontier `X_t`,
/// in lsns (0 when the frontier has caught up).
pub const TENANT_FRONTIER_LAG: &str = "ourios.wal.tenant_frontier_lag";
/// Gauge per tenant (label `tenant`): the frame lsn the tenant's frontier is held below
/// (0 when there is no hold).
pub const TENANT_HOLD: &str = "ourios.wal.tenant_hold";
/// Counter per tenant (label `tenant`): snapshot files found corrupt or ahead of the frontier on
/// open, and therefore ignored (the tenant replays in full).
pub const SNAPSHOTS_DISCARDED: &str = "ourios.wal.snapshots_discarded";
/// Label key for the tenant of a per-tenant series.
pub const LABEL_TENANT: &str = "tenant";
/// Label key for an error's kind.
pub const LABEL_ERROR_TYPE: &str = "error.type";
