//! Sealed units (RFC 0058) at the sink: sealed is forever, create-only puts settle on an
//! earlier attempt's object, a refused seal leaves the unit open, and recovery's routing
//! rebuilds units from replayed records.

use ourios_sinks::testing::{Fault, MemorySealer};
use ourios_sinks::{IdRange, Intent, Tenant, metrics};

use crate::common::{HOUR, Rig, T0, block_on, block_on_metered, catch, ids_of, rec, sorted};

/// Every put attempt's key under `records/`, in order.
fn record_keys(rig: &Rig) -> Vec<String> {
    rig.store
        .puts_per_key()
        .into_keys()
        .filter(|k| k.starts_with("records/"))
        .collect()
}

/// RFC0058.2: a unit whose put failed is not merged back into the open buffer. A newer record
/// of the same partition key arrives meanwhile; the next drain yields the sealed unit, unchanged,
/// apart from a new partition holding the newer record, and the unit is put under the key its
/// intent named, the only intent it ever got.
///
/// Reasoned mutation (not run as a mutant): in `RecordState::put_back`, drop the `if
/// p.sealed.is_some()` branch (merge sealed units like open ones): the drain yields one partition
/// and the unit's intent no longer names what is put.
#[test]
fn a_sealed_unit_is_never_merged_and_keeps_its_key() {
    let sealer = MemorySealer::new();
    let rig = Rig::sealed(sealer.clone());
    for i in 0..3 {
        let _ = rig.sink.append(rec("a", 1, i, T0, 0));
    }
    rig.store
        .on_nth_with_prefix("records/", 0, Fault::Transient);
    block_on(async {
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let mut batch = rig.record_batch(slot);
        let report = rig.sink.publish_owned(&mut batch).await;
        assert_eq!(report.requeued, 1, "{report:?}");
        drop(batch);
        assert_eq!(rig.sink.sealed_units(), 1);
        assert_eq!(
            rig.sink.unpublished_floor(&Tenant::new("a")),
            Some(1),
            "a sealed unit waiting for its republish holds the floor"
        );

        assert_eq!(rig.sink.buffered_records(), 3, "the sealed unit is held");
        let _ = rig.sink.append(rec("a", 2, 0, T0 + 1, 0));
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        assert_eq!(slot.len(), 2, "the sealed unit and the newer record apart");
        assert_eq!(
            (rig.sink.buffered_records(), rig.sink.buffered_bytes()),
            (0, 0),
            "both left the buffer with their accounting"
        );
        assert_eq!(slot[0].sealed(), Some(sealer.intents()[0].path.as_str()));
        assert_eq!(sorted(slot[0].ids()), sorted(ids_of(&slot[..1])));
        assert_eq!(slot[0].records().len(), 3);
        let mut batch = rig.record_batch(slot);
        assert!(rig.sink.publish_owned(&mut batch).await.all_durable());
    });
    let intents = sealer.intents();
    assert_eq!(intents.len(), 2, "one intent per unit, none for a retry");
    assert_eq!(
        intents[0].ranges,
        vec![IdRange {
            lsn: 1,
            first: 0,
            last: 2
        }]
    );
    let keys = record_keys(&rig);
    assert!(keys.contains(&intents[0].path), "{keys:?}");
    assert!(keys.contains(&intents[1].path), "{keys:?}");
    let stored = block_on(rig.stored());
    assert!(stored.values().all(|&n| n == 1), "{stored:?}");
    assert_eq!(stored.len(), 4);
}

/// RFC0058.3: the ambiguous put. The store accepts the second of three units and the call
/// panics; the batch's drop requeues it, sealed. The republish finds its key taken, confirms
/// it, and settles it without writing: every id is in the store exactly once (RFC 0054's
/// "one duplicate per ambiguous put" becomes none), and the unit's records are counted as
/// already present.
///
/// Reasoned mutation (not run as a mutant): in `publish_owned`, treat `AlreadyExists` like any
/// other store error (drop its arm): the unit is requeued forever and the republish is not
/// `all_durable`.
#[test]
fn an_ambiguous_put_is_found_under_its_key_and_not_written_twice() {
    let rig = Rig::sealed(MemorySealer::new());
    for h in 0..3u64 {
        for i in 0..2u32 {
            let _ = rig.sink.append(rec("a", h + 1, i, T0 + h * HOUR, 0));
        }
    }
    rig.store
        .on_nth_with_prefix("records/", 1, Fault::PanicAfterPut);
    let (_, m) = block_on_metered(async {
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let all = sorted(ids_of(&slot));
        let mut batch = rig.record_batch(slot);
        assert!(catch(rig.sink.publish_owned(&mut batch)).await.is_err());
        drop(batch);
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        assert_eq!(slot.len(), 2, "the ambiguous unit and the one never tried");
        let mut batch = rig.record_batch(slot);
        let report = rig.sink.publish_owned(&mut batch).await;
        assert!(report.all_durable(), "{report:?}");
        assert_eq!(report.already_present, 2, "{report:?}");
        let stored = rig.stored().await;
        assert_eq!(stored.keys().copied().collect::<Vec<_>>(), all);
        assert!(stored.values().all(|&n| n == 1), "{stored:?}");
    });
    assert_eq!(m.get(metrics::SINK_ALREADY_PRESENT, &[]), 2.0);
    assert_eq!(
        m.get(metrics::SINK_AMBIGUOUS_PUTS, &[("consumer", "records")]),
        1.0
    );
}

/// RFC0058.1: no put before its intent is durable. With the sealer refusing, nothing is put,
/// the partition goes back to the open buffer (not sealed: no intent names it), and the report
/// says why; once the sealer accepts, the unit is sealed and put.
///
/// Reasoned mutation (not run as a mutant): in `publish_owned`'s seal-error arm, fall through to
/// the put instead of `continue`: an object appears with no intent naming it.
#[test]
fn a_unit_whose_intent_is_refused_is_not_put_and_stays_open() {
    let sealer = MemorySealer::new();
    let rig = Rig::sealed(sealer.clone());
    let _ = rig.sink.append(rec("a", 1, 0, T0, 0));
    sealer.refuse(true);
    block_on(async {
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let mut batch = rig.record_batch(slot);
        let report = rig.sink.publish_owned(&mut batch).await;
        assert_eq!(report.unsealed.len(), 1, "{report:?}");
        assert!(!report.all_durable());
        drop(batch);
    });
    assert!(
        record_keys(&rig).is_empty(),
        "nothing put without an intent"
    );
    assert_eq!(rig.sink.sealed_units(), 0);
    assert_eq!(rig.all_buffered_ids().len(), 1);

    sealer.refuse(false);
    block_on(async {
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let mut batch = rig.record_batch(slot);
        assert!(rig.sink.publish_owned(&mut batch).await.all_durable());
    });
    assert_eq!(record_keys(&rig), vec![sealer.intents()[0].path.clone()]);
}

fn intent(path: &str, ranges: &[(u64, u32, u32)]) -> Intent {
    Intent {
        tenant: Tenant::new("a"),
        path: path.to_owned(),
        ranges: ranges
            .iter()
            .map(|&(lsn, first, last)| IdRange { lsn, first, last })
            .collect(),
    }
}

/// RFC0058.4 at the sink: recovery's routing. Records of a landed intent are dropped on
/// arrival; records an unlanded intent names rebuild its unit, which holds the floor while it
/// is incomplete, joins the sealed list when complete, and is put under the intent's key;
/// records no intent names are buffered as usual. A record replayed twice does not stand in
/// for one still missing, and is counted once. After `recovery_done` nothing is routed.
///
/// Reasoned mutation (not run as a mutant): in `Recovering::unit_of`, return `None` always: the
/// unit's records are published under a fresh key and the intent's key never appears.
#[test]
fn recovery_routes_replayed_records_to_their_units() {
    let rig = Rig::sealed(MemorySealer::new());
    let key = "records/tenant=a/date=2023-11-14/hour=22/rebuilt.parquet";
    rig.sink
        .expect_sealed(&intent(key, &[(5, 0, 1), (7, 0, 0)]));
    rig.sink.drop_landed(&intent("landed", &[(6, 0, 2)]));

    let _ = rig.sink.append(rec("a", 5, 0, T0, 0));
    let _ = rig.sink.append(rec("a", 5, 0, T0, 0)); // replayed twice
    let _ = rig.sink.append(rec("a", 5, 1, T0, 0));
    for i in 0..3 {
        let _ = rig.sink.append(rec("a", 6, i, T0, 0));
    }
    let _ = rig.sink.append(rec("a", 6, 3, T0, 0)); // no intent names it
    assert_eq!(rig.sink.rebuilding_units(), 1, "(7, 0) has not arrived");
    assert_eq!(rig.sink.sealed_units(), 0);
    assert_eq!(
        rig.sink.unpublished_floor(&Tenant::new("a")),
        Some(5),
        "an incomplete unit's records hold the floor"
    );
    let _ = rig.sink.append(rec("a", 7, 0, T0, 0));
    assert_eq!(rig.sink.rebuilding_units(), 0);
    assert_eq!(rig.sink.sealed_units(), 1);
    // The repeated record is counted once: the sealed unit's three and the open one.
    let held = [(5, 0), (5, 1), (7, 0), (6, 3)];
    assert_eq!(rig.sink.buffered_records(), held.len());
    assert_eq!(
        rig.sink.buffered_bytes(),
        held.iter()
            .map(|&(lsn, i)| rec("a", lsn, i, T0, 0).estimated_bytes())
            .sum::<usize>()
    );
    rig.sink.recovery_done();
    // Routing ends with recovery: a record with a landed id is an ordinary one now.
    let _ = rig.sink.append(rec("a", 6, 0, T0, 0));
    assert_eq!(rig.sink.buffered_records(), held.len() + 1);

    block_on(async {
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let mut batch = rig.record_batch(slot);
        assert!(rig.sink.publish_owned(&mut batch).await.all_durable());
    });
    assert_eq!(
        (rig.sink.buffered_records(), rig.sink.buffered_bytes()),
        (0, 0)
    );
    assert!(record_keys(&rig).contains(&key.to_owned()));
    let stored = block_on(rig.stored());
    let ids: Vec<(u64, u32)> = stored.keys().map(|id| (id.lsn, id.index)).collect();
    assert_eq!(ids, vec![(5, 0), (5, 1), (6, 0), (6, 3), (7, 0)]);
    assert!(stored.values().all(|&n| n == 1), "{stored:?}");
}
