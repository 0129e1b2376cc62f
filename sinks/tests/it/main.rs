//! Integration tests of `ourios-sinks` (one binary): every result is read back from the store
//! and counted by record id.

mod audit;
mod common;
mod model;
mod power_loss;
mod quarantine;
mod records;
mod s3;
mod seal;
mod store;
