//! The process harness the tests that run the real `ourios-node` binary share: one node
//! child with its stderr kept, a small HTTP/1.1 client on a fresh connection per exchange, the
//! child's resident set from `/proc`, and the store read back the way a reader joins it.
//!
//! `OURIOS_CRASH_NODE` names the binary to run (the release build, as `cargo xtask chaos` and
//! `cargo xtask hostile` set it); otherwise the debug build cargo made for the test.

#![allow(dead_code)] // each test binary uses its own part of the harness

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use ourios_miner::Template;
use ourios_sinks::AuditKind;

const NODE: &str = env!("CARGO_BIN_EXE_ourios-node");

/// The binary under test: `OURIOS_CRASH_NODE`, or the debug build cargo made for this test.
pub(crate) fn node_binary() -> std::path::PathBuf {
    std::env::var_os("OURIOS_CRASH_NODE").map_or_else(|| NODE.into(), Into::into)
}

/// A guard against a hung child, never an ordering device: nothing waits this long when the
/// node works.
pub(crate) const GUARD: Duration = Duration::from_secs(60);

/// A running `ourios-node serve` child. Dropping it kills the child (a failing assertion
/// must not leave a node behind).
#[derive(Debug)]
pub(crate) struct NodeProc {
    child: Option<Child>,
    pub(crate) addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    stderr: Option<JoinHandle<()>>,
}

impl NodeProc {
    /// Starts the node on `data` and returns once it printed its listening address (the
    /// listener is bound and recovery finished before that line is written).
    pub(crate) fn start(data: &Path, extra: &[String]) -> NodeProc {
        let (mut node, rx) = NodeProc::spawn(data, extra);
        match rx.recv_timeout(GUARD) {
            Ok(addr) => node.addr = addr,
            Err(_) => {
                let status = node.kill();
                panic!(
                    "ourios-node did not start ({status:?}) with {extra:?}; stderr:\n{}",
                    node.log_text()
                );
            }
        }
        let (status, _) = http(node.addr, "GET", "/healthz", &[], b"")
            .unwrap_or_else(|e| panic!("GET /healthz failed: {e}\n{}", node.log_text()));
        assert_eq!(status, 200, "GET /healthz");
        node
    }

    /// Starts the node on `data` without waiting for it: the receiver gets its listening
    /// address once recovery finished.
    pub(crate) fn spawn(data: &Path, extra: &[String]) -> (NodeProc, mpsc::Receiver<SocketAddr>) {
        let mut child = Command::new(node_binary())
            .arg("serve")
            .arg("--data-dir")
            .arg(data)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--sweep-secs",
                "1",
                "--barrier-secs",
                "1",
                "--partition-max-age-secs",
                "0",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning ourios-node");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = Arc::clone(&log);
        let reader = thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = listening_addr(&line) {
                    let _ = tx.send(addr);
                }
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line);
            }
        });
        let node = NodeProc {
            child: Some(child),
            addr: "127.0.0.1:0".parse().expect("literal"),
            log,
            stderr: Some(reader),
        };
        (node, rx)
    }

    pub(crate) fn log_text(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .join("\n")
    }

    /// SIGKILL and reap.
    pub(crate) fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        let status = child.wait().ok();
        if let Some(reader) = self.stderr.take() {
            let _ = reader.join();
        }
        status
    }

    /// SIGTERM (graceful shutdown: the final cut publishes) and wait for the exit.
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("node running");
        let pid = child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("running kill");
        assert!(sent.success(), "kill -TERM {pid}: {sent}");
        let (tx, rx) = mpsc::channel();
        let waiter = thread::spawn(move || {
            let status = child.wait();
            let _ = tx.send(());
            (child, status)
        });
        if rx.recv_timeout(GUARD).is_err() {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            panic!(
                "ourios-node did not exit after SIGTERM:\n{}",
                self.log_text()
            );
        }
        let (_, status) = waiter.join().expect("waiter thread");
        if let Some(reader) = self.stderr.take() {
            let _ = reader.join();
        }
        status.expect("waiting for ourios-node")
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Resets the child's peak resident set (Linux `clear_refs` 5), so [`NodeProc::peak_rss_kib`]
    /// reads the peak from now on; false where the kernel does not offer it.
    pub(crate) fn reset_peak_rss(&self) -> bool {
        self.pid()
            .is_some_and(|pid| std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok())
    }

    /// The child's peak resident set in KiB (`VmHWM`), and its current one (`VmRSS`).
    pub(crate) fn rss_kib(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        };
        Some((field("VmHWM:")?, field("VmRSS:")?))
    }

    pub(crate) fn metric(&self, name: &str) -> f64 {
        let (status, body) = http(self.addr, "GET", "/metrics", &[], b"").expect("GET /metrics");
        assert_eq!(status, 200, "GET /metrics");
        String::from_utf8_lossy(&body)
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

pub(crate) fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on http://").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// One HTTP/1.1 exchange on a fresh connection. The status is whatever status line arrived,
/// even if the connection broke afterwards: a `200` line means the node decided to ack.
pub(crate) fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    http_with_head(addr, method, path, headers, body).map(|(status, _, body)| (status, body))
}

/// [`http`], with the response head (status line and headers) as text.
pub(crate) fn http_with_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, String, Vec<u8>)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(GUARD))?;
    stream.set_nodelay(true)?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    // Written from a second thread while this one reads: a server may answer and close before
    // the whole body is sent (a body past its limit), and the answer must be read before the
    // reset the rest of the body provokes can discard it.
    let mut writer = stream.try_clone()?;
    let sending = thread::spawn(move || writer.write_all(&request));
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    let broke = loop {
        match stream.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Some(e),
        }
    };
    let wrote = sending
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the writer thread panicked")));
    let status = response
        .strip_prefix(b"HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| std::str::from_utf8(c).ok()?.parse::<u16>().ok());
    match (status, broke) {
        (Some(s), _) => {
            let head_end = response
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .unwrap_or(response.len());
            let head = String::from_utf8_lossy(&response[..head_end]).into_owned();
            let body_at = (head_end + 4).min(response.len());
            Ok((s, head, response[body_at..].to_vec()))
        }
        (None, Some(e)) => Err(wrote.err().unwrap_or(e)),
        (None, None) => Err(wrote.err().unwrap_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed before a status line",
            )
        })),
    }
}

/// What the store holds, read back.
#[derive(Debug)]
pub(crate) struct StoreContents {
    /// `(tenant, line key)` -> the body of every record carrying it (duplicates included):
    /// the kept `body`, or its template rebuilt with its params, or why that failed.
    pub(crate) copies: HashMap<(String, String), Vec<Result<String, String>>>,
    /// Records without a line key.
    pub(crate) unkeyed: usize,
    /// Template keys that name two texts, and unexpected events.
    pub(crate) conflicts: Vec<String>,
}

/// Every record in the store by its line key (the value of its `key_attribute`), with its body. A body is the record's kept
/// `body`, or the text its template key names in the audit series rebuilt with its params: a
/// record whose key has no durable definition breaks I3 and shows up as an `Err`.
pub(crate) fn read_store(store_dir: &Path, key_attribute: &str) -> StoreContents {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let store = ourios_sinks::store_from_url(&format!("file://{}", store_dir.display()))
        .expect("opening the store");
    let (records, events) = runtime.block_on(async {
        let r = ourios_sinks::read_records(store.as_ref(), "")
            .await
            .expect("reading records");
        let e = ourios_sinks::read_audit_events(store.as_ref(), "")
            .await
            .expect("reading audit events");
        (r, e)
    });
    let mut conflicts = Vec::new();
    for (_, event) in &events {
        if let AuditKind::RecordQuarantined { record_id, .. } = &event.kind {
            conflicts.push(format!("unexpected quarantine of {record_id:?}"));
        }
    }
    // The reader's join: (tenant, template key) -> the one text the key names.
    let texts = ourios_sinks::template_texts(events.iter().map(|(_, e)| e)).unwrap_or_else(|c| {
        conflicts.extend(c);
        Default::default()
    });
    // Parsed once: a store holds far more records than template versions.
    let templates: BTreeMap<(String, [u8; 16]), Result<Template, String>> = texts
        .into_iter()
        .map(|((t, k), text)| {
            (
                (t.as_str().to_owned(), k),
                Template::parse(&text).map_err(|e| e.to_string()),
            )
        })
        .collect();
    let mut copies: HashMap<(String, String), Vec<Result<String, String>>> = HashMap::new();
    let mut unkeyed = 0;
    for r in records {
        let tenant = r.tenant.as_str().to_owned();
        let Some(key) = r
            .attributes
            .iter()
            .find(|(k, _)| k == key_attribute)
            .map(|(_, v)| v.clone())
        else {
            unkeyed += 1;
            continue;
        };
        let body = match r.body {
            Some(b) => Ok(b),
            None => {
                let rebuilt = match templates.get(&(tenant.clone(), r.template_key)) {
                    None => Err("no definition of its template key in the audit series".to_owned()),
                    Some(Err(e)) => Err(e.clone()),
                    Some(Ok(t)) => t.reconstruct(&r.params).map_err(|e| e.to_string()),
                };
                rebuilt.map_err(|e| {
                    format!(
                        "{tenant} {:?} template key {} (id {} v{}): {e}",
                        r.id,
                        ourios_sinks::hex(&r.template_key),
                        r.template_id,
                        r.template_version
                    )
                })
            }
        };
        copies.entry((tenant, key)).or_default().push(body);
    }
    StoreContents {
        copies,
        unkeyed,
        conflicts,
    }
}
