//! What a hostile or careless client meets (DESIGN §14): a refusal that names the limit, or an
//! acknowledgement followed by the record in the store; never a request acknowledged and then
//! unpublishable, a retryable refusal that can never succeed, or a wedged node.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use ourios_node::{Node, NodeOptions};
use ourios_sinks::testing::FaultyStore;
use prost::Message;

use crate::support::*;

/// Proves one size limit: a valid 10 MiB protobuf request (under the 16 MiB body limit, over
/// the WAL's old fixed 8 MiB frame limit) is acknowledged and its records reach the store.
/// Before, it got `503 ... above the wal's 8388608-byte limit` on every retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_request_under_the_body_limit_always_fits_the_wal() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), |_| {}), &store).await;
    let filler = "x".repeat(11 * 1024);
    let bodies: Vec<String> = (0..1000).map(|i| format!("blob {i} {filler}")).collect();
    let req = request(&bodies);
    assert!(
        prost::Message::encoded_len(&req) > 10 << 20,
        "the request is over 10 MiB"
    );
    let (status, body) = post_logs(&node, "big", &req).await;
    assert_eq!(status, 200, "{body}");
    let lsn = node.core.wal().stats().durable_lsn;
    cut(&node).await;
    assert_eq!(missing(&store, &frame_ids(lsn, 1000)).await, vec![]);
    node.shutdown().await.unwrap();
}

fn with_times(time: u64, observed: u64) -> ExportLogsServiceRequest {
    let mut req = request(&[format!("time {time} observed {observed}")]);
    let r = &mut req.resource_logs[0].scope_logs[0].log_records[0];
    r.time_unix_nano = time;
    r.observed_time_unix_nano = observed;
    req
}

/// Proves every acknowledged record has a place in the store, whatever its times: an event time
/// past the nanosecond range, an observed time past it, and both unusable. Each is
/// acknowledged, published (no quarantine), placed by the OTel order (time, else observed time,
/// else receive time), keeps the original value as an attribute, and the tenant's frontier
/// passes it. Before, the first was quarantined (its content then lived only in the WAL until
/// truncation) and the second was never published and held the frontier for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_out_of_range_times_are_placed_and_published() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), |_| {}), &store).await;
    let max = u64::MAX;
    let mut lsns = Vec::new();
    for (time, observed) in [(max, TIME), (TIME, max), (0, max), (max, 0)] {
        let (status, body) = post_logs(&node, "t", &with_times(time, observed)).await;
        assert_eq!(status, 200, "time {time} observed {observed}: {body}");
        lsns.push(node.core.wal().stats().durable_lsn);
    }
    let report = cut(&node).await;
    assert_eq!(
        report.stamped.get("t"),
        Some(&lsns[3].0),
        "the frontier passes every one of them: {report:?}"
    );
    let records = records_with_bodies(&store).await;
    let get = |i: usize| {
        &records
            .get(&("t".to_owned(), frame_ids(lsns[i], 1)[0]))
            .unwrap_or_else(|| panic!("record of frame {} is in the store", lsns[i].0))
            .0
    };
    let attr = |r: &ourios_sinks::LogRecord, k: &str| {
        r.attributes
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.to_owned())
    };
    let original_time = ourios_node::otlp::ORIGINAL_TIME_ATTRIBUTE;
    let original_observed = ourios_node::otlp::ORIGINAL_OBSERVED_TIME_ATTRIBUTE;
    // Time out of range: placed by the observed time.
    assert_eq!(get(0).time_unix_nano, TIME);
    assert_eq!(attr(get(0), original_time), Some(max.to_string()));
    // Observed time out of range: replaced by the event time.
    assert_eq!(
        (get(1).time_unix_nano, get(1).observed_time_unix_nano),
        (TIME, TIME)
    );
    assert_eq!(attr(get(1), original_observed), Some(max.to_string()));
    // Neither usable: the receive time, stamped before the WAL (a replay places it the same).
    for i in [2, 3] {
        let r = get(i);
        assert!(
            r.time_unix_nano > TIME && r.time_unix_nano == r.observed_time_unix_nano,
            "record {i} placed at the receive time: {r:?}"
        );
    }
    assert_eq!(attr(get(2), original_observed), Some(max.to_string()));
    assert_eq!(attr(get(3), original_time), Some(max.to_string()));
    let events = ourios_sinks::read_audit_events(store.inner(), "")
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .all(|(_, e)| !matches!(e.kind, ourios_sinks::AuditKind::RecordQuarantined { .. })),
        "nothing is quarantined"
    );
    node.shutdown().await.unwrap();
}

/// Proves `/healthz` says alive and `/readyz` says ready with the terminal tenants listed, in
/// JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_health_and_readiness_answer_json() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), |_| {}), &store).await;
    let (status, body) = http(node.addr, "GET", "/healthz", &[], b"").await;
    assert_eq!(status, 200);
    let alive: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(alive["status"], "alive");

    store.on_prefix(
        "audit/tenant=bad",
        ourios_sinks::testing::Fault::Permanent,
        None,
    );
    let (status, _) = post_logs(&node, "bad", &request(&lines(2, 1))).await;
    assert_eq!(status, 200);
    cut(&node).await;
    let (status, body) = http(node.addr, "GET", "/readyz", &[], b"").await;
    let ready: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(
        ready["terminal_tenants"],
        serde_json::json!(["bad"]),
        "{ready}"
    );
    node.shutdown().await.unwrap();
}

/// Proves admission control keeps store I/O from waiting behind ingest for a thread. The
/// runtime has 6 blocking threads; the `file://` store runs every put on one of them, and each
/// ingest holds one while it appends and mines (and blocks on a full encode queue). 24 clients
/// send at once against an encode queue of 1 and 4 KiB partitions: with at most 3 requests
/// admitted, puts always find a thread, every request is acknowledged (after `503` +
/// `Retry-After` answers, which the clients honour) and every record reaches the store. With
/// `max_inflight_requests` at the runtime's size or above, the node wedges: ingest holds every
/// blocking thread, the puts it waits for never run, and this test hits its bound.
#[test]
fn hostile_concurrent_clients_cannot_starve_store_io() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(6)
        .enable_all()
        .build()
        .unwrap();
    // A wedged node holds blocking threads forever, and dropping a runtime waits for them:
    // shut it down with a bound so a failure here fails instead of hanging the suite.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(clients_against_a_small_blocking_pool())
    }));
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn clients_against_a_small_blocking_pool() {
    {
        let _scenario = fail::FailScenario::setup();
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("store");
        let cfg = config(dir.path(), |a| {
            a.store = Some(format!("file://{}", store_dir.display()));
            a.max_inflight_requests = Some(3);
            a.encode_queue = Some(1);
            a.partition_target_bytes = Some(4096);
        });
        let node = Arc::new(
            Node::start(cfg, NodeOptions::default())
                .await
                .expect("node starts"),
        );
        let mut clients = Vec::new();
        for c in 0..24 {
            let node = Arc::clone(&node);
            clients.push(tokio::spawn(async move {
                let mut refused = 0u32;
                for r in 0..3 {
                    let req = request(&lines(200, c * 10 + r));
                    loop {
                        let (status, body) = post_logs(&node, "t", &req).await;
                        match status {
                            200 => break,
                            503 if body.contains("max_inflight_requests") => {
                                refused += 1;
                                // Retry once the admitted requests moved on: no clock.
                                tokio::task::yield_now().await;
                            }
                            _ => panic!("client {c}: {status} {body}"),
                        }
                    }
                }
                refused
            }));
        }
        let mut refused = 0;
        for c in clients {
            refused += bounded("every client acknowledged", c).await.unwrap();
        }
        eprintln!("{refused} requests were refused by admission control and retried");
        let node = Arc::into_inner(node).expect("the clients are done");
        let report = bounded("the final cut", node.shutdown()).await.unwrap();
        assert!(report.not_stamped.is_empty(), "{report:?}");
        let store =
            ourios_sinks::store_from_url(&format!("file://{}", store_dir.display())).unwrap();
        let ids = ourios_sinks::read_record_ids(store.as_ref(), "")
            .await
            .unwrap();
        let distinct: std::collections::BTreeSet<_> = ids.into_iter().collect();
        assert_eq!(distinct.len(), 24 * 3 * 200, "every record is in the store");
    }
}

/// Proves the requests in the ingest path are bounded in bytes, not only in number: with
/// `max_inflight_bytes` room for one request, a second waits before decoding until the first
/// is answered (it is not refused, nothing of it is written meanwhile, and the bytes taken never
/// pass the budget), then is taken. The first is held in its mining by a failpoint gate. Without the byte admission the
/// second is decoded and appended beside the first and never counts a wait, so the wait for
/// `ourios_ingest_bytes_waits` hits its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_past_the_byte_budget_wait_for_room() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let first = request(&lines(50, 1));
    let second = request(&lines(50, 2));
    let first_len = first.encoded_len() as u64;
    let size = first.encoded_len().max(second.encoded_len());
    let budget = (size + size / 2) as u64;
    let node = Arc::new(
        start(
            config(dir.path(), |a| {
                inline(a);
                // Room for one of the two, not both.
                a.max_inflight_bytes = Some(budget as usize);
            }),
            &store,
        )
        .await,
    );
    let waits = ourios_node::metrics::INGEST_BYTES_WAITS.replace('.', "_");
    let waits_before = metric(&node, &waits, &[]).await;
    let gate = FailGate::hold_at("node::mine::record", 0);
    let a = tokio::spawn({
        let node = Arc::clone(&node);
        async move { post_logs(&node, "t", &first).await }
    });
    gate.reached().await;
    let durable = || node.core.wal().stats().durable_lsn;
    let durable_at_hold = durable();
    let held = ready_field(&node, "request_bytes_in_flight").await;
    assert_eq!(held, first_len, "the first request holds its bytes");
    let b = tokio::spawn({
        let node = Arc::clone(&node);
        async move { post_logs(&node, "t", &second).await }
    });
    bounded("the second request waits for bytes", async {
        while metric(&node, &waits, &[]).await <= waits_before {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(
        !b.is_finished(),
        "the second request is not answered while it waits"
    );
    // The first waiter is set aside what frees up as it frees (tokio's semaphore is fair),
    // so the budget reads full; it never reads past the limit.
    let taken = ready_field(&node, "request_bytes_in_flight").await;
    assert!(
        (held..=budget).contains(&taken),
        "{taken} bytes taken: at least the first request's {held}, at most the budget {budget}"
    );
    assert_eq!(
        durable(),
        durable_at_hold,
        "nothing of the waiting request is written"
    );
    gate.release();
    let (status, body) = bounded("the first request", a).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = bounded("the second request", b).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        durable() > durable_at_hold,
        "the second request was appended once it had room"
    );
    assert_eq!(ready_field(&node, "request_bytes_in_flight").await, 0);
    let node = Arc::into_inner(node).expect("the clients are done");
    bounded("the final cut", node.shutdown()).await.unwrap();
    let ids: std::collections::BTreeSet<_> = ids_in_store(&store).await.into_keys().collect();
    assert_eq!(ids.len(), 100, "both requests' records are in the store");
}

/// Proves a request larger than the whole `max_inflight_bytes` is taken alone rather than
/// waiting for room that can never exist: with a budget of one byte, requests are answered
/// `200` one after another. Without the clamp to the budget, the first waits forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_request_larger_than_the_byte_budget_is_taken_alone() {
    // Held like every test here: a gate armed by another test must not catch this one's lines.
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| a.max_inflight_bytes = Some(1)),
        &store,
    )
    .await;
    for salt in 0..3 {
        let (status, body) = bounded(
            "a request over the budget",
            post_logs(&node, "t", &request(&lines(20, salt))),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(ready_field(&node, "request_bytes_in_flight").await, 0);
}

/// A number from `/readyz`'s answer.
async fn ready_field(node: &Node, field: &str) -> u64 {
    let (_, body) = http(node.addr, "GET", "/readyz", &[], b"").await;
    let ready: serde_json::Value = serde_json::from_slice(&body).expect("readyz is JSON");
    ready[field]
        .as_u64()
        .unwrap_or_else(|| panic!("readyz has no `{field}`: {ready}"))
}

/// Proves a small request cannot expand into an unbounded one: 5 000 empty records under one
/// 64 KiB resource attribute is a body under 1 MiB that flattens to over 300 MiB (the attribute is
/// carried by every record). It gets `413` naming the limit and writes nothing; before, it was
/// acknowledged and took the node from 10 MB to 650 MB of memory until published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_request_that_expands_past_the_limit_is_413() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), |_| {}), &store).await;
    let mut req = request(&vec![String::new(); 5000]);
    let resource = req.resource_logs[0].resource.get_or_insert_default();
    resource
        .attributes
        .push(opentelemetry_proto::tonic::common::v1::KeyValue {
            key: "blob".into(),
            value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                value: Some(
                    opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                        "x".repeat(64 * 1024),
                    ),
                ),
            }),
            ..Default::default()
        });
    let size = prost::Message::encoded_len(&req);
    assert!(size < 1 << 20, "a body far under the 16 MiB limit: {size}");
    assert!(ourios_node::otlp::expanded_bytes(&req, size) > 300 << 20);
    let appends = node.core.wal().stats().appends;
    let (status, body) = post_logs(&node, "t", &req).await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body.contains("limit of"),
        "the refusal names the limit: {body}"
    );
    assert_eq!(node.core.wal().stats().appends, appends, "nothing written");
    node.shutdown().await.unwrap();
}

/// Proves the tenant cap: with `max_tenants = 2`, a third tenant gets `429` naming the limit
/// and writes nothing, known tenants keep being served, and after a restart the recovered
/// tenants count (and are served) while a new one is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tenants_past_the_cap_are_refused_by_name() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = config(dir.path(), |a| a.max_tenants = Some(2));
    let node = start(cfg.clone(), &store).await;
    for t in ["a", "b"] {
        let (status, body) = post_logs(&node, t, &request(&lines(2, 1))).await;
        assert_eq!(status, 200, "{t}: {body}");
    }
    let appends = node.core.wal().stats().appends;
    let (status, body) = post_logs(&node, "c", &request(&lines(2, 1))).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("`c`") && body.contains("max_tenants"),
        "{body}"
    );
    assert_eq!(node.core.wal().stats().appends, appends, "nothing written");
    let (status, _) = post_logs(&node, "a", &request(&lines(2, 2))).await;
    assert_eq!(status, 200, "a known tenant is served");
    node.shutdown().await.unwrap();

    let node = start(cfg, &store).await;
    let (status, _) = post_logs(&node, "b", &request(&lines(2, 3))).await;
    assert_eq!(status, 200, "a recovered tenant is served");
    let (status, body) = post_logs(&node, "d", &request(&lines(2, 3))).await;
    assert_eq!(status, 429, "recovered tenants count: {body}");
    node.shutdown().await.unwrap();
}

/// Proves the template cap end to end: with `max_templates_per_tenant = 3`, twelve lines of
/// twelve shapes are all acknowledged, the ones past the cap go to the overflow template (kept
/// whole, counted), and every line comes back byte for byte from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_templates_past_the_cap_overflow_and_still_rebuild() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| a.max_templates_per_tenant = Some(3)),
        &store,
    )
    .await;
    let overflow = metric(&node, ourios_node::metrics::TEMPLATE_OVERFLOW, &[]).await;
    let bodies: Vec<String> = (1..=12)
        .map(|n| {
            (0..n)
                .map(|i| format!("w{n}x{i}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let lsn = ingest(&node, "t", &bodies).await;
    cut(&node).await;
    assert!(
        metric(&node, ourios_node::metrics::TEMPLATE_OVERFLOW, &[]).await >= overflow + 9.0,
        "nine lines past the cap"
    );
    let have = records_with_bodies(&store).await;
    for (id, line) in frame_ids(lsn, 12).into_iter().zip(&bodies) {
        assert_eq!(&have[&("t".to_owned(), id)].1, line);
    }
    node.shutdown().await.unwrap();
}

/// Proves push-back at the ceiling: with the store refusing every record put (transient), the
/// buffer fills to its ceiling of publishable bytes; a request then gets 503 with
/// `Retry-After`, naming `buffer_ceiling_bytes`, and nothing of it is written (no line of a
/// refused request is ever in the store). Once the store answers again, a cut publishes everything, the
/// node accepts requests again, and every acknowledged line is in the store exactly once.
///
/// Fails without the `over_ceiling` check in `Core::ingest`: every request is acknowledged
/// and the buffer grows without bound while the store fails (no 503 within 400 requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_full_buffer_pushes_back_and_loses_nothing() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| {
            a.buffer_ceiling_bytes = Some(64 << 10);
            a.partition_target_bytes = Some(64 << 10);
        }),
        &store,
    )
    .await;
    store.on_prefix("records/", ourios_sinks::testing::Fault::Transient, None);
    let mut acked = Vec::new();
    let mut refused = None;
    for salt in 0..400 {
        let req = request(&lines(40, salt));
        match node
            .core
            .ingest(
                &ourios_wal::TenantId::new("t").unwrap(),
                req.encode_to_vec(),
                ourios_node::otlp::frame_lines(&req.encode_to_vec()).expect("a valid request"),
            )
            .await
        {
            Ok(lsn) => acked.push(lsn),
            Err(ourios_node::IngestError::BufferFull { .. }) => {
                refused = Some(salt);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let refused = refused.expect("a refusal once the buffer holds its ceiling");
    // Over HTTP: 503 with Retry-After, naming the limit.
    let (status, head, body) = http_with_head(
        node.addr,
        "POST",
        "/v1/logs",
        &[
            ("Content-Type", "application/x-protobuf"),
            (ourios_node::TENANT_HEADER, "t"),
        ],
        &request(&lines(40, 999)).encode_to_vec(),
    )
    .await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 503, "still at the ceiling: {body}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 5"),
        "{head}"
    );
    assert!(body.contains("buffer_ceiling_bytes"), "{body}");

    store.clear_faults();
    cut(&node).await;
    acked.push(ingest(&node, "t", &lines(40, 1000)).await);
    cut(&node).await;
    let counts = ids_in_store(&store).await;
    for lsn in acked {
        for id in frame_ids(lsn, 40) {
            assert_eq!(counts.get(&id), Some(&1), "{id:?} exactly once");
        }
    }
    let never: std::collections::BTreeSet<String> = [lines(40, refused), lines(40, 999)]
        .concat()
        .into_iter()
        .collect();
    let stored = records_with_bodies(&store).await;
    assert!(
        stored.values().all(|(_, body)| !never.contains(body)),
        "a line of a refused request is in the store"
    );
    node.shutdown().await.unwrap();
}

/// Proves a cut encodes a snapshot only for a tenant that mined since its installed one: with
/// three tenants stamped, a second cut after only `a` mined encodes one snapshot, a third cut
/// after nothing encodes none, and a restart recovers `a` from the newer snapshot and `b`,
/// `c` from theirs (nothing replayed above the frontiers).
///
/// Fails without the `changed` test in the capture (every cut encodes every tenant's miner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_cut_snapshots_only_the_tenants_that_mined() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let cfg = config(dir.path(), inline);
    let node = start(cfg.clone(), &store).await;
    let encoded = || metric(&node, ourios_node::metrics::SNAPSHOTS_ENCODED, &[]);
    let mut last = Vec::new();
    for t in ["a", "b", "c"] {
        last.push(ingest(&node, t, &lines(3, 1)).await);
    }
    let before = encoded().await;
    cut(&node).await;
    assert_eq!(encoded().await, before + 3.0, "every tenant mined");
    let a = ingest(&node, "a", &lines(3, 2)).await;
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("a"), Some(&a.0), "{report:?}");
    assert_eq!(encoded().await, before + 4.0, "only `a` mined since");
    cut(&node).await;
    assert_eq!(encoded().await, before + 4.0, "nothing mined since");
    for t in ["a", "b", "c"] {
        let m = marks(&node, t);
        assert_eq!(
            m.snapshot, m.frontier,
            "{t}: its snapshot is at its frontier"
        );
    }
    node.shutdown().await.unwrap();
    let node = start(cfg, &store).await;
    assert_eq!(node.recovery.mined, 0, "{:?}", node.recovery);
    node.shutdown().await.unwrap();
}

/// Proves a snapshot is encoded outside any lock another tenant's ingest needs: while a cut is
/// held inside the encode of tenant `a`'s snapshot (under `a`'s miner lock), a request for
/// tenant `b` is mined and acknowledged; then the cut finishes and stamps both.
///
/// Fails with one lock over every tenant's miner (as before): `b`'s mining waits for the
/// held cut and the bounded wait reports a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_snapshot_encode_does_not_stop_other_tenants() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(config(dir.path(), inline), &store).await;
    ingest(&node, "a", &lines(3, 1)).await;
    let gate = FailGate::hold_at("node::cut::snapshot", 0);
    let cadence = node.cadence.clone();
    let held = tokio::spawn(async move { cadence.cut_now().await });
    gate.reached().await;
    let b = bounded(
        "b's ingest during a's snapshot encode",
        ingest(&node, "b", &lines(3, 2)),
    )
    .await;
    assert!(!held.is_finished(), "the cut is still inside a's encode");
    gate.release();
    let report = held_cut("the held cut", held).await;
    assert!(report.stamped.contains_key("a"), "{report:?}");
    fail::remove("node::cut::snapshot");
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("b"), Some(&b.0), "{report:?}");
    node.shutdown().await.unwrap();
}

/// RFC0059.15: one tenant's failing publish does not hold back another tenant's frontier. A
/// cut is held between its two verdicts (inside tenant `a`'s snapshot encode); meanwhile
/// tenant `b`'s partition is detached and its put fails (the store refuses `b`'s records), so
/// the failure is tagged with the cut's epoch and its verdict is not `all_ok`. The cut still
/// stamps `a` and names `b` as held back; once the store takes `b` again the next cut stamps
/// it, and every id is stored once.
///
/// Fails with the node-wide verdict (`prior_ok` alone decides): `a` is not stamped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a_failing_tenant_does_not_hold_back_another() {
    let _scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = FaultyStore::new();
    let node = start(
        config(dir.path(), |a| {
            inline(a);
            a.partition_target_bytes = Some(4096);
        }),
        &store,
    )
    .await;
    let barrier = node.core.barrier();
    let a = ingest(&node, "a", &lines(2, 1)).await;
    store.on_prefix(
        "records/tenant=b",
        ourios_sinks::testing::Fault::Transient,
        None,
    );
    let gate = FailGate::hold_at("node::cut::snapshot", 0);
    let cadence = node.cadence.clone();
    let held = tokio::spawn(async move { cadence.cut_now().await });
    gate.reached().await;
    let failed = barrier.stats().publishes_failed;
    let b = ingest(&node, "b", &lines(40, 2)).await;
    wait_until("b's detached publish failed", || {
        barrier.stats().publishes_failed > failed
    })
    .await;
    gate.release();
    let report = held_cut("the held cut", held).await;
    fail::remove("node::cut::snapshot");
    assert!(
        !report.prior_ok,
        "b's failure is in this cut's verdict: {report:?}"
    );
    assert_eq!(report.held_back, vec!["b".to_owned()], "{report:?}");
    assert_eq!(report.stamped.get("a"), Some(&a.0), "{report:?}");
    assert!(!report.stamped.contains_key("b"), "{report:?}");

    store.clear_faults();
    let report = cut(&node).await;
    assert_eq!(report.stamped.get("b"), Some(&b.0), "{report:?}");
    let counts = ids_in_store(&store).await;
    for id in [frame_ids(a, 2), frame_ids(b, 40)].concat() {
        assert_eq!(counts.get(&id), Some(&1), "{id:?} once");
    }
    node.shutdown().await.unwrap();
}
