//! The audit sink: three-way per-tenant `write_owned` (RFC 0056), per-put ownership, and the
//! `is_durable_through` query that orders records after their events (I3).

use ourios_sinks::testing::{Fault, Gate};
use ourios_sinks::{AuditKind, DeriveError, Tenant, TenantAudit, metrics};

use crate::common::{HOUR, Rig, T0, block_on, block_on_metered, catch, created, rec};

const DAY: i128 = 24 * HOUR as i128;

/// RFC0056.1 at the sink boundary: one tenant's audit put fails permanently while another's
/// succeeds. `write_owned` reports per tenant (a durable, b permanently failed), b's events are
/// not in the store, are not buffered (ownership-settled, dropped), and still read as not
/// durable, so b's dependent record partition is refused by `publish_owned` while a's publishes.
///
/// Reasoned mutation (not run as a mutant): in `write_owned`'s `ErrorClass::Permanent` arm, replace
/// `self.mark_failed(..)` + `settle(.., Dropped)` with `self.mark_durable(&tenant, ..)` (the
/// pre-RFC silent drop): `is_durable_through(b, ..)` turns true and b's records publish.
#[test]
fn rfc0056_1_write_owned_two_tenants_one_permanent() {
    let rig = Rig::new();
    let (a, b) = (Tenant::new("a"), Tenant::new("b"));
    let sa = rig.audit.emit(created("a", i128::from(T0), 1));
    let sb = rig.audit.emit(created("b", i128::from(T0), 2));
    rig.store
        .on_prefix("audit/tenant=b/", Fault::Permanent, None);
    let _ = rig.sink.append(rec("a", 1, 0, T0, sa));
    let _ = rig.sink.append(rec("b", 2, 0, T0, sb));

    block_on(async {
        let mut batch = rig.audit_batch(rig.audit.take_groups());
        let outcome = rig.audit.write_owned(&mut batch).await;
        let report = batch.finish();
        assert_eq!(outcome.get(&a), Some(&TenantAudit::Durable));
        assert!(matches!(
            outcome.get(&b),
            Some(TenantAudit::PermanentlyFailed { reason }) if reason.contains("permanently")
        ));
        assert_eq!(outcome.permanently_failed(), vec![b.clone()]);
        assert_eq!((report.durable, report.dropped, report.requeued), (1, 1, 0));

        assert!(rig.audit.is_durable_through(&a, sa));
        assert!(!rig.audit.is_durable_through(&b, sb));
        assert_eq!(
            rig.audit.buffered_events(),
            0,
            "b's group was settled, not requeued"
        );
        assert_eq!(rig.audit.outstanding_seqs(&b), vec![sb]);
        assert!(rig.audit.failed_tenants().contains_key(&b));
        let seqs = rig.stored_seqs().await;
        assert_eq!(seqs.keys().copied().collect::<Vec<_>>(), vec![sa]);

        // The record side: a publishes, b is refused (its event is lost, never durable).
        let mut slot = Vec::new();
        rig.sink.drain_all(&mut slot);
        let mut records = rig.record_batch(slot);
        let published = rig.sink.publish_owned(&mut records).await;
        drop(records);
        assert_eq!((published.durable, published.refused_unordered), (1, 1));
        let stored = rig.stored().await;
        assert_eq!(stored.keys().map(|id| id.lsn).collect::<Vec<_>>(), vec![1]);
        assert_eq!(rig.sink.buffered_ids(&b).len(), 1);
    });
}

/// RFC0056.2 at the sink boundary: an event whose timestamp is before the epoch (a wrong miner
/// clock) derives no audit partition; `write_owned` reports that tenant permanently failed
/// without attempting a put, and the healthy tenant is durable. The same for a timestamp past
/// `i64::MAX` ns (nanosecond overflow).
///
/// Reasoned mutation (not run as a mutant): in `write_owned`, make the `Err(e)` arm of `group.day`
/// `continue` after settling without `out.record(.., PermanentlyFailed ..)`: the outcome omits b
/// (reads as nothing to report) and the assertion on `get(&b)` fails.
#[test]
fn rfc0056_2_write_owned_pre_epoch_clock_is_permanent_for_tenant() {
    for (ts, expect) in [
        (-5 * DAY, "pre_epoch"),
        (i128::from(i64::MAX) + 1, "nanosecond_overflow"),
    ] {
        let rig = Rig::new();
        let (a, b) = (Tenant::new("a"), Tenant::new("b"));
        let sa = rig.audit.emit(created("a", i128::from(T0), 1));
        let sb = rig.audit.emit(created("b", ts, 2));
        let groups = rig.audit.take_groups();
        let failed_group = groups.iter().find(|g| g.tenant == b).unwrap();
        let err = failed_group.day.clone().unwrap_err();
        assert_eq!(err.error_type(), expect);
        assert!(matches!(
            err,
            DeriveError::PreEpoch { .. } | DeriveError::NanosecondOverflow { .. }
        ));
        let (outcome, metrics) = block_on_metered(async {
            let mut batch = rig.audit_batch(groups);
            rig.audit.write_owned(&mut batch).await
        });
        assert_eq!(outcome.get(&a), Some(&TenantAudit::Durable));
        assert!(matches!(
            outcome.get(&b),
            Some(TenantAudit::PermanentlyFailed { .. })
        ));
        assert_eq!(
            rig.store.put_attempts(),
            1,
            "no put for an underivable group"
        );
        assert!(!rig.audit.is_durable_through(&b, sb));
        assert!(rig.audit.is_durable_through(&a, sa));
        assert_eq!(
            metrics.get(
                metrics::FLUSH_ERRORS,
                &[("error.type", expect), ("consumer", "audit")]
            ),
            1.0
        );
    }
}

/// RFC 0054 §9.7, audit consumer: five groups (one tenant, five days); the first put fails
/// transiently, the third panics. The first and third groups and the not-yet-started fourth and
/// fifth are back in the buffer (ahead of a concurrent emit); the second is durable and is not
/// written again by the healthy retry.
///
/// Reasoned mutation (not run as a mutant): in `write_owned`'s `ErrorClass::Transient` arm, replace
/// `batch.requeue(lease)` with `let _ = batch.settle(lease, Settlement::Dropped)` (a failed group
/// parked outside the batch): the first group's seq is missing from the buffer after the panic.
#[test]
fn fault_audit_transient_first_put_then_panic_third_requeues_first_and_third_onward() {
    let rig = Rig::new();
    let t = Tenant::new("a");
    let seqs: Vec<u64> = (0..5)
        .map(|d| {
            rig.audit
                .emit(created("a", i128::from(T0) + d * DAY, d as u64))
        })
        .collect();
    rig.store.on_nth_with_prefix("audit/", 0, Fault::Transient);
    rig.store
        .on_nth_with_prefix("audit/", 2, Fault::PanicBeforePut);
    block_on(async {
        let mut batch = rig.audit_batch(rig.audit.take_groups());
        assert_eq!(batch.len(), 5);
        let late = rig.audit.emit(created("a", i128::from(T0), 99));
        let panicked = catch(rig.audit.write_owned(&mut batch)).await;
        assert!(panicked.is_err());
        drop(batch);
        // The requeued groups sit ahead of the emit that happened while they were out.
        assert_eq!(
            rig.audit.buffered_seqs(&t),
            vec![seqs[0], seqs[2], seqs[3], seqs[4], late]
        );
        assert!(rig.audit.is_durable_through(&t, seqs[0] - 1));
        assert!(!rig.audit.is_durable_through(&t, seqs[0]));
        let stored = rig.stored_seqs().await;
        assert_eq!(stored.keys().copied().collect::<Vec<_>>(), vec![seqs[1]]);

        rig.store.clear_faults();
        let mut batch = rig.audit_batch(rig.audit.take_groups());
        let outcome = rig.audit.write_owned(&mut batch).await;
        assert!(outcome.all_durable());
        let stored = rig.stored_seqs().await;
        let mut all = seqs.clone();
        all.push(late);
        all.sort();
        assert_eq!(stored.keys().copied().collect::<Vec<_>>(), all);
        assert!(
            stored.values().all(|n| *n == 1),
            "second group written once"
        );
        assert!(rig.audit.is_durable_through(&t, late));
    });
}

/// I3: `is_durable_through` is false while the events are buffered, while they sit in a taken
/// batch (the audit buffer is then empty: the hole where "empty" read as "nothing pending"), and
/// while their put is in flight (held at a gate); true only after the put returned Ok.
///
/// Reasoned mutation (not run as a mutant): make `is_durable_through` consult only `buffer` (not
/// `outstanding`): it turns true as soon as `take_groups` empties the buffer.
#[test]
fn i3_is_durable_through_false_while_events_in_flight() {
    let rig = Rig::new();
    let t = Tenant::new("a");
    let seq = rig.audit.emit(created("a", i128::from(T0), 1));
    assert!(rig.audit.is_durable_through(&t, 0), "no dependency");
    assert!(!rig.audit.is_durable_through(&t, seq), "buffered");
    let gate = Gate::new();
    rig.store
        .on_prefix("audit/", Fault::Gate(gate.clone()), Some(1));
    block_on(async {
        let mut batch = rig.audit_batch(rig.audit.take_groups());
        assert_eq!(rig.audit.buffered_events(), 0);
        assert!(!rig.audit.is_durable_through(&t, seq), "taken, not written");
        let write = rig.audit.write_owned(&mut batch);
        let observe = async {
            gate.wait_reached().await;
            let during = rig.audit.is_durable_through(&t, seq);
            gate.release();
            during
        };
        let (outcome, during) = futures::join!(write, observe);
        assert!(!during, "put in flight");
        assert!(outcome.all_durable());
        assert!(rig.audit.is_durable_through(&t, seq));
        assert!(rig.audit.is_durable_through(&Tenant::new("other"), seq));
    });
}

/// The audit Parquet round-trips every kind with its sequence number and fields.
///
/// Reasoned mutation (not run as a mutant): swap the `template`/`old_template` columns in
/// `encode_audit`'s widened arm: the decoded widening differs.
#[test]
fn audit_parquet_roundtrips_every_kind() {
    let rig = Rig::new();
    let widened = ourios_sinks::AuditEvent {
        tenant: Tenant::new("a"),
        timestamp_unix_nanos: i128::from(T0) + 5,
        kind: AuditKind::TemplateWidened {
            template_key: [3; 16],
            template_id: 3,
            old_version: 1,
            new_version: 2,
            old_template: "x <*>".into(),
            new_template: "<*> <*>".into(),
        },
    };
    let quarantined = ourios_sinks::AuditEvent {
        tenant: Tenant::new("a"),
        timestamp_unix_nanos: i128::from(T0) + 6,
        kind: AuditKind::RecordQuarantined {
            record_id: ourios_sinks::RecordId { lsn: 4, index: 2 },
            partition_key: "tenant=a/underivable".into(),
            error: "boom".into(),
        },
    };
    let events = vec![
        created("a", i128::from(T0), 1),
        widened.clone(),
        quarantined.clone(),
    ];
    let seqs: Vec<u64> = events.iter().map(|e| rig.audit.emit(e.clone())).collect();
    block_on(async {
        let mut batch = rig.audit_batch(rig.audit.take_groups());
        assert!(rig.audit.write_owned(&mut batch).await.all_durable());
        let back = ourios_sinks::read_audit_events(&rig.store, "")
            .await
            .unwrap();
        let expected: Vec<(u64, ourios_sinks::AuditEvent)> = seqs.into_iter().zip(events).collect();
        assert_eq!(back, expected);
    });
}
