//! The clock audit events are stamped with, injectable so tests can stand before the epoch.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time for audit events, in nanoseconds since the Unix epoch.
///
/// The value is an `i128` so that every instant a clock can report is representable, including
/// instants before 1970 (negative) and beyond what `i64` nanoseconds can hold (after 2262): the
/// audit sink, not the miner, decides that such a timestamp has no partition (RFC0056.2).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, in nanoseconds since 1970-01-01T00:00:00Z; negative before it.
    fn now_unix_nanos(&self) -> i128;
}

/// The system wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_nanos(&self) -> i128 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
            Err(before) => i128::try_from(before.duration().as_nanos()).map_or(i128::MIN, |n| -n),
        }
    }
}

/// A clock stopped at one instant: for tests and replays that need a known timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedClock {
    nanos: i128,
}

impl FixedClock {
    /// A clock that always reads `unix_nanos`.
    pub const fn new(unix_nanos: i128) -> FixedClock {
        FixedClock { nanos: unix_nanos }
    }
}

impl Clock for FixedClock {
    fn now_unix_nanos(&self) -> i128 {
        self.nanos
    }
}
