//! A damaged snapshot: a real miner's snapshot with fuzzed edits, or fuzzed bytes whole.
//! Restoring either refuses with an error or yields a miner that mines the next line without
//! panicking and rebuilds it exactly.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use ourios_miner::{FixedClock, MinerConfig, Template, TenantMiner};

fuzz_target!(|data: &[u8]| {
    let clock = Arc::new(FixedClock::new(1));
    let mut miner = TenantMiner::new("t", MinerConfig::default(), clock.clone());
    for line in [
        "user 42 logged in from 10.0.0.7",
        "user 43 logged in from 10.0.0.9",
        "disk /dev/sda1 is 91% full",
    ] {
        let _ = miner.ingest(line);
    }
    let mut bytes = miner.snapshot();
    let whole = data.first().is_some_and(|b| b & 1 == 1);
    if whole {
        bytes = data[1..].to_vec();
    } else {
        for c in data.get(1..).unwrap_or_default().chunks_exact(3) {
            let at = usize::from(u16::from_le_bytes([c[0], c[1]])) % bytes.len();
            bytes[at] = c[2];
        }
    }
    let Ok(mut restored) = TenantMiner::restore("t", MinerConfig::default(), clock, &bytes) else {
        return;
    };
    let line = "user 44 logged in from 10.0.0.3";
    let mined = restored.ingest(line);
    if let Some(text) = restored
        .templates()
        .find(|(id, _, _)| *id == mined.record.template_id)
        .map(|(_, _, t)| t.to_string())
    {
        let rebuilt = match &mined.record.body {
            Some(b) => b.clone(),
            None => Template::parse(&text)
                .expect("a restored template renders parseably")
                .reconstruct(&mined.record.params)
                .expect("params fit"),
        };
        assert_eq!(rebuilt, line);
    }
});
