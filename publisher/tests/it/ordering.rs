//! I3 under a race: a detached partition published while the audit write it depends on is in
//! flight (held at a gate) is refused, never visible before its template event.

use std::collections::BTreeSet;

use ourios_sinks::testing::{Fault, Gate};

use crate::rig::Rig;

/// I3 / ordering: the cut's audit put for tenant `t` is held at a gate; meanwhile the publisher
/// thread gets a detached partition of `t` whose records depend on that in-flight event. The
/// audit buffer is empty (the event is inside the cut's `RecoverableBatch`), so an
/// "empty buffer = nothing pending" check would publish; `is_durable_through` refuses it. No
/// record object exists while the gate holds; after release everything publishes.
/// Reasoned mutation (not run as a mutant): make `publish_owned` skip the `is_durable_through`
/// check and a record object appears while the gate is still closed.
#[test]
fn i3_detached_publish_racing_inflight_audit_write_is_refused() {
    let mut rig = Rig::new();
    let first: BTreeSet<_> = rig.append("t", 0, 2).into_iter().collect();
    let gate = Gate::new();
    rig.store
        .on_prefix("audit/tenant=t", Fault::Gate(gate.clone()), Some(1));

    let coord = rig.coord.clone();
    let cut_task = rig.rt.spawn(async move {
        let mut drained = coord.drain_all();
        let verdict = coord.write_ordered(&mut drained).await;
        drop(drained);
        verdict
    });
    rig.rt.block_on(gate.wait_reached());
    assert_eq!(
        rig.audit.buffered_events(),
        0,
        "the event is in flight, not buffered"
    );

    // Records mined after that event depend on it (watermark = its seq).
    let wm = rig.audit.last_seq();
    let r = crate::rig::record("t", 50, 0, crate::rig::T0 + 7 * crate::rig::HOUR, wm);
    let late = r.id;
    let _ = rig.records.append(r);
    let mut parts = Vec::new();
    rig.records.drain_all(&mut parts);
    let guard = rig.barrier.enter_encode();
    rig.coord.enqueue(rig.owned(parts), &guard);
    let completion = guard
        .publish_completion()
        .expect("a detach registers a completion");
    drop(guard);
    // Bounded wait for the publisher to finish the item (a condition, not a timed race).
    crate::rig::wait_until("the publisher never settled the detached partition", || {
        completion.is_settled()
    });
    assert!(
        rig.store_ids().is_empty(),
        "a record became visible while its audit event was in flight"
    );
    assert!(
        rig.buffered("t").contains(&late),
        "the refused partition must be requeued"
    );

    gate.release();
    let verdict = rig.rt.block_on(cut_task).unwrap();
    assert!(verdict.is_durable(&ourios_sinks::Tenant::new("t")));
    rig.publish_all();
    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    assert!(first.is_subset(&store) && store.contains(&late));
}
