//! The Drain algorithm on fixed examples: masking, similarity, threshold, tree, confidence.

use std::sync::Arc;

use ourios_miner::{ConfigError, FixedClock, Mined, MinerConfig, TenantMiner};

fn mine(config: MinerConfig, lines: &[&str]) -> (TenantMiner, Vec<Mined>) {
    let mut m = TenantMiner::new("t", config, Arc::new(FixedClock::new(0)));
    let out = lines.iter().map(|l| m.ingest(l)).collect();
    (m, out)
}

fn ids(out: &[Mined]) -> Vec<u64> {
    out.iter().map(|m| m.record.template_id).collect()
}

/// Proves masked values are holes from the first line on: lines differing only in numbers,
/// IPs, hex, UUIDs, timestamps and paths share one template at version 1 with one event.
/// Reasoned mutation (not run as a mutant): make `mask_token` return `false` always and the second
/// line no longer shares version 1 of template 1.
#[test]
fn drain_masked_values_do_not_widen() {
    let (m, out) = mine(
        MinerConfig::default(),
        &[
            "2024-01-31T10:00:00Z took 12ms from 10.0.0.1 id=0x1f req 123e4567-e89b-12d3-a456-426614174000 /var/a",
            "2025-02-01T11:30:59Z took 7ms from 192.168.1.20 id=0xbeef req 00000000-0000-0000-0000-000000000000 /srv/b/c",
        ],
    );
    assert_eq!(ids(&out), [1, 1]);
    assert!(out[1].event.is_none());
    assert_eq!(out[1].record.template_version, 1);
    assert_eq!(
        m.template(1).expect("exists").to_string(),
        "<TS> took <NUM>ms from <IPV4> id=<HEX> req <UUID> <PATH>"
    );
    assert_eq!(
        out[1].record.params,
        [
            "2025-02-01T11:30:59Z",
            "7",
            "192.168.1.20",
            "0xbeef",
            "00000000-0000-0000-0000-000000000000",
            "/srv/b/c"
        ]
    );
}

/// Proves the similarity threshold is applied and configurable: 3 of 4 equal tokens (0.75)
/// merge at the default 0.7 and do not at 0.8.
/// Reasoned mutation (not run as a mutant): make `Similarity::reaches` return `true` and the strict
/// run merges.
#[test]
fn drain_similarity_threshold_is_configurable() {
    let lines = ["user alice logged in", "user bob logged in"];
    let (_, out) = mine(MinerConfig::default(), &lines);
    assert_eq!(ids(&out), [1, 1]);
    let strict = MinerConfig::default()
        .with_similarity_threshold(0.8)
        .expect("valid");
    let (_, out) = mine(strict, &lines);
    assert_eq!(ids(&out), [1, 2]);
}

/// Proves similarity counts only the template's non-wildcard tokens: once a template has
/// widened, lines matching all its literal tokens keep joining it instead of founding
/// near-duplicates (with wildcards counted as mismatches, "user <*> from <*>" could never
/// reach 0.7 again).
/// Reasoned mutation (not run as a mutant): count `<*>` slots in `Similarity::literal` and the
/// fourth line founds template 2.
#[test]
fn drain_similarity_ignores_wildcard_slots() {
    let (m, out) = mine(
        MinerConfig::default(),
        &[
            "user alice from paris ok",
            "user bob from paris ok",
            "user carol from rome ok",
            "user dave from oslo ok",
        ],
    );
    assert_eq!(ids(&out), [1, 1, 1, 1]);
    assert_eq!(
        m.template(1).expect("exists").to_string(),
        "user <*> from <*> ok"
    );
}

/// Proves dissimilar lines and lines of different token counts found separate templates. At
/// depth 3 no token routes, so every line of a length meets every template of that length and
/// the similarity alone keeps "cache miss" (0 of 2 tokens equal) out of "disk full".
/// Reasoned mutation (not run as a mutant): make `Similarity::reaches` return `true` and "cache
/// miss" joins template 1.
#[test]
fn drain_dissimilar_lines_found_new_templates() {
    let length_only = MinerConfig::default().with_depth(3).expect("valid");
    let (_, out) = mine(
        length_only,
        &["disk full", "cache miss", "disk full now", "disk full"],
    );
    assert_eq!(ids(&out), [1, 2, 3, 1]);
}

/// Proves a changed separator is a template change: the slot widens to `<_>`, an event says
/// so, and the separator becomes a parameter.
/// Reasoned mutation (not run as a mutant): treat every separator as matching in `sep_matches` and
/// the second record reconstructs with one space.
#[test]
fn drain_separator_change_widens_with_event() {
    let (m, out) = mine(MinerConfig::default(), &["a b c", "a  b c"]);
    assert_eq!(ids(&out), [1, 1]);
    assert!(out[1].event.is_some());
    let t = m.template(1).expect("exists");
    assert_eq!(t.to_string(), "a<_>b c");
    assert_eq!(out[1].record.params, ["  "]);
    assert_eq!(
        t.reconstruct(&out[1].record.params).expect("fits"),
        "a  b c"
    );
}

/// Proves empty and blank lines mine: zero tokens, one separator slot.
/// Reasoned mutation (not run as a mutant): push no trailing separator in `Tokens::fill` for a line
/// without tokens and reconstruction of "   " yields "".
#[test]
fn drain_empty_and_blank_lines() {
    let (m, out) = mine(MinerConfig::default(), &["", "   ", ""]);
    assert_eq!(ids(&out), [1, 1, 1]);
    let t = m.template(1).expect("exists");
    assert_eq!(t.to_string(), "<_>");
    assert_eq!(t.reconstruct(&out[1].record.params).expect("fits"), "   ");
    assert_eq!(out[2].record.params, [""]);
}

/// Proves a low-confidence parse keeps its body: a template with more than half its tokens
/// wildcards (confidence 0.4 < 0.5) keeps the line; a confident parse does not.
/// Reasoned mutation (not run as a mutant): invert `confident` in `TenantMiner::record` and the
/// first record keeps a body.
#[test]
fn drain_low_confidence_parse_keeps_body() {
    let config = MinerConfig::default()
        .with_similarity_threshold(0.4)
        .expect("valid");
    let (_, out) = mine(config, &["a b c d e", "a b x y z"]);
    assert_eq!(ids(&out), [1, 1]);
    assert_eq!(out[0].record.body, None);
    assert_eq!(out[1].record.body.as_deref(), Some("a b x y z"));
    let config = MinerConfig::default()
        .with_similarity_threshold(0.4)
        .and_then(|c| c.with_low_confidence_below(0.3))
        .expect("valid");
    let (_, out) = mine(config, &["a b c d e", "a b x y z"]);
    assert_eq!(out[1].record.body, None);
}

/// Proves the tree's child bound: with `max_children = 2` a node keeps one literal child and
/// sends every other first token down the wildcard child, where "beta x" and "gamma x" meet
/// and merge at threshold 0.5; with the default bound "gamma x" has its own branch and founds
/// a template.
/// Reasoned mutation (not run as a mutant): drop the `children.len() + 1 < max_children` guard in
/// `State::insert` and the bounded run founds template 3.
#[test]
fn drain_max_children_sends_overflow_down_the_wildcard() {
    let lines = ["alpha x", "beta x", "gamma x"];
    let half = MinerConfig::default()
        .with_similarity_threshold(0.5)
        .expect("valid");
    let (_, out) = mine(half.clone().with_max_children(2).expect("valid"), &lines);
    assert_eq!(ids(&out), [1, 2, 2]);
    let (_, out) = mine(half, &lines);
    assert_eq!(ids(&out), [1, 2, 3]);
}

/// Proves the tree depth bounds the prefix layers: at the default depth 4 only the first token
/// routes, so lines differing in the second token meet in one leaf and merge; at depth 5 the
/// second token routes too and they do not meet.
/// Reasoned mutation (not run as a mutant): make `prefix_layers` return `depth - 2` and the default
/// run founds two templates.
#[test]
fn drain_depth_bounds_prefix_layers() {
    let lines = ["get alpha done now", "get beta done now"];
    let (_, out) = mine(MinerConfig::default(), &lines);
    assert_eq!(ids(&out), [1, 1]);
    let deeper = MinerConfig::default().with_depth(5).expect("valid");
    let (_, out) = mine(deeper, &lines);
    assert_eq!(ids(&out), [1, 2]);
}

/// Proves out-of-range configuration is refused with the value named.
/// Reasoned mutation (not run as a mutant): write `unit_interval` as `!(v < 0.0 || v > 1.0)` and
/// NaN is accepted.
#[test]
fn drain_config_rejects_out_of_range_values() {
    let c = MinerConfig::default();
    assert!(matches!(
        c.clone().with_similarity_threshold(f64::NAN),
        Err(ConfigError::SimilarityThreshold { .. })
    ));
    assert!(matches!(
        c.clone().with_similarity_threshold(1.5),
        Err(ConfigError::SimilarityThreshold { value }) if value == 1.5
    ));
    assert_eq!(
        c.clone().with_depth(2),
        Err(ConfigError::Depth { value: 2 })
    );
    assert_eq!(
        c.clone().with_max_children(1),
        Err(ConfigError::MaxChildren { value: 1 })
    );
    assert!(matches!(
        c.clone().with_low_confidence_below(-0.1),
        Err(ConfigError::LowConfidenceBelow { .. })
    ));
    assert_eq!(
        ConfigError::Depth { value: 2 }.to_string(),
        "tree depth 2 is below the minimum of 3"
    );
    assert_eq!(c.similarity_threshold(), 0.7);
}

/// Proves the template cap: past `max_templates`, a line of a new shape founds no template; its
/// record goes to the overflow template (id 0, text `<*>`, the line kept whole as its body),
/// defined once per process; lines of known shapes still mine normally; regeneration-only
/// mining applies the same cap and reaches the same state.
#[test]
fn drain_template_cap_sends_new_shapes_to_the_overflow_template() {
    let config = MinerConfig::default().with_max_templates(2).unwrap();
    let mut m = TenantMiner::new("t", config.clone(), Arc::new(FixedClock::new(5)));
    let lines = [
        "alpha 1",
        "beta gamma 2",
        "delta epsilon zeta 3",
        "eta theta iota kappa 4",
        "alpha 9",
    ];
    let out: Vec<_> = lines.iter().map(|l| m.ingest(l)).collect();
    assert_eq!(m.template_count(), 2, "the cap holds");
    let overflow_key = ourios_miner::TemplateKey::of("t", ourios_miner::TOKEN_WILDCARD);
    for (i, line) in [(2, lines[2]), (3, lines[3])] {
        let r = &out[i].record;
        assert_eq!(
            (r.template_id, r.template_key),
            (0, overflow_key),
            "line {i}"
        );
        assert_eq!(r.body.as_deref(), Some(line), "the line is kept whole");
    }
    assert!(
        matches!(
            out[2].event.as_ref().map(|e| &e.kind),
            Some(ourios_miner::AuditEventKind::TemplateDefined { template_key, .. })
                if *template_key == overflow_key
        ),
        "the overflow key is defined the first time: {:?}",
        out[2].event
    );
    assert!(out[3].event.is_none(), "and only then");
    assert_eq!(out[4].record.template_id, 1, "a known shape still mines");

    let mut regen = TenantMiner::new("t", config, Arc::new(FixedClock::new(5)));
    for l in lines {
        regen.ingest_regenerate(l);
    }
    assert_eq!(regen.snapshot(), m.snapshot());
    assert_eq!(
        MinerConfig::default().with_max_templates(0),
        Err(ourios_miner::ConfigError::MaxTemplates { value: 0 })
    );
}
