//! Determinism: ids and events are a function of the input order alone.

use std::sync::Arc;

use ourios_miner::{AuditEventKind, MinerCluster, MinerConfig};
use proptest::prelude::*;

use crate::support::{StepClock, lines, mine_all, miner};

proptest! {
    /// Proves the same lines in the same order give the same records, ids, versions, events,
    /// sequence numbers and snapshot bytes, and that ids are handed out 1, 2, 3... in order of
    /// first appearance.
    /// Reasoned mutation (not run as a mutant): in `State::best_match`, collect the leaf's cluster
    /// ids into a `HashSet` and iterate that (random order, so ties resolve differently per run)
    /// and the two runs disagree.
    #[test]
    fn prop_same_input_gives_same_ids_and_events(lines in lines(60)) {
        let mut a = miner(StepClock::new(7, 3));
        let mut b = miner(StepClock::new(7, 3));
        let out_a = mine_all(&mut a, &lines);
        let out_b = mine_all(&mut b, &lines);
        prop_assert_eq!(&out_a, &out_b);
        prop_assert_eq!(a.snapshot(), b.snapshot());
        let mut next_id = 1;
        let mut next_seq = 1;
        for m in &out_a {
            if let Some(e) = &m.event {
                prop_assert_eq!(e.seq, next_seq);
                next_seq += 1;
                if let AuditEventKind::TemplateCreated { template_id, .. } = e.kind {
                    prop_assert_eq!(template_id, next_id);
                    next_id += 1;
                }
            }
            prop_assert!(m.record.template_id < next_id);
        }
    }
}

/// Proves ids, versions and sequence numbers are per tenant: interleaving two tenants' lines in
/// a `MinerCluster` gives each the results it gets alone, and events name their tenant.
/// Reasoned mutation (not run as a mutant): share one `TenantMiner` between tenants in
/// `MinerCluster::tenant_mut` and tenant b's first template gets id 2.
#[test]
fn mine_ids_and_sequences_are_per_tenant() {
    let clock = StepClock::new(0, 1);
    let mut cluster = MinerCluster::with_clock(MinerConfig::default(), clock);
    let a_lines = ["user alice logged in", "user bob logged in", "disk full"];
    let b_lines = ["GET /x 200", "cache miss"];
    let mut a_out = Vec::new();
    let mut b_out = Vec::new();
    for (i, line) in a_lines.iter().enumerate() {
        a_out.push(cluster.mine("a", line));
        if let Some(l) = b_lines.get(i) {
            b_out.push(cluster.mine("b", l));
        }
    }
    let ids =
        |v: &[ourios_miner::Mined]| v.iter().map(|m| m.record.template_id).collect::<Vec<_>>();
    assert_eq!(ids(&a_out), [1, 1, 2]);
    assert_eq!(ids(&b_out), [1, 2]);
    let seqs = |v: &[ourios_miner::Mined], t: &str| {
        v.iter()
            .filter_map(|m| m.event.as_ref())
            .map(|e| {
                assert_eq!(e.tenant, t);
                e.seq
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(seqs(&a_out, "a"), [1, 2, 3]);
    assert_eq!(seqs(&b_out, "b"), [1, 2]);
    assert_eq!(cluster.tenants().collect::<Vec<_>>(), ["a", "b"]);
    let alone = {
        let mut m = ourios_miner::TenantMiner::new(
            "a",
            MinerConfig::default(),
            Arc::new(ourios_miner::FixedClock::new(0)),
        );
        a_lines
            .iter()
            .map(|l| m.ingest(l).record)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        a_out.iter().map(|m| m.record.clone()).collect::<Vec<_>>(),
        alone
    );
}
