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

/// A waker that counts its wakes, for polling futures by hand.
#[derive(Debug, Default)]
pub(crate) struct CountingWaker {
    wakes: std::sync::Mutex<u64>,
    woken: std::sync::Condvar,
}

impl std::task::Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        *self.wakes.lock().unwrap() += 1;
        self.woken.notify_all();
    }
}

impl CountingWaker {
    /// Wakes so far.
    pub(crate) fn wakes(&self) -> u64 {
        *self.wakes.lock().unwrap()
    }

    /// Blocks until there have been more than `seen` wakes; panics after a minute (a lost
    /// wake-up would otherwise hang the test).
    pub(crate) fn wait_past(&self, seen: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut wakes = self.wakes.lock().unwrap();
        while *wakes <= seen {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(!left.is_zero(), "no wake-up within a minute");
            wakes = self.woken.wait_timeout(wakes, left).unwrap().0;
        }
    }
}

/// Polls `future` once with `waker`.
pub(crate) fn poll_once<F: std::future::Future + Unpin>(
    future: &mut F,
    waker: &Arc<CountingWaker>,
) -> std::task::Poll<F::Output> {
    let waker = std::task::Waker::from(Arc::clone(waker));
    std::pin::Pin::new(future).poll(&mut std::task::Context::from_waker(&waker))
}
