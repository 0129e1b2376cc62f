//! Shared rig: a FaultyStore, both sinks, record builders, a metrics capture, panic catching.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

use futures::FutureExt;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use ourios_recoverable::{RecoverableBatch, lock};
use ourios_sinks::testing::FaultyStore;
use ourios_sinks::{
    AuditEvent, AuditGroup, AuditKind, AuditSinkConfig, LogRecord, Partition, RecordId,
    RecordSinkConfig, SharedParquetAuditSink, SharedParquetSink, Tenant,
};

/// One hour in nanoseconds.
pub(crate) const HOUR: u64 = 3_600_000_000_000;
/// 2023-11-14T22:13:20Z.
pub(crate) const T0: u64 = 1_700_000_000_000_000_000;

/// Failpoints are process-global: tests that configure one take this for writing, every other
/// test that reaches a failpoint (through `Rig::new`) holds it for reading.
pub(crate) static FAILPOINTS: RwLock<()> = RwLock::new(());

/// The partitions an append detached, taken out of the batch that owns them: the test is the
/// consumer from here on (as a publisher is once each partition is settled).
pub(crate) fn detached_parts(outcome: ourios_sinks::AppendOutcome) -> Vec<ourios_sinks::Partition> {
    match outcome {
        ourios_sinks::AppendOutcome::Buffered {
            detached: Some(mut batch),
        } => {
            let mut parts = Vec::new();
            while let Some(lease) = batch.begin_next() {
                parts.push(batch.settle(lease, ourios_recoverable::Settlement::Dropped));
            }
            let _ = batch.finish();
            parts
        }
        ourios_sinks::AppendOutcome::Buffered { detached: None } => Vec::new(),
        other => panic!("not buffered: {other:?}"),
    }
}

pub(crate) fn rec(tenant: &str, lsn: u64, index: u32, time: u64, watermark: u64) -> LogRecord {
    LogRecord {
        id: RecordId { lsn, index },
        tenant: Tenant::new(tenant),
        time_unix_nano: time,
        observed_time_unix_nano: T0 + 1,
        severity_number: 9,
        severity_text: "INFO".into(),
        wal_id: [0; 16],
        template_key: [7; 16],
        template_id: 7,
        template_version: 1,
        params: vec![format!("p{lsn}-{index}")].into(),
        body: None,
        attributes: Default::default(),
        resource_attributes: Default::default(),
        trace_id: None,
        span_id: None,
        audit_watermark: watermark,
    }
}

pub(crate) fn created(tenant: &str, nanos: i128, id: u64) -> AuditEvent {
    AuditEvent {
        tenant: Tenant::new(tenant),
        timestamp_unix_nanos: nanos,
        kind: AuditKind::TemplateCreated {
            template_key: [id as u8; 16],
            template_id: id,
            version: 1,
            template: format!("template <*> {id}"),
        },
    }
}

pub(crate) struct Rig {
    pub(crate) store: FaultyStore,
    pub(crate) audit: SharedParquetAuditSink,
    pub(crate) sink: SharedParquetSink,
    _failpoints: Option<RwLockReadGuard<'static, ()>>,
}

impl Rig {
    /// A rig whose triggers never fire on their own.
    pub(crate) fn new() -> Self {
        Self::with(RecordSinkConfig {
            target_partition_bytes: usize::MAX,
            ceiling_bytes: usize::MAX,
            zstd: true,
            prefix: String::new(),
        })
    }

    pub(crate) fn with(config: RecordSinkConfig) -> Self {
        let guard = FAILPOINTS.read().unwrap_or_else(PoisonError::into_inner);
        let mut rig = Self::unguarded(config);
        rig._failpoints = Some(guard);
        rig
    }

    /// A rig whose sink seals every unit through `sealer` (RFC 0058); triggers never fire.
    pub(crate) fn sealed(sealer: Arc<ourios_sinks::testing::MemorySealer>) -> Self {
        let mut rig = Self::new();
        rig.sink = rig.sink.with_sealer(sealer);
        rig
    }

    /// For tests that already hold `FAILPOINTS` for writing.
    pub(crate) fn unguarded(config: RecordSinkConfig) -> Self {
        let store = FaultyStore::new();
        let audit = SharedParquetAuditSink::new(store.as_dyn(), AuditSinkConfig::default());
        let sink = SharedParquetSink::new(store.as_dyn(), audit.clone(), config);
        Self {
            store,
            audit,
            sink,
            _failpoints: None,
        }
    }

    pub(crate) fn record_batch(&self, parts: Vec<Partition>) -> RecoverableBatch<Partition> {
        RecoverableBatch::new(parts, Arc::new(self.sink.clone()))
    }

    pub(crate) fn audit_batch(&self, groups: Vec<AuditGroup>) -> RecoverableBatch<AuditGroup> {
        RecoverableBatch::new(groups, Arc::new(self.audit.clone()))
    }

    /// Record ids in the store, with how many rows carry each.
    pub(crate) async fn stored(&self) -> BTreeMap<RecordId, usize> {
        let ids = ourios_sinks::read_record_ids(&self.store, "")
            .await
            .unwrap();
        count(ids)
    }

    /// Audit sequence numbers in the store, with how many rows carry each.
    pub(crate) async fn stored_seqs(&self) -> BTreeMap<u64, usize> {
        let events = ourios_sinks::read_audit_events(&self.store, "")
            .await
            .unwrap();
        count(events.into_iter().map(|(s, _)| s))
    }

    pub(crate) fn all_buffered_ids(&self) -> Vec<RecordId> {
        let mut tenants: Vec<Tenant> = self
            .sink
            .buffered_keys()
            .into_iter()
            .map(|k| k.tenant)
            .collect();
        tenants.dedup();
        tenants
            .iter()
            .flat_map(|t| self.sink.buffered_ids(t))
            .collect()
    }
}

pub(crate) fn count<T: Ord>(items: impl IntoIterator<Item = T>) -> BTreeMap<T, usize> {
    let mut m = BTreeMap::new();
    for i in items {
        *m.entry(i).or_insert(0) += 1;
    }
    m
}

pub(crate) fn ids_of(parts: &[Partition]) -> Vec<RecordId> {
    parts.iter().flat_map(Partition::ids).collect()
}

pub(crate) fn sorted(mut ids: Vec<RecordId>) -> Vec<RecordId> {
    ids.sort();
    ids
}

/// Drive `fut` to completion on a fresh current-thread runtime.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(fut)
}

/// Run `fut`, turning a panic inside it into `Err`.
pub(crate) async fn catch<F: Future>(fut: F) -> Result<F::Output, ()> {
    AssertUnwindSafe(fut).catch_unwind().await.map_err(|_| ())
}

/// Counters and gauges captured by a thread-local recorder, keyed `name{label=value,...}`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Captured {
    values: Arc<Mutex<BTreeMap<String, f64>>>,
}

impl Captured {
    /// The value of `name` with exactly these labels (0 if never touched).
    pub(crate) fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.sort();
        let key = format!("{name}{{{}}}", labels.join(","));
        self.values
            .lock()
            .unwrap()
            .get(&key)
            .copied()
            .unwrap_or(0.0)
    }
}

#[derive(Debug)]
struct Cell {
    key: String,
    values: Arc<Mutex<BTreeMap<String, f64>>>,
}

impl Cell {
    fn update(&self, f: impl FnOnce(f64) -> f64) {
        let mut v = lock(&self.values);
        let e = v.entry(self.key.clone()).or_insert(0.0);
        *e = f(*e);
    }
}

impl metrics::CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.update(|v| v + value as f64);
    }
    fn absolute(&self, value: u64) {
        self.update(|_| value as f64);
    }
}

impl metrics::GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
    }
    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
    }
    fn set(&self, value: f64) {
        self.update(|_| value);
    }
}

impl Captured {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        Arc::new(Cell {
            key: format!("{}{{{}}}", key.name(), labels.join(",")),
            values: Arc::clone(&self.values),
        })
    }
}

impl Recorder for Captured {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Run `fut` on a current-thread runtime with a thread-local recorder; return its output and
/// what it recorded.
pub(crate) fn block_on_metered<F: Future>(fut: F) -> (F::Output, Captured) {
    let captured = Captured::default();
    let out = metrics::with_local_recorder(&captured, || block_on(fut));
    (out, captured)
}

/// Silence the panic messages of injected faults (they are expected); other panics still print.
pub(crate) fn quiet_injected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !msg.starts_with("injected") {
                default(info);
            }
        }));
    });
}
