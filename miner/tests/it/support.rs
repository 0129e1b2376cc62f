//! Clocks and line generators shared by the tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ourios_miner::{AuditEventKind, Clock, Mined, MinerConfig, Template, TemplateKey, TenantMiner};
use proptest::prelude::*;

/// A clock that reads `start`, `start + step`, `start + 2 * step`... one tick per read.
#[derive(Debug)]
pub(crate) struct StepClock {
    start: i128,
    step: i128,
    ticks: AtomicU64,
}

impl StepClock {
    pub(crate) fn new(start: i128, step: i128) -> Arc<StepClock> {
        Arc::new(StepClock {
            start,
            step,
            ticks: AtomicU64::new(0),
        })
    }
}

impl Clock for StepClock {
    fn now_unix_nanos(&self) -> i128 {
        // Relaxed: a test counter; the tests read it from the thread that mines.
        let t = self.ticks.fetch_add(1, Ordering::Relaxed);
        self.start + self.step * i128::from(t)
    }
}

/// A clock that must never be read (regeneration-only mining does not stamp events).
#[derive(Debug)]
pub(crate) struct PanickingClock;

impl Clock for PanickingClock {
    fn now_unix_nanos(&self) -> i128 {
        panic!("the clock was read")
    }
}

/// A stepping clock whose read number `panic_on` (0-based) panics without consuming a tick, so
/// a resumed run reads the same timestamps an uninterrupted one does.
#[derive(Debug)]
pub(crate) struct GateClock {
    reads: AtomicU64,
    ticks: AtomicU64,
    panic_on: u64,
}

impl GateClock {
    pub(crate) fn new(panic_on: u64) -> Arc<GateClock> {
        Arc::new(GateClock {
            reads: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            panic_on,
        })
    }
}

impl Clock for GateClock {
    fn now_unix_nanos(&self) -> i128 {
        // Relaxed: single-threaded test counters.
        if self.reads.fetch_add(1, Ordering::Relaxed) == self.panic_on {
            panic!("gate clock: injected panic on read {}", self.panic_on);
        }
        1_000 * i128::from(self.ticks.fetch_add(1, Ordering::Relaxed))
    }
}

pub(crate) fn miner(clock: Arc<dyn Clock>) -> TenantMiner {
    TenantMiner::new("tenant-a", MinerConfig::default(), clock)
}

pub(crate) fn mine_all(miner: &mut TenantMiner, lines: &[String]) -> Vec<Mined> {
    let mut out = Vec::new();
    miner.ingest_mined(lines.iter().map(String::as_str), &mut |m| out.push(m));
    out
}

/// The same results with every event timestamp zeroed, for runs whose clocks differ.
pub(crate) fn without_timestamps(mut mined: Vec<Mined>) -> Vec<Mined> {
    for m in &mut mined {
        if let Some(e) = &mut m.event {
            e.timestamp_unix_nanos = 0;
        }
    }
    mined
}

/// The template changes only: definitions dropped, timestamps zeroed. A restored miner emits
/// the definitions an uninterrupted one does not (and reads its clock for them).
pub(crate) fn changes_only(mut mined: Vec<Mined>) -> Vec<Mined> {
    for m in &mut mined {
        if m.event
            .as_ref()
            .is_some_and(|e| matches!(e.kind, AuditEventKind::TemplateDefined { .. }))
        {
            m.event = None;
        }
    }
    without_timestamps(mined)
}

/// The identity promise over one process's output: every record's key was defined by an event
/// of the same output at or before it, and every key names one text, which is the key's own
/// (`TemplateKey::of(tenant, text)`) and rebuilds the record's line from its params.
pub(crate) fn every_key_defined(
    tenant: &str,
    lines: &[String],
    mined: &[Mined],
) -> Result<(), String> {
    let mut texts: std::collections::HashMap<TemplateKey, String> = Default::default();
    for (line, m) in lines.iter().zip(mined) {
        if let Some(e) = &m.event {
            let (key, text) = (e.template_key(), e.template().to_owned());
            if key != TemplateKey::of(tenant, &text) {
                return Err(format!("event key {key} is not the key of `{text}`"));
            }
            if let Some(old) = texts.insert(key, text.clone())
                && old != text
            {
                return Err(format!("key {key} names `{old}` and `{text}`"));
            }
        }
        let Some(text) = texts.get(&m.record.template_key) else {
            return Err(format!(
                "record of `{line}` names undefined key {}",
                m.record.template_key
            ));
        };
        let rebuilt = match &m.record.body {
            Some(body) => body.clone(),
            None => Template::parse(text)
                .map_err(|e| e.to_string())?
                .reconstruct(&m.record.params)
                .map_err(|e| e.to_string())?,
        };
        if &rebuilt != line {
            return Err(format!(
                "`{line}` rebuilt as `{rebuilt}` from key {}",
                m.record.template_key
            ));
        }
    }
    Ok(())
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("user".to_owned()),
        Just("login".to_owned()),
        Just("failed".to_owned()),
        Just("ok".to_owned()),
        Just("GET".to_owned()),
        Just("<*>".to_owned()),
        Just("<_>".to_owned()),
        Just("\\<x".to_owned()),
        Just("<NUM>".to_owned()),
        Just("a\\".to_owned()),
        Just("ünï".to_owned()),
        Just("日本".to_owned()),
        any::<u16>().prop_map(|n| n.to_string()),
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| format!("10.0.{a}.{b}")),
        any::<u32>().prop_map(|n| format!("id={n}")),
        any::<u32>().prop_map(|n| format!("0x{n:x}")),
        any::<u16>().prop_map(|n| format!("{n}ms")),
        "[a-c]{1,2}",
        Just("\"".to_owned()),
        Just("\"a b\"".to_owned()),
        Just("\"x\\\"y".to_owned()),
        Just("k:".to_owned()),
        Just("a,b".to_owned()),
        Just("\"<*> <_>\"".to_owned()),
        any::<u16>().prop_map(|n| format!("\"took {n}ms\"")),
    ]
}

fn sep() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        6 => Just(" "),
        1 => Just("  "),
        1 => Just("\t"),
        1 => Just(" \u{3000}"),
        1 => Just(","),
        1 => Just(", "),
        1 => Just(":"),
    ]
}

/// A line of a few fixed shapes with varying words and separators: many merges and widenings.
fn shaped_line() -> impl Strategy<Value = String> {
    (0usize..6, prop::collection::vec(word(), 3), sep()).prop_map(|(shape, w, s)| match shape {
        0 => format!("user{s}{}{s}logged in from {}", w[0], w[1]),
        1 => format!("GET /api/{} took {}{s}ms", w[0], w[1]),
        2 => format!("{}  connection {} closed", w[0], w[1]),
        3 => format!("\tworker {} {} {}", w[0], w[1], w[2]),
        4 => format!(r#"{{"user":"{}","n":{},"msg":"{}"}}"#, w[0], w[1], w[2]),
        _ => format!("job {} state={} ", w[0], w[1]),
    })
}

/// A line of random words and separators, with optional leading and trailing whitespace.
fn word_line() -> impl Strategy<Value = String> {
    (
        prop::option::of(sep()),
        prop::collection::vec((word(), sep()), 0..7),
        prop::option::of(sep()),
    )
        .prop_map(|(lead, words, trail)| {
            let mut line = lead.unwrap_or_default().to_owned();
            let n = words.len();
            for (i, (w, s)) in words.into_iter().enumerate() {
                line.push_str(&w);
                if i + 1 < n {
                    line.push_str(s);
                }
            }
            line.push_str(trail.unwrap_or_default());
            line
        })
}

/// Any line: mostly shaped, some random words, some arbitrary Unicode, some blank.
pub(crate) fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => shaped_line(),
        3 => word_line(),
        1 => any::<String>(),
        1 => "[ \t]{0,4}",
    ]
}

pub(crate) fn lines(max: usize) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(line(), 0..max)
}
