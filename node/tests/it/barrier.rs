//! The barrier never stamps a frontier over records that are not durable (RFC 0054 §9.7 U.10,
//! U.11; DESIGN I4).

use ourios_node::TickResult;
use ourios_sinks::Tenant;
use ourios_sinks::testing::{Fault, FaultyStore, Gate};
use ourios_wal::Lsn;

use crate::support::*;

/// U.10 and U.11: a sweep's first record put is accepted by the store and then panics (the
/// ambiguous case), so both tenants' partitions are requeued. The next cut meets a transient
/// failure on tenant `u`'s put: it stamps `t` (its drain made `t` durable) but not `u`, whose
/// records are back in the buffer — its frontier stays where the store says it may. A later
/// healthy cut publishes `u` and stamps it.
///
/// Reasoned mutation (not run as a mutant): make `recoverable::RecoverableBatch`'s `Drop` skip
/// `requeue_unsettled` and `u`'s records are not back in the buffer after the sweep panic (nor ever
/// published).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_barrier_never_stamps_past_requeued_records() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), inline), &store).await;

    let t = ingest(&node, "t", &lines(6, 1)).await;
    let u = ingest(&node, "u", &lines(6, 2)).await;
    store.on_prefix("records/", Fault::PanicAfterPut, Some(1));
    assert!(matches!(sweep(&node).await, TickResult::Panicked));
    assert_eq!(
        node.core.records().buffered_ids(&Tenant::new("u")),
        frame_ids(u, 6)
    );

    store.on_prefix("records/tenant=u", Fault::Transient, Some(1));
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("t"), Some(&t.0), "{report:?}");
    assert!(report.not_stamped.contains(&"u".to_owned()), "{report:?}");
    assert_eq!(marks(&node, "u").frontier, Lsn(0));
    assert_eq!(missing(&store, &frame_ids(u, 6)).await.len(), 6);
    assert_frontier_only_over_durable(&node, &store, "t", &[(t, 6)]).await;
    assert_frontier_only_over_durable(&node, &store, "u", &[(u, 6)]).await;

    let report = cut(&node).await;
    assert_eq!(report.stamped.get("u"), Some(&u.0), "{report:?}");
    assert_eq!(missing(&store, &frame_ids(u, 6)).await, vec![]);
    assert_frontier_only_over_durable(&node, &store, "u", &[(u, 6)]).await;
    node.shutdown().await.unwrap();
}

/// U.10, records out of the buffer under a later epoch: frame `a` is buffered when a cut
/// captures it; while that cut is held inside its drain, frame `b` — tagged with the next
/// epoch, so the cut does not wait for it — fills the partition, which detaches with `a`'s
/// records and is held at its put on the publisher thread. The cut's drain finds no record
/// of `a` in the buffer, yet it must not stamp `a`: its records are not durable. Once the put
/// returns, the next cut stamps both frames.
///
/// Reasoned mutation (not run as a mutant): in `core::run_cut`, stamp `through` instead of
/// `min(through, unpublished_floor - 1)` and the held cut stamps `a` with its records
/// still at the gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_barrier_never_stamps_past_records_out_of_the_buffer_at_a_later_epoch() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| {
            inline(a);
            a.partition_target_bytes = Some(4_000);
        }),
        &store,
    )
    .await;

    let a = ingest(&node, "t", &lines(3, 1)).await;
    assert_eq!(
        node.core.records().buffered_ids(&Tenant::new("t")).len(),
        3,
        "frame a stays buffered below the partition target"
    );
    let in_drain = FailGate::hold_at("sinks::audit::take", 0);
    let put = Gate::new();
    store.on_prefix("records/tenant=t", Fault::Gate(put.clone()), Some(1));
    let cadence = node.cadence.clone();
    let held = tokio::spawn(async move { cadence.cut_now().await });
    in_drain.reached().await;

    let b = ingest(&node, "t", &lines(12, 2)).await;
    bounded("the detached partition's put", put.wait_reached()).await;
    in_drain.release();
    let report = held_cut("the held cut", held).await;
    assert!(
        missing(&store, &frame_ids(a, 3)).await.len() == 3,
        "a's records are still at the gate"
    );
    assert_eq!(
        marks(&node, "t").frontier,
        Lsn(0),
        "the cut stamped over records out of the buffer: {report:?}"
    );

    put.release();
    wait_until("the detached publish settled", || {
        node.core.barrier().stats().publishes_outstanding == 0
    })
    .await;
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("t"), Some(&b.0), "{report:?}");
    assert_frontier_only_over_durable(&node, &store, "t", &[(a, 3), (b, 12)]).await;
    node.shutdown().await.unwrap();
}

/// A panic point of a cut's publish, armed on the real node.
#[derive(Debug, Clone, Copy)]
enum CutPanic {
    /// Between the partitions of the record drain (the second take).
    RecordDrain,
    /// At the entry of the audit take, nothing removed yet.
    AuditTake,
    /// Inside the audit take, the buffer emptied, the events not handed over yet.
    AuditTaken,
    /// In `write_ordered`, before the audit write.
    BeforeAuditWrite,
    /// Inside the audit write: the store panics on the first audit put, before or after it
    /// took the object.
    InsideAuditWrite { after: bool },
    /// Between the audit write and the record publish.
    BetweenWrites,
}

impl CutPanic {
    fn arm(self, store: &FaultyStore) {
        match self {
            CutPanic::RecordDrain => {
                fail::cfg("sinks::drain::between_partitions", "1*off->1*panic->off").unwrap()
            }
            CutPanic::AuditTake => fail::cfg("sinks::audit::take", "1*panic->off").unwrap(),
            CutPanic::AuditTaken => fail::cfg("sinks::audit::taken", "1*panic->off").unwrap(),
            CutPanic::BeforeAuditWrite => {
                fail::cfg("publisher::write_ordered::before_audit", "1*panic->off").unwrap()
            }
            CutPanic::InsideAuditWrite { after } => store.on_next_with_prefix(
                "audit/",
                0,
                if after {
                    Fault::PanicAfterPut
                } else {
                    Fault::PanicBeforePut
                },
            ),
            CutPanic::BetweenWrites => {
                fail::cfg("publisher::write_ordered::between", "1*panic->off").unwrap()
            }
        }
    }
}

/// RFC0054.1's "no WAL mark across unrequeued data", on the real node with its WAL and barrier:
/// a cut panics in the record drain, at the entry of and inside the audit take, before the
/// audit write, inside it (before and after the store took the object) and between the writes.
/// After each, no tenant's frontier is past a record that is not in the store, every record is
/// in the store or back in its buffer, and the next cut publishes everything and stamps both
/// tenants.
///
/// Mutation check (tried by hand): drop the `Taken` guard's requeue in `take_groups` and the
/// AuditTaken case never publishes tenant `t`'s records (their events are gone, I3 holds them
/// back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc0054_1_no_frontier_past_unrequeued_data_at_each_cut_panic_point() {
    let _scenario = fail::FailScenario::setup();
    for point in [
        CutPanic::RecordDrain,
        CutPanic::AuditTake,
        CutPanic::AuditTaken,
        CutPanic::BeforeAuditWrite,
        CutPanic::InsideAuditWrite { after: false },
        CutPanic::InsideAuditWrite { after: true },
        CutPanic::BetweenWrites,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = FaultyStore::new();
        let node = start(config(dir.path(), inline), &store).await;
        let t = ingest(&node, "t", &lines(5, 1)).await;
        let u = ingest(&node, "u", &lines(5, 2)).await;
        point.arm(&store);
        assert!(
            matches!(
                bounded("cut", node.cadence.cut_now()).await,
                Some(TickResult::Panicked)
            ),
            "{point:?}: the cut panicked"
        );
        store.clear_faults();
        for (tenant, lsn) in [("t", t), ("u", u)] {
            assert_frontier_only_over_durable(&node, &store, tenant, &[(lsn, 5)]).await;
            let have = ids_in_store(&store).await;
            let buffered = node.core.records().buffered_ids(&Tenant::new(tenant));
            for id in frame_ids(lsn, 5) {
                assert!(
                    have.contains_key(&id) || buffered.contains(&id),
                    "{point:?}: record {id} of {tenant} is neither durable nor buffered"
                );
            }
        }
        let report = cut(&node).await;
        for (tenant, lsn) in [("t", t), ("u", u)] {
            assert_eq!(
                report.stamped.get(tenant),
                Some(&lsn.0),
                "{point:?}: {report:?}"
            );
            assert_eq!(
                missing(&store, &frame_ids(lsn, 5)).await,
                vec![],
                "{point:?}"
            );
        }
        node.shutdown().await.unwrap();
    }
}
