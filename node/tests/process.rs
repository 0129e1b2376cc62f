//! The node's process interface, as a supervisor or script meets it: `--ready-file` names the
//! address and the pid once the node serves and is gone after a graceful stop, and
//! `--log-format json` writes one JSON object a line on stderr.

use std::process::Command;

use ourios_testkit::{GUARD, Ready, Served};

mod proc;

/// Proves the ready file is the machine interface a supervisor can rely on: it appears whole
/// once the node serves (its address answers `/healthz`, its pid is the child's), and it is
/// removed at shutdown; and that with `--log-format json` every stderr line is a JSON event with
/// a level and a message, the final cut's carrying the record count as a field.
#[test]
fn ready_file_and_json_log_are_machine_readable() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(proc::node_binary());
    cmd.arg("serve").arg("--data-dir").arg(dir.path()).args([
        "--listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]);
    let mut node = Served::start(cmd, None).unwrap();
    let ready = Ready::read(node.ready_file())
        .expect("the ready file is there")
        .unwrap();
    assert_eq!(
        Some(ready.pid),
        node.pid(),
        "the ready file names the child"
    );
    assert_eq!(ready.listen, node.addr());
    let (status, _) = proc::http(ready.listen, "GET", "/healthz", &[], b"").unwrap();
    assert_eq!(status, 200);
    send_one_record(ready.listen);

    let exit = node.terminate(GUARD).unwrap();
    assert!(exit.success(), "{exit}: {}", node.log_text());
    assert!(
        !node.ready_file().exists(),
        "the ready file is removed at shutdown"
    );
    let log = node.log_text();
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        events
            .iter()
            .all(|e| e["level"].is_string() && e["fields"]["message"].is_string()),
        "{log}"
    );
    let stopped = events
        .iter()
        .find(|e| e["fields"]["message"] == "stopped: final cut published")
        .unwrap_or_else(|| panic!("no final-cut event: {log}"));
    assert_eq!(stopped["fields"]["records"], 1, "{stopped}");
    let serving = serving_event(&events, &log);
    assert!(serving["fields"]["grpc"] != "off", "{serving}");
    assert!(
        serving["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("OTLP/gRPC")),
        "the listener is up, so the startup line names it: {serving}"
    );
}

/// Proves the startup line names only what the node serves: with `--grpc-listen off` it says
/// `grpc=off` and does not claim OTLP/gRPC among the endpoints (an operator reading it would
/// point an exporter at a port nobody listens on).
#[test]
fn startup_line_does_not_claim_grpc_when_it_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(proc::node_binary());
    cmd.arg("serve").arg("--data-dir").arg(dir.path()).args([
        "--listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "off",
        "--log-format",
        "json",
    ]);
    let mut node = Served::start(cmd, None).unwrap();
    let exit = node.terminate(GUARD).unwrap();
    assert!(exit.success(), "{exit}: {}", node.log_text());
    let log = node.log_text();
    let events: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let serving = serving_event(&events, &log);
    assert_eq!(serving["fields"]["grpc"], "off", "{serving}");
    let message = serving["fields"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("OTLP/HTTP"), "{serving}");
    assert!(!message.contains("gRPC"), "{serving}");
}

/// The event the node logs once it serves, from a `--log-format json` log.
fn serving_event<'a>(events: &'a [serde_json::Value], log: &str) -> &'a serde_json::Value {
    events
        .iter()
        .find(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("serving OTLP/HTTP"))
        })
        .unwrap_or_else(|| panic!("no serving event: {log}"))
}

/// Proves the binary reports its allocator's memory, the figures an operator watches against
/// the host's limit: once the node has taken a request, `/metrics` carries
/// `ourios_memory_allocated_bytes` and `ourios_memory_resident_bytes`, the allocations are
/// nonzero, and what the allocator keeps resident holds at least them. Without the gauges'
/// task neither name is exported and the wait below fails.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[test]
fn the_binary_reports_its_allocators_memory() {
    let dir = tempfile::tempdir().unwrap();
    let node = proc::NodeProc::start(dir.path(), &[]);
    send_one_record(node.addr);
    // The gauges are read every second from the start; wait for a first reading.
    let deadline = std::time::Instant::now() + GUARD;
    let (allocated, resident) = loop {
        let allocated = node.metric("ourios_memory_allocated_bytes", &[]);
        let resident = node.metric("ourios_memory_resident_bytes", &[]);
        if allocated > 0.0 {
            break (allocated, resident);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no allocator gauges on /metrics: {}",
            node.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(
        resident >= allocated,
        "resident {resident} < allocated {allocated}"
    );
}

/// Proves the encode queue reports its bytes, the figure an operator reads next to the memory
/// gauges and `ourios_publisher_queue_bytes` when the node holds more than expected:
/// `/metrics` carries `ourios_ingest_encode_queue_bytes` from the start, at 0, though on the
/// default flags a small request never reaches the queue (it is mined and buffered in place).
/// Mutation check (by hand): without the gauge's first `set` in `EncodePool::start`, the
/// default node does not export it and the assertion fails.
#[test]
fn the_encode_queue_reports_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let node = proc::NodeProc::start(dir.path(), &[]);
    send_one_record(node.addr);
    assert_eq!(
        node.exported("ourios_ingest_encode_queue_bytes", &[]),
        Some(0.0),
        "the encode queue gauge is exported before any batch is queued: {}",
        node.log_text()
    );
}

/// Sends one OTLP/JSON record to `addr` and checks it is acknowledged.
fn send_one_record(addr: std::net::SocketAddr) {
    let body = br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"user 7 logged in"}}]}]}]}"#;
    let (status, _) = proc::http(
        addr,
        "POST",
        "/v1/logs",
        &[("Content-Type", "application/json")],
        body,
    )
    .unwrap();
    assert_eq!(status, 200);
}
