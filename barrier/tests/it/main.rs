//! The crate's one integration-test binary: unit tests for every latch and guard rule, cuts and
//! the epoch reset, the byte budget, and proptest state machines against sequential reference models.

mod budget;
mod cuts;
mod guards;
mod latch;
mod sm_barrier;
mod sm_latch;
mod support;
