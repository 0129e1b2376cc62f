//! Metric names this crate records (DESIGN.md §9). The README lists every one.

/// Counter: publisher threads (re)spawned, label `reason` (`start`, `respawn`).
pub const PUBLISHER_SPAWNS: &str = "ourios.publisher.spawns";
/// Counter: detached partitions parked back into the buffers because the queue was
/// disconnected.
pub const PUBLISHER_PARKED: &str = "ourios.publisher.parked";
/// Counter: detached partitions published by the publisher thread, label `outcome`.
pub const PUBLISHER_ITEMS: &str = "ourios.publisher.items";
/// Gauge: items waiting in the publisher queue.
pub const PUBLISHER_QUEUE_DEPTH: &str = "ourios.publisher.queue_depth";
/// Gauge: estimated bytes of the partitions in the publisher queue.
pub const PUBLISHER_QUEUE_BYTES: &str = "ourios.publisher.queue_bytes";
/// Counter: detached partitions that waited for room in the queue's byte bound (ingest slowed
/// to the publisher's pace instead of memory growing).
pub const PUBLISHER_BUDGET_WAITS: &str = "ourios.publisher.budget_waits";
/// Counter: tenants made terminal by a permanent audit failure (RFC 0056).
pub const TENANTS_SET_ASIDE: &str = "ourios.publisher.tenants_set_aside";
