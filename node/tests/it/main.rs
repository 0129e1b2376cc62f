//! Acceptance tests of the serving node (RFC 0054 §5 and §9.7 legs owned by `node`, RFC 0056
//! end to end, and the OTLP/HTTP and OTLP/gRPC round trips). One binary; failpoints are process-global, so
//! every test holds a `fail::FailScenario` for its whole run, which also serialises them.

mod barrier;
mod cadence;
mod e2e;
mod exactly_once;
mod grpc;
mod hostile;
mod identity;
mod latch;
mod pool;
mod power_loss;
mod recovery;
mod support;
mod terminal;
