//! Audit events: every template change emits exactly one, with tenant, sequence and timestamp.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use ourios_miner::{AuditEventKind, Clock, FixedClock, SystemClock, TenantMiner};
use proptest::prelude::*;

use crate::support::{StepClock, lines, miner};

fn rendered_templates(m: &TenantMiner) -> BTreeMap<u64, (u32, String)> {
    m.templates()
        .map(|(id, v, t)| (id, (v, t.to_string())))
        .collect()
}

proptest! {
    /// Proves there is no silent merge: observing every template before and after each line,
    /// each change (a new template, or a template whose rendering changed) comes with exactly
    /// one event describing it (old and new rendering, consecutive versions), a line without a
    /// change has no event, and the totals of changes and events agree.
    /// Reasoned mutation (not run as a mutant): in `TenantMiner::advance`, return `(idx, None)`
    /// instead of the widening event and the first widening fails.
    #[test]
    fn prop_every_widening_emits_event(lines in lines(60)) {
        let mut m = miner(StepClock::new(0, 1));
        let mut before = rendered_templates(&m);
        let (mut changes, mut events) = (0usize, 0usize);
        for line in &lines {
            let mined = m.ingest(line);
            let after = rendered_templates(&m);
            let changed: Vec<_> = after
                .iter()
                .filter(|(id, now)| before.get(id) != Some(now))
                .collect();
            prop_assert!(changed.len() <= 1, "one line changed {} templates", changed.len());
            changes += changed.len();
            events += usize::from(mined.event.is_some());
            match (changed.first(), &mined.event) {
                (None, None) => {}
                (Some(&(&id, (version, text))), Some(e)) => {
                    prop_assert_eq!(e.template_id(), id);
                    prop_assert_eq!(e.version(), *version);
                    prop_assert_eq!(e.template(), text.as_str());
                    match &e.kind {
                        AuditEventKind::TemplateCreated { version, .. } => {
                            prop_assert!(!before.contains_key(&id));
                            prop_assert_eq!(*version, 1);
                        }
                        AuditEventKind::TemplateWidened { old_version, new_version, old_template, .. } => {
                            let (v0, t0) = &before[&id];
                            prop_assert_eq!(old_version, v0);
                            prop_assert_eq!(*new_version, v0 + 1);
                            prop_assert_eq!(old_template, t0);
                        }
                        AuditEventKind::TemplateDefined { .. } => {
                            prop_assert!(false, "a fresh miner defines its keys through its changes");
                        }
                    }
                    prop_assert_eq!(mined.record.template_version, *version);
                }
                (c, e) => prop_assert!(false, "change {:?} with event {:?}", c, e),
            }
            before = after;
        }
        prop_assert_eq!(changes, events);
    }
}

/// Proves a widening event on a fixed example: the old and new templates, the versions, and the
/// records carrying the version they were mined against.
/// Reasoned mutation (not run as a mutant): set `new_version` to `cluster.version` and the second
/// record says version 1.
#[test]
fn audit_widening_carries_old_and_new_template() {
    let mut m = miner(StepClock::new(0, 1));
    let first = m.ingest("user alice logged in");
    let second = m.ingest("user bob logged in");
    let third = m.ingest("user carol logged in");
    assert!(matches!(
        first.event.as_ref().map(|e| &e.kind),
        Some(AuditEventKind::TemplateCreated { template_id: 1, version: 1, template, .. }) if template == "user alice logged in"
    ));
    let widened = second.event.expect("the second line widens");
    assert_eq!(widened.seq, 2);
    assert_eq!(
        widened.kind,
        AuditEventKind::TemplateWidened {
            template_key: ourios_miner::TemplateKey::of("tenant-a", "user <*> logged in"),
            template_id: 1,
            old_version: 1,
            new_version: 2,
            old_template: "user alice logged in".into(),
            new_template: "user <*> logged in".into(),
        }
    );
    assert_eq!(
        (
            first.record.template_version,
            second.record.template_version
        ),
        (1, 2)
    );
    assert_eq!(second.record.params, ["bob"]);
    assert!(
        third.event.is_none(),
        "the widened template already accepts the third line"
    );
    assert_eq!(third.record.template_version, 2);
}

/// Proves a clock before the Unix epoch is representable: the event carries the negative
/// nanoseconds as read (RFC0056.2 depends on the audit sink failing to derive a partition from
/// it, so the miner must neither clamp nor reject it).
/// Reasoned mutation (not run as a mutant): clamp negative readings to 0 in `advance` and this
/// reads 0.
#[test]
fn rfc0056_2_timestamp_before_epoch_is_representable() {
    let before_epoch: i128 = -86_400 * 1_000_000_000 - 1;
    let mut m = miner(Arc::new(FixedClock::new(before_epoch)));
    let e = m
        .ingest("disk full on /dev/sda1")
        .event
        .expect("a new template");
    assert_eq!(e.timestamp_unix_nanos, before_epoch);
}

/// Proves a clock beyond the `i64` nanosecond range (after 2262-04-11) is representable and
/// reaches the event unchanged (the other RFC0056.2 derive failure).
/// Reasoned mutation (not run as a mutant): store the timestamp as `i64` with a saturating cast and
/// this reads `i64::MAX`.
#[test]
fn rfc0056_2_timestamp_beyond_i64_nanos_is_representable() {
    let beyond: i128 = i128::from(i64::MAX) + 1_000;
    let mut m = miner(Arc::new(FixedClock::new(beyond)));
    let e = m.ingest("disk full").event.expect("a new template");
    assert_eq!(e.timestamp_unix_nanos, beyond);
}

/// Proves the system clock reads the wall clock in nanoseconds since the epoch (between two
/// `SystemTime` readings taken around it; an ordering check, not a timing assertion).
/// Reasoned mutation (not run as a mutant): return microseconds from `SystemClock` and the reading
/// falls below `lo`.
#[test]
fn audit_system_clock_reads_unix_nanos() {
    let read = || {
        i128::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970")
                .as_nanos(),
        )
        .expect("fits")
    };
    let lo = read();
    let now = SystemClock.now_unix_nanos();
    let hi = read();
    assert!(lo <= now && now <= hi, "{lo} <= {now} <= {hi}");
}
