//! The realistic corpus (`--corpus realistic`): log lines with the shape of production logs,
//! generated from a seed so every run sends the same requests.
//!
//! - 240 templates in six families with a long tail (template `k` of `n` is drawn with weight
//!   about `1/(k+1)`): access-log lines, `key=value` lines, JSON objects, daemon messages,
//!   short lines (about 20-40 bytes) and multi-line stack traces (1-6 KB);
//! - parameters of the kinds real lines carry: IPv4 addresses, UUIDs, paths, quoted strings,
//!   hex ids, durations, counts, timestamps;
//! - 10-20 attributes per record (HTTP, code, thread, k8s), trace and span ids;
//! - 3-5 resources per request (services of one tenant on several hosts and pods).

use std::fmt::Write as _;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use ourios_testkit::otlp;

type Rng = fastrand::Rng;

/// Templates in the corpus.
pub(crate) const TEMPLATES: usize = 240;

const WORDS: [&str; 64] = [
    "request",
    "session",
    "upstream",
    "cache",
    "replica",
    "shard",
    "lease",
    "token",
    "quota",
    "tenant",
    "ledger",
    "invoice",
    "payment",
    "order",
    "cart",
    "inventory",
    "shipment",
    "account",
    "profile",
    "search",
    "index",
    "segment",
    "snapshot",
    "checkpoint",
    "compaction",
    "manifest",
    "bucket",
    "object",
    "partition",
    "offset",
    "consumer",
    "producer",
    "broker",
    "topic",
    "scheduler",
    "worker",
    "job",
    "task",
    "queue",
    "deadline",
    "timeout",
    "retry",
    "backoff",
    "circuit",
    "breaker",
    "gateway",
    "ingress",
    "listener",
    "handshake",
    "certificate",
    "cipher",
    "resolver",
    "lookup",
    "connection",
    "pool",
    "socket",
    "stream",
    "frame",
    "window",
    "buffer",
    "flush",
    "commit",
    "rollback",
    "migration",
];

const VERBS: [&str; 24] = [
    "started",
    "finished",
    "failed",
    "retried",
    "skipped",
    "expired",
    "evicted",
    "rejected",
    "accepted",
    "opened",
    "closed",
    "reset",
    "renewed",
    "dropped",
    "queued",
    "flushed",
    "committed",
    "aborted",
    "throttled",
    "resumed",
    "paused",
    "degraded",
    "recovered",
    "scheduled",
];

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "DELETE", "PATCH"];
const STATUS: [u16; 8] = [200, 200, 200, 201, 204, 304, 404, 503];
const AGENTS: [&str; 4] = [
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
    "curl/8.5.0",
    "okhttp/4.12.0",
    "Go-http-client/2.0",
];
const EXCEPTIONS: [&str; 6] = [
    "java.lang.NullPointerException",
    "java.util.concurrent.TimeoutException",
    "java.io.IOException: Connection reset by peer",
    "java.lang.IllegalStateException: lease expired",
    "org.postgresql.util.PSQLException: ERROR: deadlock detected",
    "java.lang.OutOfMemoryError: Java heap space",
];

/// A parameter slot.
#[derive(Debug, Clone, Copy)]
enum Param {
    Int,
    Ip,
    Uuid,
    Path,
    Quoted,
    Hex,
    Millis,
    Time,
}

const PARAMS: [Param; 8] = [
    Param::Int,
    Param::Ip,
    Param::Uuid,
    Param::Path,
    Param::Quoted,
    Param::Hex,
    Param::Millis,
    Param::Time,
];

#[derive(Debug, Clone)]
enum Shape {
    /// `IP - - [time] "METHOD /a/b/{id} HTTP/1.1" status bytes "-" "agent"`.
    Access { route: String },
    /// `level=.. msg="words verb" k=v ...`.
    KeyValue {
        msg: String,
        keys: Vec<(String, Param)>,
    },
    /// `{"level":..,"msg":..,"k":v,...}`.
    Json {
        msg: String,
        keys: Vec<(String, Param)>,
    },
    /// `component: words {p} verb {p} ...`.
    Daemon {
        parts: Vec<String>,
        params: Vec<Param>,
    },
    /// A short line: `words verb` and at most one number.
    Short { text: String, number: bool },
    /// A message line and a stack trace of `frames` frames in `package`.
    Trace {
        msg: String,
        package: String,
        frames: usize,
    },
}

/// The corpus's templates, built from the seed.
#[derive(Debug)]
pub(crate) struct Corpus {
    shapes: Vec<Shape>,
    /// Cumulative weights, for the long-tail draw.
    cumulative: Vec<f64>,
}

fn words(rng: &mut Rng, n: impl std::ops::RangeBounds<usize>) -> String {
    let n = rng.usize(n);
    (0..n)
        .map(|_| WORDS[rng.usize(..WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

fn keys(rng: &mut Rng, n: std::ops::Range<usize>) -> Vec<(String, Param)> {
    let n = rng.usize(n);
    (0..n)
        .map(|i| {
            let word = WORDS[rng.usize(..WORDS.len())];
            let param = PARAMS[rng.usize(..PARAMS.len())];
            (format!("{word}_{i}"), param)
        })
        .collect()
}

impl Corpus {
    /// The corpus of `TEMPLATES` templates drawn from `seed`.
    pub(crate) fn new(seed: u64) -> Corpus {
        let mut rng = Rng::with_seed(seed);
        let shapes: Vec<Shape> = (0..TEMPLATES)
            .map(|k| match k % 12 {
                0..=2 => Shape::Access {
                    route: format!(
                        "/api/v{}/{}/{}",
                        rng.u8(1..4),
                        WORDS[rng.usize(..WORDS.len())],
                        WORDS[rng.usize(..WORDS.len())]
                    ),
                },
                3..=5 => Shape::KeyValue {
                    msg: format!(
                        "{} {}",
                        words(&mut rng, 2..=2),
                        VERBS[rng.usize(..VERBS.len())]
                    ),
                    keys: keys(&mut rng, 3..9),
                },
                6 | 7 => Shape::Json {
                    msg: format!(
                        "{} {}",
                        words(&mut rng, 3..=3),
                        VERBS[rng.usize(..VERBS.len())]
                    ),
                    keys: keys(&mut rng, 4..12),
                },
                8 | 9 => {
                    let n = rng.usize(2..6);
                    Shape::Daemon {
                        parts: (0..=n).map(|_| words(&mut rng, 1..4)).collect(),
                        params: (0..n).map(|_| PARAMS[rng.usize(..PARAMS.len())]).collect(),
                    }
                }
                10 => Shape::Short {
                    text: format!(
                        "{} {}",
                        WORDS[rng.usize(..WORDS.len())],
                        VERBS[k % VERBS.len()]
                    ),
                    number: rng.bool(),
                },
                _ => Shape::Trace {
                    msg: format!(
                        "{} {}",
                        words(&mut rng, 3..=3),
                        VERBS[rng.usize(..VERBS.len())]
                    ),
                    package: format!(
                        "com.example.{}.{}",
                        WORDS[rng.usize(..WORDS.len())],
                        WORDS[rng.usize(..WORDS.len())]
                    ),
                    frames: rng.usize(12..70),
                },
            })
            .collect();
        // Shuffle so the heavy head mixes families, then weight 1/(k+1): a long tail.
        let mut shapes = shapes;
        rng.shuffle(&mut shapes);
        let mut total = 0.0;
        let cumulative = (0..shapes.len())
            .map(|k| {
                total += 1.0 / (k as f64 + 1.0);
                total
            })
            .collect();
        Corpus { shapes, cumulative }
    }

    /// A template index from the long tail.
    pub(crate) fn draw(&self, rng: &mut Rng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let x = rng.f64() * total;
        self.cumulative
            .partition_point(|&c| c < x)
            .min(self.shapes.len() - 1)
    }

    /// One line from template `k`.
    pub(crate) fn line(&self, rng: &mut Rng, k: usize) -> String {
        let mut out = String::with_capacity(256);
        match &self.shapes[k] {
            Shape::Access { route } => {
                let _ = write!(
                    out,
                    "{} - - [{}] \"{} {route}/{} HTTP/1.1\" {} {} \"-\" \"{}\"",
                    value(rng, Param::Ip),
                    value(rng, Param::Time),
                    METHODS[rng.usize(..METHODS.len())],
                    rng.u32(1..1_000_000),
                    STATUS[rng.usize(..STATUS.len())],
                    rng.u32(0..200_000),
                    AGENTS[rng.usize(..AGENTS.len())]
                );
            }
            Shape::KeyValue { msg, keys } => {
                let level = ["debug", "info", "info", "warn", "error"][rng.usize(..5)];
                let _ = write!(
                    out,
                    "ts={} level={level} msg=\"{msg}\"",
                    value(rng, Param::Time)
                );
                for (key, param) in keys {
                    let _ = write!(out, " {key}={}", value(rng, *param));
                }
            }
            Shape::Json { msg, keys } => {
                let level = ["debug", "info", "info", "warn", "error"][rng.usize(..5)];
                let _ = write!(
                    out,
                    "{{\"ts\":\"{}\",\"level\":\"{level}\",\"msg\":\"{msg}\"",
                    value(rng, Param::Time)
                );
                for (key, param) in keys {
                    match param {
                        Param::Int | Param::Millis => {
                            let _ = write!(out, ",\"{key}\":{}", rng.u32(0..100_000));
                        }
                        Param::Quoted => {
                            let _ = write!(out, ",\"{key}\":\"{}\"", words(rng, 3..=3));
                        }
                        p => {
                            let _ = write!(out, ",\"{key}\":\"{}\"", value(rng, *p));
                        }
                    }
                }
                out.push('}');
            }
            Shape::Daemon { parts, params } => {
                for (i, part) in parts.iter().enumerate() {
                    out.push_str(part);
                    if let Some(p) = params.get(i) {
                        let _ = write!(out, " {} ", value(rng, *p));
                    }
                }
            }
            Shape::Short { text, number } => {
                out.push_str(text);
                if *number {
                    let _ = write!(out, " {}", rng.u16(..10_000));
                }
            }
            Shape::Trace {
                msg,
                package,
                frames,
            } => {
                let _ = write!(
                    out,
                    "{msg} for {}\n{}",
                    value(rng, Param::Uuid),
                    EXCEPTIONS[rng.usize(..EXCEPTIONS.len())]
                );
                for f in 0..*frames {
                    let word = WORDS[(f * 7 + k) % WORDS.len()];
                    let _ = write!(
                        out,
                        "\n\tat {package}.{}{}.{word}(Unknown{}.java:{})",
                        word[..1].to_uppercase(),
                        &word[1..],
                        f % 5,
                        rng.u16(20..900)
                    );
                }
            }
        }
        out
    }

    /// One request of `batch` records for `tenant`, over 3-5 resources.
    pub(crate) fn request(
        &self,
        rng: &mut Rng,
        tenant: usize,
        batch: usize,
    ) -> ExportLogsServiceRequest {
        let now = otlp::now_nanos();
        let resources = rng.usize(3..=5).min(batch.max(1));
        let mut resource_logs: Vec<ResourceLogs> = (0..resources)
            .map(|r| ResourceLogs {
                resource: Some(Resource {
                    attributes: vec![
                        otlp::attr("service.name", &format!("svc-{tenant}-{r}")),
                        otlp::attr("service.version", &format!("1.{}.{}", r, rng.u8(..20))),
                        otlp::attr("host.name", &format!("ip-10-0-{}-{}", r, rng.u8(..255))),
                        otlp::attr("k8s.namespace.name", "production"),
                        otlp::attr(
                            "k8s.pod.name",
                            &format!("svc-{r}-{}", value(rng, Param::Hex)),
                        ),
                        otlp::attr("deployment.environment", "prod"),
                        otlp::attr("cloud.region", "eu-west-1"),
                    ],
                    ..Default::default()
                }),
                scope_logs: vec![ScopeLogs::default()],
                ..Default::default()
            })
            .collect();
        for i in 0..batch {
            let k = self.draw(rng);
            let body = self.line(rng, k);
            let (number, text) = match rng.u8(..100) {
                0..10 => (5, "DEBUG"),
                10..80 => (9, "INFO"),
                80..93 => (13, "WARN"),
                _ => (17, "ERROR"),
            };
            let mut record = otlp::record(
                (now + i as u64, now + i as u64),
                (number, text),
                &body,
                attributes(rng),
            );
            record.trace_id = rng.u128(..).to_be_bytes().to_vec();
            record.span_id = rng.u64(..).to_be_bytes().to_vec();
            resource_logs[i % resources].scope_logs[0]
                .log_records
                .push(record);
        }
        ExportLogsServiceRequest { resource_logs }
    }
}

/// 10-20 attributes: strings, integers, a boolean.
fn attributes(rng: &mut Rng) -> Vec<KeyValue> {
    let int = |key: &str, v: i64| KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        }),
        ..Default::default()
    };
    let mut out = vec![
        otlp::attr("http.method", METHODS[rng.usize(..METHODS.len())]),
        otlp::attr("http.route", &value(rng, Param::Path)),
        int(
            "http.status_code",
            i64::from(STATUS[rng.usize(..STATUS.len())]),
        ),
        otlp::attr("net.peer.ip", &value(rng, Param::Ip)),
        otlp::attr("user.id", &value(rng, Param::Uuid)),
        otlp::attr("thread.name", &format!("worker-{}", rng.u8(..32))),
        otlp::attr("code.function", WORDS[rng.usize(..WORDS.len())]),
        otlp::attr(
            "code.filepath",
            &format!("src/{}.rs", WORDS[rng.usize(..WORDS.len())]),
        ),
        int("code.lineno", i64::from(rng.u16(1..2000))),
        KeyValue {
            key: "sampled".to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::BoolValue(rng.bool())),
            }),
            ..Default::default()
        },
    ];
    for i in 0..rng.usize(0..=10) {
        out.push(otlp::attr(
            &format!("app.{}_{i}", WORDS[rng.usize(..WORDS.len())]),
            &{
                let param = PARAMS[rng.usize(..PARAMS.len())];
                value(rng, param)
            },
        ));
    }
    out
}

fn value(rng: &mut Rng, param: Param) -> String {
    match param {
        Param::Int => rng.u32(..1_000_000).to_string(),
        Param::Ip => format!(
            "{}.{}.{}.{}",
            rng.u8(1..224),
            rng.u8(..),
            rng.u8(..),
            rng.u8(1..255)
        ),
        Param::Uuid => {
            let v = rng.u128(..);
            format!(
                "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
                (v >> 96) as u32,
                (v >> 80) as u16,
                (v >> 68) as u16 & 0xfff,
                (v >> 56) as u16 & 0xfff,
                v as u64 & 0xffff_ffff_ffff
            )
        }
        Param::Path => format!(
            "/var/lib/{}/{}/{}.dat",
            WORDS[rng.usize(..WORDS.len())],
            rng.u16(..1000),
            WORDS[rng.usize(..WORDS.len())]
        ),
        Param::Quoted => format!("\"{}\"", words(rng, 1..4)),
        Param::Hex => format!("{:010x}", rng.u64(..1 << 40)),
        Param::Millis => format!("{}ms", rng.u32(..30_000)),
        Param::Time => format!(
            "2026-12-01T{:02}:{:02}:{:02}.{:03}Z",
            rng.u8(..24),
            rng.u8(..60),
            rng.u8(..60),
            rng.u16(..1000)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::logs::v1::LogRecord;

    /// The corpus has the shape the issue asks for: lengths from about 20 bytes to several KB,
    /// stack traces, JSON and key=value bodies, a long tail of templates, 10-20 attributes and
    /// several resources per request.
    #[test]
    fn the_corpus_has_the_shape_of_real_logs() {
        let corpus = Corpus::new(7);
        let mut rng = Rng::with_seed(1);
        let request = corpus.request(&mut rng, 0, 2_000);
        assert!((3..=5).contains(&request.resource_logs.len()));
        let records: Vec<&LogRecord> = request
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs[0].log_records)
            .collect();
        assert_eq!(records.len(), 2_000);
        let bodies: Vec<String> = records
            .iter()
            .map(|r| match r.body.as_ref().and_then(|b| b.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        let shortest = bodies.iter().map(String::len).min().unwrap();
        let longest = bodies.iter().map(String::len).max().unwrap();
        assert!(shortest <= 40, "shortest line {shortest} bytes");
        assert!(longest >= 2_000, "longest line {longest} bytes");
        assert!(
            bodies
                .iter()
                .any(|b| b.starts_with('{') && b.ends_with('}'))
        );
        assert!(bodies.iter().any(|b| b.contains(" msg=\"")));
        assert!(bodies.iter().any(|b| b.contains("\n\tat ")));
        assert!(
            records
                .iter()
                .all(|r| (10..=20).contains(&r.attributes.len()))
        );
        // The long tail: the head template is common, yet most templates appear.
        let mut seen = std::collections::BTreeMap::<usize, usize>::new();
        for _ in 0..20_000 {
            *seen.entry(corpus.draw(&mut rng)).or_default() += 1;
        }
        assert!(seen.len() >= 200, "{} templates drawn", seen.len());
        assert!(seen[&0] > 20 * seen[&(TEMPLATES - 1)].max(1) / 2);
    }
}
