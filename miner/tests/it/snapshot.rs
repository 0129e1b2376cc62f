//! Snapshots: restore-and-continue equals an uninterrupted run; damage is always detected.

use std::sync::Arc;

use ourios_miner::{
    FixedClock, MinerCluster, MinerConfig, SNAPSHOT_FORMAT_VERSION, SnapshotError, TenantMiner,
};
use proptest::prelude::*;

use crate::support::{StepClock, changes_only, every_key_defined, lines, mine_all, miner};

fn restore(bytes: &[u8]) -> Result<TenantMiner, SnapshotError> {
    TenantMiner::restore(
        "tenant-a",
        MinerConfig::default(),
        Arc::new(FixedClock::new(0)),
        bytes,
    )
}

fn sample_snapshot() -> Vec<u8> {
    let mut m = miner(Arc::new(FixedClock::new(0)));
    for line in [
        "user alice logged in",
        "user bob logged in",
        "disk full",
        "a  b",
    ] {
        let _ = m.ingest(line);
    }
    m.snapshot()
}

/// Rewrites the header of `bytes` around a new payload, with a correct length and checksum.
fn reseal(bytes: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = bytes[..24].to_vec();
    out[16..24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[8..12]), &out[16..]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    out
}

proptest! {
    /// Proves template identity survives a restart that cannot use its snapshot (lost, damaged,
    /// or taken under another configuration): the first process mines a prefix under the
    /// default configuration, the second starts empty under another similarity threshold and
    /// mines the rest. Over both processes' events, no key names two texts, and every record of
    /// either process rebuilds its line from the text its key names. Under (id, version) the
    /// second process hands out id 1 again for another text: the check the audit series of the
    /// old scheme failed.
    #[test]
    fn prop_keys_survive_a_lost_snapshot_and_a_new_config(
        lines in lines(60),
        cut in 0usize..=60,
        similarity in 0.1f64..0.9,
    ) {
        let cut = cut.min(lines.len());
        let mut first = miner(StepClock::new(0, 1));
        let before = mine_all(&mut first, &lines[..cut]);
        let config = MinerConfig::default()
            .with_similarity_threshold(similarity)
            .expect("a valid threshold");
        let mut second = TenantMiner::new("tenant-a", config, StepClock::new(0, 1));
        let after = mine_all(&mut second, &lines[cut..]);
        if let Err(e) = every_key_defined("tenant-a", &lines[cut..], &after) {
            prop_assert!(false, "second process: {}", e);
        }
        // One store holds both processes' events: join every record against all of them.
        let mut texts = std::collections::HashMap::new();
        for m in before.iter().chain(&after) {
            if let Some(e) = &m.event {
                let old = texts.insert(e.template_key(), e.template().to_owned());
                prop_assert!(old.is_none_or(|o| o == e.template()), "key {} names two texts", e.template_key());
            }
        }
        for (line, m) in lines.iter().zip(before.iter().chain(&after)) {
            let text = texts.get(&m.record.template_key).expect("every key has a definition");
            let rebuilt = match &m.record.body {
                Some(b) => b.clone(),
                None => ourios_miner::Template::parse(text).unwrap().reconstruct(&m.record.params).unwrap(),
            };
            prop_assert_eq!(&rebuilt, line);
        }
    }

    /// Proves snapshot, restore, continue equals an uninterrupted run: the same records and
    /// template changes for the lines after the cut, and the same final state; the restored
    /// miner adds a definition for each key it uses that it did not create itself, so every
    /// record after the restore has its key defined by the restored process.
    /// Reasoned mutation (not run as a mutant): leave `next_seq` out of the snapshot
    /// (`#[serde(skip)]`) and the first event after the cut restarts at sequence 1.
    #[test]
    fn prop_snapshot_restore_continue_matches_uninterrupted(lines in lines(60), cut in 0usize..=60) {
        let cut = cut.min(lines.len());
        let mut uninterrupted = miner(StepClock::new(-5, 2));
        let all = mine_all(&mut uninterrupted, &lines);

        let clock = StepClock::new(-5, 2);
        let mut first = miner(clock.clone());
        let mut out = mine_all(&mut first, &lines[..cut]);
        let bytes = first.snapshot();
        drop(first);
        let mut second = TenantMiner::restore("tenant-a", MinerConfig::default(), clock, &bytes)
            .expect("a fresh snapshot restores");
        let after = mine_all(&mut second, &lines[cut..]);
        // The restored process defines every key its records name, itself.
        if let Err(e) = every_key_defined("tenant-a", &lines[cut..], &after) {
            prop_assert!(false, "{}", e);
        }
        out.extend(after);
        prop_assert_eq!(changes_only(out), changes_only(all));
        prop_assert_eq!(second.snapshot(), uninterrupted.snapshot());
    }

    /// Proves any single flipped bit, anywhere in a snapshot, is detected (header fields by
    /// their checks, everything else by the CRC32C), so a damaged snapshot always sends the
    /// caller to replay instead of resuming from a wrong state.
    /// Reasoned mutation (not run as a mutant): skip the `stored != computed` comparison in
    /// `snapshot::decode` and a flip inside the payload restores (or fails only by luck in the
    /// decoder).
    #[test]
    fn prop_corrupt_snapshot_is_detected(lines in lines(30), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut m = miner(StepClock::new(0, 1));
        let _ = mine_all(&mut m, &lines);
        let mut bytes = m.snapshot();
        let i = pos.index(bytes.len());
        bytes[i] ^= 1 << bit;
        prop_assert!(restore(&bytes).is_err(), "flip of bit {} at byte {} restored", bit, i);
    }

    /// Proves a truncated snapshot (a torn write) is detected at every length.
    /// Reasoned mutation (not run as a mutant): drop the `Truncated` check in `snapshot::decode`
    /// and a cut inside the header panics on slicing instead of returning an error.
    #[test]
    fn prop_truncated_snapshot_is_detected(lines in lines(30), keep in any::<prop::sample::Index>()) {
        let mut m = miner(StepClock::new(0, 1));
        let _ = mine_all(&mut m, &lines);
        let bytes = m.snapshot();
        let keep = keep.index(bytes.len());
        prop_assert!(restore(&bytes[..keep]).is_err());
    }
}

/// Proves a snapshot of another format version is refused as such, before its checksum is
/// even considered.
/// Reasoned mutation (not run as a mutant): drop the version comparison and this reports a checksum
/// mismatch instead.
#[test]
fn snapshot_wrong_version_is_rejected() {
    let mut bytes = sample_snapshot();
    bytes[8..12].copy_from_slice(&(SNAPSHOT_FORMAT_VERSION + 1).to_le_bytes());
    let err = restore(&bytes).map(|_| ()).expect_err("wrong version");
    assert!(
        matches!(err, SnapshotError::UnsupportedVersion { found, .. } if found == SNAPSHOT_FORMAT_VERSION + 1)
    );
    assert!(err.to_string().contains("tenant-a"), "{err}");
}

/// Proves a sound snapshot of another tenant, or taken under another configuration, is
/// refused: its state is not the state this tenant and configuration mine to.
/// Reasoned mutation (not run as a mutant): remove the config comparison in `snapshot::decode` and
/// the second restore succeeds.
#[test]
fn snapshot_of_other_tenant_or_config_is_rejected() {
    let bytes = sample_snapshot();
    assert!(restore(&bytes).is_ok());
    let other_tenant = TenantMiner::restore(
        "tenant-b",
        MinerConfig::default(),
        Arc::new(FixedClock::new(0)),
        &bytes,
    );
    assert!(
        matches!(other_tenant, Err(SnapshotError::TenantMismatch { found, .. }) if found == "tenant-a")
    );
    let config = MinerConfig::default()
        .with_similarity_threshold(0.5)
        .expect("valid");
    let other_config =
        TenantMiner::restore("tenant-a", config, Arc::new(FixedClock::new(0)), &bytes);
    assert!(matches!(
        other_config,
        Err(SnapshotError::ConfigMismatch { .. })
    ));
}

/// Proves a snapshot that passes its checksum but breaks the state's invariants (a leaf naming
/// a template that does not exist; a template of the wrong length for its subtree; a token that
/// is no rendering; an even number of slots) is refused rather than trusted into an index panic
/// later.
/// Reasoned mutation (not run as a mutant): skip `state.check()` in `snapshot::decode` and the
/// first case restores.
#[test]
fn snapshot_inconsistent_state_is_rejected() {
    let bytes = sample_snapshot();
    let payload: serde_json::Value = serde_json::from_slice(&bytes[24..]).expect("json payload");
    assert_eq!(
        payload["clusters"][0]["template"],
        serde_json::json!(["", "user", " ", null, " ", "logged", " ", "in", ""])
    );

    let mut bad_leaf = payload.clone();
    let nodes = bad_leaf["nodes"].as_array_mut().expect("nodes");
    let leaf = nodes
        .iter_mut()
        .find(|n| n.get("k").is_some())
        .expect("a leaf");
    leaf["k"][0] = serde_json::json!(99);
    let sealed = reseal(&bytes, &serde_json::to_vec(&bad_leaf).expect("encodes"));
    assert!(matches!(
        restore(&sealed),
        Err(SnapshotError::Inconsistent { .. })
    ));

    let mut bad_length = payload.clone();
    bad_length["clusters"][0]["template"] = serde_json::json!(["", "user", " ", null, ""]);
    let sealed = reseal(&bytes, &serde_json::to_vec(&bad_length).expect("encodes"));
    let err = restore(&sealed).map(|_| ()).expect_err("inconsistent");
    assert!(
        err.to_string().contains("2 tokens in the 4-token subtree"),
        "{err}"
    );

    for template in [
        serde_json::json!(["", "user", " ", null, " ", "<FOO>", " ", "in", ""]),
        serde_json::json!(["", "user", " ", null, " ", "logged", " ", "in"]),
        serde_json::json!(["", "user", " ", "", " ", "logged", " ", "in", ""]),
    ] {
        let mut unparsable = payload.clone();
        unparsable["clusters"][0]["template"] = template.clone();
        let sealed = reseal(&bytes, &serde_json::to_vec(&unparsable).expect("encodes"));
        assert!(
            matches!(restore(&sealed), Err(SnapshotError::Decode { .. })),
            "{template}"
        );
    }
}

/// Proves `MinerCluster::restore` installs a sound snapshot and, on a damaged one, returns the
/// error and leaves the tenant's current state untouched.
/// Reasoned mutation (not run as a mutant): remove the tenant's miner before decoding in
/// `MinerCluster::restore` and the failed restore leaves the tenant empty.
#[test]
fn cluster_restore_installs_or_leaves_state_untouched() {
    let mut cluster =
        MinerCluster::with_clock(MinerConfig::default(), Arc::new(FixedClock::new(0)));
    let _ = cluster.mine("a", "user alice logged in");
    let _ = cluster.mine("a", "user bob logged in");
    let good = cluster.snapshot("a");
    let _ = cluster.mine("a", "disk full");
    let after_three = cluster.snapshot("a");

    let mut damaged = good.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x01;
    assert!(cluster.restore("a", &damaged).is_err());
    assert_eq!(cluster.snapshot("a"), after_three);

    cluster.restore("a", &good).expect("sound snapshot");
    assert_eq!(cluster.snapshot("a"), good);
    assert_eq!(
        cluster.tenant("a").map(TenantMiner::template_count),
        Some(1)
    );

    // A tenant that never mined snapshots as empty, and that snapshot restores.
    let empty = cluster.snapshot("never");
    cluster
        .restore("never", &empty)
        .expect("empty snapshot restores");
    assert_eq!(
        cluster.tenant("never").map(TenantMiner::template_count),
        Some(0)
    );
    assert!(cluster.reset("never").is_some());
    assert!(cluster.tenant("never").is_none());
}
