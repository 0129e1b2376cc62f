//! An OTLP/HTTP body as a hostile client sends it: protobuf or JSON, gzip or not. Decoding
//! never panics; the records counted on the wire before decoding are the records decoded; what
//! decodes flattens into one line per record, and its canonical bytes (what the WAL keeps)
//! decode back to the same lines (what recovery mines).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ourios_node::otlp::{self, Format};

fuzz_target!(|data: &[u8]| {
    let Some((&select, body)) = data.split_first() else {
        return;
    };
    let format = if select & 1 == 0 {
        Format::Protobuf
    } else {
        Format::Json
    };
    let encoding = (select & 2 != 0).then_some("gzip");
    let limits = otlp::Limits {
        body_bytes: 1 << 20,
        records: 10_000,
    };
    let Ok((canonical, mut request)) = otlp::decode(format, encoding, body, limits) else {
        return;
    };
    // The count taken before decoding is the decoded request's.
    if format == Format::Protobuf && encoding.is_none() {
        assert_eq!(
            otlp::wire_record_count(body),
            Some(otlp::record_count(&request))
        );
    }
    let _ = otlp::expanded_bytes(&request, canonical.len());
    if otlp::stamp_receive_time(&mut request, 1) {
        return; // re-encoded by the node before the WAL: the canonical bytes above are stale
    }
    let lines = otlp::flatten(&request);
    assert_eq!(lines.len(), otlp::record_count(&request));
    let again = otlp::decode_frame(&canonical).expect("canonical bytes decode");
    assert_eq!(otlp::flatten(&again), lines);
});
