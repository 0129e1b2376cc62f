//! RFC0056.1 end to end: a terminal tenant is refused by name while the others are served,
//! and a restart into a repaired store publishes it under regenerated template events.

use ourios_node::Node;
use ourios_sinks::metrics::TENANT_TERMINAL;
use ourios_sinks::testing::{Fault, FaultyStore};
use ourios_wal::Lsn;

use crate::support::*;

/// Drives both tenants to the state RFC0056.1 describes: `good` and `bad` each have a frame
/// acknowledged, the audit store rejects `bad`'s writes permanently, and a cut made `bad`
/// terminal. Returns (good's frame, bad's frame).
async fn make_bad_terminal(node: &Node, store: &FaultyStore) -> (Lsn, Lsn) {
    store.on_prefix("audit/tenant=bad", Fault::Permanent, None);
    let (status, body) = post_logs(node, "good", &request(&lines(5, 1))).await;
    assert_eq!(status, 200, "{body}");
    let good = node.core.wal().stats().durable_lsn;
    let (status, body) = post_logs(node, "bad", &request(&lines(6, 2))).await;
    assert_eq!(status, 200, "{body}");
    let bad = node.core.wal().stats().durable_lsn;

    let report = cut(node).await;
    assert!(node.core.is_terminal("bad"), "{report:?}");
    assert!(!node.core.is_terminal("good"));
    assert_eq!(report.stamped.get("good"), Some(&good.0), "{report:?}");
    assert!(report.not_stamped.contains(&"bad".to_owned()), "{report:?}");
    (good, bad)
}

/// RFC0056.1 end to end: after a permanent audit-write failure for `bad` (through the store),
/// HTTP requests for `bad` get a retryable 503 that names it and write nothing to the WAL;
/// `good` keeps getting 200s and its records publish; `bad`'s frontier does not move while
/// `good`'s does, none of `bad`'s records is in the store, and the terminal gauge names it.
///
/// Reasoned mutation (not run as a mutant): in `core::Core::ingest`, remove the `is_terminal`
/// refusal and `bad`'s POST is acknowledged (200) after it became terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0056_1_terminal_tenant_refused_by_name_others_served() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), |_| {}), &store).await;
    let (good, bad) = make_bad_terminal(&node, &store).await;

    let appends = node.core.wal().stats().appends;
    let (status, body) = post_logs(&node, "bad", &request(&lines(3, 3))).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("`bad`"),
        "the refusal names the tenant: {body}"
    );
    assert_eq!(
        node.core.wal().stats().appends,
        appends,
        "a refused request writes nothing"
    );
    assert_eq!(
        metric(&node, TENANT_TERMINAL, &[("tenant", "bad")]).await,
        1.0,
        "the terminal state is exported"
    );

    let (status, body) = post_logs(&node, "good", &request(&lines(4, 4))).await;
    assert_eq!(status, 200, "{body}");
    let good2 = node.core.wal().stats().durable_lsn;
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("good"), Some(&good2.0), "{report:?}");
    assert_eq!(marks(&node, "good").frontier, good2);
    assert_eq!(
        marks(&node, "bad").frontier,
        Lsn(0),
        "bad's frontier is frozen"
    );
    for (lsn, n) in [(good, 5), (good2, 4)] {
        assert_eq!(missing(&store, &frame_ids(lsn, n)).await, vec![]);
    }
    assert_eq!(
        missing(&store, &frame_ids(bad, 6)).await.len(),
        6,
        "no record of bad is published under its missing events"
    );
    node.shutdown().await.unwrap();
}

/// RFC0056.1 end to end, the restart: with `bad` terminal, the node is shut down, the store
/// repaired and the node restarted on the same data dir and store. Recovery re-mines `bad`'s
/// frames (its frontier never moved), which regenerates its template events; the next cut
/// publishes every record of `bad` with its events in the store (each body rebuilds from the
/// events), `bad` is served again, and `good`'s records are not published a second time.
///
/// Reasoned mutation (not run as a mutant): in `lib::recover`, treat every frame as
/// `RegenerationOnly` (or skip it) and `bad`'s records never reach the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0056_1_restart_into_repaired_store_publishes_terminal_tenant_with_regenerated_events() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = config(dir.path(), |_| {});
    let node = start(cfg.clone(), &store).await;
    let (good, bad) = make_bad_terminal(&node, &store).await;
    let sent_bad = lines(6, 2);
    let final_cut = node.shutdown().await.unwrap();
    assert!(!final_cut.stamped.contains_key("bad"), "{final_cut:?}");

    store.clear_faults();
    let node = start(cfg, &store).await;
    assert!(!node.core.is_terminal("bad"), "a restart clears the state");
    assert!(node.recovery.mined >= 1, "{:?}", node.recovery);
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("bad"), Some(&bad.0), "{report:?}");
    assert_eq!(marks(&node, "bad").frontier, bad);

    let records = records_with_bodies(&store).await;
    for (i, sent) in sent_bad.iter().enumerate() {
        let key = (
            "bad".to_owned(),
            ourios_sinks::RecordId {
                lsn: bad.0,
                index: i as u32,
            },
        );
        let (_, body) = records
            .get(&key)
            .unwrap_or_else(|| panic!("{key:?} is not in the store"));
        assert_eq!(body, sent, "{key:?} rebuilds from its regenerated event");
    }
    let have = ids_in_store(&store).await;
    assert!(
        frame_ids(good, 5).iter().all(|id| have.get(id) == Some(&1)),
        "good's frame was below its frontier: recovery did not publish it again"
    );
    let (status, body) = post_logs(&node, "bad", &request(&lines(2, 9))).await;
    assert_eq!(status, 200, "{body}");
    node.shutdown().await.unwrap();
}

/// A miner clock the test sets: nanoseconds since the epoch, possibly before it.
#[derive(Debug)]
struct SetClock(std::sync::atomic::AtomicI64);

impl ourios_miner::Clock for SetClock {
    fn now_unix_nanos(&self) -> i128 {
        // Relaxed: a test setting read by the miner; nothing else is published through it.
        i128::from(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

async fn start_with_clock(cfg: ourios_node::Config, store: &FaultyStore, nanos: i64) -> Node {
    Node::start(
        cfg,
        ourios_node::NodeOptions {
            store: Some(store.as_dyn()),
            clock: Some(std::sync::Arc::new(SetClock(
                std::sync::atomic::AtomicI64::new(nanos),
            ))),
            install_metrics: true,
            recovery_cut_bytes: None,
            wal_io: None,
        },
    )
    .await
    .expect("node starts")
}

/// RFC0056.2 end to end with a bad miner clock, and its restart leg: a node whose clock reads
/// before the epoch mines tenant `t`'s templates with events no partition can hold, so the cut
/// makes `t` terminal (refused by name, nothing of it in the store); a restart into the same
/// broken clock re-mines the frames and re-enters the terminal state, visibly; a restart with a
/// sound clock publishes every record under regenerated template events.
///
/// Fails if (reasoned, not yet run as a mutant): `write_owned` treats a derive failure as
/// `Retained`; `t` is then never terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0056_2_bad_miner_clock_is_terminal_again_after_a_restart_into_it() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = config(dir.path(), |_| {});
    let before_epoch = -1_000_000_000;

    let node = start_with_clock(cfg.clone(), &store, before_epoch).await;
    let lsn = ingest(&node, "t", &lines(4, 1)).await;
    let report = cut(&node).await;
    assert!(node.core.is_terminal("t"), "{report:?}");
    let (status, body) = post_logs(&node, "t", &request(&lines(2, 2))).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("`t`"), "{body}");
    assert_eq!(missing(&store, &frame_ids(lsn, 4)).await.len(), 4);
    node.shutdown().await.unwrap();

    let node = start_with_clock(cfg.clone(), &store, before_epoch).await;
    cut(&node).await;
    assert!(
        node.core.is_terminal("t"),
        "a restart into a clock that is still broken re-enters the terminal state"
    );
    assert_eq!(missing(&store, &frame_ids(lsn, 4)).await.len(), 4);
    node.shutdown().await.unwrap();

    let node = start_with_clock(cfg, &store, TIME as i64).await;
    let report = cut(&node).await;
    assert!(!node.core.is_terminal("t"), "{report:?}");
    assert_eq!(missing(&store, &frame_ids(lsn, 4)).await, vec![]);
    let rebuilt = records_with_bodies(&store).await;
    for (id, line) in frame_ids(lsn, 4).into_iter().zip(lines(4, 1)) {
        assert_eq!(rebuilt[&("t".to_owned(), id)].1, line);
    }
    node.shutdown().await.unwrap();
}
