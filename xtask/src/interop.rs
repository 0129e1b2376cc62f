//! `cargo xtask interop`: the node's Parquet, read by readers that share no code with the writer.
//!
//! Builds the debug `ourios-node`, serves a small OTLP/JSON workload for two tenants over HTTP
//! and one for a third tenant over OTLP/gRPC (sent by the OpenTelemetry Python SDK's own gRPC
//! exporter, `xtask/interop/send_grpc.py`) into a fresh data directory, stops the node with
//! SIGTERM (its final cut publishes everything buffered), and runs `xtask/interop/read_store.py`
//! on `<data>/store` with pyarrow and DuckDB. Both scripts run in a venv kept in the target
//! directory (`<target>/interop-venv`, created and filled from PyPI on first use, reused after).
//! A machine that cannot build the venv fails the task with the reason: the check is never
//! skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use ourios_testkit::{Ready, Served, http};

/// Tenants of the workload (the `X-Scope-OrgID` header).
const TENANTS: [&str; 2] = ["interop-a", "interop-b"];
/// Requests per tenant, and log records per request.
const REQUESTS: usize = 3;
const RECORDS: usize = 4;
/// The tenant the gRPC exporter writes, and how many records it sends (in batches of 7).
const GRPC_TENANT: &str = "interop-grpc";
const GRPC_RECORDS: usize = 25;
/// 2023-11-14T22:13:20Z: the workload's records span this hour and the next.
const T0: u64 = 1_700_000_000_000_000_000;
const HOUR: u64 = 3_600_000_000_000;
/// Longest the node may take to start or to stop before the task gives up on it.
const GUARD: Duration = Duration::from_secs(120);

/// Run the workload and the independent readers.
pub(crate) fn run(root: &Path) -> Result<()> {
    let target = crate::target_dir();
    let python = venv(&target)?;
    // The workspace test build already made `target/debug/ourios-node` (the node's crash and
    // end-to-end tests run it); `--no-run` reuses that build instead of resolving the node's
    // features alone, which would rebuild a second variant of the dependency graph.
    crate::cargo(&["test", "--workspace", "--locked", "--no-run"])?;
    let data = target.join("interop-data");
    if data.exists() {
        std::fs::remove_dir_all(&data)
            .with_context(|| format!("cannot clear {}", data.display()))?;
    }
    std::fs::create_dir_all(&data)?;
    let sent = workload(
        &target.join("debug").join("ourios-node"),
        &data,
        &python,
        &root.join("xtask/interop/send_grpc.py"),
    )?;
    let mut cmd = Command::new(&python);
    cmd.arg(root.join("xtask/interop/read_store.py"))
        .arg(data.join("store"))
        .arg("--expect-records")
        .arg(sent.to_string())
        .arg("--expect-tenants")
        .arg(format!("{},{GRPC_TENANT}", TENANTS.join(",")));
    println!("$ {cmd:?}");
    let status = cmd.status().context("could not run the interop reader")?;
    if !status.success() {
        bail!("the interop reader found a problem (exit {status}); see the lines above");
    }
    Ok(())
}

/// The venv's python, with pyarrow, duckdb and the OpenTelemetry SDK's gRPC exporter
/// importable: created and filled when missing.
pub(crate) fn venv(target: &Path) -> Result<PathBuf> {
    let venv = target.join("interop-venv");
    let python = venv.join("bin").join("python");
    let importable = |python: &Path| {
        Command::new(python)
            .args([
                "-c",
                "import pyarrow, duckdb, opentelemetry.exporter.otlp.proto.grpc",
            ])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if python.exists() && importable(&python) {
        return Ok(python);
    }
    let status = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .status();
    if !status.as_ref().is_ok_and(ExitStatus::success) {
        bail!(
            "cannot create a python venv at {} ({}): the interop check needs python3 with its \
             venv module (Debian: python3-venv)",
            venv.display(),
            outcome(&status)
        );
    }
    let status = Command::new(venv.join("bin").join("pip"))
        .args([
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "pyarrow",
            "duckdb",
            "opentelemetry-sdk",
            "opentelemetry-exporter-otlp-proto-grpc",
        ])
        .status();
    if !status.as_ref().is_ok_and(ExitStatus::success) || !importable(&python) {
        bail!(
            "pip could not install pyarrow, duckdb and the OpenTelemetry gRPC exporter into {} \
             ({}; is PyPI reachable?): the interop check cannot run without them",
            venv.display(),
            outcome(&status)
        );
    }
    Ok(python)
}

/// A child's exit status, or why it could not be started, for an error message.
fn outcome(status: &std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(e) => format!("could not run: {e}"),
    }
}

/// Serve the workload on a fresh node in `data` (HTTP from here, gRPC from `send_grpc` run by
/// `python`), stop it with SIGTERM, and return how many log records were acknowledged.
fn workload(node: &Path, data: &Path, python: &Path, send_grpc: &Path) -> Result<usize> {
    let mut cmd = Command::new(node);
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", "127.0.0.1:0"]);
    // The node's log is echoed; dropping `node` kills it, so a failed step leaves none behind.
    let mut node = Served::spawn(cmd, Some("node: ")).map_err(anyhow::Error::msg)?;
    let addr = node.wait_ready(GUARD).map_err(anyhow::Error::msg)?;

    let mut sent = 0;
    for (t, tenant) in TENANTS.iter().enumerate() {
        for r in 0..REQUESTS {
            let body = request_json(t, r);
            let headers = [
                ("Content-Type", "application/json"),
                ("X-Scope-OrgID", *tenant),
            ];
            let answer = http::exchange(addr, "POST", "/v1/logs", &headers, body.as_bytes())
                .with_context(|| format!("POST /v1/logs to {addr}"))?;
            if answer.status != 200 {
                bail!(
                    "POST /v1/logs for {tenant} answered {}: {}",
                    answer.status,
                    answer.text()
                );
            }
            sent += RECORDS;
        }
    }
    let grpc = Ready::read(node.ready_file())
        .context("the node's ready file is gone")?
        .map_err(anyhow::Error::msg)?
        .grpc
        .context("the node serves no OTLP/gRPC (its ready file names no `grpc` address)")?;
    let mut cmd = Command::new(python);
    cmd.arg(send_grpc)
        .arg(grpc.to_string())
        .arg(GRPC_TENANT)
        .arg(GRPC_RECORDS.to_string());
    println!("$ {cmd:?}");
    let status = cmd.status().context("could not run the gRPC sender")?;
    if !status.success() {
        bail!("the OTLP/gRPC exporter did not get every export acknowledged (exit {status})");
    }
    sent += GRPC_RECORDS;
    println!(
        "interop: {sent} log records acknowledged for {TENANTS:?} (HTTP) and {GRPC_TENANT} \
         (gRPC); stopping the node"
    );

    let exit = node.terminate(GUARD).map_err(anyhow::Error::msg)?;
    if !exit.success() {
        bail!("the node exited with {exit} after SIGTERM");
    }
    Ok(sent)
}

/// One OTLP/JSON export request: `RECORDS` log lines of two shapes (so the miner creates more
/// than one template), timestamps over two hours (so there is more than one partition).
fn request_json(tenant: usize, request: usize) -> String {
    let records: Vec<String> = (0..RECORDS)
        .map(|i| {
            let n = request * RECORDS + i;
            let time = T0 + (n as u64 % 2) * HOUR + n as u64;
            let body = if i % 2 == 0 {
                format!("user {n} logged in from 10.0.{tenant}.{i}")
            } else {
                format!("disk /dev/sd{i} is {}% full", 40 + n)
            };
            format!(
                r#"{{"timeUnixNano":"{time}","observedTimeUnixNano":"{time}","severityNumber":9,"severityText":"INFO","body":{{"stringValue":"{body}"}},"attributes":[{{"key":"request","value":{{"intValue":"{request}"}}}}]}}"#
            )
        })
        .collect();
    format!(
        r#"{{"resourceLogs":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"interop"}}}}]}},"scopeLogs":[{{"scope":{{"name":"xtask"}},"logRecords":[{}]}}]}}]}}"#,
        records.join(",")
    )
}
