//! `ourios-node`: the log-ingest node's command line.

use clap::{Parser, Subcommand};
use ourios_node::{Config, Node, NodeOptions, ServeArgs};

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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let store = config.store.clone();
    let data = config.data_dir.clone();
    let node = Node::start(
        config,
        NodeOptions {
            install_metrics: true,
            ..Default::default()
        },
    )
    .await?;
    let r = &node.recovery;
    eprintln!(
        "ourios: listening on http://{} (POST /v1/logs, GET /metrics, GET /healthz, GET /readyz); WAL in {}, store {}; \
         recovered {} frames ({} re-mined for state, {} skipped) and {} publish intents ({} \
         landed, {} republished under their key)",
        node.addr,
        data.join("wal").display(),
        store,
        r.mined,
        r.regenerated,
        r.skipped,
        r.intents_landed + r.intents_resealed,
        r.intents_landed,
        r.intents_resealed
    );
    if r.pre_intent_records > 0 {
        eprintln!(
            "ourios: {} replayed records were written before publish intents existed here; an \
             earlier release may have stored them already (counted as duplicates, \
             cause=pre_intent_replay)",
            r.pre_intent_records
        );
    }
    shutdown_signal().await;
    eprintln!("ourios: shutting down: final cut");
    let report = node.shutdown().await?;
    eprintln!(
        "ourios: stopped; final cut published {} records, stamped {} tenant(s)",
        report.published_records,
        report.stamped.len()
    );
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
