//! The process harness the tests that run the real `ourios-node` binary share: the testkit's
//! server child with the node's test flags, and the store read back the way a reader joins it.
//!
//! `OURIOS_CRASH_NODE` names the binary to run (the release build, as `cargo xtask chaos` and
//! `cargo xtask hostile` set it); otherwise the debug build cargo made for the test.

#![allow(dead_code)] // each test binary uses its own part of the harness

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, ExitStatus};

use ourios_miner::Template;
use ourios_sinks::AuditKind;
pub(crate) use ourios_testkit::GUARD;
use ourios_testkit::{Served, http::Response, metrics, procfs};

const NODE: &str = env!("CARGO_BIN_EXE_ourios-node");

/// The binary under test: `OURIOS_CRASH_NODE`, or the debug build cargo made for this test.
pub(crate) fn node_binary() -> std::path::PathBuf {
    std::env::var_os("OURIOS_CRASH_NODE").map_or_else(|| NODE.into(), Into::into)
}

/// A running `ourios-node serve` child. Dropping it kills the child (a failing assertion
/// must not leave a node behind).
#[derive(Debug)]
pub(crate) struct NodeProc {
    served: Served,
    /// Its address (unspecified until it is ready).
    pub(crate) addr: SocketAddr,
}

impl NodeProc {
    /// Starts the node on `data` and returns once its ready file names its address (the
    /// listener is bound and recovery finished before the file is written).
    pub(crate) fn start(data: &Path, extra: &[String]) -> NodeProc {
        let mut node = NodeProc::spawn(data, extra);
        if let Err(e) = node.served.wait_ready(GUARD) {
            panic!("ourios-node did not start with {extra:?}: {e}");
        }
        node.addr = node.served.addr();
        let (status, _) = http(node.addr, "GET", "/healthz", &[], b"")
            .unwrap_or_else(|e| panic!("GET /healthz failed: {e}\n{}", node.log_text()));
        assert_eq!(status, 200, "GET /healthz");
        node
    }

    /// Starts the node on `data` without waiting for it; [`NodeProc::is_ready`] says when it
    /// serves.
    pub(crate) fn spawn(data: &Path, extra: &[String]) -> NodeProc {
        let mut cmd = Command::new(node_binary());
        cmd.arg("serve")
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
            .args(extra);
        let served = Served::spawn(cmd, None).expect("spawning ourios-node");
        NodeProc {
            served,
            addr: "127.0.0.1:0".parse().expect("literal"),
        }
    }

    /// Whether the node wrote its ready file (recovery finished) by now.
    pub(crate) fn is_ready(&mut self) -> bool {
        self.served.poll_ready().is_ok_and(|a| a.is_some())
    }

    pub(crate) fn log_text(&self) -> String {
        self.served.log_text()
    }

    /// SIGKILL and reap.
    pub(crate) fn kill(&mut self) -> Option<ExitStatus> {
        self.served.kill()
    }

    /// SIGTERM (graceful shutdown: the final cut publishes) and wait for the exit.
    pub(crate) fn terminate(&mut self) -> ExitStatus {
        self.served
            .terminate(GUARD)
            .unwrap_or_else(|e| panic!("ourios-node did not exit after SIGTERM: {e}"))
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.served.pid()
    }

    /// Resets the child's peak resident set, so [`NodeProc::rss_kib`] reads the peak from now
    /// on; false where the kernel does not offer it.
    pub(crate) fn reset_peak_rss(&self) -> bool {
        self.pid().is_some_and(procfs::reset_peak_rss)
    }

    /// The child's peak resident set in KiB (`VmHWM`), and its current one (`VmRSS`).
    pub(crate) fn rss_kib(&self) -> Option<(u64, u64)> {
        procfs::rss_kib(self.pid()?)
    }

    /// The sum of a metric's samples with these labels on `GET /metrics` (0 when the node
    /// exports none yet).
    pub(crate) fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.exported(name, labels).unwrap_or(0.0)
    }

    /// The same sum, or `None` while the node exports no such sample.
    pub(crate) fn exported(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let answer = ourios_testkit::http::exchange(self.addr, "GET", "/metrics", &[], b"")
            .expect("GET /metrics");
        assert_eq!(answer.status, 200, "GET /metrics");
        metrics::sum(&answer.text(), name, labels)
    }
}

/// One HTTP/1.1 exchange on a fresh connection (the testkit's client): status and body.
pub(crate) fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    ourios_testkit::http::exchange(addr, method, path, headers, body).map(|r| (r.status, r.body))
}

/// [`http`], with the response head (status line and headers) as text.
pub(crate) fn http_with_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, String, Vec<u8>)> {
    ourios_testkit::http::exchange(addr, method, path, headers, body)
        .map(|Response { status, head, body }| (status, head, body))
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
            .find(|(k, _)| *k == key_attribute)
            .map(|(_, v)| v.to_owned())
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
