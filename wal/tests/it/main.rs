//! The one integration-test binary of `ourios-wal`.

mod append;
mod common;
mod crash;
mod faults;
mod marks;
mod model;
mod recovery;
mod replay;
mod rotation;
mod tenant;
mod truncate;
