//! The one integration-test binary of `ourios-wal`.

mod append;
mod common;
mod crash;
mod durable;
mod faults;
mod marks;
mod model;
mod power_loss;
mod recovery;
mod replay;
mod rotation;
mod tenant;
mod truncate;
