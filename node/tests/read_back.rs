//! The read path as a user meets it: lines sent over OTLP/HTTP to the release of the node come
//! back byte for byte from the Loki endpoint while it serves, and from `ourios-node query` and
//! `ourios-node sql` after it stops; one tenant never sees another's; with `--auth-tokens`
//! every write and read needs a token of its tenant.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ourios_testkit::otlp;
use prost::Message;

mod proc;
use proc::{NodeProc, http};

/// Lines a tokenizer meets rarely, each with a unique `id=` so the check is by id.
fn lines(tenant: &str) -> Vec<String> {
    let shapes = [
        "user alice logged in from 10.0.0.1",
        "GET /api/v1/items/17 200 3ms",
        "  two leading spaces and a trailing tab\t",
        "ünïcödé ✓ 日本語",
        "java.lang.IllegalStateException: boom\n\tat a.b.C.d(C.java:10)",
        "quote \" and backslash \\ and comma ,",
    ];
    (0..30)
        .map(|i| format!("{} id={tenant}-{i}", shapes[i % shapes.len()]))
        .collect()
}

fn send(addr: SocketAddr, tenant: &str, lines: &[String], token: Option<&str>) -> u16 {
    let now = otlp::now_nanos();
    let records = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let severity = if i % 3 == 0 {
                (17, "ERROR")
            } else {
                (9, "INFO")
            };
            otlp::record(
                (now - 1_000_000 + i as u64, now),
                severity,
                l,
                vec![otlp::attr("n", &i.to_string())],
            )
        })
        .collect();
    let body = otlp::request(vec![otlp::attr("service.name", "shop")], records).encode_to_vec();
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("Content-Type", "application/x-protobuf"),
        ("X-Scope-OrgID", tenant),
    ];
    if let Some(a) = &auth {
        headers.push(("Authorization", a));
    }
    http(addr, "POST", "/v1/logs", &headers, &body).unwrap().0
}

fn loki(
    addr: SocketAddr,
    tenant: &str,
    query: &str,
    token: Option<&str>,
) -> (u16, serde_json::Value) {
    let path = format!(
        "/loki/api/v1/query_range?query={}&limit=1000&since=1h",
        url::form_urlencoded::byte_serialize(query.as_bytes()).collect::<String>()
    );
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("X-Scope-OrgID", tenant)];
    if let Some(a) = &auth {
        headers.push(("Authorization", a));
    }
    let (status, body) = http(addr, "GET", &path, &headers, b"").unwrap();
    let value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    (status, value)
}

/// The lines of a Loki streams answer, checking the documented shape on the way.
fn stream_lines(answer: &serde_json::Value) -> Vec<String> {
    assert_eq!(answer["status"], "success", "{answer}");
    assert_eq!(answer["data"]["resultType"], "streams", "{answer}");
    let mut out = Vec::new();
    for stream in answer["data"]["result"].as_array().unwrap() {
        assert!(stream["stream"].is_object(), "{stream}");
        assert_eq!(stream["stream"]["service_name"], "shop");
        for value in stream["values"].as_array().unwrap() {
            let pair = value.as_array().unwrap();
            assert_eq!(pair.len(), 2);
            pair[0]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .expect("a timestamp in ns, as a string");
            out.push(pair[1].as_str().unwrap().to_owned());
        }
    }
    out
}

/// Poll the Loki endpoint until `want` lines are readable (publication is asynchronous); the
/// deadline is a guard against a hang, not a claim about speed.
fn wait_for_lines(addr: SocketAddr, tenant: &str, want: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, answer) = loki(addr, tenant, r#"{service_name="shop"}"#, None);
        assert_eq!(status, 200, "{answer}");
        let got = stream_lines(&answer);
        if got.len() >= want || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn cli(data: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(proc::node_binary())
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn set(lines: &[String]) -> BTreeSet<String> {
    let s: BTreeSet<String> = lines.iter().cloned().collect();
    assert_eq!(s.len(), lines.len(), "a line came back twice");
    s
}

/// Proves lines sent by an OTLP client come back byte for byte, once each and only to their
/// tenant: from the Loki API while the node serves (with the documented JSON shape, line
/// filters and a metric query), then from `ourios-node query` (JSON lines) and
/// `ourios-node sql` after it stops.
#[test]
fn lines_come_back_from_loki_query_and_sql() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = NodeProc::start(dir.path(), &[]);
    let a = lines("acme");
    let b = lines("globex");
    assert_eq!(send(node.addr, "acme", &a, None), 200);
    assert_eq!(send(node.addr, "globex", &b, None), 200);

    let got = wait_for_lines(node.addr, "acme", a.len());
    assert_eq!(
        set(&got),
        set(&a),
        "Loki gives back acme's lines, byte for byte"
    );
    let got = wait_for_lines(node.addr, "globex", b.len());
    assert_eq!(set(&got), set(&b));

    let (_, answer) = loki(
        node.addr,
        "acme",
        r#"{service_name="shop", severity="error"} |= "id=acme-1" != "logged""#,
        None,
    );
    let got = set(&stream_lines(&answer));
    let want: BTreeSet<String> = a
        .iter()
        .enumerate()
        .filter(|(i, l)| i % 3 == 0 && l.contains("id=acme-1") && !l.contains("logged"))
        .map(|(_, l)| l.clone())
        .collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);
    let (status, answer) = loki(
        node.addr,
        "acme",
        r#"sum by (severity) (count_over_time({service_name="shop"}[1h]))"#,
        None,
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["resultType"], "matrix");
    let mut counts = std::collections::BTreeMap::new();
    for series in answer["data"]["result"].as_array().unwrap() {
        let last = series["values"].as_array().unwrap().last().unwrap();
        counts.insert(
            series["metric"]["severity"].as_str().unwrap().to_owned(),
            last[1].as_str().unwrap().parse::<f64>().unwrap(),
        );
    }
    assert_eq!(counts.get("error"), Some(&10.0), "{answer}");
    assert_eq!(counts.get("info"), Some(&20.0), "{answer}");
    let (status, _) = loki(node.addr, "acme", r#"{service_name="shop"} | json"#, None);
    assert_eq!(status, 400, "outside the subset is refused");
    let (status, body) = http(
        node.addr,
        "GET",
        "/loki/api/v1/label/severity/values?since=1h",
        &[("X-Scope-OrgID", "acme")],
        b"",
    )
    .unwrap();
    assert_eq!(status, 200);
    let values: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(values["data"], serde_json::json!(["error", "info"]));
    let (status, _) = http(
        node.addr,
        "GET",
        "/loki/api/v1/labels",
        &[("X-Scope-OrgID", "../acme")],
        b"",
    )
    .unwrap();
    assert_eq!(status, 400, "a crafted tenant is refused");
    assert_eq!(node.terminate().code(), Some(0));

    let (ok, out, err) = cli(
        dir.path(),
        &[
            "query", "--tenant", "acme", "--since", "2h", "--format", "jsonl",
        ],
    );
    assert!(ok, "{err}");
    let got: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["line"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        set(&got),
        set(&a),
        "ourios-node query gives back acme's lines"
    );
    let (ok, out, err) = cli(
        dir.path(),
        &[
            "query",
            "--tenant",
            "acme",
            "--since",
            "2h",
            "--severity",
            ">=error",
            "--contains",
            "id=acme-2",
            "--format",
            "csv",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("time,severity,line\n"), "{out}");
    let rows = out.lines().count() - 1;
    let want = a
        .iter()
        .enumerate()
        .filter(|(i, l)| i % 3 == 0 && l.contains("id=acme-2"))
        .count();
    assert!(want > 0);
    // Multi-line lines are quoted: count records by their id instead of by newline.
    assert_eq!(out.matches("id=acme-2").count(), want, "{out}");
    assert!(rows >= want);

    let (ok, out, err) = cli(
        dir.path(),
        &[
            "sql",
            "--tenant",
            "globex",
            "SELECT line FROM logs ORDER BY line",
        ],
    );
    assert!(ok, "{err}");
    for l in &b {
        let first = l.lines().next().unwrap();
        assert!(
            out.contains(first.trim()),
            "sql output lacks {first:?}\n{out}"
        );
    }
    assert!(!out.contains("id=acme"), "globex's SQL sees no acme line");
    let (ok, _, err) = cli(
        dir.path(),
        &[
            "sql",
            "--tenant",
            "globex",
            "CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION 'ourios://store/records/tenant=acme/'",
        ],
    );
    assert!(!ok, "DDL is refused");
    assert!(
        err.contains("DDL") || err.contains("not supported") || err.contains("not allowed"),
        "{err}"
    );
}

/// Proves `--auth-tokens`: without a token 401, with another tenant's token 403, with the
/// tenant's token the write and the read go through; `/metrics` needs a token that may read it.
#[test]
fn tokens_guard_ingest_reads_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let hash = |t: &str| {
        let out = Command::new(proc::node_binary())
            .args(["hash-token", t])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    std::fs::write(
        &tokens,
        format!(
            "[[token]]\nsha256 = \"{}\"\ntenants = [\"acme\"]\n\n[[token]]\nsha256 = \"{}\"\ntenants = [\"*\"]\nmetrics = true\n",
            hash("acme-secret"),
            hash("ops-secret")
        ),
    )
    .unwrap();
    let node = NodeProc::start(
        &dir.path().join("data"),
        &["--auth-tokens".into(), tokens.display().to_string()],
    );
    let a = lines("acme");
    assert_eq!(send(node.addr, "acme", &a, None), 401);
    assert_eq!(send(node.addr, "acme", &a, Some("wrong")), 401);
    assert_eq!(send(node.addr, "globex", &a, Some("acme-secret")), 403);
    assert_eq!(send(node.addr, "acme", &a, Some("acme-secret")), 200);
    assert_eq!(loki(node.addr, "acme", "{}", None).0, 401);
    assert_eq!(loki(node.addr, "globex", "{}", Some("acme-secret")).0, 403);
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        let (status, answer) = loki(node.addr, "acme", "{}", Some("acme-secret"));
        assert_eq!(status, 200);
        let got = answer["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["values"].as_array().unwrap().len())
            .sum::<usize>();
        if got >= a.len() || Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(got, a.len());
    assert_eq!(http(node.addr, "GET", "/metrics", &[], b"").unwrap().0, 401);
    assert_eq!(
        http(
            node.addr,
            "GET",
            "/metrics",
            &[("Authorization", "Bearer acme-secret")],
            b""
        )
        .unwrap()
        .0,
        403
    );
    assert_eq!(
        http(
            node.addr,
            "GET",
            "/metrics",
            &[("Authorization", "Bearer ops-secret")],
            b""
        )
        .unwrap()
        .0,
        200
    );
    assert_eq!(http(node.addr, "GET", "/healthz", &[], b"").unwrap().0, 200);
}

/// Proves reading while writing: while a writer sends request after request, every answer of
/// the Loki endpoint holds only acknowledged lines, byte for byte, each once, and never fewer
/// than an earlier answer (a line once readable stays readable); after the writer stops, the
/// reader sees every acknowledged line.
#[test]
fn reads_during_ingest_see_published_lines_once() {
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProc::start(dir.path(), &[]);
    let addr = node.addr;
    let acked: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let acked = Arc::clone(&acked);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut batch = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && batch < 40 {
                let lines: Vec<String> = (0..20)
                    .map(|i| {
                        format!(
                            "order {batch}-{i} shipped to zone {} in {}ms",
                            i % 5,
                            i * 13
                        )
                    })
                    .collect();
                if send(addr, "acme", &lines, None) == 200 {
                    acked.lock().unwrap().extend(lines);
                }
                batch += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mut seen = 0;
    let mut answers = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let writer_done = writer.is_finished();
        let (status, answer) = loki(addr, "acme", r#"{service_name="shop"}"#, None);
        assert_eq!(status, 200, "{answer}");
        let got = stream_lines(&answer);
        let got_set = set(&got);
        {
            let acked = acked.lock().unwrap();
            let stray: Vec<&String> = got_set.difference(&acked).collect();
            assert!(stray.is_empty(), "lines never acknowledged: {stray:?}");
        }
        assert!(
            got.len() >= seen,
            "an answer lost lines: {} after {seen}",
            got.len()
        );
        seen = got.len();
        answers += 1;
        let all = acked.lock().unwrap().len();
        if writer_done && seen == all {
            break;
        }
        assert!(Instant::now() < deadline, "{seen} of {all} lines readable");
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(answers > 2, "the reader answered while the writer wrote");
    assert!(seen > 0);
}
