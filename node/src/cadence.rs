//! The age sweep and the barrier task (RFC 0054 §3, §9.6).
//!
//! Each tick runs its step in its own tokio task. A step that panics is counted
//! (`error.type = cadence_panic`) and the loop goes on to the next tick: dropping the step's
//! `Drained` during the unwind requeued what it held. A cancelled step (the runtime going away)
//! ends the loop. The barrier task never skips a tick because the epoch latch is set: the cut
//! proceeds and its verdict and clear decide.

use std::sync::Arc;
use std::time::Duration;

use ourios_barrier::PublishOutcome;
use tokio::sync::{mpsc, oneshot, watch};

use crate::core::{Core, CutReport};

/// What a requested tick reports back.
#[derive(Debug)]
pub enum TickResult<T> {
    /// The step finished.
    Done(T),
    /// The step panicked; the loop continues.
    Panicked,
}

/// Manual triggers for the two loops (tests and shutdown use them; the timers run anyway).
#[derive(Debug, Clone)]
pub struct Cadence {
    pub(crate) sweep: mpsc::Sender<oneshot::Sender<TickResult<()>>>,
    pub(crate) cut: mpsc::Sender<oneshot::Sender<TickResult<CutReport>>>,
}

impl Cadence {
    /// Runs one sweep step now and waits for it. `None` once the loop has ended.
    pub async fn sweep_now(&self) -> Option<TickResult<()>> {
        let (tx, rx) = oneshot::channel();
        self.sweep.send(tx).await.ok()?;
        rx.await.ok()
    }

    /// Runs one cut now and waits for it. `None` once the loop has ended.
    pub async fn cut_now(&self) -> Option<TickResult<CutReport>> {
        let (tx, rx) = oneshot::channel();
        self.cut.send(tx).await.ok()?;
        rx.await.ok()
    }
}

fn count_panic(which: &'static str) {
    ::metrics::counter!(ourios_sinks::metrics::FLUSH_ERRORS, "error.type" => "cadence_panic", "task" => which)
        .increment(1);
}

/// One sweep step: drain what is older than `age`, write it in order, settle the guard.
async fn sweep_step(core: Arc<Core>, age: Duration) {
    // A publisher thread that died with nothing queued after it is otherwise respawned only by
    // the next detach; the cadence brings it back within one sweep period.
    core.coordinator.ensure_publisher();
    let mut drained = core.coordinator.drain_aged(age);
    let verdict = core.coordinator.write_ordered(&mut drained).await;
    let guard = drained.finish();
    crate::core::record_failures(&core.coordinator, guard.epoch(), &verdict);
    guard.complete(if verdict.all_durable() {
        PublishOutcome::Durable
    } else {
        PublishOutcome::Requeued
    });
}

/// The age sweep loop.
pub(crate) async fn sweep_loop(
    core: Arc<Core>,
    every: Duration,
    age: Duration,
    mut manual: mpsc::Receiver<oneshot::Sender<TickResult<()>>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick completes at once: consume it, as the barrier loop does, so the first
    // timed sweep runs one period in and a requested tick right after start is not raced by
    // a timer tick that takes its work.
    interval.tick().await;
    loop {
        let reply = tokio::select! {
            _ = interval.tick() => None,
            Some(reply) = manual.recv() => Some(reply),
            _ = stop.changed() => return,
        };
        let step = tokio::spawn(sweep_step(Arc::clone(&core), age));
        let result = match step.await {
            Ok(()) => TickResult::Done(()),
            Err(e) if e.is_panic() => {
                count_panic("sweep");
                TickResult::Panicked
            }
            // Cancelled: the runtime is going away. End the loop (never spin on shutdown).
            Err(_) => return,
        };
        if let Some(reply) = reply {
            let _ = reply.send(result);
        }
    }
}

/// The barrier loop: a cut every `every`, on WAL rotation, or on request.
pub(crate) async fn barrier_loop(
    core: Arc<Core>,
    every: Duration,
    mut manual: mpsc::Receiver<oneshot::Sender<TickResult<CutReport>>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval.tick().await; // the first tick fires at once; start one period in
    let mut last_segments = core.wal.stats().segments;
    let mut rotation_check = tokio::time::interval(Duration::from_millis(250));
    loop {
        let reply = tokio::select! {
            _ = interval.tick() => None,
            _ = rotation_check.tick() => {
                // A rotation-captured cut: the WAL sealed a segment since the last look.
                let segments = core.wal.stats().segments;
                if segments <= last_segments {
                    last_segments = segments;
                    continue;
                }
                None
            }
            Some(reply) = manual.recv() => Some(reply),
            _ = stop.changed() => return,
        };
        let c = Arc::clone(&core);
        let step = tokio::spawn(async move { c.run_cut().await });
        let result = match step.await {
            Ok(report) => TickResult::Done(report),
            Err(e) if e.is_panic() => {
                count_panic("barrier");
                TickResult::Panicked
            }
            Err(_) => return,
        };
        last_segments = core.wal.stats().segments;
        if let Some(reply) = reply {
            let _ = reply.send(result);
        }
    }
}
