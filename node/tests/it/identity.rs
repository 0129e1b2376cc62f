//! Template identity across restarts (DESIGN §12): a record's template key names one text
//! forever, whatever the miner's state after a restart - another configuration, a lost or
//! damaged snapshot, a panic mid-frame - so every acknowledged line rebuilds from the store.

use std::collections::BTreeMap;

use ourios_sinks::RecordId;
use ourios_sinks::testing::FaultyStore;
use ourios_wal::Lsn;

use crate::support::{HANDOFFS, config, cut, ingest, records_with_bodies, start};

/// What a restart between the two rounds does to the miner's saved state.
#[derive(Debug, Clone, Copy)]
enum Restart {
    /// Same flags: the snapshot restores.
    Plain,
    /// `--similarity 0.5`: the snapshot was taken under another configuration and is not used.
    NewSimilarity,
    /// The tenant's snapshot file is deleted.
    SnapshotDeleted,
    /// The tenant's snapshot file is damaged (one byte flipped).
    SnapshotDamaged,
}

/// Asserts every line sent comes back byte for byte from the store alone, by record id.
async fn assert_every_line_rebuilds(store: &FaultyStore, sent: &BTreeMap<RecordId, String>) {
    let have = records_with_bodies(store).await;
    for (id, line) in sent {
        let (_, body) = have
            .get(&("a".to_owned(), *id))
            .unwrap_or_else(|| panic!("record {id} is not in the store"));
        assert_eq!(body, line, "record {id} rebuilds as another line");
    }
}

fn sent_ids(lsn: Lsn, lines: &[&str], into: &mut BTreeMap<RecordId, String>) {
    for (i, l) in lines.iter().enumerate() {
        into.insert(
            RecordId {
                lsn: lsn.0,
                index: i as u32,
            },
            (*l).to_owned(),
        );
    }
}

/// Proves the reproduction of issue "template ids are reused after a restart that cannot use
/// its snapshot": two lines, a graceful stop (the cut installs a snapshot), a restart under
/// each way the snapshot can be lost, a third line of another shape. Under the old
/// `(template_id, version)` join, the third line's template took id 1 again and the first
/// record rebuilt as "gamma delta epsilon zeta 1" (or failed to rebuild); joined on the key,
/// every line rebuilds. The second process's audit sequence numbers continue past the first's
/// rather than restarting at 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_survives_every_restart_that_loses_the_snapshot() {
    let _scenario = fail::FailScenario::setup();
    for restart in [
        Restart::Plain,
        Restart::NewSimilarity,
        Restart::SnapshotDeleted,
        Restart::SnapshotDamaged,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = FaultyStore::new();
        let mut sent = BTreeMap::new();

        let node = start(config(dir.path(), |_| {}), &store).await;
        let first = ["alpha one 1", "beta two words 2"];
        let lsn = ingest(&node, "a", &first.map(String::from)).await;
        sent_ids(lsn, &first, &mut sent);
        let report = node.shutdown().await.unwrap();
        assert_eq!(
            report.stamped.get("a"),
            Some(&lsn.0),
            "{restart:?}: {report:?}"
        );

        let snap = dir.path().join("wal").join("tenants").join("a.snap");
        assert!(
            snap.exists(),
            "{restart:?}: the cut saved a snapshot at {snap:?}"
        );
        match restart {
            Restart::Plain | Restart::NewSimilarity => {}
            Restart::SnapshotDeleted => std::fs::remove_file(&snap).unwrap(),
            Restart::SnapshotDamaged => {
                let mut bytes = std::fs::read(&snap).unwrap();
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0x55;
                std::fs::write(&snap, bytes).unwrap();
            }
        }
        let similarity = matches!(restart, Restart::NewSimilarity).then_some(0.5);
        let node = start(config(dir.path(), |a| a.similarity = similarity), &store).await;
        let second = ["gamma delta epsilon zeta 3", "alpha one 4"];
        let lsn = ingest(&node, "a", &second.map(String::from)).await;
        sent_ids(lsn, &second, &mut sent);
        let report = cut(&node).await;
        assert_eq!(
            report.stamped.get("a"),
            Some(&lsn.0),
            "{restart:?}: {report:?}"
        );
        node.shutdown().await.unwrap();

        assert_every_line_rebuilds(&store, &sent).await;
        assert_seqs_never_reused(&store).await;
    }
}

/// Asserts no audit sequence number names two different events (the audit `seq` must not
/// restart at 1 when the node does).
async fn assert_seqs_never_reused(store: &FaultyStore) {
    let mut by_seq = BTreeMap::new();
    for (seq, event) in ourios_sinks::read_audit_events(store.inner(), "")
        .await
        .unwrap()
    {
        if let Some(old) = by_seq.insert(seq, event.clone()) {
            assert_eq!(old, event, "seq {seq} names two events");
        }
    }
}

/// Proves a panic between the miner handing out a template event and the audit sink taking it
/// costs no definition: the frame's only record creates a template and the failpoint panics
/// before the event is emitted. The line is kept whole (under the overflow template, defined
/// with it) and the tenant's miner starts again; the next frame's record of the same template
/// then defines it again, and every line rebuilds, before and after a restart. Nothing is
/// held: the cut stamps past both frames. Run three ways: records handed to the encode pool,
/// to the sink in place, and with no pool.
///
/// Fails without `miners.reset(tenant)` in the panic arm of `mine_batch_ordered`: the miner
/// still holds the template and counts its key as defined, so the second record is published
/// under a key the store never defines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_a_panic_mid_frame_costs_no_definition() {
    let _scenario = fail::FailScenario::setup();
    for (way, tweak) in HANDOFFS {
        let dir = tempfile::tempdir().unwrap();
        let store = FaultyStore::new();
        let cfg = config(dir.path(), tweak);
        let node = start(cfg.clone(), &store).await;
        fail::cfg("node::mine::record", "1*panic->off").unwrap();
        let first = ingest(&node, "a", &["alpha one 1".to_owned()]).await;
        fail::remove("node::mine::record");
        let lsn = ingest(&node, "a", &["alpha one 2".to_owned()]).await;
        let report = cut(&node).await;
        assert_eq!(
            report.stamped.get("a"),
            Some(&lsn.0),
            "{way}: nothing holds the frontier: {report:?}"
        );
        let mut sent = BTreeMap::new();
        sent_ids(first, &["alpha one 1"], &mut sent);
        sent_ids(lsn, &["alpha one 2"], &mut sent);
        assert_every_line_rebuilds(&store, &sent).await;

        node.shutdown().await.unwrap();
        let node = start(cfg, &store).await;
        cut(&node).await;
        node.shutdown().await.unwrap();
        assert_every_line_rebuilds(&store, &sent).await;
    }
}

/// Proves record ids stay unique when two nodes write one tenant into one store: each node's
/// first frame has lsn 1, so `(record_lsn, record_index)` collide, but every row also carries
/// its WAL's identity (random, kept across a restart), and `(wal_id, lsn, index)` tells them
/// apart. Both nodes mine the tenant independently, and every line still rebuilds from the text
/// its key names (the two miners give one text one key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_two_nodes_one_store_keep_ids_and_keys_apart() {
    let _scenario = fail::FailScenario::setup();
    let store = FaultyStore::new();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let node_a = start(config(dir_a.path(), |_| {}), &store).await;
    let node_b = start(config(dir_b.path(), |_| {}), &store).await;
    let (id_a, id_b) = (node_a.core.wal().id(), node_b.core.wal().id());
    assert_ne!(id_a, id_b, "each WAL draws its own identity");
    let a_lines = ["alpha one 1", "shared line 7"];
    let b_lines = ["gamma delta epsilon zeta 3", "shared line 8"];
    let lsn_a = ingest(&node_a, "a", &a_lines.map(String::from)).await;
    let lsn_b = ingest(&node_b, "a", &b_lines.map(String::from)).await;
    assert_eq!(lsn_a, lsn_b, "both nodes' first frame: the lsns collide");
    node_a.shutdown().await.unwrap();
    node_b.shutdown().await.unwrap();

    let node_a = start(config(dir_a.path(), |_| {}), &store).await;
    assert_eq!(
        node_a.core.wal().id(),
        id_a,
        "the identity survives a restart"
    );
    node_a.shutdown().await.unwrap();

    let events = ourios_sinks::read_audit_events(store.inner(), "")
        .await
        .unwrap();
    let texts = ourios_sinks::template_texts(events.iter().map(|(_, e)| e))
        .unwrap_or_else(|c| panic!("keys naming two texts: {c:?}"));
    let mut rebuilt = BTreeMap::new();
    for r in ourios_sinks::read_records(store.inner(), "").await.unwrap() {
        let text = &texts[&(r.tenant.clone(), r.template_key)];
        let line = match &r.body {
            Some(b) => b.clone(),
            None => ourios_miner::Template::parse(text)
                .unwrap()
                .reconstruct(&r.params)
                .unwrap(),
        };
        let old = rebuilt.insert((r.wal_id, r.id.lsn, r.id.index), line.clone());
        assert!(old.is_none_or(|o| o == line), "one id, two lines");
    }
    let want: BTreeMap<_, _> = a_lines
        .iter()
        .enumerate()
        .map(|(i, l)| ((id_a.0, lsn_a.0, i as u32), (*l).to_owned()))
        .chain(
            b_lines
                .iter()
                .enumerate()
                .map(|(i, l)| ((id_b.0, lsn_b.0, i as u32), (*l).to_owned())),
        )
        .collect();
    assert_eq!(rebuilt, want);
}
