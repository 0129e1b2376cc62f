//! The serving node: wires every other crate into one process.
//!
//! OTLP/HTTP and OTLP/gRPC ingest validate a request, refuses a terminal tenant, appends to the WAL and
//! acknowledges only after the group fsync covering it; `mine_batch_ordered` mines the records
//! in WAL order per tenant and hands them to the encode pool. The age sweep and the barrier
//! tasks publish, stamp per-tenant frontiers and truncate the WAL; recovery replays it on
//! start. Proves RFC0054.2 and RFC0054.4 and the end-to-end legs of RFC 0056 (see `rfcs/`).
//!
//! It is the only crate that knows HTTP, gRPC, OTLP, tokio tasks and the configuration file.

pub mod auth;
pub mod cadence;
pub mod config;
mod core;
pub mod grpc;
mod intents;
#[cfg(feature = "read")]
mod loki;
pub mod metrics;
pub mod otlp;
mod pool;
pub mod seqs;
mod server;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use object_store::ObjectStore;
use ourios_barrier::Barrier;
use ourios_miner::{Clock, MinerConfig, SystemClock, TenantMiner};
use ourios_publisher::{PublishCoordinator, PublisherConfig};
use ourios_recoverable::lock;
use ourios_sinks::{AuditSinkConfig, RecordSinkConfig, SharedParquetAuditSink, SharedParquetSink};
use ourios_wal::{ReplayMode, TenantId, Wal, WalConfig};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use crate::cadence::{Cadence, TickResult};
pub use crate::config::{Config, LogFormat, ServeArgs};
pub use crate::core::{Core, CutReport, IngestError};
pub use crate::intents::INTENT_TENANT;
pub use crate::server::TENANT_HEADER;

/// Hooks for embedding and tests: everything defaults to what `serve` uses.
#[derive(Debug, Default)]
pub struct NodeOptions {
    /// Use this store instead of building one from `config.store`.
    pub store: Option<Arc<dyn ObjectStore>>,
    /// The miner's clock (audit event timestamps).
    pub clock: Option<Arc<dyn Clock>>,
    /// Install the global Prometheus recorder (once per process) and serve `/metrics`.
    pub install_metrics: bool,
    /// Cut every this many payload bytes replayed during recovery (default
    /// [`RECOVERY_CUT_BYTES`]), so a node that keeps crashing while it recovers still advances
    /// its frontiers.
    pub recovery_cut_bytes: Option<u64>,
    /// Open the WAL on this I/O instead of the real file system (the power-loss model).
    pub wal_io: Option<Arc<dyn ourios_wal::WalIo>>,
}

/// Recovery cuts after replaying this many payload bytes (and once after it finishes).
pub const RECOVERY_CUT_BYTES: u64 = 64 * 1024 * 1024;

/// What recovery did on start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Frames skipped (covered by a snapshot and durable).
    pub skipped: u64,
    /// Frames re-mined for state only.
    pub regenerated: u64,
    /// Frames mined normally (their records publish again).
    pub mined: u64,
    /// Whether a torn tail was cut from the newest segment.
    pub torn_tail: bool,
    /// Cuts run while recovering and right after it (each stamps what replay made durable).
    pub cuts: u64,
    /// Publish intents above the horizon whose unit had landed: their replayed records are
    /// dropped (RFC 0058).
    pub intents_landed: u64,
    /// Publish intents above the horizon whose unit is rebuilt from replayed records and put
    /// again under its key (create-only: a copy that landed is found, not written twice).
    pub intents_resealed: u64,
    /// Records replayed that no intent names, by the first recovery of a WAL an earlier release
    /// wrote (no `publish-intents` file in the data directory, no intent in the WAL): that
    /// release may have put them (RFC 0058 §Upgrade), so they may be duplicates.
    pub pre_intent_records: u64,
}

/// A running node.
#[derive(Debug)]
pub struct Node {
    /// The shared core (WAL, miners, sinks, barrier, coordinator, pool).
    pub core: Arc<Core>,
    /// Manual triggers for the sweep and the barrier.
    pub cadence: Cadence,
    /// The address the HTTP server listens on.
    pub addr: SocketAddr,
    /// The address the OTLP/gRPC server listens on (`None` with `--grpc-listen off`).
    pub grpc_addr: Option<SocketAddr>,
    /// What recovery did on start.
    pub recovery: Recovery,
    stop: watch::Sender<bool>,
    /// `None` once `shutdown` has taken them.
    tasks: Option<Tasks>,
}

/// The servers (HTTP, gRPC) and the loops (sweep, barrier) a node's shutdown awaits.
type Tasks = (Vec<JoinHandle<()>>, Vec<JoinHandle<()>>);

impl Drop for Node {
    /// A node dropped without [`Node::shutdown`] still stops: the loops and the server are told
    /// to stop, and the pool and the publisher thread (which would otherwise keep each other
    /// alive) are closed. Nothing is lost by skipping the final cut: every acknowledged frame
    /// is in the WAL and recovery publishes it. Never panics.
    fn drop(&mut self) {
        if self.tasks.is_none() {
            return; // shut down already
        }
        self.core.shutting_down.store(true, Ordering::Release);
        let _ = self.stop.send(true);
        if let Some(pool) = &self.core.pool {
            pool.close();
        }
        self.core.coordinator.close();
    }
}

fn prometheus() -> Option<metrics_exporter_prometheus::PrometheusHandle> {
    static HANDLE: OnceLock<Option<metrics_exporter_prometheus::PrometheusHandle>> =
        OnceLock::new();
    HANDLE
        .get_or_init(|| {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .ok()
        })
        .clone()
}

impl Node {
    /// Opens the WAL (healing a torn tail), recovers every tenant, starts the encode pool, the
    /// publisher, the sweep and barrier loops and the HTTP server.
    pub async fn start(config: Config, options: NodeOptions) -> anyhow::Result<Node> {
        let metrics_handle = if options.install_metrics {
            prometheus()
        } else {
            None
        };
        let store = match options.store {
            Some(s) => s,
            None => {
                // A `file://` store creates (and syncs) its directory itself.
                ourios_sinks::store_from_url(&config.store)
                    .with_context(|| format!("opening store {}", config.store))?
            }
        };
        let wal_config = WalConfig {
            max_segment_bytes: config.wal_segment_bytes,
            // One size limit: any body the HTTP layer accepts fits one frame (its canonical
            // protobuf is at most its decoded size, plus the receive time stamped into each
            // record that had no time: a fixed64 field and a longer length prefix, under 16
            // bytes a record), so no request gets a refusal it can never get past.
            max_frame_bytes: ourios_wal::DEFAULT_MAX_FRAME_BYTES.max(
                config.max_body_bytes
                    + config.max_records_per_request.saturating_mul(16)
                    + ourios_wal::FRAME_HEADER_LEN
                    + ourios_wal::MAX_TENANT_LEN,
            ),
            ..WalConfig::new(config.wal_dir())
        };
        let wal_dir = config.wal_dir();
        let wal_io = options.wal_io;
        let (wal, opened) = tokio::task::spawn_blocking(move || match wal_io {
            Some(io) => Wal::open_with_io(wal_config, io),
            None => Wal::open(wal_config),
        })
        .await?
        .with_context(|| format!("opening the WAL in {}", wal_dir.display()))?;
        for d in &opened.discarded_snapshots {
            tracing::warn!(
                tenant = d.tenant.as_str(),
                path = %d.path.display(),
                reason = d.reason.as_str(),
                "snapshot not used; the tenant's miner starts empty and learns its templates \
                 again (what is in the store reads as before)"
            );
        }
        let wal = Arc::new(wal);
        let commit_thread = ourios_wal::CommitThread::start(Arc::clone(&wal))
            .context("starting the WAL's commit thread")?;
        let sealer = Arc::new(intents::WalSealer::new(Arc::clone(&wal)));

        let barrier = Arc::new(Barrier::new());
        let seq_base = seqs::reserve(&config.data_dir)?;
        let audit = SharedParquetAuditSink::new(
            Arc::clone(&store),
            AuditSinkConfig {
                seq_base,
                ..AuditSinkConfig::default()
            },
        );
        let records = SharedParquetSink::new(
            Arc::clone(&store),
            audit,
            RecordSinkConfig {
                target_partition_bytes: config.partition_target_bytes,
                ceiling_bytes: config.buffer_ceiling_bytes,
                ..RecordSinkConfig::default()
            },
        )
        .with_sealer(Arc::clone(&sealer) as Arc<dyn ourios_sinks::Sealer>);
        let coordinator = PublishCoordinator::new(
            records.clone(),
            Arc::clone(&barrier),
            tokio::runtime::Handle::current(),
            PublisherConfig {
                queue_bytes: config.publish_queue_bytes,
                ..PublisherConfig::default()
            },
        );
        let pool = (config.encode_workers > 0).then(|| {
            pool::EncodePool::start(
                config.encode_workers,
                config.encode_queue,
                config.encode_queue_bytes,
                records.clone(),
                coordinator.clone(),
            )
        });
        let miner_config = MinerConfig::default()
            .with_similarity_threshold(config.similarity)
            .context("invalid setting `similarity`")?
            .with_max_templates(config.max_templates_per_tenant)
            .context("invalid setting `max_templates_per_tenant`")?;
        let clock = options.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let core = Arc::new(Core {
            wal,
            miner_config,
            clock,
            records,
            barrier,
            coordinator,
            pool,
            tenants: Mutex::new(Default::default()),
            max_tenants: config.max_tenants,
            inline_ingest_bytes: config.inline_ingest_bytes,
            shutting_down: AtomicBool::new(false),
            sealer,
            _commit_thread: commit_thread,
            ingest_metrics: crate::core::IngestMetrics::register(),
        });

        let c = Arc::clone(&core);
        let cut_every = options.recovery_cut_bytes.unwrap_or(RECOVERY_CUT_BYTES);
        let upgrading = !intents::recovered_with_intents(&config.data_dir);
        let recovered =
            match tokio::task::spawn_blocking(move || recover(&c, cut_every, upgrading)).await {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(anyhow::anyhow!("recovery panicked: {e}")),
            };
        let mut recovery = match recovered {
            Ok(r) => r,
            Err(e) => {
                // Stop what already runs, so the WAL and its lock are released with the core.
                if let Some(pool) = &core.pool {
                    pool.close();
                }
                core.coordinator.close();
                return Err(e);
            }
        };
        recovery.torn_tail = opened.torn_tail.is_some();
        // Replayed records may still be in the encode pool's queue: the routing of pass 1 stays
        // in force until the cut below has quiesced every encode batch replay submitted.
        // Stamp what recovery republished now, not at the next barrier: a node that crashes
        // again before then would replay all of it once more.
        if recovery.mined > 0 {
            let report = core.run_cut().await;
            recovery.cuts += 1;
            ::metrics::counter!(metrics::RECOVERY_CUTS).increment(1);
            if !report.not_stamped.is_empty() {
                tracing::warn!(
                    tenants = ?report.not_stamped,
                    "the cut after recovery left tenants unstamped"
                );
            }
        }
        // Every replayed record has reached the sink (the cut quiesced the encodes, and with
        // nothing mined there is nothing in flight). Units still incomplete (a frame whose
        // mining panicked) stay in the floor until a restart rebuilds them.
        core.records.recovery_done();
        intents::mark_recovered_with_intents(&config.data_dir).with_context(|| {
            format!("recording publish intents in {}", config.data_dir.display())
        })?;

        let (stop, stop_rx) = watch::channel(false);
        let (sweep_tx, sweep_rx) = mpsc::channel(4);
        let (cut_tx, cut_rx) = mpsc::channel(4);
        let loops = vec![
            tokio::spawn(cadence::sweep_loop(
                Arc::clone(&core),
                config.sweep_every,
                config.partition_max_age,
                sweep_rx,
                stop_rx.clone(),
            )),
            tokio::spawn(cadence::barrier_loop(
                Arc::clone(&core),
                config.barrier_every,
                cut_rx,
                stop_rx.clone(),
            )),
        ];

        let auth = match &config.auth_tokens {
            Some(path) => Some(Arc::new(auth::Tokens::load(path)?)),
            None => {
                if !config.listen.ip().is_loopback() {
                    tracing::warn!(
                        listen = %config.listen,
                        "serving a non-loopback address without --auth-tokens: anyone who \
                         reaches it can write and read every tenant's logs"
                    );
                }
                None
            }
        };
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        let addr = listener.local_addr()?;
        // `validate` refuses a budget past `u32::MAX` (the semaphore takes `u32` at a time).
        let inflight_bytes = u32::try_from(config.max_inflight_bytes).unwrap_or(u32::MAX);
        let state = server::AppState {
            core: Arc::clone(&core),
            metrics: metrics_handle,
            default_tenant: config.default_tenant.clone(),
            max_body_bytes: config.max_body_bytes,
            max_records: config.max_records_per_request,
            admission: Arc::new(tokio::sync::Semaphore::new(config.max_inflight_requests)),
            max_inflight: config.max_inflight_requests,
            admission_bytes: Arc::new(tokio::sync::Semaphore::new(inflight_bytes as usize)),
            max_inflight_bytes: inflight_bytes,
            store_probe: Arc::clone(&store),
            #[cfg(feature = "read")]
            read: loki::ReadState::new(Arc::clone(&store)),
            auth,
        };
        // Bound before anything is spawned, so a taken port fails the start with its address.
        let grpc_listener = match config.grpc_listen {
            Some(at) => Some(
                tokio::net::TcpListener::bind(at)
                    .await
                    .with_context(|| format!("binding {at} for OTLP/gRPC (--grpc-listen)"))?,
            ),
            None => None,
        };
        let grpc_addr = grpc_listener
            .as_ref()
            .map(tokio::net::TcpListener::local_addr)
            .transpose()?;
        let mut servers = Vec::new();
        if let Some(listener) = grpc_listener {
            let routes = tonic::service::Routes::from(grpc::router(state.clone()));
            let mut grpc_stop = stop_rx.clone();
            servers.push(tokio::spawn(async move {
                let shutdown = async move {
                    let _ = grpc_stop.changed().await;
                };
                let incoming =
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
                if let Err(e) = tonic::transport::Server::builder()
                    .add_routes(routes)
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await
                {
                    tracing::error!(error = %crate::server::said(&e), "the gRPC server stopped");
                }
            }));
        }
        let app = server::router(state);
        let mut server_stop = stop_rx;
        servers.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = server_stop.changed().await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %crate::server::said(&e), "the HTTP server stopped");
            }
        }));
        Ok(Node {
            core,
            cadence: Cadence {
                sweep: sweep_tx,
                cut: cut_tx,
            },
            addr,
            grpc_addr,
            recovery,
            stop,
            tasks: Some((servers, loops)),
        })
    }

    /// Graceful shutdown: stop accepting, stop the loops, let the encode pool and the publisher
    /// finish what they hold, then a final cut publishes and stamps what it can.
    pub async fn shutdown(mut self) -> anyhow::Result<CutReport> {
        self.core.shutting_down.store(true, Ordering::Release);
        let _ = self.stop.send(true);
        if let Some((servers, loops)) = self.tasks.take() {
            for s in servers {
                let _ = s.await;
            }
            for l in loops {
                let _ = l.await;
            }
        }
        let core = Arc::clone(&self.core);
        tokio::task::spawn_blocking(move || {
            if let Some(pool) = &core.pool {
                pool.shutdown();
            }
            core.coordinator.shutdown();
        })
        .await?;
        let report = self.core.run_cut().await;
        Ok(report)
    }
}

/// Recovery (DESIGN §7): restore each tenant's snapshot `S_t`, re-mine `(S_t, X_t]` for state
/// only, mine frames above `max(S_t, X_t)` normally (their records publish again). Every
/// `cut_every` payload bytes replayed it runs a cut, so a crash during a long recovery does not
/// start it over; a tenant still regenerating is marked in flight, so such a cut takes no
/// snapshot of a miner that is behind its frontier.
fn recover(core: &Arc<Core>, cut_every: u64, upgrading: bool) -> anyhow::Result<Recovery> {
    let mut recovery = Recovery::default();
    let intent_tenant = intents::intent_tenant();
    // Only the first recovery by this release of a WAL an earlier release wrote can replay
    // records that were put without an intent.
    let mut any_intent =
        !upgrading || core.wal.marks(&intent_tenant) != ourios_wal::Marks::default();
    // Pass 1 (RFC 0058): the publish intents, before anything is mined.
    any_intent |= read_intents(core, &intent_tenant, &mut recovery)?;
    // Each tenant's marks and snapshot.
    let regenerating = restore_tenants(core, &intent_tenant)?;
    // Pass 2: every frame, mined or re-mined for state, with cuts on the way.
    replay_frames(core, &intent_tenant, cut_every, any_intent, &mut recovery)?;
    for state in regenerating {
        // Release: pairs with the capture's Acquire; regeneration is over for every tenant
        // (nothing else mines yet: the server starts after recovery).
        state.in_flight.store(0, Ordering::Release);
    }
    Ok(recovery)
}

/// Recovery's pass 1 (RFC 0058): every intent above the horizon, before anything is mined,
/// tells the sink which replayed records rebuild which sealed unit and which are in the store
/// already. Returns whether the WAL holds any intent.
fn read_intents(
    core: &Arc<Core>,
    intent_tenant: &TenantId,
    recovery: &mut Recovery,
) -> anyhow::Result<bool> {
    let mut any_intent = false;
    for frame in core.wal.replay() {
        let frame = frame.context("reading the WAL's publish intents")?;
        if frame.tenant != *intent_tenant {
            continue;
        }
        any_intent = true;
        if frame.mode != ReplayMode::Normal {
            continue;
        }
        let intent = ourios_sinks::Intent::decode(frame.payload())
            .with_context(|| format!("publish intent at lsn {}", frame.lsn.0))?;
        let frontier = TenantId::new(intent.tenant.as_str())
            .map(|t| core.wal.marks(&t).frontier.0)
            .unwrap_or(0);
        // A unit is counted in its tenant's floor from before it is sealed until its put
        // settles: a frontier at or past any of its records means it landed.
        if intent.min_lsn() <= frontier {
            core.records.drop_landed(&intent);
            recovery.intents_landed += 1;
        } else {
            core.records.expect_sealed(&intent);
            recovery.intents_resealed += 1;
        }
        core.sealer.remember(frame.lsn, &intent);
    }
    ::metrics::counter!(metrics::RECOVERY_INTENTS, "outcome" => "landed")
        .increment(recovery.intents_landed);
    ::metrics::counter!(metrics::RECOVERY_INTENTS, "outcome" => "resealed")
        .increment(recovery.intents_resealed);
    Ok(any_intent)
}

/// Each tenant's marks and installed snapshot: `mined_through` from its marks, its miner
/// restored from the snapshot. A snapshot that does not restore is a cache miss: the frames at
/// or below its mark are still skipped (the WAL may have dropped them), so the tenant's miner
/// starts empty and learns its templates again; keys are content-addressed, so the store still
/// reads. Returns the tenants whose frames below the frontier are re-mined for state (held
/// `in_flight` until replay ends, so no cut snapshots a lagging miner).
fn restore_tenants(
    core: &Arc<Core>,
    intent_tenant: &TenantId,
) -> anyhow::Result<Vec<Arc<crate::core::TenantState>>> {
    let mut regenerating = Vec::new();
    for (tenant, marks) in core.wal.all_marks() {
        if tenant == *intent_tenant {
            continue;
        }
        let state = core.tenant(tenant.as_str());
        state
            .mined_through
            .store(marks.frontier.0.max(marks.snapshot.0), Ordering::Release);
        if marks.snapshot < marks.frontier {
            // Release: read by a cut's capture; cleared by the tenant's first mined frame
            // (`mine_batch_ordered`) or at the end of replay.
            state.in_flight.store(marks.frontier.0, Ordering::Release);
            regenerating.push(Arc::clone(&state));
        }
        if let Some(snapshot) = core.wal.read_snapshot(&tenant)? {
            let restored = TenantMiner::restore(
                tenant.as_str(),
                core.miner_config.clone(),
                Arc::clone(&core.clock),
                &snapshot.state,
            );
            match restored {
                Ok(miner) => {
                    *lock(&state.miner) = Some(miner);
                    // Relaxed: no cut runs during recovery's first steps.
                    state
                        .snapshot_through
                        .store(marks.snapshot.0, Ordering::Relaxed);
                }
                Err(e) => {
                    // A snapshot is a rebuildable cache: the miner starts empty instead.
                    tracing::warn!(
                        tenant = tenant.as_str(),
                        error = %crate::server::said(&e),
                        "snapshot not used; the tenant's miner starts empty and learns its \
                         templates again (frames at or below the snapshot's mark are not \
                         re-mined; what is in the store reads as before)"
                    );
                }
            }
        }
    }
    Ok(regenerating)
}

/// Recovery's pass 2: every frame in WAL order, skipped, re-mined for state, or mined and
/// published (records an intent names go to their sealed unit), with a cut every `cut_every`
/// bytes replayed so a crash loop still advances.
fn replay_frames(
    core: &Arc<Core>,
    intent_tenant: &TenantId,
    cut_every: u64,
    any_intent: bool,
    recovery: &mut Recovery,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Handle::current();
    let mut since_cut = 0u64;
    for frame in core.wal.replay() {
        let frame = frame.context("replaying the WAL")?;
        // Test hook (compiled out unless `failpoints`): a crash in the middle of recovery.
        fail::fail_point!("node::recovery::frame", |_| Err(anyhow::anyhow!(
            "recovery stopped by failpoint"
        )));
        if since_cut >= cut_every && recovery.mined > 0 {
            runtime.block_on(core.run_cut());
            recovery.cuts += 1;
            ::metrics::counter!(metrics::RECOVERY_CUTS).increment(1);
            since_cut = 0;
        }
        if frame.tenant == *intent_tenant {
            continue; // read by pass 1
        }
        since_cut += frame.payload().len() as u64;
        let tenant = frame.tenant.as_str().to_owned();
        let label = match frame.mode {
            ReplayMode::Skipped => "skipped",
            ReplayMode::RegenerationOnly => "regeneration_only",
            ReplayMode::Normal => "normal",
        };
        ::metrics::counter!(metrics::RECOVERY_FRAMES, "mode" => label).increment(1);
        if frame.mode == ReplayMode::Skipped {
            recovery.skipped += 1;
            continue;
        }
        let mut lines = otlp::frame_lines(frame.payload())
            .with_context(|| format!("frame {} of tenant {tenant} does not decode", frame.lsn.0))?;
        let state = core.tenant(&tenant);
        match frame.mode {
            ReplayMode::RegenerationOnly => {
                let mut slot = lock(&state.miner);
                let miner = slot.get_or_insert_with(|| core.fresh_miner(&tenant));
                for line in &lines {
                    let regenerated =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            miner.ingest_regenerate(&line.body);
                        }));
                    if regenerated.is_err() {
                        // The state is a cache and keys are content-addressed: a torn miner
                        // starts again empty, as on the live path.
                        ::metrics::counter!(metrics::MINE_PANICS).increment(1);
                        *miner = core.fresh_miner(&tenant);
                    }
                }
                recovery.regenerated += 1;
            }
            _ => {
                let _order = lock(&state.order);
                let lsn = frame.lsn;
                // Above the frontier. Records an intent names were routed by pass 1; the rest
                // were never put, unless a node of an earlier release (no intents) put them.
                if !any_intent {
                    recovery.pre_intent_records += lines.len() as u64;
                    ::metrics::counter!(
                        ourios_sinks::metrics::SINK_DUPLICATES,
                        "cause" => "pre_intent_replay"
                    )
                    .increment(lines.len() as u64);
                }
                // A miner panic here is handled as on the live path.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    core.mine_batch_ordered(
                        &tenant,
                        &state,
                        lsn,
                        &mut lines,
                        crate::core::Handoff::Pool,
                    );
                }));
                recovery.mined += 1;
            }
        }
    }
    Ok(())
}
