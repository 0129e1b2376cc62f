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
/// Reasoned mutation (not run as a mutant): in `core::run_cut`, remove step 0 (the verdict taken
/// before the capture) and the cut's `all_ok` blames the panic that settled before it: it neither
/// stamps nor clears. Returning early while the latch is set (RFC 0052's old pre-cut skip) fails
/// too.
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
/// Reasoned mutation (not run as a mutant): in `core::run_cut`, clear against
/// `self.barrier.latch().capture()` instead of `cut.latch_word()` and both raced clears succeed.
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
        let report = held_cut("the held cut", held).await;
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

/// C.5 on the real node: a cut's record put is held at a gate while a *real* publish panics —
/// a detached partition of another tenant, appended after the cut's capture (tagged E+1), whose
/// put panics on the publisher thread. Its report reaches the latch during the cut, so the
/// cut's clear against its captured word fails (it still stamps its own tenant: its data is
/// durable and its verdict ok). The report survives; the next cut drains the requeued
/// partition, stamps and clears.
///
/// Fails if (reasoned, not run as a mutant): `core::run_cut` cleared against
/// `self.barrier.latch().capture()` instead of `cut.latch_word()`; the held cut would clear the
/// raised latch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_c5_publish_panic_during_cut_makes_its_clear_fail() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| {
            inline(a);
            a.partition_target_bytes = Some(16 << 10);
        }),
        &store,
    )
    .await;
    let barrier = node.core.barrier();

    let t = ingest(&node, "t", &lines(6, 1)).await;
    let gate = Gate::new();
    store.on_prefix("records/tenant=t/", Fault::Gate(gate.clone()), Some(1));
    store.on_prefix("records/tenant=u/", Fault::PanicBeforePut, Some(1));
    let cadence = node.cadence.clone();
    let held = tokio::spawn(async move { cadence.cut_now().await });
    bounded("the cut's put reaches the gate", gate.wait_reached()).await;
    let epoch = barrier.barrier_epoch() - 1;
    assert!(barrier.latch().capture().is_clear());

    // A frame of tenant u big enough to detach at append: its publish runs on the publisher
    // thread while the cut is held, and panics. The run of x's joins the template, so a record
    // is estimated at a few hundred bytes; 120 of them pass the 16 KiB target whatever the
    // exact estimate (40 sat within a few hundred bytes of it, and a smaller estimate for a
    // record's attributes put them under). A partition detached later in the frame
    // publishes: the fault fires once.
    const BIG: usize = 120;
    let big: Vec<String> = (0..BIG)
        .map(|i| format!("payload {i} {}", "x".repeat(1024)))
        .collect();
    let u = ingest(&node, "u", &big).await;
    wait_until("the detached publish panicked", || {
        barrier.stats().publishes_panicked == 1
    })
    .await;
    let raised = barrier.latch().capture();
    assert_eq!(
        raised.failed_epoch(),
        Some(epoch + 1),
        "tagged after the capture"
    );

    gate.release();
    let report = held_cut("the held cut", held).await;
    assert_eq!(report.epoch, epoch);
    assert_eq!(report.stamped.get("t"), Some(&t.0), "{report:?}");
    assert!(!report.latch_cleared, "{report:?}");
    assert_eq!(barrier.latch().capture(), raised, "the report survives");

    // The panic settled before the next cut began, so that cut's drain takes the requeued
    // partition first: it stamps u and clears.
    let next = cut(&node).await;
    assert_eq!(next.stamped.get("u"), Some(&u.0), "{next:?}");
    assert!(next.latch_cleared, "{next:?}");
    assert!(barrier.latch().capture().is_clear());
    assert_eq!(missing(&store, &frame_ids(u, BIG)).await, vec![]);
    assert_eq!(marks(&node, "u").frontier, u);
    node.shutdown().await.unwrap();
}

/// M.8 on the real node: an encode worker's panic sets the latch (`failed_epoch <= E`) and the
/// next cut is not skipped — it runs its drain, and its drain decides: the store refuses the
/// cut's put once (transient), so the cut proceeds, stamps nothing and keeps the latch; the
/// next cut publishes, stamps and clears.
///
/// Fails if (reasoned, not run as a mutant): the cut were skipped while the captured latch word
/// is set (RFC 0052's old pre-cut guard); no cut would stamp or clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_m8_latched_cut_proceeds_and_its_drain_decides() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), through_the_pool), &store).await;
    let barrier = node.core.barrier();
    let gate = FailGate::panic_at("node::worker::encode", 2);
    let a = ingest(&node, "t", &lines(6, 1)).await;
    gate.reached().await;
    gate.release();
    wait_until("the worker panicked", || {
        !barrier.latch().capture().is_clear() && barrier.stats().encodes_outstanding == 0
    })
    .await;
    let latched = barrier.latch().capture();
    assert!(
        latched.epoch() <= barrier.barrier_epoch(),
        "the old guard would skip"
    );

    store.on_prefix("records/", Fault::Transient, Some(1));
    let refused = cut(&node).await;
    assert_eq!(
        store.faults_fired(),
        1,
        "the cut ran its drain: {refused:?}"
    );
    assert!(!refused.cut_ok, "{refused:?}");
    assert!(refused.stamped.is_empty(), "{refused:?}");
    assert!(!refused.latch_cleared);
    assert_eq!(barrier.latch().capture(), latched);
    assert_eq!(marks(&node, "t").frontier, Lsn(0));

    let report = cut(&node).await;
    assert_eq!(report.stamped.get("t"), Some(&a.0), "{report:?}");
    assert!(report.latch_cleared, "{report:?}");
    assert_eq!(missing(&store, &frame_ids(a, 6)).await, vec![]);
    node.shutdown().await.unwrap();
}

/// RFC0054.4-restart: a node whose latch is set (a detached publish panicked) crashes before
/// any cut clears it; restarted on the same data directory and store, its latch is clear from
/// the start (the latch is not persisted), recovery republishes the frame, and the recovery cut
/// stamps the frontier over it.
///
/// Fails if (reasoned): the latch word were persisted with the marks and restored at start;
/// the restarted node would start latched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_4_restart_of_a_latched_node_starts_clear() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = || {
        config(dir.path(), |a| {
            inline(a);
            a.partition_target_bytes = Some(1);
        })
    };
    let node = start(cfg(), &store).await;
    store.on_next_with_prefix("records/", 1, Fault::PanicBeforePut);
    let a = ingest(&node, "t", &lines(4, 1)).await;
    let barrier = node.core.barrier().clone();
    wait_until("the detached publish panicked", || {
        barrier.stats().publishes_panicked == 1 && barrier.stats().publishes_outstanding == 0
    })
    .await;
    assert!(!barrier.latch().capture().is_clear());
    crash(node).await;

    let node = start(cfg(), &store).await;
    let barrier = node.core.barrier();
    assert!(
        barrier.latch().capture().is_clear(),
        "a restarted node starts with a clear latch"
    );
    assert_eq!(barrier.stats().publishes_panicked, 0);
    assert_eq!(missing(&store, &frame_ids(a, 4)).await, vec![]);
    assert_eq!(marks(&node, "t").frontier, a);
    node.shutdown().await.unwrap();
}
