//! Configuration: every setting has an embedded default, and may be set in a TOML file
//! (`--config`), the environment (`OURIOS_*`) or a flag; a flag beats the environment, which
//! beats the file, which beats the default. A bad value is refused at start, naming the field.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Default of [`Config::max_inflight_requests`].
pub const DEFAULT_MAX_INFLIGHT_REQUESTS: usize = 64;

/// Largest [`Config::max_inflight_requests`]: half of tokio's blocking pool (512), so puts to a
/// `file://` store, which run there too, always find a thread.
pub const MAX_INFLIGHT_LIMIT: usize = 256;

/// Default of [`Config::inline_ingest_bytes`]: a 32 KiB request mines in well under a
/// millisecond of miner time on realistic lines, short enough to hold an async worker.
pub const DEFAULT_INLINE_INGEST_BYTES: usize = 32 << 10;

/// Default of [`Config::max_inflight_bytes`].
pub const DEFAULT_MAX_INFLIGHT_BYTES: usize = 8 << 20;

/// Default of [`Config::encode_queue_bytes`]: when the store sets the pace the queue stays
/// full, so what it holds is memory, not speed (`xtask/loadgen/PROFILE.md`, "Memory at 64
/// tenants, again").
pub const DEFAULT_ENCODE_QUEUE_BYTES: usize = 16 << 20;

/// Default of [`Config::buffer_ceiling_bytes`]. With the queues, the bodies of waiting requests
/// and 64 tenants' miners it holds a node at `max` realistic load under 512 MiB resident
/// (461-479 MiB measured; `xtask/loadgen/PROFILE.md`, "Memory at 64 tenants, again" and "A
/// template in one buffer").
pub const DEFAULT_BUFFER_CEILING_BYTES: usize = ourios_sinks::DEFAULT_CEILING_BYTES;

/// The `serve` settings, all optional: once as the command line and the environment give them
/// (clap), once as a TOML file gives them (serde, field names as the flags' with `_`). A
/// setting not given falls through: flag or environment, then the file, then the default.
#[derive(Debug, Default, Clone, clap::Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeArgs {
    /// TOML file with any of the settings below (field names as in the flags, with `_`).
    #[arg(long, env = "OURIOS_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address the OTLP/HTTP, /metrics, /healthz and /readyz endpoints listen on
    /// [default: 127.0.0.1:4318].
    #[arg(long, env = "OURIOS_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Address the OTLP/gRPC LogsService listens on, or `off` [default: the --listen IP, port
    /// 4317; port 0 (any free port) when --listen's port is 0].
    #[arg(long, env = "OURIOS_GRPC_LISTEN")]
    pub grpc_listen: Option<String>,
    /// Directory for the WAL (and the store, when --store is not given) [default: ./ourios-data].
    #[arg(long, env = "OURIOS_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Object store URL: file:///path, memory://, s3://bucket/prefix, gs://bucket/prefix or
    /// az://container/prefix, with object_store's settings as query options
    /// (?endpoint=...&region=...) [default: file://DATA_DIR/store].
    #[arg(long, env = "OURIOS_STORE")]
    pub store: Option<String>,
    /// Tenant used when a request has no X-Scope-OrgID header [default: default].
    #[arg(long, env = "OURIOS_DEFAULT_TENANT")]
    pub default_tenant: Option<String>,
    /// Largest accepted request body after decompression, in bytes [default: 16777216].
    #[arg(long, env = "OURIOS_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Most log records in one request, counted before decoding; past it a request gets 413
    /// [default: 100000].
    #[arg(long, env = "OURIOS_MAX_RECORDS_PER_REQUEST")]
    pub max_records_per_request: Option<usize>,
    /// Seconds between age sweeps [default: 5].
    #[arg(long, env = "OURIOS_SWEEP_SECS")]
    pub sweep_secs: Option<u64>,
    /// A buffered partition older than this many seconds is published by the sweep [default: 10].
    #[arg(long, env = "OURIOS_PARTITION_MAX_AGE_SECS")]
    pub partition_max_age_secs: Option<u64>,
    /// Seconds between barrier cuts [default: 30].
    #[arg(long, env = "OURIOS_BARRIER_SECS")]
    pub barrier_secs: Option<u64>,
    /// Encode worker threads; 0 mines and encodes inline on the ingest path [default: 1].
    #[arg(long, env = "OURIOS_ENCODE_WORKERS")]
    pub encode_workers: Option<usize>,
    /// Requests whose OTLP body is at most this many bytes are mined, and their records
    /// handed to the record buffers, on the async worker that received them (no thread
    /// hand-off); larger ones are mined on a blocking thread and handed to the encode workers.
    /// 0 sends every request that way [default: 32768].
    #[arg(long, env = "OURIOS_INLINE_INGEST_BYTES")]
    pub inline_ingest_bytes: Option<usize>,
    /// Bound of the encode queue, in batches: a full queue blocks ingest [default: 64].
    #[arg(long, env = "OURIOS_ENCODE_QUEUE")]
    pub encode_queue: Option<usize>,
    /// Bound of the encode queue in the estimated bytes of its records (queued or being
    /// appended): a batch that does not fit waits [default: 16777216].
    #[arg(long, env = "OURIOS_ENCODE_QUEUE_BYTES")]
    pub encode_queue_bytes: Option<usize>,
    /// A partition is detached for publishing when it reaches this many bytes [default: 8388608].
    #[arg(long, env = "OURIOS_PARTITION_TARGET_BYTES")]
    pub partition_target_bytes: Option<usize>,
    /// Publishable bytes in all record buffers together (a terminal tenant's do not count): at
    /// this healthy partitions are detached for publishing, the largest first, until half of it
    /// is left, and while it still holds (a slow or failing store) requests get 503 with
    /// Retry-After [default: 134217728].
    #[arg(long, env = "OURIOS_BUFFER_CEILING_BYTES")]
    pub buffer_ceiling_bytes: Option<usize>,
    /// Estimated bytes of detached partitions waiting for the publisher: past this the encode
    /// worker waits (ingest slows to the store's pace instead of memory growing) [default:
    /// 33554432].
    #[arg(long, env = "OURIOS_PUBLISH_QUEUE_BYTES")]
    pub publish_queue_bytes: Option<usize>,
    /// WAL segment size that triggers rotation, in bytes [default: 67108864].
    #[arg(long, env = "OURIOS_WAL_SEGMENT_BYTES")]
    pub wal_segment_bytes: Option<u64>,
    /// Template similarity threshold in (0, 1] [default: 0.7].
    #[arg(long, env = "OURIOS_SIMILARITY")]
    pub similarity: Option<f64>,
    /// Requests in the ingest path at once; past it a request gets 503 with Retry-After, so
    /// ingest never takes the threads store I/O needs [default: 64].
    #[arg(long, env = "OURIOS_MAX_INFLIGHT_REQUESTS")]
    pub max_inflight_requests: Option<usize>,
    /// Decompressed body bytes of the requests being decoded, appended and mined at once; past
    /// it a request waits (holding only its body) until earlier ones are answered. A request
    /// larger than this is taken alone [default: 8388608].
    #[arg(long, env = "OURIOS_MAX_INFLIGHT_BYTES")]
    pub max_inflight_bytes: Option<usize>,
    /// Tenants the node serves; a request for one more is refused (429) [default: 1000].
    #[arg(long, env = "OURIOS_MAX_TENANTS")]
    pub max_tenants: Option<usize>,
    /// Templates per tenant; lines of new shapes past it go to the overflow template, kept
    /// whole [default: 10000].
    #[arg(long, env = "OURIOS_MAX_TEMPLATES_PER_TENANT")]
    pub max_templates_per_tenant: Option<usize>,
    /// Once serving (listeners bound, recovery finished), write `{"listen": ADDR, "grpc": ADDR,
    /// "pid": PID}` to this file (whole: written aside, then renamed); it is removed at
    /// shutdown. For supervisors and tests that start the node on port 0 [default: none].
    #[arg(long, env = "OURIOS_READY_FILE")]
    pub ready_file: Option<PathBuf>,
    /// Bearer tokens (a TOML file of SHA-256 hashes, tenants and `/metrics` grants; see
    /// `ourios-node hash-token`): with it every ingest and read request needs a token of its
    /// tenant [default: none, no authentication].
    #[arg(long, env = "OURIOS_AUTH_TOKENS")]
    pub auth_tokens: Option<PathBuf>,
    /// Log format on stderr: `text`, or `json` (one object a line) [default: text].
    #[arg(long, env = "OURIOS_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log filter: a level (`error`, `warn`, `info`, `debug`, `trace`) or tracing directives
    /// such as `info,ourios_node=debug` [default: info].
    #[arg(long, env = "OURIOS_LOG")]
    pub log: Option<String>,
}

/// How the node writes its log.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line an event.
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

/// The resolved, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address.
    pub listen: SocketAddr,
    /// OTLP/gRPC listen address; `None` when off.
    pub grpc_listen: Option<SocketAddr>,
    /// Data directory (the WAL lives in `<data_dir>/wal`).
    pub data_dir: PathBuf,
    /// Object store URL.
    pub store: String,
    /// Tenant for requests without `X-Scope-OrgID` (validated by the WAL's rule).
    pub default_tenant: ourios_wal::TenantId,
    /// Request body limit.
    pub max_body_bytes: usize,
    /// Records per request limit.
    pub max_records_per_request: usize,
    /// Age sweep period.
    pub sweep_every: Duration,
    /// Partition age the sweep publishes.
    pub partition_max_age: Duration,
    /// Barrier period.
    pub barrier_every: Duration,
    /// Encode workers (0 = inline).
    pub encode_workers: usize,
    /// Largest request mined and handed on in place (0: none).
    pub inline_ingest_bytes: usize,
    /// Encode queue bound.
    pub encode_queue: usize,
    /// Encode queue bound, in estimated bytes.
    pub encode_queue_bytes: usize,
    /// Partition size trigger.
    pub partition_target_bytes: usize,
    /// Buffer ceiling.
    pub buffer_ceiling_bytes: usize,
    /// Publisher queue bound, in estimated bytes.
    pub publish_queue_bytes: usize,
    /// WAL rotation size.
    pub wal_segment_bytes: u64,
    /// Miner similarity threshold.
    pub similarity: f64,
    /// Requests admitted into the ingest path at once.
    pub max_inflight_requests: usize,
    /// Decompressed body bytes decoded, appended and mined at once.
    pub max_inflight_bytes: usize,
    /// Tenants served.
    pub max_tenants: usize,
    /// Templates per tenant before the overflow template.
    pub max_templates_per_tenant: usize,
    /// Where the serving process says it is ready, if anywhere.
    pub ready_file: Option<PathBuf>,
    /// The bearer-token file, when authentication is on.
    pub auth_tokens: Option<PathBuf>,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter directives.
    pub log_filter: String,
}

/// A setting that cannot be used; the message names the field and the value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}")]
    Read {
        /// File path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for these settings.
    #[error("config file {path} does not hold these settings")]
    Parse {
        /// File path.
        path: PathBuf,
        /// Cause (names the field).
        source: toml::de::Error,
    },
    /// A value is out of its allowed range.
    #[error("invalid setting `{field}` = {value}: {why}")]
    Invalid {
        /// Field name as in the file.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        why: &'static str,
    },
}

impl Config {
    /// Resolves flags/env over the optional file over the defaults, then validates.
    pub fn resolve(args: &ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => load_file(path)?,
            None => ServeArgs::default(),
        };
        let data_dir = args
            .data_dir
            .clone()
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("ourios-data"));
        let store = args
            .store
            .clone()
            .or(file.store)
            .unwrap_or_else(|| default_store(&data_dir));
        let default_tenant = args
            .default_tenant
            .clone()
            .or(file.default_tenant)
            .unwrap_or_else(|| "default".into());
        let default_tenant =
            ourios_wal::TenantId::new(&default_tenant).map_err(|_| ConfigError::Invalid {
                field: "default_tenant",
                value: default_tenant,
                why: "must be 1-64 bytes of [A-Za-z0-9_.-]",
            })?;
        let listen = args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| "127.0.0.1:4318".parse().expect("literal"));
        let grpc_listen = match args.grpc_listen.clone().or(file.grpc_listen) {
            None => Some(SocketAddr::new(
                listen.ip(),
                if listen.port() == 0 { 0 } else { 4317 },
            )),
            Some(off) if off.trim().eq_ignore_ascii_case("off") => None,
            Some(at) => Some(at.trim().parse().map_err(|_| ConfigError::Invalid {
                field: "grpc_listen",
                value: at,
                why: "must be an address such as 127.0.0.1:4317, or `off`",
            })?),
        };
        let cfg = Config {
            listen,
            grpc_listen,
            store,
            default_tenant,
            max_body_bytes: args
                .max_body_bytes
                .or(file.max_body_bytes)
                .unwrap_or(16 << 20),
            max_records_per_request: args
                .max_records_per_request
                .or(file.max_records_per_request)
                .unwrap_or(100_000),
            sweep_every: Duration::from_secs(args.sweep_secs.or(file.sweep_secs).unwrap_or(5)),
            partition_max_age: Duration::from_secs(
                args.partition_max_age_secs
                    .or(file.partition_max_age_secs)
                    .unwrap_or(10),
            ),
            barrier_every: Duration::from_secs(
                args.barrier_secs.or(file.barrier_secs).unwrap_or(30),
            ),
            encode_workers: args.encode_workers.or(file.encode_workers).unwrap_or(1),
            inline_ingest_bytes: args
                .inline_ingest_bytes
                .or(file.inline_ingest_bytes)
                .unwrap_or(DEFAULT_INLINE_INGEST_BYTES),
            encode_queue: args.encode_queue.or(file.encode_queue).unwrap_or(64),
            encode_queue_bytes: args
                .encode_queue_bytes
                .or(file.encode_queue_bytes)
                .unwrap_or(DEFAULT_ENCODE_QUEUE_BYTES),
            partition_target_bytes: args
                .partition_target_bytes
                .or(file.partition_target_bytes)
                .unwrap_or(8 << 20),
            buffer_ceiling_bytes: args
                .buffer_ceiling_bytes
                .or(file.buffer_ceiling_bytes)
                .unwrap_or(DEFAULT_BUFFER_CEILING_BYTES),
            publish_queue_bytes: args
                .publish_queue_bytes
                .or(file.publish_queue_bytes)
                .unwrap_or(ourios_publisher::DEFAULT_QUEUE_BYTES),
            wal_segment_bytes: args
                .wal_segment_bytes
                .or(file.wal_segment_bytes)
                .unwrap_or(64 << 20),
            similarity: args.similarity.or(file.similarity).unwrap_or(0.7),
            max_inflight_requests: args
                .max_inflight_requests
                .or(file.max_inflight_requests)
                .unwrap_or(DEFAULT_MAX_INFLIGHT_REQUESTS),
            max_inflight_bytes: args
                .max_inflight_bytes
                .or(file.max_inflight_bytes)
                .unwrap_or(DEFAULT_MAX_INFLIGHT_BYTES),
            max_tenants: args.max_tenants.or(file.max_tenants).unwrap_or(1000),
            max_templates_per_tenant: args
                .max_templates_per_tenant
                .or(file.max_templates_per_tenant)
                .unwrap_or(ourios_miner::DEFAULT_MAX_TEMPLATES),
            ready_file: args.ready_file.clone().or(file.ready_file),
            auth_tokens: args.auth_tokens.clone().or(file.auth_tokens),
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
            log_filter: args
                .log
                .clone()
                .or(file.log)
                .unwrap_or_else(|| "info".into()),
            data_dir,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, value: &dyn std::fmt::Display, why| {
            Err(ConfigError::Invalid {
                field,
                value: value.to_string(),
                why,
            })
        };
        if self.sweep_every.is_zero() {
            return bad("sweep_secs", &0, "must be at least 1");
        }
        if self.barrier_every.is_zero() {
            return bad("barrier_secs", &0, "must be at least 1");
        }
        if self.encode_queue == 0 {
            return bad("encode_queue", &0, "must be at least 1");
        }
        if self.encode_queue_bytes == 0 {
            return bad("encode_queue_bytes", &0, "must be at least 1");
        }
        if self.max_body_bytes == 0 {
            return bad("max_body_bytes", &0, "must be at least 1");
        }
        if self.max_records_per_request == 0 {
            return bad("max_records_per_request", &0, "must be at least 1");
        }
        if self.max_inflight_requests == 0 || self.max_inflight_requests > MAX_INFLIGHT_LIMIT {
            return bad(
                "max_inflight_requests",
                &self.max_inflight_requests,
                "must be 1-256 (each admitted request may hold a blocking thread; the runtime \
                 has 512 and store I/O needs the rest)",
            );
        }
        if self.max_inflight_bytes == 0 || u32::try_from(self.max_inflight_bytes).is_err() {
            return bad(
                "max_inflight_bytes",
                &self.max_inflight_bytes,
                "must be 1 to 4294967295 (bytes of request bodies in the ingest path at once)",
            );
        }
        if self.partition_target_bytes == 0
            || self.partition_target_bytes > self.buffer_ceiling_bytes
        {
            return bad(
                "partition_target_bytes",
                &self.partition_target_bytes,
                "must be at least 1 and at most buffer_ceiling_bytes",
            );
        }
        if self.publish_queue_bytes == 0 {
            return bad(
                "publish_queue_bytes",
                &0,
                "must be at least 1 (a partition larger than the bound still goes alone)",
            );
        }
        if self.wal_segment_bytes < 4096 {
            return bad(
                "wal_segment_bytes",
                &self.wal_segment_bytes,
                "must be at least 4096",
            );
        }
        if self.max_tenants == 0 {
            return bad("max_tenants", &0, "must be at least 1");
        }
        if self.max_templates_per_tenant == 0 {
            return bad("max_templates_per_tenant", &0, "must be at least 1");
        }
        if !(self.similarity > 0.0 && self.similarity <= 1.0) {
            return bad("similarity", &self.similarity, "must be in (0, 1]");
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log_filter).is_err() {
            return bad(
                "log",
                &self.log_filter,
                "must be a level (error, warn, info, debug, trace) or tracing directives such \
                 as `info,ourios_node=debug`",
            );
        }
        Ok(())
    }

    /// Where the WAL lives.
    pub fn wal_dir(&self) -> PathBuf {
        self.data_dir.join("wal")
    }
}

fn default_store(data_dir: &Path) -> String {
    let abs = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    format!("file://{}", abs.join("store").display())
}

fn load_file(path: &Path) -> Result<ServeArgs, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With nothing given, the embedded defaults apply and validate.
    /// Reasoned mutation (not run as a mutant): change the default listen port and the assertion
    /// fails.
    #[test]
    fn config_defaults_are_valid() {
        let cfg = Config::resolve(&ServeArgs::default()).unwrap();
        assert_eq!(cfg.listen.port(), 4318);
        assert_eq!(cfg.grpc_listen, Some("127.0.0.1:4317".parse().unwrap()));
        assert!(
            cfg.store.starts_with("file://") && cfg.store.ends_with("ourios-data/store"),
            "{}",
            cfg.store
        );
        assert_eq!(cfg.wal_dir(), PathBuf::from("ourios-data/wal"));
        assert_eq!(cfg.inline_ingest_bytes, 32 << 10);
    }

    /// A flag beats the file; the file beats the default; a bad or unknown field is refused
    /// naming the field.
    /// Reasoned mutation (not run as a mutant): swap `args.sweep_secs.or(file.sweep_secs)` operands
    /// and the flag loses.
    #[test]
    fn config_precedence_and_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "sweep_secs = 9\nbarrier_secs = 11\ninline_ingest_bytes = 0\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path.clone()),
            sweep_secs: Some(2),
            ..Default::default()
        };
        let cfg = Config::resolve(&args).unwrap();
        assert_eq!(cfg.sweep_every, Duration::from_secs(2));
        assert_eq!(cfg.barrier_every, Duration::from_secs(11));
        assert_eq!(
            cfg.inline_ingest_bytes, 0,
            "0 is a limit: every request to the pool"
        );

        // The file is named by the error, the field by its cause (as the command line prints
        // the chain).
        std::fs::write(&path, "barier_secs = 11\n").unwrap();
        let err = crate::server::said(&Config::resolve(&args).unwrap_err());
        assert!(
            err.contains("c.toml") && err.contains("barier_secs"),
            "{err}"
        );

        let args = ServeArgs {
            similarity: Some(1.5),
            ..Default::default()
        };
        let err = Config::resolve(&args).unwrap_err().to_string();
        assert!(err.contains("similarity") && err.contains("1.5"), "{err}");
        let args = ServeArgs {
            default_tenant: Some("a/b".into()),
            ..Default::default()
        };
        assert!(
            Config::resolve(&args)
                .unwrap_err()
                .to_string()
                .contains("default_tenant")
        );
    }

    /// `max_inflight_bytes` is a semaphore's permits taken at most `u32::MAX` at a time: 0 and
    /// anything past `u32::MAX` are refused naming the field; the edges are taken.
    #[test]
    fn config_max_inflight_bytes_is_refused_outside_its_range() {
        let resolve = |bytes: usize| {
            Config::resolve(&ServeArgs {
                max_inflight_bytes: Some(bytes),
                ..Default::default()
            })
        };
        for bad in [0, u32::MAX as usize + 1] {
            let err = resolve(bad).unwrap_err().to_string();
            assert!(err.contains("max_inflight_bytes"), "{bad}: {err}");
        }
        for good in [1, u32::MAX as usize] {
            assert_eq!(resolve(good).unwrap().max_inflight_bytes, good);
        }
        assert_eq!(
            Config::resolve(&ServeArgs::default())
                .unwrap()
                .max_inflight_bytes,
            DEFAULT_MAX_INFLIGHT_BYTES
        );
    }

    /// The gRPC address follows the HTTP one unless given: its IP, port 4317, or any free port
    /// beside an ephemeral HTTP port; `off` turns it off; a bad value is refused naming it.
    #[test]
    fn config_grpc_listen_follows_listen_or_is_given() {
        let resolve = |listen: &str, grpc: Option<&str>| {
            Config::resolve(&ServeArgs {
                listen: Some(listen.parse().unwrap()),
                grpc_listen: grpc.map(str::to_owned),
                ..Default::default()
            })
        };
        let at = |s: &str| Some(s.parse::<SocketAddr>().unwrap());
        assert_eq!(
            resolve("0.0.0.0:4318", None).unwrap().grpc_listen,
            at("0.0.0.0:4317")
        );
        assert_eq!(
            resolve("127.0.0.1:0", None).unwrap().grpc_listen,
            at("127.0.0.1:0")
        );
        assert_eq!(
            resolve("127.0.0.1:4318", Some("127.0.0.1:9000"))
                .unwrap()
                .grpc_listen,
            at("127.0.0.1:9000")
        );
        assert_eq!(
            resolve("127.0.0.1:4318", Some("off")).unwrap().grpc_listen,
            None
        );
        let err = resolve("127.0.0.1:4318", Some("4317"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("grpc_listen") && err.contains("4317"), "{err}");
    }

    /// The log settings come from the file like any other, and a filter tracing cannot parse
    /// is refused at start naming `log`, not found out at the first event.
    #[test]
    fn config_log_format_and_a_bad_filter_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "log_format = \"json\"\nlog = \"warn,ourios_node=debug\"\n",
        )
        .unwrap();
        let cfg = Config::resolve(&ServeArgs {
            config: Some(path),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(cfg.log_format, LogFormat::Json);
        assert_eq!(cfg.log_filter, "warn,ourios_node=debug");
        assert_eq!(
            Config::resolve(&ServeArgs::default()).unwrap().log_format,
            LogFormat::Text
        );
        let err = Config::resolve(&ServeArgs {
            log: Some("ourios_node=loud".into()),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("`log`"), "{err}");
    }
}
