//! The integration tests of `ourios-recoverable`: one binary, one module per concern.

mod batch;
mod drained;
mod fault;
mod model;
mod support;
