//! Metric names this crate records (DESIGN.md §9). The README lists every one.

/// Counter: requests refused before anything was written, label `status` (the HTTP status, or
/// the gRPC code's name in lower case for OTLP/gRPC).
pub const INGEST_REFUSED: &str = "ourios.ingest.refused";
/// Counter: requests acknowledged (their frame is durable in the WAL).
pub const INGEST_REQUESTS: &str = "ourios.ingest.requests";
/// Counter: record times replaced so the record has a place in the store, label `reason`
/// (`receive_time`: a request whose records had neither time nor observed time, counted once
/// per request; `time_out_of_range`, `observed_out_of_range`, `no_usable_time`: per record
/// mined, so a replay counts again). The original value is kept as an attribute.
pub const TIME_SUBSTITUTED: &str = "ourios.ingest.time_substituted";
/// Counter: log records acknowledged.
pub const INGEST_RECORDS: &str = "ourios.ingest.records";
/// Counter: batches that found the encode pool disconnected and went into the record buffer
/// through `buffer_only` (RFC 0054 §9.5).
pub const INGEST_ENCODE_FALLBACK: &str = "ourios.ingest.encode_fallback";
/// Counter: mined batches that found the encode queue full and waited for room (the encode
/// workers are behind the miners; requests wait for them before they are acknowledged).
pub const INGEST_ENCODE_QUEUE_FULL: &str = "ourios.ingest.encode_queue_full";
/// Gauge: estimated bytes of the mined records queued for or held by the encode workers (bounded
/// by `--encode-queue-bytes`; one batch larger than the bound goes alone).
pub const INGEST_ENCODE_QUEUE_BYTES: &str = "ourios.ingest.encode_queue_bytes";
/// Histogram: seconds from request arrival to acknowledgement.
pub const INGEST_ACK_SECONDS: &str = "ourios.ingest.ack_seconds";
/// Counter: requests that found `max_inflight_bytes` taken and waited for room before decoding.
pub const INGEST_BYTES_WAITS: &str = "ourios.ingest.bytes_waits";
/// Gauge: bytes taken from `max_inflight_bytes`: the decompressed bodies of the requests being
/// decoded, appended and mined, and what is already set aside for the first one waiting.
pub const INGEST_INFLIGHT_BYTES: &str = "ourios.ingest.inflight_bytes";
/// Gauge: bytes the node's allocations hold (jemalloc's `stats.allocated`, read every second;
/// the `ourios-node` binary only).
pub const MEMORY_ALLOCATED: &str = "ourios.memory.allocated_bytes";
/// Gauge: bytes of memory the allocator keeps resident (jemalloc's `stats.resident`: what is
/// allocated, its metadata, and freed pages not yet returned to the system).
pub const MEMORY_RESIDENT: &str = "ourios.memory.resident_bytes";
/// Counter: requests refused (503, `Retry-After`) because the record buffer held its ceiling
/// of publishable bytes.
pub const INGEST_PUSHED_BACK: &str = "ourios.ingest.pushed_back";
/// Counter: panics caught while mining a frame. A miner panic keeps its line whole under the
/// overflow template (with a `record_quarantined` event) and restarts the tenant's miner empty;
/// a panic after a record's `append` (a trigger) costs nothing more.
pub const MINE_PANICS: &str = "ourios.miner.panics";
/// Counter: encode workers respawned after a panic.
pub const ENCODE_WORKER_RESPAWNS: &str = "ourios.encode.worker_respawns";
/// Counter: encode workers that could not be spawned (no thread to be had); not retried. With
/// none left the pool disconnects and mined records go straight to the buffers.
pub const ENCODE_WORKER_SPAWN_FAILURES: &str = "ourios.encode.worker_spawn_failures";
/// Counter: miner snapshots a cut encoded (one per tenant that mined since its installed one).
pub const SNAPSHOTS_ENCODED: &str = "ourios.barrier.snapshots_encoded";
/// Counter: barrier cuts, label `result` (`stamped`, `partial`, `not_stamped`).
pub const CUTS: &str = "ourios.barrier.cuts";
/// Gauge: the epoch latch's failed epoch (`u32::MAX` = clear).
pub const LATCH_FAILED_EPOCH: &str = "ourios.barrier.latch_failed_epoch";
/// Gauge: the epoch latch's generation (`u32::MAX` = sticky, needs a restart).
pub const LATCH_GENERATION: &str = "ourios.barrier.latch_generation";
/// Gauge: the current `barrier_epoch`.
pub const BARRIER_EPOCH: &str = "ourios.barrier.epoch";
/// Counter: frames replayed on start, label `mode` (`skipped`, `regeneration_only`, `normal`).
pub const RECOVERY_FRAMES: &str = "ourios.recovery.frames";
/// Counter: requests refused because they name a new tenant past `max_tenants`.
pub const TENANTS_REFUSED: &str = "ourios.ingest.tenants_refused";
/// Counter: records mined into the overflow template (their tenant holds
/// `max_templates_per_tenant` templates already; the line is kept whole).
pub const TEMPLATE_OVERFLOW: &str = "ourios.miner.template_overflow";
/// Counter: cuts run by recovery (every `RECOVERY_CUT_BYTES` replayed, and once after it).
pub const RECOVERY_CUTS: &str = "ourios.recovery.cuts";
/// Counter: publish intents recovery read above the horizon, label `outcome` (`landed`: their
/// replayed records are dropped; `resealed`: their unit is rebuilt and put again under its key).
pub const RECOVERY_INTENTS: &str = "ourios.recovery.intents";
/// Gauge: publish intents above the horizon (naming records above their tenant's frontier).
pub const INTENTS_LIVE: &str = "ourios.wal.intents_live";
/// Counter: read requests (the Loki endpoints) refused, label `status` (400 for a query the
/// subset does not take, 503 when the store does not answer).
pub const QUERY_REFUSED: &str = "ourios.query.refused";
/// Counter: requests refused by the token check, label `status` (`401` no known token, `403`
/// a token of other tenants, or without `/metrics`; `unauthenticated` / `permission_denied`
/// over gRPC).
pub const AUTH_REFUSED: &str = "ourios.auth.refused";
