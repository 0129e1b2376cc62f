//! The streaming entry point under a panic: the mined prefix is the caller's, the state is at it.

use std::panic::{AssertUnwindSafe, catch_unwind};

use proptest::prelude::*;

use crate::support::{GateClock, lines, mine_all, miner};

proptest! {
    /// Proves what `mine_batch_ordered` relies on: when mining panics part-way through
    /// `ingest_mined` (here the clock panics on its k-th read, i.e. while stamping an event),
    /// every line before the panicking one has already reached the caller; the miner's state is
    /// exactly the state after that prefix (the panicking line changed nothing); and resuming at
    /// the panicking line yields, prefix + resumed, exactly the uninterrupted run.
    /// Reasoned mutation (not run as a mutant): in `TenantMiner::advance`, read the clock after
    /// `st.insert(..)` and the state after the panic includes the panicking line's template, so
    /// resuming founds it twice.
    #[test]
    fn prop_streaming_panic_keeps_mined_prefix(lines in lines(40), k in 0u64..12) {
        let mut reference = miner(GateClock::new(u64::MAX));
        let all = mine_all(&mut reference, &lines);
        let events = all.iter().filter(|m| m.event.is_some()).count() as u64;
        prop_assume!(k < events);

        let mut m = miner(GateClock::new(k));
        let mut prefix = Vec::new();
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            m.ingest_mined(lines.iter().map(String::as_str), &mut |mined| prefix.push(mined));
        }));
        prop_assert!(unwound.is_err(), "the gate clock panics on read {}", k);
        let mined = prefix.len();
        prop_assert_eq!(&prefix[..], &all[..mined]);
        // The panicking line is the one carrying event number k (0-based).
        prop_assert_eq!(prefix.iter().filter(|m| m.event.is_some()).count() as u64, k);
        prop_assert!(all[mined].event.is_some());

        let mut at_prefix = miner(GateClock::new(u64::MAX));
        let _ = mine_all(&mut at_prefix, &lines[..mined]);
        prop_assert_eq!(m.snapshot(), at_prefix.snapshot());

        prefix.extend(mine_all(&mut m, &lines[mined..]));
        prop_assert_eq!(prefix, all);
    }
}

/// Proves the cluster-level entry point keeps the same promise for one tenant: a panic on the
/// second line's event leaves the first record with the caller, the tenant's state at the first
/// line, and the other tenants untouched.
/// Reasoned mutation (not run as a mutant): in `MinerCluster::ingest_mined`, collect into a `Vec`
/// and hand the records to `out` only after the loop, and the prefix is empty after the panic.
#[test]
fn streaming_cluster_panic_keeps_prefix_per_tenant() {
    use ourios_miner::{MinerCluster, MinerConfig};
    let mut cluster = MinerCluster::with_clock(MinerConfig::default(), GateClock::new(2));
    let _ = cluster.mine("other", "disk full");
    let other_before = cluster.snapshot("other");
    let lines = [
        "user alice logged in",
        "cache miss for key",
        "user bob logged in",
    ];
    let mut prefix = Vec::new();
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        cluster.ingest_mined("t", lines, &mut |m| prefix.push(m));
    }));
    assert!(unwound.is_err());
    assert_eq!(prefix.len(), 1);
    assert_eq!(prefix[0].record.template_id, 1);

    let mut reference = MinerCluster::with_clock(MinerConfig::default(), GateClock::new(u64::MAX));
    let _ = reference.mine("t", lines[0]);
    assert_eq!(cluster.snapshot("t"), reference.snapshot("t"));
    assert_eq!(cluster.snapshot("other"), other_before);
}

/// Proves the miner types can move to and be shared between threads (the node keeps a
/// `MinerCluster` behind a lock and mines on encode workers); a compile-time check.
/// Reasoned mutation (not run as a mutant): drop `Send + Sync` from the `Clock` supertraits and
/// this does not compile.
#[test]
fn streaming_miner_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ourios_miner::TenantMiner>();
    assert_send_sync::<ourios_miner::MinerCluster>();
    assert_send_sync::<ourios_miner::Mined>();
}
