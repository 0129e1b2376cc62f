//! `ourios-node`: the log-ingest node's command line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use ourios_node::{Config, LogFormat, Node, NodeOptions, ServeArgs};

mod allocator;

#[derive(Debug, Parser)]
#[command(
    name = "ourios-node",
    version,
    about = "A log store node: OTLP in, lines back, and never an acknowledged record lost"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Built once, at startup: `serve`'s many settings make it the large variant, and boxing it
// would save nothing worth a field access.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Serve OTLP/HTTP logs on /v1/logs, Prometheus metrics on /metrics, liveness on /healthz and
    /// readiness on /readyz.
    Serve(ServeArgs),
    /// Print a tenant's lines from the store, rebuilt byte for byte, each record once.
    Query(QueryArgs),
    /// Run a read-only SQL query over a tenant's tables: `logs` (one row per record, with its
    /// `line`), `records` (the raw rows) and `audit` (the template events).
    Sql(SqlArgs),
    /// Print the SHA-256 of a bearer token, as an --auth-tokens file lists it.
    HashToken {
        /// The token.
        token: String,
    },
}

/// Where the store is: the same flags (and `--config` file) as `serve`.
#[derive(Debug, clap::Args)]
struct StoreArgs {
    /// TOML config file (its `store`, `data_dir` and `default_tenant` are used).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data directory whose `store` directory is read when --store is not given
    /// [default: ./ourios-data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Object store URL (as for `serve`).
    #[arg(long)]
    store: Option<String>,
    /// The tenant to read [default: the config's default tenant, `default`].
    #[arg(long)]
    tenant: Option<String>,
}

impl StoreArgs {
    /// The reader and the tenant.
    fn open(&self) -> anyhow::Result<(ourios_query::Reader, ourios_wal::TenantId)> {
        let config = Config::resolve(&ServeArgs {
            config: self.config.clone(),
            data_dir: self.data_dir.clone(),
            store: self.store.clone(),
            ..ServeArgs::default()
        })?;
        let tenant = match &self.tenant {
            Some(t) => ourios_wal::TenantId::new(t).with_context(|| format!("--tenant {t:?}"))?,
            None => config.default_tenant.clone(),
        };
        let store = ourios_sinks::store_from_url(&config.store)
            .with_context(|| format!("opening the store {}", config.store))?;
        Ok((ourios_query::Reader::new(store, ""), tenant))
    }
}

#[derive(Debug, clap::Args)]
struct QueryArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Lines at or after: a duration before now (15m, 1h, 7d), an RFC 3339 time or
    /// nanoseconds since the epoch.
    #[arg(long, default_value = "1h")]
    since: String,
    /// Lines before (same forms as --since) [default: no bound].
    #[arg(long)]
    until: Option<String>,
    /// Severity: LEVEL or >=LEVEL, >LEVEL, <=LEVEL, <LEVEL (trace, debug, info, warn, error,
    /// fatal, or 1-24). A record sent without a severity number is read by its severity text
    /// (WARN, Error, notice, ...).
    #[arg(long)]
    severity: Option<String>,
    /// Lines containing this text (repeatable: all must hold).
    #[arg(long)]
    contains: Vec<String>,
    /// Lines not containing this text (repeatable).
    #[arg(long)]
    excludes: Vec<String>,
    /// Lines matching this regular expression (repeatable).
    #[arg(long)]
    regex: Vec<String>,
    /// KEY=VALUE: a log attribute, or failing that a resource attribute, has this value
    /// (repeatable).
    #[arg(long)]
    attr: Vec<String>,
    /// At most this many lines [default: all].
    #[arg(long)]
    limit: Option<usize>,
    /// Oldest first (default: newest first).
    #[arg(long)]
    oldest_first: bool,
    /// Output: text, jsonl or csv.
    #[arg(long, default_value = "text")]
    format: String,
}

#[derive(Debug, clap::Args)]
struct SqlArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The query, e.g. "SELECT severity_text, count(*) FROM logs GROUP BY 1".
    sql: String,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Serve(args) => {
            let config = Config::resolve(&args)?;
            init_logging(&config);
            allocator::start(runtime.handle());
            runtime.block_on(serve(config))
        }
        Command::Query(args) => runtime.block_on(query(args)),
        Command::Sql(args) => runtime.block_on(sql(args)),
        Command::HashToken { token } => {
            println!("{}", ourios_node::auth::hash_token(&token));
            Ok(())
        }
    }
}

/// `ourios-node query`: the rows are written as each batch arrives.
async fn query(args: QueryArgs) -> anyhow::Result<()> {
    use futures::TryStreamExt;
    use std::io::Write;
    let (reader, tenant) = args.store.open()?;
    let now = std::time::SystemTime::now();
    let format: ourios_query::Format = args.format.parse()?;
    let attributes = args
        .attr
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .with_context(|| format!("--attr {kv:?}: expected KEY=VALUE"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let q = ourios_query::LineQuery {
        since: Some(ourios_query::parse_time(&args.since, now)?),
        until: args
            .until
            .as_deref()
            .map(|u| ourios_query::parse_time(u, now))
            .transpose()?,
        severity: args
            .severity
            .as_deref()
            .map(ourios_query::Severity::parse)
            .transpose()?,
        contains: args.contains,
        excludes: args.excludes,
        matches: args.regex,
        not_matches: Vec::new(),
        attributes,
        limit: args.limit,
        order: if args.oldest_first {
            ourios_query::Order::OldestFirst
        } else {
            ourios_query::Order::NewestFirst
        },
    };
    let scope = reader.scope(&tenant).await?;
    let mut stream = q.stream(&scope).await?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut first = true;
    while let Some(batch) = stream.try_next().await? {
        ourios_query::write_rows(&batch, format, first, &mut out)?;
        first = false;
        out.flush()?;
    }
    if first {
        // Nothing matched: say so where a person looks, what was asked, and why a fresh line
        // may not be here yet.
        let filtered = q.severity.is_some()
            || !q.contains.is_empty()
            || !q.excludes.is_empty()
            || !q.matches.is_empty()
            || !q.attributes.is_empty();
        eprintln!(
            "no lines for tenant {tenant} (--since {}{}{}); a line is readable once its records \
             are published: within a sweep, about 15 s on the defaults",
            args.since,
            args.until
                .map(|u| format!(", --until {u}"))
                .unwrap_or_default(),
            if filtered {
                ", with the filters given"
            } else {
                ""
            },
        );
        ourios_query::write_rows(
            &ourios_query::datafusion::arrow::record_batch::RecordBatch::new_empty(stream.schema()),
            format,
            true,
            &mut out,
        )?;
    }
    out.flush()?;
    Ok(())
}

/// `ourios-node sql`: the result as a table.
async fn sql(args: SqlArgs) -> anyhow::Result<()> {
    let (reader, tenant) = args.store.open()?;
    let scope = reader.scope(&tenant).await?;
    let batches = scope.sql(&args.sql).await?.collect().await?;
    let table = ourios_query::datafusion::arrow::util::pretty::pretty_format_batches(&batches)?;
    println!("{table}");
    Ok(())
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let store = config.store.clone();
    let data = config.data_dir.clone();
    let ready_file = config.ready_file.clone();
    let node = Node::start(
        config,
        NodeOptions {
            install_metrics: true,
            ..Default::default()
        },
    )
    .await?;
    let r = &node.recovery;
    let grpc_served = if node.grpc_addr.is_some() {
        "OTLP/gRPC (LogsService/Export on `grpc`), "
    } else {
        ""
    };
    tracing::info!(
        listen = %node.addr,
        grpc = %node.grpc_addr.map_or_else(|| "off".to_owned(), |a| a.to_string()),
        wal = %data.join("wal").display(),
        %store,
        frames_mined = r.mined,
        frames_re_mined_for_state = r.regenerated,
        frames_skipped = r.skipped,
        intents_landed = r.intents_landed,
        intents_republished = r.intents_resealed,
        "serving OTLP/HTTP (POST /v1/logs), {grpc_served}the Loki API (GET /loki/api/v1/...), \
         GET /metrics, GET /healthz, GET /readyz"
    );
    if r.pre_intent_records > 0 {
        tracing::warn!(
            records = r.pre_intent_records,
            "replayed records were written before publish intents existed here; an earlier \
             release may have stored them already (counted as duplicates, cause=pre_intent_replay)"
        );
    }
    if let Some(path) = &ready_file {
        write_ready_file(path, node.addr, node.grpc_addr)?;
    }
    shutdown_signal().await;
    if let Some(path) = &ready_file {
        // Not serving new work any more; a missing file is no reason to fail the shutdown.
        let _ = std::fs::remove_file(path);
    }
    tracing::info!("shutting down: final cut");
    let report = node.shutdown().await?;
    tracing::info!(
        records = report.published_records,
        tenants_stamped = report.stamped.len(),
        "stopped: final cut published"
    );
    Ok(())
}

/// Logs to stderr through `tracing`: text or one JSON object a line, filtered by `--log`.
fn init_logging(config: &Config) {
    // Validated by `Config::resolve`; an unusable filter cannot reach here.
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
}

/// Says the node serves: `{"listen": ADDR, "grpc": ADDR or null, "pid": PID}`, written aside
/// and renamed so a reader never sees half of it.
fn write_ready_file(path: &Path, addr: SocketAddr, grpc: Option<SocketAddr>) -> anyhow::Result<()> {
    let ready = serde_json::json!({
        "listen": addr.to_string(),
        "grpc": grpc.map(|a| a.to_string()),
        "pid": std::process::id(),
    });
    let mut aside = path.as_os_str().to_owned();
    aside.push(".partial");
    let aside = PathBuf::from(aside);
    std::fs::write(&aside, ready.to_string())
        .with_context(|| format!("writing the ready file {}", aside.display()))?;
    std::fs::rename(&aside, path)
        .with_context(|| format!("renaming {} to {}", aside.display(), path.display()))?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
