//! The serving node: wires every other crate into one process.
//!
//! OTLP/HTTP ingest validates a request, refuses a terminal tenant, appends to the WAL and
//! acknowledges only after the group fsync; then `mine_batch_ordered` mines the records and hands
//! them to the encode pool. The age sweep and the barrier tasks publish, stamp per-tenant
//! frontiers and truncate the WAL; recovery replays it on start. Proves RFC0054.2 and RFC0054.4
//! and the end-to-end legs of RFC 0056 (see `rfcs/`).
//!
//! It is the only crate that knows HTTP, OTLP, tokio tasks and the configuration file.
