//! `ourios-node`: the log-ingest node's command line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use ourios_node::{Config, LogFormat, Node, NodeOptions, ServeArgs};

#[derive(Debug, Parser)]
#[command(
    name = "ourios-node",
    version,
    about = "A log-ingest node that never loses an acknowledged record"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve OTLP/HTTP logs on /v1/logs, Prometheus metrics on /metrics, liveness on /healthz and
    /// readiness on /readyz.
    Serve(ServeArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let Command::Serve(args) = cli.command;
    let config = Config::resolve(&args)?;
    init_logging(&config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(config))
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
    tracing::info!(
        listen = %node.addr,
        wal = %data.join("wal").display(),
        %store,
        frames_mined = r.mined,
        frames_re_mined_for_state = r.regenerated,
        frames_skipped = r.skipped,
        intents_landed = r.intents_landed,
        intents_republished = r.intents_resealed,
        "serving OTLP/HTTP (POST /v1/logs, GET /metrics, GET /healthz, GET /readyz)"
    );
    if r.pre_intent_records > 0 {
        tracing::warn!(
            records = r.pre_intent_records,
            "replayed records were written before publish intents existed here; an earlier \
             release may have stored them already (counted as duplicates, cause=pre_intent_replay)"
        );
    }
    if let Some(path) = &ready_file {
        write_ready_file(path, node.addr)?;
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

/// Says the node serves: `{"listen": ADDR, "pid": PID}`, written aside and renamed so a reader
/// never sees half of it.
fn write_ready_file(path: &Path, addr: SocketAddr) -> anyhow::Result<()> {
    let ready = serde_json::json!({ "listen": addr.to_string(), "pid": std::process::id() });
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
