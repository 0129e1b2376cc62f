//! Crash test (issue 8, DESIGN.md §10, invariant I1): SIGKILL the real `ourios-node` binary
//! while it ingests and publishes, restart it on the same data directory, and check that every
//! acknowledged log line is in the store exactly once.
//!
//! Its own test binary: it drives child processes over real sockets and takes most of a minute,
//! so it stays out of the `it` suite. The kill moments come from a seeded `fastrand`; set
//! `OURIOS_CRASH_SEED` to replay a failing run (the seed is printed) and `OURIOS_CRASH_DIR` to
//! keep its data directory.
//!
//! Chaos mode (`cargo xtask chaos --secs N` sets it up): `OURIOS_CRASH_SECS=N` runs rounds
//! until N seconds have passed instead of 24, with 4 writers over 4 tenants and a kill every
//! 0.5-3 s, and `OURIOS_CRASH_NODE` names the binary to run (the release build).

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ourios_testkit::otlp;
use prost::Message;

mod proc;
use proc::{GUARD, NodeProc, StoreContents, http, read_store};

/// How long chaos mode runs (`OURIOS_CRASH_SECS`); `None` runs the fixed rounds.
fn chaos_secs() -> Option<u64> {
    std::env::var("OURIOS_CRASH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
}
/// Kill-and-restart rounds (issue 8 asks for at least 20).
const ROUNDS: u64 = 24;
/// Longest a round runs before its SIGKILL.
const MAX_KILL_AFTER_MS: u64 = 1_500;
const TENANTS: [&str; 4] = ["crash-a", "crash-b", "crash-c", "crash-d"];
const DEFAULT_SEED: u64 = 0x0054_0056_c4a5_4001;

/// The run's seeded generator: every kill moment and line shape repeats for a seed.
type Rng = fastrand::Rng;

/// Attribute carrying a line's key, so a record is found even if its body cannot be rebuilt.
const KEY_ATTRIBUTE: &str = "crash.line";

/// A log line sent: its key (unique in the run) and its body.
#[derive(Debug)]
struct Line {
    key: String,
    body: String,
}

/// One unique line: four templates, numeric parameters, and a key naming round, writer,
/// request and position (in the body and in an attribute), so no two lines are equal.
fn line(round: u64, writer: usize, seq: u64, i: usize, rng: &mut Rng) -> Line {
    let key = format!("r{round}w{writer}s{seq}i{i}");
    let body = match rng.u64(..4) {
        0 => format!(
            "user {key} logged in from 10.{}.{}.{} in {} ms",
            rng.u64(..256),
            rng.u64(..256),
            rng.u64(..256),
            rng.u64(..900)
        ),
        1 => format!(
            "GET /api/v1/items/{} returned {} for {key} after {} us",
            rng.u64(..100_000),
            200 + rng.u64(..4) * 100,
            rng.u64(..50_000)
        ),
        2 => format!(
            "cache miss key={key} shard={} size={} bytes",
            rng.u64(..64),
            rng.u64(..1 << 20)
        ),
        _ => format!(
            "worker {} finished job {key} with {} retries",
            rng.u64(..16),
            rng.u64(..5)
        ),
    };
    Line { key, body }
}

const SEVERITIES: [(i32, &str); 4] = [(5, "DEBUG"), (9, "INFO"), (13, "WARN"), (17, "ERROR")];

fn protobuf_body(lines: &[Line], rng: &mut Rng) -> Vec<u8> {
    let now = otlp::now_nanos();
    let records = lines
        .iter()
        .map(|l| {
            otlp::record(
                (now, now),
                SEVERITIES[rng.usize(..SEVERITIES.len())],
                &l.body,
                vec![otlp::attr(KEY_ATTRIBUTE, &l.key)],
            )
        })
        .collect();
    otlp::request(vec![otlp::attr("service.name", "crash")], records).encode_to_vec()
}

/// OTLP/JSON written by hand (string int64s, camelCase), as a non-Rust client sends it.
fn json_body(lines: &[Line], rng: &mut Rng) -> Vec<u8> {
    let now = otlp::now_nanos().to_string();
    let records: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| {
            let (sev, sev_text) = SEVERITIES[rng.u64(..4) as usize];
            serde_json::json!({
                "timeUnixNano": now,
                "observedTimeUnixNano": now,
                "severityNumber": sev,
                "severityText": sev_text,
                "body": { "stringValue": l.body },
                "attributes": [
                    { "key": KEY_ATTRIBUTE, "value": { "stringValue": l.key } }
                ],
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "resourceLogs": [{
            "resource": { "attributes": [
                { "key": "service.name", "value": { "stringValue": "crash" } }
            ]},
            "scopeLogs": [{ "logRecords": records }],
        }]
    }))
    .expect("json")
}

/// A request the node answered `200`: its tenant and lines.
#[derive(Debug)]
struct Acked {
    tenant: &'static str,
    lines: Vec<Line>,
}

/// What a writer saw besides acks: statuses other than 200 (none are expected: the node is
/// only ever killed, never shut down, while writers run).
#[derive(Debug, Default)]
struct WriterReport {
    sent: u64,
    unexpected: Vec<(u16, String)>,
}

/// Sends requests of 1-8 unique lines (JSON or protobuf at random) until the node is gone.
fn writer(
    addr: SocketAddr,
    round: u64,
    writer: usize,
    tenant: &'static str,
    seed: u64,
    acks: mpsc::Sender<Acked>,
) -> WriterReport {
    let mut rng = Rng::with_seed(seed);
    let mut report = WriterReport::default();
    for seq in 0.. {
        let n = 1 + rng.u64(..8) as usize;
        let lines: Vec<Line> = (0..n)
            .map(|i| line(round, writer, seq, i, &mut rng))
            .collect();
        let (content_type, body) = if rng.u64(..2) == 0 {
            ("application/json", json_body(&lines, &mut rng))
        } else {
            ("application/x-protobuf", protobuf_body(&lines, &mut rng))
        };
        report.sent += 1;
        let headers = [("Content-Type", content_type), ("X-Scope-OrgID", tenant)];
        match http(addr, "POST", "/v1/logs", &headers, &body) {
            Ok((200, _)) => {
                if acks.send(Acked { tenant, lines }).is_err() {
                    break;
                }
            }
            Ok((status, body)) => {
                report
                    .unexpected
                    .push((status, String::from_utf8_lossy(&body).into_owned()));
                break;
            }
            // Refused or reset: the node is gone.
            Err(_) => break,
        }
    }
    report
}

/// Appends what a crash in the middle of an append leaves on disk to the newest WAL segment:
/// a frame header whose body was cut short, half a header, or a zeroed tail. SIGKILL alone
/// rarely tears a frame (a write into the page cache completes or does not happen), so some
/// rounds add one; nothing acknowledged is touched. Returns the bytes appended.
fn tear_tail(data: &Path, kind: u64) -> u64 {
    let dir = data.join("wal").join("segments");
    let newest = std::fs::read_dir(&dir)
        .expect("listing WAL segments")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .max()
        .expect("a WAL segment");
    let mut torn = Vec::new();
    match kind % 3 {
        0 => {
            let tenant = TENANTS[0].as_bytes();
            let len = 8 + 1 + tenant.len() as u32 + 4_000;
            torn.extend_from_slice(&len.to_le_bytes());
            torn.extend_from_slice(&0x7e57_ab1e_u32.to_le_bytes());
            torn.extend_from_slice(&u64::MAX.to_le_bytes());
            torn.push(tenant.len() as u8);
            torn.extend_from_slice(tenant);
            torn.extend_from_slice(&[0x42; 1_000]);
        }
        1 => torn.extend_from_slice(&[0xa0, 0x0f, 0, 0, 0x99, 0x01]),
        _ => torn.extend_from_slice(&[0; 512]),
    }
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&newest)
        .expect("opening the newest segment");
    file.write_all(&torn).expect("tearing the tail");
    torn.len() as u64
}

/// Per-round settings beyond the common ones: small partitions keep the publisher thread busy,
/// inline encoding takes the no-pool branch, an inline-ingest limit of 0 sends every request's
/// records through the encode pool (by default small ones go to the sink in place), small
/// segments make rotation cuts and truncation.
fn round_flags(round: u64, rng: &mut Rng) -> Vec<String> {
    let mut flags = Vec::new();
    if round % 2 == 1 {
        let bytes = [8_192, 32_768, 131_072][rng.u64(..3) as usize];
        flags.extend(["--partition-target-bytes".to_owned(), bytes.to_string()]);
    }
    if round % 3 == 2 {
        flags.extend(["--encode-workers".to_owned(), "0".to_owned()]);
    }
    if round % 4 == 3 {
        flags.extend(["--wal-segment-bytes".to_owned(), "65536".to_owned()]);
    }
    if round % 7 == 5 {
        flags.extend(["--inline-ingest-bytes".to_owned(), "0".to_owned()]);
    }
    // Another miner configuration: the snapshots of the last round are not used, the miners
    // start empty, and template keys must still name one text each.
    if round % 5 == 4 {
        flags.extend(["--similarity".to_owned(), "0.4".to_owned()]);
    }
    flags
}

/// Damages (even rounds) or deletes (odd rounds) every tenant snapshot the last round left:
/// recovery must fall back to replay and template keys must still name one text each.
fn spoil_snapshots(data: &Path, round: u64) -> usize {
    let dir = data.join("wal").join("tenants");
    let mut spoiled = 0;
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "snap") {
            continue;
        }
        if round.is_multiple_of(2) {
            let mut bytes = std::fs::read(&path).expect("reading a snapshot");
            let mid = bytes.len() / 2;
            if let Some(b) = bytes.get_mut(mid) {
                *b ^= 0xa5;
            }
            std::fs::write(&path, bytes).expect("damaging a snapshot");
        } else {
            std::fs::remove_file(&path).expect("deleting a snapshot");
        }
        spoiled += 1;
    }
    spoiled
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| {
                let p = e.path();
                if p.is_dir() { count_files(&p) } else { 1 }
            })
            .sum()
    })
}

/// I1 (and I3) across real crashes: 24 rounds each start the real binary on the same data
/// directory, run 2-3 writers (one tenant each, OTLP/JSON and protobuf over HTTP/1.1) while
/// the sweep, the barrier (every second, and on WAL rotation in some rounds) and, with small
/// partitions, the publisher thread publish, and SIGKILL the node at a seeded random moment
/// with requests in flight. Every round's start proves the WAL healed whatever tail the kill
/// left (a torn tail that did not heal refuses to start); every third round also appends a
/// torn frame to the newest segment (header with a short body, half a header, zeros) and the
/// next start must report it healed. Every fourth round damages or deletes the snapshots the
/// kill left, and every fifth restarts under another `--similarity`, so miners start empty
/// while the store already holds their keys. Every third round also starts the node once and
/// kills it within 400 ms, while it recovers (replaying, cutting, rebuilding sealed units) or
/// just after. A last start recovers and SIGTERM runs the final cut. Then every line whose
/// request got a `200` must be in the store exactly once (found by its key attribute; RFC
/// 0058) with the body that was sent, rebuilt from the text its template key names in the
/// audit series; a record whose key has no definition in the store breaks I3, and a key naming
/// two texts is a conflict.
///
/// Reasoned mutation (not run as a mutant), for exactly once: in `read_intents` (lib.rs), skip pass
/// 1 (`continue` on every intent frame) and the units that landed before a kill are published again
/// under new keys: the final assertion reports duplicated lines.
///
/// Reasoned mutation (not run as a mutant): in `replay_frames` (lib.rs), treat `ReplayMode::Normal`
/// frames like `Skipped` (`continue` before decoding): lines acked and buffered but not yet
/// published at a kill are then never re-mined, and the final assertion lists them as missing.
/// Likewise, acknowledge before the WAL append in core.rs `ingest` (spawn the append and return
/// `Ok` at once) and lines acked just before a kill are missing.
#[test]
fn crash_sigkill_during_ingest_and_publishing_loses_no_acked_record() {
    let seed = std::env::var("OURIOS_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    eprintln!("crash: seed {seed} (OURIOS_CRASH_SEED replays it)");
    let mut rng = Rng::with_seed(seed);
    // `OURIOS_CRASH_DIR` keeps the data directory (WAL and store) for a post-mortem.
    let kept = std::env::var_os("OURIOS_CRASH_DIR").map(std::path::PathBuf::from);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = match &kept {
        Some(d) => {
            assert!(
                std::fs::read_dir(d).map_or(true, |mut e| e.next().is_none()),
                "OURIOS_CRASH_DIR {} must be empty or absent",
                d.display()
            );
            d.as_path()
        }
        None => dir.path(),
    };
    let started = Instant::now();

    let mut acked: Vec<Acked> = Vec::new();
    let mut unexpected = Vec::new();
    let mut sent = 0u64;
    let mut torn_tails = 0.0;
    let mut torn_last_round: Option<u64> = None;
    let chaos = chaos_secs().map(Duration::from_secs);
    let mut recovered_per_restart: Vec<u64> = Vec::new();
    let mut rounds = 0u64;
    let mut recovery_kills = 0u64;
    for round in 0.. {
        match chaos {
            Some(secs) if started.elapsed() >= secs => break,
            None if round >= ROUNDS => break,
            _ => {}
        }
        rounds += 1;
        let flags = round_flags(round, &mut rng);
        if round % 3 == 0 && round > 0 && torn_last_round.is_none() {
            // (Not after a round that tore the tail: the main start must be the one to heal it.)
            // A kill while the node recovers (or just after): replay, its cuts and the
            // intents it rebuilds are cut short, and the next start must pick up from there.
            let mut early = NodeProc::spawn(data, &flags);
            thread::sleep(Duration::from_millis(rng.u64(..400)));
            let listening = early.is_ready();
            let status = early.kill();
            assert!(
                status.is_some_and(|s| s.signal() == Some(9) || s.success()),
                "round {round}: the node failed while recovering ({status:?}); stderr:\n{}",
                early.log_text()
            );
            recovery_kills += 1;
            eprintln!(
                "crash: round {round:>2}: killed while {}",
                if listening { "serving" } else { "recovering" }
            );
        }
        let round_started = Instant::now();
        let mut node = NodeProc::start(data, &flags);
        let startup = round_started.elapsed();
        // Frames mined again (their records published again), not the ones skipped.
        recovered_per_restart
            .push(node.metric("ourios_recovery_frames", &[("mode", "normal")]) as u64);
        let healed = node.metric("ourios_wal_torn_tail_truncations", &[]);
        if let Some(bytes) = torn_last_round.take() {
            assert!(
                healed >= 1.0 && node.metric("ourios_wal_torn_tail_bytes", &[]) >= bytes as f64,
                "round {round}: the {bytes}-byte torn tail left by the last round was not healed"
            );
        }
        torn_tails += healed;

        let writers = if chaos.is_some() {
            TENANTS.len()
        } else {
            2 + rng.u64(..2) as usize
        };
        let (tx, rx) = mpsc::channel();
        let handles: Vec<JoinHandle<WriterReport>> = (0..writers)
            .map(|w| {
                let (tx, addr, seed) = (tx.clone(), node.addr, rng.u64(..));
                thread::spawn(move || writer(addr, round, w, TENANTS[w], seed, tx))
            })
            .collect();
        drop(tx);

        // The kill moment: a seeded delay, and at least `min_acks` acks first so most rounds
        // have something to lose.
        let delay = match chaos {
            Some(_) => 500 + rng.u64(..2_501),
            None => rng.u64(..MAX_KILL_AFTER_MS + 1),
        };
        let deadline = Instant::now() + Duration::from_millis(delay);
        let min_acks = rng.u64(..4) as usize;
        let mut round_acks = Vec::new();
        loop {
            let now = Instant::now();
            if now >= deadline && round_acks.len() >= min_acks {
                break;
            }
            let guarding = now >= deadline;
            let wait = if guarding { GUARD } else { deadline - now };
            match rx.recv_timeout(wait) {
                Ok(a) => round_acks.push(a),
                Err(RecvTimeoutError::Timeout) if !guarding => {}
                Err(RecvTimeoutError::Timeout) => panic!(
                    "round {round}: no ack for {GUARD:?}; stderr:\n{}",
                    node.log_text()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "round {round}: every writer stopped before the kill; stderr:\n{}",
                        node.log_text()
                    )
                }
            }
        }
        let status = node.kill();
        assert!(
            status.is_some_and(|s| s.signal() == Some(9)),
            "round {round}: the node was expected to die by SIGKILL, got {status:?}; stderr:\n{}",
            node.log_text()
        );
        for h in handles {
            let report = h.join().expect("writer thread");
            sent += report.sent;
            unexpected.extend(report.unexpected);
        }
        round_acks.extend(rx.try_iter());
        if round % 3 == 1 {
            torn_last_round = Some(tear_tail(data, round / 3));
        }
        if round % 4 == 1 {
            let spoiled = spoil_snapshots(data, round / 4);
            eprintln!("crash: round {round:>2}: spoiled {spoiled} snapshots");
        }
        let lines: usize = round_acks.iter().map(|a| a.lines.len()).sum();
        eprintln!(
            "crash: round {round:>2} {flags:?}: started in {startup:.1?}, {writers} writers, {} \
             acked requests ({lines} lines) before SIGKILL at {:.1?}",
            round_acks.len(),
            round_started.elapsed()
        );
        acked.extend(round_acks);
    }

    // The last start: recover, then a graceful stop whose final cut publishes.
    let mut node = NodeProc::start(data, &[]);
    let healed = node.metric("ourios_wal_torn_tail_truncations", &[]);
    assert!(
        torn_last_round.is_none() || healed >= 1.0,
        "the torn tail left by the last round was not healed"
    );
    torn_tails += healed;
    let recovered = node.metric("ourios_recovery_frames", &[]);
    let status = node.terminate();
    let log = node.log_text();
    assert!(status.success(), "SIGTERM exit {status}; stderr:\n{log}");
    assert!(log.contains("final cut published"), "stderr:\n{log}");
    assert!(
        unexpected.is_empty(),
        "statuses other than 200: {unexpected:?}"
    );

    let check = check_store(&data.join("store"), &acked);
    eprintln!(
        "crash: {} kills ({recovery_kills} of them 0-400 ms after a start) and the check in \
         {:.1?}: {sent} requests sent, {} acked; {}; {torn_tails} torn tails healed; last \
         recovery replayed {recovered} frames",
        rounds + recovery_kills,
        started.elapsed(),
        acked.len(),
        check.summary,
    );
    eprintln!("crash: frames re-mined per restart: {recovered_per_restart:?}");
    assert!(check.failures.is_empty(), "{}", check.failures.join("\n"));
}

/// What [`check_store`] found.
struct Check {
    /// One line for the log: lines, records, objects, lost, duplicated.
    summary: String,
    /// Every broken promise, empty when all hold.
    failures: Vec<String>,
}

/// The oracle, from the store alone: every acknowledged line is there exactly once (I1 and RFC
/// 0058), with the body that was sent, rebuilt from the text its template key names (I3); no
/// key names two texts and no record lost its line key.
fn check_store(store_dir: &Path, acked: &[Acked]) -> Check {
    let reading = Instant::now();
    let StoreContents {
        copies,
        unkeyed,
        conflicts,
    } = read_store(store_dir, KEY_ATTRIBUTE);
    let reading = reading.elapsed();
    // I3: every record's template version has a durable audit event (any record, acked or not).
    let unreadable: Vec<&String> = copies
        .values()
        .flatten()
        .filter_map(|b| b.as_ref().err())
        .collect();
    // I1: every acknowledged line is there, with the body that was sent.
    let (mut missing, mut wrong) = (Vec::new(), Vec::new());
    let (mut lines, mut duplicated, mut extra_copies) = (0usize, 0usize, 0usize);
    for a in acked {
        for l in &a.lines {
            lines += 1;
            match copies.get(&(a.tenant.to_owned(), l.key.clone())) {
                None => missing.push(format!("{}: {}", a.tenant, l.body)),
                Some(found) => {
                    if found.len() > 1 {
                        duplicated += 1;
                        extra_copies += found.len() - 1;
                    }
                    if let Some(other) = found.iter().flatten().find(|b| **b != l.body) {
                        wrong.push(format!("{}: sent `{}`, stored `{other}`", a.tenant, l.body));
                    }
                }
            }
        }
    }
    let stored: usize = copies.values().map(Vec::len).sum();
    let objects = count_files(store_dir);
    let summary = format!(
        "{lines} acked lines; the store holds {stored} records in {objects} objects (read in \
         {reading:.1?}); {} acked lines lost; {duplicated} acked lines duplicated \
         ({extra_copies} extra copies)",
        missing.len()
    );
    let mut failures = Vec::new();
    if lines == 0 {
        failures.push("no request was acknowledged".to_owned());
    }
    if !missing.is_empty() {
        failures.push(format!(
            "I1: {} of {lines} acknowledged lines are not in the store, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        ));
    }
    if duplicated > 0 {
        failures.push(format!(
            "exactly once (RFC 0058): {duplicated} acknowledged lines are in the store more than \
             once ({extra_copies} extra copies)"
        ));
    }
    if !unreadable.is_empty() {
        failures.push(format!(
            "I3: {} records in the store have no audit event for their template version, e.g. \
             {:?}",
            unreadable.len(),
            &unreadable[..unreadable.len().min(5)]
        ));
    }
    if !wrong.is_empty() {
        failures.push(format!(
            "{} acknowledged lines were stored with another body, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        ));
    }
    if !conflicts.is_empty() {
        failures.push(format!(
            "audit events disagree about a template version: {conflicts:?}"
        ));
    }
    if unkeyed > 0 {
        failures.push(format!(
            "{unkeyed} records lost their `{KEY_ATTRIBUTE}` attribute"
        ));
    }
    Check { summary, failures }
}

/// Rounds of the two-node test.
const TWO_NODE_ROUNDS: u64 = 8;

/// RFC0057.11 and RFC0058 with real processes: two nodes, each with its own WAL (so its own
/// identity), share one `file://` store and both write the same two tenants; each round SIGKILLs
/// them at independent random moments, and some rounds restart one under another miner
/// configuration. Their record ids differ by WAL identity, their sealed keys too, and their
/// miners give one text one key, so the store, read alone, must hold every acknowledged line of
/// either node exactly once, each rebuilt from its template text.
///
/// Mutation check (tried): make `sealed_name` keep only the first record's lsn and index (a
/// constant for the WAL identity and the digest): both nodes' first units of a tenant start at
/// lsn 1, share a key, the second create-only put finds the first's object and settles on it,
/// and 1 414 lines were missing. (Dropping only the WAL identity is not caught: the digest of
/// the ranges still tells the nodes' units apart.)
#[test]
fn crash_two_nodes_sharing_one_store_keep_every_line_once() {
    let seed = std::env::var("OURIOS_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED ^ 2);
    eprintln!("crash (two nodes): seed {seed} (OURIOS_CRASH_SEED replays it)");
    let mut rng = Rng::with_seed(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = dir.path().join("shared-store");
    let datas = [dir.path().join("node-a"), dir.path().join("node-b")];
    let started = Instant::now();
    let mut acked: Vec<Acked> = Vec::new();
    let mut unexpected = Vec::new();
    let mut kills = 0u64;
    for round in 0..TWO_NODE_ROUNDS {
        let nodes: Vec<NodeProc> = datas
            .iter()
            .enumerate()
            .map(|(n, data)| {
                let mut flags = vec!["--store".to_owned(), format!("file://{}", shared.display())];
                if (round + n as u64) % 3 == 2 {
                    flags.extend(["--similarity".to_owned(), "0.4".to_owned()]);
                }
                if round % 2 == 1 {
                    flags.extend(["--partition-target-bytes".to_owned(), "8192".to_owned()]);
                }
                NodeProc::start(data, &flags)
            })
            .collect();
        let (tx, rx) = mpsc::channel();
        let mut handles = Vec::new();
        for (n, node) in nodes.iter().enumerate() {
            for (k, &tenant) in TENANTS[..2].iter().enumerate() {
                // Both nodes write both tenants; the writer number keeps line keys unique.
                let (tx, addr, seed, w) = (tx.clone(), node.addr, rng.u64(..), n * 2 + k);
                handles.push(thread::spawn(move || {
                    writer(addr, round, w, tenant, seed, tx)
                }));
            }
        }
        drop(tx);
        let mut deadlines: Vec<(Instant, usize)> = (0..nodes.len())
            .map(|n| {
                (
                    Instant::now() + Duration::from_millis(300 + rng.u64(..1_500)),
                    n,
                )
            })
            .collect();
        deadlines.sort();
        let mut nodes: Vec<Option<NodeProc>> = nodes.into_iter().map(Some).collect();
        for (deadline, n) in deadlines {
            loop {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                match rx.recv_timeout(deadline - now) {
                    Ok(a) => acked.push(a),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            let mut node = nodes[n].take().expect("each node is killed once");
            let status = node.kill();
            assert!(
                status.is_some_and(|s| s.signal() == Some(9)),
                "round {round}: node {n} was expected to die by SIGKILL, got {status:?}; \
                 stderr:\n{}",
                node.log_text()
            );
            kills += 1;
        }
        for h in handles {
            unexpected.extend(h.join().expect("writer thread").unexpected);
        }
        acked.extend(rx.try_iter());
    }
    // Last starts: recover, then graceful stops whose final cuts publish.
    for data in &datas {
        let flags = vec!["--store".to_owned(), format!("file://{}", shared.display())];
        let mut node = NodeProc::start(data, &flags);
        let status = node.terminate();
        let log = node.log_text();
        assert!(status.success(), "SIGTERM exit {status}; stderr:\n{log}");
    }
    assert!(
        unexpected.is_empty(),
        "statuses other than 200: {unexpected:?}"
    );
    let check = check_store(&shared, &acked);
    eprintln!(
        "crash (two nodes): {kills} kills in {:.1?}: {}",
        started.elapsed(),
        check.summary
    );
    assert!(check.failures.is_empty(), "{}", check.failures.join("\n"));
}
