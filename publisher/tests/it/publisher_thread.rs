//! The publisher-thread legs of RFC 0054 §9.7 (U.6, C.4): a panic inside the publisher on a
//! detached batch settles it per partition and the thread keeps serving; a dead publisher is
//! respawned and what was queued is settled; an enqueue on a disconnected queue parks; quiesce
//! and shutdown return.

use std::collections::BTreeSet;
use std::sync::Arc;

use ourios_sinks::testing::Fault;
use ourios_sinks::{Partition, RecordId};

use crate::rig::Rig;

/// Takes every buffered partition out (as a worker's triggers would detach them).
fn detach_all(rig: &Rig) -> Vec<Partition> {
    let mut parts = Vec::new();
    rig.records.drain_all(&mut parts);
    parts
}

/// A worker's view: the partitions detached from one encode batch go to the publisher under
/// that batch's guard, which then ends. Returns the batch's epoch.
fn enqueue_as_one_batch(rig: &Rig, parts: Vec<Partition>) -> u32 {
    let guard = rig.barrier.enter_encode();
    let epoch = guard.epoch();
    rig.coord.enqueue(rig.owned(parts), &guard);
    epoch
}

/// A cut's wait: every encode and publish tagged up to its epoch has settled. Returns the
/// verdict and the cut's epoch.
fn quiesce(rig: &Rig) -> (ourios_barrier::Verdict, u32) {
    let cut = rig.barrier.begin_cut();
    rig.barrier.quiesce_encodes(&cut);
    (rig.barrier.quiesce_publishes(&cut), cut.epoch())
}

/// Waits (at most 30 s, else fails with `why`) until the publisher thread has ended.
fn wait_until_thread_ended(rig: &Rig, why: &str) {
    crate::rig::wait_until(why, || !rig.coord.publisher_alive());
}

fn ids_of(parts: &[Partition]) -> Vec<BTreeSet<RecordId>> {
    parts
        .iter()
        .map(|p| p.ids().into_iter().collect())
        .collect()
}

/// U.6 / C.4: the first detached partition's put panics inside the publisher thread. That
/// partition is requeued into the buffer (settled per partition, through its own
/// `RecoverableBatch`), its epoch is reported to the latch, the verdict for the epoch is not
/// ok, and the thread goes on to publish the second partition. The worker's guard is never
/// touched: it ends normally after the detach.
/// Reasoned mutation (not run as a mutant): in `run`, move `item` out of the `catch_unwind` closure
/// (borrow it instead) and the panicking item is dropped after the unwind: no latch report, verdict
/// reads "failed" not "panicked".
#[test]
fn publisher_panic_on_detached_partition_requeues_it_and_thread_continues() {
    let mut rig = Rig::new();
    rig.append("a", 0, 3);
    rig.append("a", 1, 3);
    // The audit events go first (the publisher flushes them), so the first *record* put panics.
    rig.store
        .on_nth_with_prefix("records/", 0, Fault::PanicBeforePut);
    let parts = detach_all(&rig);
    let ids = ids_of(&parts);
    let epoch = enqueue_as_one_batch(&rig, parts);

    let (verdict, cut_epoch) = quiesce(&rig);
    assert!(
        !verdict.all_ok(cut_epoch),
        "a panicked publish must fail the verdict of its epoch"
    );
    assert_eq!(
        verdict.panicked_publishes(),
        1,
        "exactly one publish panicked"
    );
    assert_eq!(
        rig.barrier.latch().capture().epoch(),
        epoch,
        "the panic reported its epoch to the latch"
    );
    assert!(
        rig.coord.publisher_alive(),
        "the publisher thread must survive an item's panic"
    );
    assert_eq!(rig.coord.publisher_generation(), 1, "no respawn was needed");

    let buffered = rig.buffered("a");
    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    assert!(
        ids[0].is_subset(&buffered),
        "the panicking partition was not requeued"
    );
    assert!(
        ids[1].is_subset(&store),
        "the thread did not continue with the next partition"
    );
    assert!(ids[1].is_disjoint(&buffered));
    rig.publish_all();
    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    assert!(ids.iter().all(|s| s.is_subset(&store)));
}

/// C.4: the publisher thread dies (a panic outside any item). What it held is requeued, what
/// was queued is parked back into the buffers on its way out, the next enqueue finds the queue
/// disconnected, parks its partition and respawns the thread behind the slot mutex; quiesce
/// returns (no guard is left unsettled) and a healthy publish completes.
/// Reasoned mutation (not run as a mutant): delete `DrainOnExit`'s loop and the queued items are
/// dropped with the channel — still requeued by their own `Drop`, but completed as `Failed` rather
/// than `Parked`; delete the respawn in `send` and `publisher_alive` stays false.
#[test]
fn publisher_dead_thread_is_respawned_and_queue_settled() {
    let mut rig = Rig::new();
    for h in 0..3 {
        rig.append("a", h, 2);
    }
    let all: BTreeSet<RecordId> = rig.buffered("a");
    fail::cfg("publisher::thread::die", "1*panic").unwrap();
    let parts = detach_all(&rig);
    enqueue_as_one_batch(&rig, parts);
    let (verdict, cut_epoch) = quiesce(&rig);
    assert!(!verdict.all_ok(cut_epoch));
    fail::remove("publisher::thread::die");

    // Everything is in the buffer or the store: nothing is lost with the dead thread.
    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    let buffered = rig.buffered("a");
    assert!(
        all.iter()
            .all(|id| store.contains(id) || buffered.contains(id)),
        "records lost with the dead publisher"
    );

    // The quiesce above returns once the dying thread's items are settled, which happens during
    // its unwind, just before its receiver goes. Wait (bounded) for the thread to be gone:
    // until then a send can still enter the dying queue (the item is then dropped with it and
    // requeues itself, but nothing respawns).
    wait_until_thread_ended(&rig, "the killed publisher thread never ended");
    // The next detach finds the queue disconnected: it parks and respawns.
    rig.append("a", 5, 2);
    let parts = detach_all(&rig);
    enqueue_as_one_batch(&rig, parts);
    let _ = quiesce(&rig);
    assert!(
        rig.coord.publisher_generation() >= 2,
        "the dead publisher was not respawned"
    );
    assert!(rig.coord.publisher_alive());
    rig.publish_all();
    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    assert!(rig.buffered("a").is_empty());
    assert!(all.is_subset(&store));
}

/// C.4: after shutdown the queue is disconnected; an enqueue parks its partitions back into
/// the buffers (completing the shares as parked, so quiesce returns and the verdict fails
/// closed), and shutdown itself returned.
/// Reasoned mutation (not run as a mutant): in `send`, drop the item on a disconnected queue
/// instead of `park(item)` and the records are missing from the buffer; cargo-mutants: `park`
/// replaced with `()` (the item's own drop then requeues it, but nothing is counted as parked).
#[test]
fn publisher_enqueue_on_disconnected_queue_parks() {
    let mut rig = Rig::new();
    let ids: BTreeSet<_> = rig.append("a", 0, 3).into_iter().collect();
    rig.coord.shutdown();
    let parts = detach_all(&rig);
    assert!(rig.buffered("a").is_empty());
    let counters = crate::rig::Counters::new();
    crate::rig::catching(&counters, || enqueue_as_one_batch(&rig, parts)).unwrap();
    assert_eq!(
        counters.counter(ourios_publisher::metrics::PUBLISHER_PARKED, None),
        1,
        "the partition was parked, not dropped"
    );
    let (verdict, cut_epoch) = quiesce(&rig);
    assert!(
        !verdict.all_ok(cut_epoch),
        "a parked publish is not ok for its epoch"
    );
    assert_eq!(
        rig.buffered("a"),
        ids,
        "the parked partition is back in the buffer"
    );
    assert!(!rig.coord.publisher_alive(), "no respawn after shutdown");
}

/// `ensure_publisher` starts a thread only when none is running: on a live publisher it keeps
/// the generation, after the thread died it respawns it, and the spawns are counted by reason
/// (`start`, then `respawn`).
/// Mutation check (cargo-mutants): delete the `!` of the liveness test in `ensure_publisher`;
/// `==` made `!=` in `spawn_locked`'s reason.
#[test]
fn ensure_publisher_respawns_only_a_dead_thread_and_counts_the_reason() {
    let counters = crate::rig::Counters::new();
    let result = crate::rig::catching(&counters, || {
        let mut rig = Rig::new();
        assert!(rig.coord.ensure_publisher());
        let started = rig.coord.publisher_generation();
        let spawns = ourios_publisher::metrics::PUBLISHER_SPAWNS;
        assert_eq!(
            counters.counter(spawns, Some(("reason", "respawn"))),
            0,
            "the first spawn is a start, not a respawn"
        );
        assert!(rig.coord.ensure_publisher());
        assert_eq!(
            rig.coord.publisher_generation(),
            started,
            "a live publisher is not replaced"
        );
        rig.append("a", 0, 1);
        fail::cfg("publisher::thread::die", "1*panic").unwrap();
        let parts = detach_all(&rig);
        enqueue_as_one_batch(&rig, parts);
        let _ = quiesce(&rig);
        fail::remove("publisher::thread::die");
        wait_until_thread_ended(&rig, "the thread never ended");
        assert!(rig.coord.ensure_publisher());
        assert!(rig.coord.publisher_alive());
        assert_eq!(rig.coord.publisher_generation(), started + 1);
        started
    });
    let started = result.expect("no panic escapes");
    let spawns = ourios_publisher::metrics::PUBLISHER_SPAWNS;
    assert_eq!(
        counters.counter(spawns, Some(("reason", "start"))),
        started,
        "the first spawn is a start"
    );
    assert_eq!(counters.counter(spawns, Some(("reason", "respawn"))), 1);
}

/// `close` ends the publisher without joining it: `ensure_publisher` refuses from then on, the
/// thread ends, and a later enqueue parks its partition back into the buffer.
/// Mutation check (cargo-mutants): `PublishCoordinator::close` replaced with `()`.
#[test]
fn close_stops_the_publisher_and_later_enqueues_park() {
    let mut rig = Rig::new();
    assert!(rig.coord.ensure_publisher());
    rig.coord.close();
    assert!(!rig.coord.ensure_publisher(), "no start after close");
    wait_until_thread_ended(&rig, "the closed thread never ended");
    let ids: BTreeSet<_> = rig.append("a", 0, 2).into_iter().collect();
    let parts = detach_all(&rig);
    enqueue_as_one_batch(&rig, parts);
    let (verdict, cut_epoch) = quiesce(&rig);
    assert!(!verdict.all_ok(cut_epoch));
    assert_eq!(rig.buffered("a"), ids);
}

/// RFC0059.15 on the publisher thread: a detached partition whose put fails (transient) is
/// recorded in the failure log with its tenant under its batch's epoch before the share
/// settles, so the cut that waits for it finds the entry; a partition that publishes records
/// nothing.
///
/// Fails if `run` records an ok outcome (the `!` deleted), records after the settle's
/// requeue has emptied the batch (no tenant named), or records nothing.
#[test]
fn a_failed_detached_publish_is_logged_with_its_tenant() {
    let mut rig = Rig::new();
    rig.append("a", 0, 3);
    rig.append("b", 0, 3);
    rig.store
        .on_prefix("records/tenant=b", Fault::Transient, Some(1));
    let parts = detach_all(&rig);
    let epoch = enqueue_as_one_batch(&rig, parts);
    let (verdict, cut_epoch) = quiesce(&rig);
    assert!(!verdict.all_ok(cut_epoch), "b's put failed");
    assert_eq!(verdict.panicked_publishes(), 0);
    let scope = rig.coord.failures().take_through(epoch);
    assert_eq!(scope.recorded, verdict.failed_publishes(), "{scope:?}");
    assert!(!scope.unattributed, "{scope:?}");
    assert_eq!(
        scope.tenants,
        BTreeSet::from([ourios_sinks::Tenant::new("b")]),
        "only the tenant whose put failed"
    );

    // Published now: nothing more is recorded.
    let parts = detach_all(&rig);
    assert!(!parts.is_empty(), "b's partition was requeued");
    let epoch = enqueue_as_one_batch(&rig, parts);
    let (verdict, cut_epoch) = quiesce(&rig);
    assert!(verdict.all_ok(cut_epoch));
    assert_eq!(rig.coord.failures().take_through(epoch).recorded, 0);
}

/// The publisher thread does not keep its coordinator alive: once the last handle is dropped,
/// without `close`, the coordinator's state is freed at once (the barrier it held is released),
/// its queue's sender with it, and the thread ends. The thread holds the state only while it
/// publishes an item, and none is queued here. Before, the thread held the state strongly, and
/// the state held the thread's sender: neither ever went away.
#[test]
fn dropping_every_handle_frees_the_coordinator_and_ends_its_thread() {
    let rig = Rig::new();
    let crate::rig::Rig {
        barrier,
        coord,
        records,
        rt,
        ..
    } = rig;
    let extra = coord.clone();
    assert!(coord.publisher_alive());
    let held = Arc::strong_count(&barrier);
    drop(coord);
    drop(extra);
    assert_eq!(
        Arc::strong_count(&barrier),
        held - 1,
        "the coordinator's state outlived every handle"
    );
    drop((records, rt));
}

/// Enqueues `parts` on a thread of its own, as a detaching worker does (holding an encode
/// guard), with the counters it bumps recorded locally: the worker, and what it counted.
fn enqueue_on_a_worker(
    rig: &Rig,
    parts: Vec<Partition>,
) -> (
    std::thread::JoinHandle<()>,
    metrics_util::debugging::Snapshotter,
) {
    let recorder = Arc::new(metrics_util::debugging::DebuggingRecorder::new());
    let snapshotter = recorder.snapshotter();
    let guard = rig.barrier.enter_encode();
    let batch = rig.owned(parts);
    let coord = rig.coord.clone();
    let worker = std::thread::spawn(move || {
        metrics::with_local_recorder(&*recorder, || coord.enqueue(batch, &guard));
    });
    (worker, snapshotter)
}

/// How often the worker of [`enqueue_on_a_worker`] waited for room in the byte bound
/// (`ourios.publisher.budget_waits`).
fn budget_waits(snapshotter: &metrics_util::debugging::Snapshotter) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| {
            key.key().name() == ourios_publisher::metrics::PUBLISHER_BUDGET_WAITS
        })
        .map(|(_, _, _, value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

/// RFC0059.17: the publisher queue is bounded in bytes, not only in partitions. With the
/// publisher held inside its first partition's publish and room in the queue for one more
/// partition's bytes, the worker detaching four partitions waits on the third (counted in
/// `ourios.publisher.budget_waits`), the queue never holds more than its bound, and once the
/// publisher goes on every record is published once. Without the byte bound the worker
/// returns at once (the queue holds 64 partitions), and memory grows with the publisher's lag.
///
/// Mutation check (cargo-mutants): `PublishCoordinator::queued_bytes` replaced with `0` (the
/// queue reports no bytes while the worker waits for them).
#[test]
fn a_full_byte_bound_holds_the_detaching_worker_until_the_publisher_takes_room() {
    let mut rig = Rig::with_configs(
        ourios_sinks::RecordSinkConfig {
            target_partition_bytes: 1 << 30,
            ceiling_bytes: 1 << 31,
            ..Default::default()
        },
        ourios_publisher::PublisherConfig {
            queue_bound: 64,
            queue_bytes: 1,
        },
    );
    for h in 0..4 {
        rig.append("a", h, 50);
    }
    let parts = detach_all(&rig);
    assert_eq!(parts.len(), 4);
    let all: BTreeSet<RecordId> = ids_of(&parts).into_iter().flatten().collect();
    let largest = parts.iter().map(Partition::bytes).max().unwrap();

    // The publisher takes the first partition off the queue and stops inside its publish.
    fail::cfg("publisher::detached::publish", "pause").unwrap();
    let (worker, snapshotter) = enqueue_on_a_worker(&rig, parts);

    crate::rig::wait_until("the worker never waited for the byte bound", || {
        budget_waits(&snapshotter) > 0
    });
    // The publisher is paused with one partition in hand and at most one in the queue: the
    // worker cannot get past the one after.
    assert!(
        !worker.is_finished(),
        "the worker went on past a full byte bound"
    );
    // The wait means the bound is taken: a partition waiting in the queue holds bytes. The
    // wait seen may be an early one, for the partition after the first, which the publisher
    // then takes off the queue (its bytes go back) before that partition takes them; so look
    // until the publisher, paused with the first in hand, leaves the second in the queue and
    // the worker waits on the third - from then on the bytes stay held.
    crate::rig::wait_until(
        "the worker waits for room, yet the queue never reports bytes held",
        || rig.coord.queued_bytes() > 0,
    );
    assert!(
        rig.coord.queued_bytes() <= largest,
        "the queue holds {} bytes, more than one partition ({largest})",
        rig.coord.queued_bytes()
    );

    fail::remove("publisher::detached::publish");
    worker.join().unwrap();
    let (verdict, epoch) = quiesce(&rig);
    assert!(verdict.all_ok(epoch));
    assert_eq!(rig.coord.queued_bytes(), 0, "every permit was given back");
    let stored = rig.store_ids();
    let unique: BTreeSet<RecordId> = stored.iter().copied().collect();
    assert_eq!(unique, all, "every detached record is in the store");
    assert_eq!(unique.len(), stored.len(), "and once");
}

/// RFC0059.17, the other side: the default byte bound (`DEFAULT_QUEUE_BYTES`) leaves room for
/// many partitions, so with the publisher held inside its first publish, a worker detaching
/// four small partitions queues them all and goes on without one wait for room; released, the
/// publisher stores every record once. A default of no bytes would admit one partition at a
/// time (a larger one is admitted only into an empty queue) and hold every worker on the
/// publisher's pace.
///
/// Mutation check (cargo-mutants): `DEFAULT_QUEUE_BYTES` as `32 >> 20` (no bytes).
#[test]
fn the_default_byte_bound_queues_many_small_partitions_without_a_wait() {
    let mut rig = Rig::with_configs(
        ourios_sinks::RecordSinkConfig {
            target_partition_bytes: 1 << 30,
            ceiling_bytes: 1 << 31,
            ..Default::default()
        },
        ourios_publisher::PublisherConfig {
            queue_bound: 64,
            ..Default::default()
        },
    );
    for h in 0..4 {
        rig.append("a", h, 50);
    }
    let parts = detach_all(&rig);
    assert_eq!(parts.len(), 4);
    let all: BTreeSet<RecordId> = ids_of(&parts).into_iter().flatten().collect();
    let total: usize = parts.iter().map(Partition::bytes).sum();
    assert!(
        total < ourios_publisher::DEFAULT_QUEUE_BYTES,
        "the partitions ({total} bytes) fit the default bound"
    );

    fail::cfg("publisher::detached::publish", "pause").unwrap();
    let (worker, snapshotter) = enqueue_on_a_worker(&rig, parts);
    crate::rig::wait_until(
        "the worker waited for room under the default byte bound",
        || worker.is_finished(),
    );
    assert_eq!(
        budget_waits(&snapshotter),
        0,
        "no wait for room under the default byte bound"
    );

    fail::remove("publisher::detached::publish");
    worker.join().unwrap();
    let (verdict, epoch) = quiesce(&rig);
    assert!(verdict.all_ok(epoch));
    let stored = rig.store_ids();
    let unique: BTreeSet<RecordId> = stored.iter().copied().collect();
    assert_eq!(unique, all, "every detached record is in the store");
    assert_eq!(unique.len(), stored.len(), "and once");
}
