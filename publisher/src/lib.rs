//! The publish protocol: where the ownership rules of RFC 0054 meet the sinks.
//!
//! `PublishCoordinator` builds every `Drained` empty first and fills it as the takes happen
//! (`drain_aged`, `drain_all`), and `write_ordered` writes a tenant's audit events before its
//! records, publishing only the tenants whose audit is durable (RFC 0056). The publisher thread
//! publishes partitions the encode workers detach, each under `catch_unwind`, and is respawned
//! when it dies. Proves RFC0054.1, RFC0054.3 and RFC0056.1-.2 (see `rfcs/`).
//!
//! It knows nothing of HTTP or the WAL: frontiers and snapshots are the node's business.

mod coordinator;
mod failures;
pub mod metrics;
mod publisher;

pub use coordinator::{PublishCoordinator, SweepDrained, TenantVerdict, WriteVerdict};
pub use failures::{FailedScope, FailureLog};
pub use publisher::{DEFAULT_QUEUE_BYTES, Detached, PublisherConfig};
