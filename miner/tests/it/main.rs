//! Integration tests of `ourios-miner`: determinism, exact reconstruction, audit events for
//! every template change, snapshots, regeneration-only mining and the streaming entry point.

mod audit;
mod determinism;
mod drain;
mod reconstruct;
mod regenerate;
mod snapshot;
mod streaming;
mod support;
