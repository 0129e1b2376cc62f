//! The audit sink: an ordered, sequence-numbered buffer of audit events, written per
//! (tenant, UTC day) group with a three-way per-tenant outcome (RFC 0056).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use object_store::ObjectStore;
use ourios_recoverable::{RecoverableBatch, RequeueCause, RequeueTarget, Settlement};

use crate::encode::encode_audit;
use crate::metrics;
use crate::store::{ErrorClass, object_path, unique_name};
use crate::sync::{Arc, Mutex, lock};
use crate::terminal::TerminalSet;
use crate::types::{Day, DeriveError, RecordId, Tenant, check_nanos};

const NANOS_PER_DAY: u64 = 86_400 * 1_000_000_000;

/// One audit event, as the miner (or the record sink's quarantine) emits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// The tenant the event belongs to.
    pub tenant: Tenant,
    /// When it was emitted, nanoseconds since the Unix epoch, from the emitter's clock (may be
    /// out of range when that clock is wrong: the event then cannot be partitioned).
    pub timestamp_unix_nanos: i128,
    /// What happened.
    pub kind: AuditKind,
}

/// What an audit event records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditKind {
    /// A new template.
    TemplateCreated {
        /// The key of its text.
        template_key: [u8; 16],
        /// Its id.
        template_id: u64,
        /// Its first version.
        version: u32,
        /// Its text.
        template: String,
    },
    /// A template widened (its text generalised).
    TemplateWidened {
        /// The key of the text after.
        template_key: [u8; 16],
        /// Its id.
        template_id: u64,
        /// The version before.
        old_version: u32,
        /// The version after.
        new_version: u32,
        /// The text before.
        old_template: String,
        /// The text after.
        new_template: String,
    },
    /// The definition of a key whose template existed before this process emitted anything for
    /// it (restored, regenerated): repeated byte for byte when the store has it already.
    TemplateDefined {
        /// The key.
        template_key: [u8; 16],
        /// The template's id in the miner that emitted it (lineage).
        template_id: u64,
        /// Its version in that miner (lineage).
        version: u32,
        /// The text the key names.
        template: String,
    },
    /// A record the sink can never encode (RFC 0025 §3.3): the operator's pointer to it (the
    /// record itself stays in the WAL).
    RecordQuarantined {
        /// The record's stable id.
        record_id: RecordId,
        /// Its partition key, or the reason none derives.
        partition_key: String,
        /// Why it was rejected.
        error: String,
    },
}

impl AuditKind {
    /// The template key this event defines and its text (`None` for a quarantine).
    pub fn definition(&self) -> Option<([u8; 16], &str)> {
        match self {
            Self::TemplateCreated {
                template_key,
                template,
                ..
            }
            | Self::TemplateDefined {
                template_key,
                template,
                ..
            } => Some((*template_key, template)),
            Self::TemplateWidened {
                template_key,
                new_template,
                ..
            } => Some((*template_key, new_template)),
            Self::RecordQuarantined { .. } => None,
        }
    }

    /// The `kind` column value: `template_created`, `template_widened`, `template_defined`,
    /// `record_quarantined`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::TemplateCreated { .. } => "template_created",
            Self::TemplateWidened { .. } => "template_widened",
            Self::TemplateDefined { .. } => "template_defined",
            Self::RecordQuarantined { .. } => "record_quarantined",
        }
    }
}

/// The audit partition of an event: its tenant and the UTC day of its timestamp. Fails on a
/// pre-epoch timestamp or one past `i64::MAX` ns (no partition key exists to write under).
pub fn derive_audit_partition(event: &AuditEvent) -> Result<(Tenant, Day), DeriveError> {
    let nanos = check_nanos(&event.tenant, event.timestamp_unix_nanos)?;
    let days = i64::try_from(nanos / NANOS_PER_DAY).unwrap_or(i64::MAX);
    Ok((event.tenant.clone(), Day::from_days_since_epoch(days)))
}

/// The item of the audit `RecoverableBatch`: the events of one tenant and one UTC day (or of one
/// tenant whose events do not derive a day), each with its sequence number.
#[derive(Debug, Clone)]
pub struct AuditGroup {
    /// The tenant.
    pub tenant: Tenant,
    /// The day the group is written under, or why none derives (permanent for the tenant).
    pub day: Result<Day, DeriveError>,
    /// `(seq, event)`, ascending seq.
    pub events: Vec<(u64, AuditEvent)>,
}

impl AuditGroup {
    /// The sequence numbers of its events.
    pub fn seqs(&self) -> Vec<u64> {
        self.events.iter().map(|(s, _)| *s).collect()
    }
}

/// Audit sink configuration.
#[derive(Debug, Clone)]
pub struct AuditSinkConfig {
    /// ZSTD-compress the Parquet pages (else uncompressed).
    pub zstd: bool,
    /// Key prefix in the store (may be empty); objects go under `<prefix>/audit/...`.
    pub prefix: String,
    /// The first sequence number handed out is `seq_base + 1`. A node reserves a range per
    /// process, so a restarted node never reuses a number an earlier process wrote.
    pub seq_base: u64,
}

impl Default for AuditSinkConfig {
    fn default() -> Self {
        Self {
            zstd: true,
            prefix: String::new(),
            seq_base: 0,
        }
    }
}

/// The per-tenant result of a `write_owned` (RFC 0056 §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantAudit {
    /// Every group of the tenant in the batch was written.
    Durable,
    /// At least one group failed transiently and was requeued ahead (retry later); none failed
    /// permanently.
    Retained,
    /// A group failed permanently (store error or derive failure): its events are gone from the
    /// buffer and stay not-durable; the tenant's dependent records must not publish.
    PermanentlyFailed {
        /// The first failure, for the operator.
        reason: String,
    },
}

impl TenantAudit {
    fn rank(&self) -> u8 {
        match self {
            Self::Durable => 0,
            Self::Retained => 1,
            Self::PermanentlyFailed { .. } => 2,
        }
    }
}

/// What `write_owned` did, per tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditOutcome {
    /// The outcome of each tenant that had a group in the batch.
    pub tenants: BTreeMap<Tenant, TenantAudit>,
}

impl AuditOutcome {
    fn record(&mut self, tenant: Tenant, outcome: TenantAudit) {
        match self.tenants.get(&tenant) {
            Some(prev) if prev.rank() >= outcome.rank() => {}
            _ => {
                self.tenants.insert(tenant, outcome);
            }
        }
    }

    /// The outcome for `tenant`, if it had a group in the batch.
    pub fn get(&self, tenant: &Tenant) -> Option<&TenantAudit> {
        self.tenants.get(tenant)
    }

    /// Tenants whose groups were all written.
    pub fn durable(&self) -> Vec<Tenant> {
        self.with(|o| matches!(o, TenantAudit::Durable))
    }

    /// Tenants with a group requeued for retry.
    pub fn retained(&self) -> Vec<Tenant> {
        self.with(|o| matches!(o, TenantAudit::Retained))
    }

    /// Tenants with a permanent failure (the failed-tenant set).
    pub fn permanently_failed(&self) -> Vec<Tenant> {
        self.with(|o| matches!(o, TenantAudit::PermanentlyFailed { .. }))
    }

    /// True when every tenant in the batch is durable (and for an empty batch).
    pub fn all_durable(&self) -> bool {
        self.tenants.values().all(|o| *o == TenantAudit::Durable)
    }

    fn with(&self, pred: impl Fn(&TenantAudit) -> bool) -> Vec<Tenant> {
        self.tenants
            .iter()
            .filter(|(_, o)| pred(o))
            .map(|(t, _)| t.clone())
            .collect()
    }
}

#[derive(Debug, Default)]
struct AuditState {
    /// The last sequence number handed out (0 = none yet).
    last_seq: u64,
    /// Buffered events, oldest first (requeued events go back to the front).
    buffer: VecDeque<(u64, AuditEvent)>,
    /// Per tenant, every seq whose put has not returned Ok: buffered, taken (in a `Drained` or a
    /// `RecoverableBatch`), retained, or permanently failed. Drives `is_durable_through`.
    outstanding: HashMap<Tenant, BTreeSet<u64>>,
    outstanding_total: usize,
    /// Tenants whose audit write failed permanently, with the first reason.
    failed: BTreeMap<Tenant, String>,
}

impl AuditState {
    fn gauges(&self) {
        ::metrics::gauge!(metrics::AUDIT_BUFFERED_EVENTS).set(self.buffer.len() as f64);
        ::metrics::gauge!(metrics::AUDIT_OUTSTANDING_EVENTS).set(self.outstanding_total as f64);
    }
}

#[derive(Debug)]
struct AuditInner {
    store: Arc<dyn ObjectStore>,
    config: AuditSinkConfig,
    terminal: TerminalSet,
    state: Mutex<AuditState>,
}

/// The audit sink, shared (`Clone` is a handle to the same buffer).
///
/// Lock order: the record sink may call into this sink while holding its own lock; this sink
/// never calls the record sink. The terminal set is a leaf lock.
#[derive(Debug, Clone)]
pub struct SharedParquetAuditSink {
    inner: Arc<AuditInner>,
}

impl SharedParquetAuditSink {
    /// A sink writing to `store` under `config.prefix`.
    pub fn new(store: Arc<dyn ObjectStore>, config: AuditSinkConfig) -> Self {
        let last_seq = config.seq_base;
        Self {
            inner: Arc::new(AuditInner {
                store,
                config,
                terminal: TerminalSet::default(),
                state: Mutex::new(AuditState {
                    last_seq,
                    ..AuditState::default()
                }),
            }),
        }
    }

    pub(crate) fn terminal(&self) -> &TerminalSet {
        &self.inner.terminal
    }

    /// Buffer `event`; returns its sequence number (global, monotonic, starting at
    /// `seq_base + 1`).
    pub fn emit(&self, event: AuditEvent) -> u64 {
        let mut st = lock(&self.inner.state);
        st.last_seq += 1;
        let seq = st.last_seq;
        st.outstanding
            .entry(event.tenant.clone())
            .or_default()
            .insert(seq);
        st.outstanding_total += 1;
        st.buffer.push_back((seq, event));
        st.gauges();
        seq
    }

    /// The last sequence number handed out (0 = none): a record mined now carries it as its
    /// `audit_watermark` when its tenant's newest event is that one.
    pub fn last_seq(&self) -> u64 {
        lock(&self.inner.state).last_seq
    }

    /// Take everything buffered for non-terminal tenants, grouped by (tenant, UTC day), groups
    /// in order of their oldest event. Events of terminal tenants stay buffered.
    ///
    /// The caller moves the result into its `Drained` on return (`Drained::put_audit`); the
    /// events stay outstanding for `is_durable_through` until their put returns Ok.
    pub fn take_groups(&self) -> Vec<AuditGroup> {
        fail::fail_point!("sinks::audit::take");
        let mut st = lock(&self.inner.state);
        let mut taken: Vec<(u64, AuditEvent)> = Vec::new();
        let mut kept: VecDeque<(u64, AuditEvent)> = VecDeque::new();
        for (seq, event) in st.buffer.drain(..) {
            if self.inner.terminal.contains(&event.tenant) {
                kept.push_back((seq, event));
            } else {
                taken.push((seq, event));
            }
        }
        st.buffer = kept;
        st.gauges();
        drop(st);
        // From here until the caller moves the groups into its `Drained`, the events exist
        // only on this stack: a guard puts them back if anything unwinds.
        let mut guard = Taken {
            sink: self,
            events: Some(taken),
        };
        // Test hook (compiled out unless `failpoints`): a panic with the buffer emptied.
        fail::fail_point!("sinks::audit::taken");
        // Grouping cannot panic (pure arithmetic and map inserts; allocation failure aborts).
        group_events(guard.events.take().unwrap_or_default())
    }

    /// Put `groups` back ahead of anything emitted since they were taken, restoring the buffered
    /// gauge. The buffer stays in sequence order: requeued events (older, smaller seqs) merge in
    /// ahead of every concurrent emit and beside other requeued or set-aside events. Never panics
    /// (a `Drop` path calls it).
    pub fn requeue_ahead(&self, groups: Vec<AuditGroup>) {
        self.requeue_events(groups.into_iter().flat_map(|g| g.events).collect());
    }

    /// As [`SharedParquetAuditSink::requeue_ahead`], for events not grouped yet.
    fn requeue_events(&self, mut events: Vec<(u64, AuditEvent)>) {
        events.sort_by_key(|(seq, _)| *seq);
        let mut st = lock(&self.inner.state);
        let buffered = std::mem::take(&mut st.buffer);
        let mut merged = VecDeque::with_capacity(buffered.len() + events.len());
        let mut requeued = events.into_iter().peekable();
        for (seq, event) in buffered {
            while let Some((s, _)) = requeued.peek() {
                if *s > seq {
                    break;
                }
                if let Some(e) = requeued.next() {
                    merged.push_back(e);
                }
            }
            merged.push_back((seq, event));
        }
        merged.extend(requeued);
        st.buffer = merged;
        st.gauges();
    }

    /// True when every event of `tenant` with a sequence number `<= watermark` has been written
    /// (its put returned Ok). False while any such event is buffered, taken into a `Drained` or a
    /// `RecoverableBatch`, retained for retry, or permanently failed. `watermark == 0` (no
    /// dependency) is always true.
    pub fn is_durable_through(&self, tenant: &Tenant, watermark: u64) -> bool {
        if watermark == 0 {
            return true;
        }
        let st = lock(&self.inner.state);
        st.outstanding
            .get(tenant)
            .and_then(|s| s.first())
            .is_none_or(|oldest| *oldest > watermark)
    }

    /// Events buffered (not taken), all tenants.
    pub fn buffered_events(&self) -> usize {
        lock(&self.inner.state).buffer.len()
    }

    /// Sequence numbers of `tenant`'s buffered events, in buffer order.
    pub fn buffered_seqs(&self, tenant: &Tenant) -> Vec<u64> {
        lock(&self.inner.state)
            .buffer
            .iter()
            .filter(|(_, e)| &e.tenant == tenant)
            .map(|(s, _)| *s)
            .collect()
    }

    /// Sequence numbers of `tenant`'s events that are not yet durable.
    pub fn outstanding_seqs(&self, tenant: &Tenant) -> Vec<u64> {
        lock(&self.inner.state)
            .outstanding
            .get(tenant)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Tenants whose audit write failed permanently in this process, with the first reason.
    pub fn failed_tenants(&self) -> BTreeMap<Tenant, String> {
        lock(&self.inner.state).failed.clone()
    }

    /// Whether `tenant` is terminal (set aside; see `SharedParquetSink::set_aside`).
    pub fn is_terminal(&self, tenant: &Tenant) -> bool {
        self.inner.terminal.contains(tenant)
    }

    fn mark_durable(&self, tenant: &Tenant, seqs: &[u64]) {
        let mut st = lock(&self.inner.state);
        let mut removed = 0;
        if let Some(set) = st.outstanding.get_mut(tenant) {
            for s in seqs {
                removed += usize::from(set.remove(s));
            }
            if set.is_empty() {
                st.outstanding.remove(tenant);
            }
        }
        st.outstanding_total -= removed;
        st.gauges();
    }

    fn mark_failed(&self, tenant: &Tenant, reason: &str) {
        lock(&self.inner.state)
            .failed
            .entry(tenant.clone())
            .or_insert_with(|| reason.to_owned());
    }

    /// Write every pending group of `batch`, one put per group, and report per tenant.
    ///
    /// Per group: begin (InFlight); a derive failure or an encoding failure is permanent; Ok
    /// settles it `Durable` and its events stop being outstanding; a transient error requeues it
    /// ahead at once (before the next put starts); a permanent error settles it `Dropped`
    /// (ownership-settled) while its events stay outstanding forever, so `is_durable_through`
    /// never reports them durable and no dependent record publishes under them. A panic inside
    /// (a put, the encoder) leaves the in-flight and pending groups in `batch`, whose `Drop`
    /// requeues them ahead.
    pub async fn write_owned(&self, batch: &mut RecoverableBatch<AuditGroup>) -> AuditOutcome {
        let mut out = AuditOutcome::default();
        while let Some(lease) = batch.begin_next() {
            let group = batch.item(&lease);
            let tenant = group.tenant.clone();
            let day = match &group.day {
                Ok(day) => *day,
                Err(e) => {
                    let reason = e.to_string();
                    ::metrics::counter!(metrics::FLUSH_ERRORS, "error.type" => e.error_type(), "consumer" => "audit")
                        .increment(1);
                    self.mark_failed(&tenant, &reason);
                    let _ = batch.settle(lease, Settlement::Dropped);
                    out.record(tenant, TenantAudit::PermanentlyFailed { reason });
                    continue;
                }
            };
            let first_seq = group.events.first().map_or(0, |(s, _)| *s);
            let encoded = encode_audit(&group.events, self.inner.config.zstd);
            let bytes = match encoded {
                Ok(b) => b,
                Err(e) => {
                    let reason = format!("audit encode failed for tenant {tenant}: {e}");
                    ::metrics::counter!(metrics::FLUSH_ERRORS, "error.type" => e.error_type(), "consumer" => "audit")
                        .increment(1);
                    self.mark_failed(&tenant, &reason);
                    let _ = batch.settle(lease, Settlement::Dropped);
                    out.record(tenant, TenantAudit::PermanentlyFailed { reason });
                    continue;
                }
            };
            let tenant_part = format!("tenant={tenant}");
            let day_part = format!("date={day}");
            let name = unique_name(first_seq);
            let path = object_path(
                &self.inner.config.prefix,
                [
                    "audit",
                    tenant_part.as_str(),
                    day_part.as_str(),
                    name.as_str(),
                ],
            );
            // A panic here is a panic inside the audit write with this group InFlight.
            fail::fail_point!("sinks::audit::before_put");
            match crate::store::put(self.inner.store.as_ref(), &path, bytes, false, "audit").await {
                Ok(_) => {
                    let group = batch.settle(lease, Settlement::Durable);
                    self.mark_durable(&tenant, &group.seqs());
                    out.record(tenant, TenantAudit::Durable);
                }
                Err((class, e)) => match class {
                    ErrorClass::Transient => {
                        batch.requeue(lease);
                        out.record(tenant, TenantAudit::Retained);
                    }
                    ErrorClass::Permanent => {
                        let reason = format!("audit put {path} failed permanently: {e}");
                        self.mark_failed(&tenant, &reason);
                        let _ = batch.settle(lease, Settlement::Dropped);
                        out.record(tenant, TenantAudit::PermanentlyFailed { reason });
                    }
                },
            }
        }
        out
    }
}

impl RequeueTarget<AuditGroup> for SharedParquetAuditSink {
    fn requeue(&self, items: Vec<AuditGroup>, cause: RequeueCause) {
        metrics::count_requeue("audit", items.len(), cause);
        self.requeue_ahead(items);
    }
}

/// Group `(seq, event)` pairs by (tenant, UTC day); a tenant's events that derive no day form one
/// group carrying the first derive error. Groups are ordered by their oldest seq.
/// Events `take_groups` removed from the buffer and has not handed over yet: put back ahead
/// on drop (an unwind), unless taken out first.
struct Taken<'a> {
    sink: &'a SharedParquetAuditSink,
    events: Option<Vec<(u64, AuditEvent)>>,
}

impl Drop for Taken<'_> {
    /// Never panics: `requeue_events` recovers a poisoned lock.
    fn drop(&mut self) {
        if let Some(events) = self.events.take() {
            self.sink.requeue_events(events);
        }
    }
}

fn group_events(events: Vec<(u64, AuditEvent)>) -> Vec<AuditGroup> {
    let mut groups: BTreeMap<(Tenant, Option<Day>), AuditGroup> = BTreeMap::new();
    for (seq, event) in events {
        let derived = derive_audit_partition(&event).map(|(_, day)| day);
        let key = (event.tenant.clone(), derived.as_ref().ok().copied());
        groups
            .entry(key)
            .or_insert_with(|| AuditGroup {
                tenant: event.tenant.clone(),
                day: derived,
                events: Vec::new(),
            })
            .events
            .push((seq, event));
    }
    let mut out: Vec<AuditGroup> = groups.into_values().collect();
    for g in &mut out {
        g.events.sort_by_key(|(s, _)| *s);
    }
    out.sort_by_key(|g| g.events.first().map_or(0, |(s, _)| *s));
    out
}
