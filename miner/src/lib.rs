//! Drain-derived template mining, one miner per tenant.
//!
//! Each log line is tokenized (whitespace runs kept exactly), masked (numbers, hex, UUIDs, IPv4
//! and IPv6 addresses, timestamps, paths become typed holes), and routed down a fixed-depth
//! prefix tree (token count, then the first tokens) to the most similar cluster of its length;
//! a line at or above the similarity threshold joins it, widening the differing slots to
//! wildcards, and any other line founds a new template. Every record carries the
//! content-addressed [`TemplateKey`] of its template text (and, as lineage, the miner's template
//! id and version) and the parameters that rebuild the line byte for byte; a low-confidence
//! parse also keeps the body. Every template change (creation or widening) emits exactly one
//! [`AuditEvent`] with the tenant, a per-tenant sequence number and a timestamp from an
//! injectable [`Clock`]: there is no silent merge. A record whose key this miner has not yet
//! defined in this process (its template came from a snapshot or from regeneration) carries a
//! `TemplateDefined` event, so every key a record names has a definition. State snapshots are versioned and
//! checksummed, and regeneration-only mining advances the state without emitting anything.
//!
//! Criteria this crate proves (tests in `tests/it`): same input gives the same ids and events;
//! reconstruction is exact; snapshot, restore and continue equals an uninterrupted run; every
//! widening emits an event; regeneration-only mining emits nothing and reaches the same state;
//! a corrupt snapshot is detected; a clock before the epoch or beyond `i64` nanoseconds is
//! representable (what RFC0056.2's derive failure needs); a panic while mining leaves the mined
//! prefix with the caller and the state at that prefix (what `mine_batch_ordered` needs).
//!
//! Deliberately not here: storage (snapshot bytes go to whoever persists them; the WAL decides
//! which frames are skipped, regenerated or mined), threads and locks (a miner is `&mut`), and
//! audit durability or partitioning (the sinks derive partitions from the timestamps).

mod audit;
mod clock;
mod cluster;
mod config;
mod drain;
mod fingerprint;
mod key;
mod mask;
mod miner;
mod params;
mod snapshot;
mod template;
mod tokens;

pub use audit::{AuditEvent, AuditEventKind};
pub use clock::{Clock, FixedClock, SystemClock};
pub use cluster::MinerCluster;
pub use config::{
    ConfigError, DEFAULT_DEPTH, DEFAULT_LOW_CONFIDENCE_BELOW, DEFAULT_MAX_CHILDREN,
    DEFAULT_MAX_TEMPLATES, DEFAULT_SIMILARITY_THRESHOLD, MinerConfig,
};
pub use key::TemplateKey;
pub use mask::{MaskKind, classify};
pub use miner::{Mined, MinedRecord, TenantMiner};
pub use params::{Params, ParamsIter};
pub use snapshot::{SNAPSHOT_FORMAT_VERSION, SnapshotError};
pub use template::{
    MAX_MINED_LINE_BYTES, ReconstructError, SEPARATOR_WILDCARD, TOKEN_WILDCARD, Template,
    TemplateParseError,
};
