//! Exactly-once publication on the node (RFC 0058): publish intents in the WAL, recovery that
//! republishes a sealed unit under its own key or drops what landed, and an intent horizon that
//! lets segments holding intents go.

use ourios_node::INTENT_TENANT;
use ourios_sinks::RecordId;
use ourios_sinks::testing::FaultyStore;
use ourios_wal::{Lsn, TenantId};

use crate::support::{
    config, crash, cut, frame_ids, ids_in_store, ingest, inline, lines, marks, post_logs, request,
    start, sweep,
};

/// Every id of `want` is in the store exactly once, and nothing else is.
async fn assert_exactly(store: &FaultyStore, want: &[RecordId]) {
    let have = ids_in_store(store).await;
    let mut want = want.to_vec();
    want.sort_unstable();
    assert_eq!(
        have.keys().copied().collect::<Vec<_>>(),
        want,
        "ids in the store"
    );
    let repeated: Vec<_> = have.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "stored more than once: {repeated:?}");
}

/// RFC0058.4 (reproduction 4 of the issue, and the crash-loop half of 3): a node publishes
/// three frames in two sweeps (intents, then puts) and crashes before any cut stamps them. The restart
/// replays all three, rebuilds each sealed unit from the replayed records, and republishes it
/// under its key: the store already has it, so nothing is written twice. Before publish
/// intents, the restart wrote every record again under new keys.
///
/// Reasoned mutation (not run as a mutant): in `read_intents` (lib.rs), skip pass 1 (`continue` on
/// every intent frame): the replayed records are published again under new keys and the ids are
/// stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_put_and_before_the_stamp_republishes_nothing() {
    // Failpoints are process-wide: share the scenario lock with the tests that arm them.
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = config(dir.path(), inline);
    let node = start(cfg.clone(), &store).await;
    let mut want = Vec::new();
    // Two sweeps, two units; a replay buffers all three frames as one partition, so only the
    // intents can give it the two keys the store has.
    for salt in 0..3 {
        let lsn = ingest(&node, "t", &lines(4, salt)).await;
        want.extend(frame_ids(lsn, 4));
        if salt != 1 {
            sweep(&node).await;
        }
    }
    assert_exactly(&store, &want).await;
    assert_eq!(marks(&node, "t").frontier, Lsn::ZERO, "no cut stamped them");
    let puts = store.puts_ok_with_prefix("records/");
    crash(node).await;

    let node = start(cfg.clone(), &store).await;
    assert_exactly(&store, &want).await;
    assert_eq!(
        store.puts_ok_with_prefix("records/"),
        puts,
        "the republish found every unit under its key"
    );
    assert_eq!(node.recovery.mined, 3, "{:?}", node.recovery);
    assert!(node.recovery.intents_resealed >= 1, "{:?}", node.recovery);
    assert_eq!(node.recovery.pre_intent_records, 0, "{:?}", node.recovery);
    assert!(marks(&node, "t").frontier >= Lsn(want.last().unwrap().lsn));
    node.shutdown().await.unwrap();
    assert_exactly(&store, &want).await;
}

/// RFC0058.5: an intent that landed. Frames A (one line) and B (two lines) are mined; the
/// tenant's frontier is held below B (as a panic that escapes `mine_batch_ordered` holds it),
/// so a cut puts all three records as one unit and stamps the frontier at A, just below the
/// hold: the landed unit names records above the frontier. After a crash the restart reads the
/// unit's intent, sees a record at or below the frontier (it landed), and drops B's records
/// when B is replayed. Every id once, and the recovery cut stamps B.
///
/// Reasoned mutation (not run as a mutant): in `read_intents` (pass 1 of recovery), call
/// `expect_sealed` for a landed intent too (drop the `min_lsn() <= frontier` branch): the unit
/// waits for A's record, which is not replayed, so it never completes and holds the frontier below
/// B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_that_landed_drops_its_replayed_records() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = config(dir.path(), inline);
    let node = start(cfg.clone(), &store).await;
    let a = ingest(&node, "t", &lines(1, 1)).await;
    let b = ingest(&node, "t", &lines(2, 2)).await;
    let tenant = ourios_wal::TenantId::new("t").unwrap();
    assert!(matches!(
        node.core.wal().hold(&tenant, b),
        ourios_wal::HoldOutcome::Held { .. }
    ));
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("t"), Some(&a.0), "{report:?}");
    assert_exactly(&store, &[frame_ids(a, 1), frame_ids(b, 2)].concat()).await;
    crash(node).await;

    let node = start(cfg.clone(), &store).await;
    assert_exactly(&store, &[frame_ids(a, 1), frame_ids(b, 2)].concat()).await;
    assert_eq!(marks(&node, "t").frontier, b, "the recovery cut stamped B");
    assert_eq!(node.recovery.intents_landed, 1, "{:?}", node.recovery);
    assert_eq!(node.recovery.intents_resealed, 0, "{:?}", node.recovery);
    assert_eq!(node.recovery.mined, 1, "only B is above the frontier");
    node.shutdown().await.unwrap();
}

/// RFC0058.6: intent frames do not pin the WAL. With small segments, a tenant's frames and
/// the intents of their publishes fill many segments; once the cuts stamp the tenant past the
/// records, the intent horizon passes the intents and the segments are deleted.
///
/// Reasoned mutation (not run as a mutant): in `run_cut`, drop the `stamp_intent_horizon` call: the
/// intent tenant never gets marks and no segment holding an intent is ever deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intent_frames_are_truncated_once_their_records_are_stamped() {
    // Failpoints are process-wide: share the scenario lock with the tests that arm them.
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = config(dir.path(), |a| {
        inline(a);
        a.wal_segment_bytes = Some(4096);
    });
    let node = start(cfg.clone(), &store).await;
    let mut deleted = 0;
    let mut last = Lsn::ZERO;
    for salt in 0..12 {
        last = ingest(&node, "t", &lines(20, salt)).await;
        deleted += cut(&node).await.segments_deleted;
    }
    let horizon = node
        .core
        .wal()
        .marks(&TenantId::new(INTENT_TENANT).unwrap())
        .frontier;
    assert!(
        horizon > last,
        "the horizon {horizon:?} passed the intents after {last:?}"
    );
    assert!(deleted > 0, "segments holding intents were deleted");
    assert!(
        node.core.wal().segment_paths().len() <= 3,
        "{:?}",
        node.core.wal().segment_paths()
    );
    node.shutdown().await.unwrap();
}

/// The intent tenant is the node's own: a client naming it is refused with 400, naming why, and
/// nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_intent_tenant_is_refused_to_clients() {
    // Failpoints are process-wide: share the scenario lock with the tests that arm them.
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), inline), &store).await;
    let before = node.core.wal().stats().durable_lsn;
    let (status, body) = post_logs(&node, INTENT_TENANT, &request(&lines(1, 0))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("reserved"), "{body}");
    assert_eq!(node.core.wal().stats().durable_lsn, before);
    node.shutdown().await.unwrap();
}

/// RFC0058.12 (upgrade): replayed records no intent names are counted as possible duplicates
/// only on the first recovery of a data directory an earlier release wrote. A fresh node that
/// crashes before its first publish counts none (they were never put); the same WAL without
/// the `publish-intents` file (as an earlier release leaves it) counts every replayed record.
///
/// Reasoned mutation (not run as a mutant): in `Node::start`, drop the
/// `mark_recovered_with_intents` call: the fresh node's restart counts its replayed records as
/// possible duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_intent_replays_are_counted_only_on_an_upgrade() {
    // Failpoints are process-wide: share the scenario lock with the tests that arm them.
    let _scenario = fail::FailScenario::setup();
    for upgrade in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = FaultyStore::new();
        let cfg = config(dir.path(), inline);
        let node = start(cfg.clone(), &store).await;
        ingest(&node, "t", &lines(3, 0)).await;
        crash(node).await;
        if upgrade {
            // What an earlier release leaves: the same WAL, no intents, no file.
            std::fs::remove_file(dir.path().join("publish-intents")).unwrap();
        }

        let node = start(cfg.clone(), &store).await;
        assert_eq!(node.recovery.mined, 1, "{:?}", node.recovery);
        let want = if upgrade { 3 } else { 0 };
        assert_eq!(
            node.recovery.pre_intent_records, want,
            "upgrade={upgrade}: {:?}",
            node.recovery
        );
        assert!(dir.path().join("publish-intents").exists());
        node.shutdown().await.unwrap();
    }
}
