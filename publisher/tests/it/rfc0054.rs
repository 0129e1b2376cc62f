//! RFC0054.1 and RFC0054.3, with the §9.7 legs they carry: a panic at every reachable point of
//! a sweep or cut publish keeps every record and every unsettled audit event, and an ambiguous
//! put costs at most one duplicate, counted.

use std::collections::BTreeSet;

use ourios_sinks::testing::Fault;
use ourios_sinks::{RecordId, Tenant};

use crate::rig::{Counters, Rig, catching};

const TENANTS: [&str; 3] = ["a", "b", "c"];

/// Three tenants -> three audit groups (first a, middle b, last c); five record partitions in
/// key order a0 a1 a2 b0 c0 (first a0, middle a2, last c0).
fn populate(rig: &mut Rig) -> Vec<RecordId> {
    let mut ids = Vec::new();
    ids.extend(rig.append("a", 0, 5));
    ids.extend(rig.append("a", 1, 5));
    ids.extend(rig.append("a", 2, 5));
    ids.extend(rig.append("b", 0, 5));
    ids.extend(rig.append("c", 0, 5));
    ids
}

#[derive(Debug, Clone, Copy)]
enum Point {
    /// `fail` failpoint at the entry of the audit take (the first take), nothing removed yet.
    AuditTake,
    /// `fail` failpoint inside the audit take with the buffer already emptied: the events
    /// exist only in the take until it returns.
    AuditTaken,
    /// `fail` failpoint between partitions of the record drain (the second take).
    RecordDrain,
    /// `fail` failpoint in `write_ordered` before `write_owned`.
    BeforeAuditWrite,
    /// Store panics on the n-th audit put; `after` = the put went through (ambiguous).
    InsideAuditWrite { n: usize, after: bool },
    /// `fail` failpoint between the audit write and the record publish.
    BetweenWrites,
    /// Store panics on the n-th record put.
    InsideRecordPublish { n: usize, after: bool },
}

impl Point {
    fn arm(self, rig: &Rig) {
        let f = |after| {
            if after {
                Fault::PanicAfterPut
            } else {
                Fault::PanicBeforePut
            }
        };
        match self {
            Point::AuditTake => fail::cfg("sinks::audit::take", "panic").unwrap(),
            Point::AuditTaken => fail::cfg("sinks::audit::taken", "panic").unwrap(),
            Point::RecordDrain => {
                fail::cfg("sinks::drain::between_partitions", "1*off->panic").unwrap()
            }
            Point::BeforeAuditWrite => {
                fail::cfg("publisher::write_ordered::before_audit", "panic").unwrap()
            }
            Point::InsideAuditWrite { n, after } => {
                rig.store.on_nth_with_prefix("audit/", n, f(after))
            }
            Point::BetweenWrites => {
                fail::cfg("publisher::write_ordered::between", "panic").unwrap()
            }
            Point::InsideRecordPublish { n, after } => {
                rig.store.on_nth_with_prefix("records/", n, f(after))
            }
        }
    }

    /// The store accepted the object before the panic: a real duplicate is possible.
    fn ambiguous(self) -> bool {
        matches!(
            self,
            Point::InsideAuditWrite { after: true, .. }
                | Point::InsideRecordPublish { after: true, .. }
        )
    }

    /// The panic hit a put in flight: from the batch's view its outcome is unknown, so it is
    /// requeued and counted as ambiguous whether or not the store took it.
    fn in_put(self) -> bool {
        matches!(
            self,
            Point::InsideAuditWrite { .. } | Point::InsideRecordPublish { .. }
        )
    }
}

/// Runs one drain + `write_ordered` with a panic at `point`, then checks the RFC0054.1 state,
/// then publishes with a healthy store and checks RFC0054.3's budget. Returns nothing: every
/// check is an assertion naming the point.
fn panic_at(point: Point) {
    let mut rig = Rig::new();
    let ids = populate(&mut rig);
    point.arm(&rig);
    let counters = Counters::new();
    let coord = rig.coord.clone();
    let rt = rig.rt.handle().clone();
    let result = catching(&counters, || {
        let mut drained = coord.drain_all();
        rt.block_on(coord.write_ordered(&mut drained))
    });
    assert!(result.is_err(), "{point:?}: the armed point did not panic");
    fail::remove("sinks::audit::take");
    fail::remove("sinks::audit::taken");
    fail::remove("sinks::drain::between_partitions");
    fail::remove("publisher::write_ordered::before_audit");
    fail::remove("publisher::write_ordered::between");
    rig.store.clear_faults();

    // RFC0054.1: every record is in the store or back in its buffer.
    let in_store: BTreeSet<RecordId> = rig.store_ids().into_iter().collect();
    let mut buffered = BTreeSet::new();
    for t in TENANTS {
        buffered.extend(rig.buffered(t));
    }
    for id in &ids {
        assert!(
            in_store.contains(id) || buffered.contains(id),
            "{point:?}: record {id:?} is lost"
        );
    }
    // A partition whose put returned Ok stays out of the buffer; only the ambiguous one may be
    // in both places.
    let both: Vec<_> = in_store.intersection(&buffered).collect();
    if point.ambiguous() && matches!(point, Point::InsideRecordPublish { .. }) {
        assert!(
            both.len() <= 5,
            "{point:?}: more than the one ambiguous partition is in both places: {both:?}"
        );
    } else {
        assert!(
            both.is_empty(),
            "{point:?}: settled records were requeued: {both:?}"
        );
    }
    // Unsettled audit events are back; settled ones are not (except the ambiguous group).
    let audit_in_store: BTreeSet<u64> = rig.store_audit_seqs().into_iter().collect();
    for t in TENANTS {
        let tenant = Tenant::new(t);
        let buffered_seqs: BTreeSet<u64> = rig.audit.buffered_seqs(&tenant).into_iter().collect();
        for seq in rig.audit.outstanding_seqs(&tenant) {
            assert!(
                buffered_seqs.contains(&seq),
                "{point:?}: audit event {seq} of {t} is neither durable nor buffered"
            );
        }
        let requeued_settled: Vec<_> = buffered_seqs.intersection(&audit_in_store).collect();
        if !matches!(point, Point::InsideAuditWrite { after: true, .. }) {
            assert!(
                requeued_settled.is_empty(),
                "{point:?}: settled audit events of {t} were requeued: {requeued_settled:?}"
            );
        }
    }
    // I3 across the panic: no record is in the store unless the event it depends on is.
    for id in &in_store {
        let wm = rig.watermark_of(id.lsn);
        assert!(
            audit_in_store.contains(&wm),
            "{point:?}: record {id:?} is visible before its audit event {wm}"
        );
    }
    // The put in flight at the panic is counted as ambiguous, and only it.
    let ambiguous = counters.counter(ourios_sinks::metrics::SINK_AMBIGUOUS_PUTS, None);
    assert_eq!(
        ambiguous,
        u64::from(point.in_put()),
        "{point:?}: ambiguous puts counted"
    );

    // RFC0054.2/.3 at this level: a later healthy publish brings every id to the store, at most
    // one extra copy per ambiguous put.
    let objects_before = rig.store.puts_ok_with_prefix("records/");
    rig.publish_all();
    let counts = rig.store_counts();
    for id in &ids {
        assert!(
            counts.get(id).copied().unwrap_or(0) >= 1,
            "{point:?}: {id:?} never reached the store"
        );
    }
    let extra = rig.extra_objects() as u64;
    assert!(
        extra <= ambiguous,
        "{point:?}: {extra} extra objects for {ambiguous} ambiguous puts"
    );
    if matches!(point, Point::InsideRecordPublish { after: true, .. }) {
        assert_eq!(
            extra, 1,
            "{point:?}: the accepted-then-panicked put must show as one extra object"
        );
    }
    assert!(
        counts.values().all(|n| *n <= 2),
        "{point:?}: a record was written more than twice"
    );
    let _ = objects_before;
    // T.2 for the audit consumer: at most one duplicate audit object, and only when the store
    // took an audit object whose put then panicked.
    let audit_dup = u64::from(matches!(point, Point::InsideAuditWrite { after: true, .. }));
    let extra_audit = rig.extra_audit_objects() as u64;
    assert_eq!(
        extra_audit, audit_dup,
        "{point:?}: {extra_audit} duplicate audit objects"
    );
    let mut per_seq = std::collections::BTreeMap::<u64, usize>::new();
    for seq in rig.store_audit_seqs() {
        *per_seq.entry(seq).or_default() += 1;
    }
    assert!(
        per_seq.values().all(|n| *n as u64 <= 1 + audit_dup),
        "{point:?}: an audit event was written more than once per ambiguous put"
    );
}

/// RFC0054.1 / U.9 / T.1: a panic at each reachable point of the publish — inside the first
/// take, during the record drain (the second take), before the audit write, inside it,
/// between the writes, inside the record publish — leaves every record and unsettled audit
/// event reachable, settled audit events out, and a later healthy publish completes.
/// The AuditTaken case panics with the audit buffer already emptied, which the entry point
/// (AuditTake) never reaches.
/// Reasoned mutation (not run as a mutant): in `PublishCoordinator::drain_all`, move
/// `drain_all(drained.record_slot())` into a local `Vec` pushed into the slot afterwards, and the
/// RecordDrain case loses records; drop the `Taken` guard's requeue in `take_groups` and the
/// AuditTaken case loses events.
#[test]
fn rfc0054_1_panic_at_each_point_keeps_records_and_unsettled_audit() {
    for point in [
        Point::AuditTake,
        Point::AuditTaken,
        Point::RecordDrain,
        Point::BeforeAuditWrite,
        Point::BetweenWrites,
    ] {
        panic_at(point);
    }
}

/// U.2 / T.2 (audit consumer): a panic in the first, a middle and the last audit put — before
/// the store took the object and after — requeues the unsettled groups, keeps settled groups
/// out, and the records wait for their events. After a healthy publish the store holds at most
/// one duplicate audit object, exactly one when the panicking put had been taken.
/// Reasoned mutation (not run as a mutant): in `Drained`'s `Drop`, skip the audit requeue and every
/// case loses events; requeue the settled audit groups too and the duplicate bound fails.
#[test]
fn rfc0054_1_panic_inside_audit_write_first_middle_last() {
    for n in [0, 1, 2] {
        for after in [false, true] {
            panic_at(Point::InsideAuditWrite { n, after });
        }
    }
}

/// U.1 / U.3 / T.2 (record consumer): a panic in the first, a middle (the third) and the last
/// partition put requeues the in-flight and later partitions only; the partitions whose put
/// returned Ok are not written again.
/// Reasoned mutation (not run as a mutant): in `RecoverableBatch`'s `Drop`, requeue only `Pending`
/// items (not `InFlight`) and the in-flight partition is lost.
#[test]
fn rfc0054_1_panic_inside_record_publish_first_middle_last() {
    for n in [0, 2, 4] {
        panic_at(Point::InsideRecordPublish { n, after: false });
    }
}

/// RFC0054.3 / U.12: a panic after the store accepted a partition (first, middle, last): the
/// partition is requeued as ambiguous and counted; published again, every record id is present
/// at least once and the extras are at most the one object per panic.
/// Reasoned mutation (not run as a mutant): make the sinks' `RequeueTarget` ignore `ambiguous` and
/// the count assertion fails.
#[test]
fn rfc0054_3_ambiguous_put_at_most_one_duplicate_counted() {
    for n in [0, 2, 4] {
        panic_at(Point::InsideRecordPublish { n, after: true });
    }
}

/// U.4 / T.3 through `write_ordered`: the first record put fails transiently and the third
/// panics: the first, third and later partitions are back in the buffer, the second is not
/// written again.
/// Reasoned mutation (not run as a mutant): in `publish_owned`, collect transient failures in a
/// local `Vec` requeued after the loop, and the first partition is lost by the panic.
#[test]
fn fault_transient_first_put_then_panic_third_requeues_first_and_third_onward() {
    let mut rig = Rig::new();
    let ids = populate(&mut rig);
    rig.store
        .on_nth_with_prefix("records/", 0, Fault::Transient);
    rig.store
        .on_nth_with_prefix("records/", 2, Fault::PanicBeforePut);
    let counters = Counters::new();
    let (coord, rt) = (rig.coord.clone(), rig.rt.handle().clone());
    let result = catching(&counters, || {
        let mut drained = coord.drain_all();
        rt.block_on(coord.write_ordered(&mut drained))
    });
    assert!(result.is_err());
    rig.store.clear_faults();
    let part = |lsn: u64| {
        ids.iter()
            .filter(|id| id.lsn == lsn)
            .copied()
            .collect::<BTreeSet<_>>()
    };
    let buffered_a = rig.buffered("a");
    assert!(
        part(1).is_subset(&buffered_a),
        "the transiently failed first partition was lost"
    );
    assert!(
        part(3).is_subset(&buffered_a),
        "the panicking third partition was lost"
    );
    let store: BTreeSet<_> = rig.store_ids().into_iter().collect();
    assert!(
        part(2).is_subset(&store),
        "the second partition was not written"
    );
    assert!(
        part(2).is_disjoint(&buffered_a),
        "the second partition was requeued after its put returned Ok"
    );
    rig.publish_all();
    let counts = rig.store_counts();
    assert!(
        ids.iter().all(|id| counts.get(id) == Some(&1)),
        "no duplicate is allowed without an ambiguous put"
    );
}
