//! Regeneration-only mining, and the recovery sequence built on it (DESIGN §7).

use std::sync::Arc;

use ourios_miner::{MinerConfig, TenantMiner};
use proptest::prelude::*;

use crate::support::{
    PanickingClock, StepClock, changes_only, every_key_defined, lines, mine_all, miner,
};

proptest! {
    /// Proves regeneration-only mining emits nothing and leaves the same state as normal mining:
    /// the regenerating miner's clock panics on any read, so not one event is even stamped,
    /// `ingest_regenerate` has no output to emit through, and the two snapshots are
    /// byte-identical (templates, versions, tree and the event sequence number).
    /// Reasoned mutation (not run as a mutant): skip `st.next_seq += 1` when `emit` is false and
    /// the snapshots differ; read the clock regardless of `emit` and the panicking clock fires.
    #[test]
    fn prop_regeneration_only_emits_nothing_and_reaches_same_state(lines in lines(60)) {
        let mut normal = miner(StepClock::new(0, 1));
        let _ = mine_all(&mut normal, &lines);
        let mut regen = miner(Arc::new(PanickingClock));
        for line in &lines {
            regen.ingest_regenerate(line);
        }
        prop_assert_eq!(regen.snapshot(), normal.snapshot());
        prop_assert_eq!(regen.next_event_seq(), normal.next_event_seq());
    }

    /// Proves the recovery sequence: restore the snapshot taken after `S`, regenerate
    /// `(S, X]`, then mine above `X` normally; the records and events mined above `X` equal
    /// those of an uninterrupted run (timestamps aside, which a re-mine takes afresh), and the
    /// final state is the same.
    /// Reasoned mutation (not run as a mutant): make `ingest_regenerate` return without mining and
    /// the templates created in `(S, X]` are created again above `X`, with other ids and events.
    #[test]
    fn prop_recovery_snapshot_regenerate_then_mine_matches_uninterrupted(
        lines in lines(60),
        s in 0usize..=60,
        x in 0usize..=60,
    ) {
        let n = lines.len();
        let (s, x) = (s.min(n), x.min(n));
        let (s, x) = (s.min(x), s.max(x));
        let mut uninterrupted = miner(StepClock::new(0, 1));
        let all = mine_all(&mut uninterrupted, &lines);

        let mut before_crash = miner(StepClock::new(0, 1));
        let _ = mine_all(&mut before_crash, &lines[..s]);
        let snapshot = before_crash.snapshot();

        let mut recovered = TenantMiner::restore(
            "tenant-a",
            MinerConfig::default(),
            StepClock::new(1_000_000, 1),
            &snapshot,
        )
        .expect("a fresh snapshot restores");
        for line in &lines[s..x] {
            recovered.ingest_regenerate(line);
        }
        let above = mine_all(&mut recovered, &lines[x..]);
        if let Err(e) = every_key_defined("tenant-a", &lines[x..], &above) {
            prop_assert!(false, "{}", e);
        }
        prop_assert_eq!(changes_only(above), changes_only(all[x..].to_vec()));
        prop_assert_eq!(recovered.snapshot(), uninterrupted.snapshot());
    }
}
