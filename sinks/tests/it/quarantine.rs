//! Quarantine (DESIGN.md §6, RFC 0054 §9.5): a record that can never be encoded emits a
//! `record_quarantined` event, is counted with `error.type` = the variant, and is held until
//! that event is durable.

use ourios_sinks::testing::Fault;
use ourios_sinks::{AppendOutcome, AuditKind, RecordId, Tenant, metrics};

use crate::common::{Rig, T0, block_on_metered, rec, sorted};

/// A record whose event time overflows the nanosecond column does not derive a key: `append`
/// reports it quarantined, a `record_quarantined` event (tenant, key text, error) is emitted and
/// counted, the record is held (accounted) until the event is durable, then released; it never
/// reaches the record store while its neighbour publishes.
///
/// Reasoned mutation (not run as a mutant): in `SharedParquetSink::quarantine`, skip
/// `st.held.push(..)` (drop the record at once): `quarantine_held_ids` is empty before the event is
/// durable.
#[test]
fn quarantine_derive_failure_emits_event_and_counts() {
    let rig = Rig::new();
    let t = Tenant::new("a");
    let bad = rec("a", 1, 0, u64::MAX, 0);
    let (_, m) = block_on_metered(async {
        let seq = match rig.sink.append(bad.clone()) {
            AppendOutcome::Quarantined { seq, error } => {
                assert_eq!(error.error_type(), "nanosecond_overflow");
                seq
            }
            other => panic!("{other:?}"),
        };
        let _ = rig.sink.append(rec("a", 2, 0, T0, 0));
        assert_eq!(rig.sink.quarantine_held_ids(&t), vec![bad.id]);
        assert_eq!(rig.sink.buffered_records(), 2);
        assert_eq!(rig.sink.release_quarantined(), 0, "event not durable yet");

        let mut audit = rig.audit_batch(rig.audit.take_groups());
        assert!(rig.audit.write_owned(&mut audit).await.all_durable());
        assert!(rig.audit.is_durable_through(&t, seq));
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot); // releases the held record first
        assert!(rig.sink.quarantine_held_ids(&t).is_empty());
        let mut batch = rig.record_batch(slot);
        assert_eq!(rig.sink.publish_owned(&mut batch).await.durable, 1);

        let events = ourios_sinks::read_audit_events(&rig.store, "")
            .await
            .unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, seq);
        match &events[0].1.kind {
            AuditKind::RecordQuarantined {
                record_id,
                partition_key,
                error,
            } => {
                assert_eq!(*record_id, bad.id);
                assert!(partition_key.contains("tenant=a"));
                assert!(error.contains("nanosecond overflow"), "{error}");
            }
            other => panic!("{other:?}"),
        }
        let stored = rig.stored().await;
        assert_eq!(
            stored.keys().copied().collect::<Vec<_>>(),
            vec![RecordId { lsn: 2, index: 0 }]
        );
        assert_eq!(rig.sink.buffered_records(), 0);
    });
    assert_eq!(
        m.get(
            metrics::FLUSH_ERRORS,
            &[
                ("error.type", "nanosecond_overflow"),
                ("consumer", "records")
            ]
        ),
        1.0
    );
}

/// Content the encoder rejects (an observed time past `i64::MAX` ns) in two of eight records of
/// one partition: `publish_owned` finds exactly those two, quarantines them (events, counter,
/// held) and puts the six others in one object.
///
/// Reasoned mutation (not run as a mutant): in `publish_owned`, requeue the whole partition when
/// the first encode fails instead of calling `find_poisoned`: nothing is durable and the remainder
/// stays buffered.
#[test]
fn quarantine_content_rejection_finds_poisoned_records_remainder_publishes() {
    let rig = Rig::new();
    let t = Tenant::new("a");
    let mut poisoned = Vec::new();
    let mut good = Vec::new();
    for i in 0..8u32 {
        let mut r = rec("a", 1, i, T0, 0);
        if i == 2 || i == 5 {
            r.observed_time_unix_nano = u64::MAX;
            poisoned.push(r.id);
        } else {
            good.push(r.id);
        }
        let _ = rig.sink.append(r);
    }
    let (_, m) = block_on_metered(async {
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let mut batch = rig.record_batch(slot);
        let report = rig.sink.publish_owned(&mut batch).await;
        assert_eq!((report.durable, report.quarantined), (1, 2));
        assert_eq!(report.durable_records, 6);
        assert_eq!(batch.finish().durable, 1);
        let stored = rig.stored().await;
        assert_eq!(stored.keys().copied().collect::<Vec<_>>(), good);
        assert_eq!(sorted(rig.sink.quarantine_held_ids(&t)), poisoned);

        let groups = rig.audit.take_groups();
        let ids: Vec<RecordId> = groups
            .iter()
            .flat_map(|g| &g.events)
            .map(|(_, e)| match &e.kind {
                AuditKind::RecordQuarantined { record_id, .. } => *record_id,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ids, poisoned);
        let mut audit = rig.audit_batch(groups);
        assert!(rig.audit.write_owned(&mut audit).await.all_durable());
        assert_eq!(rig.sink.release_quarantined(), 2);
        assert_eq!(rig.sink.buffered_records(), 0);
    });
    assert_eq!(
        m.get(
            metrics::FLUSH_ERRORS,
            &[
                ("error.type", "observed_time_overflow"),
                ("consumer", "records")
            ]
        ),
        2.0
    );
}

/// A quarantine event that fails to become durable leaves the record held: a transient audit
/// failure (retained) keeps it until the retry succeeds; a permanent one (tenant terminal)
/// keeps it for good. It is never released, and never published.
///
/// Reasoned mutation (not run as a mutant): in `release_quarantined`, release on
/// `audit.buffered_seqs(..)` not containing the seq (the old "empty buffer means nothing pending"):
/// the record is released after the failed write.
#[test]
fn quarantine_failed_emission_keeps_record_held() {
    for fault in [Fault::Transient, Fault::Permanent] {
        let rig = Rig::new();
        let t = Tenant::new("a");
        let bad = rec("a", 1, 0, u64::MAX, 0);
        let _ = rig.sink.append(bad.clone());
        rig.store.on_prefix("audit/", fault.clone(), Some(1));
        block_on_metered(async {
            let mut audit = rig.audit_batch(rig.audit.take_groups());
            let outcome = rig.audit.write_owned(&mut audit).await;
            drop(audit);
            assert!(!outcome.all_durable());
            assert_eq!(rig.sink.release_quarantined(), 0);
            assert_eq!(rig.sink.quarantine_held_ids(&t), vec![bad.id]);
            assert_eq!(rig.sink.buffered_records(), 1);
            assert!(rig.stored().await.is_empty());

            // A retry with a healthy store: the retained event is written and the record
            // released; the permanently failed one is gone and the record stays held.
            let mut audit = rig.audit_batch(rig.audit.take_groups());
            let _ = rig.audit.write_owned(&mut audit).await;
            let released = rig.sink.release_quarantined();
            match fault {
                Fault::Transient => assert_eq!(released, 1),
                _ => {
                    assert_eq!(released, 0);
                    assert_eq!(rig.sink.quarantine_held_ids(&t), vec![bad.id]);
                }
            }
        });
    }
}

/// `find_poisoned` locates rejected rows by per-record validation and returns none for clean
/// input.
///
/// Reasoned mutation (not run as a mutant): make `validate_record` accept any observed time: index
/// 1 is not reported.
#[test]
fn find_poisoned_reports_exactly_the_rejected_indices() {
    let _failpoints = crate::common::FAILPOINTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut records: Vec<_> = (0..4).map(|i| rec("a", 1, i, T0, 0)).collect();
    assert!(ourios_sinks::find_poisoned(&records, true).is_empty());
    records[1].observed_time_unix_nano = u64::MAX;
    let found: Vec<usize> = ourios_sinks::find_poisoned(&records, true)
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    assert_eq!(found, vec![1]);
}
