//! The harness: a node on a temporary data dir over a `FaultyStore`, request builders, a tiny
//! HTTP/1.1 client, store read-back by record id, a metrics scrape and a failpoint gate.
//!
//! Timers are set to an hour so only the ticks a test asks for run (`sweep_now` / `cut_now`),
//! and the sweep publishes any partition (`partition_max_age_secs = 0`).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use ourios_node::{Config, CutReport, Node, NodeOptions, ServeArgs, TickResult};
use ourios_sinks::RecordId;
use ourios_sinks::testing::FaultyStore;
use ourios_testkit::otlp;
use ourios_wal::{Lsn, Marks, TenantId};
use prost::Message;

/// A generous bound on any one wait: reaching it means a hang (a bug), never a slow machine.
pub(crate) const HANG: Duration = Duration::from_secs(60);

/// Event time of every generated record (2023-11-14T22:13:20Z): one partition per tenant.
pub(crate) const TIME: u64 = 1_700_000_000_000_000_000;

/// The settings every test starts from; `tweak` overrides some of them.
pub(crate) fn config(dir: &Path, tweak: impl FnOnce(&mut ServeArgs)) -> Config {
    let mut args = ServeArgs {
        data_dir: Some(dir.to_path_buf()),
        listen: Some("127.0.0.1:0".parse().expect("literal address")),
        sweep_secs: Some(3600),
        barrier_secs: Some(3600),
        partition_max_age_secs: Some(0),
        ..Default::default()
    };
    tweak(&mut args);
    Config::resolve(&args).expect("test configuration is valid")
}

/// Stops `node` the way a crash does, as far as a process can to itself: no final cut, no
/// flush; returns once its WAL (and the directory lock) is released.
pub(crate) async fn crash(node: Node) {
    let wal = Arc::downgrade(node.core.wal());
    drop(node);
    wait_until("the crashed node's WAL is released", || {
        wal.strong_count() == 0
    })
    .await;
}

/// Starts a node on `config` over `store` (metrics installed, so `/metrics` can be scraped).
pub(crate) async fn start(config: Config, store: &FaultyStore) -> Node {
    Node::start(
        config,
        NodeOptions {
            store: Some(store.as_dyn()),
            clock: None,
            install_metrics: true,
            recovery_cut_bytes: None,
            wal_io: None,
        },
    )
    .await
    .expect("node starts")
}

/// Inline mining and encoding (no pool): when `ingest` returns, the records are in the buffers.
pub(crate) fn inline(args: &mut ServeArgs) {
    args.encode_workers = Some(0);
}

/// Every request mined on a blocking thread and its records handed to the encode pool (one
/// worker), however small: what a request larger than `--inline-ingest-bytes` takes. By
/// default a test's small requests are handed to the sink in place, on the async worker.
pub(crate) fn through_the_pool(args: &mut ServeArgs) {
    args.encode_workers = Some(1);
    args.inline_ingest_bytes = Some(0);
}

/// A change to a test's settings.
pub(crate) type Tweak = fn(&mut ServeArgs);

/// The three ways a frame's records reach the sink, for the tests that run each: handed to the
/// encode pool, to the sink in place on the async worker (a small request's way by default), and
/// with no pool.
pub(crate) const HANDOFFS: [(&str, Tweak); 3] = [
    ("pool", through_the_pool),
    ("in place", |_| {}),
    ("no pool", inline),
];

/// One OTLP request carrying `bodies` in order, with a resource and a few attributes.
pub(crate) fn request(bodies: &[String]) -> ExportLogsServiceRequest {
    let records = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| LogRecord {
            trace_id: vec![i as u8; 16],
            span_id: vec![0xab; 8],
            ..otlp::record(
                (TIME + i as u64, TIME + 1_000 + i as u64),
                (
                    9 + (i % 4) as i32 * 4,
                    ["INFO", "WARN", "ERROR", "FATAL"][i % 4],
                ),
                b,
                vec![KeyValue {
                    key: "attempt".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::IntValue(i as i64)),
                    }),
                    ..Default::default()
                }],
            )
        })
        .collect();
    otlp::request(vec![otlp::attr("service.name", "checkout")], records)
}

/// `n` log lines from a few templates with numeric parameters; `salt` varies the values.
pub(crate) fn lines(n: usize, salt: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let v = salt * 1_000 + i;
            match i % 3 {
                0 => format!("user {v} logged in from 10.0.{}.{}", v % 7, v % 250),
                1 => format!("request id={v} took {} ms", v * 3 % 997),
                _ => format!("cache miss for key item-{v} after {} retries", v % 5),
            }
        })
        .collect()
}

/// Ingests `bodies` for `tenant` through the core (validated request, WAL, mine): its lsn.
pub(crate) async fn ingest(node: &Node, tenant: &str, bodies: &[String]) -> Lsn {
    let req = request(bodies);
    node.core
        .ingest(
            &TenantId::new(tenant).expect("a valid tenant"),
            req.encode_to_vec(),
            ourios_node::otlp::frame_lines(&req.encode_to_vec()).expect("a valid request"),
        )
        .await
        .expect("ingest is acknowledged")
}

/// The record ids of frame `lsn` with `n` records.
pub(crate) fn frame_ids(lsn: Lsn, n: usize) -> Vec<RecordId> {
    (0..n as u32)
        .map(|index| RecordId { lsn: lsn.0, index })
        .collect()
}

/// Every record id in the store, with how many rows carry it.
pub(crate) async fn ids_in_store(store: &FaultyStore) -> BTreeMap<RecordId, usize> {
    let mut out = BTreeMap::new();
    for id in ourios_sinks::read_record_ids(store.inner(), "")
        .await
        .expect("the store reads back")
    {
        *out.entry(id).or_insert(0) += 1;
    }
    out
}

/// The ids of `want` that are not in the store.
pub(crate) async fn missing(store: &FaultyStore, want: &[RecordId]) -> Vec<RecordId> {
    let have = ids_in_store(store).await;
    want.iter()
        .filter(|id| !have.contains_key(id))
        .copied()
        .collect()
}

/// A tenant's WAL marks.
pub(crate) fn marks(node: &Node, tenant: &str) -> Marks {
    node.core
        .wal()
        .marks(&TenantId::new(tenant).expect("valid tenant"))
}

/// I4 checked against the store: every frame at or below the tenant's frontier whose ids the
/// test knows has all of them in the store.
pub(crate) async fn assert_frontier_only_over_durable(
    node: &Node,
    store: &FaultyStore,
    tenant: &str,
    frames: &[(Lsn, usize)],
) {
    let frontier = marks(node, tenant).frontier;
    let have = ids_in_store(store).await;
    for (lsn, n) in frames {
        if *lsn <= frontier {
            let lost: Vec<RecordId> = frame_ids(*lsn, *n)
                .into_iter()
                .filter(|id| !have.contains_key(id))
                .collect();
            assert!(
                lost.is_empty(),
                "tenant {tenant}: frontier {} passed frame {} whose records {lost:?} are not in the store",
                frontier.0,
                lsn.0
            );
        }
    }
}

/// Awaits `f`, failing the test (instead of hanging) if it never finishes.
pub(crate) async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish: a hang"))
}

/// One cut through the real barrier loop; panics if the tick panicked.
pub(crate) async fn cut(node: &Node) -> CutReport {
    match bounded("cut", node.cadence.cut_now()).await {
        Some(TickResult::Done(report)) => report,
        Some(TickResult::Panicked) => panic!("the cut panicked"),
        None => panic!("the barrier loop has ended"),
    }
}

/// Runs a cut and asserts it published every id of `frames` (lsn, record count), stamped
/// `tenant` at the last frame, and moved the frontier only over durable data.
pub(crate) async fn cut_publishes_frames(
    node: &Node,
    store: &FaultyStore,
    tenant: &str,
    frames: &[(Lsn, usize)],
) -> CutReport {
    let report = cut(node).await;
    for (lsn, n) in frames {
        assert_eq!(
            missing(store, &frame_ids(*lsn, *n)).await,
            vec![],
            "frame {lsn:?}"
        );
    }
    let last = frames.iter().map(|(lsn, _)| lsn.0).max();
    assert_eq!(report.stamped.get(tenant).copied(), last, "{report:?}");
    assert_frontier_only_over_durable(node, store, tenant, frames).await;
    report
}

/// One sweep through the real sweep loop.
/// Waits (bounded) for a cut that was started on its own task and returns its report; panics
/// naming `what` if it did not finish with one.
pub(crate) async fn held_cut(
    what: &str,
    held: tokio::task::JoinHandle<Option<TickResult<CutReport>>>,
) -> CutReport {
    match bounded(what, held).await.expect("the cut task") {
        Some(TickResult::Done(r)) => r,
        other => panic!("{what} did not finish: {other:?}"),
    }
}

pub(crate) async fn sweep(node: &Node) -> TickResult<()> {
    bounded("sweep", node.cadence.sweep_now())
        .await
        .expect("the sweep loop is running")
}

/// Waits (yielding, no sleep) until `cond` holds; `what` names it if it never does.
pub(crate) async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    bounded(what, async {
        while !cond() {
            tokio::task::yield_now().await;
            std::thread::yield_now();
        }
    })
    .await;
}

/// One HTTP/1.1 exchange on a fresh connection, with hyper's client (in-process tests run on
/// runtimes whose blocking threads are part of what they test, so the client stays async):
/// the status and the body.
pub(crate) async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let (status, _, body) = http_with_head(addr, method, path, headers, body).await;
    (status, body)
}

/// [`http`], with the response head (status line and headers) as text.
pub(crate) async fn http_with_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    use http_body_util::BodyExt as _;
    bounded("http exchange", async {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .expect("HTTP/1.1 handshake");
        let driver = tokio::spawn(connection);
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr.to_string());
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let request = request
            .body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(
                body,
            )))
            .expect("a valid request");
        let response = sender.send_request(request).await.expect("an HTTP answer");
        let status = response.status();
        let mut head = format!("HTTP/1.1 {status}");
        for (k, v) in response.headers() {
            head.push_str(&format!("\n{k}: {}", String::from_utf8_lossy(v.as_bytes())));
        }
        let body = response
            .into_body()
            .collect()
            .await
            .expect("the answer's body")
            .to_bytes()
            .to_vec();
        drop(sender);
        let _ = driver.await;
        (status.as_u16(), head, body)
    })
    .await
}

/// POSTs an OTLP/HTTP protobuf request for `tenant`.
pub(crate) async fn post_logs(
    node: &Node,
    tenant: &str,
    req: &ExportLogsServiceRequest,
) -> (u16, String) {
    let (status, body) = http(
        node.addr,
        "POST",
        "/v1/logs",
        &[
            ("Content-Type", "application/x-protobuf"),
            (ourios_node::TENANT_HEADER, tenant),
        ],
        &req.encode_to_vec(),
    )
    .await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The sum of a metric's samples whose labels include every `labels` pair, from `/metrics`
/// (the recorder is process-wide: compare before and after).
pub(crate) async fn metric(node: &Node, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (status, body) = http(node.addr, "GET", "/metrics", &[], b"").await;
    assert_eq!(status, 200, "metrics endpoint");
    let text = String::from_utf8(body).expect("utf-8 metrics");
    ourios_testkit::metrics::sum(&text, name, labels).unwrap_or(0.0)
}

/// A failpoint gate: the `nth` (0-based) evaluation is held until released, then panics or
/// passes; every other evaluation passes. Uses `fail::cfg_callback`, so it ends with the
/// `FailScenario`.
#[derive(Debug)]
pub(crate) struct FailGate {
    reached: Mutex<mpsc::Receiver<()>>,
    release: mpsc::Sender<()>,
}

impl FailGate {
    /// Arms `name`: the held evaluation panics when released.
    pub(crate) fn panic_at(name: &str, nth: usize) -> Arc<Self> {
        Self::arm(name, nth, true)
    }

    /// Arms `name`: the held evaluation passes when released.
    pub(crate) fn hold_at(name: &str, nth: usize) -> Arc<Self> {
        Self::arm(name, nth, false)
    }

    fn arm(name: &str, nth: usize, then_panic: bool) -> Arc<Self> {
        let (reached_tx, reached_rx) = mpsc::channel::<()>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let calls = AtomicUsize::new(0);
        let release_rx = Mutex::new(release_rx);
        let reached_tx = Mutex::new(reached_tx);
        let point = name.to_owned();
        fail::cfg_callback(name, move || {
            // Relaxed: a counter of calls on one failpoint; nothing else is read through it.
            if calls.fetch_add(1, Ordering::Relaxed) != nth {
                return;
            }
            let _ = reached_tx.lock().map(|tx| tx.send(()));
            let _ = release_rx.lock().map(|rx| rx.recv());
            if then_panic {
                panic!("{point}: panic injected by the test");
            }
        })
        .expect("failpoint callback");
        Arc::new(Self {
            reached: Mutex::new(reached_rx),
            release: release_tx,
        })
    }

    /// Waits until the armed evaluation is held.
    pub(crate) async fn reached(self: &Arc<Self>) {
        let me = Arc::clone(self);
        bounded(
            "failpoint gate reached",
            tokio::task::spawn_blocking(move || {
                let _ = me.reached.lock().expect("gate lock").recv();
            }),
        )
        .await
        .expect("waiting for the gate");
    }

    /// Lets the held evaluation go on.
    pub(crate) fn release(&self) {
        let _ = self.release.send(());
    }
}

/// Every record in the store keyed by (tenant, id), with its body rebuilt from the audit
/// events in the store, the way a reader does it: join the record's (tenant, `template_key`)
/// to the definitions in the audit series, rebuild from its params (or take its kept `body`).
/// Panics if a key names two texts, a record's key has no definition in the store (I3), or
/// two copies of a record disagree.
pub(crate) async fn records_with_bodies(
    store: &FaultyStore,
) -> BTreeMap<(String, RecordId), (ourios_sinks::LogRecord, String)> {
    let events = ourios_sinks::read_audit_events(store.inner(), "")
        .await
        .expect("audit events read back");
    let texts = ourios_sinks::template_texts(events.iter().map(|(_, e)| e))
        .unwrap_or_else(|conflicts| panic!("keys naming two texts: {conflicts:?}"));
    let mut out = BTreeMap::new();
    for record in ourios_sinks::read_records(store.inner(), "")
        .await
        .expect("records read back")
    {
        let tenant = record.tenant.as_str().to_owned();
        let text = texts
            .get(&(record.tenant.clone(), record.template_key))
            .unwrap_or_else(|| {
                panic!(
                    "record {:?} of {tenant}: no definition of its template key {} in the store",
                    record.id,
                    ourios_sinks::hex(&record.template_key)
                )
            });
        let body = match &record.body {
            Some(body) => body.clone(),
            None => ourios_miner::Template::parse(text)
                .expect("the event's template parses")
                .reconstruct(&record.params)
                .expect("the record's params fit its template"),
        };
        let key = (tenant, record.id);
        if let Some((_, seen)) = out.get(&key) {
            assert_eq!(seen, &body, "two copies of {key:?} disagree");
        }
        out.insert(key, (record, body));
    }
    out
}
