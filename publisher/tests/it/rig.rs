//! A test rig: a `FaultyStore`, the two sinks, a barrier, a coordinator, and helpers that make
//! records with known ids and read them back by id.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use ourios_barrier::Barrier;
use ourios_publisher::{PublishCoordinator, PublisherConfig};
use ourios_sinks::testing::FaultyStore;
use ourios_sinks::{
    AuditEvent, AuditKind, AuditSinkConfig, LogRecord, RecordId, RecordSinkConfig,
    SharedParquetAuditSink, SharedParquetSink, Tenant,
};

pub(crate) const HOUR: u64 = 3_600_000_000_000;
/// 2023-11-14T22:13:20Z: a fixed, valid event time.
pub(crate) const T0: u64 = 1_700_000_000_000_000_000;

pub(crate) struct Rig {
    pub(crate) store: FaultyStore,
    pub(crate) records: SharedParquetSink,
    pub(crate) audit: SharedParquetAuditSink,
    pub(crate) barrier: Arc<Barrier>,
    pub(crate) coord: PublishCoordinator,
    pub(crate) rt: tokio::runtime::Runtime,
    next_lsn: u64,
    watermarks: BTreeMap<u64, u64>,
    // Failpoints are process-wide: every test holds the scenario lock, so no test's failpoint
    // fires inside another test. Declared last: dropped after the coordinator's users.
    _fail: fail::FailScenario<'static>,
}

impl Rig {
    pub(crate) fn new() -> Self {
        Self::with_config(RecordSinkConfig {
            target_partition_bytes: 1 << 30,
            ceiling_bytes: 1 << 31,
            ..Default::default()
        })
    }

    pub(crate) fn with_config(config: RecordSinkConfig) -> Self {
        Self::with_configs(
            config,
            PublisherConfig {
                queue_bound: 4,
                ..PublisherConfig::default()
            },
        )
    }

    pub(crate) fn with_configs(config: RecordSinkConfig, publisher: PublisherConfig) -> Self {
        let fail = fail::FailScenario::setup();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store = FaultyStore::new();
        let audit = SharedParquetAuditSink::new(
            store.as_dyn(),
            AuditSinkConfig {
                zstd: false,
                ..Default::default()
            },
        );
        let barrier = Arc::new(Barrier::new());
        let records = SharedParquetSink::new(
            store.as_dyn(),
            audit.clone(),
            RecordSinkConfig {
                zstd: false,
                ..config
            },
        );
        let coord = PublishCoordinator::new(
            records.clone(),
            Arc::clone(&barrier),
            rt.handle().clone(),
            publisher,
        );
        Self {
            store,
            records,
            audit,
            barrier,
            coord,
            rt,
            next_lsn: 1,
            watermarks: BTreeMap::new(),
            _fail: fail,
        }
    }

    /// Emits one template event for `tenant` and returns its seq.
    pub(crate) fn emit_event(&self, tenant: &str, template_id: u64) -> u64 {
        self.emit_event_at(tenant, template_id, T0 as i128)
    }

    pub(crate) fn emit_event_at(&self, tenant: &str, template_id: u64, ts: i128) -> u64 {
        self.audit.emit(AuditEvent {
            tenant: Tenant::new(tenant),
            timestamp_unix_nanos: ts,
            kind: AuditKind::TemplateCreated {
                template_key: [template_id as u8; 16],
                template_id,
                version: 1,
                template: format!("t{template_id} <*>"),
            },
        })
    }

    /// Appends `n` records of `tenant` in partition `hour` (one frame), each depending on a
    /// fresh template event. Returns their ids.
    pub(crate) fn append(&mut self, tenant: &str, hour: u64, n: u32) -> Vec<RecordId> {
        let wm = self.emit_event(tenant, hour);
        let lsn = self.next_lsn;
        self.next_lsn += 1;
        self.watermarks.insert(lsn, wm);
        let mut ids = Vec::new();
        for index in 0..n {
            let r = record(tenant, lsn, index, T0 + hour * HOUR, wm);
            ids.push(r.id);
            match self.records.append(r) {
                ourios_sinks::AppendOutcome::Buffered { detached } => {
                    assert!(
                        detached.is_none(),
                        "this rig's sink is configured never to detach"
                    )
                }
                other => panic!("unexpected append outcome {other:?}"),
            }
        }
        ids
    }

    /// As [`append`](Self::append), for a sink whose triggers may fire: returns the ids and
    /// the partitions the appends detached.
    pub(crate) fn append_detaching(
        &mut self,
        tenant: &str,
        hour: u64,
        n: u32,
    ) -> (Vec<RecordId>, Vec<ourios_sinks::Partition>) {
        let wm = self.emit_event(tenant, hour);
        let lsn = self.next_lsn;
        self.next_lsn += 1;
        self.watermarks.insert(lsn, wm);
        let mut ids = Vec::new();
        let mut detached = Vec::new();
        for index in 0..n {
            let r = record(tenant, lsn, index, T0 + hour * HOUR, wm);
            ids.push(r.id);
            match self.records.append(r) {
                ourios_sinks::AppendOutcome::Buffered {
                    detached: Some(mut batch),
                } => {
                    // The test is the consumer from here on: it takes the partitions out.
                    while let Some(lease) = batch.begin_next() {
                        detached.push(batch.settle(lease, ourios_recoverable::Settlement::Dropped));
                    }
                    let _ = batch.finish();
                }
                ourios_sinks::AppendOutcome::Buffered { detached: None } => {}
                other => panic!("unexpected append outcome {other:?}"),
            }
        }
        (ids, detached)
    }

    /// `parts` owned by a batch whose target is the rig's sink, as `append` hands detached
    /// partitions over.
    pub(crate) fn owned(
        &self,
        parts: Vec<ourios_sinks::Partition>,
    ) -> ourios_recoverable::RecoverableBatch<ourios_sinks::Partition> {
        let target: Arc<dyn ourios_recoverable::RequeueTarget<ourios_sinks::Partition>> =
            Arc::new(self.records.clone());
        ourios_recoverable::RecoverableBatch::new(parts, target)
    }

    /// The audit seq the records of frame `lsn` depend on.
    pub(crate) fn watermark_of(&self, lsn: u64) -> u64 {
        self.watermarks[&lsn]
    }

    /// Every record id in the store, duplicates included.
    pub(crate) fn store_ids(&self) -> Vec<RecordId> {
        self.rt
            .block_on(ourios_sinks::read_record_ids(self.store.inner(), ""))
            .unwrap()
    }

    /// One set per object under `kind` (`records` or `audit`), of what `rows` reads from each
    /// of its batches.
    fn object_sets<T: Ord>(
        &self,
        kind: &str,
        rows: impl Fn(&arrow_array::RecordBatch) -> Vec<T>,
    ) -> Vec<BTreeSet<T>> {
        use object_store::ObjectStoreExt;
        let store = self.store.inner();
        let paths = self
            .rt
            .block_on(ourios_sinks::list_objects(store, "", kind))
            .unwrap();
        paths
            .iter()
            .map(|path| {
                let bytes = self
                    .rt
                    .block_on(async { store.get(path).await.unwrap().bytes().await.unwrap() });
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
                    .unwrap()
                    .build()
                    .unwrap()
                    .flat_map(|batch| rows(&batch.unwrap()))
                    .collect()
            })
            .collect()
    }

    /// The record ids of each record object, one set per object.
    pub(crate) fn store_objects(&self) -> Vec<BTreeSet<RecordId>> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{UInt32Type, UInt64Type};
        self.object_sets("records", |batch| {
            let column = |name| batch.column_by_name(name).unwrap();
            let lsn = column("record_lsn").as_primitive::<UInt64Type>();
            let index = column("record_index").as_primitive::<UInt32Type>();
            (0..batch.num_rows())
                .map(|i| RecordId {
                    lsn: lsn.value(i),
                    index: index.value(i),
                })
                .collect()
        })
    }

    /// Objects whose every record is also in another object: the extra copies an ambiguous
    /// put can leave (each such put duplicates one whole partition object).
    pub(crate) fn extra_objects(&self) -> usize {
        extra(&self.store_objects())
    }

    /// The audit seqs of each audit object, one set per object.
    pub(crate) fn audit_objects(&self) -> Vec<BTreeSet<u64>> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::UInt64Type;
        self.object_sets("audit", |batch| {
            let seq = batch.column_by_name("seq").unwrap();
            seq.as_primitive::<UInt64Type>().values().to_vec()
        })
    }

    /// Audit objects whose every event is also in another object (see `extra_objects`).
    pub(crate) fn extra_audit_objects(&self) -> usize {
        extra(&self.audit_objects())
    }

    /// How many times each id is in the store.
    pub(crate) fn store_counts(&self) -> BTreeMap<RecordId, usize> {
        let mut m = BTreeMap::new();
        for id in self.store_ids() {
            *m.entry(id).or_default() += 1;
        }
        m
    }

    /// Audit seqs in the store.
    pub(crate) fn store_audit_seqs(&self) -> Vec<u64> {
        self.rt
            .block_on(ourios_sinks::read_audit_events(self.store.inner(), ""))
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    pub(crate) fn buffered(&self, tenant: &str) -> BTreeSet<RecordId> {
        self.records
            .buffered_ids(&Tenant::new(tenant))
            .into_iter()
            .collect()
    }

    /// One cut's write: drains everything and writes it in order once; returns the verdict.
    pub(crate) fn write_all_once(&self) -> ourios_publisher::WriteVerdict {
        let mut drained = self.coord.drain_all();
        self.rt.block_on(self.coord.write_ordered(&mut drained))
    }

    /// Drains everything and writes it until nothing is buffered (a healthy store), as later
    /// healthy barriers would.
    pub(crate) fn publish_all(&self) {
        for _ in 0..4 {
            let mut d = self.coord.drain_all();
            let _ = self.rt.block_on(self.coord.write_ordered(&mut d));
            drop(d);
            if self.records.buffered_records() == 0 && self.audit.buffered_events() == 0 {
                return;
            }
        }
        panic!(
            "still buffered after four healthy passes: {} records, {} audit events",
            self.records.buffered_records(),
            self.audit.buffered_events()
        );
    }
}

/// Objects (as sets of ids) whose every id an earlier object already holds.
fn extra<T: Ord + Copy>(objects: &[BTreeSet<T>]) -> usize {
    let mut seen = BTreeSet::new();
    let mut extra = 0;
    for ids in objects {
        if !ids.is_empty() && ids.iter().all(|id| seen.contains(id)) {
            extra += 1;
        }
        seen.extend(ids.iter().copied());
    }
    extra
}

pub(crate) fn record(tenant: &str, lsn: u64, index: u32, time: u64, watermark: u64) -> LogRecord {
    LogRecord {
        id: RecordId { lsn, index },
        tenant: Tenant::new(tenant),
        time_unix_nano: time,
        observed_time_unix_nano: time,
        severity_number: 9,
        severity_text: "INFO".into(),
        wal_id: [0; 16],
        template_key: [1; 16],
        template_id: 1,
        template_version: 1,
        params: vec![format!("{lsn}-{index}")].into(),
        body: None,
        attributes: Default::default(),
        resource_attributes: Default::default(),
        trace_id: None,
        span_id: None,
        audit_watermark: watermark,
    }
}

/// A counter's name and labels.
type CounterKey = (String, Vec<(String, String)>);

/// A recorder the test thread installs locally to read counters. Snapshots reset the
/// recorder's counters, so this keeps running totals.
pub(crate) struct Counters {
    pub(crate) recorder: DebuggingRecorder,
    snap: Snapshotter,
    totals: std::cell::RefCell<BTreeMap<CounterKey, u64>>,
}

impl Counters {
    pub(crate) fn new() -> Self {
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        Self {
            recorder,
            snap,
            totals: Default::default(),
        }
    }

    /// Total of a counter over all its label sets, optionally filtered by one label.
    pub(crate) fn counter(&self, name: &str, label: Option<(&str, &str)>) -> u64 {
        let mut totals = self.totals.borrow_mut();
        for (k, _, _, v) in self.snap.snapshot().into_vec() {
            if let DebugValue::Counter(c) = v {
                let labels = k
                    .key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                *totals
                    .entry((k.key().name().to_owned(), labels))
                    .or_default() += c;
            }
        }
        totals
            .iter()
            .filter(|((n, labels), _)| {
                n == name
                    && label.is_none_or(|(lk, lv)| labels.iter().any(|(k, v)| k == lk && v == lv))
            })
            .map(|(_, v)| *v)
            .sum()
    }
}

/// Waits (at most 30 s, else fails with `why`) until `cond` holds: a bounded wait for what
/// another thread makes true, not a timed race.
pub(crate) fn wait_until(why: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "{why}");
        std::thread::yield_now();
    }
}

/// Runs `f` catching its panic, with the counters recorded locally.
pub(crate) fn catching<R>(counters: &Counters, f: impl FnOnce() -> R) -> std::thread::Result<R> {
    metrics::with_local_recorder(&counters.recorder, || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
    })
}
