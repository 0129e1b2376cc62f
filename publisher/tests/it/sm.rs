//! A random-program model of the publish protocol: appends, sweeps, cuts, store faults and
//! panics in any order never lose a record id, never make a record visible before its audit
//! event, and never exceed one extra object per ambiguous put.

use std::collections::{BTreeMap, BTreeSet};

use ourios_sinks::RecordId;
use ourios_sinks::testing::Fault;
use proptest::prelude::*;

use crate::rig::{Counters, Rig, catching};

#[derive(Debug, Clone)]
enum Op {
    Append {
        tenant: u8,
        hour: u8,
        n: u8,
    },
    Sweep,
    Cut,
    /// Arm a fault on the `nth` next put of the given consumer.
    Fault {
        audit: bool,
        nth: u8,
        kind: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..2, 0u8..3, 1u8..4).prop_map(|(tenant, hour, n)| Op::Append { tenant, hour, n }),
        1 => Just(Op::Sweep),
        2 => Just(Op::Cut),
        2 => (any::<bool>(), 0u8..3, 0u8..4).prop_map(|(audit, nth, kind)| Op::Fault { audit, nth, kind }),
    ]
}

fn fault(kind: u8) -> Fault {
    match kind {
        0 => Fault::Transient,
        1 => Fault::PanicBeforePut,
        2 => Fault::PanicAfterPut,
        _ => Fault::Transient,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 64, ..ProptestConfig::default() })]

    /// T.4-style model: after every step, every appended id is in the store or a buffer, no
    /// record is in the store before its audit event, and no record is in the store more
    /// often than 1 + the ambiguous puts counted so far. At the end a healthy store publishes
    /// everything.
    /// Mutation check: make `RecoverableBatch`'s `Drop` requeue only `Pending` items (not
    /// `InFlight`) and the no-loss check fails on the first panic inside a put.
    #[test]
    fn sm_publish_protocol_no_loss_bounded_duplicates(ops in proptest::collection::vec(op(), 1..14)) {
        let mut rig = Rig::new();
        let counters = Counters::new();
        let mut all: BTreeSet<RecordId> = BTreeSet::new();
        let mut nth: BTreeMap<bool, usize> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Append { tenant, hour, n } => {
                    all.extend(rig.append(["x", "y"][tenant as usize], u64::from(hour), u32::from(n)));
                }
                Op::Sweep | Op::Cut => {
                    let (coord, rt) = (rig.coord.clone(), rig.rt.handle().clone());
                    let sweep = matches!(op, Op::Sweep);
                    let _ = catching(&counters, || {
                        let mut d = if sweep { coord.drain_aged(std::time::Duration::ZERO) } else { coord.drain_all() };
                        rt.block_on(coord.write_ordered(&mut d))
                    });
                }
                Op::Fault { audit, nth: k, kind } => {
                    let prefix = if audit { "audit/" } else { "records/" };
                    // Count puts with this prefix so far to aim at a future one.
                    let seen = rig.store.puts_per_key().keys().filter(|key| key.starts_with(prefix)).count()
                        + *nth.entry(audit).or_default();
                    rig.store.on_nth_with_prefix(prefix, seen + usize::from(k), fault(kind));
                    *nth.entry(audit).or_default() += 0;
                }
            }
            // Invariants after each step.
            let in_store = rig.store_counts();
            let mut buffered = BTreeSet::new();
            for t in ["x", "y"] {
                buffered.extend(rig.buffered(t));
            }
            for id in &all {
                prop_assert!(in_store.contains_key(id) || buffered.contains(id), "lost {:?}", id);
            }
            let audit_in_store: BTreeSet<u64> = rig.store_audit_seqs().into_iter().collect();
            for id in in_store.keys() {
                prop_assert!(audit_in_store.contains(&rig.watermark_of(id.lsn)), "{:?} visible before its event", id);
            }
            let ambiguous = counters.counter(ourios_sinks::metrics::SINK_AMBIGUOUS_PUTS, Some(("consumer", "records")));
            let extra = rig.extra_objects() as u64;
            prop_assert!(extra <= ambiguous, "{} extra objects, {} ambiguous puts", extra, ambiguous);
            prop_assert!(in_store.values().all(|n| (*n as u64) <= 1 + ambiguous));
        }
        rig.store.clear_faults();
        rig.publish_all();
        let in_store = rig.store_counts();
        for id in &all {
            prop_assert!(in_store.contains_key(id), "{:?} never published", id);
        }
    }
}
