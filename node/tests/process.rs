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
    let body = br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"user 7 logged in"}}]}]}]}"#;
    let (status, _) = proc::http(
        ready.listen,
        "POST",
        "/v1/logs",
        &[("Content-Type", "application/json")],
        body,
    )
    .unwrap();
    assert_eq!(status, 200);

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
}
