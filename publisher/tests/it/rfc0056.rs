//! RFC0056.1 and RFC0056.2 through `write_ordered`: a permanent audit failure for one tenant
//! refuses and sets aside that tenant's records while the other tenant publishes.

use std::collections::BTreeSet;

use ourios_publisher::TenantVerdict;
use ourios_sinks::Tenant;
use ourios_sinks::testing::Fault;

use crate::rig::{Rig, T0};

fn assert_terminal_path(
    rig: &mut Rig,
    bad: &str,
    bad_ids: &[ourios_sinks::RecordId],
    good_ids: &[ourios_sinks::RecordId],
) {
    let verdict = rig.write_all_once();

    let bad_t = Tenant::new(bad);
    assert!(
        matches!(
            verdict.tenants.get(&bad_t),
            Some(TenantVerdict::Terminal { .. })
        ),
        "verdict for {bad}: {:?}",
        verdict.tenants.get(&bad_t)
    );
    assert!(!verdict.is_durable(&bad_t));
    assert!(
        verdict.is_durable(&Tenant::new("good")),
        "the healthy tenant must publish: {verdict:?}"
    );
    assert!(rig.records.is_terminal(&bad_t), "{bad} must be terminal");
    assert!(!rig.records.is_terminal(&Tenant::new("good")));

    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    for id in good_ids {
        assert!(store.contains(id), "healthy tenant's {id:?} not published");
    }
    for id in bad_ids {
        assert!(
            !store.contains(id),
            "terminal tenant's {id:?} was published without its audit event"
        );
    }
    let buffered = rig.buffered(bad);
    assert!(
        bad_ids.iter().all(|id| buffered.contains(id)),
        "terminal tenant's records were not requeued"
    );
    assert!(
        !rig.audit.is_durable_through(&bad_t, rig.audit.last_seq()),
        "failed events must not read as durable"
    );

    // Later drains skip the terminal tenant: no further store calls for it, nothing spins.
    let attempts = rig.store.put_attempts();
    for sweep in [false, true, false, true] {
        let mut d = if sweep {
            rig.coord.drain_aged(std::time::Duration::ZERO)
        } else {
            rig.coord.drain_all()
        };
        assert!(
            d.records().iter().all(|p| p.key().tenant != bad_t),
            "a drain took the terminal tenant's partitions"
        );
        assert!(
            d.audit().iter().all(|g| g.tenant != bad_t),
            "a drain took the terminal tenant's audit events"
        );
        let _ = rig.rt.block_on(rig.coord.write_ordered(&mut d));
    }
    assert_eq!(
        rig.store.put_attempts(),
        attempts,
        "the terminal tenant was retried"
    );
    assert_eq!(
        rig.buffered(bad).len(),
        bad_ids.len(),
        "set-aside records stay buffered (and byte-accounted)"
    );
}

/// RFC0056.1 / A.3: a permanent audit-write failure for tenant `bad` beside a healthy tenant:
/// `bad`'s records are unpublished, requeued and set aside (terminal), the healthy tenant's
/// records publish, and later drains — cut drains and sweep drains alike — do not retry `bad`.
/// Reasoned mutation (not run as a mutant): delete the `set_aside` call in `apply_audit_outcome`
/// and `bad` is never terminal (its records are still refused by `is_durable_through`, and later
/// drains retry it).
#[test]
fn rfc0056_1_permanent_audit_failure_sets_tenant_aside_other_tenant_publishes() {
    let mut rig = Rig::new();
    let bad_ids = rig.append("bad", 0, 4);
    let good_ids = rig.append("good", 0, 4);
    rig.store
        .on_prefix("audit/tenant=bad", Fault::Permanent, None);
    assert_terminal_path(&mut rig, "bad", &bad_ids, &good_ids);
}

/// RFC0056.2: an audit event whose partition will not derive (a miner clock before the epoch)
/// takes the same path as a permanent write failure.
/// Reasoned mutation (not run as a mutant): make `write_owned` treat a derive failure as `Retained`
/// and the tenant never becomes terminal.
#[test]
fn rfc0056_2_underivable_audit_event_takes_the_terminal_path() {
    let mut rig = Rig::new();
    let bad_ids = rig.append("bad", 0, 4);
    let good_ids = rig.append("good", 0, 4);
    // One more event of `bad`, stamped by a clock before the epoch, that `bad`'s records depend on.
    let wm = rig.emit_event_at("bad", 99, -(T0 as i128));
    let r = crate::rig::record("bad", 100, 0, T0, wm);
    let mut bad_ids = bad_ids;
    bad_ids.push(r.id);
    let _ = rig.records.append(r);
    assert_terminal_path(&mut rig, "bad", &bad_ids, &good_ids);
}

/// RFC0056.2, the other way a partition will not derive: an event stamped past the nanosecond
/// range (a clock beyond 2262) takes the same terminal path through `write_ordered`.
/// Fails if (reasoned, not yet run as a mutant): `check_nanos` accepts values past `i64::MAX`; the
/// event is written (or the encoder fails transiently), so the tenant never becomes terminal.
#[test]
fn rfc0056_2_nanosecond_overflow_event_takes_the_terminal_path() {
    let mut rig = Rig::new();
    let bad_ids = rig.append("bad", 0, 4);
    let good_ids = rig.append("good", 0, 4);
    let wm = rig.emit_event_at("bad", 99, i128::from(i64::MAX) + 1);
    let r = crate::rig::record("bad", 100, 0, T0, wm);
    let mut bad_ids = bad_ids;
    bad_ids.push(r.id);
    let _ = rig.records.append(r);
    assert_terminal_path(&mut rig, "bad", &bad_ids, &good_ids);
}

/// A transient audit failure retains the tenant (requeued, not terminal), and the next healthy
/// write publishes everything: retained is not terminal.
/// Reasoned mutation (not run as a mutant): map `Retained` to the terminal arm and the tenant is
/// set aside.
#[test]
fn rfc0056_transient_audit_failure_retains_not_terminal() {
    let mut rig = Rig::new();
    let ids = rig.append("t", 0, 3);
    rig.store
        .on_prefix("audit/tenant=t", Fault::Transient, Some(1));
    let mut d = rig.coord.drain_all();
    let verdict = rig.rt.block_on(rig.coord.write_ordered(&mut d));
    drop(d);
    assert_eq!(
        verdict.tenants.get(&Tenant::new("t")),
        Some(&TenantVerdict::Requeued)
    );
    assert!(!rig.records.is_terminal(&Tenant::new("t")));
    assert!(
        rig.store_ids().is_empty(),
        "records published while their audit write was retained"
    );
    rig.publish_all();
    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    assert!(ids.iter().all(|id| store.contains(id)));
}

/// A permanent record-put failure (here a store that denies `records/tenant=bad/`) takes the
/// same terminal path as a permanent audit failure: `bad` is terminal with the store's reason,
/// its records stay buffered (requeued, set aside), `good` publishes, and later drains neither
/// take nor retry `bad`. Before, the failure was reported and dropped: `bad` was retried on
/// every drain forever, and each failure failed the cut's verdict for every tenant.
///
/// Fails if (reasoned, not yet run as a mutant): the `set_aside` call after `publish_owned` in
/// `write_ordered` is deleted; `bad` is never terminal.
#[test]
fn permanent_record_put_failure_makes_the_tenant_terminal() {
    let mut rig = Rig::new();
    let bad_ids = rig.append("bad", 0, 4);
    let good_ids = rig.append("good", 0, 4);
    rig.store
        .on_prefix("records/tenant=bad", Fault::Permanent, None);
    let verdict = rig.write_all_once();
    let bad = Tenant::new("bad");
    assert!(
        matches!(
            verdict.tenants.get(&bad),
            Some(TenantVerdict::Terminal { .. })
        ),
        "{verdict:?}"
    );
    assert!(rig.records.is_terminal(&bad));
    assert!(verdict.is_durable(&Tenant::new("good")), "{verdict:?}");
    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    assert!(good_ids.iter().all(|id| store.contains(id)));
    assert!(bad_ids.iter().all(|id| !store.contains(id)));
    assert!(
        bad_ids.iter().all(|id| rig.buffered("bad").contains(id)),
        "the terminal tenant's records are kept"
    );
    let attempts = rig.store.put_attempts();
    for sweep in [false, true, false, true] {
        let mut d = if sweep {
            rig.coord.drain_aged(std::time::Duration::ZERO)
        } else {
            rig.coord.drain_all()
        };
        assert!(d.records().iter().all(|p| p.key().tenant != bad));
        let _ = rig.rt.block_on(rig.coord.write_ordered(&mut d));
    }
    assert_eq!(rig.store.put_attempts(), attempts, "nothing retried");
}

/// A.3, the triggers: once a permanent audit failure made `bad` terminal, neither of
/// `append`'s triggers detaches its partitions — not the size trigger (each frame of `bad`
/// passes the target) and not the ceiling (its set-aside bytes are not counted, and when a
/// healthy tenant's appends pass the ceiling only healthy partitions detach) — and the sweep's
/// drain skips it; its records stay buffered.
/// Reasoned mutation (not run as a mutant): remove the `!terminal.contains(&key.tenant)` condition
/// from the size trigger in `append` and `bad`'s partitions are detached.
#[test]
fn rfc0056_a3_terminal_tenant_is_not_detached_by_any_trigger() {
    // One record's estimated bytes, measured on a sink of the same kind.
    let one = {
        let mut probe = Rig::new();
        let _ = probe.append("probe", 0, 1);
        probe.records.buffered_bytes()
    };
    let mut rig = Rig::with_config(ourios_sinks::RecordSinkConfig {
        target_partition_bytes: 3 * one,
        ceiling_bytes: 12 * one,
        ..Default::default()
    });
    let (bad_ids, detached) = rig.append_detaching("bad", 0, 2);
    assert!(detached.is_empty());
    rig.store
        .on_prefix("audit/tenant=bad", Fault::Permanent, None);
    let _ = rig.write_all_once();
    let bad = Tenant::new("bad");
    assert!(rig.records.is_terminal(&bad));
    rig.store.clear_faults();

    let mut kept: BTreeSet<_> = bad_ids.into_iter().collect();
    for hour in 0..4 {
        let (ids, detached) = rig.append_detaching("bad", hour, 4);
        kept.extend(ids);
        assert!(
            detached.is_empty(),
            "a trigger detached the terminal tenant: {:?}",
            detached.iter().map(|p| p.key()).collect::<Vec<_>>()
        );
    }
    let mut healthy = Vec::new();
    // Two records per partition stay under the target; the ceiling counts only what can be
    // published, so it fires once the healthy tenant alone reaches it.
    for hour in 0..8 {
        let (_, detached) = rig.append_detaching("good", hour, 2);
        healthy.extend(detached);
    }
    assert!(
        !healthy.is_empty(),
        "the ceiling fires for the healthy tenant"
    );
    assert!(healthy.iter().all(|p| p.key().tenant != bad));
    rig.records.requeue(healthy);

    let sweep = rig.coord.drain_aged(std::time::Duration::ZERO);
    assert!(sweep.records().iter().all(|p| p.key().tenant != bad));
    drop(sweep);
    assert_eq!(
        rig.buffered("bad"),
        kept,
        "the terminal tenant's records stay buffered"
    );
}

/// The verdict of a healthy write: every tenant durable (`all_durable`), and the partitions
/// and records written counted.
/// Mutation check (cargo-mutants): `WriteVerdict::all_durable` replaced with a constant or its
/// `==` made `!=`; `+=` made `*=` on `published_partitions` or `published_records`.
#[test]
fn healthy_write_is_all_durable_and_counts_what_it_wrote() {
    let mut rig = Rig::new();
    rig.append("a", 0, 3);
    rig.append("a", 1, 2);
    rig.append("b", 0, 4);
    let verdict = rig.write_all_once();
    assert!(verdict.all_durable(), "{verdict:?}");
    assert_eq!(
        (verdict.published_partitions, verdict.published_records),
        (3, 9)
    );
}

/// A retained audit write (transient) holds back its tenant's whole record publish, even a
/// partition whose own events were durable before: `a`'s first frame is published with its
/// event; then a second frame that depends only on that durable event is buffered beside a
/// new event whose put fails transiently. The second frame is requeued, not published, and
/// the verdict says `a` is not durable (`all_durable` false); once the store recovers both
/// publish.
/// Mutation check (cargo-mutants): `||` made `&&` in `write_ordered`'s refusal predicate (the
/// I3 check in `publish_owned` alone would let the second frame through).
#[test]
fn retained_audit_holds_back_the_whole_tenant() {
    let mut rig = Rig::new();
    let first = rig.append("a", 0, 2);
    let verdict = rig.write_all_once();
    assert!(verdict.all_durable());
    let durable_event = rig.watermark_of(first[0].lsn);

    let second: Vec<_> = (0..2)
        .map(|i| {
            let r = crate::rig::record("a", 50, i, T0, durable_event);
            let id = r.id;
            let _ = rig.records.append(r);
            id
        })
        .collect();
    let _newer = rig.emit_event("a", 7);
    rig.store
        .on_prefix("audit/tenant=a", Fault::Transient, Some(1));
    let verdict = rig.write_all_once();
    assert!(!verdict.all_durable(), "{verdict:?}");
    assert!(matches!(
        verdict.tenants.get(&Tenant::new("a")),
        Some(TenantVerdict::Requeued)
    ));
    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    assert!(
        second.iter().all(|id| !store.contains(id)),
        "published early"
    );
    assert_eq!(
        rig.buffered("a"),
        second.iter().copied().collect::<BTreeSet<_>>()
    );
    rig.publish_all();
    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    assert!(second.iter().all(|id| store.contains(id)));
}

/// A record the encoder rejects (an observed time past the nanosecond range) is quarantined by
/// `publish_owned` and held until its `record_quarantined` event is durable: the rest of the
/// partition publishes, and the tenant is not durable in that write. The next write makes
/// the event durable and the tenant durable.
/// Mutation check (cargo-mutants): delete the `!` before `quarantine_held_ids(..).is_empty()`
/// in `write_ordered`.
#[test]
fn quarantined_record_keeps_its_tenant_not_durable_while_held() {
    let mut rig = Rig::new();
    let good = rig.append("a", 0, 3);
    let wm = rig.watermark_of(good[0].lsn);
    let mut poisoned = crate::rig::record("a", good[0].lsn, 3, T0, wm);
    poisoned.observed_time_unix_nano = u64::MAX;
    let _ = rig.records.append(poisoned);
    let verdict = rig.write_all_once();
    assert_eq!(verdict.published_records, 3, "{verdict:?}");
    assert!(!verdict.is_durable(&Tenant::new("a")), "{verdict:?}");
    assert_eq!(rig.records.quarantine_held_ids(&Tenant::new("a")).len(), 1);
    let verdict = rig.write_all_once();
    assert!(verdict.all_durable(), "{verdict:?}");
    assert!(
        rig.records
            .quarantine_held_ids(&Tenant::new("a"))
            .is_empty()
    );
}
