//! The one integration-test binary of `ourios-wal`.

mod append;
mod common;
mod faults;
mod marks;
mod recovery;
mod replay;
mod rotation;
mod tenant;
mod truncate;
