//! The encode pool and `mine_batch_ordered` under panics (RFC 0054 §9.7 legs U.5, U.7, U.8).

use ourios_node::metrics::{
    ENCODE_WORKER_RESPAWNS, ENCODE_WORKER_SPAWN_FAILURES, INGEST_ENCODE_FALLBACK,
    INGEST_ENCODE_QUEUE_FULL, MINE_PANICS,
};
use ourios_sinks::testing::FaultyStore;

use crate::support::*;

/// U.5: an encode worker panics in its encode loop after the request was acknowledged — held
/// at the failpoint with three of the frame's ten records appended and its batch guard
/// outstanding. A cut that begins meanwhile waits in `quiesce_encodes` instead of reading the
/// pool as idle; when the worker panics, its `RecoverableBatch` requeues the unappended
/// remainder before the guard reports and decrements, so the cut's drain takes all ten records
/// and its stamp is over durable data only; having drained them, it clears the latch the
/// panic set. The respawn is counted. The wait is observed, not inferred: the test goes on
/// only once the barrier counts the cut as blocked in a quiesce, and then the cut has neither
/// finished nor moved the frontier.
///
/// Reasoned mutation (not run as a mutant): make `pool::BufferOnly::requeue` drop its items instead
/// of calling `buffer_only` and the remainder never comes back: ids of frame `a` are missing. Fails
/// if (reasoned; the barrier's own tests run the mutant): the quiesces returned at once; the cut
/// would never be seen blocked and the wait times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_worker_panic_requeues_remainder_and_quiesce_waits() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), through_the_pool), &store).await;
    let barrier = node.core.barrier();
    let respawns = metric(&node, ENCODE_WORKER_RESPAWNS, &[]).await;

    let gate = FailGate::panic_at("node::worker::encode", 3);
    let a = ingest(&node, "t", &lines(10, 1)).await;
    gate.reached().await;
    assert_eq!(
        barrier.stats().encodes_outstanding,
        1,
        "the worker holds the batch"
    );

    let cadence = node.cadence.clone();
    let held = tokio::spawn(async move { cadence.cut_now().await });
    wait_until("the cut is blocked in a quiesce", || {
        barrier.stats().waiting == 1
    })
    .await;
    assert!(
        !held.is_finished(),
        "the cut cannot finish while the worker's batch is outstanding"
    );
    assert_eq!(marks(&node, "t").frontier, ourios_wal::Lsn(0));
    assert_eq!(barrier.stats().encodes_outstanding, 1);
    gate.release();
    let report = held_cut("the cut", held).await;
    assert_eq!(
        missing(&store, &frame_ids(a, 10)).await,
        vec![],
        "the remainder was requeued before the cut drained"
    );
    assert_eq!(report.stamped.get("t"), Some(&a.0), "{report:?}");
    assert_frontier_only_over_durable(&node, &store, "t", &[(a, 10)]).await;
    // The panic reported to the latch before the cut's capture (the cut was waiting for the
    // batch), and the cut drained what it requeued: this cut clears it.
    assert!(report.latch_cleared, "{report:?}");
    assert!(barrier.latch().capture().is_clear());
    assert_eq!(
        metric(&node, ENCODE_WORKER_RESPAWNS, &[]).await,
        respawns + 1.0
    );
    assert_eq!(barrier.stats().waiting, 0, "the cut left its quiesce");
    node.shutdown().await.unwrap();
}

/// U.7: a submit after an encode worker panicked is published, never dropped: frame `b` is
/// queued while the worker is held mid-batch and frame `c` is acknowledged after the panic;
/// the respawned worker appends both (no `buffer_only` fallback was needed), and the cut
/// publishes all three frames and stamps the frontier only over them.
///
/// Reasoned mutation (not run as a mutant): in `pool::supervise`, treat an exit by panic like a
/// normal one (no respawn) and the pool disconnects: `c` goes through the `buffer_only` fallback,
/// which is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_submit_after_worker_panic_is_published() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), through_the_pool), &store).await;
    let barrier = node.core.barrier();
    let fallback = metric(&node, INGEST_ENCODE_FALLBACK, &[]).await;

    let gate = FailGate::panic_at("node::worker::encode", 2);
    let a = ingest(&node, "t", &lines(6, 1)).await;
    gate.reached().await;
    let b = ingest(&node, "t", &lines(5, 2)).await;
    gate.release();
    wait_until("the worker panicked", || {
        !barrier.latch().capture().is_clear()
    })
    .await;
    let c = ingest(&node, "t", &lines(4, 3)).await;

    cut_publishes_frames(&node, &store, "t", &[(a, 6), (b, 5), (c, 4)]).await;
    assert_eq!(
        metric(&node, INGEST_ENCODE_FALLBACK, &[]).await,
        fallback,
        "the respawned worker took them"
    );
    node.shutdown().await.unwrap();
}

/// A pool that loses its last worker for good: the worker panics while frame `b` waits in the
/// queue, and its respawn fails (no thread to be had). The supervisor ends, disconnects the
/// pool and requeues `b` into the record buffer instead of dropping it with the receiver;
/// frame `c`, acknowledged afterwards, takes the fallback. Every id of the three frames is
/// stored and the frontier passes only durable data.
///
/// Fails without `SupervisorEnd` (the supervisor's old `expect` on the respawn unwinds it,
/// the last reference to the receiver goes, and the queued batch `b` is dropped: its ids are
/// missing while the frontier passes them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_respawn_fails_requeues_its_queue() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), through_the_pool), &store).await;
    let fallback = metric(&node, INGEST_ENCODE_FALLBACK, &[]).await;
    let failures = metric(&node, ENCODE_WORKER_SPAWN_FAILURES, &[]).await;

    let gate = FailGate::panic_at("node::worker::encode", 2);
    let a = ingest(&node, "t", &lines(6, 1)).await;
    gate.reached().await;
    let b = ingest(&node, "t", &lines(5, 2)).await;
    fail::cfg("node::pool::spawn", "return").unwrap();
    gate.release();
    bounded("the respawn failed", async {
        while metric(&node, ENCODE_WORKER_SPAWN_FAILURES, &[]).await == failures {
            tokio::task::yield_now().await;
        }
    })
    .await;
    let c = ingest(&node, "t", &lines(4, 3)).await;
    fail::remove("node::pool::spawn");

    cut_publishes_frames(&node, &store, "t", &[(a, 6), (b, 5), (c, 4)]).await;
    assert_eq!(
        metric(&node, ENCODE_WORKER_SPAWN_FAILURES, &[]).await,
        failures + 1.0
    );
    assert_eq!(
        metric(&node, INGEST_ENCODE_FALLBACK, &[]).await,
        fallback + 2.0,
        "b requeued from the queue, c through the fallback"
    );
    node.shutdown().await.unwrap();
}

/// U.8: the miner panics on the fourth record of an eight-record frame, three ways: handed to
/// the encode pool, handed to the sink in place on the async worker (a small request's way),
/// and with no pool (`encode_workers = 0`). The request is acknowledged (200: the frame is
/// durable); the three mined records reach the sink, the fourth line is kept whole under the
/// overflow template with a `record_quarantined` event naming the panic, the tenant's miner
/// starts again and mines the other four. Nothing is held: the next cut stamps past the frame,
/// and every line of the three frames rebuilds from the store, each id once. A restart then
/// republishes nothing.
///
/// Fails if (reasoned) the prefix `submit` moves below the panic handling (the pool branch's
/// prefix goes missing), if the panicking line is dropped instead of kept whole (its id is
/// missing while the frontier passes it), or if the frame is held (the cut stops below it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_mine_batch_ordered_panic_keeps_prefix_every_handoff() {
    let _scenario = fail::FailScenario::setup();
    for (name, way) in HANDOFFS {
        let dir = tempfile::tempdir().unwrap();
        let store = FaultyStore::new();
        let cfg = config(dir.path(), way);
        let node = start(cfg.clone(), &store).await;
        let panics = metric(&node, MINE_PANICS, &[]).await;

        let a = ingest(&node, "t", &lines(5, 1)).await;
        assert_eq!(cut(&node).await.stamped.get("t"), Some(&a.0));

        fail::cfg("node::mine::record", "3*off->1*panic->off").unwrap();
        let (status, body) = post_logs(&node, "t", &request(&lines(8, 2))).await;
        assert_eq!(
            status, 200,
            "{name}: the durable frame is acknowledged: {body}"
        );
        let b = node.core.wal().stats().durable_lsn;
        assert_eq!(marks(&node, "t").hold, None, "{name}: nothing held");
        assert_eq!(metric(&node, MINE_PANICS, &[]).await, panics + 1.0);

        let c = ingest(&node, "t", &lines(4, 3)).await;
        let report = cut(&node).await;
        assert_eq!(report.stamped.get("t"), Some(&c.0), "{name}: {report:?}");
        let frames = [
            (a, 5, lines(5, 1)),
            (b, 8, lines(8, 2)),
            (c, 4, lines(4, 3)),
        ];
        let stored = records_with_bodies(&store).await;
        let counts = ids_in_store(&store).await;
        for (lsn, n, sent) in &frames {
            for (id, line) in frame_ids(*lsn, *n).into_iter().zip(sent) {
                assert_eq!(counts.get(&id), Some(&1), "{name}: {id:?} once");
                let (_, rebuilt) = &stored[&("t".to_owned(), id)];
                assert_eq!(rebuilt, line, "{name}: {id:?} rebuilds");
            }
        }
        let (kept, _) = &stored[&("t".to_owned(), frame_ids(b, 8)[3])];
        assert_eq!(kept.template_id, 0, "{name}: the overflow template");
        assert_eq!(kept.body.as_deref(), Some(lines(8, 2)[3].as_str()));
        let events = ourios_sinks::read_audit_events(store.inner(), "")
            .await
            .unwrap();
        let quarantined: Vec<_> = events
            .iter()
            .filter_map(|(_, e)| match &e.kind {
                ourios_sinks::AuditKind::RecordQuarantined {
                    record_id, error, ..
                } => Some((*record_id, error.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(quarantined.len(), 1, "{name}: {quarantined:?}");
        assert_eq!(quarantined[0].0, frame_ids(b, 8)[3]);
        assert!(
            quarantined[0].1.contains("miner panicked"),
            "{quarantined:?}"
        );
        assert_frontier_only_over_durable(&node, &store, "t", &[(a, 5), (b, 8), (c, 4)]).await;

        // A restart republishes nothing: every frame is at or below the frontier.
        crash(node).await;
        let node = start(cfg.clone(), &store).await;
        cut(&node).await;
        let after = ids_in_store(&store).await;
        assert!(after.values().all(|n| *n == 1), "{name}: {after:?}");
        assert_eq!(after.len(), counts.len());
        node.shutdown().await.unwrap();
    }
}

/// Proves a request of at most `--inline-ingest-bytes` goes to the sink in place and a larger
/// one to the encode pool. The encode worker is held at its failpoint before it appends
/// anything. A small request's records are in the record buffers when its ingest returns,
/// though the worker never moved: they went to the sink on the async worker. A larger
/// request's batch reaches the held worker and its records are not buffered until it is
/// released; then a cut publishes both frames, every id once.
///
/// Mutation check (each tried): hand every frame to the pool (`inline` in
/// `mine_batch_ordered` only without a pool) and the first assertion fails, nothing buffered
/// while the worker is held; ignore the limit, every request in place, and the gate is never
/// reached: its wait times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_request_is_handed_to_the_sink_in_place_a_large_one_to_the_pool() {
    use ourios_sinks::Tenant;
    use prost::Message;
    let _scenario = fail::FailScenario::setup();
    let (small, large) = (lines(5, 1), lines(80, 2));
    let limit = 2 * request(&small).encoded_len();
    assert!(request(&large).encoded_len() > 2 * limit);
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| a.inline_ingest_bytes = Some(limit)),
        &store,
    )
    .await;
    let gate = FailGate::hold_at("node::worker::encode", 0);

    let a = ingest(&node, "t", &small).await;
    assert_eq!(
        node.core.records().buffered_ids(&Tenant::new("t")),
        frame_ids(a, 5),
        "the small request's records were buffered on the ingest path"
    );

    let b = ingest(&node, "t", &large).await;
    gate.reached().await;
    assert_eq!(
        node.core.records().buffered_ids(&Tenant::new("t")),
        frame_ids(a, 5),
        "the large request's records wait for the held encode worker"
    );
    gate.release();
    wait_until("the worker appended the large request's records", || {
        node.core.records().buffered_ids(&Tenant::new("t")).len() == 85
    })
    .await;
    cut_publishes_frames(&node, &store, "t", &[(a, 5), (b, 80)]).await;
    let counts = ids_in_store(&store).await;
    for id in frame_ids(a, 5).into_iter().chain(frame_ids(b, 80)) {
        assert_eq!(counts.get(&id), Some(&1), "{id:?} stored once");
    }
    node.shutdown().await.unwrap();
}

/// A panic between the detach and the hand-over to the publisher loses nothing: the worker's
/// third record detaches its partition and the worker panics before `enqueue` (failpoint).
/// The partition is owned by the batch `append` returned, which requeues it as it unwinds; the
/// worker's own batch requeues the records it had not appended; the next cut publishes every
/// id of the frame exactly once and stamps it.
///
/// Fails when `append` hands detached partitions back as a plain `Vec` (as it did): the
/// unwind drops the partition, its records are neither buffered nor stored, and the cut
/// misses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_between_detach_and_hand_over_requeues_the_detached_partition() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), worker_detaching_every_record), &store).await;
    let barrier = node.core.barrier();
    fail::cfg("node::pool::hand_off", "2*off->1*panic->off").unwrap();
    let a = ingest(&node, "t", &lines(6, 1)).await;
    wait_until("the worker panicked at the hand-over", || {
        !barrier.latch().capture().is_clear() && barrier.stats().encodes_outstanding == 0
    })
    .await;
    fail::remove("node::pool::hand_off");
    let report = cut_publishes_frames(&node, &store, "t", &[(a, 6)]).await;
    assert!(report.not_stamped.is_empty(), "{report:?}");
    let counts = ids_in_store(&store).await;
    for id in frame_ids(a, 6) {
        assert_eq!(counts.get(&id), Some(&1), "{id:?} stored once");
    }
    node.shutdown().await.unwrap();
}

/// One encode worker, and a partition target of one byte: every record detaches its own
/// partition at append.
fn worker_detaching_every_record(args: &mut ourios_node::ServeArgs) {
    through_the_pool(args);
    args.partition_target_bytes = Some(1);
}

/// U.7's fallback branch, positively: `submit` finds the pool disconnected (failpoint), so the
/// records go into the buffers through `buffer_only`; the request is still acknowledged, the
/// fallback is counted on `ourios.ingest.encode_fallback`, nothing is published before a
/// sweep or cut (no trigger), and the next cut publishes every record and stamps the frame.
///
/// Fails if (reasoned, not yet run as a mutant): in `EncodePool::submit`, the fallback's
/// `buffer_only` call is dropped; the records are then never published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_u7_submit_on_a_disconnected_pool_buffers_and_acknowledges() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), worker_detaching_every_record), &store).await;
    let fallbacks = metric(&node, ourios_node::metrics::INGEST_ENCODE_FALLBACK, &[]).await;
    fail::cfg("node::pool::disconnected", "return").unwrap();
    let (status, body) = post_logs(&node, "t", &request(&lines(6, 1))).await;
    assert_eq!(status, 200, "acknowledged: {body}");
    fail::remove("node::pool::disconnected");
    let lsn = node.core.wal().stats().durable_lsn;
    assert_eq!(
        metric(&node, ourios_node::metrics::INGEST_ENCODE_FALLBACK, &[]).await,
        fallbacks + 1.0
    );
    assert_eq!(
        node.core
            .records()
            .buffered_ids(&ourios_sinks::Tenant::new("t")),
        frame_ids(lsn, 6),
        "buffered, not published: buffer_only never triggers (even at a 1-byte target)"
    );
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("t"), Some(&lsn.0), "{report:?}");
    assert_eq!(missing(&store, &frame_ids(lsn, 6)).await, vec![]);
    node.shutdown().await.unwrap();
}

/// U.6 with the real encode worker: the worker's batch detaches every record as its own
/// partition (target 1 byte) and hands them to the publisher thread, where the third put
/// panics. That partition's own batch requeues it (once: the worker's guard, which ended
/// normally after the detach, does not touch it), the worker does not panic or respawn, the
/// latch holds the batch's epoch, and the next cut publishes it: every id of the frame is in
/// the store exactly once.
///
/// Fails if (reasoned, not run as a mutant): the worker's guard also requeued what it
/// detached; the record would be in the buffer twice (and in the store twice after the cut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_u6_publisher_panic_on_worker_detached_partition_leaves_worker_guard_alone() {
    use ourios_sinks::Tenant;
    use ourios_sinks::testing::Fault;
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), worker_detaching_every_record), &store).await;
    let barrier = node.core.barrier();
    let respawns = metric(&node, ENCODE_WORKER_RESPAWNS, &[]).await;

    store.on_next_with_prefix("records/", 2, Fault::PanicBeforePut);
    let a = ingest(&node, "t", &lines(8, 1)).await;
    wait_until(
        "the worker's batch and its detached publishes settled",
        || {
            let s = barrier.stats();
            s.publishes_panicked == 1 && s.encodes_outstanding == 0 && s.publishes_outstanding == 0
        },
    )
    .await;
    assert_eq!(store.faults_fired(), 1);
    assert_eq!(
        metric(&node, ENCODE_WORKER_RESPAWNS, &[]).await,
        respawns,
        "the panic was the publisher's: the worker neither panicked nor respawned"
    );
    assert_eq!(barrier.latch().capture().failed_epoch(), Some(0));
    let buffered = node.core.records().buffered_ids(&Tenant::new("t"));
    let lost = missing(&store, &frame_ids(a, 8)).await;
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(
        buffered, lost,
        "the panicking partition is back in the buffer exactly once"
    );

    let report = cut(&node).await;
    assert_eq!(report.stamped.get("t"), Some(&a.0), "{report:?}");
    assert!(report.latch_cleared, "{report:?}");
    let counts = ids_in_store(&store).await;
    for id in frame_ids(a, 8) {
        assert_eq!(counts.get(&id), Some(&1), "{id:?}");
    }
    node.shutdown().await.unwrap();
}

/// Proves a full publisher queue does not stall the runtime's async workers. A small request
/// is mined on the async worker that received it and its records go to the sink from there; at
/// a partition target of one byte each record detaches its partition, which `pool::hand_off`
/// hands to the publisher. Here the publisher is held at its failpoint with the first
/// partition and its queue (one byte) holds one more, so the next records, of this and other
/// tenants' requests, wait for room (counted on `ourios.publisher.budget_waits`). The wait
/// hands each worker's other tasks to another thread (`pool::may_block`): while requests wait,
/// the node still answers `/metrics` and runs a spawned task, and once the publisher is
/// released every request is acknowledged and every record reaches the store, once. Without
/// the hand-off two waiting requests take both of the runtime's workers and nothing else runs
/// until the publisher moves: a watchdog thread then releases it after a minute and the test
/// fails.
/// Mutation check (by hand): call `coordinator.enqueue` in `pool::hand_off` without
/// `may_block` and the watchdog fires.
#[test]
fn a_full_publisher_queue_does_not_stall_the_async_workers() {
    let stalled = held_scenario(
        "publisher::detached::publish",
        ourios_publisher::metrics::PUBLISHER_BUDGET_WAITS,
        |a| {
            a.partition_target_bytes = Some(1);
            a.publish_queue_bytes = Some(1);
        },
        4,
        2.0,
    );
    assert!(
        !stalled,
        "the async workers stalled behind a full publisher queue"
    );
}

/// A full encode queue holds the requests that wait for it, not the runtime: requests larger
/// than `--inline-ingest-bytes` (here every one) are mined on blocking threads and handed to
/// the encode workers. With the worker held at its failpoint with the first batch and the
/// queue holding one more, the next requests (of other tenants: one tenant's frames are mined
/// one at a time) wait for room, counted on `ourios.ingest.encode_queue_full`; the node still
/// runs other tasks, and once the worker is released every request is acknowledged and every
/// record reaches the store, once.
#[test]
fn a_full_encode_queue_holds_requests_not_the_runtime() {
    let stalled = held_scenario(
        "node::worker::encode",
        INGEST_ENCODE_QUEUE_FULL,
        |a| {
            through_the_pool(a);
            a.encode_queue = Some(1);
        },
        4,
        2.0,
    );
    assert!(!stalled, "the wait for the encode queue never ended");
}

/// Proves the encode queue is bounded in bytes as well as in batches: with room for 64 batches
/// but for 1 byte of records, the encode worker held at its failpoint with the first batch keeps
/// that batch's bytes, so the next requests' batches (other tenants') wait for room (counted on
/// `ourios.ingest.encode_queue_full`) though the queue has room in batches; once the worker is
/// released each batch, larger than the whole bound, goes alone, and every request is
/// acknowledged and every record reaches the store, once. Without the byte bound nothing waits
/// and the watchdog ends the wait after a minute: the test fails.
/// Mutation check (tried by hand): submit without taking the batch's bytes from the budget (a
/// permit of 0 bytes) and the watchdog fires.
#[test]
fn the_encode_queue_is_bounded_in_bytes() {
    let stalled = held_scenario(
        "node::worker::encode",
        INGEST_ENCODE_QUEUE_FULL,
        |a| {
            through_the_pool(a);
            a.encode_queue = Some(64);
            a.encode_queue_bytes = Some(1);
        },
        3,
        1.0,
    );
    assert!(!stalled, "no batch waited for room in bytes");
}

/// What the queue tests run: a node (`tweak`ed) on a runtime of 2 workers whose thread at
/// failpoint `held` (the encode worker's, or the publisher's) is held there with the first
/// request's first item; `more` requests of other tenants (one tenant's frames are mined one at
/// a time) sent behind it, and a wait until the counter `waits_on` has counted `waits` more.
/// While they wait, a spawned task still runs; then the thread is released, every request is
/// acknowledged and every record reaches the store, once. Returns whether a watchdog had to
/// release it after a minute because the wait never ended.
fn held_scenario(
    held: &str,
    waits_on: &str,
    tweak: impl FnOnce(&mut ourios_node::ServeArgs),
    more: usize,
    waits: f64,
) -> bool {
    use std::sync::Arc;
    use std::time::Duration;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _scenario = fail::FailScenario::setup();
    let gate = FailGate::hold_at(held, 0);
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let stalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (gate, stalled) = (Arc::clone(&gate), Arc::clone(&stalled));
        std::thread::spawn(move || {
            if finished.recv_timeout(Duration::from_secs(60)).is_err() {
                // SeqCst: a flag read by the test's loop; nothing else depends on it.
                stalled.store(true, std::sync::atomic::Ordering::SeqCst);
                gate.release();
            }
        })
    };
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = FaultyStore::new();
        let node = Arc::new(start(config(dir.path(), tweak), &store).await);
        let full = metric(&node, waits_on, &[]).await;
        let send = |salt: usize| {
            let node = Arc::clone(&node);
            let tenant = format!("t{salt}");
            tokio::spawn(async move { ingest(&node, &tenant, &lines(5, salt)).await })
        };
        let mut requests = vec![send(0)];
        gate.reached().await;
        requests.extend((1..=more).map(send));
        while metric(&node, waits_on, &[]).await < full + waits
            && !stalled.load(std::sync::atomic::Ordering::SeqCst)
        {
            tokio::task::yield_now().await;
        }
        // Requests wait for room, and the runtime still runs other tasks.
        tokio::spawn(async {}).await.unwrap();
        let _ = done.send(());
        gate.release();
        let mut want = Vec::new();
        for r in requests {
            want.extend(frame_ids(r.await.unwrap(), 5));
        }
        cut(&node).await;
        let stored = ids_in_store(&store).await;
        for id in &want {
            assert_eq!(stored.get(id), Some(&1), "{id:?} is in the store once");
        }
        Arc::into_inner(node).unwrap().shutdown().await.unwrap();
    });
    watchdog.join().unwrap();
    stalled.load(std::sync::atomic::Ordering::SeqCst)
}
