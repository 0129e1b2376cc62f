//! `ourios-testkit`: what the node's process tests, `cargo xtask` and the load generator share,
//! so each exists once.
//!
//! - [`Served`]: a server child (`ourios-node serve`, the load generator's null server) started
//!   with `--ready-file` and handed back once that file names its address: the file, not a log
//!   sentence, is the machine interface. Its stderr is kept for failure messages.
//! - [`http`]: the one HTTP/1.1 client, for one-shot exchanges and for keep-alive load.
//! - [`metrics`]: sums of Prometheus samples.
//! - [`otlp`]: log records and the request around them.
//! - [`procfs`]: CPU time and resident set of a child, from `/proc`.
//!
//! Randomness is `fastrand` (seeded where a run must be repeatable), used directly.

pub mod http;
pub mod metrics;
pub mod otlp;
pub mod procfs;
mod served;

pub use served::{GUARD, Ready, Served};
