//! The age sweep and the barrier task survive panics (RFC0054.2, RFC 0054 §9.7 C.1-C.3, T.4).

use ourios_node::TickResult;
use ourios_sinks::metrics::{FLUSH_ERRORS, SINK_AMBIGUOUS_PUTS};
use ourios_sinks::testing::{Fault, FaultyStore};
use ourios_sinks::{RecordId, Tenant};
use ourios_wal::Lsn;

use crate::support::*;

fn cadence_panics(task: &'static str) -> &'static [(&'static str, &'static str)] {
    match task {
        "sweep" => &[("error_type", "cadence_panic"), ("task", "sweep")],
        _ => &[("error_type", "cadence_panic"), ("task", "barrier")],
    }
}

/// RFC0054.2 (with C.1 and U.11): a record put panics inside a sweep's `write_ordered`; the
/// sweep tick reports `Panicked` and is counted (`error.type=cadence_panic`), the drained
/// records are back in the buffer and not in the store, and the loops keep answering: the next
/// cut publishes every record id, the next sweep runs and publishes, and a later healthy cut
/// stamps the tenant's frontier over all of it. At every step the frontier is only over
/// records that are in the store (I4).
///
/// Reasoned mutation (not run as a mutant): in `cadence::sweep_loop`, turn the `Err(e) if
/// e.is_panic()` arm into `return` and the second `sweep_now` gets `None` ("the sweep loop is
/// running" fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_2_sweep_survives_publish_panic_and_later_cut_publishes() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), inline), &store).await;
    let t = Tenant::new("t");

    let a = ingest(&node, "t", &lines(12, 1)).await;
    let counted = metric(&node, FLUSH_ERRORS, cadence_panics("sweep")).await;
    store.on_prefix("records/", Fault::PanicBeforePut, Some(1));
    assert!(matches!(sweep(&node).await, TickResult::Panicked));
    assert_eq!(
        metric(&node, FLUSH_ERRORS, cadence_panics("sweep")).await,
        counted + 1.0,
        "the panicking sweep step is counted"
    );
    // The unwind requeued the drained partition: every record is buffered again, none is in
    // the store, and the panicking guard reported to the latch.
    assert_eq!(
        node.core.records().buffered_ids(&t),
        frame_ids(a, 12),
        "the drained records are back in the buffer"
    );
    assert!(ids_in_store(&store).await.is_empty());
    assert!(!node.core.barrier().latch().capture().is_clear());
    assert_eq!(marks(&node, "t").frontier, Lsn(0));

    // The barrier loop answers, and its drain publishes what the sweep dropped.
    let report = cut(&node).await;
    assert!(report.published_records >= 12, "{report:?}");
    assert_eq!(missing(&store, &frame_ids(a, 12)).await, vec![]);
    assert_frontier_only_over_durable(&node, &store, "t", &[(a, 12)]).await;

    // The sweep loop answers the next tick too, and publishes.
    let b = ingest(&node, "t", &lines(7, 2)).await;
    assert!(matches!(sweep(&node).await, TickResult::Done(())));
    assert_eq!(missing(&store, &frame_ids(b, 7)).await, vec![]);

    // A later healthy cut stamps the frontier over everything, only over durable data.
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("t"), Some(&b.0), "{report:?}");
    assert_eq!(marks(&node, "t").frontier, b);
    assert_frontier_only_over_durable(&node, &store, "t", &[(a, 12), (b, 7)]).await;
    assert!(node.core.barrier().latch().capture().is_clear());
    node.shutdown().await.unwrap();
}

/// RFC0054.2 with C.2 and T.4: ten consecutive ticks — sweeps and cuts alternating, over two
/// tenants — each hit a panicking record put, half of them after the store accepted the object
/// (the ambiguous case). New frames keep arriving. No tick stamps a frontier over records that
/// are not in the store; after the store heals, every record id is in the store exactly once
/// (RFC 0058: the accepted-then-panicked units are sealed and found under their key, which is
/// stronger than RFC 0054's "one extra object per panic"), and the ambiguous puts are counted.
///
/// Reasoned mutation (not run as a mutant): make `recoverable::RecoverableBatch`'s `Drop` skip
/// `requeue_unsettled` and the records of the panicking puts are never published: ids are missing
/// at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_2_many_consecutive_panicking_ticks_lose_nothing() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), inline), &store).await;
    let ambiguous_before = metric(&node, SINK_AMBIGUOUS_PUTS, &[("consumer", "records")]).await;

    let mut frames: Vec<(&str, Lsn, usize)> = Vec::new();
    let ticks = 10;
    let mut accepted_then_panicked = 0;
    for tick in 0..ticks {
        for tenant in ["t1", "t2"] {
            let n = 3 + tick % 4;
            frames.push((tenant, ingest(&node, tenant, &lines(n, tick)).await, n));
        }
        let fault = if tick % 2 == 0 {
            Fault::PanicBeforePut
        } else {
            accepted_then_panicked += 1;
            Fault::PanicAfterPut
        };
        store.on_prefix("records/", fault, Some(1));
        let panicked = if tick % 3 == 2 {
            matches!(
                bounded("cut", node.cadence.cut_now()).await,
                Some(TickResult::Panicked)
            )
        } else {
            matches!(sweep(&node).await, TickResult::Panicked)
        };
        assert!(panicked, "tick {tick} was meant to panic");
        for tenant in ["t1", "t2"] {
            let mine: Vec<(Lsn, usize)> = frames
                .iter()
                .filter(|(t, _, _)| *t == tenant)
                .map(|(_, l, n)| (*l, *n))
                .collect();
            assert_frontier_only_over_durable(&node, &store, tenant, &mine).await;
        }
    }

    // Healed: one sweep publishes what is buffered and every sealed unit, then a cut stamps.
    assert!(matches!(sweep(&node).await, TickResult::Done(())));
    let report = cut(&node).await;
    assert!(report.cut_ok, "{report:?}");

    let have = ids_in_store(&store).await;
    let want: Vec<RecordId> = frames
        .iter()
        .flat_map(|(_, lsn, n)| frame_ids(*lsn, *n))
        .collect();
    let lost: Vec<&RecordId> = want.iter().filter(|id| !have.contains_key(id)).collect();
    assert!(
        lost.is_empty(),
        "records lost across panicking ticks: {lost:?}"
    );
    assert_eq!(
        have.len(),
        want.len(),
        "only acknowledged ids are in the store"
    );
    // Exactly once (RFC 0058): a unit whose put the store accepted before the call panicked is
    // sealed, republished under its key, and found there; nothing is written twice.
    let repeated: Vec<(&RecordId, &usize)> = have.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "ids stored more than once: {repeated:?}"
    );
    assert!(
        metric(&node, SINK_AMBIGUOUS_PUTS, &[("consumer", "records")]).await
            >= ambiguous_before + accepted_then_panicked as f64,
        "every possibly duplicated put is counted"
    );
    for tenant in ["t1", "t2"] {
        let last = frames
            .iter()
            .filter(|(t, _, _)| *t == tenant)
            .map(|f| f.1)
            .max();
        assert_eq!(Some(marks(&node, tenant).frontier), last, "{report:?}");
    }
    node.shutdown().await.unwrap();
}

/// C.3: a cut that panics — inside its `write_ordered` (between the audit write and the record
/// publish), or after its drain was written but before it stamps, on a manual tick or on a
/// rotation-captured one — reports `Panicked`, is counted, requeues what it had not
/// published, and moves no frontier; the next tick cuts and stamps. The snapshot clauses: a
/// panic before the first install installs no snapshot (no marks, no file); a panic after one
/// leaves the installed snapshot where it was. Here the stamp writes frontiers before
/// snapshots, so `S <= X` holds at every instant (RFC 0054 describes the mirror case `S > X`);
/// a crash and restart then republishes nothing at or below the frontier and loses nothing.
///
/// Reasoned mutation (not run as a mutant): in `core::run_cut`, move the `node::cut::before_stamp`
/// failpoint below the stamp (`wal.stamp`) and the frontier moves on the panicking cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_panicking_cut_requeues_advances_no_frontier_next_tick_cuts() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = || {
        config(dir.path(), |a| {
            inline(a);
            a.wal_segment_bytes = Some(4096);
        })
    };
    let node = start(cfg(), &store).await;
    let t = Tenant::new("t");
    let barrier_panics = || metric(&node, FLUSH_ERRORS, cadence_panics("barrier"));

    // 1. Panic between the audit write and the record publish: the records are requeued.
    let a = ingest(&node, "t", &lines(10, 1)).await;
    let counted = barrier_panics().await;
    fail::cfg("publisher::write_ordered::between", "1*panic->off").unwrap();
    assert!(matches!(
        node.cadence.cut_now().await,
        Some(TickResult::Panicked)
    ));
    assert_eq!(barrier_panics().await, counted + 1.0);
    assert_eq!(node.core.records().buffered_ids(&t), frame_ids(a, 10));
    assert!(ids_in_store(&store).await.is_empty());
    assert_eq!(marks(&node, "t").frontier, Lsn(0));
    let snap_file = dir.path().join("wal").join("tenants").join("t.snap");
    assert_eq!(
        marks(&node, "t").snapshot,
        Lsn(0),
        "no install before the first"
    );
    assert!(!snap_file.exists());

    // 2. Panic after the drain was written, before the stamp: durable, but no frontier moves.
    fail::cfg("node::cut::before_stamp", "1*panic->off").unwrap();
    assert!(matches!(
        node.cadence.cut_now().await,
        Some(TickResult::Panicked)
    ));
    assert_eq!(missing(&store, &frame_ids(a, 10)).await, vec![]);
    assert_eq!(
        marks(&node, "t").frontier,
        Lsn(0),
        "a panicking cut stamps nothing"
    );
    assert_eq!(
        marks(&node, "t").snapshot,
        Lsn(0),
        "and installs no snapshot"
    );
    assert!(!snap_file.exists());

    // 3. The next tick cuts and stamps.
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("t"), Some(&a.0), "{report:?}");
    assert_eq!(marks(&node, "t").frontier, a);
    let installed = marks(&node, "t").snapshot;
    assert_eq!(installed, a, "the first stamping cut installs the snapshot");
    assert!(snap_file.exists());

    // 4. A rotation-captured cut panics the same way: the loop's own rotation check starts
    //    it (nobody asked), it is held at the failpoint, then panics. The next requested cut
    //    is served after it, by the same loop: held at the same point, before its stamp, it
    //    shows the panicking cut moved no frontier and was counted; released, it stamps.
    let counted = barrier_panics().await;
    let rotation_cut = FailGate::panic_at("node::cut::before_stamp", 0);
    let rotations = node.core.wal().stats().rotations;
    let mut frames = vec![(a, 10)];
    while node.core.wal().stats().rotations == rotations {
        frames.push((ingest(&node, "t", &lines(20, frames.len())).await, 20));
    }
    rotation_cut.reached().await;
    let rotated_at = marks(&node, "t").frontier;
    rotation_cut.release();
    let next_cut = FailGate::hold_at("node::cut::before_stamp", 0);
    let cadence = node.cadence.clone();
    let held = tokio::spawn(async move { cadence.cut_now().await });
    next_cut.reached().await;
    assert_eq!(
        marks(&node, "t").frontier,
        rotated_at,
        "the panicking rotation cut moved no frontier"
    );
    let held_marks = marks(&node, "t");
    assert_eq!(
        held_marks.snapshot, installed,
        "a panic after an install leaves the installed snapshot in place"
    );
    assert!(held_marks.snapshot <= held_marks.frontier);
    assert_eq!(barrier_panics().await, counted + 1.0, "and it was counted");
    next_cut.release();
    let report = held_cut("the next cut", held).await;
    let last = frames.last().unwrap().0;
    assert_eq!(report.stamped.get("t"), Some(&last.0), "{report:?}");
    assert_frontier_only_over_durable(&node, &store, "t", &frames).await;

    // Recovery from max(X, S): nothing at or below the frontier is published again.
    let before = ids_in_store(&store).await;
    crash(node).await;
    let node = start(cfg(), &store).await;
    assert_eq!(
        ids_in_store(&store).await,
        before,
        "the restart republished"
    );
    assert_eq!(marks(&node, "t").frontier, last);
    node.shutdown().await.unwrap();
}
