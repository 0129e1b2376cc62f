//! `ourios-loadgen`: the ingest benchmark's load generator (`cargo xtask bench ingest`).
//!
//! It sends OTLP batches of 1 000 records, or as many as `--batches` says, over OTLP/HTTP
//! protobuf (loopback keep-alive connections) or OTLP/gRPC (`--protocols`, one HTTP/2
//! connection per sender), from a synthetic corpus (bodies of about 120 bytes from 20 templates
//! with 3-4 numeric parameters) or a realistic one (`--corpus`, `corpus.rs`), at a fixed offered
//! rate (open loop: a request's latency counts from its scheduled send time, so a slow server
//! cannot hide queueing) or as fast as the connections allow (`max`), then at half of that.
//! `bench` runs the whole matrix: a fresh release `ourios-node` per rate and tenant count, plus
//! the same generator against `null-server` (loopback HTTP and gRPC servers that answer
//! without work: the client and protocol ceiling of this machine), and writes a markdown table.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

mod body;
mod corpus;
mod decode;
mod encode;
mod grpc;
mod mine;
mod read;
use ourios_testkit::http::{self, Conn};
use ourios_testkit::{GUARD, Served, metrics, otlp, procfs};
use prost::Message;

/// Records per request, unless `--batch` / `--batches` says otherwise.
const BATCH: usize = 1_000;
/// Distinct pre-encoded requests per tenant (cycled; encoding is not what is measured).
const POOL: usize = 16;

#[derive(Debug, Parser)]
#[command(
    name = "ourios-loadgen",
    about = "OTLP/HTTP load generator for the ingest benchmark"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the benchmark matrix against fresh nodes and the null server; write a markdown table.
    Bench(BenchArgs),
    /// One load run against a running server.
    Run(RunArgs),
    /// Send a store's worth of records to a running node (the read benchmark's store).
    Fill(read::FillArgs),
    /// Time the read path on a filled store, and DuckDB on the same files.
    Read(read::ReadArgs),
    /// Write one OTLP/HTTP protobuf request body to a file (from a corpus, or a text file's
    /// lines), for a client such as ApacheBench that repeats one body.
    Body(body::BodyArgs),
    /// The miner alone on a corpus, in process, on one core (lines/s, templates made).
    Mine(mine::MineArgs),
    /// The node's request decoding alone, in process, on one core, against prost's.
    Decode(decode::DecodeArgs),
    /// The publisher's Parquet encode alone on the corpus: the node's writer properties against
    /// Parquet's defaults in one run.
    Encode(encode::EncodeArgs),
    /// A loopback HTTP/1.1 server answering every request with an empty 200, and an OTLP/gRPC
    /// one answering every `Export` with an empty response.
    NullServer {
        /// Listen address (port 0 picks one; the address is printed on stderr).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Once listening, write `{"listen": ADDR, "pid": PID}` here (as the node does).
        #[arg(long)]
        ready_file: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// The `ourios-node` binary (a release build).
    #[arg(long)]
    node: PathBuf,
    /// Where the markdown table goes.
    #[arg(long)]
    out: PathBuf,
    /// Scratch directory for the nodes' data (on the disk being measured).
    #[arg(long)]
    scratch: PathBuf,
    /// Seconds per run.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Offered rates in lines/s; `max` sends as fast as the connections allow.
    #[arg(long, value_delimiter = ',', default_value = "25000,50000,100000,max")]
    rates: Vec<String>,
    /// Tenant counts.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    tenants: Vec<usize>,
    /// Records per request: one set of rows (and a null-server baseline) per size. Small
    /// requests are what OpenTelemetry SDKs send; their cost is per request, not per line.
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    batches: Vec<usize>,
    /// What the requests carry: one set of rows per corpus.
    #[arg(long, value_delimiter = ',', default_value = "synthetic")]
    corpus: Vec<Corpus>,
    /// How they travel: one set of rows (and a null-server baseline) per protocol.
    #[arg(long, value_delimiter = ',', default_value = "http")]
    protocols: Vec<Protocol>,
    /// Keep-alive connections (concurrent requests in flight at most).
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// After a `max` row, one more at half the saturation it measured (the latency goal's
    /// load); `--half false` skips it.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    half: bool,
    /// Node flags besides data dir and listen address.
    #[arg(
        long,
        allow_hyphen_values = true,
        default_value = "--sweep-secs 1 --partition-max-age-secs 2 --barrier-secs 2"
    )]
    node_flags: String,
}

#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// Server address.
    #[arg(long)]
    target: SocketAddr,
    /// Offered lines/s, or `max`.
    #[arg(long, default_value = "max")]
    rate: String,
    /// Seconds.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Tenants (requests rotate over `bench-0`..).
    #[arg(long, default_value_t = 1)]
    tenants: usize,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Records per request.
    #[arg(long, default_value_t = BATCH)]
    batch: usize,
    /// What the requests carry.
    #[arg(long, default_value = "synthetic")]
    corpus: Corpus,
    /// How they travel (`grpc`: `--target` is the gRPC address).
    #[arg(long, default_value = "http")]
    protocol: Protocol,
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Cmd::Bench(args) => bench(&args),
        Cmd::Run(args) => {
            let load = Load::new(args.corpus, args.tenants, args.batch);
            let r = match args.protocol {
                Protocol::Http => run_load(&load, &args)?,
                Protocol::Grpc => run_load_grpc(&load, &args)?,
            };
            println!(
                "{} lines/s achieved, ack p50 {:.1} ms p99 {:.1} ms, {} errors (first: {})",
                r.lines_per_sec(),
                r.p50_ms(),
                r.p99_ms(),
                r.errors,
                r.first_error.as_deref().unwrap_or("none")
            );
            Ok(())
        }
        Cmd::Fill(args) => read::fill(&args),
        Cmd::Read(args) => read::read(&args),
        Cmd::Body(args) => body::body(&args),
        Cmd::Mine(args) => mine::mine(&args),
        Cmd::Decode(args) => decode::decode(&args),
        Cmd::Encode(args) => encode::encode(&args),
        Cmd::NullServer { listen, ready_file } => null_server(listen, ready_file.as_deref()),
    }
}

// ---------------------------------------------------------------------------------------------
// The load: 20 templates, numeric parameters, a severity mix.

const TEMPLATES: [&str; 20] = [
    "GET /api/v1/users/{}/orders returned 200 in {} ms from upstream pool {} after {} retries on gateway edge-eu",
    "POST /api/v1/payments accepted payment {} for account {} amount {} cents in region eu-west via card processor",
    "cache miss for key session:{} on shard {} took {} us, falling back to the primary store for this session lookup",
    "worker {} finished job {} of batch {} in {} ms with status ok and no warnings reported by the job supervisor",
    "connection from 10.0.{}.{} closed by peer after {} requests and {} bytes transferred over the keep-alive socket",
    "scheduler queued task {} on node {} with priority {} and deadline in {} seconds from now for tenant workloads",
    "disk usage on volume {} reached {} percent with {} GiB free, next capacity check scheduled in {} seconds",
    "user {} failed login attempt {} from client version {} using the password flow, account lockout not triggered",
    "kafka consumer group {} is lagging {} messages on partition {} of topic orders-events after the rebalance",
    "compaction of segment {} merged {} files into {} bytes in {} ms for table metrics_rollup_hourly on shard main",
    "http client timeout calling inventory service after {} ms, attempt {} of {} for sku {} will be retried later",
    "replicated {} rows to follower {} in {} ms and the replication lag is now {} ms on shard main of the cluster",
    "gc pause of {} ms in the young generation, heap {} MiB of {} MiB in use after collection cycle {} completed",
    "order {} shipped to warehouse {} with {} items and tracking number {} assigned by the carrier integration",
    "rate limiter dropped {} requests for api key {} in the last {} seconds on gateway ingress-public-{} today",
    "TLS handshake with 192.168.{}.{} failed: certificate expired {} days ago, closing connection {} immediately",
    "search query {} returned {} hits in {} ms using index generation {} on the main cluster with cached filters",
    "feature flag {} evaluated to variant {} for {} users in segment {} of the gradual rollout plan for checkout",
    "backup of database {} completed: {} tables and {} MiB written in {} seconds to the cold storage bucket",
    "websocket session {} sent {} frames and received {} frames before the idle timeout of {} seconds expired",
];

/// Seeded, so every run sends the same requests.
type Rng = fastrand::Rng;

/// What the requests carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Corpus {
    /// 20 templates with numeric parameters, bodies of about 120 bytes, no attributes.
    Synthetic,
    /// The shape of production logs (`corpus.rs`): 240 templates with a long tail, 20 B to
    /// 6 KB, JSON, key=value, stack traces, 10-20 attributes, 3-5 resources per request.
    Realistic,
}

/// How the requests travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Protocol {
    /// OTLP/HTTP protobuf on HTTP/1.1 keep-alive connections.
    Http,
    /// OTLP/gRPC, one HTTP/2 connection per sender.
    Grpc,
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
        })
    }
}

impl std::fmt::Display for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Corpus::Synthetic => "synthetic",
            Corpus::Realistic => "realistic",
        })
    }
}

impl Corpus {
    /// One encoded request of `batch` records of this corpus for `tenant`.
    fn request(
        self,
        realistic: &corpus::Corpus,
        rng: &mut Rng,
        tenant: usize,
        batch: usize,
    ) -> Vec<u8> {
        match self {
            Corpus::Synthetic => request(rng, tenant, batch),
            Corpus::Realistic => realistic.request(rng, tenant, batch).encode_to_vec(),
        }
    }

    /// One log line of this corpus (`realistic` is the realistic corpus's templates).
    fn line(self, realistic: &corpus::Corpus, rng: &mut Rng) -> String {
        match self {
            Corpus::Synthetic => body(rng),
            Corpus::Realistic => {
                let k = realistic.draw(rng);
                realistic.line(rng, k)
            }
        }
    }
}

fn body(rng: &mut Rng) -> String {
    let template = TEMPLATES[rng.usize(..TEMPLATES.len())];
    let mut out = String::with_capacity(128);
    let mut parts = template.split("{}");
    out.push_str(parts.next().unwrap_or_default());
    for part in parts {
        let _ = write!(out, "{}", rng.u64(..100_000));
        out.push_str(part);
    }
    out
}

/// OTLP severity mix: 10 % DEBUG, 70 % INFO, 13 % WARN, 7 % ERROR.
fn severity(rng: &mut Rng) -> (i32, &'static str) {
    match rng.u64(..100) {
        0..10 => (5, "DEBUG"),
        10..80 => (9, "INFO"),
        80..93 => (13, "WARN"),
        _ => (17, "ERROR"),
    }
}

fn request(rng: &mut Rng, tenant: usize, batch: usize) -> Vec<u8> {
    let records: Vec<_> = (0..batch).map(|_| (severity(rng), body(rng))).collect();
    request_of(&format!("svc-{tenant}"), records)
}

/// One encoded request of `records` (severity, body; no attributes) under one resource named
/// `service`, stamped now a nanosecond apart.
fn request_of<S: AsRef<str>>(
    service: &str,
    records: impl IntoIterator<Item = ((i32, &'static str), S)>,
) -> Vec<u8> {
    let now = otlp::now_nanos();
    let records = records
        .into_iter()
        .zip(0u64..)
        .map(|((severity, body), i)| {
            otlp::record((now + i, now + i), severity, body.as_ref(), Vec::new())
        })
        .collect();
    let resource = vec![
        otlp::attr("service.name", service),
        otlp::attr("host.name", "bench-host"),
    ];
    otlp::request(resource, records).encode_to_vec()
}

/// Pre-encoded requests and their headers, per tenant.
#[derive(Debug)]
struct Load {
    corpus: Corpus,
    /// `bodies[tenant][k]`
    bodies: Vec<Vec<Vec<u8>>>,
    tenants: usize,
    /// Records per request.
    batch: usize,
    mean_body_bytes: f64,
}

impl Load {
    fn new(corpus: Corpus, tenants: usize, batch: usize) -> Load {
        let batch = batch.max(1);
        let tenants = tenants.max(1);
        let mut rng = Rng::with_seed(0x9e37_79b9_7f4a_7c15);
        let realistic = corpus::Corpus::new(0x5eed);
        let mut sample = 0usize;
        for _ in 0..10_000 {
            sample += corpus.line(&realistic, &mut rng).len();
        }
        let bodies = (0..tenants)
            .map(|t| {
                (0..POOL)
                    .map(|_| corpus.request(&realistic, &mut rng, t, batch))
                    .collect()
            })
            .collect();
        Load {
            corpus,
            bodies,
            tenants,
            batch,
            mean_body_bytes: sample as f64 / 10_000.0,
        }
    }

    /// Mean encoded request size.
    fn request_bytes(&self) -> usize {
        let all: Vec<usize> = self.bodies.iter().flatten().map(Vec::len).collect();
        all.iter().sum::<usize>() / all.len().max(1)
    }
}

// ---------------------------------------------------------------------------------------------
// The client: the testkit's keep-alive HTTP/1.1 connection, one request in flight each.

fn open(addr: SocketAddr) -> std::io::Result<Conn> {
    Conn::open(addr, Duration::from_secs(120))
}

fn head(addr: SocketAddr, tenant: usize, len: usize) -> Vec<u8> {
    let tenant = format!("bench-{tenant}");
    http::request_head(
        addr,
        "POST",
        "/v1/logs",
        &[
            ("Content-Type", "application/x-protobuf"),
            ("X-Scope-OrgID", &tenant),
        ],
        len,
        false,
    )
}

#[derive(Debug, Default)]
struct RunResult {
    acked_lines: u64,
    errors: u64,
    elapsed: Duration,
    /// Ack latencies, sorted.
    latencies: Vec<Duration>,
    /// What the first failed request saw.
    first_error: Option<String>,
}

impl RunResult {
    fn lines_per_sec(&self) -> u64 {
        (self.acked_lines as f64 / self.elapsed.as_secs_f64().max(1e-9)) as u64
    }

    fn quantile_ms(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank =
            ((self.latencies.len() as f64 * q).ceil() as usize).clamp(1, self.latencies.len());
        self.latencies[rank - 1].as_secs_f64() * 1e3
    }

    fn p50_ms(&self) -> f64 {
        self.quantile_ms(0.50)
    }

    fn p99_ms(&self) -> f64 {
        self.quantile_ms(0.99)
    }
}

fn parse_rate(rate: &str) -> Result<Option<u64>> {
    if rate == "max" {
        return Ok(None);
    }
    let r: u64 = rate
        .parse()
        .with_context(|| format!("rate `{rate}` is neither a number of lines/s nor `max`"))?;
    if r == 0 {
        bail!("rate must be positive");
    }
    Ok(Some(r))
}

/// A run over OTLP/gRPC: the same schedule as `run_load`, on `connections` HTTP/2 connections
/// driven by a two-worker tokio runtime.
fn run_load_grpc(load: &Load, args: &RunArgs) -> Result<RunResult> {
    let rate = parse_rate(&args.rate)?;
    let interval = rate.map(|r| Duration::from_secs_f64(load.batch as f64 / r as f64));
    let window = Duration::from_secs(args.secs);
    let bodies: std::sync::Arc<Vec<Vec<bytes::Bytes>>> = std::sync::Arc::new(
        load.bodies
            .iter()
            .map(|b| b.iter().map(|b| bytes::Bytes::from(b.clone())).collect())
            .collect(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (tenants, batch) = (load.tenants, load.batch as u64);
    runtime.block_on(async move {
        let mut senders = Vec::new();
        for _ in 0..args.connections.max(1) {
            senders.push(
                grpc::Sender::connect(args.target)
                    .await
                    .with_context(|| format!("connecting {} over gRPC", args.target))?,
            );
        }
        let next = std::sync::Arc::new(AtomicU64::new(0));
        let names: std::sync::Arc<Vec<String>> =
            std::sync::Arc::new((0..tenants).map(|t| format!("bench-{t}")).collect());
        let start = Instant::now();
        let tasks: Vec<_> = senders
            .into_iter()
            .map(|mut sender| {
                let (next, bodies, names) = (next.clone(), bodies.clone(), names.clone());
                tokio::spawn(async move {
                    let mut out = grpc::Sent::default();
                    loop {
                        // Relaxed: a ticket counter; nothing else is published through it.
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let scheduled = match interval {
                            Some(d) => start + d.mul_f64(i as f64),
                            None => Instant::now(),
                        };
                        if scheduled.duration_since(start) >= window || start.elapsed() >= window {
                            break;
                        }
                        tokio::time::sleep_until(scheduled.into()).await;
                        let tenant = (i as usize) % tenants;
                        let k = (i as usize / tenants) % POOL;
                        match sender
                            .export(&names[tenant], bodies[tenant][k].clone())
                            .await
                        {
                            Ok(()) => {
                                out.requests += 1;
                                out.latencies.push(scheduled.elapsed());
                            }
                            Err(e) => {
                                out.errors += 1;
                                out.first_error.get_or_insert(e);
                            }
                        }
                    }
                    out
                })
            })
            .collect();
        let mut result = RunResult::default();
        for task in tasks {
            let sent = task.await.context("a gRPC sender panicked")?;
            result.acked_lines += sent.requests * batch;
            result.errors += sent.errors;
            result.latencies.extend(sent.latencies);
            result.first_error = result.first_error.take().or(sent.first_error);
        }
        result.elapsed = start.elapsed();
        result.latencies.sort_unstable();
        Ok(result)
    })
}

/// One run: `connections` threads share a schedule of request start times (open loop) or send
/// back to back (`max`); no request starts after `secs`, and the run ends with the last answer.
fn run_load(load: &Load, args: &RunArgs) -> Result<RunResult> {
    let rate = parse_rate(&args.rate)?;
    // Seconds between scheduled request starts (each request carries `load.batch` lines).
    let interval = rate.map(|r| Duration::from_secs_f64(load.batch as f64 / r as f64));
    let window = Duration::from_secs(args.secs);
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let mut conns = Vec::with_capacity(args.connections);
    for _ in 0..args.connections.max(1) {
        conns.push(open(args.target).with_context(|| format!("connecting {}", args.target))?);
    }
    // One head per body: each carries its own Content-Length.
    let heads: Vec<Vec<Vec<u8>>> = load
        .bodies
        .iter()
        .enumerate()
        .map(|(t, bodies)| {
            bodies
                .iter()
                .map(|b| head(args.target, t, b.len()))
                .collect()
        })
        .collect();
    let start = Instant::now();
    let results: Vec<(u64, u64, Vec<Duration>, Option<String>)> = thread::scope(|s| {
        let handles: Vec<_> = conns
            .into_iter()
            .map(|mut conn| {
                let (next, stop, heads) = (&next, &stop, &heads);
                s.spawn(move || {
                    let (mut lines, mut errors, mut lat) = (0u64, 0u64, Vec::new());
                    let mut first_error = None;
                    loop {
                        // Relaxed: a ticket counter; nothing else is published through it.
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let scheduled = match interval {
                            Some(d) => start + d.mul_f64(i as f64),
                            None => Instant::now(),
                        };
                        if scheduled.duration_since(start) >= window
                            || Instant::now().duration_since(start) >= window
                            || stop.load(Ordering::Relaxed)
                        {
                            break;
                        }
                        if let Some(wait) = scheduled.checked_duration_since(Instant::now()) {
                            thread::sleep(wait);
                        }
                        let tenant = (i as usize) % load.tenants;
                        let k = (i as usize / load.tenants) % POOL;
                        match conn
                            .send(&heads[tenant][k], &load.bodies[tenant][k])
                            .map(|r| r.status)
                        {
                            Ok(200) => {
                                lines += load.batch as u64;
                                lat.push(scheduled.elapsed());
                            }
                            Ok(status) => {
                                errors += 1;
                                first_error.get_or_insert_with(|| format!("status {status}"));
                            }
                            Err(e) => {
                                errors += 1;
                                first_error.get_or_insert_with(|| e.to_string());
                                match open(args.target) {
                                    Ok(c) => conn = c,
                                    Err(_) => {
                                        // Relaxed: a best-effort stop hint between workers.
                                        stop.store(true, Ordering::Relaxed);
                                        break;
                                    }
                                }
                            }
                        }
                    }
                    (lines, errors, lat, first_error)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("load thread"))
            .collect()
    });
    // The run ends when the last request started inside the window has its answer.
    let mut out = RunResult {
        elapsed: start.elapsed(),
        ..RunResult::default()
    };
    for (lines, errors, lat, first_error) in results {
        out.first_error = out.first_error.or(first_error);
        out.acked_lines += lines;
        out.errors += errors;
        out.latencies.extend(lat);
    }
    out.latencies.sort_unstable();
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The null server: what HTTP on loopback costs with no work behind it, on the node's own HTTP
// stack (axum on a two-worker tokio runtime, bodies read whole and unlimited) so the baseline
// carries the same per-request cost the node does.

fn null_server(listen: SocketAddr, ready_file: Option<&Path>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let addr = listener.local_addr()?;
        // OTLP/gRPC beside it on a port of its own, as the node serves it.
        let grpc_listener = tokio::net::TcpListener::bind((listen.ip(), 0)).await?;
        let grpc_addr = grpc_listener.local_addr()?;
        tokio::spawn(grpc::serve(grpc_listener, grpc::null_routes()));
        eprintln!("null-server: serving on http://{addr}, OTLP/gRPC on {grpc_addr}");
        if let Some(path) = ready_file {
            // The node's ready-file shape, written aside and renamed like the node's.
            let aside = path.with_extension("partial");
            std::fs::write(
                &aside,
                format!(
                    r#"{{"listen":"{addr}","grpc":"{grpc_addr}","pid":{}}}"#,
                    std::process::id()
                ),
            )?;
            std::fs::rename(&aside, path)?;
        }
        let app = axum::Router::new()
            .fallback(|body: axum::body::Bytes| async move {
                std::hint::black_box(body.len());
                (
                    [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                    "",
                )
            })
            .layer(axum::extract::DefaultBodyLimit::disable());
        axum::serve(listener, app).await?;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Child servers: the testkit's, stopped with SIGTERM and measured through /proc.

/// SIGTERM (the node's graceful shutdown runs its final cut), wait, and return the CPU ticks
/// the whole process used (from this process's reaped-children accounting).
fn stop(mut server: Served) -> Result<u64> {
    let before = procfs::children_cpu_ticks().map_err(anyhow::Error::msg)?;
    let status = server.terminate(GUARD).map_err(anyhow::Error::msg)?;
    let after = procfs::children_cpu_ticks().map_err(anyhow::Error::msg)?;
    if !status.success() && status.code().is_some() {
        bail!("server exited with {status}:\n{}", server.log_text());
    }
    Ok(after - before)
}

// ---------------------------------------------------------------------------------------------
// The matrix.

#[derive(Debug)]
struct Row {
    target: &'static str,
    protocol: Protocol,
    corpus: Corpus,
    tenants: usize,
    /// Records per request.
    batch: usize,
    /// Mean encoded request size.
    request_bytes: usize,
    rate: String,
    result: RunResult,
    window_cpu_us_per_line: f64,
    total_cpu_us_per_line: f64,
    peak_rss_mib: f64,
    /// Records the node had published when the load ended, per acked line (`None`: the
    /// server exports no such metric).
    published_at_end: Option<f64>,
    /// Offered at half of the `max` row's saturation.
    half_of_saturation: bool,
}

impl Row {
    fn requests_per_sec(&self) -> u64 {
        self.result.lines_per_sec() / self.batch.max(1) as u64
    }

    /// The row of the results table.
    fn markdown(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.1} | {:.2} | {:.0} | {} | {} |",
            if self.target == "null" {
                "null (baseline)"
            } else {
                "ourios-node"
            },
            self.protocol,
            self.corpus,
            self.batch,
            self.tenants,
            if self.half_of_saturation {
                format!("{} (half of max)", self.rate)
            } else {
                self.rate.clone()
            },
            self.result.lines_per_sec(),
            self.requests_per_sec(),
            self.result.p50_ms(),
            self.result.p99_ms(),
            self.window_cpu_us_per_line,
            self.window_cpu_us_per_line * self.batch as f64,
            self.total_cpu_us_per_line,
            self.peak_rss_mib,
            self.published_at_end
                .map_or_else(|| "-".to_owned(), |p| format!("{:.0} %", 100.0 * p)),
            self.result.errors
        )
    }
}

fn measure(
    server: Served,
    target: &'static str,
    protocol: Protocol,
    load: &Load,
    rate: &str,
    args: &BenchArgs,
    tick_us: f64,
) -> Result<Row> {
    let pid = server.pid().context("the server is not running")?;
    let target_addr = match protocol {
        Protocol::Http => server.addr(),
        Protocol::Grpc => ourios_testkit::Ready::read(server.ready_file())
            .context("no ready file")?
            .map_err(anyhow::Error::msg)?
            .grpc
            .context("the server serves no OTLP/gRPC")?,
    };
    let run = RunArgs {
        target: target_addr,
        rate: rate.to_owned(),
        secs: args.secs,
        tenants: load.tenants,
        connections: args.connections,
        batch: load.batch,
        corpus: load.corpus,
        protocol,
    };
    let before = procfs::cpu_ticks(pid).map_err(anyhow::Error::msg)?;
    let result = match protocol {
        Protocol::Http => run_load(load, &run)?,
        Protocol::Grpc => run_load_grpc(load, &run)?,
    };
    let window = procfs::cpu_ticks(pid).map_err(anyhow::Error::msg)? - before;
    let (peak, _) = procfs::rss_kib(pid).context("no VmHWM in /proc/<pid>/status")?;
    let published = metrics::scrape(server.addr(), "ourios_sink_records_published", &[]);
    let total = stop(server)?;
    let lines = result.acked_lines.max(1) as f64;
    Ok(Row {
        target,
        protocol,
        corpus: load.corpus,
        tenants: load.tenants,
        batch: load.batch,
        request_bytes: load.request_bytes(),
        rate: rate.to_owned(),
        window_cpu_us_per_line: window as f64 * tick_us / lines,
        total_cpu_us_per_line: total as f64 * tick_us / lines,
        peak_rss_mib: peak as f64 / 1024.0,
        published_at_end: published.map(|p| p / lines),
        half_of_saturation: false,
        result,
    })
}

fn bench(args: &BenchArgs) -> Result<()> {
    let tick_us = 1e6 / procfs::clock_ticks_per_sec();
    let me = std::env::current_exe()?;
    let node_flags: Vec<&str> = args.node_flags.split_whitespace().collect();
    let mut rows = Vec::new();
    // Bodies are drawn the same way whatever the batch: one mean per corpus.
    let mean_body: Vec<(Corpus, f64)> = args
        .corpus
        .iter()
        .map(|&c| (c, Load::new(c, 1, 1).mean_body_bytes))
        .collect();
    // Progress: each row as the table will show it, as soon as it is measured.
    let print = |row: &Row| eprintln!("{}", row.markdown());

    for &protocol in &args.protocols {
        for &corpus in &args.corpus {
            for &batch in &args.batches {
                // Baseline first: the same generator against a server that does no work.
                let load = Load::new(corpus, 1, batch);
                for rate in ["50000", "max"] {
                    let mut cmd = Command::new(&me);
                    cmd.args(["null-server", "--listen", "127.0.0.1:0"]);
                    let server = Served::start(cmd, None).map_err(anyhow::Error::msg)?;
                    let row = measure(server, "null", protocol, &load, rate, args, tick_us)?;
                    print(&row);
                    rows.push(row);
                }

                for &tenants in &args.tenants {
                    let load = Load::new(corpus, tenants, batch);
                    let mut rates: Vec<String> = args.rates.clone();
                    let mut i = 0;
                    while i < rates.len() {
                        let rate = rates[i].clone();
                        i += 1;
                        parse_rate(&rate)?;
                        let data = args.scratch.join(format!(
                            "ingest-{protocol}-{corpus}-{batch}b-{tenants}t-{rate}"
                        ));
                        let _ = std::fs::remove_dir_all(&data);
                        std::fs::create_dir_all(&data)?;
                        settle_disk(&args.scratch)?;
                        let mut cmd = Command::new(&args.node);
                        cmd.arg("serve")
                            .arg("--data-dir")
                            .arg(&data)
                            .args(["--listen", "127.0.0.1:0"])
                            .args(&node_flags);
                        let server = Served::start(cmd, None).map_err(anyhow::Error::msg)?;
                        let mut row =
                            measure(server, "node", protocol, &load, &rate, args, tick_us)?;
                        let _ = std::fs::remove_dir_all(&data);
                        if rate == "max" && args.half && row.result.acked_lines > 0 {
                            // The latency goal is stated at half of the saturation just measured.
                            rates.push((row.result.lines_per_sec() / 2).max(1).to_string());
                        }
                        row.half_of_saturation = i > args.rates.len();
                        print(&row);
                        rows.push(row);
                    }
                }
            }
        }
    }

    let md = render(args, &rows, &mean_body);
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, &md).with_context(|| format!("writing {}", args.out.display()))?;
    println!("{md}");
    println!("written to {}", args.out.display());
    Ok(())
}

/// Flushes the file system under `dir` (`syncfs`) and waits for it: the file system keeps
/// writing back and freeing the previous row's files after they are removed, and a row started
/// meanwhile had its WAL syncs held for 30-50 ms at a time (on ext4, half-load rows after a
/// `max` row), a stall that is the bench's, not the node's.
#[cfg(target_os = "linux")]
fn settle_disk(dir: &Path) -> Result<()> {
    let file = std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    rustix::fs::syncfs(&file)
        .with_context(|| format!("syncing the file system of {}", dir.display()))
}

/// Elsewhere the rows start as they come.
#[cfg(not(target_os = "linux"))]
fn settle_disk(_dir: &Path) -> Result<()> {
    Ok(())
}

fn fmt_rate(lines_per_sec: u64) -> String {
    let r = lines_per_sec as f64;
    if r >= 1e6 {
        format!("{:.1} M", r / 1e6)
    } else {
        format!("{:.1} K", r / 1e3)
    }
}

fn render(args: &BenchArgs, rows: &[Row], mean_body: &[(Corpus, f64)]) -> String {
    let cores = thread::available_parallelism().map_or(0, |n| n.get());
    let mut md = String::new();
    let _ = writeln!(md, "# Ingest benchmark (`cargo xtask bench ingest`)\n");
    let _ = writeln!(
        md,
        "{cores} cores. Release `ourios-node serve` with `{}` (audit sink on, encode workers 1, \
         WAL and `file://` store on the local disk), a fresh data directory per row. Load: \
         `ourios-loadgen`, a separate process on loopback: OTLP/HTTP protobuf on HTTP/1.1 \
         keep-alive connections, or OTLP/gRPC on one HTTP/2 connection per sender (rows say \
         which), {} records per request (sizes in the summaries below). Corpus `synthetic`: bodies from 20 templates \
         with 3-4 numeric params, no attributes, one resource; `realistic`: the shape of \
         production logs (240 templates with a long tail, 20 B to 6 KB lines: access logs, \
         key=value, JSON, daemon lines, short lines, stack traces; IPs, UUIDs, paths, quoted \
         strings; 10-20 attributes, trace ids, 3-5 resources per request). Mean body: {}. \
         Both: 10 % DEBUG, 70 % INFO, 13 % WARN, 7 % ERROR; \
         {} connections, {} s per row, open loop at the offered rate (latency counts \
         from the scheduled send time) or back to back (`max`). CPU is the server's \
         utime+stime from `/proc` during the load window, and over its whole life including \
         the final cut at SIGTERM; peak RSS is `VmHWM` at the end of the load; \
         \"published at end of load\" is `ourios.sink.records_published` then, per acked line \
         (the rest is published by the sweep and cuts that follow, or the final cut). Where \
         the time goes, with `perf`: `xtask/loadgen/PROFILE.md`.\n",
        args.node_flags,
        args.batches
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" or "),
        mean_body
            .iter()
            .map(|(c, b)| format!("{c} {b:.0} bytes"))
            .collect::<Vec<_>>()
            .join(", "),
        args.connections,
        args.secs
    );
    let _ = writeln!(
        md,
        "| server | protocol | corpus | lines/request | tenants | offered lines/s | achieved lines/s | requests/s | ack p50 ms | ack p99 ms | CPU-µs/line (load) | CPU-µs/request (load) | CPU-µs/line (incl. final cut) | peak RSS MiB | published at end of load | errors |"
    );
    let _ = writeln!(
        md,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(md, "{}", r.markdown());
    }
    for &protocol in &args.protocols {
        for &corpus in &args.corpus {
            for &batch in &args.batches {
                summarise(&mut md, args, rows, protocol, corpus, batch);
            }
        }
    }
    let _ = writeln!(
        md,
        "\nUpstream reference (DESIGN.md §11; in-process pipeline with no HTTP, no protobuf \
         decode, audit sink and sweep off; same machine kind): saturation about 86 K lines/s; \
         at 50 K lines/s offered ack p99 124 ms (1 tenant) and 564 ms (8 tenants); 14-18 \
         CPU-µs per line; peak RSS 7-15 GiB single-tenant. Goals for this node (issue 8), end \
         to end with everything on: saturation >= 130 K lines/s; ack p99 <= 50 ms at 50 K \
         lines/s with 8 tenants; <= 8 CPU-µs per line; peak RSS <= 1 GiB."
    );
    md
}

/// The summary of one request size: its baseline, and per tenant count the saturation and the
/// goals' ratios.
fn summarise(
    md: &mut String,
    args: &BenchArgs,
    rows: &[Row],
    protocol: Protocol,
    corpus: Corpus,
    batch: usize,
) {
    let null = |rate: &str| {
        rows.iter().find(|r| {
            r.target == "null"
                && r.protocol == protocol
                && r.corpus == corpus
                && r.batch == batch
                && r.rate == rate
        })
    };
    let ceiling = null("max").map_or(0, |r| r.result.lines_per_sec());
    let null_p99 = null("50000").map_or(f64::NAN, |r| r.result.p99_ms());
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "OTLP/{protocol}, {corpus} corpus, {batch} lines per request ({} bytes on average). In-run baseline (same generator, null server): client/protocol \
         ceiling {} lines/s ({} requests/s), ack p99 {null_p99:.1} ms at 50 K lines/s offered.",
        null("max").map_or(0, |r| r.request_bytes),
        fmt_rate(ceiling),
        ceiling / batch.max(1) as u64
    );
    for &tenants in &args.tenants {
        let node_rows = || {
            rows.iter().filter(move |r| {
                r.target == "node"
                    && r.protocol == protocol
                    && r.corpus == corpus
                    && r.tenants == tenants
                    && r.batch == batch
            })
        };
        let sat = node_rows()
            .map(|r| r.result.lines_per_sec())
            .max()
            .unwrap_or(0);
        let _ = write!(
            md,
            "- {tenants} tenant(s): saturation {} lines/s = {:.2} % of the client/protocol ceiling",
            fmt_rate(sat),
            100.0 * sat as f64 / ceiling.max(1) as f64,
        );
        if batch == BATCH && corpus == Corpus::Synthetic {
            let _ = write!(
                md,
                " and {:.2}x upstream's 86 K (goal >= 130 K = 1.51x)",
                sat as f64 / 86_000.0
            );
        }
        let _ = writeln!(md, ".");
        if let Some(r) = node_rows().find(|r| r.rate == "max") {
            let per_request = r.window_cpu_us_per_line * batch as f64;
            let _ = write!(
                md,
                "  At `max`: {} requests/s ({:.2} % of the null server's), {:.2} CPU-µs per \
                 line, {per_request:.1} per request, ack p99 {:.1} ms, peak RSS {:.0} MiB = \
                 {:.2}x the goal of < 512.",
                r.requests_per_sec(),
                100.0 * r.result.lines_per_sec() as f64 / ceiling.max(1) as f64,
                r.window_cpu_us_per_line,
                r.result.p99_ms(),
                r.peak_rss_mib,
                r.peak_rss_mib / 512.0
            );
            // Issue 16's goals, each as a ratio (>= 1 meets a floor, <= 1 a ceiling).
            match (corpus, batch) {
                (Corpus::Synthetic, b) if b < 100 => {
                    let _ = write!(
                        md,
                        " Goals for small requests: {:.2}x the 20 000 requests/s floor; \
                         {:.2}x the 40 CPU-µs/request ceiling.",
                        r.requests_per_sec() as f64 / 20_000.0,
                        per_request / 40.0
                    );
                }
                (Corpus::Synthetic, b) if b >= BATCH => {
                    let _ = write!(
                        md,
                        " Goals: {:.2}x the 500 K lines/s floor; {:.2}x the 3 CPU-µs/line \
                         ceiling.",
                        sat as f64 / 500_000.0,
                        r.window_cpu_us_per_line / 3.0
                    );
                }
                (Corpus::Realistic, _) => {
                    let _ = write!(
                        md,
                        " Goals: {:.2}x the 300 K lines/s floor; {:.2}x the 4 CPU-µs/line \
                         ceiling.",
                        sat as f64 / 300_000.0,
                        r.window_cpu_us_per_line / 4.0
                    );
                }
                _ => {}
            }
            let _ = writeln!(md);
        }
        if let Some(r) = node_rows().find(|r| r.half_of_saturation) {
            let _ = writeln!(
                md,
                "  At half of saturation ({} lines/s offered): ack p99 {:.1} ms = {:.2}x the \
                 goal of <= 10 ms; p50 {:.1} ms.",
                r.rate,
                r.result.p99_ms(),
                r.result.p99_ms() / 10.0,
                r.result.p50_ms()
            );
        }
        if batch == BATCH
            && corpus == Corpus::Synthetic
            && let Some(r) = node_rows().find(|r| r.rate == "50000")
        {
            let upstream = if tenants == 1 { 124.0 } else { 564.0 };
            let _ = writeln!(
                md,
                "  At 50 K offered: ack p99 {:.1} ms = {:.1}x the null server's and {:.2}x \
                 upstream's {upstream:.0} ms (goal <= 50 ms at 8 tenants); {:.2} CPU-µs/line \
                 with the final cut = {:.2}x upstream's 14 (goal <= 8); peak RSS {:.0} MiB \
                 (upstream 7-15 GiB single-tenant; goal <= 1 GiB).",
                r.result.p99_ms(),
                r.result.p99_ms() / null_p99,
                r.result.p99_ms() / upstream,
                r.total_cpu_us_per_line,
                r.total_cpu_us_per_line / 14.0,
                r.peak_rss_mib
            );
        }
    }
}
