//! Recovery that makes progress: a node that crashes again and again, even while it recovers,
//! still advances its frontiers, so each restart replays less rather than everything again.

use ourios_node::{Config, Node, NodeOptions};
use ourios_sinks::testing::FaultyStore;
use ourios_wal::Lsn;

use crate::support::{config, crash, frame_ids, ingest, lines, marks, missing, start};

/// A node that acknowledged `frames` frames of `per_frame` lines of tenant `t`, never cut,
/// and crashed: their lsns.
async fn crashed_with_unstamped_frames(
    cfg: &Config,
    store: &FaultyStore,
    frames: usize,
    per_frame: usize,
) -> Vec<Lsn> {
    let node = start(cfg.clone(), store).await;
    let mut lsns = Vec::new();
    for salt in 0..frames {
        lsns.push(ingest(&node, "t", &lines(per_frame, salt)).await);
    }
    crash(node).await;
    lsns
}

/// Proves a restart cuts once recovery finished: three frames never cut, a crash, a restart
/// that republishes them and stamps them at once, another crash right after, and a third start
/// that replays nothing. Before, nothing cut until the next barrier (30 s by default), so every
/// restart of a crash loop republished every frame above the last stamp again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_cut_stops_a_crash_loop_from_replaying_again() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = config(dir.path(), |_| {});
    let frames = crashed_with_unstamped_frames(&cfg, &store, 3, 4).await;

    let node = start(cfg.clone(), &store).await;
    assert_eq!(node.recovery.mined, 3, "{:?}", node.recovery);
    assert_eq!(node.recovery.cuts, 1, "{:?}", node.recovery);
    assert_eq!(
        marks(&node, "t").frontier,
        frames[2],
        "stamped by the recovery cut"
    );
    crash(node).await;

    let node = start(cfg.clone(), &store).await;
    assert_eq!(
        node.recovery.mined, 0,
        "the second restart replays nothing: {:?}",
        node.recovery
    );
    for lsn in &frames {
        assert_eq!(missing(&store, &frame_ids(*lsn, 4)).await, vec![]);
    }
    node.shutdown().await.unwrap();
}

/// Proves a long recovery cuts as it goes: six frames, a crash, a restart that cuts after
/// every frame's bytes and dies (failpoint) while replaying the fifth, and a last start that
/// replays only what the dead recovery had not stamped. Without the cuts during replay it
/// replays all six.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_cuts_while_replaying_so_a_crash_during_it_keeps_progress() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = config(dir.path(), |_| {});
    let frames = crashed_with_unstamped_frames(&cfg, &store, 6, 3).await;

    fail::cfg("node::recovery::frame", "4*off->1*return->off").unwrap();
    let dead = Node::start(
        cfg.clone(),
        NodeOptions {
            store: Some(store.as_dyn()),
            clock: None,
            install_metrics: true,
            recovery_cut_bytes: Some(1),
            wal_io: None,
        },
    )
    .await;
    assert!(dead.is_err(), "the failpoint stops recovery");
    drop(dead);
    fail::remove("node::recovery::frame");

    let node = start(cfg.clone(), &store).await;
    assert!(
        node.recovery.mined < 6 && node.recovery.mined > 0,
        "the dead recovery's cuts stamped its first frames: {:?}",
        node.recovery
    );
    for lsn in &frames {
        assert_eq!(missing(&store, &frame_ids(*lsn, 3)).await, vec![]);
    }
    node.shutdown().await.unwrap();
}
