//! OTLP/gRPC end to end: tonic's generated client (plain and gzip) in, Parquet out; the
//! refusals with the codes the OTLP specification gives them (and `RetryInfo` where the client
//! should retry), none of which reaches the WAL; an answer only once the frame is durable.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use ourios_sinks::testing::FaultyStore;
use prost::Message;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

use crate::e2e::{Sent, expect, tricky_lines};
use crate::support::*;

async fn channel(node: &ourios_node::Node) -> Channel {
    let addr = node.grpc_addr.expect("the node serves gRPC");
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connects to the gRPC listener")
}

/// Frames of `tenant` in the node's WAL. Counted per tenant: the sweep appends publish
/// intents of its own while a test runs, so the WAL's total moves without any request.
fn frames_of(node: &ourios_node::Node, tenant: &str) -> usize {
    node.core
        .wal()
        .replay()
        .filter_map(Result::ok)
        .filter(|f| f.tenant.as_str() == tenant)
        .count()
}

/// `request` with the tenant (and token) in its metadata.
fn with_meta<T>(message: T, tenant: Option<&str>, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(tenant) = tenant {
        request
            .metadata_mut()
            .insert(ourios_node::TENANT_HEADER, tenant.parse().unwrap());
    }
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

/// Lines sent over gRPC come back from the store byte for byte with every field, under the
/// tenant the metadata names (or the default tenant without one), plain and gzip.
///
/// Reasoned mutation (not run as a mutant): in `grpc::Export::call`, pass an empty header map
/// to `server::accept` and every record lands under the default tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_records_round_trip_plain_and_gzip() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), |_| {}), &store).await;
    let lsn = || node.core.wal().stats().durable_lsn;
    let mut sent: Vec<Sent> = Vec::new();

    let mut client = LogsServiceClient::new(channel(&node).await);
    let req = request(&lines(9, 1));
    let answer = client
        .export(with_meta(req.clone(), Some("acme"), None))
        .await
        .expect("exported");
    assert_eq!(answer.into_inner(), ExportLogsServiceResponse::default());
    sent.extend(expect("acme", lsn(), &req));

    let mut gzip =
        LogsServiceClient::new(channel(&node).await).send_compressed(CompressionEncoding::Gzip);
    let req = request(&tricky_lines());
    gzip.export(with_meta(req.clone(), Some("acme"), None))
        .await
        .expect("exported with gzip");
    sent.extend(expect("acme", lsn(), &req));

    let req = request(&lines(4, 3));
    client
        .export(with_meta(req.clone(), None, None))
        .await
        .expect("exported without a tenant");
    sent.extend(expect("default", lsn(), &req));

    let report = cut(&node).await;
    assert!(report.cut_ok, "{report:?}");
    let stored = records_with_bodies(&store).await;
    assert_eq!(stored.len(), sent.len(), "exactly the records sent");
    for s in &sent {
        s.assert_stored(&stored);
    }
    node.shutdown().await.unwrap();
}

/// Sends `body` as the message's bytes (what no typed client can send), and the answer.
async fn raw(
    channel: Channel,
    body: Vec<u8>,
    tenant: Option<&str>,
    gzip: bool,
) -> Result<ExportLogsServiceResponse, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    if gzip {
        grpc = grpc.send_compressed(CompressionEncoding::Gzip);
    }
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(ourios_node::grpc::EXPORT_PATH);
    grpc.unary(with_meta(body, tenant, None), path, RawCodec)
        .await
        .map(tonic::Response::into_inner)
}

/// Each refusal has its code, a message that names what is wrong, `RetryInfo` only where the
/// client should retry, and nothing reaches the WAL: an undecodable message, an invalid
/// tenant, a message over the body limit (plain, and gzip that inflates past it), too many
/// records, no records, a terminal-free full buffer (`RESOURCE_EXHAUSTED` with `RetryInfo`),
/// and a method that is not served. A valid request afterwards is appended.
///
/// Reasoned mutation (not run as a mutant): in `grpc::status`, map `Refused::TooLarge` with a
/// `RetryInfo` and the oversize cases fail (a client would retry a request that never fits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_refusals_have_their_codes_and_write_nothing() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| {
            a.max_body_bytes = Some(4096);
            a.max_records_per_request = Some(100);
        }),
        &store,
    )
    .await;
    let big = request(&vec!["x".repeat(100); 300]).encode_to_vec();
    assert!(big.len() > 4096);
    // 150 bare records: two bytes each on the wire.
    let mut many = request(&lines(1, 0));
    many.resource_logs[0].scope_logs[0].log_records =
        vec![opentelemetry_proto::tonic::logs::v1::LogRecord::default(); 150];
    let many = many.encode_to_vec();
    assert!(many.len() < 4096);

    // (what, body, tenant, gzip, code, what the message says)
    type Case<'a> = (&'a str, Vec<u8>, Option<&'a str>, bool, Code, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            "undecodable protobuf",
            b"\xff\xff\xff\xff".to_vec(),
            None,
            false,
            Code::InvalidArgument,
            "not a valid OTLP protobuf",
        ),
        (
            "invalid tenant",
            request(&lines(2, 1)).encode_to_vec(),
            Some("a/b"),
            false,
            Code::InvalidArgument,
            "invalid x-scope-orgid",
        ),
        (
            "no records",
            ExportLogsServiceRequest::default().encode_to_vec(),
            None,
            false,
            Code::InvalidArgument,
            "no log records",
        ),
        (
            "oversize message",
            big.clone(),
            None,
            false,
            Code::ResourceExhausted,
            "4096",
        ),
        (
            "gzip that inflates past the limit",
            big.clone(),
            None,
            true,
            Code::ResourceExhausted,
            "4096",
        ),
        (
            "too many records",
            many,
            None,
            false,
            Code::ResourceExhausted,
            "max_records_per_request",
        ),
    ];
    let before = node.core.wal().stats();
    let ch = channel(&node).await;
    for (what, body, tenant, gzip, code, says) in cases {
        let err = raw(ch.clone(), body, tenant, gzip).await.expect_err(what);
        assert_eq!(err.code(), code, "{what}: {err:?}");
        assert!(
            err.message().to_lowercase().contains(&says.to_lowercase()),
            "{what}: message {:?}",
            err.message()
        );
        assert!(
            err.get_details_retry_info().is_none(),
            "{what}: a request that never fits carries no RetryInfo"
        );
        let stats = node.core.wal().stats();
        assert_eq!(
            (stats.appends, stats.next_lsn),
            (before.appends, before.next_lsn),
            "{what} wrote to the WAL"
        );
    }

    // Another method of the service (or another service): UNIMPLEMENTED.
    let mut grpc = tonic::client::Grpc::new(ch.clone());
    grpc.ready().await.unwrap();
    let err = grpc
        .unary(
            tonic::Request::new(Vec::new()),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            ),
            RawCodec,
        )
        .await
        .expect_err("traces are not served");
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");

    let mut client = LogsServiceClient::new(ch);
    client
        .export(request(&lines(2, 1)))
        .await
        .expect("a valid request is taken");
    assert_eq!(node.core.wal().stats().appends, before.appends + 1);
    node.shutdown().await.unwrap();
}

/// A node at a limit that clears by itself answers `RESOURCE_EXHAUSTED` with a `RetryInfo`
/// (the record buffer at its ceiling), and a terminal tenant `UNAVAILABLE` with one; the WAL is
/// untouched by both; a token check answers `UNAUTHENTICATED` and `PERMISSION_DENIED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_retryable_refusals_carry_retry_info() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[token]]\nsha256 = \"{}\"\ntenants = [\"acme\", \"t\", \"good\", \"bad\"]\n",
            ourios_node::auth::hash_token("acme-secret")
        ),
    )
    .unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| {
            a.buffer_ceiling_bytes = Some(64 << 10);
            a.partition_target_bytes = Some(64 << 10);
            a.auth_tokens = Some(tokens.clone());
        }),
        &store,
    )
    .await;
    let ch = channel(&node).await;
    let client = LogsServiceClient::new(ch);
    let export = |tenant: &'static str, token: Option<&'static str>, salt: usize| {
        let mut client = client.clone();
        async move {
            client
                .export(with_meta(request(&lines(40, salt)), Some(tenant), token))
                .await
        }
    };

    // The token check.
    let err = export("acme", None, 1).await.expect_err("no token");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    let err = export("other", Some("acme-secret"), 1)
        .await
        .expect_err("another tenant's token");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("other"), "{err:?}");
    export("acme", Some("acme-secret"), 1)
        .await
        .expect("the tenant's own token");

    // The record buffer at its ceiling: RESOURCE_EXHAUSTED with a RetryInfo.
    store.on_prefix("records/", ourios_sinks::testing::Fault::Transient, None);
    let mut refused = None;
    for salt in 0..400 {
        match export("t", Some("acme-secret"), salt).await {
            Ok(_) => {}
            Err(err) => {
                refused = Some(err);
                break;
            }
        }
    }
    let err = refused.expect("a refusal once the buffer holds its ceiling");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("buffer"), "{err:?}");
    let retry = err
        .get_details_retry_info()
        .expect("RetryInfo on a busy refusal");
    assert_eq!(retry.retry_delay, Some(Duration::from_secs(5)));
    let before = frames_of(&node, "t");
    let err = export("t", Some("acme-secret"), 999)
        .await
        .expect_err("still at the ceiling");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(frames_of(&node, "t"), before, "a refusal wrote");
    store.clear_faults();
    let report = cut(&node).await;
    assert!(report.cut_ok, "{report:?}");

    // A terminal tenant: UNAVAILABLE with a RetryInfo.
    store.on_prefix(
        "audit/tenant=bad",
        ourios_sinks::testing::Fault::Permanent,
        None,
    );
    export("bad", Some("acme-secret"), 7)
        .await
        .expect("bad is taken before its audit fails");
    let report = cut(&node).await;
    assert!(node.core.is_terminal("bad"), "{report:?}");
    let before = frames_of(&node, "bad");
    let err = export("bad", Some("acme-secret"), 8)
        .await
        .expect_err("a terminal tenant");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("bad"), "{err:?}");
    let retry = err
        .get_details_retry_info()
        .expect("RetryInfo on a terminal tenant");
    assert_eq!(retry.retry_delay, Some(Duration::from_secs(30)));
    assert_eq!(frames_of(&node, "bad"), before, "a refusal wrote");
    export("good", Some("acme-secret"), 9)
        .await
        .expect("the others are served");
    drop(client);
    node.shutdown().await.unwrap();
}

/// The answer comes only once the frame is durable: every acknowledged request's frame is at
/// or below the WAL's durable lsn when the client reads the answer, and after a crash (no final
/// cut) the restarted node publishes every acknowledged record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_acknowledges_only_durable_frames() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), |_| {}), &store).await;
    let client = LogsServiceClient::new(channel(&node).await);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let mut client = client.clone();
        tasks.push(tokio::spawn(async move {
            let req = request(&lines(10, i));
            client
                .export(with_meta(req, Some("t"), None))
                .await
                .map(|_| ())
        }));
    }
    for (answered, task) in (1u64..).zip(tasks) {
        task.await.unwrap().expect("acknowledged");
        // Every answer so far came after its frame was durable: each answer read sees at
        // least as many durable frames as answers.
        let durable = node.core.wal().stats().durable_lsn.0;
        assert!(
            durable >= answered,
            "{answered} answers but only {durable} durable frames"
        );
    }
    drop(client);
    crash(node).await;
    let node = start(config(dir.path(), |_| {}), &store).await;
    let report = cut(&node).await;
    assert!(report.cut_ok, "{report:?}");
    let stored = records_with_bodies(&store).await;
    let want: std::collections::BTreeSet<String> = (0..16).flat_map(|i| lines(10, i)).collect();
    let got: std::collections::BTreeSet<String> =
        stored.values().map(|(_, body)| body.clone()).collect();
    assert_eq!(
        got, want,
        "every acknowledged line after the crash, byte for byte"
    );
    assert_eq!(stored.len(), 160, "each once");
    node.shutdown().await.unwrap();
}

/// The test's codec: the message is the bytes given; the answer decodes with prost.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ExportLogsServiceResponse;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        Self
    }

    fn decoder(&mut self) -> Self::Decoder {
        Self
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = ExportLogsServiceResponse;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        ExportLogsServiceResponse::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}
