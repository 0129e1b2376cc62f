//! The record sink: per-put ownership in `publish_owned` (RFC 0054 §9.4), triggers, drains,
//! requeue ordering, set-aside, and the Parquet record schema.

use std::sync::Arc;
use std::time::Duration;

use ourios_recoverable::Drained;
use ourios_sinks::testing::Fault;
use ourios_sinks::{LogRecord, PartitionKey, RecordId, RecordSinkConfig, Tenant, metrics};

use crate::common::{
    HOUR, Rig, T0, block_on, block_on_metered, catch, created, ids_of, rec, sorted,
};

/// Five partitions (one tenant, five hours), two records each, drained into one batch.
fn five_partitions(rig: &Rig) -> Vec<ourios_sinks::Partition> {
    for h in 0..5u64 {
        for i in 0..2u32 {
            let _ = rig.sink.append(rec("a", h + 1, i, T0 + h * HOUR, 0));
        }
    }
    let mut slot = Vec::new();
    rig.sink.drain_all(&mut slot);
    assert_eq!(slot.len(), 5);
    slot
}

/// RFC 0054 §9.7 (records): the first put fails transiently, the third panics. Afterwards the
/// first partition is back in the buffer too (it was requeued at once, not parked in a local
/// vector), with the third (in flight) and the fourth and fifth (not started); the second is in
/// the store and a healthy republish does not write it again. Counted by record id.
///
/// Reasoned mutation (not run as a mutant): in `publish_owned`'s store-error arm, replace
/// `batch.requeue(lease)` with `let _ = batch.settle(lease, Settlement::Dropped)`: the first
/// partition's ids vanish.
#[test]
fn fault_transient_first_put_then_panic_third_requeues_first_and_third_onward() {
    let rig = Rig::new();
    let parts = five_partitions(&rig);
    let expect_back = sorted([0, 2, 3, 4].iter().flat_map(|&i| parts[i].ids()).collect());
    let second = parts[1].ids();
    let all = sorted(ids_of(&parts));
    rig.store
        .on_nth_with_prefix("records/", 0, Fault::Transient);
    rig.store
        .on_nth_with_prefix("records/", 2, Fault::PanicBeforePut);
    let (_, m) = block_on_metered(async {
        let mut batch = rig.record_batch(parts);
        assert!(catch(rig.sink.publish_owned(&mut batch)).await.is_err());
        drop(batch);
        assert_eq!(
            sorted(rig.sink.buffered_ids(&Tenant::new("a"))),
            expect_back
        );
        let stored = rig.stored().await;
        assert_eq!(
            stored.keys().copied().collect::<Vec<_>>(),
            sorted(second.clone())
        );

        rig.store.clear_faults();
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let mut batch = rig.record_batch(slot);
        let report = rig.sink.publish_owned(&mut batch).await;
        assert_eq!(report.durable, 4);
        let stored = rig.stored().await;
        assert_eq!(stored.keys().copied().collect::<Vec<_>>(), all);
        assert!(
            stored.values().all(|n| *n == 1),
            "the second was not rewritten"
        );
        assert_eq!(rig.store.puts_ok_with_prefix("records/"), 5);
    });
    // The panic was before the put: one in flight, nothing ambiguous written, but counted.
    assert_eq!(
        m.get(metrics::SINK_AMBIGUOUS_PUTS, &[("consumer", "records")]),
        1.0
    );
    assert_eq!(
        m.get(
            metrics::FLUSH_ERRORS,
            &[("error.type", "transient"), ("consumer", "records")]
        ),
        1.0
    );
}

/// RFC0054.3 / I2 at the sink: a panic after the store accepted the second of three partitions
/// (the ambiguous put) requeues it with the third; the republish writes it again: every id is
/// present, the second partition's ids exactly twice (one duplicate per ambiguous put), and the
/// ambiguous put is counted.
///
/// Reasoned mutation (not run as a mutant): have the `RequeueTarget` impl for `SharedParquetSink`
/// skip counting `ambiguous`: the counter assertion fails.
#[test]
fn fault_panic_after_put_requeues_in_flight_and_counts_ambiguous() {
    let rig = Rig::new();
    let parts: Vec<_> = five_partitions(&rig).into_iter().take(3).collect();
    let all = sorted(ids_of(&parts));
    let dup = parts[1].ids();
    rig.store
        .on_nth_with_prefix("records/", 1, Fault::PanicAfterPut);
    let (_, m) = block_on_metered(async {
        let mut batch = rig.record_batch(parts);
        assert!(catch(rig.sink.publish_owned(&mut batch)).await.is_err());
        drop(batch);
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let mut batch = rig.record_batch(slot);
        assert!(rig.sink.publish_owned(&mut batch).await.all_durable());
        let stored = rig.stored().await;
        assert!(all.iter().all(|id| stored.contains_key(id)), "no id lost");
        for (id, n) in &stored {
            let expect = if dup.contains(id) { 2 } else { 1 };
            assert_eq!(*n, expect, "{id}");
        }
    });
    assert_eq!(
        m.get(metrics::SINK_AMBIGUOUS_PUTS, &[("consumer", "records")]),
        1.0
    );
}

/// I3 at `publish_owned`: a partition whose audit event sits in a `RecoverableBatch` not yet
/// written (the audit buffer is empty) is refused and requeued; after `write_owned` makes the
/// event durable the same partition publishes.
///
/// Reasoned mutation (not run as a mutant): delete the `is_durable_through` check in
/// `publish_owned`: the record is in the store while its event is not.
#[test]
fn i3_publish_owned_refuses_partition_while_audit_batch_unwritten() {
    let rig = Rig::new();
    let seq = rig.audit.emit(created("a", i128::from(T0), 1));
    let _ = rig.sink.append(rec("a", 1, 0, T0, seq));
    let _ = rig.sink.append(rec("b", 2, 0, T0, 0));
    block_on(async {
        let mut audit = rig.audit_batch(rig.audit.take_groups());
        assert_eq!(rig.audit.buffered_events(), 0);
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let mut records = rig.record_batch(slot);
        let report = rig.sink.publish_owned(&mut records).await;
        drop(records);
        assert_eq!((report.durable, report.refused_unordered), (1, 1));
        assert!(!report.all_durable());
        let stored = rig.stored().await;
        assert_eq!(
            stored.keys().copied().collect::<Vec<_>>(),
            vec![RecordId { lsn: 2, index: 0 }]
        );
        assert_eq!(
            rig.sink.buffered_ids(&Tenant::new("a")),
            vec![RecordId { lsn: 1, index: 0 }]
        );

        assert!(rig.audit.write_owned(&mut audit).await.all_durable());
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let mut records = rig.record_batch(slot);
        assert_eq!(rig.sink.publish_owned(&mut records).await.durable, 1);
        assert_eq!(rig.stored().await.len(), 2);
    });
}

/// Every field of the record schema round-trips through Parquet and the store (ZSTD on and off),
/// and the object key is `records/tenant=T/date=YYYY-MM-DD/hour=HH/<unique>.parquet`.
///
/// Reasoned mutation (not run as a mutant): drop the `with_timezone_utc()` or swap
/// `attributes`/`resource_attributes` in `record_batch`: the decoded record differs.
#[test]
fn publish_roundtrips_every_record_field_and_keys_objects_by_partition() {
    for zstd in [true, false] {
        let rig = Rig::with(RecordSinkConfig {
            target_partition_bytes: usize::MAX,
            ceiling_bytes: usize::MAX,
            zstd,
            prefix: String::new(),
        });
        let full = LogRecord {
            body: Some("user 42 logged in".into()),
            attributes: [("k", "v"), ("k2", "")].into_iter().collect(),
            resource_attributes: vec![("service.name".into(), "api".into())].into(),
            trace_id: Some([7; 16]),
            span_id: Some([9; 8]),
            params: ["42", ""].into_iter().collect(),
            severity_number: 17,
            severity_text: "ERROR".into(),
            template_version: 3,
            ..rec("t/1", 10, 3, T0 + 5, 0)
        };
        let bare = rec("t/1", 10, 4, T0 + 6, 0);
        let _ = rig.sink.append(full.clone());
        let _ = rig.sink.append(bare.clone());
        block_on(async {
            let mut slot = Vec::new();
            rig.sink.drain_all(&mut slot);
            let mut batch = rig.record_batch(slot);
            assert_eq!(rig.sink.publish_owned(&mut batch).await.durable, 1);
            let back = ourios_sinks::read_records(&rig.store, "").await.unwrap();
            assert_eq!(back, vec![full.clone(), bare.clone()]);
        });
        let keys: Vec<String> = rig.store.puts_per_key().into_keys().collect();
        assert_eq!(keys.len(), 1);
        assert!(
            keys[0].starts_with("records/tenant=t%2F1/date=2023-11-14/hour=22/"),
            "{}",
            keys[0]
        );
        assert!(keys[0].ends_with(".parquet"));
    }
}

/// The size trigger detaches the partition that reached the target, inside `append` after the
/// record was inserted (the detached partition contains it); the ceiling counts only what can
/// be published (a terminal tenant's set-aside bytes stay accounted but do not trip it) and then
/// detaches non-terminal partitions until half the ceiling is free.
///
/// Reasoned mutation (not run as a mutant): move the trigger before `st.insert` in `append`: the
/// detached partition lacks the appended record.
#[test]
fn append_size_trigger_and_ceiling_detach_after_the_handoff() {
    let one = rec("a", 1, 0, T0, 0).estimated_bytes();
    let rig = Rig::with(RecordSinkConfig {
        target_partition_bytes: 3 * one,
        ceiling_bytes: 7 * one,
        zstd: true,
        prefix: String::new(),
    });
    let mut detached = Vec::new();
    for i in 0..3 {
        detached.extend(crate::common::detached_parts(
            rig.sink.append(rec("a", 1, i, T0, 0)),
        ));
    }
    assert_eq!(detached.len(), 1);
    assert_eq!(
        detached[0].records().len(),
        3,
        "includes the triggering record"
    );
    assert_eq!(rig.sink.buffered_records(), 0);

    rig.sink.set_aside(&Tenant::new("z"));
    for i in 0..3 {
        let _ = rig.sink.append(rec("z", 9, i, T0, 0));
    }
    // With the terminal tenant's 3 records the buffer passes the ceiling (7) after 4 more, but
    // what can be published reaches it only at the 7th: nothing is detached before.
    for k in 0..6u32 {
        let detached = crate::common::detached_parts(rig.sink.append(rec(
            "b",
            2,
            k,
            T0 + u64::from(k) * HOUR,
            0,
        )));
        assert!(
            detached.is_empty(),
            "append {k}: a terminal tenant's set-aside bytes do not count toward the ceiling"
        );
        assert!(!rig.sink.over_ceiling(), "append {k}: no push-back either");
    }
    let detached = crate::common::detached_parts(rig.sink.append(rec("c", 3, 0, T0, 0)));
    assert_eq!(
        detached.len(),
        4,
        "7 partitions of one record each: 4 leave, 3 (half the ceiling of 7) stay"
    );
    assert!(
        detached.iter().all(|p| p.key().tenant.as_str() != "z"),
        "never the terminal tenant's"
    );
    assert!(
        !rig.sink.over_ceiling(),
        "detached: below the ceiling again"
    );
    rig.sink.requeue(detached);
    assert!(
        rig.sink.over_ceiling(),
        "requeued (a failed publish): at the ceiling, ingest pushes back"
    );
    let mut slot = Vec::new();
    rig.sink.drain_all(&mut slot);
    assert_eq!(
        rig.sink.buffered_records(),
        3,
        "the terminal tenant stays, accounted"
    );
    assert_eq!(rig.sink.buffered_bytes(), 3 * one);
}

/// The ceiling takes the largest partitions first and stops once at most half the ceiling is
/// left: the smaller partitions keep filling, so with many tenants a partition is not cut at
/// `ceiling / tenants` on every trip (each record file costs a writer, a codec per column, a
/// footer and a put beyond its rows).
///
/// Mutation check (by hand): detach every partition at the ceiling (the rule before), the
/// smallest first, stop while more than half is left (`<` for `<=`), or count what is left
/// wrongly (`/=` for `-=`): the detached tenants differ in one of the two trips.
#[test]
fn the_ceiling_detaches_the_largest_partitions_until_half_is_free() {
    let one = rec("a", 1, 0, T0, 0).estimated_bytes();
    // Records of one size (one frame, indexes under 10): the trip's arithmetic is exact.
    let trip = |sizes: &[(&str, u32)]| {
        let rig = Rig::with(RecordSinkConfig {
            target_partition_bytes: usize::MAX,
            ceiling_bytes: 10 * one,
            zstd: false,
            prefix: String::new(),
        });
        let mut index = 0;
        let mut detached = Vec::new();
        for &(tenant, records) in sizes {
            for _ in 0..records {
                detached.extend(crate::common::detached_parts(
                    rig.sink.append(rec(tenant, 1, index, T0, 0)),
                ));
                index += 1;
            }
        }
        let mut taken: Vec<(String, usize)> = detached
            .iter()
            .map(|p| (p.key().tenant.as_str().to_owned(), p.records().len()))
            .collect();
        taken.sort();
        assert!(!rig.sink.over_ceiling());
        (taken, rig.sink.buffered_bytes())
    };
    let owned = |v: &[(&str, usize)]| -> Vec<(String, usize)> {
        v.iter().map(|&(t, n)| (t.to_owned(), n)).collect()
    };
    // The 10th record reaches the ceiling: a (4) and b (3) leave, 3 of 10 stay (at most 5).
    assert_eq!(
        trip(&[("a", 4), ("b", 3), ("c", 2), ("d", 1)]),
        (owned(&[("a", 4), ("b", 3)]), 3 * one),
        "c and d keep filling"
    );
    // Exactly half left after a leaves: b and c stay.
    assert_eq!(
        trip(&[("a", 5), ("b", 3), ("c", 2)]),
        (owned(&[("a", 5)]), 5 * one),
        "half the ceiling is not over it"
    );
}

/// `requeue` puts a partition back ahead of records appended since it left, restores the
/// accounting and marks it due (so `drain_aged` takes it whatever its age); `park` keeps the
/// audit watermark.
///
/// Reasoned mutation (not run as a mutant): in `RecordState::put_back`, append the requeued records
/// after the newer ones: the order assertion fails.
#[test]
fn requeue_goes_ahead_of_newer_records_restores_accounting_and_marks_due() {
    let rig = Rig::new();
    let sink = rig.sink.clone();
    let _ = sink.append(rec("a", 1, 0, T0, 5));
    let _ = sink.append(rec("a", 1, 1, T0, 6));
    let bytes = sink.buffered_bytes();
    let mut slot = Vec::new();
    sink.drain_all(&mut slot);
    assert_eq!(sink.buffered_bytes(), 0);
    let _ = sink.append(rec("a", 2, 0, T0, 0));
    let mut aged = Vec::new();
    sink.drain_aged(Duration::from_secs(3600), &mut aged);
    assert!(aged.is_empty(), "fresh, not due");
    sink.requeue(slot);
    let key = sink.buffered_keys()[0].clone();
    let info = sink.partition_info(&key).unwrap();
    assert_eq!(info.records, 3);
    assert!(info.due);
    assert_eq!(info.audit_watermark, 6);
    assert_eq!(
        sink.buffered_ids(&Tenant::new("a")),
        vec![
            RecordId { lsn: 1, index: 0 },
            RecordId { lsn: 1, index: 1 },
            RecordId { lsn: 2, index: 0 }
        ]
    );
    assert!(sink.buffered_bytes() > bytes);
    let mut aged = Vec::new();
    sink.drain_aged(Duration::from_secs(3600), &mut aged);
    assert_eq!(aged.len(), 1, "due after a requeue");
    sink.park(aged);
    let info = sink.partition_info(&key).unwrap();
    assert_eq!((info.audit_watermark, info.due), (6, true));
}

/// RFC 0056 §9.3 set-aside: a terminal tenant is skipped by `drain_all`, `drain_aged` and the
/// audit take; its records and events stay buffered and accounted; the set is listed.
///
/// Reasoned mutation (not run as a mutant): remove the `!terminal.contains(..)` filter from
/// `drain_where`: the terminal tenant's partition is drained.
#[test]
fn set_aside_excludes_tenant_from_drains_and_audit_take() {
    let rig = Rig::new();
    let (a, z) = (Tenant::new("a"), Tenant::new("z"));
    let _ = rig.audit.emit(created("z", i128::from(T0), 1));
    let sa = rig.audit.emit(created("a", i128::from(T0), 2));
    let _ = rig.sink.append(rec("a", 1, 0, T0, 0));
    let _ = rig.sink.append(rec("z", 2, 0, T0, 0));
    assert!(rig.sink.set_aside(&z));
    assert!(!rig.sink.set_aside(&z));
    assert!(rig.sink.is_terminal(&z) && rig.audit.is_terminal(&z));
    assert_eq!(
        rig.sink.terminal_tenants().into_iter().collect::<Vec<_>>(),
        vec![z.clone()]
    );
    let mut slot = Vec::new();
    rig.sink.drain_all(&mut slot);
    rig.sink.drain_aged(Duration::ZERO, &mut slot);
    assert_eq!(ids_of(&slot), vec![RecordId { lsn: 1, index: 0 }]);
    let groups = rig.audit.take_groups();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].tenant, a);
    assert_eq!(groups[0].seqs(), vec![sa]);
    assert_eq!(rig.audit.buffered_seqs(&z).len(), 1);
    assert_eq!(
        rig.sink.buffered_ids(&z),
        vec![RecordId { lsn: 2, index: 0 }]
    );
    assert_eq!(rig.sink.buffered_records(), 1);
}

/// RFC 0054 §9.5 (the drain owns nothing on its stack): a panic at the failpoint between
/// partitions leaves the partitions already taken in the `Drained` slot and the rest in the
/// buffer; dropping the `Drained` requeues them, so no id is lost. A panic at the audit take
/// removes nothing.
///
/// Reasoned mutation (not run as a mutant): in `drain_where`, collect removed partitions into a
/// local `Vec` and extend `slot` after the loop: the first partition is lost by the panic.
#[test]
fn fault_drain_panic_between_partitions_keeps_taken_partitions_owned() {
    let _exclusive = crate::common::FAILPOINTS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let scenario = fail::FailScenario::setup();
    let rig = Rig::unguarded(RecordSinkConfig {
        target_partition_bytes: usize::MAX,
        ceiling_bytes: usize::MAX,
        zstd: false,
        prefix: String::new(),
    });
    for h in 0..3u64 {
        let _ = rig.sink.append(rec("a", h, 0, T0 + h * HOUR, 0));
    }
    let seq = rig.audit.emit(created("a", i128::from(T0), 1));
    let before = sorted(rig.all_buffered_ids());
    let mut drained: Drained<ourios_sinks::AuditGroup, ourios_sinks::Partition, ()> =
        Drained::new((), Arc::new(rig.audit.clone()), Arc::new(rig.sink.clone()));
    fail::cfg("sinks::drain::between_partitions", "1*off->1*panic").unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rig.sink.drain_all(drained.record_slot())
    }));
    assert!(r.is_err());
    assert_eq!(
        drained.records().len(),
        2,
        "taken before the panic, owned by Drained"
    );
    assert_eq!(rig.sink.buffered_keys().len(), 1);
    fail::cfg("sinks::audit::take", "panic").unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rig.audit.take_groups()));
    assert!(r.is_err());
    assert_eq!(rig.audit.buffered_seqs(&Tenant::new("a")), vec![seq]);
    drop(drained);
    assert_eq!(sorted(rig.all_buffered_ids()), before);
    scenario.teardown();
}

/// `PartitionKey::derive` buckets by UTC date and hour and fails past `i64::MAX` ns.
///
/// Reasoned mutation (not run as a mutant): compute the hour from `nanos % NANOS_PER_HOUR`: the key
/// differs.
#[test]
fn partition_key_derives_utc_date_and_hour_and_rejects_overflow() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let key = PartitionKey::derive(&rec("a", 1, 0, T0, 0)).unwrap();
    assert_eq!(key.to_string(), "tenant=a/date=2023-11-14/hour=22");
    let err = PartitionKey::derive(&rec("a", 1, 0, u64::try_from(i64::MAX).unwrap() + 1, 0));
    assert_eq!(err.unwrap_err().error_type(), "nanosecond_overflow");
    assert!(PartitionKey::derive(&rec("a", 1, 0, u64::try_from(i64::MAX).unwrap(), 0)).is_ok());
}

/// The consuming calls can run on any executor thread: their futures are `Send` (no lock guard
/// or non-`Send` value is held across an `.await`).
///
/// Reasoned mutation (not run as a mutant): hold the record-state `MutexGuard` across the
/// `put(..).await` in `publish_owned`: this test stops compiling.
#[test]
fn publish_owned_and_write_owned_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let rig = Rig::new();
    let mut records = rig.record_batch(Vec::new());
    let mut audit = rig.audit_batch(Vec::new());
    let publish = rig.sink.publish_owned(&mut records);
    assert_send(&publish);
    let write = rig.audit.write_owned(&mut audit);
    assert_send(&write);
    let (report, outcome) = block_on(async { futures::join!(publish, write) });
    assert!(report.all_durable() && outcome.all_durable());
}

/// A panic at the `sinks::publish::before_put` failpoint (the second partition InFlight) leaves
/// the first in the store and requeues the second and third: the record publish owns its
/// partitions across a panic that is not the store's.
///
/// Reasoned mutation (not run as a mutant): in `publish_owned`, `settle` the lease before the
/// failpoint instead of after the put: the second partition is lost.
#[test]
fn fault_publish_failpoint_panic_requeues_in_flight_and_pending() {
    let _exclusive = crate::common::FAILPOINTS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let scenario = fail::FailScenario::setup();
    let rig = Rig::unguarded(RecordSinkConfig {
        target_partition_bytes: usize::MAX,
        ceiling_bytes: usize::MAX,
        zstd: true,
        prefix: String::new(),
    });
    let parts: Vec<_> = five_partitions(&rig).into_iter().take(3).collect();
    let first = parts[0].ids();
    let rest = sorted(parts[1..].iter().flat_map(|p| p.ids()).collect());
    fail::cfg("sinks::publish::before_put", "1*off->1*panic->off").unwrap();
    block_on(async {
        let mut batch = rig.record_batch(parts);
        assert!(catch(rig.sink.publish_owned(&mut batch)).await.is_err());
        drop(batch);
        assert_eq!(
            rig.stored().await.into_keys().collect::<Vec<_>>(),
            sorted(first)
        );
        assert_eq!(sorted(rig.sink.buffered_ids(&Tenant::new("a"))), rest);
    });
    scenario.teardown();
}

/// I4's input: `unpublished_floor` is the lowest lsn of a tenant's records that are not yet
/// durable wherever they are — buffered, drained into a batch, in flight, requeued — and moves
/// up only when a put returns Ok. A cut that stamps below it never crosses unpublished data,
/// even while a concurrent sweep holds drained partitions (the buffer alone reads empty then).
///
/// Reasoned mutation (not run as a mutant): in `RecordState::remove`, skip the `out` registration
/// and the floor is `None` while the drained partitions sit in the batch.
#[test]
fn i4_unpublished_floor_covers_buffered_drained_in_flight_and_requeued() {
    let rig = Rig::new();
    let t = Tenant::new("a");
    assert_eq!(rig.sink.unpublished_floor(&t), None);
    let parts = five_partitions(&rig); // lsns 1..=5, one partition each, now out of the buffer
    assert!(
        rig.sink.buffered_ids(&t).is_empty(),
        "the buffer alone reads empty"
    );
    assert_eq!(
        rig.sink.unpublished_floor(&t),
        Some(1),
        "drained partitions still count"
    );
    let mut batch = rig.record_batch(parts);
    // First put fails transiently (requeued: floor from the buffer), the rest succeed.
    rig.store
        .on_nth_with_prefix("records/", 0, Fault::Transient);
    let report = block_on(rig.sink.publish_owned(&mut batch));
    let _ = batch.finish();
    assert_eq!(report.durable, 4);
    assert_eq!(
        rig.sink.unpublished_floor(&t),
        Some(1),
        "the requeued partition holds the floor"
    );
    let mut slot = Vec::new();
    rig.sink.drain_all(&mut slot);
    let mut batch = rig.record_batch(slot);
    let _ = block_on(rig.sink.publish_owned(&mut batch));
    let _ = batch.finish();
    assert_eq!(
        rig.sink.unpublished_floor(&t),
        None,
        "everything durable: no floor"
    );
    // A newer record and a panic with it in flight: the unwind puts it back, floor returns.
    let _ = rig.sink.append(rec("a", 9, 0, T0, 0));
    let mut slot = Vec::new();
    rig.sink.drain_all(&mut slot);
    rig.store
        .on_nth_with_prefix("records/", 6, Fault::PanicBeforePut);
    let mut batch = rig.record_batch(slot);
    let result = block_on(catch(rig.sink.publish_owned(&mut batch)));
    assert!(result.is_err());
    assert_eq!(
        rig.sink.unpublished_floor(&t),
        Some(9),
        "in flight (ambiguous) still counts"
    );
    drop(batch);
    assert_eq!(
        rig.sink.unpublished_floor(&t),
        Some(9),
        "requeued by the unwind"
    );
}

/// The sink's gauges follow its buffers, and they are the ones registered with the recorder in
/// force when the sink was built: appends made after that recorder is gone from the thread
/// still move them (the sink holds its gauge handles instead of looking each up by name on every
/// append). Drained, they read zero again.
///
/// Mutation check (by hand): look the gauges up by name in `RecordState::gauges` again and the
/// first assertion fails (the appends reach no recorder); drop the `buffered_records` set and it
/// fails too.
#[test]
fn gauges_follow_the_buffers_on_the_recorder_the_sink_was_built_with() {
    let captured = crate::common::Captured::default();
    let rig = ::metrics::with_local_recorder(&captured, Rig::new);
    for i in 0..3 {
        let _ = rig.sink.append(rec("a", 1, i, T0, 0));
    }
    let gauge = |name| captured.get(name, &[]);
    assert_eq!(gauge(metrics::SINK_BUFFERED_RECORDS), 3.0);
    assert_eq!(
        gauge(metrics::SINK_BUFFERED_BYTES),
        rig.sink.buffered_bytes() as f64
    );
    assert!(rig.sink.buffered_bytes() > 0);
    let mut slot = Vec::new();
    rig.sink.drain_all(&mut slot);
    assert_eq!(slot.len(), 1);
    assert_eq!(gauge(metrics::SINK_BUFFERED_RECORDS), 0.0);
    assert_eq!(gauge(metrics::SINK_BUFFERED_BYTES), 0.0);
}

/// A panic inside the encode is returned as an error, not unwound into the caller; the next
/// encode succeeds. (Here and not in the encoder's unit tests: the failpoint is process-wide and
/// every test of this binary that encodes holds `FAILPOINTS` for reading.)
#[test]
fn an_encoder_panic_is_an_encode_error() {
    let _exclusive = crate::common::FAILPOINTS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let scenario = fail::FailScenario::setup();
    fail::cfg("sinks::encode::records", "1*panic->off").unwrap();
    let record = || vec![rec("t", 1, 0, T0, 0)];
    let err = ourios_sinks::encode_records(&record(), true).unwrap_err();
    assert!(
        matches!(err, ourios_sinks::EncodeError::Panicked { .. }),
        "{err:?}"
    );
    assert_eq!(err.error_type(), "encoder_panic");
    assert!(err.to_string().contains("sinks::encode::records"), "{err}");
    assert!(ourios_sinks::encode_records(&record(), true).is_ok());
    scenario.teardown();
}
