//! End to end over real HTTP: OTLP protobuf (plain and gzip) and OTLP/JSON in, Parquet out,
//! and bad input refused with a 4xx before anything reaches the WAL.

use std::io::Write;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use ourios_sinks::RecordId;
use ourios_sinks::testing::FaultyStore;
use ourios_wal::Lsn;
use prost::Message;

use crate::support::*;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// What the client sent for one record, as the store must give it back.
#[derive(Debug)]
pub(crate) struct Sent {
    tenant: String,
    id: RecordId,
    body: String,
    time: u64,
    observed: u64,
    severity_number: i32,
    severity_text: String,
    attributes: ourios_sinks::Attributes,
    resource_attributes: Vec<(String, String)>,
    trace_id: Option<[u8; 16]>,
    span_id: Option<[u8; 8]>,
}

/// The records `req` carries, as frame `lsn` of `tenant` (the flattening the OTLP spec
/// defines: resource, scope, record order).
pub(crate) fn expect(tenant: &str, lsn: Lsn, req: &ExportLogsServiceRequest) -> Vec<Sent> {
    let text = |v: &opentelemetry_proto::tonic::common::v1::AnyValue| match &v.value {
        Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) => s.clone(),
        Some(opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(i)) => {
            i.to_string()
        }
        other => panic!("the test sends strings and ints only, not {other:?}"),
    };
    let mut out = Vec::new();
    for rl in &req.resource_logs {
        let resource_attributes: Vec<(String, String)> = rl
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .map(|kv| (kv.key.clone(), text(kv.value.as_ref().unwrap())))
            .collect();
        for sl in &rl.scope_logs {
            for r in &sl.log_records {
                out.push(Sent {
                    tenant: tenant.to_owned(),
                    id: RecordId {
                        lsn: lsn.0,
                        index: out.len() as u32,
                    },
                    body: text(r.body.as_ref().unwrap()),
                    time: r.time_unix_nano,
                    observed: r.observed_time_unix_nano,
                    severity_number: r.severity_number,
                    severity_text: r.severity_text.clone(),
                    attributes: r
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv.value.as_ref().unwrap())))
                        .collect(),
                    resource_attributes: resource_attributes.clone(),
                    trace_id: r.trace_id.as_slice().try_into().ok(),
                    span_id: r.span_id.as_slice().try_into().ok(),
                });
            }
        }
    }
    out
}

impl Sent {
    /// Asserts the store holds this record as sent: the body byte for byte, the times,
    /// severity, attributes, resource attributes, trace and span ids.
    pub(crate) fn assert_stored(
        &self,
        stored: &std::collections::BTreeMap<(String, RecordId), (ourios_sinks::LogRecord, String)>,
    ) {
        let s = self;
        let key = (s.tenant.clone(), s.id);
        let (record, body) = stored
            .get(&key)
            .unwrap_or_else(|| panic!("{key:?} is not in the store"));
        assert_eq!(body.as_bytes(), s.body.as_bytes(), "{key:?} body");
        assert_eq!(record.time_unix_nano, s.time, "{key:?}");
        assert_eq!(record.observed_time_unix_nano, s.observed, "{key:?}");
        assert_eq!(record.severity_number, s.severity_number, "{key:?}");
        assert_eq!(record.severity_text, s.severity_text, "{key:?}");
        assert_eq!(record.attributes, s.attributes, "{key:?}");
        assert_eq!(
            &record.resource_attributes[..],
            &s.resource_attributes[..],
            "{key:?}"
        );
        assert_eq!(record.trace_id, s.trace_id, "{key:?}");
        assert_eq!(record.span_id, s.span_id, "{key:?}");
    }
}

/// Bodies a real service might log, including what a template renderer must escape.
pub(crate) fn tricky_lines() -> Vec<String> {
    vec![
        "payment 7731 failed: card <declined> by issuer\\gateway".into(),
        "payment 7732 failed: card <declined> by issuer\\gateway".into(),
        "ünïcödé user Zoë logged in after 3 attempts".into(),
        "  leading and trailing   spaces 42  ".into(),
        "tab\tseparated\tvalue 17".into(),
        "GET /api/v1/orders/9981?expand=items HTTP/1.1 200 512ms".into(),
        "GET /api/v1/orders/9982?expand=items HTTP/1.1 404 3ms".into(),
        "".into(),
    ]
}

/// End to end: an HTTP/1.1 client sends OTLP protobuf, gzip'd OTLP protobuf, OTLP/JSON
/// written by hand (hex ids, string int64, camelCase) and a request without a tenant header
/// (the default tenant). Each gets 200. After a cut, every record read back from Parquet
/// rebuilds — from the template text in the audit events and the record's params — to the
/// body that was sent, byte for byte, and carries the sent times, severity, attributes,
/// resource attributes, trace and span ids.
///
/// Reasoned mutation (not run as a mutant): in `core::log_record`, take
/// `line.observed_time_unix_nano` as the record time unconditionally and the times read back differ
/// from the ones sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_otlp_protobuf_and_json_round_trip() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), |_| {}), &store).await;
    let mut sent: Vec<Sent> = Vec::new();
    let lsn = || node.core.wal().stats().durable_lsn;

    // Protobuf.
    let req = request(&lines(9, 1));
    let (status, body) = post_logs(&node, "acme", &req).await;
    assert_eq!(status, 200, "{body}");
    sent.extend(expect("acme", lsn(), &req));

    // gzip'd protobuf.
    let req = request(&tricky_lines());
    let (status, body) = http(
        node.addr,
        "POST",
        "/v1/logs",
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "gzip"),
            (ourios_node::TENANT_HEADER, "acme"),
        ],
        &gzip(&req.encode_to_vec()),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    sent.extend(expect("acme", lsn(), &req));

    // OTLP/JSON as a client writes it.
    let json = r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"json-svc"}}]},"scopeLogs":[{"scope":{"name":"s"},"logRecords":[
        {"timeUnixNano":"1700000000000000123","observedTimeUnixNano":"1700000000000000456","severityNumber":17,"severityText":"ERROR","body":{"stringValue":"disk /dev/sda1 is 91% full"},"attributes":[{"key":"host","value":{"stringValue":"db-1"}}],"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"1112131415161718"},
        {"timeUnixNano":"1700000000000000124","observedTimeUnixNano":"1700000000000000457","severityNumber":9,"severityText":"INFO","body":{"stringValue":"disk /dev/sdb1 is 12% full"},"attributes":[{"key":"retries","value":{"intValue":"3"}}]}
    ]}]}]}"#;
    let (status, body) = http(
        node.addr,
        "POST",
        "/v1/logs",
        &[
            ("Content-Type", "application/json"),
            (ourios_node::TENANT_HEADER, "json-tenant"),
        ],
        json.as_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(body, b"{}", "an empty OTLP/JSON export response");
    let parsed: ExportLogsServiceRequest = serde_json::from_str(json).unwrap();
    sent.extend(expect("json-tenant", lsn(), &parsed));
    assert_eq!(
        sent.last().unwrap().trace_id,
        None,
        "the second JSON record has no trace id"
    );
    assert_eq!(
        sent[sent.len() - 2].span_id,
        Some([0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18])
    );

    // No tenant header: the default tenant.
    let req = request(&lines(4, 3));
    let (status, body) = http(
        node.addr,
        "POST",
        "/v1/logs",
        &[("Content-Type", "application/x-protobuf")],
        &req.encode_to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    sent.extend(expect("default", lsn(), &req));

    let report = cut(&node).await;
    assert!(report.cut_ok, "{report:?}");
    let stored = records_with_bodies(&store).await;
    assert_eq!(stored.len(), sent.len(), "exactly the records sent");
    let rebuilt = stored.values().filter(|(r, _)| r.body.is_none()).count();
    assert!(rebuilt > 0, "the bodies come back through their templates");
    for s in &sent {
        s.assert_stored(&stored);
    }
    node.shutdown().await.unwrap();
}

/// Bad input gets a 4xx with a message that says what is wrong, and nothing reaches the WAL:
/// an undecodable protobuf or JSON body, an invalid tenant header, a body over the limit
/// (raw, and a small gzip that inflates past it), a broken gzip stream, an unsupported content
/// type or encoding, and a request with no records. A valid request afterwards is appended.
///
/// Reasoned mutation (not run as a mutant): in `otlp::decode`, remove the `record_count(&request)
/// == 0` refusal and the request with no records is acknowledged and appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_bad_input_is_4xx_and_writes_nothing() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| a.max_body_bytes = Some(4096)),
        &store,
    )
    .await;
    let proto = "application/x-protobuf";
    let big = request(&vec!["x".repeat(100); 300]).encode_to_vec();
    assert!(big.len() > 4096 && gzip(&big).len() < 4096);
    let empty = ExportLogsServiceRequest::default().encode_to_vec();
    let long_tenant = "t".repeat(65);

    // (what, headers, body, status, what the message says)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<u8>, u16, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            "undecodable protobuf",
            vec![("Content-Type", proto)],
            b"\xff\xff\xff\xff".to_vec(),
            400,
            "not a valid OTLP protobuf",
        ),
        (
            "undecodable JSON",
            vec![("Content-Type", "application/json")],
            br#"{"resourceLogs": 5}"#.to_vec(),
            400,
            "not a valid OTLP/JSON",
        ),
        (
            // The decoder's own words follow the message: the client learns where it broke.
            "undecodable JSON, the cause named",
            vec![("Content-Type", "application/json")],
            br#"{"resourceLogs": 5}"#.to_vec(),
            400,
            "ExportLogsServiceRequest: invalid type: integer `5`",
        ),
        (
            "invalid tenant",
            vec![("Content-Type", proto), (ourios_node::TENANT_HEADER, "a/b")],
            request(&lines(2, 1)).encode_to_vec(),
            400,
            "invalid x-scope-orgid header",
        ),
        (
            "tenant too long",
            vec![
                ("Content-Type", proto),
                (ourios_node::TENANT_HEADER, &long_tenant),
            ],
            request(&lines(2, 1)).encode_to_vec(),
            400,
            "1-64 bytes",
        ),
        (
            "oversize body",
            vec![("Content-Type", proto)],
            big.clone(),
            413,
            "limit",
        ),
        (
            "gzip that inflates past the limit",
            vec![("Content-Type", proto), ("Content-Encoding", "gzip")],
            gzip(&big),
            413,
            "larger than the limit of 4096 bytes",
        ),
        (
            "broken gzip",
            vec![("Content-Type", proto), ("Content-Encoding", "gzip")],
            b"not gzip at all".to_vec(),
            400,
            "not valid gzip",
        ),
        (
            "unsupported content type",
            vec![("Content-Type", "text/plain")],
            b"hello".to_vec(),
            415,
            "unsupported content type",
        ),
        (
            "unsupported encoding",
            vec![("Content-Type", proto), ("Content-Encoding", "br")],
            request(&lines(2, 1)).encode_to_vec(),
            415,
            "unsupported content encoding",
        ),
        (
            "no records",
            vec![("Content-Type", proto)],
            empty,
            400,
            "no log records",
        ),
    ];
    let before = node.core.wal().stats();
    for (what, headers, body, want, says) in &cases {
        let (status, reply) = http(node.addr, "POST", "/v1/logs", headers, body).await;
        let reply = String::from_utf8_lossy(&reply).to_lowercase();
        assert_eq!(status, *want, "{what}: {reply}");
        assert!(
            reply.contains(&says.to_lowercase()),
            "{what}: message {reply:?}"
        );
        let stats = node.core.wal().stats();
        assert_eq!(
            (stats.appends, stats.next_lsn),
            (before.appends, before.next_lsn),
            "{what} wrote to the WAL"
        );
    }

    let (status, body) = post_logs(&node, "t", &request(&lines(2, 1))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(node.core.wal().stats().appends, before.appends + 1);
    node.shutdown().await.unwrap();
}

/// Every acknowledged request is counted on `/metrics`: one request and its records, and one ack
/// latency sample. The recorder is process-wide and other tests ingest too, so the counts are
/// compared before and after, at least what this test sent.
///
/// Mutation check (by hand): give `IngestMetrics` a `Counter::noop()` for requests (what a handle
/// registered before the node installs its recorder is) and the request count does not move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_requests_are_counted_on_metrics() {
    // Failpoints are process-wide: without the scenario this node fires other tests' panics.
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), |_| {}), &store).await;
    let requests = ourios_node::metrics::INGEST_REQUESTS;
    let records = ourios_node::metrics::INGEST_RECORDS;
    let acks = "ourios.ingest.ack_seconds_count";
    let commits = "ourios.wal.commit_seconds_count";
    let (req0, rec0, ack0, commit0) = (
        metric(&node, requests, &[]).await,
        metric(&node, records, &[]).await,
        metric(&node, acks, &[]).await,
        metric(&node, commits, &[]).await,
    );
    let (status, _) = post_logs(&node, "acme", &request(&lines(7, 1))).await;
    assert_eq!(status, 200);
    assert!(metric(&node, requests, &[]).await >= req0 + 1.0);
    assert!(metric(&node, records, &[]).await >= rec0 + 7.0);
    assert!(metric(&node, acks, &[]).await >= ack0 + 1.0);
    // The request's frame reached the disk in a group commit, and the commit was timed.
    assert!(metric(&node, commits, &[]).await >= commit0 + 1.0);
    node.shutdown().await.unwrap();
}
