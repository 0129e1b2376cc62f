//! RFC0054.1 / draft leg U.9 / mechanism leg M.2: a two-phase consumer (audit write, then record
//! puts) over a `Drained` built empty first, with a panic injected at each point it can reach.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use ourios_recoverable::{Drained, RequeueCause, Settlement};

use crate::support::{
    Buffer, Event, Guard, Journal, inject, is_injected, lock, quiet_injected_panics,
};

const AUDIT: [u32; 3] = [100, 101, 102];
const RECORDS: [u32; 4] = [0, 1, 2, 3];

/// Where the consumer panics, in execution order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// No panic: the control run.
    Nowhere,
    /// After the audit take moved its batch in, before the record drain starts.
    BetweenTakes,
    /// Inside the record drain, two partitions moved into the slot (sink lock held).
    DuringFill,
    /// Both takes done, before the audit consumption takes its batch.
    BeforeAudit,
    /// Inside the audit write, after the store accepted event `k` (so it is ambiguous).
    InsideAudit(usize),
    /// Audit settled, before the record consumption takes its partitions.
    BetweenConsumptions,
    /// Inside the record publish, after the store accepted partition `k` (ambiguous).
    InsideRecords(usize),
}

struct Fixture {
    journal: Arc<Journal>,
    audit: Arc<Buffer>,
    records: Arc<Buffer>,
}

impl Fixture {
    fn new() -> Self {
        let journal = Arc::new(Journal::default());
        Self {
            audit: Arc::new(Buffer::new("audit", AUDIT.to_vec(), true, journal.clone())),
            records: Arc::new(Buffer::new(
                "records",
                RECORDS.to_vec(),
                false,
                journal.clone(),
            )),
            journal,
        }
    }

    /// A `Drained` over this fixture's buffers, holding nothing yet.
    fn drained(&self) -> Drained<u32, u32, Guard> {
        Drained::new(
            Guard(self.journal.clone()),
            self.audit.clone(),
            self.records.clone(),
        )
    }

    /// Moves everything buffered into `drained`, as both takes would.
    fn take_all(&self, drained: &mut Drained<u32, u32, Guard>) {
        drained.put_audit(std::mem::take(&mut *lock(&self.audit.items)));
        drained
            .record_slot()
            .extend(std::mem::take(&mut *lock(&self.records.items)));
    }

    fn stored(&self, sink: &str) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .journal
            .events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Put { sink: s, id } if s == sink => Some(id),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v
    }
}

/// The publish step shaped as RFC 0054 §9.5 requires: `Drained` exists before either take,
/// each take moves into it as it goes, each consuming call holds a `RecoverableBatch`.
fn publish_step(fx: &Fixture, point: Point, transient_first_record: bool) {
    let at = |p: Point| {
        if point == p {
            inject(&format!("{p:?}"));
        }
    };
    let mut drained = fx.drained();
    // Take 1: the audit take moves its batch in on return.
    let audit = std::mem::take(&mut *lock(&fx.audit.items));
    drained.put_audit(audit);
    at(Point::BetweenTakes);
    // Take 2: the record drain pushes each partition the moment it leaves the buffer, under the
    // sink lock (so a panic here also poisons that lock).
    {
        let mut buffer = lock(&fx.records.items);
        while !buffer.is_empty() {
            let partition = buffer.remove(0);
            drained.record_slot().push(partition);
            if drained.records().len() == 2 {
                at(Point::DuringFill);
            }
        }
    }
    at(Point::BeforeAudit);
    // Consumption 1: write_owned(audit).
    if let Some(mut audit) = drained.take_audit() {
        while let Some(lease) = audit.begin_next() {
            let k = lease.index();
            fx.journal.push(Event::Put {
                sink: "audit",
                id: *audit.item(&lease),
            });
            at(Point::InsideAudit(k));
            let _event = audit.settle(lease, Settlement::Durable);
        }
        let report = audit.finish();
        assert_eq!((report.durable, report.ambiguous), (AUDIT.len(), 0));
    }
    at(Point::BetweenConsumptions);
    // Consumption 2: publish_owned(records), one put per partition.
    let mut records = drained.take_records_where(|_| true);
    while let Some(lease) = records.begin_next() {
        let k = lease.index();
        if transient_first_record && k == 0 {
            // A transient put failure: requeued at once, never parked in a local Vec.
            records.requeue(lease);
            continue;
        }
        fx.journal.push(Event::Put {
            sink: "records",
            id: *records.item(&lease),
        });
        at(Point::InsideRecords(k));
        let _partition = records.settle(lease, Settlement::Durable);
    }
    let _report = records.finish();
    // `drained` drops here holding nothing; its guard is released.
}

fn unwound(ambiguous: usize) -> RequeueCause {
    RequeueCause::Unwound { ambiguous }
}

fn requeued(sink: &'static str, items: &[u32], cause: RequeueCause) -> Event {
    Event::Requeued {
        sink,
        items: items.to_vec(),
        cause,
    }
}

/// The requeues each point must produce, in order (audit before records).
fn expected_requeues(point: Point) -> Vec<Event> {
    match point {
        Point::Nowhere => vec![],
        Point::BetweenTakes => vec![requeued("audit", &AUDIT, unwound(0))],
        Point::DuringFill => vec![
            requeued("audit", &AUDIT, unwound(0)),
            requeued("records", &RECORDS[..2], unwound(0)),
        ],
        Point::BeforeAudit => vec![
            requeued("audit", &AUDIT, unwound(0)),
            requeued("records", &RECORDS, unwound(0)),
        ],
        Point::InsideAudit(k) => vec![
            requeued("audit", &AUDIT[k..], unwound(1)),
            requeued("records", &RECORDS, unwound(0)),
        ],
        Point::BetweenConsumptions => vec![requeued("records", &RECORDS, unwound(0))],
        Point::InsideRecords(k) => vec![requeued("records", &RECORDS[k..], unwound(1))],
    }
}

/// Runs the step with a panic at `point` and checks, naming the point in every failure:
/// nothing stranded, settled items out, ambiguous = the one in-flight put, the exact requeues
/// (audit before records), the guard released once and last.
fn check_point(point: Point) {
    quiet_injected_panics();
    let fx = Fixture::new();
    let outcome = catch_unwind(AssertUnwindSafe(|| publish_step(&fx, point, false)));
    match (&outcome, point) {
        (Ok(()), Point::Nowhere) => {}
        (Err(payload), _) if is_injected(payload.as_ref()) && point != Point::Nowhere => {}
        _ => panic!("{point:?}: unexpected outcome (a non-injected panic, or none)"),
    }

    for (sink, all, buffer) in [
        ("audit", &AUDIT[..], &fx.audit),
        ("records", &RECORDS[..], &fx.records),
    ] {
        let stored = fx.stored(sink);
        let back = buffer.sorted();
        for id in all {
            assert!(
                stored.contains(id) || back.contains(id),
                "{point:?}: {sink} item {id} is stranded (neither stored nor back in its buffer)"
            );
        }
        let mut dedup = back.clone();
        dedup.dedup();
        assert_eq!(dedup, back, "{point:?}: {sink} item requeued twice");
        let both: Vec<u32> = stored
            .iter()
            .copied()
            .filter(|id| back.contains(id))
            .collect();
        let ambiguous: usize = fx
            .journal
            .requeues()
            .iter()
            .filter_map(|e| match e {
                Event::Requeued {
                    sink: s,
                    cause: RequeueCause::Unwound { ambiguous },
                    ..
                } if *s == sink => Some(*ambiguous),
                _ => None,
            })
            .sum();
        assert_eq!(
            both.len(),
            ambiguous,
            "{point:?}: {sink} items both stored and requeued ({both:?}) must be exactly the ambiguous count"
        );
    }

    assert_eq!(
        fx.journal.requeues(),
        expected_requeues(point),
        "{point:?}: requeues and their order"
    );
    let events = fx.journal.events();
    assert_eq!(
        events
            .iter()
            .filter(|e| **e == Event::GuardReleased)
            .count(),
        1,
        "{point:?}: guard released exactly once"
    );
    assert_eq!(
        events.last(),
        Some(&Event::GuardReleased),
        "{point:?}: the guard drops after every requeue"
    );
}

/// Control: no panic publishes everything and requeues nothing.
/// Reasoned mutation (not run as a mutant): delete `self.in_flight -= 1` in
/// `RecoverableBatch::take_in_flight`: `finish` then reports a settled item as ambiguous and the
/// step fails its report assertion.
#[test]
fn rfc0054_1_no_panic_publishes_all_requeues_nothing() {
    check_point(Point::Nowhere);
}

/// A panic between the audit take and the record drain requeues the audit batch the
/// `Drained` already owns (RFC 0054 §9.5: "a panic inside the second take unwinds with the
/// audit batch owned by nobody" must not happen).
/// Reasoned mutation (not run as a mutant): delete the `self.audit.take()` requeue block in
/// `Drained::drop`.
#[test]
fn rfc0054_1_panic_between_takes_requeues_audit() {
    check_point(Point::BetweenTakes);
}

/// A panic part-way through the record drain (two partitions moved, sink lock held and so
/// poisoned) requeues the audit batch, then the two moved partitions.
/// Reasoned mutation (not run as a mutant): delete the `self.records.take()` requeue block in
/// `Drained::drop`.
#[test]
fn rfc0054_1_panic_during_fill_requeues_audit_before_records() {
    check_point(Point::DuringFill);
}

/// A panic after both takes, before the audit write, requeues audit first, records second.
/// Reasoned mutation (not run as a mutant): swap the audit and record blocks in `Drained::drop`.
#[test]
fn rfc0054_1_panic_before_audit_write_requeues_audit_before_records() {
    check_point(Point::BeforeAudit);
}

/// A panic inside the audit write at its first event: that event is ambiguous (accepted, then
/// the panic) and requeued with the rest; records follow.
/// Reasoned mutation (not run as a mutant): make `RecoverableBatch::drop` return without calling
/// `requeue_unsettled`.
#[test]
fn rfc0054_1_panic_inside_audit_write_first_requeues_audit_before_records() {
    check_point(Point::InsideAudit(0));
}

/// A panic inside the audit write at a middle event: the settled first event stays out.
/// Reasoned mutation (not run as a mutant): replace `let ambiguous = self.in_flight;` with `let
/// ambiguous = 0;` in `RecoverableBatch::requeue_unsettled` (the stored-and-requeued event is then
/// uncounted).
#[test]
fn rfc0054_1_panic_inside_audit_write_middle_requeues_audit_before_records() {
    check_point(Point::InsideAudit(1));
}

/// A panic inside the audit write at its last event.
/// Reasoned mutation (not run as a mutant): in `RecoverableBatch::requeue_unsettled`, select only
/// `Slot::Pending(_)` (the in-flight last event is then in the store only and its requeue is
/// missing).
#[test]
fn rfc0054_1_panic_inside_audit_write_last_requeues_audit_before_records() {
    check_point(Point::InsideAudit(2));
}

/// A panic between the audit write and the record publish requeues the records only; the
/// settled audit events stay out.
/// Reasoned mutation (not run as a mutant): delete the `self.records.take()` requeue block in
/// `Drained::drop`.
#[test]
fn rfc0054_1_panic_between_consumptions_requeues_records_not_settled_audit() {
    check_point(Point::BetweenConsumptions);
}

/// A panic inside the record publish at the first partition: it and the rest are requeued,
/// one ambiguous.
/// Reasoned mutation (not run as a mutant): in `RecoverableBatch::drop`, return without calling
/// `requeue_unsettled`.
#[test]
fn rfc0054_1_panic_inside_record_publish_first_requeues_it_and_rest() {
    check_point(Point::InsideRecords(0));
}

/// A panic inside the record publish at a middle partition: the settled ones stay out (not
/// written again), the in-flight one (ambiguous) and the rest are requeued.
/// Reasoned mutation (not run as a mutant): replace `let ambiguous = self.in_flight;` with `let
/// ambiguous = 0;` in `RecoverableBatch::requeue_unsettled`.
#[test]
fn rfc0054_1_panic_inside_record_publish_middle_requeues_only_unsettled() {
    check_point(Point::InsideRecords(2));
}

/// A panic inside the record publish at the last partition requeues that one alone.
/// Reasoned mutation (not run as a mutant): in `RecoverableBatch::requeue_unsettled`, select only
/// `Slot::Pending(_)`.
#[test]
fn rfc0054_1_panic_inside_record_publish_last_requeues_only_last() {
    check_point(Point::InsideRecords(3));
}

/// Draft leg U.4 at the mechanism level: a transient failure on the first put requeues that
/// partition at once (cause `Refused`), so a panic on the third leaves it requeued too, and
/// the third and fourth follow with one ambiguous put.
/// Reasoned mutation (not run as a mutant): make `RecoverableBatch::requeue` mark the slot
/// `Requeued` without calling the target (the first partition is then in neither place).
#[test]
fn rfc0054_u4_transient_first_then_panic_third_leaves_first_requeued() {
    quiet_injected_panics();
    let fx = Fixture::new();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        publish_step(&fx, Point::InsideRecords(2), true)
    }));
    assert!(outcome.is_err_and(|p| is_injected(p.as_ref())));
    assert_eq!(
        fx.journal.requeues(),
        vec![
            requeued("records", &[0], RequeueCause::Refused),
            requeued("records", &[2, 3], unwound(1)),
        ]
    );
    assert_eq!(fx.stored("records"), vec![1, 2]);
    assert_eq!(fx.records.sorted(), vec![0, 2, 3]);
}

/// RFC 0054 §9.5: every normal requeue arm takes what it requeues, so `Drop` handles remaining
/// ownership only and nothing is requeued twice; the guard still drops last.
/// Reasoned mutation (not run as a mutant): delete the `self.record_target.requeue(taken, ..)` call
/// in `Drained::requeue_records_where` (partitions 0 and 2 then vanish); the moves themselves make
/// a second requeue of a taken item impossible to write without a `Clone` bound.
#[test]
fn rfc0054_mech_requeue_arms_take_what_they_requeue_nothing_twice() {
    let fx = Fixture::new();
    {
        let mut drained = fx.drained();
        fx.take_all(&mut drained);
        // The audit-failure arm: audit back, then the records it guards.
        assert_eq!(drained.requeue_audit(), 3);
        assert_eq!(drained.requeue_records_where(|id| id % 2 == 0), 2);
        assert_eq!(drained.records(), &[1, 3]);
        assert!(drained.audit().is_empty());
    }
    assert_eq!(
        fx.journal.events(),
        vec![
            requeued("audit", &AUDIT, RequeueCause::Refused),
            requeued("records", &[0, 2], RequeueCause::Refused),
            requeued("records", &[1, 3], unwound(0)),
            Event::GuardReleased,
        ]
    );
}

/// `take_records_where` moves only the matching partitions (order kept on both sides); a
/// panicking predicate moves nothing, and the unwind requeues every partition from `Drained`.
/// Reasoned mutation (not run as a mutant): in `take_matching`, drop the pre-evaluation and call
/// `extract_if` with `pred` directly (the partitions already extracted when `pred` panics are
/// lost).
#[test]
fn rfc0054_mech_take_records_where_panicking_predicate_strands_nothing() {
    quiet_injected_panics();
    let fx = Fixture::new();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut drained = Drained::new(
            Guard(fx.journal.clone()),
            fx.audit.clone(),
            fx.records.clone(),
        );
        drained
            .record_slot()
            .extend(std::mem::take(&mut *lock(&fx.records.items)));
        let odd = drained.take_records_where(|id| id % 2 == 1);
        assert_eq!((odd.get(0), odd.get(1)), (Some(&1), Some(&3)));
        assert_eq!(drained.records(), &[0, 2]);
        drop(odd);
        let _never =
            drained.take_records_where(|id| if *id == 2 { inject("predicate") } else { true });
    }));
    assert!(outcome.is_err_and(|p| is_injected(p.as_ref())));
    assert_eq!(fx.records.sorted(), RECORDS.to_vec());
    assert_eq!(
        fx.journal.events(),
        vec![
            requeued("records", &[1, 3], unwound(0)),
            requeued("records", &[0, 2], unwound(0)),
            Event::GuardReleased,
        ]
    );
}

/// What a `Drained` holds is what its accessors report: `audit()` the events put in, and
/// `is_empty` only when neither side holds anything. A requeue arm with nothing to requeue
/// does not call its target (the contract promises non-empty `items`).
/// Mutation check (cargo-mutants): `Drained::audit` replaced with an empty slice;
/// `Drained::is_empty` replaced with `true`, or its `&&` made `||`; `n > 0` made `n >= 0` in
/// `requeue_records_where` or `requeue_audit`.
#[test]
fn drained_reports_what_it_holds_and_empty_arms_call_no_target() {
    let fx = Fixture::new();
    let mut drained = fx.drained();
    assert!(drained.is_empty());
    assert_eq!(drained.requeue_audit(), 0);
    assert_eq!(drained.requeue_records_where(|_| true), 0);
    drained.put_audit(std::mem::take(&mut *lock(&fx.audit.items)));
    assert_eq!(drained.audit(), &AUDIT);
    assert!(!drained.is_empty(), "audit held, no records");
    assert_eq!(drained.requeue_audit(), 3);
    drained
        .record_slot()
        .extend(std::mem::take(&mut *lock(&fx.records.items)));
    assert!(!drained.is_empty(), "records held, no audit");
    assert_eq!(drained.requeue_records_where(|_| false), 0);
    assert_eq!(
        fx.journal.requeues(),
        vec![requeued("audit", &AUDIT, RequeueCause::Refused)],
        "no target was called with nothing"
    );
    let _ = drained.requeue_records_where(|_| true);
    assert!(drained.is_empty());
}

/// `finish` requeues what is still held — audit first, records second, cause `Refused` — and
/// hands the guard back undropped; an empty side is not requeued.
/// Mutation check (cargo-mutants): delete either `!` in `Drained::finish` (a held side is then
/// never requeued, and is lost).
#[test]
fn drained_finish_requeues_held_audit_then_records_and_returns_the_guard() {
    let fx = Fixture::new();
    let mut drained = fx.drained();
    fx.take_all(&mut drained);
    let guard = drained.finish();
    assert_eq!(
        fx.journal.events(),
        vec![
            requeued("audit", &AUDIT, RequeueCause::Refused),
            requeued("records", &RECORDS, RequeueCause::Refused),
        ]
    );
    drop(guard);
    assert_eq!(fx.journal.events().last(), Some(&Event::GuardReleased));
    assert_eq!(fx.audit.sorted(), AUDIT.to_vec());
    assert_eq!(fx.records.sorted(), RECORDS.to_vec());

    let fx = Fixture::new();
    let mut drained = fx.drained();
    drained.put_audit(Vec::new());
    drop(drained.finish());
    assert_eq!(fx.journal.events(), vec![Event::GuardReleased]);
}
