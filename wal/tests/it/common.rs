//! Helpers shared by the test modules.

use std::path::Path;
use std::sync::Arc;

use ourios_wal::testing::FaultyIo;
use ourios_wal::{RecoveryReport, ReplayFrame, TenantId, Wal, WalConfig};

/// A tenant id that is known valid.
pub(crate) fn tenant(name: &str) -> TenantId {
    TenantId::new(name).expect("valid tenant")
}

/// A config for tests: no age rotation, given segment size.
pub(crate) fn config(dir: &Path, max_segment_bytes: u64) -> WalConfig {
    let mut config = WalConfig::new(dir);
    config.max_segment_bytes = max_segment_bytes;
    config.max_segment_age = None;
    config
}

/// Opens a WAL with real I/O and 1 MiB segments.
pub(crate) fn open(dir: &Path) -> (Wal, RecoveryReport) {
    Wal::open(config(dir, 1 << 20)).expect("open")
}

/// Opens a WAL over fault-injecting I/O.
pub(crate) fn open_faulty(dir: &Path, max_segment_bytes: u64) -> (Wal, FaultyIo) {
    let io = FaultyIo::std();
    let (wal, _) =
        Wal::open_with_io(config(dir, max_segment_bytes), Arc::new(io.clone())).expect("open");
    (wal, io)
}

/// Every frame a replay yields, panicking on a replay error.
pub(crate) fn replay_all(wal: &Wal) -> Vec<ReplayFrame> {
    wal.replay().collect::<Result<_, _>>().expect("replay")
}

/// A payload that differs per `i`.
pub(crate) fn payload(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i as usize * 31 + k * 7) as u8).collect()
}

/// A temporary directory for one test.
pub(crate) fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}
