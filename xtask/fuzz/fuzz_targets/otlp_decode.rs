//! An OTLP/HTTP body as a hostile client sends it: protobuf or JSON, gzip or not. Decoding
//! never panics; the records counted on the wire before decoding are the records decoded; the
//! lines read from the bytes are the lines prost's decoding makes of them (`otlp::wire`); and
//! the canonical bytes (what the WAL keeps) give back the same lines (what recovery mines).
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
    // The walk reads only what prost accepts, and reads it as prost does.
    if format == Format::Protobuf
        && encoding.is_none()
        && let Some(read) = otlp::wire::lines(body)
    {
        let request = otlp::decode_frame(body).expect("prost decodes what the walk read");
        assert_eq!(read.expanded, otlp::expanded_bytes(&request, body.len()));
        assert_eq!(read.lines, otlp::flatten(&request));
    }
    let Ok((canonical, lines)) = otlp::decode(format, encoding, body, limits) else {
        return;
    };
    let mut request = otlp::decode_frame(&canonical).expect("canonical bytes decode");
    // The count taken before decoding is the decoded request's.
    if format == Format::Protobuf && encoding.is_none() {
        assert_eq!(otlp::wire_record_count(body), Some(lines.len()));
    }
    assert_eq!(lines.len(), otlp::record_count(&request));
    assert_eq!(otlp::flatten(&request), lines);
    assert_eq!(otlp::frame_lines(&canonical).expect("canonical bytes decode"), lines);
    // Stamping changes times only, never which records there are.
    otlp::stamp_receive_time(&mut request, 1);
    assert_eq!(otlp::flatten(&request).len(), lines.len());
});
