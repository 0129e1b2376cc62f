//! A cut clears the epoch latch without a restart, and only against the word it captured
//! (RFC0054.4).

use ourios_barrier::LatchWord;
use ourios_sinks::Tenant;
use ourios_sinks::testing::{Fault, FaultyStore, Gate};
use ourios_wal::Lsn;

use crate::support::*;

/// RFC0054.4: a detached partition's publish panics on the publisher thread (every record
/// detaches its own partition here), so its token reports to the latch and its batch requeues
/// the record. Once nothing is outstanding, the next cut proceeds (it is not skipped because
/// the latch is set), its drain takes the requeued record first, it stamps the tenant's
/// frontier over the whole frame, and it clears the latch — no restart.
///
/// Mutation check: in `core::run_cut`, remove step 0 (the verdict taken before the capture)
/// and the cut's `all_ok` blames the panic that settled before it: it neither stamps nor
/// clears. Returning early while the latch is set (RFC 0052's old pre-cut skip) fails too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_4_cut_clears_latch_after_recovered_publish_panic() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| {
            inline(a);
            a.partition_target_bytes = Some(1);
        }),
        &store,
    )
    .await;
    let barrier = node.core.barrier();

    // The third detached partition's put panics on the publisher thread.
    store.on_nth_with_prefix("records/", 2, Fault::PanicBeforePut);
    let a = ingest(&node, "t", &lines(8, 1)).await;
    wait_until("every detached publish settled", || {
        let s = barrier.stats();
        s.publishes_outstanding == 0 && s.encodes_outstanding == 0
    })
    .await;
    let latched = barrier.latch().capture();
    assert_eq!(
        latched.failed_epoch(),
        Some(0),
        "the publish panic set the latch"
    );
    assert_eq!(barrier.stats().publishes_panicked, 1);
    assert_eq!(
        node.core.records().buffered_ids(&Tenant::new("t")).len(),
        1,
        "the panicking partition is back in the buffer"
    );
    assert_eq!(missing(&store, &frame_ids(a, 8)).await.len(), 1);

    let report = cut(&node).await;
    assert!(
        report.published_records >= 1,
        "the cut's drain took the requeued record: {report:?}"
    );
    assert_eq!(missing(&store, &frame_ids(a, 8)).await, vec![]);
    assert_eq!(report.stamped.get("t"), Some(&a.0), "{report:?}");
    assert_eq!(marks(&node, "t").frontier, a);
    assert!(report.latch_cleared, "{report:?}");
    assert!(barrier.latch().capture().is_clear());
    node.shutdown().await.unwrap();
}

/// RFC0054.4, the clear fails when a report lands during the cut: a cut's record put is held
/// at a gate while a report of the cut's own epoch reaches the latch. The cut still stamps
/// (its data is durable and its verdict ok), but its clear against the captured word fails and
/// the failure survives. First with a clear latch at the capture, then — the case two separate
/// atomics would miss — with the latch already holding the lowest epoch at the capture, so the
/// report changes only the generation. Each time the next cut clears it.
///
/// Mutation check: in `core::run_cut`, clear against `self.barrier.latch().capture()`
/// instead of `cut.latch_word()` and both raced clears succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_4_report_during_cut_survives_clear() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), inline), &store).await;
    let barrier = node.core.barrier();
    let mut frames = Vec::new();

    let mut raced = Vec::<LatchWord>::new();
    for round in 0..2 {
        let lsn = ingest(&node, "t", &lines(6, round)).await;
        frames.push((lsn, 6));
        let gate = Gate::new();
        store.on_prefix("records/", Fault::Gate(gate.clone()), Some(1));
        let cadence = node.cadence.clone();
        let held = tokio::spawn(async move { cadence.cut_now().await });
        bounded("the cut's put reaches the gate", gate.wait_reached()).await;
        // The cut began: barrier_epoch moved past its epoch.
        let epoch = barrier.barrier_epoch() - 1;
        let before = barrier.latch().capture();
        let _ = barrier.latch().report(epoch);
        let after = barrier.latch().capture();
        if round == 1 {
            assert_eq!(
                after.epoch(),
                before.epoch(),
                "round 2 reports the same lowest epoch: only the generation changes"
            );
        }
        gate.release();
        let report = match bounded("the held cut", held).await.unwrap() {
            Some(ourios_node::TickResult::Done(r)) => r,
            other => panic!("the held cut did not finish: {other:?}"),
        };
        assert_eq!(report.epoch, epoch);
        assert_eq!(report.stamped.get("t"), Some(&lsn.0), "{report:?}");
        assert!(!report.latch_cleared, "round {round}: {report:?}");
        assert_eq!(
            barrier.latch().capture(),
            after,
            "the report raised during the cut survives"
        );
        raced.push(after);
    }
    assert_ne!(raced[0], raced[1]);

    let report = cut(&node).await;
    assert!(report.latch_cleared, "{report:?}");
    assert!(barrier.latch().capture().is_clear());
    assert_frontier_only_over_durable(&node, &store, "t", &frames).await;
    assert_eq!(marks(&node, "t").frontier, Lsn(frames[1].0.0));
    node.shutdown().await.unwrap();
}
