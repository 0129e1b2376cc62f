//! The node's shared core: the WAL, the miners, the sinks, the barrier, the coordinator and the
//! encode pool, and the two paths that touch all of them — ingest (`ingest`, then
//! `mine_batch_ordered`) and the cut (`run_cut`).

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ourios_barrier::{Barrier, PublishOutcome};
use ourios_miner::{AuditEventKind, Clock, MinerConfig, TenantMiner};
use ourios_publisher::PublishCoordinator;
use ourios_recoverable::{lock, panic_message};
use ourios_sinks::{
    Attributes, AuditEvent, AuditKind, LogRecord, RecordId, SharedParquetSink, Tenant,
};
use ourios_wal::{Lsn, Stamp, TenantId, Wal};

use crate::metrics;
use crate::otlp::{self, Line};
use crate::pool::EncodePool;

/// Why an ingest was not acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The tenant is terminal (RFC 0056): retry after the operator repaired the store and
    /// restarted the node.
    #[error(
        "tenant `{tenant}` is terminal after a permanent audit-write failure; its records are \
         kept in the WAL and the node accepts it again after a restart into a repaired store"
    )]
    TenantTerminal {
        /// The tenant.
        tenant: String,
    },
    /// The WAL refused the append (it failed a sync earlier, or the frame is invalid).
    #[error("write-ahead log refused the request")]
    Wal(#[from] ourios_wal::AppendError),
    /// The tenant name is not valid for the WAL.
    #[error("invalid tenant: {0}")]
    InvalidTenant(String),
    /// The node is shutting down.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// The record buffer holds its ceiling of publishable bytes (the store is slow or failing):
    /// nothing is written; retry once publishes have drained it.
    #[error(
        "the record buffer is at its ceiling of {ceiling} bytes (buffer_ceiling_bytes) while \
         publishes catch up; nothing was written: retry later"
    )]
    BufferFull {
        /// The configured ceiling.
        ceiling: usize,
    },
    /// The request names a tenant the node does not serve yet, and it serves its limit.
    #[error(
        "tenant `{tenant}` would be tenant number {}, above the node's limit of {limit} \
         (max_tenants)", limit + 1
    )]
    TooManyTenants {
        /// The refused tenant.
        tenant: String,
        /// The configured limit.
        limit: usize,
    },
}

/// Per-tenant ingest state.
#[derive(Debug, Default)]
pub(crate) struct TenantState {
    /// Serialises a tenant's WAL submit with taking its turn in `turns` (and recovery's
    /// mining), so turns follow lsn order. Never held across the wait for durability: a
    /// tenant's concurrent requests share one group commit.
    pub(crate) order: Mutex<()>,
    /// A tenant's frames are mined one at a time in lsn order: each request waits for its
    /// frame to be durable, then for its turn.
    pub(crate) turns: ourios_wal::Turnstile,
    /// The tenant's miner (`None` until its first line or restore). Its lock is per tenant: a
    /// cut's capture takes it for one tenant at a time, so encoding one tenant's snapshot never
    /// stops another tenant's mining.
    pub(crate) miner: Mutex<Option<TenantMiner>>,
    /// Every frame of the tenant with lsn <= this was mined and submitted (tagged with an
    /// epoch before this was stored). Stored after the miner's lock is released, before
    /// `in_flight` is cleared; read by the cut's capture under the miner's lock.
    pub(crate) mined_through: AtomicU64,
    /// The audit-sink seq of the newest event of this tenant (records' watermark). Written
    /// under the miner's lock.
    pub(crate) watermark: AtomicU64,
    /// The lsn of the frame being mined and submitted (0 = none). Set under the miner's lock
    /// before mining starts, cleared after `mined_through` moves: a capture that sees it set
    /// takes no snapshot for the tenant (the miner state would be ahead of `mined_through`).
    pub(crate) in_flight: AtomicU64,
    /// The `mined_through` of the tenant's installed snapshot: a capture with nothing mined
    /// since encodes no new one.
    pub(crate) snapshot_through: AtomicU64,
}

/// One tenant as a cut captured it (step 1), before the epoch advanced.
#[derive(Debug)]
struct Captured {
    tenant: String,
    /// Every frame of the tenant with lsn <= this was mined and submitted.
    through: u64,
    /// Its miner's snapshot, if it mined since the installed one and was not mid-frame.
    snapshot: Option<Vec<u8>>,
    /// The seq of its newest audit event: the snapshot is installed only once it is durable.
    watermark: u64,
}

/// Everything the paths share. Cheap to clone behind an `Arc`.
#[derive(Debug)]
pub struct Core {
    pub(crate) wal: Arc<Wal>,
    /// What every tenant's miner is created with.
    pub(crate) miner_config: MinerConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) records: SharedParquetSink,
    pub(crate) barrier: Arc<Barrier>,
    pub(crate) coordinator: PublishCoordinator,
    pub(crate) pool: Option<EncodePool>,
    /// Requests whose canonical bytes are at most this are ingested in place
    /// (`Config::inline_ingest_bytes`, see `Core::ingest`).
    pub(crate) inline_ingest_bytes: usize,
    pub(crate) tenants: Mutex<BTreeMap<String, Arc<TenantState>>>,
    /// New tenants are refused past this many (recovered tenants count, and are never refused).
    pub(crate) max_tenants: usize,
    pub(crate) shutting_down: std::sync::atomic::AtomicBool,
    /// Appends publish intents and tracks the intent horizon (RFC 0058).
    pub(crate) sealer: Arc<crate::intents::WalSealer>,
    /// Leads the WAL's commits for requests that wait for durability without a thread
    /// ([`Core::ingest`]'s small requests). Stopped and joined when the core is dropped.
    pub(crate) _commit_thread: ourios_wal::CommitThread,
    /// Counted for every request: registered once (with the recorder installed before the core
    /// is built), not looked up by name per request.
    pub(crate) ingest_metrics: IngestMetrics,
}

/// The handles [`Core::ingest`] records every acknowledged request into.
#[derive(Debug)]
pub(crate) struct IngestMetrics {
    requests: ::metrics::Counter,
    records: ::metrics::Counter,
    ack_seconds: ::metrics::Histogram,
}

impl IngestMetrics {
    pub(crate) fn register() -> Self {
        Self {
            requests: ::metrics::counter!(metrics::INGEST_REQUESTS),
            records: ::metrics::counter!(metrics::INGEST_RECORDS),
            ack_seconds: ::metrics::histogram!(metrics::INGEST_ACK_SECONDS),
        }
    }
}

/// Holds a tenant's frontier below a submitted frame when dropped armed: the frame may be
/// durable but was not mined. Disarmed once the frame is mined, or known not durable.
struct HoldUnlessMined<'a> {
    wal: &'a Wal,
    tenant: &'a TenantId,
    lsn: Lsn,
    armed: bool,
}

impl HoldUnlessMined<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for HoldUnlessMined<'_> {
    fn drop(&mut self) {
        if self.armed {
            // The WAL exports the hold (`ourios.wal.tenant_hold`).
            let _ = self.wal.hold(self.tenant, self.lsn);
            tracing::warn!(
                tenant = %self.tenant.as_str(),
                lsn = self.lsn.0,
                "a request was dropped before its frame was mined; the frame is held and \
                 re-mined on restart"
            );
        }
    }
}

/// Where [`Core::mine_batch_ordered`] hands a frame's mined records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handoff {
    /// Each record to the sink as it is mined, on the mining thread (`pool::hand_off`): a small
    /// request mined on the async worker that received it, which then costs no thread hand-off.
    InPlace,
    /// The frame's records as one batch to the encode pool, or in place when there is none.
    Pool,
}

/// What a cut did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CutReport {
    /// The cut's epoch.
    pub epoch: u32,
    /// `all_ok(E)`: no publish tagged <= E failed or panicked.
    pub prior_ok: bool,
    /// When `prior_ok` is false and every failure is attributed: the tenants whose failed
    /// publishes hold them back (the others may stamp). Empty with `prior_ok` false: every
    /// tenant is held back.
    pub held_back: Vec<String>,
    /// The cut's own drain was durable for every non-terminal tenant.
    pub cut_ok: bool,
    /// Tenants whose frontier was stamped, with the frontier.
    pub stamped: BTreeMap<String, u64>,
    /// Tenants not stamped (terminal, not durable, or the verdict failed).
    pub not_stamped: Vec<String>,
    /// The latch was cleared against the captured word.
    pub latch_cleared: bool,
    /// Records published by the cut's own drain.
    pub published_records: usize,
    /// WAL segments deleted afterwards.
    pub segments_deleted: usize,
}

impl Core {
    /// The WAL.
    pub fn wal(&self) -> &Arc<Wal> {
        &self.wal
    }

    /// The record sink (its `audit()` is the audit sink).
    pub fn records(&self) -> &SharedParquetSink {
        &self.records
    }

    /// The barrier (epochs, latch).
    pub fn barrier(&self) -> &Arc<Barrier> {
        &self.barrier
    }

    /// The publish coordinator.
    pub fn coordinator(&self) -> &PublishCoordinator {
        &self.coordinator
    }

    /// A new, empty miner for `tenant`.
    pub(crate) fn fresh_miner(&self, tenant: &str) -> TenantMiner {
        TenantMiner::new(tenant, self.miner_config.clone(), Arc::clone(&self.clock))
    }

    pub(crate) fn tenant(&self, tenant: &str) -> Arc<TenantState> {
        let mut map = lock(&self.tenants);
        Arc::clone(map.entry(tenant.to_owned()).or_default())
    }

    /// Whether `tenant` is terminal (RFC 0056).
    pub fn is_terminal(&self, tenant: &str) -> bool {
        self.records.is_terminal(&Tenant::new(tenant))
    }

    /// The ingest path: refuse a terminal tenant, append the canonical request to the WAL
    /// (group commit, shared with the tenant's other requests in flight), then, in the
    /// tenant's lsn order, `mine_batch_ordered`. Returns the frame's lsn once it is durable.
    /// A miner panic after the append still acknowledges: the frame is durable and held.
    ///
    /// A request of at most `inline_ingest_bytes` canonical bytes is ingested on the async
    /// worker that received it: it awaits durability and its turn, is mined in place and its
    /// records go to the sink from there (`Handoff::InPlace`), so it costs no thread
    /// hand-off. A larger one goes to the blocking pool, whose threads can mine for
    /// milliseconds without stalling the runtime's workers, and its records to the encode
    /// workers, so its acknowledgement does not wait for their append.
    pub async fn ingest(
        self: &Arc<Self>,
        tenant_id: &TenantId,
        mut canonical: Vec<u8>,
        mut lines: Vec<otlp::Line>,
    ) -> Result<Lsn, IngestError> {
        let started = Instant::now();
        let tenant = tenant_id.as_str();
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(IngestError::ShuttingDown);
        }
        if tenant == crate::intents::INTENT_TENANT {
            return Err(IngestError::InvalidTenant(format!(
                "tenant `{tenant}` is reserved for the node's publish intents"
            )));
        }
        if self.is_terminal(tenant) {
            return Err(IngestError::TenantTerminal {
                tenant: tenant.to_owned(),
            });
        }
        if self.records.over_ceiling() {
            // Push back before the WAL: the client retries, nothing is written twice.
            ::metrics::counter!(metrics::INGEST_PUSHED_BACK).increment(1);
            return Err(IngestError::BufferFull {
                ceiling: self.records.config().ceiling_bytes,
            });
        }
        {
            let mut tenants = lock(&self.tenants);
            if !tenants.contains_key(tenant) {
                if tenants.len() >= self.max_tenants {
                    ::metrics::counter!(metrics::TENANTS_REFUSED).increment(1);
                    return Err(IngestError::TooManyTenants {
                        tenant: tenant.to_owned(),
                        limit: self.max_tenants,
                    });
                }
                // Admitted under the same lock that counted, so concurrent new tenants cannot
                // all pass the check.
                tenants.insert(tenant.to_owned(), Arc::default());
            }
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_nanos()).unwrap_or(1));
        if lines.iter().any(otlp::needs_receive_time) {
            // Rare (a client that sets no time at all), so the request is decoded again whole
            // to be stamped and encoded.
            let mut request = otlp::decode_frame(&canonical)
                .expect("canonical bytes are protobuf that decoded once already");
            if otlp::stamp_receive_time(&mut request, now) {
                ::metrics::counter!(metrics::TIME_SUBSTITUTED, "reason" => "receive_time")
                    .increment(1);
                canonical = prost::Message::encode_to_vec(&request);
                lines = otlp::into_lines(request);
            }
        }
        let core = Arc::clone(self);
        let tenant = tenant.to_owned();
        let tid = tenant_id.clone();
        // A request waiting for its frame's turn holds its lines and (until the WAL has them)
        // its canonical bytes, not a third copy.
        let n = lines.len() as u64;
        // In place only on a multi-thread runtime: a wait there (a full publisher queue behind
        // a detached partition) can hand the worker's other tasks on (`pool::may_block`); a
        // current-thread runtime has no other thread to hand them to.
        let in_place = core.pool.is_some()
            && canonical.len() <= core.inline_ingest_bytes
            && tokio::runtime::Handle::current().runtime_flavor()
                == tokio::runtime::RuntimeFlavor::MultiThread;
        let joined = if in_place {
            // Spawned rather than awaited here: once the frame is submitted it is mined even if
            // the client goes away and this future is dropped.
            tokio::spawn(async move { core.ingest_in_place(&tid, canonical, &mut lines).await })
                .await
        } else {
            // The WAL's group commit and the miner are blocking: run both off the async workers.
            tokio::task::spawn_blocking(move || {
                let state = core.tenant(&tenant);
                let (lsn, ticket) = core.submit_in_order(&state, &tid, &canonical)?;
                drop(canonical); // the WAL holds its own copy until the commit
                // Not under the order lock: the tenant's next requests join this group commit.
                // A failure drops the ticket, giving the turn up.
                core.wal.wait_durable(lsn)?;
                // The promise starts here: the frame is durable. It is mined after every
                // earlier frame of the tenant (their tickets were taken first), before any
                // later one.
                let _turn = ticket.wait();
                core.mine_acknowledged(&tenant, &state, lsn, &mut lines, Handoff::Pool);
                Ok::<Lsn, IngestError>(lsn)
            })
            .await
        };
        let lsn = match joined {
            Ok(result) => result?,
            // Cancelled: the runtime is shutting down.
            Err(_) => return Err(IngestError::ShuttingDown),
        };
        let counted = &self.ingest_metrics;
        counted.requests.increment(1);
        counted.records.increment(n);
        counted.ack_seconds.record(started.elapsed().as_secs_f64());
        Ok(lsn)
    }

    /// The ingest path of a small request, on an async worker: the same steps as the blocking
    /// path, awaiting durability (the WAL's commit thread leads the commit) and the turn
    /// instead of parking a thread, then mining in place.
    ///
    /// If the task is dropped between the submit and mining (the runtime shutting down), the
    /// frame may be durable yet unmined while the tenant's later frames are mined: the tenant's
    /// frontier is then held below it, so no cut stamps past it and a restart re-mines it.
    async fn ingest_in_place(
        &self,
        tid: &TenantId,
        canonical: Vec<u8>,
        lines: &mut [Line],
    ) -> Result<Lsn, IngestError> {
        let state = self.tenant(tid.as_str());
        let (lsn, ticket) = self.submit_in_order(&state, tid, &canonical)?;
        drop(canonical);
        let unmined = HoldUnlessMined {
            wal: &self.wal,
            tenant: tid,
            lsn,
            armed: true,
        };
        if let Err(e) = self.wal.durable(lsn).await {
            // Not durable: nothing to re-mine. The ticket gives the turn up.
            unmined.disarm();
            return Err(e.into());
        }
        let _turn = ticket.passed().await;
        unmined.disarm();
        self.mine_acknowledged(tid.as_str(), &state, lsn, lines, Handoff::InPlace);
        Ok(lsn)
    }

    /// Queues the frame in the WAL and takes its turn, both under the tenant's order lock, so
    /// turns follow lsn order. The frame is not durable yet.
    fn submit_in_order<'s>(
        &self,
        state: &'s TenantState,
        tid: &TenantId,
        canonical: &[u8],
    ) -> Result<(Lsn, ourios_wal::Ticket<'s>), ourios_wal::AppendError> {
        let _order = lock(&state.order);
        let lsn = self.wal.submit(tid, canonical)?;
        Ok((lsn, state.turns.take()))
    }

    /// Mines a durable frame in its turn. A miner panic on a line is handled inside (the line
    /// kept whole); one that escapes has handed the prefix to the sink and held the frame when
    /// it reaches this catch. The request is acknowledged all the same (a retry would
    /// duplicate a durable frame).
    fn mine_acknowledged(
        &self,
        tenant: &str,
        state: &TenantState,
        lsn: Lsn,
        lines: &mut [Line],
        handoff: Handoff,
    ) {
        let mined = catch_unwind(AssertUnwindSafe(|| {
            self.mine_batch_ordered(tenant, state, lsn, lines, handoff);
        }));
        if mined.is_err() {
            tracing::error!(
                %tenant,
                lsn = lsn.0,
                "mining the frame panicked; the frame is held and re-mined on restart"
            );
        }
    }

    /// Mines one frame's lines in order and hands the records on (RFC 0054 §9.5).
    ///
    /// One loop for both branches and one unwind arm: handed to the pool, the mined records
    /// are collected and submitted as one batch; in place (or without a pool), each record is
    /// appended to the sink as it is mined.
    ///
    /// A miner panic on one line costs that line its template and nothing else: the tenant's
    /// miner, whose state the panic may have torn, starts again empty (template keys are
    /// content-addressed, so every record still joins its text); the line is kept whole under
    /// the overflow template with a `record_quarantined` event naming the panic; mining goes on
    /// with the next line. Only a panic in handing a record on (outside the miner) escapes; then
    /// the mined prefix reaches the sink *before* the panic resumes, and the frame's unhanded
    /// suffix (which now exists only in the WAL) puts a hold on the tenant's frontier just below
    /// the frame, so no cut stamps past it; a restart re-mines it.
    ///
    /// Each line's severity text and attributes move into its record (`lines` keeps the rest):
    /// a record is built once per line, so nothing is moved twice.
    pub(crate) fn mine_batch_ordered(
        &self,
        tenant: &str,
        state: &TenantState,
        lsn: Lsn,
        lines: &mut [Line],
        handoff: Handoff,
    ) {
        let mut owned: Vec<Owned> = lines.iter_mut().map(Owned::take).collect();
        let lines: &[Line] = lines;
        // Tag the batch before mining: every record of this frame is covered by a guard whose
        // epoch a cut's quiesce waits for (RFC 0052 §3.1).
        let guard = self.barrier.enter_encode();
        let inline = handoff == Handoff::InPlace || self.pool.is_none();
        let mut out: Vec<LogRecord> = Vec::with_capacity(if inline { 0 } else { lines.len() });
        let sink_tenant = Tenant::new(tenant);
        let result = {
            let mut slot = lock(&state.miner);
            let miner = slot.get_or_insert_with(|| self.fresh_miner(tenant));
            // Relaxed: read by the capture under the same miner's lock.
            state.in_flight.store(lsn.0, Ordering::Relaxed);
            // The index of the next line to hand on, and whether a record is being handed on
            // (a panic then is not the miner's: the record is the sink's already).
            let index = std::cell::Cell::new(0u32);
            let handing = std::cell::Cell::new(false);
            // Hands one mined line on: its event to the audit sink, its record to the sink or
            // the batch. The index moves once the record is built, before the handoff: a
            // record `append` took is the sink's even if a trigger after it panics.
            let mut take = |mined: ourios_miner::Mined| {
                if let Some(event) = mined.event {
                    if matches!(event.kind, AuditEventKind::TemplateDefined { .. }) {
                        // The key was defined before this process (a snapshot or
                        // regeneration rebuilt its template): most likely the store has
                        // this row already, byte for byte.
                        ::metrics::counter!(
                            ourios_sinks::metrics::SINK_DUPLICATES,
                            "cause" => "audit_replay"
                        )
                        .increment(1);
                    }
                    let seq = self.records.audit().emit(audit_event(event));
                    // Relaxed: written under the miner's lock (and the tenant's turn); read
                    // under it too.
                    state.watermark.store(seq, Ordering::Relaxed);
                }
                if mined.record.template_id == 0 {
                    ::metrics::counter!(metrics::TEMPLATE_OVERFLOW).increment(1);
                }
                let i = index.get();
                let record = log_record(
                    self.wal.id().0,
                    &sink_tenant,
                    RecordId {
                        lsn: lsn.0,
                        index: i,
                    },
                    &lines[i as usize],
                    std::mem::take(&mut owned[i as usize]),
                    mined.record,
                    state.watermark.load(Ordering::Relaxed),
                );
                index.set(i + 1);
                if inline {
                    handing.set(true);
                    crate::pool::hand_off(&self.records, &self.coordinator, record, &guard);
                    handing.set(false);
                } else {
                    out.push(record);
                }
            };
            let result = catch_unwind(AssertUnwindSafe(|| {
                loop {
                    let start = index.get() as usize;
                    let mined = catch_unwind(AssertUnwindSafe(|| {
                        let bodies = lines[start..].iter().map(|l| l.body.as_str());
                        miner.ingest_mined(bodies, &mut |mined| {
                            // Test hook (compiled out unless `failpoints`): a miner panic.
                            fail::fail_point!("node::mine::record", |_| panic!(
                                "miner panic injected by failpoint"
                            ));
                            take(mined);
                        });
                    }));
                    let Err(panic) = mined else { return };
                    ::metrics::counter!(metrics::MINE_PANICS).increment(1);
                    if handing.replace(false) {
                        // A trigger after `append` panicked (RFC 0054 guards what it detached);
                        // the miner finished its line: go on with the next.
                        continue;
                    }
                    // The line at `index` was not handed on, and the miner may be torn.
                    *miner = self.fresh_miner(tenant);
                    let i = index.get();
                    let Some(line) = lines.get(i as usize) else {
                        return; // the panic followed the last handoff
                    };
                    let why = format!("miner panicked: {}", panic_message(panic.as_ref()));
                    tracing::error!(
                        %tenant,
                        lsn = lsn.0,
                        index = i,
                        "{why}; the line is kept whole and the tenant's miner starts afresh"
                    );
                    self.quarantine_event(
                        &sink_tenant,
                        RecordId {
                            lsn: lsn.0,
                            index: i,
                        },
                        why,
                    );
                    take(ourios_miner::Mined::whole(
                        tenant,
                        &line.body,
                        self.clock.now_unix_nanos(),
                    ));
                }
            }));
            if result.is_err() {
                // The panic may have struck between the miner handing out an event and the
                // audit sink taking it: the tenant's next record of each key defines it again.
                miner.forget_definitions();
            }
            result
        };
        // The one unwind arm: the prefix goes to the sink first, whatever happened.
        // (Only the pool branch collects into `out`; the inline branch handed each record off.)
        match &self.pool {
            Some(pool) if !out.is_empty() => pool.submit(out, guard),
            _ => drop(guard),
        }
        match result {
            Ok(()) => {
                // Release: pairs with the cut's Acquire load; the submit above happened first.
                state.mined_through.store(lsn.0, Ordering::Release);
                state.in_flight.store(0, Ordering::Release);
            }
            Err(panic) => {
                // Keeping a line whole panicked too. The frame stays in flight for the
                // capture: the miner state holds its prefix, which no snapshot may claim (the
                // hold keeps the frontier below it anyway).
                if let Ok(tid) = TenantId::new(tenant) {
                    // The WAL exports the hold (`ourios.wal.tenant_hold`).
                    let _ = self.wal.hold(&tid, lsn);
                }
                resume_unwind(panic);
            }
        }
    }

    /// Emits the `record_quarantined` event of a line its miner panicked on. The line itself is
    /// stored whole; the event is the operator's pointer to it and to the reason.
    fn quarantine_event(&self, tenant: &Tenant, record_id: RecordId, error: String) {
        ::metrics::counter!(ourios_sinks::metrics::SINK_QUARANTINED, "error.type" => "miner_panic")
            .increment(1);
        let _ = self.records.audit().emit(AuditEvent {
            tenant: tenant.clone(),
            timestamp_unix_nanos: self.clock.now_unix_nanos(),
            kind: AuditKind::RecordQuarantined {
                record_id,
                partition_key: format!("tenant={tenant}/kept_whole"),
                error,
            },
        });
    }

    /// A barrier cut (RFC 0052 §3 as amended by RFC 0054): capture, quiesce, drain and write,
    /// then stamp each healthy tenant whose data is durable when `all_ok(E)`, clear the latch
    /// against the captured word, and truncate the WAL. Never skips because the latch is set.
    pub async fn run_cut(self: &Arc<Self>) -> CutReport {
        // 0. Absorb the failures of publishes that settled before this cut.
        self.absorb_settled_failures().await;

        // 1. Capture, before the epoch advances: every frame <= mined_through was tagged with
        //    an epoch <= the one begin_cut returns. The snapshot is taken at the same point.
        //    The audit watermark is taken with them: every template event the snapshot holds
        //    has a seq <= it, and the snapshot may be installed only once they are all durable
        //    (recovery never re-emits events for templates a snapshot already holds).
        //    Tenant by tenant, each under its own miner's lock (the tenants' map is only
        //    copied): a snapshot is encoded only for a tenant that mined since its installed
        //    one, and encoding it stops no other tenant.
        //    Off the async workers: encoding a snapshot can take a while, and a tenant's miner
        //    lock may be held by a blocking ingest. A panic in it is the cut's own, resumed.
        let core = Arc::clone(self);
        let captured = tokio::task::spawn_blocking(move || core.capture())
            .await
            .unwrap_or_else(|e| resume_unwind(e.into_panic()));
        let cut = self.barrier.begin_cut();
        let epoch = cut.epoch();
        let barrier = Arc::clone(&self.barrier);
        let (cut, verdict) = tokio::task::spawn_blocking(move || {
            barrier.quiesce_encodes(&cut);
            let verdict = barrier.quiesce_publishes(&cut);
            (cut, verdict)
        })
        .await
        .expect("quiesce does not panic");
        let prior_ok = verdict.all_ok(epoch);
        // Per tenant (RFC 0059.15): when every failure the verdict consumed was recorded with
        // its tenants (none panicked, none unrecorded), only those tenants are held back;
        // otherwise every tenant is, as `prior_ok` alone says.
        let failed = self.coordinator.failures().take_through(epoch);
        let attributed = !verdict.is_stale()
            && !failed.unattributed
            && verdict.panicked_publishes() == 0
            && failed.recorded >= verdict.failed_publishes();
        let prior_ok_for = |t: &Tenant| prior_ok || (attributed && !failed.tenants.contains(t));

        // 2. The cut's own drain, in order.
        let mut drained = self.coordinator.drain_all();
        let written = self.coordinator.write_ordered(&mut drained).await;
        fail::fail_point!("node::cut::before_stamp", |_| panic!(
            "cut panic injected by failpoint"
        ));
        let cut_ok = written.tenants.iter().all(|(t, v)| {
            *v == ourios_publisher::TenantVerdict::Durable || self.records.is_terminal(t)
        });
        let guard = drained.finish();
        record_failures(&self.coordinator, guard.epoch(), &written);
        guard.complete(if written.all_durable() {
            PublishOutcome::Durable
        } else {
            PublishOutcome::Requeued
        });

        // 3. Stamp per tenant.
        let mut report = CutReport {
            epoch,
            prior_ok,
            held_back: if prior_ok || !attributed {
                Vec::new()
            } else {
                failed
                    .tenants
                    .iter()
                    .map(|t| t.as_str().to_owned())
                    .collect()
            },
            cut_ok,
            published_records: written.published_records,
            ..Default::default()
        };
        let mut stamps: Vec<(TenantId, u64, Option<Vec<u8>>)> = Vec::new();
        for Captured {
            tenant,
            through,
            snapshot,
            watermark,
        } in captured
        {
            let t = Tenant::new(&tenant);
            // The template events behind the snapshot, wherever they are (a sweep or the
            // publisher thread that began after this cut may hold them): not durable yet means
            // no snapshot; the records that depend on them keep the frontier below anyway.
            let snapshot =
                snapshot.filter(|_| self.records.audit().is_durable_through(&t, watermark));
            // I4: never past a record of this tenant that is not durable yet, wherever it is
            // (buffered, drained by a concurrent sweep, queued for the publisher, quarantined).
            let (frontier, snapshot) = match self.records.unpublished_floor(&t) {
                Some(floor) if floor <= through => (floor - 1, None),
                _ => (through, snapshot),
            };
            if frontier == 0 {
                continue; // nothing of this tenant was mined yet: nothing to stamp
            }
            let ok = prior_ok_for(&t) && written.is_durable(&t) && !self.records.is_terminal(&t);
            match (ok, TenantId::new(&tenant)) {
                (true, Ok(tid)) => stamps.push((tid, frontier, snapshot)),
                _ => report.not_stamped.push(tenant),
            }
        }
        self.stamp_frontiers(epoch, stamps, &mut report).await;

        // 3b. Move the intent horizon past every intent whose records are now all at or below
        //     their tenants' frontiers (RFC 0058), after those frontiers are durable.
        self.stamp_intent_horizon().await;

        // 4. Clear the latch only when this cut stamped having drained everything it covers.
        if prior_ok
            && cut_ok
            && report
                .not_stamped
                .iter()
                .all(|t| self.records.is_terminal(&Tenant::new(t)))
        {
            report.latch_cleared = matches!(
                self.barrier.latch().clear(cut.latch_word()),
                ourios_barrier::Cleared::Cleared
            );
        }
        let result = if report.not_stamped.is_empty() {
            "stamped"
        } else if report.stamped.is_empty() {
            "not_stamped"
        } else {
            "partial"
        };
        ::metrics::counter!(metrics::CUTS, "result" => result).increment(1);
        self.export_barrier_state();

        // 5. Truncate what every tenant has passed.
        let wal = Arc::clone(&self.wal);
        if let Ok(Ok(t)) = tokio::task::spawn_blocking(move || wal.truncate()).await {
            report.segments_deleted = t.deleted.len();
        }
        drop(cut);
        report
    }

    /// Step 0 of a cut: absorb the failures of publishes that settled before it (RFC 0054
    /// §9.6). A failed or panicked publish requeues its records before it settles, so they are
    /// in the buffers before the capture and the cut's own drain takes them: they must not fail
    /// the cut, or a recovered panic would hold every frontier (and the latch) for one extra
    /// period. The barrier hands each failure to the first verdict whose epoch covers it, so a
    /// verdict taken now, before the capture, absorbs the settled ones (waiting for publishes of
    /// earlier epochs still in flight); only a publish that settles after the capture fails the
    /// cut's `all_ok(E)`.
    ///
    /// (`Barrier::absorb_settled` advances the epoch too, to bound its wait: a cut advances it
    /// twice.)
    async fn absorb_settled_failures(&self) {
        let barrier = Arc::clone(&self.barrier);
        let settled_epoch = tokio::task::spawn_blocking(move || barrier.absorb_settled())
            .await
            .expect("absorbing does not panic");
        // The failures that verdict absorbed are not this cut's either (RFC 0059.15).
        let _ = self.coordinator.failures().take_through(settled_epoch);
    }

    /// Step 1 of a cut: each tenant's `mined_through`, a snapshot of its miner if it mined
    /// since its installed one (and is not mid-frame), and its audit watermark, tenant by
    /// tenant under that tenant's miner lock (the tenants' map is only copied).
    fn capture(&self) -> Vec<Captured> {
        let states: Vec<(String, Arc<TenantState>)> = lock(&self.tenants)
            .iter()
            .map(|(t, s)| (t.clone(), Arc::clone(s)))
            .collect();
        states
            .into_iter()
            .map(|(t, s)| {
                let miner = lock(&s.miner);
                // `in_flight` first, Acquire: seen clear, it pairs with the Release that
                // cleared it after `mined_through` moved, so the load below sees that frame
                // (read the other way round, a frame ending between the loads would have its
                // miner state claimed by an older lsn). No frame starts meanwhile: that needs
                // the lock held here.
                let mid_frame = s.in_flight.load(Ordering::Acquire) != 0;
                let through = s.mined_through.load(Ordering::Acquire);
                // Relaxed: only cuts (one at a time) read and write it.
                let changed = through != s.snapshot_through.load(Ordering::Relaxed);
                let snapshot = (!mid_frame && changed).then(|| {
                    // Test hook (compiled out unless `failpoints`): a long encode.
                    fail::fail_point!("node::cut::snapshot");
                    ::metrics::counter!(metrics::SNAPSHOTS_ENCODED).increment(1);
                    match miner.as_ref() {
                        Some(m) => m.snapshot(),
                        None => self.fresh_miner(&t).snapshot(),
                    }
                });
                // Relaxed: written under the miner's lock, which is held here.
                let watermark = s.watermark.load(Ordering::Relaxed);
                Captured {
                    tenant: t,
                    through,
                    snapshot,
                    watermark,
                }
            })
            .collect()
    }

    /// Step 3 of a cut: stamps `stamps` (frontier and snapshot per tenant) in one WAL call
    /// and records in `report` where each frontier now stands; a failed stamp stamps nothing
    /// and is counted.
    async fn stamp_frontiers(
        &self,
        epoch: u32,
        stamps: Vec<(TenantId, u64, Option<Vec<u8>>)>,
        report: &mut CutReport,
    ) {
        if stamps.is_empty() {
            return;
        }
        let wal = Arc::clone(&self.wal);
        let outcomes = tokio::task::spawn_blocking(move || {
            let s: Vec<Stamp<'_>> = stamps
                .iter()
                .map(|(t, x, snap)| Stamp {
                    tenant: t,
                    frontier: Lsn(*x),
                    snapshot: snap.as_deref(),
                })
                .collect();
            wal.stamp(&s)
        })
        .await
        .expect("stamp does not panic");
        match outcomes {
            Ok(outcomes) => {
                for o in outcomes {
                    match o.snapshot {
                        ourios_wal::SnapshotOutcome::Installed { lsn: at }
                        | ourios_wal::SnapshotOutcome::Stale { current: at } => {
                            // Relaxed: only cuts read and write it.
                            self.tenant(o.tenant.as_str())
                                .snapshot_through
                                .store(at.0, Ordering::Relaxed);
                        }
                        _ => {}
                    }
                    let to = match o.frontier {
                        ourios_wal::FrontierOutcome::Advanced { to, .. } => to.0,
                        ourios_wal::FrontierOutcome::Held { to, .. } => to.0,
                        ourios_wal::FrontierOutcome::Unchanged { current } => current.0,
                    };
                    report.stamped.insert(o.tenant.as_str().to_owned(), to);
                }
            }
            Err(e) => {
                ::metrics::counter!(ourios_sinks::metrics::FLUSH_ERRORS, "error.type" => "stamp")
                    .increment(1);
                tracing::error!(epoch, error = %crate::server::said(&e), "stamping the cut's frontiers failed");
            }
        }
    }

    /// Stamps the intent tenant's frontier (and an empty snapshot at the same lsn, so
    /// truncation, which needs both, may pass it) at the horizon the sealer computes.
    async fn stamp_intent_horizon(&self) {
        let tenant = crate::intents::intent_tenant();
        let wal = &self.wal;
        // Every tenant's frontier read once, not once per live intent.
        let frontiers: BTreeMap<String, u64> = wal
            .all_marks()
            .into_iter()
            .map(|(t, m)| (t.as_str().to_owned(), m.frontier.0))
            .collect();
        let horizon = self
            .sealer
            .horizon(|t| frontiers.get(t).copied().unwrap_or(0));
        ::metrics::gauge!(metrics::INTENTS_LIVE).set(self.sealer.live_intents() as f64);
        let Some(horizon) = horizon else { return };
        if horizon <= wal.marks(&tenant).frontier {
            return;
        }
        let wal = Arc::clone(&self.wal);
        let stamped = tokio::task::spawn_blocking(move || {
            wal.stamp(&[Stamp {
                tenant: &tenant,
                frontier: horizon,
                snapshot: Some(&[]),
            }])
        })
        .await;
        if let Ok(Err(e)) = stamped {
            ::metrics::counter!(ourios_sinks::metrics::FLUSH_ERRORS, "error.type" => "stamp")
                .increment(1);
            tracing::error!(error = %crate::server::said(&e), "stamping the intent horizon failed");
        }
    }

    pub(crate) fn export_barrier_state(&self) {
        let word = self.barrier.latch().capture();
        ::metrics::gauge!(metrics::LATCH_FAILED_EPOCH).set(f64::from(word.epoch()));
        ::metrics::gauge!(metrics::LATCH_GENERATION).set(f64::from(word.generation()));
        ::metrics::gauge!(metrics::BARRIER_EPOCH).set(f64::from(self.barrier.barrier_epoch()));
    }
}

/// Records the tenants a sweep's or cut's drain did not make durable, under its guard's epoch,
/// before the guard settles (RFC 0059.15).
pub(crate) fn record_failures(
    coordinator: &PublishCoordinator,
    epoch: u32,
    written: &ourios_publisher::WriteVerdict,
) {
    if !written.all_durable() {
        let failed = written
            .tenants
            .iter()
            .filter(|(_, v)| **v != ourios_publisher::TenantVerdict::Durable)
            .map(|(t, _)| t.clone());
        coordinator.failures().record(epoch, failed);
    }
}

/// The miner's audit event as the sink stores it.
pub(crate) fn audit_event(event: ourios_miner::AuditEvent) -> AuditEvent {
    let kind = match event.kind {
        AuditEventKind::TemplateCreated {
            template_key,
            template_id,
            version,
            template,
        } => AuditKind::TemplateCreated {
            template_key: template_key.0,
            template_id,
            version,
            template,
        },
        AuditEventKind::TemplateDefined {
            template_key,
            template_id,
            version,
            template,
        } => AuditKind::TemplateDefined {
            template_key: template_key.0,
            template_id,
            version,
            template,
        },
        AuditEventKind::TemplateWidened {
            template_key,
            template_id,
            old_version,
            new_version,
            old_template,
            new_template,
        } => AuditKind::TemplateWidened {
            template_key: template_key.0,
            template_id,
            old_version,
            new_version,
            old_template,
            new_template,
        },
    };
    AuditEvent {
        tenant: Tenant::new(event.tenant),
        timestamp_unix_nanos: event.timestamp_unix_nanos,
        kind,
    }
}

/// A line's strings that move into its record: taken out of the line before mining, so the
/// miner can read the lines' bodies while each record takes its own. Between the take and the
/// record `log_record` only appends and counts (`place_in_time`), so a miner panic's
/// keep-the-line-whole path never rebuilds a line whose strings are gone: a line whose record
/// was built is past `index`.
#[derive(Debug, Default)]
pub(crate) struct Owned {
    severity_text: String,
    attributes: Attributes,
}

impl Owned {
    fn take(line: &mut Line) -> Owned {
        Owned {
            severity_text: std::mem::take(&mut line.severity_text),
            attributes: std::mem::take(&mut line.attributes),
        }
    }
}

/// A mined line's parameters as its record holds them: their text copied once into a buffer of
/// its exact size, so the record costs two allocations for them, not one per value.
fn record_params(mined: &ourios_miner::Params) -> ourios_sinks::Params {
    let mut out = ourios_sinks::Params::with_capacity(mined.len(), mined.text_len());
    out.extend(mined);
    out
}

pub(crate) fn log_record(
    wal_id: [u8; 16],
    tenant: &Tenant,
    id: RecordId,
    line: &Line,
    owned: Owned,
    mined: ourios_miner::MinedRecord,
    watermark: u64,
) -> LogRecord {
    // OTel: a record is placed by its time, else its observed time (the ingest path gave a
    // record with neither the receive time as observed time, before the WAL). A value the
    // store cannot hold is replaced by the next in that order, kept as an attribute and
    // counted, so every acknowledged record has a place in the store.
    let Owned {
        severity_text,
        mut attributes,
    } = owned;
    let (time, observed) = place_in_time(line, &mut attributes);
    LogRecord {
        wal_id,
        id,
        tenant: tenant.clone(),
        time_unix_nano: time,
        observed_time_unix_nano: observed,
        severity_number: line.severity_number,
        severity_text,
        template_key: mined.template_key.0,
        template_id: mined.template_id,
        template_version: mined.template_version,
        params: record_params(&mined.params),
        body: mined.body,
        attributes,
        resource_attributes: Arc::clone(&line.resource_attributes),
        trace_id: line.trace_id,
        span_id: line.span_id,
        audit_watermark: watermark,
    }
}

/// The (time, observed time) a record is stored under, both storable, with any value replaced
/// kept in `attributes` and counted on `ourios.ingest.time_substituted{reason}`.
fn place_in_time(line: &Line, attributes: &mut Attributes) -> (u64, u64) {
    let substituted = |reason: &'static str| {
        ::metrics::counter!(metrics::TIME_SUBSTITUTED, "reason" => reason).increment(1);
    };
    let (time, observed) = (line.time_unix_nano, line.observed_time_unix_nano);
    let observed_ok = otlp::usable_time(observed);
    let placed = if otlp::usable_time(time) {
        time
    } else {
        if time != 0 {
            attributes.push(otlp::ORIGINAL_TIME_ATTRIBUTE, &time.to_string());
            substituted("time_out_of_range");
        }
        if observed_ok {
            observed
        } else {
            // Only a frame written before receive-time stamping existed gets here.
            substituted("no_usable_time");
            1
        }
    };
    let observed = if observed_ok || observed == 0 {
        observed
    } else {
        attributes.push(
            otlp::ORIGINAL_OBSERVED_TIME_ATTRIBUTE,
            &observed.to_string(),
        );
        substituted("observed_out_of_range");
        placed
    };
    (placed, observed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves a small request's frame that was submitted but not mined (its task dropped, as
    /// when the runtime shuts down mid-request) holds the tenant's frontier below it, and one
    /// that was mined or never became durable does not: without the hold a later frame's cut
    /// could stamp past a frame only the WAL has.
    /// Mutation check (tried by hand): make `HoldUnlessMined::drop` do nothing and the first
    /// assertion fails.
    #[test]
    fn an_unmined_submitted_frame_holds_the_frontier_below_it() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(ourios_wal::WalConfig::new(dir.path())).unwrap();
        let (t, u) = (TenantId::new("t").unwrap(), TenantId::new("u").unwrap());
        let dropped = wal.append(&t, b"dropped before mining").unwrap();
        drop(HoldUnlessMined {
            wal: &wal,
            tenant: &t,
            lsn: dropped,
            armed: true,
        });
        assert_eq!(wal.marks(&t).hold, Some(dropped));
        let mined = wal.append(&u, b"mined").unwrap();
        HoldUnlessMined {
            wal: &wal,
            tenant: &u,
            lsn: mined,
            armed: true,
        }
        .disarm();
        assert_eq!(wal.marks(&u).hold, None);
        // The hold does what it is for: a stamp past the frame stops below it.
        let later = wal.append(&t, b"later").unwrap();
        match wal.stamp_frontier(&t, later).unwrap() {
            ourios_wal::FrontierOutcome::Held { to, .. } => assert!(to < dropped),
            other => panic!("the frontier passed an unmined frame: {other:?}"),
        }
    }
}
