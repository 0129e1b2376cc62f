//! Exact reconstruction: template + params give back the original line, byte for byte.

use std::collections::BTreeMap;

use ourios_miner::{Template, TemplateParseError};
use proptest::prelude::*;

use crate::support::{StepClock, lines, miner};

proptest! {
    /// Proves reconstruct(template, params) == line for arbitrary lines (Unicode, tabs,
    /// repeated spaces, leading/trailing whitespace, empty, text that looks like placeholders),
    /// twice: with the miner's live template right after the line is mined, and with the
    /// template parsed back from the audit event of the record's (id, version), which is how a
    /// reader outside the miner rebuilds lines.
    /// Reasoned mutation (not run as a mutant): drop the `SepSlot::Any` push in `Template::params`
    /// and the first lines whose separators differ fail; drop the `\` escape in `push_escaped` and
    /// "\\<x" fails.
    #[test]
    fn prop_reconstruct_is_exact(lines in lines(40)) {
        let mut m = miner(StepClock::new(0, 1));
        let mut rendered: BTreeMap<(u64, u32), String> = BTreeMap::new();
        let mut records = Vec::new();
        for line in &lines {
            let mined = m.ingest(line);
            if let Some(e) = &mined.event {
                rendered.insert((e.template_id(), e.version()), e.template().to_owned());
            }
            let r = mined.record;
            prop_assert_eq!(m.template_version(r.template_id), Some(r.template_version));
            let live = m.template(r.template_id).expect("record names a template");
            prop_assert_eq!(&live.reconstruct(&r.params).expect("param count fits"), line);
            records.push((line, r));
        }
        for (line, r) in records {
            let text = &rendered[&(r.template_id, r.template_version)];
            let parsed = Template::parse(text).expect("rendered templates parse");
            prop_assert_eq!(&parsed.reconstruct(&r.params).expect("param count fits"), line);
        }
    }

    /// Proves the rendered form of every template is a complete description of it for a reader:
    /// it parses back into a template that renders the same and takes as many parameters (that
    /// it rebuilds the same lines is `prop_reconstruct_is_exact`).
    /// Reasoned mutation (not run as a mutant): render `SepSlot::Any` as a single space and
    /// separator widenings fail.
    #[test]
    fn prop_template_rendering_parses_back(lines in lines(40)) {
        let mut m = miner(StepClock::new(0, 1));
        for line in &lines {
            let _ = m.ingest(line);
        }
        for (id, _, t) in m.templates() {
            let text = t.to_string();
            let parsed = Template::parse(&text).expect("rendered templates parse");
            prop_assert_eq!(parsed.to_string(), text.clone(), "template {}", id);
            prop_assert_eq!(parsed.param_count(), t.param_count(), "template {} rendered as {:?}", id, text);
        }
    }
}

/// Proves a parameter list of the wrong length is an error naming both counts, not a wrong line.
/// Reasoned mutation (not run as a mutant): remove the length check in `reconstruct` and this
/// returns `Ok`.
#[test]
fn reconstruct_wrong_param_count_is_an_error() {
    let t = Template::parse("user <*> took <NUM>ms").expect("valid");
    assert_eq!(t.param_count(), 2);
    assert_eq!(
        t.reconstruct(&["bob", "12"]).expect("fits"),
        "user bob took 12ms"
    );
    let err = t.reconstruct(&["bob"]).expect_err("one short");
    assert_eq!((err.expected, err.found), (2, 1));
    assert!(
        err.to_string().contains("takes 2 parameters, 1 given"),
        "{err}"
    );
}

/// Proves strings that no template renders to are rejected, with the offending offset.
/// Reasoned mutation (not run as a mutant): treat an unknown `<...>` as literal text and the first
/// case parses.
#[test]
fn parse_rejects_malformed_renderings() {
    assert!(matches!(
        Template::parse("a <FOO> b"),
        Err(TemplateParseError::UnknownPlaceholder { offset: 2, .. })
    ));
    assert!(matches!(
        Template::parse("a\\"),
        Err(TemplateParseError::DanglingEscape { offset: 1, .. })
    ));
    assert!(matches!(
        Template::parse("a <_>b"),
        Err(TemplateParseError::MixedSeparator { offset: 2, .. })
    ));
}

/// Proves the rendering grammar on fixed examples: wildcards, separator wildcards at the edges,
/// typed holes inside tokens, and escaped literal `<` and `\`.
/// Reasoned mutation (not run as a mutant): swap `SEPARATOR_WILDCARD` handling for whitespace in
/// the parser and the "<_>a<_>" case yields a different template.
#[test]
fn parse_reads_every_slot_kind() {
    let t = Template::parse("<_>a<_>").expect("valid");
    assert_eq!(t.token_count(), 1);
    assert_eq!(t.reconstruct(&["\t", ""]).expect("fits"), "\ta");
    let t = Template::parse("\\<NUM> id=<NUM>, \\\\").expect("valid");
    assert_eq!(t.param_count(), 1);
    assert_eq!(t.reconstruct(&["7"]).expect("fits"), "<NUM> id=7, \\");
    let t = Template::parse("").expect("valid");
    assert_eq!((t.token_count(), t.param_count()), (0, 0));
    assert_eq!(t.reconstruct(&[] as &[&str]).expect("fits"), "");
}

/// Proves a wildcard beside text reads as a parameter of its own: the miner's separators include
/// `,` and a `:` after a quoted string, which a rendering writes without a mark, so a JSON
/// template renders as `{"a":<*>,"b":"<NUM>"}`.
/// Reasoned mutation (not run as a mutant): treat `<*>` inside a token as literal text and the
/// parameter counts fail.
#[test]
fn parse_reads_wildcards_beside_separators() {
    let t = Template::parse(r#"{"a":<*>,"b":"<NUM>"}"#).expect("valid");
    assert_eq!(t.param_count(), 2);
    assert_eq!(
        t.reconstruct(&["\"x, y\"", "7"]).expect("fits"),
        r#"{"a":"x, y","b":"7"}"#
    );
    let t = Template::parse("<*>,<*>").expect("valid");
    assert_eq!(t.param_count(), 2);
    assert_eq!(t.reconstruct(&["a", "b"]).expect("fits"), "a,b");
}

/// Proves renderings written before the tokenizer kept quoted strings whole (tokens split at
/// whitespace alone, so a JSON line's words were tokens) still parse, and rebuild their lines:
/// a store holds them for as long as it keeps the records that name them.
/// Reasoned mutation (not run as a mutant): make a `,` end a token in the parser and `done,<_>`
/// becomes a separator that mixes `,` and `<_>`, which the parser refuses.
#[test]
fn parse_reads_renderings_of_the_whitespace_tokenizer() {
    let t = Template::parse(r#"{"ts":"<TS>","msg":"tenant <*> throttled","n":<NUM>} done,<_>x"#)
        .expect("valid");
    assert_eq!(t.param_count(), 4);
    assert_eq!(
        t.reconstruct(&["2026-12-02T10:00:00Z", "quota", "3", "\t"])
            .expect("fits"),
        "{\"ts\":\"2026-12-02T10:00:00Z\",\"msg\":\"tenant quota throttled\",\"n\":3} done,\tx"
    );
}
