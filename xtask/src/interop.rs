//! `cargo xtask interop`: the node's Parquet, read by readers that share no code with the writer.
//!
//! Builds the debug `ourios-node`, serves a small OTLP/JSON workload for two tenants into a fresh
//! data directory, stops the node with SIGTERM (its final cut publishes everything buffered),
//! and runs `xtask/interop/read_store.py` on `<data>/store` with pyarrow and DuckDB from a venv
//! kept in the target directory (`<target>/interop-venv`, created and filled from PyPI on first
//! use, reused after). A machine that cannot build the venv fails the task with the reason: the
//! check is never skipped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Tenants of the workload (the `X-Scope-OrgID` header).
const TENANTS: [&str; 2] = ["interop-a", "interop-b"];
/// Requests per tenant, and log records per request.
const REQUESTS: usize = 3;
const RECORDS: usize = 4;
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
    let sent = workload(&target.join("debug").join("ourios-node"), &data)?;
    let mut cmd = Command::new(&python);
    cmd.arg(root.join("xtask/interop/read_store.py"))
        .arg(data.join("store"))
        .arg("--expect-records")
        .arg(sent.to_string())
        .arg("--expect-tenants")
        .arg(TENANTS.join(","));
    println!("$ {cmd:?}");
    let status = cmd.status().context("could not run the interop reader")?;
    if !status.success() {
        bail!("the interop reader found a problem (exit {status}); see the lines above");
    }
    Ok(())
}

/// The venv's python, with pyarrow and duckdb importable: created and filled when missing.
fn venv(target: &Path) -> Result<PathBuf> {
    let venv = target.join("interop-venv");
    let python = venv.join("bin").join("python");
    let importable = |python: &Path| {
        Command::new(python)
            .args(["-c", "import pyarrow, duckdb"])
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
        ])
        .status();
    if !status.as_ref().is_ok_and(ExitStatus::success) || !importable(&python) {
        bail!(
            "pip could not install pyarrow and duckdb into {} ({}; is PyPI reachable?): the \
             interop check cannot run without them",
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

/// A running node; dropping it kills the child, so a failed step leaves no node behind.
struct NodeChild {
    child: Child,
    forward: Option<thread::JoinHandle<()>>,
}

impl Drop for NodeChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(forward) = self.forward.take() {
            let _ = forward.join();
        }
    }
}

/// Serve the workload on a fresh node in `data`, stop it with SIGTERM, and return how many log
/// records were acknowledged.
fn workload(node: &Path, data: &Path) -> Result<usize> {
    let mut child = Command::new(node)
        .arg("serve")
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", node.display()))?;
    let stderr = child.stderr.take().context("node stderr")?;
    let (tx, rx) = mpsc::channel();
    // Forwards the node's log and hands over the address from its "listening on" line; it
    // keeps reading to the end so the node never blocks on a full pipe.
    let forward = thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("node: {line}");
            if let Some(addr) = line
                .split("listening on http://")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|a| a.parse::<SocketAddr>().ok())
            {
                let _ = tx.send(addr);
            }
        }
    });
    let mut node = NodeChild {
        child,
        forward: Some(forward),
    };
    let addr: SocketAddr = rx
        .recv_timeout(GUARD)
        .context("the node did not print its listening address")?;

    let mut sent = 0;
    for (t, tenant) in TENANTS.iter().enumerate() {
        for r in 0..REQUESTS {
            let body = request_json(t, r);
            let (status, reply) = post(addr, tenant, &body)?;
            if status != 200 {
                bail!("POST /v1/logs for {tenant} answered {status}: {reply}");
            }
            sent += RECORDS;
        }
    }
    println!("interop: {sent} log records acknowledged for {TENANTS:?}; stopping the node");

    let pid = node.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status()?;
    if !status.success() {
        bail!("kill -TERM {pid} failed: {status}");
    }
    let started = Instant::now();
    let exit = loop {
        if let Some(exit) = node.child.try_wait()? {
            break exit;
        }
        if started.elapsed() > GUARD {
            bail!("the node did not stop within {GUARD:?} of SIGTERM");
        }
        thread::sleep(Duration::from_millis(50));
    };
    if let Some(forward) = node.forward.take() {
        let _ = forward.join();
    }
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

/// POST `body` to `/v1/logs` as OTLP/JSON over one HTTP/1.1 connection; the status and body.
fn post(addr: SocketAddr, tenant: &str, body: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
    stream.set_read_timeout(Some(GUARD))?;
    write!(
        stream,
        "POST /v1/logs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         X-Scope-OrgID: {tenant}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply)?;
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let status = reply
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP response: {reply:?}"))?;
    let body = reply
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}
